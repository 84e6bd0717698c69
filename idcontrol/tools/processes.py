"""Ending the child processes the tools start (daemon, bridge, live view): :func:`idcontrol.processes.terminate`,
which the launcher below the tools uses too."""

from idcontrol.processes import terminate

__all__ = ["terminate"]
