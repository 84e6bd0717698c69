"""``idcontrol flood LAUNCH_FILE --kind KIND``: a stranger's traffic at a running daemon, without its credential.

What another local user can send (docs/protocol.md, "Who may do what, on each channel"), as fast as one process
can, until ``--seconds`` pass:

* ``control``: well-formed ``state`` messages on the control endpoint from a connection that never said hello;
* ``reference``: ``reference`` messages (the standing posture moved by 0.1 rad) with a wrong credential;
* ``subscriptions``: distinct telemetry subscriptions (``--topics`` of them, sent again on a new connection each
  time they are all out).

It prints what it sent as one JSON line. The daemon's ``stats`` then say what the traffic cost it
(``foreign_unread``, ``reference_unauthorized``, ``telemetry_topics_ignored``, ``on_deadline_fraction``);
docs/benchmarks.md gives a measured run.
"""

from __future__ import annotations

import json
import time
from dataclasses import asdict, dataclass

import numpy as np
import zmq

from idcontrol import protocol as wire
from idcontrol.errors import ConfigError
from idcontrol.settings import LaunchConfig

KINDS = ("control", "reference", "subscriptions")


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


def flood(config: LaunchConfig, kind: str, seconds: float, topics: int = 200_000) -> FloodReport:
    """Send ``kind`` traffic at ``config``'s daemon for ``seconds`` s (see the module docstring)."""
    if kind not in KINDS:
        raise ConfigError(f"flood kind must be one of {KINDS}, got {kind!r}")
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


def main(launch_file: str, kind: str, seconds: float, topics: int) -> int:
    """Run one flood and print its report as JSON."""
    from idcontrol.settings import load_launch

    config = load_launch(launch_file, check_formulations=False)
    print(json.dumps(asdict(flood(config, kind, seconds, topics))), flush=True)
    return 0
