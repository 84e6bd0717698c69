"""Daemon conformance over real ZeroMQ sockets on loopback: every message, every error reply."""

from __future__ import annotations

import re
import threading
import time

import msgpack
import numpy as np
import pytest
import zmq

from idcontrol import protocol as wire
from idcontrol.client import AdminClient
from idcontrol.control.controller import InverseDynamicsController
from idcontrol.control.core import ControlCore
from idcontrol.daemon.server import TELEMETRY_CHECK_TICKS, TELEMETRY_IDLE_CHECK_TICKS, Daemon
from idcontrol.errors import ConfigError, ProtocolError
from idcontrol.formulations import contact_formulations
from idcontrol.logs.recorder import LogRecorder
from idcontrol.reference import make_reference
from idcontrol.robot.model import RobotModel
from idcontrol.settings import Endpoints

ANY_PORT = Endpoints("tcp://127.0.0.1:*", "tcp://127.0.0.1:*", "tcp://127.0.0.1:*", "tcp://127.0.0.1:*")


class Harness:
    """A daemon serving in a thread, a DEALER bridge, an admin client and a telemetry subscriber."""

    def __init__(
        self,
        robot: RobotModel,
        formulation: str = "two_stage_qp",
        watchdog: float = 0.02,
        clock: str = "lockstep",
        spin_us: float = 0.0,
        warm: bool = False,
        logger: LogRecorder | None = None,
    ) -> None:
        self.ctx = zmq.Context()
        self.robot = robot
        controller = InverseDynamicsController(robot, formulation=formulation)
        core = ControlCore(controller, make_reference("hold", robot))
        shadow = None
        if warm:  # the warmer's core: its own robot model, built alike
            shadow_robot = RobotModel(robot.name)
            shadow = ControlCore(
                InverseDynamicsController(shadow_robot, formulation=formulation), make_reference("hold", shadow_robot)
            )
        self.daemon = Daemon(
            core, ANY_PORT, watchdog=watchdog, context=self.ctx, spin_us=spin_us, shadow=shadow, logger=logger
        )
        self.thread = threading.Thread(target=self.daemon.serve, kwargs={"install_signal_handlers": False})
        self.thread.start()
        self.bridge = self.dealer()
        self.token = self.daemon.credential.token
        self.admin = AdminClient(self.daemon.bound["admin"], context=self.ctx, token=self.token)
        self.admin.request("status", timeout=120.0)  # served once warm-up is over
        self.telemetry = self.ctx.socket(zmq.SUB)
        self.telemetry.setsockopt(zmq.SUBSCRIBE, b"")
        self.telemetry.connect(self.daemon.bound["telemetry"])
        # lockstep: a test steps at its own pace, not the wall clock's
        assert self.exchange(self.hello(clock))["type"] == "welcome"
        self.seq = 0
        self.q = robot.standing_configuration()
        self.v = np.zeros(robot.nv)

    def hello(self, clock: str = "lockstep", **fields) -> bytes:
        r = self.robot
        return wire.encode_hello(r.name, r.nq, r.nv, r.nu, clock, fields.pop("token", self.token))

    def dealer(self) -> zmq.Socket:
        s = self.ctx.socket(zmq.DEALER)
        s.setsockopt(zmq.LINGER, 0)
        s.connect(self.daemon.bound["control"])
        return s

    def exchange(self, raw: bytes, socket: zmq.Socket | None = None, timeout_ms: int = 2000) -> dict:
        socket = socket or self.bridge
        socket.send(raw)
        assert socket.poll(timeout_ms), "the daemon did not answer"
        return msgpack.unpackb(socket.recv(), raw=False)

    def state(self, seq: int | None = None, **fields) -> dict:
        if seq is None:
            self.seq += 1
            seq = self.seq
        q = fields.pop("q", self.q)
        return self.exchange(wire.encode_state(seq, seq * 1e-3, q, self.v, **fields))

    def close(self) -> None:
        if self.thread.is_alive():
            try:
                self.admin.request("shutdown", timeout=1.0)
            except TimeoutError:
                pass
        self.thread.join(timeout=5)
        for s in (self.bridge, self.telemetry):
            s.close(linger=0)
        self.admin.close()
        self.ctx.term()


@pytest.fixture
def harness(quadruped):
    h = Harness(quadruped)
    yield h
    h.close()
    assert not h.thread.is_alive(), "the daemon did not shut down"


def test_hello_is_answered_with_welcome_listing_joints_and_contacts(harness):
    r = harness.robot
    reply = harness.exchange(harness.hello("realtime"))
    assert reply["type"] == "welcome" and reply["v"] == wire.PROTOCOL_VERSION
    assert reply["joint_names"] == list(r.actuated_joints)
    assert reply["contact_names"] == list(r.sphere_names)
    assert (reply["nq"], reply["nv"], reply["nu"], reply["dt"]) == (r.nq, r.nv, r.nu, 1e-3)


def test_hello_for_another_robot_is_refused(harness):
    reply = harness.exchange(wire.encode_hello("arm", 11, 11, 11, token=harness.token))
    assert reply["type"] == "error" and reply["code"] == "robot_mismatch"


def test_idle_daemon_answers_each_state_with_zero_torque_and_idle_mode(harness):
    reply = harness.state()
    assert reply["type"] == "command" and reply["seq"] == harness.seq and reply["mode"] == "idle"
    assert np.all(np.frombuffer(reply["tau"], "<f8") == 0.0)


def test_started_daemon_commands_finite_torques_within_limits_with_the_same_seq(harness):
    harness.state()
    assert harness.admin.request("start")["mode"] == "run"
    for _ in range(20):
        reply = harness.state()
        assert reply["type"] == "command" and reply["mode"] == "run" and reply["seq"] == harness.seq
        tau = np.frombuffer(reply["tau"], "<f8")
        assert tau.shape == (12,) and np.all(np.isfinite(tau))
        assert np.all(np.abs(tau) <= harness.robot.torque_limits + 1e-12)
    # standing still on four feet: the torques hold the robot's weight (not zero)
    assert np.abs(tau).max() > 0.1


def test_stats_split_each_tick_into_decode_core_tick_send_and_transport(harness):
    """phase_mean_us holds the daemon's own stages (decode, core tick, send), which fit within its compute
    time, a core tick no shorter than the controller's total, and transport = mean round trip − mean compute."""
    harness.state()
    harness.admin.request("start")
    for _ in range(30):
        harness.state(last_rtt_us=900.0)  # the bridge's figure for the previous command
    stats = harness.admin.request("stats")
    means = stats["phase_mean_us"]
    assert {"decode", "core_tick", "send", "transport", "model", "contacts", "solve", "total"} <= set(means)
    assert all(means[k] > 0.0 for k in ("decode", "core_tick", "send"))
    assert means["decode"] + means["core_tick"] + means["send"] <= stats["compute_us"]["max"]
    assert means["core_tick"] >= means["total"] - 0.1  # both means over all ticks, rounded to 0.1 µs
    assert 900.0 - stats["compute_us"]["max"] <= means["transport"] < 900.0


@pytest.mark.parametrize(
    ("mutate", "code"),
    [
        (lambda m: b"\xc1\x00", "malformed"),
        (lambda m: msgpack.packb([1, 2]), "malformed"),
        (lambda m: msgpack.packb({**m, "v": 99}), "bad_version"),
        (lambda m: msgpack.packb({**m, "type": "command"}), "unknown_type"),
        (lambda m: msgpack.packb({k: x for k, x in m.items() if k != "q"}), "missing_field"),
        (lambda m: msgpack.packb({**m, "q": b"\x00" * 16}), "bad_field"),
        (lambda m: msgpack.packb({**m, "qd": wire.f64(np.full(18, np.nan))}), "non_finite"),
        (lambda m: msgpack.packb({**m, "q": wire.f64(np.r_[0, 0, 0.16, 0, 0, 0, 2.0, np.zeros(12)])}), "bad_state"),
    ],
)
def test_each_bad_state_gets_its_error_code_and_never_a_command(harness, mutate, code):
    """Bad input is answered with an error reply; the daemon keeps serving good states afterwards."""
    harness.admin.request("start")
    good = msgpack.unpackb(wire.encode_state(1000, 1.0, harness.q, harness.v), raw=False)
    reply = harness.exchange(mutate(good))
    assert reply["type"] == "error" and reply["code"] == code, reply
    assert reply["message"]
    harness.seq = 2000
    assert harness.state()["type"] == "command"


def test_duplicate_and_older_sequence_numbers_are_stale(harness):
    assert harness.state(seq=10)["type"] == "command"
    for seq in (10, 9):
        reply = harness.state(seq=seq)
        assert reply["type"] == "error" and reply["code"] == "stale_seq" and reply["seq"] == seq
    assert harness.state(seq=12)["type"] == "command"
    assert harness.admin.request("stats")["states_skipped"] == 1  # seq 11 never arrived


def test_an_oversized_message_is_answered_too_large_unread_and_a_huge_one_dropped(harness):
    """Over the 1 MiB limit: a too_large error and the session goes on; over ZeroMQ's own limit (4 MiB) the
    connection is closed unanswered. The daemon survives both."""
    reply = harness.exchange(b"\x00" * (2 * wire.MAX_MESSAGE_BYTES))
    assert reply["type"] == "error" and reply["code"] == "too_large"
    assert harness.state()["type"] == "command"  # the session is intact
    harness.bridge.send(b"\x00" * (wire.MAX_RECEIVED_BYTES + 1))
    assert not harness.bridge.poll(200)
    assert harness.admin.request("status")["mode"] == "idle"


def test_a_message_of_several_frames_is_answered_malformed_a_req_socket_behind_its_delimiter(harness):
    """A DEALER that sends two frames gets one malformed error frame; a REQ socket (which puts an empty delimiter
    first) gets it too, so it never waits for ever, and is told to use a DEALER."""
    harness.bridge.send_multipart([b"one", b"two"])
    assert harness.bridge.poll(2000)
    reply = msgpack.unpackb(harness.bridge.recv())
    assert reply["type"] == "error" and reply["code"] == "malformed" and "one frame" in reply["message"]
    req = harness.ctx.socket(zmq.REQ)
    try:
        req.setsockopt(zmq.LINGER, 0)
        req.connect(harness.daemon.bound["control"])
        req.send(harness.hello())
        assert req.poll(2000), "a REQ socket got no reply"
        reply = msgpack.unpackb(req.recv())
        assert reply["code"] == "malformed" and "DEALER" in reply["message"]
    finally:
        req.close(linger=0)


def test_a_second_bridge_is_busy_while_the_first_is_alive(harness):
    harness.admin.request("start")
    harness.state()
    other = harness.dealer()
    try:
        reply = harness.exchange(wire.encode_state(1, 0.0, harness.q, harness.v), socket=other)
        assert reply["type"] == "error" and reply["code"] == "busy"
    finally:
        other.close(linger=0)


@pytest.fixture
def realtime_harness(quadruped):
    """A bridge that announced a real-time clock: the 20 ms watchdog applies."""
    h = Harness(quadruped, clock="realtime")
    yield h
    h.close()


@pytest.mark.timing
def test_watchdog_safe_stops_within_its_period_when_states_stop(realtime_harness):
    """No state for 20 ms in run mode: safe stop, measured from the last state."""
    harness = realtime_harness
    harness.admin.request("start")
    harness.state()
    last = time.monotonic()
    while harness.admin.request("status")["mode"] == "run":
        time.sleep(0.001)
    elapsed = time.monotonic() - last
    status = harness.admin.request("status")
    assert status["mode"] in ("safe_stop", "stopped") and "watchdog" in status["reason"]
    assert elapsed < 0.020 + 0.030  # the watchdog plus poll granularity and admin latency on a loaded machine


def test_a_watchdog_stop_after_refused_states_says_they_were_refused(realtime_harness):
    """States that keep arriving but are all refused (NaN) answer nothing: the watchdog stops the run, and its
    reason says no state was answered and how many were refused, not that none arrived."""
    harness = realtime_harness
    harness.admin.request("start")
    assert harness.state()["mode"] == "run"
    bad_q = harness.q.copy()
    bad_q[8] = np.nan
    deadline = time.monotonic() + 2.0
    while harness.admin.request("status")["mode"] == "run" and time.monotonic() < deadline:
        assert harness.state(q=bad_q)["code"] == "non_finite"
    reason = harness.admin.request("status")["reason"]
    assert re.search(r"watchdog: no state answered for \d+ ms \(\d+ rejected, the last non_finite\)", reason), reason


@pytest.mark.timing
@pytest.mark.parametrize("warm", [False, True])
def test_a_spinning_daemon_answers_every_state_and_still_serves_admin(quadruped, warm):
    """spin_us (polling for the next state without sleeping before it is due): 300 states at 1 kHz all
    answered in order, admin requests answered in between, and the watchdog still stops a run whose
    states stop; with a warmer, the waits are offered to it too."""
    harness = Harness(quadruped, clock="realtime", spin_us=300.0, warm=warm)
    try:
        harness.admin.request("start")
        next_due = time.perf_counter()
        for i in range(300):
            reply = harness.state()
            assert reply["type"] == "command" and reply["seq"] == harness.seq and reply["mode"] == "run", reply
            if i % 50 == 0:
                assert harness.admin.request("status", timeout=1.0)["mode"] == "run"
            next_due += 1e-3
            while time.perf_counter() < next_due:
                pass
        stats = harness.admin.request("stats")
        assert stats["states_skipped"] == 0 and stats["states_dropped"] == 0, stats
        if warm:  # the spins are offered to it (whether a shadow tick fits in one is the host's: test_warmth.py)
            assert harness.daemon.warmer.enabled and harness.daemon.warmer.waits > 0
        time.sleep(0.1)
        status = harness.admin.request("status")
        assert status["mode"] in ("safe_stop", "stopped") and "watchdog" in status["reason"], status
    finally:
        harness.close()


def test_restarted_bridge_resumes_only_after_an_explicit_start(realtime_harness):
    harness = realtime_harness
    harness.admin.request("start")
    harness.state()
    time.sleep(0.1)  # the bridge "dies": the watchdog stops the robot
    new_bridge = harness.dealer()
    try:
        assert harness.exchange(harness.hello("realtime"), socket=new_bridge)["type"] == "welcome"
        for seq in (1, 2, 3):
            reply = harness.exchange(wire.encode_state(seq, 0.0, harness.q, harness.v), socket=new_bridge)
            assert reply["type"] == "command" and reply["mode"] in ("safe_stop", "stopped")
        while harness.admin.request("status")["mode"] != "stopped":
            time.sleep(0.01)
        harness.admin.request("start")
        reply = harness.exchange(wire.encode_state(4, 0.0, harness.q, harness.v), socket=new_bridge)
        assert reply["mode"] == "run"
    finally:
        new_bridge.close(linger=0)


def test_start_is_refused_while_no_driver_is_connected(harness):
    """A start with no driver heard within the watchdog time (at least 0.1 s) is invalid_transition: a run that
    nobody answers would hand torques to whichever driver connects next, without a start after it connected.
    `bridge_connected` says the same, and a start is accepted once the driver speaks again."""
    assert harness.exchange(harness.hello("realtime"))["type"] == "welcome"  # a 20 ms watchdog
    harness.seq = 0
    time.sleep(0.15)
    assert harness.admin.request("status")["bridge_connected"] is False
    with pytest.raises(ProtocolError) as e:
        harness.admin.request("start")
    assert e.value.code == "invalid_transition" and "no driver is connected" in str(e.value)
    assert harness.admin.request("status")["mode"] == "idle"
    assert harness.state()["mode"] == "idle"
    assert harness.admin.request("status")["bridge_connected"] is True
    assert harness.admin.request("start")["mode"] == "run"


def test_admin_requests_and_their_error_replies(harness):
    a = harness.admin
    status = a.request("status")
    assert status["mode"] == "idle" and status["robot"] == "quadruped" and status["formulation"] == "two_stage_qp"
    assert a.request("start")["mode"] == "run"
    with pytest.raises(ProtocolError) as e:
        a.request("start")
    assert e.value.code == "invalid_transition"
    with pytest.raises(ProtocolError) as e:
        a.request("set_formulation", name="magic")
    assert e.value.code == "unknown_name"
    with pytest.raises(ProtocolError) as e:
        a.request("set_formulation")
    assert e.value.code == "missing_field"
    with pytest.raises(ProtocolError) as e:
        a.request("set_gains", kp=-1.0)
    assert e.value.code == "bad_field"
    with pytest.raises(ProtocolError) as e:
        a.request("set_reference", name="moonwalk")
    assert e.value.code in ("unknown_name", "invalid_transition")
    assert a.request("set_gains", kp=100.0, kd=[5.0] * 12)["kd"] == [5.0] * 12
    assert a.request("set_formulation", name="noslip_lcp")["formulation"] == "noslip_lcp"
    assert a.request("stop", reason="test")["mode"] in ("safe_stop", "stopped")
    assert a.request("reset_stats")["request"] == "reset_stats"
    for raw, code in (
        (b"\xc1", "malformed"),
        (msgpack.packb({"v": 1, "type": "dance"}), "unknown_type"),
        (msgpack.packb({"v": 3, "type": "status"}), "bad_version"),
    ):
        with pytest.raises(ProtocolError) as e:
            wire.decode_reply(a.request_raw(raw))
        assert e.value.code == code


def test_switching_formulation_mid_run_misses_no_tick(harness):
    """Every state is answered by a run command while the formulation changes between ticks."""
    harness.admin.request("start")
    names = contact_formulations()
    for i in range(40):
        if i % 10 == 5:
            harness.admin.request("set_formulation", name=names[(i // 10) % len(names)])
        reply = harness.state()
        assert reply["type"] == "command" and reply["mode"] == "run" and reply["seq"] == harness.seq
    stats = harness.admin.request("stats")
    assert stats["ticks"] == 40 and stats["states_skipped"] == 0 and stats["solve_failures"] == 0


def test_telemetry_publishes_one_record_per_command_with_predicted_forces(harness):
    time.sleep(0.2)  # let the subscription reach the publisher (before start: the watchdog counts from start)
    harness.admin.request("start")
    harness.state()
    assert harness.telemetry.poll(2000)
    record = msgpack.unpackb(harness.telemetry.recv(), raw=False)
    assert record["type"] == "telemetry" and record["seq"] == harness.seq and record["mode"] == "run"
    assert len(record["contact_ids"]) == 4
    f_n = np.frombuffer(record["force_normal"], "<f8")
    weight = harness.robot.total_mass() * 9.81
    assert abs(f_n.sum() - weight) < 0.05 * weight  # standing still: the feet carry the weight
    assert np.frombuffer(record["tau"], "<f8").shape == (12,)


def test_records_are_made_only_while_a_telemetry_subscriber_listens(harness):
    """No tick record for nobody: with the harness's subscriber gone (and no log), the daemon sees that none
    listens within TELEMETRY_CHECK_TICKS ticks of the unsubscription reaching it, and stops making records; a
    subscriber that comes in the middle of the run gets records within TELEMETRY_IDLE_CHECK_TICKS ticks of its
    subscription reaching the daemon's socket, and, once the daemon's status says it listens, the record of every
    tick after."""

    def ticks_until(listened: bool) -> int:
        """Ticks (states answered) until the daemon's status says ``listened``, at most 5 s of them."""
        deadline, ticks = time.monotonic() + 5.0, 0
        while harness.admin.request("status")["telemetry_listened"] != listened and time.monotonic() < deadline:
            harness.state()
            ticks += 1
        assert harness.admin.request("status")["telemetry_listened"] == listened
        return ticks

    time.sleep(0.2)
    harness.admin.request("start")
    harness.state()
    assert harness.telemetry.poll(2000)
    assert ticks_until(True) == 0
    harness.telemetry.close(linger=0)
    time.sleep(0.2)  # the unsubscription reaches the daemon's socket
    assert ticks_until(False) <= TELEMETRY_CHECK_TICKS + 1
    late = harness.ctx.socket(zmq.SUB)
    harness.telemetry = late  # closed by the harness, whatever happens here
    late.setsockopt(zmq.LINGER, 0)
    late.setsockopt(zmq.SUBSCRIBE, b"")
    late.connect(harness.daemon.bound["telemetry"])
    time.sleep(0.5)  # the subscription reaches the daemon's socket
    for _ in range(TELEMETRY_IDLE_CHECK_TICKS):  # no status request in between: the ticks alone notice it
        harness.state()
    assert late.poll(2000)
    assert msgpack.unpackb(late.recv(), raw=False)["seq"] <= harness.seq
    ticks_until(True)
    while late.poll(100):  # whatever came before the daemon's status said so
        late.recv()
    for _ in range(3):
        harness.state()
        assert late.poll(2000)
        assert msgpack.unpackb(late.recv(), raw=False)["seq"] == harness.seq


def test_a_logged_run_whose_subscriber_leaves_logs_every_tick_whole(quadruped, tmp_path):
    """A logged daemon whose telemetry subscriber leaves in the middle of the run logs every tick it answered: while
    the subscriber listens, the very record it published; after, the record its log writer builds from the tick's
    snapshot, with the same fields; the ticks' index runs on without a gap."""
    import json

    from mcap.reader import make_reader

    from idcontrol.logs.schema import TICK_TOPIC

    path = tmp_path / "run.mcap"
    h = Harness(quadruped, logger=LogRecorder(path, {"robot": "quadruped"}))
    try:
        time.sleep(0.2)  # the subscription reaches the daemon's socket
        h.admin.request("start")
        published = {}
        for _ in range(20):
            h.state()
            assert h.telemetry.poll(2000)
            record = msgpack.unpackb(h.telemetry.recv(), raw=False)
            published[record["seq"]] = record
        h.telemetry.close(linger=0)
        time.sleep(0.2)  # the unsubscription reaches the daemon's socket
        for _ in range(TELEMETRY_CHECK_TICKS + 40):
            h.state()
        assert h.admin.request("status")["telemetry_listened"] is False
        answered = h.seq
    finally:
        h.close()
    with open(path, "rb") as f:
        logged = [json.loads(m.data) for _, _, m in make_reader(f).iter_messages(topics=[TICK_TOPIC])]
    assert [r["seq"] for r in logged] == list(range(1, answered + 1))
    assert [r["index"] for r in logged] == list(range(answered))
    for r in logged:
        if r["seq"] in published:
            p = published[r["seq"]]
            assert set(r) == set(p) - {"v", "type"} | {"index"}
            np.testing.assert_array_equal(r["tau"], np.frombuffer(p["tau"], "<f8"))
            assert r["coupling"] == p["coupling"] and r["contact_ids"] == p["contact_ids"]
    run_fields = {tuple(sorted(r)) for r in logged}
    assert len(run_fields) == 1, run_fields  # the snapshot's records hold every field the published ones do
    assert answered - len(published) >= 40  # and there were such records


def test_stream_reference_follows_published_targets(harness):
    r = harness.robot
    harness.admin.request("set_reference", name="stream")
    pub = harness.ctx.socket(zmq.PUB)
    pub.connect(harness.daemon.bound["reference"])
    try:
        time.sleep(0.2)
        q_ref = r.joint_positions(harness.q) + 0.01
        pub.send(wire.encode_reference(q_ref, np.zeros(12), np.zeros(12), token=harness.token))
        time.sleep(0.05)
        harness.admin.request("start")
        harness.state()
        assert harness.telemetry.poll(2000)
        record = msgpack.unpackb(harness.telemetry.recv(), raw=False)
        np.testing.assert_allclose(np.frombuffer(record["q_ref"], "<f8"), q_ref)
        q_ref[0] = 100.0  # far outside the joint's limits: clipped, counted
        pub.send(wire.encode_reference(q_ref, np.zeros(12), np.zeros(12), token=harness.token))
        time.sleep(0.05)
        harness.state()
        assert harness.telemetry.poll(2000)
        record = msgpack.unpackb(harness.telemetry.recv(), raw=False)
        assert np.frombuffer(record["q_ref"], "<f8")[0] < 100.0
        assert harness.admin.request("stats")["reference_clipped"] == 1
    finally:
        pub.close(linger=0)


def test_non_loopback_and_malformed_endpoints_are_refused():
    for bad in ("tcp://0.0.0.0:5555", "tcp://10.1.2.3:5555", "udp://127.0.0.1:1", "tcp://127.0.0.1"):
        with pytest.raises(ConfigError):
            Endpoints(control=bad).check()
    for port in ("0", "65536", "99999"):  # ZeroMQ binds 0 to any port and takes 99999 modulo 65536: the bridge is lost
        with pytest.raises(ConfigError, match=r"a TCP port is 1 \.\. 65535"):
            Endpoints(control=f"tcp://127.0.0.1:{port}").check()
    Endpoints(control="tcp://127.0.0.1:65535", admin="tcp://127.0.0.1:*").check()


def test_port_in_use_is_a_clear_config_error(quadruped):
    ctx = zmq.Context()
    blocker = ctx.socket(zmq.PUB)
    port = blocker.bind_to_random_port("tcp://127.0.0.1")
    try:
        core = ControlCore(InverseDynamicsController(quadruped), make_reference("hold", quadruped))
        with pytest.raises(ConfigError, match="in use"):
            Daemon(
                core,
                Endpoints(control=f"tcp://127.0.0.1:{port}", admin="tcp://127.0.0.1:*", telemetry=None),
                context=ctx,
            )
    finally:
        blocker.close(linger=0)
        ctx.term()


@pytest.mark.parametrize("formulation", ["pid", "sensed_id", "coulomb_lcp"])
def test_every_formulation_publishes_telemetry_while_standing_on_its_feet(quadruped, formulation):
    """Formulations that predict no forces (pid) or use sensed ones still yield a valid record."""
    h = Harness(quadruped, formulation=formulation)
    try:
        time.sleep(0.2)
        h.admin.request("start")
        forces = np.tile([0.0, 0.0, quadruped.total_mass() * 9.81 / 4], (4, 1))
        reply = h.state(contact_forces=forces)
        assert reply["type"] == "command" and reply["mode"] == "run"
        assert h.telemetry.poll(2000)
        record = msgpack.unpackb(h.telemetry.recv(), raw=False)
        assert record["formulation"] == formulation and len(record["contact_ids"]) == 4
        np.testing.assert_array_equal(np.frombuffer(record["sensed_forces"], "<f8").reshape(4, 3), forces)
    finally:
        h.close()


def test_a_command_the_bridge_reports_late_is_a_deadline_miss(realtime_harness):
    """last_late counts a miss even with no round trip to judge by; a round trip over the period counts one too."""
    harness = realtime_harness
    harness.state()
    harness.admin.request("start")
    for _ in range(5):
        harness.state(last_rtt_us=300.0)
    assert harness.admin.request("stats")["deadline_misses"] == 0
    harness.state(last_late=True)
    harness.state(last_rtt_us=1200.0)
    stats = harness.admin.request("stats")
    assert stats["deadline_misses"] == 2 and stats["roundtrip_us"]["max"] == 1200.0


def test_a_bridge_that_stopped_the_robot_stops_the_daemon_too(harness):
    """bridge_stopped in a state ends run mode: only an explicit start resumes, on both sides."""
    harness.admin.request("start")
    assert harness.state()["mode"] == "run"
    reply = harness.state(bridge_stopped=True)
    assert reply["mode"] in ("safe_stop", "stopped")
    assert "bridge" in harness.admin.request("status")["reason"]


def test_lockstep_bridge_gets_the_long_watchdog_and_realtime_the_short_one(quadruped):
    """A simulator that announced a lock-step clock may pause 100 ms between states without a stop."""
    h = Harness(quadruped)
    try:
        assert h.exchange(h.hello("lockstep"))["type"] == "welcome"
        h.admin.request("start")
        h.state()
        time.sleep(0.1)
        assert h.state()["mode"] == "run"
    finally:
        h.close()


def test_trot_speed_changes_in_place_while_running_and_other_options_are_refused(quadruped):
    """set_reference with the running reference's name updates it without a restart; the rest is refused."""
    h = Harness(quadruped)
    try:
        h.admin.request("set_reference", name="trot", options={"forward_speed": 0.1})
        h.admin.request("start")
        h.state()
        gait = h.daemon.core.reference
        reply = h.admin.request("set_reference", name="trot", options={"forward_speed": 0.3, "yaw_rate": 0.2})
        assert reply["updated"] == ["forward_speed", "yaw_rate"] and h.daemon.core.reference is gait
        assert gait.desired == (0.3, 0.0, 0.2)
        time.sleep(0.2)
        h.state()
        assert h.telemetry.poll(2000)
        record = msgpack.unpackb(h.telemetry.recv(), raw=False)
        assert set(record["reference"]) == {"phase", "in_stance", "command"}
        with pytest.raises(ProtocolError) as e:
            h.admin.request("set_reference", name="trot", options={"cycle_time": 0.5})
        assert e.value.code == "invalid_transition" and "cycle_time" in str(e.value)
        with pytest.raises(ProtocolError) as e:
            h.admin.request("set_reference", name="hold")
        assert e.value.code == "invalid_transition"
    finally:
        h.close()


def test_in_lockstep_a_miss_is_the_controllers_lateness_and_long_round_trips_are_counted_apart(harness):
    """A lock-step round trip holds the simulator's step: over the period it is a long round trip, not a miss;
    the states are counted by the mode they were answered in."""
    harness.state()
    harness.admin.request("start")
    harness.state(last_rtt_us=1500.0)
    stats = harness.admin.request("stats")
    assert stats["long_roundtrips"] == 1 and stats["mode_ticks"] == {"idle": 1, "run": 1}


def test_deadline_misses_count_round_trips_in_real_time_and_compute_in_lockstep():
    """TickStats: in real time a round trip over the period is a miss; in lock-step only compute over the period
    is (the round trip is counted as long); a reported late command is a miss in both."""
    from idcontrol.daemon.stats import TickStats

    for lockstep, misses in ((False, 3), (True, 2)):
        stats = TickStats(1e-3)
        stats.record(200.0, 1500.0, None, lockstep=lockstep)  # long round trip, quick compute
        stats.record(1200.0, 1300.0, None, lockstep=lockstep)  # the controller itself late
        stats.record(200.0, None, None, previous_late=True, lockstep=lockstep)
        stats.record(200.0, 300.0, None, lockstep=lockstep)
        assert stats.deadline_misses == misses and stats.long_roundtrips == (2 if lockstep else 0)


def test_transport_pairs_each_round_trip_with_the_command_it_timed():
    """A state's last_rtt_us times the previous command: transport is that round trip less that command's compute
    time. Paired with the state's own compute instead, a slow tick after a fast round trip made it negative
    (a flaky summary line under load)."""
    from idcontrol.daemon.stats import TickStats

    stats = TickStats(1e-3)
    stats.record(100.0, None, None, (10.0, 80.0, 10.0))  # the first command: 100 µs of compute
    stats.record(500.0, 150.0, None, (10.0, 480.0, 10.0))  # its round trip 150 µs; this tick slow
    stats.record(90.0, 700.0, None, (10.0, 70.0, 10.0))  # the slow command's round trip
    assert stats.phase_means_us()["transport"] == pytest.approx(((150.0 - 100.0) + (700.0 - 500.0)) / 2)


def test_ipc_endpoints_leave_no_socket_file_behind(quadruped, tmp_path):
    """ipc:// endpoints are files: the daemon removes them when it closes (ZeroMQ leaves them, and a stale one
    misleads the next start)."""
    files = {name: tmp_path / f"{name}.sock" for name in ("control", "admin")}
    endpoints = Endpoints(control=f"ipc://{files['control']}", admin=f"ipc://{files['admin']}", telemetry=None)
    ctx = zmq.Context()
    core = ControlCore(InverseDynamicsController(quadruped), make_reference("hold", quadruped))
    daemon = Daemon(core, endpoints, context=ctx)
    thread = threading.Thread(target=daemon.serve, kwargs={"install_signal_handlers": False})
    thread.start()
    admin = AdminClient(daemon.bound["admin"], context=ctx, token=daemon.credential.token)
    try:
        assert admin.request("status", timeout=120.0)["mode"] == "idle"
        assert all(f.exists() for f in files.values())
        admin.request("shutdown")
    finally:
        thread.join(timeout=10)
        admin.close()
        ctx.term()
    assert not thread.is_alive() and not any(f.exists() for f in files.values())
