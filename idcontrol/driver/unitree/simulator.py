"""``idcontrol driver unitree-sim``: a simulated Unitree robot on the robot's own DDS topics, MuJoCo behind it.

It plays the robot's side of the low-level interface, as Unitree's MuJoCo bridge does: it publishes
``rt/lowstate`` (the motors' q, dq and estimated torque in Unitree's motor order, the IMU's quaternion w x y z, gyro,
accelerometer and roll-pitch-yaw, the foot forces, a millisecond ``tick``, the CRC) and takes ``rt/lowcmd``, which it
applies as each motor does: τ = τ_ff + kp (q_target − q) + kd (dq_target − dq), a target at Unitree's "no target"
value (|q| ≥ 2.146e9, |dq| ≥ 16000) dropping its term, a motor whose mode is not 0x01 off.

* A LowCmd whose CRC is wrong is ignored, as the robot ignores it (counted, and said once in the log).
* The robot, from a launch file's ``[bridge]`` (kind, friction, terrain, ``[bridge.sensors]`` and
  ``[bridge.actuators]``: the IMU's reading and the actuators' delay come from them) and the robot file, starts in
  its standing posture **on its stand**: the physics does not advance until the first command with a torque or a
  position gain, while the tick does (a robot held up by its stand while the controller idles).
* ``clock = "lockstep"``: each LowCmd that answers the current LowState (its ``reserve`` echoes the tick) advances one
  control period and the next LowState answers it (a deterministic run on a loaded machine; the LowState is sent
  again every 20 ms until a command comes, and a controller sends its command again when no new LowState comes: a
  sample lost on the best-effort link costs a resend, not the run). ``"realtime"``: a wall
  clock at the launch file's rate, the newest valid command applied at each period.
* The round trip, LowState written → the LowCmd that echoes its tick (a controller writes the tick it answers into
  ``reserve``; this driver does), is measured here, p50/p99/max, and printed with the simulation's truth (the base
  height, a fall) as one JSON line ``{"unitree_sim": {...}}`` at exit (SIGINT/SIGTERM).
"""

from __future__ import annotations

import logging
import math
import signal
import time
from dataclasses import asdict, dataclass, field
from typing import Any

import numpy as np

from idcontrol import jsontext
from idcontrol.driver.unitree.dds import Endpoint
from idcontrol.driver.unitree.driver import GO_HEAD, GO_LEVEL_LOWLEVEL, MOTOR_ON, POS_STOP_F, VEL_STOP_F, layouts
from idcontrol.driver.unitree.messages import Message
from idcontrol.driver.unitree.motors import MotorMap
from idcontrol.errors import ConfigError
from idcontrol.robot.model import RobotModel
from idcontrol.settings import LaunchConfig
from idcontrol.sim.launch import simulator_for
from idcontrol.timing import Series, percentiles_us

log = logging.getLogger("idcontrol.driver.unitree.sim")

#: s between repeats of an unanswered LowState in lock-step
RESEND_S = 0.02


@dataclass
class SimReport:
    """What the simulated robot saw (times in µs; heights in m, world z of the base origin). ``driven``: the ticks
    whose command was torque alone (kp = kd = 0 on every motor on), i.e. while a controller drove the robot, not the
    motors' damping that holds it when the controller does not."""

    ticks: int = 0
    lowstates: int = 0
    lowcmds: int = 0
    crc_rejected: int = 0
    released_at_tick: int | None = None
    sim_time: float = 0.0
    base_height_min: float = math.inf
    driven_ticks: int = 0
    base_height_min_driven: float = math.inf
    fell_while_driven: bool = False
    base_height_trace: list[tuple[int, float, bool]] = field(default_factory=list)  # (tick, z, driven) every 0.25 s
    base_height_final: float = math.nan
    base_position: list[float] = field(default_factory=list)
    fell: bool = False
    roundtrip_us: dict[str, float] = field(default_factory=dict)
    roundtrips: int = 0


class UnitreeSimulator:
    """The simulated robot (see the module docstring).

    config : the launch file (its ``[bridge]``, rate and robot).  robot : its robot model.  family : ``go``.
    fall_fraction : the base below this fraction of its standing height is a fall.  sport_mode : also publish
    ``rt/sportmodestate``, as a robot whose sport-mode service runs (a driver must refuse to start).
    """

    def __init__(
        self,
        config: LaunchConfig,
        robot: RobotModel,
        *,
        family: str = "go",
        interface: str = "lo",
        domain: int = 0,
        clock: str = "lockstep",
        fall_fraction: float = 0.5,
        sport_mode: bool = False,
    ) -> None:
        if clock not in ("lockstep", "realtime"):
            raise ConfigError(f"clock must be 'lockstep' or 'realtime', got {clock!r}")
        if config.bridge.sensors.base != "imu":
            raise ConfigError(
                "the Unitree simulator reports an IMU: its launch file needs [bridge.sensors] "
                'base = "imu" (launch/unitree_stand.toml)'
            )
        self.robot, self.family, self.clock = robot, family, clock
        self.period, self.substeps = config.controller.dt, config.bridge.substeps
        self.sim: Any = simulator_for(config, robot)
        self.motors = MotorMap.of(family, robot.actuated_joints, robot.sphere_names)
        self.link = Endpoint.open(family, interface, domain, "lowstate")
        self._sport = self.link.sport_mode_writer() if sport_mode and family == "go" else None
        cmd_layout, state_layout = layouts(family)
        self.cmd = c = Message(cmd_layout)
        self.state = s = Message(state_layout)
        n = self.motors.slots
        self._cmd = {k: c.column("motor_cmd", k, n) for k in ("q", "dq", "tau", "kp", "kd")}
        self._cmd_mode = [c.field(f"motor_cmd.{i}.mode") for i in range(n)]
        self._echo = c.field("reserve")[:1]
        self._q, self._dq = s.column("motor_state", "q", n), s.column("motor_state", "dq", n)
        self._tau_est = s.column("motor_state", "tau_est", n)
        for slot in self.motors.motor:
            s.field(f"motor_state.{int(slot)}.mode")[0] = MOTOR_ON
        if family == "go":
            s.field("head")[:] = GO_HEAD
            s.field("level_flag")[0] = GO_LEVEL_LOWLEVEL
        self._tick = s.field("tick")
        standing = robot.standing_configuration()
        self.standing_height = float(standing[2]) if robot.floating_base else math.nan
        self.fall_height = fall_fraction * self.standing_height
        self._joint_q, self._joint_v = robot.actuated_idx_q, robot.actuated_dofs
        self._active = np.zeros(n, dtype=bool)
        self._target = {k: np.zeros(n) for k in self._cmd}
        self._released = False
        self._k = 0
        self._published: dict[int, float] = {}
        self._rtt = Series(1 << 20)
        self._stop = False
        self.report = SimReport()

    # ------------------------------------------------------------------ the robot's side
    def _truth(self) -> Any:
        truth = getattr(self.sim, "truth", None)
        return truth() if truth is not None else self.sim.state()

    def publish(self) -> None:
        """Write the LowState of now (tick = control periods in ms)."""
        sensed = self.sim.state()
        motor = self.motors.motor
        self._q[motor] = sensed.q[self._joint_q]
        self._dq[motor] = sensed.v[self._joint_v]
        s = self.state
        imu = sensed.imu
        x, y, z, w = imu.orientation_xyzw
        s.field("imu_state.quaternion")[:] = (w, x, y, z)
        s.field("imu_state.gyroscope")[:] = imu.angular_velocity
        s.field("imu_state.accelerometer")[:] = imu.linear_acceleration
        s.field("imu_state.rpy")[:] = _rpy(float(w), float(x), float(y), float(z))
        if self.family == "go":
            forces = self._truth().contact_forces
            if forces is not None and self.motors.feet is not None:
                f = np.zeros(4)
                for sphere, foot in enumerate(self.motors.feet):
                    if foot >= 0:
                        f[foot] = np.asarray(forces).reshape(-1, 3)[sphere, 2]
                s.field("foot_force")[:] = np.clip(np.round(f), -32768, 32767)
        tick = int(round(self._k * self.period * 1000.0))
        self._tick[0] = tick
        s.seal()
        self._published[tick] = time.perf_counter()
        if len(self._published) > 64:
            self._published.pop(next(iter(self._published)))
        self.link.write(s.wire)
        self.report.lowstates += 1
        if self._sport is not None and self.report.lowstates % 20 == 1:
            writer, sample = self._sport
            writer.write(sample)

    def receive(self, sample: bytes) -> bool:
        """Take a LowCmd in: whether it was valid (a wrong CRC or size: ignored)."""
        arrived = time.perf_counter()
        try:
            self.cmd.load(sample)
        except Exception as e:  # a sample of another size: not a command this robot reads
            log.warning("ignored a LowCmd: %s", e)
            self.report.crc_rejected += 1
            return False
        if not self.cmd.crc_ok():
            if self.report.crc_rejected == 0:
                log.warning(
                    "ignored a LowCmd whose CRC is wrong (0x%08x, expected 0x%08x), as the robot does",
                    int(self.cmd.field("crc")[0]),
                    self.cmd.crc(),
                )
            self.report.crc_rejected += 1
            return False
        self.report.lowcmds += 1
        sent = self._published.pop(int(self._echo[0]), None)  # the first command answering that state
        if sent is not None:
            self._rtt.add((arrived - sent) * 1e6)
            self.report.roundtrips += 1
        for k, view in self._cmd.items():
            self._target[k][:] = view
        self._active[:] = [int(m[0]) == MOTOR_ON for m in self._cmd_mode]
        if not self._released and np.any(self._active & ((self._target["tau"] != 0) | (self._target["kp"] != 0))):
            self._released = True
            self.report.released_at_tick = int(self._tick[0])
            log.info("released from the stand at tick %d", self.report.released_at_tick)
        return True

    def _motor_torque(self) -> np.ndarray:
        """Each motor's torque for the robot's joints (nu,) N·m, from the last valid command."""
        truth = self._truth()
        motor = self.motors.motor
        q, dq = truth.q[self._joint_q], truth.v[self._joint_v]
        t = self._target
        q_target, dq_target = t["q"][motor], t["dq"][motor]
        tau = t["tau"][motor].copy()
        tau += np.where(np.abs(q_target) < POS_STOP_F, t["kp"][motor] * (q_target - q), 0.0)
        tau += np.where(np.abs(dq_target) < VEL_STOP_F, t["kd"][motor] * (dq_target - dq), 0.0)
        tau[~self._active[motor]] = 0.0
        self._tau_est[motor] = tau
        return tau

    def advance(self) -> None:
        """One control period: the physics steps when released from the stand; the tick always."""
        if self._released:
            for _ in range(self.substeps):
                self.sim.step(self._motor_torque())
        self._k += 1
        r = self.report
        r.ticks += 1
        if self.robot.floating_base:
            z = float(self._truth().q[2])
            r.base_height_min = min(r.base_height_min, z)
            driven = self._released and self._driven()
            if r.ticks % max(1, round(0.25 / self.period)) == 0:
                r.base_height_trace.append((int(self._tick[0]), round(z, 4), driven))
            if driven:
                r.driven_ticks += 1
                r.base_height_min_driven = min(r.base_height_min_driven, z)
                r.fell_while_driven = r.fell_while_driven or z < self.fall_height
            if z < self.fall_height and not r.fell:
                r.fell = True
                log.warning(
                    "the robot fell: base at %.3f m (standing %.3f m) at tick %d",
                    z,
                    self.standing_height,
                    int(self._tick[0]),
                )

    def _driven(self) -> bool:
        motor = self.motors.motor
        on = self._active[motor]
        return bool(
            np.any(on) and np.all(self._target["kp"][motor][on] == 0) and np.all(self._target["kd"][motor][on] == 0)
        )

    # ------------------------------------------------------------------ loops
    def request_stop(self) -> None:
        self._stop = True

    def run(self, duration: float | None = None) -> SimReport:
        """Serve until :meth:`request_stop` (or ``duration`` s of wall time)."""
        t_end = None if not duration else time.monotonic() + duration
        try:
            if self.clock == "lockstep":
                self._run_lockstep(t_end)
            else:
                self._run_realtime(t_end)
        finally:
            self._finish()
        return self.report

    def _done(self, t_end: float | None) -> bool:
        return self._stop or (t_end is not None and time.monotonic() >= t_end)

    def _run_lockstep(self, t_end: float | None) -> None:
        while not self._done(t_end):
            self.publish()
            resend_at = time.monotonic() + RESEND_S
            while not self._done(t_end):
                sample = self.link.wait(max(resend_at - time.monotonic(), 0.0))
                if sample is not None and self.receive(sample) and int(self._echo[0]) == int(self._tick[0]):
                    self.advance()  # a command answering this state (one sent again for an older one: not)
                    break
                if time.monotonic() >= resend_at:
                    self.publish()
                    resend_at = time.monotonic() + RESEND_S

    def _run_realtime(self, t_end: float | None) -> None:
        boundary = time.perf_counter()
        while not self._done(t_end):
            self.advance()
            self.publish()
            boundary += self.period
            late = time.perf_counter() - boundary
            if late > 0:
                boundary += math.ceil(late / self.period) * self.period
            while True:
                remaining = boundary - time.perf_counter()
                if remaining <= 0:
                    break
                sample = self.link.wait(remaining)
                if sample is not None:
                    self.receive(sample)

    def _finish(self) -> None:
        r = self.report
        r.roundtrip_us = percentiles_us(self._rtt.values())
        r.sim_time = float(self.sim.time)
        if self.robot.floating_base:
            truth = self._truth()
            r.base_height_final = float(truth.q[2])
            r.base_position = [float(x) for x in truth.q[0:3]]

    def main(self, duration: float | None = None) -> int:
        """Run as a process: SIGINT/SIGTERM stop it; the report is printed as one JSON line."""
        for sig in (signal.SIGINT, signal.SIGTERM):
            signal.signal(sig, lambda *_: self.request_stop())
        log.info("simulated %s on rt/lowstate, rt/lowcmd (%s, %s)", self.robot.name, self.family, self.clock)
        report = self.run(duration)
        print(jsontext.dumps({"unitree_sim": asdict(report)}), flush=True)
        return 0


def _rpy(w: float, x: float, y: float, z: float) -> tuple[float, float, float]:
    """Roll, pitch, yaw (rad, ZYX) of a unit quaternion."""
    roll = math.atan2(2.0 * (w * x + y * z), 1.0 - 2.0 * (x * x + y * y))
    pitch = math.asin(max(-1.0, min(1.0, 2.0 * (w * y - z * x))))
    yaw = math.atan2(2.0 * (w * z + x * y), 1.0 - 2.0 * (y * y + z * z))
    return roll, pitch, yaw
