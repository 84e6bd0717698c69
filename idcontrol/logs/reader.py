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


@dataclass
class TickLog:
    """One log file in memory.

    config : the run's configuration (:func:`idcontrol.logs.recorder.describe_run`).
    ticks : one JSON map per tick, in the order the daemon answered them.
    events : admin changes and stops; ``event["tick"]`` is the ``index`` of the tick that follows it.
    end : the daemon's final statistics (None when it did not shut down cleanly).
    truncated : why reading stopped early ("" for a complete file).
    """

    path: Path
    config: dict[str, Any]
    ticks: list[dict[str, Any]] = field(default_factory=list)
    events: list[dict[str, Any]] = field(default_factory=list)
    end: dict[str, Any] | None = None
    truncated: str = ""
    segment: int = 0
    _cache: dict[str, Array] = field(default_factory=dict, repr=False)

    def __len__(self) -> int:
        return len(self.ticks)

    @property
    def dt(self) -> float:
        return float(self.config.get("dt", 1e-3))

    def array(self, name: str) -> Array:
        """The values of one tick field over the whole log.

        Scalars: (T,) (float NaN, or "" for strings, where a tick lacks the field). Fixed vectors
        (q, qd, tau, q_ref, qd_ref, qdd_des): (T, n), NaN rows where absent. Contact fields: padded to
        the largest contact count, (T, n_max) or (T, n_max, 3), NaN beyond each tick's
        ``n_contacts``; ``contact_ids`` gives (T, n_max) strings. ``n_contacts``: (T,) int.
        """
        if name not in self._cache:
            self._cache[name] = self._build(name)
        return self._cache[name]

    def _build(self, name: str) -> Array:
        ticks = self.ticks
        if name == "n_contacts":
            return np.array([len(t.get("contact_phi") or ()) for t in ticks], dtype=np.int64)
        if name in schema.SCALAR_STR:
            return np.array([t.get(name) or "" for t in ticks], dtype=str)
        if name in schema.SCALAR_INT + schema.SCALAR_FLOAT + schema.SCALAR_BOOL:
            values = [t.get(name) for t in ticks]
            if name in schema.SCALAR_BOOL:
                return np.array([bool(v) for v in values], dtype=bool)
            if name in schema.SCALAR_INT and all(v is not None for v in values):
                return np.array(values, dtype=np.int64)
            return np.array([math.nan if v is None else v for v in values], dtype=float)
        if name in schema.VECTORS or name in schema.SPHERE_ROWS3:
            rows = [t.get(name) for t in ticks]
            width = next((np.shape(r) for r in rows if r), None)
            if width is None:
                return np.full((len(ticks), 0), math.nan)
            out = np.full((len(ticks), *width), math.nan)
            for i, r in enumerate(rows):
                if r:
                    out[i] = np.array(r, dtype=float)
            return out
        if name in schema.CONTACT_VECTORS + schema.CONTACT_ROWS3 + schema.STRINGS:
            n_max = int(self.array("n_contacts").max(initial=0))
            if name in schema.STRINGS:
                out = np.full((len(ticks), n_max), "", dtype=object)
            else:
                out = np.full((len(ticks), n_max, 3) if name in schema.ROWS3 else (len(ticks), n_max), math.nan)
            for i, t in enumerate(ticks):
                r = t.get(name)
                if r:
                    out[i, : len(r)] = np.array(r, dtype=object if name in schema.STRINGS else float)
            return out.astype(str) if name in schema.STRINGS else out
        if name in schema.MAPS:
            raise LogError(f"{name} is a map per tick; read log.ticks[i][{name!r}]")
        raise LogError(f"unknown tick field {name!r}; fields: {', '.join(FIELDS)}")

    def arrays(self) -> dict[str, Array]:
        """Every array field by name (see :meth:`array`), plus ``timings_us.<phase>`` columns."""
        out = {name: self.array(name) for name in FIELDS}
        phases = sorted({k for t in self.ticks for k in (t.get("timings_us") or {})})
        for phase in phases:
            out[f"timings_us.{phase}"] = np.array([(t.get("timings_us") or {}).get(phase, math.nan)
                                                   for t in self.ticks], dtype=float)  # fmt: skip
        return out

    def deadline_misses(self) -> Array:
        """(T,) bool: the daemon's rule, the bridge's round trip (else the compute time) over one period."""
        period_us = self.dt * 1e6
        rtt, compute = self.array("last_rtt_us"), self.array("compute_us")
        return np.where(np.isnan(rtt), compute, rtt) > period_us


FIELDS = (
    ("n_contacts",) + schema.SCALAR_INT + schema.SCALAR_FLOAT + schema.SCALAR_BOOL + schema.SCALAR_STR
    + schema.VECTORS + schema.CONTACT_VECTORS + schema.ROWS3 + schema.STRINGS
)  # fmt: skip


def read_log(path: str | Path) -> TickLog:
    """Read a log file written by ``--log`` (raises :class:`LogError` for anything that is not one)."""
    path = Path(path)
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
                        log.ticks.append(data)
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
            log.truncated = f"the file ends early after {len(log.ticks)} ticks ({reason}); the writer was stopped"
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
        raise LogError(f"{path}: log schema version {version} is not supported; this idcontrol reads "
                       f"version {schema.SCHEMA_VERSION}")  # fmt: skip


def log_info(log: TickLog) -> dict[str, Any]:
    """Duration, ticks, robot, formulations used, deadline misses, fallbacks and more, as plain values."""
    n = len(log)
    t = log.array("t")
    modes, formulations, fallbacks = (_counts(log.array(k)) for k in ("mode", "formulation", "fallback"))
    fallbacks.pop("", None)
    run = log.array("mode") == "run"
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
        "fallbacks": fallbacks,
        "solve_failures": int((run & ~log.array("found")).sum()) if n else 0,
        "torque_clips": int(np.nansum(log.array("clipped"))) if n else 0,
        "compute_us": {
            "p50": float(np.percentile(compute, 50)),
            "p99": float(np.percentile(compute, 99)),
            "max": float(compute.max()),
        }
        if n
        else None,  # fmt: skip
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
        ("deadline misses", f"{info['deadline_misses']}"),
        ("fallbacks", ", ".join(f"{k} ({v})" for k, v in info["fallbacks"].items()) or "none"),
        ("solve failures", f"{info['solve_failures']}"),
        ("compute", f"p50 {c['p50']:.0f}  p99 {c['p99']:.0f}  max {c['max']:.0f} µs" if c else "-"),
        ("records dropped", f"{info['records_dropped']}"),
        ("events", ", ".join(f"{e['kind']}@{e['tick']}" for e in info["events"]) or "none"),
        ("complete", "yes" if info["complete"] else f"no: {info['truncated'] or 'no end record (daemon killed)'}"),
    ]
    return "\n".join(f"{k:<16} {v}" for k, v in rows)
