"""The MuJoCo back end: a model built from the URDF whose dynamics and state match Pinocchio's conventions."""

from __future__ import annotations

import math

import mujoco
import numpy as np
import pinocchio as pin
import pytest

from idcontrol.contacts.world import GRAVITY, ObjectState, rotation_from_xyzw
from idcontrol.errors import ConfigError, InputError, NonFiniteError, ShapeError
from idcontrol.robot.model import RobotModel
from idcontrol.sim.mujoco import (
    COMPLIANT_SOLIMP,
    COMPLIANT_SOLREF,
    MU_INFINITE,
    MujocoSim,
    SimulationDiverged,
)
from tests.conftest import solo12_urdf, with_urdf


def random_state(robot: RobotModel, rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray]:
    """A random (q, v): random base pose and twist, joints within ±1 rad (±0.02 m for prismatic)."""
    q = robot.standing_configuration()
    for name in robot.actuated_joints:
        j = robot.model.joints[robot.model.getJointId(name)]
        scale = 0.02 if "Prismatic" in j.shortname() else 1.0
        q[j.idx_q] = scale * rng.uniform(-1.0, 1.0)
    if robot.floating_base:
        q[0:3] = rng.standard_normal(3)
        quat = rng.standard_normal(4)
        q[3:7] = quat / np.linalg.norm(quat)
    return q, rng.standard_normal(robot.nv)


def qvel_from_v(sim: MujocoSim, q: np.ndarray) -> np.ndarray:
    """(nv_mj, nv) T with MuJoCo qvel = T v, built by joint name from both models.

    For the free flyer: qvel_lin (world) = R v_lin (base), qvel_ang = v_ang (both in the base frame).
    """
    robot, m = sim.robot, sim.model
    T = np.zeros((m.nv, robot.nv))
    first = 1
    if robot.floating_base:
        b = m.jnt_dofadr[m.joint("root_joint").id]
        T[b : b + 3, 0:3] = rotation_from_xyzw(q[3:7])
        T[b + 3 : b + 6, 3:6] = np.eye(3)
        first = 2
    for j in range(first, robot.model.njoints):
        T[m.jnt_dofadr[m.joint(str(robot.model.names[j])).id], robot.model.joints[j].idx_v] = 1.0
    return T


def dense_mass_matrix(m: mujoco.MjModel, d: mujoco.MjData) -> np.ndarray:
    """MuJoCo's M(q) as a dense (nv, nv) matrix, one column per mj_mulM (works on every MuJoCo version)."""
    M = np.zeros((m.nv, m.nv))  # symmetric: row i = column i
    for i in range(m.nv):
        mujoco.mj_mulM(m, d, M[i], np.eye(m.nv)[i])
    return M


def hold_pose(sim: MujocoSim, steps: int, kp: float = 20.0, kd: float = 0.3) -> None:
    """Step with joint PD holding the initial posture (gains low enough for explicit torque control at 1 kHz)."""
    robot = sim.robot
    target = robot.joint_positions(sim.initial)
    for _ in range(steps):
        s = sim.state()
        sim.step(kp * (target - robot.joint_positions(s.q)) - kd * s.v[robot.actuated_dofs])


def test_quadruped_model_from_urdf(quadruped: RobotModel) -> None:
    """A free joint + the URDF's joints, an actuator per actuated joint in order; only spheres and floor collide."""
    sim = MujocoSim(quadruped)
    m = sim.model
    assert (m.nq, m.nv, m.nu) == (quadruped.nq, quadruped.nv, quadruped.nu) == (19, 18, 12)
    assert m.jnt_type[m.joint("root_joint").id] == mujoco.mjtJoint.mjJNT_FREE
    assert [m.actuator(i).name for i in range(m.nu)] == list(quadruped.actuated_joints)
    assert [m.joint(int(m.actuator_trnid[i, 0])).name for i in range(m.nu)] == list(quadruped.actuated_joints)
    np.testing.assert_array_equal(m.actuator_gear[:, 0], 1.0)
    np.testing.assert_array_equal(m.actuator_ctrlrange, np.c_[-quadruped.torque_limits, quadruped.torque_limits])
    colliding = sorted(m.geom(i).name for i in range(m.ngeom) if m.geom_contype[i] or m.geom_conaffinity[i])
    assert colliding == sorted(["floor", *(f"contact:{n}" for n in quadruped.sphere_names)])
    assert m.body_subtreemass[0] == pytest.approx(quadruped.total_mass(), rel=1e-12)
    np.testing.assert_array_equal(m.dof_damping, 0.0)
    np.testing.assert_array_equal(m.dof_armature, 0.0)
    np.testing.assert_allclose(m.opt.gravity, [0.0, 0.0, -9.81])
    assert m.opt.cone == mujoco.mjtCone.mjCONE_ELLIPTIC


@pytest.mark.parametrize("name", ["quadruped", "arm"])
def test_state_round_trip(name: str, rng: np.random.Generator) -> None:
    """q, v set through reset() read back identically from state() (quaternion order, velocity frames, joint order)."""
    robot = RobotModel(name)
    sim = MujocoSim(robot, floor=False)
    for _ in range(3):
        q, v = random_state(robot, rng)
        sim.reset(q, v)
        s = sim.state()
        np.testing.assert_allclose(s.q, q, atol=1e-12)
        np.testing.assert_allclose(s.v, v, atol=1e-12)
        assert s.t == 0.0


@pytest.mark.parametrize("name", ["quadruped", "arm"])
def test_dynamics_match_pinocchio(name: str, rng: np.random.Generator) -> None:
    """Tᵀ M_mj T = Pinocchio's crba M and Tᵀ (h_mj + M_mj Ṫ v) = its nonLinearEffects, with qvel = T(q) v.

    q̈_mj = T v̇ + Ṫ v, and for the free flyer Ṫ v = [R (ω × v_lin); 0] since Ṙ = R [ω]×.
    """
    robot = RobotModel(name)
    sim = MujocoSim(robot, floor=False)
    m, d = sim.model, sim.data
    for _ in range(3):
        q, v = random_state(robot, rng)
        sim.reset(q, v)  # runs mj_forward: qM and qfrc_bias at (q, v)
        T = qvel_from_v(sim, q)
        M_mj = dense_mass_matrix(m, d)
        Tdot_v = np.zeros(m.nv)
        if robot.floating_base:
            Tdot_v[0:3] = rotation_from_xyzw(q[3:7]) @ np.cross(v[3:6], v[0:3])
        M_pin = pin.crba(robot.model, robot.data, q)
        M_pin = np.triu(M_pin) + np.triu(M_pin, 1).T
        h_pin = pin.nonLinearEffects(robot.model, robot.data, q, v)
        np.testing.assert_allclose(T.T @ M_mj @ T, M_pin, atol=1e-10)
        np.testing.assert_allclose(T.T @ (d.qfrc_bias + M_mj @ Tdot_v), h_pin, atol=1e-9)


def test_quadruped_stands_and_feet_carry_its_weight(quadruped: RobotModel) -> None:
    """Standing under joint PD, the summed contact force on the feet is m g upward, shared by all four feet."""
    sim = MujocoSim(quadruped)
    hold_pose(sim, 400)
    s = sim.state()
    weight = quadruped.total_mass() * 9.81
    assert weight == pytest.approx(4.8 * 9.81)
    np.testing.assert_allclose(s.contact_forces.sum(axis=0), [0.0, 0.0, weight], atol=1e-6 * weight)
    np.testing.assert_allclose(s.contact_forces[:, 2], weight / 4, rtol=0.05)
    assert np.abs(s.v).max() < 1e-3
    assert not sim.fell(0.1)
    assert s.t == pytest.approx(0.4)


def test_contact_softness_is_a_parameter(quadruped: RobotModel) -> None:
    """The stiff default lets the feet sink < 0.05 mm at rest; the compliant setting about 1 mm."""
    for kwargs, lo, hi in [({}, 0.0, 5e-5), ({"solref": COMPLIANT_SOLREF, "solimp": COMPLIANT_SOLIMP}, 5e-4, 2e-3)]:
        sim = MujocoSim(quadruped, **kwargs)
        hold_pose(sim, 300)
        depth = -sim.data.contact.dist[: sim.data.ncon]
        assert sim.data.ncon == 4
        assert np.all((lo < depth) & (depth < hi)), depth


def test_arm_with_box(arm: RobotModel) -> None:
    """The box: 6000 kg/m³ · (0.05 m)³ = 0.75 kg, uniform-cube inertia, at its configured pose, no floor by default."""
    sim = MujocoSim(arm, with_objects=True)
    m = sim.model
    box = arm.config.objects[0]
    body = m.body("box").id
    assert m.body_mass[body] == pytest.approx(0.75, rel=1e-12)
    np.testing.assert_allclose(m.body_inertia[body], 0.75 * 0.05**2 / 6.0, rtol=1e-12)
    np.testing.assert_array_equal(m.body_ipos[body], 0.0)  # centre of mass at the body origin
    np.testing.assert_allclose(m.geom_size[m.geom("box").id], [0.025] * 3)
    assert m.geom_friction[m.geom("box").id, 0] == box.mu
    assert "floor" not in [m.geom(i).name for i in range(m.ngeom)]
    s = sim.state()
    np.testing.assert_allclose(s.objects["box"].position, box.initial_position)
    np.testing.assert_allclose(s.objects["box"].orientation_xyzw, box.initial_orientation_xyzw)
    np.testing.assert_allclose(s.q, arm.standing_configuration())
    slippery = MujocoSim(arm, with_objects=True, object_mu=0.3).model
    assert slippery.geom_friction[slippery.geom("box").id, 0] == 0.3


def test_object_twist_is_in_world_frame(arm: RobotModel) -> None:
    """A tilted free cube spinning about world z keeps ω_world and falls with ẍ = g: velocities are world-frame."""
    sim = MujocoSim(arm, with_objects=True)
    orientation = np.array([np.sin(0.3), 0.0, 0.0, np.cos(0.3)])  # 0.6 rad about x
    omega_world = np.array([0.0, 0.0, 2.0])
    start = ObjectState(np.array([2.0, 2.0, 2.0]), orientation, np.array([0.1, 0.0, 0.0]), omega_world)
    sim.reset(objects={"box": start})
    back = sim.state().objects["box"]
    np.testing.assert_allclose(back.angular_velocity, omega_world, atol=1e-12)
    np.testing.assert_allclose(back.orientation_xyzw, orientation, atol=1e-12)
    for _ in range(100):
        sim.step(np.zeros(arm.nu))
    box = sim.state().objects["box"]
    np.testing.assert_allclose(box.angular_velocity, omega_world, atol=1e-9)  # isotropic inertia: ω constant in world
    np.testing.assert_allclose(box.linear_velocity, [0.1, 0.0, -9.81 * sim.time], atol=1e-9)
    with pytest.raises(InputError):
        sim.reset(objects={"ball": start})


def test_grasp_holds_the_box(arm: RobotModel) -> None:
    """Arm held, fingers squeezing 10 N: the box hangs in the grasp and its weight loads the fingertips.

    Each fingertip is pushed away from the box centre (the sphere is MuJoCo's geom1 here, the opposite
    sign case of the floor) and, by Newton's third law, the fingertips receive −(m Δv/Δt − m g) of the
    box's last step.
    """
    sim = MujocoSim(arm, with_objects=True)
    fingers = np.array([arm.actuated_joints.index(f"finger_{i}") for i in range(1, 5)])
    joints = np.setdiff1d(np.arange(arm.nu), fingers)
    target = arm.joint_positions(sim.initial)
    for _ in range(300):
        s = sim.state()
        box_velocity_before = s.objects["box"].linear_velocity
        tau = pin.computeGeneralizedGravity(arm.model, arm.data, s.q)[arm.actuated_dofs]
        tau += 50.0 * (target - arm.joint_positions(s.q)) - 2.0 * s.v[arm.actuated_dofs]
        tau[fingers] = 10.0  # closing
        sim.step(tau)
    s = sim.state()
    arm.update(s.q, s.v)
    box = s.objects["box"]
    slip = box.position - arm.sphere_centers_in_world.mean(axis=0)
    assert np.linalg.norm(slip) < 1e-4
    assert np.all(np.abs(tau[joints]) < arm.torque_limits[joints])
    m = arm.config.objects[0].mass
    force_on_box = m * (box.linear_velocity - box_velocity_before) / sim.model.opt.timestep - m * GRAVITY
    np.testing.assert_allclose(s.contact_forces.sum(axis=0), -force_on_box, atol=1e-6)
    assert s.contact_forces[:, 2].sum() == pytest.approx(-m * 9.81, rel=0.1)
    outward = arm.sphere_centers_in_world - box.position
    for f, d in zip(s.contact_forces, outward, strict=True):
        assert f[:2] @ d[:2] / np.linalg.norm(d[:2]) == pytest.approx(10.0, rel=0.1)  # the squeeze, outward


def test_mu_infinite_is_accepted(quadruped: RobotModel) -> None:
    """mu = inf maps to MU_INFINITE on the floor; the robot still stands; a negative mu is a ConfigError."""
    sim = MujocoSim(quadruped, mu=math.inf)
    assert sim.model.geom_friction[sim.model.geom("floor").id, 0] == MU_INFINITE
    hold_pose(sim, 400)
    assert sim.state().contact_forces[:, 2].sum() == pytest.approx(quadruped.total_mass() * 9.81, rel=1e-4)
    with pytest.raises(ConfigError):
        MujocoSim(quadruped, mu=-1.0)


def test_bad_torque_raises_without_stepping(quadruped: RobotModel) -> None:
    """NaN torque → NonFiniteError, wrong length → ShapeError; neither advances time nor changes the state."""
    sim = MujocoSim(quadruped)
    before = sim.state()
    tau = np.zeros(quadruped.nu)
    tau[3] = np.nan
    with pytest.raises(NonFiniteError):
        sim.step(tau)
    with pytest.raises(ShapeError):
        sim.step(np.zeros(quadruped.nu + 1))
    after = sim.state()
    assert sim.time == 0.0
    np.testing.assert_array_equal(after.q, before.q)
    np.testing.assert_array_equal(after.v, before.v)


def test_divergence_raises_instead_of_silent_reset(quadruped: RobotModel) -> None:
    """A blown-up state raises SimulationDiverged (MuJoCo's auto-reset is off); reset() recovers."""
    sim = MujocoSim(quadruped)
    v = np.zeros(quadruped.nv)
    v[8] = 1e11  # beyond MuJoCo's 1e10 sanity bound
    sim.reset(v=v)
    with pytest.raises(SimulationDiverged):
        sim.step(np.zeros(quadruped.nu))
    sim.reset()
    sim.step(np.zeros(quadruped.nu))
    assert sim.time == pytest.approx(1e-3)


def test_fell(quadruped: RobotModel, arm: RobotModel) -> None:
    """fell() compares the base height; a fixed-base robot cannot fall."""
    sim = MujocoSim(quadruped)
    assert not sim.fell(0.1)
    low = sim.initial.copy()
    low[2] = 0.05
    sim.reset(low)
    assert sim.fell(0.1)
    with pytest.raises(InputError):
        MujocoSim(arm).fell(0.1)


@pytest.mark.skipif(solo12_urdf() is None, reason="example-robot-data is not installed")
def test_solo12_builds_with_meshes_and_matches_pinocchio(rng: np.random.Generator) -> None:
    """A third-party URDF (package:// meshes, fused fixed links): same M as Pinocchio, stands on its feet."""
    robot = RobotModel("solo12")
    sim = MujocoSim(robot)
    q, v = random_state(robot, rng)
    sim.reset(q, v)
    T = qvel_from_v(sim, q)
    M_pin = pin.crba(robot.model, robot.data, q)
    M_pin = np.triu(M_pin) + np.triu(M_pin, 1).T
    np.testing.assert_allclose(T.T @ dense_mass_matrix(sim.model, sim.data) @ T, M_pin, atol=1e-10)
    sim.reset()
    hold_pose(sim, 800, kp=6.0, kd=0.1)
    forces = sim.state().contact_forces
    assert forces[:, 2].sum() == pytest.approx(robot.total_mass() * 9.81, rel=2e-2)
    assert np.all(forces[:, 2] > 0.1 * robot.total_mass())


def arm_with_joint_friction(arm: RobotModel, folder, friction: float = 1.0, damping: float = 0.5) -> RobotModel:
    """The shipped arm with ``<dynamics damping friction>`` (N·m·s/rad, N·m) on every joint, in ``folder``."""
    urdf = arm.config.urdf_path.read_text()
    assert urdf.count('<dynamics damping="0.0" friction="0.0"/>') >= arm.nu
    urdf = urdf.replace(
        '<dynamics damping="0.0" friction="0.0"/>', f'<dynamics damping="{damping}" friction="{friction}"/>'
    )
    return with_urdf(arm, folder, urdf, "arm_friction.urdf")


def test_urdf_joint_friction_is_dry_friction_that_holds_below_its_level_and_gives_way_above(arm, tmp_path) -> None:
    """The arm's light wrist joint (M_jj 0.003 kg·m², F = 1 N·m) under gravity compensation plus 0.8 F creeps
    under 0.01 rad in 0.1 s (0.007; at MuJoCo's default friction softness 0.061, a drag rather than dry
    friction); plus 1.5 F it turns the way it is pushed (0.86 rad)."""
    robot = arm_with_joint_friction(arm, tmp_path, damping=0.0)
    wrist = robot.actuated_joints.index("arm_j7")
    for extra, moves in ((0.8, False), (1.5, True)):
        sim = MujocoSim(robot)
        q0 = sim.state().q.copy()
        slot = robot.model.joints[robot.model.getJointId("arm_j7")].idx_q
        for _ in range(100):  # 0.1 s
            s = sim.state()
            tau = pin.rnea(robot.model, robot.model.createData(), s.q, np.zeros(robot.nv), np.zeros(robot.nv))
            tau = tau[robot.actuated_dofs]
            tau[wrist] += extra * 1.0
            sim.step(tau)
        turned = sim.state().q[slot] - q0[slot]
        if moves:
            assert turned > 0.5, turned  # rad in 0.1 s: (1.5 − 1) N·m / 0.003 kg·m² accelerates it
        else:
            assert abs(turned) < 0.01, turned


def test_an_arm_with_urdf_friction_tracks_the_joint_sinusoid() -> None:
    """With damping 0.5 N·m·s/rad and dry friction 1 N·m on every joint (light wrists and fingers, 0.003-0.06
    kg·m²), the arm follows launch/joint_sinusoid.toml's 1 Hz swing within 0.001 rad (mean; 0.0001 without the
    friction), in lock-step MuJoCo: the controller's feed-forward meets the simulated dry friction."""
    import tempfile
    from pathlib import Path

    from idcontrol.settings import load_launch
    from idcontrol.testing.runners import run_in_process

    with tempfile.TemporaryDirectory() as folder:
        robot = arm_with_joint_friction(RobotModel("arm"), Path(folder))
        assert np.all(robot.model.friction[robot.actuated_dofs] == 1.0)
        launch = load_launch(Path(__file__).resolve().parents[1] / "launch" / "joint_sinusoid.toml")
        run = run_in_process(launch.with_overrides(robot=str(Path(folder) / "robot.toml")), 3.0)
    assert run.end_reason == "duration reached", run.end_reason
    assert run.summary["tracking_error_rad"] < 0.001, run.summary["tracking_error_rad"]


OBJ_TETRAHEDRON = """v 0 0 0
v 0.01 0 0
v 0 0.01 0
v 0 0 0.01
f 1 3 2
f 1 2 4
f 1 4 3
f 2 3 4
"""


def test_published_urdf_quirks_mujoco_refuses_are_adapted_and_said(quadruped: RobotModel, tmp_path) -> None:
    """Three habits of published URDFs that MuJoCo's importer refuses, all display-only: a <mujoco> block's
    meshdir beside relative mesh paths (it looked for meshes/meshes/...), two <material> in one <visual>, and a
    mesh file that is missing. The simulator builds, keeps the mesh that exists, and says what it dropped."""
    (tmp_path / "meshes").mkdir()
    (tmp_path / "meshes" / "shank.obj").write_text(OBJ_TETRAHEDRON)
    shank = """<visual>
      <origin xyz="0 0 -0.05" rpy="0 0 0"/>
      <geometry><box size="0.015 0.015 0.1"/></geometry>
    </visual>"""
    extra = """<visual><geometry><mesh filename="meshes/shank.obj"/></geometry>
      <material name="grey"><color rgba="0.5 0.5 0.5 1"/></material><material name="dark"/></visual>
    <collision><geometry><mesh filename="package://gone/meshes/shank.stl"/></geometry></collision>"""
    text = quadruped.config.urdf_path.read_text()
    assert text.count(shank) >= 1
    text = text.replace(shank, shank + extra, 1)
    assert text.count("<compiler discardvisual=") == 1
    text = text.replace("<compiler discardvisual=", '<compiler meshdir="meshes" discardvisual=')
    robot = with_urdf(quadruped, tmp_path, text)
    sim = MujocoSim(robot)
    assert any("1 visual/collision element(s) dropped" in d and "package://gone" in d for d in sim.model_differences)
    assert any("1 repeated <material>" in d for d in sim.model_differences)
    meshes = [sim._model.mesh(i).name for i in range(sim._model.nmesh)]
    assert len(meshes) == 1, meshes  # the mesh that exists is kept
    sim.step(np.zeros(robot.nu))


def test_a_plates_inertia_that_breaks_the_triangle_inequality_by_round_off_is_accepted(
    quadruped: RobotModel, tmp_path
) -> None:
    """ROBOTIS OP2 writes a thin plate's moments with 12 digits each, so that I1 + I2 < I3 by round-off. The
    preflight accepts it (to 1e-6 relative); MuJoCo's compiler refused it, and the robot could not
    be simulated even with [sim] repair_inertia, since no link was named. Now the nearest moments it accepts are
    used, and said."""
    shank = '<inertia ixx="6.816667e-05" ixy="0" ixz="0" iyy="6.816667e-05" iyz="0" izz="3.000000e-06"/>'
    text = quadruped.config.urdf_path.read_text()
    assert shank in text
    plate = '<inertia ixx="8.53333333333e-05" ixy="0" ixz="0" iyy="8.53333333333e-05" iyz="0" izz="1.70666666667e-04"/>'
    robot = with_urdf(quadruped, tmp_path, text.replace(shank, plate, 1))
    assert robot.preflight.ok and not robot.preflight.repairable_links
    sim = MujocoSim(robot)
    assert any("LF_shank" in d and "round-off" in d for d in sim.model_differences), sim.model_differences
    sim.step(np.zeros(robot.nu))
