"""Ending the child processes the tools start (daemon, bridge, live view)."""

from __future__ import annotations

import signal
import subprocess


def terminate(proc: subprocess.Popen | None, timeout: float = 10.0) -> bool:
    """SIGTERM ``proc`` and wait up to ``timeout`` s for it to exit, then SIGKILL it. True when it exited by itself
    (or had already); False when it had to be killed. A process at idle CPU priority (the live view) next to a
    spinning daemon and bridge may get no CPU time to handle its SIGTERM for longer than any timeout."""
    if proc is None or proc.poll() is not None:
        return True
    proc.send_signal(signal.SIGTERM)
    try:
        proc.wait(timeout=timeout)
        return True
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()
        return False
