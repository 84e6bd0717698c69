"""The daemon's side of logging: hand each tick record to the writer process, never waiting.

The daemon packs one msgpack record per tick (the telemetry record while a subscriber listens, else the
tick's snapshot, :mod:`idcontrol.logs.snapshot`); :meth:`LogRecorder.tick` copies those bytes into a
bounded shared-memory ring (:mod:`idcontrol.logs.ring`) that the writer process
(:mod:`idcontrol.logs.writer`) drains. When the ring is full the record is dropped and counted
(:attr:`LogRecorder.dropped`, in every later record, in ``status`` and in the run statistics): the tick
never waits on the disk, and wakes no other process.
"""

from __future__ import annotations

import json
import math
import os
import subprocess
import sys
import time
from datetime import datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any

from idcontrol import protocol as wire
from idcontrol.errors import LogError
from idcontrol.logs.ring import Ring
from idcontrol.logs.schema import SCHEMA_VERSION

if TYPE_CHECKING:
    from idcontrol.control.core import ControlCore
    from idcontrol.settings import LaunchConfig

RING_BYTES = 32 << 20  # about 20 s of quadruped ticks at 1 kHz
EVENT_TIMEOUT_S = 0.5  # an admin event may wait this long for room in the ring (never a tick)


def default_log_path(robot: str, directory: str | Path = "logs") -> Path:
    """``logs/<robot>-<YYYYmmdd-HHMMSS>.mcap``, with a counter when that name is taken."""
    stamp = datetime.now().strftime("%Y%m%d-%H%M%S")
    base = Path(directory) / f"{robot}-{stamp}"
    path, n = base.with_suffix(".mcap"), 1
    while path.exists():
        path, n = Path(f"{base}-{n}.mcap"), n + 1
    return path


def describe_run(config: LaunchConfig, core: ControlCore) -> dict[str, Any]:
    """The run's configuration as JSON values: enough to rebuild the same core (see :mod:`idcontrol.tools.replay`)."""
    robot, c = core.robot, config.controller
    return {
        "schema_version": SCHEMA_VERSION,
        "robot": config.robot,
        "launch_file": str(config.path),
        "launch_toml": config.path.read_text(),
        "duration": config.duration,
        "formulation": core.controller.formulation.name,
        "formulation_options": c.options,
        "reference": core.reference.name,
        "reference_options": config.reference.options,
        "gains": {k: getattr(core.gains, k).tolist() for k in ("kp", "kd", "ki")},
        "dt": core.dt,
        "mu": c.mu,
        "penetration_tolerance": c.penetration_tolerance,
        "bridge": {
            "kind": config.bridge.kind,
            "mode": config.bridge.mode,
            "mu": config.bridge.mu,
            "substeps": config.bridge.substeps,
        },
        "nq": robot.nq,
        "nv": robot.nv,
        "joint_names": list(robot.actuated_joints),
        "contact_names": list(robot.sphere_names),
        "object_names": [o.name for o in core.controller.environment.objects],
        "torque_limits": core.tau_limit.tolist(),
        "estimator": _estimator(core),
        "pid": os.getpid(),
        "started_unix": time.time(),
    }


def _estimator(core: ControlCore) -> dict[str, Any] | None:
    """The estimator of the run (its filter, and the covariance's layout: name → [start, stop] rows), or None."""
    estimator = core.estimator
    if estimator is None:
        return None
    layout = {name: [s.start, s.stop] for name, s in estimator.covariance_layout.items()}
    return {"kind": core.estimator_kind, "covariance_layout": layout}


def _plain(value: Any) -> Any:
    """JSON-ready values: containers recursed, NaN and infinities as None, anything else as text."""
    if isinstance(value, dict):
        return {str(k): _plain(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_plain(v) for v in value]
    if isinstance(value, float):
        return value if math.isfinite(value) else None
    if value is None or isinstance(value, (bool, int, str)):
        return value
    return str(value)


class LogRecorder:
    """Start the writer process for ``path`` and feed it records.

    config : the run's configuration (:func:`describe_run`), written first.
    max_bytes : size of one log file before the next segment starts.
    flush_interval : the writer flushes at least this often, s; a crash loses at most this much
        (plus the writer's 10 ms poll).
    ring_bytes : room for records on their way to the writer; beyond it records are dropped.
    Raises :class:`LogError` when the file exists or the writer cannot start.
    """

    def __init__(
        self,
        path: str | Path,
        config: dict[str, Any],
        *,
        max_bytes: int = 1 << 30,
        flush_interval: float = 0.05,
        ring_bytes: int = RING_BYTES,
    ) -> None:
        self.path = Path(path)
        if self.path.exists():
            raise LogError(f"log file {self.path} already exists; logs are never overwritten")
        try:
            self.path.parent.mkdir(parents=True, exist_ok=True)
        except OSError as e:
            raise LogError(f"cannot create the log directory {self.path.parent}: {e.strerror}") from None
        config = {**config, "clock_offset_s": time.time() - time.monotonic()}
        self.ring = Ring.create(ring_bytes)
        cmd = [
            sys.executable,
            "-m",
            "idcontrol.logs.writer",
            str(self.path),
            "--ring",
            self.ring.name,
            "--max-bytes",
            str(max_bytes),
            "--flush-interval",
            str(flush_interval),
            "--parent-pid",
            str(os.getpid()),
        ]
        self.process = subprocess.Popen(cmd, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
        self.process.stdin.write(json.dumps(config))
        self.process.stdin.close()
        line = self.process.stdout.readline().strip()
        if line == "ready":
            self.ring.disown()  # the writer removed the ring's name once attached
        else:
            self.process.wait(timeout=10)
            try:
                self.ring.forget_name()
            except FileNotFoundError:
                self.ring.disown()
            self.ring.close()
            raise LogError(line.removeprefix("error ") or f"the log writer exited with code {self.process.returncode}")
        self.ticks = 0  # records offered
        self.dropped = 0  # records the ring had no room for
        self.events_dropped = 0

    def tick(self, record: bytes) -> None:
        """Queue one packed tick record or snapshot; drop and count it when the ring is full. Never blocks."""
        self.ticks += 1
        if not self.ring.push(record):
            self.dropped += 1

    def event(self, kind: str, now: float, **fields: Any) -> None:
        """Queue an admin change or stop (called between ticks; waits at most ``EVENT_TIMEOUT_S``)."""
        self._push_waiting(
            {"v": wire.PROTOCOL_VERSION, "type": "event", "kind": kind, "now": now, "tick": self.ticks, **fields}
        )

    def _push_waiting(self, record: dict[str, Any]) -> bool:
        raw = wire.pack(record)
        deadline = time.monotonic() + EVENT_TIMEOUT_S
        while not self.ring.push(raw):
            if time.monotonic() > deadline or self.process.poll() is not None:
                self.events_dropped += 1
                return False
            time.sleep(0.001)
        return True

    def status(self) -> dict[str, Any]:
        alive = self.process.poll() is None
        return {
            "log_path": str(self.path),
            "log_dropped": self.dropped,
            "log_writer_pid": self.process.pid,
            "log_writer_alive": alive,
        }

    def close(self, summary: dict[str, Any] | None = None, timeout: float = 10.0) -> None:
        """Send the end record (run statistics), then wait for the writer to finish the file."""
        if self.process.poll() is None:
            end = {
                "v": wire.PROTOCOL_VERSION,
                "type": "end",
                "now": time.monotonic(),
                "ticks": self.ticks,
                "log_dropped": self.dropped,
                "events_dropped": self.events_dropped,
                "stats": summary or {},
            }
            self._push_waiting(_plain(end))
        try:
            self.process.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            self.process.terminate()
            self.process.wait(timeout=timeout)
        self.ring.close()
