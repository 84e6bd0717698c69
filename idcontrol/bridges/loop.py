"""The simulator side of the control channel: send state, apply the daemon's torque, step.

:class:`BridgeLoop` drives any simulator with ``state()`` / ``step(tau)``
(any :class:`~idcontrol.sim.base.Simulator`: MuJoCo, the rigid simulator) against a daemon:

* **lock-step** (deterministic): send the state, wait for its command, step.
  Without an answer the simulation does not advance; the state is re-sent
  every ``resend_s`` so a restarted daemon picks the run up.
* **real-time**: the bridge is a 1 kHz wall clock. At each period boundary it
  applies the command that answered the previous state; a command that has
  not arrived is late: the last torque is reused for that period, and after
  ``late_limit`` late commands in a row the bridge safe-stops by itself
  (joint damping), as Franka's FCI does. It resumes only after the daemon
  has itself left run mode and been started again (an explicit start).

In both modes the simulator only advances while the daemon commands ``run``
or ``safe_stop``; in ``idle`` and ``stopped`` it holds still, as a robot on
its brakes would.
"""

from __future__ import annotations

import gc
import json
import logging
import signal
import time
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import zmq

from idcontrol import protocol as wire
from idcontrol.contacts.world import ObjectState
from idcontrol.control.modes import MODE_IDLE, MODE_RUN, MODE_SAFE_STOP
from idcontrol.errors import ConfigError, IdControlError, ProtocolError
from idcontrol.realtime import wait_readable
from idcontrol.robot.model import RobotModel
from idcontrol.security import Credential, KeyDirectory
from idcontrol.sim.base import Simulator
from idcontrol.timing import Series, percentiles_us

log = logging.getLogger("idcontrol.bridge")



@dataclass
class BridgeReport:
    """The bridge's own statistics of a run (printed as one JSON line at exit)."""

    steps: int = 0
    states_sent: int = 0
    commands: int = 0
    late_commands: int = 0
    max_late_in_a_row: int = 0
    safe_stops: int = 0
    safe_stop_at: float | None = None  # time.monotonic() when the bridge last stopped the robot itself, s
    errors: int = 0
    sim_time: float = 0.0
    roundtrip_us: dict[str, float] = field(default_factory=dict)
    base_position: list[float] = field(default_factory=list)


class BridgeLoop:
    """Serve a simulator to a daemon over the control channel.

    endpoint : the daemon's control endpoint (the bridge connects a DEALER).
    period : control period, s; ``substeps`` physics steps of the simulator per period.
    damping : the bridge's own safe-stop damping, N·m·s/rad.
    curve : the key directory of a daemon that authenticates its peers (:mod:`idcontrol.security`).
    spin_us : wait for each command by polling without sleeping for up to this long, µs (0: block).
    """

    def __init__(
        self,
        sim: Simulator,
        robot: RobotModel,
        endpoint: str,
        *,
        mode: str = "lockstep",
        period: float = 1e-3,
        substeps: int = 1,
        late_limit: int = 20,
        damping: float = 0.5,
        resend_s: float = 0.1,
        context: zmq.Context | None = None,
        curve: KeyDirectory | None = None,
        spin_us: float = 0.0,
        token: str | None = None,
    ) -> None:
        if mode not in ("lockstep", "realtime"):
            raise ValueError(f"mode must be 'lockstep' or 'realtime', got {mode!r}")
        self.sim, self.robot, self.mode = sim, robot, mode
        self.period, self.substeps, self.late_limit = period, substeps, late_limit
        self.damping, self.resend_s = damping, resend_s
        self.spin_s = spin_us * 1e-6
        self.endpoint, self.curve, self.token = endpoint, curve, token
        self.socket = (context or zmq.Context.instance()).socket(zmq.DEALER)
        self.socket.setsockopt(zmq.LINGER, 0)
        if curve is not None:
            curve.make_client(self.socket)
        wire.allow_ipv6(self.socket, endpoint)
        self.socket.connect(endpoint)
        self.report = BridgeReport()
        self._rtt = Series(1 << 20)
        self._stop = False
        self._seq = 0
        self._tau = np.zeros(robot.nu)
        self._daemon_mode = MODE_IDLE
        self._safe_stopped = False  # the bridge's own safe stop (late commands)
        self._last_rtt_us: float | None = None
        self._state: Any = None  # the last state sent
        self._act_v = np.asarray(robot.actuated_dofs, dtype=np.intp)

    def request_stop(self) -> None:
        self._stop = True

    # ------------------------------------------------------------------ wire
    def _send_state(self) -> float:
        s = self._state = self.sim.state()  # kept: the safe stop damps the velocity last measured
        objects: dict[str, ObjectState] = s.objects
        # a simulator that knows the order of its step's contact events (ess) lists them as ``last_crossings``
        crossings = [(c.label, c.t, c.how) for c in getattr(self.sim, "last_crossings", ())]
        self.socket.send(wire.encode_state(self._seq, s.t, s.q, s.v, s.contact_forces, objects, self._last_rtt_us,
                                           self._safe_stopped, self._late > 0, crossings))  # fmt: skip
        self.report.states_sent += 1
        return time.perf_counter()

    def _receive(self, deadline: float, sent_at: float) -> wire.CommandMessage | None:
        """The command answering the last state sent, or None if none came by ``deadline`` (perf_counter s)."""
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
                continue
            if command.seq != self._seq:
                continue  # the answer to an older state, already given up on
            rtt_us = (time.perf_counter() - sent_at) * 1e6
            self._rtt.add(rtt_us)
            self.report.commands += 1
            self._last_rtt_us = rtt_us
            return command

    def _send_hello(self) -> bool:
        """Send ``hello`` with the daemon's credential (read again each time unless given or CURVE keys
        authenticate). False when the daemon has made no credential yet (it is not running)."""
        token = self.token
        if token is None and self.curve is None:
            try:
                token = Credential.of_daemon(self.endpoint).token
            except ConfigError:
                return False
        r = self.robot
        self.socket.send(wire.encode_hello(r.name, r.nq, r.nv, r.nu, self.mode, token))
        return True

    def hello(self, timeout_s: float = 10.0) -> dict:
        """Open the session: check that the daemon serves the same robot and show it the credential; returns
        its ``welcome``."""
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline and not self._stop:
            if not self._send_hello():
                time.sleep(0.1)
                continue
            if self.socket.poll(500):
                message = wire.unpack(self.socket.recv(), ("welcome", "error"))
                if message["type"] == "error":
                    code = str(message.get("code"))
                    raise ProtocolError(code, f"daemon refused the bridge ({code}): {message.get('message')}")
                return message
        raise TimeoutError(f"no daemon answered within {timeout_s} s")

    # ------------------------------------------------------------------ stepping
    def _apply(self, command: wire.CommandMessage | None) -> bool:
        """Step the simulator with the command (None: late/missing). Returns whether it stepped."""
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
                log.warning("%d commands late in a row: bridge safe stop", self._late)
        if self._safe_stopped:  # no step since the last state was sent: its velocity is current
            tau = -self.damping * self._state.v[self._act_v]
        elif self._daemon_mode in (MODE_RUN, MODE_SAFE_STOP):
            tau = self._tau
        else:
            return False  # idle / stopped: hold still
        for _ in range(self.substeps):
            self.sim.step(tau)
        self.report.steps += 1
        return True

    def run(self, duration: float | None = None) -> BridgeReport:
        """Serve until :meth:`request_stop`, SIGTERM/SIGINT, or ``duration`` s of simulated run time."""
        self._late = 0
        t_end = None if not duration else self.sim.time + duration
        try:
            if self.mode == "lockstep":
                self._run_lockstep(t_end)
            else:
                self._run_realtime(t_end)
        finally:
            s = self.sim.state()
            self.report.sim_time = float(s.t)
            self.report.base_position = [float(x) for x in s.q[:3]] if self.robot.floating_base else []
            self.report.roundtrip_us = percentiles_us(self._rtt.values())
            self.socket.close(linger=0)
        return self.report

    def _done(self, t_end: float | None) -> bool:
        return self._stop or (t_end is not None and self.sim.time >= t_end)

    def _run_lockstep(self, t_end: float | None) -> None:
        while not self._done(t_end):
            self._seq += 1
            sent_at = self._send_state()
            command = self._receive(sent_at + self.resend_s, sent_at)
            if command is None:
                continue  # the daemon is gone or slow: the simulation waits (deterministic)
            if not self._apply(command):
                time.sleep(self.period)  # idle: keep the heartbeat at about the control rate

    def _run_realtime(self, t_end: float | None) -> None:
        boundary = time.perf_counter()
        command: wire.CommandMessage | None = None
        first = True
        while not self._done(t_end):
            if not first:
                self._apply(command)
            first = False
            self._seq += 1
            sent_at = self._send_state()
            boundary += self.period
            late_by = time.perf_counter() - boundary
            if late_by > 0:  # the simulator itself overran: skip the missed boundaries
                boundary += np.ceil(late_by / self.period) * self.period
            command = self._receive(boundary, sent_at)  # None: late
            remaining = boundary - time.perf_counter()
            if remaining > 0:
                time.sleep(remaining)


def run_bridge(sim: Simulator, robot: RobotModel, endpoint: str, duration: float | None = None, **options) -> int:
    """Run a bridge process: hello, serve, print the report as one JSON line on stdout."""
    loop = BridgeLoop(sim, robot, endpoint, **options)
    for sig in (signal.SIGINT, signal.SIGTERM):
        signal.signal(sig, lambda *_: loop.request_stop())
    try:
        loop.hello()
    except (TimeoutError, ProtocolError) as e:
        log.error("%s", e)
        return 2
    gc.collect()
    gc.freeze()  # start-up objects are never scanned again: shorter collector pauses in the loop
    try:
        report = loop.run(duration)
    except IdControlError as e:  # the simulation itself failed (diverged, an unsolvable contact step)
        log.error("simulation failed: %s; the bridge stops (the daemon's watchdog then stops the robot)", e)
        print(json.dumps({"bridge": loop.report.__dict__, "error": str(e)}), flush=True)
        return 3
    print(json.dumps({"bridge": report.__dict__}), flush=True)
    return 0
