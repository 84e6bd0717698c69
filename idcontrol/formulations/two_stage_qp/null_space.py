"""An orthonormal basis of null(R̃) for Stage II: a Householder QR where full row rank is certified, else the SVD."""

from __future__ import annotations

import math

import numpy as np
from numba import njit, types

from idcontrol.arrays import ANY_VECTOR, IN_MATRIX, float64
from idcontrol.solvers.dense import apply_reflections, householder_step


@njit((types.Array(float64, 2, "A", readonly=True), ANY_VECTOR, float64), cache=True)
def null_basis(vt, singular, null_tol):
    """W (q, q − rank): the rows of Vᵀ past the numerical rank (σ > null_tol·max(σ₀, 1e-300)), as columns."""
    top = singular[0] if singular.shape[0] else 0.0
    threshold = null_tol * max(top, 1e-300)
    rank = 0
    for s in singular:
        if s > threshold:
            rank += 1
    return vt[rank:].T.copy()


@njit(cache=True)
def _null_space_qr(R_w, null_tol):
    """Q's last q − nb columns of R_wᵀ = Q [R; 0] (Householder), or a (0, 0) array when full rank is not certain."""
    nb, q = R_w.shape
    A = R_w.T.copy()  # (q, nb)
    V = np.zeros((q, nb))  # Householder vectors, unit norm
    for j in range(nb):
        norm = 0.0
        for i in range(j, q):
            norm += A[i, j] * A[i, j]
        norm = math.sqrt(norm)
        if norm == 0.0:
            return np.zeros((0, 0))
        householder_step(A, V, j, norm, nb)
    R_norm = 0.0  # ‖R‖_F and ‖R⁻¹‖_F (R = A[:nb], upper triangular)
    for i in range(nb):
        for c in range(i, nb):
            R_norm += A[i, c] * A[i, c]
    R_inv = np.zeros((nb, nb))
    for c in range(nb):
        R_inv[c, c] = 1.0 / A[c, c]
        for i in range(c - 1, -1, -1):
            t = 0.0
            for k in range(i + 1, c + 1):
                t += A[i, k] * R_inv[k, c]
            R_inv[i, c] = -t / A[i, i]
    inv_norm = 0.0
    for i in range(nb):
        for c in range(i, nb):
            inv_norm += R_inv[i, c] * R_inv[i, c]
    if not 1.0 / math.sqrt(inv_norm) > null_tol * math.sqrt(R_norm):
        return np.zeros((0, 0))
    W = np.zeros((q, q - nb))
    for c in range(q - nb):
        W[nb + c, c] = 1.0
    apply_reflections(V, W, True)  # W = H₀ H₁ … H_{nb−1} [0; I]
    return W


@njit((IN_MATRIX, float64), cache=True)
def null_space_basis(R_w, null_tol):
    """(q, k) orthonormal basis of null(R_w) for R_w (nb, q): right singular vectors with σ ≤ null_tol · σ_max.

    The usual case, R_w of full row rank, takes a Householder QR of R_wᵀ = Q [R; 0]: null(R_w) is then
    spanned by Q's last q − nb columns. Full rank is certified with σ_min ≥ 1/‖R⁻¹‖_F and σ_max ≤ ‖R‖_F:
    when 1/‖R⁻¹‖_F > null_tol ‖R‖_F, the SVD's tolerance would keep every singular value too, so both
    give the same subspace. Otherwise (or for q ≤ nb) the SVD decides the rank.
    """
    nb, q = R_w.shape
    if nb == 0:
        return np.eye(q)
    if q > nb:
        W = _null_space_qr(R_w, null_tol)
        if W.shape[0] == q:
            return W
    _, singular, vt = np.linalg.svd(R_w, full_matrices=True)
    return null_basis(vt, singular, null_tol)
