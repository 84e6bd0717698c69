"""Reproductions of published experiments with idcontrol (``idcontrol experiment ...``)."""
