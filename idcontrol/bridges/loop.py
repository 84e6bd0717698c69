"""The simulator side of the control channel: a simulator served to the daemon by the driver SDK.

:class:`BridgeLoop` is a :class:`~idcontrol.driver.Driver` whose robot is any simulator with ``state()`` /
``step(tau)`` (any :class:`~idcontrol.sim.base.Simulator`: MuJoCo, the rigid simulator), so the protocol's
driver side (hello, seq, the period, the late-command rule, the safe stop, reconnection, statistics) exists once,
in :mod:`idcontrol.driver.loop`:

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

from dataclasses import dataclass, field

import numpy as np
import zmq

from idcontrol.driver.loop import DRIVEN_MODES, Driver, DriverReport, RobotSizes
from idcontrol.robot.model import RobotModel
from idcontrol.security import KeyDirectory
from idcontrol.sim.base import Simulator


@dataclass
class BridgeReport(DriverReport):
    """The driver's statistics (:class:`~idcontrol.driver.DriverReport`) and the simulation's end: its time, s,
    and a floating base's position, m (printed as one JSON line at exit)."""

    sim_time: float = 0.0
    base_position: list[float] = field(default_factory=list)


class BridgeLoop(Driver):
    """Serve a simulator to a daemon over the control channel.

    endpoint : the daemon's control endpoint (the bridge connects a DEALER).
    mode : the driver's clock, ``"lockstep"`` or ``"realtime"``.
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
        self.sim, self.substeps = sim, substeps
        self.model = robot
        super().__init__(
            RobotSizes.of(robot),
            endpoint,
            clock=mode,
            period=period,
            late_limit=late_limit,
            damping=damping,
            resend_s=resend_s,
            token=token,
            curve=curve,
            spin_us=spin_us,
            context=context,
        )
        self.mode = mode

    def _new_report(self) -> BridgeReport:
        return BridgeReport()

    def read_state(self):
        return self.sim.state()

    def apply(self, tau: np.ndarray, mode: str) -> None:
        if mode in DRIVEN_MODES:  # idle / stopped: the simulation holds still
            for _ in range(self.substeps):
                self.sim.step(tau)

    def clock_time(self) -> float:
        return self.sim.time

    def _finish(self) -> None:
        s = self.sim.state()
        self.report.sim_time = float(s.t)
        self.report.base_position = [float(x) for x in s.q[:3]] if self.model.floating_base else []


def run_bridge(
    sim: Simulator,
    robot: RobotModel,
    endpoint: str,
    duration: float | None = None,
    hello_timeout_s: float = 10.0,
    **options,
) -> int:
    """Run a bridge process: hello (waiting up to ``hello_timeout_s`` s for the daemon), serve, print the report as
    one JSON line on stdout."""
    return BridgeLoop(sim, robot, endpoint, **options).main(duration, hello_timeout_s)
