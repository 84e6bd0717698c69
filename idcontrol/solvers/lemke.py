"""Lemke's complementary pivoting algorithm for LCP(q, M), with a regularized fallback.

LCP(q, M): find z, w in R^n with ``w = M z + q``, ``z >= 0``, ``w >= 0``, ``zᵀw = 0``.

Lemke augments the problem with an artificial variable z₀ and a covering
vector d > 0, ``w = M z + q + d z₀``, starts from the almost-complementary
basis in which z₀ is just large enough to make w feasible, and then pivots
complementarily (the complement of the variable that left enters next) until
z₀ leaves the basis (a solution) or an entering column has no positive entry
(secondary ray: no solution is reachable; for copositive-plus M the LCP is
then infeasible). Ties in the minimum-ratio test are broken
lexicographically on the rows of the current basis inverse, which keeps every
tableau row lexicographically positive and so excludes cycling on degenerate
problems.

The result is never trusted as produced: ``z`` is taken from the final basis,
``w = M z + q`` is recomputed from the original data, and ``found=True`` is
only returned when :func:`~idcontrol.solvers.lcp.lcp_residuals` confirms it.
"""

from __future__ import annotations

from typing import Any

import numpy as np
from numba import njit
from numpy.typing import ArrayLike, NDArray

from idcontrol.arrays import INDICES, MATRIX, float64, intp
from idcontrol.errors import InputError, NonFiniteError, ShapeError
from idcontrol.solvers.lcp import LCPSolution, lcp_residuals

Array = NDArray[np.float64]

ACCEPT_TOL = 1e-9
"""Relative residual a returned solution must meet to be flagged ``found``."""

_EPS = float(np.finfo(float).eps)


def validate_lcp(M: ArrayLike, q: ArrayLike) -> tuple[Array, Array]:
    """Return float copies of (M, q) after checking shapes and finiteness.

    Raises
    ------
    ShapeError : q is not 1-D or M is not (n, n) with n = len(q).
    NonFiniteError : M or q holds NaN or infinity.
    """
    q = np.array(q, dtype=float)
    M = np.array(M, dtype=float)
    if q.ndim != 1:
        raise ShapeError("q", (q.size,), q.shape)
    n = q.shape[0]
    if M.shape != (n, n):
        raise ShapeError("M", (n, n), M.shape)
    for name, a in (("M", M), ("q", q)):
        bad = ~np.isfinite(a)
        if bad.any():
            raise NonFiniteError(name, np.flatnonzero(bad).tolist())
    return M, q


def residual_scales(M: Array, q: Array, z: Array) -> tuple[float, float]:
    """Scales (z_scale, w_scale) against which LCP residuals are judged.

    ``z_scale = max(1, |z|∞)``; ``w_scale = max(1, |q|∞, |M|max · z_scale)``,
    the size of the terms in ``M z + q``.
    """
    z_scale = max(1.0, float(np.abs(z).max(initial=0.0)))
    w_scale = max(1.0, float(np.abs(q).max(initial=0.0)), float(np.abs(M).max(initial=0.0)) * z_scale)
    return z_scale, w_scale


def polish(M: Array, q: Array, z: Array, clean_tol: float) -> tuple[Array, Array, float]:
    """Clip z at 0, recompute ``w = M z + q`` and zero tiny |w|; return (z, w, relative residual).

    The relative residual is ``lcp_residuals(...)`` with the w-terms divided by
    ``w_scale`` and complementarity by ``z_scale · w_scale`` (see
    :func:`residual_scales`); it is comparable with :data:`ACCEPT_TOL`. A non-finite z or w gives inf.
    """
    z = np.maximum(z, 0.0)
    w = M @ z + q
    if not (np.isfinite(z).all() and np.isfinite(w).all()):
        return z, w, np.inf  # a numerically zero M's pivots divide by ~0: no residual scale makes that a solution
    z_scale, w_scale = residual_scales(M, q, z)
    w[np.abs(w) <= clean_tol * w_scale] = 0.0
    res = lcp_residuals(M, q, z, w)
    rel = max(res.w_negativity / w_scale, res.equation / w_scale, res.complementarity / (z_scale * w_scale))
    return z, w, rel


def _lexmin_row(T: Array, rows: NDArray[np.intp], divisor: Array, n: int, tie_tol: float) -> int:
    """Lexicographic minimum-ratio test: the row of ``rows`` minimizing ``[rhs, B⁻¹] / divisor``.

    Parameters
    ----------
    T : (n, 2n + 2) tableau ``B⁻¹ [I, −M, −d, q]``; columns 0..n-1 hold ``B⁻¹``, the last one ``B⁻¹ q``.
    rows : (k,) candidate rows, ``divisor[rows] > 0``.
    divisor : (n,) pivot column (entries of ``rows`` used only).
    """
    for j in (-1, *range(n)):  # right-hand side first, then the columns of B⁻¹ in order
        ratios = T[rows, j] / divisor[rows]
        low = ratios.min()
        rows = rows[ratios <= low + tie_tol * max(1.0, abs(low))]
        if rows.size == 1:
            break
    return int(rows[0])


def lemke(
    M: ArrayLike,
    q: ArrayLike,
    *,
    max_pivots: int | None = None,
    tol: float = 1e-12,
    cover: ArrayLike | None = None,
) -> LCPSolution:
    """Solve LCP(q, M) by Lemke's method with the lexicographic minimum-ratio test.

    Parameters
    ----------
    M : (n, n) matrix (copositive-plus guarantees: solution found or LCP infeasible).
    q : (n,) vector.
    max_pivots : pivot cap, the initial z₀ pivot included; default ``50 n + 100``.
    tol : zero tolerance for pivot elements (relative to the column), ratio ties
        and cleaning of tiny |w| in the returned pair. The pivoting runs on
        ``LCP(q / |q|∞, M / |M|max)``, so results do not depend on the units.
    cover : (n,) covering vector d > 0; default ones.

    Returns
    -------
    LCPSolution
        ``found=True`` only if the returned pair passes :func:`lcp_residuals`
        with ``w``-terms below ``ACCEPT_TOL · max(1, |q|∞, |M|max·max(1, |z|∞))``
        and complementarity below that times ``max(1, |z|∞)``. Secondary-ray
        termination, the pivot cap and loss of accuracy give ``found=False``
        with the reason in ``message``; none of them raises.

    Raises
    ------
    ShapeError, NonFiniteError : malformed M, q or cover.
    InputError : cover not strictly positive.
    """
    M, q = validate_lcp(M, q)
    return _lemke(M, q, max_pivots=max_pivots, tol=tol, cover=cover)


def _lemke(
    M: Array, q: Array, *, max_pivots: int | None = None, tol: float = 1e-12, cover: ArrayLike | None = None
) -> LCPSolution:
    """:func:`lemke` on data already checked by :func:`validate_lcp`."""
    n = q.shape[0]
    if cover is None:
        d = np.ones(n)
    else:
        d = np.array(cover, dtype=float)
        if d.shape != (n,):
            raise ShapeError("cover", (n,), d.shape)
        if not np.isfinite(d).all():
            raise NonFiniteError("cover", np.flatnonzero(~np.isfinite(d)).tolist())
        if (d <= 0).any():
            raise InputError("cover must be strictly positive")
    if n == 0:
        return LCPSolution(np.zeros(0), np.zeros(0), True, 0, [], 0.0, "empty LCP")
    if q.min() >= 0.0:
        return LCPSolution(np.zeros(n), q.copy(), True, 0, [], 0.0, "q >= 0: trivial solution z = 0")
    cap = 50 * n + 100 if max_pivots is None else int(max_pivots)

    # pivot on LCP(q / |q|∞, M / |M|max), whose solutions are z · |M|max / |q|∞: tolerances become scale-free
    m_scale = float(np.abs(M).max()) or 1.0
    q_scale = float(np.abs(q).max())  # > 0: q has a negative entry
    z0, rhs = 2 * n, 2 * n + 1  # variables: w_i -> i, z_i -> n + i, z₀ -> 2n; column 2n + 1 is B⁻¹q
    T = np.zeros((n, 2 * n + 2))
    T[:, :n] = np.eye(n)
    T[:, n : 2 * n] = M / -m_scale
    T[:, z0] = -d
    T[:, rhs] = q / q_scale
    basis = np.arange(n)  # basic variable held by each row
    tie_tol = max(tol, 4.0 * _EPS)

    # first pivot: z₀ rises to max_i(−q_i / d_i); the most violated row leaves (lexicographically)
    z0_row = _lexmin_row(T, np.arange(n), d, n, tie_tol)
    leaving = lemke_pivot(T, basis, z0_row, z0)
    pivots = 1
    message = ""
    while True:
        if pivots >= cap:
            message = f"pivot cap of {cap} reached"
            break
        entering = leaving + n if leaving < n else leaving - n
        # minimum-ratio test over rows with a positive pivot; z₀ leaves whenever it ties for the minimum
        # (that basis is a solution); other ties are broken by the lexicographic rule
        leaving, tied = lemke_step(T, basis, entering, tol, tie_tol, z0_row)
        if leaving == -2:
            message = f"secondary ray after {pivots} pivots (entering {_name(entering, n)}): no solution reached"
            break
        if leaving == -1:
            leaving = lemke_pivot(T, basis, _lexmin_row(T, tied, T[:, entering], n, tie_tol), entering)
        pivots += 1
        if leaving == z0:
            break
    if leaving != z0:
        return LCPSolution(np.zeros(n), q.copy(), False, pivots, [], 0.0, message)

    # z from re-solving the terminal basis with the original data, [I, −M]_B x_B = q ...
    in_z = basis >= n  # z₀ is non-basic now
    z_index = basis[in_z] - n
    best: tuple[Array, Array, float] | None = None
    A_B = np.zeros((n, n))
    w_rows = np.flatnonzero(~in_z)
    A_B[basis[w_rows], w_rows] = 1.0
    A_B[:, in_z] = -M[:, z_index]
    try:
        x_B = np.linalg.solve(A_B, q)
    except np.linalg.LinAlgError:
        x_B = None
    if x_B is not None and np.isfinite(x_B).all():
        z = np.zeros(n)
        z[z_index] = x_B[in_z]
        best = polish(M, q, z, tol)
    # ... or read off the tableau, whichever satisfies the LCP better
    if best is None or best[2] > 1e-3 * ACCEPT_TOL:
        z = np.zeros(n)
        z[z_index] = T[in_z, rhs] * (q_scale / m_scale)
        from_tableau = polish(M, q, z, tol)
        if best is None or from_tableau[2] < best[2]:
            best = from_tableau
    z, w, rel = best
    active = np.flatnonzero(z > 0.0).tolist()
    if rel > ACCEPT_TOL:
        message = f"terminal basis after {pivots} pivots fails the residual check ({rel:.1e} relative)"
        return LCPSolution(z, w, False, pivots, active, 0.0, message)
    return LCPSolution(z, w, True, pivots, active, 0.0, f"solved in {pivots} pivots")


def _name(var: int, n: int) -> str:
    """Human-readable name of tableau variable ``var``."""
    if var < n:
        return f"w[{var}]"
    if var < 2 * n:
        return f"z[{var - n}]"
    return "z0"


def lemke_regularized(
    M: ArrayLike,
    q: ArrayLike,
    *,
    eps0: float = 1e-12,
    growth: float = 100.0,
    max_eps: float = 1e-2,
    original_tol: float | None = 1e-6,
    **kw: Any,
) -> LCPSolution:
    """Lemke with Tikhonov fallback: try LCP(q, M), then LCP(q, M + εI) for ε = eps0, eps0·growth, ... ≤ max_eps.

    This is the fallback of the paper's authors' code. A regularized solution
    solves the *regularized* LCP: its ``w = (M + εI) z + q`` and, against the
    original M, ``M z + q`` differs from ``w`` by ``ε z`` (residuals O(ε |z|∞)).

    When LCP(q, M) has no solution, LCP(q, M + εI) may still have one with
    ``|z| ~ 1/ε`` (e.g. M = diag(1, 0), q = −1 gives z₂ = 1/ε), so O(ε |z|) is
    O(1). ``original_tol`` guards against returning such a point: a regularized
    solution is accepted only if ``lcp_residuals(M, q, z).worst`` against the
    *original* M is at most ``original_tol · max(1, |M|max, |q|∞)`` (a scale
    that, unlike the one of :func:`lemke`'s own check, does not grow with |z|).

    Parameters
    ----------
    M : (n, n), q : (n,) as in :func:`lemke`.
    eps0, growth, max_eps : the geometric schedule of ε.
    original_tol : bound on the residual w.r.t. the original M (see above); None accepts any regularized solution.
    **kw : passed to :func:`lemke` (``max_pivots``, ``tol``, ``cover``).

    Returns
    -------
    LCPSolution
        The first accepted solution, with ``regularization=ε`` (0 for the
        plain solve) and ``pivots`` summed over all attempts; ``found=False``
        if every attempt failed.
    """
    M, q = validate_lcp(M, q)
    if eps0 <= 0 or growth <= 1 or max_eps < eps0:
        raise InputError("need eps0 > 0, growth > 1 and max_eps >= eps0")
    sol = _lemke(M, q, **kw)
    if sol.found:
        return sol
    total = sol.pivots
    first_failure = sol.message
    rejected = ""
    identity = np.eye(q.shape[0])
    data_scale = max(1.0, float(np.abs(M).max(initial=0.0)), float(np.abs(q).max(initial=0.0)))
    eps = eps0
    while eps <= max_eps * (1.0 + 1e-12):
        sol = _lemke(M + eps * identity, q, **kw)
        total += sol.pivots
        if sol.found:
            original = lcp_residuals(M, q, sol.z).worst / data_scale
            if original_tol is None or original <= original_tol:
                sol.pivots = total
                sol.regularization = eps
                sol.message = (
                    f"plain Lemke failed ({first_failure}); solved LCP(q, M + εI) at ε={eps:.1e} "
                    f"(relative residual on M {original:.1e}): {sol.message}"
                )
                return sol
            rejected = f"; regularized solutions violate LCP(q, M) (relative residual {original:.1e} at ε={eps:.1e})"
        eps *= growth
    return LCPSolution(
        np.zeros(q.shape[0]),
        q.copy(),
        False,
        total,
        [],
        0.0,
        f"Lemke failed ({first_failure}) and regularization up to ε={max_eps:.1e} did not help{rejected}",
    )


# ---------------------------------------------------------------------------------------------------------------------
# the compiled pivots


@njit((MATRIX, INDICES, intp, intp), cache=True)
def lemke_pivot(T, basis, r, c):
    """Exchange the basic variable of tableau row r for variable c (rank-1 update); return the leaving variable."""
    scale = T[r, c]
    for j in range(T.shape[1]):
        T[r, j] /= scale  # T[r, c] is now exactly 1, so the update below zeroes column c exactly
    for i in range(T.shape[0]):
        factor = T[i, c]
        if i != r:
            for j in range(T.shape[1]):
                T[i, j] -= factor * T[r, j]
    leaving = basis[r]
    basis[r] = c
    return leaving


@njit(cache=True)
def lemke_ratio_rows(T, entering, tol, tie_tol):
    """Rows tied (to ``tie_tol``) for the minimum ratio rhs / T[:, entering] over pivots > tol·max(1, |col|∞).

    The right-hand side is T's last column. Empty when no entry qualifies (a secondary ray).
    """
    n = T.shape[0]
    rhs = T.shape[1] - 1
    high = 1.0
    for i in range(n):
        high = max(high, abs(T[i, entering]))
    threshold = tol * high
    low = np.inf
    for i in range(n):
        c_i = T[i, entering]
        if c_i > threshold and T[i, rhs] / c_i < low:
            low = T[i, rhs] / c_i
    tied = np.empty(n, dtype=np.intp)
    count = 0
    if low < np.inf:
        bound = low + tie_tol * max(1.0, abs(low))
        for i in range(n):
            c_i = T[i, entering]
            if c_i > threshold and T[i, rhs] / c_i <= bound:
                tied[count] = i
                count += 1
    return tied[:count]


@njit((MATRIX, INDICES, intp, float64, float64, intp), cache=True)
def lemke_step(T, basis, entering, tol, tie_tol, z0_row):
    """One complementary pivot of Lemke's method, when its minimum-ratio test needs no tie-break.

    Returns (leaving variable, tied rows). The pivot is made when a single row attains the
    minimum ratio or z₀'s row ``z0_row`` ties for it (z₀ then leaves: a solution); otherwise
    the tableau is untouched and the leaving variable is −1 (ties: the caller breaks them
    lexicographically and pivots) or −2 (no row: a secondary ray).
    """
    tied = lemke_ratio_rows(T, entering, tol, tie_tol)
    if tied.shape[0] == 0:
        return -2, tied
    row = tied[0]
    if tied.shape[0] > 1:
        row = -1
        for r in tied:
            if r == z0_row:
                row = z0_row
        if row < 0:
            return -1, tied
    return lemke_pivot(T, basis, row, entering), tied
