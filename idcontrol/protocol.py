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
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, NamedTuple

import msgpack
import numpy as np
import zmq
from numpy.typing import NDArray

from idcontrol.contacts.world import ObjectState

# the command's ``mode`` values are the control core's modes (re-exported for wire users)
from idcontrol.control.modes import MODE_IDLE as MODE_IDLE
from idcontrol.control.modes import MODE_RUN as MODE_RUN
from idcontrol.control.modes import MODE_SAFE_STOP as MODE_SAFE_STOP
from idcontrol.control.modes import MODE_STOPPED as MODE_STOPPED
from idcontrol.control.modes import MODES
from idcontrol.control.state import ImuReading, RobotState
from idcontrol.errors import ProtocolError
from idcontrol.validation import all_finite

Array = NDArray[np.float64]

PROTOCOL_VERSION = 1
#: Messages larger than this are refused unread (``too_large``).
MAX_MESSAGE_BYTES = 1 << 20
#: ZeroMQ's own limit on the daemon's sockets: a message larger than this closes its connection, unanswered.
MAX_RECEIVED_BYTES = 4 * MAX_MESSAGE_BYTES
#: Sequence numbers run from 0 to this (msgpack's largest integer, an unsigned 64-bit one).
MAX_SEQ = (1 << 64) - 1
#: how the daemon's refusal of ``start`` begins when no driver is connected (a client may ask again)
NO_DRIVER = "no driver is connected"
#: the largest size (nq, nv, nu) a hello may state
MAX_SIZE = 1 << 16
#: a hello's ``clock``: a robot or a simulator paced by the wall clock, or one that steps when a command arrives
CLOCKS = ("realtime", "lockstep")
#: The longest string field accepted (characters); longer ones are ``bad_field``.
MAX_STRING = 256

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
    "unauthorized": "the request needs the daemon's credential, and it was missing or wrong",
    "invalid_transition": "the request is not allowed in the current mode",
    "unknown_name": "unknown formulation, reference or option",
    "internal": "the daemon failed while handling the message",
}

_packer = msgpack.Packer(use_bin_type=True)


def allow_ipv6(socket: Any, endpoint: str) -> None:
    """Let a ZeroMQ socket bind or connect to an IPv6 address (``tcp://[::1]:PORT``; ZeroMQ's default is
    IPv4 only, and an IPv6 literal then fails with "No such device")."""
    if endpoint.startswith("tcp://["):
        socket.setsockopt(zmq.IPV6, 1)


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
    if type(version) is not int or version != PROTOCOL_VERSION:  # the integer 1: not 1.0, not true
        raise ProtocolError(
            "bad_version", f"protocol version {_shown(version)} not supported; this is {PROTOCOL_VERSION}", seq
        )
    kind = message.get("type")
    if kind not in allowed_types:
        raise ProtocolError("unknown_type", f"message type {_shown(kind)} not one of {list(allowed_types)}", seq)
    return message


def require(message: Mapping[str, Any], key: str) -> Any:
    if key not in message:
        raise ProtocolError("missing_field", f"{message.get('type')} message lacks {key!r}", _seq_of(message))
    return message[key]


def _seq_of(message: Mapping[str, Any]) -> int | None:
    """The message's ``seq`` when it is one (an integer in 0 .. :data:`MAX_SEQ`), for an error reply; else None."""
    seq = message.get("seq")
    return seq if type(seq) is int and 0 <= seq <= MAX_SEQ else None


def get_int(message: Mapping[str, Any], key: str, maximum: int = MAX_SEQ) -> int:
    """A required integer field in 0 .. ``maximum``."""
    value = require(message, key)
    if not isinstance(value, int) or isinstance(value, bool) or not 0 <= value <= maximum:
        raise ProtocolError(
            "bad_field", f"{key} must be an integer in 0 .. {maximum}, got {_shown(value)}", _seq_of(message)
        )
    return value


def _shown(value: object) -> str:
    """A value for an error message, cut short (a hostile peer's string is never echoed whole)."""
    text = repr(value)
    return text if len(text) <= 80 else text[:77] + "..."


def get_float(message: Mapping[str, Any], key: str) -> float:
    value = require(message, key)
    if not isinstance(value, (int, float)) or isinstance(value, bool):
        raise ProtocolError("bad_field", f"{key} must be a number, got {type(value).__name__}", _seq_of(message))
    value = float(value)
    if not math.isfinite(value):
        raise ProtocolError("non_finite", f"{key} is {value}", _seq_of(message))
    return value


def get_str(message: Mapping[str, Any], key: str) -> str:
    """A required string field of at most :data:`MAX_STRING` characters."""
    value = require(message, key)
    if not isinstance(value, str):
        raise ProtocolError("bad_field", f"{key} must be a string, got {type(value).__name__}", _seq_of(message))
    if len(value) > MAX_STRING:
        raise ProtocolError(
            "bad_field", f"{key} is {len(value)} characters long; at most {MAX_STRING}", _seq_of(message)
        )
    return value


def get_optional_str(message: Mapping[str, Any], key: str, default: str | None = None) -> str | None:
    """An optional string field (absent or nil: ``default``), bounded as :func:`get_str`."""
    return default if message.get(key) is None else get_str(message, key)


def get_bool(message: Mapping[str, Any], key: str, seq: int | None = None) -> bool:
    """An optional boolean field (absent: False)."""
    value = message.get(key, False)
    if not isinstance(value, bool):
        raise ProtocolError("bad_field", f"{key} must be a boolean, got {type(value).__name__}", seq)
    return value


def get_array(message: Mapping[str, Any], key: str, length: int, seq: int | None = None) -> Array:
    """A float array field of exactly ``length`` finite values."""
    return get_arrays(((message, key, length, ""),), seq)[0]


def get_arrays(fields: Sequence[tuple[Mapping[str, Any], str, int, str]], seq: int | None = None) -> list[Array]:
    """Float array fields, each (message, key, length, where: the map's name for errors, "" for the message's
    own fields, or ``objects['box'].``) of exactly ``length`` finite values:
    views of one writable float64 buffer (compiled kernels specialize on writability), read with one copy and
    one finiteness check for all of them (docs/benchmarks.md, "Measured choices in the code")."""
    parts, lengths = [], []
    for message, key, length, where in fields:
        value = message.get(key)
        if value is None:
            value = require(message, key)  # missing_field, or a nil value: bad_field below
        if type(value) is bytes or isinstance(value, bytearray):
            if len(value) != 8 * length:
                raise ProtocolError(
                    "bad_field", f"{where}{key} holds {len(value)} bytes, expected {8 * length} ({length} float64)", seq
                )
        elif isinstance(value, list):
            if len(value) != length:
                raise ProtocolError("bad_field", f"{where}{key} has {len(value)} values, expected {length}", seq)
            if not all(isinstance(x, (int, float)) and not isinstance(x, bool) for x in value):
                raise ProtocolError("bad_field", f"{where}{key} must hold only numbers", seq)
            value = f64(np.asarray(value, dtype=float))
        else:
            raise ProtocolError(
                "bad_field",
                f"{where}{key} must be float64 bytes or an array of numbers, got {type(value).__name__}",
                seq,
            )
        parts.append(value)
        lengths.append(length)
    values = np.frombuffer(bytearray().join(parts), dtype="<f8")  # a bytearray: writable, no further copy
    arrays, start = [], 0
    for length in lengths:
        arrays.append(values[start : start + length])
        start += length
    if not all_finite(values):  # compiled: numpy's isfinite().all() costs several times more per array
        for (_, key, _, where), array in zip(fields, arrays, strict=True):
            bad = np.flatnonzero(~np.isfinite(array))[:10].tolist()
            if bad:
                raise ProtocolError("non_finite", f"{where}{key} is not finite at indices {bad}", seq)
    return arrays


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
    truth : the wire's ``truth`` map as it came (a simulator's truth of the floating base), unchecked: it is for the
        log only, and whoever records it checks it off the tick (:func:`decode_truth`); optional.
    """

    seq: int
    state: RobotState
    last_rtt_us: float | None = None
    bridge_stopped: bool = False
    last_late: bool = False
    crossings: tuple[tuple[str, float, str], ...] = ()
    truth: Mapping[str, Any] | None = None


@dataclass(frozen=True, slots=True)
class Truth:
    """What a simulator knows of its robot and a robot does not (the wire's ``truth``): for the log only, to judge an
    estimate against; the daemon never acts on it (it is not part of :class:`RobotState`).

    q : (7,) base position (world, m) and orientation (x y z w, world ← base).  v : (6,) base linear and angular
    velocity, base frame (m/s, rad/s).  contact_forces : (k, 3) force on each contact sphere, world frame, N, or
    None.
    """

    q: Array
    v: Array
    contact_forces: Array | None = None


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


def decode_control(raw: bytes, shape: RobotShape, *, estimates: bool = True) -> StateMessage | dict[str, Any]:
    """Decode a control-channel message: a :class:`StateMessage`, or a ``hello`` map. ``estimates``: the receiver
    estimates the base from an ``imu`` (a state may then send the joints alone); False: a state must carry its base."""
    message = unpack(raw, ("state", "hello"))
    if message["type"] == "hello":
        get_str(message, "robot")
        for size in ("nq", "nv", "nu"):
            get_int(message, size, MAX_SIZE)
        clock = get_optional_str(message, "clock")
        if clock is not None and clock not in CLOCKS:
            raise ProtocolError("bad_field", f"clock must be one of {list(CLOCKS)}, got {_shown(clock)}")
        get_optional_str(message, "token")
        return message
    seq = get_int(message, "seq")
    t = get_float(message, "t")
    raw_imu = message.get("imu")
    joints_only = False
    if raw_imu is not None:  # the sensor form: an IMU, and q, qd either full or the joints alone
        if not isinstance(raw_imu, dict):
            raise ProtocolError(
                "bad_field", "imu must be a map with orientation_xyzw, angular_velocity and linear_acceleration", seq
            )
        if shape.nq != shape.nv + 1 or shape.nq < 7:
            raise ProtocolError("bad_field", "imu: only a floating-base robot's state carries an IMU", seq)
        joints_only = _length(message.get("q")) == shape.nq - 7
        if joints_only and not estimates:
            raise ProtocolError(
                "bad_field",
                f"q holds the joints alone ({shape.nq - 7} values) but this daemon has no "
                f"estimator (welcome.state_form is full): send the base too, q f64[{shape.nq}]",
                seq,
            )
    base_q, base_v = (7, 6) if joints_only else (0, 0)
    fields = [(message, "q", shape.nq - base_q, ""), (message, "qd", shape.nv - base_v, "")]
    sensed = message.get("contact_forces") is not None
    if sensed:
        fields.append((message, "contact_forces", 3 * len(shape.contact_names), ""))
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
            where = f"objects[{name!r}]."
            fields += [
                (pose, "position", 3, where),
                (pose, "orientation_xyzw", 4, where),  # ObjectState's order
                (pose, "linear_velocity", 3, where),
                (pose, "angular_velocity", 3, where),
            ]
    for name in shape.object_names:
        if raw_objects is None or name not in raw_objects:
            raise ProtocolError(
                "missing_field",
                f"objects lacks the movable body {name!r} (every state carries {list(shape.object_names)})",
                seq,
            )
    q, v, *rest = get_arrays(fields, seq)
    imu = None
    if raw_imu is not None:
        orientation, angular_velocity, linear_acceleration = (
            _sensor_array(raw_imu, key, n, seq)
            for key, n in (("orientation_xyzw", 4), ("angular_velocity", 3), ("linear_acceleration", 3))
        )
        imu_t = get_float(raw_imu, "t") if raw_imu.get("t") is not None else None
        imu = ImuReading(orientation, angular_velocity, linear_acceleration, imu_t)
        if joints_only:  # the base the sensor form leaves out: at the origin, level, at rest (the estimator's to fill)
            q, v = np.concatenate((NO_BASE_Q, q)), np.concatenate((NO_BASE_V, v))
    forces = rest.pop(0).reshape(-1, 3) if sensed else None
    objects: dict[str, ObjectState] = {}
    if raw_objects:
        for i, name in enumerate(raw_objects):
            objects[name] = ObjectState(*rest[4 * i : 4 * i + 4])
    rtt = message.get("last_rtt_us")
    if rtt is not None:
        rtt = get_float(message, "last_rtt_us")
        if rtt < 0.0:
            raise ProtocolError("bad_field", f"last_rtt_us is a duration, ≥ 0 µs; got {rtt}", seq)
    stopped, late = get_bool(message, "bridge_stopped", seq), get_bool(message, "last_late", seq)
    crossings = (
        _decode_crossings(message["crossings"], seq, shape.contact_names)
        if message.get("crossings") is not None
        else ()
    )
    truth = message.get("truth")  # for the log only: checked off the tick, by whoever records it (decode_truth)
    return StateMessage(seq, RobotState(q, v, t, objects, forces, imu=imu), rtt, stopped, late, crossings, truth)


def decode_truth(raw: object, contact_count: int) -> Truth:
    """A state's ``truth`` map (a simulator's, for the log) as a :class:`Truth`: ``q`` f64[7], ``qd`` f64[6],
    optionally ``contact_forces`` f64[3 contact_count], finite. Raises :class:`ProtocolError` (``bad_field``)."""
    if not isinstance(raw, dict):
        raise ProtocolError("bad_field", "truth must be a map with q, qd and optionally contact_forces")
    fields = [(raw, "q", 7, "truth."), (raw, "qd", 6, "truth.")]
    forces = raw.get("contact_forces") is not None
    if forces:
        fields.append((raw, "contact_forces", 3 * contact_count, "truth."))
    arrays = get_arrays(fields)
    return Truth(arrays[0], arrays[1], arrays[2].reshape(-1, 3) if forces else None)


#: The base part of a sensor-form state that sends the joints alone.
NO_BASE_Q = np.array([0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 1.0])
NO_BASE_V = np.zeros(6)


def _sensor_array(message: Mapping[str, Any], key: str, length: int, seq: int) -> Array:
    """A sensor's float array field (``imu.KEY``) of exactly ``length`` values, which may be non-finite: a sensor
    that fails is the estimator's to judge (the core stops safely and says so), not a malformed message."""
    value = message.get(key)
    if value is None:
        raise ProtocolError("missing_field", f"imu lacks {key}", seq)
    if type(value) is bytes or isinstance(value, bytearray):
        if len(value) != 8 * length:
            raise ProtocolError(
                "bad_field", f"imu.{key} holds {len(value)} bytes, expected {8 * length} ({length} float64)", seq
            )
        return np.frombuffer(value, dtype="<f8").astype(np.float64)
    if (
        isinstance(value, list)
        and len(value) == length
        and all(isinstance(x, (int, float)) and not isinstance(x, bool) for x in value)
    ):
        return np.asarray(value, dtype=np.float64)
    raise ProtocolError("bad_field", f"imu.{key} must be {length} float64 or an array of {length} numbers", seq)


def _length(value: Any) -> int | None:
    """How many float64 values an array field holds (None: not an array)."""
    if type(value) is bytes or isinstance(value, bytearray):
        return len(value) // 8
    return len(value) if isinstance(value, list) else None


#: At most this many crossings in one state (a step of a robot with 512 contact spheres, each touching down and
#: lifting off once).
MAX_CROSSINGS = 1024


def _decode_crossings(value: Any, seq: int, spheres: tuple[str, ...]) -> tuple[tuple[str, float, str], ...]:
    """The optional ``crossings`` map of a state: parallel ``label`` (str: ``sphere/touchdown`` or ``sphere/liftoff``,
    a sphere of ``spheres``), ``t`` (float) and ``how`` (str)."""
    if not isinstance(value, dict):
        raise ProtocolError("bad_field", "crossings must be a map with label, t and how", seq)
    labels, how = value.get("label"), value.get("how")
    if not isinstance(labels, list) or not isinstance(how, list) or len(labels) > MAX_CROSSINGS:
        raise ProtocolError(
            "bad_field", f"crossings.label and crossings.how must be arrays of at most {MAX_CROSSINGS} strings", seq
        )
    if len(how) != len(labels) or not all(isinstance(x, str) and len(x) <= 128 for x in labels + how):
        raise ProtocolError(
            "bad_field",
            "crossings.label and crossings.how must be as long as each other and hold "
            "strings of at most 128 characters",
            seq,
        )
    for label in labels:
        sphere, _, event = label.rpartition("/")
        if event not in ("touchdown", "liftoff") or sphere not in spheres:
            raise ProtocolError(
                "bad_field",
                f"crossings.label {label!r} is not sphere/touchdown or sphere/liftoff "
                "with a sphere of welcome.contact_names",
                seq,
            )
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
    imu: ImuReading | None = None,
    truth: Truth | None = None,
) -> bytes:
    """A ``state`` message; ``crossings``: (label, t s, how) of the step's contact events, in crossing order.
    ``imu``: the sensor form: the IMU's reading, and of ``q`` (nq,) and ``v`` (nv,) only the joints (q[7:], v[6:]).
    ``truth``: a simulator's truth of the base, for the log: a :class:`Truth`, or any state whose ``q`` and ``v``
    begin with the base's (a simulator's ``SimState``: its base part is sent)."""
    if imu is not None:
        q, v = q[7:], v[6:]
    message: dict[str, Any] = {"v": PROTOCOL_VERSION, "type": "state", "seq": seq, "t": t, "q": f64(q), "qd": f64(v)}
    if imu is not None:
        message["imu"] = {
            "orientation_xyzw": f64(imu.orientation_xyzw),
            "angular_velocity": f64(imu.angular_velocity),
            "linear_acceleration": f64(imu.linear_acceleration),
        }
        if imu.t is not None:
            message["imu"]["t"] = float(imu.t)
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
        message["crossings"] = {
            "label": [c[0] for c in crossings],
            "t": f64(np.array([c[1] for c in crossings])),
            "how": [c[2] for c in crossings],
        }
    if truth is not None:
        message["truth"] = {"q": f64(truth.q[:7]), "qd": f64(truth.v[:6])}
        if truth.contact_forces is not None:
            message["truth"]["contact_forces"] = f64(truth.contact_forces)
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


def decode_command(raw: bytes, nu: int) -> CommandMessage | None:
    """Decode the daemon's reply on the control channel (bridges use this): a command, or None for a
    ``welcome`` (the answer to a ``hello``); raises ProtocolError on ``error`` replies."""
    message = unpack(raw, ("command", "error", "welcome"))
    if message["type"] == "error":
        raise ProtocolError(str(message.get("code")), f"daemon: {message.get('message')}", _seq_of(message))
    if message["type"] == "welcome":
        return None
    seq = get_int(message, "seq")
    mode = get_str(message, "mode")
    if mode not in MODES:
        raise ProtocolError("bad_field", f"mode {mode!r} not one of {list(MODES)}", seq)
    return CommandMessage(seq, get_float(message, "t"), get_array(message, "tau", nu, seq), mode)


def encode_hello(robot: str, nq: int, nv: int, nu: int, clock: str = "realtime", token: str | None = None) -> bytes:
    """``clock``: "realtime" (a robot, or a simulator paced by the wall clock) or "lockstep"; ``token``: the
    daemon's credential (docs/protocol.md, "Authorization"; not needed with CURVE keys)."""
    message = {"v": PROTOCOL_VERSION, "type": "hello", "robot": robot, "nq": nq, "nv": nv, "nu": nu, "clock": clock}
    if token is not None:
        message["token"] = token
    return pack(message)


#: The forms of a state the daemon receives: the floating base's pose and twist in q and qd, or a robot's sensors
#: (the joints and an IMU; the daemon estimates the base).
STATE_FORMS = ("full", "sensors")


def encode_welcome(shape: RobotShape, dt: float, mode: str, state_form: str = "full", estimator: str = "none") -> bytes:
    """``state_form``: what the daemon expects (:data:`STATE_FORMS`); ``estimator``: the filter that estimates the
    base from the sensors (``"none"`` for the full form)."""
    return pack(
        {
            "v": PROTOCOL_VERSION,
            "type": "welcome",
            "robot": shape.robot,
            "nq": shape.nq,
            "nv": shape.nv,
            "nu": shape.nu,
            "joint_names": list(shape.joint_names),
            "contact_names": list(shape.contact_names),
            "object_names": list(shape.object_names),
            "dt": dt,
            "mode": mode,
            "state_form": state_form,
            "estimator": estimator,
        }
    )


def encode_error(code: str, message: str, seq: int | None = None) -> bytes:
    reply: dict[str, Any] = {"v": PROTOCOL_VERSION, "type": "error", "code": code, "message": message}
    if seq is not None:
        reply["seq"] = seq
    return pack(reply)


# ------------------------------------------------------------------------------------------------ admin channel
#: Admin requests and their fields (docs/protocol.md, "Admin channel").
ADMIN_REQUESTS = (
    "status",
    "stats",
    "start",
    "stop",
    "set_formulation",
    "set_gains",
    "set_reference",
    "reset_stats",
    "shutdown",
)


def encode_request(kind: str, **fields: Any) -> bytes:
    return pack({"v": PROTOCOL_VERSION, "type": kind, **fields})


#: The fields of each admin request besides ``v``, ``type`` and ``token`` (docs/protocol.md, "Admin channel").
REQUEST_FIELDS: dict[str, tuple[str, ...]] = {
    "status": (),
    "stats": (),
    "start": (),
    "reset_stats": (),
    "shutdown": (),
    "stop": ("reason",),
    "set_formulation": ("name", "options"),
    "set_gains": ("kp", "kd", "ki"),
    "set_reference": ("name", "options"),
}
#: The most entries an ``options`` map or an option's list may hold.
MAX_ITEMS = 64


@dataclass(slots=True)
class AdminRequest:
    """One decoded admin request; every field checked against the request's schema.

    kind : the request type.  token : the credential shown, if any.
    name : set_formulation / set_reference.  options : their option map (string keys; numbers, booleans,
        bounded strings, or lists and maps of those).  reason : stop.
    gains : set_gains' ``kp``, ``kd``, ``ki`` given, each a number or a float array (the protocol's f64 bytes
        or a msgpack array of numbers); finite.
    """

    kind: str
    token: str | None = None
    name: str | None = None
    options: dict[str, Any] = field(default_factory=dict)
    reason: str | None = None
    gains: dict[str, float | Array] = field(default_factory=dict)

    def logged(self) -> dict[str, Any]:
        """The request's fields as the log's event records them (no credential)."""
        out: dict[str, Any] = {}
        if self.name is not None:
            out["name"] = self.name
        if self.options:
            out["options"] = self.options
        if self.reason is not None:
            out["reason"] = self.reason
        out.update({k: v if isinstance(v, float) else v.tolist() for k, v in self.gains.items()})
        return out


def decode_request(raw: bytes) -> AdminRequest:
    """Decode and check an admin request: unknown fields, wrong types, oversized strings or maps, non-finite
    gains are ``bad_field`` errors naming the field and what was expected."""
    message = unpack(raw, ADMIN_REQUESTS)
    kind = message["type"]
    allowed = REQUEST_FIELDS[kind]
    unknown = sorted(set(message) - {"v", "type", "token", *allowed})
    if unknown:
        raise ProtocolError(
            "bad_field",
            f"{kind} takes no field(s) {[_shown(k) for k in unknown]}; its fields: {list(allowed) or 'none'} and token",
        )
    request = AdminRequest(kind, token=get_optional_str(message, "token"))
    if "name" in allowed:
        request.name = get_str(message, "name")
        request.options = _options(message.get("options"))
    if kind == "stop":
        request.reason = get_optional_str(message, "reason")
    if kind == "set_gains":
        for key in allowed:
            if message.get(key) is not None:
                request.gains[key] = _gain(message[key], key)
    return request


def _options(value: Any) -> dict[str, Any]:
    """An ``options`` map: string keys; numbers, booleans, bounded strings, lists or maps of those."""
    if value is None:
        return {}
    if not isinstance(value, dict):
        raise ProtocolError("bad_field", f"options must be a map, got {type(value).__name__}")
    if len(value) > MAX_ITEMS:
        raise ProtocolError("bad_field", f"options holds {len(value)} entries; at most {MAX_ITEMS}")
    for key, item in value.items():
        if not isinstance(key, str) or len(key) > MAX_STRING:
            raise ProtocolError("bad_field", f"option names must be strings of at most {MAX_STRING} characters")
        _check_option_value(item, f"options[{key!r}]", depth=0)
    return dict(value)


def _check_option_value(value: Any, where: str, depth: int) -> None:
    if value is None or isinstance(value, (bool, int, float)):
        if isinstance(value, float) and not math.isfinite(value):  # the doc: every accepted float is finite
            raise ProtocolError("non_finite", f"{where} is {value}")
        return
    if isinstance(value, str):
        if len(value) > MAX_STRING:
            raise ProtocolError("bad_field", f"{where} is {len(value)} characters long; at most {MAX_STRING}")
        return
    if isinstance(value, (list, dict)) and depth < 2:
        if len(value) > MAX_ITEMS:
            raise ProtocolError("bad_field", f"{where} holds {len(value)} items; at most {MAX_ITEMS}")
        items = value.items() if isinstance(value, dict) else enumerate(value)
        for k, item in items:
            if isinstance(value, dict) and not isinstance(k, str):
                raise ProtocolError("bad_field", f"{where} must have string keys")
            _check_option_value(item, f"{where}[{k!r}]", depth + 1)
        return
    raise ProtocolError(
        "bad_field", f"{where} must be a number, boolean, string, or a list or map of those; got {type(value).__name__}"
    )


def _gain(value: Any, key: str) -> float | Array:
    """One set_gains field: a finite number, or a finite float array (f64 bytes or a msgpack array)."""
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        if not math.isfinite(value):
            raise ProtocolError("non_finite", f"{key} is {value}")
        return float(value)
    if isinstance(value, (bytes, bytearray)):
        if len(value) % 8 or len(value) > 8 * MAX_ITEMS:
            raise ProtocolError(
                "bad_field", f"{key} holds {len(value)} bytes: not a float64 array of at most {MAX_ITEMS} values"
            )
        return get_array({key: value}, key, len(value) // 8)
    if isinstance(value, list):
        if len(value) > MAX_ITEMS:
            raise ProtocolError("bad_field", f"{key} has {len(value)} values; at most {MAX_ITEMS}")
        return get_array({key: value}, key, len(value))
    raise ProtocolError(
        "bad_field",
        f"{key} must be a number or a float array (f64 bytes or an array of numbers), got {type(value).__name__}",
    )


def encode_reply(request: str, **data: Any) -> bytes:
    return pack({"v": PROTOCOL_VERSION, "type": "ok", "request": request, **data})


def decode_reply(raw: bytes) -> dict[str, Any]:
    """An admin reply as a map; raises :class:`ProtocolError` for an ``error`` reply."""
    message = unpack(raw, ("ok", "error"))
    if message["type"] == "error":
        raise ProtocolError(str(message.get("code")), str(message.get("message")))
    return message


# -------------------------------------------------------------------------------------------- reference stream
class ReferenceMessage(NamedTuple):
    """A ``reference`` message from the user's planner: joint targets, each (nu,), and the credential shown."""

    q_ref: Array  # rad (m for prismatic joints)
    qd_ref: Array  # rad/s
    qdd_ref: Array  # rad/s²
    token: str | None  # the daemon's credential (docs/protocol.md, "Authorization"); None when absent


def decode_reference(raw: bytes, nu: int) -> ReferenceMessage:
    """Decode a ``reference`` message; its ``token`` is the caller's to check."""
    message = unpack(raw, ("reference",))
    q_ref, qd_ref, qdd_ref = get_arrays([(message, "q", nu, ""), (message, "qd", nu, ""), (message, "qdd", nu, "")])
    token = message.get("token")
    return ReferenceMessage(q_ref, qd_ref, qdd_ref, token if isinstance(token, str) else None)


def encode_reference(q_ref: Array, qd_ref: Array, qdd_ref: Array, t: float = 0.0, token: str | None = None) -> bytes:
    """A ``reference`` message (each array (nu,)); ``token``: the daemon's credential (not needed with CURVE)."""
    message = {
        "v": PROTOCOL_VERSION,
        "type": "reference",
        "t": t,
        "q": f64(q_ref),
        "qd": f64(qd_ref),
        "qdd": f64(qdd_ref),
    }
    if token is not None:
        message["token"] = token
    return pack(message)
