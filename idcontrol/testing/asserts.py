"""Assertions on a :class:`~idcontrol.testing.run.ClosedLoopRun`.

Each raises ``AssertionError`` with what was measured, where (time, joint or sphere) and the bound it broke,
and returns the measured value when it holds (for reports and further checks).
"""

from __future__ import annotations

import math

import numpy as np

from idcontrol.settings import SafetySettings
from idcontrol.testing.run import ClosedLoopRun


def _require_run_rows(run: ClosedLoopRun) -> np.ndarray:
    rows = run.in_run
    if not rows.any():
        raise AssertionError(f"no tick ran in run mode ({run.n} rows; the run ended: {run.end_reason})")
    return rows


def assert_stays_in_run(run: ClosedLoopRun, ticks: int | None = None) -> None:
    """Every row is in run mode, and there are ``ticks`` of them when given."""
    left = np.flatnonzero(~run.in_run)
    if left.size:
        i = int(left[0])
        raise AssertionError(
            f"the daemon left run mode at t = {run.t[i]:.3f} s (mode {str(run.mode[i])!r}, "
            f"after {i} run ticks): {run.end_reason}"
        )
    if ticks is not None and run.n != ticks:
        raise AssertionError(f"{run.n} run-mode ticks recorded, expected {ticks} ({run.end_reason})")


def assert_tracking(run: ClosedLoopRun, mean_rad: float | None = None, max_rad: float | None = None) -> float:
    """Joint tracking error mean_j |q_ref − q| (rad): its mean over run-mode ticks below ``mean_rad``, every
    tick's below ``max_rad``. Returns the mean."""
    rows = _require_run_rows(run)
    error = run.tracking_error[rows]
    mean = float(np.mean(error))
    worst = int(np.argmax(error))
    t_worst = float(run.t[rows][worst])
    if mean_rad is not None and not mean <= mean_rad:
        raise AssertionError(
            f"mean joint tracking error {mean:.5f} rad over {error.size} run ticks exceeds the "
            f"bound {mean_rad} rad (worst tick t = {t_worst:.3f} s: "
            f"{error[worst]:.5f} rad)"
        )
    if max_rad is not None and not error[worst] <= max_rad:
        q_err = np.abs(run.q_ref - run.q_joints)[rows][worst]
        joint = run.robot.actuated_joints[int(np.argmax(q_err))]
        raise AssertionError(
            f"joint tracking error {error[worst]:.5f} rad at t = {t_worst:.3f} s exceeds the bound "
            f"{max_rad} rad (largest on {joint!r}: {q_err.max():.5f} rad)"
        )
    return mean


def assert_torque_smooth(run: ClosedLoopRun, rate_mean: float) -> float:
    """E|Δτ|/Δt, the mean over consecutive run-mode ticks of mean_j |τᵢ − τᵢ₋₁| / Δt (N·m/s), below ``rate_mean``.
    Returns it."""
    _require_run_rows(run)
    rate = run.tau_rate
    valid = np.isfinite(rate)
    if not valid.any():
        raise AssertionError("fewer than two consecutive run-mode ticks: no torque change to measure")
    mean = float(np.mean(rate[valid]))
    if not mean <= rate_mean:
        worst = int(np.nanargmax(rate))
        raise AssertionError(
            f"E|Δτ|/Δt = {mean:.1f} N·m/s over {int(valid.sum())} tick pairs exceeds the bound "
            f"{rate_mean} N·m/s (largest step at t = {run.t[worst + 1]:.3f} s: "
            f"{rate[worst]:.1f} N·m/s)"
        )
    return mean


def assert_within_limits(run: ClosedLoopRun, torque: bool = True, position: bool = True, tol: float = 1e-9) -> None:
    """Every commanded |τ| within the robot's torque limits, every actuated joint within its URDF position
    limits (both with absolute tolerance ``tol``)."""
    robot = run.robot
    names = robot.actuated_joints
    if not run.n:
        raise AssertionError(f"the run recorded no tick ({run.end_reason})")
    if torque:
        excess = np.abs(run.tau) - robot.torque_limits
        i, j = np.unravel_index(int(np.argmax(excess)), excess.shape)
        if excess[i, j] > tol:
            raise AssertionError(
                f"torque {run.tau[i, j]:.4f} N·m on {names[j]!r} at t = {run.t[i]:.3f} s exceeds "
                f"its limit {robot.torque_limits[j]} N·m"
            )
    if position:
        model = robot.model
        idx = [model.joints[model.getJointId(n)].idx_q for n in names]
        lower, upper = model.lowerPositionLimit[idx], model.upperPositionLimit[idx]
        q = run.q_joints
        excess = np.maximum(lower - q, q - upper)
        i, j = np.unravel_index(int(np.argmax(excess)), excess.shape)
        if excess[i, j] > tol:
            raise AssertionError(
                f"joint {names[j]!r} at {q[i, j]:.4f} at t = {run.t[i]:.3f} s is outside its limits "
                f"[{lower[j]:.4f}, {upper[j]:.4f}]"
            )


def assert_friction_cone(
    run: ClosedLoopRun, source: str = "predicted", mu: float | None = None, slack: float = 1.0, tol: float = 1e-6
) -> int:
    """Contact forces inside the Coulomb cone: f_n ≥ −tol and |f_t| ≤ slack·μ·f_n + tol (N) at every sphere
    with a candidate contact (normal from the controller's contact detection).

    source : ``"predicted"`` (the formulation's forces) or ``"sensed"`` (the simulator's).
    mu : the friction coefficient (default: the one the controller assumed, ``run.mu``).
    slack : ``math.sqrt(2)`` accepts a four-facet friction pyramid (|f_s|, |f_t| ≤ μ f_n), which the QP
        formulations use, about the circular cone.
    Returns the number of contact forces checked.
    """
    if source not in ("predicted", "sensed"):
        raise ValueError(f"source must be 'predicted' or 'sensed', got {source!r}")
    mu = run.mu if mu is None else mu
    force = run.force_predicted if source == "predicted" else run.force_sensed
    normal = run.contact_normal
    has_contact = np.any(normal != 0.0, axis=2)
    f_n = np.einsum("nkc,nkc->nk", force, normal)
    f_t = np.linalg.norm(force - f_n[..., None] * normal, axis=2)
    bound = np.inf if math.isinf(mu) else slack * mu * np.maximum(f_n, 0.0) + tol
    pulling = has_contact & (f_n < -tol)
    outside = has_contact & (f_t > bound)
    names = run.robot.sphere_names
    if pulling.any():
        i, k = np.argwhere(pulling)[0]
        raise AssertionError(
            f"{source} normal force on {names[k]!r} at t = {run.t[i]:.3f} s is {f_n[i, k]:.4f} N: "
            f"the contact pulls (bound f_n >= -{tol} N)"
        )
    if outside.any():
        ratio = np.where(outside, f_t / np.maximum(f_n, 1e-300), 0.0)
        i, k = np.unravel_index(int(np.argmax(ratio)), ratio.shape)
        raise AssertionError(
            f"{source} force on {names[k]!r} at t = {run.t[i]:.3f} s is outside the friction cone: "
            f"|f_t| = {f_t[i, k]:.4f} N > {slack:g}·μ·f_n = {slack:g}·{mu}·{f_n[i, k]:.4f} N "
            f"({int(outside.sum())} of {int(has_contact.sum())} contact forces outside)"
        )
    return int(has_contact.sum())


def assert_no_fall(run: ClosedLoopRun, safety: SafetySettings | None = None) -> tuple[float, float]:
    """A floating base stays above ``fall_height_fraction`` of its standing height and tilts less than
    ``fall_tilt`` (the daemon's fall criterion, :class:`SafetySettings`), and the daemon did not report a
    fall. Returns (lowest base height m, largest tilt rad)."""
    robot = run.robot
    if not robot.floating_base:
        raise AssertionError(f"robot {robot.name!r} has a fixed base; it cannot fall")
    s = safety or SafetySettings()
    standing = float(robot.standing_configuration()[2])
    height = run.q[:, 2]
    x, y = run.q[:, 3], run.q[:, 4]
    tilt = np.arccos(np.clip(1.0 - 2.0 * (x * x + y * y), -1.0, 1.0))
    low, high = int(np.argmin(height)), int(np.argmax(tilt))
    if height[low] < s.fall_height_fraction * standing:
        raise AssertionError(
            f"the base fell: height {height[low]:.4f} m at t = {run.t[low]:.3f} s is below "
            f"{s.fall_height_fraction} × standing {standing:.4f} m"
        )
    if tilt[high] > s.fall_tilt:
        raise AssertionError(
            f"the base fell: tilt {tilt[high]:.3f} rad at t = {run.t[high]:.3f} s exceeds {s.fall_tilt} rad"
        )
    if run.summary.get("fell"):
        raise AssertionError(f"the daemon reported a fall ({run.end_reason})")
    return float(height[low]), float(tilt[high])
