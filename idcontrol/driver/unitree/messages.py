"""Unitree's low-level messages as bytes: their CDR layout on the wire, their C layout for the CRC.

The low-level messages (``LowCmd_``, ``LowState_``, of ``unitree_go`` for Go2/B2-class quadrupeds and of
``unitree_hg`` for the humanoids) are final DDS structs of fixed size. Serializing one through the SDK's generated
Python class costs about 0.45 ms (a ``LowCmd_``, measured with cyclonedds 11), half of a 1 kHz period; here a message
is one preallocated buffer whose fields are numpy views, encoded and decoded in microseconds. The tests check every
layout byte for byte against the SDK's own ``serialize`` and its CRC helper.

Two layouts of one field list:

* **CDR** (XCDR1, little-endian): a 4-byte encapsulation header, then each primitive aligned to its own size from
  the start of the payload, with no padding at the end of a nested struct: what DDS carries;
* **C** (natural alignment, structs aligned and padded to their widest member): what the robot's firmware computes
  its CRC over: CRC-32 (polynomial 0x04C11DB7, initial value 0xFFFFFFFF, no reflection, no final xor) fed the
  struct's little-endian 32-bit words, most significant bit first, all but the last word (the ``crc`` itself).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Union

import numpy as np
from numba import njit
from numpy.typing import NDArray

from idcontrol.errors import InputError

#: a field's type: a primitive (numpy code), an array of primitives, a struct, or an array of structs
FieldType = Union[str, tuple[str, int], "Spec", tuple["Spec", int]]
Spec = tuple[tuple[str, FieldType], ...]

#: XCDR1, little-endian, no options: the encapsulation header of every sample
CDR_HEADER = b"\x00\x01\x00\x00"

_SIZE = {"u1": 1, "i1": 1, "u2": 2, "i2": 2, "u4": 4, "i4": 4, "f4": 4}

# ------------------------------------------------------------------------------------------- unitree_go (Go2, B2)
GO_MOTOR_CMD: Spec = (
    ("mode", "u1"),
    ("q", "f4"),
    ("dq", "f4"),
    ("tau", "f4"),
    ("kp", "f4"),
    ("kd", "f4"),
    ("reserve", ("u4", 3)),
)
GO_BMS_CMD: Spec = (("off", "u1"), ("reserve", ("u1", 3)))
GO_LOW_CMD: Spec = (
    ("head", ("u1", 2)),
    ("level_flag", "u1"),
    ("frame_reserve", "u1"),
    ("sn", ("u4", 2)),
    ("version", ("u4", 2)),
    ("bandwidth", "u2"),
    ("motor_cmd", (GO_MOTOR_CMD, 20)),
    ("bms_cmd", GO_BMS_CMD),
    ("wireless_remote", ("u1", 40)),
    ("led", ("u1", 12)),
    ("fan", ("u1", 2)),
    ("gpio", "u1"),
    ("reserve", "u4"),
    ("crc", "u4"),
)
GO_IMU: Spec = (
    ("quaternion", ("f4", 4)),
    ("gyroscope", ("f4", 3)),
    ("accelerometer", ("f4", 3)),
    ("rpy", ("f4", 3)),
    ("temperature", "u1"),
)
GO_MOTOR_STATE: Spec = (
    ("mode", "u1"),
    ("q", "f4"),
    ("dq", "f4"),
    ("ddq", "f4"),
    ("tau_est", "f4"),
    ("q_raw", "f4"),
    ("dq_raw", "f4"),
    ("ddq_raw", "f4"),
    ("temperature", "u1"),
    ("lost", "u4"),
    ("reserve", ("u4", 2)),
)
GO_BMS_STATE: Spec = (
    ("version_high", "u1"),
    ("version_low", "u1"),
    ("status", "u1"),
    ("soc", "u1"),
    ("current", "i4"),
    ("cycle", "u2"),
    ("bq_ntc", ("u1", 2)),
    ("mcu_ntc", ("u1", 2)),
    ("cell_vol", ("u2", 15)),
)
GO_LOW_STATE: Spec = (
    ("head", ("u1", 2)),
    ("level_flag", "u1"),
    ("frame_reserve", "u1"),
    ("sn", ("u4", 2)),
    ("version", ("u4", 2)),
    ("bandwidth", "u2"),
    ("imu_state", GO_IMU),
    ("motor_state", (GO_MOTOR_STATE, 20)),
    ("bms_state", GO_BMS_STATE),
    ("foot_force", ("i2", 4)),
    ("foot_force_est", ("i2", 4)),
    ("tick", "u4"),
    ("wireless_remote", ("u1", 40)),
    ("bit_flag", "u1"),
    ("adc_reel", "f4"),
    ("temperature_ntc1", "u1"),
    ("temperature_ntc2", "u1"),
    ("power_v", "f4"),
    ("power_a", "f4"),
    ("fan_frequency", ("u2", 4)),
    ("reserve", "u4"),
    ("crc", "u4"),
)

# ------------------------------------------------------------------------------------------- unitree_hg (humanoids)
HG_MOTOR_CMD: Spec = (
    ("mode", "u1"),
    ("q", "f4"),
    ("dq", "f4"),
    ("tau", "f4"),
    ("kp", "f4"),
    ("kd", "f4"),
    ("reserve", "u4"),
)
HG_LOW_CMD: Spec = (
    ("mode_pr", "u1"),
    ("mode_machine", "u1"),
    ("motor_cmd", (HG_MOTOR_CMD, 35)),
    ("reserve", ("u4", 4)),
    ("crc", "u4"),
)
HG_IMU: Spec = (
    ("quaternion", ("f4", 4)),
    ("gyroscope", ("f4", 3)),
    ("accelerometer", ("f4", 3)),
    ("rpy", ("f4", 3)),
    ("temperature", "i2"),
)
HG_MOTOR_STATE: Spec = (
    ("mode", "u1"),
    ("q", "f4"),
    ("dq", "f4"),
    ("ddq", "f4"),
    ("tau_est", "f4"),
    ("temperature", ("i2", 2)),
    ("vol", "f4"),
    ("sensor", ("u4", 2)),
    ("motorstate", "u4"),
    ("reserve", ("u4", 4)),
)
HG_LOW_STATE: Spec = (
    ("version", ("u4", 2)),
    ("mode_pr", "u1"),
    ("mode_machine", "u1"),
    ("tick", "u4"),
    ("imu_state", HG_IMU),
    ("motor_state", (HG_MOTOR_STATE, 35)),
    ("wireless_remote", ("u1", 40)),
    ("reserve", ("u4", 4)),
    ("crc", "u4"),
)


@dataclass(frozen=True)
class Primitive:
    """One primitive (or array of primitives) of a message: numpy code, count, byte offsets."""

    code: str
    count: int
    cdr_offset: int  # from the start of the CDR payload (after the header)
    c_offset: int  # in the C struct


def _is_struct(t: object) -> bool:
    """Whether ``t`` is a struct's field list (not an array of primitives or of structs)."""
    return isinstance(t, tuple) and all(isinstance(f, tuple) and len(f) == 2 and isinstance(f[0], str) for f in t)


def _c_alignment(spec: Spec) -> int:
    best = 1
    for _, t in spec:
        if isinstance(t, str):
            best = max(best, _SIZE[t])
        elif _is_struct(t):
            best = max(best, _c_alignment(t))  # type: ignore[arg-type]
        elif _is_struct(t[0]):
            best = max(best, _c_alignment(t[0]))  # type: ignore[arg-type]
        else:
            best = max(best, _SIZE[t[0]])  # type: ignore[index]
    return best


def _align(offset: int, alignment: int) -> int:
    return (offset + alignment - 1) // alignment * alignment


def _flatten(spec: Spec, prefix: str, cdr: int, c: int, out: dict[str, Primitive]) -> tuple[int, int]:
    """Lay ``spec`` out from offsets ``cdr`` and ``c``; record each primitive under its dotted path."""
    c = _align(c, _c_alignment(spec))
    c_start = c
    for name, t in spec:
        path = f"{prefix}{name}"
        if isinstance(t, str):
            n, code = 1, t
        elif _is_struct(t):
            cdr, c = _flatten(t, path + ".", cdr, c, out)  # type: ignore[arg-type]
            continue
        elif _is_struct(t[0]):
            for i in range(t[1]):  # type: ignore[misc]
                cdr, c = _flatten(t[0], f"{path}.{i}.", cdr, c, out)  # type: ignore[arg-type]
            continue
        else:
            code, n = t  # type: ignore[misc]
        size = _SIZE[code]
        cdr, c = _align(cdr, size), _align(c, size)
        out[path] = Primitive(code, n, cdr, c)
        cdr, c = cdr + size * n, c + size * n
    return cdr, c_start + _align(c - c_start, _c_alignment(spec))


@dataclass(frozen=True)
class Layout:
    """A message type's two layouts (see the module docstring).

    typename : the DDS type name.  cdr_size, c_size : bytes of the CDR payload and of the C struct.
    fields : every primitive by dotted path (``motor_cmd.3.tau``).
    gather : (c_size,) for each byte of the C struct, the CDR payload byte it holds (-1: padding).
    """

    typename: str
    cdr_size: int
    c_size: int
    fields: dict[str, Primitive]
    gather: NDArray[np.intp]

    @classmethod
    def of(cls, typename: str, spec: Spec) -> Layout:
        fields: dict[str, Primitive] = {}
        cdr_size, c_size = _flatten(spec, "", 0, 0, fields)
        gather = np.full(c_size, -1, dtype=np.intp)
        for f in fields.values():
            n = _SIZE[f.code] * f.count
            gather[f.c_offset : f.c_offset + n] = np.arange(f.cdr_offset, f.cdr_offset + n)
        return cls(typename, cdr_size, c_size, fields, gather)

    def crc(self, payload: NDArray[np.uint8]) -> int:
        """The CRC of a CDR payload (cdr_size,) uint8, over its C struct."""
        c = np.where(self.gather >= 0, payload[np.maximum(self.gather, 0)], 0).astype(np.uint8)
        return int(crc32_words(c.view("<u4")[:-1]))


@njit(cache=True)
def crc32_words(words: NDArray[np.uint32]) -> np.uint32:
    """CRC-32 (0x04C11DB7, init 0xFFFFFFFF, MSB first, no reflection, no final xor) of 32-bit words (n,)."""
    crc = np.uint32(0xFFFFFFFF)
    poly = np.uint32(0x04C11DB7)
    top = np.uint32(0x80000000)
    for i in range(words.shape[0]):
        crc ^= words[i]
        for _ in range(32):
            if crc & top:
                crc = np.uint32((crc << np.uint32(1)) ^ poly)
            else:
                crc = np.uint32(crc << np.uint32(1))
    return crc


class Message:
    """One message of a :class:`Layout` in a buffer of its own (the encapsulation header, then the payload).

    ``field(path)`` is a view of one primitive, ``column(array, name, n)`` a strided view of one member across
    the first ``n`` elements of an array of structs (``column("motor_cmd", "tau", 12)``): writing the views writes
    the message. ``wire`` is what a DDS writer sends; :meth:`load` takes in a received sample.
    """

    def __init__(self, layout: Layout) -> None:
        self.layout = layout
        self.buffer = bytearray(CDR_HEADER + bytes(layout.cdr_size))
        self.payload = np.frombuffer(self.buffer, dtype=np.uint8, offset=len(CDR_HEADER))

    @property
    def wire(self) -> bytes:
        return bytes(self.buffer)

    def load(self, sample: bytes) -> None:
        """Copy a received sample (header + payload) in; InputError when its size or encoding is not this type's."""
        if len(sample) < len(self.buffer) or sample[:2] != CDR_HEADER[:2]:
            raise InputError(
                f"{self.layout.typename}: a sample of {len(sample)} bytes with header "
                f"{sample[:4].hex()}, expected {len(self.buffer)} bytes, little-endian XCDR1"
            )
        self.buffer[:] = sample[: len(self.buffer)]

    def field(self, path: str) -> np.ndarray:
        f = self.layout.fields[path]
        return np.ndarray(
            (f.count,), dtype=np.dtype(f.code).newbyteorder("<"), buffer=self.payload, offset=f.cdr_offset
        )

    def column(self, array: str, name: str, n: int) -> np.ndarray:
        first = self.layout.fields[f"{array}.0.{name}"]
        if n == 1:
            return self.field(f"{array}.0.{name}")[:1]
        stride = self.layout.fields[f"{array}.1.{name}"].cdr_offset - first.cdr_offset
        for i in range(2, n):
            if self.layout.fields[f"{array}.{i}.{name}"].cdr_offset - first.cdr_offset != i * stride:
                raise InputError(f"{self.layout.typename}: {array}[*].{name} is not evenly spaced")
        return np.ndarray(
            (n,),
            dtype=np.dtype(first.code).newbyteorder("<"),
            buffer=self.payload,
            offset=first.cdr_offset,
            strides=(stride,),
        )

    def crc(self) -> int:
        """The CRC the message should carry (over everything but its ``crc`` field)."""
        return self.layout.crc(self.payload)

    def seal(self) -> None:
        """Write the CRC into the ``crc`` field."""
        self.field("crc")[0] = self.crc()

    def crc_ok(self) -> bool:
        return int(self.field("crc")[0]) == self.crc()


GO_LOW_CMD_LAYOUT = Layout.of("unitree_go.msg.dds_.LowCmd_", GO_LOW_CMD)
GO_LOW_STATE_LAYOUT = Layout.of("unitree_go.msg.dds_.LowState_", GO_LOW_STATE)
HG_LOW_CMD_LAYOUT = Layout.of("unitree_hg.msg.dds_.LowCmd_", HG_LOW_CMD)
HG_LOW_STATE_LAYOUT = Layout.of("unitree_hg.msg.dds_.LowState_", HG_LOW_STATE)
