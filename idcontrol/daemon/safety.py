"""The safety filter: the last word on every torque the daemon sends.

:class:`SafetyFilter` holds the robot's limits as preallocated arrays and is
called by :class:`~idcontrol.daemon.core.ControlCore` at two points of each
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
from dataclasses import dataclass, field, fields
from typing import TYPE_CHECKING, Any

import numpy as np
from numba import njit
from numpy.typing import NDArray

from idcontrol.errors import ConfigError, NameNotFound

if TYPE_CHECKING:  # the launch file loader imports this module: no Pinocchio import for a type
    from idcontrol.robot.model import RobotModel

Array = NDArray[np.float64]

#: Safe controllers a safe stop may use.
SAFE_CONTROLLERS = ("damping", "pd_hold")

#: Kinds of intervention counted in :attr:`SafetyFilter.counts` (docs/protocol.md, ``status.interventions``).
INTERVENTIONS = (
    "torque_limit",  # joint-ticks clipped to the torque limit
    "torque_rate",  # joint-ticks whose change was bounded by the torque-rate limit
    "non_finite",  # ticks whose torque held NaN or infinity (a solver output or a command)
    "solve_failed",  # ticks whose formulation failed, threw or returned no torque
    "over_budget",  # ticks whose solve took longer than the time budget
    "held",  # ticks that reused the previous torque instead of a failed or late solve's
    "safe_controller",  # safe stops entered because the failures outlasted the hold
    "position_limit",  # damping stops for a joint beyond its position limits
    "velocity_limit",  # damping stops for a joint above its velocity limit
)

PerJoint = float | dict[str, float]


@dataclass
class SafetySettings:
    """Guards applied to every command (the launch file's ``[safety]`` table).

    hold_ticks : consecutive failed or over-budget solves that reuse the previous torque before the
        safe controller takes over.
    safe_controller : what a safe stop commands: "damping" (τ = −D q̇ until at rest) or "pd_hold"
        (τ = Kp (q_hold − q) − Kd q̇ around the posture where the stop began, until ``safe_stop_timeout``).
    damping : joint damping D of the damping stop, N·m·s/rad (a number or a per-joint table).
    hold_kp, hold_kd : gains of the PD hold, N·m/rad and N·m·s/rad (a number or a per-joint table).
    rest_velocity : a damping stop ends when every |q̇| is below this, rad/s.
    safe_stop_timeout : a safe stop ends after this long regardless, s.
    torque_limits : per-joint torque limits, N·m, over the robot's (a number or a table with an
        optional ``default``); they may only lower the robot's limits.
    torque_rate_limit : the largest change of a joint's torque between two commands, N·m/s
        (a number or a per-joint table; inf: none).
    position_margin : a joint more than this beyond its URDF position limits stops the robot, rad or m
        (default inf: no guard).
    velocity_factor : a joint faster than this times its URDF velocity limit stops the robot (default inf:
        no guard).

    The limit guards are off by default: a simulated robot crosses conservative URDF limits in
    experiments that are meant to go wrong (a grasp lost on purpose flings the arm's fingers at 35 times
    their 0.5 m/s limit). Launch files for hardware should set them (the quadruped launch files do).
    time_budget_ms : a solve that takes longer than this counts as failed, ms (inf: no budget).
    fall_height_fraction : a floating base below this fraction of its standing height has fallen.
    fall_tilt : a floating base tilted more than this from upright has fallen, rad.
    drop_ticks : a movable body out of reach of every contact sphere (beyond the detection
        margin) for this many ticks has been dropped.
    """

    hold_ticks: int = 5
    safe_controller: str = "damping"
    damping: PerJoint = 0.5
    hold_kp: PerJoint = 50.0
    hold_kd: PerJoint = 2.0
    rest_velocity: float = 0.05
    safe_stop_timeout: float = 1.0
    torque_limits: PerJoint = field(default_factory=dict)
    torque_rate_limit: PerJoint = math.inf
    position_margin: float = math.inf
    velocity_factor: float = math.inf
    time_budget_ms: float = math.inf
    fall_height_fraction: float = 0.5
    fall_tilt: float = 1.0
    drop_ticks: int = 50

    @classmethod
    def from_table(cls, table: dict[str, Any], where: str) -> SafetySettings:
        """Settings from a launch file's ``[safety]`` table; ConfigError naming the bad key."""
        known = {f.name for f in fields(cls)}
        unknown = sorted(set(table) - known)
        if unknown:
            raise ConfigError(f"{where}: unknown key(s) {unknown}; known: {sorted(known)}")
        settings = cls(**table)
        settings.validate(where)
        return settings

    def validate(self, where: str = "safety") -> None:
        """Types and ranges of every field (joint names are checked against the robot by SafetyFilter)."""
        for name in ("hold_ticks", "drop_ticks"):
            value = getattr(self, name)
            if not isinstance(value, int) or isinstance(value, bool) or value < 0:
                raise ConfigError(f"{where}: {name} must be an integer >= 0, got {value!r}")
        if self.safe_controller not in SAFE_CONTROLLERS:
            raise ConfigError(f"{where}: safe_controller {self.safe_controller!r} not one of {list(SAFE_CONTROLLERS)}")
        for name in ("rest_velocity", "safe_stop_timeout", "position_margin", "velocity_factor", "time_budget_ms",
                     "fall_height_fraction", "fall_tilt"):  # fmt: skip
            value = getattr(self, name)
            if not _number(value) or math.isnan(value) or value < 0:
                raise ConfigError(f"{where}: {name} must be a number >= 0 (inf allowed), got {value!r}")
        for name in ("damping", "hold_kp", "hold_kd", "torque_limits", "torque_rate_limit"):
            value = getattr(self, name)
            values = value.values() if isinstance(value, dict) else [value]
            if not all(_number(x) and not math.isnan(x) and x >= 0 for x in values):
                raise ConfigError(f"{where}: {name} must be a number >= 0 or a table of them, got {value!r}")
        if isinstance(self.torque_limits, dict) and any(x <= 0 for x in self.torque_limits.values()):
            raise ConfigError(f"{where}: torque_limits must be > 0")


def _number(x: object) -> bool:
    return isinstance(x, (int, float)) and not isinstance(x, bool)


def per_joint(value: PerJoint, robot: RobotModel, name: str, base: Array | float) -> Array:
    """(nu,) values: ``base``, replaced by a number or by a table's ``default`` and named joints."""
    out = np.broadcast_to(np.asarray(base, dtype=float), (robot.nu,)).copy()
    if not isinstance(value, dict):
        out[:] = float(value)
        return out
    for joint, x in value.items():
        if joint == "default":
            out[:] = float(x)
    for joint, x in value.items():
        if joint == "default":
            continue
        if joint not in robot.actuated_joints:
            raise NameNotFound(f"actuated joint (safety.{name})", joint, robot.actuated_joints)
        out[robot.actuated_joints.index(joint)] = float(x)
    return out


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
        self.tau_limit = per_joint(settings.torque_limits, robot, "torque_limits", robot.torque_limits)
        raised = np.flatnonzero(self.tau_limit > robot.torque_limits)
        if raised.size:
            names = [robot.actuated_joints[i] for i in raised]
            raise ConfigError(f"safety.torque_limits may only lower the robot's limits; raised for {names}")
        self.tau_step = per_joint(settings.torque_rate_limit, robot, "torque_rate_limit", math.inf) * dt  # N·m
        defaults = SafetySettings()
        self.damping = per_joint(settings.damping, robot, "damping", defaults.damping)
        self.hold_kp = per_joint(settings.hold_kp, robot, "hold_kp", defaults.hold_kp)
        self.hold_kd = per_joint(settings.hold_kd, robot, "hold_kd", defaults.hold_kd)
        idx_q = [model.joints[model.getJointId(n)].idx_q for n in robot.actuated_joints]
        lower = np.asarray(model.lowerPositionLimit, dtype=float)[idx_q]
        upper = np.asarray(model.upperPositionLimit, dtype=float)[idx_q]
        bounded = lower < upper  # a joint without limits has none (or an empty interval) in the model
        self.q_min = np.where(bounded, lower - settings.position_margin, -np.inf)
        self.q_max = np.where(bounded, upper + settings.position_margin, np.inf)
        v_max = np.asarray(model.velocityLimit, dtype=float)[robot.actuated_dofs]
        self.v_max = np.where(v_max > 0, v_max * settings.velocity_factor, np.inf)
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
        if kind == WITHIN_LIMITS:
            return ""
        if kind == VELOCITY_LIMIT:
            self.count("velocity_limit")
            return f"joint {self.joint_names[j]} at {v_act[j]:+.3f}/s beyond its velocity limit {self.v_max[j]:.3f}"
        self.count("position_limit")
        return (f"joint {self.joint_names[j]} at {q_act[j]:+.4f} outside "
                f"[{self.q_min[j]:+.4f}, {self.q_max[j]:+.4f}] (limits and margin)")  # fmt: skip

    def warm_up(self, q_act: Array, v_act: Array) -> None:
        """Run the compiled guards once on ``q_act``, ``v_act`` and zero torques (loading a kernel takes
        milliseconds: not in the first tick); nothing is counted or kept."""
        limit_violation(q_act, v_act, self.q_min, self.q_max, self.v_max)
        scratch = np.zeros_like(self._tau)
        for has_prev in (False, True):
            guard_torque(scratch, scratch, has_prev, self.tau_step, self.tau_limit, scratch)

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
    def apply(self, tau: Array, tau_prev: Array | None) -> Array:
        """The torque to send: finite, within ``tau_prev`` ± the rate step, within the torque limits.

        Returns an internal buffer (copy it to keep it past the next call). A non-finite ``tau`` gives
        zeros and counts ``non_finite``: the caller must stop (see :attr:`last_non_finite`).
        """
        out = self._tau
        has_prev = tau_prev is not None
        self.last_non_finite, limited, self.clipped = guard_torque(
            tau, tau_prev if has_prev else out, has_prev, self.tau_step, self.tau_limit, out
        )
        if self.last_non_finite:
            self.count("non_finite")
        if limited:
            self.count("torque_rate", limited)
        if self.clipped:
            self.count("torque_limit", self.clipped)
        return out


# ---------------------------------------------------------------------- compiled guards (one call each per tick)
WITHIN_LIMITS, POSITION_LIMIT, VELOCITY_LIMIT = 0, 1, 2


@njit(cache=True)
def limit_violation(q, v, q_min, q_max, v_max):  # pragma: no cover - compiled
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


@njit(cache=True)
def guard_torque(tau, tau_prev, has_prev, step, limit, out):  # pragma: no cover - compiled
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
