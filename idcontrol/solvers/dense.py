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
def gram_cholesky(B, rows, active, k):
    """Cholesky factor L of BₐᵀBₐ (B's first ``rows`` rows, columns ``active[:k]``), whether it exists, and the
    smallest and largest diagonal of L (a cheap conditioning check). Returns (L, factored, low, high).
    The Gram of k ≤ 6 gathered columns is formed by loops (see :func:`gram` for where loops win)."""
    A = np.empty((k, k))
    for a in range(k):
        for b in range(a + 1):
            s = 0.0
            for i in range(rows):
                s += B[i, active[a]] * B[i, active[b]]
            A[a, b] = s
            A[b, a] = s
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
    columns) nor column pivoting (the dual method's face solve needs it). The null-space basis built from these
    steps takes 1.2 / 2.0 / 20.7 µs for R̃ 6×9 / 6×12 / 12×30, against 4.0 / 5.8 / 25.0 µs for a full Q from
    ``np.linalg.qr([R̃ᵀ I])`` and 10.0 / 11.8 / 38.5 µs for ``np.linalg.svd`` (at 6×96, 32 contacts, the SVD
    wins, 93 against 128 µs, but there the dual method answers instead).
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
