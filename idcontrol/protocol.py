"""The wire protocol between the daemon, bridges and clients: msgpack over ZeroMQ.

``docs/protocol.md`` is the normative description (fields, units, frames,
error codes); this module is its Python implementation, used by the daemon,
the bridges and the tests. In short:

* every message is one ZeroMQ frame holding one msgpack map with string keys;
* every map carries ``"v"`` (the protocol version, :data:`PROTOCOL_VERSION`)
  and ``"type"``;
* arrays of floats travel as msgpack ``bin`` holding little-endian IEEE-754
  float64 values (row-major for matrices); decoders also accept a msgpack
  array of numbers;
* a malformed message is answered by an ``error`` message with a code from
  :data:`ERROR_CODES` and never reaches the controller.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import msgpack
import numpy as np
from numpy.typing import NDArray

from idcontrol.contacts.world import ObjectState

# the command's ``mode`` values are the control core's modes (re-exported for wire users)
from idcontrol.control.modes import MODE_IDLE as MODE_IDLE
from idcontrol.control.modes import MODE_RUN as MODE_RUN
from idcontrol.control.modes import MODE_SAFE_STOP as MODE_SAFE_STOP
from idcontrol.control.modes import MODE_STOPPED as MODE_STOPPED
from idcontrol.control.modes import MODES
from idcontrol.control.state import RobotState
from idcontrol.errors import ProtocolError

Array = NDArray[np.float64]

PROTOCOL_VERSION = 1
#: Messages larger than this are refused unread (``too_large``).
MAX_MESSAGE_BYTES = 1 << 20

#: Error reply codes and what they mean (docs/protocol.md, "Errors").
ERROR_CODES = {
    "malformed": "not a msgpack map with string keys",
    "too_large": "message larger than the size limit",
    "bad_version": "missing or unsupported protocol version",
    "unknown_type": "missing or unknown message type",
    "missing_field": "a required field is absent",
    "bad_field": "a field has the wrong type, length or value",
    "non_finite": "a number is NaN or infinite",
    "stale_seq": "sequence number not greater than the last one accepted",
    "robot_mismatch": "the peer's robot differs from the daemon's",
    "bad_state": "the state is well-formed but not a valid robot state",
    "busy": "another bridge is driving the daemon",
    "invalid_transition": "the request is not allowed in the current mode",
    "unknown_name": "unknown formulation, reference or option",
    "internal": "the daemon failed while handling the message",
}

_packer = msgpack.Packer(use_bin_type=True)


def pack(message: Mapping[str, Any]) -> bytes:
    """msgpack-encode one message map."""
    return _packer.pack(message)


def f64(array: Array) -> bytes:
    """The wire encoding of a float array: little-endian float64 bytes, row-major."""
    return np.ascontiguousarray(array, dtype="<f8").tobytes()


def unpack(raw: bytes, allowed_types: tuple[str, ...]) -> dict[str, Any]:
    """Decode one message and check its envelope (size, map, version, type)."""
    if len(raw) > MAX_MESSAGE_BYTES:
        raise ProtocolError("too_large", f"message of {len(raw)} bytes exceeds {MAX_MESSAGE_BYTES}")
    try:
        message = msgpack.unpackb(raw, raw=False, strict_map_key=True, use_list=True)
    except Exception as e:  # msgpack raises several unrelated types on bad input
        raise ProtocolError("malformed", f"not valid msgpack: {type(e).__name__}: {e}") from None
    if not isinstance(message, dict):
        raise ProtocolError("malformed", f"a message must be a map, got {type(message).__name__}")
    seq = _seq_of(message)
    version = message.get("v")
    if version != PROTOCOL_VERSION:
        raise ProtocolError(
            "bad_version", f"protocol version {version!r} not supported; this is {PROTOCOL_VERSION}", seq
        )
    kind = message.get("type")
    if kind not in allowed_types:
        raise ProtocolError("unknown_type", f"message type {kind!r} not one of {list(allowed_types)}", seq)
    return message


def require(message: Mapping[str, Any], key: str) -> Any:
    if key not in message:
        raise ProtocolError("missing_field", f"{message.get('type')} message lacks {key!r}", _seq_of(message))
    return message[key]


def _seq_of(message: Mapping[str, Any]) -> int | None:
    seq = message.get("seq")
    return seq if isinstance(seq, int) and not isinstance(seq, bool) else None


def get_int(message: Mapping[str, Any], key: str) -> int:
    value = require(message, key)
    if not isinstance(value, int) or isinstance(value, bool) or value < 0:
        raise ProtocolError("bad_field", f"{key} must be a non-negative integer, got {value!r}", _seq_of(message))
    return value


def get_float(message: Mapping[str, Any], key: str) -> float:
    value = require(message, key)
    if not isinstance(value, (int, float)) or isinstance(value, bool):
        raise ProtocolError("bad_field", f"{key} must be a number, got {type(value).__name__}", _seq_of(message))
    value = float(value)
    if not math.isfinite(value):
        raise ProtocolError("non_finite", f"{key} is {value}", _seq_of(message))
    return value


def get_str(message: Mapping[str, Any], key: str) -> str:
    value = require(message, key)
    if not isinstance(value, str):
        raise ProtocolError("bad_field", f"{key} must be a string, got {type(value).__name__}", _seq_of(message))
    return value


def get_bool(message: Mapping[str, Any], key: str, seq: int | None = None) -> bool:
    """An optional boolean field (absent: False)."""
    value = message.get(key, False)
    if not isinstance(value, bool):
        raise ProtocolError("bad_field", f"{key} must be a boolean, got {type(value).__name__}", seq)
    return value


def get_array(message: Mapping[str, Any], key: str, length: int, seq: int | None = None) -> Array:
    """A float array field of exactly ``length`` finite values."""
    value = require(message, key)
    if isinstance(value, (bytes, bytearray)):
        if len(value) != 8 * length:
            raise ProtocolError("bad_field", f"{key} holds {len(value)} bytes, expected {8 * length} "
                                f"({length} float64)", seq)  # fmt: skip
        array = np.frombuffer(value, dtype="<f8").copy()  # writable: compiled kernels specialize on it
    elif isinstance(value, list):
        if len(value) != length:
            raise ProtocolError("bad_field", f"{key} has {len(value)} values, expected {length}", seq)
        if not all(isinstance(x, (int, float)) and not isinstance(x, bool) for x in value):
            raise ProtocolError("bad_field", f"{key} must hold only numbers", seq)
        array = np.asarray(value, dtype=float)
    else:
        raise ProtocolError("bad_field", f"{key} must be float64 bytes or an array of numbers, "
                            f"got {type(value).__name__}", seq)  # fmt: skip
    if not np.isfinite(array).all():
        bad = np.flatnonzero(~np.isfinite(array))[:10].tolist()
        raise ProtocolError("non_finite", f"{key} is not finite at indices {bad}", seq)
    return array


# ---------------------------------------------------------------------------------------------- control channel
@dataclass(slots=True)
class StateMessage:
    """One ``state`` message of the control channel (bridge → daemon), decoded once into the core's type.

    seq : the bridge's sequence number (the command answering it carries the same).
    state : the robot state: ``q`` (nq,) Pinocchio configuration (floating base: position m, quaternion
        x y z w, joints rad or m); ``v`` (nv,) Pinocchio velocity, wire field ``qd`` (floating base: linear then
        angular velocity in the base frame); ``t`` bridge time, s; ``sensed_forces`` (k, 3) the wire's
        ``contact_forces``, force on each contact sphere of the robot file, world frame, N, optional;
        ``objects`` pose and twist of movable bodies by name (world frame), optional.
    last_rtt_us : the bridge's round trip of the previous command, µs; optional (statistics only).
    bridge_stopped : the bridge has stopped the robot on its own (late commands); the daemon then
        stops too, so that only an explicit start resumes.
    last_late : the command answering the previous state missed its deadline (the bridge's next period
        boundary) and the bridge reused an older torque; that command's round trip is then unknown.
    crossings : the contact events of the step that led to this state, in the order the simulator crossed them
        (the ess simulator): (label ``"sphere/touchdown"`` or ``"sphere/liftoff"``, bridge time s, how); optional.
    """

    seq: int
    state: RobotState
    last_rtt_us: float | None = None
    bridge_stopped: bool = False
    last_late: bool = False
    crossings: tuple[tuple[str, float, str], ...] = ()


@dataclass(frozen=True, slots=True)
class RobotShape:
    """The sizes a peer must agree on (sent in ``welcome``)."""

    robot: str
    nq: int
    nv: int
    joint_names: tuple[str, ...]  # actuated joints in tau's order
    contact_names: tuple[str, ...]  # contact spheres in contact_forces' row order
    object_names: tuple[str, ...]

    @property
    def nu(self) -> int:
        return len(self.joint_names)


def decode_control(raw: bytes, shape: RobotShape) -> StateMessage | dict[str, Any]:
    """Decode a control-channel message: a :class:`StateMessage`, or a ``hello`` map."""
    message = unpack(raw, ("state", "hello"))
    if message["type"] == "hello":
        get_str(message, "robot")
        return message
    seq = get_int(message, "seq")
    t = get_float(message, "t")
    q = get_array(message, "q", shape.nq, seq)
    v = get_array(message, "qd", shape.nv, seq)
    forces = None
    if message.get("contact_forces") is not None:
        forces = get_array(message, "contact_forces", 3 * len(shape.contact_names), seq).reshape(-1, 3)
    objects: dict[str, ObjectState] = {}
    raw_objects = message.get("objects")
    if raw_objects is not None:
        if not isinstance(raw_objects, dict):
            raise ProtocolError("bad_field", "objects must be a map from body name to pose", seq)
        for name, pose in raw_objects.items():
            if name not in shape.object_names:
                raise ProtocolError(
                    "bad_field", f"unknown movable body {name!r}; known: {list(shape.object_names)}", seq
                )
            if not isinstance(pose, dict):
                raise ProtocolError("bad_field", f"objects[{name!r}] must be a map", seq)
            objects[name] = ObjectState(
                position=get_array(pose, "position", 3, seq),
                orientation_xyzw=get_array(pose, "orientation_xyzw", 4, seq),
                linear_velocity=get_array(pose, "linear_velocity", 3, seq),
                angular_velocity=get_array(pose, "angular_velocity", 3, seq),
            )
    rtt = message.get("last_rtt_us")
    if rtt is not None:
        rtt = get_float(message, "last_rtt_us")
    stopped, late = get_bool(message, "bridge_stopped", seq), get_bool(message, "last_late", seq)
    crossings = _decode_crossings(message["crossings"], seq) if message.get("crossings") is not None else ()
    return StateMessage(seq, RobotState(q, v, t, objects, forces), rtt, stopped, late, crossings)


#: At most this many crossings in one state (a step of a robot with 512 contact spheres, each touching down and
#: lifting off once).
MAX_CROSSINGS = 1024


def _decode_crossings(value: Any, seq: int) -> tuple[tuple[str, float, str], ...]:
    """The optional ``crossings`` map of a state: parallel ``label`` (str), ``t`` (float) and ``how`` (str)."""
    if not isinstance(value, dict):
        raise ProtocolError("bad_field", "crossings must be a map with label, t and how", seq)
    labels, how = value.get("label"), value.get("how")
    if not isinstance(labels, list) or not isinstance(how, list) or len(labels) > MAX_CROSSINGS:
        raise ProtocolError("bad_field", f"crossings.label and crossings.how must be arrays of at most "
                            f"{MAX_CROSSINGS} strings", seq)  # fmt: skip
    if len(how) != len(labels) or not all(isinstance(x, str) and len(x) <= 128 for x in labels + how):
        raise ProtocolError("bad_field", "crossings.label and crossings.how must be as long as each other and hold "
                            "strings of at most 128 characters", seq)  # fmt: skip
    times = get_array(value, "t", len(labels), seq) if "t" in value else None
    if times is None:
        raise ProtocolError("bad_field", "crossings lacks t", seq)
    return tuple(zip(labels, times.tolist(), how, strict=True))


def encode_state(
    seq: int,
    t: float,
    q: Array,
    v: Array,
    contact_forces: Array | None = None,
    objects: Mapping[str, ObjectState] | None = None,
    last_rtt_us: float | None = None,
    bridge_stopped: bool = False,
    last_late: bool = False,
    crossings: tuple[tuple[str, float, str], ...] | list[tuple[str, float, str]] = (),
) -> bytes:
    """A ``state`` message; ``crossings``: (label, t s, how) of the step's contact events, in crossing order."""
    message: dict[str, Any] = {"v": PROTOCOL_VERSION, "type": "state", "seq": seq, "t": t, "q": f64(q), "qd": f64(v)}
    if contact_forces is not None:
        message["contact_forces"] = f64(contact_forces)
    if objects:
        message["objects"] = {
            name: {
                "position": f64(s.position),
                "orientation_xyzw": f64(s.orientation_xyzw),
                "linear_velocity": f64(s.linear_velocity),
                "angular_velocity": f64(s.angular_velocity),
            }
            for name, s in objects.items()
        }
    if last_rtt_us is not None:
        message["last_rtt_us"] = float(last_rtt_us)
    if bridge_stopped:
        message["bridge_stopped"] = True
    if last_late:
        message["last_late"] = True
    if crossings:
        message["crossings"] = {"label": [c[0] for c in crossings], "t": f64(np.array([c[1] for c in crossings])),
                                "how": [c[2] for c in crossings]}  # fmt: skip
    return pack(message)


def encode_command(seq: int, t: float, tau: Array, mode: str) -> bytes:
    """The daemon's answer to the state with the same ``seq``; tau (nu,) N·m (N for prismatic joints)."""
    return pack({"v": PROTOCOL_VERSION, "type": "command", "seq": seq, "t": t, "tau": f64(tau), "mode": mode})


@dataclass(slots=True)
class CommandMessage:
    seq: int
    t: float
    tau: Array
    mode: str


def decode_command(raw: bytes, nu: int) -> CommandMessage:
    """Decode the daemon's reply on the control channel (bridges use this); raises on ``error`` replies."""
    message = unpack(raw, ("command", "error", "welcome"))
    if message["type"] == "error":
        raise ProtocolError(str(message.get("code")), f"daemon: {message.get('message')}", _seq_of(message))
    if message["type"] == "welcome":
        raise ProtocolError("unknown_type", "unexpected welcome", None)
    seq = get_int(message, "seq")
    mode = get_str(message, "mode")
    if mode not in MODES:
        raise ProtocolError("bad_field", f"mode {mode!r} not one of {list(MODES)}", seq)
    return CommandMessage(seq, get_float(message, "t"), get_array(message, "tau", nu, seq), mode)


def encode_hello(robot: str, nq: int, nv: int, nu: int, clock: str = "realtime") -> bytes:
    """``clock``: "realtime" (a robot, or a simulator paced by the wall clock) or "lockstep"."""
    return pack({"v": PROTOCOL_VERSION, "type": "hello", "robot": robot, "nq": nq, "nv": nv, "nu": nu,
                 "clock": clock})  # fmt: skip


def encode_welcome(shape: RobotShape, dt: float, mode: str) -> bytes:
    return pack({
        "v": PROTOCOL_VERSION, "type": "welcome", "robot": shape.robot, "nq": shape.nq, "nv": shape.nv,
        "nu": shape.nu, "joint_names": list(shape.joint_names), "contact_names": list(shape.contact_names),
        "object_names": list(shape.object_names), "dt": dt, "mode": mode,
    })  # fmt: skip


def encode_error(code: str, message: str, seq: int | None = None) -> bytes:
    reply: dict[str, Any] = {"v": PROTOCOL_VERSION, "type": "error", "code": code, "message": message}
    if seq is not None:
        reply["seq"] = seq
    return pack(reply)


# ------------------------------------------------------------------------------------------------ admin channel
#: Admin requests and their fields (docs/protocol.md, "Admin channel").
ADMIN_REQUESTS = (
    "status", "stats", "start", "stop", "set_formulation", "set_gains", "set_reference", "reset_stats", "shutdown",
)  # fmt: skip


def encode_request(kind: str, **fields: Any) -> bytes:
    return pack({"v": PROTOCOL_VERSION, "type": kind, **fields})


def decode_request(raw: bytes) -> dict[str, Any]:
    return unpack(raw, ADMIN_REQUESTS)


def encode_reply(request: str, **data: Any) -> bytes:
    return pack({"v": PROTOCOL_VERSION, "type": "ok", "request": request, **data})


def decode_reply(raw: bytes) -> dict[str, Any]:
    """An admin reply as a map; raises :class:`ProtocolError` for an ``error`` reply."""
    message = unpack(raw, ("ok", "error"))
    if message["type"] == "error":
        raise ProtocolError(str(message.get("code")), str(message.get("message")))
    return message


# -------------------------------------------------------------------------------------------- reference stream
def decode_reference(raw: bytes, nu: int) -> tuple[Array, Array, Array]:
    """A ``reference`` message from the user's planner: (q_ref rad, qd_ref rad/s, qdd_ref rad/s²), each (nu,)."""
    message = unpack(raw, ("reference",))
    return (get_array(message, "q", nu), get_array(message, "qd", nu), get_array(message, "qdd", nu))


def encode_reference(q_ref: Array, qd_ref: Array, qdd_ref: Array, t: float = 0.0) -> bytes:
    return pack({"v": PROTOCOL_VERSION, "type": "reference", "t": t, "q": f64(q_ref), "qd": f64(qd_ref),
                 "qdd": f64(qdd_ref)})  # fmt: skip
