"""The controller test harness (idcontrol.testing): runners, recorded arrays, assertions, simulator factory."""

from __future__ import annotations

import math
import re
import shutil
from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest

from idcontrol import simulators
from idcontrol.errors import UnknownName
from idcontrol.reference import HoldPose
from idcontrol.settings import load_launch
from idcontrol.sim import available_simulators, make_simulator, register_simulator
from idcontrol.sim.mujoco import MujocoSim
from idcontrol.testing import (
    assert_friction_cone,
    assert_no_fall,
    assert_stays_in_run,
    assert_torque_smooth,
    assert_tracking,
    assert_within_limits,
    loop_config,
    run_in_process,
    run_over_protocol,
)
from idcontrol.testing.plugin import LoopRunner, RobotCache
from idcontrol.testing.runners import launch_file_text

pytest_plugins = ("pytester",)

REPO = Path(__file__).resolve().parents[1]
STAND = loop_config("quadruped", reference="hold", penetration_tolerance=0.001)


@pytest.fixture(scope="module")
def standing(quadruped):
    """0.3 s of the quadruped standing, in process."""
    return run_in_process(STAND, 0.3, robot=quadruped)


def test_in_process_run_records_every_tick_as_arrays(standing, quadruped):
    """One row per tick with the documented shapes; time advances by Δt; all of it in run mode."""
    run, n, k = standing, 300, len(quadruped.sphere_names)
    assert run.n == n and run.ticks_in_run == n and run.end_mode == "run"
    np.testing.assert_allclose(np.diff(run.t), 1e-3, atol=1e-12)
    assert run.q.shape == (n, quadruped.nq) and run.v.shape == (n, quadruped.nv)
    assert run.tau.shape == run.q_ref.shape == run.qdd_des.shape == (n, quadruped.nu)
    assert run.force_predicted.shape == run.force_sensed.shape == run.contact_normal.shape == (n, k, 3)
    assert run.found.all() and np.all(run.compute_us > 0) and run.timings_us
    assert all(t.shape == (n,) for t in run.timings_us.values())
    # standing still: every foot is a candidate contact, and the predicted and sensed forces both carry the weight
    weight = quadruped.total_mass() * 9.81
    assert np.all(np.isfinite(run.contact_phi[-1]))
    assert run.force_predicted[-1, :, 2].sum() == pytest.approx(weight, rel=0.05)
    assert run.force_sensed[-1, :, 2].sum() == pytest.approx(weight, rel=0.05)


def test_recorded_arrays_reproduce_the_cores_own_metrics(standing):
    """Tracking error and E|Δτ| computed from the arrays equal the core's running sums (RunMetrics)."""
    assert np.mean(standing.tracking_error) == pytest.approx(standing.summary["tracking_error_rad"], rel=1e-9)
    assert np.nanmean(standing.tau_rate) == pytest.approx(standing.summary["tau_rate_mean"], rel=1e-9)


def test_assertions_hold_on_a_standing_robot(standing):
    """Standing quietly: small tracking error, smooth torques, limits kept, forces in their cones, no fall."""
    assert_stays_in_run(standing, ticks=300)
    assert assert_tracking(standing, mean_rad=0.01, max_rad=0.05) < 0.01
    assert_torque_smooth(standing, rate_mean=500.0)
    assert_within_limits(standing)
    assert assert_friction_cone(standing, "sensed", mu=1.0) >= 4 * 290  # four feet in contact nearly throughout
    assert_friction_cone(standing, "predicted", slack=math.sqrt(2))
    height, tilt = assert_no_fall(standing)
    assert height > 0.1 and tilt < 0.05


def test_failed_assertions_say_what_was_measured_against_what_bound(standing, quadruped):
    """Each assertion's message names the measurement, where it happened, and the bound it broke."""
    with pytest.raises(
        AssertionError,
        match=r"mean joint tracking error 0\.\d+ rad over 300 run ticks exceeds "
        r"the bound 1e-09 rad",
    ):
        assert_tracking(standing, mean_rad=1e-9)
    with pytest.raises(AssertionError, match=r"E\|Δτ\|/Δt = [\d.]+ N·m/s over 299 tick pairs exceeds the bound 0.001"):
        assert_torque_smooth(standing, rate_mean=1e-3)
    tau = standing.tau.copy()
    tau[100, 2] = quadruped.torque_limits[2] + 1.0
    with pytest.raises(
        AssertionError,
        match=rf"torque [\d.]+ N·m on '{quadruped.actuated_joints[2]}' at t = 0.100 s "
        r"exceeds its limit",
    ):
        assert_within_limits(replace(standing, tau=tau))
    sensed = standing.force_sensed.copy()
    sensed[50, 1, 0] += 100.0  # a 100 N sideways push on the second foot
    cone = r"outside the friction cone: \|f_t\| = [\d.]+ N > 1·μ·f_n = 1·1.0·[\d.]+ N \(1 of \d+ contact forces outside"
    with pytest.raises(
        AssertionError, match=rf"sensed force on '{quadruped.sphere_names[1]}' at t = 0.050 s is {cone}"
    ):
        assert_friction_cone(replace(standing, force_sensed=sensed), "sensed")
    q = standing.q.copy()
    q[200:, 2] = 0.01
    with pytest.raises(AssertionError, match=r"the base fell: height 0.0100 m at t = 0.200 s is below 0.5 × standing"):
        assert_no_fall(replace(standing, q=q))
    mode = standing.mode.copy()
    mode[250:] = "safe_stop"
    with pytest.raises(AssertionError, match=r"left run mode at t = 0.250 s \(mode 'safe_stop', after 250 run ticks"):
        assert_stays_in_run(replace(standing, mode=mode))


def test_simulators_by_name_and_user_back_ends(quadruped, monkeypatch):
    """The factory knows mujoco, refuses unknown names listing the known ones, and learns new back ends; the
    runner takes a name or a ready simulator object, and a user's own reference."""
    monkeypatch.setattr(simulators, "_SIMULATORS", dict(simulators._SIMULATORS))  # the new kind ends with the test
    assert {"mujoco", "rigid"} <= set(available_simulators())
    with pytest.raises(UnknownName, match="unknown simulator 'nope'; available: .*mujoco"):
        make_simulator("nope", quadruped)

    class CountingSim(MujocoSim):
        """A user's back end: MuJoCo that counts its steps."""

        steps = 0

        def step(self, tau):
            CountingSim.steps += 1
            super().step(tau)

    register_simulator("counting", CountingSim)
    crouch = HoldPose(quadruped, pose={quadruped.actuated_joints[2]: -1.2})
    run = run_in_process(STAND, 0.05, robot=quadruped, simulator="counting", reference=crouch)
    assert CountingSim.steps == 50 and run.n == 50
    np.testing.assert_allclose(run.q_ref[:, 2], -1.2)
    sim = CountingSim(quadruped, mu=1.0, timestep=5e-4)
    run = run_in_process(
        replace(STAND, bridge=replace(STAND.bridge, substeps=2)),
        0.02,
        robot=quadruped,
        simulator=sim,
        until=lambda s: s.t >= 0.01,
    )
    assert run.n == 10 and sim.time == pytest.approx(0.01) and run.end_reason == "until() returned True"


def test_rigid_simulator_by_name(quadruped):
    """The rigid simulator (the controller's own contact model) as back end: the standing quadruped tracks to
    round-off, and the simulator's forces stay inside its four-facet friction pyramid."""
    run = run_in_process(replace(STAND, bridge=replace(STAND.bridge, kind="rigid")), 0.2, robot=quadruped)
    assert_stays_in_run(run, ticks=200)
    assert assert_tracking(run, mean_rad=1e-9) < 1e-9
    assert assert_friction_cone(run, "sensed", slack=math.sqrt(2)) == 4 * 200
    assert_no_fall(run)


def test_protocol_transport_refuses_in_process_objects():
    """With --idcontrol-transport protocol, idcontrol_loop.run says which options cannot cross processes."""
    runner = LoopRunner("protocol", RobotCache())
    with pytest.raises(ValueError, match=r"\['reference', 'until'\] cannot cross to other processes"):
        runner.run(STAND, 0.1, gains=(1.0, 1.0), reference=object(), until=object())


def test_loop_config_round_trips_through_a_launch_file(tmp_path):
    """A configuration written as a launch file reads back equal (inline tables, inf, booleans)."""
    config = loop_config(
        "arm",
        reference="arm_sinusoid",
        mu=0.5,
        sim_mu=math.inf,
        objects=True,
        formulation_options={"warm_start": True},
        penetration_tolerance=0.001,
    )
    path = tmp_path / "arm.toml"
    path.write_text(launch_file_text(config))
    assert replace(load_launch(path), path=config.path) == config


def test_over_protocol_matches_in_process(quadruped):
    """Daemon and bridge processes in lock-step give the in-process run, tick for tick, from telemetry."""
    over = run_over_protocol(STAND, 0.2)
    assert over.transport == "protocol" and over.missing_records == 0
    assert over.ticks_in_run == 200 and over.end_mode == "run"
    local = run_in_process(STAND, 0.2, robot=quadruped)
    np.testing.assert_allclose(over.t, local.t, atol=1e-12)
    np.testing.assert_allclose(over.q, local.q, atol=1e-9)
    np.testing.assert_allclose(over.q_end, local.q_end, atol=1e-9)
    np.testing.assert_allclose(over.tau, local.tau, atol=1e-6)
    np.testing.assert_allclose(over.force_predicted, local.force_predicted, atol=1e-6)
    np.testing.assert_allclose(over.force_sensed, local.force_sensed, atol=1e-6)
    assert_no_fall(over)
    assert_friction_cone(over, "sensed")


def test_the_guides_example_passes_for_a_robot_of_its_own(pytester):
    """docs/testing.md's example test file, run by pytest with the plugin, passes on a copy of the quadruped."""
    guide = (REPO / "docs" / "testing.md").read_text()
    (example,) = re.findall(r"```python\n(.*?)```", guide, flags=re.S)
    mybot = pytester.path / "robots" / "mybot"
    shutil.copytree(REPO / "robots" / "quadruped", mybot)
    toml = mybot / "robot.toml"
    toml.write_text(toml.read_text().replace('name = "quadruped"', 'name = "mybot"'))
    pytester.makepyfile(test_mybot=example)
    result = pytester.runpytest("-q", "-p", "no:cacheprovider")
    result.assert_outcomes(passed=2)
