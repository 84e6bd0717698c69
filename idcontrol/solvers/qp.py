"""Persistent, warm-started dense QP workspaces (DAQP back end).

qpsolvers sets a solver up anew on every call; at 1 kHz we keep one DAQP
workspace (``daqp.Model``) per problem size instead, update its data in place
and, when the caller says the problem is the same one as last tick, start the
dual active-set iterations from the previous tick's active set. DAQP is exact
on small dense QPs (an active-set method, not an iterative one) and handles the
positive *semi*-definite Stage I Hessian with its automatic proximal
regularization.
"""

from __future__ import annotations

from dataclasses import dataclass

import daqp
import numpy as np
from numpy.typing import NDArray

Array = NDArray[np.float64]
INFINITY = 1e30  # DAQP's "no bound"
_EXIT_OPTIMAL = (1, 2)  # optimal, optimal with soft constraints untouched
_EQUALITY = 5  # DAQP's sense flag of an equality row


@dataclass
class QPSolution:
    """Primal solution and status of :meth:`DenseQP.solve`."""

    x: Array
    found: bool
    iterations: int
    status: str


class DenseQP:
    """min ½ xᵀHx + gᵀx  s.t.  l ≤ C x ≤ u,  lb ≤ x ≤ ub (box optional); C's last rows may be equalities.

    Parameters
    ----------
    primal_tol : primal feasibility tolerance (problem units).
    iter_limit : iteration cap; hitting it is reported as ``found=False``.
    """

    def __init__(self, *, primal_tol: float = 1e-8, iter_limit: int = 1000) -> None:
        self.settings = {"primal_tol": primal_tol, "iter_limit": iter_limit}
        self._workspaces: dict[tuple[int, int, bool], daqp.Model] = {}
        self._last_key: tuple[int, int, bool] | None = None
        self._lam: Array | None = None  # multipliers of the last successful solve

    def solve(
        self,
        H: Array,
        g: Array,
        C: Array | None,
        l: Array | None,
        u: Array | None,
        lb: Array | None = None,
        ub: Array | None = None,
        *,
        warm: bool = False,
        active: NDArray[np.int32] | None = None,
        equalities: int = 0,
    ) -> QPSolution:
        """Solve, optionally warm-started.

        ``warm=True`` starts from the previous solve's active set (same sizes
        only); ``active`` gives the starting active set explicitly (one flag per
        bound, then per row of C), e.g. the previous one mapped by contact identity.
        ``equalities``: the last rows of C are equalities C x = u (DAQP's equality flag; l is not read there).
        """
        n = g.shape[0]
        A = C if C is not None else np.zeros((0, n))
        upper = u if u is not None else np.zeros(0)
        lower = l if l is not None else np.zeros(0)
        if lb is not None:
            upper = np.concatenate([ub, upper])
            lower = np.concatenate([lb, lower])
        return self.solve_stacked(H, g, A, lower, upper, bounds=lb is not None, warm=warm, active=active,
                                  equalities=equalities)  # fmt: skip

    def solve_stacked(
        self,
        H: Array,
        g: Array,
        A: Array,
        lower: Array,
        upper: Array,
        *,
        bounds: bool,
        warm: bool = False,
        active: NDArray[np.int32] | None = None,
        equalities: int = 0,
    ) -> QPSolution:
        """:meth:`solve` with the data already in DAQP's layout (no copies: the per-tick path).

        ``lower``/``upper`` (len(g) + len(A) when ``bounds``, else len(A)) hold the
        box bounds first, then the bounds of the rows of ``A`` (len(A), len(g)),
        all C-contiguous float64; the last ``equalities`` rows of ``A`` are equalities.
        """
        key = (g.shape[0], A.shape[0], bounds)
        sense = np.zeros(upper.shape[0], dtype=np.int32)
        if active is not None and len(active) == len(sense):
            sense[:] = active
        elif warm and self._last_key == key and self._lam is not None:
            sense[:] = self.last_active
        first_equality = upper.shape[0] - equalities
        sense[first_equality:] = _EQUALITY
        model = self._workspaces.get(key)
        if model is None:
            model = daqp.Model()
            exitflag, _ = model.setup(H, g, A, upper, lower, sense)
            if exitflag < 0:  # rejected at set-up (more equality rows than variables): no workspace is kept
                return QPSolution(x=np.full(g.shape[0], np.nan), found=False, iterations=0,
                                  status=f"daqp exit {exitflag}")  # fmt: skip
            model.settings = self.settings
            self._workspaces[key] = model
        elif A.shape[0]:
            model.update(H=H, f=g, A=A, bupper=upper, blower=lower, sense=sense)
        else:  # DAQP's update indexes A's first row: with no general constraints leave A out
            model.update(H=H, f=g, bupper=upper, blower=lower, sense=sense)
        x, _, exitflag, info = model.solve()
        if exitflag not in _EXIT_OPTIMAL and sense[:first_equality].any():  # a stale warm start: retry cold
            sense[:first_equality] = 0
            model.update(sense=sense)
            x, _, exitflag, info = model.solve()
        if exitflag not in _EXIT_OPTIMAL:
            # DAQP can declare a degenerate but feasible problem (many constraints active at the
            # solution) infeasible at a tight tolerance; one retry at 100x the tolerance settles it.
            model.settings = {**self.settings, "primal_tol": 100.0 * self.settings["primal_tol"]}
            x, _, exitflag, info = model.solve()
            model.settings = self.settings
        found = exitflag in _EXIT_OPTIMAL
        self._last_key = key
        self._lam = info["lam"] if found else None  # a copy; the flags are derived only when asked for
        return QPSolution(x=x, found=found, iterations=info["iterations"], status=f"daqp exit {exitflag}")

    @property
    def last_active(self) -> NDArray[np.int32] | None:
        """Active-set flags of the last successful solve (bounds first, then rows of C)."""
        return None if self._lam is None else (self._lam != 0.0).astype(np.int32)

    def forget(self) -> None:
        """Drop the warm start (the next solve starts cold)."""
        self._last_key = None
        self._lam: Array | None = None
