"""Estimated contacts (idcontrol.contacts.stance) on real Pinocchio models: the ground through the stance feet, the
stance hysteresis, and the velocity that keeps the stance feet still; then closed loops in MuJoCo on what a robot
measures (the `typical` sensors and actuators)."""

from __future__ import annotations

import math
from dataclasses import replace

import numpy as np
import pinocchio as pin
import pytest

from idcontrol.contacts.stance import StanceEstimator, StanceSettings
from idcontrol.robot.model import RobotModel
from idcontrol.settings import load_launch, sensor_settings
from idcontrol.testing import run_in_process
from tests.conftest import REPO

ROBOTS = ("quadruped", "solo12")


@pytest.fixture(scope="module", params=ROBOTS)
def robot(request) -> RobotModel:
    return RobotModel(request.param)


def _on_plane(robot: RobotModel, tilt: float, height: float) -> np.ndarray:
    """The standing posture rolled by ``tilt`` rad about world x and lifted so that its lowest sphere lies on the
    plane through (0, 0, ``height``) with that tilt."""
    q = robot.standing_configuration().copy()
    rotation = pin.utils.rpyToMatrix(tilt, 0.0, 0.0)
    q[3:7] = pin.Quaternion(rotation).coeffs()
    robot.update(q, np.zeros(robot.nv))
    normal = rotation[:, 2]
    lowest = min(float(normal @ c) - r for c, r in zip(robot.sphere_centers_in_world, robot.sphere_radii, strict=True))
    q[:3] += normal * (height - lowest)
    return q


def test_the_ground_is_the_plane_the_standing_feet_are_on(robot):
    """Standing with every foot on a plane tilted 8° and 3 cm up, the estimated ground converges to that plane: its
    normal, and a gap of 0 at every foot."""
    tilt = math.radians(8.0)
    q = _on_plane(robot, tilt, 0.03)
    estimator = StanceEstimator(robot, 1e-3)
    for _ in range(300):
        robot.update(q, np.zeros(robot.nv))
        estimator.update(np.zeros(robot.nv), None, None, None)
    assert estimator.mask.all()
    assert np.allclose(estimator.normal, [0.0, -math.sin(tilt), math.cos(tilt)], atol=1e-4)
    assert np.allclose(estimator.gaps, 0.0, atol=1e-4)
    # the base's height above that ground, along the vertical
    assert estimator.height_above_ground(q[:3]) == pytest.approx(robot.standing_configuration()[2], abs=0.03)


def test_the_stance_feet_stay_still_under_the_consistent_velocity(robot):
    """For random estimated velocities, the velocity the estimator returns moves no stance foot: J_s v_c = 0."""
    rng = np.random.default_rng(0)
    q = robot.standing_configuration()
    estimator = StanceEstimator(robot, 1e-3)
    for _ in range(20):
        v = rng.normal(0.0, 0.3, robot.nv)
        robot.update(q, v)
        v_c = estimator.update(v, None, None, None).copy()
        assert estimator.mask.all()
        for i in range(len(robot.sphere_radii)):
            J = pin.getFrameJacobian(robot.model, robot.data, int(robot.sphere_frame_ids[i]), pin.LOCAL_WORLD_ALIGNED)
            lever = (
                robot.sphere_centers_in_world[i]
                - robot.sphere_radii[i] * estimator.normal
                - robot.data.oMf[int(robot.sphere_frame_ids[i])].translation
            )
            point = J[:3] @ v_c + np.cross(J[3:] @ v_c, lever)
            assert np.linalg.norm(point) < 1e-6


def test_a_base_velocity_error_is_taken_out_of_the_base(robot):
    """A robot standing still whose estimate says its base moves at 0.1 m/s: after a few time constants the
    velocity the controller uses has the base still (to 1 %), and the joints nearly as measured: the weights put
    what the stance feet ask for on the base, whose σ (0.1 m/s) is far above the joints' (0.05 rad/s at the feet's
    ~0.2 m levers)."""
    q = robot.standing_configuration()
    settings = StanceSettings(velocity_time_constant=0.02)
    estimator = StanceEstimator(robot, 1e-3, settings)
    v = np.zeros(robot.nv)
    v[:3] = [0.1, -0.05, 0.03]  # m/s, base frame
    robot.update(q, v)
    for _ in range(200):  # 10 time constants
        v_c = estimator.update(v, None, None, None)
    assert np.linalg.norm(v_c[:6]) < 1e-3
    assert np.linalg.norm(v_c[6:]) < 5e-3


def test_stance_has_hysteresis_and_follows_the_schedule(quadruped):
    """A foot the schedule does not allow never stands; a standing foot leaves stance only beyond the lift-off
    height; a lifted foot lands again when it comes back within the touchdown height."""
    robot = quadruped
    q = robot.standing_configuration()
    k = len(robot.sphere_radii)
    estimator = StanceEstimator(robot, 1e-3)
    lift = float(estimator.params[2])
    robot.update(q, np.zeros(robot.nv))
    allowed = np.ones(k, dtype=bool)
    allowed[0] = False
    estimator.update(np.zeros(robot.nv), allowed, None, None)
    assert not estimator.mask[0] and estimator.mask[1:].all()

    def raised(dz: float) -> np.ndarray:
        """The base raised by dz with foot 0 held: its gap grows by dz (the other feet are not on the plane any
        more, but their stance holds until they pass the lift-off height)."""
        out = q.copy()
        out[2] += dz
        return out

    everyone = np.ones(k, dtype=bool)
    for dz, expected in [(0.0, True), (0.5 * lift, True), (1.2 * lift, False), (0.5 * lift, False), (0.0, True)]:
        robot.update(raised(dz), np.zeros(robot.nv))
        estimator.update(np.zeros(robot.nv), everyone, np.zeros(k, dtype=bool), None)
        assert bool(estimator.mask[0]) is expected, (dz, expected)


def test_the_estimators_contacts_are_the_stance_feet_the_answers_load(quadruped):
    """A stance foot that the formulation's answers leave unloaded stops being a contact the estimator holds still
    within a few load time constants, and becomes one again when the answers load it; before any answer, and after a
    reset, every stance foot is one; a foot out of stance never is, whatever its load."""
    robot = quadruped
    k = len(robot.sphere_radii)
    estimator = StanceEstimator(robot, 1e-3)
    robot.update(robot.standing_configuration(), np.zeros(robot.nv))
    allowed = np.ones(k, dtype=bool)
    allowed[3] = False
    estimator.update(np.zeros(robot.nv), allowed, None, None)
    assert np.array_equal(estimator.anchors, [1.0, 1.0, 1.0, 0.0])  # no answer yet: the stance feet
    weight = 9.81 * robot.total_mass()
    spheres = np.arange(k)
    estimator.observe_loads(spheres, np.full(k, 0.25 * weight))  # the first answer loads every foot
    assert np.array_equal(estimator.anchors, [1.0, 1.0, 1.0, 0.0])  # foot 3 is lifted: loaded or not, no anchor
    loads = np.array([0.5, 0.0, 0.5, 0.5]) * weight  # then foot 1 is unloaded (an LCP's vertex answer)
    ticks = []
    for _ in range(20):
        estimator.observe_loads(spheres, loads)
        ticks.append(estimator.anchors.copy())
    assert np.array_equal(ticks[0], [1.0, 1.0, 1.0, 0.0])  # one answer does not drop it (a low-pass) ...
    assert np.array_equal(ticks[-1], [1.0, 0.0, 1.0, 0.0])  # ... a few milliseconds of them do
    for _ in range(20):  # contacts on three spheres only: foot 3 has none, and foot 1 is loaded again
        estimator.observe_loads(spheres[:3], np.full(3, 0.3 * weight))
    assert np.array_equal(estimator.anchors, [1.0, 1.0, 1.0, 0.0])
    assert estimator.load[3] < 0.05 * weight
    estimator.reset()
    assert np.all(np.isnan(estimator.load))


def test_a_landing_foot_is_held_still_once_it_has_settled(quadruped):
    """A loaded stance foot whose speed under the estimated velocity exceeds settle_speed (it is still coming down)
    is not a contact the estimator holds still; it becomes one when it slows to settle_speed, or once it has stood
    anchor_wait, whichever comes first."""
    robot = quadruped
    k = len(robot.sphere_radii)
    dt = 1e-3
    estimator = StanceEstimator(robot, dt)
    q = robot.standing_configuration()
    robot.update(q, np.zeros(robot.nv))
    everyone = np.ones(k, dtype=bool)
    moving = np.zeros(robot.nv)
    moving[6:9] = 2.0  # foot 0's leg swings at 2 rad/s: its foot moves at about 0.2-0.5 m/s
    estimator.update(moving, everyone, None, None)
    estimator.observe_loads(np.arange(k), np.full(k, 0.25 * 9.81 * robot.total_mass()))
    assert estimator.speed[0] > 4 * estimator.settings.settle_speed
    assert np.array_equal(estimator.anchors, [0.0, 1.0, 1.0, 1.0])
    estimator.update(np.zeros(robot.nv), everyone, None, None)  # it stops: held still from this tick
    assert np.array_equal(estimator.anchors, [1.0, 1.0, 1.0, 1.0])
    estimator.reset()
    wait = round(estimator.settings.anchor_wait / dt)
    for tick in range(wait + 2):
        estimator.update(moving, everyone, None, None)
        assert estimator.anchors[0] == (1.0 if tick >= wait else 0.0), tick  # it never settles: after anchor_wait


def test_a_foot_sensor_lands_a_foot_the_kinematics_would_not():
    """A scheduled foot 1 cm above the estimated ground (on a bump the plane does not show) lands when its force
    sensor reads more than force_on, not before."""
    robot = RobotModel("a1")
    q = robot.standing_configuration()
    k = len(robot.sphere_radii)
    estimator = StanceEstimator(robot, 1e-3, StanceSettings(scheduled_height=0.005))
    robot.update(q, np.zeros(robot.nv))
    estimator.update(np.zeros(robot.nv), None, None, None)
    allowed = np.ones(k, dtype=bool)
    allowed[0] = False
    estimator.update(np.zeros(robot.nv), allowed, None, None)  # foot 0 lifts (the schedule)
    lifted = q.copy()
    lifted[2] += 0.01
    robot.update(lifted, np.zeros(robot.nv))
    force_on = float(estimator.params[4])
    for force, expected in [(0.5 * force_on, False), (2.0 * force_on, True)]:
        forces = np.zeros(k)
        forces[0] = force
        estimator.update(np.zeros(robot.nv), None, None, forces)
        assert bool(estimator.mask[0]) is expected


# ---------------------------------------------------------------------------------------------------- closed loops
def _hardware_run(launch: str, formulation: str, seconds: float, robot: str = "quadruped", **sensors):
    """A launch file's run in process, with its sensor preset and ``sensors`` overrides; the simulator's truth at
    the end."""
    config = load_launch(REPO / "launch" / launch).with_overrides(formulation=formulation, robot=robot)
    table = {"preset": config.bridge.sensors.preset, "seed": 1, **sensors}
    bridge = replace(config.bridge, sensors=sensor_settings(table, "test"))
    return run_in_process(replace(config, bridge=bridge), seconds)


@pytest.mark.parametrize("formulation", ["two_stage_qp", "coulomb_lcp", "noslip_lcp"])
def test_each_formulation_stands_on_typical_sensors_and_a_late_actuator(formulation, quadruped):
    """launch/stand_hw.toml (typical sensors and actuators: noisy, biased encoders and IMU, an estimator's base
    state, a tick of delay): 2 s in run mode, no fall, the true base within 1 cm of its standing height."""
    run = _hardware_run("stand_hw.toml", formulation, 2.0)
    assert run.end_mode == "run" and run.ticks_in_run == 2000, run.end_reason
    assert abs(run.q_end[2] - quadruped.standing_configuration()[2]) < 0.01
    assert run.summary["tracking_error_rad"] < 0.01


@pytest.mark.parametrize("bias", [0.02, -0.02])
def test_a_base_height_bias_of_two_centimetres_is_no_error_to_estimated_contacts(bias, quadruped):
    """The base reported 2 cm too high or too low (the world's contacts lost the ground at +1 mm and rejected the
    first tick at −5 mm): the robot stands as with the truth."""
    run = _hardware_run("stand_hw.toml", "two_stage_qp", 1.0, preset="ideal", base_height_bias=bias)
    assert run.end_mode == "run" and run.ticks_in_run == 1000, run.end_reason
    assert abs(run.q_end[2] - quadruped.standing_configuration()[2]) < 0.005
    assert run.summary["tracking_error_rad"] < 0.005


@pytest.mark.parametrize(
    ("formulation", "terrain", "height", "seed"),
    [
        ("coulomb_lcp", "bumps", 0.02, 0),
        ("coulomb_lcp", "step", 0.04, 0),
        ("two_stage_qp", "bumps", 0.02, 3),
    ],
)
def test_the_quadruped_keeps_trotting_on_ground_it_is_not_told_of(formulation, terrain, height, seed, quadruped):
    """launch/trot_hw.toml on ± 2 cm bumps, and into a 4 cm step (a quarter of its leg, more than twice its swing
    height: it does not climb it), the controller assuming flat ground: 5 s in run mode, the true base near its
    standing height above the ground under it. The two-stage QP's bumps and sensor noise (seed 3) stopped it at
    4.0 s with its stance feet pulled toward a plane (a knee pushed straight); the trot's footholds keep them where
    they land."""
    config = load_launch(REPO / "launch" / "trot_hw.toml").with_overrides(formulation=formulation)
    sensors = replace(config.bridge.sensors, seed=seed)
    bridge = replace(config.bridge, terrain=terrain, terrain_height=height, terrain_seed=seed, sensors=sensors)
    config = replace(config, bridge=bridge)
    run = run_in_process(config, 5.0)
    assert run.end_mode == "run" and run.ticks_in_run == 5000, run.end_reason
    assert abs(run.q_end[2] - quadruped.standing_configuration()[2]) < 0.03
