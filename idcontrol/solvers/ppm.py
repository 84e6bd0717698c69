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
    ACTIVE_SET_CAP,
    ACTIVE_SET_SOLVED,
    ACTIVE_SET_UNBOUNDED,
    PPM_CAP,
    PPM_CHECK,
    PPM_ILL,
    PPM_RANK,
    PPM_SINGULAR,
    PPM_SOLVED,
    active_set_kernel,
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
    Warm-started from the previous free (active) set. Compiled: :func:`active_set_kernel`.
    """
    n = r.shape[0]
    if n == 0 or r.min() >= -tol:
        return LCPSolution(z=np.zeros(n), w=r.copy(), found=True, pivots=0, active=[],
                           message="trivial solution z = 0")  # fmt: skip
    cap = max_iterations if max_iterations is not None else 4 * n + 50
    warm = np.asarray(warm_active, dtype=np.intp).reshape(-1)
    z, w, status, iterations, free = active_set_kernel(np.ascontiguousarray(B, dtype=float), r, warm, tol, cap)
    return LCPSolution(z=z, w=w, found=status == ACTIVE_SET_SOLVED, pivots=iterations, active=free.tolist(),
                       message=_ACTIVE_SET_MESSAGES[status])  # fmt: skip


_ACTIVE_SET_MESSAGES = {
    ACTIVE_SET_SOLVED: "solved",
    ACTIVE_SET_UNBOUNDED: "unbounded: the LCP has no solution",
    ACTIVE_SET_CAP: "iteration cap reached",
}
