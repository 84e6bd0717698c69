"""Property-based fuzzing of the control channel against a real daemon on loopback, and the fuzz command."""

from __future__ import annotations

import json
import socket
import subprocess
import sys
import time

import msgpack
import numpy as np
import zmq
from hypothesis import given, settings
from hypothesis import strategies as st

from idcontrol import protocol as wire
from idcontrol.robot.model import RobotModel
from idcontrol.tools import fuzz, ports
from tests.test_daemon import Harness

STATE_KEYS = [
    "v",
    "type",
    "seq",
    "t",
    "q",
    "qd",
    "contact_forces",
    "objects",
    "last_rtt_us",
    "bridge_stopped",
    "robot",
    "nq",
    "clock",
    "x",
]

scalars = (
    st.none()
    | st.booleans()
    | st.integers(-(2**63), 2**64 - 1)
    | st.floats()
    | st.text(max_size=8)
    | st.binary(max_size=200)
)
values = st.recursive(
    scalars,
    lambda children: st.lists(children, max_size=20) | st.dictionaries(st.text(max_size=8), children, max_size=6),
    max_leaves=25,
)
float_arrays = st.lists(st.floats(width=64), min_size=0, max_size=25).map(lambda xs: wire.f64(np.asarray(xs)))


@st.composite
def control_messages(draw) -> bytes:
    """Raw bytes, maps with the protocol's keys and odd values, or near-valid states with odd arrays."""
    kind = draw(st.sampled_from(["bytes", "map", "state"]))
    if kind == "bytes":
        return draw(st.binary(max_size=300))
    if kind == "map":
        fields = draw(st.dictionaries(st.sampled_from(STATE_KEYS), values, max_size=8))
        fields.setdefault("v", 1)
        fields.setdefault("type", draw(st.sampled_from(["state", "hello"])))
        return msgpack.packb(fields, use_bin_type=True)
    message = {
        "v": 1,
        "type": "state",
        "seq": draw(st.integers(0, 2**64 - 1)),
        "t": draw(st.floats(width=64)),
        "q": draw(float_arrays),
        "qd": draw(float_arrays),
    }
    if draw(st.booleans()):
        message["contact_forces"] = draw(float_arrays)
    return msgpack.packb(message, use_bin_type=True)


def check_reply(raw: bytes, torque_limits: np.ndarray) -> None:
    """A documented error other than internal, a welcome, or a command with a finite torque within limits."""
    reply = msgpack.unpackb(raw, raw=False)
    assert reply["v"] == wire.PROTOCOL_VERSION
    if reply["type"] == "error":
        assert reply["code"] in wire.ERROR_CODES and reply["code"] != "internal", reply
    elif reply["type"] == "command":
        tau = np.frombuffer(reply["tau"], "<f8")
        assert np.all(np.isfinite(tau)) and np.all(np.abs(tau) <= torque_limits) and reply["mode"] in wire.MODES
    else:
        assert reply["type"] == "welcome", reply


def test_fuzzed_control_messages_to_a_running_daemon_get_only_safe_replies(quadruped):
    """Hypothesis: each generated message to a daemon in run mode gets exactly one reply, never an
    internal error or an unsafe torque; good states are still answered with run commands afterwards."""
    h = Harness(quadruped)
    try:
        h.admin.request("start")
        limits = quadruped.torque_limits

        @settings(max_examples=250, deadline=None, derandomize=True)
        @given(control_messages())
        def one_message(raw: bytes) -> None:
            h.bridge.send(raw)
            assert h.bridge.poll(2000), "no reply"
            check_reply(h.bridge.recv(), limits)

        one_message()
        assert h.thread.is_alive()
        if h.admin.request("status")["mode"] != "run":  # a fuzzed state may have said bridge_stopped
            while h.state(seq=2**64 - 10 + h.seq % 5)["mode"] != "stopped":
                h.seq += 1
            h.admin.request("start")
        h.seq = 2**64 - 2
        assert h.state()["mode"] == "run"
    finally:
        h.close()


def test_fuzz_command_reports_no_crash_against_a_daemon_process(tmp_path):
    """`idcontrol fuzz --messages 3000`: a daemon process gets 3000 hostile messages; the report counts them,
    with replies, commands, no crash and no unsafe reply."""
    path = tmp_path / "fuzz.json"
    out = subprocess.run(
        [sys.executable, "-m", "idcontrol", "fuzz", "--messages", "3000", "--seed", "7", "--json", str(path)],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert out.returncode == 0, out.stdout[-2000:] + out.stderr[-2000:]
    report = json.loads(path.read_text())
    assert report["messages"] == 3000 and report["valid_states"] > 0
    assert report["crashes"] == 0 and report["bad_replies"] == 0 and report["internal_errors"] == 0
    assert report["commands"] > 0 and report["replies"] > 3000 // 4 and sum(report["errors"].values()) > 500


def test_a_daemon_that_stops_reading_is_reported_with_its_fate_instead_of_hanging_the_fuzzer(tmp_path, monkeypatch):
    """A send nobody reads gives up after the send timeout (it blocked forever when a daemon died mid-run), and
    the problem names the daemon's exit code and quotes what it printed."""
    monkeypatch.setattr(fuzz, "SEND_TIMEOUT_MS", 200)
    ctx = zmq.Context()
    port = ports.free_ports(1)[0]
    dealer = fuzz._connect(ctx, f"tcp://127.0.0.1:{port}")  # nothing listens there: the queue never drains
    try:
        started = time.monotonic()
        sent = 0
        while sent < 100_000 and fuzz._send(dealer, b"state"):  # ZeroMQ queues up to its high-water mark
            sent += 1
        assert sent < 100_000 and time.monotonic() - started < 5.0
    finally:
        dealer.close(linger=0)
        ctx.term()
    output = tmp_path / "daemon.log"
    with output.open("wb") as sink:
        daemon = subprocess.Popen(
            [sys.executable, "-c", "print('binding the control socket failed'); exit(3)"],
            stdout=sink,
            stderr=subprocess.STDOUT,
        )
    daemon.wait(timeout=30)
    checker = fuzz.ReplyChecker(RobotModel("quadruped"), fuzz.FuzzReport())
    checker.daemon, checker.daemon_output = daemon, output
    assert checker.daemon_fate() == "; exit code 3: binding the control socket failed"


def test_free_ports_are_distinct_bindable_and_outside_the_range_outgoing_connections_draw_from():
    """Ports for a daemon started later: each one binds, none repeats, and none lies in the ephemeral range where
    any client's connect() could take it first."""
    picked = ports.free_ports(64)
    assert len(set(picked)) == 64
    assert all(p < ports._ephemeral_low() for p in picked)
    for port in picked[:8]:
        with socket.socket() as s:
            s.bind(("127.0.0.1", port))


def test_the_admin_fuzzer_never_sends_shutdown_with_the_valid_credential(quadruped):
    """Its 'wrong' credentials stay wrong whatever the daemon's random token ends with (a token ending in 0 was once
    rebuilt exactly by the near miss, and the fuzzed daemon shut down mid-run)."""
    for token in ("3f" * 31 + "a0", "3f" * 32):
        mutator = fuzz.AdminMutator(quadruped, np.random.default_rng(7), token)
        shutdowns = 0
        for _ in range(3000):
            try:
                message = msgpack.unpackb(mutator.request(), raw=False)
            except (ValueError, msgpack.exceptions.ExtraData):  # a truncated request
                continue
            if message.get("type") == "shutdown":
                shutdowns += 1
                assert message.get("token") != token
        assert shutdowns > 100
