"""Reference generators on the real robot models: hold, trot (with its leg IK) and the arm sinusoid."""

from __future__ import annotations

import time

import numpy as np
import pinocchio as pin
import pytest

from idcontrol.errors import ConfigError
from idcontrol.reference import (
    ArmSinusoid,
    HoldPose,
    TrotGait,
    available_references,
    desired_acceleration,
    make_reference,
)
from idcontrol.robot.model import RobotModel
from tests.conftest import with_urdf

LEGS = ("LF", "RF", "LH", "RH")
DT = 1e-3


def tilted(robot: RobotModel, pitch: float = 0.0, roll: float = 0.0, sag: float = 0.0, yaw: float = 0.0):
    """The standing configuration with the base rotated (rad, Rz(yaw) Ry(pitch) Rx(roll)) and lowered by ``sag`` m."""
    q = robot.standing_configuration()
    rotation = pin.rpy.rpyToMatrix(roll, pitch, yaw)
    q[3:7] = pin.Quaternion(rotation).coeffs()
    q[2] -= sag
    return q


def feet_in_base(robot: RobotModel, joints: np.ndarray) -> np.ndarray:
    """(4, 3) foot positions in the base frame for actuated joint positions ``joints`` (Pinocchio FK)."""
    m = robot.model
    d = m.createData()
    q = pin.neutral(m)
    for name, value in zip(robot.actuated_joints, joints, strict=True):
        q[m.joints[m.getJointId(name)].idx_q] = value
    pin.framesForwardKinematics(m, d, q)
    return np.array([d.oMf[m.getFrameId(f"{leg}_foot")].translation for leg in LEGS])


def run(reference, q: np.ndarray, t_end: float, dt: float = DT, t_start: float = 0.0):
    """Sample ``reference`` every ``dt`` s at a constant state; yield (t, target)."""
    v = np.zeros(len(q) - 1)
    for k in range(int(round((t_end - t_start) / dt)) + 1):
        t = t_start + k * dt
        yield t, reference.sample(t, q, v)


# ---------------------------------------------------------------------------------------------------- PD law, hold
def test_hold_gives_zero_acceleration_at_the_pose_and_pd_action_off_it(quadruped):
    """q̈_des = 0 at the held pose; off it, q̈_des = K_p (q_ref − q) − K_d q̇ (+ K_i ∫ when given)."""
    ref = HoldPose(quadruped)
    q = quadruped.standing_configuration()
    target = ref.sample(0.0, q, np.zeros(quadruped.nv))
    q_act = quadruped.joint_positions(q)
    qdd, tracking = desired_acceleration(target, q_act, np.zeros(quadruped.nu), quadruped.gains)
    np.testing.assert_array_equal(qdd, 0.0)
    np.testing.assert_array_equal(tracking.position_error, 0.0)

    dq, dv, integral = np.linspace(-0.1, 0.1, 12), np.linspace(0.5, -0.5, 12), np.full(12, 0.01)
    g = quadruped.gains
    qdd, tracking = desired_acceleration(target, q_act + dq, dv, g, integral)
    np.testing.assert_allclose(qdd, -g.kp * dq - g.kd * dv + g.ki * integral)
    np.testing.assert_allclose(tracking.position_error, -dq)
    np.testing.assert_allclose(tracking.velocity_error, -dv)
    assert tracking.integral_error is integral


def test_hold_pose_override_and_stream_reference(quadruped):
    """A named joint overrides the standing pose; the stream reference returns what was last set."""
    target = HoldPose(quadruped, pose={"LF_KFE": -1.0}).sample(0.0, quadruped.standing_configuration(), None)
    assert target.q_ref[quadruped.actuated_joints.index("LF_KFE")] == -1.0
    stream = make_reference("stream", quadruped)
    q = quadruped.standing_configuration()
    np.testing.assert_array_equal(stream.sample(0.0, q, None).q_ref, quadruped.joint_positions(q))
    assert stream.set_target(quadruped.joint_positions(q) + 0.01, np.zeros(12), np.full(12, 2.0)) == ""
    np.testing.assert_array_equal(stream.sample(0.1, q, None).q_ref, quadruped.joint_positions(q) + 0.01)
    np.testing.assert_array_equal(stream.sample(0.1, q, None).a_ref, 2.0)


def test_a_streamed_target_outside_the_joint_limits_is_clipped_to_them(quadruped):
    """A planner's 100 rad knee target becomes the knee's URDF limit with zero velocity and acceleration there;
    the other joints are followed as sent, and the clip is reported."""
    stream = make_reference("stream", quadruped)
    q = quadruped.standing_configuration()
    knee = quadruped.actuated_joints.index("RH_KFE")
    q_ref = quadruped.joint_positions(q) + 0.01
    q_ref[knee] = 100.0
    v_ref, a_ref = np.full(12, 0.5), np.full(12, 2.0)
    clipped = stream.set_target(q_ref, v_ref, a_ref)
    assert clipped.startswith("RH_KFE 100 outside")
    target = stream.sample(0.0, q, None)
    joint = quadruped.model.joints[quadruped.model.getJointId("RH_KFE")]
    assert target.q_ref[knee] == quadruped.model.upperPositionLimit[joint.idx_q] < 100.0
    assert target.v_ref[knee] == 0.0 and target.a_ref[knee] == 0.0
    others = np.arange(12) != knee
    np.testing.assert_array_equal(target.q_ref[others], q_ref[others])
    np.testing.assert_array_equal(target.a_ref[others], 2.0)
    assert stream.set_target(quadruped.joint_positions(q), v_ref, a_ref) == ""


def test_registry_rejects_unknown_names_options_and_values(quadruped, arm):
    """Unknown reference names, options, joints or bad values are ConfigErrors naming what is valid."""
    assert available_references() == ["arm_sinusoid", "grasp_hold", "hold", "joint_sinusoid", "stream", "sway", "trot"]
    with pytest.raises(ConfigError, match="unknown reference 'moonwalk'.*trot"):
        make_reference("moonwalk", quadruped)
    with pytest.raises(ConfigError, match="unknown option.*speed.*forward_speed"):
        make_reference("trot", quadruped, speed=0.2)
    with pytest.raises(ConfigError):
        make_reference("trot", quadruped, duty_factor=1.5)
    with pytest.raises(ConfigError):
        make_reference("trot", quadruped, waypoints=[(0.0, 1.0, 2.0)])
    with pytest.raises(ConfigError, match="fixed base"):
        make_reference("trot", arm)
    with pytest.raises(ConfigError, match="unknown actuated joint"):
        make_reference("arm_sinusoid", arm, amplitudes={"elbow": 0.1})
    with pytest.raises(ConfigError, match="unknown actuated joint"):
        make_reference("hold", arm, pose={"elbow": 0.1})
    assert isinstance(make_reference("trot", quadruped, forward_speed=0.1, waypoints="paper"), TrotGait)


# ---------------------------------------------------------------------------------------------------- trot
def test_trot_stands_still_at_the_standing_pose_during_start_up(quadruped):
    """While t < stand_time the joint targets are the standing pose with zero velocity and acceleration."""
    gait = TrotGait(quadruped, stand_time=0.5)
    q = quadruped.standing_configuration()
    q_stand = quadruped.joint_positions(q)
    for _, target in run(gait, q, 0.45, dt=0.005, t_start=3.0):  # any start time: the clock starts at 3 s
        np.testing.assert_allclose(target.q_ref, q_stand, atol=1e-12)
        np.testing.assert_allclose(target.v_ref, 0.0, atol=1e-12)
        np.testing.assert_allclose(target.a_ref, 0.0, atol=1e-9)
        assert all(gait.in_stance) and gait.phase == 0.0


def test_trot_ik_targets_reproduce_the_planned_feet(quadruped):
    """Forward kinematics of q_ref puts every foot at its planned target (1e-6 m), tilted base included."""
    gait = TrotGait(quadruped, yaw_rate=0.3, lateral_speed=0.05)
    q = tilted(quadruped, pitch=0.05, roll=-0.04, sag=0.005)
    checked = 0
    for t, target in run(gait, q, 2.0):
        if t > 1.0 and round(t / DT) % 7 == 0:
            np.testing.assert_allclose(feet_in_base(quadruped, target.q_ref), gait.foot_targets_in_base, atol=1e-6)
            checked += 1
    assert checked > 100


def test_trot_schedule_follows_touchdown_phases_and_duty_factor(quadruped):
    """A foot is planned in stance exactly for the duty factor after its touchdown phase."""
    gait = TrotGait(quadruped, stand_time=0.5)
    q = quadruped.standing_configuration()
    phases = {"LF": 0.25, "RF": 0.75, "LH": 0.75, "RH": 0.25}
    stance_count = np.zeros(4)
    n = 0
    for t, _ in run(gait, q, 2.0, dt=0.0005):
        tau = t - 0.5
        if tau <= 0.3:  # the first liftoff of each foot starts the schedule
            continue
        phase = (tau / 0.3) % 1.0
        assert gait.phase == pytest.approx(phase, abs=1e-9)
        if min(abs(phase - b) for b in (0.0, 0.25, 0.5, 0.75, 1.0)) < 1e-6:
            continue  # on an event: either side is right
        expected = [((phase - phases[leg]) % 1.0) < 0.75 for leg in LEGS]
        assert list(gait.in_stance) == expected, (t, phase)
        stance_count += expected
        n += 1
    np.testing.assert_allclose(stance_count / n, 0.75, atol=0.01)


def test_trot_swing_foot_reaches_step_height_at_mid_swing(quadruped):
    """LF swings over phases [0, 0.25): at 0.125 its target is step_height above its stance height."""
    gait = TrotGait(quadruped, step_height=0.015, stand_time=0.5)
    q = quadruped.standing_configuration()  # level, at the nominal height
    ground = gait.nominal_feet[0][2]
    heights = []
    for t, _ in run(gait, q, 2.0, dt=0.0025):
        phase = ((t - 0.5) / 0.3) % 1.0
        if t > 0.5 and abs(phase - 0.125) < 1e-6:
            heights.append(gait.foot_targets_in_base[0, 2] - ground)
        if gait.in_stance[0]:
            assert gait.foot_targets_in_base[0, 2] == pytest.approx(ground, abs=1e-12)
    assert len(heights) >= 4
    np.testing.assert_allclose(heights, 0.015, atol=1e-9)


def test_with_footholds_a_stance_foot_is_held_where_it_landed_not_pushed_to_the_plane(quadruped):
    """The base measured 1 cm higher than standing (its feet 1 cm above the plane z = 0, as on a bump), no levelling:
    without footholds every stance foot is pulled 1 cm down to the plane; with them, once its touchdown blend is
    over, a stance foot's target is where it is (the standing foot in the base frame)."""
    q = quadruped.standing_configuration().copy()
    q[2] += 0.01
    for footholds, offset in ((False, -0.01), (True, 0.0)):
        gait = TrotGait(quadruped, levelling_gain=0.0, footholds=footholds)
        nominal = np.array(gait.nominal_feet)[:, 2]
        held = 0
        since = np.zeros(4)
        for _, _ in run(gait, q, 2.0):
            since = np.where(gait.in_stance, since + DT, 0.0)
            for leg in range(4):
                if gait.phase > 0.0 and since[leg] > 0.6 * gait.stance_time:
                    assert gait.foot_targets_in_base[leg, 2] == pytest.approx(nominal[leg] + offset, abs=1e-9)
                    held += 1
        assert held > 100


def test_trot_velocity_and_acceleration_match_finite_differences(quadruped):
    """v_ref ≈ dq_ref/dt and a_ref ≈ dv_ref/dt (central differences at 0.1 ms) once the speed is reached,
    away from touchdown and liftoff (where a_ref steps)."""
    gait = TrotGait(quadruped, forward_speed=0.2, yaw_rate=0.2)
    q = quadruped.standing_configuration()
    samples = [(tuple(gait.in_stance), tg) for t, tg in run(gait, q, 2.0, dt=1e-4) if t >= 1.4]
    worst_v = worst_a = 0.0
    for (s0, before), (_, now), (s1, after) in zip(samples, samples[1:], samples[2:], strict=False):
        if s0 != s1:
            continue
        fd_v = (after.q_ref - before.q_ref) / 2e-4
        fd_a = (after.v_ref - before.v_ref) / 2e-4
        worst_v = max(worst_v, np.max(np.abs(fd_v - now.v_ref)))
        worst_a = max(worst_a, np.max(np.abs(fd_a - now.a_ref)) / (1.0 + np.max(np.abs(now.a_ref))))
    assert worst_v < 2e-3  # rad/s, against peaks of about 10 rad/s
    assert worst_a < 2e-2  # relative to the peak acceleration


@pytest.mark.parametrize("footholds", [False, True])
def test_trot_targets_are_continuous_between_ticks(quadruped, footholds):
    """Between 1 ms samples q_ref moves as v_ref says (trapezoid rule, 2 mrad) and v_ref as a_ref says
    (1 rad/s: a_ref may step at touchdown and liftoff), through start-up, gait events and levelling blends; with
    footholds too, each stance foot's height measured at touchdown on a tilted, sagging base."""
    for q in (quadruped.standing_configuration(), tilted(quadruped, pitch=0.08, roll=0.05, sag=0.01)):
        gait = TrotGait(quadruped, waypoints="paper", footholds=footholds)
        previous = None
        for _, target in run(gait, q, 2.5):
            if previous is not None:
                dq_predicted = 0.5 * DT * (target.v_ref + previous.v_ref)
                assert np.max(np.abs(target.q_ref - previous.q_ref - dq_predicted)) < 2e-3
                dv_predicted = 0.5 * DT * (target.a_ref + previous.a_ref)
                assert np.max(np.abs(target.v_ref - previous.v_ref - dv_predicted)) < 1.0
            assert np.all(np.isfinite(target.a_ref)) and np.max(np.abs(target.a_ref)) <= 2000.0
            previous = target


def test_trot_tilt_levels_the_body_through_the_stance_legs(quadruped):
    """With the nose pitched down, stance targets lie below the front feet's ground points and above the hind
    ones (in the base frame): the joint PD extends the front legs and folds the hind ones, levelling the body;
    a larger levelling gain moves the targets further that way."""
    pitch = 0.1  # nose down
    q = tilted(quadruped, pitch=pitch)
    front, hind = [0, 1], [2, 3]
    targets = {}
    for gain in (0.0, 1.0, 2.0):
        gait = TrotGait(quadruped, levelling_gain=gain)
        for _ in run(gait, q, 0.3):  # standing: all feet in stance, blend complete
            pass
        targets[gain] = gait.foot_targets_in_base
    # the standing feet on the ground, seen from the pitched base: R_rpᵀ p_nominal
    on_ground = (pin.rpy.rpyToMatrix(0.0, pitch, 0.0).T @ np.array(gait.nominal_feet).T).T
    np.testing.assert_allclose(targets[0.0], on_ground, atol=1e-12)  # L = 0 only tracks the ground
    np.testing.assert_allclose(targets[1.0], gait.nominal_feet, atol=1e-12)  # L = 1: relative to a level base
    for low, high in ((0.0, 1.0), (1.0, 2.0)):
        assert np.all(targets[high][front, 2] < targets[low][front, 2] - 0.005)
        assert np.all(targets[high][hind, 2] > targets[low][hind, 2] + 0.005)


def test_trot_joint_targets_stay_inside_the_limits_by_the_margin_when_the_ground_is_out_of_reach(quadruped):
    """A base 8 cm above its standing height (a dip under every foot, say), with the feet tracking the ground
    (levelling gain 0), asks the feet beyond the legs' reach: the knee targets stop ``joint_limit_margin``
    inside the knee's URDF limit, short of a straight leg, for any margin; at the standing height the targets
    are the standing joints, margin or not."""
    model = quadruped.model
    knees = [quadruped.actuated_joints.index(f"{leg}_KFE") for leg in LEGS]
    lower = np.array([model.lowerPositionLimit[model.joints[model.getJointId(f"{leg}_KFE")].idx_q] for leg in LEGS])
    upper = np.array([model.upperPositionLimit[model.joints[model.getJointId(f"{leg}_KFE")].idx_q] for leg in LEGS])
    standing = quadruped.joint_positions(quadruped.standing_configuration())[knees]
    straight = np.where(standing > 0, lower, upper)  # the limit on the straight-leg side of each knee
    for margin in (0.05, 0.15, 0.3):
        gait = TrotGait(quadruped, joint_limit_margin=margin, levelling_gain=0.0)
        *_, (_, target) = run(gait, tilted(quadruped, sag=-0.08), 0.2)
        q_knees = target.q_ref[knees]
        assert np.all(np.abs(q_knees - straight) >= margin - 1e-9), (margin, q_knees)
        assert np.all(np.abs(q_knees - straight) <= margin + 0.05), (margin, q_knees)  # reached as far as allowed
        *_, (_, target) = run(TrotGait(quadruped, joint_limit_margin=margin), quadruped.standing_configuration(), 0.2)
        np.testing.assert_allclose(target.q_ref[knees], standing, atol=1e-6)
    with pytest.raises(ConfigError, match="joint_limit_margin"):
        TrotGait(quadruped, joint_limit_margin=-0.1)


def test_trot_centres_the_feet_under_the_centre_of_mass_while_standing():
    """A robot whose centre of mass is off its feet's centroid (the A1's is 34 mm behind it) starts from its
    standing feet and, by the end of the stand, has them centred under the centre of mass (x-y, base frame),
    moving continuously; the gait then places its feet about that point."""
    a1 = RobotModel("a1")
    gait = TrotGait(a1, stand_time=0.5)
    q = a1.standing_configuration()
    q_base = q.copy()
    q_base[:7] = [0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 1.0]
    com = pin.centerOfMass(a1.model, a1.model.createData(), q_base)
    feet = np.array(gait.nominal_feet)
    assert np.linalg.norm(com[:2] - feet[:, :2].mean(axis=0)) > 0.03
    previous = None
    for t, target in run(gait, q, 0.5):
        if t == 0.0:
            np.testing.assert_allclose(gait.foot_targets_in_base, feet, atol=1e-12)
            np.testing.assert_allclose(target.q_ref, a1.joint_positions(q), atol=1e-9)
        if previous is not None and t < 0.5:  # q_ref moves as v_ref says, v_ref as a_ref says (the gait starts at 0.5)
            assert np.max(np.abs(target.q_ref - previous.q_ref - 0.5 * DT * (target.v_ref + previous.v_ref))) < 1e-5
            assert np.max(np.abs(target.v_ref - previous.v_ref - 0.5 * DT * (target.a_ref + previous.a_ref))) < 1e-3
        previous = target
    centred = gait.foot_targets_in_base
    np.testing.assert_allclose(centred[:, :2].mean(axis=0), com[:2], atol=1e-6)  # m (the start-up ramp began)
    np.testing.assert_allclose(centred[:, 2], feet[:, 2], atol=1e-12)
    flat = TrotGait(a1, stand_time=0.5, centre_under_com=False)
    for _ in run(flat, q, 0.5):
        pass
    np.testing.assert_allclose(flat.foot_targets_in_base, feet, atol=1e-6)


def test_trot_a_swing_foot_that_touches_at_the_end_of_its_swing_lands_early(quadruped):
    """A swing foot is a contact candidate, and lands when the controller finds it touching, only near the end of
    its swing; its liftoff stays on the gait's schedule. Early in the swing a touching foot stays in swing."""
    from types import SimpleNamespace

    lf = quadruped.sphere_names.index("LF_foot")
    touching = SimpleNamespace(sphere=np.array([lf]))
    gait = TrotGait(quadruped, stand_time=0.0)  # LF lifts off at once; swing 0.075 s, stance 0.225 s
    q = quadruped.standing_configuration()
    for _ in run(gait, q, 0.02):
        gait.observe_contacts(touching)
    assert not gait.in_stance[0] and not gait.contact_mask()[lf]  # 27 % into the swing: still lifting
    for _ in run(gait, q, 0.07, t_start=0.021):
        gait.observe_contacts(None)  # the controller finds no contact
    assert not gait.in_stance[0] and gait.contact_mask()[lf]  # 93 %: a candidate contact
    gait.observe_contacts(touching)
    gait.sample(0.071, q, np.zeros(quadruped.nv))
    assert gait.in_stance[0] and gait.landed[0]
    ground = gait.nominal_feet[0][2]
    assert gait.foot_targets_in_base[0, 2] == pytest.approx(ground, abs=1e-12)
    stance = {round(t, 3): gait.in_stance[0] for t, _ in run(gait, q, 0.31, t_start=0.072)}
    assert stance[0.295] and not stance[0.305]  # lifts off at 0.075 + 0.225 s, as planned


def test_trot_waypoints_turn_in_place_then_walk(quadruped):
    """Facing away from the next waypoint the robot turns in place; facing it, it walks forward."""
    gait = TrotGait(quadruped, waypoints=[(0.5, 0.0)], stand_time=0.0)
    away = tilted(quadruped, yaw=np.pi / 2)  # facing +y, the waypoint is on its right
    for _ in run(gait, away, 0.5):
        pass
    assert gait.command[0] == 0.0 and gait.command[2] < -0.5
    gait.reset()
    for _ in run(gait, quadruped.standing_configuration(), 1.0):
        pass
    assert gait.command[0] == pytest.approx(0.2) and abs(gait.command[2]) < 1e-9
    gait.set_base_velocity(0.0, 0.1, 0.0)
    assert gait.waypoints is None


def test_trot_sampling_cost(quadruped):
    """Per-sample cost of the trot (planning + IK of four legs), printed; not asserted tightly."""
    gait = TrotGait(quadruped, yaw_rate=0.2)
    q, v = quadruped.standing_configuration(), np.zeros(quadruped.nv)
    costs = []
    for k in range(3000):
        t0 = time.perf_counter()
        gait.sample(k * DT, q, v)
        costs.append(time.perf_counter() - t0)
    walking = np.array(costs[1000:]) * 1e6
    print(f"\ntrot sample cost: p50 {np.percentile(walking, 50):.1f} µs, p99 {np.percentile(walking, 99):.1f} µs")
    assert np.percentile(walking, 50) < 1000.0


# ---------------------------------------------------------------------------------------------------- arm
def test_arm_sinusoid_period_fingers_and_box_stays_between_fingertips(arm):
    """q_ref repeats every 1/3 s; fingers hold the standing opening with v_ref = a_ref = 0; the grasp centre
    (mean fingertip position) moves by less than 2 cm."""
    q = arm.standing_configuration()
    fingers = [arm.actuated_joints.index(f"finger_{i}") for i in range(1, 5)]
    ref = ArmSinusoid(arm, frequency=3.0, ramp_time=0.5)
    start, a, b = (ref.sample(t, q, None) for t in (10.0, 10.6, 10.6 + 1.0 / 3.0))  # the clock starts at 10 s
    np.testing.assert_allclose(start.q_ref[fingers], q[fingers])
    np.testing.assert_allclose(start.v_ref, 0.0)
    for x, y in zip(a, b, strict=True):
        np.testing.assert_allclose(y, x, atol=1e-9)
    quarter = ref.sample(10.6 + 1.0 / 12.0, q, None)
    assert np.max(np.abs(quarter.q_ref - a.q_ref)) > 0.04  # it does move in between
    targets = dict(run(ArmSinusoid(arm), q, 1.0, dt=0.01))
    m, d = arm.model, arm.data
    tips = [m.getFrameId(f"fingertip_{i}") for i in range(1, 5)]

    def grasp_centre(joints: np.ndarray) -> np.ndarray:
        pin.framesForwardKinematics(m, d, joints)
        return np.mean([d.oMf[f].translation for f in tips], axis=0)

    centre = grasp_centre(q)
    for target in targets.values():
        np.testing.assert_allclose(target.q_ref[fingers], q[fingers])
        np.testing.assert_array_equal(target.v_ref[fingers], 0.0)
        np.testing.assert_array_equal(target.a_ref[fingers], 0.0)
        assert np.linalg.norm(grasp_centre(target.q_ref) - centre) < 0.02


# ---------------------------------------------------------------------------------------------------- any robot
@pytest.mark.parametrize("name", ["a1", "anymal_b", "hyq", "solo12"])
def test_trot_plans_any_quadrupeds_feet_from_its_robot_file(name):
    """On published quadrupeds (their own joint and frame names) the trot's diagonal pairs alternate, the IK puts
    every end frame on its planned foot (1e-8 m, Pinocchio FK of q_ref) and the defaults scale with the standing
    height; a sample costs tens of µs at most."""
    robot = RobotModel(name)
    gait = TrotGait(robot, stand_time=0.2)
    q = robot.standing_configuration()
    h = q[2] / 0.1629684374568977
    assert gait.cycle_time == pytest.approx(0.3 * np.sqrt(h)) and gait.step_height == pytest.approx(0.015 * h)
    front_left = [i for i, foot in enumerate(gait.nominal_feet) if foot[0] > 0 and foot[1] > 0][0]
    hind_right = [i for i, foot in enumerate(gait.nominal_feet) if foot[0] < 0 and foot[1] < 0][0]
    assert gait.touchdown_phases[front_left] == gait.touchdown_phases[hind_right] == 0.25
    m, d = robot.model, robot.model.createData()
    ends = [m.getFrameId(leg.end) for leg in robot.legs]
    base = q.copy()
    base[:7] = [0, 0, 0, 0, 0, 0, 1]
    costs = []
    for t, target in run(gait, q, 1.5):
        costs.append(gait.ik_residual)
        if t > 0.5 and round(t / DT) % 50 == 0:
            stances = gait.in_stance
            assert stances[front_left] == stances[hind_right]
            for name_, value in zip(robot.actuated_joints, target.q_ref, strict=True):
                base[m.joints[m.getJointId(name_)].idx_q] = value
            pin.framesForwardKinematics(m, d, base)
            feet = np.array([d.oMf[f].translation for f in ends])
            np.testing.assert_allclose(feet, gait.foot_targets_in_base, atol=1e-8)
    assert max(costs) < 1e-8


def test_trot_refuses_a_robot_without_four_legs(arm):
    """A fixed-base arm, or a biped, is a ConfigError naming what is missing."""
    with pytest.raises(ConfigError, match="fixed base"):
        TrotGait(arm)
    with pytest.raises(ConfigError, match="four legs.*talos.*has 2"):
        TrotGait(RobotModel("talos"))


def test_sway_moves_the_base_over_fixed_feet_and_keeps_flat_feet_flat():
    """Talos' sway: the feet's targets in the base frame move by −d(t) (so in the world they stay put), the soles
    keep their standing orientation (6-row IK), and v_ref, a_ref are the derivatives of q_ref."""
    from idcontrol.reference import BaseSway
    from idcontrol.reference.chain import chain_pose

    robot = RobotModel("talos")
    sway = BaseSway(robot, amplitude=0.03, frequency=1.0, ramp_time=0.2)
    q = robot.standing_configuration()
    samples = list(run(sway, q, 1.0, dt=1e-4))
    for t, target in samples[3000::1000]:
        d = 0.03 * q[2] * np.sin(2 * np.pi * t)
        for i, leg in enumerate(robot.legs):
            slots = [robot.actuated_joints.index(j) for j in leg.joints]
            point, rot, _ = chain_pose(sway.chains, i, target.q_ref[slots])
            np.testing.assert_allclose(point, sway._feet[i] - [0.0, d, 0.0], atol=1e-9)
            np.testing.assert_allclose(rot, sway.chains.rotation[i], atol=1e-9)
    (_, a), (_, b), (_, c) = samples[5000], samples[5001], samples[5002]
    np.testing.assert_allclose((c.q_ref - a.q_ref) / 2e-4, b.v_ref, atol=1e-5)
    np.testing.assert_allclose((c.v_ref - a.v_ref) / 2e-4, b.a_ref, atol=1e-3)


def test_joint_sinusoid_swings_any_robots_chosen_joints_inside_their_limits():
    """Without options an arm's non-finger joints swing (A sin 2πft about the standing posture, period 1/f), legs
    and fingers hold; amplitudes that would cross a limit are reduced and listed."""
    from idcontrol.reference import JointSinusoid

    ur5 = RobotModel("ur5")
    ref = JointSinusoid(ur5, amplitude=0.1, frequency=1.0, ramp_time=0.0)
    q = ur5.standing_configuration()
    ref.sample(0.0, q, None)  # the clock starts at the first sample
    a, b = ref.sample(0.25, q, None), ref.sample(1.25, q, None)
    np.testing.assert_allclose(a.q_ref, b.q_ref, atol=1e-12)
    np.testing.assert_allclose(a.q_ref - ur5.joint_positions(q), 0.1, atol=1e-12)
    talos = RobotModel("talos")
    ref = JointSinusoid(talos)
    legs = [talos.actuated_joints.index(j) for leg in talos.legs for j in leg.joints]
    assert np.all(ref.amplitude[legs] == 0.0) and "arm_left_4_joint" in ref.joints
    assert "gripper_left_joint" in ref.reduced  # its standing opening is at a limit
    with pytest.raises(ConfigError, match="name the joints"):
        JointSinusoid(RobotModel("quadruped"))


def test_joint_sinusoid_keeps_each_joints_peak_speed_within_its_urdf_velocity_limit(tmp_path, caplog):
    """A joint rated 0.05 rad/s in the URDF swings 2π f A = 0.05 rad/s (A = 0.008 rad at 1 Hz), is listed as
    reduced and said when a run is built; joints rated 2-2.5 rad/s keep the 0.1 rad asked for (0.63 rad/s
    peak)."""
    from pathlib import Path

    from idcontrol.control.factory import build_core
    from idcontrol.reference import JointSinusoid
    from idcontrol.settings import load_launch

    arm = RobotModel("arm")
    urdf = arm.config.urdf_path.read_text()
    first, rest = urdf.split('velocity="2.0"', 1)
    slow = with_urdf(arm, tmp_path, first + 'velocity="0.05"' + rest, "slow.urdf")  # the first joint, arm_j1
    ref = JointSinusoid(slow, amplitude=0.1, frequency=1.0)
    a = dict(zip(slow.actuated_joints, ref.amplitude, strict=True))
    assert a["arm_j1"] == pytest.approx(0.05 / (2 * np.pi)) and "arm_j1" in ref.reduced
    assert ref.notes == (
        "joint_sinusoid: arm_j1's amplitude 0.1 reduced to 0.00795775 to keep within its URDF velocity limit 0.05",
    )
    assert a["arm_j3"] == pytest.approx(0.1) and "arm_j3" not in ref.reduced
    peak = max(abs(ref.sample(t, slow.standing_configuration(), None).v_ref[0]) for t in np.arange(0.0, 2.0, 1e-3))
    assert peak <= 0.05 + 1e-9  # the start-up envelope never speeds it past 2π f A
    launch = load_launch(Path(__file__).resolve().parents[1] / "launch" / "joint_sinusoid.toml")
    with caplog.at_level("WARNING", logger="idcontrol.control.core"):
        build_core(launch.with_overrides(robot=str(tmp_path / "robot.toml")), slow)
    assert ref.notes[0] in caplog.text


def test_grasp_hold_takes_the_fingers_of_the_robot_file(arm):
    """The arm's fingers come from its robot file; a robot without fingers is a ConfigError."""
    from idcontrol.reference import GraspHold

    hold = GraspHold(arm)
    q = arm.standing_configuration()
    target = hold.sample(0.0, q, None)
    np.testing.assert_allclose(target.q_ref, arm.joint_positions(q))
    assert len(hold._fingers) == 4
    with pytest.raises(ConfigError, match="fingers"):
        GraspHold(RobotModel("ur5"))


def test_a_trot_whose_clock_leaps_restarts_from_standing_at_once(quadruped):
    """A state 1e7 s after the previous one (a fuzzed or broken bridge clock) restarts the gait from standing in one
    quick sample, instead of replaying every gait event in between (seconds here; 1e9 s hung the daemon)."""
    gait = make_reference("trot", quadruped)
    q, v = quadruped.standing_configuration(), np.zeros(quadruped.nv)
    for k in range(1200):  # into the gait
        gait.sample(1e-3 * k, q, v)
    assert gait.phase > 0.0
    started = time.perf_counter()
    target = gait.sample(1e7, q, v)
    assert time.perf_counter() - started < 0.05
    assert gait.phase == 0.0 and np.all(np.isfinite(target.q_ref))


def test_a_trot_speed_along_an_axis_no_leg_can_step_along_is_refused_and_the_other_axis_trots(tmp_path):
    """example-robot-data's `quadruped` turns every hip and knee about the base's x axis: its feet move in the y-z
    plane only. A forward_speed is a ConfigError naming the axis (it trotted in place before); lateral_speed trots
    it along y, 0.15 m/s or more once trotting, in lock-step MuJoCo."""
    from dataclasses import replace
    from pathlib import Path

    from idcontrol.reference import TrotGait
    from idcontrol.robot.init import init_robot
    from idcontrol.settings import load_launch
    from idcontrol.testing.runners import run_in_process

    result = init_robot(
        "share:example-robot-data/robots/quadruped_description/urdf/quadruped.urdf", None, tmp_path / "q"
    )
    robot = RobotModel(str(result.path))
    with pytest.raises(ConfigError, match="forward_speed = 0.2 m/s: no leg .* along the base's x axis"):
        TrotGait(robot)
    TrotGait(robot, forward_speed=0.0, lateral_speed=0.2)
    launch = load_launch(Path(__file__).resolve().parents[1] / "launch" / "trot.toml")
    launch = launch.with_overrides(robot=str(result.path))
    options = {**launch.reference.options, "forward_speed": 0.0, "lateral_speed": 0.2}
    run = run_in_process(replace(launch, reference=replace(launch.reference, options=options)), 2.5)
    assert run.end_reason == "duration reached" and not run.summary["fell"]
    speed = (run.q[-1, 1] - run.q[1000, 1]) / (run.t[-1] - run.t[1000])
    assert speed >= 0.15 and abs(run.q[-1, 0]) < 0.02, (speed, run.q[-1, :2])
