"""`idcontrol robot init`: published URDFs (example-robot-data) to robot files that load and stand as written.

For each robot: the written file passes the preflight, finds the limbs it should (legs, fingers), puts every
foot on z = 0 with the centre of mass over the support, and the shipped robot files made by it are what it
writes today (so they were not edited by hand)."""

from __future__ import annotations

import re
import tomllib
from pathlib import Path

import numpy as np
import pinocchio as pin
import pytest

from idcontrol.errors import ConfigError
from idcontrol.robot.config import SHIPPED_ROBOTS_DIR
from idcontrol.robot.init import init_robot
from idcontrol.robot.model import RobotModel
from idcontrol.tools.cli import main

ERD = "share:example-robot-data/robots"
#: name -> (URDF, SRDF or None, legs, fingers, contact spheres)
ROBOTS = {
    "solo12": (f"{ERD}/solo_description/robots/solo12.urdf", f"{ERD}/solo_description/srdf/solo.srdf", 4, 0, 4),
    "a1": (f"{ERD}/a1_description/urdf/a1.urdf", f"{ERD}/a1_description/srdf/a1.srdf", 4, 0, 4),
    "anymal_b": (
        f"{ERD}/anymal_b_simple_description/robots/anymal.urdf",
        f"{ERD}/anymal_b_simple_description/srdf/anymal.srdf",
        4,
        0,
        4,
    ),
    "hyq": (f"{ERD}/hyq_description/robots/hyq_no_sensors.urdf", f"{ERD}/hyq_description/srdf/hyq.srdf", 4, 0, 4),
    "talos": (f"{ERD}/talos_data/robots/talos_reduced.urdf", f"{ERD}/talos_data/srdf/talos.srdf", 2, 0, 8),
    "ur5": (f"{ERD}/ur_description/urdf/ur5_robot.urdf", None, 0, 0, 0),
    "kinova": (f"{ERD}/kinova_description/robots/kinova.urdf", f"{ERD}/kinova_description/srdf/kinova.srdf", 0, 0, 0),
    "panda": (f"{ERD}/panda_description/urdf/panda.urdf", f"{ERD}/panda_description/srdf/panda.srdf", 0, 2, 2),
    "arm": (str(SHIPPED_ROBOTS_DIR / "arm" / "arm.urdf"), None, 0, 4, 4),
}
#: robots of robots/ written by `idcontrol robot init` (their header says so)
GENERATED = ("a1", "anymal_b", "hyq", "talos", "ur5", "kinova", "panda")


def feet_heights(robot: RobotModel) -> np.ndarray:
    """(k,) height of each contact sphere's bottom at the standing posture, m."""
    q = robot.standing_configuration()
    robot.update(q, np.zeros(robot.nv))
    return robot.sphere_centers_in_world[:, 2] - robot.sphere_radii


@pytest.mark.parametrize("name", sorted(ROBOTS))
def test_init_writes_a_robot_file_that_passes_the_preflight_and_stands_on_its_feet(tmp_path: Path, name: str):
    """The written robot file loads (preflight included); its limbs, fingers and spheres are the robot's; every
    foot touches z = 0 and the centre of mass is inside the support polygon."""
    urdf, srdf, legs, fingers, spheres = ROBOTS[name]
    result = init_robot(urdf, srdf, tmp_path / name, name=name)
    robot = RobotModel(str(result.path))
    assert robot.preflight.ok
    assert len(robot.legs) == legs and len(robot.fingers) == fingers and len(robot.sphere_names) == spheres
    assert robot.floating_base == (legs > 0)
    if legs:
        np.testing.assert_allclose(feet_heights(robot), 0.0, atol=1e-6)
        q = robot.standing_configuration()
        com = pin.centerOfMass(robot.model, robot.model.createData(), q)
        feet = robot.sphere_centers_in_world[:, :2]
        assert feet[:, 0].min() < com[0] < feet[:, 0].max() and feet[:, 1].min() < com[1] < feet[:, 1].max()
        assert 0.05 < q[2] < 1.5
    assert all(robot.gains.kp > 50) and all(robot.gains.kd > 5)


def test_init_solves_a_standing_posture_without_an_srdf(tmp_path: Path):
    """Without an SRDF the A1 stands on bent knees inside its joint limits, feet on z = 0, its centre of mass over
    the feet's centroid (1 mm)."""
    result = init_robot(f"{ERD}/a1_description/urdf/a1.urdf", None, tmp_path / "a1")
    assert any("solved" in line for line in result.inferred)
    robot = RobotModel(str(result.path))
    np.testing.assert_allclose(feet_heights(robot), 0.0, atol=1e-6)
    q = robot.standing_configuration()
    m = robot.model
    joints = robot.joint_positions(q)
    lo = m.lowerPositionLimit[[m.joints[m.getJointId(n)].idx_q for n in robot.actuated_joints]]
    hi = m.upperPositionLimit[[m.joints[m.getJointId(n)].idx_q for n in robot.actuated_joints]]
    assert np.all(joints > lo) and np.all(joints < hi)
    com = pin.centerOfMass(m, m.createData(), q)
    np.testing.assert_allclose(com[:2], robot.sphere_centers_in_world[:, :2].mean(axis=0), atol=1e-3)
    knees = [robot.actuated_joints.index(f"{leg}_calf_joint") for leg in ("FL", "FR", "RL", "RR")]
    assert np.all(np.abs(joints[knees]) > 1.0)  # bent, not straight


def test_a_floating_base_takes_a_state_that_sets_every_joint_and_an_srdf_for_other_names_is_said(tmp_path: Path):
    """An A1 SRDF state that sets every leg joint but not the root joint is the posture (its joint values), the
    feet then put on z = 0; an SRDF whose states name joints the URDF lacks (a prefix) is reported by name; a
    missing SRDF is an error that says SRDF."""
    urdf = f"{ERD}/a1_description/urdf/a1.urdf"
    model = RobotModel(str(init_robot(urdf, None, tmp_path / "plain").path)).model
    joints = [str(model.names[j]) for j in range(2, model.njoints)]
    values = {n: (0.0 if "hip" in n else 0.9 if "thigh" in n else -1.7) for n in joints}
    srdf = tmp_path / "a1.srdf"
    srdf.write_text(
        '<robot name="a1"><group_state name="crouch" group="all">'
        + "".join(f'<joint name="{n}" value="{x}"/>' for n, x in values.items())
        + "</group_state></robot>"
    )
    result = init_robot(urdf, str(srdf), tmp_path / "crouch")
    assert "group state 'crouch'" in result.inferred[2] and result.blockers == []
    robot = RobotModel(str(result.path))
    got = dict(zip(robot.actuated_joints, robot.joint_positions(robot.standing_configuration()), strict=True))
    assert got == pytest.approx(values)
    np.testing.assert_allclose(feet_heights(robot).min(), 0.0, atol=1e-6)
    prefixed = tmp_path / "prefixed.srdf"
    prefixed.write_text(srdf.read_text().replace('joint name="', 'joint name="a1/'))
    result = init_robot(urdf, str(prefixed), tmp_path / "prefixed")
    assert any("name joints the URDF does not have: a1/FL_calf_joint" in line for line in result.not_inferred)
    with pytest.raises(ConfigError, match="SRDF not found"):
        init_robot(urdf, f"{ERD}/a1_description/srdf/none.srdf", tmp_path / "none")


def test_soles_of_corner_collision_spheres_give_a_contact_sphere_at_each_corner(tmp_path: Path):
    """Unitree's G1, whose feet collide through four 5 mm spheres at the corners of each sole: init takes every
    one of them at its URDF offset (not only the lowest, a toe 12 cm ahead of the ankle, which left the centre of
    mass outside the support); the solved posture has the centre of mass inside the support and every joint
    inside its limits, and the humanoid stands on its soles in MuJoCo."""
    urdf = f"{ERD}/g1_description/urdf/g1_29dof_rev_1_0.urdf"
    result = init_robot(urdf, None, tmp_path / "g1")
    robot = RobotModel(str(result.path))
    assert len(robot.sphere_names) == 8
    corners = {(-0.05, 0.025), (-0.05, -0.025), (0.12, 0.03), (0.12, -0.03)}
    for sphere in robot.config.contact_spheres:
        assert sphere.radius == pytest.approx(0.005)
        x, y, z = sphere.offset_in_frame
        assert (round(x, 3), round(y, 3)) in corners and z == pytest.approx(-0.03)
    np.testing.assert_allclose(feet_heights(robot), 0.0, atol=1e-4)
    assert not any("outside the support" in note for note in result.not_inferred)
    q = robot.standing_configuration()
    m = robot.model
    idx = [m.joints[m.getJointId(n)].idx_q for n in robot.actuated_joints]
    assert np.all(q[idx] >= m.lowerPositionLimit[idx]) and np.all(q[idx] <= m.upperPositionLimit[idx])
    from idcontrol.settings import load_launch
    from idcontrol.testing.runners import run_in_process

    launch = load_launch(Path(__file__).resolve().parents[1] / "launch" / "stand.toml")
    run = run_in_process(launch.with_overrides(robot=str(result.path.parent)), 1.0)
    assert run.end_reason == "duration reached" and not run.summary["fell"]


def test_init_reports_what_it_could_not_infer_and_refuses_to_overwrite(tmp_path: Path, capsys):
    """Solo12's placeholder effort limits (1000 N·m) are flagged; an existing robot.toml is kept without --force;
    the command prints what it inferred and the next command."""
    urdf, srdf, *_ = ROBOTS["solo12"]
    assert main(["robot", "init", urdf, "--srdf", srdf, "--out", str(tmp_path / "solo")]) == 0
    out = capsys.readouterr().out
    assert "inferred:" in out and "base: floating" in out and "placeholders" in out
    assert f"idcontrol launch launch/stand.toml --robot {tmp_path / 'solo'}" in out
    with pytest.raises(ConfigError, match="exists"):
        init_robot(urdf, srdf, tmp_path / "solo")


def test_joints_without_a_urdf_effort_limit_are_an_error_unless_a_torque_limit_is_given_for_them(tmp_path: Path):
    """The double pendulum's URDF has no effort limits: init names the joints and the way out; with
    --torque-limit the limit is written to [limits.torque] for those joints only, said, and the robot loads
    with it (the preflight's missing-limit error is gone)."""
    urdf = f"{ERD}/double_pendulum_description/urdf/double_pendulum.urdf"
    with pytest.raises(ConfigError, match=r"\['joint1', 'joint2'\] have no effort limit.*--torque-limit"):
        init_robot(urdf, None, tmp_path / "plain")
    with pytest.raises(ConfigError, match="finite number > 0"):
        init_robot(urdf, None, tmp_path / "nan", torque_limit=float("nan"))
    result = init_robot(urdf, None, tmp_path / "given", torque_limit=5.0)
    assert tomllib.loads(result.text)["limits"]["torque"] == {"joint1": 5.0, "joint2": 5.0}
    assert any("5 N·m from --torque-limit for joint1, joint2" in line for line in result.inferred)
    robot = RobotModel(str(result.path))
    assert robot.preflight.ok
    np.testing.assert_array_equal(robot.torque_limits, [5.0, 5.0])
    # a URDF that gives every limit is unchanged by the option: nothing written beyond the URDF's efforts
    a1 = init_robot(f"{ERD}/a1_description/urdf/a1.urdf", None, tmp_path / "a1", torque_limit=5.0)
    assert tomllib.loads(a1.text)["limits"]["torque"] == {} and "--torque-limit" not in a1.text


def test_an_arms_posture_keeps_its_joints_inside_their_limits_and_takes_an_srdf_state_that_omits_a_few(tmp_path: Path):
    """A fixed base without an SRDF state: the neutral posture with every joint at least min(0.25 rad, a quarter of
    its range) inside its limits (a joint whose range excludes 0, one whose limit is 0). With an SRDF whose only
    state leaves out the fingers (as Panda's leaves out its mimic finger): that state, the fingers as without it.
    The posture then holds through a joint sinusoid (no limit guard)."""
    text = (SHIPPED_ROBOTS_DIR / "arm" / "arm.urdf").read_text()
    text = text.replace('lower="-2.0" upper="2.0"', 'lower="-2.0" upper="-0.3"', 1)  # arm_j2: excludes 0
    text = text.replace('lower="-2.0" upper="2.0"', 'lower="0.0" upper="2.0"', 1)  # arm_j4: 0 on its limit
    urdf = tmp_path / "arm.urdf"
    urdf.write_text(text)
    model = pin.buildModelFromUrdf(str(urdf))

    def posture(robot_dir: Path) -> dict[str, float]:
        return tomllib.loads((robot_dir / "robot.toml").read_text())["standing"]["joints"]

    plain = posture(init_robot(str(urdf), None, tmp_path / "plain").path.parent)
    for name, value in plain.items():
        j = model.joints[model.getJointId(name)]
        lo, hi = model.lowerPositionLimit[j.idx_q], model.upperPositionLimit[j.idx_q]
        margin = min(0.25, 0.25 * (hi - lo))
        assert lo + margin - 1e-12 <= value <= hi - margin + 1e-12, (name, value, lo, hi)
    assert plain["arm_j2"] == pytest.approx(-0.55) and plain["arm_j4"] == pytest.approx(0.25)
    arm_joints = {f"arm_j{k}": 0.1 * k - 0.9 for k in range(1, 8)}
    arm_joints.update(arm_j2=-1.0, arm_j4=1.0)
    srdf = tmp_path / "arm.srdf"
    srdf.write_text(
        '<robot name="arm"><group_state name="ready" group="arm">'
        + "".join(f'<joint name="{n}" value="{x}"/>' for n, x in arm_joints.items())
        + "</group_state></robot>"
    )
    robot_dir = init_robot(str(urdf), str(srdf), tmp_path / "srdf").path.parent
    ready = posture(robot_dir)
    assert {n: ready[n] for n in arm_joints} == pytest.approx(arm_joints)
    assert {n: ready[n] for n in ready if n not in arm_joints} == pytest.approx(
        {n: plain[n] for n in plain if n not in arm_joints}
    )
    assert "group state 'ready'" in (robot_dir / "robot.toml").read_text()
    from idcontrol.settings import load_launch
    from idcontrol.testing.runners import run_in_process

    launch = load_launch(Path(__file__).resolve().parents[1] / "launch" / "joint_sinusoid.toml")
    run = run_in_process(launch.with_overrides(robot=str(robot_dir)), 1.0)
    assert run.end_reason == "duration reached" and run.summary["tracking_error_rad"] < 0.005


def leaning_arm(tmp_path: Path, shoulder_effort: float) -> Path:
    """The shipped arm with its shoulder arm_j2 limited to [0.8, 2] rad (so its posture leans: 27 N·m of gravity at
    arm_j2) and an effort limit of ``shoulder_effort`` N·m there."""
    text = (SHIPPED_ROBOTS_DIR / "arm" / "arm.urdf").read_text()
    text = text.replace('lower="-2.0" upper="2.0"', 'lower="0.8" upper="2.0"', 1)
    first, rest = text.split('effort="80.0"', 1)
    rest = rest.replace('effort="80.0"', f'effort="{shoulder_effort}"', 1)  # the second joint's: arm_j2
    urdf = tmp_path / "leaning.urdf"
    urdf.write_text(first + 'effort="80.0"' + rest)
    return urdf


def hold_ratios(robot: RobotModel) -> dict[str, float]:
    """|gravity torque| / torque limit per actuated joint at the robot file's standing posture."""
    q = robot.standing_configuration()
    g = pin.computeGeneralizedGravity(robot.model, robot.model.createData(), q)[robot.actuated_dofs]
    return dict(zip(robot.actuated_joints, np.abs(g) / robot.torque_limits, strict=True))


def test_an_arm_whose_neutral_posture_needs_more_than_its_torque_limits_gets_one_it_can_hold(tmp_path: Path):
    """Leaning, the shoulder needs 27 N·m against a 25 N·m limit: init turns the other joints until each needs at
    most half its limit, inside the joint limits and with every joint above the mount; the arm then holds a joint
    sinusoid with the file as written."""
    urdf = leaning_arm(tmp_path, 25.0)
    model = pin.buildModelFromUrdf(str(urdf))
    result = init_robot(str(urdf), None, tmp_path / "out")
    assert result.blockers == [] and "to hold gravity within 50%" in result.inferred[2]
    robot = RobotModel(str(result.path))
    assert max(hold_ratios(robot).values()) <= 0.5 + 1e-3, hold_ratios(robot)
    q = robot.standing_configuration()
    assert np.all(q >= model.lowerPositionLimit) and np.all(q <= model.upperPositionLimit)
    data = model.createData()
    pin.forwardKinematics(model, data, q)
    assert min(data.oMi[j].translation[2] for j in range(1, model.njoints)) >= 0.05 - 1e-6
    from idcontrol.settings import load_launch
    from idcontrol.testing.runners import run_in_process

    launch = load_launch(Path(__file__).resolve().parents[1] / "launch" / "joint_sinusoid.toml")
    run = run_in_process(launch.with_overrides(robot=str(result.path.parent)), 1.0)
    assert run.end_reason == "duration reached" and run.summary["tracking_error_rad"] < 0.005


def test_arms_held_up_at_the_end_of_their_range_are_turned_down_past_the_hump_of_gravitys_torque(tmp_path: Path):
    """PR2 (example-robot-data): moved inside its limits, its neutral posture holds both upper arms up at the end
    of their shoulders' range with 29.2 of 30 N·m, and lifting them further would lighten them, so a local
    solve from there stays; init also solves from the middle of each joint's range and finds arms that need at
    most half of each torque limit."""
    result = init_robot(
        f"{ERD}/pr2_description/urdf/pr2.urdf", f"{ERD}/pr2_description/srdf/pr2.srdf", tmp_path / "pr2"
    )
    assert result.blockers == [], result.blockers
    robot = RobotModel(str(result.path))
    ratios = hold_ratios(robot)
    assert max(ratios.values()) <= 0.5 + 1e-3, max(ratios.items(), key=lambda item: item[1])
    assert ratios["l_shoulder_lift_joint"] <= 0.5 + 1e-3 and ratios["r_shoulder_lift_joint"] <= 0.5 + 1e-3


def test_a_posture_that_cannot_be_held_is_written_listed_and_the_command_fails(tmp_path: Path, capsys):
    """With a 3 N·m shoulder no posture inside the limits holds the arm: the file is written, the reason names the
    joint and both torques, and `robot init` exits 1 without proposing the launch. A floating base without legs
    is the same."""
    urdf = leaning_arm(tmp_path, 3.0)
    assert main(["robot", "init", str(urdf), "--out", str(tmp_path / "weak")]) == 1
    out = capsys.readouterr().out
    assert (tmp_path / "weak" / "robot.toml").is_file()
    assert "cannot hold its posture as written" in out and "arm_j2" in out and "> 3 N·m" in out
    assert "next:" not in out and "not ready" in out
    assert init_robot(str(urdf), None, tmp_path / "floating", base="floating").blockers[0].startswith("legs: none")


def test_wheels_on_the_base_are_no_fingers(tmp_path: Path):
    """Two continuous wheel joints off the shipped arm's base (a mobile manipulator, as TIAGo): the arm's four
    fingers stay its fingers, the wheels are not (before, they were taken as fingers and given fingertips)."""
    wheels = "".join(
        f'<link name="wheel_{side}"><inertial><mass value="1"/><inertia ixx="0.01" ixy="0" ixz="0" iyy="0.01" '
        f'iyz="0" izz="0.01"/></inertial></link><joint name="wheel_{side}_joint" type="continuous"><parent '
        f'link="arm_base"/><child link="wheel_{side}"/><origin xyz="0 {y} 0"/><axis xyz="0 1 0"/><limit '
        f'effort="10" velocity="10"/></joint>'
        for side, y in (("l", 0.2), ("r", -0.2))
    )
    urdf = tmp_path / "mobile.urdf"
    urdf.write_text((SHIPPED_ROBOTS_DIR / "arm" / "arm.urdf").read_text().replace("</robot>", wheels + "</robot>"))
    robot = RobotModel(str(init_robot(str(urdf), None, tmp_path / "mobile").path))
    assert robot.config.fingers == ("finger_1", "finger_2", "finger_3", "finger_4")


def test_a_wheel_gets_its_contact_sphere_on_its_axis_so_turning_it_leaves_the_sphere_in_place(tmp_path: Path):
    """Centauro's legs end in wheels (a 0.124 m cylinder on a revolute joint whose URDF limit gives no range). Each
    gets one sphere of the wheel's radius centred on the wheel's axis: turning the wheel moves no sphere. (Fitted to
    the wheel's lowest points before, the sphere sat 77 mm off the axis and rose as the wheel turned.)"""
    erd = f"{ERD}/centauro_description"
    result = init_robot(f"{erd}/urdf/centauro.urdf", f"{erd}/srdf/centauro.srdf", tmp_path / "centauro")
    robot = RobotModel(str(result.path))
    assert len(robot.sphere_names) == 4 and np.allclose(robot.sphere_radii, 0.124)
    assert sum("about the axis of its wheel joint" in line for line in result.inferred) == 4
    q, v = robot.standing_configuration(), np.zeros(robot.nv)
    robot.update(q, v)
    before = robot.sphere_centers_in_world.copy()
    np.testing.assert_allclose(before[:, 2], 0.124, atol=1e-6)  # on the floor, through the lowest point
    for k in range(1, 5):
        q[robot.model.joints[robot.model.getJointId(f"j_wheel_{k}")].idx_q] += 1.0
    robot.update(q, v)
    np.testing.assert_allclose(robot.sphere_centers_in_world, before, atol=1e-9)


def test_a_wheel_whose_tread_has_a_flat_bottom_is_no_sole(tmp_path: Path):
    """A wheel's tessellated tread can rest on a flat facet wider than a sole's threshold (Go2-W's rear wheels: the
    sole test came first and gave four 2.4 mm corner spheres on the spinning wheel). Centauro with its wheels made
    square (a flat bottom 0.2 x 0.06 m, centred on the axis): each still gets one sphere on its axis."""
    from idcontrol.robot.config import resolve_urdf

    erd = f"{ERD}/centauro_description"
    urdf = resolve_urdf(f"{erd}/urdf/centauro.urdf", tmp_path / "robot.toml")
    text = urdf.read_text()
    assert text.count('<cylinder length="0.03" radius="0.124"/>') == 4
    square = tmp_path / "centauro_square_wheels.urdf"
    square.write_text(text.replace('<cylinder length="0.03" radius="0.124"/>', '<box size="0.2 0.2 0.06"/>'))
    result = init_robot(
        str(square), str(resolve_urdf(f"{erd}/srdf/centauro.srdf", tmp_path / "robot.toml")), tmp_path / "centauro"
    )
    spheres = [line for line in result.inferred if line.startswith("contact sphere")]
    assert len(spheres) == 4 and all("about the axis of its wheel joint" in line for line in spheres), spheres
    # the copy's package:// meshes are not found from its folder: the geometry that is there is used (it had all
    # been dropped: no geometry, point feet), and the note says what was left out
    assert any("whose mesh file is missing left out" in note for note in result.not_inferred), result.not_inferred


def test_contact_points_of_radius_zero_get_a_small_sphere_whose_bottom_stays_put(tmp_path: Path):
    """Drake's and IHMC's URDFs mark contact points with collision spheres of radius 0: init gives each the smallest
    radius it writes, raised so that the sphere's bottom is the point, and the robot file loads (a radius of 0 was
    written before, which the robot file then refused)."""
    from idcontrol.robot.init import POINT_RADIUS

    source = SHIPPED_ROBOTS_DIR / "quadruped" / "quadruped.urdf"
    text = source.read_text()
    points = 0
    for leg in ("LF", "RF", "LH", "RH"):  # the foot link gets a radius-0 collision sphere at its bottom
        anchor = f'<link name="{leg}_foot">'
        assert anchor in text
        text = text.replace(
            anchor, anchor + '<collision><origin xyz="0 0 -0.02"/><geometry><sphere radius="0"/></geometry></collision>'
        )
        points += 1
    urdf = tmp_path / "points.urdf"
    urdf.write_text(text)
    result = init_robot(str(urdf), out=tmp_path / "points")
    spheres = [line for line in result.inferred if line.startswith("contact sphere")]
    assert len(spheres) == points and all("a point of radius 0 m" in line for line in spheres), spheres
    robot = RobotModel(str(result.path))
    assert np.allclose(robot.sphere_radii, POINT_RADIUS)
    np.testing.assert_allclose(feet_heights(robot), 0.0, atol=1e-6)  # standing on the points


def test_a_shank_below_a_knee_without_a_range_is_no_wheel(tmp_path: Path):
    """example-robot-data's `quadruped` has knees whose URDF limit gives no range; without its foot spheres, each
    leg ends in the shank's cylinder, whose centre lies 8 cm below the knee's axis: no wheel. Its sphere is fitted
    to the shank's rounded end, not centred on the knee's axis."""
    import re

    from idcontrol.robot.config import resolve_urdf

    urdf = resolve_urdf(f"{ERD}/quadruped_description/urdf/quadruped.urdf", tmp_path / "robot.toml")
    text = re.sub(
        r"<collision>\s*<origin[^>]*/>\s*<geometry>\s*<sphere[^>]*/>\s*</geometry>\s*</collision>", "", urdf.read_text()
    )
    assert text.count("<collision>") == 9  # the four foot spheres gone (their visuals stay)
    bare = tmp_path / "quadruped_without_feet.urdf"
    bare.write_text(text)
    result = init_robot(str(bare), None, tmp_path / "q")
    spheres = [line for line in result.inferred if line.startswith("contact sphere")]
    assert len(spheres) == 4 and not any("wheel joint" in line for line in spheres), spheres
    assert all(RobotModel(str(result.path)).sphere_radii < 0.05)


def test_point_feet_side_by_side_are_no_support_to_stand_on(tmp_path: Path):
    """Bolt, a biped on two point feet: its support is a segment, on which nothing stands still; init says so
    (before, it measured the centre of mass against the nearer foot and proposed the launch, and Bolt fell)."""
    result = init_robot(
        f"{ERD}/bolt_description/robots/bolt.urdf", f"{ERD}/bolt_description/srdf/bolt.srdf", tmp_path / "bolt"
    )
    assert any("a point or a line" in line for line in result.blockers), result.blockers
    posture = next(line for line in result.inferred if line.startswith("standing posture"))
    assert "mm outside the support" in posture and "-" not in posture.split("centre of mass")[1], posture


def test_a_joint_whose_limit_gives_no_range_has_none_in_both_models_and_the_robot_stands(tmp_path: Path):
    """example-robot-data's `quadruped`: its knees' <limit> gives effort and velocity only, which urdfdom reads as
    the range [0, 0] (a knee that cannot bend) and MuJoCo as no limits. Both models now read no limits, the
    preflight warns of each such joint, and init's posture (knees bent) stands 1 s in MuJoCo (before, init
    refused it: 'BL_KFE 1.499 not in [0, 0]')."""
    result = init_robot(f"{ERD}/quadruped_description/urdf/quadruped.urdf", None, tmp_path / "q")
    assert result.blockers == [], result.blockers
    assert sum("lower and upper are equal" in w.message for w in result.report.warnings) == 4, result.report.warnings
    robot = RobotModel(str(result.path))
    knee = robot.model.joints[robot.model.getJointId("BL_KFE")].idx_q
    assert robot.model.lowerPositionLimit[knee] < -1e300 and robot.model.upperPositionLimit[knee] > 1e300
    hip = robot.model.joints[robot.model.getJointId("BL_HFE")].idx_q
    assert (robot.model.lowerPositionLimit[hip], robot.model.upperPositionLimit[hip]) == (-10.0, 10.0)
    from idcontrol.settings import load_launch
    from idcontrol.sim.mujoco import MujocoSim
    from idcontrol.testing.runners import run_in_process

    assert not any("limit" in change for change in MujocoSim(robot).model_differences)
    launch = load_launch(Path(__file__).resolve().parents[1] / "launch" / "stand.toml")
    run = run_in_process(launch.with_overrides(robot=str(result.path.parent)), 1.0)
    assert run.end_reason == "duration reached" and not run.summary["fell"]
    assert run.summary["tracking_error_rad"] < 0.001


def test_a_humanoids_flat_mesh_soles_get_corner_spheres_and_it_stands(tmp_path: Path):
    """Alexander (example-robot-data, legs only): its feet are meshes with 21 x 9 cm flat soles on 0.94 m legs.
    Each gets four corner spheres (before, a sole narrower than a tenth of the leg was taken for a point, and init
    refused the posture: 'a point or a line'), and it stands 1 s in MuJoCo with the file as written."""
    result = init_robot(
        f"{ERD}/alexander_description/urdf/alexander_v1.lowerBodyOnly.urdf",
        f"{ERD}/alexander_description/srdf/alexander.srdf",
        tmp_path / "alexander",
    )
    assert result.blockers == [], result.blockers
    robot = RobotModel(str(result.path))
    assert len(robot.legs) == 2 and len(robot.sphere_names) == 8
    np.testing.assert_allclose(feet_heights(robot), 0.0, atol=1e-3)
    from idcontrol.settings import load_launch
    from idcontrol.testing.runners import run_in_process

    launch = load_launch(Path(__file__).resolve().parents[1] / "launch" / "stand.toml")
    run = run_in_process(launch.with_overrides(robot=str(result.path.parent)), 1.0)
    assert run.end_reason == "duration reached" and not run.summary["fell"]
    assert run.summary["tracking_error_rad"] < 0.001


def test_a_sole_whose_end_frame_points_sideways_is_levelled_by_the_least_turn(tmp_path: Path):
    """iCub: its SRDF posture tilts the soles by about 4°, and its right foot's end frame (`r_foot_dh_frame`) has
    its x axis down. Both soles are found flat, and putting them on the ground turns each by the least rotation
    that levels it: all eight corner spheres at z = 0 (1 mm) with every joint inside its limits (levelling the
    frame's z axis turned the right foot 90°: its ankle at -1.5 rad, limits [-0.73, 0.37]). Init still refuses
    the posture, honestly: its centre of mass stands 6 mm outside the feet."""
    result = init_robot(
        f"{ERD}/icub_description/robots/icub.urdf", f"{ERD}/icub_description/srdf/icub.srdf", tmp_path / "icub"
    )
    assert not any("joint limits" in b for b in result.blockers), result.blockers
    assert any("centre of mass" in b for b in result.blockers), result.blockers
    robot = RobotModel(str(result.path))
    assert len(robot.sphere_names) == 8
    np.testing.assert_allclose(feet_heights(robot), 0.0, atol=1e-3)


def test_joint_names_that_are_no_bare_toml_keys_are_quoted(tmp_path: Path):
    """Joint names with dots (Allegro's ``joint_0.0``) are written as quoted keys: the robot file loads, with the
    same gains and posture under each name."""
    text = (SHIPPED_ROBOTS_DIR / "arm" / "arm.urdf").read_text().replace('"arm_j', '"arm.j')
    urdf = tmp_path / "dotted.urdf"
    urdf.write_text(text)
    robot = RobotModel(str(init_robot(str(urdf), None, tmp_path / "dotted").path))
    assert "arm.j1" in robot.actuated_joints
    table = tomllib.loads((tmp_path / "dotted" / "robot.toml").read_text())
    assert set(table["standing"]["joints"]) == set(robot.actuated_joints)


def test_init_names_an_actuated_joint_without_effort_limit(tmp_path: Path):
    """A URDF joint without <limit effort> is an error naming it."""
    text = (SHIPPED_ROBOTS_DIR / "arm" / "arm.urdf").read_text()
    bad = tmp_path / "arm.urdf"
    bad.write_text(text.replace('effort="80.0"', 'effort="0"', 1))
    with pytest.raises(ConfigError, match=r"arm_j1.*effort"):
        init_robot(str(bad), None, tmp_path / "out")


@pytest.mark.parametrize("name", GENERATED)
def test_generated_robot_files_are_what_init_writes(tmp_path: Path, name: str):
    """robots/<name>/robot.toml is init's output, unedited (regenerated here and compared as TOML)."""
    urdf, srdf, *_ = ROBOTS[name]
    shipped = SHIPPED_ROBOTS_DIR / name / "robot.toml"
    fresh = init_robot(urdf, srdf, tmp_path / name, name=name).path
    a, b = tomllib.loads(shipped.read_text()), tomllib.loads(fresh.read_text())
    assert a.keys() == b.keys()
    for key in a:
        assert _close(a[key], b[key]), key


def _close(a, b) -> bool:
    if isinstance(a, dict):
        return a.keys() == b.keys() and all(_close(a[k], b[k]) for k in a)
    if isinstance(a, list):
        return len(a) == len(b) and all(_close(x, y) for x, y in zip(a, b, strict=True))
    if isinstance(a, float):
        return abs(a - b) <= 1e-6 * max(1.0, abs(a))
    return a == b


def test_a_link_and_a_joint_of_the_same_name_are_told_apart(tmp_path: Path):
    """A URDF may name a joint as its child link (Rethink's Sawyer does): Pinocchio then has two frames of that
    name and refuses an unfiltered lookup. Check, init, the model, the trot and a solve take the link's frame."""
    from idcontrol.control.controller import InverseDynamicsController
    from idcontrol.control.state import RobotState
    from idcontrol.reference import make_reference

    source = SHIPPED_ROBOTS_DIR / "quadruped" / "quadruped.urdf"
    text = source.read_text().replace('joint name="LF_foot_fixed"', 'joint name="LF_foot"')
    text = text.replace('joint name="LF_KFE"', 'joint name="LF_shank"')
    urdf = tmp_path / "twins.urdf"
    urdf.write_text(text)
    assert main(["robot", "check", str(urdf)]) == 0
    result = init_robot(str(urdf), out=tmp_path / "twins")
    assert not result.blockers, result.blockers
    robot = RobotModel(str(result.path))
    assert "LF_shank" in robot.actuated_joints
    make_reference("trot", robot)
    controller = InverseDynamicsController(robot, formulation="two_stage_qp")
    solved = controller.solve(RobotState(robot.standing_configuration(), np.zeros(robot.nv)), np.zeros(robot.nu))
    assert solved.found and solved.contact_count == 4, solved.message


def test_a_long_narrow_sole_is_a_sole(tmp_path: Path):
    """Unitree H1's soles are 28 x 3 cm boxes under 0.8 m legs: narrower than a twentieth of the leg, they were
    taken for rounded ends (one sphere at the toe) and the robot refused for standing on points. Talos with such
    soles: four corner spheres on each foot, 28 cm apart along it."""
    import re

    from idcontrol.robot.config import resolve_urdf

    erd = f"{ERD}/talos_data"
    text = resolve_urdf(f"{erd}/robots/talos_reduced.urdf", tmp_path / "robot.toml").read_text()
    for side in ("left", "right"):
        text, n = re.subn(
            rf'(<link name="leg_{side}_6_link">.*?)<collision>.*?</collision>',
            r'\1<collision><origin xyz="0.03 0 -0.1"/><geometry><box size="0.28 0.03 0.02"/></geometry>'
            r"</collision>",
            text,
            count=1,
            flags=re.S,
        )
        assert n == 1
    urdf = tmp_path / "talos_narrow_soles.urdf"
    urdf.write_text(text)
    result = init_robot(
        str(urdf), str(resolve_urdf(f"{erd}/srdf/talos.srdf", tmp_path / "robot.toml")), tmp_path / "talos"
    )
    corners = [line for line in result.inferred if "a corner of the flat collision bottom" in line]
    assert len(corners) == 8 and all("(0.280 x 0.030 m)" in line for line in corners), result.inferred


def test_an_arms_limits_are_judged_against_its_links_held_out_not_its_upright_posture(tmp_path: Path):
    """An arm standing upright needs almost no torque, so real limits (Kinova Gen3's 39 N·m) were flagged as
    placeholders 100 times over. They are judged against its links' weight held at arm's length: the shipped arm's
    20-80 N·m pass, 10000 N·m on every joint is flagged."""
    text = (SHIPPED_ROBOTS_DIR / "arm" / "arm.urdf").read_text()
    for name, urdf_text, flagged in (
        ("real", text, False),
        ("placeholder", re.sub(r'effort="[0-9.]+"', 'effort="10000"', text), True),
    ):
        urdf = tmp_path / f"{name}.urdf"
        urdf.write_text(urdf_text)
        result = init_robot(str(urdf), out=tmp_path / name)
        notes = [n for n in result.not_inferred if "placeholders" in n]
        assert bool(notes) == flagged, result.not_inferred


def test_a_nameless_material_does_not_cost_a_link_its_geometry(tmp_path: Path, capfd):
    """urdfdom refuses a <material> without a name, and with it the link's visual and collision geometry, printing
    an error each time (Unitree's H1-2: about 230 lines; then no geometry on its feet and a refusal). Named for it,
    the feet keep their collision spheres and nothing is printed."""
    text = (SHIPPED_ROBOTS_DIR / "quadruped" / "quadruped.urdf").read_text()
    foot = '<visual>\n      <geometry><sphere radius="0.01"/></geometry>\n    </visual>'
    assert text.count(foot) == 4
    text = text.replace(
        foot,
        '<visual>\n      <geometry><sphere radius="0.01"/></geometry>\n      '
        '<material><color rgba="0.2 0.2 0.2 1"/></material>\n    </visual>',
    )
    urdf = tmp_path / "nameless.urdf"
    urdf.write_text(text)
    capfd.readouterr()
    result = init_robot(str(urdf), out=tmp_path / "nameless")
    spheres = [line for line in result.inferred if line.startswith("contact sphere")]
    assert len(spheres) == 4 and all("its collision sphere" in line for line in spheres), spheres
    assert "material" not in capfd.readouterr().err.lower()


def test_a_bare_footprint_root_at_ground_level_still_stands_on_legs(tmp_path: Path):
    """ROS robots often hang everything from a bare `base_footprint` frame at ground level (ROBOTIS OP2's
    `base_link`): every foot is then above the root, and init took the robot for one bolted to the ground. The
    quadruped under such a frame: a floating base on four legs. A bare root with wheels and casters (a mobile
    base) or a robot with a massive root is judged as before (example-robot-data's PR2 and TIAGo stay fixed)."""
    from idcontrol.robot.init import infer_base
    from idcontrol.robot.urdf import read_urdf

    text = (SHIPPED_ROBOTS_DIR / "quadruped" / "quadruped.urdf").read_text()
    anchor = '<link name="base">'
    footprint = (
        '<link name="base_footprint"/><joint name="footprint_joint" type="fixed"><parent '
        'link="base_footprint"/><child link="base"/><origin xyz="0 0 0.25"/></joint>'
    )
    urdf = tmp_path / "footprint.urdf"
    urdf.write_text(text.replace(anchor, footprint + anchor, 1))
    base, why = infer_base(read_urdf(urdf))
    assert (base, why) == ("floating", "limbs that share no joint end together at the bottom (legs)")
    result = init_robot(str(urdf), out=tmp_path / "footprint")
    assert sum(line.startswith("contact sphere") for line in result.inferred) == 4 and not result.blockers
    for name in ("pr2_description/urdf/pr2.urdf", "tiago_description/robots/tiago.urdf"):
        from idcontrol.robot.config import resolve_urdf

        assert infer_base(read_urdf(resolve_urdf(f"{ERD}/{name}", tmp_path / "robot.toml")))[0] == "fixed"
