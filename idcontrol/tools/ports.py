"""Loopback TCP ports for processes started later (a daemon, a bridge, a live view) by the tools and the tests."""

from __future__ import annotations

import contextlib
import random
import socket
from pathlib import Path

#: the ports :func:`free_ports` draws from, below the ephemeral range
_PICK_RANGE = (20000, 32767)


def free_ports(n: int) -> list[int]:
    """n distinct loopback TCP ports free now, for a daemon started later, drawn at random below the system's
    ephemeral range. A port the system picks (binding port 0) lies in that range, from which every outgoing
    connection also takes its local port: any client's connect() could take it before the daemon, seconds later,
    binds it. Below the range, only another process drawing the same number can."""
    low, high = _PICK_RANGE[0], min(_PICK_RANGE[1], _ephemeral_low() - 1)
    if high - low < 100 * n:  # an ephemeral range reaching this low: the system's own picks
        with contextlib.ExitStack() as stack:
            sockets = [stack.enter_context(socket.socket()) for _ in range(n)]
            for s in sockets:
                s.bind(("127.0.0.1", 0))
            return [s.getsockname()[1] for s in sockets]
    rng = random.SystemRandom()
    ports: list[int] = []
    while len(ports) < n:
        port = rng.randint(low, high)
        if port in ports:
            continue
        with socket.socket() as s:
            try:
                s.bind(("127.0.0.1", port))
            except OSError:
                continue
        ports.append(port)
    return ports


def _ephemeral_low() -> int:
    """The lowest port of the system's ephemeral range (Linux; 32768, its default, elsewhere)."""
    try:
        return int(Path("/proc/sys/net/ipv4/ip_local_port_range").read_text().split()[0])
    except (OSError, ValueError, IndexError):
        return 32768
