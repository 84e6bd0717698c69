"""The driver side of the control channel, once for every robot and simulator (docs/driver.md).

A robot integrator gives :class:`Driver` two things, by subclassing it or by passing two callables:

* ``read_state() -> DriverState``: the robot's measured state now, in the protocol's conventions
  (docs/protocol.md, "Conventions");
* ``apply(tau, mode)``: what to do for the coming period: ``tau`` (nu,) N·m in ``welcome.joint_names`` order,
  ``mode`` one of ``idle``, ``run``, ``safe_stop``, ``stopped`` (idle and stopped: ``tau`` is zeros; brakes on).

The driver does the rest of the protocol:

* **hello and version**: opens the session with the daemon's credential, checks the robot and the sizes;
* **seq**: one strictly increasing number per state;
* **the period** (``clock = "realtime"``): at each boundary it applies the command that answered the previous
  state, reads the state, sends it, and waits for the command until the next boundary;
* **the late-command rule**: a command that has not arrived at its boundary is late: the last torque is
  reused for that period and the next state says ``last_late``; after ``late_limit`` (20) late commands in a row
  the driver stops the robot on its own (:meth:`Driver.safe_stop_torque`, joint damping), says
  ``bridge_stopped`` in its states, and resumes only after the daemon has left run mode and been started again.
  That rule is the driver's watchdog: a silent daemon stops the robot within ``late_limit`` periods;
* **error replies**: an ``error`` in place of a command counts as a late command; ``unauthorized`` (a restarted
  daemon, a new credential) reads the credential again and says hello again: the driver reconnects by itself;
* **statistics**: :class:`DriverReport`.

``clock = "lockstep"`` serves a simulator that steps only when its command arrives (deterministic): the state is
sent, the command awaited (re-sent every ``resend_s`` for a restarted daemon), applied, and so on.
"""

from __future__ import annotations

import gc
import logging
import math
import signal
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

import numpy as np
import zmq
from numpy.typing import NDArray

from idcontrol import jsontext
from idcontrol import protocol as wire
from idcontrol.contacts.world import ObjectState
from idcontrol.control.modes import MODE_IDLE, MODE_RUN, MODE_SAFE_STOP, MODE_STOPPED
from idcontrol.errors import ConfigError, IdControlError, ProtocolError
from idcontrol.realtime import wait_readable
from idcontrol.security import Credential, KeyDirectory
from idcontrol.timing import Series, percentiles_us

Array = NDArray[np.float64]
log = logging.getLogger("idcontrol.driver")

CLOCKS = ("realtime", "lockstep")
#: Modes in which the robot is driven with the command's torque; in the others it holds still (brakes).
DRIVEN_MODES = (MODE_RUN, MODE_SAFE_STOP)


@dataclass
class DriverState:
    """One measurement of the robot, in the protocol's conventions (docs/protocol.md, "Conventions").

    t : the driver's clock at the measurement, s.
    q : (nq,) configuration, Pinocchio layout: floating base [x y z (m, world), qx qy qz qw (base → world),
        joints (rad or m)].
    v : (nv,) velocity: floating base [linear, angular velocity of the base in the base frame, joints].
    contact_forces : (k, 3) or (3k,) force the environment applies on each contact sphere, world frame, N
        (``welcome.contact_names`` order), or None when not measured.
    objects : pose and twist of movable bodies by name (world frame), or None.
    crossings : the contact events since the previous state in the order they happened, (label, t s, how) each
        (``how``: e.g. ``touchdown``, ``liftoff``), for a driver that knows them; empty otherwise.
    """

    t: float
    q: Array
    v: Array
    contact_forces: Array | None = None
    objects: Mapping[str, ObjectState] | None = None
    crossings: Sequence[tuple[str, float, str]] = ()


class StateLike(Protocol):
    t: float
    q: Array
    v: Array


@dataclass(frozen=True)
class RobotSizes:
    """What a driver's ``hello`` says about its robot: the name of the daemon's robot file and the sizes.

    actuated_dofs : indices into v of the actuated joints, in ``tau`` order (default: the last nu entries of v,
        right when every joint but a floating base is actuated); the driver's own damping stop uses them.
    """

    name: str
    nq: int
    nv: int
    nu: int
    actuated_dofs: tuple[int, ...] | None = None

    @classmethod
    def of(cls, robot: Any) -> RobotSizes:
        """The sizes of an :class:`idcontrol.robot.model.RobotModel` (or anything with the same attributes)."""
        return cls(robot.name, robot.nq, robot.nv, robot.nu, tuple(int(i) for i in robot.actuated_dofs))

    def dofs(self) -> NDArray[np.intp]:
        dofs = self.actuated_dofs if self.actuated_dofs is not None else range(self.nv - self.nu, self.nv)
        return np.asarray(dofs, dtype=np.intp)


@dataclass
class DriverReport:
    """The driver's own statistics of a run (the launcher prints them; times in µs).

    steps : periods in which the robot was driven (run, safe_stop, or the driver's own safe stop).
    states_sent, commands : states sent, commands received in time (lock-step: at all).
    late_commands : commands that missed their boundary (the last torque was reused), errors in place of a
        command included; max_late_in_a_row : the longest run of them.
    safe_stops : the driver's own safe stops (``late_limit`` late in a row); safe_stop_at : time.monotonic() s
        of the last one.
    errors : error replies from the daemon; hellos : sessions opened (a restarted daemon makes one more).
    overruns : period boundaries the driver itself missed (its own loop or read_state took too long).
    roundtrip_us : state sent → command received, p50 / p99 / max.
    send_lateness_us : how long after its period boundary each state left, p50 / p99 / max (the period's jitter).
    """

    steps: int = 0
    states_sent: int = 0
    commands: int = 0
    late_commands: int = 0
    max_late_in_a_row: int = 0
    safe_stops: int = 0
    safe_stop_at: float | None = None
    errors: int = 0
    hellos: int = 0
    overruns: int = 0
    roundtrip_us: dict[str, float] = field(default_factory=dict)
    send_lateness_us: dict[str, float] = field(default_factory=dict)

    def on_deadline_fraction(self) -> float:
        """Commands in time over all commands due (NaN before the first)."""
        due = self.commands + self.late_commands
        return self.commands / due if due else math.nan


class Driver:
    """Serve a robot to an idcontrol daemon over the control channel (see the module docstring).

    robot : the robot's name and sizes (:class:`RobotSizes`, or a :class:`~idcontrol.robot.model.RobotModel`).
    endpoint : the daemon's control endpoint (the driver connects a DEALER), e.g. ``tcp://127.0.0.1:5555``.
    clock : ``"realtime"`` (a robot, or a simulator paced by the wall clock) or ``"lockstep"``.
    period : control period, s (None: the daemon's, from its ``welcome``).
    late_limit : late commands in a row before the driver's own safe stop.
    damping : the driver's own safe stop, N·m·s/rad (see :meth:`safe_stop_torque`).
    resend_s : lock-step: re-send an unanswered state after this long, s.
    token : the daemon's credential (None: read from the daemon's credential file at each hello, see
        docs/protocol.md "Authorization"); credential_endpoint : the control endpoint as the daemon's launch file
        writes it, which names that file (default: ``endpoint``).
    curve : the key directory of a daemon that authenticates its peers with CURVE (then no token is needed).
    spin_us : poll for each command without sleeping for up to this long after sending the state, µs (0: block).
    read_state, apply : the two callables, when not overriding the methods.
    """

    def __init__(
        self,
        robot: RobotSizes | Any,
        endpoint: str,
        *,
        clock: str = "realtime",
        period: float | None = None,
        late_limit: int = 20,
        damping: float = 0.5,
        resend_s: float = 0.1,
        token: str | None = None,
        credential_endpoint: str | None = None,
        curve: KeyDirectory | None = None,
        spin_us: float = 0.0,
        context: zmq.Context | None = None,
        read_state: Callable[[], StateLike] | None = None,
        apply: Callable[[Array, str], None] | None = None,
    ) -> None:
        if clock not in CLOCKS:
            raise ConfigError(f"clock must be one of {list(CLOCKS)}, got {clock!r}")
        if period is not None and not (0.0 < period < 10.0):
            raise ConfigError(f"period must be in (0, 10) s, got {period!r}")
        if not isinstance(late_limit, int) or late_limit < 1:
            raise ConfigError(f"late_limit must be a positive integer, got {late_limit!r}")
        self.robot = robot if isinstance(robot, RobotSizes) else RobotSizes.of(robot)
        self.clock, self.period, self.late_limit = clock, period, late_limit
        self.damping, self.resend_s, self.spin_s = damping, resend_s, spin_us * 1e-6
        self.endpoint, self.curve, self.token = endpoint, curve, token
        self.credential_endpoint = credential_endpoint or endpoint
        if read_state is not None:
            self.read_state = read_state  # type: ignore[method-assign]
        if apply is not None:
            self.apply = apply  # type: ignore[method-assign]
        self.socket = (context or zmq.Context.instance()).socket(zmq.DEALER)
        self.socket.setsockopt(zmq.LINGER, 0)
        if curve is not None:
            curve.make_client(self.socket)
        wire.allow_ipv6(self.socket, endpoint)
        self.socket.connect(endpoint)
        self.report = self._new_report()
        self.welcome: dict[str, Any] | None = None
        self.last_state: StateLike | None = None  # the last state sent (the own safe stop damps its velocity)
        self._rtt = Series(1 << 20)
        self._lateness = Series(1 << 20)
        self._stop = False
        self._seq = 0
        self._late = 0  # late commands in a row
        self._tau = np.zeros(self.robot.nu)
        self._daemon_mode = MODE_IDLE
        self._safe_stopped = False  # the driver's own safe stop (late commands)
        self._last_rtt_us: float | None = None
        self._dofs = self.robot.dofs()

    # ------------------------------------------------------------------ what an integrator provides
    def read_state(self) -> StateLike:
        """The robot's state now (:class:`DriverState`, or any object with ``t``, ``q``, ``v`` and optionally
        ``contact_forces`` and ``objects``). Override it, or pass ``read_state=``."""
        raise NotImplementedError("give the driver read_state(): subclass Driver or pass read_state=")

    def apply(self, tau: Array, mode: str) -> None:
        """Drive the robot with ``tau`` (nu,) N·m for the coming period in ``mode`` (idle and stopped: zeros, keep
        the brakes on). Override it, or pass ``apply=``."""
        raise NotImplementedError("give the driver apply(tau, mode): subclass Driver or pass apply=")

    def safe_stop_torque(self, state: StateLike) -> Array:
        """The driver's own safe stop (``late_limit`` late commands): joint damping τ = −D q̇, (nu,) N·m."""
        return -self.damping * np.asarray(state.v)[self._dofs]

    def clock_time(self) -> float:
        """The driver's clock for :meth:`run`'s ``duration``, s (default: the wall clock; a simulator: its time)."""
        return time.monotonic()

    def _new_report(self) -> DriverReport:
        return DriverReport()

    # ------------------------------------------------------------------ session
    def request_stop(self) -> None:
        """Make :meth:`run` return after the current period (safe from a signal handler or another thread)."""
        self._stop = True

    @property
    def safe_stopped(self) -> bool:
        """Whether the driver holds the robot in its own safe stop."""
        return self._safe_stopped

    @property
    def daemon_mode(self) -> str:
        """The mode of the last command received (``idle`` before the first)."""
        return self._daemon_mode

    def _send_hello(self) -> bool:
        """Send ``hello`` with the daemon's credential (read again each time unless given, or CURVE keys
        authenticate). False when the daemon has made no credential yet (it is not running)."""
        token = self.token
        if token is None and self.curve is None:
            try:
                token = Credential.of_daemon(self.credential_endpoint).token
            except ConfigError:
                return False
        r = self.robot
        self.socket.send(wire.encode_hello(r.name, r.nq, r.nv, r.nu, self.clock, token))
        return True

    def hello(self, timeout_s: float = 10.0) -> dict[str, Any]:
        """Open the session: show the credential, check that the daemon serves the same robot and speaks protocol
        version 1; returns its ``welcome``. ProtocolError when refused, TimeoutError when no daemon answers."""
        deadline = time.monotonic() + timeout_s
        refused: ProtocolError | None = None
        while time.monotonic() < deadline and not self._stop:
            if not self._send_hello():
                time.sleep(0.1)
                continue
            if self.socket.poll(500):
                message = wire.unpack(self.socket.recv(), ("welcome", "error"))
                if message["type"] == "error":
                    code = str(message.get("code"))
                    refused = ProtocolError(code, f"daemon refused the driver ({code}): {message.get('message')}")
                    if code == "unauthorized" and self.token is None and self.curve is None:
                        # a credential file left by an earlier daemon, read before this one wrote its own: read
                        # it again until the timeout
                        time.sleep(0.1)
                        continue
                    raise refused
                self._welcomed(message)
                return message
        if refused is not None:
            raise refused
        if self._stop:  # a stop request (a signal) ended the wait, not the timeout
            waited = timeout_s - max(deadline - time.monotonic(), 0.0)
            raise TimeoutError(f"stopped before a daemon answered at {self.endpoint} ({waited:.1f} s of {timeout_s} s)")
        raise TimeoutError(f"no daemon answered at {self.endpoint} within {timeout_s} s")

    def _welcomed(self, message: dict[str, Any]) -> None:
        self.welcome = message
        self.report.hellos += 1
        if self.period is None:
            dt = message.get("dt")
            if not isinstance(dt, float) or not 0.0 < dt < 10.0:
                raise ProtocolError("bad_field", f"welcome has no usable dt ({dt!r}) and no period was given")
            self.period = dt

    # ------------------------------------------------------------------ wire
    def _send_state(self) -> float:
        """Read, encode and send the state; returns perf_counter s just before the send, where its round trip
        starts (taken after the send, a preemption of this process between the two would hide from the round
        trip the daemon's work done meanwhile, making it shorter than the daemon's own compute time)."""
        s = self.last_state = self.read_state()
        raw = wire.encode_state(
            self._seq,
            float(s.t),
            s.q,
            s.v,
            getattr(s, "contact_forces", None),
            getattr(s, "objects", None),
            self._last_rtt_us,
            self._safe_stopped,
            self._late > 0,
            getattr(s, "crossings", ()),
            getattr(s, "imu", None),
            getattr(s, "truth", None),
        )
        sent_at = time.perf_counter()
        self.socket.send(raw)
        self.report.states_sent += 1
        return sent_at

    def _receive(self, deadline: float, sent_at: float) -> wire.CommandMessage | None:
        """The command answering the last state sent, or None if none came by ``deadline`` (perf_counter s) or an
        error came in its place."""
        while True:
            if not wait_readable(self.socket, deadline - time.perf_counter(), self.spin_s):
                return None
            raw = self.socket.recv()
            try:
                command = wire.decode_command(raw, self.robot.nu)
            except ProtocolError as e:
                self.report.errors += 1
                log.warning("daemon replied %s: %s", e.code, e)
                if e.code == "unauthorized":  # a restarted daemon: a new session, with its new credential
                    self._send_hello()
                if e.seq == self._seq:
                    return None
                continue
            if command is None:  # the welcome of a session opened again
                self.report.hellos += 1
                continue
            if command.seq != self._seq:
                continue  # the answer to an older state, already given up on
            rtt_us = (time.perf_counter() - sent_at) * 1e6
            self._rtt.add(rtt_us)
            self.report.commands += 1
            self._last_rtt_us = rtt_us
            return command

    # ------------------------------------------------------------------ one period
    def _apply(self, command: wire.CommandMessage | None) -> bool:
        """Apply the command (None: late or missing) for the coming period. Returns whether the robot is driven."""
        if command is not None:
            if self._safe_stopped and command.mode != MODE_RUN:
                self._safe_stopped = False  # the daemon left run mode: a new start may resume
            self._daemon_mode = command.mode
            self._late = 0
            self._tau = command.tau
        else:  # late: the next state says so (_late > 0), with no round trip (this command's is unknown)
            self._last_rtt_us = None
            self._late += 1
            self.report.late_commands += 1
            self.report.max_late_in_a_row = max(self.report.max_late_in_a_row, self._late)
            if self._late >= self.late_limit and not self._safe_stopped:
                self._safe_stopped = True
                self.report.safe_stops += 1
                self.report.safe_stop_at = time.monotonic()
                log.warning("%d commands late in a row: driver safe stop", self._late)
        if self._daemon_mode not in DRIVEN_MODES:  # idle / stopped, late or not: the robot stays held
            self.apply(np.zeros(self.robot.nu), self._daemon_mode)
            return False
        if self._safe_stopped:  # nothing applied since the last state was read: its velocity is current
            self.apply(self.safe_stop_torque(self.last_state), MODE_SAFE_STOP)
        else:
            self.apply(self._tau, self._daemon_mode)
        self.report.steps += 1
        return True

    # ------------------------------------------------------------------ the loop
    def run(self, duration: float | None = None) -> DriverReport:
        """Serve until :meth:`request_stop`, or ``duration`` s of :meth:`clock_time` (None or 0: no limit).
        Call :meth:`hello` first (or use :meth:`main`)."""
        if self.period is None:
            raise ConfigError("the driver has no period: give period= or call hello() first (the daemon's dt)")
        self._late = 0
        t_end = None if not duration else self.clock_time() + duration
        gc.collect()
        gc.freeze()  # objects made before the loop are never scanned again: shorter collector pauses in it
        try:
            if self.clock == "lockstep":
                self._run_lockstep(t_end)
            else:
                self._run_realtime(t_end)
        finally:
            self.report.roundtrip_us = percentiles_us(self._rtt.values())
            self.report.send_lateness_us = percentiles_us(self._lateness.values())
            self._finish()
            self.socket.close(linger=0)
        return self.report

    def _finish(self) -> None:
        """Called once when :meth:`run` ends, before the socket closes (a subclass completes its report)."""

    def _done(self, t_end: float | None) -> bool:
        return self._stop or (t_end is not None and self.clock_time() >= t_end)

    def _run_lockstep(self, t_end: float | None) -> None:
        while not self._done(t_end):
            self._seq += 1
            sent_at = self._send_state()
            command = self._receive(sent_at + self.resend_s, sent_at)
            if command is None:
                continue  # the daemon is gone or slow: the robot waits (deterministic)
            if not self._apply(command):
                time.sleep(self.period)  # idle: keep the heartbeat at about the control rate

    def _run_realtime(self, t_end: float | None) -> None:
        period = self.period
        boundary = time.perf_counter()
        command: wire.CommandMessage | None = None
        first = True
        while not self._done(t_end):
            if not first:
                self._apply(command)
            first = False
            self._seq += 1
            sent_at = self._send_state()
            self._lateness.add((sent_at - boundary) * 1e6)
            boundary += period
            late_by = time.perf_counter() - boundary
            if late_by > 0:  # the driver itself overran: skip the missed boundaries
                skipped = math.ceil(late_by / period)
                self.report.overruns += skipped
                boundary += skipped * period
            command = self._receive(boundary, sent_at)  # None: late
            remaining = boundary - time.perf_counter()
            if remaining > 0:
                time.sleep(remaining)

    # ------------------------------------------------------------------ a process
    def main(self, duration: float | None = None, hello_timeout_s: float = 10.0) -> int:
        """Run as a process: SIGINT/SIGTERM stop the loop, hello, serve, print the report as one JSON line
        ``{"bridge": {...}}`` on stdout (the launcher reads it). Exit code 0 (also when stopped before a session
        opened), or 2 when no session could open."""
        for sig in (signal.SIGINT, signal.SIGTERM):
            signal.signal(sig, lambda *_: self.request_stop())
        try:
            self.hello(hello_timeout_s)
        except TimeoutError as e:
            if self._stop:  # asked to stop while waiting: not a failure of the driver
                log.info("%s", e)
                return 0
            log.error("%s", e)
            return 2
        except ProtocolError as e:
            log.error("%s", e)
            return 2
        try:
            report = self.run(duration)
        except IdControlError as e:  # the robot's side failed (a simulation diverged, say)
            log.error("driver failed: %s; it stops (the daemon's watchdog then stops the robot)", e)
            print(jsontext.dumps({"bridge": self.report.__dict__, "error": str(e)}), flush=True)
            return 3
        print(jsontext.dumps({"bridge": report.__dict__}), flush=True)
        return 0


__all__ = [
    "CLOCKS",
    "DRIVEN_MODES",
    "Driver",
    "DriverReport",
    "DriverState",
    "MODE_IDLE",
    "MODE_RUN",
    "MODE_SAFE_STOP",
    "MODE_STOPPED",
    "RobotSizes",
]
