"""The safety filter: the last word on every torque the daemon sends.

:class:`SafetyFilter` holds the robot's limits as preallocated arrays and is
called by :class:`~idcontrol.control.core.ControlCore` at two points of each
tick:

* :meth:`SafetyFilter.check_state` on every state in run mode: a joint beyond
  its URDF position limits (plus a margin) or faster than its URDF velocity
  limit (times a factor) ends run mode with a damping stop;
* :meth:`SafetyFilter.apply` on every command, whatever the mode: a
  non-finite torque becomes zero (and the core stops), the change from the
  previous command is bounded by the torque-rate limit, and each joint is
  clipped to its torque limit (URDF effort, robot-file overrides, then
  launch-file overrides, which may only lower it).

The safe controllers used during a safe stop live here as well
(:meth:`SafetyFilter.safe_torque`): joint damping ``τ = −D q̇`` or a PD hold
``τ = Kp (q_hold − q) − Kd q̇`` around the posture where the stop began.
Every intervention is counted by kind in :attr:`SafetyFilter.counts`.
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING

import numpy as np
from numba import njit
from numba.types import Tuple, UniTuple
from numpy.typing import NDArray

from idcontrol.arrays import ANY_VECTOR, IN_INDICES, VECTOR, boolean, intp
from idcontrol.settings import SafetySettings

if TYPE_CHECKING:  # the launch file loader imports this module: no Pinocchio import for a type
    from idcontrol.robot.model import RobotModel

Array = NDArray[np.float64]

#: Kinds of intervention counted in :attr:`SafetyFilter.counts` (docs/protocol.md, ``status.interventions``).
INTERVENTIONS = (
    "torque_limit",  # joint-ticks clipped to the torque limit
    "torque_rate",  # joint-ticks whose change was bounded by the torque-rate limit
    "non_finite",  # ticks whose torque held NaN or infinity (a solver output or a command)
    "solve_failed",  # ticks whose formulation failed, threw or returned no torque, or whose reference threw
    "certificate",  # ticks whose found result failed its certificate (idcontrol.formulations.certificate)
    "over_budget",  # ticks whose solve took longer than the time budget
    "held",  # ticks that reused the previous torque instead of a failed or late solve's
    "safe_controller",  # safe stops entered because the failures outlasted the hold
    "position_limit",  # damping stops for a joint beyond its position limits
    "velocity_limit",  # damping stops for a joint above its velocity limit
)


class SafetyFilter:
    """Limits, guards and safe controllers for one robot; counts every intervention.

    robot : the robot (URDF limits, robot-file torque limits, actuated joints).
    settings : the launch file's ``[safety]`` settings.
    dt : control period, s (turns the torque-rate limit into a per-command step).
    """

    def __init__(self, robot: RobotModel, settings: SafetySettings, dt: float) -> None:
        settings.validate()
        self.settings = settings
        model = robot.model
        nu = robot.nu
        joints = settings.for_robot(robot)
        self.tau_limit = joints.tau_limit
        self.tau_step = joints.tau_rate * dt  # N·m per command
        self.damping, self.hold_kp, self.hold_kd = joints.damping, joints.hold_kp, joints.hold_kd
        lower, upper = robot.actuated_position_limits()
        self.q_min = lower - settings.position_margin  # (±inf for a joint without limits stays so)
        self.q_max = upper + settings.position_margin
        v_max = np.asarray(model.velocityLimit, dtype=float)[robot.actuated_dofs]
        self.v_max = np.full(v_max.shape, np.inf)  # a URDF velocity of 0 (none given): no guard, not 0 · ∞
        rated = v_max > 0
        self.v_max[rated] = v_max[rated] * settings.velocity_factor
        self.joint_names = robot.actuated_joints
        self.counts = dict.fromkeys(INTERVENTIONS, 0)
        self.clipped = 0  # joints clipped to the torque limit by the last apply()
        self._tau = np.zeros(nu)
        self._q_hold = np.zeros(nu)

    def count(self, kind: str, n: int = 1) -> None:
        self.counts[kind] += n

    # ------------------------------------------------------------------ state guard
    def check_state(self, q_act: Array, v_act: Array) -> str:
        """'' when the joints are within their limits, else why not (and the kind is counted)."""
        kind, j = limit_violation(q_act, v_act, self.q_min, self.q_max, self.v_max)
        return self.violation(kind, j, q_act, v_act)

    def split_and_check(
        self, q: Array, v: Array, idx_q: Array, idx_v: Array, q_act: Array, v_act: Array, check: bool
    ) -> str:
        """Write the actuated joints' positions q[idx_q] and velocities v[idx_v] into ``q_act``, ``v_act`` (nu,) and,
        when ``check``, return :meth:`check_state`'s verdict on them (one compiled call)."""
        kind, j = actuated_within_limits(q, v, idx_q, idx_v, self.q_min, self.q_max, self.v_max, check, q_act, v_act)
        return self.violation(kind, j, q_act, v_act) if kind != WITHIN_LIMITS else ""

    def violation(self, kind: int, j: int, q_act: Array, v_act: Array) -> str:
        """Why joint ``j`` violates its limits (``kind``: :func:`limit_violation`'s), counted; '' when within."""
        if kind == WITHIN_LIMITS:
            return ""
        if kind == VELOCITY_LIMIT:
            self.count("velocity_limit")
            return f"joint {self.joint_names[j]} at {v_act[j]:+.3f}/s beyond its velocity limit {self.v_max[j]:.3f}"
        self.count("position_limit")
        return (
            f"joint {self.joint_names[j]} at {q_act[j]:+.4f} outside "
            f"[{self.q_min[j]:+.4f}, {self.q_max[j]:+.4f}] (limits and margin)"
        )

    # ------------------------------------------------------------------ safe controllers
    def begin_hold(self, q_act: Array) -> None:
        """Remember the posture a PD hold keeps (the joints where the safe stop began)."""
        np.copyto(self._q_hold, q_act)

    def safe_torque(self, controller: str, q_act: Array, v_act: Array) -> Array:
        """The safe controller's torque (before :meth:`apply`): damping or PD hold."""
        if controller == "pd_hold":
            return self.hold_kp * (self._q_hold - q_act) - self.hold_kd * v_act
        return -self.damping * v_act

    # ------------------------------------------------------------------ every command
    def send(self, tau: Array, tau_sent: Array) -> Array:
        """:meth:`apply` against the last torque sent, ``tau_sent`` (nu,), which becomes the result (in place);
        returns the torque to send, a new array (one compiled call)."""
        non_finite, limited, clipped, out = guard_and_keep(tau, tau_sent, self.tau_step, self.tau_limit)
        self._book(non_finite, limited, clipped)
        return out

    def apply(self, tau: Array, tau_prev: Array | None) -> Array:
        """The torque to send: finite, within ``tau_prev`` ± the rate step, within the torque limits.

        Returns an internal buffer (copy it to keep it past the next call). A non-finite ``tau`` gives
        zeros and counts ``non_finite``: the caller must stop (see :attr:`last_non_finite`).
        """
        out = self._tau
        has_prev = tau_prev is not None
        non_finite, limited, clipped = guard_torque(
            tau, tau_prev if has_prev else out, has_prev, self.tau_step, self.tau_limit, out
        )
        self._book(non_finite, limited, clipped)
        return out

    def _book(self, non_finite: bool, limited: int, clipped: int) -> None:
        """Keep a guarded command's outcome (:attr:`last_non_finite`, :attr:`clipped`) and count its interventions."""
        self.last_non_finite, self.clipped = non_finite, clipped
        if non_finite:
            self.count("non_finite")
        if limited:
            self.count("torque_rate", limited)
        if clipped:
            self.count("torque_limit", clipped)


# ---------------------------------------------------------------------- compiled guards (one call each per tick)
WITHIN_LIMITS, POSITION_LIMIT, VELOCITY_LIMIT = 0, 1, 2


@njit(UniTuple(intp, 2)(ANY_VECTOR, ANY_VECTOR, ANY_VECTOR, ANY_VECTOR, ANY_VECTOR), cache=True)
def limit_violation(q, v, q_min, q_max, v_max):
    """(kind, j): WITHIN_LIMITS and -1; else POSITION_LIMIT and the joint furthest outside [q_min, q_max]
    (positions are checked first), or VELOCITY_LIMIT and the joint with the largest |q̇| / q̇_max > 1."""
    worst, j_worst = 0.0, -1
    for j in range(q.shape[0]):
        outside = max(q_min[j] - q[j], q[j] - q_max[j])
        if outside > 0.0 and (j_worst < 0 or outside > worst):
            worst, j_worst = outside, j
    if j_worst >= 0:
        return POSITION_LIMIT, j_worst
    for j in range(v.shape[0]):
        if abs(v[j]) > v_max[j]:
            ratio = abs(v[j]) / v_max[j]
            if j_worst < 0 or ratio > worst:
                worst, j_worst = ratio, j
    if j_worst >= 0:
        return VELOCITY_LIMIT, j_worst
    return WITHIN_LIMITS, -1


@njit(
    UniTuple(intp, 2)(
        ANY_VECTOR, ANY_VECTOR, IN_INDICES, IN_INDICES, ANY_VECTOR, ANY_VECTOR, ANY_VECTOR, boolean, VECTOR, VECTOR
    ),
    cache=True,
)
def actuated_within_limits(q, v, idx_q, idx_v, q_min, q_max, v_max, check, q_act, v_act):
    """Write q[idx_q], v[idx_v] (the actuated joints) into ``q_act``, ``v_act``; then, when ``check``,
    :func:`limit_violation` on them, else (WITHIN_LIMITS, −1)."""
    for k in range(idx_q.shape[0]):
        q_act[k] = q[idx_q[k]]
        v_act[k] = v[idx_v[k]]
    if not check:
        return WITHIN_LIMITS, -1
    return limit_violation(q_act, v_act, q_min, q_max, v_max)


@njit(Tuple((boolean, intp, intp))(ANY_VECTOR, ANY_VECTOR, boolean, ANY_VECTOR, ANY_VECTOR, VECTOR), cache=True)
def guard_torque(tau, tau_prev, has_prev, step, limit, out):
    """Write the guarded torque into ``out`` (nu,), N·m: zeros if any entry of ``tau`` is not finite, then
    within ``tau_prev`` ± ``step`` (when ``has_prev``), then within ± ``limit``.
    Returns (non_finite, joints rate-limited, joints clipped to the torque limit)."""
    n = tau.shape[0]
    non_finite = False
    for j in range(n):
        if not math.isfinite(tau[j]):
            non_finite = True
    limited = 0
    clipped = 0
    for j in range(n):
        x = 0.0 if non_finite else tau[j]
        if has_prev:
            if x < tau_prev[j] - step[j]:
                x = tau_prev[j] - step[j]
                limited += 1
            elif x > tau_prev[j] + step[j]:
                x = tau_prev[j] + step[j]
                limited += 1
        if abs(x) > limit[j]:
            x = limit[j] if x > 0.0 else -limit[j]
            clipped += 1
        out[j] = x
    return non_finite, limited, clipped


@njit(Tuple((boolean, intp, intp, VECTOR))(ANY_VECTOR, VECTOR, ANY_VECTOR, ANY_VECTOR), cache=True)
def guard_and_keep(tau, tau_sent, step, limit):
    """:func:`guard_torque` of ``tau`` against the last torque sent, ``tau_sent`` (nu,), into a new array, which is
    also copied into ``tau_sent``: (non_finite, joints rate-limited, joints clipped, the torque to send)."""
    out = np.empty(tau.shape[0])
    non_finite, limited, clipped = guard_torque(tau, tau_sent, True, step, limit, out)
    for j in range(out.shape[0]):
        tau_sent[j] = out[j]
    return non_finite, limited, clipped, out
