"""Robot configuration: a URDF plus the controller's ``robot.toml`` beside it.

The TOML file names the base type, the actuated joints, the contact spheres,
gains, torque-limit overrides, a nominal standing (or grasp) posture and any
movable objects the robot manipulates. It is validated once, here; the hot
path never re-checks it.
"""

from __future__ import annotations

import os
import site
import sys
import tomllib
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
from numpy.typing import NDArray

from idcontrol.errors import ConfigError, RobotFileNotFound, UnknownRobot

Array = NDArray[np.float64]

#: Where the robots shipped with idcontrol live (``<repo>/robots``); extra
#: search folders may be given in ``IDCONTROL_ROBOTS_PATH`` (os.pathsep list).
SHIPPED_ROBOTS_DIR = Path(__file__).resolve().parents[2] / "robots"


@dataclass(frozen=True)
class ContactSphere:
    """A sphere rigidly fixed to a robot frame that may touch the world.

    Attributes
    ----------
    name : contact identity (stable across ticks).
    frame : URDF link or frame the sphere is fixed to.
    radius : m.
    offset_in_frame : (3,) sphere centre in ``frame``, m.
    """

    name: str
    frame: str
    radius: float
    offset_in_frame: Array


@dataclass(frozen=True)
class ObjectConfig:
    """A movable rigid body the robot touches (e.g. the grasped box)."""

    name: str
    shape: str
    size: Array  # (3,) full edge lengths, m
    density: float  # kg/m^3
    mu: float
    initial_position: Array  # (3,) box centre in world, m
    initial_orientation_xyzw: Array  # (4,)

    @property
    def mass(self) -> float:
        """kg."""
        return float(self.density * np.prod(self.size))

    @property
    def inertia_in_body(self) -> Array:
        """(3, 3) rotational inertia about the centre of mass, kg·m²."""
        a, b, c = self.size
        m = self.mass
        return np.diag([m * (b * b + c * c), m * (a * a + c * c), m * (a * a + b * b)]) / 12.0


@dataclass(frozen=True)
class LimbConfig:
    """A limb: a chain of actuated joints from the base to an end frame (a foot, a hand).

    name : the limb's name (e.g. ``LF``), used by references' options (a gait's touchdown phases).
    kind : ``"leg"`` (its end stands on the ground), ``"arm"`` or ``"other"``.
    joints : the limb's actuated joints from the base outward.
    end : the frame at its end: a foot's contact frame, a hand's flange.
    """

    name: str
    kind: str
    joints: tuple[str, ...]
    end: str


#: Kinds a limb of a robot file may have.
LIMB_KINDS = ("leg", "arm", "other")


@dataclass(frozen=True)
class SimOptions:
    """A robot file's ``[sim]`` table: how a simulator may differ from the URDF (each change is reported).

    repair_inertia : replace each link inertia that no physical body has (not positive definite, or principal
        moments violating the triangle inequality) by the nearest one that is (MuJoCo rejects them); the
        controller's model is not changed.
    """

    repair_inertia: bool = False


#: What a foot's sensor may measure (``[sensors] feet``): nothing, or the force on it.
FOOT_SENSOR_KINDS = ("none", "force")


@dataclass(frozen=True)
class SensorsConfig:
    """A robot file's ``[sensors]`` table: what the real robot measures beyond its joint encoders and IMU.

    feet : ``"force"`` when every contact sphere has a force sensor (Unitree's quadrupeds report foot forces),
        ``"none"`` (the default: Solo, ANYmal and most legged robots measure none). A simulator bridge with a
        sensor model reports contact forces only where this says the robot has them.
    imu_frame : the URDF frame the IMU measures in, fixed to the floating base (None, the default: the base
        link's frame). The base estimator reads it; the preflight checks it against the URDF.
    """

    feet: str = "none"
    imu_frame: str | None = None


@dataclass(frozen=True)
class Gains:
    """Joint-space feedback gains, one value per actuated joint (SI units)."""

    kp: Array
    kd: Array
    ki: Array


@dataclass(frozen=True)
class RobotConfig:
    """A validated ``robot.toml``; joint-indexed fields are resolved later by the model."""

    name: str
    path: Path  # the robot.toml file
    urdf_path: Path
    floating_base: bool
    actuated_joints: tuple[str, ...] | None
    gains_raw: dict[str, Any]
    pid_gains_raw: dict[str, Any] | None  # [pid_gains]: the pid baseline's torque gains, if given
    torque_limit_overrides: dict[str, float]
    contact_spheres: tuple[ContactSphere, ...]
    standing_base_position: Array | None
    standing_base_orientation_xyzw: Array | None
    standing_joints: dict[str, float]
    objects: tuple[ObjectConfig, ...] = field(default_factory=tuple)
    limbs: tuple[LimbConfig, ...] | None = None  # None: inferred from the contact spheres (robot.limbs)
    fingers: tuple[str, ...] = ()  # actuated joints that close a grip (q grows as a finger closes)
    sim: SimOptions = field(default_factory=SimOptions)
    sensors: SensorsConfig = field(default_factory=SensorsConfig)


def robot_search_dirs() -> list[Path]:
    """Folders searched for ``<name>/robot.toml``, in order."""
    extra = [Path(p) for p in os.environ.get("IDCONTROL_ROBOTS_PATH", "").split(os.pathsep) if p]
    return [*extra, SHIPPED_ROBOTS_DIR]


def available_robots() -> list[str]:
    """Names of the robots found in :func:`robot_search_dirs`."""
    names: set[str] = set()
    for d in robot_search_dirs():
        if d.is_dir():
            names.update(p.parent.name for p in d.glob("*/robot.toml"))
    return sorted(names)


def resolve_robot_file(name_or_path: str | os.PathLike[str]) -> Path:
    """Find a robot configuration from a robot name or a path to its ``robot.toml``."""
    p = Path(name_or_path)
    if p.suffix == ".toml" or os.sep in str(name_or_path) or p.exists():
        if p.is_dir():
            p = p / "robot.toml"
        if not p.is_file():
            raise RobotFileNotFound(str(p), "robot configuration")
        return p
    for d in robot_search_dirs():
        candidate = d / str(name_or_path) / "robot.toml"
        if candidate.is_file():
            return candidate
    raise UnknownRobot(str(name_or_path), available_robots())


def resolve_urdf(spec: str, config_path: Path, what: str = "URDF") -> Path:
    """The URDF named in a robot.toml (or another robot description file: ``what`` names it in the error).

    A plain path is relative to the robot.toml. ``share:<package>/<path>``
    names a file that a Python package installed under ``cmeel.prefix/share``
    (how robotpkg's robot descriptions, e.g. example-robot-data, ship on PyPI).
    """
    if spec.startswith("share:"):
        relative = spec[len("share:") :].lstrip("/")
        roots = [Path(p) for p in site.getsitepackages() + [site.getusersitepackages()] + sys.path if p]
        for root in roots:
            candidate = root / "cmeel.prefix" / "share" / relative
            if candidate.is_file():
                return candidate
        package = relative.split("/", 1)[0]
        raise RobotFileNotFound(f"{spec} (is the Python package providing {package!r} installed?)", what)
    urdf_path = (config_path.parent / spec).resolve()
    if not urdf_path.is_file():
        raise RobotFileNotFound(str(urdf_path), what)
    return urdf_path


def _vec(table: dict[str, Any], key: str, n: int, where: Path, default: Any = None) -> Array | None:
    if key not in table:
        if default is None:
            return None
        return np.asarray(default, dtype=float)
    value = np.asarray(table[key], dtype=float)
    if value.shape != (n,) or not np.all(np.isfinite(value)):
        raise ConfigError(f"{where}: {key} must be {n} finite numbers, got {table[key]!r}")
    return value


def load_robot_config(name_or_path: str | os.PathLike[str]) -> RobotConfig:
    """Read and validate a robot configuration (by shipped name or by path)."""
    path = resolve_robot_file(name_or_path)
    try:
        raw = tomllib.loads(path.read_text())
    except tomllib.TOMLDecodeError as e:
        raise ConfigError(f"{path}: invalid TOML: {e}") from e
    for key in ("name", "urdf", "base"):
        if key not in raw:
            raise ConfigError(f"{path}: missing required key {key!r}")
    urdf_path = resolve_urdf(str(raw["urdf"]), path)
    if raw["base"] not in ("floating", "fixed"):
        raise ConfigError(f"{path}: base must be 'floating' or 'fixed', got {raw['base']!r}")

    spheres = []
    for i, s in enumerate(raw.get("contact_spheres", [])):
        for key in ("name", "frame", "radius"):
            if key not in s:
                raise ConfigError(f"{path}: contact_spheres[{i}] is missing {key!r}")
        radius = float(s["radius"])
        if not radius > 0.0:
            raise ConfigError(f"{path}: contact sphere {s['name']!r} radius must be > 0, got {radius}")
        offset = _vec(s, "offset", 3, path, default=[0.0, 0.0, 0.0])
        spheres.append(ContactSphere(str(s["name"]), str(s["frame"]), radius, offset))
    names = [s.name for s in spheres]
    if len(set(names)) != len(names):
        raise ConfigError(f"{path}: contact sphere names must be unique, got {names}")

    objects = []
    for i, o in enumerate(raw.get("objects", [])):
        if o.get("shape", "box") != "box":
            raise ConfigError(f"{path}: objects[{i}]: only shape = 'box' is supported, got {o.get('shape')!r}")
        size = _vec(o, "size", 3, path)
        if size is None or np.any(size <= 0):
            raise ConfigError(f"{path}: objects[{i}].size must be three positive edge lengths")
        density = float(o.get("density", 1000.0))
        if density <= 0:
            raise ConfigError(f"{path}: objects[{i}].density must be > 0")
        objects.append(
            ObjectConfig(
                name=str(o.get("name", f"object{i}")),
                shape="box",
                size=size,
                density=density,
                mu=float(o.get("mu", 1.0)),
                initial_position=_vec(o, "initial_position", 3, path, default=[0.0, 0.0, 0.0]),
                initial_orientation_xyzw=_vec(o, "initial_orientation_xyzw", 4, path, default=[0, 0, 0, 1]),
            )
        )

    known = {
        "name",
        "urdf",
        "base",
        "actuated_joints",
        "gains",
        "pid_gains",
        "limits",
        "contact_spheres",
        "objects",
        "standing",
        "limbs",
        "fingers",
        "sim",
        "sensors",
    }
    unknown = sorted(set(raw) - known)
    if unknown:
        raise ConfigError(f"{path}: unknown key(s) {unknown}; known: {sorted(known)}")
    limbs = None
    if "limbs" in raw:
        limbs = tuple(_limb(entry, i, path) for i, entry in enumerate(raw["limbs"]))
        limb_names = [limb.name for limb in limbs]
        if len(set(limb_names)) != len(limb_names):
            raise ConfigError(f"{path}: limb names must be unique, got {limb_names}")
    fingers = raw.get("fingers", [])
    if not isinstance(fingers, list) or not all(isinstance(f, str) for f in fingers):
        raise ConfigError(f"{path}: fingers must be a list of joint names, got {fingers!r}")
    sim_table = raw.get("sim", {})
    sim_unknown = sorted(set(sim_table) - {"repair_inertia"}) if isinstance(sim_table, dict) else ["(not a table)"]
    if sim_unknown:
        raise ConfigError(f"{path}: [sim]: unknown key(s) {sim_unknown}; known: ['repair_inertia']")
    if not isinstance(sim_table.get("repair_inertia", False), bool):
        raise ConfigError(f"{path}: sim.repair_inertia must be true or false")
    standing = raw.get("standing", {})
    limits = raw.get("limits", {}).get("torque", {})
    actuated = raw.get("actuated_joints")
    return RobotConfig(
        name=str(raw["name"]),
        path=path,
        urdf_path=urdf_path,
        floating_base=raw["base"] == "floating",
        actuated_joints=tuple(actuated) if actuated is not None else None,
        gains_raw=dict(raw.get("gains", {})),
        pid_gains_raw=dict(raw["pid_gains"]) if "pid_gains" in raw else None,
        torque_limit_overrides={str(k): float(v) for k, v in limits.items()},
        contact_spheres=tuple(spheres),
        standing_base_position=_vec(standing, "base_position", 3, path),
        standing_base_orientation_xyzw=_vec(standing, "base_orientation_xyzw", 4, path),
        standing_joints={str(k): float(v) for k, v in standing.get("joints", {}).items()},
        objects=tuple(objects),
        limbs=limbs,
        fingers=tuple(fingers),
        sim=SimOptions(repair_inertia=sim_table.get("repair_inertia", False)),
        sensors=_sensors(raw.get("sensors", {}), path),
    )


def _sensors(table: Any, path: Path) -> SensorsConfig:
    """The ``[sensors]`` table, checked."""
    if not isinstance(table, dict):
        raise ConfigError(f"{path}: [sensors] must be a table")
    unknown = sorted(set(table) - {"feet", "imu_frame"})
    if unknown:
        raise ConfigError(f"{path}: unknown key(s) {unknown} in [sensors]; known: ['feet', 'imu_frame']")
    feet = table.get("feet", "none")
    if feet not in FOOT_SENSOR_KINDS:
        raise ConfigError(f"{path}: sensors.feet must be one of {list(FOOT_SENSOR_KINDS)}, got {feet!r}")
    imu_frame = table.get("imu_frame")
    if imu_frame is not None and (not isinstance(imu_frame, str) or not imu_frame):
        raise ConfigError(f"{path}: sensors.imu_frame must be the name of a frame of the URDF, got {imu_frame!r}")
    return SensorsConfig(feet=feet, imu_frame=imu_frame)


def _limb(entry: Any, i: int, path: Path) -> LimbConfig:
    """One ``[[limbs]]`` entry, its types checked (the names are checked against the model by the preflight)."""
    if not isinstance(entry, dict):
        raise ConfigError(f"{path}: limbs[{i}] must be a table")
    unknown = sorted(set(entry) - {"name", "kind", "joints", "end"})
    missing = sorted({"name", "joints", "end"} - set(entry))
    if unknown or missing:
        raise ConfigError(
            f"{path}: limbs[{i}]: unknown key(s) {unknown}, missing {missing}; a limb has name, kind, joints, end"
        )
    kind = entry.get("kind", "other")
    if kind not in LIMB_KINDS:
        raise ConfigError(f"{path}: limbs[{i}].kind must be one of {list(LIMB_KINDS)}, got {kind!r}")
    joints = entry["joints"]
    if not isinstance(joints, list) or not joints or not all(isinstance(j, str) for j in joints):
        raise ConfigError(f"{path}: limbs[{i}].joints must be a non-empty list of joint names")
    return LimbConfig(str(entry["name"]), kind, tuple(joints), str(entry["end"]))
