"""The bridge loop's timing rules, against a scripted daemon on a real loopback socket.

The simulator here is a recording stub (the loop's logic is under test, not
physics); the MuJoCo back end has its own tests. The scripted daemon shares
this process's interpreter, so the loop runs at 200 Hz here: the rules are
the same at any rate, and 5 ms periods keep the test deterministic on a
loaded machine.
"""

from __future__ import annotations

import threading
import time
from dataclasses import dataclass, field

import msgpack
import numpy as np
import pytest
import zmq

from idcontrol import protocol as wire
from idcontrol.bridges.loop import BridgeLoop
from idcontrol.robot.model import RobotModel

ROBOT = RobotModel("quadruped")
PERIOD = 0.005


@dataclass
class StubState:
    t: float
    q: np.ndarray
    v: np.ndarray
    objects: dict = field(default_factory=dict)
    contact_forces: np.ndarray | None = None


class RecordingSim:
    """Advances time by dt per step and records the torques applied."""

    def __init__(self, dt: float = PERIOD) -> None:
        self.dt = dt
        self.applied: list[np.ndarray] = []
        self.v = np.zeros(ROBOT.nv)
        self.v[ROBOT.actuated_dofs] = 0.5

    @property
    def time(self) -> float:
        return len(self.applied) * self.dt

    def state(self) -> StubState:
        return StubState(self.time, ROBOT.standing_configuration(), self.v.copy())

    def step(self, tau: np.ndarray) -> None:
        self.applied.append(np.array(tau, dtype=float))


class ScriptedDaemon:
    """A ROUTER that answers states according to ``answer(seq) -> (delay_s, mode) | None``."""

    def __init__(self, ctx: zmq.Context, answer) -> None:
        self.socket = ctx.socket(zmq.ROUTER)
        self.socket.setsockopt(zmq.LINGER, 0)
        self.endpoint = f"tcp://127.0.0.1:{self.socket.bind_to_random_port('tcp://127.0.0.1')}"
        self.answer = answer
        self.states: list[dict] = []
        self.running = True
        self.thread = threading.Thread(target=self._serve, daemon=True)
        self.thread.start()

    def _serve(self) -> None:
        while self.running:
            if not self.socket.poll(10):
                continue
            peer, raw = self.socket.recv_multipart()
            message = msgpack.unpackb(raw, raw=False)
            if message["type"] != "state":
                continue
            self.states.append(message)
            plan = self.answer(message["seq"])
            if plan is None:
                continue
            delay, mode = plan
            time.sleep(delay)
            tau = np.full(ROBOT.nu, float(message["seq"]))  # the torque names the state it answers
            self.socket.send_multipart([peer, wire.encode_command(message["seq"], message["t"], tau, mode)])

    def close(self) -> None:
        self.running = False
        self.thread.join(timeout=2)
        self.socket.close(linger=0)


def run_loop(answer, mode: str, duration: float, wall_limit: float = 5.0, spin_us: float = 0.0):
    """Run the bridge for ``duration`` s of simulated time, or until ``wall_limit`` s of wall time."""
    ctx = zmq.Context()
    daemon = ScriptedDaemon(ctx, answer)
    sim = RecordingSim()
    loop = BridgeLoop(
        sim, ROBOT, daemon.endpoint, mode=mode, period=PERIOD, context=ctx, resend_s=0.25, spin_us=spin_us
    )
    timer = threading.Timer(wall_limit, loop.request_stop)
    timer.start()
    try:
        report = loop.run(duration)
    finally:
        timer.cancel()
        daemon.close()
        ctx.term()
    return sim, daemon, report


def test_lockstep_steps_once_per_command_with_that_commands_torque():
    sim, daemon, report = run_loop(lambda seq: (0.0, "run"), "lockstep", 50 * PERIOD)
    assert report.steps == len(sim.applied) == 50
    answered = [int(tau[0]) for tau in sim.applied]
    assert answered == sorted(set(answered))  # each step applies a fresh answer, never an old one
    assert all(np.all(tau == tau[0]) for tau in sim.applied)


def test_lockstep_holds_the_simulation_while_the_daemon_is_idle():
    sim, daemon, report = run_loop(lambda seq: (0.0, "idle" if seq <= 5 else "run"), "lockstep", 10 * PERIOD)
    assert report.steps == 10 and report.states_sent == 15  # five idle heartbeats without a step


def test_lockstep_waits_for_a_silent_daemon_without_stepping():
    sim, daemon, report = run_loop(lambda seq: (0.0, "run") if seq <= 3 else None, "lockstep", 0.05, wall_limit=1.0)
    assert report.steps == 3  # seq 4 is never answered: simulated time stands still
    assert report.states_sent > 4  # the state is re-sent for a restarted daemon


@pytest.mark.parametrize("spin_us", [0.0, 300.0])
def test_realtime_reuses_the_last_torque_for_a_late_command(spin_us):
    """State 5's answer comes 3 periods late: the bridge reuses the previous torque meanwhile, then resumes
    (also when it polls for its commands without sleeping)."""
    sim, daemon, report = run_loop(
        lambda seq: (3 * PERIOD if seq == 5 else 0.0, "run"), "realtime", 30 * PERIOD, spin_us=spin_us
    )
    applied = [int(t[0]) for t in sim.applied]
    assert any(a == b for a, b in zip(applied, applied[1:], strict=False))  # a repeat: the last torque reused
    assert applied == sorted(applied)  # never an older command than one already applied
    assert report.late_commands >= 1 and report.safe_stops == 0
    assert applied[-1] > 20  # service resumed
    # each state after a late command says so, without a round trip; the others carry one and no flag
    flagged = [m for m in daemon.states if m.get("last_late")]
    assert len(flagged) == report.late_commands and all("last_rtt_us" not in m for m in flagged)
    assert all(m.get("last_rtt_us", 0.0) < 3 * PERIOD * 1e6 for m in daemon.states if not m.get("last_late"))


def test_realtime_safe_stops_after_twenty_late_commands_and_says_so():
    """No answers after state 3: torques are reused, and after 20 late commands the bridge damps the joints."""
    sim, daemon, report = run_loop(lambda seq: (0.0, "run") if seq <= 3 else None, "realtime", 60 * PERIOD)
    assert report.safe_stops == 1 and report.max_late_in_a_row >= 20
    applied = np.array([t[0] for t in sim.applied])
    first_damped = int(np.flatnonzero(applied < 0)[0])
    reused = applied[first_damped - 19 : first_damped]
    assert np.all(reused == reused[0]) and 1.0 <= reused[0] <= 3.0  # the last good torque while late
    damped = sim.applied[-1]
    np.testing.assert_allclose(damped, -0.5 * 0.5)  # damping 0.5 N·m·s/rad against 0.5 rad/s
    assert daemon.states[-1].get("bridge_stopped") is True


def test_realtime_safe_stop_holds_until_the_daemon_leaves_run_and_is_started_again():
    """After its own safe stop the bridge keeps damping even when run commands return; only after the daemon
    has left run mode (stopped) and been started again does it apply the daemon's torques."""

    def answer(seq):
        if 4 <= seq <= 30:
            return None  # the daemon is silent: 20 missing commands stop the bridge
        if 41 <= seq <= 45:
            return (0.0, "stopped")
        return (0.0, "run")

    sim, daemon, report = run_loop(answer, "realtime", 60 * PERIOD, wall_limit=3.0)
    applied = np.array([t[0] for t in sim.applied])
    first_damped = int(np.flatnonzero(applied < 0)[0])
    resumed = int(np.flatnonzero(applied > 45)[0])  # the first torque answering a state after the restart
    assert np.all(applied[first_damped:resumed] < 0)  # run commands 31..40 were not applied: still damping
    assert np.all(applied[resumed:] > 45) and report.safe_stops == 1
    assert [s.get("bridge_stopped", False) for s in daemon.states if 31 <= s["seq"] <= 40] == [True] * 10


def test_a_robot_the_daemon_holds_still_stays_held_when_its_commands_stop_coming():
    """The daemon said stopped, then went silent: the 20th late command still sets bridge_stopped, but the bridge
    keeps the robot on its brakes (no step), not under its own damping."""
    sim, daemon, report = run_loop(
        lambda seq: (0.0, "stopped") if seq <= 3 else None, "realtime", 40 * PERIOD, wall_limit=0.5
    )
    assert report.max_late_in_a_row >= 20 and report.safe_stops == 1
    assert sim.applied == [] and report.steps == 0
    assert daemon.states[-1].get("bridge_stopped") is True


def test_a_driver_stopped_while_no_daemon_answers_says_it_was_stopped_and_exits_0(caplog):
    """SIGTERM (the launcher, when the daemon failed to start) while the hello waits for a daemon: the driver says
    it was stopped, after how long, and exits 0, not "no daemon answered within 10 s" and 2."""
    import logging
    import signal

    from idcontrol.driver import Driver, RobotSizes
    from idcontrol.tools.ports import free_ports

    class Silent(Driver):
        def read_state(self):  # noqa: ANN201 - never called: no session opens
            raise AssertionError("no state is read before a session")

        def apply(self, tau, mode) -> None:  # noqa: ANN001
            raise AssertionError("no command comes before a session")

    driver = Silent(RobotSizes("quadruped", 19, 18, 12), f"tcp://127.0.0.1:{free_ports(1)[0]}", token="x")
    threading.Timer(0.3, driver.request_stop).start()
    started = time.monotonic()
    handlers = {sig: signal.getsignal(sig) for sig in (signal.SIGINT, signal.SIGTERM)}  # main() installs its own
    try:
        with caplog.at_level(logging.INFO):
            assert driver.main(hello_timeout_s=10.0) == 0
    finally:
        for sig, handler in handlers.items():
            signal.signal(sig, handler)
    assert time.monotonic() - started < 3.0
    assert "stopped before a daemon answered" in caplog.text and "no daemon answered" not in caplog.text
    assert not [r for r in caplog.records if r.levelno >= logging.ERROR]
