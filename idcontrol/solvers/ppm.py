"""The paper's Algorithms 1 and 2 for convex (symmetric PSD) contact LCPs.

* :func:`find_indices` (Algorithm 1): the greedy, contact-ordered choice of
  tangential rows S_𝒮, T_𝒯 that keeps the equality block of the no-slip MLCP
  non-singular.
* :func:`ppm` (Algorithm 2): modified principal pivoting method I for
  LCP(r, BᵀB), warm-started from the previous tick's non-basic set. The
  n × n matrix BᵀB is never formed: each iteration solves only the a × a
  system of the active contacts (a ≤ rank B) and one product Bᵀ(B z) that is
  linear in n.

"Non-basic" (the set ℬ̄ of the paper) means *active*: z is solved for and
w = 0 there. "Basic" means z = 0 and w is computed.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
from numpy.typing import NDArray

from idcontrol.solvers.kernels import (
    PPM_CAP,
    PPM_CHECK,
    PPM_ILL,
    PPM_RANK,
    PPM_SINGULAR,
    PPM_SOLVED,
    find_independent_columns,
    ppm_kernel,
)
from idcontrol.solvers.lcp import LCPSolution

Array = NDArray[np.float64]


@dataclass
class IndependentColumns:
    """Result of :func:`find_indices`.

    selected : indices of the accepted columns, increasing.
    basis : (d, r) orthonormal basis of their span.
    triangular : (r, r) with ``X[:, selected] = basis @ triangular`` (upper triangular).
    """

    selected: list[int]
    basis: Array
    triangular: Array


def find_indices(X: Array, rel_tol: float = 1e-8) -> IndependentColumns:
    """Algorithm 1 (Find-Indices): keep each column of X that is independent of those kept before it.

    The paper tests ``Xᵀ M⁻¹ X`` for singularity as it adds the S row then the
    T row of each contact in turn. Here the columns of ``X`` are already
    whitened (``L⁻¹ xᵢ`` with ``M = L Lᵀ``) so the same test is a Gram–Schmidt
    residual: column j is kept when its component orthogonal to the kept
    columns exceeds ``rel_tol`` times its norm. The greedy result is identical;
    the cost is O(d · k · rank) in one compiled pass.

    Parameters
    ----------
    X : (d, k) columns in the paper's order (S₁, T₁, S₂, T₂, ...).
    """
    selected, basis, triangular = find_independent_columns(np.ascontiguousarray(X, dtype=float), rel_tol)
    return IndependentColumns(selected.tolist(), basis, triangular)


_PPM_MESSAGES = {
    PPM_SOLVED: "solved",
    PPM_RANK: "active block of {a} contacts exceeds rank bound {d}",
    PPM_SINGULAR: "active block of {a} contacts is singular",
    PPM_ILL: "active block of {a} contacts is ill-conditioned",
    PPM_CHECK: "final solution failed its complementarity check",
    PPM_CAP: "pivot cap reached",
}


def ppm(
    B: Array,
    r: Array,
    warm_active: Sequence[int] = (),
    *,
    tol: float = 1e-10,
    max_pivots: int | None = None,
) -> LCPSolution:
    """Algorithm 2: solve LCP(r, BᵀB) by modified principal pivoting, warm-started.

    Each iteration factors the a × a block BₐᵀBₐ of the active contacts (a ≤ d),
    solves for their z and updates w = r + Bᵀ(Bₐ zₐ) in O(d n); the most
    negative w enters, and a negative z leaves (compiled: :func:`ppm_kernel`).

    Parameters
    ----------
    B : (d, n) factor of the LCP matrix (Q = BᵀB, symmetric PSD).
    r : (n,) LCP vector.
    warm_active : the previous solve's non-basic (active) indices, mapped to
        this problem's indexing; out-of-range and repeated entries are ignored.
    tol : absolute tolerance on w and z in the units of r.
    max_pivots : cap on iterations (default 2n + 20, as Moby's 2n plus slack).

    Returns
    -------
    LCPSolution with ``found=False`` if an active block became singular or the
    cap was hit; the caller then falls back to Lemke.
    """
    n = r.shape[0]
    if n == 0 or r.min() >= -tol:
        return LCPSolution(z=np.zeros(n), w=r.copy(), found=True, pivots=0, active=[],
                           message="trivial solution z = 0")  # fmt: skip
    cap = max_pivots if max_pivots is not None else 2 * n + 20
    warm = np.asarray(warm_active, dtype=np.intp).reshape(-1)
    z, w, status, pivots, active = ppm_kernel(np.ascontiguousarray(B, dtype=float), r, warm, tol, cap)
    message = _PPM_MESSAGES[status].format(a=len(active), d=B.shape[0])
    return LCPSolution(z=z, w=w, found=status == PPM_SOLVED, pivots=pivots, active=active.tolist(), message=message)


def active_set(
    B: Array,
    r: Array,
    warm_active: Sequence[int] = (),
    *,
    tol: float = 1e-10,
    max_iterations: int | None = None,
) -> LCPSolution:
    """Solve LCP(r, BᵀB) as the convex QP min ½‖Bz‖² + rᵀz, z ≥ 0, by a primal active-set method.

    The robust companion of :func:`ppm` for rank-deficient problems (more
    candidate contacts than free DoFs): a dependent incoming column is handled
    by moving along the null space of the free columns (where the objective is
    linear) until a bound blocks, instead of failing. Each iteration costs one
    least-squares solve on the free columns plus one O(n·d) gradient product.
    Warm-started from the previous free (active) set.
    """
    d, n = B.shape
    z = np.zeros(n)
    if n == 0 or r.min() >= -tol:
        return LCPSolution(z=z, w=r.copy(), found=True, pivots=0, active=[], message="trivial solution z = 0")
    cap = max_iterations if max_iterations is not None else 4 * n + 50
    free = [i for i in dict.fromkeys(warm_active) if 0 <= i < n]
    is_free = np.zeros(n, dtype=bool)
    is_free[free] = True
    scale = max(1.0, float(np.abs(r).max()))
    for iteration in range(1, cap + 1):
        g = B.T @ (B @ z) + r
        step = np.zeros(0)
        unbounded = False
        if free:
            BF = B[:, free]
            gF = g[free]
            step, unbounded = _free_step(BF, gF, scale)
        if step.size == 0 or np.abs(step).max() <= 1e-13 * max(1.0, np.abs(z).max()):
            w_basic = np.where(is_free, np.inf, g)
            j = int(np.argmin(w_basic))
            if w_basic[j] >= -tol * scale:
                w = g.copy()
                w[free] = np.where(np.abs(w[free]) < 1e3 * tol * scale, 0.0, w[free])
                return LCPSolution(z=z, w=w, found=True, pivots=iteration, active=list(free), message="solved")
            free.append(j)
            is_free[j] = True
            continue
        zF = z[free]
        decreasing = step < -1e-15
        ratios = np.where(decreasing, zF / np.where(decreasing, -step, 1.0), np.inf)
        k = int(np.argmin(ratios)) if ratios.size else 0
        alpha_block = ratios[k] if ratios.size else np.inf
        if unbounded and not np.isfinite(alpha_block):
            return LCPSolution(z=z, w=g, found=False, pivots=iteration, active=list(free),
                               message="unbounded: the LCP has no solution")  # fmt: skip
        alpha = alpha_block if unbounded else min(1.0, alpha_block)
        z[free] = zF + alpha * step
        if unbounded or alpha_block <= 1.0:
            blocked = free[k]
            z[blocked] = 0.0
            is_free[blocked] = False
            del free[k]
        np.maximum(z, 0.0, out=z)
    return LCPSolution(z=z, w=B.T @ (B @ z) + r, found=False, pivots=cap, active=list(free),
                       message="iteration cap reached")  # fmt: skip


def _free_step(BF: Array, gF: Array, scale: float) -> tuple[Array, bool]:
    """Newton step on the free columns, or a null-space descent direction when they are dependent.

    Returns (step, unbounded): ``unbounded`` marks a direction along which the
    objective decreases linearly (B_F step = 0).
    """
    A = BF.T @ BF
    if A.shape[0] <= BF.shape[0]:
        try:
            chol = np.linalg.cholesky(A)
        except np.linalg.LinAlgError:
            chol = None
        if chol is not None:
            diag = np.diag(chol)
            if diag.min() > 1e-6 * diag.max():
                return -np.linalg.solve(chol.T, np.linalg.solve(chol, gF)), False
    _, s, Vt = np.linalg.svd(BF, full_matrices=False)
    rank = int(np.sum(s > 1e-10 * max(s[0], 1e-300))) if s.size else 0
    V, sv = Vt[:rank].T, s[:rank]
    null_part = gF - V @ (V.T @ gF)
    if np.linalg.norm(null_part) > 1e-9 * scale:
        return -null_part, True
    return -(V / sv**2) @ (V.T @ gF), False
