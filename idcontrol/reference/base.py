"""The reference interface: joint targets each tick, and the PD(I) law that turns them into q̈_des.

A reference runs inside the 1 kHz control tick, so :meth:`Reference.sample`
must be cheap (tens of µs) and must not block.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import ClassVar, NamedTuple

import numpy as np
from numba import njit, types
from numpy.typing import NDArray

from idcontrol.arrays import ANY_VECTOR, VECTOR, boolean
from idcontrol.errors import ConfigError, InputError
from idcontrol.robot.config import Gains

Array = NDArray[np.float64]


@dataclass
class Tracking:
    """Joint tracking errors for the PID baseline (actuated joints; rad, rad/s, rad·s)."""

    position_error: Array
    velocity_error: Array
    integral_error: Array | None = None


class JointTarget(NamedTuple):
    """Desired motion of the actuated joints, each (nu,) in ``robot.actuated_joints`` order.

    q_ref : rad (m for prismatic joints); v_ref : rad/s; a_ref : rad/s².
    """

    q_ref: Array
    v_ref: Array
    a_ref: Array


class Reference:
    """A joint reference generator for one robot.

    Subclasses set :attr:`name` (the registry name) and implement :meth:`sample`.
    """

    name: ClassVar[str] = ""
    #: What the reference changed from its options to fit the robot (an amplitude reduced at a joint's limit), one
    #: line each; the control core says them when it starts to run the reference.
    notes: tuple[str, ...] = ()

    def sample(self, t: float, q: Array, v: Array) -> JointTarget:
        """The target at time ``t`` (s) given the measured state ``q`` (nq,), ``v`` (nv,).

        Times must not decrease between :meth:`reset` calls. The returned arrays
        may be kept by the caller; the reference never writes to them again.
        """
        raise NotImplementedError

    def reset(self) -> None:
        """Forget any internal state; the next :meth:`sample` starts the reference afresh."""

    #: Whether :meth:`set_target` takes targets from the user's planner (the reference channel).
    accepts_targets: ClassVar[bool] = False

    def set_target(self, q_ref: Array, v_ref: Array, a_ref: Array) -> None:
        """Replace the target with the planner's (each (nu,) rad, rad/s, rad/s²); only references with
        :attr:`accepts_targets` take one."""
        raise ConfigError(f"reference {self.name!r} takes no targets from a planner; use 'stream'")

    def update(self, **options: object) -> None:
        """Change options while running, without restarting the reference (ConfigError if unsupported)."""
        raise ConfigError(f"reference {self.name!r} has no run-time options; got {sorted(options)}")

    def telemetry(self) -> dict[str, object] | None:
        """Plain values describing the last sample (e.g. a gait's phase), published each tick; None: none."""
        return None

    def observe_contacts(self, contacts: object) -> None:
        """The controller's candidate contacts of the last tick (a ContactSet), for references that
        react to contact (the arm's fingers close until they touch). Default: ignored."""

    def contact_mask(self) -> Array | None:
        """(k,) bool per contact sphere of the robot file: which may touch at the last sample
        (a gait's planned stance feet); None when the reference plans no contacts."""
        return None

    def planned_stance(self) -> Array | None:
        """(k,) bool per contact sphere: which a gait plans to stand at the last sample (its swing feet past their
        planned touchdown included); None when the reference plans no stance (then every candidate of
        :meth:`contact_mask` may stand)."""
        return None


def desired_acceleration(
    target: JointTarget,
    q_act: Array,
    v_act: Array,
    gains: Gains,
    integral: Array | None = None,
) -> tuple[Array, Tracking]:
    """q̈_des = q̈_ref + K_p (q_ref − q) + K_d (q̇_ref − q̇) [+ K_i ∫(q_ref − q) dt] on the actuated joints.

    q_act, v_act : (nu,) measured actuated joint positions (rad) and velocities (rad/s).
    gains : per-joint kp (1/s²), kd (1/s), ki (1/s³), e.g. ``robot.gains``.
    integral : (nu,) ∫(q_ref − q) dt accumulated by the caller (rad·s), or None for PD only.
    Returns q̈_des (nu,) rad/s² and the tracking errors.
    """
    has_integral = integral is not None
    qdd_des, position_error, velocity_error = pd_law(
        target.q_ref,
        target.v_ref,
        target.a_ref,
        q_act,
        v_act,
        gains.kp,
        gains.kd,
        gains.ki,
        integral if has_integral else q_act,
        has_integral,
    )
    return qdd_des, Tracking(position_error, velocity_error, integral)


@njit(
    types.UniTuple(VECTOR, 3)(
        ANY_VECTOR,
        ANY_VECTOR,
        ANY_VECTOR,
        ANY_VECTOR,
        ANY_VECTOR,
        ANY_VECTOR,
        ANY_VECTOR,
        ANY_VECTOR,
        ANY_VECTOR,
        boolean,
    ),
    cache=True,
)
def pd_law(q_ref, v_ref, a_ref, q, v, kp, kd, ki, integral, has_integral):
    """(q̈_des, q_ref − q, q̇_ref − q̇), each (nu,): q̈_des = q̈_ref + K_p (q_ref − q) + K_d (q̇_ref − q̇)
    [+ K_i ∫(q_ref − q) dt when ``has_integral``] (see :func:`desired_acceleration`)."""
    n = q.shape[0]
    qdd = np.empty(n)
    position_error = np.empty(n)
    velocity_error = np.empty(n)
    for j in range(n):
        e, ed = q_ref[j] - q[j], v_ref[j] - v[j]
        position_error[j], velocity_error[j] = e, ed
        x = kp[j] * e + kd[j] * ed + a_ref[j]
        if has_integral:
            x += ki[j] * integral[j]
        qdd[j] = x
    return qdd, position_error, velocity_error


def ramped_sine(s: float, frequency: float, ramp_time: float) -> tuple[float, float, float]:
    """(y, ẏ, ÿ) at s seconds of the unit sinusoid y = e(s) sin(2π f s) that rises through the quintic
    e = 10x³ − 15x⁴ + 6x⁵ (x = s / ramp_time) to e = 1 at ``ramp_time``: times an amplitude, a swing that starts
    at rest with zero acceleration. Before its start (s < 0) it rests at 0; ``ramp_time`` 0 starts at full
    amplitude. A phase 2π f s too large for a float (a time or a frequency far out of range) raises InputError."""
    if s < 0.0:
        return 0.0, 0.0, 0.0
    w = 2.0 * math.pi * frequency
    phase = w * s
    if not math.isfinite(phase):
        raise InputError(f"a sinusoid's phase 2π·{frequency:g} Hz·{s:g} s is not a finite number")
    sin, cos = math.sin(phase), math.cos(phase)
    if s >= ramp_time:
        e, ed, edd = 1.0, 0.0, 0.0
    else:
        x, r = s / ramp_time, 1.0 / ramp_time
        e = x * x * x * (10.0 + x * (6.0 * x - 15.0))
        ed = 30.0 * x * x * (1.0 - x) * (1.0 - x) * r
        edd = 60.0 * x * (1.0 - x) * (1.0 - 2.0 * x) * r * r
    return e * sin, ed * sin + e * w * cos, edd * sin + 2.0 * ed * w * cos - e * w * w * sin
