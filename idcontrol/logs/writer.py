"""The log writer process: msgpack records from the daemon in, an MCAP file (JSON messages) out.

Run by :class:`idcontrol.logs.recorder.LogRecorder` as ``python -m idcontrol.logs.writer``, so that
encoding, compression and disk writes use their own process (and interpreter lock), never the
daemon's tick. It binds a ZeroMQ PULL socket on loopback, reads the run's configuration (JSON) on
stdin, prints ``ready <endpoint>`` (or ``error <text>``) on stdout, then writes every record it
receives in arrival order.

Crash safety: the chunk in progress is written out and the file flushed at least every
``flush_interval`` s, so a reader recovers every record older than that from a file whose writer
was killed (the file then lacks its summary and footer; see :mod:`idcontrol.logs.reader`). When
the daemon dies, this process notices (its parent changes), writes what it has received and
closes the file properly. Files are size-bounded: past ``max_bytes`` the current file is finished
and the next segment ``<stem>-001.mcap`` (then ``-002`` ...) starts with the configuration and the
events so far. An existing file is never overwritten.
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
import zmq
from mcap.writer import CompressionType, Writer

from idcontrol.errors import LogError
from idcontrol.logs import schema

RCV_HWM = 20000  # records buffered on the writer's side (20 s at 1 kHz)
CHUNK_BYTES = 1 << 20


def segment_path(path: Path, index: int) -> Path:
    """The path of segment ``index`` of a log (0: the path itself)."""
    return path if index == 0 else path.with_name(f"{path.stem}-{index:03d}{path.suffix}")


def _finite_list(array: np.ndarray) -> list:
    if np.isfinite(array).all():
        return array.tolist()
    return np.where(np.isfinite(array), array, None).tolist()  # JSON has no NaN: null


def _float(value: float) -> float | None:
    return value if value == value and abs(value) != float("inf") else None


def json_record(record: dict[str, Any]) -> dict[str, Any]:
    """A daemon record (float64 arrays as bytes) as plain JSON values; (n, 3) fields as rows of 3."""
    out: dict[str, Any] = {}
    for key, value in record.items():
        if key in ("v", "type"):
            continue
        if isinstance(value, bytes):
            array = np.frombuffer(value, dtype="<f8")
            out[key] = _finite_list(array.reshape(-1, 3) if key in schema.ROWS3 else array)
        elif isinstance(value, float):
            out[key] = _float(value)
        elif key == "objects":
            out[key] = {name: {k: _finite_list(np.frombuffer(b, dtype="<f8")) for k, b in pose.items()}
                        for name, pose in value.items()}  # fmt: skip
        else:
            out[key] = value
    return out


class SegmentedLog:
    """An MCAP log split into files of at most about ``max_bytes`` each."""

    def __init__(self, path: Path, config: dict[str, Any], max_bytes: int) -> None:
        self.path = path
        self.max_bytes = max_bytes
        self.config_json = json.dumps(config).encode()
        self.clock_offset = float(config.get("clock_offset_s", 0.0))  # Unix time minus the daemon's monotonic
        self.events: list[tuple[int, bytes]] = []  # (log time, JSON), repeated in each new segment
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
        w.add_metadata(schema.METADATA_NAME, {"schema_version": str(schema.SCHEMA_VERSION),
                                              "segment": str(self.segment)})  # fmt: skip
        self.channels: dict[str, int] = {}
        for topic, (name, _) in schema.SCHEMAS.items():
            schema_id = w.register_schema(name, "jsonschema", schema.schema_bytes(topic))
            self.channels[topic] = w.register_channel(topic, "json", schema_id)
        self.writer = w
        now_ns = time.time_ns()
        w.add_message(self.channels[schema.CONFIG_TOPIC], now_ns, self.config_json, now_ns)
        for log_time, data in self.events:
            w.add_message(self.channels[schema.EVENT_TOPIC], log_time, data, log_time)
        w.flush()

    def add(self, record: dict[str, Any]) -> bool:
        """Write one daemon record; True when it was the end record."""
        kind = record.get("type")
        log_time = int((float(record.get("now", time.monotonic())) + self.clock_offset) * 1e9)
        data = json.dumps(json_record(record)).encode()
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
        if self.file.tell() > self.max_bytes:
            self.writer.finish()
            self.file.close()
            self.segment += 1
            self._open()
        return kind == "end"

    def flush(self) -> None:
        self.writer.flush()

    def close(self) -> None:
        self.writer.finish()
        self.file.flush()
        os.fsync(self.file.fileno())
        self.file.close()


def serve(path: Path, config: dict[str, Any], max_bytes: int, flush_interval: float, parent_pid: int) -> int:
    """Write records until the end record, SIGTERM, or the daemon's death; returns the exit code."""
    ctx = zmq.Context()
    pull = ctx.socket(zmq.PULL)
    pull.setsockopt(zmq.RCVHWM, RCV_HWM)
    pull.setsockopt(zmq.LINGER, 0)
    port = pull.bind_to_random_port("tcp://127.0.0.1")
    try:
        log = SegmentedLog(path, config, max_bytes)
    except LogError as e:
        print(f"error {e}", flush=True)
        return 2
    stop = []
    signal.signal(signal.SIGTERM, lambda *_: stop.append("SIGTERM"))
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # Ctrl-C stops the daemon, which then ends the log
    print(f"ready tcp://127.0.0.1:{port}", flush=True)
    last_flush = time.monotonic()
    pending = False
    try:
        while True:
            parent_gone = os.getppid() != parent_pid
            if pull.poll(0 if parent_gone or stop else 20):
                for _ in range(1000):  # bounded batch: flushes stay on time under load
                    try:
                        raw = pull.recv(zmq.NOBLOCK)
                    except zmq.Again:
                        break
                    pending = True
                    if log.add(msgpack.unpackb(raw, raw=False)):
                        return 0
                continue_reading = True
            else:
                continue_reading = False
            if pending and time.monotonic() - last_flush >= flush_interval:
                log.flush()
                last_flush, pending = time.monotonic(), False
            if (parent_gone or stop) and not continue_reading:
                return 0
    finally:
        log.close()
        pull.close(linger=0)
        ctx.term()


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m idcontrol.logs.writer", description=__doc__.splitlines()[0])
    p.add_argument("path", type=Path)
    p.add_argument("--max-bytes", type=int, default=1 << 30)
    p.add_argument("--flush-interval", type=float, default=0.05, help="s between forced chunk flushes")
    p.add_argument("--parent-pid", type=int, default=os.getppid())
    args = p.parse_args(argv)
    config = json.loads(sys.stdin.read() or "{}")
    return serve(args.path, config, args.max_bytes, args.flush_interval, args.parent_pid)


if __name__ == "__main__":
    sys.exit(main())
