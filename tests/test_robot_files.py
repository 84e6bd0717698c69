"""The robots shipped in ``robots/``: URDFs that load in Pinocchio and MuJoCo, physical inertias and exact postures."""

from __future__ import annotations

import pathlib
import tomllib
import xml.etree.ElementTree as ET

import mujoco
import numpy as np
import pinocchio as pin
import pytest

ROBOTS = pathlib.Path(__file__).parents[1] / "robots"
QUADRUPED = ROBOTS / "quadruped"
ARM = ROBOTS / "arm"
LEGS = ("LF", "RF", "LH", "RH")
QUADRUPED_JOINTS = tuple(f"{leg}_{j}" for leg in LEGS for j in ("HAA", "HFE", "KFE"))
ARM_JOINTS = tuple(f"arm_j{i}" for i in range(1, 8))
FINGER_JOINTS = tuple(f"finger_{i}" for i in range(1, 5))
TOL = 1e-6


def read_toml(robot_dir: pathlib.Path) -> dict:
    return tomllib.loads((robot_dir / "robot.toml").read_text())


def urdf_path(robot_dir: pathlib.Path) -> pathlib.Path:
    return robot_dir / read_toml(robot_dir)["urdf"]


def pin_model(robot_dir: pathlib.Path) -> pin.Model:
    path = str(urdf_path(robot_dir))
    if read_toml(robot_dir)["base"] == "floating":
        return pin.buildModelFromUrdf(path, pin.JointModelFreeFlyer())
    return pin.buildModelFromUrdf(path)


def standing_q(robot_dir: pathlib.Path, model: pin.Model) -> np.ndarray:
    """The configuration of the robot.toml's [standing] posture."""
    standing = read_toml(robot_dir)["standing"]
    q = pin.neutral(model)
    if "base_position" in standing:
        q[:3] = standing["base_position"]
        q[3:7] = standing["base_orientation_xyzw"]
    for name, value in standing["joints"].items():
        assert model.existJointName(name), name
        q[model.joints[model.getJointId(name)].idx_q] = value
    return q


def sphere_centres(robot_dir: pathlib.Path, model: pin.Model, q: np.ndarray) -> dict[str, tuple[np.ndarray, float]]:
    """World centre and radius of every contact sphere of the robot.toml at ``q``."""
    data = model.createData()
    pin.framesForwardKinematics(model, data, q)
    out = {}
    for s in read_toml(robot_dir)["contact_spheres"]:
        assert model.existFrame(s["frame"]), s["frame"]
        pose = data.oMf[model.getFrameId(s["frame"])]
        out[s["name"]] = (pose.act(np.asarray(s.get("offset", [0.0, 0.0, 0.0]), dtype=float)), float(s["radius"]))
    return out


def movable_joint_names(model: pin.Model) -> list[str]:
    return [
        str(n) for n, j in zip(model.names[1:], model.joints[1:], strict=True) if j.shortname() != "JointModelFreeFlyer"
    ]


def mujoco_model(robot_dir: pathlib.Path, *, free_base: bool = False, floor: bool = False) -> mujoco.MjModel:
    """MuJoCo's model of the URDF (root link welded to the world unless ``free_base``)."""
    spec = mujoco.MjSpec.from_string(urdf_path(robot_dir).read_text())
    if free_base:
        spec.worldbody.first_body().add_freejoint()
    if floor:
        spec.worldbody.add_geom(name="floor", type=mujoco.mjtGeom.mjGEOM_PLANE, size=[1.0, 1.0, 0.1])
    for obj in read_toml(robot_dir).get("objects", []):
        spec.worldbody.add_geom(
            name=obj["name"],
            type=mujoco.mjtGeom.mjGEOM_BOX,
            size=0.5 * np.asarray(obj["size"], dtype=float),
            pos=obj["initial_position"],
            quat=np.roll(np.asarray(obj["initial_orientation_xyzw"], dtype=float), 1),
        )
    return spec.compile()


def geom_body_name(model: mujoco.MjModel, geom: int) -> str:
    return mujoco.mj_id2name(model, mujoco.mjtObj.mjOBJ_BODY, model.geom_bodyid[geom])


@pytest.mark.parametrize("robot_dir", [QUADRUPED, ARM], ids=["quadruped", "arm"])
def test_robot_toml_schema(robot_dir):
    """Each robot.toml names its URDF, base type, gains, contact spheres and a standing posture of known joints."""
    cfg = read_toml(robot_dir)
    assert cfg["name"] == robot_dir.name
    assert urdf_path(robot_dir).is_file()
    assert cfg["base"] in ("floating", "fixed")
    assert {"kp", "kd", "ki"} <= set(cfg["gains"])
    model = pin_model(robot_dir)
    spheres = cfg["contact_spheres"]
    assert len(spheres) == 4
    assert len({s["name"] for s in spheres}) == 4
    assert all(s["radius"] == pytest.approx(0.01) and len(s["offset"]) == 3 for s in spheres)
    assert set(cfg["standing"]["joints"]) == set(movable_joint_names(model))


def test_quadruped_loads_in_pinocchio():
    """The quadruped with a free-flyer base has nq = 19, nv = 18 and 12 revolute joints named <leg>_HAA/HFE/KFE."""
    model = pin_model(QUADRUPED)
    assert (model.nq, model.nv) == (19, 18)
    names = movable_joint_names(model)
    assert sorted(names) == sorted(QUADRUPED_JOINTS)
    assert all(model.joints[model.getJointId(n)].shortname().startswith("JointModelR") for n in names)
    for leg in LEGS:
        assert model.existFrame(f"{leg}_foot")


def test_arm_loads_in_pinocchio():
    """The fixed-base arm has nv = 11: seven revolute arm joints and four prismatic fingers."""
    model = pin_model(ARM)
    assert (model.nq, model.nv) == (11, 11)
    assert movable_joint_names(model) == [*ARM_JOINTS, *FINGER_JOINTS]
    kinds = [model.joints[model.getJointId(n)].shortname() for n in movable_joint_names(model)]
    assert all(k.startswith("JointModelR") for k in kinds[:7])
    assert all(k.startswith("JointModelP") for k in kinds[7:])
    for i in range(1, 5):
        assert model.existFrame(f"fingertip_{i}")


@pytest.mark.parametrize("robot_dir", [QUADRUPED, ARM], ids=["quadruped", "arm"])
def test_urdf_inertias_are_physical(robot_dir):
    """Every URDF link inertia has positive mass, is positive definite and meets the triangle inequality."""
    root = ET.parse(urdf_path(robot_dir)).getroot()
    links = root.findall("link")
    assert links
    for link in links:
        inertial = link.find("inertial")
        assert inertial is not None, link.get("name")
        assert float(inertial.find("mass").get("value")) > 0.0
        a = {k: float(v) for k, v in inertial.find("inertia").attrib.items()}
        inertia = np.array(
            [[a["ixx"], a["ixy"], a["ixz"]], [a["ixy"], a["iyy"], a["iyz"]], [a["ixz"], a["iyz"], a["izz"]]]
        )
        principal = np.linalg.eigvalsh(inertia)
        assert principal[0] > 0.0, link.get("name")
        assert principal[0] + principal[1] >= principal[2] * (1.0 - 1e-9), link.get("name")
    # Pinocchio's body inertias (fixed links merged into their parents) stay physical too.
    model = pin_model(robot_dir)
    for inertia in model.inertias[1:]:
        principal = np.linalg.eigvalsh(inertia.inertia)
        assert inertia.mass > 0.0
        assert principal[0] > 0.0
        assert principal[0] + principal[1] >= principal[2] * (1.0 - 1e-9)


def test_quadruped_total_mass():
    """The quadruped weighs 4.5–5.1 kg (the paper's robot presses 47.09 N on the ground at rest)."""
    mass = pin.computeTotalMass(pin_model(QUADRUPED))
    assert 4.5 <= mass <= 5.1


@pytest.mark.parametrize("robot_dir", [QUADRUPED, ARM], ids=["quadruped", "arm"])
def test_effort_limits(robot_dir):
    """Every movable joint has a positive effort and velocity limit and a non-empty position range."""
    model = pin_model(robot_dir)
    for name in movable_joint_names(model):
        j = model.joints[model.getJointId(name)]
        assert model.effortLimit[j.idx_v] > 0.0
        assert model.velocityLimit[j.idx_v] > 0.0
        assert model.lowerPositionLimit[j.idx_q] < model.upperPositionLimit[j.idx_q]


def test_quadruped_standing_feet_touch_ground():
    """In the standing posture every foot sphere touches z = 0 (|phi| < 1e-6) and the base is 0.14–0.18 m high."""
    model = pin_model(QUADRUPED)
    q = standing_q(QUADRUPED, model)
    assert 0.14 <= q[2] <= 0.18
    assert np.all(q[7:] >= model.lowerPositionLimit[7:]) and np.all(q[7:] <= model.upperPositionLimit[7:])
    spheres = sphere_centres(QUADRUPED, model, q)
    assert sorted(spheres) == sorted(f"{leg}_foot" for leg in LEGS)
    for name, (centre, radius) in spheres.items():
        assert abs(centre[2] - radius) < TOL, name


def box_face_contact(centre: np.ndarray, radius: float, box: dict) -> tuple[float, tuple[int, int]]:
    """Signed distance sphere–box and the touched face (axis, ±1) of an axis-aligned box."""
    half = 0.5 * np.asarray(box["size"], dtype=float)
    p = centre - np.asarray(box["initial_position"], dtype=float)
    outside = np.abs(p) - half
    axis = int(np.argmax(outside))
    # The centre must lie on the face's normal line through a point strictly inside that face.
    others = [k for k in range(3) if k != axis]
    assert np.all(outside[others] < 0.0)
    return float(outside[axis] - radius), (axis, int(np.sign(p[axis])))


def test_arm_grasp_fingertips_touch_box_faces():
    """In the grasp posture each fingertip sphere touches a distinct side face of the box, mid-height, |phi| < 1e-6."""
    model = pin_model(ARM)
    q = standing_q(ARM, model)
    assert np.all(q >= model.lowerPositionLimit) and np.all(q <= model.upperPositionLimit)
    (box,) = read_toml(ARM)["objects"]
    assert box["shape"] == "box"
    assert 0.05 <= min(box["size"]) <= max(box["size"]) <= 0.06
    assert box["density"] == pytest.approx(6000.0)
    assert np.allclose(box["initial_orientation_xyzw"], [0.0, 0.0, 0.0, 1.0])
    faces = set()
    for name, (centre, radius) in sphere_centres(ARM, model, q).items():
        phi, face = box_face_contact(centre, radius, box)
        assert abs(phi) < TOL, name
        assert face[0] in (0, 1), f"{name} touches a top/bottom face"
        assert abs(centre[2] - box["initial_position"][2]) < 0.25 * box["size"][2], name
        faces.add(face)
    assert len(faces) == 4


def test_arm_grasp_hand_points_down():
    """In the grasp posture the hand axis points along -z, its x and y axes along the world's, above the box."""
    model = pin_model(ARM)
    data = model.createData()
    pin.framesForwardKinematics(model, data, standing_q(ARM, model))
    hand = data.oMf[model.getFrameId("hand")]
    assert np.allclose(np.abs(hand.rotation), np.eye(3), atol=1e-9)
    assert hand.rotation[2, 2] == pytest.approx(-1.0)
    (box,) = read_toml(ARM)["objects"]
    assert hand.translation[2] > box["initial_position"][2] + 0.5 * box["size"][2]


@pytest.mark.parametrize(
    ("robot_dir", "free_base", "nv"),
    [(QUADRUPED, False, 12), (QUADRUPED, True, 18), (ARM, False, 11)],
    ids=["quadruped-welded", "quadruped-free", "arm"],
)
def test_urdf_loads_in_mujoco(robot_dir, free_base, nv):
    """MuJoCo builds each URDF with the right number of DoF, the same joints as Pinocchio and the same mass."""
    text = urdf_path(robot_dir).read_text()
    if not free_base:
        assert mujoco.MjModel.from_xml_string(text).nv == nv
    model = mujoco_model(robot_dir, free_base=free_base)
    assert model.nv == nv
    names = {mujoco.mj_id2name(model, mujoco.mjtObj.mjOBJ_JOINT, j) for j in range(model.njnt)}
    pinocchio = pin_model(robot_dir)
    assert names - {None} == set(movable_joint_names(pinocchio))
    urdf_mass = sum(float(m.get("value")) for m in ET.parse(urdf_path(robot_dir)).getroot().iter("mass"))
    robot_bodies = model.body_rootid == model.body_rootid[1]
    assert model.body_mass[robot_bodies].sum() == pytest.approx(urdf_mass)
    geoms = [(model.geom_type[g], model.geom_contype[g]) for g in range(model.ngeom)]
    assert all(t != mujoco.mjtGeom.mjGEOM_MESH for t, _ in geoms)
    spheres = {s["frame"] for s in read_toml(robot_dir)["contact_spheres"]}
    for frame in spheres:
        body = mujoco.mj_name2id(model, mujoco.mjtObj.mjOBJ_BODY, frame)
        assert body >= 0, frame
        colliding = [
            g
            for g in range(model.ngeom)
            if model.geom_bodyid[g] == body
            and model.geom_contype[g]
            and model.geom_type[g] == mujoco.mjtGeom.mjGEOM_SPHERE
        ]
        assert len(colliding) == 1 and model.geom_size[colliding[0], 0] == pytest.approx(0.01), frame


def mujoco_at_standing(robot_dir: pathlib.Path, **kwargs) -> tuple[mujoco.MjModel, mujoco.MjData]:
    model = mujoco_model(robot_dir, **kwargs)
    data = mujoco.MjData(model)
    standing = read_toml(robot_dir)["standing"]
    for name, value in standing["joints"].items():
        data.qpos[model.jnt_qposadr[mujoco.mj_name2id(model, mujoco.mjtObj.mjOBJ_JOINT, name)]] = value
    if "base_position" in standing:
        free = int(np.flatnonzero(model.jnt_type == mujoco.mjtJoint.mjJNT_FREE)[0])
        adr = model.jnt_qposadr[free]
        data.qpos[adr : adr + 3] = standing["base_position"]
        data.qpos[adr + 3 : adr + 7] = np.roll(np.asarray(standing["base_orientation_xyzw"], dtype=float), 1)
    mujoco.mj_forward(model, data)
    return model, data


def clearances(model: mujoco.MjModel, data: mujoco.MjData, target: str) -> dict[tuple[str, int], float]:
    """Signed distance from the named world geom to every robot geom (visual and collision), keyed by (body, geom)."""
    other = mujoco.mj_name2id(model, mujoco.mjtObj.mjOBJ_GEOM, target)
    return {
        (geom_body_name(model, g), g): mujoco.mj_geomDistance(model, data, g, other, 1.0, None)
        for g in range(model.ngeom)
        if model.geom_bodyid[g] != 0
    }


def test_quadruped_standing_in_mujoco():
    """In MuJoCo's standing model only the foot spheres reach the floor, each at distance 0 (|d| < 1e-6)."""
    model, data = mujoco_at_standing(QUADRUPED, free_base=True, floor=True)
    for (body, geom), dist in clearances(model, data, "floor").items():
        if body.endswith("_foot"):
            assert abs(dist) < TOL, body
        else:
            assert dist > 1e-3, (body, geom)


def test_arm_grasp_in_mujoco():
    """In MuJoCo's grasp model the fingertips touch the box (|d| < 1e-6) and every other link is clear of it."""
    model, data = mujoco_at_standing(ARM)
    touching = set()
    for (body, geom), dist in clearances(model, data, "box").items():
        if body.startswith("fingertip_"):
            assert abs(dist) < TOL, body
            touching.add(body)
        else:
            assert dist > 1e-3, (body, geom)
    assert touching == {f"fingertip_{i}" for i in range(1, 5)}


def test_pid_gains_section_sets_the_baselines_torque_gains_apart_from_the_acceleration_gains(tmp_path):
    """[pid_gains] feeds only the pid formulation; without it the pid uses the numbers of [gains]."""
    from idcontrol.robot.model import RobotModel

    src = pathlib.Path(__file__).resolve().parents[1] / "robots" / "quadruped"
    (tmp_path / "quadruped.urdf").write_text((src / "quadruped.urdf").read_text())
    text = (src / "robot.toml").read_text()
    start = text.index("[pid_gains]")  # the shipped file has one: remove it for the "without" case
    text = text[:start] + text[text.index("\n\n", start) + 2 :]
    (tmp_path / "robot.toml").write_text(text)
    plain = RobotModel(str(tmp_path / "robot.toml"))
    np.testing.assert_array_equal(plain.pid_gains.kp, plain.gains.kp)
    text = (
        (tmp_path / "robot.toml")
        .read_text()
        .replace("[gains]", "[pid_gains]\nkp = 20.0\nkd = { default = 0.5, LF_KFE = 0.7 }\n\n[gains]")
    )
    (tmp_path / "robot.toml").write_text(text)
    split = RobotModel(str(tmp_path / "robot.toml"))
    np.testing.assert_array_equal(split.gains.kp, plain.gains.kp)
    assert np.all(split.pid_gains.kp == 20.0) and split.pid_gains.kd[split.actuated_joints.index("LF_KFE")] == 0.7
    from idcontrol.control.controller import InverseDynamicsController
    from idcontrol.control.state import RobotState
    from idcontrol.reference.base import Tracking

    controller = InverseDynamicsController(split, formulation="pid")
    error = np.full(split.nu, 0.01)
    state = RobotState(q=split.standing_configuration(), v=np.zeros(split.nv))
    result = controller.solve(state, np.zeros(split.nu), Tracking(error, np.zeros(split.nu)))
    np.testing.assert_allclose(result.tau, 20.0 * error)  # N·m: the torque gains, not the 1/s² ones
