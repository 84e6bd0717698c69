"""The daemon's pure, synchronous control core: one state in, one command out.

:class:`ControlCore` owns no socket, file or clock: the caller passes each
state and the current time. It runs the explicit state machine

    idle ──start──▶ run ──stop / fault / watchdog / fall──▶ safe_stop ──at rest or timeout──▶ stopped
                     ▲                                                                           │
                     └───────────────────────────────────start──────────────────────────────────┘

and, while running, turns the reference into q̈_des (PD feedback), asks the
formulation for torques, and guards every command: a formulation that fails,
throws, returns a non-finite torque or overruns its time budget has the
previous torque reused for a few ticks, then the safe controller (damping or
PD hold) takes over; a joint beyond its position or velocity limits starts a
damping stop; every command passes the safety filter
(:mod:`idcontrol.control.safety`: NaN guard, torque-rate and torque limits),
which counts each intervention.
The daemon (:mod:`idcontrol.daemon.server`), replay and the test harness all
drive this same object.
"""

from __future__ import annotations

import logging
import math
import time
from collections.abc import Mapping
from dataclasses import dataclass, replace

import numpy as np
import pinocchio as pin
from numba import njit
from numpy.typing import NDArray

from idcontrol.arrays import IN_INDICES, boolean
from idcontrol.contacts.coupling import COUPLING_THRESHOLD, TOUCHDOWN_WINDOW, coupling_diagnostic, sphere_limbs
from idcontrol.contacts.detection import ContactSet
from idcontrol.control.controller import InverseDynamicsController
from idcontrol.control.metrics import RunMetrics, tick_means
from idcontrol.control.modes import MODE_IDLE, MODE_RUN, MODE_SAFE_STOP, MODE_STOPPED
from idcontrol.control.safety import SafetyFilter
from idcontrol.control.state import RobotState
from idcontrol.errors import ConfigError, InputError, InvalidTransition, ShapeError
from idcontrol.estimation import BaseEstimator, Estimate, SensorReading
from idcontrol.formulations.base import Formulation
from idcontrol.formulations.problem import SolveResult, index_array
from idcontrol.reference import JointTarget, Reference, available_references, desired_acceleration, make_reference
from idcontrol.settings import SafetySettings
from idcontrol.validation import all_finite, check_option_types

Array = NDArray[np.float64]
log = logging.getLogger(__name__)


#: The longest ``reason`` the core keeps (characters): status replies echo it.
REASON_MAX = 256

#: While running, a state's time may follow the previous state's by at most this much, s (bridge clock): a
#: later one is refused as a bad state (the lock-step watchdog allows 1 s of wall time between states).
MAX_STATE_TIME_STEP = 1.0
#: Events of a tick whose guard ends run mode on its own (a limit, a failed solve's safe controller, the bridge).
GUARD_EVENTS = ("limit_guard", "solve_failed", "certificate", "non_finite", "over_budget", "bridge_stopped")


@dataclass
class Command:
    """What one tick decided: the torque to send and what led to it (for telemetry and logs).

    tau : (nu,) N·m, after the safety guards.  mode : the core's mode after the tick.
    t : bridge time of the state answered, s.
    result : the formulation's solve (None outside run mode or when it threw).
    target, qdd_des : the reference sample and q̈_des (nu,) rad/s² (run mode only).
    contacts : the candidate contacts the solve used (run mode only).
    formulation : the active formulation's name.
    reference : the reference's own telemetry, if any (built on first access, off the tick's path: read it before
        the core's next tick, as the daemon and the test harness do when they record the tick).
    clipped : joints whose torque hit a limit this tick.
    note, event : what the guards did this tick, if anything (a rate-limited log line and its kind).
    estimate : the estimator's output this tick (run mode with an ``[estimator]``; the estimator's own object,
        updated in place: read it before the core's next tick, as the daemon does when it logs the tick).
    """

    tau: Array
    mode: str
    t: float = 0.0
    result: SolveResult | None = None
    target: JointTarget | None = None
    qdd_des: Array | None = None
    contacts: ContactSet | None = None
    formulation: str = ""
    clipped: int = 0
    note: str = ""
    event: str = ""
    #: the reference whose telemetry :attr:`reference` reports (run mode only)
    sampled_from: Reference | None = None
    estimate: Estimate | None = None
    _reference: dict[str, object] | None = None

    @property
    def reference(self) -> dict[str, object] | None:
        """The reference's own telemetry of this tick (e.g. a gait's phase), or None."""
        if self._reference is None and self.sampled_from is not None:
            self._reference = self.sampled_from.telemetry()
            self.sampled_from = None
        return self._reference


@njit(boolean(IN_INDICES), cache=True)
def on_a_body(body):
    """Whether any contact is on a movable body (``ContactSet.body`` (n,): −1 for a static surface)."""
    for b in body:
        if b >= 0:
            return True
    return False


class ControlCore:
    """State machine + reference + formulation + safety guards, for one robot.

    controller : the inverse-dynamics controller (robot, environment, formulation).
    reference : joint reference generator (q_ref, q̇_ref, q̈_ref on the actuated joints).
    quiet : leave unsaid what a reference changed to fit the robot (its notes, logged as warnings otherwise): a
        second core built from settings whose notes were said already (the daemon's tick warmer).
    estimator : the floating-base estimator (``[estimator]``; None: the state carries the base). In run mode each
        tick it turns the state's joints and IMU (:attr:`RobotState.imu`) and the controller's stance decision of the
        previous tick into the base the controller sees; it restarts at each start, from a robot at rest: while the
        encoders or the gyro say the robot moves, the run damps it to rest first (:attr:`settle_before_estimating`).
        An estimate that is not trustworthy, or a state without an IMU, stops the run safely and says why.
    """

    def __init__(
        self,
        controller: InverseDynamicsController,
        reference: Reference,
        safety: SafetySettings | None = None,
        formulation_options: Mapping[str, Mapping[str, object]] | None = None,
        *,
        quiet: bool = False,
        estimator: BaseEstimator | None = None,
    ) -> None:
        if estimator is not None and (controller.stance is None or not controller.robot.floating_base):
            raise ConfigError(
                "an estimator needs a floating-base robot and estimated contacts (contacts = "
                '"estimated"): its stance feet are the controller\'s stance decision'
            )
        self.estimator = estimator
        self._estimating = False  # the estimator has been reset since the last start
        self.estimate_seconds = 0.0  # the last tick's estimator call, s (wall clock)
        #: with an estimator, a run that starts while the robot moves faster than the estimator's bounds allow to start
        #: from (:meth:`BaseEstimator.moving`) damps the joints to rest first, for at most ``safe_stop_timeout``, and
        #: starts the estimator and the controller then; the tick warmer's shadow, whose commands are dropped, starts
        #: its estimator at once whatever the served robot does
        self.settle_before_estimating = True
        self._settle_started: float | None = None  # when the run began damping the robot to rest (caller's clock)
        self.controller = controller
        self.quiet = quiet
        self.formulation_options = dict(formulation_options or {})  # by name, for formulations built by warm_up
        self.robot = controller.robot
        self._use(reference)
        self.safety = safety or SafetySettings()
        robot = self.robot
        self.dt = controller.dt
        self.mode = MODE_IDLE
        self.reason = "waiting for start"
        self.gains = robot.gains
        self.filter = SafetyFilter(robot, self.safety, self.dt)
        self.tau_limit = self.filter.tau_limit
        self._idx_q = robot.actuated_idx_q
        self._idx_v = np.asarray(robot.actuated_dofs, dtype=np.intp)
        self._zero = np.zeros(robot.nu)
        self._tau_prev: Array | None = None  # the last run-mode torque sent (reused by a failed solve)
        self._tau_sent = np.zeros(robot.nu)  # the last torque sent in any mode (the rate limit's origin)
        self._q_act = np.zeros(robot.nu)  # the last state's actuated joint positions (a PD hold's posture)
        self._v_act = np.zeros(robot.nu)  # ... and velocities
        self._held = 0
        self._safe_controller = self.safety.safe_controller  # of the current safe stop
        self._safe_stop_started = 0.0
        self._standing_height = float(robot.standing_configuration()[2]) if robot.floating_base else 0.0
        self._fall_height = self.safety.fall_height_fraction * self._standing_height  # m, world
        self._cos_fall_tilt = math.cos(self.safety.fall_tilt)
        self._bind_body_watch()
        self.metrics = RunMetrics()
        self._has_objects = bool(controller.environment.objects)
        self._untouched = 0
        self._formulations: dict[str, Formulation] = {}  # ready instances by name, filled by warm_up
        self._tracking = None  # the last run tick's tracking errors (for the run metrics)
        # the coupling diagnostic's data: each contact sphere's limb, the unactuated DoFs, the touchdown times
        self._limb_of_sphere = sphere_limbs(robot)
        self._unactuated = index_array(controller.unactuated, controller.m)
        self._touchdowns = np.full(len(robot.sphere_names), np.nan)
        self.last_error = ""
        self._last_t: float | None = None  # the last answered state's time, s (bridge clock)

    @property
    def clip_count(self) -> int:
        """Joint-ticks clipped to the torque limit."""
        return self.filter.counts["torque_limit"]

    @property
    def fail_count(self) -> int:
        """Ticks whose solve failed, threw, failed its certificate, returned a non-finite torque or overran its
        budget."""
        c = self.filter.counts
        return c["solve_failed"] + c["certificate"] + c["non_finite"] + c["over_budget"]

    def warm_up(self, ticks: int = 20) -> None:
        """Build every registered formulation and solve the standing posture with each: twice with each
        smaller set of contact spheres allowed (none, one, ...), then, from a reset warm start, ``ticks``
        times with all; and run the safety filter's and the run metrics' kernels once.

        First-call costs (workspaces, compiled kernels and their specializations for each contact count:
        loading one takes milliseconds) are paid before the first real state, and a run-time switch to any
        formulation (with its ``formulation_options``) becomes a swap. An estimator runs its whole path once
        (:meth:`BaseEstimator.warm_up`: reset, updates) and is left to restart at the first start. The state machine,
        the counts and the active formulation are untouched.
        """
        from idcontrol.formulations import available_formulations, make_formulation

        robot = self.robot
        q = robot.standing_configuration()
        v = np.zeros(robot.nv)
        objects = self.controller.initial_object_states()
        spheres = len(robot.sphere_names)
        sensed = np.zeros((spheres, 3))
        target = self.reference.sample(0.0, q, v)
        qdd_des, tracking = desired_acceleration(target, q[self._idx_q], v[self._idx_v], self.gains)
        fewer = [np.arange(spheres) < k for k in range(spheres)]  # the first k spheres may touch
        active = self.controller.formulation
        for name in available_formulations():
            formulation = active if name == active.name else self._formulations.get(name)
            formulation = formulation or make_formulation(name, **self.formulation_options.get(name, {}))
            self._formulations[name] = formulation  # the launch file's instance keeps its options
            self.controller.formulation = formulation
            for mask in fewer + [None]:
                state = RobotState(q=q, v=v, objects=objects, sensed_forces=sensed, contact_mask=mask)
                for _ in range(2):
                    result = self.controller.solve(state, qdd_des, tracking)
                if result.problem is not None:
                    formulation.prepare_repair(result.problem)  # the repair QP's workspace for these sizes
            # the warm start the run begins from is the full stance's alone (a degenerate stance's LCP can
            # have many solutions; which one the first ticks find would otherwise depend on these solves)
            formulation.reset()
            state = RobotState(q=q, v=v, objects=objects, sensed_forces=sensed)
            for _ in range(ticks):
                self.controller.solve(state, qdd_des, tracking)
        self.controller.formulation = active
        contacts = self.controller.last_contacts  # the reference's and the grasp's bookkeeping of the contacts
        self.reference.observe_contacts(contacts)
        if self._has_objects and contacts is not None:
            on_a_body(contacts.body)
        self.reference.reset()
        self._prime_references(q, v, contacts)
        if self.estimator is not None:  # its first reset and update load its kernels: tens of ms in a fresh process
            self.estimator.warm_up()

    def _prime_references(self, q: Array, v: Array, contacts: ContactSet | None) -> None:
        """Sample once, at the standing posture, every other kind of reference that builds for the robot with its
        defaults, and drop it: their compiled planners are loaded (or compiled, on a cold cache) now, so that a
        switch to any of them (admin ``set_reference``) costs its first tick nothing more."""
        for name in available_references():
            if name == self.reference.name:
                continue
            # best effort: a kind this robot cannot run (a trot for an arm) stays unprimed and says why when chosen;
            # priming must not stop a robot from starting with the reference it uses
            try:
                reference = make_reference(name, self.robot)
                reference.sample(0.0, q, v)
                reference.contact_mask()
                reference.observe_contacts(contacts)
            except Exception:  # noqa: BLE001
                continue

    def reset(self) -> None:
        """Back to idle as if just built (warm starts, the reference's phase and the fallback policy's hold
        forgotten; the run metrics and the counts kept): replay and benchmarks start a sequence afresh."""
        self.mode, self.reason = MODE_IDLE, "reset"
        self.reference.reset()
        self.controller.formulation.reset()
        self._tau_prev, self._held = None, 0
        self._tau_sent[:] = 0.0
        self._last_t = None

    # ------------------------------------------------------------------ transitions (admin requests, watchdog)
    def start(self, now: float) -> None:
        """idle or stopped → run. Raises :class:`InvalidTransition` in any other mode."""
        if self.mode not in (MODE_IDLE, MODE_STOPPED):
            raise InvalidTransition(f"cannot start in mode {self.mode!r}; allowed from idle or stopped")
        self.reference.reset()
        self._tau_prev = None
        self._held = 0
        if self.estimator is not None:  # a new start is a new origin: the estimate and the ground begin again
            self._estimating = False
            self._settle_started = None
            self.controller.stance.reset()
        self.mode = MODE_RUN
        self.reason = "started"

    def stop(self, reason: str, now: float, controller: str | None = None) -> None:
        """Begin a safe stop (from run) with ``controller`` (default: the settings' safe controller);
        from idle go straight to stopped."""
        if self.mode == MODE_RUN:
            self.mode = MODE_SAFE_STOP
            self._safe_stop_started = now
            self._safe_controller = controller or self.safety.safe_controller
            self.filter.begin_hold(self._q_act)
            self.reason = reason[:REASON_MAX]
        elif self.mode == MODE_IDLE:
            self.mode = MODE_STOPPED
            self.reason = reason[:REASON_MAX]

    def expire(self, now: float) -> None:
        """Advance time-based transitions when no state arrives (watchdog, safe-stop timeout)."""
        if self.mode == MODE_SAFE_STOP and now - self._safe_stop_started > self.safety.safe_stop_timeout:
            self.mode = MODE_STOPPED
            self.reason = (self.reason + "; safe stop timed out")[-REASON_MAX:]

    def set_formulation(self, name: str, options: dict | None = None) -> None:
        """Swap the formulation between ticks. Without options a warmed-up instance is reused
        (see :meth:`warm_up`); with options a new one is built first, then swapped in."""
        ready = self._formulations.get(name) if not options else None
        self.controller.set_formulation(ready or name, options, warm_up=False)  # no extra solve between ticks

    @property
    def state_form(self) -> str:
        """The form of state the core needs: ``"sensors"`` (joints and an IMU; it estimates the base) or ``"full"``."""
        return "sensors" if self.estimator is not None else "full"

    @property
    def estimator_kind(self) -> str:
        """The estimator's filter (``"inekf"``, ``"lkf"``), or ``"none"``."""
        return self.estimator.settings.filter if self.estimator is not None else "none"

    @property
    def formulation_name(self) -> str:
        return self.controller.formulation.name

    @property
    def object_names(self) -> tuple[str, ...]:
        """The movable bodies of the controller's world (their poses come with each state)."""
        return tuple(o.name for o in self.controller.environment.objects)

    def set_reference(self, name: str, options: Mapping[str, object]) -> list[str] | None:
        """Replace the reference by a new ``name`` one (idle or stopped), or, while running, change the
        running reference's ``options`` in place (the gait keeps its phase; same name only). Returns the
        options changed in place, or None for a new reference. Raises InvalidTransition / ConfigError."""
        if self.mode in (MODE_RUN, MODE_SAFE_STOP):
            if name != self.reference.name:
                raise InvalidTransition("stop before switching to another kind of reference")
            check_option_types(f"reference {name!r}", type(self.reference).__init__, options)  # ConfigError
            try:
                self.reference.update(**options)
            except (ConfigError, InputError) as e:
                raise InvalidTransition(str(e)) from None
            except (TypeError, ValueError) as e:  # a value of the right type the reference still cannot take
                raise ConfigError(f"reference {name!r}: invalid option value: {e}") from None
            return sorted(options)
        self._use(make_reference(name, self.robot, **options))
        return None

    def _use(self, reference: Reference) -> None:
        """Run ``reference`` from now on, and say what it changed from its options to fit the robot."""
        self.reference = reference
        for note in () if self.quiet else reference.notes:
            log.warning("%s", note)

    def set_gains(self, kp: object = None, kd: object = None, ki: object = None) -> None:
        """Replace PD(I) gains (a number or one per actuated joint), each within 0 and the safety settings'
        ceiling (``max_kp``, ``max_kd``, ``max_ki``); all are validated before any is applied (ConfigError)."""
        new = {}
        nu = self.robot.nu
        for key, value in (("kp", kp), ("kd", kd), ("ki", ki)):
            if value is None:
                continue
            try:
                arr = np.asarray(value, dtype=float)
            except (TypeError, ValueError):
                raise ConfigError(f"gain {key} must be a number or {nu} numbers, got {type(value).__name__}") from None
            if arr.shape not in ((), (nu,)):
                raise ConfigError(
                    f"gain {key} must be a number or {nu} numbers (one per actuated joint), got shape {arr.shape}"
                )
            ceiling = getattr(self.safety, f"max_{key}")
            if not np.all(np.isfinite(arr)) or np.any(arr < 0) or np.any(arr > ceiling):
                raise ConfigError(f"gain {key} must be in 0 .. {ceiling:g} (safety.max_{key})")
            new[key] = np.broadcast_to(arr, (nu,)).copy()
        self.gains = replace(self.gains, **new)

    # ------------------------------------------------------------------ the tick
    def tick(self, state: RobotState, now: float | None = None, *, bridge_stopped: bool = False) -> Command:
        """Answer one state (validated here, once). ``now``: the caller's monotonic clock, s (default: this
        process's); ``bridge_stopped``: the bridge stopped the robot on its own (late commands). Raises
        :class:`InputError` for a state the robot model rejects (not acted on)."""
        now = time.monotonic() if now is None else now
        robot = self.robot
        state = self.controller.check_state(state)
        if self.mode == MODE_RUN and self._last_t is not None and not state.t - self._last_t <= MAX_STATE_TIME_STEP:
            raise InputError(
                f"state time t = {state.t:g} s is {state.t - self._last_t:g} s after the last state's; "
                f"while running, at most {MAX_STATE_TIME_STEP:g} s"
            )
        self._last_t = state.t
        out = Command(self._zero, self.mode, state.t, formulation=self.controller.formulation.name)
        settling = False  # this tick damps a moving robot instead of estimating (no estimate yet)
        if self.estimator is not None and self.mode == MODE_RUN:
            estimated = self._estimated(state, out, now)
            settling = estimated is None
            state = state if settling else estimated
        q, v = state.q, state.v
        q_act, v_act = self._q_act, self._v_act  # this tick's actuated joints (buffers: read within the tick)
        if bridge_stopped and self.mode == MODE_RUN:
            self.stop("the bridge stopped the robot (late commands)", now)
            out.note, out.event = "bridge safe stop: daemon safe stop", "bridge_stopped"
        guarded = self.mode == MODE_RUN
        violation = self.filter.split_and_check(q, v, self._idx_q, self._idx_v, q_act, v_act, guarded)
        if guarded:
            if violation:
                self.stop(f"limit guard: {violation}", now, controller="damping")
                out.note, out.event = f"limit guard: {violation}: damping stop", "limit_guard"
        solved = False
        if self.mode == MODE_RUN and settling:  # no estimate yet: the joints damped, read from the encoders
            out.tau = self.filter.safe_torque("damping", q_act, v_act)
        elif self.mode == MODE_RUN:
            solved = self._run(state, q, v, q_act, v_act, out, now)
            if robot.floating_base:
                np.copyto(self.metrics.base_last, q[:3])
                if self.metrics.base_first is None:
                    self.metrics.base_first = q[:3].copy()
            fall = self._fallen(self.controller.ground_relative(q)) if robot.floating_base else ""
            if fall:
                self.metrics.fell, self.metrics.fall_cause = True, fall
                if self.mode == MODE_RUN:
                    self.stop(f"the robot fell: {fall}", now)
                else:  # this tick's solve stopped the run already: the fall is the first thing to say
                    self.reason = f"the robot fell: {fall}; {self.reason}"[:REASON_MAX]
                out.note, out.event = f"fell ({fall}): safe stop", "fell"
        if guarded and self.mode != MODE_RUN and out.event in GUARD_EVENTS and robot.floating_base:
            collapsing = self._collapsing(self.controller.ground_relative(q))  # a guard stopped a collapsing robot
            if collapsing and not self.metrics.fell:
                self.metrics.fell = True
                self.metrics.fall_cause = f"{collapsing} when a guard ended the run ({self.reason})"
        if self.mode == MODE_SAFE_STOP:
            out.tau = self.filter.safe_torque(self._safe_controller, q_act, v_act)
            if self._safe_controller == "damping" and np.max(np.abs(v_act), initial=0.0) < self.safety.rest_velocity:
                self.mode = MODE_STOPPED
            self.expire(now)
        non_finite = False
        if self.mode in (MODE_IDLE, MODE_STOPPED):  # the protocol's promise: no torque outside run and safe stop
            out.tau, out.clipped = np.zeros(robot.nu), 0
            self._tau_sent[:] = 0.0
        else:
            out.tau = self.filter.send(out.tau, self._tau_sent)  # the last torque sent becomes this one
            out.clipped, non_finite = self.filter.clipped, self.filter.last_non_finite
            if self.mode == MODE_RUN:
                self.metrics.clipped += out.clipped
        if non_finite and self.mode == MODE_RUN:  # only a bug gets here: _run guards the solver
            self.stop("non-finite torque command", now, controller="damping")
            out.note, out.event = "non-finite torque command: zeros sent, damping stop", "non_finite"
        elif out.clipped and not out.note:
            out.note, out.event = f"{out.clipped} joint torque(s) clipped to their limits", "torque_limit"
        out.mode = self.mode
        if out.mode != MODE_RUN:
            self._tau_prev = None
        elif solved:
            self._record(out)
        return out

    def _estimated(self, state: RobotState, out: Command, now: float) -> RobotState | None:
        """``state`` with its base replaced by the estimator's (run mode). The estimator reads the joints, the IMU and
        the stance the controller decided in the previous tick (:mod:`idcontrol.contacts.stance`: one contact
        decision for both). A state without an IMU, or an estimate that is not trustworthy (docs/estimation.md: its
        covariance beyond the bounds, a non-finite or stale IMU, a diverged filter), stops the run safely with the
        reason; ``state`` is then returned as it came, and only the joints are used (the safe controllers'). None: the
        estimator has not started and this tick damps the moving robot instead (:meth:`_settle`)."""
        imu = state.imu
        reason = ""
        if imu is None:
            reason = "the state carries no IMU reading (the estimator needs the sensor form, docs/protocol.md)"
        else:
            reading = SensorReading(
                state.t,
                state.q[7:],
                state.v[6:],
                imu.orientation_xyzw,
                imu.angular_velocity,
                imu.linear_acceleration,
                imu.t,
                self.controller.stance.anchors if self._estimating else None,
            )
            try:
                started = time.perf_counter()
                if self._estimating:
                    estimate = self.estimator.update(reading)
                else:  # the filter starts from a robot at rest: a moving one is damped to rest first
                    moving = self.settle_before_estimating and self.estimator.moving(
                        reading.joint_v, reading.imu_angular_velocity
                    )
                    if moving:
                        self.estimate_seconds = time.perf_counter() - started
                        return self._settle(state, moving, out, now)
                    estimate = self.estimator.reset(reading)
                    if self._settle_started is not None:
                        self._settle_started = None
                        self.reason = "started: the robot came to rest, the estimator started"
                self.estimate_seconds = time.perf_counter() - started
            except ShapeError:
                raise  # a malformed state: the caller's error reply, nothing acted on
            except InputError as e:  # a start from a non-finite or non-unit IMU orientation or encoders
                reason = f"the estimator cannot start: {e}"
            else:
                self._estimating = True
                out.estimate = estimate
                if not estimate.healthy:
                    reason = estimate.reason
        if reason:
            self.stop(f"estimate not trustworthy: {reason}", now)
            out.note, out.event = self.reason, "estimator"
            return state
        return replace(state, q=estimate.q.copy(), v=estimate.v.copy())  # the joints as read, the base estimated

    def _settle(self, state: RobotState, moving: str, out: Command, now: float) -> RobotState | None:
        """A run-mode tick before the estimator started, the robot moving (``moving`` says how): this tick damps the
        joints (the safe controller's damping, which reads them alone) instead of controlling, said once; a robot that
        does not come to rest within ``safe_stop_timeout`` stops the run safely. Returns None while damping, and
        ``state`` as it came once the run is stopped."""
        if self._settle_started is None:
            self._settle_started = now
            self.reason = f"started: {moving}; damping it to rest before the estimator starts"[:REASON_MAX]
            out.note, out.event = self.reason, "estimator"
        elif now - self._settle_started > self.safety.safe_stop_timeout:
            self.stop(
                f"estimate not trustworthy: the robot did not come to rest within {self.safety.safe_stop_timeout:g} s "
                f"for the estimator to start ({moving})",
                now,
                controller="damping",
            )
            out.note, out.event = self.reason, "estimator"
            return state
        return None

    def _run(self, state: RobotState, q: Array, v: Array, q_act: Array, v_act: Array, out: Command, now: float) -> bool:
        """Solve one run-mode tick into ``out.tau``; on a failure apply the fallback policy. Returns whether
        the formulation's own torque is used."""
        reference = self.reference
        controller = self.controller
        try:  # a reference that throws stops the run like a failed solve, never the daemon
            if controller.stance is not None:  # estimated contacts: the reference and the PD law see the velocity
                # that keeps the stance feet still (with the schedule of the last sample), not the raw estimate
                last_mask, last_stance = reference.contact_mask(), reference.planned_stance()
        except Exception as e:
            return self._reference_failed(e, out, now)
        if controller.stance is not None:
            v = controller.prepare(state, last_mask, last_stance)
            v_act = v[self._idx_v]
        q_ground = controller.ground_relative(q)
        try:
            target = reference.sample(state.t, q_ground, v)
            mask, planned_stance = reference.contact_mask(), reference.planned_stance()
        except Exception as e:
            return self._reference_failed(e, out, now)
        qdd_des, tracking = desired_acceleration(target, q_act, v_act, self.gains)
        out.target, out.qdd_des = target, qdd_des
        out.sampled_from = reference
        self._tracking = tracking
        try:
            result = self.controller.solve(
                state, qdd_des, tracking, checked=True, contact_mask=mask, planned_stance=planned_stance
            )
        except InputError:  # a bad state is the caller's to answer (an error reply), not a solver failure
            raise
        except Exception as e:  # a formulation that throws is a failed solve, not a dead daemon
            result = None
            self.last_error = f"{self.controller.formulation.name} raised {type(e).__name__}: {e}"
        out.result = result
        contacts = out.contacts = self.controller.last_contacts
        reference.observe_contacts(contacts)
        if self._has_objects and contacts is not None:
            self._track_grasp(contacts, state.t)
        tau = result.tau if result is not None else None
        f = self.filter
        if result is None:
            failure, kind = self.last_error, "solve_failed"
        elif result.certificate:
            failure, kind = result.message, "certificate"
            rejections = self.metrics.certificate_rejections
            rejections[result.certificate] = rejections.get(result.certificate, 0) + 1
        elif tau is None or not result.found:
            failure, kind = result.message or "solver failed", "solve_failed"
        elif not all_finite(tau):
            failure, kind = "non-finite torque from the formulation", "non_finite"
        elif result.timings.get("total", 0.0) * 1e3 > self.safety.time_budget_ms:
            failure = f"solve took {result.timings['total'] * 1e3:.2f} ms, budget {self.safety.time_budget_ms} ms"
            kind = "over_budget"
        else:
            self._held = 0
            out.tau = tau
            return True
        f.count(kind)
        self.last_error = failure
        # a late but valid torque may stand in for a previous one when there is none yet
        reuse = self._tau_prev if self._tau_prev is not None else (tau if kind == "over_budget" else None)
        if reuse is not None and self._held < self.safety.hold_ticks:
            self._held += 1
            f.count("held")
            out.tau = reuse
            out.note, out.event = f"{failure}; reusing the previous torque ({self._held})", kind
            return False
        f.count("safe_controller")
        self.stop(
            f"solve failed: {failure} (after {self._held} held ticks); safe stop with {self.safety.safe_controller}",
            now,
        )
        out.note, out.event = self.reason, kind
        return False

    def _reference_failed(self, error: Exception, out: Command, now: float) -> bool:
        """A reference that raised: counted as a failed solve, a safe stop whose reason names it (returns False:
        the formulation's torque is not used)."""
        self.filter.count("solve_failed")
        self.last_error = f"reference {self.reference.name!r} raised {type(error).__name__}: {error}"
        self.stop(f"reference failed: {self.last_error}; safe stop with {self.safety.safe_controller}", now)
        out.note, out.event = self.reason, "solve_failed"
        return False

    def _record(self, out: Command) -> None:
        """Run metrics of a tick whose formulation's torque was sent (after the safety filter)."""
        tracking = self._tracking
        m = self.metrics
        has_prev = self._tau_prev is not None
        position, velocity, magnitude, rate = tick_means(
            tracking.position_error, tracking.velocity_error, out.tau, self._tau_prev if has_prev else out.tau, has_prev
        )
        m.ticks += 1
        m.position_error_sum += position
        m.velocity_error_sum += velocity
        m.tau_abs_sum += magnitude
        if has_prev:
            m.tau_rate_sum += rate / self.dt
            m.tau_rate_ticks += 1
        if out.result.fallback:
            m.fallbacks[out.result.fallback] = m.fallbacks.get(out.result.fallback, 0) + 1
        if out.result.no_slip:
            m.no_slip_loaded += out.result.loaded_contacts
            m.no_slip_released += out.result.loaded_released
        self._tau_prev = out.tau

    def _track_grasp(self, contacts, t: float) -> None:
        """An object no sphere has been near for ``drop_ticks`` ticks has been dropped (recorded once)."""
        touching = on_a_body(contacts.body)
        self._untouched = 0 if touching else self._untouched + 1
        if self._untouched >= self.safety.drop_ticks and self.metrics.dropped_at is None:
            self.metrics.dropped_at = t - (self.safety.drop_ticks - 1) * self.dt
            self.last_error = f"object dropped at t = {self.metrics.dropped_at:.3f} s"

    # ------------------------------------------------------------------ diagnostics, after the command left
    def coupling(self, out: Command) -> tuple[float, float, bool] | None:
        """The contact-coupling diagnostic of the tick that gave ``out`` (Pace & Burden's condition 6,
        :mod:`idcontrol.contacts.coupling`): (coupling with every joint free, coupling through the unactuated DoFs
        alone, whether a pair coupled so touched down within two ticks of each other), or None without a solved
        problem. Off the tick's path: the daemon and the test harness ask for it after the command was sent,
        once per answered tick (it keeps the contacts' touchdown times: a tick not asked about does not advance
        them). Measured: a few µs a tick on the quadruped (``idcontrol bench --scenarios coupling``)."""
        result, contacts = out.result, out.contacts
        if result is None or result.problem is None or contacts is None:
            return None
        p = result.problem
        if p.n != contacts.n or p.m != self.controller.m:
            return None
        coupling, held, flag = coupling_diagnostic(
            p.N,
            p.M,
            self._unactuated,
            contacts.sphere,
            self._limb_of_sphere,
            self._touchdowns,
            out.t,
            TOUCHDOWN_WINDOW,
            COUPLING_THRESHOLD,
        )
        return float(coupling), float(held), bool(flag)

    # ------------------------------------------------------------------ falls
    def _bind_body_watch(self) -> None:
        """The joints whose origins :meth:`_fallen` watches for touching the ground: every joint of a floating-base
        robot whose origin stands higher than a quarter of the base's standing height (a knee, a hip, an elbow;
        not a foot's own joint, always near the ground, nor a wheel's, at the centre of its contact sphere), with
        views of their world origins."""
        robot = self.robot
        self._watched: list[int] = []
        self._watched_origins: list[Array] = []
        if not robot.floating_base:
            return
        m, d = robot.model, robot.data
        pin.forwardKinematics(m, d, robot.standing_configuration())
        pin.updateFramePlacements(m, d)
        axles = set()  # joints at the centre of their own contact sphere: a wheel's axle, as high as its radius
        for f, offset, radius in zip(robot.sphere_frame_ids, robot.sphere_offsets, robot.sphere_radii, strict=True):
            joint = int(m.frames[int(f)].parentJoint)
            if np.linalg.norm(d.oMf[int(f)].act(offset) - d.oMi[joint].translation) < radius:
                axles.add(joint)
        self._watched = [
            j for j in range(2, m.njoints) if d.oMi[j].translation[2] > 0.25 * self._standing_height and j not in axles
        ]
        #: a watched joint origin below this height (m, world) touches the ground: the smallest contact sphere
        self._ground_clearance = float(np.min(robot.sphere_radii)) if len(robot.sphere_radii) else 0.01
        self._watched_origins = [d.oMi[j].translation for j in self._watched]  # live views (checked below)
        pin.forwardKinematics(m, d, pin.neutral(m))
        pairs = zip(self._watched_origins, self._watched, strict=True)
        live = all(np.array_equal(view, d.oMi[j].translation) for view, j in pairs)
        if not live:  # a binding that returns copies: read them each tick
            self._watched_origins = []

    def _body_on_ground(self) -> str:
        """The name of a watched joint whose origin is at the ground (model updated this tick), or ''."""
        robot = self.robot
        stance = self.controller.stance  # estimated contacts: heights above the estimated ground
        height = (lambda p: p[2]) if stance is None else stance.height_above_ground
        if self._watched_origins:
            for view, j in zip(self._watched_origins, self._watched, strict=True):
                if height(view) < self._ground_clearance:
                    return str(robot.model.names[j])
            return ""
        for j in self._watched:
            if height(robot.data.oMi[j].translation) < self._ground_clearance:
                return str(robot.model.names[j])
        return ""

    def _fallen(self, q: Array) -> str:
        """Why the floating base has fallen ('' if it has not): its height below ``fall_height_fraction`` of its
        standing height, its tilt beyond ``fall_tilt``, or a body other than the feet on the ground."""
        z, x, y = q[2:5].tolist()
        if z >= self._fall_height and 1.0 - 2.0 * (x * x + y * y) >= self._cos_fall_tilt:
            clearance = self._ground_clearance
            stance = self.controller.stance  # estimated contacts: the origins' heights above the estimated ground
            for view in self._watched_origins:  # the usual case, in a few µs: upright, and no body on the ground
                if (view[2] if stance is None else stance.height_above_ground(view)) < clearance:
                    break
            else:
                if self._watched_origins or not self._watched:
                    return ""
        return self._fall_reason(q)

    def _fall_reason(self, q: Array) -> str:
        """:meth:`_fallen`'s checks one by one, with the reason."""
        x, y = float(q[3]), float(q[4])
        up_z = 1.0 - 2.0 * (x * x + y * y)  # z component of the base's z axis in world: cos(tilt)
        s = self.safety
        if q[2] < s.fall_height_fraction * self._standing_height:
            return (
                f"base at {q[2]:.3f} m, below {s.fall_height_fraction:g} of its standing height "
                f"{self._standing_height:.3f} m"
            )
        if up_z < math.cos(s.fall_tilt):
            return f"base tilted {math.acos(max(-1.0, min(1.0, up_z))):.2f} rad, beyond {s.fall_tilt:g} rad"
        body = self._body_on_ground()
        if body:
            return f"the body of joint {body!r} touches the ground (its origin below {self._ground_clearance:g} m)"
        return ""

    def _collapsing(self, q: Array) -> str:
        """Why a floating base is collapsing ('' if it is not): lower than ``collapse_height_fraction`` of its
        standing height, tilted beyond half of ``fall_tilt``, or fallen."""
        fallen = self._fallen(q)
        if fallen:
            return fallen
        s = self.safety
        drop = self._standing_height - float(q[2])
        if q[2] < s.collapse_height_fraction * self._standing_height:
            return f"collapsing: base {100 * drop:.1f} cm below its standing height {self._standing_height:.3f} m"
        x, y = float(q[3]), float(q[4])
        up_z = 1.0 - 2.0 * (x * x + y * y)
        if up_z < math.cos(0.5 * s.fall_tilt):
            return f"collapsing: base tilted {math.acos(max(-1.0, min(1.0, up_z))):.2f} rad"
        return ""
