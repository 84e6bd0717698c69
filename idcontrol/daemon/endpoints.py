"""Binding the daemon's sockets (docs/protocol.md, "Transport"); where: :class:`~idcontrol.settings.Endpoints`."""

from __future__ import annotations

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
