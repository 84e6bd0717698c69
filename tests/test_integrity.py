"""Integrity against a real daemon over real sockets: an authorized client's finite input never gives `internal`,
nobody without the credential changes what the robot does, on any channel (docs/protocol.md, "Who may do what,
on each channel"), and a stranger's traffic cannot stop the robot."""

from __future__ import annotations

import contextlib
import json
import os
import socket
import stat
import tempfile
import time
from pathlib import Path

import msgpack
import numpy as np
import pytest
import zmq

from idcontrol import protocol as wire
from idcontrol.client import AdminClient, ReferencePublisher
from idcontrol.errors import ConfigError, ProtocolError
from idcontrol.reference import make_reference
from idcontrol.security import Credential, runtime_dir
from tests.test_daemon import Harness


@pytest.fixture
def harness(quadruped):
    h = Harness(quadruped)
    yield h
    h.close()


def code_of(admin: AdminClient, kind: str, **fields) -> str:
    with pytest.raises(ProtocolError) as e:
        admin.request(kind, **fields)
    return e.value.code


def timed_state(h: Harness, t: float) -> dict:
    """One state of the harness's bridge at bridge time ``t`` (s)."""
    h.seq += 1
    return h.exchange(wire.encode_state(h.seq, t, h.q, h.v))


def swing_one_joint(h: Harness, **options) -> None:
    """The joint sinusoid on the quadruped's first joint (all of them are on legs, so one is named)."""
    h.admin.request("set_reference", name="joint_sinusoid", options={"joints": [h.robot.actuated_joints[0]], **options})


# ------------------------------------------------------------------------------- finite input, authorized client
def test_a_state_time_far_beyond_the_runs_clock_is_a_bad_state(harness):
    """Running the joint sinusoid, a state at t = 1.7e308 s is bad_state (it was `internal`: math.sin of an
    infinite phase); the run goes on with the next ordinary state."""
    swing_one_joint(harness)
    harness.admin.request("start")
    assert timed_state(harness, 0.001)["mode"] == "run"
    reply = timed_state(harness, 1.7e308)
    assert reply["type"] == "error" and reply["code"] == "bad_state", reply
    assert timed_state(harness, 0.002)["mode"] == "run"
    assert harness.admin.request("status")["mode"] == "run"


def test_a_sinusoid_without_a_ramp_takes_a_time_before_its_first(harness):
    """set_reference with ramp_time = 0, then a state earlier than the run's first: a command (it divided by
    zero into `internal`)."""
    swing_one_joint(harness, ramp_time=0.0)
    harness.admin.request("start")
    assert timed_state(harness, 1.0)["mode"] == "run"
    reply = timed_state(harness, 0.5)
    assert reply["type"] == "command" and reply["mode"] == "run", reply


def test_a_reference_that_raises_stops_safely_with_a_named_reason(harness, monkeypatch):
    """A reference whose sample raises is handled like a failed solve: a command that leaves run (a safe stop),
    the reason names the reference and its error, never `internal`."""
    harness.admin.request("start")
    assert harness.state()["mode"] == "run"

    def broken(*_args, **_kwargs):
        raise ValueError("math domain error")

    monkeypatch.setattr(harness.daemon.core.reference, "sample", broken)
    reply = harness.state()
    assert reply["type"] == "command" and reply["mode"] in ("safe_stop", "stopped"), reply  # at rest: stopped at once
    status = harness.admin.request("status")
    assert "reference 'hold' raised ValueError" in status["reason"], status["reason"]
    assert status["interventions"]["solve_failed"] == 1


@pytest.mark.parametrize("option", ["forward_speed", "lateral_speed", "yaw_rate"])
def test_a_running_trot_refuses_a_speed_out_of_range_and_keeps_its_own(quadruped, option):
    """set_reference on the running trot with a speed of 1e308 is refused and the commanded twist is unchanged;
    the same value is refused at start-up."""
    h = Harness(quadruped)
    try:
        h.admin.request("set_reference", name="trot")
        h.admin.request("start")
        h.state()
        before = h.daemon.core.reference.desired
        assert code_of(h.admin, "set_reference", name="trot", options={option: 1e308}) in (
            "invalid_transition",
            "bad_field",
        )
        assert h.daemon.core.reference.desired == before
        assert h.state()["mode"] == "run"
    finally:
        h.close()
    with pytest.raises(ConfigError, match=option):
        make_reference("trot", quadruped, **{option: 1e308})


@pytest.mark.parametrize(("name", "option"), [("two_stage_qp", "ridge"), ("noslip_lcp", "spread")])
def test_infinite_options_are_non_finite(harness, name, option):
    """An option of +inf is non_finite at set_formulation (the doc: every accepted float is finite); the
    formulation is unchanged."""
    assert code_of(harness.admin, "set_formulation", name=name, options={option: float("inf")}) == "non_finite"
    assert code_of(harness.admin, "set_reference", name="trot", options={"forward_speed": float("-inf")}) == (
        "non_finite"
    )
    assert harness.admin.request("status")["formulation"] == "two_stage_qp"


# ------------------------------------------------------------------------------------------ the reference channel
def q_ref_of_next_tick(h: Harness) -> np.ndarray:
    """The q_ref (nu,) of the telemetry record of the harness's next state."""
    while h.telemetry.poll(0):
        h.telemetry.recv()
    assert h.state()["mode"] == "run"
    assert h.telemetry.poll(2000)
    return np.frombuffer(msgpack.unpackb(h.telemetry.recv(), raw=False)["q_ref"], "<f8")


def test_reference_messages_need_the_credential(harness):
    """Following the stream reference, targets without the credential or with a wrong one are dropped and
    counted (the standing robot kept its posture); the planner's publisher, with it, is followed."""
    r = harness.robot
    harness.admin.request("set_reference", name="stream")
    standing = r.joint_positions(harness.q)
    stranger = harness.ctx.socket(zmq.PUB)
    stranger.connect(harness.daemon.bound["reference"])
    planner = ReferencePublisher(harness.daemon.bound["reference"], harness.ctx, token=harness.token)
    try:
        time.sleep(0.2)  # the subscriptions reach the publishers
        harness.admin.request("start")
        moved = standing + 0.05
        for token in (None, "f" * 64, 7):
            message = msgpack.unpackb(wire.encode_reference(moved, np.zeros(r.nu), np.zeros(r.nu)), raw=False)
            if token is not None:
                message["token"] = token
            stranger.send(msgpack.packb(message, use_bin_type=True))
        time.sleep(0.1)
        np.testing.assert_allclose(q_ref_of_next_tick(harness), standing)
        assert harness.admin.request("stats")["reference_unauthorized"] == 3
        planner.publish(moved, np.zeros(r.nu), np.zeros(r.nu))
        time.sleep(0.1)
        np.testing.assert_allclose(q_ref_of_next_tick(harness), moved)
    finally:
        stranger.close(linger=0)
        planner.close()


def test_a_reference_flood_is_bounded_and_the_planners_target_still_wins(harness):
    """A stranger floods the reference channel while the planner publishes once: the planner's target is
    followed, the loop still answers every state, and the flood's messages are counted as dropped."""
    r = harness.robot
    harness.admin.request("set_reference", name="stream")
    standing = r.joint_positions(harness.q)
    stranger = harness.ctx.socket(zmq.PUB)
    stranger.setsockopt(zmq.SNDHWM, 100_000)
    stranger.connect(harness.daemon.bound["reference"])
    planner = ReferencePublisher(harness.daemon.bound["reference"], harness.ctx, token=harness.token)
    try:
        time.sleep(0.2)
        harness.admin.request("start")
        junk = wire.encode_reference(standing - 0.05, np.zeros(r.nu), np.zeros(r.nu), token="0" * 64)
        for _ in range(5_000):
            stranger.send(junk)
        planner.publish(standing + 0.05, np.zeros(r.nu), np.zeros(r.nu))
        for _ in range(5_000):
            stranger.send(junk)
        for _ in range(50):
            assert harness.state()["mode"] == "run"
        np.testing.assert_allclose(q_ref_of_next_tick(harness), standing + 0.05)
        assert harness.admin.request("stats")["reference_unauthorized"] > 0
    finally:
        stranger.close(linger=0)
        planner.close()


# ------------------------------------------------------------------------------------------ the control channel
def test_a_strangers_state_flood_never_displaces_the_sessions_state(harness):
    """A peer without a session floods well-formed states around each of the bridge's: every one of the
    bridge's 50 states is answered with a command (the stranger's used to win the batch and leave it
    unanswered), and the flood beyond its budget is counted as read and dropped."""
    harness.admin.request("start")
    stranger = harness.dealer()
    try:
        for i in range(50):
            for _ in range(100):
                stranger.send(wire.encode_state(10_000 + i, 0.0, harness.q, harness.v))
            harness.seq += 1
            harness.bridge.send(wire.encode_state(harness.seq, harness.seq * 1e-3, harness.q, harness.v))
            for _ in range(100):
                stranger.send(wire.encode_state(20_000 + i, 0.0, harness.q, harness.v))
            assert harness.bridge.poll(2000), f"state {i} of the bridge unanswered"
            reply = msgpack.unpackb(harness.bridge.recv(), raw=False)
            assert reply["type"] == "command" and reply["mode"] == "run", reply
        stats = harness.admin.request("stats")
        assert stats["foreign_unread"] > 0 and stats["states_dropped"] == 0
    finally:
        stranger.close(linger=0)


@pytest.mark.timing
def test_the_watchdog_counts_from_the_states_arrival(quadruped, monkeypatch):
    """A real-time session with a 100 ms watchdog whose one state takes 60 ms to tick: the watchdog safe-stops
    100 ms after that state reached the daemon, not 100 ms after its command left (160 ms). The two differ by the
    tick's 60 ms, so a shared machine's scheduling delays (a few ms, tens at worst) cannot blur them."""
    watchdog_ms, tick_ms = 100.0, 60.0
    h = Harness(quadruped, clock="realtime", watchdog=watchdog_ms * 1e-3)
    try:
        h.admin.request("start")
        core = h.daemon.core
        tick = core.tick

        def slow_tick(*args, **kwargs):
            time.sleep(tick_ms * 1e-3)
            return tick(*args, **kwargs)

        monkeypatch.setattr(core, "tick", slow_tick)
        h.seq += 1
        sent = time.monotonic()
        assert h.exchange(wire.encode_state(h.seq, 0.0, h.q, h.v))["mode"] == "run"
        while core.mode == "run":
            time.sleep(0.001)
        stopped_after_ms = (core._safe_stop_started - sent) * 1e3
        print(
            f"\nwatchdog: safe stop {stopped_after_ms:.2f} ms after the state was sent "
            f"(watchdog {watchdog_ms:.0f} ms, tick {tick_ms:.0f} ms)"
        )
        assert stopped_after_ms >= watchdog_ms - 1.0  # not before the watchdog's time
        assert stopped_after_ms < watchdog_ms + tick_ms / 2  # counted from the send, it would be watchdog + tick
    finally:
        h.close()


# ------------------------------------------------------------------------------- the runtime directory, ipc://
def test_a_symlinked_runtime_directory_is_refused_and_its_target_untouched(tmp_path, monkeypatch):
    """A runtime directory that is a symbolic link (planted by another user, say) is refused, saying so; its
    target keeps its mode and gets no credential (it used to be made 0700 and written into)."""
    victim = tmp_path / "victim"
    victim.mkdir()
    victim.chmod(0o755)
    link = tmp_path / "link"
    link.symlink_to(victim)
    monkeypatch.setenv("IDCONTROL_RUNTIME_DIR", str(link))
    with pytest.raises(ConfigError, match="symbolic link"):
        Credential.create("tcp://127.0.0.1:5555")
    assert stat.S_IMODE(os.stat(victim).st_mode) == 0o755 and not list(victim.iterdir())


def test_channels_a_launch_file_does_not_name_are_private_ipc_sockets(tmp_path, monkeypatch):
    """A launch file without [endpoints] gets control, admin and telemetry as ipc:// sockets in the user's 0700
    runtime directory (no other user's process can open them) and no reference channel; named endpoints are kept
    as written."""
    from idcontrol.settings import load_launch

    runtime = tmp_path / "runtime"
    monkeypatch.setenv("IDCONTROL_RUNTIME_DIR", str(runtime))
    text = (Path(__file__).parents[1] / "launch" / "quadruped_stand.toml").read_text()
    private = tmp_path / "private.toml"
    private.write_text(text)
    endpoints = load_launch(private, check_formulations=False).endpoints
    assert (endpoints.control, endpoints.admin, endpoints.telemetry, endpoints.reference) == (
        f"ipc://{runtime}/control",
        f"ipc://{runtime}/admin",
        f"ipc://{runtime}/telemetry",
        None,
    )
    assert stat.S_IMODE(os.stat(runtime).st_mode) == 0o700 and os.stat(runtime).st_uid == os.getuid()
    named = tmp_path / "named.toml"
    named.write_text(text + '\n[endpoints]\ncontrol = "tcp://127.0.0.1:5555"\ntelemetry = "tcp://127.0.0.1:5557"\n')
    endpoints = load_launch(named, check_formulations=False).endpoints
    assert (endpoints.control, endpoints.admin, endpoints.telemetry) == (
        "tcp://127.0.0.1:5555",
        f"ipc://{runtime}/admin",
        "tcp://127.0.0.1:5557",
    )


def test_every_shipped_launch_file_binds_only_private_ipc_sockets(runtime_dir_of_the_test):
    """Every launch/*.toml binds each of its channels as an ipc:// socket in the user's private runtime directory,
    so no TCP port that another user of the machine reaches: run as shipped, they used to bind loopback ports."""
    from idcontrol.settings import load_launch

    shipped = sorted((Path(__file__).parents[1] / "launch").glob("*.toml"))
    assert len(shipped) >= 19
    for path in shipped:
        for channel, endpoint in load_launch(path, check_formulations=False).endpoints.items():
            assert endpoint == f"ipc://{runtime_dir_of_the_test}/{channel}", (path.name, endpoint)


def test_the_default_runtime_directory_in_tmp_is_refused_when_linked_or_open(tmp_path, monkeypatch):
    """<tmp>/idcontrol-<uid>: a symbolic link there is refused, and so is a directory others may enter; a
    missing one is made 0700."""
    monkeypatch.delenv("IDCONTROL_RUNTIME_DIR", raising=False)
    monkeypatch.delenv("XDG_RUNTIME_DIR", raising=False)
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    default = tmp_path / f"idcontrol-{os.getuid()}"
    assert runtime_dir() == default and stat.S_IMODE(os.stat(default).st_mode) == 0o700
    default.chmod(0o755)
    with pytest.raises(ConfigError, match="open to others"):
        runtime_dir()
    default.rmdir()
    default.symlink_to(tmp_path)
    with pytest.raises(ConfigError, match="symbolic link"):
        runtime_dir()


def test_a_second_daemon_on_ipc_endpoints_is_refused_and_leaves_the_first_alone(quadruped, tmp_path, monkeypatch):
    """A second daemon on the ipc:// endpoints of a running one refuses to start, naming the endpoint; the
    first keeps its socket files and its credential (the second used to replace both, and delete them on exit).
    A socket file nobody serves (a daemon that died) is bound over."""
    from idcontrol.control.controller import InverseDynamicsController
    from idcontrol.control.core import ControlCore
    from idcontrol.daemon.server import Daemon
    from idcontrol.settings import Endpoints

    monkeypatch.setenv("IDCONTROL_RUNTIME_DIR", str(tmp_path / "run"))
    endpoints = Endpoints(f"ipc://{tmp_path}/control", f"ipc://{tmp_path}/admin", None)
    ctx = zmq.Context()
    core = ControlCore(InverseDynamicsController(quadruped), make_reference("hold", quadruped))
    first = Daemon(core, endpoints, context=ctx)
    try:
        with pytest.raises(ConfigError, match="running process"):
            Daemon(core, endpoints, context=ctx)
        assert (tmp_path / "control").exists() and (tmp_path / "admin").exists()
        assert Credential.of_daemon(endpoints.control).token == first.credential.token
        dealer = ctx.socket(zmq.DEALER)  # the first daemon still takes connections on its path
        dealer.connect(endpoints.control)
        dealer.send(b"x")
        assert first.control.poll(2000)
        dealer.close(linger=0)
    finally:
        first.close()
    stale = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    stale.bind(str(tmp_path / "control"))  # a dead daemon's file: nobody listens on it
    stale.close()
    Daemon(core, endpoints, context=ctx).close()
    ctx.term()


# ------------------------------------------------------------------------------- telemetry and the log writer
def test_a_telemetry_subscription_flood_neither_commands_nor_stalls_the_loop(harness):
    """A stranger sends 100 000 distinct subscriptions and some raw bytes to the telemetry socket while the
    robot runs: every state is answered in run mode, no round trip takes 0.3 s (reading them all at once, 500
    states took over 10 minutes), the topics beyond the tracked ones are counted, and an ordinary subscriber
    still gets records."""
    stranger = harness.ctx.socket(zmq.XSUB)
    stranger.setsockopt(zmq.SNDHWM, 0)
    stranger.connect(harness.daemon.bound["telemetry"])
    try:
        for i in range(100_000):
            stranger.send(b"\x01" + i.to_bytes(4, "little"))
        stranger.send(b"\x02not a subscription")
        time.sleep(0.5)  # the subscriptions reach the daemon's socket
        harness.state()  # the bridge is there: start is allowed
        harness.admin.request("start")
        slowest = 0.0
        for _ in range(500):
            started = time.perf_counter()
            assert harness.state()["mode"] == "run"
            slowest = max(slowest, time.perf_counter() - started)
        stats = harness.admin.request("stats")
        assert stats["telemetry_topics_ignored"] > 0
        assert slowest < 0.3, f"a state took {slowest * 1e3:.0f} ms to answer"  # a loaded machine: tens of ms
        while harness.telemetry.poll(0):
            harness.telemetry.recv()
        harness.state()
        assert harness.telemetry.poll(2000)
    finally:
        stranger.close(linger=0)


def test_the_log_ring_is_private_to_the_daemons_user():
    """The shared-memory ring between the daemon and its log writer is created 0600: another user cannot open
    it, so cannot write records into the log or read the ticks."""
    from idcontrol.logs.ring import Ring

    ring = Ring.create(1 << 16)
    try:
        assert stat.S_IMODE(os.stat(f"/dev/shm/{ring.name.lstrip('/')}").st_mode) == 0o600
    finally:
        ring.forget_name()
        ring.close()


# ------------------------------------------------------------------------------------------------ routing ids
def test_a_peer_reusing_a_closed_sessions_routing_id_gets_no_command(harness):
    """A driver that set its own routing id opens a session and disconnects; a stranger connecting with the same
    id and no credential gets `unauthorized` for its states, never a command (it used to get run commands), and
    the driver itself, back with its credential, opens a new session."""
    harness.admin.request("start")  # the harness's own bridge is alive: start is allowed
    r = harness.robot
    ident = b"my-robot-driver"

    def connect() -> zmq.Socket:
        s = harness.ctx.socket(zmq.DEALER)
        s.setsockopt(zmq.LINGER, 0)
        s.setsockopt(zmq.ROUTING_ID, ident)
        s.connect(harness.daemon.bound["control"])
        return s

    harness.bridge.close(linger=0)  # the session's client goes: the driver below takes over after the watchdog
    time.sleep(1.1)
    driver = connect()
    assert harness.exchange(harness.hello(), socket=driver)["type"] == "welcome"
    assert harness.exchange(wire.encode_state(1, 0.001, harness.q, harness.v), socket=driver)["type"] == "command"
    driver.close(linger=0)
    time.sleep(0.2)  # the daemon's socket notices the connection closed
    stranger = connect()
    try:
        for seq in range(2, 7):
            reply = harness.exchange(wire.encode_state(seq, seq * 1e-3, harness.q, harness.v), socket=stranger)
            assert reply["type"] == "error" and reply["code"] == "unauthorized", reply
        hello = wire.encode_hello(r.name, r.nq, r.nv, r.nu, "lockstep", harness.token)
        assert harness.exchange(hello, socket=stranger)["type"] == "welcome"  # with the credential: a session
    finally:
        stranger.close(linger=0)
        harness.bridge = harness.dealer()  # for the harness's shutdown


# ------------------------------------------------------------------------------------------------ the live view
def live_server(**policy):
    from idcontrol.tools.live_server import LiveServer, ViewerPolicy

    server = LiveServer("test", policy=ViewerPolicy(**policy), backlog=8)
    return server, server.add_channel("/probe", "Probe", b'{"type": "object"}')


def open_viewer(port: int, origin: str | None = None, **options):
    """A Foxglove WebSocket client, as a browser page of ``origin`` would open it (None: a program)."""
    from websockets.sync.client import connect

    options.setdefault("close_timeout", 1.0)
    return connect(f"ws://127.0.0.1:{port}", subprotocols=["foxglove.websocket.v1"], origin=origin, **options)


def refused_with(port: int, origin: str | None = None) -> int | None:
    """The HTTP status the live view refused a viewer with (None: accepted)."""
    from websockets.exceptions import InvalidStatus

    try:
        with open_viewer(port, origin):
            return None
    except InvalidStatus as e:
        return e.response.status_code


def test_the_live_view_serves_a_web_page_only_from_an_allowed_origin():
    """A browser page from an origin not on the allow-list is refused in the handshake (HTTP 403) and never reads
    the robot's state; Foxglove's web app and a program (no Origin) are served; with programs refused, only the
    listed origins are."""
    server, _ = live_server()
    try:
        assert refused_with(server.port, "https://evil.example") == 403
        assert refused_with(server.port, "http://127.0.0.1:8000") == 403
        assert refused_with(server.port, "https://app.foxglove.dev") is None
        assert refused_with(server.port, None) is None
        assert server.stats.refused_origin == 2 and server.stats.accepted == 2
    finally:
        server.stop()
    server, _ = live_server(origins=("https://viewer.lab.example",), programs=False)
    try:
        assert refused_with(server.port, None) == 403
        assert refused_with(server.port, "https://app.foxglove.dev") == 403
        assert refused_with(server.port, "https://viewer.lab.example") is None
    finally:
        server.stop()


def test_the_live_view_bounds_its_viewers_and_disconnects_one_that_never_reads():
    """Beyond the viewer limit the next viewer is refused (HTTP 503) until one leaves; a subscribed viewer that
    never reads costs at most its queue (the oldest messages are dropped and counted) and is disconnected once its
    socket takes no data for the send timeout, after which a new viewer is served."""
    server, channel = live_server(max_viewers=2, send_timeout_s=0.5)
    try:
        with contextlib.ExitStack() as viewers:
            first = viewers.enter_context(open_viewer(server.port))
            viewers.enter_context(open_viewer(server.port))
            assert refused_with(server.port) == 503 and server.stats.refused_full == 1
            first.close()
            deadline = time.monotonic() + 5
            while server.viewers() > 1 and time.monotonic() < deadline:
                time.sleep(0.02)
            slow = viewers.enter_context(open_viewer(server.port, max_queue=1))  # stops reading once a frame waits
            slow.recv(timeout=5), slow.recv(timeout=5)  # serverInfo, advertise
            slow.send(json.dumps({"op": "subscribe", "subscriptions": [{"id": 3, "channelId": channel}]}))
            time.sleep(0.2)
            payload = b"x" * 100_000
            deadline = time.monotonic() + 10
            while server.stats.disconnected_slow == 0 and time.monotonic() < deadline:
                server.log(channel, payload, time.time_ns())
                time.sleep(0.005)
            assert server.stats.disconnected_slow == 1 and server.stats.dropped > 0, server.stats
            assert server.viewers() == 1  # the second, which never subscribed, stays
            with open_viewer(server.port) as viewer:
                assert json.loads(viewer.recv(timeout=5))["op"] == "serverInfo"
    finally:
        server.stop()


def test_the_viewers_flood_holds_connections_that_never_read_and_reopens_the_refused():
    """`idcontrol flood --kind viewers` against a live view that serves 2: it keeps opening connections that
    subscribe and never read, the view refuses all but 2 with HTTP 503, and the flood opens a new one for each."""
    import dataclasses
    from pathlib import Path

    from idcontrol.settings import TelemetrySettings, load_launch
    from idcontrol.tools.flood import flood

    server, _ = live_server(max_viewers=2)
    try:
        config = load_launch(Path(__file__).parents[1] / "launch" / "quadruped_stand.toml", check_formulations=False)
        config = dataclasses.replace(config, telemetry=TelemetrySettings(foxglove=server.port))
        report = flood(config, "viewers", 1.5, connections=20)
        assert report.sent > 20 and report.refused > 0 and report.connections >= 2, report
        assert server.stats.accepted >= 2 and server.stats.refused_full > 0, server.stats
    finally:
        server.stop()
