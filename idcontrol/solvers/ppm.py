"""The paper's Algorithm 2 and an active-set companion, for convex (symmetric PSD) LCPs LCP(r, BᵀB).

* :func:`ppm` (Algorithm 2): modified principal pivoting method I for
  LCP(r, BᵀB), warm-started from the previous tick's non-basic set. The
  n × n matrix BᵀB is never formed: each iteration solves only the a × a
  system of the active contacts (a ≤ rank B) and one product Bᵀ(B z) that is
  linear in n.
* :func:`active_set`: a primal active-set method on the same problem as a convex QP, for the
  rank-deficient problems where Algorithm 2 stalls. (DAQP, the QP dependency, solves the same QP about as
  fast, but where BᵀB is singular it returns another point of the solution set: the results would change;
  docs/benchmarks.md, "Measured choices in the code".)

"Non-basic" (the set ℬ̄ of the paper) means *active*: z is solved for and
w = 0 there. "Basic" means z = 0 and w is computed.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np
from numba import njit
from numpy.typing import NDArray

from idcontrol.arrays import IN_INDICES, IN_MATRIX, IN_VECTOR, float64, intp
from idcontrol.solvers.dense import cholesky_in_place, cholesky_solve_in_place, gram_cholesky
from idcontrol.solvers.lcp import LCPSolution
from idcontrol.validation import all_finite

Array = NDArray[np.float64]


# ---------------------------------------------------------------------------------------------------------------------
# the compiled iterations


#: :func:`ppm_kernel` status codes
PPM_SOLVED, PPM_RANK, PPM_SINGULAR, PPM_ILL, PPM_CHECK, PPM_CAP = 0, 1, 2, 3, 4, 5


@njit(cache=True)
def _warm_set(warm, n, capacity):
    """A starting index set from a warm start: (membership mask (n,), indices (capacity,), count), keeping the
    first occurrence of each index of ``warm`` in 0 … n − 1 and ignoring the rest."""
    member = np.zeros(n, dtype=np.bool_)
    indices = np.empty(capacity, dtype=np.intp)
    size = 0
    for i in warm:
        if 0 <= i < n and not member[i]:
            member[i] = True
            indices[size] = i
            size += 1
    return member, indices, size


@njit(cache=True)
def stacked_rows(B, s):
    """The rows of F = [B; diag(s)] that are not zero: B's and one per s_c ≠ 0 (a bound on the rank of FᵀF)."""
    rows = B.shape[0]
    for c in range(s.shape[0]):
        if s[c] != 0.0:
            rows += 1
    return rows


@njit(cache=True)
def stack_diagonal(B, s):
    """F = [B; diag(s)] (:func:`stacked_rows`, n) with the zero rows of diag(s) left out: FᵀF = BᵀB + diag(s)², for
    the solvers that need F formed (the active-set method, Lemke's FᵀF)."""
    rows, n = B.shape
    F = np.zeros((stacked_rows(B, s), n))
    F[:rows] = B
    row = rows
    for c in range(n):
        if s[c] != 0.0:
            F[row, c] = s[c]
            row += 1
    return F


@njit((IN_MATRIX, IN_VECTOR, IN_VECTOR, IN_INDICES, float64, intp), cache=True)
def ppm_kernel(B, s, r, warm, tol, cap):
    """Algorithm 2 on LCP(r, FᵀF) for the stacked factor F = [B; diag(s)] (B (d, n), s (n,) ≥ 0: BᵀB + diag(s)²,
    a Tikhonov term), warm-started from the active indices ``warm`` (see ``solvers.ppm.ppm``).

    F's diagonal rows are never formed: each iteration costs O(d k² + d n) for k active contacts, not
    O((d + n) k²); the arithmetic is F's, in F's row order, so the answer is bit for bit the one of the stacked F
    (with its zero rows dropped). Returns (z (n,), w (n,), status (a ``PPM_*`` code), pivots, active indices in the
    order held). Assumes n > 0 and min r < −tol (the caller handles the trivial solution).
    """
    d, n = B.shape
    rank_bound = stacked_rows(B, s)
    z = np.zeros(n)
    in_active, active, size = _warm_set(warm, n, n + 1)
    if size == 0:
        best = 0
        for i in range(n):
            if r[i] < r[best]:
                best = i
        active[0] = best
        in_active[best] = True
        size = 1
    scale = 1.0
    for i in range(n):
        scale = max(scale, abs(r[i]))
    w = r.copy()
    Bz = np.empty(d)
    for pivots in range(1, cap + 1):
        if size > rank_bound:
            return z, r.copy(), PPM_RANK, pivots, active[:size].copy()
        A, factored, low, high = gram_cholesky(B, d, active, size, s)
        if not factored:
            return z, r.copy(), PPM_SINGULAR, pivots, active[:size].copy()
        if low < 1e-6 * max(high, 1e-300):  # condition number of BₐᵀBₐ above ~1e12
            return z, r.copy(), PPM_ILL, pivots, active[:size].copy()
        za = np.empty(size)  # z_a = −(L Lᵀ)⁻¹ r_a
        for a in range(size):
            za[a] = -r[active[a]]
        cholesky_solve_in_place(A, za)
        for i in range(d):
            t = 0.0
            for a in range(size):
                t += B[i, active[a]] * za[a]
            Bz[i] = t
        i_min, w_min = 0, np.inf  # most negative w among the basic (inactive) contacts (z_c = 0: no s term)
        for c in range(n):
            if not in_active[c]:
                t = r[c]
                for i in range(d):
                    t += B[i, c] * Bz[i]
                if t < w_min:
                    i_min, w_min = c, t
        j_min = 0
        for a in range(1, size):
            if za[a] < za[j_min]:
                j_min = a
        if w_min >= -tol * scale:
            if za[j_min] < -tol * scale:
                in_active[active[j_min]] = False
                for a in range(j_min, size - 1):
                    active[a] = active[a + 1]
                size -= 1
                continue
            for a in range(size):
                z[active[a]] = max(za[a], 0.0)
            for i in range(d):
                t = 0.0
                for a in range(size):
                    t += B[i, active[a]] * z[active[a]]
                Bz[i] = t
            z_max = 1.0
            for c in range(n):
                z_max = max(z_max, z[c])
            bound = 1e3 * tol * scale
            bad = False
            for c in range(n):
                t = r[c]
                for i in range(d):
                    t += B[i, c] * Bz[i]
                t += s[c] * (s[c] * z[c])  # F's diagonal row of c: (F z)_row = s_c z_c
                if in_active[c] and abs(t) < bound:
                    t = 0.0
                w[c] = t
                if t < -bound or abs(z[c] * t) > bound * z_max:
                    bad = True
            # a numerically zero block (columns of norm ~1e-155) passes the relative conditioning test and
            # puts inf in z, which every comparison above lets through
            bad = bad or not (all_finite(z) and all_finite(w))
            return z, w, PPM_CHECK if bad else PPM_SOLVED, pivots, active[:size].copy()
        drop = active[j_min] if za[j_min] < -tol * scale else -1
        active[size] = i_min
        size += 1
        in_active[i_min] = True
        if drop >= 0:
            for a in range(j_min, size - 1):
                active[a] = active[a + 1]
            size -= 1
            in_active[drop] = False
    return z, r.copy(), PPM_CAP, cap, active[:size].copy()


@njit(cache=True)
def _free_step(BF, gF, scale):
    """Newton step on the free columns BF (d, f), or a null-space descent direction when they are dependent.

    Returns (step (f,), unbounded): ``unbounded`` marks a direction along which the objective decreases
    linearly (BF step = 0).
    """
    d, f = BF.shape
    if f <= d:
        A = BF.T @ BF
        if cholesky_in_place(A):
            low, high = np.inf, 0.0
            for i in range(f):
                low = min(low, A[i, i])
                high = max(high, A[i, i])
            if low > 1e-6 * high:
                step = gF.copy()  # step = −(L Lᵀ)⁻¹ gF
                cholesky_solve_in_place(A, step)
                return -step, False
    if d == 0:  # no rows: the objective is linear in every direction
        sv, Vt = np.zeros(0), np.zeros((0, f))
    else:
        _, sv, Vt = np.linalg.svd(BF, full_matrices=False)
    rank = 0
    top = max(sv[0], 1e-300) if sv.shape[0] else 1e-300
    for s in sv:
        if s > 1e-10 * top:
            rank += 1
    coef = np.empty(rank)  # Vᵀ gF
    for j in range(rank):
        s = 0.0
        for i in range(f):
            s += Vt[j, i] * gF[i]
        coef[j] = s
    null_part = gF.copy()
    for i in range(f):
        for j in range(rank):
            null_part[i] -= Vt[j, i] * coef[j]
    if math.sqrt(np.sum(null_part * null_part)) > 1e-9 * scale:
        return -null_part, True
    step = np.zeros(f)
    for i in range(f):
        for j in range(rank):
            step[i] -= Vt[j, i] * coef[j] / (sv[j] * sv[j])
    return step, False


#: :func:`active_set_kernel` status codes
ACTIVE_SET_SOLVED, ACTIVE_SET_UNBOUNDED, ACTIVE_SET_CAP = 0, 1, 2


@njit((IN_MATRIX, IN_VECTOR, IN_INDICES, float64, intp), cache=True)
def active_set_kernel(B, r, warm, tol, cap):
    """Primal active-set method on min ½‖Bz‖² + rᵀz, z ≥ 0 (see ``solvers.ppm.active_set``).

    Returns (z (n,), w (n,), status (an ``ACTIVE_SET_*`` code), iterations, free indices in the order held).
    Assumes n > 0 and min r < −tol.
    """
    d, n = B.shape
    z = np.zeros(n)
    is_free, free, size = _warm_set(warm, n, n)
    scale = 1.0
    for i in range(n):
        scale = max(scale, abs(r[i]))
    for iteration in range(1, cap + 1):
        g = B.T @ (B @ z) + r
        step = np.zeros(0)
        unbounded = False
        if size:
            BF = np.empty((d, size))
            gF = np.empty(size)
            for k in range(size):
                BF[:, k] = B[:, free[k]]
                gF[k] = g[free[k]]
            step, unbounded = _free_step(BF, gF, scale)
            if not all_finite(step):  # a numerically zero block: z would leave every bound, as if unbounded
                return z, g, ACTIVE_SET_UNBOUNDED, iteration, free[:size].copy()
        step_max = 0.0
        for s in step:
            step_max = max(step_max, abs(s))
        z_max = 1.0
        for s in z:
            z_max = max(z_max, abs(s))
        if step.shape[0] == 0 or step_max <= 1e-13 * z_max:
            j, w_min = 0, np.inf
            for c in range(n):
                if not is_free[c] and g[c] < w_min:
                    j, w_min = c, g[c]
            if w_min >= -tol * scale:
                for k in range(size):
                    if abs(g[free[k]]) < 1e3 * tol * scale:
                        g[free[k]] = 0.0
                return z, g, ACTIVE_SET_SOLVED, iteration, free[:size].copy()
            free[size] = j
            size += 1
            is_free[j] = True
            continue
        k_block, alpha_block = 0, np.inf
        for k in range(size):
            if step[k] < -1e-15:
                ratio = z[free[k]] / -step[k]
                if ratio < alpha_block:
                    k_block, alpha_block = k, ratio
        if unbounded and not math.isfinite(alpha_block):
            return z, g, ACTIVE_SET_UNBOUNDED, iteration, free[:size].copy()
        alpha = alpha_block if unbounded else min(1.0, alpha_block)
        for k in range(size):
            z[free[k]] += alpha * step[k]
        if unbounded or alpha_block <= 1.0:
            blocked = free[k_block]
            z[blocked] = 0.0
            is_free[blocked] = False
            for k in range(k_block, size - 1):
                free[k] = free[k + 1]
            size -= 1
        for c in range(n):
            z[c] = max(z[c], 0.0)
    return z, B.T @ (B @ z) + r, ACTIVE_SET_CAP, cap, free[:size].copy()


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
    diagonal: Array | None = None,
) -> LCPSolution:
    """Algorithm 2: solve LCP(r, BᵀB) (or LCP(r, BᵀB + diag(s)²)) by modified principal pivoting, warm-started.

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
    diagonal : (n,) s ≥ 0, or None (zeros): the LCP matrix is BᵀB + diag(s)², the factor [B; diag(s)] without its
        n rows formed (a Tikhonov term on the variables with s > 0).

    Returns
    -------
    LCPSolution with ``found=False`` if an active block became singular or the
    cap was hit; the caller then falls back to Lemke.
    """
    n = r.shape[0]
    if n == 0 or r.min() >= -tol:
        return LCPSolution(z=np.zeros(n), w=r.copy(), found=True, pivots=0, active=[], message="trivial solution z = 0")
    cap = max_pivots if max_pivots is not None else 2 * n + 20
    warm = np.asarray(warm_active, dtype=np.intp).reshape(-1)
    B, r = np.ascontiguousarray(B, dtype=float), np.ascontiguousarray(r, dtype=float)
    s = np.zeros(n) if diagonal is None else np.ascontiguousarray(diagonal, dtype=float).reshape(n)
    z, w, status, pivots, active = ppm_kernel(B, s, r, warm, tol, cap)
    message = _PPM_MESSAGES[status].format(a=len(active), d=stacked_rows(B, s))
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
        return LCPSolution(z=np.zeros(n), w=r.copy(), found=True, pivots=0, active=[], message="trivial solution z = 0")
    cap = max_iterations if max_iterations is not None else 4 * n + 50
    warm = np.asarray(warm_active, dtype=np.intp).reshape(-1)
    B, r = np.ascontiguousarray(B, dtype=float), np.ascontiguousarray(r, dtype=float)
    z, w, status, iterations, free = active_set_kernel(B, r, warm, tol, cap)
    return LCPSolution(
        z=z,
        w=w,
        found=status == ACTIVE_SET_SOLVED,
        pivots=iterations,
        active=free.tolist(),
        message=_ACTIVE_SET_MESSAGES[status],
    )


_ACTIVE_SET_MESSAGES = {
    ACTIVE_SET_SOLVED: "solved",
    ACTIVE_SET_UNBOUNDED: "unbounded: the LCP has no solution",
    ACTIVE_SET_CAP: "iteration cap reached",
}
