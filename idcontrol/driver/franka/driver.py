"""The Franka arm (Panda, FR3) behind the driver SDK, on libfranka's torque control (pylibfranka).

libfranka's arm controller is the clock: every 1 ms it sends the arm's state, and the command answering it must
be back before the next. The loop, once per state (:meth:`FrankaDriver._run_realtime`):

1. ``readOnce()`` blocks until the arm's next state; its ``Duration`` says how many 1 ms cycles have passed
   (more than one: the loop missed the arm's cycles, :attr:`FrankaReport.robot_cycles_missed`);
2. the state goes to the daemon, the command is awaited until one cycle of the arm after the read (the median
   interval between its states, at least the daemon's period: 1 ms on an arm; a simulator slower than real time,
   such as franky-sim on a loaded machine, has a longer cycle, and a command within it is in time for it);
3. ``writeOnce(Torques)`` answers the state: the daemon's torque, or, when it is late, the last one once more
   (the SDK's late-command rule: after 20 late in a row the driver's own safe stop, joint damping).

**Gravity.** The arm's controller adds its own gravity torque g_franka(q) (its model, with the hand and the load
set in Desk) to every torque command. The daemon's ``run`` torque is the whole joint torque, gravity included
(inverse dynamics), so the driver sends τ − g(q), where g is chosen by ``gravity``:

* ``"model"`` (default): g_model(q) of the daemon's robot file (Pinocchio). The joints then get
  τ + (g_franka − g_model): the arm's own gravity model stands in for the robot file's;
* ``"libfranka"``: libfranka's ``Model.gravity`` each cycle. The joints get exactly τ.

The gap between the two at the first state is reported (:attr:`FrankaReport.gravity_gap_nm`). Torques without
gravity in them (the daemon's ``safe_stop`` damping or hold, the driver's own damping, the hold in ``idle`` and
``stopped``) are sent as they are: the arm keeps compensating its weight while it is stopped.

**Modes.** ``run`` and ``safe_stop``: the daemon's torque. ``idle`` and ``stopped``: joint damping
(:attr:`FrankaSettings.hold_damping`), which holds a gravity-compensated arm still (torque control has no brakes).
A dry run (:attr:`FrankaSettings.dry_run`) starts no torque control: it reads the arm with ``read_once`` and
logs the torques it would send.

**Errors.** A libfranka exception ends the session: it becomes a :class:`~idcontrol.driver.franka.reasons.FrankaStop`,
logged, sent to the daemon as an admin ``stop`` with that reason (when an admin client is given), kept in the
report, and raised as :class:`FrankaStopped`.
"""

from __future__ import annotations

import ipaddress
import logging
import time
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import pinocchio as pin

from idcontrol.driver.franka.joints import ARM_DOF, ArmJoints
from idcontrol.driver.franka.reasons import FrankaStop, flags_in
from idcontrol.driver.loop import CLOCKS, DRIVEN_MODES, Driver, DriverReport, DriverState
from idcontrol.errors import ConfigError, IdControlError, MissingDependency
from idcontrol.protocol import CommandMessage
from idcontrol.robot.model import RobotModel
from idcontrol.timing import Series, percentiles_us

log = logging.getLogger("idcontrol.driver.franka")

GRAVITY_SOURCES = ("model", "libfranka")
#: Read intervals over which the arm's cycle is measured (their median).
CYCLE_WINDOW = 64
#: libfranka's example thresholds (its examples' setDefaultBehavior), N·m per joint and N / N·m Cartesian: a
#: contact above them is a reflex. The same for the lower (contact) and upper (collision) thresholds.
COLLISION_TORQUE_NM = (20.0, 20.0, 18.0, 18.0, 16.0, 14.0, 12.0)
COLLISION_FORCE_N = (20.0, 20.0, 20.0, 25.0, 25.0, 25.0)


class FrankaStopped(IdControlError):
    """libfranka ended the torque-control session (a reflex, a lost connection, ...): :attr:`stop` says why."""

    def __init__(self, stop: FrankaStop) -> None:
        self.stop = stop
        super().__init__(stop.reason())


def import_pylibfranka() -> Any:
    """The pylibfranka module, or MissingDependency naming the ``franka`` extra."""
    try:
        import pylibfranka
    except ImportError as e:
        raise MissingDependency("pylibfranka", "franka", "idcontrol driver franka") from e
    return pylibfranka


def is_loopback(host: str) -> bool:
    """Whether ``host`` is a loopback address (127.0.0.0/8, ::1) or ``localhost``."""
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


@dataclass(frozen=True)
class FrankaSettings:
    """How the driver drives the arm.

    robot_ip : the arm's controller (a loopback address: franky-sim).
    hardware : must be True for an address off loopback (a real arm): the first start is deliberate.
    gravity : ``"model"`` or ``"libfranka"`` (module docstring, "Gravity").
    torque_fraction : the arm's torque limit, as a fraction of the robot file's (URDF effort) limits; each joint's
        total torque is clipped to it. Raise it deliberately (at most 1).
    dry_run : read the arm and log the torques, send none (no torque control is started).
    hold_damping : joint damping in ``idle`` and ``stopped``, N·m·s/rad.
    realtime : libfranka's RealtimeConfig kEnforce (a PREEMPT_RT kernel; needed on a real arm) or kIgnore.
    log_every : a dry run logs every this many-th torque.
    clock : ``"realtime"`` (an arm; franky-sim as it comes) or ``"lockstep"`` (a simulator that waits for each
        command before it steps: ``python -m idcontrol.driver.franka.sim --lockstep``): the daemon's session clock;
        in lock-step a command is late after the SDK's ``resend_s`` (0.1 s) instead of one cycle of the arm.
    """

    robot_ip: str
    hardware: bool = False
    gravity: str = "model"
    torque_fraction: float = 0.5
    dry_run: bool = False
    hold_damping: float = 2.0
    realtime: bool = False
    log_every: int = 100
    clock: str = "realtime"

    def __post_init__(self) -> None:
        if self.clock not in CLOCKS:
            raise ConfigError(f"clock must be one of {list(CLOCKS)}, got {self.clock!r}")
        if self.clock == "lockstep" and not is_loopback(self.robot_ip):
            raise ConfigError("a real arm is not lock-step: --clock lockstep is for franky-sim on loopback")
        if self.gravity not in GRAVITY_SOURCES:
            raise ConfigError(f"gravity must be one of {list(GRAVITY_SOURCES)}, got {self.gravity!r}")
        if not 0.0 < self.torque_fraction <= 1.0:
            raise ConfigError(f"torque_fraction must be in (0, 1], got {self.torque_fraction!r}")
        if not is_loopback(self.robot_ip) and not self.hardware:
            raise ConfigError(
                f"{self.robot_ip} is not a loopback address: driving a real arm needs --hardware "
                "(read docs/franka.md, 'First start on a real arm', first)"
            )
        if self.hold_damping < 0.0 or self.log_every < 1:
            raise ConfigError("hold_damping must be >= 0 and log_every >= 1")


@dataclass
class FrankaReport(DriverReport):
    """The SDK's report plus the arm's side (times in µs, torques in N·m).

    robot_ip, gravity : the settings. dry_run : no torque was sent.
    robot_cycles : states read from the arm; robot_cycles_missed : the arm's 1 ms cycles that passed unread
        (a ``readOnce`` Duration over 1 ms).
    read_interval_us : wall time between two reads, p50 / p99 / max (1000 on the arm; a simulator's own pace).
    cycle_us : the arm's cycle at the end: the median of the last CYCLE_WINDOW read intervals, at least the
        daemon's period. A command is in time when it arrives within one cycle of its state's read.
    within_period_fraction : commands that arrived within the daemon's period (1 ms) of their state's read, over
        all due: the fraction in time on an arm whose cycle is 1 ms.
    gravity_model_nm, gravity_libfranka_nm : (7,) g(q) at the first state from the robot file and from
        libfranka's model; gravity_gap_nm : the largest difference.
    torque_clips : joint-cycles clipped to the torque limit; torque_limit_nm : (7,) that limit.
    success_rate_min : the lowest ``control_command_success_rate`` the arm reported (1: no command missed).
    stop_reason : the daemon's stop reason after a libfranka error (None: no error); stop_category, stop_flags.
    """

    robot_ip: str = ""
    gravity: str = "model"
    dry_run: bool = False
    robot_cycles: int = 0
    robot_cycles_missed: int = 0
    read_interval_us: dict[str, float] = field(default_factory=dict)
    cycle_us: float = float("nan")
    within_period_fraction: float = float("nan")
    gravity_model_nm: list[float] = field(default_factory=list)
    gravity_libfranka_nm: list[float] = field(default_factory=list)
    gravity_gap_nm: float = float("nan")
    torque_clips: int = 0
    torque_limit_nm: list[float] = field(default_factory=list)
    success_rate_min: float = float("nan")
    stop_reason: str | None = None
    stop_category: str | None = None
    stop_flags: list[str] = field(default_factory=list)


class FrankaDriver(Driver):
    """A Franka arm served to an idcontrol daemon (module docstring).

    robot : the daemon's robot file (a Panda or FR3: seven arm joints, and fingers that are left to the Gripper).
    endpoint : the daemon's control endpoint.
    settings : :class:`FrankaSettings`.
    admin : an :class:`~idcontrol.client.AdminClient` of the daemon: a libfranka error becomes its ``stop`` with
        the reason (None: the daemon learns of it from its watchdog only).
    """

    def __init__(
        self, robot: RobotModel, endpoint: str, settings: FrankaSettings, *, admin: Any = None, **driver_options: Any
    ) -> None:
        self.franka = import_pylibfranka()
        self.settings, self.admin = settings, admin
        self.joints = ArmJoints.of(robot)
        self.robot_model = robot
        self._pin_data = robot.model.createData()
        super().__init__(robot, endpoint, clock=settings.clock, **driver_options)
        self.report.robot_ip, self.report.gravity, self.report.dry_run = (
            settings.robot_ip,
            settings.gravity,
            settings.dry_run,
        )
        limits = np.asarray(robot.torque_limits, dtype=float)[self.joints.idx_tau] * settings.torque_fraction
        self.torque_limit_nm = limits
        self.report.torque_limit_nm = [round(float(x), 3) for x in limits]
        # the state sent to the daemon: the fingers stay at the robot file's standing posture, at rest
        self._q = robot.standing_configuration()
        self._v = np.zeros(robot.nv)
        self._q_arm = np.zeros(ARM_DOF)
        self._dq_arm = np.zeros(ARM_DOF)
        self._g = np.zeros(ARM_DOF)
        self._t = 0.0
        self._read_at = time.perf_counter()
        self._last_read: float | None = None
        self._reads = Series(1 << 20)
        self._recent_reads_s = np.zeros(CYCLE_WINDOW)  # the last read intervals, s (the arm's cycle)
        self.cycle_s = 1e-3  # the arm's cycle, s: the command's deadline after each read (set from the period)
        self._franka_state: Any = None
        self._libfranka_model: Any = None
        self._control: Any = None
        self._sent = 0
        self.arm = self._connect()

    def _new_report(self) -> FrankaReport:
        return FrankaReport()

    # ------------------------------------------------------------------ the arm
    def _connect(self) -> Any:
        s, f = self.settings, self.franka
        realtime = f.RealtimeConfig.kEnforce if s.realtime else f.RealtimeConfig.kIgnore
        try:
            arm = f.Robot(s.robot_ip, realtime)
            if not s.dry_run:
                arm.set_collision_behavior(
                    COLLISION_TORQUE_NM, COLLISION_TORQUE_NM, COLLISION_FORCE_N, COLLISION_FORCE_N
                )
            state = arm.read_once()
            try:
                self._libfranka_model = arm.load_model()
            except self._exceptions() as e:
                log.warning("libfranka's model could not be loaded (%s): gravity from the robot file only", e)
        except self._exceptions() as e:
            stop = FrankaStop.of(type(e).__name__, flags_in(str(e)), str(e))
            log.error("cannot connect to the arm at %s: %s", s.robot_ip, stop.reason())
            raise FrankaStopped(stop) from e
        self._measure(state)
        g_model = self._model_gravity()
        self.report.gravity_model_nm = [round(float(x), 4) for x in g_model]
        if self._libfranka_model is not None:
            g_franka = np.asarray(self._libfranka_model.gravity(state), dtype=float)
            self.report.gravity_libfranka_nm = [round(float(x), 4) for x in g_franka]
            self.report.gravity_gap_nm = round(float(np.max(np.abs(g_franka - g_model))), 4)
            if s.gravity == "libfranka" and not np.any(g_franka):
                log.warning(
                    "libfranka's model gives zero gravity torque here (a simulator without its gravity "
                    "vector?): the arm would get the daemon's torque plus its own gravity compensation"
                )
        elif s.gravity == "libfranka":
            raise ConfigError("gravity 'libfranka' needs libfranka's model, which the arm did not give")
        log.info(
            "arm at %s: q %s rad; gravity g_model %s N·m, libfranka %s N·m",
            s.robot_ip,
            np.round(self._q_arm, 3).tolist(),
            self.report.gravity_model_nm,
            self.report.gravity_libfranka_nm,
        )
        return arm

    def _exceptions(self) -> tuple[type[BaseException], ...]:
        f = self.franka
        return (
            f.FrankaException,
            f.ControlException,
            f.NetworkException,
            f.RealtimeException,
            f.InvalidOperationException,
            f.CommandException,
        )

    def _measure(self, state: Any) -> None:
        """Take the arm's joint positions and velocities from a libfranka state into the protocol's q, v."""
        self._franka_state = state
        self._q_arm[:] = state.q
        self._dq_arm[:] = state.dq
        self._q[self.joints.idx_q] = self._q_arm
        self._v[self.joints.idx_v] = self._dq_arm

    def _model_gravity(self) -> np.ndarray:
        """(7,) N·m: the robot file's gravity torque on the arm's joints at the last state (fingers as reported)."""
        g = pin.computeGeneralizedGravity(self.robot_model.model, self._pin_data, self._q)
        return np.asarray(g)[self.joints.idx_v]

    def _gravity(self) -> np.ndarray:
        """(7,) N·m: the gravity torque the arm adds, to be taken out of the daemon's run torque."""
        if self.settings.gravity == "libfranka":
            self._g[:] = self._libfranka_model.gravity(self._franka_state)
        else:
            self._g[:] = self._model_gravity()
        return self._g

    def clock_time(self) -> float:
        """The arm's time, s (1 ms a cycle): ``run``'s duration counts the arm's cycles, not the wall's."""
        return self._t

    # ------------------------------------------------------------------ the SDK's two calls
    def read_state(self) -> DriverState:
        """The arm's next state (blocks until the arm's controller sends it: the loop's clock)."""
        if self._control is not None:
            state, duration = self._control.readOnce()
            elapsed_ms = round(duration.to_sec() * 1000.0)
        else:  # a dry run: the arm's state stream without a control session
            state = self.arm.read_once()
            elapsed_ms = 1
        now = self._read_at = time.perf_counter()
        if self._last_read is not None:
            interval_s = now - self._last_read
            self._reads.add(interval_s * 1e6)
            n = self.report.robot_cycles
            self._recent_reads_s[n % CYCLE_WINDOW] = interval_s
            if (
                n % CYCLE_WINDOW == CYCLE_WINDOW - 1 and self.clock != "lockstep"
            ):  # the median of the window: one slow read does not move it
                self.cycle_s = max(self.period, float(np.median(self._recent_reads_s)))
        self._last_read = now
        r = self.report
        r.robot_cycles += 1
        if elapsed_ms > 1:
            r.robot_cycles_missed += elapsed_ms - 1
        self._t += max(elapsed_ms, 1) * 1e-3 if r.robot_cycles > 1 else 0.0
        self._measure(state)
        rate = float(state.control_command_success_rate)
        if self._control is not None and self._sent > 100 and not rate >= r.success_rate_min:
            r.success_rate_min = rate
        return DriverState(t=self._t, q=self._q, v=self._v)

    def apply(self, tau: np.ndarray, mode: str) -> None:
        """Answer the state just read: ``tau`` (nu,) N·m of the daemon (``run``: gravity included) in ``mode``."""
        if mode in DRIVEN_MODES:
            tau_arm = np.asarray(tau, dtype=float)[self.joints.idx_tau]
        else:  # idle, stopped: hold the gravity-compensated arm still
            tau_arm = -self.settings.hold_damping * self._dq_arm
        clipped = np.clip(tau_arm, -self.torque_limit_nm, self.torque_limit_nm)
        self.report.torque_clips += int(np.count_nonzero(clipped != tau_arm))
        command = clipped - self._gravity() if mode == "run" else clipped
        if self._control is None:
            if self.settings.dry_run and self.report.robot_cycles % self.settings.log_every == 0:
                log.info(
                    "dry run t %.3f s %s: tau %s N·m (sent: %s)",
                    self._t,
                    mode,
                    np.round(clipped, 3).tolist(),
                    np.round(command, 3).tolist(),
                )
            return
        self._control.writeOnce(self.franka.Torques(command.tolist()))
        self._sent += 1

    # ------------------------------------------------------------------ the loop, clocked by the arm
    def _run_lockstep(self, t_end: float | None) -> None:
        self._run_realtime(t_end)  # the same loop; the deadline is the SDK's resend_s (_measure_cycle)

    def _run_realtime(self, t_end: float | None) -> None:
        f = self.franka
        try:
            self.cycle_s = self._measure_cycle()
            log.info(
                "the arm's cycle: %.0f µs (the median of %d intervals between its states)",
                self.cycle_s * 1e6,
                CYCLE_WINDOW,
            )
            if not self.settings.dry_run:
                self._control = self.arm.start_torque_control()
            while not self._done(t_end):
                self._seq += 1
                sent_at = self._send_state()  # read_state: blocks for the arm's next cycle
                self._lateness.add((sent_at - self._read_at) * 1e6)
                command: CommandMessage | None = self._receive(self._read_at + self.cycle_s, sent_at)
                self._apply(command)  # None: late, the last torque once more (then the own safe stop)
        except self._exceptions() as e:
            self._stopped_by_arm(e)
        finally:
            if self._control is not None and self.report.stop_reason is None:
                try:  # end the session cleanly: the arm's controller holds it (motion finished)
                    done = f.Torques([0.0] * ARM_DOF)
                    done.motion_finished = True
                    self._control.writeOnce(done)
                except self._exceptions() as e:
                    log.warning("ending torque control: %s", e)
            self._control = None

    def _measure_cycle(self) -> float:
        """The arm's cycle, s: the median interval between CYCLE_WINDOW + 1 of its states read before torque control
        starts (at least the daemon's period); lock-step: the SDK's resend_s, the wait for a slow daemon."""
        if self.clock == "lockstep":
            return self.resend_s
        stamps = np.empty(CYCLE_WINDOW + 1)
        for i in range(stamps.size):
            self.arm.read_once()
            stamps[i] = time.perf_counter()
        return max(self.period, float(np.median(np.diff(stamps))))

    def _stopped_by_arm(self, e: BaseException) -> None:
        """A libfranka error: log it, stop the daemon with its reason, raise FrankaStopped."""
        stop = FrankaStop.of(type(e).__name__, flags_in(str(e)), str(e))
        r = self.report
        r.stop_reason, r.stop_category, r.stop_flags = stop.reason(), stop.category, list(stop.flags)
        log.error("libfranka ended torque control (%s): %s", type(e).__name__, stop.reason())
        if self.admin is not None:
            try:
                self.admin.request("stop", reason=stop.reason())
            except (IdControlError, TimeoutError) as admin_error:
                log.warning("could not tell the daemon (%s); its watchdog stops it", admin_error)
        raise FrankaStopped(stop) from e

    def _finish(self) -> None:
        r = self.report
        r.read_interval_us = percentiles_us(self._reads.values())
        r.cycle_us = round(self.cycle_s * 1e6, 1)
        rtt_us = self._rtt.values()
        due = r.commands + r.late_commands
        r.within_period_fraction = float(np.count_nonzero(rtt_us <= self.period * 1e6)) / due if due else float("nan")
