"""Brute-force LCP enumeration and the paper's Algorithm 3 (MINDIFF).

Every solution of LCP(q, M) is complementary: there is an index set 𝒜 with
``w_𝒜 = 0`` (z free there) and ``z = 0`` off 𝒜. Enumerating all 2ⁿ sets and
keeping the feasible ones gives every solution with a non-singular principal
block, independently of any pivoting method; it is the reference the tests
compare Lemke with, and the leaf solve of MINDIFF. The cost is exponential:
use it for small n only (n ≤ ``max_n``, default 14), never in a 1 kHz loop.
"""

from __future__ import annotations

from collections.abc import Callable
from itertools import combinations

import numpy as np
from numpy.typing import ArrayLike, NDArray

from idcontrol.errors import InputError, ShapeError
from idcontrol.solvers.lcp import LCPSolution
from idcontrol.solvers.lemke import residual_scales, validate_lcp

Array = NDArray[np.float64]


def enumerate_lcp_solutions(M: ArrayLike, q: ArrayLike, *, tol: float = 1e-9, max_n: int = 14) -> list[Array]:
    """All solutions of LCP(q, M) found by trying every complementary index set.

    For each 𝒜 ⊆ {0..n-1}: ``z_𝒜`` solves ``M_𝒜𝒜 z_𝒜 = −q_𝒜`` (minimum-norm
    least squares, kept only if the equation holds to ``tol``), ``z = 0``
    elsewhere, and the leaf is accepted when ``z ≥ −tol`` and ``w = M z + q ≥ −tol``
    (relative to :func:`~idcontrol.solvers.lemke.residual_scales`). Accepted z
    are clipped at 0 and deduplicated to ``tol``.

    Parameters
    ----------
    M : (n, n), q : (n,) the LCP data.
    tol : relative feasibility, equation and deduplication tolerance.
    max_n : largest n accepted (the work is 2ⁿ small solves).

    Returns
    -------
    list of (n,) arrays, the distinct solutions (empty if the LCP has none).
    When a principal block is singular and consistent only the minimum-norm
    point of that face is tried, so a continuum of solutions is represented by
    (some of) its minimum-norm points, not exhaustively.

    Raises
    ------
    InputError : n > max_n. ShapeError, NonFiniteError : malformed M or q.
    """
    M, q = validate_lcp(M, q)
    n = q.shape[0]
    if n > max_n:
        raise InputError(f"enumeration over 2^{n} index sets refused: n = {n} > max_n = {max_n}")
    m_scale = float(np.abs(M).max(initial=0.0))
    found: list[Array] = []
    for k in range(n + 1):
        index_sets = list(combinations(range(n), k))
        sets = np.array(index_sets, dtype=np.intp).reshape(len(index_sets), k)
        z = np.zeros((sets.shape[0], n))
        if k:
            M_aa = M[sets[:, :, None], sets[:, None, :]]  # (c, k, k)
            q_a = q[sets]  # (c, k)
            z_a = -np.einsum("cij,cj->ci", np.linalg.pinv(M_aa, rcond=1e-13), q_a)
            eq = np.abs(np.einsum("cij,cj->ci", M_aa, z_a) + q_a).max(axis=1)
            z_abs = np.abs(z_a).max(axis=1)
            w_scale = np.maximum(1.0, np.maximum(np.abs(q).max(), m_scale * np.maximum(1.0, z_abs)))
            ok = eq <= tol * w_scale
            sets, z_a, z = sets[ok], z_a[ok], z[ok]
            np.put_along_axis(z, sets, z_a, axis=1)
        w = z @ M.T + q
        z_scale = np.maximum(1.0, np.abs(z).max(axis=1, initial=0.0))
        w_scale = np.maximum(1.0, np.maximum(np.abs(q).max(initial=0.0), m_scale * z_scale))
        feasible = (z.min(axis=1, initial=0.0) >= -tol * z_scale) & (w.min(axis=1, initial=0.0) >= -tol * w_scale)
        for zc in np.maximum(z[feasible], 0.0):
            if not any(np.abs(zc - s).max(initial=0.0) <= tol * max(1.0, np.abs(s).max(initial=0.0)) for s in found):
                found.append(zc)
    return found


def mindiff(
    M: ArrayLike,
    q: ArrayLike,
    x_of_z: Callable[[Array], ArrayLike],
    x_prev: ArrayLike,
    *,
    tol: float = 1e-9,
    max_n: int = 14,
) -> tuple[LCPSolution, float]:
    """Paper's Algorithm 3 (MINDIFF), corrected: the LCP solution whose x(z) is closest to x_prev.

    Every leaf of the search is one complementary index set solved with a
    feasibility check (:func:`enumerate_lcp_solutions`); infeasible leaves have
    infinite distance. Each solution z is mapped to ``x = x_of_z(z)`` (e.g. the
    joint torques it implies) and the one minimizing ``‖x − x_prev‖₂`` is
    returned, which suppresses the torque chatter of picking an arbitrary
    solution of a non-unique LCP each tick. Exponential in n (2ⁿ leaves): for a
    few contacts and offline analysis, not real-time control.

    Parameters
    ----------
    M : (n, n), q : (n,) the LCP data.
    x_of_z : maps a solution (n,) to a vector shaped like ``x_prev``.
    x_prev : (k,) previous value of x.
    tol, max_n : see :func:`enumerate_lcp_solutions`.

    Returns
    -------
    (LCPSolution, distance)
        ``found=False`` and distance ``inf`` if the LCP has no solution;
        ``pivots`` holds the number of leaves (2ⁿ).

    Raises
    ------
    InputError : n > max_n. ShapeError : x_of_z(z) not shaped like x_prev.
    """
    M, q = validate_lcp(M, q)
    n = q.shape[0]
    x_prev = np.asarray(x_prev, dtype=float)
    best_z: Array | None = None
    best = np.inf
    for z in enumerate_lcp_solutions(M, q, tol=tol, max_n=max_n):
        x = np.asarray(x_of_z(z), dtype=float)
        if x.shape != x_prev.shape:
            raise ShapeError("x_of_z(z)", x_prev.shape, x.shape)
        dist = float(np.linalg.norm(x - x_prev))
        if dist < best:
            best_z, best = z, dist
    leaves = 2**n
    if best_z is None:
        return LCPSolution(
            np.zeros(n), q.copy(), False, leaves, [], 0.0, f"no LCP solution among {leaves} index sets"
        ), best
    w = M @ best_z + q
    _, w_scale = residual_scales(M, q, best_z)
    w[np.abs(w) <= tol * w_scale] = 0.0
    active = np.flatnonzero(best_z > 0.0).tolist()
    message = f"MINDIFF: closest of the LCP solutions over {leaves} index sets, distance {best:.3g}"
    return LCPSolution(best_z, w, True, leaves, active, 0.0, message), best
