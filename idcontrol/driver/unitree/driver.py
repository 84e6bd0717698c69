"""``idcontrol driver unitree``: a Unitree robot's low-level interface behind the driver SDK (docs/unitree.md).

Each period the driver takes the newest ``rt/lowstate`` (joints, IMU, foot forces), sends it to the daemon in the
sensor form (the daemon's ``[estimator]`` estimates the base), and writes the daemon's torque to ``rt/lowcmd``:
torque only (position and velocity targets at Unitree's "no target" values, kp = kd = 0, τ feed-forward), clipped
to a fraction of the robot file's effort limits, with the message's CRC.

What holds the robot when the daemon does not drive it: the motors' own damping (kp = 0, kd = ``motor_damping``,
τ = 0), computed in the motor from its own encoder, so never from a stale state. It is commanded

* while the daemon is ``idle`` or ``stopped``;
* in the driver's own safe stop: ``late_limit`` late commands in a row (a silent daemon, the SDK's rule), or
  ``stale_limit`` periods without a new LowState (the robot's publisher stopped or its ticks repeat), or a
  LowState whose CRC is wrong that many times in a row: each says why in the log, and the states then say
  ``bridge_stopped``, which safe-stops a running daemon;
* with ``dry_run``: the daemon's torques go to the log (one line a second) and never to the motors.

In real time a command is written the moment it arrives; ``report.unitree["lowstate_to_lowcmd_us"]`` is the
driver's and the daemon's part of the round trip: a fresh LowState taken → the LowCmd answering it written.
"""

from __future__ import annotations

import logging
import math
import time
from typing import Any

import numpy as np

from idcontrol.control.state import ImuReading
from idcontrol.driver.loop import DRIVEN_MODES, Driver, DriverState, RobotSizes
from idcontrol.driver.unitree.dds import Endpoint, is_loopback
from idcontrol.driver.unitree.messages import (
    GO_LOW_CMD_LAYOUT,
    GO_LOW_STATE_LAYOUT,
    HG_LOW_CMD_LAYOUT,
    HG_LOW_STATE_LAYOUT,
    Message,
)
from idcontrol.driver.unitree.motors import MotorMap
from idcontrol.errors import ConfigError, IdControlError, ProtocolError
from idcontrol.robot.model import RobotModel
from idcontrol.timing import Series, percentiles_us

log = logging.getLogger("idcontrol.driver.unitree")

#: Unitree's "no position target" and "no velocity target" values of a motor command
POS_STOP_F, VEL_STOP_F = 2.146e9, 16000.0
#: a Go-class LowCmd's header, and its low-level flag
GO_HEAD, GO_LEVEL_LOWLEVEL = (0xFE, 0xEF), 0xFF
#: a motor command's mode: 0x01 drives the motor (FOC), 0x00 leaves it off
MOTOR_ON, MOTOR_OFF = 0x01, 0x00


def layouts(family: str):
    """(LowCmd, LowState) layouts of a message family."""
    return (GO_LOW_CMD_LAYOUT, GO_LOW_STATE_LAYOUT) if family == "go" else (HG_LOW_CMD_LAYOUT, HG_LOW_STATE_LAYOUT)


class LowCommand:
    """A LowCmd for one robot's motors: torque only, or the motors' damping; ``tick`` echoed in ``reserve``."""

    def __init__(self, family: str, motors: MotorMap) -> None:
        self.family, self.motors = family, motors
        self.message = m = Message(layouts(family)[0])
        n = motors.slots
        self.tau, self.kp, self.kd = (m.column("motor_cmd", name, n) for name in ("tau", "kp", "kd"))
        m.column("motor_cmd", "q", n)[:] = POS_STOP_F
        m.column("motor_cmd", "dq", n)[:] = VEL_STOP_F
        for slot in motors.motor:
            m.field(f"motor_cmd.{int(slot)}.mode")[0] = MOTOR_ON
        if family == "go":
            m.field("head")[:] = GO_HEAD
            m.field("level_flag")[0] = GO_LEVEL_LOWLEVEL
            self.echo = m.field("reserve")
        else:
            self.echo = m.field("reserve")[:1]

    def torque(self, tau: np.ndarray) -> None:
        """τ (nu,) N·m feed-forward, kp = kd = 0."""
        self.tau[self.motors.motor] = tau
        self.kd[:] = 0.0
        self.kp[:] = 0.0

    def damping(self, kd: float) -> None:
        """The motors' own damping: τ = 0, kp = 0, kd N·m·s/rad on the robot's motors."""
        self.tau[:] = 0.0
        self.kp[:] = 0.0
        self.kd[:] = 0.0
        self.kd[self.motors.motor] = kd

    def wire(self, tick: int, mode_machine: int = 0) -> bytes:
        self.echo[0] = tick
        if self.family == "hg":
            self.message.field("mode_machine")[0] = mode_machine
        self.message.seal()
        return self.message.wire


class UnitreeDriver(Driver):
    """The driver (see the module docstring).

    robot : the robot file (its actuated joints are matched to the motors by name, :class:`MotorMap`).
    family : ``go`` (Go2, B2) or ``hg`` (humanoids).  interface : the network interface to the robot (``lo``: a
    simulator on this machine).  domain : the DDS domain id.  hardware : required on any interface but loopback.
    torque_fraction : the torque limit as a fraction of the robot file's effort limits (0, 1].
    motor_damping : kd of the motors' damping, N·m·s/rad.  stale_limit : periods without a new LowState (or with a
    bad CRC) before the driver's own safe stop.  state_timeout_s : how long to wait for the first LowState (and, in
    lock-step, for each).  dry_run : log the daemon's torques, command only damping.  sport_check_s : how long to
    listen for a running sport-mode service (``rt/sportmodestate``) before starting, s (go family; 0: no check).
    """

    def __init__(
        self,
        robot: RobotModel,
        endpoint: str,
        *,
        family: str = "go",
        interface: str = "lo",
        domain: int = 0,
        clock: str = "realtime",
        hardware: bool = False,
        torque_fraction: float = 0.5,
        motor_damping: float = 2.0,
        stale_limit: int = 5,
        state_timeout_s: float = 2.0,
        dry_run: bool = False,
        late_limit: int = 20,
        sport_check_s: float = 1.0,
    ) -> None:
        if not is_loopback(interface) and not hardware:
            raise ConfigError(
                f"interface {interface!r} reaches a robot: the first start on hardware needs --hardware "
                "(read docs/unitree.md, 'Safety', first)"
            )
        if not 0.0 < torque_fraction <= 1.0:
            raise ConfigError(f"torque fraction must be in (0, 1], got {torque_fraction}")
        if stale_limit < 1:
            raise ConfigError(f"stale limit must be a positive integer, got {stale_limit}")
        self.model, self.family = robot, family
        self.motors = MotorMap.of(family, robot.actuated_joints, robot.sphere_names)
        self.torque_limit = torque_fraction * np.asarray(robot.torque_limits, dtype=float)
        self.motor_damping, self.stale_limit, self.state_timeout_s = motor_damping, stale_limit, state_timeout_s
        self.dry_run = dry_run
        self.link = Endpoint.open(family, interface, domain, "lowcmd")
        if family == "go" and sport_check_s > 0 and self.link.sport_mode_running(sport_check_s):
            raise ConfigError(
                "the robot's sport-mode service is running (it publishes rt/sportmodestate): it would "
                "command the motors too. Release it first (the Unitree app, or the SDK's motion "
                "switcher: ReleaseMode), then start the driver again; docs/unitree.md"
            )
        self.command = LowCommand(family, self.motors)
        self.state_message = s = Message(layouts(family)[1])
        self._incoming = Message(layouts(family)[1])  # a sample is checked here before it replaces the state
        self._incoming_tick = self._incoming.field("tick")
        n = self.motors.slots
        self._motor_q, self._motor_dq = s.column("motor_state", "q", n), s.column("motor_state", "dq", n)
        self._quaternion_wxyz = s.field("imu_state.quaternion")
        self._gyro, self._accel = s.field("imu_state.gyroscope"), s.field("imu_state.accelerometer")
        self._tick = s.field("tick")
        self._foot_force = s.field("foot_force") if family == "go" else None
        self._mode_machine = s.field("mode_machine") if family == "hg" else None
        self._idx_q, self._dofs = robot.actuated_idx_q, robot.actuated_dofs
        self._q, self._v = robot.neutral_configuration(), np.zeros(robot.nv)
        self._q[0:7] = (0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 1.0)
        k = len(robot.sphere_names)
        self._forces = np.zeros((k, 3)) if self.motors.feet is not None and np.all(self.motors.feet >= 0) else None
        self._last_tick: int | None = None
        self._stale = 0  # periods in a row without a new, intact LowState
        self._sensor_lost = False
        self._commanded = True  # lock-step: a command went out since the last state was read
        self._read_at: float | None = None  # perf_counter s when the newest LowState was taken, until answered
        self._latency = Series(1 << 20)
        self._last_wire: bytes | None = None  # the last LowCmd written
        self._dry_log_at = 0.0
        self.stats = {"lowstates": 0, "stale_periods": 0, "bad_crc_states": 0, "lowcmds": 0, "sensor_stops": 0}
        # lock-step: a state unanswered for 0.5 s is sent again (not after the SDK's 0.1 s: on a loaded machine a
        # daemon's tick of over 0.1 s made it send the same IMU reading 6 times, which the daemon takes for a stale
        # IMU and stops; its lock-step watchdog is 1 s)
        super().__init__(
            RobotSizes.of(robot), endpoint, clock=clock, late_limit=late_limit, damping=motor_damping, resend_s=0.5
        )

    # ------------------------------------------------------------------ session
    def _welcomed(self, message: dict[str, Any]) -> None:
        if message.get("state_form") != "sensors":
            raise ProtocolError(
                "bad_field",
                "the unitree driver sends what the robot measures (joints, IMU, foot "
                "forces), the sensor form: start the daemon with an [estimator] (e.g. "
                "launch/unitree_stand.toml); this daemon expects the base state too",
            )
        super()._welcomed(message)
        if self._last_tick is None:
            self._first_state()

    def _first_state(self) -> None:
        """Wait for the robot's first LowState (the simulator or robot must be publishing)."""
        deadline = time.monotonic() + self.state_timeout_s
        taken = False
        while not taken and time.monotonic() < deadline and not self._stop:
            sample = self.link.wait(0.05)
            taken = sample is not None and self._take(sample)
        if not taken:
            raise ProtocolError(
                "bad_state",
                f"no intact LowState on rt/lowstate within {self.state_timeout_s:g} s: "
                "is the robot (or the simulator) on this interface and DDS domain?",
            )
        self._commanded = False  # this state is the first one sent

    def _take(self, sample: bytes) -> bool:
        """Load a LowState; whether it is new and intact."""
        incoming = self._incoming
        try:
            incoming.load(sample)
        except IdControlError as e:
            log.warning("%s", e)
            return False
        if not incoming.crc_ok():  # never read: the state sent stays the last intact one
            self.stats["bad_crc_states"] += 1
            return False
        tick = int(self._incoming_tick[0])
        if tick == self._last_tick:
            return False
        self.state_message.buffer[:] = incoming.buffer
        self._last_tick = tick
        self.stats["lowstates"] += 1
        self._read_at = time.perf_counter()
        return True

    # ------------------------------------------------------------------ the SDK's two calls
    def read_state(self) -> DriverState:
        fresh = False
        if self.clock == "lockstep" and not self._commanded:  # a state sent again: no command has gone out since
            return self._state()
        if self.clock == "lockstep":
            deadline = time.monotonic() + self.state_timeout_s
            while not fresh and time.monotonic() < deadline and not self._stop:
                sample = self.link.wait(0.05)
                fresh = sample is not None and self._take(sample)
                if not fresh and self._last_wire is not None:  # the command or its answer lost: send it again
                    self.link.write(self._last_wire)
            if not fresh and not self._stop:
                raise IdControlError(
                    f"no new LowState for {self.state_timeout_s:g} s (lock-step): the simulator "
                    "stopped or left the DDS domain"
                )
        else:
            sample = self.link.take()
            fresh = sample is not None and self._take(sample)
        self._count(fresh)
        self._commanded = False
        return self._state()

    def _count(self, fresh: bool) -> None:
        """Count a period with (``fresh``) or without a new, intact LowState; stop on ``stale_limit`` in a row. The
        stop holds until LowStates come again and the daemon has left run mode (the SDK's rule: a new start)."""
        if fresh:
            self._stale = 0
            if self._sensor_lost and not self._safe_stopped:
                self._sensor_lost = False
                log.info("LowStates again at tick %s: the next start drives the robot", self._last_tick)
            return
        self._stale += 1
        self.stats["stale_periods"] += 1
        if self._stale < self.stale_limit:
            return
        self._safe_stopped = True  # the SDK's own safe stop: states say bridge_stopped
        if not self._sensor_lost:
            self._sensor_lost = True
            self.stats["sensor_stops"] += 1
            self.report.safe_stops += 1
            self.report.safe_stop_at = time.monotonic()
            log.error(
                "no new, intact LowState for %d periods (tick %s; %d with a bad CRC): the robot's publisher "
                "stopped or repeats itself; driver safe stop: motor damping kd = %g",
                self._stale,
                self._last_tick,
                self.stats["bad_crc_states"],
                self.motor_damping,
            )

    def _state(self) -> DriverState:
        q, v = self._q, self._v
        motor = self.motors.motor
        q[self._idx_q] = self._motor_q[motor]
        v[self._dofs] = self._motor_dq[motor]
        t = int(self._tick[0]) * 1e-3
        w, x, y, z = (float(c) for c in self._quaternion_wxyz)
        imu = ImuReading(np.array([x, y, z, w]), self._gyro.astype(float), self._accel.astype(float), t)
        forces = None
        if self._forces is not None and self._foot_force is not None:
            self._forces[:, 2] = self._foot_force[self.motors.feet]
            forces = self._forces.copy()
        state = DriverState(t=t, q=q.copy(), v=v.copy(), contact_forces=forces)
        state.imu = imu  # type: ignore[attr-defined]  # the sensor form (the SDK sends what it finds)
        return state

    def _receive(self, deadline: float, sent_at: float) -> Any:
        """Real time: a command is written to the motors the moment it arrives (the robot takes the newest LowCmd),
        not only at the next period boundary, where the SDK applies it again (or reuses it when the next is late)."""
        command = super()._receive(deadline, sent_at)
        if command is not None and self.clock == "realtime" and command.mode in DRIVEN_MODES:
            self.apply(command.tau, command.mode)
        return command

    def apply(self, tau: np.ndarray, mode: str) -> None:
        if self._read_at is not None:  # the first command after a fresh LowState: the driver's part of the round trip
            self._latency.add((time.perf_counter() - self._read_at) * 1e6)
            self._read_at = None
        driven = mode in DRIVEN_MODES and not self._safe_stopped and not self._sensor_lost
        if driven and not self.dry_run:
            self.command.torque(np.clip(tau, -self.torque_limit, self.torque_limit))
        else:
            self.command.damping(self.motor_damping)
            if driven and time.monotonic() - self._dry_log_at >= 1.0:
                self._dry_log_at = time.monotonic()
                log.info("dry run: %s τ = %s N·m (not sent)", mode, np.array2string(tau, precision=2))
        mode_machine = int(self._mode_machine[0]) if self._mode_machine is not None else 0
        self._last_wire = self.command.wire(int(self._tick[0]), mode_machine)
        self.link.write(self._last_wire)
        self.stats["lowcmds"] += 1
        self._commanded = True

    def safe_stop_torque(self, state: Any) -> np.ndarray:
        """Unused torque of the SDK's own safe stop: :meth:`apply` commands the motors' damping instead."""
        return np.zeros(self.robot.nu)

    def _finish(self) -> None:
        # the last word to the motors: damping, whatever the daemon said
        self.command.damping(self.motor_damping)
        for _ in range(3):
            self.link.write(self.command.wire(int(self._tick[0])))
        self.report.unitree = {**self.stats, "lowstate_to_lowcmd_us": percentiles_us(self._latency.values())}  # type: ignore[attr-defined]
        if self.report.states_sent and not math.isnan(self.report.on_deadline_fraction()):
            log.info("unitree: %s", self.stats)
