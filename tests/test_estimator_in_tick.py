"""The floating-base estimator in the control tick (issue 45): the launch file's [estimator], the sensor form of the
state on the wire and from the simulator bridges, the core's safe stop on an untrustworthy estimate, and closed loops
in MuJoCo on what a robot measures (typical sensors), judged on the simulator's truth."""

from __future__ import annotations

import math
from dataclasses import replace

import msgpack
import numpy as np
import pytest

from idcontrol import protocol as wire
from idcontrol.control.factory import build_core
from idcontrol.control.modes import MODE_RUN, MODE_SAFE_STOP, MODE_STOPPED
from idcontrol.control.state import ImuReading, RobotState
from idcontrol.errors import ConfigError
from idcontrol.settings import load_launch, parse_launch
from idcontrol.sim.launch import simulator_for
from idcontrol.testing import run_over_protocol
from idcontrol.tools.estimator_eval import closed_loop
from tests.conftest import REPO

STAND = REPO / "launch" / "stand_estimated.toml"
TROT = REPO / "launch" / "trot_estimated.toml"


def _launch_table(**estimator) -> dict:
    import tomllib

    data = tomllib.loads(STAND.read_text())
    data["estimator"] = estimator
    return data


# ---------------------------------------------------------------------------------------------------- settings
@pytest.mark.parametrize(
    ("estimator", "message"),
    [
        ({"kind": "ekf"}, "estimator.kind must be one of"),
        ({"kind": "inekf", "noise": {"gyro": 1.0}}, "unknown key(s) ['gyro']"),
        ({"kind": "inekf", "bounds": {"max_tilt_std": -1.0}}, "max_tilt_std must be a finite number >= 0"),
        ({"kind": "inekf", "contact_threshold": 0.0}, "contact_threshold must be in (0, 1]"),
        ({"kind": "inekf", "filter": "lkf"}, "unknown key(s) ['filter']"),
    ],
)
def test_a_bad_estimator_table_is_refused_naming_the_key(estimator, message):
    """[estimator] is validated when the launch file is read; the error names the key."""
    with pytest.raises(ConfigError) as e:
        parse_launch(_launch_table(**estimator), STAND)
    assert message in str(e.value)


def test_an_estimator_needs_the_controllers_stance_decision():
    """The estimator's stance feet are the controller's estimated contacts: with the paper's world contacts the
    file is refused."""
    data = _launch_table(kind="lkf")
    data["controller"]["contacts"] = "world"
    with pytest.raises(ConfigError, match='needs controller.contacts = "estimated"'):
        parse_launch(data, STAND)


def test_the_estimated_launch_files_use_the_sensor_form_and_the_invariant_ekf():
    """launch/stand_estimated.toml and trot_estimated.toml: the bridge sends the IMU, not the base; the core runs the
    invariant EKF; `--robot` replaces the robot."""
    for path in (STAND, TROT):
        config = load_launch(path).with_overrides(robot="solo12")
        assert config.robot == "solo12"
        assert config.bridge.sensors.base == "imu" and config.bridge.sensors.preset == "typical"
        assert config.estimator.settings().filter == "inekf"
    assert load_launch(REPO / "launch" / "trot_hw.toml").estimator.settings() is None  # kind "none": as before


# ---------------------------------------------------------------------------------------------------- the wire
SHAPE = wire.RobotShape(
    "quadruped",
    nq=19,
    nv=18,
    joint_names=tuple(f"j{i}" for i in range(12)),
    contact_names=("LF", "RF", "LH", "RH"),
    object_names=(),
)


def test_the_sensor_form_carries_the_joints_and_the_imu_bit_exact():
    """A state encoded with an IMU sends the joints alone; decoded, q and qd hold the origin, level, at rest, then
    the joints, and the IMU's arrays are the ones sent."""
    rng = np.random.default_rng(0)
    q, v = rng.normal(size=19), rng.normal(size=18)
    imu = ImuReading(np.array([0.0, 0.1, 0.0, math.sqrt(0.99)]), rng.normal(size=3), rng.normal(size=3), 0.249)
    raw = wire.encode_state(3, 0.25, q, v, imu=imu)
    assert len(msgpack.unpackb(raw, raw=False)["q"]) == 8 * 12
    state = wire.decode_control(raw, SHAPE).state
    assert np.array_equal(state.q, np.r_[0, 0, 0, 0, 0, 0, 1, q[7:]])
    assert np.array_equal(state.v, np.r_[np.zeros(6), v[6:]])
    assert np.array_equal(state.imu.orientation_xyzw, imu.orientation_xyzw)
    assert np.array_equal(state.imu.angular_velocity, imu.angular_velocity)
    assert np.array_equal(state.imu.linear_acceleration, imu.linear_acceleration) and state.imu.t == 0.249


def test_the_full_form_is_unchanged_and_may_carry_an_imu_too():
    """Without an IMU a state decodes as before (imu None); a full q with an IMU keeps its base."""
    q = np.r_[0.1, 0.2, 0.3, 0, 0, 0, 1, np.arange(12.0)]
    state = wire.decode_control(wire.encode_state(1, 0.0, q, np.zeros(18)), SHAPE).state
    assert state.imu is None and np.array_equal(state.q, q)
    message = msgpack.unpackb(wire.encode_state(1, 0.0, q, np.zeros(18)), raw=False)
    message["imu"] = {
        "orientation_xyzw": [0.0, 0.0, 0.0, 1.0],
        "angular_velocity": [0.0] * 3,
        "linear_acceleration": [0.0, 0.0, 9.81],
    }
    state = wire.decode_control(msgpack.packb(message, use_bin_type=True), SHAPE).state
    assert np.array_equal(state.q, q) and state.imu.t is None


def test_a_daemon_without_an_estimator_refuses_a_state_without_its_base():
    """The joints alone are a state only for a receiver that estimates the base; otherwise a bad_field naming it."""
    imu = ImuReading(np.array([0.0, 0.0, 0.0, 1.0]), np.zeros(3), np.array([0.0, 0.0, 9.81]))
    raw = wire.encode_state(1, 0.0, np.r_[np.zeros(6), 1, np.zeros(12)], np.zeros(18), imu=imu)
    with pytest.raises(wire.ProtocolError) as e:
        wire.decode_control(raw, SHAPE, estimates=False)
    assert e.value.code == "bad_field" and "no estimator" in str(e.value)


def test_a_non_finite_imu_reaches_the_core_a_malformed_one_is_refused():
    """A NaN in the IMU is a sensor failure for the estimator to judge (the core stops safely), not a bad message;
    an IMU array of the wrong length is a bad_field."""
    imu = ImuReading(np.array([0.0, 0.0, 0.0, 1.0]), np.array([np.nan, 0.0, 0.0]), np.zeros(3))
    state = wire.decode_control(
        wire.encode_state(1, 0.0, np.r_[np.zeros(6), 1, np.zeros(12)], np.zeros(18), imu=imu), SHAPE
    ).state
    assert np.isnan(state.imu.angular_velocity[0])
    message = msgpack.unpackb(
        wire.encode_state(1, 0.0, np.r_[np.zeros(6), 1, np.zeros(12)], np.zeros(18), imu=imu), raw=False
    )
    message["imu"]["linear_acceleration"] = [0.0, 9.81]
    with pytest.raises(wire.ProtocolError) as e:
        wire.decode_control(msgpack.packb(message, use_bin_type=True), SHAPE)
    assert e.value.code == "bad_field" and "imu.linear_acceleration" in str(e.value)


def test_the_log_rebuilds_a_sensor_form_state_with_the_base_the_daemon_decoded():
    """A tick the daemon logs as a snapshot (the state's bytes as received) is rebuilt with q and qd as the daemon
    decoded them: the sensor form's empty base, then the joints (not the joints alone: a log's q is always nq long)."""
    from idcontrol.control.core import Command
    from idcontrol.logs.snapshot import pack_snapshot, record_from_snapshot

    rng = np.random.default_rng(1)
    imu = ImuReading(np.array([0.0, 0.0, 0.0, 1.0]), rng.normal(size=3), rng.normal(size=3), 0.1)
    raw = wire.encode_state(5, 0.1, rng.normal(size=19), rng.normal(size=18), imu=imu)
    decoded = wire.decode_control(raw, SHAPE).state
    snapshot = pack_snapshot(
        raw,
        Command(np.zeros(12), "idle", 0.1),
        compute_us=1.0,
        now=0.0,
        contact_labels=None,
        coupling=None,
        log_dropped=0,
    )
    record = record_from_snapshot(msgpack.unpackb(snapshot, raw=False))
    assert np.array_equal(np.frombuffer(record["q"], dtype="<f8"), decoded.q)
    assert np.array_equal(np.frombuffer(record["qd"], dtype="<f8"), decoded.v)


# ---------------------------------------------------------------------------------------------------- the core
@pytest.fixture(scope="module")
def stand_core(quadruped):
    return build_core(load_launch(STAND), quadruped)


def _at_rest(robot, t: float, gyro_x: float = 0.0) -> RobotState:
    """The standing robot's joints and a level IMU at rest, in the sensor form (no base)."""
    q = robot.standing_configuration().copy()
    q[:7] = (0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 1.0)
    imu = ImuReading(np.array([0.0, 0.0, 0.0, 1.0]), np.array([gyro_x, 0.0, 0.0]), np.array([0.0, 0.0, 9.81]), t)
    return RobotState(q, np.zeros(robot.nv), t, imu=imu)


def test_welcome_says_the_daemon_wants_sensors_and_which_filter_estimates(stand_core):
    """A core with an estimator asks for the sensor form and names its filter; the daemon's welcome carries both."""
    assert (stand_core.state_form, stand_core.estimator_kind) == ("sensors", "inekf")
    welcome = msgpack.unpackb(
        wire.encode_welcome(SHAPE, 1e-3, "idle", stand_core.state_form, stand_core.estimator_kind), raw=False
    )
    assert (welcome["state_form"], welcome["estimator"]) == ("sensors", "inekf")
    plain = msgpack.unpackb(wire.encode_welcome(SHAPE, 1e-3, "idle"), raw=False)
    assert (plain["state_form"], plain["estimator"]) == ("full", "none")


def test_the_core_controls_from_the_estimated_base(stand_core, quadruped):
    """In run mode the state the controller sees has the estimator's base: over the origin, its lowest foot on the
    ground, level, at rest (the sensor form's placeholder base at z = 0 would be a fallen robot)."""
    core = stand_core
    core.reset()
    core.start(0.0)
    for i in range(5):
        out = core.tick(_at_rest(quadruped, i * 1e-3, 1e-4 * (i % 2)), now=i * 1e-3)
        assert out.mode == MODE_RUN, core.reason
    estimate = core.estimator.estimate
    assert estimate.healthy
    assert estimate.q[2] == pytest.approx(quadruped.standing_configuration()[2], abs=0.01)
    assert np.allclose(estimate.q[3:7], [0.0, 0.0, 0.0, 1.0], atol=1e-3)
    core.stop("test", 0.01)


@pytest.mark.parametrize(
    ("spoil", "words"),
    [
        ("nan", "the IMU reading is not finite"),
        ("frozen", "the IMU is stale"),
        ("old", "the IMU is stale: sampled 20.0 ms ago"),
        ("none", "the state carries no IMU reading"),
    ],
)
def test_an_untrustworthy_estimate_stops_safely_and_names_the_reason(stand_core, quadruped, spoil, words):
    """A non-finite IMU, a frozen one (the same reading tick after tick), an old sample, or no IMU at all: the core
    leaves run mode for a safe stop (a damping stop, over at once for a robot at rest) whose reason says so; it never
    sends a torque computed from that estimate."""
    core = stand_core
    core.reset()
    core.start(0.0)
    t = 0.0
    for i in range(3):
        t = i * 1e-3
        assert core.tick(_at_rest(quadruped, t, 1e-4 * (i % 2)), now=t).mode == MODE_RUN, core.reason
    modes = []
    for i in range(3, 12):
        t = i * 1e-3
        state = _at_rest(quadruped, t, 1e-4 * (i % 2))
        if spoil == "nan":
            state.imu.linear_acceleration[2] = math.nan
        elif spoil == "frozen":
            state.imu = _at_rest(quadruped, 2e-3, 0.0).imu
            state.imu.t = t
        elif spoil == "old":
            state.imu.t = t - 0.02
        else:
            state.imu = None
        out = core.tick(state, now=t)
        modes.append(out.mode)
        if out.mode != MODE_RUN:
            assert out.event == "estimator" and words in out.note
            break
    assert modes[-1] in (MODE_SAFE_STOP, MODE_STOPPED) and words in core.reason, core.reason  # at rest: stopped
    assert core.reason.startswith("estimate not trustworthy")


def test_the_sensor_form_bridge_reports_the_imu_and_no_base(quadruped):
    """With base = "imu" the sensed simulator's state holds no base pose (the origin, level, at rest) while its truth
    does; at rest the accelerometer reads about +9.81 m/s² up and the gyro about zero."""
    config = load_launch(STAND)
    sim = simulator_for(config, quadruped)
    for _ in range(3):
        sim.step(np.zeros(quadruped.nu))
    s, truth = sim.state(), sim.truth()
    assert np.array_equal(s.q[:7], [0, 0, 0, 0, 0, 0, 1]) and not np.any(s.v[:6])
    assert truth.q[2] > 0.1
    assert s.imu is not None
    assert np.linalg.norm(s.imu.linear_acceleration - [0.0, 0.0, 9.81]) < 1.0
    assert np.linalg.norm(s.imu.angular_velocity) < 0.05
    assert s.robot_state().imu is s.imu


# ---------------------------------------------------------------------------------------------------- closed loops
def test_the_quadruped_stands_on_its_imu_and_encoders(quadruped):
    """launch/stand_estimated.toml (typical sensors and actuators, the base estimated in the tick): 3 s in run mode,
    the true base does not fall, and the estimate the controller used stays within 1 cm of the true height and, after
    the first second, within 0.5° of the true tilt (the filter starts from the IMU's attitude, 0.5° off, and takes the
    tilt from gravity)."""
    errors = closed_loop(load_launch(STAND), 3.0, quadruped)
    assert errors.ticks == 3000 and not errors.fell, errors.end_reason
    assert errors.height_max < 0.01 and math.degrees(errors.tilt_settled) < 0.5, errors.as_row()


@pytest.mark.parametrize("formulation", ["two_stage_qp", "coulomb_lcp"])
def test_the_quadruped_trots_on_its_imu_and_encoders(formulation, quadruped):
    """launch/trot_estimated.toml at 0.2 m/s: 5 s in run mode without a fall (truth), at least 0.5 m travelled,
    the estimate within the issue's targets (height 1 cm, velocity RMS 0.05 m/s, drift 2 %) and, after the first
    second, within 0.5° of the true tilt. The Coulomb LCP's answers load one diagonal pair of the four stance feet in
    double support, and the other two lift: held still by the estimator, they dragged it (drift 15.9 % in 10 s)."""
    config = load_launch(TROT).with_overrides(formulation=formulation)
    errors = closed_loop(replace(config, duration=5.0), 5.0, quadruped)
    assert errors.ticks == 5000 and not errors.fell, errors.end_reason
    assert errors.distance > 0.5
    row = errors.as_row()
    assert errors.height_max < 0.01 and math.degrees(errors.tilt_settled) < 0.5, row
    assert errors.velocity_rms < 0.05 and errors.drift_percent < 2.0, row


def test_the_daemon_estimates_the_base_from_the_sensor_form_over_the_protocol():
    """launch/stand_estimated.toml as processes (daemon and bridge over the wire): the bridge sends the joints and the
    IMU alone, the daemon estimates the base and keeps the robot in run mode for 1 s (an untrustworthy estimate, or a
    base taken from the sensor form's empty one, would have stopped it)."""
    run = run_over_protocol(load_launch(STAND), 1.0)
    assert run.end_mode == "run" and run.ticks_in_run >= 990, run.end_reason
    assert np.array_equal(run.q[-1][:7], [0, 0, 0, 0, 0, 0, 1])  # the received states carry no base: the log's truth


# ---------------------------------------------------------------------------------------------------- repeats, starts
def test_a_state_sent_again_at_the_same_time_is_not_a_frozen_imu(quadruped):
    """A driver that sends its last state again without its time advancing (a simulated robot held still at the start
    of a run whose first commands were late) repeats the IMU's reading but not a sample: the run goes on, the estimate
    trustworthy; the same reading while time advances is still a frozen IMU (stale)."""
    config = load_launch(STAND)
    core = build_core(config, quadruped)
    sim = simulator_for(config, quadruped)
    for _ in range(3):
        sim.step(np.zeros(quadruped.nu))
    state = sim.state().robot_state()  # MuJoCo's sensor form: the joints and the typical IMU
    core.start(0.0)
    for i in range(12):  # more than max_repeats (5) times the same state, at the same t
        out = core.tick(state, now=i * 1e-3)
        assert out.mode == MODE_RUN, core.reason
        assert out.estimate.healthy, out.estimate.reason
    imu = state.imu
    for i in range(1, 12):  # the same reading while time advances: a frozen sensor
        t = state.t + i * 1e-3
        frozen = ImuReading(imu.orientation_xyzw, imu.angular_velocity, imu.linear_acceleration, t)
        out = core.tick(replace(state, t=t, imu=frozen), now=0.012 + i * 1e-3)
        if out.mode != MODE_RUN:
            break
    assert out.event == "estimator" and "the IMU is stale" in core.reason, core.reason
    assert i == 5  # max_repeats (5) repeats, counted from the first tick whose time advanced


def _moving(robot, t: float, joint_speed: float, gyro: float) -> RobotState:
    """The standing robot's joints and a level IMU, one knee turning at ``joint_speed`` rad/s and the base at ``gyro``
    rad/s about x (a robot still moving when its safe stop timed out)."""
    state = _at_rest(robot, t, gyro)
    state.v[6 + 2] = joint_speed
    return state


def test_a_run_started_on_a_moving_robot_damps_it_to_rest_before_it_estimates(quadruped):
    """The estimator starts from a robot at rest. A start after a PD-hold safe stop that timed out on a moving robot
    does not control from an estimate that takes it to be at rest: while the encoders or the gyro say it moves, the run
    damps the joints (each torque opposes its joint's velocity) with no estimate, saying why with the numbers; once it
    is still, the estimator starts and the run is trustworthy. A robot that does not come to rest within
    safe_stop_timeout stops the run safely, saying so."""
    config = load_launch(STAND)
    safety = replace(config.safety, safe_controller="pd_hold", safe_stop_timeout=0.01)
    core = build_core(replace(config, safety=safety), quadruped)
    core.start(0.0)
    t = 0.0
    for i in range(3):
        t = i * 1e-3
        assert core.tick(_at_rest(quadruped, t, 1e-4 * (i % 2)), now=t).mode == MODE_RUN, core.reason
    core.stop("test", t)
    for i in range(3, 30):  # the PD hold times out, the robot still moving
        t = i * 1e-3
        core.tick(_moving(quadruped, t, 2.0, 0.6), now=t)
    assert core.mode == MODE_STOPPED and "safe stop timed out" in core.reason, core.reason
    core.start(t)
    others = np.arange(quadruped.nu) != 2
    for i in range(30, 35):  # still moving: damped, not controlled
        t = i * 1e-3
        out = core.tick(_moving(quadruped, t, 2.0, 0.6), now=t)
        assert out.mode == MODE_RUN and out.estimate is None, core.reason
        assert out.tau[2] < 0.0 and not np.any(out.tau[others]), out.tau
        if i == 30:
            assert out.event == "estimator", out.note
            moving = "the robot is moving: joint 'LF_KFE' at 2.00 rad/s (bound 0.5), the gyro at 0.60 rad/s (bound 0.2)"
            assert moving in out.note and "damping it to rest" in core.reason, out.note
    for i in range(35, 42):  # at rest: the estimator starts
        t = i * 1e-3
        out = core.tick(_at_rest(quadruped, t, 1e-4 * (i % 2)), now=t)
        assert out.mode == MODE_RUN and out.estimate is not None and out.estimate.healthy, core.reason
    assert "the estimator started" in core.reason
    core.stop("test", t)
    for i in range(42, 60):
        t = i * 1e-3
        core.tick(_at_rest(quadruped, t, 1e-4 * (i % 2)), now=t)
    assert core.mode == MODE_STOPPED, core.reason
    core.start(t)
    for i in range(60, 80):  # it never comes to rest
        t = i * 1e-3
        out = core.tick(_moving(quadruped, t, 0.0, 0.6), now=t)
        if out.mode != MODE_RUN:
            break
    assert out.event == "estimator" and "did not come to rest within 0.01 s" in core.reason, core.reason
    assert core.reason.startswith("estimate not trustworthy")
