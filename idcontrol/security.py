"""Who may command a daemon: a local credential by default, ZeroMQ CURVE keys for endpoints beyond loopback.

Without CURVE keys, each daemon makes a new :class:`Credential` (a random secret) in a private runtime
directory of its user; a bridge, a robot driver or an admin client shows it in its ``hello`` and in every
commanding admin request, so another process cannot command the robot unless it can read that file.

A key directory (made by ``idcontrol keys generate DIR``) holds::

    server.key, server.key_secret   the daemon's key pair
    client.key, client.key_secret   a key pair for the bridge and admin clients
    authorized/*.key                public keys of the clients the daemon accepts

The daemon reads ``server.key_secret`` and ``authorized/``; a client reads only ``server.key`` (the daemon's public
key) and ``client.key_secret`` (its own pair: ZeroMQ's secret certificate holds the public key too), so a remote
driver's copy of the directory holds those two files and never the daemon's secret key (:data:`CLIENT_FILES`).

With a key directory configured (``[security] curve_keys`` in a launch file)
every daemon socket is a CURVE server and a ZAP handler
(:class:`zmq.auth.thread.ThreadAuthenticator`) accepts only clients whose
public key is in ``authorized/``: an unauthenticated peer gets no reply on
any channel, the admin channel included. Without one, the daemon binds to
loopback only (:meth:`idcontrol.daemon.endpoints.Endpoints.check`).
"""

from __future__ import annotations

import contextlib
import hashlib
import hmac
import os
import secrets
import shutil
import stat
import tempfile
from dataclasses import dataclass
from pathlib import Path

import zmq
import zmq.auth
from zmq.auth.thread import ThreadAuthenticator

from idcontrol.errors import ConfigError

#: What each side reads of a key directory. The daemon: its key pair (the secret certificate holds both keys) and the
#: clients it accepts. A client: the daemon's public key and its own pair; a remote driver's machine holds only these.
SERVER_FILES = ("server.key_secret", "authorized/")
CLIENT_FILES = ("server.key", "client.key_secret")
#: What each file is, for the error that says one is missing.
_ROLE_OF_FILE = {
    "server.key": "the daemon's public key",
    "server.key_secret": "the daemon's key pair",
    "authorized/": "the public keys of the clients the daemon accepts",
    "client.key_secret": "the client's key pair",
}


@dataclass(frozen=True)
class KeyDirectory:
    """The files of one key directory (see the module docstring). The daemon reads :data:`SERVER_FILES`, a client
    :data:`CLIENT_FILES` only: a client's copy of the directory needs no more, and its loader never opens the
    daemon's secret key."""

    path: Path

    @property
    def authorized(self) -> Path:
        return self.path / "authorized"

    def _file(self, name: str) -> Path:
        return self.path / name

    def missing(self, names: tuple[str, ...]) -> list[str]:
        """Those of ``names`` (files; folders end in ``/``) the directory lacks."""
        return [n for n in names if not (self._file(n).is_dir() if n.endswith("/") else self._file(n).is_file())]

    def _require(self, names: tuple[str, ...], side: str) -> None:
        """ConfigError naming each file of ``names`` the directory lacks, what it is, and where it comes from."""
        missing = self.missing(names)
        if missing:
            what = ", ".join(f"{n} ({_ROLE_OF_FILE[n]})" for n in missing)
            them = "it" if len(missing) == 1 else "them"
            raise ConfigError(
                f"CURVE key directory {self.path} lacks {what}, which {side} needs; copy {them} from the directory "
                f"`idcontrol keys generate` made (a client needs {' and '.join(CLIENT_FILES)} only), or make one "
                f"with: idcontrol keys generate {self.path}"
            )

    def check(self) -> None:
        """ConfigError unless the directory serves a daemon (:data:`SERVER_FILES`) or a client
        (:data:`CLIENT_FILES`), naming the missing files: a launch file names one directory for both sides, which
        each machine holds its side's part of. Each side's own files are checked again when it uses them."""
        if self.missing(SERVER_FILES) and self.missing(CLIENT_FILES):
            self._require(CLIENT_FILES, "a client")

    def _pair(self, name: str) -> tuple[bytes, bytes]:
        public, secret = zmq.auth.load_certificate(self._file(f"{name}.key_secret"))
        if secret is None:
            raise ConfigError(f"{self._file(name + '.key_secret')} holds no secret key")
        return public, secret

    def make_server(self, socket: zmq.Socket) -> None:
        """Make ``socket`` (not yet bound) a CURVE server with the daemon's key pair."""
        self._require(SERVER_FILES, "the daemon")
        socket.curve_publickey, socket.curve_secretkey = self._pair("server")
        socket.curve_server = True

    def make_client(self, socket: zmq.Socket) -> None:
        """Make ``socket`` (not yet connected) a CURVE client of the daemon: the client key pair and the daemon's
        public key (:data:`CLIENT_FILES`; never the daemon's secret key)."""
        self._require(CLIENT_FILES, "a client")
        socket.curve_publickey, socket.curve_secretkey = self._pair("client")
        socket.curve_serverkey, _ = zmq.auth.load_certificate(self._file("server.key"))

    def start_authenticator(self, context: zmq.Context) -> ThreadAuthenticator:
        """A ZAP handler on ``context`` that accepts the public keys in ``authorized/`` only."""
        self._require(SERVER_FILES, "the daemon")
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


# ---------------------------------------------------------------------------------------------- local credential
#: Overrides where daemons keep their credentials (a directory shared by the daemon's and the driver's
#: containers, say); otherwise ``$XDG_RUNTIME_DIR/idcontrol``, or ``<tmp>/idcontrol-<uid>``.
RUNTIME_DIR_ENV = "IDCONTROL_RUNTIME_DIR"
#: Admin requests anyone who can reach the admin endpoint may send; every other request needs the credential.
READ_ONLY_REQUESTS = ("status", "stats")


def runtime_dir() -> Path:
    """The private directory where daemons keep their credentials.

    Made 0700 when missing. Refused with ConfigError saying why when it is a symbolic link (checked without
    following it: a planted link would have the credential written into, and chmod applied to, its target),
    not a directory, or owned by another user. A directory of ours that others may enter is made 0700 when it was
    chosen (``$IDCONTROL_RUNTIME_DIR``, a container's fresh volume say), and refused in the shared temporary
    directory, where only a mistake or another process of ours makes one so."""
    base = os.environ.get(RUNTIME_DIR_ENV)
    if base:
        path, chosen = Path(base), True
    elif os.environ.get("XDG_RUNTIME_DIR"):
        path, chosen = Path(os.environ["XDG_RUNTIME_DIR"]) / "idcontrol", True
    else:
        path, chosen = Path(tempfile.gettempdir()) / f"idcontrol-{os.getuid()}", False
    path.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
    with contextlib.suppress(FileExistsError):
        os.mkdir(path, 0o700)  # never follows a link at ``path``
    how = f"set {RUNTIME_DIR_ENV} to a private directory of yours"
    try:
        fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW)
    except OSError as e:
        what = "a symbolic link" if path.is_symlink() else f"not a directory we can open ({e.strerror})"
        raise ConfigError(f"the runtime directory {path} is {what}; refusing it: {how}") from None
    try:
        info = os.fstat(fd)
        if info.st_uid != os.getuid():
            raise ConfigError(
                f"the runtime directory {path} belongs to another user (uid {info.st_uid}); refusing it: {how}"
            )
        if stat.S_IMODE(info.st_mode) & 0o077:
            if not chosen:
                raise ConfigError(
                    f"the runtime directory {path} is open to others (mode "
                    f"{stat.S_IMODE(info.st_mode):o}); refusing it: make it 0700 or {how}"
                )
            os.fchmod(fd, 0o700)
    finally:
        os.close(fd)
    return path


def credential_path(control_endpoint: str) -> Path:
    """Where the daemon serving ``control_endpoint`` (as its launch file writes it) keeps its credential."""
    digest = hashlib.sha256(control_endpoint.encode()).hexdigest()[:20]
    return runtime_dir() / f"{digest}.token"


@dataclass(frozen=True)
class Credential:
    """The secret a client must show to command a daemon that has no CURVE keys (docs/protocol.md,
    "Authorization"): 32 random bytes as hex, in a file only this user can read, made anew by each daemon."""

    token: str
    path: Path | None = None

    @classmethod
    def create(cls, control_endpoint: str | None = None) -> Credential:
        """A new credential; written to :func:`credential_path` (0600) when ``control_endpoint`` is given."""
        token = secrets.token_hex(32)
        if control_endpoint is None:
            return cls(token)
        path = credential_path(control_endpoint)
        path.unlink(missing_ok=True)  # a dead daemon's: this one's replaces it
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        with os.fdopen(fd, "w") as f:
            f.write(token + "\n")
        return cls(token, path)

    @classmethod
    def of_daemon(cls, control_endpoint: str) -> Credential:
        """The credential of the running daemon serving ``control_endpoint``; ConfigError when there is none."""
        path = credential_path(control_endpoint)
        try:
            token = path.read_text().strip()
        except FileNotFoundError:
            raise ConfigError(
                f"no credential for the daemon at {control_endpoint} ({path}): is it running, "
                "as this user, with the same runtime directory?"
            ) from None
        return cls(token, path)

    def accepts(self, token: object) -> bool:
        """Whether ``token`` is this credential (in constant time)."""
        return isinstance(token, str) and hmac.compare_digest(token.encode(), self.token.encode())

    def remove(self) -> None:
        """Delete the file, if it is still this credential's (a newer daemon may have replaced it)."""
        if self.path is not None:
            try:
                if self.path.read_text().strip() == self.token:
                    self.path.unlink()
            except FileNotFoundError:
                pass
