"""Binding the daemon's sockets (docs/protocol.md, "Transport"); where: :class:`~idcontrol.settings.Endpoints`."""

from __future__ import annotations

import re

import zmq

from idcontrol.errors import ConfigError
from idcontrol.protocol import allow_ipv6


def bind(socket: zmq.Socket, endpoint: str, name: str) -> None:
    """Bind ``socket`` for channel ``name``; ConfigError naming the endpoint when it cannot be bound."""
    allow_ipv6(socket, endpoint)
    try:
        socket.bind(endpoint)
    except zmq.ZMQError as e:
        hint = " (port in use: another daemon running?)" if e.errno == zmq.EADDRINUSE else ""
        raise ConfigError(f"cannot bind the {name} endpoint {endpoint}: {e}{hint}") from None


#: The daemon's start-up log line once its sockets are bound, naming the endpoints it bound (the ports themselves
#: where the launch file says ":*"): :func:`ready_line` writes it, :func:`bound_in` reads it back.
_READY = re.compile(r"daemon ready: .*control (tcp://\S+|ipc://\S+), admin (tcp://\S+|ipc://\S+),")


def ready_line(robot: str, formulation: str, bound: dict[str, str]) -> str:
    """The start-up line for ``bound`` (channel -> endpoint; telemetry and reference may be absent)."""
    return (f"daemon ready: robot {robot}, formulation {formulation}, control {bound['control']}, admin "
            f"{bound['admin']}, telemetry {bound.get('telemetry', 'none')}"
            + (f", reference {bound['reference']}" if "reference" in bound else ""))  # fmt: skip


def bound_in(output: str) -> tuple[str, str] | None:
    """(control, admin) endpoints from a daemon's output holding its :func:`ready_line`, or None before it."""
    found = _READY.search(output)
    return (found.group(1), found.group(2)) if found else None
