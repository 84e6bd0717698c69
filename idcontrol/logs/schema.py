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
from typing import Any

SCHEMA_VERSION = 1
PROFILE = "idcontrol"
METADATA_NAME = "idcontrol"

CONFIG_TOPIC = "/idcontrol/config"
TICK_TOPIC = "/idcontrol/tick"
EVENT_TOPIC = "/idcontrol/event"
END_TOPIC = "/idcontrol/end"

#: Tick fields by kind. Arrays are float64; ``(n, 3)`` fields hold one row per contact (or sphere).
SCALAR_INT = ("index", "seq", "iterations", "clipped", "log_dropped")
SCALAR_FLOAT = ("t", "now", "compute_us", "last_rtt_us")
SCALAR_BOOL = ("found", "repaired", "bridge_stopped", "last_late")
SCALAR_STR = ("mode", "formulation", "fallback", "message", "note")
#: fixed length per run: q (nq,), qd (nv,), the rest (nu,)
VECTORS = ("q", "qd", "tau", "q_ref", "qd_ref", "qdd_des")
#: one value per detected contact (the count changes from tick to tick)
CONTACT_VECTORS = ("contact_phi", "force_normal")
CONTACT_ROWS3 = ("contact_points", "contact_normals", "force_world")
#: one row per contact sphere of the robot file (measured by the bridge), N, world frame
SPHERE_ROWS3 = ("sensed_forces",)
ROWS3 = CONTACT_ROWS3 + SPHERE_ROWS3
MAPS = ("timings_us", "reference", "objects")
STRINGS = ("contact_ids",)

_DOC = {
    "index": "ticks the daemon answered before this one (events refer to it)",
    "seq": "sequence number of the state (bridge)",
    "t": "bridge time of the state, s",
    "now": "daemon monotonic clock when the state was handled, s",
    "compute_us": "state received to command sent, µs",
    "last_rtt_us": "the bridge's round trip of the previous command, µs",
    "iterations": "solver iterations",
    "clipped": "joints whose torque hit its limit",
    "log_dropped": "tick records dropped so far because the log writer fell behind",
    "found": "the formulation found a solution",
    "repaired": "the Section 4.5 consistency repair was applied",
    "bridge_stopped": "the bridge reported its own safe stop",
    "last_late": "the bridge reported that the previous command missed its deadline",
    "mode": "idle, run, safe_stop or stopped",
    "formulation": "active formulation",
    "fallback": "fallback the formulation used, empty if none",
    "message": "solver message",
    "note": "why the mode changed this tick, if it did",
    "q": "configuration (nq,), Pinocchio layout: base position m, quaternion xyzw, joints rad",
    "qd": "generalized velocity (nv,), Pinocchio layout",
    "tau": "commanded torque (nu,), N·m",
    "q_ref": "reference joint positions (nu,), rad",
    "qd_ref": "reference joint velocities (nu,), rad/s",
    "qdd_des": "desired joint accelerations after PD feedback (nu,), rad/s²",
    "contact_phi": "signed distance per contact, m",
    "force_normal": "predicted normal force per contact, N",
    "contact_points": "contact points (n, 3), world frame, m",
    "contact_normals": "contact normals (n, 3), world frame",
    "force_world": "predicted force on the robot per contact (n, 3), world frame, N",
    "sensed_forces": "force measured by the simulator per contact sphere (k, 3), world frame, N",
    "timings_us": "phase times of the solve, µs",
    "reference": "the reference's own telemetry (e.g. gait phase)",
    "objects": "movable bodies: position, orientation_xyzw, linear_velocity, angular_velocity",
    "contact_ids": "contact labels sphere/surface",
}


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
    for name, text in _DOC.items():
        props[name]["description"] = text
    return {
        "title": "idcontrol.Tick",
        "description": "One control tick: input state, reference, contacts, predicted forces, command, "
        "solver status and timings. Non-finite numbers are written as null.",
        "type": "object",
        "properties": props,
        "required": ["seq", "t", "now", "mode", "q", "qd", "tau"],
    }


SCHEMAS: dict[str, tuple[str, dict[str, Any]]] = {
    CONFIG_TOPIC: ("idcontrol.Config", {"title": "idcontrol.Config", "type": "object",
                                        "description": "The run's configuration (launch file and effective settings)"}),
    TICK_TOPIC: ("idcontrol.Tick", _tick_schema()),
    EVENT_TOPIC: ("idcontrol.Event", {"title": "idcontrol.Event", "type": "object",
                                      "description": "An admin change or stop, at its place among the ticks",
                                      "properties": {"kind": {"type": "string"}, "now": {"type": "number"}}}),
    END_TOPIC: ("idcontrol.End", {"title": "idcontrol.End", "type": "object",
                                  "description": "The daemon's run statistics at a clean shutdown"}),
}  # fmt: skip


def schema_bytes(topic: str) -> bytes:
    return json.dumps(SCHEMAS[topic][1]).encode()
