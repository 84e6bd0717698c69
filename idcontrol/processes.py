"""Ending the child processes the launcher and the tools start (daemon, bridge, driver, live view)."""

from __future__ import annotations

import os
import signal
import subprocess


def terminate(proc: subprocess.Popen | None, timeout: float = 10.0, *, group: bool = False) -> bool:
    """SIGTERM ``proc`` (with ``group``, its whole process group: a driver and what it started) and wait up to
    ``timeout`` s for it to exit, then SIGKILL it. True when it exited by itself (or had already); False when it had
    to be killed. A process at idle CPU priority (the live view) next to a spinning daemon and bridge may get no CPU
    time to handle its SIGTERM for longer than any timeout."""
    if proc is None or proc.poll() is not None:
        return True
    try:
        if group:
            os.killpg(proc.pid, signal.SIGTERM)
        else:
            proc.send_signal(signal.SIGTERM)
        proc.wait(timeout=timeout)
        return True
    except (subprocess.TimeoutExpired, ProcessLookupError):
        proc.kill()
        proc.wait()
        return False
