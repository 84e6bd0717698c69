"""Keep the tick hot while a spinning daemon waits for the next state.

On the project's 2-vCPU KVM guest, a core tick that follows half a millisecond of waiting costs 1.3-2.5x one that
follows another tick, and spinning through the wait does not help: whatever the host runs meanwhile evicts the
tick's code, data and branch history. Ticking a second core in that wait recovers a third to most of it
(docs/benchmarks.md, "The wait between ticks, and warming the tick in it").

:class:`TickWarmer` owns a shadow :class:`~idcontrol.control.core.ControlCore`, built from the same launch settings
with its own robot model, formulation, reference, safety filter and warm starts. It ticks the shadow on the last
state the daemon answered (decoding that state's message before and again after it, and encoding the shadow's
command, so that the codec stays warm too: the next state is decoded first), only while no message waits
and the tick will end before the next state is due; its commands are dropped. The shadow shares no mutable object
with the served core, so the served commands are the same with it or without it (``tests/test_warmth.py``).
"""

from __future__ import annotations

import logging
import time

import zmq

from idcontrol import protocol as wire
from idcontrol.control.core import ControlCore
from idcontrol.control.modes import MODE_RUN
from idcontrol.control.state import RobotState
from idcontrol.protocol import RobotShape
from idcontrol.realtime import readable

log = logging.getLogger("idcontrol.daemon")

#: How fast the expected cost of a shadow tick forgets a slow one (a preempted tick, a collector pass): at each
#: wait the estimate falls to this fraction of itself, and a shadow tick that takes longer raises it. A 7 ms
#: outlier is forgotten in about 170 waits, whether or not a shadow tick fits meanwhile.
COST_DECAY = 0.98
#: A shadow tick ends at least this long before the next state is due (s), and at least as long before as states
#: have lately come early (a state comes early by as much as the previous one was late).
GUARD_S = 0.00005
#: How fast that earliness is forgotten: at each state, to this fraction unless the state came earlier still (a
#: state 1 ms early keeps the shadow 50 µs further from the next one for 0.3 s).
EARLY_DECAY = 0.99


class TickWarmer:
    """Ticks ``shadow`` in the served core's idle time.

    shadow : a core built like the served one (``build_core(config, quiet=True)``: its own
        :class:`~idcontrol.robot.model.RobotModel`, the reference's notes not said twice); it follows the served
        core's formulation by name (with the launch file's options) and keeps the launch file's reference.
    shape : the served robot's wire shape: each shadow tick also decodes the last state message and encodes its
        command, so the daemon's codec stays warm too (None: the tick alone).
    """

    def __init__(self, shadow: ControlCore, shape: RobotShape | None = None) -> None:
        self.shadow = shadow
        shadow.settle_before_estimating = False  # its commands are dropped: its estimator starts at once, moving or not
        self.shape = shape
        self.cost_s = 0.0  # the expected duration of one shadow tick: a decaying peak of the measured ones
        self.waits = 0  # waits offered to the warmer
        self.ticks = 0  # shadow ticks run in them
        self.enabled = True
        self._state: RobotState | None = None
        self._raw = b""
        self._received = -1e9  # perf_counter s when the daemon took the last observed state from its socket
        self._early_s = 0.0  # how long before it was due a state lately came at most (a decaying peak), s

    def warm_up(self) -> None:
        """Load the shadow's formulations (as the daemon does for the served core) and start it."""
        self.shadow.warm_up()
        self.shadow.start(time.monotonic())

    def observe(self, state: RobotState, raw: bytes = b"", received: float | None = None) -> None:
        """The state the served core just answered (validated) and its message: the next shadow ticks replay it.
        ``received``: perf_counter s when the daemon took it from its socket (None: states come when asked, a
        benchmark), from which the warmer learns how early states come."""
        self._state, self._raw = state, raw
        if received is not None:
            dt = self.shadow.dt
            early = self._received + dt - received  # > 0: before it was due
            self._early_s = max(min(early, dt), EARLY_DECAY * self._early_s)
            self._received = received

    def describe(self) -> str:
        """One line for the daemon's log: how much the shadow ticked."""
        state = "on" if self.enabled else "off"
        estimate = f"the last estimate {self.cost_s * 1e6:.0f} µs each"
        return f"tick warmer {state}: {self.ticks} shadow ticks in {self.waits} waits, {estimate}"

    def warm(self, socket: zmq.Socket | None, served: ControlCore, due: float) -> None:
        """Tick the shadow while ``socket`` has no message and a tick would end before the next state, due at
        ``due`` (perf_counter s), less the larger of :data:`GUARD_S` and how early states lately came; ``socket``
        None: no message can come (a benchmark).

        A shadow tick that raises disables the warmer (logged once): it must never cost the served loop a tick.
        """
        state = self._state
        if not self.enabled or state is None:
            return
        self.waits += 1
        self.cost_s *= COST_DECAY
        until = due - max(GUARD_S, self._early_s)
        shadow, shape, raw = self.shadow, self.shape, self._raw
        while socket is None or not readable(socket):
            started = time.perf_counter()
            if started + self.cost_s > until:
                return
            try:
                if shadow.formulation_name != served.formulation_name:
                    shadow.set_formulation(served.formulation_name)
                if shadow.mode != MODE_RUN:
                    shadow.reset()
                    shadow.start(time.monotonic())
                if shape is not None and raw:
                    wire.decode_control(raw, shape)
                out = shadow.tick(state, now=time.monotonic())
                if shape is not None:  # the codec last too: the state that comes next is decoded first
                    wire.encode_command(0, out.t, out.tau, out.mode)
                    if raw:
                        wire.decode_control(raw, shape)
            except Exception as e:  # noqa: BLE001 - a shadow's failure must not reach the served loop
                self.enabled = False
                log.warning("tick warmer off: its shadow tick raised %s: %s", type(e).__name__, e)
                return
            self.cost_s = max(time.perf_counter() - started, self.cost_s)
            self.ticks += 1
