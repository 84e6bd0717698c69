"""Read an idcontrol log back: the configuration, the events, and numpy arrays per tick field.

>>> log = read_log("logs/quadruped-20260101-120000.mcap")
>>> log.array("tau").shape          # (ticks, nu), N·m
>>> log.array("force_world").shape  # (ticks, max contacts, 3), NaN where a tick had fewer contacts

A file whose writer was killed has no summary or footer; it reads back up to the last complete
chunk (``TickLog.truncated`` says where it stopped). Files that are not MCAP, MCAP files that are
not idcontrol logs, and logs of an unknown schema version raise :class:`LogError`.
"""

from __future__ import annotations

import json
import math
import struct
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
from mcap.exceptions import EndOfFile, InvalidMagic, McapError
from mcap.records import Channel, Footer, Message, Metadata
from mcap.stream_reader import StreamReader

from idcontrol.errors import LogError
from idcontrol.logs import schema

Array = np.ndarray


class _Rows:
    """A growable float64 buffer of rows of one shape; rows before the first known shape are NaN."""

    def __init__(self) -> None:
        self.data: Array | None = None
        self.n = 0
        self.leading = 0  # rows appended as missing before the shape was known

    def append(self, row: object) -> None:
        if row is None:
            if self.data is None:
                self.leading += 1
                return
            row = math.nan
        elif self.data is None:
            shape = np.shape(row)
            self.data = np.full((max(1024, 2 * self.leading), *shape), math.nan)
            self.n = self.leading
        if self.n == len(self.data):
            self.data = np.concatenate([self.data, np.full_like(self.data, math.nan)])
        self.data[self.n] = row
        self.n += 1

    def trim(self) -> None:
        """Give back the room reserved for more rows."""
        if self.data is not None:
            self.data = self.data[: self.n].copy()

    def get(self, i: int) -> Array | None:
        """Row ``i``, or None when it was not given."""
        if self.data is None or i >= self.n:
            return None
        return self.data[i]

    def values(self, rows: int) -> Array:
        """(rows, *shape); (rows, 0) when no row was ever given."""
        if self.data is None:
            return np.full((rows, 0), math.nan)
        out = self.data[: self.n]
        if self.n < rows:
            out = np.concatenate([out, np.full((rows - self.n, *out.shape[1:]), math.nan)])
        return out


class _Ragged:
    """Per-tick arrays of varying length (one entry per contact), stored flat with counts."""

    def __init__(self) -> None:
        self.flat = _Rows()
        self.counts: list[int] = []
        self.starts: list[int] = []
        self.total = 0

    def append(self, rows: list | None) -> None:
        rows = rows or ()
        self.counts.append(len(rows))
        self.starts.append(self.total)
        self.total += len(rows)
        for row in rows:
            self.flat.append(row)

    def padded(self) -> Array:
        """(T, n_max) or (T, n_max, 3), NaN beyond each tick's count."""
        counts = np.asarray(self.counts, dtype=np.int64)
        n_max = int(counts.max(initial=0))
        flat = self.flat.values(int(counts.sum()))
        out = np.full((len(counts), n_max, *flat.shape[1:]), math.nan)
        ticks = np.repeat(np.arange(len(counts)), counts)
        slots = np.arange(len(ticks)) - np.repeat(np.cumsum(counts) - counts, counts)
        out[ticks, slots] = flat
        return out

    def row(self, i: int) -> Array:
        start, count = self.starts[i], self.counts[i]
        if self.flat.data is None:
            return np.empty((0,))
        return self.flat.data[start : start + count]


@dataclass
class TickLog:
    """One log file in memory, stored by field (about 1.5 kB per quadruped tick).

    config : the run's configuration (:func:`idcontrol.logs.recorder.describe_run`).
    events : admin changes and stops; ``event["tick"]`` is the ``index`` of the tick that follows it.
    end : the daemon's final statistics (None when it did not shut down cleanly).
    truncated : why reading stopped early ("" for a complete file).
    """

    path: Path
    config: dict[str, Any]
    events: list[dict[str, Any]] = field(default_factory=list)
    end: dict[str, Any] | None = None
    truncated: str = ""
    segment: int = 0
    _n: int = 0
    _numbers: dict[str, _Rows] = field(default_factory=dict, repr=False)  # scalars, vectors, per-phase timings
    _strings: dict[str, list[str]] = field(default_factory=dict, repr=False)
    _ragged: dict[str, _Ragged] = field(default_factory=dict, repr=False)
    _ids: list[tuple[str, ...]] = field(default_factory=list, repr=False)
    _maps: dict[str, list[Any]] = field(default_factory=dict, repr=False)  # reference, objects: as read
    _cache: dict[str, Array] = field(default_factory=dict, repr=False)

    def __post_init__(self) -> None:
        self._numbers = {k: _Rows() for k in _NUMBERS + schema.VECTORS + schema.SPHERE_ROWS3}
        self._strings = {k: [] for k in schema.SCALAR_STR}
        self._ragged = {k: _Ragged() for k in schema.CONTACT_VECTORS + schema.CONTACT_ROWS3}
        self._maps = {"reference": [], "objects": []}
        self._id_cache: dict[tuple[str, ...], tuple[str, ...]] = {}

    def __len__(self) -> int:
        return self._n

    @property
    def dt(self) -> float:
        return float(self.config.get("dt", 1e-3))

    def add_tick(self, tick: dict[str, Any]) -> None:
        """Append one tick record (a JSON map of :data:`schema.TICK_TOPIC`)."""
        for name, column in self._numbers.items():
            if name.startswith("timings_us."):
                continue
            value = tick.get(name)
            column.append(float(value) if isinstance(value, bool) else value)
        for name, values in self._strings.items():
            values.append(sys.intern(tick.get(name) or ""))
        for name, ragged in self._ragged.items():
            ragged.append(tick.get(name))
        ids = tuple(tick.get("contact_ids") or ())
        self._ids.append(self._id_cache.setdefault(ids, ids))
        timings = tick.get("timings_us") or {}
        for phase in timings.keys() - {k[len("timings_us.") :] for k in self._numbers if "." in k}:
            self._numbers[f"timings_us.{phase}"] = column = _Rows()
            column.leading = self._n
        for name, column in self._numbers.items():
            if name.startswith("timings_us."):
                column.append(timings.get(name[len("timings_us.") :]))
        for name, values in self._maps.items():
            values.append(tick.get(name))
        self._n += 1

    def trim(self) -> None:
        """Release the growth reserve of every column (called once the file is read)."""
        for column in self._numbers.values():
            column.trim()
        for ragged in self._ragged.values():
            ragged.flat.trim()

    def tick(self, i: int) -> dict[str, Any]:
        """Tick ``i`` as a map of plain values and arrays (absent fields: None)."""
        out: dict[str, Any] = {}
        for name in _NUMBERS:
            row = self._numbers[name].get(i)
            value = math.nan if row is None else float(row)
            if math.isnan(value):
                value = None
            elif name in schema.SCALAR_INT:
                value = int(value)
            elif name in schema.SCALAR_BOOL:
                value = bool(value)
            out[name] = value
        for name in schema.VECTORS + schema.SPHERE_ROWS3:
            row = self._numbers[name].get(i)
            out[name] = None if row is None or np.isnan(row).all() else row
        for name, values in self._strings.items():
            out[name] = values[i]
        for name, ragged in self._ragged.items():
            out[name] = ragged.row(i)
        out["contact_ids"] = list(self._ids[i])
        timings = {k[len("timings_us.") :]: c.get(i) for k, c in self._numbers.items() if k.startswith("timings_us.")}
        out["timings_us"] = {k: float(v) for k, v in timings.items() if v is not None and not np.isnan(v)}
        for name, values in self._maps.items():
            out[name] = values[i]
        return out

    def array(self, name: str) -> Array:
        """The values of one tick field over the whole log.

        Scalars: (T,) (float NaN, "" for strings, False for bools where a tick lacks the field;
        ints as int64 when no tick lacks them). Fixed vectors (q, qd, tau, q_ref, qd_ref, qdd_des): (T, n),
        NaN rows where absent; ``sensed_forces``: (T, k, 3). Contact fields: padded to the largest
        contact count, (T, n_max) or (T, n_max, 3), NaN beyond each tick's ``n_contacts``;
        ``contact_ids`` gives (T, n_max) strings. ``n_contacts``: (T,) int.
        ``timings_us.<phase>``: (T,) µs.
        """
        if name not in self._cache:
            self._cache[name] = self._build(name)
        return self._cache[name]

    def _build(self, name: str) -> Array:
        n = self._n
        if name == "n_contacts":
            return np.asarray(self._ragged["contact_phi"].counts, dtype=np.int64)
        if name in self._strings:
            return np.array(self._strings[name], dtype=str)
        if name in self._numbers:
            values = self._numbers[name].values(n)
            if name in _NUMBERS and values.ndim == 2:  # a scalar no tick had
                values = np.full(n, math.nan)
            if name in schema.SPHERE_ROWS3 and values.size:
                values = values.reshape(n, -1, 3)
            finite = np.isfinite(values).all() if values.size else True
            if name in schema.SCALAR_BOOL:
                return values == 1.0  # absent: False
            if name in schema.SCALAR_INT and finite:
                return values.astype(np.int64)
            return values
        if name in self._ragged:
            return self._ragged[name].padded()
        if name == "contact_ids":
            n_max = max((len(ids) for ids in self._ids), default=0)
            return np.array([ids + ("",) * (n_max - len(ids)) for ids in self._ids], dtype=str).reshape(n, n_max)
        if name in schema.MAPS:
            raise LogError(f"{name} is a map per tick; read log.tick(i)[{name!r}]")
        raise LogError(f"unknown tick field {name!r}; fields: {', '.join(self.fields())}")

    def fields(self) -> tuple[str, ...]:
        """Every name :meth:`array` accepts for this log."""
        phases = tuple(sorted(k for k in self._numbers if k.startswith("timings_us.")))
        return FIELDS + phases

    def arrays(self) -> dict[str, Array]:
        """Every array field by name (see :meth:`array`)."""
        return {name: self.array(name) for name in self.fields()}

    @property
    def lockstep(self) -> bool:
        """Whether the run's bridge stepped in lock-step with the commands (its launch file's bridge mode)."""
        return (self.config.get("bridge") or {}).get("mode") == "lockstep"

    def deadline_misses(self) -> Array:
        """(T,) bool, the daemon's rule: a command the bridge reported late, or one over the period: in lock-step
        its compute time (the round trip there holds the simulator's step), in real time the bridge's round trip
        (else the compute time)."""
        period_us = self.dt * 1e6
        rtt, compute = self.array("last_rtt_us"), self.array("compute_us")
        over = compute if self.lockstep else np.where(np.isnan(rtt), compute, rtt)
        late = self.array("last_late") if "last_late" in self.fields() else np.zeros(len(self))
        return (over > period_us) | (np.nan_to_num(late) > 0)


_NUMBERS = schema.SCALAR_INT + schema.SCALAR_FLOAT + schema.SCALAR_BOOL
FIELDS = (
    ("n_contacts",)
    + schema.SCALAR_INT
    + schema.SCALAR_FLOAT
    + schema.SCALAR_BOOL
    + schema.SCALAR_STR
    + schema.VECTORS
    + schema.CONTACT_VECTORS
    + schema.ROWS3
    + schema.STRINGS
)


def read_log(path: str | Path) -> TickLog:
    """Read a log file written by ``--log`` (raises :class:`LogError` for anything that is not one)."""
    path = Path(path)
    if path.is_dir():
        raise LogError(f"{path} is a folder, not a log file (the log files are the .mcap files in it)")
    if not path.is_file():
        raise LogError(f"log file not found: {path}")
    with open(path, "rb") as f:
        records = StreamReader(f, validate_crcs=True).records
        log: TickLog | None = None
        channels: dict[int, str] = {}
        version_seen = False
        try:
            for record in records:
                if isinstance(record, Metadata) and record.name == schema.METADATA_NAME:
                    _check_version(path, record.metadata.get("schema_version"))
                    version_seen = True
                    segment = int(record.metadata.get("segment", 0))
                elif isinstance(record, Channel):
                    channels[record.id] = record.topic
                elif isinstance(record, Message):
                    topic = channels.get(record.channel_id)
                    if topic is None or topic not in schema.SCHEMAS:
                        continue
                    if not version_seen:
                        raise LogError(f"{path} is an MCAP file but not an idcontrol log (no version record)")
                    data = json.loads(record.data)
                    if topic == schema.CONFIG_TOPIC:
                        log = TickLog(path, data, segment=segment)
                    elif log is None:
                        raise LogError(f"{path}: a {topic} message before the configuration")
                    elif topic == schema.TICK_TOPIC:
                        log.add_tick(data)
                    elif topic == schema.EVENT_TOPIC:
                        log.events.append(data)
                    else:
                        log.end = data
                elif isinstance(record, Footer):
                    break
        except InvalidMagic:
            raise LogError(f"{path} is not an MCAP file (wrong magic bytes); is it an idcontrol log?") from None
        except (EndOfFile, McapError, struct.error, ValueError, OSError) as e:
            reason = f"{type(e).__name__}: {e}" if str(e) else type(e).__name__
            if log is None:
                raise LogError(f"{path} is not a readable idcontrol log ({reason})") from None
            log.truncated = f"the file ends early after {len(log)} ticks ({reason}); the writer was stopped"
    if log is not None:
        log.trim()
    if log is None:
        if not version_seen:
            raise LogError(f"{path} is an MCAP file but not an idcontrol log (no version record)")
        raise LogError(f"{path} holds no run configuration")
    return log


def _check_version(path: Path, text: str | None) -> None:
    try:
        version = int(text or "")
    except ValueError:
        raise LogError(f"{path}: bad schema version {text!r}") from None
    if version != schema.SCHEMA_VERSION:
        raise LogError(
            f"{path}: log schema version {version} is not supported; this idcontrol reads "
            f"version {schema.SCHEMA_VERSION}"
        )


def log_info(log: TickLog) -> dict[str, Any]:
    """Duration, ticks, robot, formulations used, deadline misses, fallbacks and more, as plain values."""
    n = len(log)
    t = log.array("t")
    modes, formulations, fallbacks = (_counts(log.array(k)) for k in ("mode", "formulation", "fallback"))
    fallbacks.pop("", None)
    run = log.array("mode") == "run"
    failed_checks = [c for c in (log.array("certificate")[run] if n else ()) if isinstance(c, str) and c]
    rejections = _counts(np.array(failed_checks, dtype=object))
    compute = log.array("compute_us")
    dropped = log.array("log_dropped")
    return {
        "path": str(log.path),
        "robot": log.config.get("robot"),
        "launch_file": log.config.get("launch_file"),
        "segment": log.segment,
        "ticks": n,
        "duration_s": float(t[-1] - t[0]) if n else 0.0,
        "t_first": float(t[0]) if n else None,
        "t_last": float(t[-1]) if n else None,
        "formulations": formulations,
        "modes": modes,
        "deadline_misses": int(log.deadline_misses().sum()),
        "lockstep": log.lockstep,
        "fallbacks": fallbacks,
        "solve_failures": int((run & ~log.array("found")).sum()) if n else 0,
        "certificate_rejections": rejections,
        "no_slip_released_ticks": sum("no-slip held on" in m for m in log.array("message")[run] if isinstance(m, str))
        if n
        else 0,
        "torque_clips": int(np.nansum(log.array("clipped"))) if n else 0,
        "compute_us": {
            "p50": float(np.percentile(compute, 50)),
            "p99": float(np.percentile(compute, 99)),
            "max": float(compute.max()),
        }
        if n
        else None,
        "records_dropped": int(np.nanmax(dropped)) if n and np.isfinite(dropped).any() else 0,
        "events": [{k: v for k, v in e.items() if k != "now"} for e in log.events],
        "complete": log.end is not None and not log.truncated,
        "truncated": log.truncated,
    }


def _counts(values: Array) -> dict[str, int]:
    names, counts = np.unique(values, return_counts=True)
    return {str(k): int(c) for k, c in zip(names, counts, strict=True)}


def format_info(log: TickLog) -> str:
    info = log_info(log)
    c = info["compute_us"]
    rows = [
        ("file", f"{info['path']} (segment {info['segment']})"),
        ("robot", f"{info['robot']} ({info['launch_file']})"),
        ("ticks", f"{info['ticks']}"),
        ("duration", f"{info['duration_s']:.3f} s of bridge time"),
        ("formulations", ", ".join(f"{k} ({v} ticks)" for k, v in info["formulations"].items()) or "-"),
        ("modes", ", ".join(f"{k} ({v})" for k, v in info["modes"].items()) or "-"),
        (
            "deadline misses",
            f"{info['deadline_misses']} ("
            + (
                "compute over the period: lock-step"
                if info.get("lockstep")
                else "reported late, or round trip over the period"
            )
            + ")",
        ),
        ("fallbacks", ", ".join(f"{k} ({v})" for k, v in info["fallbacks"].items()) or "none"),
        (
            "solve failures",
            f"{info['solve_failures']}"
            + (
                " (certificate: "
                + ", ".join(f"{k} {v}" for k, v in sorted(info["certificate_rejections"].items()))
                + ")"
                if info["certificate_rejections"]
                else ""
            ),
        ),
        (
            "no-slip",
            f"a loaded contact released on {info['no_slip_released_ticks']} run ticks"
            if info["no_slip_released_ticks"]
            else "no loaded contact released",
        ),
        ("compute", f"p50 {c['p50']:.0f}  p99 {c['p99']:.0f}  max {c['max']:.0f} µs" if c else "-"),
        ("records dropped", f"{info['records_dropped']}"),
        ("events", ", ".join(f"{e['kind']}@{e['tick']}" for e in info["events"]) or "none"),
        ("complete", "yes" if info["complete"] else f"no: {info['truncated'] or 'no end record (daemon killed)'}"),
    ]
    return "\n".join(f"{k:<16} {v}" for k, v in rows)
