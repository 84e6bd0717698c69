"""Where the daemon's sockets bind (docs/protocol.md, "Transport")."""

from __future__ import annotations

from dataclasses import dataclass

from idcontrol.errors import ConfigError

LOOPBACK_HOSTS = ("127.0.0.1", "localhost", "::1", "[::1]")


@dataclass(frozen=True)
class Endpoints:
    """ZeroMQ endpoints the daemon binds (loopback TCP or ipc://)."""

    control: str = "tcp://127.0.0.1:5555"
    admin: str = "tcp://127.0.0.1:5556"
    telemetry: str | None = "tcp://127.0.0.1:5557"
    reference: str | None = None

    def check(self) -> None:
        """Refuse endpoints beyond loopback (they need CURVE authentication, not configured)."""
        for name in ("control", "admin", "telemetry", "reference"):
            endpoint = getattr(self, name)
            if endpoint is None:
                continue
            scheme, _, rest = endpoint.partition("://")
            if scheme in ("ipc", "inproc") and rest:
                continue
            host, _, port = rest.rpartition(":")
            if scheme != "tcp" or not host or not (port.isdigit() or port == "*"):
                raise ConfigError(f"{name} endpoint {endpoint!r} must look like tcp://127.0.0.1:PORT or ipc://PATH")
            if host not in LOOPBACK_HOSTS:
                raise ConfigError(f"{name} endpoint {endpoint!r} is not loopback; "
                                  "non-loopback endpoints need CURVE keys, which are not configured")  # fmt: skip
