"""The paper's Algorithm 1 (Find-Indices): the greedy, contact-ordered choice of tangential rows S_𝒮, T_𝒯
that keeps the equality block of the no-slip MLCP non-singular."""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
from numba import njit
from numpy.typing import NDArray

from idcontrol.arrays import IN_MATRIX, float64

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


@njit((IN_MATRIX, float64), cache=True)
def find_independent_columns(X, rel_tol):
    """Algorithm 1 on whitened columns: (selected (r,), Q (d, r) orthonormal, R (r, r) upper, X[:, selected] = Q R).

    Column j is kept when its residual orthogonal to the columns kept before it
    exceeds ``rel_tol`` times its norm (greedy, left to right, Gram–Schmidt).
    """
    d, k = X.shape
    residual = X.copy()
    threshold = np.empty(k)
    for j in range(k):
        s = 0.0
        for i in range(d):
            s += X[i, j] * X[i, j]
        threshold[j] = rel_tol * max(math.sqrt(s), 2.2250738585072014e-308)
    selected = np.empty(min(d, k), dtype=np.intp)
    Q = np.zeros((d, min(d, k)))
    count = 0
    j = 0
    while j < k and count < d:
        s = 0.0
        for i in range(d):
            s += residual[i, j] * residual[i, j]
        norm = math.sqrt(s)
        if norm > threshold[j]:
            for i in range(d):
                Q[i, count] = residual[i, j] / norm
            for c in range(j + 1, k):  # remove the new direction from the later columns
                t = 0.0
                for i in range(d):
                    t += Q[i, count] * residual[i, c]
                for i in range(d):
                    residual[i, c] -= t * Q[i, count]
            selected[count] = j
            count += 1
        j += 1
    Q = Q[:, :count].copy()
    R = np.zeros((count, count))
    for a in range(count):
        for b in range(count):
            s = 0.0
            for i in range(d):
                s += Q[i, a] * X[i, selected[b]]
            R[a, b] = s
    return selected[:count].copy(), Q, R
