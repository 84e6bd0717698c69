"""A tick in the form cheapest for the daemon to log, and its tick record rebuilt from it by the log writer.

While no telemetry subscriber listens, the daemon does not build the tick record (:data:`schema.TICK_FIELDS
<idcontrol.logs.schema.TICK_FIELDS>`, a map of about forty fields) for the log alone. It hands the log writer
the state message exactly as it arrived and what the tick computed, as one msgpack array of scalars, strings and
float64 bytes (:func:`pack_snapshot`); the writer process takes the state's fields from that message (the daemon
decoded and accepted it) and assembles the very record the daemon would have published
(:func:`record_from_snapshot`); the tests hold the two equal, byte for byte, on recorded trots and grasps. The
daemon's work after the send keeps only what the record holds that only the daemon knows (the contact-coupling
diagnostic, the reference's telemetry, the forces in the world frame, the contacts' labels) and the copy into
the ring.

A snapshot is a msgpack array (the ring's other records, events and the end, are maps):
``[raw_state, now, compute_us, mode, formulation, tau, clipped, note, log_dropped, run, solved, estimate]`` where
``run`` is nil outside run mode or ``[q_ref, qd_ref, qdd_des, reference]``, ``solved`` is nil without a solve or
the values of :data:`~idcontrol.logs.schema.SOLVED_FIELDS` and then ``coupling``, nil or the values of
:data:`~idcontrol.logs.schema.COUPLING_FIELDS`, and ``estimate`` is nil when the estimator did not run or the values
of :data:`~idcontrol.logs.schema.ESTIMATE_FIELDS` (its stance as one byte per sphere); arrays are little-endian
float64 bytes. The values are those of :func:`~idcontrol.logs.schema.target_values`,
:func:`~idcontrol.logs.schema.solved_values` and :func:`~idcontrol.logs.schema.estimate_values`, which the
daemon's own record takes too. The simulator's truth, when the bridge sent it, is the state message's own
(``truth``).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import msgpack
import numpy as np

from idcontrol import protocol as wire
from idcontrol.errors import LogError, ProtocolError
from idcontrol.logs.schema import (
    COUPLING_FIELDS,
    ESTIMATE_FIELDS,
    OBJECT_KEYS,
    SOLVED_ARRAYS,
    SOLVED_FIELDS,
    TARGET_FIELDS,
    estimate_values,
    f64_bytes,
    solved_values,
    target_values,
)

if TYPE_CHECKING:
    from idcontrol.control.core import Command

_SNAPSHOT_LENGTH = 12
_NO_BASE_Q = wire.f64(wire.NO_BASE_Q)
_NO_BASE_V = wire.f64(wire.NO_BASE_V)


def pack_snapshot(
    raw_state: bytes,
    command: Command,
    *,
    compute_us: float,
    now: float,
    contact_labels: list[str] | None,
    coupling: tuple[float, float, bool] | None,
    log_dropped: int,
) -> bytes:
    """The snapshot of the tick that answered ``raw_state`` (the state message's bytes, as received) with
    ``command``; the other arguments as for :func:`schema.tick_record <idcontrol.logs.schema.tick_record>`."""
    run = solved = None
    if command.target is not None:
        run = [*map(f64_bytes, target_values(command)), command.reference]
    if command.result is not None and command.contacts is not None:
        solved = solved_values(command, contact_labels)  # a new list: its arrays become bytes in place
        solved[-SOLVED_ARRAYS:] = map(f64_bytes, solved[-SOLVED_ARRAYS:])
        solved.append(coupling)
    estimate = None
    if command.estimate is not None:
        q, v, block, stance, status = estimate_values(command.estimate)
        estimate = [f64_bytes(q), f64_bytes(v), f64_bytes(block), stance.tobytes(), status]
    return wire.pack(
        [
            raw_state,
            now,
            compute_us,
            command.mode,
            command.formulation,
            f64_bytes(command.tau),
            command.clipped,
            command.note,
            log_dropped,
            run,
            solved,
            estimate,
        ]
    )


def _f64(value: bytes | bytearray | list[float]) -> bytes:
    """A float field of a state the daemon accepted, as float64 bytes (the bridge may send bytes or numbers)."""
    return bytes(value) if isinstance(value, (bytes, bytearray)) else wire.f64(np.asarray(value, dtype=float))


def record_from_snapshot(
    snapshot: list[Any], contact_count: int = 0, bad_truth: Callable[[str], None] | None = None
) -> dict[str, Any]:
    """The wire tick record (arrays as float64 bytes, envelope ``v`` and ``type`` included) the daemon would have
    published for the tick of ``snapshot``. The state in it was decoded and accepted by the daemon, so its fields
    are taken as they are, but for the simulator's ``truth``, which the daemon does not check in the tick: checked
    here for a robot of ``contact_count`` contact spheres (:func:`protocol.decode_truth
    <idcontrol.protocol.decode_truth>`); a malformed one is left out and said to ``bad_truth``, as the daemon's
    own record does. Raises :class:`LogError` for a snapshot that is not one."""
    if len(snapshot) != _SNAPSHOT_LENGTH:
        raise LogError(f"a tick snapshot has {_SNAPSHOT_LENGTH} items, this one {len(snapshot)}")
    try:
        return _record(snapshot, contact_count, bad_truth)
    except (KeyError, TypeError, ValueError, AttributeError, msgpack.UnpackException) as e:
        raise LogError(f"the snapshot does not hold a tick the daemon answered ({type(e).__name__}: {e})") from None


def _record(snapshot: list[Any], contact_count: int, bad_truth: Callable[[str], None] | None) -> dict[str, Any]:
    raw_state, now, compute_us, mode, formulation, tau, clipped, note, log_dropped, run, solved, estimate = snapshot
    state = msgpack.unpackb(raw_state, raw=False)
    if state["type"] != "state":
        raise ValueError(f"its message is a {state['type']!r}, not a state")
    rtt = state.get("last_rtt_us")
    q, qd = _f64(state["q"]), _f64(state["qd"])
    if state.get("imu") is not None and len(q) == len(qd):  # the sensor form's joints alone (nq - 7 = nv - 6): the
        q, qd = _NO_BASE_Q + q, _NO_BASE_V + qd  # base as the daemon decoded it (protocol.decode_control)
    record: dict[str, Any] = {
        "seq": state["seq"],
        "t": float(state["t"]),
        "now": now,
        "mode": mode,
        "formulation": formulation,
        "q": q,
        "qd": qd,
        "tau": tau,
        "compute_us": compute_us,
        "clipped": clipped,
        "note": note,
        "bridge_stopped": bool(state.get("bridge_stopped")),
        "last_late": bool(state.get("last_late")),
        "last_rtt_us": None if rtt is None else float(rtt),
    }
    objects = state.get("objects")
    if objects:
        record["objects"] = {name: {key: _f64(pose[key]) for key in OBJECT_KEYS} for name, pose in objects.items()}
    forces = state.get("contact_forces")
    if forces is not None:
        record["sensed_forces"] = _f64(forces)
    crossings = state.get("crossings")
    if crossings is not None and crossings["label"]:
        times = np.frombuffer(_f64(crossings["t"]), dtype="<f8").tolist()
        record["crossings"] = {"label": crossings["label"], "t": times, "how": crossings["how"]}
    if run is not None:
        *targets, reference = run
        record.update(zip(TARGET_FIELDS, targets, strict=True))
        if reference:
            record["reference"] = reference
    if solved is not None:
        *values, coupling = solved
        record.update(zip(SOLVED_FIELDS, values, strict=True))
        if coupling is not None:
            record.update(zip(COUPLING_FIELDS, coupling, strict=True))
    if estimate is not None:
        q, v, block, stance, status = estimate
        stance = np.frombuffer(stance, dtype=np.bool_).astype("<f8").tobytes()
        record.update(zip(ESTIMATE_FIELDS, (q, v, block, stance, status), strict=True))
    raw_truth = state.get("truth")
    if raw_truth is not None:
        try:
            truth = wire.decode_truth(raw_truth, contact_count)
        except ProtocolError as e:
            if bad_truth is not None:
                bad_truth(f"the state's truth is left out of the record: {e}")
        else:
            record["truth_q"], record["truth_qd"] = f64_bytes(truth.q), f64_bytes(truth.v)
            if truth.contact_forces is not None:
                record["truth_contact_forces"] = f64_bytes(truth.contact_forces)
    record["v"], record["type"], record["log_dropped"] = wire.PROTOCOL_VERSION, "telemetry", log_dropped
    return record
