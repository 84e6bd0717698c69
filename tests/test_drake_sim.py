"""The Drake (SAP) back end: Pinocchio's conventions, sensed forces per contact sphere, a closed-loop stand."""

from __future__ import annotations

import os

import numpy as np
import pinocchio as pin
import pytest

from idcontrol.errors import ConfigError, InputError, NonFiniteError, ShapeError
from idcontrol.robot.model import RobotModel
from idcontrol.testing.runners import loop_config, run_in_process
from tests.conftest import solo12_urdf

if os.environ.get("CI"):  # CI installs the extra: its tests must run there, never skip
    import pydrake  # noqa: F401
else:
    pytest.importorskip("pydrake", reason="the drake extra is not installed: pip install 'idcontrol[drake]'")

from idcontrol.sim.drake import DEFAULT_RELAXATION_TIME, DEFAULT_STIFFNESS, DrakeSim  # noqa: E402


@pytest.fixture(scope="module")
def quadruped_sim(quadruped: RobotModel) -> DrakeSim:
    return DrakeSim(quadruped)


def random_state(robot: RobotModel, rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray]:
    """A random (q, v): random base pose and twist, joints in the middle 80 % of their URDF limits (which Drake
    enforces)."""
    q = robot.standing_configuration()
    low, high = robot.model.lowerPositionLimit, robot.model.upperPositionLimit
    for name in robot.actuated_joints:
        i = robot.model.joints[robot.model.getJointId(name)].idx_q
        q[i] = low[i] + (high[i] - low[i]) * rng.uniform(0.1, 0.9)
    if robot.floating_base:
        q[0:3] = rng.standard_normal(3) + [0.0, 0.0, 1.0]
        quat = rng.standard_normal(4)
        q[3:7] = quat / np.linalg.norm(quat)
    return q, rng.standard_normal(robot.nv)


def drake_from_pinocchio_velocity(sim: DrakeSim, q: np.ndarray) -> np.ndarray:
    """(nv, nv) T with Drake's v = T (Pinocchio's v), built from the joint names and the free joint's layout.

    Free flyer: Drake's [ω_W; v_W] = [R ω_B; R v_B] with R the base orientation.
    """
    plant, robot = sim.plant, sim.robot
    T = np.zeros((plant.num_velocities(), robot.nv))
    first = 1
    if robot.floating_base:
        (base,) = plant.GetFloatingBaseBodies()
        b = plant.get_body(base).floating_velocities_start_in_v()
        R = pin.Quaternion(q[6], q[3], q[4], q[5]).toRotationMatrix()
        T[b : b + 3, 3:6] = R
        T[b + 3 : b + 6, 0:3] = R
        first = 2
    for j in range(first, robot.model.njoints):
        T[plant.GetJointByName(str(robot.model.names[j])).velocity_start(), robot.model.joints[j].idx_v] = 1.0
    return T


@pytest.mark.parametrize("name", ["quadruped", "arm"])
def test_state_round_trip(name: str, rng: np.random.Generator) -> None:
    """reset(q, v) then state() returns the same q, v in Pinocchio's conventions (base frame, x y z w)."""
    robot = RobotModel(name)
    sim = DrakeSim(robot, floor=False)
    for _ in range(3):
        q, v = random_state(robot, rng)
        sim.reset(q, v)
        s = sim.state()
        np.testing.assert_allclose(s.q, q, atol=1e-14)
        np.testing.assert_allclose(s.v, v, atol=1e-12)
        assert s.t == 0.0


@pytest.mark.parametrize("name", ["quadruped", "arm", "solo12"])
def test_drake_and_pinocchio_agree_on_the_model_in_both_conventions(name: str, rng: np.random.Generator) -> None:
    """Same state: Drake's kinetic and potential energies, mass matrix and sphere centres equal Pinocchio's."""
    if name == "solo12" and solo12_urdf() is None:
        pytest.skip("example-robot-data is not installed")
    robot = RobotModel(name)
    sim = DrakeSim(robot, floor=False)
    plant, context = sim.plant, sim.plant_context
    model, data = robot.model, robot.model.createData()
    q_rest = robot.standing_configuration()
    sim.reset(q_rest)
    potential_rest = plant.CalcPotentialEnergy(context)
    for _ in range(3):
        q, v = random_state(robot, rng)
        sim.reset(q, v)
        M = pin.crba(model, data, q)
        M = np.triu(M) + np.triu(M, 1).T
        T = drake_from_pinocchio_velocity(sim, q)
        np.testing.assert_allclose(T.T @ plant.CalcMassMatrix(context) @ T, M, atol=1e-12 * np.abs(M).max())
        kinetic = 0.5 * v @ M @ v  # the velocity conversion, the base frame's included
        assert plant.CalcKineticEnergy(context) == pytest.approx(kinetic, rel=1e-12)
        # potential energies differ by a constant (Drake counts a fixed base's own links): compare changes
        potential = pin.computePotentialEnergy(model, data, q) - pin.computePotentialEnergy(model, data, q_rest)
        assert plant.CalcPotentialEnergy(context) - potential_rest == pytest.approx(potential, abs=1e-9)
        pin.framesForwardKinematics(model, data, q)
        inspector = sim.scene_graph.model_inspector()
        spheres = zip(robot.config.contact_spheres, robot.sphere_frame_ids, sim.sphere_geometries, strict=True)
        for sphere, fid, geometry in spheres:
            assert inspector.GetName(geometry).endswith(f"contact:{sphere.name}")
            body = plant.GetBodyFromFrameId(inspector.GetFrameId(geometry))
            X_WB = plant.EvalBodyPoseInWorld(context, body)
            centre = X_WB.multiply(inspector.GetPoseInFrame(geometry).translation())
            np.testing.assert_allclose(centre, data.oMf[int(fid)].act(sphere.offset_in_frame), atol=1e-12)


@pytest.mark.parametrize("name", ["quadruped", "arm"])
def test_torques_act_on_the_joints_pinocchio_names(name: str, rng: np.random.Generator) -> None:
    """One step in the air: Δv / Δt equals Pinocchio's forward dynamics under the same torques (ABA)."""
    robot = RobotModel(name)
    sim = DrakeSim(robot, floor=False)
    q, _ = random_state(robot, rng)
    v = 0.1 * rng.standard_normal(robot.nv)
    tau = rng.uniform(-0.5, 0.5, robot.nu)
    sim.reset(q, v)
    sim.step(tau)
    generalized = np.zeros(robot.nv)
    generalized[robot.actuated_dofs] = tau
    expected = pin.aba(robot.model, robot.model.createData(), q, v, generalized)
    measured = (sim.state().v - v) / sim.timestep
    # a floating base's velocity is reported in the base frame of the new pose: O(Δt |ω|) from the old one
    np.testing.assert_allclose(measured, expected, atol=2e-4 * np.abs(expected).max())


def test_reported_quaternions_are_unit_while_the_base_tumbles(quadruped: RobotModel) -> None:
    """A base spinning at 20 rad/s in the air keeps a unit quaternion in state() (Drake's own drifts)."""
    sim = DrakeSim(quadruped, floor=False)
    q = sim.initial.copy()
    v = np.zeros(quadruped.nv)
    v[3:6] = [20.0, 13.0, -7.0]
    sim.reset(q, v)
    for _ in range(300):
        sim.step(np.zeros(quadruped.nu))
    s = sim.state()
    assert np.linalg.norm(s.q[3:7]) == pytest.approx(1.0, abs=1e-12)
    assert abs(np.linalg.norm(sim.plant.GetPositions(sim.plant_context)[:4]) - 1.0) > 1e-9  # why it is needed


def test_one_sap_update_per_step(quadruped_sim: DrakeSim) -> None:
    """Each step() advances one time step: in free fall v_z = −g n Δt and t = n Δt after n steps."""
    sim = quadruped_sim
    q = sim.robot.standing_configuration()
    q[2] = 1.0
    sim.reset(q)
    for _ in range(25):
        sim.step(np.zeros(sim.robot.nu))
    s = sim.state()
    assert s.t == pytest.approx(25e-3, abs=1e-15)
    assert s.v[2] == pytest.approx(-9.81 * 25e-3, rel=1e-9)
    np.testing.assert_array_equal(s.contact_forces, 0.0)


def hold_still(sim: DrakeSim, steps: int) -> None:
    """Joint PD around the initial posture (kp 80 N·m/rad, kd 1 N·m·s/rad)."""
    robot = sim.robot
    joints = [robot.model.joints[robot.model.getJointId(n)] for n in robot.actuated_joints]
    iq, iv = [j.idx_q for j in joints], [j.idx_v for j in joints]
    q_ref = sim.initial[iq]
    for _ in range(steps):
        s = sim.state()
        sim.step(80.0 * (q_ref - s.q[iq]) - 1.0 * s.v[iv])


def test_standing_feet_carry_the_weight_in_robot_toml_order(quadruped_sim: DrakeSim) -> None:
    """Standing, the sensed forces sum to m g upward, a quarter per foot, at rest on the stiffness's penetration."""
    sim, robot = quadruped_sim, quadruped_sim.robot
    sim.reset()
    hold_still(sim, 300)
    s = sim.state()
    weight = robot.total_mass() * 9.81
    np.testing.assert_allclose(s.contact_forces.sum(axis=0), [0.0, 0.0, weight], atol=1e-6 * weight)
    np.testing.assert_allclose(s.contact_forces[:, 2], weight / 4, rtol=1e-3)
    assert np.abs(s.v).max() < 1e-3
    data = robot.model.createData()
    pin.framesForwardKinematics(robot.model, data, s.q)
    for sphere, fid in zip(robot.config.contact_spheres, robot.sphere_frame_ids, strict=True):
        penetration = sphere.radius - data.oMf[int(fid)].act(sphere.offset_in_frame)[2]
        assert penetration == pytest.approx(weight / 4 / DEFAULT_STIFFNESS, rel=0.02)  # the contact spring
    assert not sim.fell(0.1)


def test_a_lifted_foot_senses_nothing_and_its_load_moves_to_the_others(quadruped: RobotModel) -> None:
    """With LF's knee folded off the ground, LF's sensed force is zero and the three others carry the robot."""
    sim = DrakeSim(quadruped)
    q = sim.initial.copy()
    lf = quadruped.sphere_names.index("LF_foot")
    q[quadruped.model.joints[quadruped.model.getJointId("LF_KFE")].idx_q] = -2.0
    sim.reset(q)
    for _ in range(5):
        sim.step(np.zeros(quadruped.nu))
    f = sim.state().contact_forces
    np.testing.assert_array_equal(f[lf], 0.0)
    others = np.delete(np.arange(4), lf)
    assert np.all(f[others, 2] > 1.0)


def test_grasped_box_forces_act_on_the_fingertips(arm: RobotModel) -> None:
    """Squeezing the box, each fingertip senses a force pointing away from the box centre, in robot.toml order."""
    sim = DrakeSim(arm, with_objects=True, mu=1.0)
    fingers = [arm.actuated_joints.index(f"finger_{i}") for i in range(1, 5)]
    tau = np.zeros(arm.nu)
    tau[fingers] = 20.0  # N, closing
    for _ in range(20):
        sim.step(tau)
    s = sim.state()
    box = s.objects["box"].position
    model, data = arm.model, arm.model.createData()
    pin.framesForwardKinematics(model, data, s.q)
    for k, fid in enumerate(arm.sphere_frame_ids):
        outward = data.oMf[int(fid)].translation - box
        outward[2] = 0.0
        assert s.contact_forces[k] @ outward / np.linalg.norm(outward) > 5.0, (arm.sphere_names[k], s.contact_forces)


def test_parameters_are_checked() -> None:
    """Bad stiffness, relaxation time, friction or torques raise, naming what is wrong."""
    with pytest.raises(ConfigError, match="stiffness"):
        DrakeSim("quadruped", stiffness=0.0)
    with pytest.raises(ConfigError, match="relaxation"):
        DrakeSim("quadruped", relaxation_time=-1e-3)
    with pytest.raises(ConfigError, match="mu"):
        DrakeSim("quadruped", mu=-1.0)
    sim = DrakeSim("quadruped", stiffness=2e5, relaxation_time=2e-3, mu=float("inf"))
    assert (sim.stiffness, sim.relaxation_time) == (2e5, 2e-3)
    assert (DEFAULT_STIFFNESS, DEFAULT_RELAXATION_TIME) == (1e6, 1e-3)
    with pytest.raises(ShapeError):
        sim.step(np.zeros(3))
    with pytest.raises(NonFiniteError):
        sim.step(np.full(12, np.nan))
    assert sim.time == 0.0
    with pytest.raises(InputError):
        DrakeSim("arm").fell(0.1)


def test_closed_loop_stand_through_the_test_harness() -> None:
    """The two-stage QP holds the quadruped 1 s in Drake; its predicted normal force matches Drake's within 1 %."""
    config = loop_config("quadruped", simulator="drake", penetration_tolerance=1e-3, duration=1.0)
    run = run_in_process(config)
    assert run.end_reason == "duration reached" and run.ticks_in_run == 1000
    assert not run.summary["fell"]
    assert run.summary["tracking_error_rad"] < 1e-3
    predicted = np.einsum("nkj,nkj->n", run.force_predicted[:-1], run.contact_normal[:-1])
    sensed = run.force_sensed[1:, :, 2].sum(axis=1)
    weight = run.robot.total_mass() * 9.81
    np.testing.assert_allclose(predicted[100:], weight, rtol=0.01)
    np.testing.assert_allclose(sensed[100:], weight, rtol=0.01)


def test_bench_times_the_drake_step_beside_the_other_simulators(capsys) -> None:
    """`idcontrol bench --scenarios drake_sim` times a step of each back end standing and trotting, in run mode."""
    from idcontrol.tools.bench import SIM_BENCH_KINDS, bench_sim_step

    assert SIM_BENCH_KINDS == ("drake", "mujoco", "rigid")
    t = bench_sim_step("drake", "trot", 60)
    assert t["ticks"] == 60 and t["mode"] == "run"
    assert 0 < t["p50_us"] <= t["p99_us"] <= t["max_us"] and t["state_p50_us"] > 0
