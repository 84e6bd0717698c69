"""``idcontrol flood LAUNCH_FILE --kind KIND``: a stranger's traffic at a running daemon, without its credential.

What another local user can send (docs/protocol.md, "Who may do what, on each channel"), as fast as one process
can, until ``--seconds`` pass:

* ``control``: well-formed ``state`` messages on the control endpoint from a connection that never said hello;
* ``reference``: ``reference`` messages (the standing posture moved by 0.1 rad) with a wrong credential;
* ``subscriptions``: distinct telemetry subscriptions (``--topics`` of them, sent again on a new connection each
  time they are all out);
* ``viewers``: live-view WebSocket connections (``--connections`` open at once, to ``[telemetry] foxglove``'s
  port), each subscribing to every channel and never reading; one the server closes or refuses is opened again.

It prints what it sent as one JSON line. The daemon's ``stats`` then say what the traffic cost it
(``foreign_unread``, ``reference_unauthorized``, ``telemetry_topics_ignored``, ``on_deadline_fraction``).
The live view's own counts (``accepted``, ``refused_full``, ``disconnected_slow``, ``dropped``) are in its last
line when it stops. docs/benchmarks.md gives measured runs.
"""

from __future__ import annotations

import base64
import json
import os
import select
import socket
import time
from dataclasses import asdict, dataclass

import numpy as np
import zmq

from idcontrol import protocol as wire
from idcontrol.errors import ConfigError
from idcontrol.settings import LaunchConfig

KINDS = ("control", "reference", "subscriptions", "viewers")


@dataclass
class FloodReport:
    """What one flood sent: messages handed to ZeroMQ, and those it refused (its queue full)."""

    kind: str
    seconds: float
    sent: int = 0
    refused: int = 0
    connections: int = 1


def _endpoint(config: LaunchConfig, kind: str) -> str:
    endpoint = {
        "control": config.endpoints.control,
        "reference": config.endpoints.reference,
        "subscriptions": config.endpoints.telemetry,
    }[kind]
    if not endpoint:
        raise ConfigError(f"the launch file has no endpoint for a {kind} flood")
    return endpoint


def _messages(config: LaunchConfig, kind: str) -> bytes:
    """The one message a control or reference flood repeats."""
    from idcontrol.robot.model import RobotModel

    robot = RobotModel(config.robot)
    q = robot.standing_configuration()
    if kind == "control":
        return wire.encode_state(1, 0.0, q, np.zeros(robot.nv))
    joints = robot.joint_positions(q) + 0.1
    return wire.encode_reference(joints, np.zeros(robot.nu), np.zeros(robot.nu), token="0" * 64)


def flood(
    config: LaunchConfig, kind: str, seconds: float, topics: int = 200_000, connections: int = 1000
) -> FloodReport:
    """Send ``kind`` traffic at ``config``'s daemon for ``seconds`` s (see the module docstring)."""
    if kind not in KINDS:
        raise ConfigError(f"flood kind must be one of {KINDS}, got {kind!r}")
    if kind == "viewers":
        return _viewers(config, seconds, connections)
    endpoint = _endpoint(config, kind)
    report = FloodReport(kind, seconds)
    ctx = zmq.Context()
    socket_type = {"control": zmq.DEALER, "reference": zmq.PUB, "subscriptions": zmq.XSUB}[kind]
    raw = _messages(config, kind) if kind != "subscriptions" else b""

    def connect() -> zmq.Socket:
        s = ctx.socket(socket_type)
        s.setsockopt(zmq.LINGER, 0)
        wire.allow_ipv6(s, endpoint)
        s.connect(endpoint)
        return s

    s = connect()
    end = time.monotonic() + seconds
    topic = 0
    try:
        while time.monotonic() < end:
            for _ in range(1000):
                if kind == "subscriptions":
                    raw = b"\x01" + topic.to_bytes(4, "little")
                    topic += 1
                try:
                    s.send(raw, zmq.NOBLOCK)
                    report.sent += 1
                except zmq.Again:
                    report.refused += 1
                if kind == "control":  # its replies: read and thrown away, so the daemon's are never held up
                    while s.poll(0):
                        s.recv()
            if kind == "subscriptions" and topic >= topics:
                s.close(linger=0)
                s = connect()
                topic = 0
                report.connections += 1
    finally:
        s.close(linger=0)
        ctx.term()
    return report


def _viewers(config: LaunchConfig, seconds: float, connections: int) -> FloodReport:
    """Keep ``connections`` live-view connections open that subscribe to channels 1 .. 64 and never read:
    ``sent`` counts the handshakes sent, ``refused`` the connections the server closed or refused (then opened
    again), ``connections`` the most open at once."""
    port = config.telemetry.foxglove
    if port is None:
        raise ConfigError("a viewers flood needs the live view's port ([telemetry] foxglove)")
    report = FloodReport("viewers", seconds, connections=0)
    handshake = (
        f"GET / HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n"
        f"Sec-WebSocket-Key: {base64.b64encode(os.urandom(16)).decode()}\r\nSec-WebSocket-Version: 13\r\n"
        "Sec-WebSocket-Protocol: foxglove.websocket.v1\r\n\r\n"
    ).encode()
    subscribe = json.dumps(
        {"op": "subscribe", "subscriptions": [{"id": i, "channelId": i} for i in range(1, 65)]}
    ).encode()
    mask = os.urandom(4)
    frame = (  # a client's text frame: FIN and opcode 1, masked, a 16-bit length
        bytes([0x81, 0x80 | 126])
        + len(subscribe).to_bytes(2, "big")
        + mask
        + bytes(b ^ mask[i % 4] for i, b in enumerate(subscribe))
    )
    open_: dict[int, socket.socket] = {}
    hangups = select.poll()  # the server's close, seen without reading what it sent
    end = time.monotonic() + seconds
    try:
        while time.monotonic() < end:
            while len(open_) < connections:
                try:
                    s = socket.create_connection(("127.0.0.1", port), timeout=1.0)
                    s.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
                    s.sendall(handshake + frame)
                except OSError:
                    report.refused += 1
                    break
                open_[s.fileno()] = s
                hangups.register(s, select.POLLRDHUP)
                report.sent += 1
            report.connections = max(report.connections, len(open_))
            for fd, _ in hangups.poll(50):  # closed by the server (refused, or dropped as slow): open another
                hangups.unregister(fd)
                open_.pop(fd).close()
                report.refused += 1
    finally:
        for s in open_.values():
            s.close()
    return report


def main(launch_file: str, kind: str, seconds: float, topics: int, connections: int = 1000) -> int:
    """Run one flood and print its report as JSON."""
    from idcontrol.settings import load_launch

    config = load_launch(launch_file, check_formulations=False)
    print(json.dumps(asdict(flood(config, kind, seconds, topics, connections))), flush=True)
    return 0
