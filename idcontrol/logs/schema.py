"""The layout of an idcontrol log: an MCAP file with JSON messages described by JSON schemas.

One file holds, in the order they happened:

* ``/idcontrol/config`` — one message first: the run's configuration (launch file text, robot,
  formulation and options, reference and options, gains, dt, names of joints, contacts, bodies);
* ``/idcontrol/tick`` — one message per answered state (:data:`TICK_FIELDS`);
* ``/idcontrol/event`` — each admin change (start, stop, set_formulation, set_gains, set_reference,
  shutdown, watchdog stops) at its place among the ticks;
* ``/idcontrol/end`` — the daemon's run statistics, when it shut down cleanly.

Message log times are Unix-epoch nanoseconds of the daemon's clock. A ``Metadata`` record named
``idcontrol`` carries :data:`SCHEMA_VERSION`; readers refuse other versions. The schemas are
embedded in the file, so Foxglove and the ``mcap`` CLI open it without idcontrol.
"""

from __future__ import annotations

import json
import sys
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np
import orjson

if TYPE_CHECKING:
    from idcontrol.control.core import Command
    from idcontrol.control.state import RobotState
    from idcontrol.estimation import Estimate
    from idcontrol.protocol import Truth

SCHEMA_VERSION = 1
PROFILE = "idcontrol"
METADATA_NAME = "idcontrol"

CONFIG_TOPIC = "/idcontrol/config"
TICK_TOPIC = "/idcontrol/tick"
EVENT_TOPIC = "/idcontrol/event"
END_TOPIC = "/idcontrol/end"


@dataclass(frozen=True)
class TickField:
    """One field of the tick record.

    kind : ``int``, ``float``, ``bool``, ``str``; ``vector`` (fixed length per run); ``contact`` (one value per
        detected contact, n changes from tick to tick); ``contact_rows3`` ((n, 3), one row per contact);
        ``sphere_rows3`` ((k, 3), one row per contact sphere of the robot file); ``map``; ``strings``.
    size : the length of a ``vector`` field: ``nq``, ``nv``, ``nu``, ``k`` (the contact spheres) or a number.
    when : ``always``; ``run`` (run mode only, when the formulation ran); ``optional``; ``log`` (in the log's ticks
        only: the log writer derives it from the record, :mod:`idcontrol.logs.estimate`).
    """

    name: str
    kind: str
    doc: str
    size: str = ""
    when: str = "always"


#: The tick record, defined once: the daemon's telemetry, the log's ``/idcontrol/tick`` messages and the test
#: harness's rows are this record (docs/protocol.md's table is generated from it: :func:`markdown_table`).
TICK_FIELDS: tuple[TickField, ...] = (
    TickField(
        "index", "int", "ticks the daemon answered before this one (the log's own; events refer to it)", when="optional"
    ),
    TickField("seq", "int", "sequence number of the state (bridge)"),
    TickField("t", "float", "bridge time of the state, s"),
    TickField("now", "float", "daemon monotonic clock when the state was handled, s"),
    TickField("mode", "str", "idle, run, safe_stop or stopped, after this tick"),
    TickField("formulation", "str", "active formulation"),
    TickField("q", "vector", "configuration, Pinocchio layout: base position m, quaternion xyzw, joints rad", "nq"),
    TickField("qd", "vector", "generalized velocity, Pinocchio layout (base twist in the base frame)", "nv"),
    TickField("tau", "vector", "commanded torque after the safety filter, N·m", "nu"),
    TickField("compute_us", "float", "state received to command sent, µs"),
    TickField("clipped", "int", "joints whose torque hit its limit"),
    TickField("note", "str", "what the guards did this tick (why the mode changed), or empty"),
    TickField("bridge_stopped", "bool", "the bridge reported its own safe stop"),
    TickField("last_late", "bool", "the bridge reported that the previous command missed its deadline"),
    TickField("last_rtt_us", "float", "the bridge's round trip of the previous command, µs (nil when unknown)"),
    TickField(
        "objects",
        "map",
        "movable bodies: position, orientation_xyzw, linear_velocity, angular_velocity (f64 each, world frame)",
        when="optional",
    ),
    TickField(
        "sensed_forces", "sphere_rows3", "force measured per contact sphere (k, 3), world frame, N", when="optional"
    ),
    TickField("log_dropped", "int", "tick records dropped so far because the log writer fell behind", when="optional"),
    TickField(
        "crossings",
        "map",
        "contact events of the step that led to this state, in the order the simulator "
        "crossed them (the ess simulator): label (sphere/touchdown, sphere/liftoff), t (bridge time, s), how",
        when="optional",
    ),
    TickField("q_ref", "vector", "reference joint positions, rad", "nu", "run"),
    TickField("qd_ref", "vector", "reference joint velocities, rad/s", "nu", "run"),
    TickField("qdd_des", "vector", "desired joint accelerations after PD feedback, rad/s²", "nu", "run"),
    TickField(
        "reference",
        "map",
        "the reference's own telemetry (e.g. the trot's phase and stance legs; `hold` and "
        "`stream` have none, and the field is absent)",
        when="run",
    ),
    TickField("found", "bool", "the formulation found a solution, and it passed its certificate", when="run"),
    TickField(
        "certificate", "str", "the certificate check the solution failed (it was not used), or empty", when="run"
    ),
    TickField("iterations", "int", "solver iterations", when="run"),
    TickField("fallback", "str", "fallback the formulation used, empty if none", when="run"),
    TickField("repaired", "bool", "the Section 4.5 consistency repair was applied", when="run"),
    TickField("message", "str", "solver message", when="run"),
    TickField(
        "timings_us", "map", "phase times of the tick's solve (model, contacts, build, solve, total), µs", when="run"
    ),
    TickField("contact_ids", "strings", "contact labels sphere/surface", when="run"),
    TickField("contact_points", "contact_rows3", "contact points (n, 3), world frame, m", when="run"),
    TickField("contact_normals", "contact_rows3", "contact normals (n, 3), world frame", when="run"),
    TickField("contact_phi", "contact", "signed distance per contact, m", when="run"),
    TickField("force_normal", "contact", "predicted normal force per contact, N", when="run"),
    TickField(
        "force_world",
        "contact_rows3",
        "predicted force on the robot per contact (n, 3), world frame, N (empty when the solve failed)",
        when="run",
    ),
    TickField(
        "coupling",
        "float",
        "largest normalized coupling |D_ij|/sqrt(D_ii D_jj) of the Delassus matrix "
        "N M⁻¹ Nᵀ between contacts on different limbs, every joint free (0: Pace & Burden's condition 6)",
        when="run",
    ),
    TickField(
        "coupling_held",
        "float",
        "the same through the unactuated DoFs alone (the controller's contact model: its joints follow q̇_des)",
        when="run",
    ),
    TickField(
        "estimate_q",
        "vector",
        "the base the estimator gave the controller (run mode with an [estimator]): position m and quaternion xyzw "
        "(world ← base), in the world the estimator set at the start (docs/estimation.md)",
        "7",
        "optional",
    ),
    TickField(
        "estimate_qd",
        "vector",
        "the estimated base linear and angular velocity, base frame, m/s, rad/s",
        "6",
        "optional",
    ),
    TickField(
        "estimate_covariance",
        "vector",
        "the filter's error covariance, rows and columns 0..8 (9×9, row-major), named by the configuration's "
        "estimator.covariance_layout (invariant EKF: rotation rad, velocity m/s, position m of its right-invariant "
        "error, world frame; linear filter: position, velocity, the first sphere's position)",
        "81",
        "optional",
    ),
    TickField(
        "estimate_contact",
        "vector",
        "per contact sphere, 1 when the filter held it as a stance foot this tick (the controller's stance decision "
        "of the previous tick), else 0",
        "k",
        "optional",
    ),
    TickField(
        "estimate_status", "str", "'trustworthy', or why the estimate is not (the run then stops)", when="optional"
    ),
    TickField(
        "truth_q",
        "vector",
        "the simulator's truth of the base (a bridge's sensor models send it; the controller never sees it): "
        "position m, quaternion xyzw, world frame",
        "7",
        "optional",
    ),
    TickField("truth_qd", "vector", "the true base linear and angular velocity, base frame", "6", "optional"),
    TickField(
        "truth_contact_forces",
        "sphere_rows3",
        "the true force on each contact sphere (k, 3), world frame, N",
        when="optional",
    ),
    TickField(
        "estimate_std",
        "vector",
        "standard deviations of the base's error: rotation (3, rad), velocity (3, m/s), position (3, m), world frame "
        "(from estimate_covariance at the estimate, to first order)",
        "9",
        "log",
    ),
    TickField(
        "estimate_error",
        "vector",
        "the estimate minus the truth, as estimate_std: rotation vector of R̂ Rᵀ (rad), world velocity (m/s), "
        "position (m)",
        "9",
        "log",
    ),
    TickField("tilt_error", "float", "angle between the estimated and the true vertical, rad", when="log"),
    TickField(
        "coupled_touchdown",
        "bool",
        "two contacts on different limbs, coupled (held) by at least 0.1, "
        "touched down within 2 ms of each other, the later on this tick",
        when="run",
    ),
)

_BY_KIND: dict[str, tuple[str, ...]] = {}
for _field in TICK_FIELDS:
    _BY_KIND[_field.kind] = (*_BY_KIND.get(_field.kind, ()), _field.name)
SCALAR_INT = _BY_KIND["int"]
SCALAR_FLOAT = _BY_KIND["float"]
SCALAR_BOOL = _BY_KIND["bool"]
SCALAR_STR = _BY_KIND["str"]
#: fixed length per run: q (nq,), qd (nv,), the rest (nu,)
VECTORS = _BY_KIND["vector"]
#: one value per detected contact (the count changes from tick to tick)
CONTACT_VECTORS = _BY_KIND["contact"]
CONTACT_ROWS3 = _BY_KIND["contact_rows3"]
#: one row per contact sphere of the robot file (measured by the bridge), N, world frame
SPHERE_ROWS3 = _BY_KIND["sphere_rows3"]
ROWS3 = CONTACT_ROWS3 + SPHERE_ROWS3
MAPS = _BY_KIND["map"]
STRINGS = _BY_KIND["strings"]
_ARRAYS = VECTORS + CONTACT_VECTORS + ROWS3
_FIELD_NAMES = frozenset(f.name for f in TICK_FIELDS)
#: a movable body's fields in a record's ``objects`` map
OBJECT_KEYS = ("position", "orientation_xyzw", "linear_velocity", "angular_velocity")
#: A run-mode tick's targets, in the record's order (:func:`target_values`).
TARGET_FIELDS = ("q_ref", "qd_ref", "qdd_des")
#: A solved tick's fields, in the record's order (:func:`solved_values`); the last :data:`SOLVED_ARRAYS` are float
#: arrays.
SOLVED_FIELDS = (
    "found",
    "certificate",
    "iterations",
    "fallback",
    "repaired",
    "message",
    "timings_us",
    "contact_ids",
    "contact_points",
    "contact_normals",
    "contact_phi",
    "force_normal",
    "force_world",
)
SOLVED_ARRAYS = 5
#: The contact-coupling diagnostic's fields (``ControlCore.coupling``).
COUPLING_FIELDS = ("coupling", "coupling_held", "coupled_touchdown")
#: The fields the log writer derives and adds to the records it stores (never published).
LOG_ONLY = tuple(f.name for f in TICK_FIELDS if f.when == "log")
#: An estimated tick's fields, in the record's order (:func:`estimate_values`).
ESTIMATE_FIELDS = ("estimate_q", "estimate_qd", "estimate_covariance", "estimate_contact", "estimate_status")
#: The rows and columns of the filter's covariance the record holds (``estimate_covariance``).
COVARIANCE_BLOCK = 9
_NO_FORCES = np.zeros((0, 3))
_NO_FORCES.setflags(write=False)


def target_values(command: Command) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """The values of :data:`TARGET_FIELDS` for a tick with a reference sample (``command.target``)."""
    return command.target.q_ref, command.target.v_ref, command.qdd_des


def solved_values(command: Command, contact_labels: list[str] | None) -> list[Any]:
    """The values of :data:`SOLVED_FIELDS` for a tick with a solve (``command.result`` and ``command.contacts``);
    ``contact_labels`` as for :func:`tick_record`."""
    result, contacts = command.result, command.contacts
    force_world = result.force_in_world
    return [
        bool(result.found),
        result.certificate,
        int(result.iterations),
        result.fallback or "",
        bool(result.consistency_repaired),
        result.message,
        {k: v * 1e6 for k, v in result.timings.items()},
        contact_labels or [],
        contacts.points,
        contacts.normals,
        contacts.phi,
        result.f_normal,
        force_world if force_world is not None else _NO_FORCES,
    ]


def estimate_values(estimate: Estimate) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray, str]:
    """The values of :data:`ESTIMATE_FIELDS` for a tick with an estimate, as views of the estimator's own arrays
    (the stance as bool: the record holds it as float64)."""
    block = COVARIANCE_BLOCK
    return estimate.q[:7], estimate.v[:6], estimate.covariance[:block, :block], estimate.stance, estimate.reason


def tick_record(
    *,
    seq: int,
    state: RobotState,
    command: Command,
    compute_us: float,
    now: float,
    contact_labels: list[str] | None,
    last_rtt_us: float | None = None,
    bridge_stopped: bool = False,
    last_late: bool = False,
    crossings: tuple[tuple[str, float, str], ...] = (),
    coupling: tuple[float, float, bool] | None = None,
    truth: Truth | None = None,
) -> dict[str, Any]:
    """The tick record of one answered state, with arrays as numpy arrays (see :func:`encode_tick_record`).

    ``contact_labels`` : "sphere/surface" of each contact in ``command.contacts`` (the caller caches them).
    ``crossings`` : (label, t, how) of the contact events the bridge reported for the step before this state.
    ``coupling`` : the core's contact-coupling diagnostic of this tick (:meth:`ControlCore.coupling
    <idcontrol.control.core.ControlCore.coupling>`), if any.
    ``truth`` : the simulator's truth the bridge sent with the state (the wire's ``truth``), if any.
    """
    record: dict[str, Any] = {
        "seq": seq,
        "t": state.t,
        "now": now,
        "mode": command.mode,
        "formulation": command.formulation,
        "q": state.q,
        "qd": state.v,
        "tau": command.tau,
        "compute_us": compute_us,
        "clipped": command.clipped,
        "note": command.note,
        "bridge_stopped": bridge_stopped,
        "last_late": last_late,
        "last_rtt_us": last_rtt_us,
    }
    if state.objects:
        record["objects"] = {name: {key: getattr(s, key) for key in OBJECT_KEYS} for name, s in state.objects.items()}
    if state.sensed_forces is not None:
        record["sensed_forces"] = state.sensed_forces
    if crossings:
        record["crossings"] = {
            "label": [c[0] for c in crossings],
            "t": [c[1] for c in crossings],
            "how": [c[2] for c in crossings],
        }
    if command.target is not None:
        record.update(zip(TARGET_FIELDS, target_values(command), strict=True))
        if command.reference:
            record["reference"] = command.reference
    result, contacts = command.result, command.contacts
    if result is not None and contacts is not None:
        record.update(zip(SOLVED_FIELDS, solved_values(command, contact_labels), strict=True))
        if coupling is not None:
            record.update(zip(COUPLING_FIELDS, coupling, strict=True))
    if command.estimate is not None:
        q, v, block, stance, status = estimate_values(command.estimate)
        record.update(zip(ESTIMATE_FIELDS, (q, v, block, stance.astype(float), status), strict=True))
    if truth is not None:
        record["truth_q"], record["truth_qd"] = truth.q, truth.v
        if truth.contact_forces is not None:
            record["truth_contact_forces"] = truth.contact_forces
    return record


if sys.byteorder == "little":

    def f64_bytes(array: np.ndarray) -> bytes:
        """float64 bytes, row-major: the record's arrays are float64 (the controller's own), so ``tobytes``
        suffices (a quarter of ``ascontiguousarray``'s cost, which the daemon pays a dozen times a tick)."""
        return array.tobytes()

else:  # pragma: no cover - big-endian machines

    def f64_bytes(array: np.ndarray) -> bytes:
        return np.ascontiguousarray(array, dtype="<f8").tobytes()


def encode_tick_record(record: dict[str, Any]) -> dict[str, Any]:
    """The record in the wire's encoding, in place: every float array as little-endian float64 bytes
    (row-major); returns ``record``."""
    for name in _ARRAYS:
        value = record.get(name)
        if value is not None:
            record[name] = f64_bytes(value)
    if "objects" in record:
        record["objects"] = {n: {k: f64_bytes(v) for k, v in pose.items()} for n, pose in record["objects"].items()}
    return record


def decode_tick_record(message: dict[str, Any]) -> dict[str, Any]:
    """A wire record's float64 bytes as numpy arrays, (n, 3) fields reshaped; other keys as they are."""
    out = dict(message)
    for name in _ARRAYS:
        value = out.get(name)
        if isinstance(value, (bytes, bytearray)):
            array = np.frombuffer(value, dtype="<f8")
            out[name] = array.reshape(-1, 3) if name in ROWS3 else array
    if "objects" in out:
        out["objects"] = {
            n: {k: np.frombuffer(v, dtype="<f8") for k, v in pose.items()} for n, pose in out["objects"].items()
        }
    return out


def unknown_fields(record: dict[str, Any]) -> list[str]:
    """Keys of ``record`` (besides the envelope's ``v`` and ``type``) that :data:`TICK_FIELDS` does not define."""
    return sorted(set(record) - _FIELD_NAMES - {"v", "type"})


_WIRE_TYPE = {
    "int": "int",
    "float": "float",
    "bool": "bool",
    "str": "str",
    "map": "map",
    "strings": "array of str",
    "contact": "f64[n]",
    "contact_rows3": "f64[3n]",
    "sphere_rows3": "f64[3k]",
}
_WHEN = {"always": "every tick", "run": "run mode", "optional": "when present", "log": "in the log only"}


def markdown_table() -> str:
    """The tick record as the Markdown table of docs/protocol.md (f64[...]: float64 bytes, see "Encoding")."""
    lines = ["| field | type | when | meaning |", "|---|---|---|---|"]
    for f in TICK_FIELDS:
        kind = f"f64[{f.size}]" if f.kind == "vector" else _WIRE_TYPE[f.kind]
        lines.append(f"| `{f.name}` | {kind} | {_WHEN[f.when]} | {f.doc} |")
    return "\n".join(lines) + "\n"


def _tick_schema() -> dict[str, Any]:
    number_array = {"type": "array", "items": {"type": "number"}}
    props: dict[str, Any] = {}
    for name in SCALAR_INT:
        props[name] = {"type": "integer"}
    for name in SCALAR_FLOAT:
        props[name] = {"type": "number"}
    for name in SCALAR_BOOL:
        props[name] = {"type": "boolean"}
    for name in SCALAR_STR:
        props[name] = {"type": "string"}
    for name in VECTORS + CONTACT_VECTORS:
        props[name] = dict(number_array)
    for name in ROWS3:
        props[name] = {"type": "array", "items": {**number_array, "minItems": 3, "maxItems": 3}}
    for name in MAPS:
        props[name] = {"type": "object"}
    props["contact_ids"] = {"type": "array", "items": {"type": "string"}}
    for f in TICK_FIELDS:
        props[f.name]["description"] = f.doc
    return {
        "title": "idcontrol.Tick",
        "description": "One control tick: input state, reference, contacts, predicted forces, command, "
        "solver status and timings. Non-finite numbers are written as null.",
        "type": "object",
        "properties": props,
        "required": ["seq", "t", "now", "mode", "q", "qd", "tau"],
    }


SCHEMAS: dict[str, tuple[str, dict[str, Any]]] = {
    CONFIG_TOPIC: (
        "idcontrol.Config",
        {
            "title": "idcontrol.Config",
            "type": "object",
            "description": "The run's configuration (launch file and effective settings)",
        },
    ),
    TICK_TOPIC: ("idcontrol.Tick", _tick_schema()),
    EVENT_TOPIC: (
        "idcontrol.Event",
        {
            "title": "idcontrol.Event",
            "type": "object",
            "description": "An admin change or stop, at its place among the ticks",
            "properties": {"kind": {"type": "string"}, "now": {"type": "number"}},
        },
    ),
    END_TOPIC: (
        "idcontrol.End",
        {"title": "idcontrol.End", "type": "object", "description": "The daemon's run statistics at a clean shutdown"},
    ),
}


#: orjson's options for every message: numpy arrays as JSON arrays (NaN and ±inf, which JSON lacks, as null, as
#: for plain floats), keys that are not strings as strings (as the json module would)
JSON_OPTIONS = orjson.OPT_SERIALIZE_NUMPY | orjson.OPT_NON_STR_KEYS


def to_json(message: Any) -> bytes:
    """One log or live-view message as compact JSON (orjson: a sixth of the json module's cost on tick records;
    docs/benchmarks.md, "Measured choices in the code")."""
    return orjson.dumps(message, option=JSON_OPTIONS)


def schema_bytes(topic: str) -> bytes:
    return json.dumps(SCHEMAS[topic][1]).encode()
