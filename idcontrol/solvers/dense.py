"""Small dense factorizations for the compiled solvers and formulations (6 to 18 unknowns, a few dozen columns).

Inside ``@njit``, ``np.linalg`` calls LAPACK and ``@`` BLAS; at these sizes their copies, checks and
general-purpose paths cost more than the arithmetic. Each routine here is kept because it measured faster
than the library call at the controller's sizes (the numbers are at its definition: ns a call, inside a
compiled loop, best of 5 × 20000 calls, 2-core VM); :func:`gram` hands the larger products to BLAS.
numba's ``np.linalg`` has no Cholesky solve, triangular solve or pivoted QR: the routines that need them
(here, :mod:`idcontrol.formulations.two_stage_qp.pyramid_dual`) have no library call to switch to.
"""

from __future__ import annotations

import math

import numpy as np
from numba import njit


@njit(cache=True)
def cholesky_in_place(A):
    """Lower Cholesky factor of the SPD matrix A, overwriting A's lower triangle; False if a pivot is not > 0.

    Kept: with the copy it overwrites, 115 / 322 / 738 ns for n = 6 / 12 / 18 against 204 / 571 / 1058 ns for
    ``np.linalg.cholesky`` (which also raises instead of returning False, and numba cannot catch it cheaply).
    """
    n = A.shape[0]
    for j in range(n):
        s = A[j, j]
        for k in range(j):
            s -= A[j, k] * A[j, k]
        if not s > 0.0:
            return False
        A[j, j] = math.sqrt(s)
        for i in range(j + 1, n):
            t = A[i, j]
            for k in range(j):
                t -= A[i, k] * A[j, k]
            A[i, j] = t / A[j, j]
    return True


@njit(cache=True)
def cholesky_solve_in_place(L, y):
    """y ← (L Lᵀ)⁻¹ y for the lower Cholesky factor L of :func:`cholesky_in_place` (forward, then back).

    Kept: numba has no Cholesky solve; factor and solve take 238 / 599 / 1211 ns for n = 6 / 12 / 18 against
    600 / 1508 / 2858 ns for ``np.linalg.solve`` (LU).
    """
    n = y.shape[0]
    for i in range(n):
        s = y[i]
        for k in range(i):
            s -= L[i, k] * y[k]
        y[i] = s / L[i, i]
    for i in range(n - 1, -1, -1):
        s = y[i]
        for k in range(i + 1, n):
            s -= L[k, i] * y[k]
        y[i] = s / L[i, i]


@njit(cache=True)
def lower_inverse(L, out):
    """out ← L⁻¹ for the lower triangle of L (n, n), column by column (forward substitution on eⱼ); out's
    upper triangle is left as it is (zeros from the caller).

    Kept: 130 / 602 / 1534 ns for n = 6 / 12 / 18 against 1021 / 2437 / 4893 ns for ``np.linalg.inv`` (LU of
    a general matrix).
    """
    n = L.shape[0]
    for j in range(n):
        out[j, j] = 1.0 / L[j, j]
        for i in range(j + 1, n):
            s = 0.0
            for k in range(j, i):
                s -= L[i, k] * out[k, j]
            out[i, j] = s / L[i, i]


@njit(cache=True)
def gram_cholesky(B, rows, active, k, s=None):
    """Cholesky factor L of BₐᵀBₐ (B's first ``rows`` rows, columns ``active[:k]``), or with ``s`` (n,) of FₐᵀFₐ for
    the stacked factor F = [B; diag(s)]: s_c² added to the diagonal, F's n extra rows never formed, each entry the
    sum F's rows would give in their order (exactly: the diagonal rows add zeros elsewhere). Returns (L, factored:
    whether it exists, the smallest and largest diagonal of L: a cheap conditioning check). The Gram of a few
    gathered columns is formed by loops (see :func:`gram` for where loops win)."""
    A = np.empty((k, k))
    for a in range(k):
        for b in range(a + 1):
            t = 0.0
            for i in range(rows):
                t += B[i, active[a]] * B[i, active[b]]
            A[a, b] = t
            A[b, a] = t
    if s is not None:
        for a in range(k):
            A[a, a] += s[active[a]] * s[active[a]]
    factored = cholesky_in_place(A)
    low, high = np.inf, 0.0
    if factored:
        for a in range(k):
            low = min(low, A[a, a])
            high = max(high, A[a, a])
    return A, factored, low, high


@njit(cache=True)
def gram_by_loops(A):
    """AᵀA for A (r, c) by loops, each entry summed in row order (exactly symmetric)."""
    r, c = A.shape
    G = np.zeros((c, c))
    for i in range(c):
        for j in range(i, c):
            s = 0.0
            for k in range(r):
                s += A[k, i] * A[k, j]
            G[i, j] = s
            G[j, i] = s
    return G


@njit(cache=True)
def gram(A):
    """AᵀA for A (r, c): the symmetric (c, c) Gram matrix of A's columns.

    BLAS (``A.T @ A``, then mirrored: numba's product is not always exactly symmetric) when c > 8 or r > 32,
    loops below that, where they measured faster. Min of 60 alternating rounds, ns, loops vs BLAS: 6×6 184
    vs 238, 12×3 94 vs 218, 12×6 224 vs 312, 24×6 300 vs 375 (Stage II and R̃R̃ᵀ on a trot); 6×9 336 vs
    312, 6×12 566 vs 436, 6×20 1598 vs 772, 12×18 1489 vs 910, 48×6 674 vs 581, 6×96 27258 vs 9398.
    """
    r, c = A.shape
    if c > 8 or r > 32:
        G = A.T @ A
        for i in range(c):
            for j in range(i + 1, c):
                G[j, i] = G[i, j]
        return G
    return gram_by_loops(A)


@njit(cache=True)
def householder_step(A, V, j, norm, cols):
    """Step j of a Householder QR of A (d, ·), with norm = ‖A[j:, j]‖ > 0: V[:, j] ← the unit vector v of the
    reflection I − 2vvᵀ that maps A[j:, j] to ∓norm·e_j, applied to A's columns j … cols − 1 in place.

    Kept: numba's ``np.linalg.qr`` gives neither the full Q (Stage II's null-space basis needs its last
    columns) nor column pivoting (the dual method's face solve needs it); at Stage II's sizes these steps beat a
    full Q from ``np.linalg.qr`` and ``np.linalg.svd`` (docs/benchmarks.md, "Measured choices in the code").
    """
    d = A.shape[0]
    alpha = -norm if A[j, j] >= 0.0 else norm
    for i in range(j, d):
        V[i, j] = A[i, j]
    V[j, j] -= alpha
    vnorm = 0.0
    for i in range(j, d):
        vnorm += V[i, j] * V[i, j]
    vnorm = math.sqrt(vnorm)
    for i in range(j, d):
        V[i, j] /= vnorm
    for c in range(j, cols):
        t = 0.0
        for i in range(j, d):
            t += V[i, j] * A[i, c]
        for i in range(j, d):
            A[i, c] -= 2.0 * t * V[i, j]


@njit(cache=True)
def least_norm_lstsq(A, b, rcond):
    """x (k,) minimizing ‖A x − b‖ with the least ‖x‖, for A (r, k), b (r,), by a complete orthogonal decomposition.

    A P = Q [R₁₁ R₁₂; 0 R₂₂] by Householder QR with column pivoting (the column of largest remaining norm first);
    the numerical rank p counts the pivots |R_jj| > ``rcond`` · |R₀₀|, then drops trailing pivots while R₁₁'s
    smallest singular value (inverse iteration) is not above ``rcond`` · σ_max (power iteration): the diagonal alone
    misses ill-conditioned blocks such as Kahan's matrix (numpy's gelsd decides by singular values; the two agree
    whenever the rank is not ambiguous at ``rcond``, and the check costs O(p k) when it changes nothing); then
    [R₁₁ R₁₂] = [T 0] Z by Householder steps from the right, and x = P Zᵀ [T⁻¹ (Qᵀb)₁; 0].

    Kept: at these sizes (a dozen rows and columns) numba's ``np.linalg.lstsq`` (gelsd with its workspace
    queries and copies) and LAPACK's dgelsy called from compiled code cost several times more than the
    arithmetic (docs/benchmarks.md, "Measured choices in the code").
    """
    r, k = A.shape
    x = np.zeros(k)
    steps = min(r, k)
    if steps == 0:
        return x
    R = A.copy()
    y = b.copy()
    perm = np.arange(k)
    top = 0.0
    rank = 0
    for j in range(steps):
        best, pivot = -1.0, j  # the remaining column of largest norm
        for c in range(j, k):
            s = 0.0
            for i in range(j, r):
                s += R[i, c] * R[i, c]
            if s > best:
                best, pivot = s, c
        if pivot != j:
            for i in range(r):
                R[i, j], R[i, pivot] = R[i, pivot], R[i, j]
            perm[j], perm[pivot] = perm[pivot], perm[j]
        norm = math.sqrt(best)
        if j == 0:
            top = norm
        if not norm > rcond * top:
            break
        alpha = -norm if R[j, j] >= 0.0 else norm  # Householder: R[j:, j] → alpha e_j
        v0 = R[j, j] - alpha
        vnorm2 = v0 * v0 + best - R[j, j] * R[j, j]
        if vnorm2 > 0.0:
            scale = 2.0 / vnorm2
            for c in range(j + 1, k):
                t = v0 * R[j, c]
                for i in range(j + 1, r):
                    t += R[i, j] * R[i, c]
                t *= scale
                R[j, c] -= t * v0
                for i in range(j + 1, r):
                    R[i, c] -= t * R[i, j]
            t = v0 * y[j]
            for i in range(j + 1, r):
                t += R[i, j] * y[i]
            t *= scale
            y[j] -= t * v0
            for i in range(j + 1, r):
                y[i] -= t * R[i, j]
        R[j, j] = alpha
        rank = j + 1
    # the diagonal test can miss an ill-conditioned R₁₁ (pivoted QR is not always rank-revealing: Kahan's
    # matrix): drop trailing pivots while R₁₁'s smallest singular value is not above rcond · σ_max, as gelsd
    if rank > 1:
        threshold = rcond * max(top, _largest_singular_value(R, rank, k))
        while rank > 0 and not _smallest_singular_value(R, rank) > threshold:
            rank -= 1
    if rank == 0:
        return x
    free = k - rank  # columns rank … k − 1 of [R₁₁ R₁₂], folded into T from the right (Householder steps)
    W = np.zeros((rank, free + 1))  # row i: the step's vector on columns (i, rank, …, k − 1)
    for i in range(rank - 1, -1, -1):
        if free == 0:
            break
        s = R[i, i] * R[i, i]
        for c in range(rank, k):
            s += R[i, c] * R[i, c]
        beta = -math.sqrt(s) if R[i, i] >= 0.0 else math.sqrt(s)
        W[i, 0] = R[i, i] - beta
        for c in range(free):
            W[i, c + 1] = R[i, rank + c]
        wnorm2 = s - R[i, i] * R[i, i] + W[i, 0] * W[i, 0]
        if wnorm2 > 0.0:
            scale = 2.0 / wnorm2
            for row in range(i):  # rows above i (row i becomes beta e_i)
                t = R[row, i] * W[i, 0]
                for c in range(free):
                    t += R[row, rank + c] * W[i, c + 1]
                t *= scale
                R[row, i] -= t * W[i, 0]
                for c in range(free):
                    R[row, rank + c] -= t * W[i, c + 1]
            W[i] *= math.sqrt(scale)  # stored with ‖w‖² = 2, so H = I − w wᵀ
        else:
            W[i] = 0.0
        R[i, i] = beta
    z = np.zeros(k)  # T z₁ = (Qᵀb)₁, z₂ = 0
    for i in range(rank - 1, -1, -1):
        s = y[i]
        for c in range(i + 1, rank):
            s -= R[i, c] * z[c]
        z[i] = s / R[i, i]
    for i in range(rank if free else 0):  # z ← H_{p−1} ⋯ H₀ z (each H_i on entries i, rank, …, k − 1)
        t = W[i, 0] * z[i]
        for c in range(free):
            t += W[i, c + 1] * z[rank + c]
        z[i] -= t * W[i, 0]
        for c in range(free):
            z[rank + c] -= t * W[i, c + 1]
    for c in range(k):
        x[perm[c]] = z[c]
    return x


@njit(cache=True)
def _largest_singular_value(R, p, k):
    """An estimate (from below, within a few %) of the largest singular value of the rows R[:p, :k] (upper
    trapezoidal): four steps of power iteration on RᵀR from the all-ones vector."""
    x = np.ones(k)
    w = np.empty(p)
    estimate = 0.0
    for _ in range(4):
        norm = math.sqrt(np.dot(x, x))
        if not norm > 0.0:
            return 0.0
        for i in range(p):  # w = R x / ‖x‖
            s = 0.0
            for c in range(i, k):
                s += R[i, c] * x[c]
            w[i] = s / norm
        estimate = math.sqrt(np.dot(w, w))  # ‖R x‖ / ‖x‖ ≤ σ_max
        for c in range(k):  # x = Rᵀ w
            s = 0.0
            for i in range(min(c + 1, p)):
                s += R[i, c] * w[i]
            x[c] = s
    return estimate


@njit(cache=True)
def _smallest_singular_value(R, p):
    """An estimate (from above, within a few % once the gap to the next is a decade) of the smallest singular value
    of the upper-triangular R[:p, :p], nonzero diagonal: three steps of inverse iteration on RᵀR, O(p²) each."""
    x = np.empty(p)
    for i in range(p):
        x[i] = (1.0 + i / p) * (1.0 if i % 2 == 0 else -1.0)
    L = R[:p, :p].T  # RᵀR = L Lᵀ: a Cholesky factor
    growth = 0.0
    for _ in range(3):
        x /= math.sqrt(np.dot(x, x))
        cholesky_solve_in_place(L, x)
        growth = math.sqrt(np.dot(x, x))  # ‖(RᵀR)⁻¹ x‖ for a unit x: at most 1 / σ_min²
        if not 0.0 < growth < math.inf:  # singular, or not finite (an overflowed R: 0 from inf entries)
            return 0.0
    return 1.0 / math.sqrt(growth)


@njit(cache=True)
def apply_reflections(V, X, reverse):
    """X ← H_{k−1}⋯H₀ X (reverse: H₀⋯H_{k−1} X), H_j = I − 2 v_j v_jᵀ with V's unit columns v_j; X (d, c)."""
    d, k = V.shape
    for jj in range(k):
        j = k - 1 - jj if reverse else jj
        for c in range(X.shape[1]):
            t = 0.0
            for i in range(j, d):
                t += V[i, j] * X[i, c]
            if t != 0.0:
                for i in range(j, d):
                    X[i, c] -= 2.0 * t * V[i, j]
