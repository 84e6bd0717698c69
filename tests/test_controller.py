"""The controller core on real robot models (Pinocchio from URDF): physics checks and degenerate cases."""

from __future__ import annotations

import numpy as np
import pinocchio as pin
import pytest

from idcontrol.contacts.world import Environment, ObjectState
from idcontrol.control.controller import FRICTION_RAMP, InverseDynamicsController
from idcontrol.control.state import RobotState
from idcontrol.errors import (
    InputError,
    NameNotFound,
    NonFiniteError,
    RobotFileNotFound,
    ShapeError,
    UnknownFormulation,
    UnknownRobot,
)
from idcontrol.formulations import contact_formulations, make_formulation
from idcontrol.formulations.coulomb_lcp import PAPER_OPTIONS as COULOMB_PAPER
from idcontrol.formulations.noslip_lcp import PAPER_OPTIONS
from idcontrol.formulations.two_stage_qp import remap_active_set
from idcontrol.reference.base import Tracking
from idcontrol.robot.config import load_robot_config
from idcontrol.robot.model import RobotModel
from tests.conftest import solo12_urdf, with_urdf

CONTACT_FORMULATIONS = contact_formulations()
G = 9.81


def standing(robot: RobotModel, v_scale: float = 0.0, seed: int = 0) -> RobotState:
    v = v_scale * np.random.default_rng(seed).standard_normal(robot.nv)
    return RobotState(q=robot.standing_configuration(), v=v)


def ground(mu: float) -> Environment:
    return Environment.flat_ground(mu)


@pytest.mark.parametrize("name", CONTACT_FORMULATIONS + ["sensed_id"])
def test_no_contact_torques_equal_rnea_on_a_fixed_base(arm: RobotModel, name: str) -> None:
    """Without contact, a fixed-base robot's torques equal Pinocchio's RNEA for q̈_des (to 1e-9)."""
    rng = np.random.default_rng(1)
    controller = InverseDynamicsController(arm, Environment(), name)
    q = arm.standing_configuration() + 0.1 * rng.standard_normal(arm.nq)
    v = rng.standard_normal(arm.nv)
    qdd = rng.standard_normal(arm.nu)
    state = RobotState(q=q, v=v, sensed_forces=np.zeros((4, 3)))
    result = controller.solve(state, qdd)
    assert result.found and result.contact_count == 0
    expected = pin.rnea(arm.model, arm.model.createData(), q, v, qdd)
    np.testing.assert_allclose(result.tau, expected, rtol=0, atol=1e-9)


@pytest.mark.parametrize("name", CONTACT_FORMULATIONS)
def test_the_urdfs_joint_damping_and_friction_are_added_at_the_references_velocity(
    arm: RobotModel, tmp_path, name: str
) -> None:
    """A robot whose URDF declares joint damping D and dry friction F (``<dynamics>``, as MuJoCo simulates them):
    without contact its torques are Pinocchio's RNEA for q̈_des plus D q̇_ref + clip(M_jj q̇_ref / (r Δt), −F, F)
    on each joint (r = FRICTION_RAMP), q̇_ref = q̇ + the tracking's velocity error (1e-9), so the friction term is
    ±F at speed and less near rest; without a tracking record, RNEA alone."""
    urdf = arm.config.urdf_path.read_text()
    assert urdf.count('<dynamics damping="0.0" friction="0.0"/>') >= arm.nu
    for k in range(urdf.count("<dynamics")):  # a different pair on each joint
        urdf = urdf.replace(
            '<dynamics damping="0.0" friction="0.0"/>', f'<dynamics damping="{0.5 + k}" friction="{0.2 * (k + 1)}"/>', 1
        )
    damped = with_urdf(arm, tmp_path, urdf, "damped.urdf")
    dofs = damped.actuated_dofs
    D, F = damped.model.damping[dofs], damped.model.friction[dofs]
    assert np.all(D > 0) and np.all(F > 0)
    controller = InverseDynamicsController(damped, Environment(), name)
    rng = np.random.default_rng(3)
    saturated = 0
    for _ in range(5):
        q = damped.standing_configuration() + 0.1 * rng.standard_normal(damped.nq)
        v = rng.standard_normal(damped.nv)
        qdd = rng.standard_normal(damped.nu)
        velocity_error = 0.02 * rng.standard_normal(damped.nu)
        velocity_error[0] = -v[dofs[0]] + 1e-5  # a joint all but at rest: less than F
        tracking = Tracking(np.zeros(damped.nu), velocity_error)
        state = RobotState(q=q, v=v, sensed_forces=np.zeros((4, 3)))
        data = damped.model.createData()
        rnea = pin.rnea(damped.model, data, q, v, qdd)
        inertia = np.diagonal(pin.crba(damped.model, data, q))[dofs]
        v_ref = v[dofs] + velocity_error
        friction = np.clip(inertia * v_ref / (FRICTION_RAMP * controller.dt), -F, F)
        assert abs(friction[0]) < F[0]
        saturated += int(np.sum(np.abs(friction) == F))
        result = controller.solve(state, qdd, tracking)
        assert result.found and result.contact_count == 0
        np.testing.assert_allclose(result.tau, rnea + D * v_ref + friction, rtol=0, atol=1e-9)
        np.testing.assert_allclose(controller.solve(state, qdd).tau, rnea, rtol=0, atol=1e-9)
    assert saturated > 0  # the full ±F was met too


@pytest.mark.parametrize("name", CONTACT_FORMULATIONS)
@pytest.mark.parametrize("mu", [0.0, 0.1, 1.0, np.inf])
def test_standing_quadruped_is_held_by_predicted_forces(quadruped: RobotModel, name: str, mu: float) -> None:
    """Standing still, the predicted normal forces carry the weight and every model residual is ≤ 1e-8."""
    controller = InverseDynamicsController(quadruped, ground(mu), name)
    result = controller.solve(standing(quadruped), np.zeros(quadruped.nu))
    assert result.found, result.message
    assert result.contact_count == 4
    weight = quadruped.total_mass() * G
    assert result.f_normal.sum() == pytest.approx(weight, rel=1e-6)
    r = result.residuals
    assert max(r.dynamics, r.tracking, r.penetration, r.friction) <= 1e-8
    if name in ("noslip_lcp", "coulomb_lcp"):
        assert r.complementarity <= 1e-8
    assert np.all(np.abs(result.tau) < quadruped.torque_limits)  # a posture the robot can hold


def test_published_robot_solo12_loads_and_stands() -> None:
    """Solo12 from example-robot-data (not written here) loads with m = 18, nq = 12 and stands on four feet."""
    if solo12_urdf() is None:
        pytest.skip("example-robot-data is not installed (pip install -e .[test])")
    robot = RobotModel("solo12")
    assert (robot.nv, robot.nu) == (18, 12)
    for name in CONTACT_FORMULATIONS:
        controller = InverseDynamicsController(robot, ground(0.7), name)
        result = controller.solve(standing(robot), np.zeros(12))
        assert result.found and result.contact_count == 4, result.message
        assert result.f_normal.sum() == pytest.approx(robot.total_mass() * G, rel=1e-6)
        assert result.residuals.dynamics <= 1e-8


def test_stage_two_makes_torques_continuous_where_stage_one_may_jump(quadruped: RobotModel) -> None:
    """Standing on four indeterminate contacts, two-stage torques change in proportion to a state perturbation.

    A continuous (Lipschitz) controller moves its torques 100× less when the
    perturbation is 100× smaller; a controller that jumps between equally valid
    force distributions does not. Stage I alone is measured the same way and printed.
    """
    two_stage = InverseDynamicsController(quadruped, ground(0.8), "two_stage_qp")
    stage_one = make_formulation("two_stage_qp")
    base = standing(quadruped)
    qdd = np.zeros(quadruped.nu)
    tau0 = two_stage.solve(base, qdd).tau
    problem0, _ = two_stage.build_problem(base, qdd)
    z0, stage, red, *_ = stage_one.stage_one(problem0)
    tau0_stage_one = stage.velocity_and_torque(problem0, red, z0)[1]

    def max_change(delta: float) -> tuple[float, float]:
        two, one = 0.0, 0.0
        for seed in range(10):
            rng = np.random.default_rng(seed)
            q = base.q.copy()
            q[7:] += delta * rng.standard_normal(quadruped.nu)
            state = RobotState(q=q, v=delta * rng.standard_normal(quadruped.nv))
            two = max(two, float(np.abs(two_stage.solve(state, qdd).tau - tau0).max()))
            problem, _ = two_stage.build_problem(state, qdd)
            stage_one.reset()
            z, stg, rd, *_ = stage_one.stage_one(problem)
            one = max(one, float(np.abs(stg.velocity_and_torque(problem, rd, z)[1] - tau0_stage_one).max()))
        return two, one

    large_two, large_one = max_change(1e-5)
    small_two, small_one = max_change(1e-7)
    print(
        f"max |Δτ| (N·m) for δ = 1e-5 / 1e-7: two-stage {large_two:.3g} / {small_two:.3g}, "
        f"Stage I alone {large_one:.3g} / {small_one:.3g}"
    )
    assert small_two <= 0.03 * large_two + 1e-7  # proportional: ~0.01 expected
    assert large_two < 0.5  # and small in absolute terms (N·m for a 1e-5 perturbation)


def test_warm_start_follows_contacts_by_identity_not_index(quadruped: RobotModel) -> None:
    """Reordering the contacts of a problem gives the same force on each contact (no-slip LCP warm start)."""
    controller = InverseDynamicsController(quadruped, ground(np.inf), "noslip_lcp")
    problem, _ = controller.build_problem(standing(quadruped), np.zeros(quadruped.nu))
    formulation = make_formulation("noslip_lcp")
    first = formulation.solve(problem)
    order = np.array([2, 0, 3, 1])
    permuted = problem
    permuted.N, permuted.S, permuted.T = problem.N[order], problem.S[order], problem.T[order]
    permuted.phi, permuted.mu = problem.phi[order], problem.mu[order]
    permuted.contact_ids = tuple(problem.contact_ids[i] for i in order)
    permuted.normals = permuted.tangents_s = permuted.tangents_t = None
    second = formulation.solve(permuted)
    assert second.found and second.iterations == 1  # the mapped warm start is already the solution
    by_id = dict(zip(first.contact_ids, first.f_normal, strict=True))
    for cid, f in zip(second.contact_ids, second.f_normal, strict=True):
        assert f == pytest.approx(by_id[cid], abs=1e-9)


@pytest.mark.parametrize("name", ["two_stage_qp", "one_stage_qp"])
def test_qp_warm_start_is_carried_by_contact_identity(quadruped: RobotModel, name: str) -> None:
    """With warm starts on, reordered contacts start from the previous active set mapped by identity."""
    controller = InverseDynamicsController(quadruped, ground(0.8), name)
    problem, _ = controller.build_problem(standing(quadruped), np.zeros(quadruped.nu))
    formulation = make_formulation(name, warm_start=True)
    first = formulation.solve(problem)
    order = np.array([3, 1, 0, 2])
    problem.N, problem.S, problem.T = problem.N[order], problem.S[order], problem.T[order]
    problem.phi, problem.mu = problem.phi[order], problem.mu[order]
    problem.contact_ids = tuple(problem.contact_ids[i] for i in order)
    problem.normals = problem.tangents_s = problem.tangents_t = None
    stage_one_qp = formulation._stage_one if name == "two_stage_qp" else formulation._qp
    carried = remap_active_set(
        stage_one_qp.last_active, first.contact_ids, problem.mu, problem.contact_ids, problem.mu, stage_one=True
    )
    before, after = stage_one_qp.last_active, carried
    np.testing.assert_array_equal(after[:16].reshape(4, 4), before[:16].reshape(4, 4)[:, order])  # bounds, normal
    np.testing.assert_array_equal(after[16:].reshape(4, 4), before[16:].reshape(4, 4)[:, order])  # facets
    second = formulation.solve(problem)
    assert second.found
    by_id = dict(zip(first.contact_ids, first.f_normal, strict=True))
    for cid, f in zip(second.contact_ids, second.f_normal, strict=True):
        assert f == pytest.approx(by_id[cid], abs=1e-6)


@pytest.mark.parametrize("name", CONTACT_FORMULATIONS)
@pytest.mark.parametrize("samples", [2, 4])
def test_redundant_coplanar_and_duplicated_contacts(quadruped: RobotModel, name: str, samples: int) -> None:
    """Several coplanar samples per foot (and exact duplicates) still give a valid, weight-bearing solution."""
    for radius in (0.5, 0.0):  # a ring of samples, then every sample at the same point (duplicates)
        controller = InverseDynamicsController(quadruped, ground(0.8), name, samples_per_contact=samples)
        controller.detector = type(controller.detector)(
            quadruped, controller.environment, samples_per_contact=samples, sample_radius=radius
        )
        result = controller.solve(standing(quadruped), np.zeros(quadruped.nu))
        assert result.found, result.message
        assert result.contact_count == 4 * samples
        assert result.f_normal.sum() == pytest.approx(quadruped.total_mass() * G, rel=1e-6)
        assert result.residuals.dynamics <= 1e-8 and result.residuals.penetration <= 1e-8


@pytest.mark.parametrize("sway", [0.5, 5.0, 15.0])
def test_noslip_release_round_starts_from_the_last_rounds_load(quadruped: RobotModel, sway: float) -> None:
    """Standing on 16 samples per foot, a few hundredths of a mrad off the stance, the no-slip LCP leaves some
    samples unloaded and releases their tangential rows. Without the friction share, Algorithm 1 leaves tangential
    forces on some of them and the problem is solved again: that round starts from the loaded ones of the round
    before, so the whole solve (pivots counted over every round) costs at most two pivots more than the same solve
    without releasing, where a cold restart took as many again (15-32 on these states). With the share (the
    default) they carry only its floor, set to zero: no new round, not one pivot more."""
    joints = [quadruped.model.joints[quadruped.model.getJointId(j)].idx_q for j in quadruped.actuated_joints]
    q = quadruped.standing_configuration()
    q[joints] += 1e-4 * np.sin(sway + np.arange(quadruped.nu))
    pivots = {}
    for share in (False, True):
        for release in (False, True):
            controller = InverseDynamicsController(
                quadruped,
                ground(np.inf),
                "noslip_lcp",
                samples_per_contact=16,
                formulation_options={"release_unloaded": release, "share_friction": share},
            )
            result = controller.solve(RobotState(q=q, v=np.zeros(quadruped.nv)), np.zeros(quadruped.nu))
            assert result.found, result.message
            assert ("released" in result.message) == release, result.message
            pivots[share, release] = result.iterations
    assert pivots[False, False] >= 10  # cold, from one contact: the LCP's work is real
    assert pivots[False, False] < pivots[False, True] <= pivots[False, False] + 2, pivots  # a new round, cheap
    assert pivots[True, True] == pivots[True, False], pivots


# joint offsets (hip flexion, knee) that lift each foot of our quadruped about 8 cm, by q index of the leg's HAA
LIFT = {"LF": (7, 0.5, -1.0), "LH": (10, -0.5, 1.0), "RF": (13, 0.5, -1.0), "RH": (16, -0.5, 1.0)}


@pytest.mark.parametrize("name", CONTACT_FORMULATIONS)
@pytest.mark.parametrize("lifted,touching", [(("LF", "LH", "RF"), 1), (("LF", "RH"), 2)])
def test_one_and_two_contacts(quadruped: RobotModel, name: str, lifted: tuple[str, ...], touching: int) -> None:
    """With feet lifted (one foot, or a diagonal pair, on the ground) the solve is valid and unpenetrating."""
    q = quadruped.standing_configuration()
    for leg in lifted:
        start, hip, knee = LIFT[leg]
        q[start + 1] += hip
        q[start + 2] += knee
    controller = InverseDynamicsController(quadruped, ground(0.5), name)
    result = controller.solve(RobotState(q=q, v=np.zeros(quadruped.nv)), np.zeros(quadruped.nu))
    assert result.contact_count == touching
    assert result.found, result.message
    r = result.residuals
    assert r.dynamics <= 1e-8 and r.penetration <= 1e-8 and r.friction <= 1e-8
    assert result.f_normal.min() >= 0.0


def test_infeasible_splaying_request_on_no_slip_ground_is_repaired(quadruped: RobotModel) -> None:
    """Legs splaying outward on no-slip ground: the paper's Section 4.5 repairs q̇_des and reports it; constraints
    hold. (The default ``project`` makes q̇_des consistent before the solve instead: nothing to repair.)"""
    controller = InverseDynamicsController(quadruped, ground(np.inf), "noslip_lcp", formulation_options=PAPER_OPTIONS)
    qdd = np.zeros(quadruped.nu)
    names = quadruped.actuated_joints
    for i, joint in enumerate(names):  # abduct every hip outward
        if joint.endswith("HAA"):
            qdd[i] = 200.0 if joint.startswith("L") else -200.0
    result = controller.solve(standing(quadruped), qdd)
    assert result.found, result.message
    assert result.consistency_repaired
    assert result.residuals.slip <= 1e-8 and result.residuals.penetration <= 1e-8
    assert result.residuals.dynamics <= 1e-8
    assert result.residuals.tracking > 1e-3  # q̇_des had to change


@pytest.mark.parametrize("orientation_xyzw", [[0.0, 0.0, 0.0, 0.0], [0.0, 0.0, 0.0, 2.0], [0.0, 0.0, 0.5, 0.0]])
def test_a_movable_body_whose_quaternion_is_not_of_unit_norm_is_an_input_error(
    arm: RobotModel, orientation_xyzw
) -> None:
    """The box's orientation is checked as the base's is: a quaternion of norm 0, 2 or 0.5 is refused (naming the
    field) before any formulation sees it, whether the state arrives as float arrays or as lists."""
    controller = InverseDynamicsController(arm, formulation="two_stage_qp")
    good = controller.initial_object_states()["box"]
    q, v = arm.standing_configuration(), np.zeros(arm.nv)
    for quaternion in (np.array(orientation_xyzw), orientation_xyzw):
        bad = ObjectState(good.position, quaternion, good.linear_velocity, good.angular_velocity)
        with pytest.raises(InputError, match=r"box.orientation_xyzw must be a unit quaternion"):
            controller.check_state(RobotState(q, v, objects={"box": bad}))
    nearly = ObjectState(good.position, np.array([0.0, 0.0, 0.0, 1.0005]), good.linear_velocity, good.angular_velocity)
    assert controller.check_state(RobotState(q, v, objects={"box": nearly})).objects["box"] is nearly


def test_grasped_box_is_held_by_the_fingers(arm: RobotModel) -> None:
    """The arm squeezing the 6000 kg/m³ box: the box's 6 DoFs are appended and the predicted forces hold it."""
    for name in CONTACT_FORMULATIONS:
        controller = InverseDynamicsController(arm, formulation=name)
        box = controller.environment.objects[0]
        assert box.mass == pytest.approx(6000.0 * 0.05**3)
        state = RobotState(
            q=arm.standing_configuration(), v=np.zeros(arm.nv), objects=controller.initial_object_states()
        )
        qdd = np.zeros(arm.nu)  # the paper's grasp: fingers hold zero velocity and acceleration
        result = controller.solve(state, qdd)
        assert result.found, (name, result.message)
        assert result.contact_count == 4
        assert controller.m == arm.nv + 6
        assert result.residuals.dynamics <= 1e-8
        box_velocity = result.v_next[arm.nv : arm.nv + 3]
        if name == "two_stage_qp":  # maximal dissipation stops the box: friction ≤ μ Σ f_N carries its weight
            assert abs(box_velocity[2]) < 1e-6
            assert result.f_normal.sum() >= box.mass * G / box.mu * (1.0 - 1e-6)
            assert result.residuals.friction <= 1e-8
        # Non-impacting complementarity models admit the box sliding out between motionless fingers with zero
        # force as a valid solution (the paper's planner closes the fingers further when contact is lost).
        assert box_velocity[2] >= -G * controller.dt * (1.0 + 1e-9)  # never faster than free fall
        squeeze = np.zeros(arm.nu)
        squeeze[-4:] = 50.0  # fingers driven into a rigid box: inconsistent, so repaired and reported
        result = controller.solve(state, squeeze)
        assert result.found and result.consistency_repaired, (name, result.message)
        assert result.residuals.penetration <= 1e-8


def test_sensed_id_with_the_predicted_forces_reproduces_the_prediction(quadruped: RobotModel) -> None:
    """Inverse dynamics with sensed forces equal to the two-stage QP's predicted forces gives the same torques."""
    controller = InverseDynamicsController(quadruped, ground(0.8), "two_stage_qp")
    state = standing(quadruped)
    predicted = controller.solve(state, np.zeros(quadruped.nu))
    sensed = np.zeros((4, 3))
    contacts = controller.last_contacts
    sensed[contacts.sphere] = predicted.force_in_world
    # the prediction acts at the contact points, the sensed force at the sphere centres: move it there
    controller.set_formulation("sensed_id")
    result = controller.solve(RobotState(state.q, state.v, sensed_forces=sensed), np.zeros(quadruped.nu))
    assert result.found
    np.testing.assert_allclose(result.tau, predicted.tau, atol=0.05 * np.abs(predicted.tau).max())


def test_pid_baseline_is_joint_space_pid(quadruped: RobotModel) -> None:
    """pid returns K_p e + K_d ė + K_i ∫e on the actuated joints."""
    controller = InverseDynamicsController(quadruped, ground(1.0), "pid")
    e, de, ie = (np.full(quadruped.nu, x) for x in (0.1, -0.2, 0.05))
    result = controller.solve(standing(quadruped), np.zeros(quadruped.nu), Tracking(e, de, ie))
    g = quadruped.pid_gains  # the baseline's torque gains ([pid_gains]), not the q̈ gains of [gains]
    np.testing.assert_allclose(result.tau, g.kp * e + g.kd * de + g.ki * ie)


def test_bad_input_raises_the_packages_errors(quadruped: RobotModel, tmp_path) -> None:
    """Wrong sizes, NaN state, unknown names and missing files raise idcontrol errors naming the problem."""
    controller = InverseDynamicsController(quadruped, ground(1.0))
    good = standing(quadruped)
    with pytest.raises(ShapeError, match="q"):
        controller.solve(RobotState(good.q[:-1], good.v), np.zeros(quadruped.nu))
    with pytest.raises(ShapeError, match="qdd_des"):
        controller.solve(good, np.zeros(quadruped.nu + 1))
    bad_v = good.v.copy()
    bad_v[3] = np.nan
    with pytest.raises(NonFiniteError, match="v"):
        controller.solve(RobotState(good.q, bad_v), np.zeros(quadruped.nu))
    bad_q = good.q.copy()
    bad_q[3:7] = [0.0, 0.0, 0.0, 2.0]
    with pytest.raises(InputError, match="unit quaternion"):
        controller.solve(RobotState(bad_q, good.v), np.zeros(quadruped.nu))
    sensed = np.zeros((4, 3))
    sensed[2, 1] = np.inf
    with pytest.raises(NonFiniteError, match="sensed_forces"):
        controller.solve(RobotState(good.q, good.v, sensed_forces=sensed), np.zeros(quadruped.nu))
    with pytest.raises(NameNotFound, match="crate"):
        controller.solve(
            RobotState(good.q, good.v, objects={"crate": ObjectState(np.zeros(3), [0, 0, 0, 1])}),
            np.zeros(quadruped.nu),
        )
    with pytest.raises(UnknownRobot, match="quadruped"):
        RobotModel("no_such_robot")
    with pytest.raises(UnknownFormulation, match="noslip_lcp"):
        controller.set_formulation("lcp")
    text = load_robot_config("quadruped").path.read_text()
    (tmp_path / "quadruped.urdf").write_text((load_robot_config("quadruped").urdf_path).read_text())
    (tmp_path / "robot.toml").write_text(text.replace('frame = "LF_foot"', 'frame = "LF_toe"'))
    with pytest.raises(NameNotFound, match="LF_toe"):
        RobotModel(str(tmp_path / "robot.toml"))
    (tmp_path / "robot.toml").write_text(text.replace('urdf = "quadruped.urdf"', 'urdf = "missing.urdf"'))
    with pytest.raises(RobotFileNotFound, match="missing.urdf"):
        RobotModel(str(tmp_path / "robot.toml"))
    (tmp_path / "robot.toml").write_text(
        text.replace('base = "floating"', 'base = "floating"\nactuated_joints = ["XX_KFE"]')
    )
    with pytest.raises(NameNotFound, match="XX_KFE"):
        RobotModel(str(tmp_path / "robot.toml"))


def test_activation_distance_keeps_hovering_feet_out_and_arriving_feet_in(quadruped: RobotModel) -> None:
    """With an activation distance a foot 1 mm up at rest is no contact; one 0.05 mm up falling at 0.1 m/s is."""
    controller = InverseDynamicsController(quadruped, ground(1.0), "two_stage_qp", activation_distance=1e-4)
    q = quadruped.standing_configuration()
    q[2] += 1e-3
    problem, _ = controller.build_problem(RobotState(q=q, v=np.zeros(quadruped.nv)), np.zeros(quadruped.nu))
    assert problem.n == 0
    q[2] += 5e-5 - 1e-3
    v = np.zeros(quadruped.nv)
    v[2] = -0.1  # base (and feet) falling, m/s
    problem, _ = controller.build_problem(RobotState(q=q, v=v), np.zeros(quadruped.nu))
    assert problem.n == 4
    paper = InverseDynamicsController(quadruped, ground(1.0), "two_stage_qp")  # default: every candidate
    q[2] += 1e-3
    problem, _ = paper.build_problem(RobotState(q=q, v=np.zeros(quadruped.nv)), np.zeros(quadruped.nu))
    assert problem.n == 4


def test_consistent_contact_velocity_stops_a_landing_foot_with_its_own_joints(quadruped: RobotModel) -> None:
    """q̇_des (for q̈_des = 0) holds every active contact still, base velocity unchanged; off, it is q̇."""
    rng = np.random.default_rng(3)
    v = 0.2 * rng.standard_normal(quadruped.nv)  # feet moving relative to the floor, base moving too
    state = RobotState(q=quadruped.standing_configuration(), v=v)
    zero = np.zeros(quadruped.nu)
    plain = InverseDynamicsController(quadruped, ground(1.0), "two_stage_qp")
    problem, _ = plain.build_problem(state, zero)
    np.testing.assert_array_equal(problem.qd_des, v[6:])
    consistent = InverseDynamicsController(quadruped, ground(1.0), "two_stage_qp", consistent_contact_velocity=True)
    problem, _ = consistent.build_problem(state, zero)
    v_des = v.copy()
    v_des[6:] = problem.qd_des
    J = np.concatenate([problem.N, problem.S, problem.T])
    assert np.abs(J @ v).max() > 0.05  # the feet do move now
    assert np.abs(J @ v_des).max() < 1e-12


def test_noslip_spread_shares_the_weight_and_stays_complementary(quadruped: RobotModel) -> None:
    """The paper's no-slip LCP returns a vertex of a symmetric stance's solution set; with spread ε (the default
    1e-2 among them) it splits the stance evenly (the least-norm solution); w ⟂ f to ε·f."""
    vertex = InverseDynamicsController(quadruped, ground(np.inf), "noslip_lcp", formulation_options=PAPER_OPTIONS)
    result = vertex.solve(standing(quadruped), np.zeros(quadruped.nu))
    assert result.found and np.count_nonzero(result.f_normal > 1e-6) < 4  # a vertex of the solution set
    default = InverseDynamicsController(quadruped, ground(np.inf), "noslip_lcp")
    result = default.solve(standing(quadruped), np.zeros(quadruped.nu))
    assert result.found, result.message
    np.testing.assert_allclose(result.f_normal, result.f_normal.mean(), rtol=1e-6)
    spread = InverseDynamicsController(quadruped, ground(np.inf), "noslip_lcp", formulation_options={"spread": 1e-6})
    result = spread.solve(standing(quadruped), np.zeros(quadruped.nu))
    assert result.found, result.message
    weight = quadruped.total_mass() * G
    np.testing.assert_allclose(result.f_normal, weight / 4, rtol=1e-4)
    res = result.residuals
    assert res.dynamics < 1e-8 and res.slip < 1e-10 and res.penetration < 1e-8
    assert res.complementarity < 1e-4 * weight


@pytest.mark.parametrize("name", ["coulomb_lcp", "noslip_lcp"])
@pytest.mark.parametrize("spread", [1e-6, 1e-2])
def test_spread_never_answers_an_lcp_without_solution(arm: RobotModel, name: str, spread: float) -> None:
    """Fingers driven into the rigid box: the paper's LCP has no solution; the regularized one would answer about
    r/ε (3.75 kN at ε = 1e-2, 37.5 MN at 1e-6). With a spread the answer is the paper's: the forces of the
    spread-free solve and a repaired, non-penetrating motion within the torque limits."""
    paper = InverseDynamicsController(arm, formulation=name, formulation_options={"spread": 0.0})
    spread_controller = InverseDynamicsController(arm, formulation=name, formulation_options={"spread": spread})
    state = RobotState(q=arm.standing_configuration(), v=np.zeros(arm.nv), objects=paper.initial_object_states())
    squeeze = np.zeros(arm.nu)
    squeeze[-4:] = 50.0
    paper, spread_result = paper.solve(state, squeeze), spread_controller.solve(state, squeeze)
    assert spread_result.found and not spread_result.certificate, spread_result.message
    assert spread_result.residuals.penetration <= 1e-8
    assert np.abs(spread_result.tau).max() <= arm.torque_limits.max()
    np.testing.assert_allclose(spread_result.f_normal, paper.f_normal, atol=1e-6 * max(1.0, paper.f_normal.max()))


@pytest.mark.parametrize("spread", [1e-6, 1e-2])
def test_coulomb_spread_shares_the_weight_and_the_repair_keeps_the_feet_on_the_ground(
    quadruped: RobotModel, spread: float
) -> None:
    """With spread ε the Coulomb LCP splits a symmetric stance evenly where Lemke alone (the paper's method) returns
    a vertex; its forces do not exceed the weight, fall short of it by at most about ε, and the answer neither
    penetrates nor leaves the pyramid, and passes its certificate."""
    vertex = InverseDynamicsController(quadruped, ground(1.0), "coulomb_lcp", formulation_options=COULOMB_PAPER)
    result = vertex.solve(standing(quadruped), np.zeros(quadruped.nu))
    assert result.found and np.count_nonzero(result.f_normal > 1e-6) < 4  # a vertex of the solution set
    shared = InverseDynamicsController(quadruped, ground(1.0), "coulomb_lcp", formulation_options={"spread": spread})
    result = shared.solve(standing(quadruped), np.zeros(quadruped.nu))
    assert result.found and not result.certificate, result.message
    weight = quadruped.total_mass() * G
    np.testing.assert_allclose(result.f_normal, result.f_normal.mean(), rtol=1e-6)
    assert 1.0 - 2.0 * spread < result.f_normal.sum() / weight <= 1.0 + 1e-9
    res = result.residuals
    assert res.dynamics < 1e-8 and res.penetration <= 1e-7 and res.friction < 1e-10


def test_the_problem_and_result_records_hold_each_value_in_its_own_field(quadruped: RobotModel) -> None:
    """The controller builds its problem by keyword, a formulation its result positionally, and the PID baseline's
    input holds the tracking errors and gains: every field holds what its name says."""
    controller = InverseDynamicsController(quadruped, formulation="two_stage_qp")
    tracking = Tracking(np.full(quadruped.nu, 0.1), np.full(quadruped.nu, 0.2), np.full(quadruped.nu, 0.3))
    qdd_des = np.zeros(quadruped.nu)
    problem, _ = controller.build_problem(standing(quadruped), qdd_des, tracking)
    contacts, gains = controller.last_contacts, quadruped.pid_gains
    assert problem.dt == controller.dt and problem.M.shape == (quadruped.nv, quadruped.nv)
    assert problem.actuated == controller.actuated and problem.unactuated == controller.unactuated
    assert np.allclose(problem.qd_des, problem.v[6:] + controller.dt * qdd_des)
    assert problem.mu is contacts.mu and problem.contact_ids == contacts.ids and problem.normals is contacts.normals
    assert problem.tangents_s is contacts.tangents_s and problem.tangents_t is contacts.tangents_t
    assert problem.sensed_force is None
    result = controller.formulation.solve(problem)
    assert result.found and result.formulation == "two_stage_qp" and result.problem is problem
    assert result.tau.shape == (quadruped.nu,) and result.v_next.shape == (quadruped.nv,)
    assert result.f_normal.sum() > 0.0 and result.contact_ids == problem.ids() and result.iterations >= 0
    assert not result.consistency_repaired and result.fallback is None and result.message.startswith("Stage")
    assert set(result.timings) == {"solve"} and not result.no_slip and not result.sensed and result.certificate == ""
    assert result.verdict.certificate.passed
    controller.set_formulation("pid", warm_up=False)
    controller.solve(standing(quadruped), qdd_des, tracking)
    given = controller.formulation.input
    assert given.position_error is tracking.position_error and given.velocity_error is tracking.velocity_error
    assert given.integral_error is tracking.integral_error
    assert (given.kp, given.kd, given.ki) == (gains.kp, gains.kd, gains.ki)
