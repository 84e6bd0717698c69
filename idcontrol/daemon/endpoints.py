"""Where the daemon's sockets bind (docs/protocol.md, "Transport")."""

from __future__ import annotations

from dataclasses import dataclass

import zmq

from idcontrol.errors import ConfigError

LOOPBACK_HOSTS = ("127.0.0.1", "localhost", "::1", "[::1]")


@dataclass(frozen=True)
class Endpoints:
    """ZeroMQ endpoints the daemon binds (loopback TCP or ipc://)."""

    control: str = "tcp://127.0.0.1:5555"
    admin: str = "tcp://127.0.0.1:5556"
    telemetry: str | None = "tcp://127.0.0.1:5557"
    reference: str | None = None

    def items(self) -> list[tuple[str, str]]:
        """(channel, endpoint) of every configured channel."""
        pairs = (("control", self.control), ("admin", self.admin), ("telemetry", self.telemetry),
                 ("reference", self.reference))  # fmt: skip
        return [(name, endpoint) for name, endpoint in pairs if endpoint]

    def check(self, curve: bool = False) -> None:
        """Refuse malformed endpoints, and endpoints beyond loopback unless ``curve`` (CURVE keys configured)."""
        for name, endpoint in self.items():
            scheme, _, rest = endpoint.partition("://")
            if scheme in ("ipc", "inproc") and rest:
                continue
            host, _, port = rest.rpartition(":")
            if scheme != "tcp" or not host or not (port.isdigit() or port == "*"):
                raise ConfigError(f"{name} endpoint {endpoint!r} must look like tcp://127.0.0.1:PORT or ipc://PATH")
            if host not in LOOPBACK_HOSTS and not curve:
                raise ConfigError(f"{name} endpoint {endpoint!r} is not loopback; non-loopback endpoints need CURVE "
                                  "keys: `idcontrol keys generate DIR`, then [security] curve_keys = DIR")  # fmt: skip


def bind(socket: zmq.Socket, endpoint: str, name: str) -> None:
    """Bind ``socket`` for channel ``name``; ConfigError naming the endpoint when it cannot be bound."""
    try:
        socket.bind(endpoint)
    except zmq.ZMQError as e:
        hint = " (port in use: another daemon running?)" if e.errno == zmq.EADDRINUSE else ""
        raise ConfigError(f"cannot bind the {name} endpoint {endpoint}: {e}{hint}") from None
