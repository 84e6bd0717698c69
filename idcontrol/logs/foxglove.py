"""What Foxglove shows of a run: the tick records turned into Foxglove messages, live and in the MCAP log alike.

:class:`FoxgloveView` takes the daemon's tick records in order (every tick: it keeps the deadline statistics of
all of them) and, decimated to :data:`LIVE_RATE_HZ` (50 Hz) of the daemon's clock, returns messages on these
topics, JSON-encoded with JSON schemas (:meth:`FoxgloveView.schemas`):

* ``/tf`` (``foxglove.FrameTransforms``): the pose of every URDF link with a visual in the frame ``world``, from
  the record's configuration q by forward kinematics, so Foxglove's 3D panel moves the robot;
* ``/idcontrol/robot`` (``foxglove.SceneUpdate``): the robot model, the URDF's visual boxes, cylinders and
  spheres attached to their links (frame-locked; sent once a second, so a viewer that joins late gets it);
* ``/idcontrol/contact_forces`` (``foxglove.SceneUpdate``, frame ``world``): the predicted contact forces as blue
  arrows at the contact points, the sensed ones (when the driver sends them) as orange arrows at the contact
  spheres, 1 cm per :data:`NEWTONS_PER_CM` N;
* ``/idcontrol/joints``: joint names, positions (rad), velocities (rad/s), torques (N·m), reference positions;
* ``/idcontrol/status``: mode, formulation, the guards' note, the solve's status, the number of contacts;
* ``/idcontrol/deadlines``: since the last message: ticks, late commands (as the driver reported them),
  on-deadline fraction, compute time mean and max (µs), the largest round trip; and the totals of the run;
* ``/robot_description``: the URDF text (once a second).

The live view (``idcontrol launch FILE --foxglove``, :mod:`idcontrol.tools.live`) and the log writer
(:mod:`idcontrol.logs.writer`) use this one class, so a recorded run and a live run look the same.
"""

from __future__ import annotations

import json
import math
import xml.etree.ElementTree as ET
from dataclasses import dataclass
from typing import Any

import numpy as np
import pinocchio as pin

from idcontrol.logs.schema import decode_tick_record
from idcontrol.robot.model import RobotModel
from idcontrol.robot.urdf import frame_id

#: Messages per second of the daemon's clock on every topic but the model's (1 Hz).
LIVE_RATE_HZ = 50.0
MODEL_PERIOD_S = 1.0
#: Arrow length: 1 cm per this many newtons.
NEWTONS_PER_CM = 5.0
WORLD = "world"

TF_TOPIC = "/tf"
ROBOT_TOPIC = "/idcontrol/robot"
FORCES_TOPIC = "/idcontrol/contact_forces"
JOINTS_TOPIC = "/idcontrol/joints"
STATUS_TOPIC = "/idcontrol/status"
DEADLINES_TOPIC = "/idcontrol/deadlines"
DESCRIPTION_TOPIC = "/robot_description"

_PREDICTED = {"r": 0.15, "g": 0.45, "b": 1.0, "a": 1.0}
_SENSED = {"r": 1.0, "g": 0.55, "b": 0.1, "a": 1.0}
_BODY = {"r": 0.75, "g": 0.75, "b": 0.78, "a": 1.0}


# ------------------------------------------------------------------------------------------------ schemas
def _object(properties: dict[str, Any], title: str | None = None) -> dict[str, Any]:
    out: dict[str, Any] = {"type": "object", "properties": properties}
    if title:
        out["title"] = title
    return out


_NUM = {"type": "number"}
_TIME = _object({"sec": {"type": "integer"}, "nsec": {"type": "integer"}})
_VEC3 = _object({"x": _NUM, "y": _NUM, "z": _NUM})
_QUAT = _object({"x": _NUM, "y": _NUM, "z": _NUM, "w": _NUM})
_COLOR = _object({"r": _NUM, "g": _NUM, "b": _NUM, "a": _NUM})
_POSE = _object({"position": _VEC3, "orientation": _QUAT})


def _array_of(item: dict[str, Any]) -> dict[str, Any]:
    return {"type": "array", "items": item}


_SHAPE = {"pose": _POSE, "size": _VEC3, "color": _COLOR}
_ARROW = _object(
    {
        "pose": _POSE,
        "shaft_length": _NUM,
        "shaft_diameter": _NUM,
        "head_length": _NUM,
        "head_diameter": _NUM,
        "color": _COLOR,
    }
)
_ENTITY = _object(
    {
        "timestamp": _TIME,
        "frame_id": {"type": "string"},
        "id": {"type": "string"},
        "lifetime": _TIME,
        "frame_locked": {"type": "boolean"},
        "arrows": _array_of(_ARROW),
        "cubes": _array_of(_object(_SHAPE)),
        "spheres": _array_of(_object(_SHAPE)),
        "cylinders": _array_of(_object({**_SHAPE, "bottom_scale": _NUM, "top_scale": _NUM})),
    }
)
_NUMBERS = _array_of(_NUM)

#: topic -> (schema name, JSON schema). The foxglove.* names are Foxglove's message types in their JSON encoding
#: (these schemas describe the fields idcontrol fills); the idcontrol.* ones are this project's.
SCHEMAS: dict[str, tuple[str, dict[str, Any]]] = {
    TF_TOPIC: (
        "foxglove.FrameTransforms",
        _object(
            {
                "transforms": _array_of(
                    _object(
                        {
                            "timestamp": _TIME,
                            "parent_frame_id": {"type": "string"},
                            "child_frame_id": {"type": "string"},
                            "translation": _VEC3,
                            "rotation": _QUAT,
                        }
                    )
                )
            },
            "foxglove.FrameTransforms",
        ),
    ),
    ROBOT_TOPIC: (
        "foxglove.SceneUpdate",
        _object({"deletions": _array_of(_object({})), "entities": _array_of(_ENTITY)}, "foxglove.SceneUpdate"),
    ),
    FORCES_TOPIC: (
        "foxglove.SceneUpdate",
        _object({"deletions": _array_of(_object({})), "entities": _array_of(_ENTITY)}, "foxglove.SceneUpdate"),
    ),
    JOINTS_TOPIC: (
        "idcontrol.Joints",
        _object(
            {
                "t": _NUM,
                "name": _array_of({"type": "string"}),
                "position": _NUMBERS,
                "velocity": _NUMBERS,
                "effort": _NUMBERS,
                "position_ref": _NUMBERS,
            },
            "idcontrol.Joints",
        ),
    ),
    STATUS_TOPIC: (
        "idcontrol.Status",
        _object(
            {
                "t": _NUM,
                "mode": {"type": "string"},
                "formulation": {"type": "string"},
                "note": {"type": "string"},
                "found": {"type": "boolean"},
                "fallback": {"type": "string"},
                "message": {"type": "string"},
                "contacts": {"type": "integer"},
            },
            "idcontrol.Status",
        ),
    ),
    DEADLINES_TOPIC: (
        "idcontrol.Deadlines",
        _object(
            {
                "t": _NUM,
                "ticks": {"type": "integer"},
                "late": {"type": "integer"},
                "on_deadline_fraction": _NUM,
                "compute_us_mean": _NUM,
                "compute_us_max": _NUM,
                "roundtrip_us_max": _NUM,
                "ticks_total": {"type": "integer"},
                "late_total": {"type": "integer"},
            },
            "idcontrol.Deadlines",
        ),
    ),
    DESCRIPTION_TOPIC: (
        "idcontrol.RobotDescription",
        _object({"data": {"type": "string"}}, "idcontrol.RobotDescription"),
    ),
}


def schema_bytes(topic: str) -> bytes:
    return json.dumps(SCHEMAS[topic][1]).encode()


# ------------------------------------------------------------------------------------------------ helpers
def _time(ns: int) -> dict[str, int]:
    return {"sec": ns // 1_000_000_000, "nsec": ns % 1_000_000_000}


def _vec(v: np.ndarray) -> dict[str, float]:
    return {"x": float(v[0]), "y": float(v[1]), "z": float(v[2])}


def _quat_xyzw(q: np.ndarray) -> dict[str, float]:
    return {"x": float(q[0]), "y": float(q[1]), "z": float(q[2]), "w": float(q[3])}


def _pose(position: np.ndarray, rotation: np.ndarray) -> dict[str, Any]:
    return {"position": _vec(position), "orientation": _quat_xyzw(pin.Quaternion(rotation).coeffs())}


def _arrow_rotation(direction: np.ndarray) -> np.ndarray:
    """A rotation taking +x (a Foxglove arrow's axis) onto the unit vector ``direction``."""
    x = np.array([1.0, 0.0, 0.0])
    return pin.Quaternion.FromTwoVectors(x, direction).matrix()


def _floats(text: str | None, n: int, default: float = 0.0) -> np.ndarray:
    if not text:
        return np.full(n, default)
    values = [float(v) for v in text.split()]
    return np.asarray(values if len(values) == n else [default] * n)


@dataclass(frozen=True)
class _Visual:
    link: str
    kind: str  # cube, cylinder, sphere
    placement: pin.SE3  # in the link frame
    size: np.ndarray  # Foxglove's size: full extents, m


def urdf_visuals(urdf_text: str) -> list[_Visual]:
    """The URDF's visual boxes, cylinders and spheres (meshes are not drawn), in their links' frames."""
    visuals = []
    for link in ET.fromstring(urdf_text).iter("link"):
        for visual in link.iter("visual"):
            origin = visual.find("origin")
            xyz = _floats(origin.get("xyz") if origin is not None else None, 3)
            rpy = _floats(origin.get("rpy") if origin is not None else None, 3)
            placement = pin.SE3(pin.rpy.rpyToMatrix(*rpy), xyz)
            geometry = visual.find("geometry")
            if geometry is None:
                continue
            if (box := geometry.find("box")) is not None:
                visuals.append(_Visual(link.get("name"), "cube", placement, _floats(box.get("size"), 3)))
            elif (cyl := geometry.find("cylinder")) is not None:
                r, length = float(cyl.get("radius", 0)), float(cyl.get("length", 0))
                visuals.append(_Visual(link.get("name"), "cylinder", placement, np.array([2 * r, 2 * r, length])))
            elif (sphere := geometry.find("sphere")) is not None:
                d = 2.0 * float(sphere.get("radius", 0))
                visuals.append(_Visual(link.get("name"), "sphere", placement, np.array([d, d, d])))
    return visuals


# ------------------------------------------------------------------------------------------------ the view
class FoxgloveView:
    """Tick records in, Foxglove messages out (see the module docstring).

    robot : the run's robot (its URDF and contact spheres).
    rate_hz : messages per second of the daemon's clock (``now``), every topic but the model's.
    clock_offset_s : Unix time minus the daemon's monotonic clock: message times are Unix nanoseconds.
    """

    def __init__(self, robot: RobotModel, rate_hz: float = LIVE_RATE_HZ, clock_offset_s: float = 0.0) -> None:
        if not 0.0 < rate_hz <= 1000.0:
            raise ValueError(f"rate_hz must be in (0, 1000], got {rate_hz}")
        self.robot = robot
        self.rate = rate_hz
        self.clock_offset = clock_offset_s
        self.urdf_text = robot.config.urdf_path.read_text()
        self.visuals = urdf_visuals(self.urdf_text)
        model = robot.model
        self._data = model.createData()
        sphere_links = {model.frames[int(f)].name for f in robot.sphere_frame_ids}
        self.links = sorted({v.link for v in self.visuals} | sphere_links)
        self._link_ids = [frame_id(model, name) for name in self.links]
        spheres = robot.config.contact_spheres
        self._sphere_frames = [int(f) for f in robot.sphere_frame_ids]
        self._sphere_offsets = [np.asarray(s.offset_in_frame, dtype=float) for s in spheres]
        self._sphere_radii = [float(s.radius) for s in spheres]
        self._joint_q = robot.actuated_idx_q
        self._slot = -math.inf  # the last message instant, in periods of 1/rate since the clock's zero
        self._next_model = -math.inf
        self._window = [0, 0, 0.0, 0.0, 0.0]  # ticks, late, compute sum, compute max, round trip max
        self.ticks_total = 0
        self.late_total = 0

    def schemas(self) -> dict[str, tuple[str, bytes]]:
        """topic -> (schema name, JSON schema bytes); message encoding ``json``."""
        return {topic: (name, schema_bytes(topic)) for topic, (name, _) in SCHEMAS.items()}

    def feed(self, record: dict[str, Any]) -> list[tuple[str, dict[str, Any], int]]:
        """One tick record, as unpacked from the wire or decoded; returns (topic, message, log time in Unix ns) for
        each message due now (none between decimation instants). Every record counts in the deadline
        statistics; only a due one is decoded (:func:`idcontrol.logs.schema.decode_tick_record`) and drawn."""
        return self._draw(decode_tick_record(record)) if self._count(record) else []

    def _count(self, record: dict[str, Any]) -> bool:
        """Count one record's scalars in the deadline statistics; whether a decimation instant is due with it."""
        w = self._window
        w[0] += 1
        late = bool(record.get("last_late"))
        w[1] += late
        compute = float(record.get("compute_us") or 0.0)
        w[2] += compute
        w[3] = max(w[3], compute)
        rtt = record.get("last_rtt_us")
        if isinstance(rtt, (int, float)) and math.isfinite(rtt):
            w[4] = max(w[4], float(rtt))
        self.ticks_total += 1
        self.late_total += late
        now = float(record["now"])
        slot = math.floor(now * self.rate + 1e-6)
        if slot <= self._slot:
            return False
        self._slot = slot
        return True

    def _draw(self, record: dict[str, Any]) -> list[tuple[str, dict[str, Any], int]]:
        """The messages of a decoded record found due: (topic, message, log time in Unix ns)."""
        now = float(record["now"])
        ns = int((now + self.clock_offset) * 1e9)
        out = [
            (TF_TOPIC, self._transforms(np.asarray(record["q"], dtype=float), ns), ns),
            (FORCES_TOPIC, self._forces(record, ns), ns),
            (JOINTS_TOPIC, self._joints(record), ns),
            (STATUS_TOPIC, self._status(record), ns),
            (DEADLINES_TOPIC, self._deadlines(record), ns),
        ]
        if now >= self._next_model:
            self._next_model = now + MODEL_PERIOD_S
            out += [(ROBOT_TOPIC, self._model(ns), ns), (DESCRIPTION_TOPIC, {"data": self.urdf_text}, ns)]
        return out

    # ------------------------------------------------------------------ messages
    def _transforms(self, q: np.ndarray, ns: int) -> dict[str, Any]:
        model, data = self.robot.model, self._data
        pin.framesForwardKinematics(model, data, q)
        stamp = _time(ns)
        transforms = []
        for name, fid in zip(self.links, self._link_ids, strict=True):
            placement = data.oMf[fid]
            transforms.append(
                {
                    "timestamp": stamp,
                    "parent_frame_id": WORLD,
                    "child_frame_id": name,
                    "translation": _vec(placement.translation),
                    "rotation": _quat_xyzw(pin.Quaternion(placement.rotation).coeffs()),
                }
            )
        return {"transforms": transforms}

    def _entity(self, ns: int, frame: str, entity_id: str, **primitives: list) -> dict[str, Any]:
        entity = {
            "timestamp": _time(ns),
            "frame_id": frame,
            "id": entity_id,
            "lifetime": _time(0),
            "frame_locked": frame != WORLD,
            "metadata": [],
            "arrows": [],
            "cubes": [],
            "spheres": [],
            "cylinders": [],
            "lines": [],
            "triangles": [],
            "texts": [],
            "models": [],
        }
        entity.update(primitives)
        return entity

    def _model(self, ns: int) -> dict[str, Any]:
        by_link: dict[str, dict[str, list]] = {}
        for v in self.visuals:
            shapes = by_link.setdefault(v.link, {"cubes": [], "cylinders": [], "spheres": []})
            primitive = {
                "pose": _pose(v.placement.translation, v.placement.rotation),
                "size": _vec(v.size),
                "color": _BODY,
            }
            if v.kind == "cylinder":
                primitive.update(bottom_scale=1.0, top_scale=1.0)
            shapes[v.kind + "s"].append(primitive)
        entities = [self._entity(ns, link, f"robot/{link}", **shapes) for link, shapes in sorted(by_link.items())]
        return {"deletions": [], "entities": entities}

    def _arrow(self, point: np.ndarray, force: np.ndarray, color: dict[str, float]) -> dict[str, Any] | None:
        magnitude = float(np.linalg.norm(force))
        if not math.isfinite(magnitude) or magnitude < 1e-6:
            return None
        length = 0.01 * magnitude / NEWTONS_PER_CM
        head = min(0.02, 0.3 * length)
        return {
            "pose": _pose(point, _arrow_rotation(force / magnitude)),
            "shaft_length": max(length - head, 1e-4),
            "shaft_diameter": 0.004,
            "head_length": head,
            "head_diameter": 0.012,
            "color": color,
        }

    def _forces(self, record: dict[str, Any], ns: int) -> dict[str, Any]:
        predicted, sensed = [], []
        points = np.asarray(record.get("contact_points", np.zeros((0, 3))), dtype=float).reshape(-1, 3)
        forces = np.asarray(record.get("force_world", np.zeros((0, 3))), dtype=float).reshape(-1, 3)
        for point, force in zip(points, forces[: len(points)], strict=False):
            if (arrow := self._arrow(point, force, _PREDICTED)) is not None:
                predicted.append(arrow)
        measured = record.get("sensed_forces")
        if measured is not None:
            measured = np.asarray(measured, dtype=float).reshape(-1, 3)
            data = self._data  # placements from the _transforms call of the same tick
            for k, force in enumerate(measured[: len(self._sphere_frames)]):
                frame = data.oMf[self._sphere_frames[k]]
                centre = frame.act(self._sphere_offsets[k])
                point = centre - self._sphere_radii[k] * np.array([0.0, 0.0, 1.0])  # its lowest point
                if (arrow := self._arrow(point, force, _SENSED)) is not None:
                    sensed.append(arrow)
        return {
            "deletions": [],
            "entities": [
                self._entity(ns, WORLD, "forces/predicted", arrows=predicted),
                self._entity(ns, WORLD, "forces/sensed", arrows=sensed),
            ],
        }

    def _joints(self, record: dict[str, Any]) -> dict[str, Any]:
        r = self.robot
        q, v = np.asarray(record["q"], dtype=float), np.asarray(record["qd"], dtype=float)
        out = {
            "t": float(record["t"]),
            "name": list(r.actuated_joints),
            "position": q[self._joint_q].tolist(),
            "velocity": v[np.asarray(r.actuated_dofs)].tolist(),
            "effort": np.asarray(record["tau"], dtype=float).tolist(),
            "position_ref": [],
        }
        if record.get("q_ref") is not None:
            out["position_ref"] = np.asarray(record["q_ref"], dtype=float).tolist()
        return out

    def _status(self, record: dict[str, Any]) -> dict[str, Any]:
        ids = record.get("contact_ids") or []
        return {
            "t": float(record["t"]),
            "mode": str(record.get("mode", "")),
            "formulation": str(record.get("formulation", "")),
            "note": str(record.get("note", "")),
            "found": bool(record.get("found", True)),
            "fallback": str(record.get("fallback", "") or ""),
            "message": str(record.get("message", "") or ""),
            "contacts": len(ids),
        }

    def _deadlines(self, record: dict[str, Any]) -> dict[str, Any]:
        ticks, late, total, worst, rtt = self._window
        self._window = [0, 0, 0.0, 0.0, 0.0]
        return {
            "t": float(record["t"]),
            "ticks": ticks,
            "late": late,
            "on_deadline_fraction": 1.0 - late / ticks if ticks else 1.0,
            "compute_us_mean": total / ticks if ticks else 0.0,
            "compute_us_max": worst,
            "roundtrip_us_max": rtt,
            "ticks_total": self.ticks_total,
            "late_total": self.late_total,
        }
