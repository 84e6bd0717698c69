"""Section 4.5: detect and repair desired accelerations that contradict the contacts.

A contact solve can succeed while the requested q̇_des is inconsistent with the
contacts (a robot standing without slip that tries to splay its legs). With the
contact impulses held fixed, the repair finds the actuated velocities closest to
q̇_des that keep every contact unpenetrated (and, for no-slip models, every
tangential velocity zero)::

    minimize_{v⁺, τ}  ½‖P v⁺ − q̇_des‖²
    subject to        N v⁺ ≥ −φ/Δt,  [S v⁺ = 0, T v⁺ = 0],
                      M v⁺ = M v⁻ + Nᵀf_N + Sᵀf_S + Tᵀf_T + Pᵀτ + Δt f_ext

The unactuated rows of the dynamics give v⁺_u as an affine function of
v⁺_a = P v⁺, so the QP is over v⁺_a alone with an identity Hessian; τ then
follows from the actuated rows. It is not always feasible (spec section 9,
item 24): failure is reported, never hidden.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from numba import njit
from numpy.typing import NDArray

from idcontrol.arrays import IN_MATRIX, IN_VECTOR, float64
from idcontrol.formulations.problem import ContactProblem, block
from idcontrol.solvers.dense import least_norm_lstsq
from idcontrol.solvers.qp import INFINITY, DenseQP

Array = NDArray[np.float64]


@njit((IN_MATRIX, IN_VECTOR, float64), cache=True)
def least_norm_solution(A, b, rcond):
    """x (k,) minimizing ‖A x − b‖ with the least norm, A (r, k) C-contiguous; directions below ``rcond`` × the
    largest ignored (:func:`~idcontrol.solvers.dense.least_norm_lstsq`, numpy.linalg.lstsq's answer in a
    tenth of its time at these sizes)."""
    return least_norm_lstsq(A, b, rcond)


@njit((IN_MATRIX, IN_VECTOR, IN_VECTOR, float64), cache=True)
def min_gap_rate(N, v, phi, dt):
    """min over contacts of N v + φ/Δt, m/s (+inf without contacts)."""
    low = np.inf
    for i in range(N.shape[0]):
        s = phi[i] / dt
        for j in range(v.shape[0]):
            s += N[i, j] * v[j]
        low = min(low, s)
    return low


@njit((IN_MATRIX, IN_VECTOR), cache=True)
def max_abs_product(A, v):
    """max |A v| (0 for an empty A)."""
    high = 0.0
    for i in range(A.shape[0]):
        s = 0.0
        for j in range(v.shape[0]):
            s += A[i, j] * v[j]
        high = max(high, abs(s))
    return high


@dataclass
class Repair:
    """Outcome of :func:`repair_desired_velocity` (forces in N, torques in N·m)."""

    found: bool
    v_next: Array
    tau: Array
    qd_change: float  # max |v⁺_a − q̇_des|, rad/s
    message: str


def rest_correction(J_free: Array, drift: Array) -> Array:
    """The least-norm least-squares change δ of some velocities that brings contact velocities to rest.

    J_free (r, k): the contact rows' columns of the velocities that may change; drift (r,): the contact
    velocities now, m/s. Returns δ (k,) with J_free δ ≈ −drift (singular values below 1e-9 relative
    ignored), in those velocities' units.
    """
    if J_free.size == 0:  # no contact rows, or nothing free to change
        return np.zeros(J_free.shape[1])
    return least_norm_solution(np.ascontiguousarray(J_free), -drift, 1e-9)


def needs_repair(problem: ContactProblem, v_next: Array, *, no_slip: bool, tol: float = 1e-7) -> bool:
    """True when v⁺ penetrates a contact (N v⁺ < −φ/Δt) or, for no-slip models, slips."""
    p = problem
    if p.n == 0:
        return False
    if min_gap_rate(p.N, v_next, p.phi, p.dt) < -tol:
        return True
    return bool(no_slip and max(max_abs_product(p.S, v_next), max_abs_product(p.T, v_next)) > tol)


def repair_desired_velocity(
    problem: ContactProblem, f_normal: Array, f_s: Array, f_t: Array, *, no_slip: bool
) -> Repair:
    """Solve the Section 4.5 QP with the contact forces (N) held fixed."""
    p = problem
    a, u = p.actuated, p.unactuated
    contact = p.N.T @ f_normal + p.S.T @ f_s + p.T.T @ f_t
    momentum = p.M @ p.v + p.dt * (p.f_ext + contact)  # M v⁺ − Pᵀτ
    if p.nb:
        Muu = block(p.M, u, u)
        c0 = np.linalg.solve(Muu, momentum[u])
        D = -np.linalg.solve(Muu, block(p.M, u, a))
    else:
        c0 = np.zeros(0)
        D = np.zeros((0, p.nu))

    def affine(K: Array) -> tuple[Array, Array]:
        return K[:, a] + K[:, u] @ D, K[:, u] @ c0

    G_n, g_n = affine(p.N)
    C = -G_n  # non-penetration: −G_n v⁺_a ≤ g_n + φ/Δt
    upper = g_n + p.phi / p.dt
    equalities = 0
    if no_slip and p.n:  # no slip: S v⁺ = T v⁺ = 0
        A_s, b_s = affine(p.S)
        A_t, b_t = affine(p.T)
        C = np.vstack([C, A_s, A_t])
        upper = np.concatenate([upper, -b_s, -b_t])
        equalities = 2 * p.n
    lower = np.full(len(upper), -INFINITY)
    nu = p.nu
    # DAQP's own defaults (tolerance 1e-6, 10000 iterations): the repair is a one-off QP, not a per-tick one
    qp = DenseQP(primal_tol=1e-6, iter_limit=10000)
    try:
        sol = qp.solve(np.eye(nu), -p.qd_des, C if p.n else None, lower if p.n else None, upper if p.n else None,
                       equalities=equalities)  # fmt: skip
    except Exception as e:  # back-end errors become a failed repair, not a crash
        va = None
        reason = f"repair QP raised {type(e).__name__}: {e}"
    else:
        va = sol.x if sol.found else None
        reason = "repair QP infeasible"
    if va is None or not np.all(np.isfinite(va)):
        nan = np.full(p.m, np.nan)
        return Repair(False, nan, np.full(nu, np.nan), np.inf, reason)
    v_next = np.empty(p.m)
    v_next[a] = va
    v_next[u] = c0 + D @ va
    tau = (p.M[a] @ v_next - momentum[a]) / p.dt
    violation = 0.0
    if p.n:
        violation = max(0.0, -float(np.min(p.N @ v_next + p.phi / p.dt)))
        if no_slip:
            violation = max(violation, float(np.abs(p.S @ v_next).max()), float(np.abs(p.T @ v_next).max()))
    if violation > 1e-6:
        return Repair(False, v_next, tau, float(np.abs(va - p.qd_des).max()),
                      f"repair QP left a violation of {violation:.2e} m/s")  # fmt: skip
    return Repair(True, v_next, tau, float(np.abs(va - p.qd_des).max()), "desired velocity repaired")
