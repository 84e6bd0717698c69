"""What logging costs: ``python -m idcontrol.logs.bench [--ticks N] [--robot NAME]``.

1. Daemon side, per tick: the time to build, pack and hand off the tick's record
   (``Daemon._publish``, run after the command is sent) with the telemetry socket alone and with
   telemetry plus the log recorder, on the real core answering the standing robot's states.
2. Writer side, per record: msgpack → JSON → MCAP (zstd chunks, a flush every 50 ms), in one
   process, on the records of step 1; the writer keeps up when this is well under 1 ms.

Prints one JSON object (µs, p50/p99/max).
"""

from __future__ import annotations

import argparse
import json
import tempfile
import time
from pathlib import Path

import msgpack
import numpy as np

from idcontrol.daemon.stats import percentiles_us


def _daemon(robot: str, logger_path: Path | None):
    from idcontrol.controller import InverseDynamicsController
    from idcontrol.daemon.core import ControlCore
    from idcontrol.daemon.endpoints import Endpoints
    from idcontrol.daemon.server import Daemon
    from idcontrol.logs.recorder import LogRecorder
    from idcontrol.reference import make_reference
    from idcontrol.robot.model import RobotModel

    model = RobotModel(robot)
    core = ControlCore(InverseDynamicsController(model, penetration_tolerance=0.001), make_reference("hold", model))
    logger = LogRecorder(logger_path, {"robot": robot, "dt": core.dt}) if logger_path else None
    any_port = "tcp://127.0.0.1:*"
    return Daemon(core, Endpoints(any_port, any_port, any_port), logger=logger)


def publish_cost(robot: str, ticks: int, logger_path: Path | None) -> tuple[np.ndarray, list[bytes]]:
    """µs per tick of ``Daemon._publish`` (telemetry, plus the log when ``logger_path``), and the records."""
    from idcontrol.protocol import StateMessage

    daemon = _daemon(robot, logger_path)
    core = daemon.core
    q, v = core.robot.standing_configuration(), np.zeros(core.robot.nv)
    core.start(time.monotonic())
    records: list[bytes] = []
    sent = daemon.telemetry.send
    daemon.telemetry.send = lambda raw, flags=0: (records.append(raw), sent(raw, flags))[1]
    cost = np.empty(ticks)
    try:
        for i in range(ticks):
            message = StateMessage(i + 1, i * core.dt, q, v, np.zeros((len(core.robot.sphere_names), 3)))
            now = time.monotonic()
            out = core.tick(message, now)
            t0 = time.perf_counter()
            daemon._publish(out, message, 300.0, now)
            cost[i] = (time.perf_counter() - t0) * 1e6
    finally:
        if daemon.logger is not None:
            daemon.logger.close()
        daemon.close()
    return cost, records


def writer_cost(records: list[bytes], path: Path, flush_interval: float = 0.05) -> np.ndarray:
    """µs per record of the writer process's work (decode, JSON, MCAP with periodic flushes)."""
    from idcontrol.logs.writer import SegmentedLog

    log = SegmentedLog(path, {"robot": "bench"}, 1 << 30)
    cost = np.empty(len(records))
    last_flush = time.monotonic()
    for i, raw in enumerate(records):
        t0 = time.perf_counter()
        log.add(msgpack.unpackb(raw, raw=False))
        if time.monotonic() - last_flush >= flush_interval:
            log.flush()
            last_flush = time.monotonic()
        cost[i] = (time.perf_counter() - t0) * 1e6
    log.close()
    return cost


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m idcontrol.logs.bench", description=__doc__.splitlines()[0])
    p.add_argument("--ticks", type=int, default=5000)
    p.add_argument("--robot", default="quadruped")
    args = p.parse_args(argv)
    with tempfile.TemporaryDirectory() as tmp:
        telemetry_only, _ = publish_cost(args.robot, args.ticks, None)
        with_log, records = publish_cost(args.robot, args.ticks, Path(tmp) / "bench.mcap")
        written = writer_cost(records, Path(tmp) / "writer.mcap")
        size = (Path(tmp) / "writer.mcap").stat().st_size
    print(json.dumps({
        "ticks": args.ticks,
        "publish_telemetry_only_us": percentiles_us(telemetry_only),
        "publish_telemetry_and_log_us": percentiles_us(with_log),
        "writer_per_record_us": percentiles_us(written),
        "record_msgpack_bytes": int(np.mean([len(r) for r in records])),
        "log_bytes_per_tick": round(size / len(records), 1),
    }))  # fmt: skip
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
