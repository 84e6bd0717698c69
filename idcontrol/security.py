"""ZeroMQ CURVE keys and authentication for endpoints beyond loopback.

A key directory (made by ``idcontrol keys generate DIR``) holds::

    server.key, server.key_secret   the daemon's key pair
    client.key, client.key_secret   a key pair for the bridge and admin clients
    authorized/*.key                public keys of the clients the daemon accepts

With a key directory configured (``[security] curve_keys`` in a launch file)
every daemon socket is a CURVE server and a ZAP handler
(:class:`zmq.auth.thread.ThreadAuthenticator`) accepts only clients whose
public key is in ``authorized/``: an unauthenticated peer gets no reply on
any channel, the admin channel included. Without one, the daemon binds to
loopback only (:meth:`idcontrol.daemon.endpoints.Endpoints.check`).
"""

from __future__ import annotations

import os
import shutil
from dataclasses import dataclass
from pathlib import Path

import zmq
import zmq.auth
from zmq.auth.thread import ThreadAuthenticator

from idcontrol.errors import ConfigError


@dataclass(frozen=True)
class KeyDirectory:
    """The files of one key directory (see the module docstring)."""

    path: Path

    @property
    def authorized(self) -> Path:
        return self.path / "authorized"

    def _file(self, name: str) -> Path:
        return self.path / name

    def check(self) -> None:
        """ConfigError naming the missing files, with the command that makes them."""
        needed = ["server.key", "server.key_secret", "client.key", "client.key_secret"]
        missing = [n for n in needed if not self._file(n).is_file()]
        if not self.authorized.is_dir():
            missing.append("authorized/")
        if missing:
            raise ConfigError(f"CURVE key directory {self.path} lacks {missing}; "
                              f"make one with: idcontrol keys generate {self.path}")  # fmt: skip

    def _pair(self, name: str) -> tuple[bytes, bytes]:
        self.check()
        public, secret = zmq.auth.load_certificate(self._file(f"{name}.key_secret"))
        if secret is None:
            raise ConfigError(f"{self._file(name + '.key_secret')} holds no secret key")
        return public, secret

    def make_server(self, socket: zmq.Socket) -> None:
        """Make ``socket`` (not yet bound) a CURVE server with the daemon's key pair."""
        socket.curve_publickey, socket.curve_secretkey = self._pair("server")
        socket.curve_server = True

    def make_client(self, socket: zmq.Socket) -> None:
        """Make ``socket`` (not yet connected) a CURVE client of the daemon, with the client key pair."""
        socket.curve_publickey, socket.curve_secretkey = self._pair("client")
        socket.curve_serverkey, _ = zmq.auth.load_certificate(self._file("server.key"))

    def start_authenticator(self, context: zmq.Context) -> ThreadAuthenticator:
        """A ZAP handler on ``context`` that accepts the public keys in ``authorized/`` only."""
        self.check()
        auth = ThreadAuthenticator(context)
        auth.start()
        auth.configure_curve(domain="*", location=str(self.authorized))
        return auth


def generate_keys(directory: str | Path, clients: tuple[str, ...] = ("client",)) -> KeyDirectory:
    """Write a new key directory: the daemon's pair, one pair per client name, their public keys authorized.

    Refuses to overwrite existing keys. Secret key files are readable by their owner only.
    """
    keys = KeyDirectory(Path(directory))
    names = ("server", *clients)
    existing = [n for n in names if (keys.path / f"{n}.key_secret").exists()]
    if existing:
        raise ConfigError(f"{keys.path} already holds keys {existing}; remove them or choose another directory")
    keys.authorized.mkdir(parents=True, exist_ok=True)
    os.chmod(keys.path, 0o700)
    for name in names:
        public, secret = zmq.auth.create_certificates(keys.path, name)
        os.chmod(secret, 0o600)
        if name != "server":
            shutil.copy(public, keys.authorized / Path(public).name)
    return keys
