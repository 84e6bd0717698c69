"""Tick logs: the daemon's recorder, the writer process, the MCAP layout and the reader."""
