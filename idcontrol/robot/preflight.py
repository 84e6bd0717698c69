"""The preflight: what must hold of a URDF and its robot file before a controller may trust the model.

It runs whenever a robot loads (:class:`~idcontrol.robot.model.RobotModel`), inside ``idcontrol robot
init``, and as ``idcontrol robot check PATH``, which prints :meth:`PreflightReport.format`.

Errors (the robot does not load):

* a number of the URDF that is not finite or not a number (``<mass value>``, ``<inertia ixx ...>``, an
  origin, an axis, a limit); urdfdom would report it on stderr and go on with a default (a NaN mass is 0);
* a negative mass;
* a moving body whose inertia no rigid body has: not positive semi-definite, or principal moments that
  violate the triangle inequality (I₁ + I₂ ≥ I₃). A body is a joint's link with the links fixed to it
  (as Pinocchio and MuJoCo merge them); the error names the links;
* a mass matrix that is singular at the neutral configuration (a joint that moves no mass);
* an actuated joint without an effort limit (URDF ``<limit effort>`` > 0, or the robot file's ``[limits.torque]``);
* a joint, frame or limb named in the robot file that the model does not have;
* joint limits with lower > upper.

Warnings (reported, the robot loads): what the controller's model accepts and MuJoCo rejects unless the robot
file's ``[sim] repair_inertia`` asks for the nearest physical inertia (each change is listed when the simulator
starts). MuJoCo checks

* each link's own inertia: a link whose own inertia is not physical while its body's is (a massless placeholder
  fixed to a real link, as many published URDFs have), or has a principal moment below
  :data:`MUJOCO_MIN_MOMENT` (a rod, a point mass: physical, the limit of a thin body);
* each moving body: a body without mass or with a principal moment below :data:`MUJOCO_MIN_BODY` (a massless
  link between two joints, as URDFs build a ball joint from three hinges). The controller needs only a regular
  mass matrix, which the bodies beyond such a link give it.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import pinocchio as pin

from idcontrol.errors import ConfigError, NameNotFound
from idcontrol.robot.config import RobotConfig
from idcontrol.robot.urdf import ONE_DOF, UrdfFile, build_model, equal_limits, frame_id, parse_floats, read_urdf

#: Relative tolerance of the inertia checks (of the largest principal moment).
INERTIA_TOL = 1e-6
#: ... and absolute (kg·m²): a moment this close to zero is zero (a point mass written with rounding noise, as
#: iCub's -5.4e-20 kg·m²).
INERTIA_ABS_TOL = 1e-15
#: MuJoCo's compiler rejects a link's own inertia whose smallest principal moment is below this (kg·m², absolute).
MUJOCO_MIN_MOMENT = 1e-14
#: ... and a moving body (its links fused) whose mass (kg) or a principal moment (kg·m²) is below this (mjMINVAL).
MUJOCO_MIN_BODY = 1e-15


class PreflightError(ConfigError):
    """A robot that fails its preflight; ``report`` holds every finding."""

    def __init__(self, report: PreflightReport) -> None:
        self.report = report
        errors = report.errors
        lines = "\n".join(f"  {f.where} {f.field}: {f.message}" for f in errors)
        ConfigError.__init__(self, f"{report.source}: the robot fails its preflight ({len(errors)} error(s)):\n{lines}")


class PreflightNameError(PreflightError, NameNotFound):
    """A preflight whose errors are all names the model does not have; ``kind``, ``name`` and ``available``
    describe the first (as :class:`~idcontrol.errors.NameNotFound` does)."""

    def __init__(self, report: PreflightReport) -> None:
        first = report.errors[0]
        self.kind, self.name, self.available = first.unknown
        PreflightError.__init__(self, report)


@dataclass(frozen=True)
class Finding:
    """One thing the preflight found. ``where``: ``link 'base'``, ``joint 'FL_KFE'``, ``robot file``;
    ``field``: the URDF element or robot-file key (``inertial/mass``, ``limit/effort``, ``contact_spheres``)."""

    severity: str  # "error" or "warning"
    where: str
    field: str
    message: str
    unknown: tuple[str, str, list[str]] | None = None  # (kind, name, valid names) of an unknown name


@dataclass
class PreflightReport:
    """Everything the preflight found, and the model it built (None when the URDF could not be built)."""

    source: Path
    urdf: Path
    findings: list[Finding] = field(default_factory=list)
    model: pin.Model | None = None
    floating_base: bool = False
    actuated: tuple[str, ...] = ()
    repairable_links: tuple[str, ...] = ()  # links whose own inertia a simulator must repair
    massless_links: tuple[str, ...] = ()  # ... of them, those whose moving body has no mass at all
    base_reason: str = ""  # why the base is floating or fixed, when it was inferred (a bare URDF)

    @property
    def errors(self) -> list[Finding]:
        return [f for f in self.findings if f.severity == "error"]

    @property
    def warnings(self) -> list[Finding]:
        return [f for f in self.findings if f.severity == "warning"]

    @property
    def ok(self) -> bool:
        return not self.errors

    def error(self, where: str, field_: str, message: str, unknown: tuple[str, str, list[str]] | None = None) -> None:
        self.findings.append(Finding("error", where, field_, message, unknown))

    def warn(self, where: str, field_: str, message: str) -> None:
        self.findings.append(Finding("warning", where, field_, message))

    def raise_for_errors(self) -> None:
        """Raise :class:`PreflightError` listing every error, if there is one."""
        if self.errors:
            raise PreflightNameError(self) if all(f.unknown for f in self.errors) else PreflightError(self)

    def format(self) -> str:
        """The report ``idcontrol robot check`` prints."""
        lines = [f"robot check: {self.source}"]
        if self.source != self.urdf:
            lines.append(f"  URDF: {self.urdf}")
        if self.model is not None:
            m = self.model
            mass = sum(i.mass for i in m.inertias)
            base = "floating" if self.floating_base else "fixed"
            lines.append(
                f"  model: {base} base, {m.nv} velocities, {len(self.actuated)} actuated joints, "
                f"{m.nbodies - 1} bodies, mass {mass:.3f} kg"
            )
            if self.base_reason:
                lines.append(f"  base: {base} ({self.base_reason})")
            if self.actuated:
                lines.append(f"  actuated joints (the order of tau, welcome.joint_names): {', '.join(self.actuated)}")
        for title, items in (("errors", self.errors), ("warnings", self.warnings)):
            lines.append(f"  {title}: {len(items)}")
            lines.extend(f"    {f.where} {f.field}: {f.message}" for f in items)
        lines.append("  result: " + ("ok" if self.ok else "FAILED"))
        return "\n".join(lines)


# ---------------------------------------------------------------------------------------------------- the URDF text
def _number(
    report: PreflightReport, where: str, field_: str, text: str | None, n: int, required: bool
) -> np.ndarray | None:
    """``n`` finite numbers, or an error naming the field (None)."""
    if text is None:
        if required:
            report.error(where, field_, "is missing")
        return None
    values = parse_floats(text, n)
    if values is None:
        report.error(where, field_, f"must be {n} number(s), got {text!r}")
        return None
    if not np.all(np.isfinite(values)):
        report.error(where, field_, f"is not finite: {text!r}")
        return None
    return values


def _inertia_matrix(values: dict[str, float]) -> np.ndarray:
    return np.array(
        [
            [values["ixx"], values["ixy"], values["ixz"]],
            [values["ixy"], values["iyy"], values["iyz"]],
            [values["ixz"], values["iyz"], values["izz"]],
        ]
    )


def inertia_defect(inertia: np.ndarray) -> str:
    """Why a (3, 3) rotational inertia (kg·m², about the centre of mass) is not a rigid body's, or ''."""
    moments = np.linalg.eigvalsh(0.5 * (inertia + inertia.T))
    scale = max(float(np.max(np.abs(moments))), 1e-300)
    tol = max(INERTIA_TOL * scale, INERTIA_ABS_TOL)
    if moments[0] < -tol:
        return f"not positive semi-definite: {_principal(moments)}"
    if moments[0] + moments[1] < moments[2] - tol:
        return f"{_principal(moments)} violate the triangle inequality I1 + I2 >= I3"
    return ""


def _principal(moments: np.ndarray) -> str:
    return "principal moments (" + ", ".join(f"{x:.6g}" for x in moments) + ") kg·m²"


def _check_links(report: PreflightReport, urdf: UrdfFile) -> dict[str, str]:
    """Raw link inertials: finite numbers, mass >= 0; returns each link's own inertia defect ('' if none)."""
    defects: dict[str, str] = {}
    for link in urdf.links.values():
        if not link.has_inertial:
            continue
        where = f"link {link.name!r}"
        mass = _number(report, where, "inertial/mass", link.mass, 1, required=True)
        if mass is not None and mass[0] < 0:
            report.error(where, "inertial/mass", f"is negative: {mass[0]} kg")
        for key in ("xyz", "rpy"):
            _number(report, where, f"inertial/origin/{key}", link.inertial_origin[key], 3, required=False)
        values = {}
        for key, text in link.inertia.items():
            x = _number(report, where, f"inertial/inertia/{key}", text, 1, required=True)
            if x is not None:
                values[key] = float(x[0])
        if len(values) == 6:
            inertia = _inertia_matrix(values)
            defects[link.name] = inertia_defect(inertia) or _mujoco_link_defect(inertia)
    return defects


def _mujoco_link_defect(inertia: np.ndarray) -> str:
    """Why MuJoCo rejects a link's own physical (3, 3) inertia (kg·m²), or '': a principal moment below
    :data:`MUJOCO_MIN_MOMENT` when the inertia is not all zero (an all-zero one MuJoCo takes as absent)."""
    if not np.any(inertia):
        return ""
    moments = np.linalg.eigvalsh(inertia)
    if moments[0] >= MUJOCO_MIN_MOMENT:
        return ""
    return f"{_principal(moments)}: one below {MUJOCO_MIN_MOMENT:g} (a rod or a point mass)"


def _check_joints(report: PreflightReport, urdf: UrdfFile) -> None:
    """Joint origins, axes and limits: finite numbers, a non-zero axis, lower <= upper."""
    for joint in urdf.joints.values():
        where = f"joint {joint.name!r}"
        for key in ("xyz", "rpy"):
            _number(report, where, f"origin/{key}", joint.origin[key], 3, required=False)
        if joint.type in ONE_DOF or joint.type == "planar":
            axis = _number(report, where, "axis/xyz", joint.axis, 3, required=False)
            if axis is not None and not np.linalg.norm(axis) > 0:
                report.error(where, "axis/xyz", "is the zero vector")
        if joint.mimic is not None and joint.type in ONE_DOF:
            report.warn(
                where,
                "mimic",
                f"mimics joint {joint.mimic!r} in the URDF; the controller (and its MuJoCo "
                "simulator) move it as an independent joint: actuate both, or leave it out of "
                "actuated_joints only if something else drives it",
            )
        limit = joint.limit
        if limit is None:
            continue
        bounds = {}
        for key in ("lower", "upper", "effort", "velocity"):
            x = _number(report, where, f"limit/{key}", limit[key], 1, required=False)
            if x is not None:
                bounds[key] = float(x[0])
        if joint.type != "continuous" and "lower" in bounds and "upper" in bounds and bounds["lower"] > bounds["upper"]:
            report.error(where, "limit", f"lower {bounds['lower']} > upper {bounds['upper']}")
        if equal_limits(joint):
            report.warn(
                where,
                "limit",
                f"lower and upper are equal ({bounds.get('lower', 0.0):g}; an absent one is "
                "0): read as no position limits, as MuJoCo reads them; give the joint's range if it has one",
            )
        for key in ("effort", "velocity"):
            if bounds.get(key, 0.0) < 0:
                report.error(where, f"limit/{key}", f"is negative: {bounds[key]}")


# ---------------------------------------------------------------------------------------------------- the model
def _bodies(model: pin.Model, urdf: UrdfFile) -> dict[int, list[str]]:
    """joint id -> the URDF links of its body (the joint's child link and the links fixed to it)."""
    out: dict[int, list[str]] = {j: [] for j in range(model.njoints)}
    for frame in model.frames:
        if frame.type == pin.FrameType.BODY and frame.name in urdf.links:
            out[frame.parentJoint].append(frame.name)
    return out


def _check_bodies(report: PreflightReport, model: pin.Model, urdf: UrdfFile, link_defects: dict[str, str]) -> None:
    """Each moving body's merged inertia is physical; a link whose own is not is a warning (a placeholder)."""
    bodies = _bodies(model, urdf)
    bad_bodies: set[int] = set()
    for j in range(1, model.njoints):
        inertia = model.inertias[j]
        links = bodies[j] or [str(model.names[j])]
        defect = inertia_defect(np.asarray(inertia.inertia)) if inertia.mass > 0 else ""
        if defect:
            bad_bodies.add(j)
            names = ", ".join(repr(n) for n in links)
            report.error(
                f"link {links[0]!r}",
                "inertial/inertia",
                f"the body moved by joint {model.names[j]!r} (links {names}): {defect}; no rigid body has "
                "these moments: correct the <inertia> of these links in the URDF (a CAD export's, or a "
                "solid's of the link's mass and size)",
            )
    repairable, massless = [], []
    for j, links in bodies.items():
        for link in links:
            defect = link_defects.get(link, "")
            if defect and j not in bad_bodies:
                repairable.append(link)
                report.warn(
                    f"link {link!r}",
                    "inertial/inertia",
                    f"{defect}; part of the body of joint {model.names[j]!r}, whose merged inertia is "
                    "physical (the controller uses it); MuJoCo rejects the link unless the robot file's "
                    "[sim] repair_inertia = true",
                )
    for j in range(1, model.njoints):
        inertia = model.inertias[j]
        moments = np.linalg.eigvalsh(np.asarray(inertia.inertia))
        if j in bad_bodies or (inertia.mass >= MUJOCO_MIN_BODY and moments[0] >= MUJOCO_MIN_BODY):
            continue
        link = _child_link(model, urdf, j, bodies[j])
        if link is None or link in repairable:
            continue
        repairable.append(link)
        if inertia.mass < MUJOCO_MIN_BODY:
            massless.append(link)
        what = "no mass" if inertia.mass < MUJOCO_MIN_BODY else (f"{_principal(moments)} (a point mass or a rod)")
        report.warn(
            f"link {link!r}",
            "inertial",
            f"the body moved by joint {model.names[j]!r} has {what}; the controller's mass matrix is regular "
            "without it (the bodies beyond carry it), MuJoCo rejects such a moving body unless the robot "
            "file's [sim] repair_inertia = true",
        )
    report.repairable_links, report.massless_links = tuple(repairable), tuple(massless)
    data = model.createData()
    M = pin.crba(model, data, pin.neutral(model))
    M = np.triu(M) + np.triu(M, 1).T
    try:
        np.linalg.cholesky(M)
    except np.linalg.LinAlgError:
        light = [
            str(model.names[j])
            for j in range(1, model.njoints)
            if sum(model.inertias[k].mass for k in _subtree(model, j)) <= 0.0
        ]
        report.error(
            "model",
            "mass matrix",
            "is singular at the neutral configuration" + (f": joints {light} move no mass" if light else ""),
        )


def _child_link(model: pin.Model, urdf: UrdfFile, joint: int, links: list[str]) -> str | None:
    """The URDF link a joint moves (the root link for a floating base's root joint): MuJoCo's body."""
    name = str(model.names[joint])
    if name in urdf.joints:
        return urdf.joints[name].child
    return links[0] if links else None


def _subtree(model: pin.Model, joint: int) -> list[int]:
    return [k for k in range(joint, model.njoints) if joint in _ancestors(model, k)]


def _ancestors(model: pin.Model, joint: int) -> list[int]:
    out = [joint]
    while joint > 0:
        joint = model.parents[joint]
        out.append(joint)
    return out


def movable_joint_names(model: pin.Model) -> list[str]:
    """The model's one-DoF joints (every joint but the universe and a free-flyer root)."""
    return [
        str(model.names[j])
        for j in range(1, model.njoints)
        if model.joints[j].nv > 0 and model.joints[j].shortname() != "JointModelFreeFlyer"
    ]


def _check_efforts(report: PreflightReport, model: pin.Model, actuated: list[str], overrides: dict[str, float]) -> None:
    default = overrides.get("default")
    for name in actuated:
        if not model.existJointName(name):
            continue
        j = model.joints[model.getJointId(name)]
        effort = float(model.effortLimit[j.idx_v]) if j.nv == 1 else 0.0
        limit = overrides.get(name, default if default is not None else effort)
        if not (limit > 0 and math.isfinite(limit)):
            report.error(
                f"joint {name!r}",
                "limit/effort",
                f"actuated joint without a torque limit (URDF effort {effort:g}); give it in the URDF or "
                "in the robot file's [limits.torque]",
            )


def _name_check(report: PreflightReport, field_: str, names: list[str], valid: list[str], kind: str) -> None:
    for name in names:
        if name not in valid:
            shown = ", ".join(valid[:30]) + (" ..." if len(valid) > 30 else "")
            report.error("robot file", field_, f"unknown {kind} {name!r}; the model has: {shown}", (kind, name, valid))


def _check_names(report: PreflightReport, model: pin.Model, config: RobotConfig) -> None:
    movable = movable_joint_names(model)
    actuated = list(config.actuated_joints) if config.actuated_joints is not None else movable
    frames = [str(f.name) for f in model.frames]
    _name_check(report, "actuated_joints", actuated, movable, "joint")
    _name_check(report, "contact_spheres.frame", [s.frame for s in config.contact_spheres], frames, "frame")
    _name_check(report, "standing.joints", list(config.standing_joints), movable, "joint")
    _name_check(report, "fingers", list(config.fingers), actuated, "actuated joint")
    for key, table in (("gains", config.gains_raw), ("pid_gains", config.pid_gains_raw or {})):
        for gain, value in table.items():
            if isinstance(value, dict):
                _name_check(report, f"{key}.{gain}", [n for n in value if n != "default"], actuated, "actuated joint")
    _name_check(
        report,
        "limits.torque",
        [n for n in config.torque_limit_overrides if n != "default"],
        actuated,
        "actuated joint",
    )
    imu = config.sensors.imu_frame
    if imu is not None:
        _name_check(report, "sensors.imu_frame", [imu], frames, "frame")
        if imu in frames and config.floating_base:
            fid = frame_id(model, imu)
            if model.frames[fid].parentJoint != 1:
                moved_by = str(model.names[model.frames[fid].parentJoint])
                report.error(
                    "robot file",
                    "sensors.imu_frame",
                    f"frame {imu!r} is moved by joint {moved_by!r}; an IMU frame must be fixed to the floating base",
                )
    for limb in config.limbs or ():
        _name_check(report, f"limbs.{limb.name}.joints", list(limb.joints), actuated, "actuated joint")
        _name_check(report, f"limbs.{limb.name}.end", [limb.end], frames, "frame")
    _check_efforts(report, model, [a for a in actuated if a in movable], config.torque_limit_overrides)


# ---------------------------------------------------------------------------------------------------- entry points
def preflight_urdf(
    urdf_path: str | Path, floating_base: bool, source: Path | None = None
) -> tuple[PreflightReport, UrdfFile]:
    """Check a URDF's text and, when it holds no error, build its model and check its bodies."""
    urdf = read_urdf(urdf_path)
    report = PreflightReport(source=Path(source or urdf_path), urdf=Path(urdf_path), floating_base=floating_base)
    if not urdf.links:
        report.error("URDF", "link", "has no <link>")
        return report, urdf
    defects = _check_links(report, urdf)
    _check_joints(report, urdf)
    if report.errors:
        return report, urdf  # urdfdom would substitute defaults for what is wrong: build nothing from it
    report.model = build_model(urdf, floating_base)
    _check_bodies(report, report.model, urdf, defects)
    return report, urdf


def preflight(config: RobotConfig) -> PreflightReport:
    """The preflight of a robot file and its URDF; ``report.model`` is the Pinocchio model when it could be built."""
    report, _ = preflight_urdf(config.urdf_path, config.floating_base, source=config.path)
    if report.model is not None:
        _check_names(report, report.model, config)
        movable = movable_joint_names(report.model)
        report.actuated = tuple(config.actuated_joints) if config.actuated_joints is not None else tuple(movable)
    return report


def check_path(path: str | Path, infer_base: Callable[[UrdfFile], tuple[str, str]] | None = None) -> PreflightReport:
    """``idcontrol robot check PATH``: a robot file (a ``robot.toml``, its folder or a shipped name) or a bare URDF:
    every movable joint taken as actuated, the base ``infer_base(urdf)`` ("floating" or "fixed", why; by default
    floating when the URDF's root link is not ``world``)."""
    from idcontrol.robot.config import load_robot_config

    p = Path(path)
    if p.suffix.lower() == ".urdf" or str(path).startswith("share:"):
        if str(path).startswith("share:"):
            from idcontrol.robot.config import resolve_urdf

            p = resolve_urdf(str(path), Path.cwd() / "robot.toml")
        urdf = read_urdf(p)
        if infer_base is not None:
            base, why = infer_base(urdf)
        else:
            base, why = ("fixed", "root 'world'") if urdf.root == "world" else ("floating", "root not 'world'")
        report, _ = preflight_urdf(p, base == "floating")
        report.base_reason = why
        if report.model is not None:
            report.actuated = tuple(movable_joint_names(report.model))
            _check_efforts(report, report.model, list(report.actuated), {})
        return report
    return preflight(load_robot_config(path))
