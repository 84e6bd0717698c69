"""The control-loop daemon: a pure control core (:mod:`.core`) wrapped in ZeroMQ I/O (:mod:`.server`)."""
