"""The robot preflight: bad URDF numbers, bodies no rigid body can have, missing limits and unknown names are
errors naming the link or joint and the field; placeholder links are warnings; `idcontrol robot check` prints it."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from idcontrol.errors import ConfigError
from idcontrol.robot.config import load_robot_config
from idcontrol.robot.model import RobotModel
from idcontrol.robot.preflight import PreflightError, check_path, preflight
from idcontrol.tools.cli import main

LINK = """<link name="{name}"><inertial><origin xyz="0 0 0.1"/><mass value="{mass}"/>
  <inertia ixx="{ixx}" ixy="0" ixz="0" iyy="{iyy}" iyz="0" izz="{izz}"/></inertial></link>"""
JOINT = """<joint name="{name}" type="{kind}"><parent link="{parent}"/><child link="{child}"/>
  <origin xyz="0 0 0.2"/><axis xyz="0 1 0"/>{limit}</joint>"""


def two_link_urdf(
    tmp_path: Path,
    *,
    mass="1.0",
    inertia=("0.01", "0.01", "0.01"),
    effort="10",
    kind="revolute",
    placeholder: str | None = None,
) -> Path:
    """A fixed-base two-joint arm (links base, upper, lower) with the given numbers on link 'upper'; a link
    'tip' with the ``placeholder`` inertia (ixx = iyy = izz = ixy = ... = value) fixed to 'lower' when given."""
    limit = f'<limit lower="-2" upper="2" effort="{effort}" velocity="5"/>' if effort is not None else ""
    ixx, iyy, izz = inertia
    links = [
        LINK.format(name="base", mass=1.0, ixx=0.01, iyy=0.01, izz=0.01),
        LINK.format(name="upper", mass=mass, ixx=ixx, iyy=iyy, izz=izz),
        LINK.format(name="lower", mass=1.0, ixx=0.01, iyy=0.01, izz=0.01),
    ]
    joints = [
        JOINT.format(name="j1", kind=kind, parent="base", child="upper", limit=limit),
        JOINT.format(
            name="j2",
            kind="revolute",
            parent="upper",
            child="lower",
            limit='<limit lower="-2" upper="2" effort="10" velocity="5"/>',
        ),
    ]
    if placeholder is not None:
        v = placeholder
        links.append(
            f'<link name="tip"><inertial><mass value="1e-6"/><inertia ixx="{v}" ixy="{v}" ixz="{v}" '
            f'iyy="{v}" iyz="{v}" izz="{v}"/></inertial></link>'
        )
        joints.append('<joint name="tip_fixed" type="fixed"><parent link="lower"/><child link="tip"/></joint>')
    path = tmp_path / "two_link.urdf"
    path.write_text('<robot name="two_link">' + "".join(links + joints) + "</robot>")
    return path


def robot_file(tmp_path: Path, urdf: Path, extra: str = "") -> Path:
    path = tmp_path / "robot.toml"
    path.write_text(f'name = "two_link"\nurdf = "{urdf.name}"\nbase = "fixed"\n{extra}')
    return path


def errors(report) -> list[tuple[str, str]]:
    return [(f.where, f.field) for f in report.errors]


@pytest.mark.parametrize("mass", ["nan", "inf", "heavy"])
def test_a_mass_that_is_no_finite_number_is_an_error_naming_link_and_field(tmp_path, mass):
    """A NaN, infinite or unparsable mass fails the preflight (urdfdom alone would load the robot with mass 0)."""
    path = robot_file(tmp_path, two_link_urdf(tmp_path, mass=mass))
    with pytest.raises(PreflightError, match=r"link 'upper' inertial/mass") as e:
        RobotModel(str(path))
    assert errors(e.value.report) == [("link 'upper'", "inertial/mass")]


def test_negative_mass_nan_inertia_and_impossible_bodies_are_errors(tmp_path):
    """A negative mass, a NaN inertia entry, a body that is not positive semi-definite or whose principal
    moments violate the triangle inequality: each an error naming link 'upper' and the field."""
    cases = {
        "negative mass": dict(mass="-1"),
        "nan inertia": dict(inertia=("nan", "0.01", "0.01")),
        "not PSD": dict(inertia=("-0.01", "0.01", "0.01")),
        "triangle": dict(inertia=("0.001", "0.001", "0.01")),
    }
    expected = {
        "negative mass": "inertial/mass",
        "nan inertia": "inertial/inertia/ixx",
        "not PSD": "inertial/inertia",
        "triangle": "inertial/inertia",
    }
    for case, kwargs in cases.items():
        folder = tmp_path / case.replace(" ", "_")
        folder.mkdir()
        report = preflight(load_robot_config(robot_file(folder, two_link_urdf(folder, **kwargs))))
        assert ("link 'upper'", expected[case]) in errors(report), (case, report.format())
    urdf = two_link_urdf(tmp_path, inertia=("0.001", "0.001", "0.01"))
    report = preflight(load_robot_config(robot_file(tmp_path, urdf)))
    assert "triangle inequality" in report.errors[0].message
    assert "correct the <inertia> of these links in the URDF" in report.errors[0].message  # the way out


def test_a_placeholder_link_fixed_to_a_physical_body_is_a_warning(tmp_path):
    """A massless link with a singular inertia fixed to a real body (as published URDFs have) loads with a
    warning that names it and the [sim] option MuJoCo needs; it is listed as repairable."""
    path = robot_file(tmp_path, two_link_urdf(tmp_path, placeholder="1e-6"))
    robot = RobotModel(str(path))
    assert [(f.where, f.field) for f in robot.preflight.warnings] == [("link 'tip'", "inertial/inertia")]
    assert "repair_inertia" in robot.preflight.warnings[0].message
    assert robot.preflight.repairable_links == ("tip",)


def three_joint_urdf(tmp_path: Path) -> Path:
    """A fixed-base arm whose shoulder is two hinges about one point: a link 'knuckle' without <inertial> between
    joints j1 and j2, then a link 'rod' (a zero principal moment: a thin rod along z) moved by j2, then 'hand'."""
    rod = (
        '<link name="rod"><inertial><origin xyz="0 0 0.1"/><mass value="0.5"/><inertia ixx="0.002" ixy="0" '
        'ixz="0" iyy="0.002" iyz="0" izz="0"/></inertial></link>'
    )
    limit = '<limit lower="-2" upper="2" effort="10" velocity="5"/>'
    links = [
        LINK.format(name="base", mass=1.0, ixx=0.01, iyy=0.01, izz=0.01),
        '<link name="knuckle"/>',
        rod,
        LINK.format(name="hand", mass=1.0, ixx=0.01, iyy=0.01, izz=0.01),
    ]
    joints = [
        JOINT.format(name="j1", kind="revolute", parent="base", child="knuckle", limit=limit),
        JOINT.format(name="j2", kind="revolute", parent="knuckle", child="rod", limit=limit).replace(
            '<origin xyz="0 0 0.2"/><axis xyz="0 1 0"/>', '<origin xyz="0 0 0"/><axis xyz="1 0 0"/>'
        ),
        JOINT.format(name="j3", kind="revolute", parent="rod", child="hand", limit=limit),
    ]
    path = tmp_path / "three_joint.urdf"
    path.write_text('<robot name="three_joint">' + "".join(links + joints) + "</robot>")
    return path


def test_what_the_controller_accepts_and_mujoco_rejects_is_a_warning_and_repairable(tmp_path):
    """A massless link between two joints and a rod's zero principal moment are physical for the controller (its
    mass matrix is regular), so they are warnings; MuJoCo rejects both, so both links are listed as repairable."""
    robot = RobotModel(str(robot_file(tmp_path, three_joint_urdf(tmp_path))))
    assert robot.preflight.ok
    robot.update(np.array([0.3, -0.2, 0.1]), np.zeros(3))
    np.linalg.cholesky(robot.M)
    found = {f.where: f.message for f in robot.preflight.warnings}
    assert set(found) == {"link 'knuckle'", "link 'rod'"}, robot.preflight.format()
    assert "has no mass" in found["link 'knuckle'"] and "one below 1e-14" in found["link 'rod'"]
    assert sorted(robot.preflight.repairable_links) == ["knuckle", "rod"]


def test_a_point_mass_written_with_rounding_noise_is_no_error(tmp_path):
    """Principal moments within 1e-15 kg·m² of zero (iCub writes ixx = iyy = -5.42101e-20) are a point mass, not
    an impossible body: the robot loads, with the warning that MuJoCo needs the repair."""
    noise = ("-5.42101e-20", "-5.42101e-20", "0")
    robot = RobotModel(str(robot_file(tmp_path, two_link_urdf(tmp_path, inertia=noise))))
    assert robot.preflight.ok and "upper" in robot.preflight.repairable_links
    urdf = two_link_urdf(tmp_path, inertia=("-1e-14", "0", "0"))  # ten times the tolerance: an error
    assert ("link 'upper'", "inertial/inertia") in errors(preflight(load_robot_config(robot_file(tmp_path, urdf))))


def test_mujoco_builds_a_massless_link_and_a_rod_only_when_asked_to_repair_them(tmp_path):
    """Without [sim] repair_inertia MuJoCo's refusal becomes a ConfigError naming both links; with it the
    simulator builds, each change is listed, the massless link gets 1e-6 of the robot's mass, and a
    configuration set in MuJoCo reads back."""
    from idcontrol.sim.mujoco import REPAIR_MASS_FRACTION, MujocoSim

    urdf = three_joint_urdf(tmp_path)
    with pytest.raises(ConfigError, match=r"\['knuckle', 'rod'\]|\['rod', 'knuckle'\]"):
        MujocoSim(str(robot_file(tmp_path, urdf)))
    sim = MujocoSim(str(robot_file(tmp_path, urdf, "[sim]\nrepair_inertia = true\n")))
    repaired = [line for line in sim.model_differences if "inertia repaired" in line]
    assert len(repaired) == 2 and any("'knuckle'" in line and "mass 0 ->" in line for line in repaired)
    assert sim.model.body("knuckle").mass[0] == pytest.approx(REPAIR_MASS_FRACTION * sim.robot.total_mass())
    assert sim.model.body("rod").inertia.min() > 0 and sim.model.body("rod").mass[0] == 0.5
    q = np.array([0.3, -0.2, 0.1])
    sim.reset(q)
    np.testing.assert_allclose(sim.state().q, q, atol=1e-12)


def test_a_mimic_joint_is_a_warning_and_moves_independently_in_mujoco_as_in_the_controller(tmp_path):
    """j2 <mimic>s j1: the preflight warns of it; MuJoCo's import would couple the two by an equality constraint,
    which the controller's model does not have: the simulator drops it, says so, and j2 then moves alone."""
    from idcontrol.sim.mujoco import MujocoSim

    urdf = two_link_urdf(tmp_path)
    urdf.write_text(urdf.read_text().replace('<parent link="upper"/>', '<mimic joint="j1"/><parent link="upper"/>'))
    robot = RobotModel(str(robot_file(tmp_path, urdf)))
    assert [(f.where, f.field) for f in robot.preflight.warnings] == [("joint 'j2'", "mimic")]
    sim = MujocoSim(robot)
    assert sim.model.neq == 0
    assert any("<mimic> of 'j1' is not simulated" in line for line in sim.model_differences)
    sim.reset(np.array([0.0, 0.5]))
    np.testing.assert_allclose(sim.state().q, [0.0, 0.5], atol=1e-12)


def test_a_robot_without_a_movable_joint_is_an_error_in_init_and_for_a_controller(tmp_path):
    """Every joint fixed (a drone's URDF): `robot init` refuses to write a robot file, and a controller refuses
    a hand-written one, saying there is nothing to drive. The robot itself loads: the simulators drop such bodies
    (the tests' block)."""
    from idcontrol.control.factory import build_core
    from idcontrol.robot.init import init_robot
    from idcontrol.settings import load_launch
    from tests.conftest import REPO

    urdf = two_link_urdf(tmp_path)
    urdf.write_text(urdf.read_text().replace('type="revolute"', 'type="fixed"'))
    with pytest.raises(ConfigError, match="no movable joint"):
        init_robot(str(urdf), None, tmp_path / "out")
    path = robot_file(tmp_path, urdf)
    assert RobotModel(str(path)).nu == 0
    with pytest.raises(ConfigError, match="no actuated joint.*nothing for a joint-torque controller"):
        build_core(load_launch(REPO / "launch" / "stand.toml").with_overrides(robot=str(path)))


def test_an_actuated_joint_without_effort_limit_is_an_error_unless_the_robot_file_gives_one(tmp_path):
    """No <limit effort> on an actuated joint fails, naming the joint; [limits.torque] supplies it."""
    urdf = two_link_urdf(tmp_path, effort="0")
    with pytest.raises(PreflightError, match=r"joint 'j1' limit/effort: actuated joint without a torque limit"):
        RobotModel(str(robot_file(tmp_path, urdf)))
    robot = RobotModel(str(robot_file(tmp_path, urdf, "[limits.torque]\nj1 = 5.0\n")))
    assert robot.torque_limits.tolist() == [5.0, 10.0]


def test_every_unknown_name_of_the_robot_file_is_reported_at_once(tmp_path):
    """Unknown frames, joints and limb ends of the robot file are all listed in one error."""
    extra = """fingers = ["thumb"]
[standing]
joints = { j9 = 0.1 }
[[contact_spheres]]
name = "tip"
frame = "no_such_frame"
radius = 0.01
[[limbs]]
name = "arm"
kind = "arm"
joints = ["j1", "j7"]
end = "nowhere"
"""
    with pytest.raises(PreflightError) as e:
        RobotModel(str(robot_file(tmp_path, two_link_urdf(tmp_path), extra)))
    fields = [f for _, f in errors(e.value.report)]
    assert fields == ["contact_spheres.frame", "standing.joints", "fingers", "limbs.arm.joints", "limbs.arm.end"]
    assert "unknown frame 'no_such_frame'" in str(e.value)


def test_a_continuous_joint_has_one_coordinate_and_no_position_limits(tmp_path):
    """A URDF continuous joint becomes a one-coordinate revolute joint (the angle) without position limits."""
    robot = RobotModel(str(robot_file(tmp_path, two_link_urdf(tmp_path, kind="continuous"))))
    assert robot.nq == robot.nv == 2
    assert robot.model.lowerPositionLimit[0] < -1e300 and robot.model.upperPositionLimit[0] > 1e300
    assert robot.model.upperPositionLimit[1] == 2.0


def test_a_file_that_is_not_a_urdf_is_a_config_error(tmp_path):
    """Malformed XML names the file."""
    bad = tmp_path / "bad.urdf"
    bad.write_text("<robot><link name='a'>")
    with pytest.raises(ConfigError, match="bad.urdf: not a readable URDF"):
        check_path(bad)


@pytest.mark.parametrize("name", ["quadruped", "arm", "solo12"])
def test_shipped_robots_pass(name):
    """The shipped robot files pass without errors or warnings."""
    report = preflight(load_robot_config(name))
    assert report.ok and not report.warnings, report.format()
    assert np.isclose(sum(i.mass for i in report.model.inertias), RobotModel(name).total_mass())


def test_robot_check_command_prints_the_report_and_exits_nonzero_on_errors(tmp_path, capsys):
    """`idcontrol robot check` on a URDF or a robot file prints the findings; 1 when there is an error."""
    good = two_link_urdf(tmp_path, placeholder="1e-6")
    assert main(["robot", "check", str(good)]) == 0
    out = capsys.readouterr().out
    assert "warnings: 1" in out and "result: ok" in out
    bad_dir = tmp_path / "bad"
    bad_dir.mkdir()
    bad = robot_file(bad_dir, two_link_urdf(bad_dir, mass="nan"))
    assert main(["robot", "check", str(bad)]) == 1
    out = capsys.readouterr().out
    assert "link 'upper' inertial/mass: is not finite: 'nan'" in out and "result: FAILED" in out


@pytest.mark.parametrize(("name", "base"), [("arm", "fixed"), ("quadruped", "floating")])
def test_robot_check_judges_a_bare_urdfs_base_as_robot_init_does(name, base, capsys):
    """A URDF whose root link is not `world`: an arm (no legs) is checked on a fixed base, a legged robot on a
    floating one, each with the reason; `robot init` writes the same base for the same file."""
    from idcontrol.robot.init import infer_base
    from idcontrol.robot.urdf import read_urdf

    urdf = load_robot_config(name).urdf_path
    assert read_urdf(urdf).root != "world"
    assert main(["robot", "check", str(urdf)]) == 0
    out = capsys.readouterr().out
    assert f"model: {base} base" in out and f"base: {base} (" in out
    assert infer_base(read_urdf(urdf))[0] == base


def test_a_reader_that_leaves_early_gets_no_traceback():
    """`idcontrol robot check … | head -1`: the command stops quietly when its reader closes the pipe."""
    import subprocess
    import sys

    urdf = str(load_robot_config("quadruped").urdf_path)
    command = [
        sys.executable,
        "-c",
        "import sys; from idcontrol.tools.cli import main; sys.exit(main(sys.argv[1:]))",
        "robot",
        "check",
        urdf,
    ]
    proc = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    proc.stdout.close()  # the reader is gone before the report is printed
    stderr = proc.stderr.read().decode()
    assert proc.wait(timeout=120) == 1
    assert "Traceback" not in stderr and "BrokenPipe" not in stderr, stderr


@pytest.mark.parametrize(
    ("body", "says"),
    [
        (
            '<link name="a"/><joint name="j" type="revolute"><parent link="a"/><child link="b"/></joint>',
            "its child link 'b' is not defined",
        ),
        (
            '<link name="a"/><link name="b"/><joint name="j" type="revolute"><child link="b"/></joint>',
            "no <parent link=...>",
        ),
        (
            '<link name="a"/><link name="b"/><joint name="j" type="hinge"><parent link="a"/><child link="b"/></joint>',
            "type 'hinge' is none of",
        ),
        ('<link name="a"/><link name="a"/>', "link(s) defined twice: a"),
        ('<link name="a"/><link name="b"/>', "2 root links"),
        (
            '<link name="a"/><link name="b"/><link name="c"/><joint name="j" type="fixed"><parent link="a"/>'
            '<child link="c"/></joint><joint name="k" type="fixed"><parent link="b"/><child link="c"/></joint>',
            "link 'c' is the child of two joints",
        ),
    ],
)
def test_links_and_joints_that_form_no_tree_are_named(tmp_path, body, says):
    """A URDF whose joints name undefined links, lack a parent, have an unknown type, repeat a link or leave
    several roots is refused with what is wrong (Pinocchio said only 'the XML stream does not contain a valid
    URDF model', and urdfdom printed a line of its source)."""
    urdf = tmp_path / "broken.urdf"
    urdf.write_text(f'<robot name="broken">{body}</robot>')
    with pytest.raises(ConfigError, match="form no tree") as e:
        check_path(urdf)
    assert says in str(e.value)
