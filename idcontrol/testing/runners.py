"""Run a robot in closed loop and record it: in process, or as daemon + bridge processes over the protocol.

Both runners take a :class:`~idcontrol.settings.LaunchConfig` (read from a launch file with
:func:`~idcontrol.settings.load_launch`, or built by :func:`loop_config`) and assemble the controller
the way the daemon does (:func:`idcontrol.daemon.app.build_core`), so a test exercises the same core
that runs on the robot.

* :func:`run_in_process`: the simulator's state goes straight into :meth:`ControlCore.tick` and the
  command back into ``step``; no sockets, deterministic, fast.
* :func:`run_over_protocol`: ``idcontrol launch``'s daemon and bridge processes on private ``ipc://``
  endpoints; the rows come from the telemetry channel (docs/protocol.md).
"""

from __future__ import annotations

import dataclasses
import json
import math
import tempfile
import threading
import time
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np
import zmq

from idcontrol import protocol as wire
from idcontrol.control.modes import MODE_RUN
from idcontrol.errors import ConfigError, IdControlError
from idcontrol.logs import schema
from idcontrol.reference import Reference
from idcontrol.robot.model import RobotModel
from idcontrol.settings import (
    BridgeSettings,
    ControllerSettings,
    Endpoints,
    LaunchConfig,
    ReferenceSettings,
    load_launch,
)
from idcontrol.sim.base import Simulator
from idcontrol.testing.run import ClosedLoopRun, RunRecorder

if TYPE_CHECKING:
    from idcontrol.client import AdminClient

Gains = tuple[float, float] | dict[str, object]


def loop_config(
    robot: str,
    *,
    formulation: str = "two_stage_qp",
    reference: str = "hold",
    reference_options: dict[str, Any] | None = None,
    formulation_options: dict[str, Any] | None = None,
    mu: float = 1.0,
    sim_mu: float | None = None,
    penetration_tolerance: float = 0.0,
    objects: bool = False,
    simulator: str = "mujoco",
    rate_hz: float = 1000.0,
    substeps: int = 1,
    duration: float = 1.0,
) -> LaunchConfig:
    """A launch configuration in code, with a launch file's defaults (see :mod:`idcontrol.settings`).

    robot : a robot of robots/ or the path of a robot.toml.  mu : the friction the controller assumes;
    sim_mu : the simulator's (default: ``mu``).  objects : the robot file's movable bodies are in the world.
    """
    return LaunchConfig(
        path=Path("<loop_config>"),
        robot=robot,
        duration=float(duration),
        objects=objects,
        controller=ControllerSettings(
            formulation=formulation,
            rate_hz=rate_hz,
            mu=mu,
            penetration_tolerance=penetration_tolerance,
            options=dict(formulation_options or {}),
        ),
        reference=ReferenceSettings(name=reference, options=dict(reference_options or {})),
        bridge=BridgeSettings(kind=simulator, mu=mu if sim_mu is None else sim_mu, substeps=substeps),
        endpoints=Endpoints(),
    )


def _gains(gains: Gains | None) -> dict[str, object]:
    if gains is None:
        return {}
    return dict(gains) if isinstance(gains, dict) else {"kp": gains[0], "kd": gains[1]}


# ---------------------------------------------------------------------------------------------------- in process
def run_in_process(
    config: LaunchConfig,
    seconds: float | None = None,
    *,
    robot: RobotModel | None = None,
    simulator: Simulator | str | None = None,
    gains: Gains | None = None,
    reference: Reference | None = None,
    until: Callable[[Any], bool] | None = None,
) -> ClosedLoopRun:
    """Run ``seconds`` of simulated time (default: the config's duration) or until the core leaves run mode.

    robot : a loaded model to reuse (default: loaded from ``config.robot``).
    simulator : a back end name for :func:`~idcontrol.sim.make_simulator` (default: the
        config's ``[bridge] kind``) or a ready object satisfying :class:`~idcontrol.sim.base.Simulator`.
    gains : (kp, kd) or a dict of kp/kd/ki replacing the robot file's PD(I) gains.
    reference : your own :class:`~idcontrol.reference.Reference`, in place of the config's ``[reference]``.
    until : called with each simulator state before its tick (a place to measure what the rows do not hold);
        the run ends, without ticking that state, when it returns True.
    """
    from idcontrol.control.factory import build_core
    from idcontrol.sim import make_simulator
    from idcontrol.sim.launch import simulator_for

    robot = robot or RobotModel(config.robot)
    seconds = config.duration if seconds is None else seconds
    core = build_core(config, robot)
    if gains is not None:
        core.set_gains(**_gains(gains))
    if reference is not None:
        core.reference = reference
    if simulator is None:
        sim = simulator_for(config, robot)
    elif isinstance(simulator, str):
        b = config.bridge
        sim = make_simulator(
            simulator,
            robot,
            mu=b.mu,
            timestep=config.controller.dt / b.substeps,
            with_objects=config.objects,
            object_mu=b.mu,
        )
    else:
        sim = simulator
    recorder = RunRecorder(robot)
    substeps = config.bridge.substeps
    core.start(0.0)
    end_reason = "duration reached"
    for i in range(int(round(seconds / core.dt))):
        s = sim.state()
        if until is not None and until(s):
            end_reason = "until() returned True"
            break
        started = time.perf_counter()
        state = s.robot_state()
        out = core.tick(state, now=s.t)
        compute_us = (time.perf_counter() - started) * 1e6
        labels = None if out.contacts is None else ["/".join(map(str, c)) for c in out.contacts.ids]
        recorder.add(
            schema.tick_record(
                seq=i,
                state=state,
                command=out,
                compute_us=compute_us,
                now=s.t,
                contact_labels=labels,
                crossings=s.crossings,
                coupling=core.coupling(out),
            )
        )
        if out.mode != MODE_RUN:
            end_reason = core.reason
            break
        for _ in range(substeps):
            sim.step(out.tau)
    return recorder.finish(
        transport="in_process",
        formulation=core.formulation_name,
        dt=core.dt,
        mu=config.controller.mu,
        q_end=np.array(getattr(sim, "truth", sim.state)().q),
        summary=core.metrics.summary(),
        end_reason=end_reason,
    )


# ---------------------------------------------------------------------------------------------------- processes
def _toml(value: object) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int):
        return str(value)
    if isinstance(value, float):
        return ("inf" if value > 0 else "-inf") if math.isinf(value) else "nan" if math.isnan(value) else repr(value)
    if isinstance(value, str):
        return json.dumps(value)
    if isinstance(value, (list, tuple)):
        return "[" + ", ".join(_toml(v) for v in value) + "]"
    if isinstance(value, dict):
        return "{" + ", ".join(f"{json.dumps(str(k))} = {_toml(v)}" for k, v in value.items()) + "}"
    if dataclasses.is_dataclass(value):  # a nested table ([bridge.sensors]): as an inline table
        return _toml({f.name: getattr(value, f.name) for f in dataclasses.fields(value)})
    raise ConfigError(f"cannot write {value!r} ({type(value).__name__}) to a launch file")


def launch_file_text(config: LaunchConfig) -> str:
    """The launch file (TOML) that :func:`~idcontrol.settings.load_launch` reads back as ``config``."""
    lines = [
        f"robot = {_toml(config.robot)}",
        f"duration = {_toml(config.duration)}",
        f"objects = {_toml(config.objects)}",
    ]
    for section in ("controller", "reference", "bridge", "endpoints", "estimator"):
        settings = getattr(config, section)
        lines.append(f"\n[{section}]")
        table = {name: getattr(settings, name) for name in settings.__dataclass_fields__}
        if section == "bridge":  # the kind's own keys are the table's, as the file gives them
            table.update(table.pop("back_end"))
        lines += [f"{name} = {_toml(value)}" for name, value in table.items() if value is not None]
    return "\n".join(lines) + "\n"


#: s a protocol run waits, once the bridge is connected, for its first telemetry record
SUBSCRIBE_TIMEOUT_S = 10.0


class TelemetryCollector:
    """Subscribes to the daemon's telemetry and keeps every raw record (a thread drains the socket)."""

    def __init__(self, endpoint: str) -> None:
        self.socket = zmq.Context.instance().socket(zmq.SUB)
        self.socket.setsockopt(zmq.RCVHWM, 0)  # keep everything: the run is bounded
        self.socket.setsockopt(zmq.LINGER, 0)
        self.socket.setsockopt(zmq.SUBSCRIBE, b"")
        self.socket.connect(endpoint)
        self.records: list[bytes] = []
        self._last_record = time.monotonic()
        self._stop = threading.Event()
        self._first = threading.Event()
        self._thread = threading.Thread(target=self._drain, name="telemetry", daemon=True)
        self._thread.start()

    def _drain(self) -> None:
        while not self._stop.is_set():
            if self.socket.poll(50):
                self.records.append(self.socket.recv())
                self._last_record = time.monotonic()
                self._first.set()

    def wait_for_first(self, timeout_s: float) -> bool:
        """Whether a record has arrived, waiting up to ``timeout_s`` for one: the subscription is then live."""
        return self._first.wait(timeout_s)

    def stop(self, quiet_s: float = 0.2) -> list[bytes]:
        """Stop once nothing has arrived for ``quiet_s``; return the records in arrival order."""
        while time.monotonic() - self._last_record < quiet_s:
            time.sleep(quiet_s / 4)
        self._stop.set()
        self._thread.join()
        self.socket.close(linger=0)
        return self.records


def run_over_protocol(
    config: LaunchConfig,
    seconds: float | None = None,
    *,
    gains: Gains | None = None,
) -> ClosedLoopRun:
    """Run the config's daemon and bridge as processes (as ``idcontrol launch`` does) for ``seconds`` of bridge
    time (default: the config's duration), on private ``ipc://`` endpoints, and record the telemetry.

    The rows run from the first run-mode record to the last one within ``seconds`` (or the first record
    after the daemon left run mode). ``summary`` is the daemon's ``stats`` for the whole run. Raises
    :class:`~idcontrol.errors.IdControlError` when a process fails to start or exits early.
    """
    from idcontrol.launcher import Launch

    seconds = config.duration if seconds is None else seconds
    robot = RobotModel(config.robot)
    gain_fields = _gains(gains)
    with tempfile.TemporaryDirectory(prefix="idc-") as folder:  # short: ipc paths are limited to ~100 bytes
        endpoints = Endpoints(
            control=f"ipc://{folder}/control",
            admin=f"ipc://{folder}/admin",
            telemetry=f"ipc://{folder}/telemetry",
            reference=f"ipc://{folder}/reference" if config.endpoints.reference else None,
        )
        path = Path(folder) / "launch.toml"
        path.write_text(launch_file_text(replace(config, duration=float(seconds), endpoints=endpoints)))
        collector = TelemetryCollector(endpoints.telemetry)

        def prepare(admin: AdminClient) -> None:
            # the daemon publishes its idle ticks too: once one has arrived, the subscription is live and the run's
            # first records cannot be missed (a SUB socket joins a PUB asynchronously; a loaded machine missed 7)
            if not collector.wait_for_first(SUBSCRIBE_TIMEOUT_S):
                raise IdControlError(
                    f"no telemetry reached the run's subscriber within {SUBSCRIBE_TIMEOUT_S:g} s "
                    "of the bridge connecting"
                )
            if gain_fields:
                admin.request("set_gains", **gain_fields)

        launch = Launch(load_launch(path), [], live=False, prepare=prepare)
        try:
            summary = launch.run()
        finally:
            records = collector.stop()
    return _run_from_telemetry(robot, config, records, seconds, summary)


def _run_from_telemetry(
    robot: RobotModel, config: LaunchConfig, raw: list[bytes], seconds: float, summary: dict[str, Any]
) -> ClosedLoopRun:
    recorder = RunRecorder(robot)
    nq = robot.nq
    t0 = None
    seqs = []
    q_end = None
    for message in (wire.unpack(r, ("telemetry",)) for r in raw):
        mode = message["mode"]
        if t0 is None:
            if mode != MODE_RUN:
                continue  # before the start
            t0 = message["t"]
        if message["t"] - t0 > seconds - 0.5 * config.controller.dt:
            q_end = wire.get_array(message, "q", nq)  # the state the last recorded command led to
            break
        recorder.add(schema.decode_tick_record(message))
        seqs.append(message["seq"])
        if mode != MODE_RUN:
            break
    if not seqs:
        raise IdControlError(f"no run-mode telemetry was recorded (the run ended: {summary.get('end')})")
    if q_end is None:  # the run ended before ``seconds``: the state after its last command was not published
        q_end = recorder.rows["q"][-1]
    return recorder.finish(
        transport="protocol",
        formulation=str(summary["formulation"]),
        dt=config.controller.dt,
        mu=config.controller.mu,
        q_end=q_end,
        summary=summary,
        end_reason=str(summary.get("end", "")),
        missing_records=int(seqs[-1] - seqs[0] + 1 - len(seqs)),
    )
