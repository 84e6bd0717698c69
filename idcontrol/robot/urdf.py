"""A URDF as written (before any parser fills in defaults) and the Pinocchio model built from it.

urdfdom, the parser behind Pinocchio, reports a malformed number on stderr and carries on with a
default (a NaN mass becomes 0), so the raw text is read here first (:func:`read_urdf`) for the
preflight to check (:mod:`idcontrol.robot.preflight`). :func:`build_model` then builds the
Pinocchio model with two changes, both as MuJoCo's URDF import reads the file:

* a ``continuous`` joint becomes a ``revolute`` joint without position limits, so every one-DoF joint
  has one position coordinate (the angle, rad) instead of Pinocchio's (cos, sin) pair; MuJoCo makes the
  same joint an unlimited hinge;
* a ``revolute`` or ``prismatic`` joint whose limits are equal (:func:`equal_limits`: usually a ``<limit>``
  without ``lower`` and ``upper``, which urdfdom reads as 0 and 0, a joint that could not move) has no
  position limits; MuJoCo leaves a joint whose range is empty unlimited.
"""

from __future__ import annotations

import copy
import xml.etree.ElementTree as ET
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import pinocchio as pin

from idcontrol.errors import ConfigError

#: The position limits of a joint without any (a continuous joint), as Pinocchio writes them for a free flyer.
UNBOUNDED = float(np.finfo(float).max)

#: URDF joint types with one degree of freedom.
ONE_DOF = ("revolute", "continuous", "prismatic")


@dataclass(frozen=True)
class UrdfLink:
    """One ``<link>`` as written: its ``<inertial>`` fields as strings (None: absent)."""

    name: str
    has_inertial: bool
    mass: str | None
    inertia: dict[str, str | None]  # ixx, ixy, ixz, iyy, iyz, izz
    inertial_origin: dict[str, str | None]  # xyz, rpy
    collisions: int
    visuals: int


@dataclass(frozen=True)
class UrdfJoint:
    """One ``<joint>`` as written (strings; None: absent)."""

    name: str
    type: str
    parent: str
    child: str
    origin: dict[str, str | None]  # xyz, rpy
    axis: str | None
    limit: dict[str, str | None] | None  # lower, upper, effort, velocity; None: no <limit>
    damping: str | None
    friction: str | None
    mimic: str | None = None  # the joint it mimics (<mimic joint>), None: none


@dataclass
class UrdfFile:
    """A parsed URDF: its links and joints in file order, the root link, the tree."""

    path: Path
    name: str
    links: dict[str, UrdfLink] = field(default_factory=dict)
    joints: dict[str, UrdfJoint] = field(default_factory=dict)
    root: str = ""
    tree: ET.ElementTree | None = None

    def child_joints(self, link: str) -> list[UrdfJoint]:
        return [j for j in self.joints.values() if j.parent == link]

    @property
    def movable_joints(self) -> list[UrdfJoint]:
        """The one-DoF joints, in file order."""
        return [j for j in self.joints.values() if j.type in ONE_DOF]


def _attrs(element: ET.Element | None, names: tuple[str, ...]) -> dict[str, str | None]:
    return {n: (element.get(n) if element is not None else None) for n in names}


def read_urdf(path: str | Path) -> UrdfFile:
    """Parse a URDF's text (ConfigError naming the file for malformed XML or a file that is no URDF)."""
    path = Path(path)
    try:
        tree = ET.parse(path)
    except (ET.ParseError, OSError) as e:
        raise ConfigError(f"{path}: not a readable URDF (XML): {e}") from None
    robot = tree.getroot()
    if robot.tag != "robot":
        raise ConfigError(f"{path}: the root element is <{robot.tag}>, a URDF's is <robot>")
    out = UrdfFile(path=path, name=robot.get("name", path.stem), tree=tree)
    for link in robot.findall("link"):
        inertial = link.find("inertial")
        mass = inertial.find("mass") if inertial is not None else None
        inertia = inertial.find("inertia") if inertial is not None else None
        origin = inertial.find("origin") if inertial is not None else None
        name = link.get("name", "")
        out.links[name] = UrdfLink(
            name=name,
            has_inertial=inertial is not None,
            mass=mass.get("value") if mass is not None else None,
            inertia=_attrs(inertia, ("ixx", "ixy", "ixz", "iyy", "iyz", "izz")),
            inertial_origin=_attrs(origin, ("xyz", "rpy")),
            collisions=len(link.findall("collision")),
            visuals=len(link.findall("visual")),
        )
    for joint in robot.findall("joint"):
        parent, child = joint.find("parent"), joint.find("child")
        axis, limit, dynamics = joint.find("axis"), joint.find("limit"), joint.find("dynamics")
        mimic = joint.find("mimic")
        name = joint.get("name", "")
        out.joints[name] = UrdfJoint(
            name=name,
            type=joint.get("type", ""),
            parent=parent.get("link", "") if parent is not None else "",
            child=child.get("link", "") if child is not None else "",
            origin=_attrs(joint.find("origin"), ("xyz", "rpy")),
            axis=axis.get("xyz") if axis is not None else None,
            limit=_attrs(limit, ("lower", "upper", "effort", "velocity")) if limit is not None else None,
            damping=dynamics.get("damping") if dynamics is not None else None,
            friction=dynamics.get("friction") if dynamics is not None else None,
            mimic=mimic.get("joint") if mimic is not None else None,
        )
    children = {j.child for j in out.joints.values()}
    roots = [name for name in out.links if name not in children]
    out.root = roots[0] if roots else ""
    return out


def parse_floats(text: str | None, n: int) -> np.ndarray | None:
    """``n`` numbers from a URDF attribute (None when absent or not ``n`` numbers; NaN and inf are kept)."""
    if text is None:
        return None
    try:
        values = np.array([float(x) for x in text.split()], dtype=float)
    except ValueError:
        return None
    return values if values.shape == (n,) else None


def equal_limits(joint: UrdfJoint) -> bool:
    """Whether a revolute or prismatic joint's ``<limit>`` gives equal lower and upper bounds (an absent one
    counts as 0, as urdfdom reads it): read as no position limits (see the module's notes)."""
    if joint.type not in ("revolute", "prismatic") or joint.limit is None:
        return False
    lower, upper = parse_floats(joint.limit["lower"] or "0", 1), parse_floats(joint.limit["upper"] or "0", 1)
    return lower is not None and upper is not None and float(lower[0]) == float(upper[0])


def model_xml(urdf: UrdfFile) -> str:
    """The URDF text Pinocchio builds from: continuous joints as revolute joints without position limits, and
    no position limits on a joint whose limits are equal (:func:`equal_limits`), every material named
    (:func:`name_materials`)."""
    root = copy.deepcopy(urdf.tree.getroot())  # the parsed file stays as written
    name_materials(root)
    for joint in root.findall("joint"):
        written = urdf.joints.get(joint.get("name", ""))
        if written is not None and equal_limits(written):
            limit = joint.find("limit")
            limit.set("lower", repr(-UNBOUNDED))
            limit.set("upper", repr(UNBOUNDED))
            continue
        if joint.get("type") != "continuous":
            continue
        joint.set("type", "revolute")
        limit = joint.find("limit")
        if limit is None:
            limit = ET.SubElement(joint, "limit", {"effort": "0", "velocity": "0"})
        limit.set("lower", repr(-UNBOUNDED))
        limit.set("upper", repr(UNBOUNDED))
    return ET.tostring(root, encoding="unicode")


JOINT_TYPES = (*ONE_DOF, "fixed", "floating", "planar")


def tree_defects(urdf: UrdfFile) -> list[str]:
    """What keeps the URDF's links and joints from forming one tree, one line each (empty: none): unnamed or
    repeated links and joints, a joint of no known type, without its parent or child link or naming a link the file
    does not define, a link that is the child of two joints, several roots or none."""
    robot = urdf.tree.getroot() if urdf.tree is not None else None
    out = []
    for kind in ("link", "joint"):
        names = [e.get("name") for e in robot.findall(kind)] if robot is not None else []
        if any(not n for n in names):
            out.append(f"a <{kind}> without a name")
        repeated = sorted({n for n in names if n and names.count(n) > 1})
        if repeated:
            out.append(f"{kind}(s) defined twice: {', '.join(repeated[:5])}")
    children: dict[str, str] = {}
    for joint in urdf.joints.values():
        where = f"joint {joint.name!r}"
        if joint.type not in JOINT_TYPES:
            out.append(f"{where}: type {joint.type!r} is none of {', '.join(JOINT_TYPES)}")
        for role, link in (("parent", joint.parent), ("child", joint.child)):
            if not link:
                out.append(f"{where}: no <{role} link=...>")
            elif link not in urdf.links:
                out.append(f"{where}: its {role} link {link!r} is not defined")
        if joint.child in children:
            out.append(f"link {joint.child!r} is the child of two joints ({children[joint.child]!r}, {joint.name!r})")
        children.setdefault(joint.child, joint.name)
    roots = [name for name in urdf.links if name not in children]
    if urdf.links and len(roots) != 1:
        out.append(
            f"{len(roots)} root links (links that are no joint's child): {', '.join(roots[:5]) or 'none'}; "
            "a robot has one"
        )
    return out


def build_model(urdf: UrdfFile, floating_base: bool) -> pin.Model:
    """Pinocchio's model of the URDF (a free-flyer root joint named ``root_joint`` when ``floating_base``);
    ConfigError naming what is wrong when its links and joints form no tree (:func:`tree_defects`)."""
    defects = tree_defects(urdf)
    if defects:
        raise ConfigError(f"{urdf.path}: the links and joints form no tree: " + "; ".join(defects[:5]))
    xml = model_xml(urdf)
    try:
        if floating_base:
            return pin.buildModelFromXML(xml, pin.JointModelFreeFlyer())
        return pin.buildModelFromXML(xml)
    except (RuntimeError, ValueError) as e:
        raise ConfigError(f"{urdf.path}: Pinocchio could not parse the URDF: {e}") from e


def frame_id(model: pin.Model, name: str) -> int:
    """The id of the frame ``name``: the link's body frame when a link has that name (a URDF may give a link and a
    joint the same name, and then Pinocchio's unfiltered lookup refuses), else the one frame of that name."""
    if model.existBodyName(name):
        return model.getBodyId(name)
    return model.getFrameId(name)


def resolve_mesh(filename: str, urdf_path: Path) -> str | None:
    """The absolute path of a URDF mesh ``filename``, or None when no such file exists: ``package://<name>/<rest>``
    in a folder ``<name>`` above the URDF (or inside one above it), a relative name against the URDF's folder."""
    if filename.startswith("package://"):
        package, _, relative = filename[len("package://") :].partition("/")
        for folder in urdf_path.resolve().parents:
            for root in (folder, folder / package):
                if root.name == package and (root / relative).is_file():
                    return str(root / relative)
        return None
    if filename.startswith("file://"):
        filename = filename[len("file://") :]
    path = Path(filename) if Path(filename).is_absolute() else urdf_path.resolve().parent / filename
    return str(path) if path.is_file() else None


def drop_missing_meshes(root: ET.Element, urdf_path: Path) -> list[str]:
    """In the URDF element tree ``root`` (changed in place): every mesh file name made absolute
    (:func:`resolve_mesh`), and each ``<visual>`` or ``<collision>`` whose mesh file is missing removed; returns
    the missing file names."""
    missing = []
    for link in root.iter("link"):
        for element in [*link.findall("visual"), *link.findall("collision")]:
            mesh = element.find("geometry/mesh")
            name = mesh.get("filename") if mesh is not None else None
            if not name:
                continue
            found = resolve_mesh(name, urdf_path)
            if found is None:
                missing.append(name)
                link.remove(element)
            else:
                mesh.set("filename", found)
    return missing


def name_materials(root: ET.Element) -> int:
    """Give each ``<material>`` without a name in the URDF element tree ``root`` one (changed in place); returns how
    many. urdfdom, which Pinocchio reads URDFs with, refuses a nameless material and with it the link's visual and
    collision geometry, printing an error for each (Unitree's H1-2: about 230)."""
    unnamed = [m for m in root.iter("material") if not m.get("name")]
    for k, material in enumerate(unnamed):
        material.set("name", f"idcontrol_unnamed_material_{k}")
    return len(unnamed)
