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
only returned when the LCP's residuals (as :func:`~idcontrol.solvers.lcp.lcp_residuals` measures them) confirm it.

The whole method, the Tikhonov fallback of :func:`lemke_regularized` included, is one compiled call
(:func:`lemke_kernel`, :func:`lemke_regularized_kernel`): a formulation's kernel can call it directly, and from
Python it costs one boundary crossing instead of one per pivot (the Coulomb LCP's trot ticks: 7-20 pivots).
"""

from __future__ import annotations

import math

import numpy as np
from numba import njit, types
from numpy.typing import ArrayLike, NDArray

from idcontrol.arrays import IN_MATRIX, IN_VECTOR, INDICES, MATRIX, VECTOR, boolean, float64, intp
from idcontrol.errors import InputError, NonFiniteError, ShapeError
from idcontrol.solvers.dense import least_norm_lstsq
from idcontrol.solvers.lcp import LCPSolution
from idcontrol.validation import all_finite

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

    The relative residual is the LCP's residuals (:func:`~idcontrol.solvers.lcp.lcp_residuals`) with the w-terms
    divided by ``w_scale`` and complementarity by ``z_scale · w_scale`` (see :func:`residual_scales`); it is
    comparable with :data:`ACCEPT_TOL`. A non-finite z or w gives inf. Compiled: :func:`polish_kernel`.
    """
    M, q = np.ascontiguousarray(M, dtype=float), np.ascontiguousarray(q, dtype=float)
    return polish_kernel(M, q, np.array(z, dtype=float), float(clean_tol))


#: Tie-breaks of the minimum-ratio test: the lexicographic rule (the default: it excludes cycling in exact
#: arithmetic; in floating point a run that comes back to a basis is stopped, see :func:`lemke_kernel`) and the
#: naive first or last tied row, kept only to show the cycling the lexicographic rule prevents (tests/test_lemke.py).
TIE_BREAKS = {"lexicographic": 0, "first": 1, "last": 2}

#: :func:`lemke_kernel` outcomes
LEMKE_SOLVED, LEMKE_EMPTY, LEMKE_TRIVIAL, LEMKE_RAY, LEMKE_CAP, LEMKE_RESIDUAL, LEMKE_CYCLE = 0, 1, 2, 3, 4, 5, 6
#: the outcomes that are solutions
LEMKE_FOUND = (LEMKE_SOLVED, LEMKE_EMPTY, LEMKE_TRIVIAL)


def lemke(
    M: ArrayLike,
    q: ArrayLike,
    *,
    max_pivots: int | None = None,
    tol: float = 1e-12,
    cover: ArrayLike | None = None,
    tie_break: str = "lexicographic",
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
    tie_break : ``"lexicographic"``; ``"first"`` or ``"last"`` (the tied row of lowest or highest index, which
        can cycle on degenerate problems) only to show what the lexicographic rule prevents.

    Returns
    -------
    LCPSolution
        ``found=True`` only if the returned pair's residuals have ``w``-terms below
        ``ACCEPT_TOL · max(1, |q|∞, |M|max·max(1, |z|∞))`` and complementarity below that times
        ``max(1, |z|∞)``. Secondary-ray termination, the pivot cap and loss of accuracy give ``found=False``
        with the reason in ``message``; none of them raises.

    Raises
    ------
    ShapeError, NonFiniteError : malformed M, q or cover.
    InputError : cover not strictly positive, or an unknown tie-break.
    """
    M, q = validate_lcp(M, q)
    if tie_break not in TIE_BREAKS:
        raise InputError(f"tie_break must be one of {sorted(TIE_BREAKS)}, got {tie_break!r}")
    n = q.shape[0]
    cap = _cap(n, max_pivots)
    status, z, w, pivots, rel, entering = lemke_kernel(M, q, _cover(cover, n), cap, float(tol), TIE_BREAKS[tie_break])
    return LCPSolution(
        z,
        w,
        status in LEMKE_FOUND,
        pivots,
        np.flatnonzero(z > 0.0).tolist(),
        0.0,
        lemke_message(status, pivots, rel, entering, n, cap),
    )


def _cap(n: int, max_pivots: int | None) -> int:
    return 50 * n + 100 if max_pivots is None else int(max_pivots)


def _cover(cover: ArrayLike | None, n: int) -> Array:
    """The covering vector d (n,), checked: finite and > 0 (default ones)."""
    if cover is None:
        return np.ones(n)
    d = np.array(cover, dtype=float)
    if d.shape != (n,):
        raise ShapeError("cover", (n,), d.shape)
    if not np.isfinite(d).all():
        raise NonFiniteError("cover", np.flatnonzero(~np.isfinite(d)).tolist())
    if (d <= 0).any():
        raise InputError("cover must be strictly positive")
    return d


def lemke_message(status: int, pivots: int, rel: float, entering: int, n: int, cap: int) -> str:
    """The human-readable outcome of :func:`lemke_kernel`."""
    if status == LEMKE_SOLVED:
        return f"solved in {pivots} pivots"
    if status == LEMKE_EMPTY:
        return "empty LCP"
    if status == LEMKE_TRIVIAL:
        return "q >= 0: trivial solution z = 0"
    if status == LEMKE_RAY:
        return f"secondary ray after {pivots} pivots (entering {_name(entering, n)}): no solution reached"
    if status == LEMKE_CAP:
        return f"pivot cap of {cap} reached"
    if status == LEMKE_CYCLE:
        return f"a basis came back after {pivots} pivots: the pivoting cycles (degenerate ties)"
    return f"terminal basis after {pivots} pivots fails the residual check ({rel:.1e} relative)"


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
    max_pivots: int | None = None,
    tol: float = 1e-12,
    cover: ArrayLike | None = None,
) -> LCPSolution:
    """Lemke with Tikhonov fallback: try LCP(q, M), then LCP(q, M + εI) for ε = eps0, eps0·growth, ... ≤ max_eps.

    This is the fallback of the paper's authors' code. A regularized solution
    solves the *regularized* LCP: its ``w = (M + εI) z + q`` and, against the
    original M, ``M z + q`` differs from ``w`` by ``ε z`` (residuals O(ε |z|∞)).

    When LCP(q, M) has no solution, LCP(q, M + εI) may still have one with
    ``|z| ~ 1/ε`` (e.g. M = diag(1, 0), q = −1 gives z₂ = 1/ε), so O(ε |z|) is
    O(1). ``original_tol`` guards against returning such a point: a regularized
    solution is accepted only if its worst LCP residual against the *original* M is at most
    ``original_tol · max(1, |M|max, |q|∞)`` (a scale that, unlike the one of :func:`lemke`'s own check, does
    not grow with |z|).

    Parameters
    ----------
    M : (n, n), q : (n,) as in :func:`lemke`.
    eps0, growth, max_eps : the geometric schedule of ε.
    original_tol : bound on the residual w.r.t. the original M (see above); None accepts any regularized solution.
    max_pivots, tol, cover : as in :func:`lemke`.

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
    n = q.shape[0]
    cap = _cap(n, max_pivots)
    guard = -1.0 if original_tol is None else float(original_tol)
    outcome = lemke_regularized_kernel(
        M, q, _cover(cover, n), cap, float(tol), 0, float(eps0), float(growth), float(max_eps), guard
    )
    return regularized_solution(outcome, q, cap, max_eps)


def regularized_solution(outcome: tuple, q: Array, cap: int, max_eps: float) -> LCPSolution:
    """The :class:`LCPSolution` of :func:`lemke_regularized_kernel`'s ``outcome`` for LCP(q, ·)."""
    found, z, w, pivots, eps = outcome[:5]
    n = q.shape[0]
    message = regularized_message((outcome[0],) + outcome[3:], n, cap, max_eps)  # as compiled_summary: no z, w
    if found:
        return LCPSolution(z, w, True, pivots, np.flatnonzero(z > 0.0).tolist(), eps, message)
    return LCPSolution(np.zeros(n), q.copy(), False, pivots, [], 0.0, message)


def regularized_message(summary: tuple, n: int, cap: int, max_eps: float) -> str:
    """What :func:`lemke_regularized_kernel` did on an LCP of size ``n``, from its outcome without z and w
    (:func:`compiled_summary`)."""
    (
        found,
        pivots,
        eps,
        status,
        attempt_pivots,
        rel,
        entering,
        first_status,
        first_pivots,
        first_rel,
        first_entering,
        residual,
        rejected_eps,
    ) = summary
    if found and eps == 0.0:
        return lemke_message(status, pivots, rel, entering, n, cap)
    first_failure = lemke_message(first_status, first_pivots, first_rel, first_entering, n, cap)
    if found:
        return (
            f"plain Lemke failed ({first_failure}); solved LCP(q, M + εI) at ε={eps:.1e} (relative residual "
            f"on M {residual:.1e}): {lemke_message(status, attempt_pivots, rel, entering, n, cap)}"
        )
    rejected = ""
    if rejected_eps > 0.0:
        rejected = (
            f"; regularized solutions violate LCP(q, M) (relative residual {residual:.1e} at ε={rejected_eps:.1e})"
        )
    return f"Lemke failed ({first_failure}) and regularization up to ε={max_eps:.1e} did not help{rejected}"


@njit(cache=True)
def compiled_summary(outcome):
    """:func:`lemke_regularized_kernel`'s ``outcome`` without z and w, for a compiled caller that then returns
    scalars only to Python (each array it returns costs its boxing, ~0.35 µs)."""
    return (outcome[0],) + outcome[3:]  # as regularized_solution drops z and w in Python


# ---------------------------------------------------------------------------------------------------------------------
# the compiled method


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


@njit(cache=True)
def lexmin_row(T, rows, divisor, n, tie_tol, tie_break):
    """The row of ``rows`` (k,) minimizing ``[rhs, B⁻¹] / divisor`` lexicographically (``tie_break`` 0): the
    right-hand side first (T's last column), then the columns of B⁻¹ (T's first n) in order, each narrowing the
    rows tied (to ``tie_tol``) for the minimum. ``tie_break`` 1 / 2: the first / last of the rows tied on the
    right-hand side alone (naive rules that can cycle)."""
    rhs = T.shape[1] - 1
    live = rows.copy()
    count = live.shape[0]
    for step in range(n + 1):
        j = rhs if step == 0 else step - 1
        low = np.inf
        for k in range(count):
            low = min(low, T[live[k], j] / divisor[live[k]])
        bound = low + tie_tol * max(1.0, abs(low))
        if tie_break != 0:
            bound = low + 1e-12
        kept = 0
        for k in range(count):
            if T[live[k], j] / divisor[live[k]] <= bound:
                live[kept] = live[k]
                kept += 1
        count = kept
        if tie_break == 1:
            return live[0]
        if tie_break == 2:
            return live[count - 1]
        if count == 1:
            break
    return live[0]


@njit(types.Tuple((VECTOR, VECTOR, float64))(IN_MATRIX, IN_VECTOR, IN_VECTOR, float64), cache=True)
def polish_kernel(M, q, z, clean_tol):
    """(z ≥ 0, w = M z + q with |w| ≤ clean_tol·w_scale set to 0, relative residual): see :func:`polish`."""
    n = q.shape[0]
    zc = np.empty(n)
    z_scale = 1.0
    for i in range(n):
        zc[i] = max(z[i], 0.0)
        z_scale = max(z_scale, abs(zc[i]))
    w = np.empty(n)
    finite = True
    m_max = 0.0
    q_max = 0.0
    for i in range(n):
        s = q[i]
        for j in range(n):
            s += M[i, j] * zc[j]
            m_max = max(m_max, abs(M[i, j]))
        w[i] = s
        q_max = max(q_max, abs(q[i]))
        if not (math.isfinite(s) and math.isfinite(zc[i])):
            finite = False
    if not finite:
        return zc, w, np.inf
    w_scale = max(1.0, q_max, m_max * z_scale)
    w_negativity = 0.0
    equation = 0.0
    complementarity = 0.0
    for i in range(n):
        if abs(w[i]) <= clean_tol * w_scale:
            equation = max(equation, abs(w[i]))  # the cleaned amount is what M z + q − w then misses
            w[i] = 0.0
        w_negativity = max(w_negativity, -w[i])
        complementarity = max(complementarity, abs(zc[i] * w[i]))
    rel = max(w_negativity / w_scale, equation / w_scale, complementarity / (z_scale * w_scale))
    return zc, w, rel


#: relative tolerance of :func:`face_solution`'s tests (z ≥ 0, w ≥ 0 and the face's equations)
FACE_TOL = 1e-9


#: :func:`face_solution`'s outcomes: z′ solves the LCP; z′ is feasible (z′ ≥ 0, w ≥ 0 off the face) and meets the
#: face's equations in the least-squares sense only (q_F has a part M_FF cannot reach); neither
FACE_EXACT, FACE_LEAST_SQUARES, FACE_NONE = 0, 1, 2


@njit(cache=True)
def face_solution(M, q, z):
    """(outcome, z′): z′_F = z_F + δ on z's face F (its support; the rest 0), δ the least-norm least-squares solution
    of M_FF δ = −q_F − M_FF z_F (complete orthogonal decomposition), a variable of F in none of F's equations raised
    just enough to meet the rows off F it enters positively (the Coulomb LCP's λ of an unloaded contact, free
    there), clipped at 0. FACE_EXACT when z′ solves the exact LCP(q, M) (z′ ≥ 0, w = M z′ + q ≥ 0 off F, w_F = 0,
    each within :data:`FACE_TOL` of the problem's scale); FACE_LEAST_SQUARES when only w_F = 0 fails (the part of
    q_F outside M_FF's range: on a stance whose load has a free direction, a velocity the stance cannot meet);
    FACE_NONE otherwise (z′ = a copy of ``z``).
    """
    n = q.shape[0]
    face = np.flatnonzero(z > 0.0)
    k = face.shape[0]
    if k == 0:
        return FACE_NONE, z.copy()
    A = np.empty((k, k))
    b = np.empty(k)
    for i in range(k):
        t = -q[face[i]]
        for j in range(k):
            A[i, j] = M[face[i], face[j]]
            t -= A[i, j] * z[face[j]]
        b[i] = t
    delta = least_norm_lstsq(A, b, 1e-10)
    out = np.zeros(n)
    z_scale, m_max, q_max = 1.0, 0.0, 0.0
    for i in range(k):
        out[face[i]] = z[face[i]] + delta[i]
        z_scale = max(z_scale, abs(out[face[i]]))
    for i in range(n):
        q_max = max(q_max, abs(q[i]))
        for j in range(n):
            m_max = max(m_max, abs(M[i, j]))
    w_scale = max(1.0, q_max, m_max * z_scale)
    for i in range(k):
        if not out[face[i]] >= -FACE_TOL * z_scale:  # NaN too
            return FACE_NONE, z.copy()
        out[face[i]] = max(out[face[i]], 0.0)
    on_face = z > 0.0
    # a face variable in none of the face's equations is free there (the Coulomb LCP's λ of an unloaded contact):
    # raise it just enough that the rows off the face it enters positively are met
    for j in range(k):
        free = True
        for i in range(k):
            if A[i, j] != 0.0:
                free = False
                break
        if not free:
            continue
        c = face[j]
        need = out[c]
        for i in range(n):
            if on_face[i] or not M[i, c] > 0.0:
                continue
            w = q[i]
            for f in range(k):
                w += M[i, face[f]] * out[face[f]]
            if w < 0.0:
                need = max(need, out[c] - w / M[i, c])
        out[c] = need
    outcome = FACE_EXACT
    for i in range(n):
        w = q[i]
        for j in range(k):
            w += M[i, face[j]] * out[face[j]]
        if on_face[i]:
            if not abs(w) <= FACE_TOL * w_scale:  # w_F = 0 (NaN fails)
                outcome = FACE_LEAST_SQUARES
        elif not -w <= FACE_TOL * w_scale:  # w ≥ 0 off F
            return FACE_NONE, z.copy()
    return outcome, out


@njit(types.Tuple((boolean, VECTOR))(IN_MATRIX, IN_VECTOR, IN_VECTOR), cache=True)
def nearest_on_face(M, q, z):
    """(accepted, z′): the solution of the exact LCP(q, M) nearest to ``z`` on z's face (:func:`face_solution`),
    accepted when it is one (FACE_EXACT); not accepted: (False, a copy of ``z``).

    A Tikhonov-regularized solve (M + εI) picks one of an LCP's many solutions (a stance on more contacts than it
    needs: the load spread over all of them) but misses the exact LCP by about ε; this removes that miss and keeps
    the load's distribution.
    """
    outcome, out = face_solution(M, q, z)
    if outcome == FACE_EXACT:
        return True, out
    return False, z.copy()


@njit(cache=True)
def spread_answered_gap(z, q, weight, spread, count):
    """Whether a Tikhonov-regularized LCP's answer z (M + weight·I on its first ``count`` variables, weight = ε ·
    a scale of M's diagonal, ε = ``spread``) is the regularization answering an unsolvable LCP(q, M).

    Solvable, the regularized solution moves the exact one by a fraction of about ε: weight · max z ≈ ε |q|.
    Unsolvable (a gap the variables cannot close: a rigid object squeezed), it is z ≈ −q / weight, so that the
    regularization term carries q itself: weight · max z ≈ |q|. The test: weight · max z > min(0.5, 10 ε) ‖q‖∞.
    """
    largest = 0.0
    for i in range(count):
        largest = max(largest, z[i])
    scale = 0.0
    for i in range(q.shape[0]):
        scale = max(scale, abs(q[i]))
    return weight * largest > min(0.5, 10.0 * spread) * scale


#: :func:`settle_spread`'s verdicts on a regularized answer
SPREAD_EXACT, SPREAD_NEAR, SPREAD_UNSOLVABLE, SPREAD_LEAST_SQUARES = 0, 1, 2, 3


@njit(cache=True)
def settle_spread(M, q, z, weight, spread, count, least_squares=False):
    """What a Tikhonov-regularized LCP's answer z (M + weight·I on its first ``count`` variables, weight = ε · a
    scale of M's diagonal, ε = ``spread``) gives for the exact LCP(q, M), as (verdict, z′):

    * SPREAD_EXACT: z′ is the exact solution nearest to z on z's face (:func:`face_solution`);
    * SPREAD_UNSOLVABLE: the regularization answered an LCP without solution (:func:`spread_answered_gap`);
      z′ = z, which the caller replaces by the exact LCP's own answer;
    * SPREAD_LEAST_SQUARES (only with ``least_squares``): z′ is feasible on z's face and meets its equations in
      the least-squares sense (FACE_LEAST_SQUARES): the caller's repair answers the rest;
    * SPREAD_NEAR: none of these; z′ = z, ε-near a solution.

    ``least_squares`` keeps the answer continuous where the face's unreachable part of q_F hovers at the exact
    test's tolerance: between z′ and z the answer jumps by about ε (the no-slip LCP's B1 standing in MuJoCo
    alternated between them every tick, its torques by 0.4 N·m).
    """
    outcome, z_face = face_solution(M, q, z)
    if outcome == FACE_EXACT:
        return SPREAD_EXACT, z_face
    if spread_answered_gap(z, q, weight, spread, count):
        return SPREAD_UNSOLVABLE, z
    if least_squares and outcome == FACE_LEAST_SQUARES:
        return SPREAD_LEAST_SQUARES, z_face
    return SPREAD_NEAR, z


@njit(cache=True)
def basis_key(variable):
    """The uint64 key of tableau variable ``variable`` (splitmix64 of its index): the XOR of a basis' keys names the
    basis (Zobrist hashing), updated by two XORs a pivot."""
    x = np.uint64(variable + 1) * np.uint64(0x9E3779B97F4A7C15)
    z = (x ^ (x >> np.uint64(30))) * np.uint64(0xBF58476D1CE4E5B9)
    z = (z ^ (z >> np.uint64(27))) * np.uint64(0x94D049BB133111EB)
    return z ^ (z >> np.uint64(31))


@njit(
    types.Tuple((intp, VECTOR, VECTOR, intp, float64, intp))(IN_MATRIX, IN_VECTOR, IN_VECTOR, intp, float64, intp),
    cache=True,
)
def lemke_kernel(M, q, d, cap, tol, tie_break):
    """Lemke's method on LCP(q, M) with covering vector d (see :func:`lemke`), in one call.

    Returns (status, z, w, pivots, relative residual, entering variable at a secondary ray): status is one of
    LEMKE_SOLVED, LEMKE_EMPTY, LEMKE_TRIVIAL (z = 0 for q ≥ 0), LEMKE_RAY, LEMKE_CAP, LEMKE_RESIDUAL (a terminal
    basis whose pair fails the residual check), LEMKE_CYCLE; z = 0 and w = q when no terminal basis was reached.

    A complementary path visits each basis at most once, and the lexicographic rule keeps it so in exact
    arithmetic; in floating point, ties decided within ``tol`` can lead back to a basis, and from there the pivots
    repeat. A basis that comes back among the last 2n + 8 (:func:`basis_key`) ends the run as LEMKE_CYCLE, where it
    ran on to the cap before: on a Coulomb LCP of the arm's grasp (24 variables), after 15-23 pivots instead of
    1300.
    """
    n = q.shape[0]
    if n == 0:
        return LEMKE_EMPTY, np.zeros(0), np.zeros(0), 0, 0.0, -1
    q_min = np.inf
    q_scale = 0.0
    m_scale = 0.0
    for i in range(n):
        q_min = min(q_min, q[i])
        q_scale = max(q_scale, abs(q[i]))
        for j in range(n):
            m_scale = max(m_scale, abs(M[i, j]))
    if q_min >= 0.0:
        return LEMKE_TRIVIAL, np.zeros(n), q.copy(), 0, 0.0, -1
    if m_scale == 0.0:
        m_scale = 1.0
    # pivot on LCP(q / |q|∞, M / |M|max), whose solutions are z · |M|max / |q|∞: tolerances become scale-free
    z0, rhs = 2 * n, 2 * n + 1  # variables: w_i -> i, z_i -> n + i, z₀ -> 2n; column 2n + 1 is B⁻¹q
    T = np.zeros((n, 2 * n + 2))
    for i in range(n):
        T[i, i] = 1.0
        for j in range(n):
            T[i, n + j] = M[i, j] / -m_scale
        T[i, z0] = -d[i]
        T[i, rhs] = q[i] / q_scale
    basis = np.arange(n)  # basic variable held by each row
    tie_tol = max(tol, 4.0 * _EPS)
    # first pivot: z₀ rises to max_i(−q_i / d_i); the most violated row leaves (lexicographically)
    z0_row = lexmin_row(T, np.arange(n), d, n, tie_tol, tie_break)
    leaving = lemke_pivot(T, basis, z0_row, z0)
    pivots = 1
    entering = -1
    status = LEMKE_SOLVED
    name = np.uint64(0)  # the basis' name: the XOR of its variables' keys
    for row in range(n):
        name ^= basis_key(basis[row])
    window = 2 * n + 8
    recent = np.empty(window, dtype=np.uint64)  # the names of the last bases, a ring
    recent[0] = name
    seen = 1
    while True:
        if pivots >= cap:
            status = LEMKE_CAP
            break
        entering = leaving + n if leaving < n else leaving - n
        # minimum-ratio test over rows with a positive pivot; z₀ leaves whenever it ties for the minimum
        # (that basis is a solution); other ties are broken by the lexicographic rule
        tied = lemke_ratio_rows(T, entering, tol, tie_tol)
        if tied.shape[0] == 0:
            status = LEMKE_RAY
            break
        row = tied[0]
        if tied.shape[0] > 1:
            row = -1
            for r in tied:
                if r == z0_row:
                    row = z0_row
            if row < 0:
                row = lexmin_row(T, tied, T[:, entering].copy(), n, tie_tol, tie_break)
        leaving = lemke_pivot(T, basis, row, entering)
        pivots += 1
        if leaving == z0:
            break
        name ^= basis_key(leaving) ^ basis_key(entering)
        repeated = False
        for k in range(min(seen, window)):
            if recent[k] == name:
                repeated = True
        if repeated:
            status = LEMKE_CYCLE
            break
        recent[seen % window] = name
        seen += 1
    if status != LEMKE_SOLVED:
        return status, np.zeros(n), q.copy(), pivots, 0.0, entering
    # z from re-solving the terminal basis with the original data, [I, −M]_B x_B = q ...
    A_B = np.zeros((n, n))
    for row in range(n):
        var = basis[row]
        if var < n:
            A_B[var, row] = 1.0
        else:
            for i in range(n):
                A_B[i, row] = -M[i, var - n]
    best_z = np.zeros(n)
    best_w = q.copy()
    best_rel = np.inf
    try:
        x_B = np.linalg.solve(A_B, q)
    except Exception:  # an exactly singular terminal basis (LAPACK's gesv): the tableau's values below
        x_B = np.full(n, np.nan)
    if all_finite(x_B):
        z = np.zeros(n)
        for row in range(n):
            if basis[row] >= n:
                z[basis[row] - n] = x_B[row]
        best_z, best_w, best_rel = polish_kernel(M, q, z, tol)
    # ... or read off the tableau, whichever satisfies the LCP better
    if best_rel > 1e-3 * ACCEPT_TOL:
        z = np.zeros(n)
        for row in range(n):
            if basis[row] >= n:
                z[basis[row] - n] = T[row, rhs] * (q_scale / m_scale)
        z_t, w_t, rel_t = polish_kernel(M, q, z, tol)
        if rel_t < best_rel:
            best_z, best_w, best_rel = z_t, w_t, rel_t
    if best_rel > ACCEPT_TOL:
        return LEMKE_RESIDUAL, best_z, best_w, pivots, best_rel, -1
    return LEMKE_SOLVED, best_z, best_w, pivots, best_rel, -1


@njit(cache=True)
def _worst_residual(M, q, z):
    """The worst of :func:`~idcontrol.solvers.lcp.lcp_residuals`' violations of LCP(q, M) at z, w = M z + q."""
    n = q.shape[0]
    worst = 0.0
    for i in range(n):
        w = q[i]
        for j in range(n):
            w += M[i, j] * z[j]
        worst = max(worst, -z[i], -w, abs(z[i] * w))
    return worst


@njit(
    types.Tuple(
        (boolean, VECTOR, VECTOR, intp, float64, intp, intp, float64, intp, intp, intp, float64, intp, float64, float64)
    )(IN_MATRIX, IN_VECTOR, IN_VECTOR, intp, float64, intp, float64, float64, float64, float64),
    cache=True,
)
def lemke_regularized_kernel(M, q, d, cap, tol, tie_break, eps0, growth, max_eps, original_tol):
    """:func:`lemke_regularized` in one call (``original_tol`` < 0: no guard).

    Returns (found, z, w, pivots summed over the attempts, ε of the accepted solution (0: the plain solve), its
    attempt's status, pivots, relative residual and secondary-ray entering variable, the same four of the plain
    attempt, the relative residual on the original M of the accepted (or of the last rejected) regularized
    solution, the ε of the last rejected one (0: none)).
    """
    status, z, w, pivots, rel, entering = lemke_kernel(M, q, d, cap, tol, tie_break)
    first = (status, pivots, rel, entering)
    if status == LEMKE_SOLVED or status == LEMKE_EMPTY or status == LEMKE_TRIVIAL:
        return True, z, w, pivots, 0.0, status, pivots, rel, entering, status, pivots, rel, entering, 0.0, 0.0
    total = pivots
    n = q.shape[0]
    data_scale = 1.0
    for i in range(n):
        data_scale = max(data_scale, abs(q[i]))
        for j in range(n):
            data_scale = max(data_scale, abs(M[i, j]))
    rejected_eps = 0.0
    residual = 0.0
    eps = eps0
    shifted = M.copy()
    while eps <= max_eps * (1.0 + 1e-12):
        for i in range(n):
            shifted[i, i] = M[i, i] + eps
        status, z, w, pivots, rel, entering = lemke_kernel(shifted, q, d, cap, tol, tie_break)
        total += pivots
        if status == LEMKE_SOLVED or status == LEMKE_EMPTY or status == LEMKE_TRIVIAL:
            original = _worst_residual(M, q, z) / data_scale
            if original_tol < 0.0 or original <= original_tol:
                return (
                    True,
                    z,
                    w,
                    total,
                    eps,
                    status,
                    pivots,
                    rel,
                    entering,
                    first[0],
                    first[1],
                    first[2],
                    first[3],
                    original,
                    rejected_eps,
                )
            rejected_eps, residual = eps, original
        eps *= growth
    return (
        False,
        np.zeros(n),
        q.copy(),
        total,
        0.0,
        status,
        pivots,
        rel,
        entering,
        first[0],
        first[1],
        first[2],
        first[3],
        residual,
        rejected_eps,
    )
