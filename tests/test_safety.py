"""The safety filter and the fallback policy, on the pure control core with the real quadruped model."""

from __future__ import annotations

import math
from dataclasses import replace

import numpy as np
import pytest

from idcontrol.control.controller import InverseDynamicsController
from idcontrol.control.core import ControlCore
from idcontrol.control.safety import (
    POSITION_LIMIT,
    VELOCITY_LIMIT,
    WITHIN_LIMITS,
    SafetyFilter,
    guard_torque,
    limit_violation,
)
from idcontrol.control.state import RobotState
from idcontrol.errors import ConfigError, NameNotFound
from idcontrol.reference import make_reference
from idcontrol.settings import SafetySettings


def make_core(robot, **settings) -> ControlCore:
    controller = InverseDynamicsController(robot, formulation="two_stage_qp")
    return ControlCore(controller, make_reference("hold", robot), SafetySettings(**settings))


class Stepper:
    """Feeds the core the standing state (optionally edited) one tick of 1 ms at a time."""

    def __init__(self, core: ControlCore) -> None:
        self.core = core
        self.seq = 0
        self.q = core.robot.standing_configuration()
        self.v = np.zeros(core.robot.nv)

    def tick(self, q=None, v=None):
        self.seq += 1
        t = self.seq * 1e-3
        state = RobotState(self.q if q is None else q, self.v if v is None else v, t)
        return self.core.tick(state, now=t)


def break_formulation(monkeypatch, core: ControlCore, after: int, how: str) -> None:
    """From call ``after`` on, the active formulation raises, fails, or returns NaN torques."""
    formulation = core.controller.formulation
    solve = formulation.solve
    calls = [0]

    def faulty(problem):
        calls[0] += 1
        if calls[0] <= after:
            return solve(problem)
        if how == "raise":
            raise RuntimeError("injected fault")
        result = solve(problem)
        if how == "nan":
            return replace(result, tau=np.full_like(result.tau, np.nan))
        return replace(result, found=False, message="injected failure")

    monkeypatch.setattr(formulation, "solve", faulty)


def test_torque_limits_default_to_the_urdf_and_overrides_only_lower_them(quadruped):
    """URDF effort limits (8 N·m) apply by default; a per-joint override lowers one; raising one is refused."""
    f = SafetyFilter(quadruped, SafetySettings(), 1e-3)
    np.testing.assert_array_equal(f.tau_limit, quadruped.torque_limits)
    f = SafetyFilter(quadruped, SafetySettings(torque_limits={"default": 6.0, "LF_KFE": 5.0}), 1e-3)
    expected = np.full(12, 6.0)
    expected[quadruped.actuated_joints.index("LF_KFE")] = 5.0
    np.testing.assert_array_equal(f.tau_limit, expected)
    tau = f.apply(np.full(12, 7.0), None)
    np.testing.assert_array_equal(tau, expected)
    assert f.clipped == 12 and f.counts["torque_limit"] == 12
    with pytest.raises(ConfigError, match="only lower"):
        SafetyFilter(quadruped, SafetySettings(torque_limits={"LF_KFE": 9.0}), 1e-3)
    with pytest.raises(NameNotFound):
        SafetyFilter(quadruped, SafetySettings(torque_limits={"LF_ELBOW": 1.0}), 1e-3)


def test_compiled_guards_equal_their_numpy_definitions():
    """guard_torque = zeros if non-finite, clip to τ_prev ± step, clip to ± limit (with the counts), and
    limit_violation names the joint furthest out (positions first), on random cases with inf, NaN and ties."""
    rng = np.random.default_rng(7)
    nu = 12
    for case in range(2000):
        tau = rng.normal(0.0, 3.0, nu)
        if case % 7 == 0:
            tau[rng.integers(nu)] = rng.choice([np.nan, np.inf, -np.inf])
        prev = rng.normal(0.0, 3.0, nu)
        step = np.where(rng.random(nu) < 0.3, np.inf, rng.uniform(0.0, 2.0, nu))
        limit = rng.uniform(0.5, 4.0, nu)
        has_prev = case % 3 != 0
        out = np.empty(nu)
        non_finite, limited, clipped = guard_torque(tau, prev, has_prev, step, limit, out)
        expected = np.zeros(nu) if not np.isfinite(tau).all() else tau.copy()
        n_limited = 0
        if has_prev:
            n_limited = int(np.count_nonzero((expected < prev - step) | (expected > prev + step)))
            expected = np.clip(expected, prev - step, prev + step)
        assert (non_finite, limited, clipped) == (
            not np.isfinite(tau).all(),
            n_limited,
            int(np.count_nonzero(np.abs(expected) > limit)),
        )
        np.testing.assert_array_equal(out, np.clip(expected, -limit, limit))

        q_min, q_max = -np.abs(rng.normal(1.0, 0.3, nu)), np.abs(rng.normal(1.0, 0.3, nu))
        v_max = np.where(rng.random(nu) < 0.2, np.inf, rng.uniform(1.0, 5.0, nu))
        q, v = rng.normal(0.0, 0.6, nu), rng.normal(0.0, 2.5, nu)
        if case % 5 == 0:
            q[[2, 5]] = q_max[[2, 5]] + 0.1  # a tie: the first joint is named
        kind, j = limit_violation(q, v, q_min, q_max, v_max)
        outside = np.maximum(q_min - q, q - q_max)
        if (outside > 0).any():
            assert (kind, j) == (POSITION_LIMIT, int(np.argmax(outside)))
        elif (np.abs(v) > v_max).any():
            assert (kind, j) == (VELOCITY_LIMIT, int(np.argmax(np.abs(v) / v_max)))
        else:
            assert (kind, j) == (WITHIN_LIMITS, -1)


def test_torque_rate_limit_bounds_the_change_between_commands(quadruped):
    """With 1000 N·m/s at 1 kHz no joint's torque moves more than 1 N·m per command; each bound is counted."""
    f = SafetyFilter(quadruped, SafetySettings(torque_rate_limit=1000.0), 1e-3)
    previous = np.zeros(12)
    wanted = np.linspace(-5.0, 5.0, 12)
    sent = []
    for _ in range(6):
        previous = f.apply(wanted, previous).copy()
        sent.append(previous)
    steps = np.abs(np.diff(np.vstack([np.zeros(12), *sent]), axis=0))
    assert steps.max() <= 1.0 + 1e-12
    np.testing.assert_allclose(sent[-1], wanted)  # reached after at most 5 commands
    # joint j is bounded on the commands k = 1, 2, ... while |wanted_j| − (k − 1) > 1
    assert f.counts["torque_rate"] == int(np.sum(np.maximum(np.ceil(np.abs(wanted)) - 1, 0)))


def test_non_finite_torque_never_leaves_the_filter(quadruped):
    """NaN or inf in a command becomes zeros, is counted, and is flagged for the caller to stop."""
    f = SafetyFilter(quadruped, SafetySettings(), 1e-3)
    tau = np.zeros(12)
    tau[3] = np.nan
    tau[5] = np.inf
    out = f.apply(tau, None)
    assert np.all(out == 0.0) and f.last_non_finite and f.counts["non_finite"] == 1


def test_position_and_velocity_guards_switch_to_a_damping_stop(quadruped):
    """A knee beyond its URDF limit by more than the margin, or a joint above 1.5 × its velocity limit, stops
    the run with damping; the reason names the joint and the intervention is counted."""
    knee = quadruped.actuated_joints.index("LF_KFE")  # limits [-2.6, 0]
    knee_q = quadruped.model.joints[quadruped.model.getJointId("LF_KFE")].idx_q
    knee_v = int(quadruped.actuated_dofs[knee])
    for field, value, kind in (("q", 0.06, "position_limit"), ("v", 31.0, "velocity_limit")):
        core = make_core(quadruped, position_margin=0.05, velocity_factor=1.5, safe_controller="pd_hold")
        run = Stepper(core)
        core.start(0.0)
        assert run.tick().mode == "run"
        q, v = run.q.copy(), run.v.copy()
        v[quadruped.actuated_dofs] = 0.2  # moving: the damping stop is not over at once
        if field == "q":
            q[knee_q] = value
        else:
            v[knee_v] = value
        out = run.tick(q, v)
        assert out.mode == "safe_stop" and "LF_KFE" in core.reason and core.filter.counts[kind] == 1
        # damping (not the configured pd_hold): τ = −D q̇, clipped
        np.testing.assert_allclose(out.tau, np.clip(-0.5 * v[quadruped.actuated_dofs], -8, 8))


def test_guards_are_off_by_default_and_a_margin_allows_small_excursions(quadruped):
    """Default settings never stop for limits; with a 0.05 rad margin, 0.04 rad beyond the limit runs on."""
    knee_q = quadruped.model.joints[quadruped.model.getJointId("LF_KFE")].idx_q
    for settings in ({}, {"position_margin": 0.05}):
        core = make_core(quadruped, **settings)
        run = Stepper(core)
        core.start(0.0)
        q = run.q.copy()
        q[knee_q] = 0.04
        assert run.tick(q).mode == "run"


@pytest.mark.parametrize("how", ["raise", "fail", "nan"])
def test_a_failing_formulation_reuses_the_previous_torque_then_safe_stops(quadruped, monkeypatch, how):
    """A formulation that throws, fails or returns NaN: the last good torque for hold_ticks ticks, then the
    damping stop, with the reason reported; no NaN is ever commanded."""
    core = make_core(quadruped, hold_ticks=3)
    run = Stepper(core)
    core.start(0.0)
    good = [run.tick().tau for _ in range(3)]
    break_formulation(monkeypatch, core, after=0, how=how)
    held = [run.tick() for _ in range(3)]
    for out in held:
        assert out.mode == "run" and "reusing the previous torque" in out.note
        np.testing.assert_array_equal(out.tau, good[-1])
    run.v[quadruped.actuated_dofs] = 0.2  # moving: the damping stop lasts
    out = run.tick()
    assert out.mode == "safe_stop"
    np.testing.assert_allclose(out.tau, -0.5 * 0.2)
    assert core.reason.startswith("solve failed") and "damping" in core.reason
    # a NaN answer reported as found is caught by its certificate (its non_finite check) before the torque guard
    kind = {"raise": "solve_failed", "fail": "solve_failed", "nan": "certificate"}[how]
    counts = core.filter.counts
    assert counts[kind] == 4 and counts["held"] == 3 and counts["safe_controller"] == 1
    if how == "nan":
        assert "certificate: non_finite" in core.reason
    if how == "raise":
        assert "RuntimeError: injected fault" in core.last_error


def test_pd_hold_keeps_the_posture_where_the_stop_began_until_the_timeout(quadruped, monkeypatch):
    """safe_controller = pd_hold: τ = Kp (q_hold − q) − Kd q̇ around the stop's posture, in safe_stop until
    safe_stop_timeout (not at rest), then stopped."""
    core = make_core(
        quadruped, hold_ticks=0, safe_controller="pd_hold", hold_kp=40.0, hold_kd=1.0, safe_stop_timeout=0.01
    )
    run = Stepper(core)
    core.start(0.0)
    run.tick()
    break_formulation(monkeypatch, core, after=0, how="fail")
    assert run.tick().mode == "safe_stop"
    q, v = run.q.copy(), run.v.copy()
    q[quadruped.model.joints[quadruped.model.getJointId("RH_HFE")].idx_q] += 0.05
    v[quadruped.actuated_dofs] = 0.1
    out = run.tick(q, v)
    expected = 40.0 * (quadruped.joint_positions(run.q) - quadruped.joint_positions(q)) - 1.0 * 0.1
    assert out.mode == "safe_stop"
    np.testing.assert_allclose(out.tau, expected)
    for _ in range(12):
        out = run.tick()
    assert out.mode == "stopped" and "timed out" in core.reason


def test_a_solve_over_its_time_budget_counts_as_failed(quadruped):
    """time_budget_ms below any real solve time: with no earlier torque the late (valid) one stands in for
    hold_ticks ticks, then the safe stop, whose reason names the budget."""
    core = make_core(quadruped, hold_ticks=2, time_budget_ms=1e-6)
    run = Stepper(core)
    core.start(0.0)
    outs = [run.tick() for _ in range(3)]
    assert [o.mode for o in outs[:2]] == ["run", "run"] and outs[2].mode in ("safe_stop", "stopped")
    assert core.filter.counts["over_budget"] == 3 and core.filter.counts["held"] == 2 and "budget" in core.reason
    assert np.abs(outs[0].tau).max() > 0.1  # the standing torques, not zeros


def test_safety_settings_refuse_bad_values():
    """Each bad [safety] value is a ConfigError naming the key."""
    for bad in (
        {"hold_ticks": -1},
        {"safe_controller": "brake"},
        {"torque_rate_limit": -1.0},
        {"torque_limits": {"default": 0.0}},
        {"velocity_factor": math.nan},
        {"damping": "high"},
    ):
        key = next(iter(bad))
        with pytest.raises(ConfigError, match=key):
            SafetySettings.from_table(bad, "launch [safety]")
    with pytest.raises(ConfigError, match="unknown"):
        SafetySettings.from_table({"max_torque": 1.0}, "launch [safety]")


LAUNCH_TEXT = """
robot = "quadruped"
[endpoints]
control = "tcp://127.0.0.1:15555"
admin = "tcp://127.0.0.1:15556"
telemetry = "tcp://127.0.0.1:15557"
[safety]
"""


def test_launch_file_safety_table_reaches_the_core_and_bad_joint_names_fail_at_load(tmp_path, quadruped):
    """[safety] values become the core's settings; an unknown joint in a per-joint table fails when the file
    loads, before any process starts."""
    from idcontrol.control.factory import build_core
    from idcontrol.settings import load_launch

    path = tmp_path / "run.toml"
    path.write_text(
        LAUNCH_TEXT + 'safe_controller = "pd_hold"\ntorque_limits = { LF_HAA = 4.0 }\n'
        "time_budget_ms = 0.8\nvelocity_factor = 1.5\n"
    )
    config = load_launch(path)
    assert config.safety.safe_controller == "pd_hold" and config.safety.time_budget_ms == 0.8
    core = build_core(config, quadruped)
    assert core.tau_limit[quadruped.actuated_joints.index("LF_HAA")] == 4.0 and core.safety is config.safety
    path.write_text(LAUNCH_TEXT + "torque_limits = { LF_WRIST = 4.0 }\n")
    with pytest.raises(NameNotFound, match="LF_WRIST"):
        load_launch(path)
    path.write_text(LAUNCH_TEXT + 'safe_controller = "coast"\n')
    with pytest.raises(ConfigError, match="safe_controller"):
        load_launch(path)


def test_shipped_quadruped_launch_files_turn_the_limit_guards_on():
    """The quadruped launch files set the position guard (off in code by default); standing, the velocity one."""
    from pathlib import Path

    from idcontrol.settings import load_launch

    launch = Path(__file__).resolve().parents[1] / "launch"
    stand, trot = (load_launch(launch / f"{name}.toml").safety for name in ("quadruped_stand", "quadruped_trot"))
    assert math.isfinite(stand.position_margin) and math.isfinite(stand.velocity_factor)
    assert math.isfinite(trot.position_margin)


def test_a_joint_without_a_urdf_velocity_limit_has_no_velocity_guard_and_no_warning(tmp_path, recwarn):
    """A URDF velocity of 0 (the double pendulum's: none given) with the guard off (velocity_factor = ∞): no guard
    on that joint (∞), computed without 0 · ∞ (a RuntimeWarning on every start before)."""
    from idcontrol.robot.init import init_robot
    from idcontrol.robot.model import RobotModel

    result = init_robot(
        "share:example-robot-data/robots/double_pendulum_description/urdf/double_pendulum.urdf",
        None,
        tmp_path / "dp",
        torque_limit=5.0,
    )
    robot = RobotModel(str(result.path))
    assert (robot.model.velocityLimit == 0).all()
    for factor in (math.inf, 1.5):
        f = SafetyFilter(robot, SafetySettings(velocity_factor=factor), 1e-3)
        assert np.all(f.v_max == np.inf)
    assert not [w for w in recwarn if issubclass(w.category, RuntimeWarning)]


def test_the_runs_clipped_torques_are_counted_apart_from_the_safe_stops(quadruped):
    """torque_clips counts every clipped joint-tick; torque_clips_run only those of the controller's run, not the
    damping stop after it (an arm sagging under gravity in its safe stop showed 3222 'clipped' torques, 0 of them
    in the run). Limits of 0.05 N·m clip the standing torques in run; fast joints clip the damping stop's."""
    core = ControlCore(
        InverseDynamicsController(quadruped),
        make_reference("hold", quadruped),
        SafetySettings(torque_limits=0.05, safe_stop_timeout=10.0),
    )
    q, v = quadruped.standing_configuration(), np.zeros(quadruped.nv)
    core.start(0.0)
    in_run = 0
    for k in range(5):
        out = core.tick(RobotState(q, v, t=k * 1e-3), now=k * 1e-3)
        assert out.mode == "run"
        in_run += out.clipped
    assert in_run > 0 and core.metrics.summary()["torque_clips_run"] == in_run == core.clip_count
    core.stop("test", 0.01)
    fast = v.copy()
    fast[6:] = 5.0  # rad/s: the damping torque exceeds the limits
    out = core.tick(RobotState(q, fast, t=0.006), now=0.011)
    assert out.mode == "safe_stop" and out.clipped > 0
    assert core.clip_count == in_run + out.clipped and core.metrics.summary()["torque_clips_run"] == in_run


def test_a_fall_is_the_reason_even_when_the_same_ticks_solve_failed_first(quadruped):
    """A state with the base 10 m under the floor: every foot deep in the ground, the solve's answer fails its
    certificate and stops the run, and the fall check finds the robot fallen. The reason names the fall first
    (it named the certificate, while the tick's note said fell)."""
    core = ControlCore(InverseDynamicsController(quadruped), make_reference("hold", quadruped))
    q, v = quadruped.standing_configuration(), np.zeros(quadruped.nv)
    core.start(0.0)
    q[2] = -10.0
    out = core.tick(RobotState(q, v, t=0.0), now=0.0)
    assert out.mode in ("safe_stop", "stopped") and out.event == "fell"  # (damping: at rest, stopped at once)
    assert core.reason.startswith("the robot fell: base at -10.000 m"), core.reason
    assert core.metrics.fell


@pytest.mark.parametrize(
    ("field", "value", "says"),
    [
        ("velocity_factor", 0.0, "velocity_factor must be > 0"),  # divided by in the guard: the daemon crashed
        ("time_budget_ms", 0.0, "time_budget_ms must be > 0"),  # every solve over budget: a safe stop at once
        ("torque_limits", 0.0, "torque_limits must be > 0"),  # the robot collapses
        ("torque_limits", {"LF_KFE": 0.0}, "torque_limits must be > 0"),
        ("fall_height_fraction", 2.0, "at most 1"),  # fallen before its first tick
        ("collapse_height_fraction", 0.0, "must be > 0"),
    ],
)
def test_safety_values_that_stop_every_run_are_refused_when_read(field, value, says):
    """A value that makes every run stop (or the daemon crash) is a configuration error naming the key, before
    any process starts: `[safety] velocity_factor = 0` had crashed the daemon's guard (a division by 0)."""
    with pytest.raises(ConfigError, match=says):
        replace(SafetySettings(), **{field: value}).validate()
