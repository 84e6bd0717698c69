"""Run metrics of the control core: running sums over run-mode ticks (the paper's Section 8.1 metrics)."""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
from numba import njit, types
from numpy.typing import NDArray

from idcontrol.arrays import ANY_VECTOR, boolean, float64

Array = NDArray[np.float64]


@njit(float64(ANY_VECTOR), cache=True)
def mean_abs(x):
    """Mean of |x| over the 1-D array ``x`` (0 for an empty one)."""
    total = 0.0
    for value in x:
        total += abs(value)
    return total / max(x.shape[0], 1)


@njit(float64(ANY_VECTOR, ANY_VECTOR), cache=True)
def mean_abs_difference(a, b):
    """Mean of |a − b| over two 1-D arrays of one length (0 when empty)."""
    total = 0.0
    for i in range(a.shape[0]):
        total += abs(a[i] - b[i])
    return total / max(a.shape[0], 1)


@njit(types.UniTuple(float64, 4)(ANY_VECTOR, ANY_VECTOR, ANY_VECTOR, ANY_VECTOR, boolean), cache=True)
def tick_means(position_error, velocity_error, tau, tau_prev, has_prev):
    """One run tick's terms of the metrics, each a mean over the joints: (|q_ref − q| rad, |q̇_ref − q̇| rad/s,
    |τ| N·m, |τ − τ_prev| N·m, 0 without ``has_prev``), as :func:`mean_abs` and :func:`mean_abs_difference`."""
    rate = mean_abs_difference(tau, tau_prev) if has_prev else 0.0
    return mean_abs(position_error), mean_abs(velocity_error), mean_abs(tau), rate


@dataclass
class RunMetrics:
    """Running sums over run-mode ticks (the paper's Section 8.1 metrics)."""

    ticks: int = 0
    position_error_sum: float = 0.0  # Σ mean_j |q_ref − q|, rad
    velocity_error_sum: float = 0.0  # Σ mean_j |q̇_ref − q̇|, rad/s
    tau_rate_sum: float = 0.0  # Σ mean_j |Δτ| / Δt, N·m/s
    tau_rate_ticks: int = 0
    tau_abs_sum: float = 0.0  # Σ mean_j |τ|, N·m
    clipped: int = 0  # joint-ticks clipped to the torque limit in run mode (a safe stop's are not the controller's)
    fell: bool = False
    fall_cause: str | None = None  # how it fell (base height, tilt, a body on the ground, a guard stopping a collapse)
    dropped_at: float | None = None  # bridge time the grasped object was lost, s
    fallbacks: dict[str, int] = field(default_factory=dict)
    certificate_rejections: dict[str, int] = field(default_factory=dict)  # run ticks, by the check that failed
    no_slip_loaded: int = 0  # loaded contact-ticks of the no-slip answers sent
    no_slip_released: int = 0  # ... of which the answer held without tangential rows (no claim of no slip)
    base_first: Array | None = None  # (3,) floating base position (world, m) at the first run tick
    base_last: Array = field(default_factory=lambda: np.zeros(3))  # ... and at the last (updated in place)

    def summary(self) -> dict[str, object]:
        n = max(self.ticks, 1)
        return {
            "tracking_error_rad": self.position_error_sum / n,
            "velocity_error_rad_s": self.velocity_error_sum / n,
            "tau_rate_mean": self.tau_rate_sum / max(self.tau_rate_ticks, 1),
            "tau_mean": self.tau_abs_sum / n,
            "torque_clips_run": self.clipped,
            "fell": self.fell,
            "fall_cause": self.fall_cause,
            "object_dropped_at_s": self.dropped_at,
            "fallbacks": dict(self.fallbacks),
            "certificate_rejections": dict(self.certificate_rejections),
            "no_slip": {"held": self.no_slip_loaded - self.no_slip_released, "of": self.no_slip_loaded}
            if self.no_slip_loaded
            else None,
            "base_travel_m": None if self.base_first is None else (self.base_last - self.base_first).tolist(),
        }
