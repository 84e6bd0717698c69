"""The wire codec (idcontrol.protocol) against docs/protocol.md, without sockets."""

from __future__ import annotations

import math

import msgpack
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from idcontrol import protocol as wire
from idcontrol.contacts.world import ObjectState
from idcontrol.errors import ProtocolError

SHAPE = wire.RobotShape(
    "quadruped",
    nq=19,
    nv=18,
    joint_names=tuple(f"j{i}" for i in range(12)),
    contact_names=("LF", "RF", "LH", "RH"),
    object_names=("box",),
)


BOX = ObjectState(np.array([0.3, 0.0, 0.1]), np.array([0.0, 0.0, 0.0, 1.0]))


def encode_state(**overrides) -> bytes:
    q = np.r_[0, 0, 0.16, 0, 0, 0, 1, np.zeros(12)]
    raw = msgpack.unpackb(wire.encode_state(7, 0.25, q, np.arange(18.0), objects={"box": BOX}), raw=False)
    raw.update(overrides)
    for key in [k for k, v in overrides.items() if v is ...]:
        del raw[key]
    return msgpack.packb(raw, use_bin_type=True)


def code_of(raw: bytes) -> str:
    with pytest.raises(ProtocolError) as e:
        wire.decode_control(raw, SHAPE)
    return e.value.code


def test_state_round_trip_keeps_every_field_bit_exact():
    """A state encoded by the bridge side decodes to the same numbers, objects and forces."""
    rng = np.random.default_rng(0)
    q, v, f = rng.normal(size=19), rng.normal(size=18), rng.normal(size=(4, 3))
    box = ObjectState(rng.normal(size=3), np.array([0, 0, 0, 1.0]), rng.normal(size=3), rng.normal(size=3))
    raw = wire.encode_state(42, 1.5, q, v, f, {"box": box}, last_rtt_us=123.5)
    msg = wire.decode_control(raw, SHAPE)
    assert isinstance(msg, wire.StateMessage)
    assert (msg.seq, msg.state.t, msg.last_rtt_us, msg.last_late, msg.bridge_stopped) == (42, 1.5, 123.5, False, False)
    late = wire.decode_control(
        wire.encode_state(43, 1.501, q, v, objects={"box": box}, last_late=True, bridge_stopped=True), SHAPE
    )
    assert (late.last_late, late.bridge_stopped, late.last_rtt_us) == (True, True, None)
    np.testing.assert_array_equal(msg.state.q, q)
    np.testing.assert_array_equal(msg.state.v, v)
    np.testing.assert_array_equal(msg.state.sensed_forces, f)
    np.testing.assert_array_equal(msg.state.objects["box"].position, box.position)
    np.testing.assert_array_equal(msg.state.objects["box"].angular_velocity, box.angular_velocity)


def test_arrays_may_also_be_msgpack_lists_of_numbers():
    """Drivers without a byte-packing helper may send plain arrays; integers count as numbers."""
    raw = encode_state(q=[0, 0, 0.16, 0, 0, 0, 1] + [0] * 12, qd=[0.0] * 18)
    msg = wire.decode_control(raw, SHAPE)
    assert msg.state.q[2] == 0.16 and msg.state.q.dtype == np.float64


def test_decoded_arrays_are_writable_contiguous_float64_and_share_no_memory_with_the_message():
    """Every float field of a state decodes to a writable, C-contiguous float64 array of its own values (the
    compiled kernels specialize on that), also when bytes and plain arrays mix; writing one changes no other."""
    raw = encode_state(qd=[float(i) for i in range(18)], contact_forces=wire.f64(np.ones(12)))
    msg = wire.decode_control(raw, SHAPE)
    box = msg.state.objects["box"]
    arrays = [
        msg.state.q,
        msg.state.v,
        msg.state.sensed_forces,
        box.position,
        box.orientation_xyzw,
        box.linear_velocity,
        box.angular_velocity,
    ]
    for array in arrays:
        assert array.dtype == np.float64 and array.flags.writeable and array.flags.c_contiguous
    before = [a.copy() for a in arrays]
    for array in arrays:
        array += 100.0
    for array, old in zip(arrays, before, strict=True):
        np.testing.assert_array_equal(array, old + 100.0)  # each field moved by 100 once: none overlaps another
    np.testing.assert_array_equal(msg.state.v, np.arange(18.0) + 100.0)


@pytest.mark.parametrize("field", ["position", "orientation_xyzw", "linear_velocity", "angular_velocity"])
def test_a_non_finite_object_field_is_named_with_its_body_and_index(field):
    pose = {
        k: wire.f64(v)
        for k, v in (
            ("position", BOX.position),
            ("orientation_xyzw", BOX.orientation_xyzw),
            ("linear_velocity", np.zeros(3)),
            ("angular_velocity", np.zeros(3)),
        )
    }
    bad = np.frombuffer(pose[field], "<f8").copy()
    bad[2] = np.nan
    pose[field] = wire.f64(bad)
    with pytest.raises(ProtocolError, match=rf"objects\['box'\]\.{field} is not finite at indices \[2\]") as e:
        wire.decode_control(encode_state(objects={"box": pose}), SHAPE)
    assert (e.value.code, e.value.seq) == ("non_finite", 7)


def test_arrays_are_little_endian_float64_bytes():
    """The documented encoding: 8 bytes per value, little-endian IEEE-754."""
    assert wire.f64(np.array([1.0, -2.5])) == b"\x00\x00\x00\x00\x00\x00\xf0?\x00\x00\x00\x00\x00\x00\x04\xc0"


def test_command_round_trip():
    raw = wire.encode_command(9, 0.5, np.arange(12.0), wire.MODE_RUN)
    cmd = wire.decode_command(raw, 12)
    assert (cmd.seq, cmd.t, cmd.mode) == (9, 0.5, "run")
    np.testing.assert_array_equal(cmd.tau, np.arange(12.0))


@pytest.mark.parametrize(
    ("raw", "code"),
    [
        (b"\xc1", "malformed"),  # a byte msgpack never uses
        (msgpack.packb([1, 2, 3]), "malformed"),
        (msgpack.packb({1: 2}), "malformed"),  # non-string key
        (msgpack.packb({"type": "state"}), "bad_version"),
        (msgpack.packb({"v": 2, "type": "state"}), "bad_version"),
        (msgpack.packb({"v": 1, "type": "telemetry"}), "unknown_type"),
        (msgpack.packb({"v": 1}), "unknown_type"),
        (b"\x00" * (wire.MAX_MESSAGE_BYTES + 1), "too_large"),
    ],
)
def test_envelope_errors_have_their_codes(raw, code):
    """Each envelope violation maps to the documented error code."""
    assert code_of(raw) == code


@pytest.mark.parametrize(
    ("overrides", "code"),
    [
        ({"seq": ...}, "missing_field"),
        ({"q": ...}, "missing_field"),
        ({"seq": -1}, "bad_field"),
        ({"seq": "7"}, "bad_field"),
        ({"seq": True}, "bad_field"),
        ({"t": "now"}, "bad_field"),
        ({"t": math.nan}, "non_finite"),
        ({"q": b"\x00" * 8}, "bad_field"),  # one value instead of 19
        ({"q": [0.0] * 18}, "bad_field"),
        ({"q": "abc"}, "bad_field"),
        ({"q": [0.0] * 18 + ["x"]}, "bad_field"),
        ({"q": wire.f64(np.full(19, np.inf))}, "non_finite"),
        ({"contact_forces": wire.f64(np.zeros(11))}, "bad_field"),
        ({"contact_forces": wire.f64(np.full(12, np.nan))}, "non_finite"),
        ({"objects": [1]}, "bad_field"),
        ({"objects": {"ball": {}}}, "bad_field"),
        ({"objects": {"box": {"position": wire.f64(np.zeros(3))}}}, "missing_field"),
        ({"objects": ...}, "missing_field"),  # the world has a movable body: every state carries its pose
        ({"objects": {}}, "missing_field"),
        ({"last_rtt_us": -5.0}, "bad_field"),
        ({"last_rtt_us": "fast"}, "bad_field"),
        ({"last_late": 1}, "bad_field"),
        ({"bridge_stopped": "yes"}, "bad_field"),
    ],
)
def test_state_field_errors_have_their_codes(overrides, code):
    """Each field violation of a state maps to the documented error code, with the seq when readable."""
    assert code_of(encode_state(**overrides)) == code


def test_error_carries_the_seq_of_the_offending_state():
    with pytest.raises(ProtocolError) as e:
        wire.decode_control(encode_state(q=b""), SHAPE)
    assert e.value.seq == 7


def test_every_error_code_is_documented():
    """The codes the implementation can emit are exactly those of docs/protocol.md."""
    from pathlib import Path

    doc = (Path(__file__).resolve().parents[1] / "docs" / "protocol.md").read_text()
    for code in wire.ERROR_CODES:
        assert f"| `{code}` |" in doc, code


@settings(max_examples=300, deadline=None)
@given(st.binary(max_size=256))
def test_arbitrary_bytes_never_raise_anything_but_protocol_errors(raw):
    """Fuzz: random bytes decode or raise ProtocolError, never another exception."""
    try:
        wire.decode_control(raw, SHAPE)
    except ProtocolError:
        pass


json_like = st.recursive(
    st.none()
    | st.booleans()
    | st.integers(-(2**63), 2**64 - 1)
    | st.floats()
    | st.text(max_size=8)
    | st.binary(max_size=200),
    lambda children: st.lists(children, max_size=20) | st.dictionaries(st.text(max_size=8), children, max_size=8),
    max_leaves=30,
)


@settings(max_examples=300, deadline=None)
@given(
    st.dictionaries(
        st.sampled_from(["v", "type", "seq", "t", "q", "qd", "contact_forces", "objects", "x"]), json_like, max_size=8
    )
)
def test_structured_garbage_never_raises_anything_but_protocol_errors(fields):
    """Fuzz: maps with the right keys and wrong values are refused with a ProtocolError."""
    fields.setdefault("v", 1)
    fields.setdefault("type", "state")
    try:
        wire.decode_control(msgpack.packb(fields, use_bin_type=True), SHAPE)
    except ProtocolError:
        pass


def hello(**overrides) -> bytes:
    raw = msgpack.unpackb(wire.encode_hello("quadruped", 19, 18, 12, "lockstep", "t" * 64), raw=False)
    raw.update(overrides)
    for key in [k for k, v in overrides.items() if v is ...]:
        del raw[key]
    return msgpack.packb(raw, use_bin_type=True)


@pytest.mark.parametrize(
    ("overrides", "code"),
    [
        ({"v": True}, "bad_version"),  # the version is the integer 1
        ({"v": 1.0}, "bad_version"),
        ({"nq": ...}, "missing_field"),
        ({"nq": 19.0}, "bad_field"),
        ({"nu": "12"}, "bad_field"),
        ({"nv": -18}, "bad_field"),
        ({"clock": "LOCKSTEP"}, "bad_field"),  # a typo must not silently give the real-time watchdog
        ({"clock": "bogus"}, "bad_field"),
        ({"clock": 1}, "bad_field"),
        ({"robot": ...}, "missing_field"),
    ],
)
def test_hello_field_errors_have_their_codes(overrides, code):
    """A hello's sizes are integers, its clock one of the two the document names, its version the integer 1."""
    assert code_of(hello(**overrides)) == code


def test_a_hello_with_the_documented_fields_decodes():
    for clock in (..., None, "realtime", "lockstep"):
        message = wire.decode_control(hello(clock=clock), SHAPE)
        assert message["robot"] == "quadruped" and (message["nq"], message["nv"], message["nu"]) == (19, 18, 12)


@pytest.mark.parametrize("seq", [-1, -(2**63), 1.5, True])
def test_an_error_reply_carries_seq_only_when_it_is_a_uint64(seq):
    """An error reply's seq is the offending state's own only when that is a valid seq (a uint64)."""
    with pytest.raises(ProtocolError) as e:
        wire.decode_control(encode_state(seq=seq), SHAPE)
    assert e.value.code == "bad_field" and e.value.seq is None


def test_json_text_has_no_nan_or_infinity():
    """Statistics without samples are NaN: the tools' JSON writes them as null, which strict parsers read."""
    import json

    from idcontrol import jsontext

    value = {"p50": math.nan, "max": math.inf, "rows": [1.0, -math.inf, np.float64("nan"), (2, "x")], "n": 3}
    text = jsontext.dumps(value, indent=1)
    assert json.loads(text, parse_constant=lambda name: pytest.fail(f"{name} in JSON")) == {
        "p50": None,
        "max": None,
        "rows": [1.0, None, None, [2, "x"]],
        "n": 3,
    }
