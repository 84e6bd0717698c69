"""The log writer process: msgpack records and tick snapshots from the daemon in, an MCAP file (JSON messages) out.

Run by :class:`idcontrol.logs.recorder.LogRecorder` as ``python -m idcontrol.logs.writer``, so that
encoding, compression and disk writes use their own process (and interpreter lock), never the
daemon's tick. It attaches the daemon's shared-memory ring (:mod:`idcontrol.logs.ring`), reads
the run's configuration (JSON) on stdin, prints ``ready`` (or ``error <text>``) on stdout, then
polls the ring every 10 ms and writes every record in the order the daemon produced them.

Crash safety: the chunk in progress is written out and the file flushed at least every
``flush_interval`` s, so a reader recovers every record older than that (plus one poll) from a
file whose writer was killed (the file then lacks its summary and footer; see
:mod:`idcontrol.logs.reader`). When the daemon dies, this process notices (its parent changes),
writes everything the daemon committed to the ring and closes the file properly. Files are
size-bounded: past ``max_bytes`` the current file is finished and the next segment
``<stem>-001.mcap`` (then ``-002`` ...) starts with the configuration and the events so far.
An existing file is never overwritten.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import sys
import time
from pathlib import Path
from typing import IO, Any

import msgpack
import numpy as np
from mcap.writer import CompressionType, Writer

from idcontrol.errors import LogError
from idcontrol.logs import schema
from idcontrol.logs.estimate import derived_fields
from idcontrol.logs.ring import Ring
from idcontrol.logs.snapshot import record_from_snapshot

POLL_S = 0.01  # the ring is read every 10 ms
CHUNK_BYTES = 1 << 20


def segment_path(path: Path, index: int) -> Path:
    """The path of segment ``index`` of a log (0: the path itself)."""
    return path if index == 0 else path.with_name(f"{path.stem}-{index:03d}{path.suffix}")


def json_record(record: dict[str, Any]) -> dict[str, Any]:
    """A daemon record (float64 arrays as bytes) as values :func:`~idcontrol.logs.schema.to_json` writes: the arrays
    as numpy arrays ((n, 3) fields as rows of 3), the envelope (``v``, ``type``) left out."""
    out: dict[str, Any] = {}
    for key, value in record.items():
        if key in ("v", "type"):
            continue
        if isinstance(value, bytes):
            array = np.frombuffer(value, dtype="<f8")
            out[key] = array.reshape(-1, 3) if key in schema.ROWS3 else array
        elif key == "objects":
            out[key] = {
                name: {k: np.frombuffer(b, dtype="<f8") for k, b in pose.items()} for name, pose in value.items()
            }
        else:
            out[key] = value
    return out


def _foxglove_view(config: dict[str, Any], clock_offset: float):
    """The Foxglove topics' converter for the run's robot (:mod:`idcontrol.logs.foxglove`); None, with a line on
    stderr, when the robot cannot be loaded here (the log then holds the idcontrol topics only)."""
    robot = config.get("robot")
    if not robot:
        return None
    try:
        from idcontrol.logs.foxglove import FoxgloveView
        from idcontrol.robot.model import RobotModel

        return FoxgloveView(RobotModel(robot), clock_offset_s=clock_offset)
    except Exception as e:  # the log's own topics matter more than the view
        print(f"idcontrol log writer: no Foxglove topics ({type(e).__name__}: {e})", file=sys.stderr, flush=True)
        return None


class SegmentedLog:
    """An MCAP log split into files of at most about ``max_bytes`` each."""

    def __init__(self, path: Path, config: dict[str, Any], max_bytes: int) -> None:
        self.path = path
        self.max_bytes = max_bytes
        self.lost = 0  # tick snapshots that did not rebuild into a record
        self.config_json = json.dumps(config).encode()
        self.clock_offset = float(config.get("clock_offset_s", 0.0))  # Unix time minus the daemon's monotonic
        self.events: list[tuple[int, bytes]] = []  # (log time, JSON), repeated in each new segment
        self.view = _foxglove_view(config, self.clock_offset)  # Foxglove's topics, as the live view has them
        self.covariance_layout = (config.get("estimator") or {}).get("covariance_layout")  # for derived_fields
        self.contact_count = len(config.get("contact_names") or ())  # for the truth's contact forces
        self.bad_truths = 0  # tick records whose state carried a malformed truth (left out)
        self.segment = 0
        self.ticks = 0
        self._open()

    def _open(self) -> None:
        path = segment_path(self.path, self.segment)
        try:
            self.file: IO[bytes] = open(path, "xb")  # never overwrite a log
        except FileExistsError:
            raise LogError(f"log file {path} already exists; logs are never overwritten") from None
        except OSError as e:
            raise LogError(f"cannot create log file {path}: {e.strerror}") from None
        w = Writer(self.file, chunk_size=CHUNK_BYTES, compression=CompressionType.ZSTD)
        w.start(profile=schema.PROFILE, library="idcontrol")
        w.add_metadata(
            schema.METADATA_NAME, {"schema_version": str(schema.SCHEMA_VERSION), "segment": str(self.segment)}
        )
        self.channels: dict[str, int] = {}
        for topic, (name, _) in schema.SCHEMAS.items():
            schema_id = w.register_schema(name, "jsonschema", schema.schema_bytes(topic))
            self.channels[topic] = w.register_channel(topic, "json", schema_id)
        self.writer = w
        if self.view is not None:
            for topic, (name, data) in self.view.schemas().items():
                self.channels[topic] = w.register_channel(topic, "json", w.register_schema(name, "jsonschema", data))
        now_ns = time.time_ns()
        w.add_message(self.channels[schema.CONFIG_TOPIC], now_ns, self.config_json, now_ns)
        for log_time, data in self.events:
            w.add_message(self.channels[schema.EVENT_TOPIC], log_time, data, log_time)
        w.flush()

    def add(self, record: dict[str, Any] | list[Any]) -> bool:
        """Write one daemon record, or the tick record rebuilt from a tick's snapshot (:mod:`idcontrol.logs.snapshot`);
        True when it was the end record. A snapshot that does not rebuild is counted in :attr:`lost` and said on
        stderr (the first, then every thousandth); the log goes on."""
        if isinstance(record, list):
            try:
                record = record_from_snapshot(record, self.contact_count, self._bad_truth)
            except LogError as e:
                self.lost += 1
                if self.lost == 1 or self.lost % 1000 == 0:
                    print(
                        f"idcontrol log writer: a tick record is lost ({self.lost} so far): {e}",
                        file=sys.stderr,
                        flush=True,
                    )
                return False
        kind = record.get("type")
        log_time = int((float(record.get("now", time.monotonic())) + self.clock_offset) * 1e9)
        if kind == "telemetry":  # its place among all ticks answered, dropped and lost ones included
            record["index"] = self.ticks + self.lost + int(record.get("log_dropped", 0))
        values = json_record(record)
        if kind == "telemetry" and "estimate_q" in values:  # the estimate's σ and its error against the truth
            derived_fields(values, self.covariance_layout)
        data = schema.to_json(values)
        if kind == "telemetry":
            topic = schema.TICK_TOPIC
            self.ticks += 1
        elif kind == "event":
            topic = schema.EVENT_TOPIC
            self.events.append((log_time, data))
        elif kind == "end":
            topic = schema.END_TOPIC
        else:
            return False
        self.writer.add_message(self.channels[topic], log_time, data, log_time, self.ticks)
        if kind == "telemetry" and self.view is not None:
            self._add_foxglove(record)
        if self.file.tell() > self.max_bytes:
            self.writer.finish()
            self.file.close()
            self.segment += 1
            self._open()
        return kind == "end"

    def _bad_truth(self, text: str) -> None:
        """A state's truth that did not check: counted, said on stderr (the first, then every thousandth)."""
        self.bad_truths += 1
        if self.bad_truths == 1 or self.bad_truths % 1000 == 0:
            print(f"idcontrol log writer: {text} ({self.bad_truths} so far)", file=sys.stderr, flush=True)

    def _add_foxglove(self, record: dict[str, Any]) -> None:
        try:
            messages = self.view.feed(record)
        except Exception as e:  # a record the view cannot draw (say, another robot's sizes) ends the view, not the log
            print(f"idcontrol log writer: Foxglove topics stop ({type(e).__name__}: {e})", file=sys.stderr, flush=True)
            self.view = None
            return
        for topic, message, log_time in messages:
            self.writer.add_message(self.channels[topic], log_time, schema.to_json(message), log_time)

    def flush(self) -> None:
        self.writer.flush()

    def close(self) -> None:
        self.writer.finish()
        self.file.flush()
        os.fsync(self.file.fileno())
        self.file.close()


def serve(
    path: Path, config: dict[str, Any], ring: Ring, max_bytes: int, flush_interval: float, parent_pid: int
) -> int:
    """Write records until the end record, SIGTERM, or the daemon's death; returns the exit code."""
    try:
        log = SegmentedLog(path, config, max_bytes)
    except LogError as e:
        print(f"error {e}", flush=True)
        return 2
    stop = []
    signal.signal(signal.SIGTERM, lambda *_: stop.append("SIGTERM"))
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # Ctrl-C stops the daemon, which then ends the log
    print("ready", flush=True)
    last_flush = time.monotonic()
    pending = False
    committed = ring.committed()
    try:
        while True:
            time.sleep(POLL_S)
            ending = bool(stop) or os.getppid() != parent_pid
            records = ring.pop(committed)  # committed at least one poll ago: their bytes are visible
            committed = ring.committed()
            for raw in records:
                pending = True
                if log.add(msgpack.unpackb(raw, raw=False)):
                    return 0
            if pending and time.monotonic() - last_flush >= flush_interval:
                log.flush()
                last_flush, pending = time.monotonic(), False
            if ending and not records:
                return 0  # the daemon is gone and everything it committed is written
    finally:
        log.close()
        ring.close()


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m idcontrol.logs.writer", description=__doc__.splitlines()[0])
    p.add_argument("path", type=Path)
    p.add_argument("--ring", required=True, help="name of the daemon's shared-memory ring")
    p.add_argument("--max-bytes", type=int, default=1 << 30)
    p.add_argument("--flush-interval", type=float, default=0.05, help="s between forced chunk flushes")
    p.add_argument("--parent-pid", type=int, default=os.getppid())
    args = p.parse_args(argv)
    config = json.loads(sys.stdin.read() or "{}")
    ring = Ring.attach(args.ring)
    ring.forget_name()  # from now on nothing is left in /dev/shm, whichever process dies first
    return serve(args.path, config, ring, args.max_bytes, args.flush_interval, args.parent_pid)


if __name__ == "__main__":
    sys.exit(main())
