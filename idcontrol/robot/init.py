"""``idcontrol robot init URDF``: a ``robot.toml`` that runs as written, inferred from the URDF (and an SRDF).

What is inferred, in order (each step prints what it found, or what it could not infer):

1. **The base.** ``--base`` if given; fixed when the URDF's root link is ``world``; otherwise floating when at
   least two limbs that share no joint end together at the bottom of the robot (legs), else fixed.
2. **Limbs.** Every end of the kinematic tree and the chain of joints from the base to it; its end frame is the
   distal link (a foot or sole fixed below a shank counts). On a floating base the limbs whose ends are lowest
   in the standing posture are legs; on a fixed base, joints that branch together off one body are fingers.
3. **The standing posture.** The SRDF's group state ``--state`` (default: ``standing``; else a state that sets
   every joint or the floating root joint, else on a fixed base the one that sets most of them,
   at least half: an arm's state often leaves out its gripper's and mimic joints). A fixed base without one
   takes the neutral posture with every joint at least 0.25 rad (or a quarter of its range) inside its limits,
   as are the joints a state leaves out. Otherwise a solve: each leg's
   contact point under its hip at 3/4 of the straight leg's reach, knees bent into their joint limits (the
   bend, among a few candidates per leg, that stays farthest inside the limits, knees toward the body centre on
   a tie), the feet shifted together until the centre of mass is over their centroid. Either way the base is
   then moved so the lowest contact sphere touches z = 0, and feet left above the ground are put on it by
   inverse kinematics.
4. **Contact candidates.** For each leg (and each finger), the collision geometry of its distal body in the
   standing posture: its lowest collision sphere as is (all of them, when three or more near the bottom span a
   sole wider than 2 cm and a twentieth of the leg: its corners); a flat bottom (a sole wider than a tenth of the leg)
   as four corner spheres; a wheel (a body spun by a joint without a range) as a sphere on its axis; any other shape
   as a sphere fitted to its lowest points. Without collision geometry
   the visual geometry is used, and without any, a sphere at the end frame (reported).
5. **Torque limits** from the URDF's efforts (an actuated joint without one is an error naming it, unless
   ``torque_limit``, ``--torque-limit``, gives one for such joints: written to ``[limits.torque]``).
6. **Gains** scaled with the robot's size: the q̈ gains of the shipped quadruped's trot (K_p = 1000 s⁻²,
   K_d = 60 s⁻¹ at a 0.163 m standing height) with time scaled by √(height / 0.163 m) (Froude scaling), and
   the ``pid`` baseline's torque gains from the mass matrix's diagonal at the standing posture.

The robot file is written with comments saying where each value came from. When the posture it holds cannot
be held as written (a joint outside its limits, the centre of mass outside the feet's support polygon, a joint
that needs more than its torque limit, a floating base without legs), the file is still written, each reason is
listed in :attr:`InitResult.blockers`, and the command exits with status 1 instead of proposing the launch.
"""

from __future__ import annotations

import copy
import itertools
import json
import math
import os
import re
import xml.etree.ElementTree as ET
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import pinocchio as pin

from idcontrol.errors import ConfigError
from idcontrol.robot.config import resolve_urdf
from idcontrol.robot.limbs import end_frame, joint_chain, leaf_joints, limb_name
from idcontrol.robot.preflight import PreflightError, PreflightReport, movable_joint_names, preflight_urdf
from idcontrol.robot.urdf import UrdfFile, build_model, drop_missing_meshes, frame_id, name_materials, read_urdf

#: Reference of the gain scaling: the shipped quadruped's trot gains at its standing height.
REFERENCE_HEIGHT, REFERENCE_KP, REFERENCE_KD = 0.163, 1000.0, 60.0
#: A leg stands at this fraction of its straight reach when no SRDF gives the posture.
STANDING_REACH = 0.75
#: Radius of the corner spheres of a flat foot, m (at most a tenth of the sole's smaller side).
CORNER_RADIUS = 0.005
#: The smallest contact sphere init writes, m: a URDF's contact point (a sphere of radius 0) gets this radius.
POINT_RADIUS = 0.002
#: A foot's bottom (its geometry's points within 2 mm of its lowest) is a flat sole when its length exceeds this
#: fraction of the leg's length and its width SOLE_MIN_WIDTH (m): the 2 mm cap of a 3 cm ball is 2.2 cm wide. At a
#: tenth, Alexander's 8.9 cm wide sole on its 0.94 m legs was taken for a point; with the width held to the same
#: fraction, Unitree H1's 28 x 3 cm soles on 0.8 m legs were.
SOLE_WIDTH_FRACTION, SOLE_MIN_WIDTH = 0.05, 0.02
#: A bottom that is a strip (one side over twice the other) is a sole tilted up to this many degrees (iCub's, 4°,
#: in its SRDF posture): the points within its length times the tilt's sine are taken instead.
SOLE_MAX_TILT_DEG = 5.0
#: A fixed-base robot's posture keeps each joint this far inside its limits (rad or m; at most a quarter of the
#: range), so that a joint sinusoid about it meets no limit.
POSTURE_LIMIT_MARGIN = 0.25
#: A fixed base's neutral posture whose gravity torque exceeds this fraction of a joint's limit is turned to one
#: that needs less (the rest of the limit is left for the motion about it).
HOLD_FRACTION = 0.5
#: ... keeping its joints and limb ends this far above the ground plane z = 0 (m).
GROUND_CLEARANCE = 0.05
#: A support polygon narrower than this (m) is a line: nothing stands still on it.
SUPPORT_MIN_WIDTH = 0.01
GRAVITY = 9.81


@dataclass
class Sphere:
    name: str
    frame: str
    radius: float
    offset: np.ndarray  # in the frame, m
    how: str  # where it came from


@dataclass
class Limb:
    name: str
    kind: str  # leg, arm, finger, other
    joints: list[int]  # joint ids, base outward
    end: str  # end frame
    spheres: list[Sphere] = field(default_factory=list)


@dataclass
class InitResult:
    """What ``robot init`` wrote and said."""

    path: Path
    text: str
    inferred: list[str]
    not_inferred: list[str]
    report: PreflightReport
    #: Why the written posture cannot be held as written (empty: it can); the command then exits non-zero.
    blockers: list[str] = field(default_factory=list)


# ---------------------------------------------------------------------------------------------------- geometry
def _package_dirs(urdf: UrdfFile) -> list[str]:
    """Folders that hold the URDF's ``package://<name>/`` packages: the parent of a folder named <name> above it."""
    names = set()
    for element in urdf.tree.getroot().iter("mesh"):
        filename = element.get("filename", "")
        if filename.startswith("package://"):
            names.add(filename[len("package://") :].split("/", 1)[0])
    dirs = []
    for name in names:
        for folder in urdf.path.resolve().parents:
            if folder.name == name:
                dirs.append(str(folder.parent))
                break
    return dirs or [str(urdf.path.resolve().parent)]


def _geometry(model: pin.Model, urdf: UrdfFile, kind: pin.GeometryType) -> tuple[pin.GeometryModel | None, str]:
    """Pinocchio's collision (or visual) geometry of the URDF, and a note; when a mesh cannot be loaded, the rest
    of the geometry without the elements whose mesh file is missing (a note names them), or (None, why)."""
    root = copy.deepcopy(urdf.tree.getroot())
    why = ""
    if not name_materials(root):  # (urdfdom drops the geometry of a link with a nameless material: H1-2)
        try:
            return pin.buildGeomFromUrdf(model, str(urdf.path), kind, package_dirs=_package_dirs(urdf)), ""
        except (RuntimeError, ValueError) as e:
            why = str(e).splitlines()[0]
    missing = drop_missing_meshes(root, urdf.path)
    try:  # a mesh file missing (not every published package ships all of them): the geometry that is there
        geometry = pin.buildGeomFromUrdfString(model, ET.tostring(root, encoding="unicode"), kind)
    except (RuntimeError, ValueError) as e:
        return None, why or str(e).splitlines()[0]
    return geometry, (
        f"{len(missing)} element(s) whose mesh file is missing left out ({sorted(set(missing))[0]}"
        f"{' ...' if len(set(missing)) > 1 else ''})"
        if missing
        else ""
    )


def _support_points(obj: pin.GeometryObject, placement: pin.SE3) -> tuple[np.ndarray, float | None]:
    """Points of a geometry in world (k, 3) whose lowest one is the geometry's lowest; the radius of a sphere
    that is the geometry's bottom (a sphere, a capsule's end), else None."""
    g = obj.geometry
    name = type(g).__name__
    R, p = placement.rotation, placement.translation
    if name == "Sphere":
        return p[None, :], float(g.radius)
    if name == "Capsule":
        ends = np.array([p + R[:, 2] * g.halfLength, p - R[:, 2] * g.halfLength])
        return ends, float(g.radius)
    if name == "Box":
        corners = np.array(list(itertools.product(*[(-h, h) for h in g.halfSide])))
        return corners @ R.T + p, None
    if name == "Cylinder":
        a = np.linspace(0.0, 2.0 * np.pi, 48, endpoint=False)
        ring = np.stack([g.radius * np.cos(a), g.radius * np.sin(a), np.zeros_like(a)], axis=1)
        local = np.concatenate([ring + [0, 0, g.halfLength], ring - [0, 0, g.halfLength]])
        return local @ R.T + p, None
    if hasattr(g, "vertices") and callable(g.vertices):
        return np.asarray(g.vertices()) @ R.T + p, None
    if hasattr(g, "points"):
        return np.asarray(g.points()) @ R.T + p, None
    return np.zeros((0, 3)), None


def _bottom(points: np.ndarray, below: float, oMf: pin.SE3, axes: list[int]) -> tuple[np.ndarray, ...]:
    """The ``points`` (k, 3, world) lower than ``below`` (m), in the frame ``oMf``, and their least and greatest
    coordinates along its ``axes`` (the sole's length and width)."""
    local = (points[points[:, 2] <= below] - oMf.translation) @ oMf.rotation
    return local, local[:, axes].min(axis=0), local[:, axes].max(axis=0)


def _free_spin_axis(model: pin.Model, data: pin.Data, joint: int, turn: pin.SE3) -> np.ndarray | None:
    """The unit axis (in the frame ``turn`` makes world) of ``joint`` when it is a one-DoF revolute joint without a
    position range (a wheel: continuous, or a revolute whose URDF limit gives none), at the posture of ``data``;
    None for any other joint."""
    if joint <= 0 or model.joints[joint].nv != 1:
        return None
    S = np.asarray(data.joints[joint].S, dtype=float).reshape(6, -1)[:, 0]  # [linear; angular] in the joint frame
    if np.linalg.norm(S[:3]) > 1e-12 or not np.linalg.norm(S[3:]) > 0.0:  # prismatic, helical
        return None
    lo, hi = _finite_limits(model, joint)
    if math.isfinite(hi - lo):
        return None  # a joint with a range (a knee, an ankle): not a wheel
    axis = (turn * data.oMi[joint]).rotation @ S[3:]
    return axis / np.linalg.norm(axis)


def _ball(name: str, frame: str, oMf: pin.SE3, centre: np.ndarray, radius: float, how: str) -> Sphere:
    """The contact sphere of a collision sphere of ``radius`` (m) at ``centre`` (world, m). A sphere smaller than
    :data:`POINT_RADIUS` (Drake's and IHMC's URDFs mark contact points with spheres of radius 0) gets that radius,
    its centre raised by the difference so that its lowest point stays where the URDF's was."""
    if radius >= POINT_RADIUS:
        return Sphere(name, frame, radius, oMf.actInv(centre), how)
    raised = centre + np.array([0.0, 0.0, POINT_RADIUS - radius])
    return Sphere(
        name, frame, POINT_RADIUS, oMf.actInv(raised), f"{how}, a point of radius {radius:g} m given {POINT_RADIUS:g} m"
    )


def _wheel_centre(model: pin.Model, data: pin.Data, joint: int, turn: pin.SE3, points: np.ndarray) -> np.ndarray | None:
    """The point of the wheel axis nearest the centre of the geometry ``points`` (k, 3) (in the frame ``turn`` makes
    world) when ``joint`` spins the body freely (:func:`_free_spin_axis`) and that centre lies on the axis (to a
    tenth of the geometry's size: a shank below a knee without a range does not); else None."""
    axis = _free_spin_axis(model, data, joint, turn)
    if axis is None:
        return None
    centre = 0.5 * (points.min(axis=0) + points.max(axis=0))
    size = float(np.max(np.linalg.norm(points - centre, axis=1)))
    origin = (turn * data.oMi[joint]).translation
    on_axis = origin + axis * float(axis @ (centre - origin))
    return on_axis if np.linalg.norm(centre - on_axis) <= 0.1 * size else None


def _end_spheres(
    model: pin.Model,
    data: pin.Data,
    geometries: list[pin.GeometryModel | None],
    joint: int,
    frame: str,
    limb: str,
    leg_length: float,
    down: np.ndarray | None = None,
) -> tuple[list[Sphere], str]:
    """Contact spheres for the distal body of a limb at the posture of ``data`` (see the module docstring), at its
    lowest point, or its farthest along ``down`` (a unit vector in world: a fingertip's direction)."""
    fid = frame_id(model, frame)
    # work in a world rotated so that `down` points down (the identity for a leg)
    turn = pin.SE3.Identity()
    if down is not None:
        below = np.array([0.0, 0.0, -1.0])
        turn.rotation = pin.Quaternion.FromTwoVectors(np.asarray(down, dtype=float), below).matrix()
    oMf = turn * data.oMf[fid]
    for source, geom in zip(("collision", "visual"), geometries, strict=True):
        if geom is None:
            continue
        objects = [o for o in geom.geometryObjects if o.parentJoint == joint]
        chunks = []
        for obj in objects:
            points, radius = _support_points(obj, turn * data.oMi[joint] * obj.placement)
            if len(points):
                chunks.append((points, radius, obj.name))
        if not chunks:
            continue
        # the lowest point of every chunk (a sphere's is its centre minus its radius)
        lows = [(float(np.min(p[:, 2]) - (r or 0.0)), i) for i, (p, r, _) in enumerate(chunks)]
        z_min, lowest = min(lows)
        points, radius, obj_name = chunks[lowest]
        if radius is not None:  # a collision sphere (or capsule end) is the bottom: take it as it is ...
            balls = [i for i, (_, r, _) in enumerate(chunks) if r is not None]
            spread = float(np.max(np.ptp(np.concatenate([chunks[i][0] for i in balls])[:, :2], axis=0)))
            # near the bottom: within a few mm, or as far as a sole of that size tilted by 20° reaches
            tolerance = max(0.005, 0.03 * leg_length, math.sin(math.radians(20.0)) * spread)
            near = [chunks[i] for z, i in sorted(lows) if z <= z_min + tolerance and i in balls]
            centres = np.array([p[np.argmin(p[:, 2])] for p, _, _ in near])
            if (
                down is None
                and len(near) >= 3
                and min(np.ptp(centres[:, :2] @ oMf.rotation[:2, :2], axis=0)) > max(0.05 * leg_length, 0.02)
            ):  # ... or a sole's corner spheres (G1): every one of them
                return [
                    _ball(f"{limb}_{k}", frame, oMf, c, r, f"a corner sphere {name!r} of its {source} sole")
                    for k, (c, (_, r, name)) in enumerate(zip(centres, near, strict=True))
                ], ""
            centre = points[np.argmin(points[:, 2])]
            return [_ball(limb, frame, oMf, centre, radius, f"its {source} sphere {obj_name!r}")], ""
        allpoints = np.concatenate([p for p, r, _ in chunks if r is None])
        # a wheel is no sole, however flat its tessellated tread's lowest facet (Go2-W's rear wheels)
        wheel_centre = _wheel_centre(model, data, joint, turn, points)
        # the frame's axes nearest the world's x and y (a sole's length and width) and z (its normal)
        normal = int(np.argmax(np.abs(oMf.rotation[2])))
        axes = [a for a in range(3) if a != normal]
        if abs(oMf.rotation[0, axes[0]]) < abs(oMf.rotation[0, axes[1]]):
            axes.reverse()
        local, lo, hi = _bottom(allpoints, z_min + 0.002, oMf, axes)
        extent = hi - lo
        if max(extent) > max(2.0 * min(extent), SOLE_MIN_WIDTH):  # a strip: the edge of a sole tilted a few degrees
            depth = math.sin(math.radians(SOLE_MAX_TILT_DEG)) * float(max(extent))
            local, lo, hi = _bottom(allpoints, z_min + depth, oMf, axes)
            extent = hi - lo
        if wheel_centre is None and min(extent) > SOLE_MIN_WIDTH and max(extent) > SOLE_WIDTH_FRACTION * leg_length:
            r = min(CORNER_RADIUS, 0.1 * float(min(extent)))
            # the sole's face in the frame (its points' median along the normal axis), the spheres on its inner side
            inward = float(np.sign(oMf.rotation[2, normal]))
            face = float(np.median(local[:, normal]))
            spheres = []
            for k, (sa, sb) in enumerate(((1, 1), (1, -1), (-1, 1), (-1, -1))):
                centre_local = np.zeros(3)
                centre_local[axes[0]] = (hi[0] - r) if sa > 0 else (lo[0] + r)
                centre_local[axes[1]] = (hi[1] - r) if sb > 0 else (lo[1] + r)
                centre_local[normal] = face + inward * r
                spheres.append(
                    Sphere(
                        f"{limb}_{k}",
                        frame,
                        r,
                        centre_local,
                        f"a corner of the flat {source} bottom of {obj_name!r} ({extent[0]:.3f} x {extent[1]:.3f} m)",
                    )
                )
            return spheres, ""
        # a rounded end: a compact foot (a ball or wheel mesh) gets the sphere about its centre through its lowest
        # point; a wheel (a body spun by a joint without a range) about the point of its axis nearest that centre,
        # so that turning the wheel leaves the sphere in place; the rounded tip of a longer body, the sphere fitted
        # (least squares) to its lowest few millimetres
        centre = 0.5 * (points.min(axis=0) + points.max(axis=0))
        size = float(np.max(np.linalg.norm(points - centre, axis=1)))
        end = "lowest" if down is None else "farthest"
        if wheel_centre is not None:
            centre = wheel_centre
            radius = float(centre[2] - z_min)
            how = f"about the axis of its wheel joint {str(model.names[joint])!r}, through its {end} point"
        elif size <= 0.15 * leg_length:
            radius = float(centre[2] - z_min)
            how = f"about the centre of its compact {source} geometry {obj_name!r}, through its {end} point"
        else:
            near = points[points[:, 2] <= z_min + max(0.005, 0.02 * leg_length)]
            A = np.c_[2.0 * near, np.ones(len(near))]
            solution = np.linalg.lstsq(A, np.sum(near**2, axis=1), rcond=None)[0]
            centre = solution[:3]
            radius = float(math.sqrt(max(solution[3] + centre @ centre, 0.0)))
            bottom = near[np.argmin(near[:, 2])]
            if not 0.002 <= radius <= max(float(np.max(np.ptp(near, axis=0))), 0.002):
                radius = max(0.5 * float(np.max(np.ptp(near[:, :2], axis=0))), 0.002)
            centre = np.array([bottom[0], bottom[1], z_min + radius])
            how = f"fitted to the lowest points of its {source} geometry {obj_name!r}"
        centre = np.array([centre[0], centre[1], z_min + radius])
        return [Sphere(limb, frame, radius, oMf.actInv(centre), how)], ""
    radius = max(0.01, 0.05 * leg_length)
    return [Sphere(limb, frame, radius, np.zeros(3), "no geometry")], (
        f"{limb}: no collision or visual geometry on its distal body; a {radius:.3f} m sphere at frame "
        f"{frame!r} (check radius and offset)"
    )


# ---------------------------------------------------------------------------------------------------- SRDF
def _srdf_states(path: Path) -> list[tuple[str, set[str]]]:
    """(group state name, joints it sets) of an SRDF, in file order."""
    try:
        root = ET.parse(path).getroot()
    except (ET.ParseError, OSError) as e:
        raise ConfigError(f"{path}: not a readable SRDF: {e}") from None
    return [(s.get("name", ""), {j.get("name", "") for j in s.findall("joint")}) for s in root.findall("group_state")]


def _srdf_unknown_joints(model: pin.Model, srdf: Path) -> str:
    """'; its states name joints the URDF does not have: ...' (the first five), or '' when it names none."""
    known = {str(n) for n in model.names}
    unknown = sorted({j for _, joints in _srdf_states(srdf) for j in joints} - known)
    if not unknown:
        return ""
    shown = ", ".join(unknown[:5]) + (f" and {len(unknown) - 5} more" if len(unknown) > 5 else "")
    return f"; its states name joints the URDF does not have: {shown} (an SRDF for another URDF or naming prefix?)"


def _srdf_posture(
    model: pin.Model, srdf: Path, state: str | None, floating: bool
) -> tuple[np.ndarray | None, str, list[str]]:
    """The configuration of the SRDF group state to stand in, which state it was ('' when none fits) and the
    movable joints it leaves unset (a fixed base's state may leave out up to half of them: a gripper's, a mimic
    finger's; those are placed as in :func:`_neutral_inside_limits`)."""
    states = _srdf_states(srdf)
    names = [n for n, _ in states]
    if state is not None:
        if state not in names:
            raise ConfigError(f"{srdf}: no group state {state!r}; it has {names}")
        chosen = state
    elif "standing" in names:
        chosen = "standing"
    else:
        actuated = set(movable_joint_names(model))
        # a state that sets every joint (a floating base's also by its root joint; without one the feet are put
        # on the ground afterwards as for any posture)
        fits = [n for n, joints in states if actuated <= joints or (floating and "root_joint" in joints)]
        if not fits and not floating:  # an arm's state that leaves out a few joints (a gripper's, a mimic finger)
            covered = sorted(((len(actuated & joints), n) for n, joints in states if actuated & joints), reverse=True)
            if covered and covered[0][0] >= 0.5 * len(actuated):
                fits = [covered[0][1]]
        if not fits:
            return None, "", []
        chosen = fits[0]
    try:
        pin.loadReferenceConfigurations(model, str(srdf), False)
    except (RuntimeError, ValueError) as e:
        raise ConfigError(f"{srdf}: Pinocchio could not read its group states: {e}") from None
    q = np.array(model.referenceConfigurations[chosen], dtype=float)
    unset = sorted(set(movable_joint_names(model)) - dict(states)[chosen]) if not floating else []
    if unset:  # Pinocchio left them at their neutral value: moved inside their limits as in the neutral posture
        q = _neutral_inside_limits(model, q, [model.getJointId(n) for n in unset])
    return q, chosen, unset


# ---------------------------------------------------------------------------------------------------- posture
def _finite_limits(model: pin.Model, joint: int) -> tuple[float, float]:
    j = model.joints[joint]
    lo, hi = float(model.lowerPositionLimit[j.idx_q]), float(model.upperPositionLimit[j.idx_q])
    return (lo if lo > -1e10 else -math.inf), (hi if hi < 1e10 else math.inf)


def _lighter_posture(model: pin.Model, q: np.ndarray, efforts: dict[str, float], ends: list[int]) -> np.ndarray:
    """A fixed base's posture near ``q`` whose gravity torque is within :data:`HOLD_FRACTION` of each joint's
    limit where it can be (``efforts``: N·m by joint name), its joints kept inside their limits as
    :func:`_neutral_inside_limits` keeps them, and the joint origins and the limbs' end frames ``ends`` kept
    :data:`GROUND_CLEARANCE` above the ground z = 0 (or no lower than in ``q``): least squares on the torque
    excess over that fraction and the shortfall in height (per 0.1 m), plus 10⁻⁶ · ‖q − q₀‖² to stay near ``q``,
    by L-BFGS-B with Pinocchio's gravity derivatives and Jacobians; from ``q``, and when that stays over the
    fraction (PR2's shoulders, held up at the end of their range) also from the middle of each joint's range."""
    from scipy.optimize import minimize

    if model.nq != model.nv:  # one coordinate per joint only
        return q
    data = model.createData()
    points = [("joint", j) for j in range(1, model.njoints)] + [("frame", f) for f in ends]

    def heights(x: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """z of each point (m) and its Jacobian (n_points, nv)."""
        pin.computeJointJacobians(model, data, x)
        pin.updateFramePlacements(model, data)
        z, J = [], []
        for kind, i in points:
            if kind == "joint":
                z.append(data.oMi[i].translation[2])
                J.append(pin.getJointJacobian(model, data, i, pin.LOCAL_WORLD_ALIGNED)[2])
            else:
                z.append(data.oMf[i].translation[2])
                J.append(pin.getFrameJacobian(model, data, i, pin.LOCAL_WORLD_ALIGNED)[2])
        return np.array(z), np.array(J)

    floor = np.minimum(heights(q)[0], GROUND_CLEARANCE)
    limit = np.full(model.nv, np.inf)
    for name, effort in efforts.items():
        limit[model.joints[model.getJointId(name)].idx_v] = effort
    bounds = [tuple(x if math.isfinite(x) else None for x in _posture_range(model, j)) for j in range(1, model.njoints)]

    def cost(x: np.ndarray) -> tuple[float, np.ndarray]:
        ratio = pin.computeGeneralizedGravity(model, data, x) / limit
        excess = np.maximum(np.abs(ratio) - 0.9 * HOLD_FRACTION, 0.0)  # aimed below: a penalty stops short of it
        dg = pin.computeGeneralizedGravityDerivatives(model, data, x)
        z, Jz = heights(x)
        short = np.maximum(floor - z, 0.0) / 0.1
        grad = (2.0 * excess * np.sign(ratio) / limit) @ dg - (2.0 * short / 0.1) @ Jz + 2e-6 * (x - q)
        return float(excess @ excess + short @ short + 1e-6 * (x - q) @ (x - q)), grad

    def solve(start: np.ndarray) -> tuple[float, np.ndarray]:
        found = minimize(
            cost, start, jac=True, method="L-BFGS-B", bounds=bounds, options={"ftol": 1e-14, "gtol": 1e-12}
        )
        return float(found.fun), found.x

    best = solve(q)
    if best[0] > 1e-6:  # still over the fraction: gravity's torque has a hump between q and the light postures
        middle = np.array(
            [0.5 * (lo + hi) if lo is not None and hi is not None else x for (lo, hi), x in zip(bounds, q, strict=True)]
        )
        best = min(best, solve(middle), key=lambda found: found[0])
    return best[1]


def _neutral_inside_limits(model: pin.Model, q: np.ndarray, joints: list[int] | None = None) -> np.ndarray:
    """``q`` with each one-coordinate joint of ``joints`` (default: all) kept at least
    min(:data:`POSTURE_LIMIT_MARGIN`, a quarter of its range) inside its limits: a posture the joint references
    can move about without meeting a limit or the limit guard."""
    q = q.copy()
    for j in range(1, model.njoints) if joints is None else joints:
        if model.joints[j].nq != 1:
            continue
        low, high = _posture_range(model, j)
        if high < low:  # limits with lower > upper (the preflight's error)
            continue
        k = model.joints[j].idx_q
        q[k] = min(max(q[k], low), high)
    return q


def _posture_range(model: pin.Model, joint: int) -> tuple[float, float]:
    """Where a fixed base's posture keeps a one-coordinate joint: min(:data:`POSTURE_LIMIT_MARGIN`, a quarter of
    its range) inside each finite limit (rad or m; ±inf where there is none)."""
    lo, hi = _finite_limits(model, joint)
    margin = min(POSTURE_LIMIT_MARGIN, 0.25 * (hi - lo)) if math.isfinite(hi - lo) else POSTURE_LIMIT_MARGIN
    return lo + margin, hi - margin


def _into_limits(model: pin.Model, q: np.ndarray, notes: list[str]) -> np.ndarray:
    """``q`` with each revolute joint outside its limits turned by whole turns into them when that fits (the same
    pose), else clipped to them; each change is noted."""
    q = q.copy()
    for j in range(1, model.njoints):
        if model.joints[j].nq != 1 or model.joints[j].shortname() == "JointModelFreeFlyer":
            continue
        lo, hi = _finite_limits(model, j)
        k = model.joints[j].idx_q
        x = float(q[k])
        if lo <= x <= hi:
            continue
        name = str(model.names[j])
        turned = (
            x + 2.0 * math.pi * math.ceil((lo - x) / (2.0 * math.pi))
            if x < lo
            else x - 2.0 * math.pi * math.ceil((x - hi) / (2.0 * math.pi))
        )
        if model.joints[j].shortname().startswith("JointModelR") and lo <= turned <= hi:
            q[k] = turned
            notes.append(
                f"standing posture: {name} = {x:g} is outside its limits [{lo:g}, {hi:g}]; the same angle "
                f"{turned:.6g} is inside"
            )
        else:
            q[k] = min(max(x, lo), hi)
            notes.append(f"standing posture: {name} = {x:g} is outside its limits [{lo:g}, {hi:g}]; clipped")
    return q


def _limit_margin(model: pin.Model, q: np.ndarray, joints: list[int]) -> float:
    """Smallest distance of these joints to their position limits, rad (inf without limits)."""
    margin = math.inf
    for j in joints:
        lo, hi = _finite_limits(model, j)
        x = q[model.joints[j].idx_q]
        margin = min(margin, x - lo, hi - x)
    return margin


def _leg_ik(
    model: pin.Model,
    data: pin.Data,
    q: np.ndarray,
    joints: list[int],
    frame: int,
    offset: np.ndarray,
    target: np.ndarray,
    rotation: np.ndarray | None,
    iterations: int = 100,
) -> tuple[np.ndarray, float]:
    """Damped Newton on the leg's joints: the point ``offset`` of ``frame`` to ``target`` (world), and, given
    ``rotation``, the frame's orientation to it. Returns (q, residual norm)."""
    q = q.copy()
    idx_q = [model.joints[j].idx_q for j in joints]
    idx_v = [model.joints[j].idx_v for j in joints]
    residual = math.inf
    for _ in range(iterations):
        pin.forwardKinematics(model, data, q)
        pin.updateFramePlacement(model, data, frame)
        oMf = data.oMf[frame]
        point = oMf.act(offset)
        err = target - point
        J6 = pin.computeFrameJacobian(model, data, q, frame, pin.LOCAL_WORLD_ALIGNED)[:, idx_v]
        J = J6[:3] - pin.skew(point - oMf.translation) @ J6[3:]
        if rotation is not None:
            err = np.concatenate([err, pin.log3(rotation @ oMf.rotation.T)])
            J = np.vstack([J, J6[3:]])
        residual = float(np.linalg.norm(err))
        if residual < 1e-9:
            break
        dq = J.T @ np.linalg.solve(J @ J.T + 1e-8 * np.eye(len(err)), err)
        step = min(1.0, 0.5 / max(float(np.max(np.abs(dq))), 1e-12))
        q[idx_q] += step * dq
    return q, residual


@dataclass
class _Leg:
    limb: Limb
    frame: int
    point: np.ndarray  # contact sphere centre (the mean of a sole's corner spheres) in the end frame, m
    radius: float  # its radius: the point stands this high when the foot touches z = 0, m
    flat: bool  # a sole: keep its orientation


def _place_feet(
    model: pin.Model, q: np.ndarray, legs: list[_Leg], targets: list[np.ndarray]
) -> tuple[np.ndarray, float]:
    """Each leg's contact point to its world target (flat soles turned level by the least rotation: a frame
    whose x axis points down, iCub's right `r_foot_dh_frame`, was turned 90° by levelling its z axis).
    Returns (q, worst residual, m)."""
    data = model.createData()
    worst = 0.0
    for leg, target in zip(legs, targets, strict=True):
        rotation = None
        if leg.flat:  # the least turn that makes the sole's normal (the end frame's axis nearest z) vertical
            pin.framesForwardKinematics(model, data, q)
            current = data.oMf[leg.frame].rotation
            normal = current[:, int(np.argmax(np.abs(current[2])))]  # in world
            up = np.array([0.0, 0.0, math.copysign(1.0, normal[2])])
            rotation = pin.Quaternion.FromTwoVectors(normal, up).matrix() @ current
        q, residual = _leg_ik(model, data, q, leg.limb.joints, leg.frame, leg.point, target, rotation)
        worst = max(worst, residual)
    return q, worst


def _solve_standing(model: pin.Model, legs: list[_Leg], notes: list[str]) -> np.ndarray:
    """A standing posture without an SRDF: see the module docstring (step 3)."""
    data = model.createData()
    q0 = pin.neutral(model)
    for j in range(1, model.njoints):  # neutral, moved inside the joint limits
        if model.joints[j].nq == 1:
            lo, hi = _finite_limits(model, j)
            margin = 0.05 if hi - lo > 0.1 else 0.0
            q0[model.joints[j].idx_q] = min(max(q0[model.joints[j].idx_q], lo + margin), hi - margin)
    pin.framesForwardKinematics(model, data, q0)
    straight = [data.oMf[leg.frame].act(leg.point) for leg in legs]
    hips = [data.oMi[leg.limb.joints[0]].translation.copy() for leg in legs]
    reach = float(np.mean([h[2] - p[2] + leg.radius for h, p, leg in zip(hips, straight, legs, strict=True)]))
    height = STANDING_REACH * reach
    q0[2] = height - float(np.mean([h[2] for h in hips]))  # the hips at `height` when the feet are at z = 0
    centre = np.mean([h[:2] for h in hips], axis=0)
    targets = [np.array([p[0], p[1], leg.radius]) for p, leg in zip(straight, legs, strict=True)]
    q = q0.copy()
    for leg, target in zip(legs, targets, strict=True):  # each leg: the bend that stays farthest inside its limits
        best = None
        free = leg.limb.joints[1:4]
        for signs in itertools.product((0.0, 0.4, -0.4), repeat=len(free)):
            start = q.copy()
            for j, s in zip(free, signs, strict=True):
                start[model.joints[j].idx_q] += s
            q_leg, residual = _leg_ik(
                model, data, start, leg.limb.joints, leg.frame, leg.point, target + [0.0, 0.0, q[2] - q0[2]], None
            )
            if residual > 1e-6:
                continue
            pin.forwardKinematics(model, data, q_leg)
            knee = data.oMi[leg.limb.joints[-1]].translation
            inward = -abs(knee[0] - centre[0])  # knees toward the body centre on a tie
            score = (round(min(_limit_margin(model, q_leg, leg.limb.joints), 0.3), 3), inward)
            if best is None or score > best[0]:
                best = (score, q_leg)
        if best is None:
            raise ConfigError(
                f"leg {leg.limb.name}: no posture puts its foot {height:.3f} m below its hip; "
                "give the standing posture in an SRDF (--srdf)"
            )
        q = best[1]
    for _ in range(5):  # feet shifted together until the centre of mass is over their centroid
        com = pin.centerOfMass(model, data, q)
        shift = com[:2] - np.mean([t[:2] for t in targets], axis=0)
        targets = [t + np.array([shift[0], shift[1], 0.0]) for t in targets]
        q, residual = _place_feet(model, q, legs, targets)
        if np.linalg.norm(shift) < 1e-5:
            break
    return q


def _support_margin(points: np.ndarray, com: np.ndarray) -> float:
    """Signed distance of ``com`` (x, y) inside the convex hull of ``points`` (k, 2), m (negative: outside; at
    most 0 when the hull is a point or a segment: the distance to it)."""
    if not len(points):
        return -math.inf
    hull = _convex_hull(points)
    if _support_width(hull) < SUPPORT_MIN_WIDTH:  # a point or a line: the distance to its ends' segment
        ends = hull[[0, -1]] if len(hull) > 1 else np.vstack([hull[0], hull[0]])
        edge = ends[1] - ends[0]
        s = float(np.clip((com - ends[0]) @ edge / max(float(edge @ edge), 1e-24), 0.0, 1.0))
        return -float(np.linalg.norm(com - ends[0] - s * edge))
    margin = math.inf
    for a, b in zip(hull, np.roll(hull, -1, axis=0), strict=True):
        edge = b - a
        normal = np.array([edge[1], -edge[0]]) / max(np.linalg.norm(edge), 1e-12)  # outward for a ccw hull
        margin = min(margin, -float(normal @ (com - a)))
    return margin


def _support_width(hull: np.ndarray) -> float:
    """Width of a convex polygon (its area over its longest edge), m; 0 for a point or a segment."""
    if len(hull) < 3:
        return 0.0
    x, y = hull[:, 0], hull[:, 1]
    area = 0.5 * abs(float(x @ np.roll(y, -1) - y @ np.roll(x, -1)))
    return area / max(float(np.max(np.linalg.norm(hull - np.roll(hull, -1, axis=0), axis=1))), 1e-12)


def _convex_hull(points: np.ndarray) -> np.ndarray:
    """Counter-clockwise convex hull (Andrew's monotone chain) of (k, 2) points."""
    pts = sorted(map(tuple, np.round(points, 9)))
    if len(pts) <= 2:
        return np.array(pts)

    def half(seq):
        out: list[tuple] = []
        for p in seq:
            while (
                len(out) >= 2
                and ((out[-1][0] - out[-2][0]) * (p[1] - out[-2][1]) - (out[-1][1] - out[-2][1]) * (p[0] - out[-2][0]))
                <= 0
            ):
                out.pop()
            out.append(p)
        return out

    lower, upper = half(pts), half(reversed(pts))
    return np.array(lower[:-1] + upper[:-1])


# ---------------------------------------------------------------------------------------------------- the robot
def _limbs(model: pin.Model) -> list[Limb]:
    limbs = []
    for leaf in leaf_joints(model):
        joints = joint_chain(model, leaf)
        limbs.append(Limb("", "other", joints, end_frame(model, leaf)))
    for limb in limbs:
        shared = {j for other in limbs if other is not limb for j in other.joints}
        own = [str(model.names[j]) for j in limb.joints if j not in shared] or [str(model.names[limb.joints[-1]])]
        limb.name = limb_name(own, limb.end)
    seen: set[str] = set()
    for limb in limbs:
        if limb.name in seen:
            limb.name = limb.end
        seen.add(limb.name)
    return limbs


def _footprint_root(urdf: UrdfFile) -> bool:
    """Whether the URDF's root link is a bare frame (no mass, no geometry: ROS's ``base_footprint``, OP2's
    ``base_link``), placed wherever its author chose, often at ground level under the robot."""
    link = urdf.links.get(urdf.root)
    if link is None or link.collisions or link.visuals:
        return False
    try:
        return not link.has_inertial or float(link.mass or 0.0) == 0.0
    except ValueError:
        return False


def _lowest_disjoint(model: pin.Model, q: np.ndarray, limbs: list[Limb], footprint: bool = False) -> list[Limb]:
    """The limbs whose ends are at the bottom (within 10 % of the robot's height below its root), if at least two
    of them share no joint: the legs. With ``footprint`` (the URDF's root link is a bare frame: :func:`_footprint_root`)
    a root at the bottom itself (ROBOTIS OP2's, at ground level) is replaced by its body's centre of mass, and then
    limbs ending in a joint without a range (wheels, casters) are not legs."""
    data = model.createData()
    pin.framesForwardKinematics(model, data, q)
    z = {id(limb): float(data.oMf[frame_id(model, limb.end)].translation[2]) for limb in limbs}
    root = float(data.oMi[1].translation[2]) if model.njoints > 1 else 0.0
    if not limbs:
        return []
    low = min(z.values())
    depth = root - low
    if footprint and depth <= 0 and model.njoints > 1:  # a bare root frame at ground level: measured from the root
        # body's mass centre, among limbs whose last joint has a range (a wheel or caster: no leg)
        root = float(data.oMi[1].act(model.inertias[1].lever)[2])
        limbs = [limb for limb in limbs if math.isfinite(float(np.subtract(*_finite_limits(model, limb.joints[-1]))))]
        low = min((z[id(limb)] for limb in limbs), default=root)
        depth = root - low
    if depth <= 0:
        return []
    bottom = [limb for limb in limbs if z[id(limb)] <= low + 0.1 * depth]
    disjoint = [a for a in bottom if any(not set(a.joints) & set(b.joints) for b in bottom if b is not a)]
    return disjoint if len(disjoint) >= 2 else []


def _fingers(model: pin.Model, limbs: list[Limb]) -> list[Limb]:
    """Leaf joints that branch together off one moving body (at least two), on a fixed-base robot: fingers. A
    finger closes within its limits: a joint without finite limits (a wheel's continuous joint) is none, nor is
    one fixed to the base itself (a mobile base's wheels)."""
    by_parent: dict[int, list[Limb]] = {}
    for limb in limbs:
        joint = limb.joints[-1]
        lo, hi = _finite_limits(model, joint)
        if model.parents[joint] == 0 or not math.isfinite(hi - lo):
            continue
        by_parent.setdefault(model.parents[joint], []).append(limb)
    return [limb for group in by_parent.values() if len(group) >= 2 for limb in group]


def _fmt(x: float) -> str:
    return f"{x:.10g}" if abs(x) > 1e-9 else "0.0"


def _vec(v) -> str:
    return "[" + ", ".join(_fmt(float(x)) for x in v) + "]"


def _key(name: str) -> str:
    """A TOML key for a joint name: bare when TOML allows it, else quoted (Allegro's ``joint_0.0``)."""
    return name if re.fullmatch(r"[A-Za-z0-9_-]+", name) else json.dumps(name)


def _table(values: dict[str, float]) -> str:
    return "{ " + ", ".join(f"{_key(k)} = {_fmt(v)}" for k, v in values.items()) + " }"


def _urdf_spec(urdf: str, out: Path) -> str:
    """How the robot file names the URDF: ``share:...`` as given, else relative to the robot file's folder."""
    if urdf.startswith("share:"):
        return urdf
    return os.path.relpath(Path(urdf).resolve(), out.resolve())


def infer_base(parsed: UrdfFile, srdf: Path | None = None, state: str | None = None) -> tuple[str, str]:
    """("floating" or "fixed", why) for a URDF: fixed when its root link is ``world``; else floating when two limbs
    that share no joint end together at the bottom (legs: in the SRDF's ``state``, if given, else the neutral
    configuration); else fixed (an arm whose URDF does not weld it to the world)."""
    if parsed.root == "world":
        return "fixed", "the URDF's root link is 'world'"
    probe = build_model(parsed, floating_base=True)
    q_probe = pin.neutral(probe)
    if srdf is not None:
        q_srdf, _, _ = _srdf_posture(probe, Path(srdf), state, True)
        if q_srdf is not None:
            q_probe = q_srdf
    if _lowest_disjoint(probe, q_probe, _limbs(probe), _footprint_root(parsed)):
        return "floating", "limbs that share no joint end together at the bottom (legs)"
    return "fixed", "no two limbs that share no joint end at the bottom (no legs)"


def init_robot(
    urdf: str,
    srdf: str | None = None,
    out: str | Path | None = None,
    *,
    base: str | None = None,
    state: str | None = None,
    name: str | None = None,
    force: bool = False,
    torque_limit: float | None = None,
) -> InitResult:
    """Infer a robot file for ``urdf`` (a path or ``share:<package>/...``) and write ``out/robot.toml``.

    ``torque_limit`` (N·m, N for a prismatic joint): the limit of each actuated joint whose URDF gives none,
    written to the file's ``[limits.torque]``; without it such a joint is an error naming it.
    """
    if torque_limit is not None and not (math.isfinite(torque_limit) and torque_limit > 0.0):
        raise ConfigError(f"--torque-limit must be a finite number > 0 (N·m), got {torque_limit!r}")
    urdf_path = resolve_urdf(urdf, Path.cwd() / "robot.toml")
    parsed = read_urdf(urdf_path)
    name = name or parsed.name
    out_dir = Path(out) if out is not None else Path.cwd() / name
    target = out_dir / "robot.toml"
    if target.exists() and not force:
        raise ConfigError(f"{target} exists; remove it or pass --force to overwrite it")
    inferred: list[str] = []
    notes: list[str] = []
    srdf_path = Path(srdf) if srdf else None
    if srdf_path is not None and not srdf_path.is_file():
        srdf_path = resolve_urdf(srdf, Path.cwd() / "robot.toml", "SRDF") if srdf.startswith("share:") else srdf_path
        if not Path(srdf_path).is_file():
            raise ConfigError(f"SRDF not found: {srdf}")

    # 1. the base
    if base is not None and base not in ("floating", "fixed"):
        raise ConfigError(f"--base must be 'floating' or 'fixed', got {base!r}")
    if base is None:
        base, why = infer_base(parsed, srdf_path, state)
    else:
        why = "--base"
    floating = base == "floating"
    inferred.append(f"base: {base} ({why})")
    report, _ = preflight_urdf(urdf_path, floating)
    if report.errors:
        raise PreflightError(report)
    model = report.model
    limbs = _limbs(model)
    actuated = movable_joint_names(model)
    if not actuated:
        raise ConfigError(
            f"{urdf_path}: no movable joint (every joint is fixed): there is nothing for a joint-torque "
            "controller to drive"
        )
    inferred.append(f"actuated joints: {len(actuated)} (every movable joint): {', '.join(actuated)}")

    # 2. the standing posture and the legs
    q, source = pin.neutral(model), "the neutral configuration"
    if not floating:  # an arm holds this posture and moves about it (a legged robot's posture is solved below)
        neutral, q = q, _neutral_inside_limits(model, q)
        moved = [
            str(model.names[j])
            for j in range(1, model.njoints)
            if model.joints[j].nq == 1 and q[model.joints[j].idx_q] != neutral[model.joints[j].idx_q]
        ]
        if moved:
            source += f", with {', '.join(moved)} moved inside their limits"
    if srdf_path is not None:
        q_srdf, chosen, unset = _srdf_posture(model, Path(srdf_path), state, floating)
        if q_srdf is not None:
            q, source = _into_limits(model, q_srdf, notes), f"the SRDF's group state {chosen!r}"
            if unset:
                source += f" (it leaves {', '.join(unset)} unset: placed as in the neutral posture)"
        else:
            notes.append(
                "standing posture: the SRDF has no state 'standing' (nor one setting "
                + (
                    "the root joint or every joint); solved instead"
                    if floating
                    else "half of the joints or more); the neutral one"
                )
                + _srdf_unknown_joints(model, Path(srdf_path))
            )
    legs = (
        _lowest_disjoint(model, q if floating else pin.neutral(model), limbs, _footprint_root(parsed))
        if floating
        else []
    )
    for limb in legs:
        limb.kind = "leg"
    fingers = [] if floating else _fingers(model, limbs)
    for limb in fingers:
        limb.kind = "finger"
    for limb in limbs:
        if limb.kind == "other" and not floating:
            limb.kind = "arm"
    blockers = []
    if floating and not legs:
        blockers.append(
            "legs: none found (no two limbs end together at the bottom); the robot file has no contact "
            "spheres and the robot cannot stand (--base fixed for a robot bolted down)"
        )

    data = model.createData()
    pin.framesForwardKinematics(model, data, q)
    leg_length = 0.0
    if legs:
        drops = [
            data.oMi[limb.joints[0]].translation[2] - data.oMf[frame_id(model, limb.end)].translation[2]
            for limb in legs
        ]
        leg_length = float(np.mean(drops))
    reach = [np.linalg.norm(data.oMf[frame_id(model, limb.end)].translation) for limb in limbs]
    size = leg_length or float(max(reach, default=1.0))

    # 3. contact candidates (their lowest points depend on the posture: found again after a solve)
    collision, why_c = _geometry(model, parsed, pin.GeometryType.COLLISION)
    visual, why_v = _geometry(model, parsed, pin.GeometryType.VISUAL)
    for kind, geometry, why in (("collision", collision, why_c), ("visual", visual, why_v)):
        if geometry is not None and why:
            notes.append(f"{kind} geometry: {why}")
    if collision is None:
        notes.append(f"collision geometry could not be loaded ({why_c}); using the visual geometry")
    if collision is None and visual is None:
        notes.append(f"visual geometry could not be loaded either ({why_v})")

    def find_spheres(q_now: np.ndarray) -> list[_Leg]:
        pin.framesForwardKinematics(model, data, q_now)
        placed = []
        for limb in [*legs, *fingers]:
            down = None
            if limb.kind == "finger":  # a fingertip: the finger's farthest point from the hand
                hand = data.oMi[model.parents[limb.joints[-1]]].translation
                tip = data.oMf[frame_id(model, limb.end)].translation
                objects = [
                    o
                    for o in (collision or visual or pin.GeometryModel()).geometryObjects
                    if o.parentJoint == limb.joints[-1]
                ]
                if objects:
                    tip = np.mean([(data.oMi[limb.joints[-1]] * o.placement).translation for o in objects], axis=0)
                down = (tip - hand) / max(float(np.linalg.norm(tip - hand)), 1e-9)
            spheres, note = _end_spheres(
                model, data, [collision, visual], limb.joints[-1], limb.end, limb.name, leg_length or 0.1, down
            )
            if note and note not in notes:
                notes.append(note)
            limb.spheres = spheres
            fid = frame_id(model, limb.end)
            point = np.mean([s.offset for s in spheres], axis=0)
            # a sole is kept level where the leg can turn it (roll and pitch besides its position: five joints)
            placed.append(_Leg(limb, fid, point, spheres[0].radius, len(spheres) > 1 and len(limb.joints) >= 5))
        return placed

    placed = find_spheres(q)
    if floating and legs and source == "the neutral configuration":
        q = _solve_standing(model, placed[: len(legs)], notes)
        source = (
            f"solved: feet under the hips at {STANDING_REACH:.0%} of the straight legs' reach, the centre of "
            "mass over the feet"
        )
        placed = find_spheres(q)
    if floating and legs:  # twice: the spheres found again in the grounded posture are the ones written
        q, _ = _ground_feet(model, q, placed[: len(legs)], source, [])
        placed = find_spheres(q)
        q, source = _ground_feet(model, q, placed[: len(legs)], source, notes)
    posture_line = len(inferred)
    inferred.append(f"standing posture: {source}")

    # 4. report the limbs
    for limb in limbs:
        joints = ", ".join(str(model.names[j]) for j in limb.joints)
        inferred.append(f"limb {limb.name}: {limb.kind}, joints {joints}, end {limb.end}")
    for limb in [*legs, *fingers]:
        for s in limb.spheres:
            inferred.append(
                f"contact sphere {s.name}: frame {s.frame}, radius {s.radius:.4f} m, offset {_vec(s.offset)} ({s.how})"
            )

    # 5. torque limits
    robot_q = q
    efforts = {}
    for j_name in actuated:
        j = model.joints[model.getJointId(j_name)]
        efforts[j_name] = float(model.effortLimit[j.idx_v])
    missing = [n for n, e in efforts.items() if not e > 0]
    if missing and torque_limit is None:
        raise ConfigError(
            f"{urdf_path}: actuated joint(s) {missing} have no effort limit (<limit effort> > 0) in the "
            "URDF; add them there, pass --torque-limit N·m (written to [limits.torque] for them), or "
            "write the robot file by hand with [limits.torque]"
        )
    given = {n: float(torque_limit) for n in missing}
    efforts.update(given)
    from_urdf = {n: e for n, e in efforts.items() if n not in given}
    if from_urdf:
        distinct = ", ".join(_fmt(e) for e in sorted(set(from_urdf.values())))
        inferred.append(f"torque limits: the URDF's efforts ({distinct} N·m)")
    if given:
        inferred.append(
            f"torque limits: {_fmt(float(torque_limit))} N·m from --torque-limit for "
            f"{', '.join(given)} (the URDF gives none)"
        )
    static = _gravity_torques(model, data, robot_q, actuated)
    if (
        not floating
        and source.startswith("the neutral configuration")
        and any(static[n] > HOLD_FRACTION * efforts[n] for n in actuated)
    ):
        lighter = _lighter_posture(model, robot_q, efforts, [frame_id(model, limb.end) for limb in limbs])
        lighter_static = _gravity_torques(model, data, lighter, actuated)
        if max(lighter_static[n] / efforts[n] for n in actuated) < max(static[n] / efforts[n] for n in actuated):
            moved = [
                str(model.names[j])
                for j in range(1, model.njoints)
                if model.joints[j].nq == 1
                and abs(lighter[model.joints[j].idx_q] - robot_q[model.joints[j].idx_q]) > 0.01
            ]
            source += (
                f"; then {', '.join(moved)} turned to hold gravity within {HOLD_FRACTION:.0%} of their torque "
                "limits (neutral needs more)"
            )
            robot_q, static = lighter, lighter_static
            placed = find_spheres(robot_q)
            inferred[posture_line] = f"standing posture: {source}"
    if floating and legs:
        static = _standing_torques(model, robot_q, placed[: len(legs)], actuated)
    # a legged robot's standing load, an arm's load held out (an upright arm's posture needs almost nothing)
    load = static if floating and legs else _outstretched_torques(model, robot_q, actuated)
    worst = max(load.values(), default=0.0)
    what = "standing needs" if floating and legs else "holding its links out against gravity could need"
    if worst > 0 and from_urdf and min(from_urdf.values()) > 100.0 * worst:
        notes.append(
            f"torque limits: the URDF's efforts ({_fmt(min(from_urdf.values()))} N·m and more) exceed 100 "
            f"times what {what} (at most {worst:.3g} N·m): they may be placeholders; set the "
            "actuators' real limits in [limits.torque]"
        )
    blockers += _cannot_hold(model, robot_q, placed[: len(legs)], static, efforts)

    # 6. gains
    height = float(robot_q[2]) if floating and legs else size
    scale = math.sqrt(REFERENCE_HEIGHT / max(height, 1e-3))
    kp, kd = REFERENCE_KP * scale * scale, REFERENCE_KD * scale
    inferred.append(
        f"gains: kp {kp:.0f} 1/s², kd {kd:.1f} 1/s (the shipped quadruped's trot gains, time scaled "
        f"by sqrt({height:.3f} m / {REFERENCE_HEIGHT} m))"
    )
    M = pin.crba(model, data, robot_q)
    omega = math.sqrt(kp)
    pid_kp, pid_kd = {}, {}
    for j_name in actuated:
        v = model.joints[model.getJointId(j_name)].idx_v
        inertia = float(M[v, v])
        pid_kp[j_name] = round(inertia * omega * omega, 4)
        pid_kd[j_name] = round(2.0 * inertia * omega, 4)

    command = f"idcontrol robot init {urdf}" + (f" --srdf {srdf}" if srdf else "")
    command += (f" --state {state}" if state else "") + (f" --name {name}" if name != parsed.name else "")
    command += f" --torque-limit {_fmt(float(torque_limit))}" if given else ""
    robot_file = RobotFile(
        name=name,
        urdf=_urdf_spec(urdf, out_dir),
        base=base,
        actuated=actuated,
        limbs=limbs,
        legs=legs,
        fingers=fingers,
        q=robot_q,
        model=model,
        kp=kp,
        kd=kd,
        pid_kp=pid_kp,
        pid_kd=pid_kd,
        report=report,
        source=source,
        command=command,
        efforts=efforts,
        given=given,
    )
    text = robot_file.text()
    out_dir.mkdir(parents=True, exist_ok=True)
    target.write_text(text)
    return InitResult(target, text, inferred, notes, report, blockers)


def _cannot_hold(
    model: pin.Model, q: np.ndarray, legs: list[_Leg], torque: dict[str, float], efforts: dict[str, float]
) -> list[str]:
    """Why posture ``q`` cannot be held as written: a joint outside its limits (the limit guard stops a run at its
    first tick), the centre of mass outside the feet's support polygon, a joint that needs more than its torque
    limit (``torque``: |τ| holding ``q``, N·m)."""
    out = []
    outside = []
    for j in range(1, model.njoints):
        if model.joints[j].nq == 1:
            lo, hi = _finite_limits(model, j)
            x = float(q[model.joints[j].idx_q])
            if not lo - 1e-9 <= x <= hi + 1e-9:
                outside.append(f"{model.names[j]} {x:.4g} not in [{lo:.4g}, {hi:.4g}]")
    if outside:
        out.append(
            "standing posture: outside the joint limits (the limit guard would stop a run at its first "
            "tick): " + ", ".join(outside)
        )
    if legs:
        data = model.createData()
        pin.framesForwardKinematics(model, data, q)
        com = pin.centerOfMass(model, data, q)
        feet = np.array([data.oMf[leg.frame].act(s.offset)[:2] for leg in legs for s in leg.limb.spheres])
        margin = _support_margin(feet, com[:2])
        width = _support_width(_convex_hull(feet))
        if width < SUPPORT_MIN_WIDTH:
            out.append(
                f"standing posture: the feet's support is a point or a line ({width * 1e3:.1f} mm wide; point "
                "feet side by side): no posture stands still on it without a balance controller"
            )
        elif margin < 0:
            out.append(
                f"standing posture: the centre of mass is {-margin * 1e3:.1f} mm outside the feet's support "
                "polygon (it falls)"
            )
    over = [f"{n} {torque[n]:.3g} > {efforts[n]:.3g} N·m" for n in efforts if torque[n] > efforts[n]]
    if over:
        out.append("torque limits: holding the standing posture needs more than the limit: " + ", ".join(over))
    return out


def _ground_feet(
    model: pin.Model, q: np.ndarray, legs: list[_Leg], source: str, notes: list[str]
) -> tuple[np.ndarray, str]:
    """Move the base so the lowest foot touches z = 0; feet left above the ground are put on it by IK."""
    data = model.createData()
    pin.framesForwardKinematics(model, data, q)
    heights = [min(float(data.oMf[leg.frame].act(s.offset)[2]) - s.radius for s in leg.limb.spheres) for leg in legs]
    q = q.copy()
    q[2] -= min(heights)
    gaps = [h - min(heights) for h in heights]
    if max(gaps) > 1e-7:
        pin.framesForwardKinematics(model, data, q)
        targets = []
        for leg in legs:
            p = data.oMf[leg.frame].act(leg.point)
            targets.append(np.array([p[0], p[1], leg.radius]))
        q, residual = _place_feet(model, q, legs, targets)
        pin.framesForwardKinematics(model, data, q)
        left = max(
            min(float(data.oMf[leg.frame].act(s.offset)[2]) - s.radius for s in leg.limb.spheres) for leg in legs
        )
        if max(gaps) > 1e-4 or left > 1e-4:
            notes.append(
                f"standing posture: feet up to {1e3 * max(gaps):.1f} mm above the ground; put on it by "
                f"inverse kinematics, {1e3 * left:.1f} mm left (residual {residual:.1e} m)"
            )
        if left > 1e-4:
            source += f"; a foot {1e3 * left:.1f} mm above the ground"
    pin.framesForwardKinematics(model, data, q)
    com = pin.centerOfMass(model, data, q)
    feet = np.array([data.oMf[leg.frame].act(s.offset)[:2] for leg in legs for s in leg.limb.spheres])
    margin = _support_margin(feet, com[:2])
    where = f"{margin * 1e3:.0f} mm inside" if margin >= 0.0 else f"{-margin * 1e3:.0f} mm outside"
    return q, source + f"; base at {q[2]:.4f} m, feet on z = 0, centre of mass {where} the support"


def _gravity_torques(model: pin.Model, data: pin.Data, q: np.ndarray, actuated: list[str]) -> dict[str, float]:
    """|τ| per actuated joint holding ``q`` against gravity alone, N·m."""
    gravity = pin.computeGeneralizedGravity(model, data, q)
    return {n: abs(float(gravity[model.joints[model.getJointId(n)].idx_v])) for n in actuated}


def _outstretched_torques(model: pin.Model, q: np.ndarray, actuated: list[str]) -> dict[str, float]:
    """An upper bound of |τ| per actuated joint against gravity in any posture near ``q``: g Σ m_b |c_b − o_j| over
    the bodies b the joint carries (c_b their centres of mass, o_j its origin, at ``q``), N·m: their weight held
    at arm's length."""
    data = model.createData()
    pin.forwardKinematics(model, data, q)
    g = float(np.linalg.norm(model.gravity.linear))
    centres = [data.oMi[b].act(model.inertias[b].lever) for b in range(model.njoints)]  # world, m
    out = {}
    for name in actuated:
        j = model.getJointId(name)
        origin = data.oMi[j].translation
        out[name] = g * sum(
            model.inertias[b].mass * float(np.linalg.norm(centres[b] - origin)) for b in model.subtrees[j]
        )  # j and every joint below it
    return out


def _standing_torques(model: pin.Model, q: np.ndarray, legs: list[_Leg], actuated: list[str]) -> dict[str, float]:
    """|τ| per joint holding the posture with the weight shared by the feet (least-norm contact forces)."""
    data = model.createData()
    pin.computeJointJacobians(model, data, q)
    pin.framesForwardKinematics(model, data, q)
    g = pin.computeGeneralizedGravity(model, data, q)
    J = []
    for leg in legs:
        oMf = data.oMf[leg.frame]
        J6 = pin.getFrameJacobian(model, data, leg.frame, pin.LOCAL_WORLD_ALIGNED)
        J.append(J6[:3] - pin.skew(oMf.rotation @ leg.point) @ J6[3:])
    Jc = np.vstack(J)  # (3k, nv)
    f = np.linalg.lstsq(Jc[:, :6].T, g[:6], rcond=None)[0]
    tau = g - Jc.T @ f
    return {n: abs(float(tau[model.joints[model.getJointId(n)].idx_v])) for n in actuated}


@dataclass(frozen=True)
class RobotFile:
    """Everything ``robot init`` inferred, by name; :meth:`text` is the robot file it writes."""

    name: str
    urdf: str  # the file's ``urdf`` entry (relative to the robot file where it can be)
    base: str  # "floating" or "fixed"
    actuated: list[str]  # the actuated joints' names, in Pinocchio's order
    limbs: list[Limb]
    legs: list[Limb]  # the limbs the robot stands on, with their contact spheres
    fingers: list[Limb]  # the limbs that close a grip, with theirs
    q: np.ndarray  # (nq,) the standing configuration
    model: pin.Model
    kp: float  # q̈ gain, 1/s²
    kd: float  # q̈ gain, 1/s
    pid_kp: dict[str, float]  # the pid baseline's torque gains by joint, N·m/rad
    pid_kd: dict[str, float]  # N·m·s/rad
    report: PreflightReport
    source: str  # where the standing posture came from
    command: str  # the command that wrote the file
    efforts: dict[str, float]  # each actuated joint's effort limit, N·m (N)
    given: dict[str, float]  # those given by --torque-limit where the URDF has none

    def text(self) -> str:
        """The robot file (TOML), with a comment on where each value came from."""
        floating = self.base == "floating"
        lines = [
            f"# Written by `{self.command}`.",
            "# Every value below was inferred from the URDF"
            + (" and the SRDF" if "--srdf" in self.command else "")
            + "; edit any of them.",
            f'name = "{self.name}"',
            f'urdf = "{self.urdf}"',
            f'base = "{self.base}"',
            "",
        ]
        if self.fingers:
            lines += [
                "# Joints that close a grip (q grows as a finger closes): the grasp reference holds them.",
                "fingers = [" + ", ".join(f'"{self.model.names[f.joints[-1]]}"' for f in self.fingers) + "]",
                "",
            ]
        lines += [
            "# q̈ gains (1/s², 1/s): the shipped quadruped's trot gains, K_p = 1000, K_d = 60 at 0.163 m, with time",
            "# scaled by the square root of this robot's size (standing height, or reach without legs).",
            "[gains]",
            f"kp = {self.kp:.1f}",
            f"kd = {self.kd:.2f}",
            "ki = 0.0",
            "",
            "# Torque gains of the `pid` baseline (N·m/rad, N·m·s/rad): the same natural frequency on the mass",
            "# matrix's diagonal at the standing posture, critically damped.",
            "[pid_gains]",
            f"kp = {_table(self.pid_kp)}",
            f"kd = {_table(self.pid_kd)}",
            "ki = 0.0",
            "",
        ]
        from_urdf = [f"{k} {_fmt(v)}" for k, v in self.efforts.items() if k not in self.given]
        lines += (["# The URDF's effort limits: " + ", ".join(from_urdf)] if from_urdf else []) + ["[limits.torque]"]
        if self.given:
            lines += ["# --torque-limit, for the joints whose URDF gives none: set your actuators' real limits"]
            lines += [f'"{k}" = {_fmt(v)}' for k, v in self.given.items()]
        lines += [""]
        if self.report.repairable_links:
            lines += [
                "# Links MuJoCo rejects (`idcontrol robot check` says why): "
                + ", ".join(self.report.repairable_links)
                + ".",
                "# The simulator gives each the nearest inertia it accepts and lists the change at start; the",
                "# controller uses the merged bodies, which are physical.",
                "[sim]",
                "repair_inertia = true",
                "",
            ]
        for limb in self.limbs:
            lines += [
                "[[limbs]]",
                f'name = "{limb.name}"',
                f'kind = "{"other" if limb.kind == "finger" else limb.kind}"',
                "joints = [" + ", ".join(f'"{self.model.names[j]}"' for j in limb.joints) + "]",
                f'end = "{limb.end}"',
                "",
            ]
        for limb in [*self.legs, *self.fingers]:
            for s in limb.spheres:
                lines += [
                    f"# {s.how}",
                    "[[contact_spheres]]",
                    f'name = "{s.name}"',
                    f'frame = "{s.frame}"',
                    f"radius = {_fmt(s.radius)}",
                    f"offset = {_vec(s.offset)}",
                    "",
                ]
        joints = {n: float(self.q[self.model.joints[self.model.getJointId(n)].idx_q]) for n in self.actuated}
        lines += [f"# {self.source}.", "[standing]"]
        if floating:
            quat = self.q[3:7] / np.linalg.norm(self.q[3:7])
            lines += [f"base_position = {_vec(self.q[:3])}", f"base_orientation_xyzw = {_vec(quat)}"]
        lines += ["joints = " + _table(joints), ""]
        return "\n".join(lines)
