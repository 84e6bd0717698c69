"""Small clients of the daemon: its admin channel (used by ``idcontrol launch``, the tests and containers) and
the planner's side of its reference channel (:class:`ReferencePublisher`).

``python -m idcontrol.client LAUNCH_FILE REQUEST`` sends one admin request to the daemon of a launch file
and prints the reply as JSON; ``start`` first waits for the bridge to connect (docker/compose.yaml uses it
to start the robot once the daemon and the bridge containers are up).
"""

from __future__ import annotations

import argparse
import sys
import time
from typing import TYPE_CHECKING, Any

import zmq

from idcontrol import jsontext
from idcontrol import protocol as wire
from idcontrol.errors import ProtocolError
from idcontrol.security import READ_ONLY_REQUESTS, Credential, KeyDirectory

if TYPE_CHECKING:
    from idcontrol.settings import LaunchConfig


class AdminClient:
    """Request/reply on the admin endpoint; a request without a reply in ``timeout`` s raises TimeoutError.

    A REQ socket that lost its reply cannot send again, so each timeout replaces the socket.
    ``curve``: the key directory of a daemon that authenticates its peers (:mod:`idcontrol.security`).
    ``token``: the daemon's credential, shown with every request but ``status`` and ``stats``; or
    ``credential_for``: the daemon's control endpoint, whose credential is read when a request first needs it
    (and read again when the daemon refuses it: a restarted daemon has a new one).
    """

    def __init__(
        self,
        endpoint: str,
        timeout: float = 2.0,
        context: zmq.Context | None = None,
        curve: KeyDirectory | None = None,
        *,
        token: str | None = None,
        credential_for: str | None = None,
    ) -> None:
        self.endpoint = endpoint
        self.timeout = timeout
        self.curve = curve
        self.token = token
        self.credential_for = credential_for
        self._ctx = context or zmq.Context.instance()
        self._socket = self._connect()

    @classmethod
    def for_launch(cls, config: LaunchConfig, timeout: float = 2.0) -> AdminClient:
        """A client of the daemon of a launch file: its admin endpoint, its CURVE keys or its credential."""
        keys = KeyDirectory(config.curve_keys) if config.curve_keys else None
        return cls(
            config.endpoints.admin, timeout, curve=keys, credential_for=None if keys else config.endpoints.control
        )

    def _connect(self) -> zmq.Socket:
        s = self._ctx.socket(zmq.REQ)
        s.setsockopt(zmq.LINGER, 0)
        if self.curve is not None:
            self.curve.make_client(s)
        wire.allow_ipv6(s, self.endpoint)
        s.connect(self.endpoint)
        return s

    def request(self, kind: str, timeout: float | None = None, **fields: Any) -> dict[str, Any]:
        """Send one request; return the ``ok`` reply. Raises ProtocolError for an ``error`` reply."""
        if kind in READ_ONLY_REQUESTS or "token" in fields or (self.token is None and self.credential_for is None):
            return wire.decode_reply(self.request_raw(wire.encode_request(kind, **fields), timeout))
        if self.token is None:
            self.token = Credential.of_daemon(self.credential_for).token
        try:
            return wire.decode_reply(self.request_raw(wire.encode_request(kind, token=self.token, **fields), timeout))
        except ProtocolError as e:
            if e.code != "unauthorized" or self.credential_for is None:
                raise
            self.token = Credential.of_daemon(self.credential_for).token  # the daemon restarted: a new one
            return wire.decode_reply(self.request_raw(wire.encode_request(kind, token=self.token, **fields), timeout))

    def start(self, wait_s: float = 5.0) -> dict[str, Any]:
        """``start``, asked again for up to ``wait_s`` s while the daemon refuses it because no driver is connected
        yet (a bridge that has just connected, or paused); other refusals raise at once."""
        deadline = time.monotonic() + wait_s
        while True:
            try:
                return self.request("start")
            except ProtocolError as e:
                if e.code != "invalid_transition" or wire.NO_DRIVER not in str(e) or time.monotonic() > deadline:
                    raise
            time.sleep(0.02)

    def request_raw(self, payload: bytes, timeout: float | None = None) -> bytes:
        """Send raw bytes (tests send malformed requests with this); return the raw reply."""
        timeout_ms = int(1000 * (self.timeout if timeout is None else timeout))
        # A REQ socket without a live peer blocks in send: wait for it to be writable, bounded.
        if not self._socket.poll(timeout_ms, zmq.POLLOUT):
            self._reset()
            raise TimeoutError(f"the daemon at {self.endpoint} does not accept requests")
        try:
            self._socket.send(payload, zmq.NOBLOCK)
        except zmq.Again:  # the peer went away between the poll and the send
            self._reset()
            raise TimeoutError(f"the daemon at {self.endpoint} does not accept requests") from None
        if not self._socket.poll(timeout_ms):
            self._reset()
            raise TimeoutError(f"no reply from the daemon at {self.endpoint}")
        return self._socket.recv()

    def _reset(self) -> None:
        self._socket.close(linger=0)
        self._socket = self._connect()

    def close(self) -> None:
        self._socket.close(linger=0)

    def __enter__(self) -> AdminClient:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


class ReferencePublisher:
    """The planner's side of the reference channel: joint targets for the daemon's ``stream`` reference, each
    message with the daemon's credential (docs/protocol.md, "Reference channel").

    endpoint : the daemon's ``[endpoints] reference``.  ``token`` / ``credential_for`` / ``curve``: as for
    :class:`AdminClient` (the credential is read when first needed; with CURVE keys none is sent).
    A ``PUB`` socket gets no replies: a message the daemon refuses is dropped and counted in its stats
    (``reference_unauthorized``); :meth:`refresh_credential` reads the credential of a restarted daemon.
    """

    def __init__(
        self,
        endpoint: str,
        context: zmq.Context | None = None,
        curve: KeyDirectory | None = None,
        *,
        token: str | None = None,
        credential_for: str | None = None,
    ) -> None:
        self.endpoint, self.curve, self.token, self.credential_for = endpoint, curve, token, credential_for
        self._socket = (context or zmq.Context.instance()).socket(zmq.PUB)
        self._socket.setsockopt(zmq.LINGER, 0)
        if curve is not None:
            curve.make_client(self._socket)
        wire.allow_ipv6(self._socket, endpoint)
        self._socket.connect(endpoint)

    @classmethod
    def for_launch(cls, config: LaunchConfig) -> ReferencePublisher:
        """A publisher to the reference endpoint of a launch file's daemon (ConfigError when it has none)."""
        from idcontrol.errors import ConfigError

        if not config.endpoints.reference:
            raise ConfigError("the launch file has no [endpoints] reference: its daemon takes no planner's targets")
        keys = KeyDirectory(config.curve_keys) if config.curve_keys else None
        return cls(config.endpoints.reference, curve=keys, credential_for=None if keys else config.endpoints.control)

    def refresh_credential(self) -> None:
        """Read the daemon's credential again (a restarted daemon makes a new one)."""
        if self.credential_for is not None:
            self.token = Credential.of_daemon(self.credential_for).token

    def publish(self, q_ref: Any, qd_ref: Any, qdd_ref: Any, t: float = 0.0) -> None:
        """Send one target: q_ref rad (m), qd_ref rad/s, qdd_ref rad/s², each (nu,) in ``welcome.joint_names``
        order; ``t`` s (the planner's clock, informative)."""
        if self.token is None and self.curve is None and self.credential_for is not None:
            self.refresh_credential()
        self._socket.send(wire.encode_reference(q_ref, qd_ref, qdd_ref, t, None if self.curve else self.token))

    def close(self) -> None:
        self._socket.close(linger=0)

    def __enter__(self) -> ReferencePublisher:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def main(argv: list[str] | None = None) -> int:
    """Send one admin request to the daemon of a launch file; print the reply as JSON."""
    from idcontrol.errors import IdControlError
    from idcontrol.settings import load_launch

    parser = argparse.ArgumentParser(prog="python -m idcontrol.client", description=main.__doc__)
    parser.add_argument("launch_file", help="the launch file whose daemon to ask (its admin endpoint)")
    parser.add_argument("request", choices=("status", "stats", "start", "stop", "shutdown"))
    parser.add_argument(
        "--wait", type=float, default=120.0, help="s to wait for the daemon (and, to start, the bridge)"
    )
    args = parser.parse_args(argv)
    try:
        config = load_launch(args.launch_file, check_formulations=False)  # the daemon checked them
        with AdminClient.for_launch(config) as admin:
            deadline = time.monotonic() + args.wait
            while True:
                try:
                    status = admin.request("status", timeout=1.0)
                except TimeoutError:
                    status = None
                if status is not None and (args.request != "start" or status["bridge_connected"]):
                    break
                if time.monotonic() > deadline:
                    waited_for = "the daemon" if status is None else "the bridge"
                    raise IdControlError(f"{waited_for} did not answer within {args.wait:g} s")
                time.sleep(0.2)
            reply = (
                status
                if args.request == "status"
                else admin.start()
                if args.request == "start"
                else admin.request(args.request)
            )
    except IdControlError as e:
        print(f"idcontrol: error: {e}", file=sys.stderr)
        return 2
    print(jsontext.dumps(reply))
    return 0


if __name__ == "__main__":
    sys.exit(main())
