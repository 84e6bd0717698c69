"""Binding the daemon's sockets (docs/protocol.md, "Transport"); where: :class:`~idcontrol.settings.Endpoints`."""

from __future__ import annotations

import os
import re
import socket as socket_module

import zmq

from idcontrol.errors import ConfigError
from idcontrol.protocol import allow_ipv6


def refuse_live_ipc(endpoint: str, name: str) -> None:
    """ConfigError when ``endpoint`` is an ``ipc://`` path where a process accepts connections: ZeroMQ would
    replace that socket file with its own, and a second daemon would take the running one's clients. A file
    nobody listens on (a daemon that died) is left for ZeroMQ to replace."""
    if not endpoint.startswith("ipc://"):
        return
    path = endpoint[len("ipc://") :]
    if path.startswith("@") or not os.path.exists(path):  # an abstract socket: the kernel refuses a second bind
        return
    with socket_module.socket(socket_module.AF_UNIX, socket_module.SOCK_STREAM) as probe:
        probe.settimeout(1.0)
        try:
            probe.connect(path)
        except OSError:
            return  # refused (no listener) or not a socket: nobody is served there
    raise ConfigError(
        f"cannot bind the {name} endpoint {endpoint}: a running process (another daemon?) serves "
        "it; stop that one first, or name other endpoints in the launch file's [endpoints]"
    )


def bind(socket: zmq.Socket, endpoint: str, name: str) -> None:
    """Bind ``socket`` for channel ``name``; ConfigError naming the endpoint when it cannot be bound, or when
    another process serves its ``ipc://`` path."""
    refuse_live_ipc(endpoint, name)
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
    return (
        f"daemon ready: robot {robot}, formulation {formulation}, control {bound['control']}, admin "
        f"{bound['admin']}, telemetry {bound.get('telemetry', 'none')}"
        + (f", reference {bound['reference']}" if "reference" in bound else "")
    )


def bound_in(output: str) -> tuple[str, str] | None:
    """(control, admin) endpoints from a daemon's output holding its :func:`ready_line`, or None before it."""
    found = _READY.search(output)
    return (found.group(1), found.group(2)) if found else None
