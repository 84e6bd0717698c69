"""Persistent, warm-started dense QP workspaces (DAQP back end).

qpsolvers sets a solver up anew on every call; at 1 kHz we keep one DAQP
workspace per problem size instead, update its data in place
and, when the caller says the problem is the same one as last tick, start the
dual active-set iterations from the previous tick's active set. DAQP is exact
on small dense QPs (an active-set method, not an iterative one) and handles the
positive *semi*-definite Stage I Hessian with its automatic proximal
regularization.

Two paths, the same answers: DAQP's C API called from compiled code (:mod:`idcontrol.solvers.daqp_native`, when
its self-check passed) and its Python extension's ``daqp.Model`` (:mod:`idcontrol.solvers.daqp_model`). Both
keep one workspace per problem size here, start and retry as :mod:`idcontrol.solvers.daqp_start` says, and differ
only in the workspace a solve goes to.
"""

from __future__ import annotations

import numpy as np
from numpy.typing import NDArray

from idcontrol.solvers import daqp_native
from idcontrol.solvers.daqp_abi import INFINITY
from idcontrol.solvers.daqp_model import EXIT_OPTIMAL, ModelQP, QPSolution
from idcontrol.solvers.daqp_start import COLD, GIVEN, WARM

Array = NDArray[np.float64]
_NO_FLAGS = np.zeros(0, dtype=np.int32)

__all__ = ["INFINITY", "DenseQP", "QPSolution"]


class DenseQP:
    """min ½ xᵀHx + gᵀx  s.t.  l ≤ C x ≤ u,  lb ≤ x ≤ ub (box optional); C's last rows may be equalities.

    Parameters
    ----------
    primal_tol : primal feasibility tolerance (problem units).
    iter_limit : iteration cap; hitting it is reported as ``found=False``.
    native : solve through :mod:`idcontrol.solvers.daqp_native` (DAQP's C API, one compiled call a solve) or
        through ``daqp.Model`` (:mod:`idcontrol.solvers.daqp_model`), the same answers; None (default): natively
        when that path passed its self-check (docs/benchmarks.md compares the two).
    """

    def __init__(self, *, primal_tol: float = 1e-8, iter_limit: int = 1000, native: bool | None = None) -> None:
        self.settings = {"primal_tol": primal_tol, "iter_limit": iter_limit}
        self.native = daqp_native.native_available() if native is None else bool(native)
        # a workspace per problem size, and the call that solves in one: (exit flag, x, λ, iterations)
        self._workspace_of_size = daqp_native.NativeQP if self.native else ModelQP
        self._solve_in = daqp_native.solve_copied if self.native else ModelQP.solve_stacked
        self._workspaces: dict[tuple, daqp_native.NativeQP | ModelQP] = {}
        self._last_key: tuple | None = None
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
        return self.solve_stacked(
            H, g, A, lower, upper, bounds=lb is not None, warm=warm, active=active, equalities=equalities
        )

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
        n, rows = g.shape[0], A.shape[0]
        key = (n, rows, bounds, equalities)
        workspace = self._workspaces.get(key)
        if workspace is None:
            tolerance, cap = self.settings["primal_tol"], self.settings["iter_limit"]
            workspace = self._workspace_of_size(
                n, rows, bounds=bounds, equalities=equalities, primal_tol=tolerance, iter_limit=cap
            )
            self._workspaces[key] = workspace
        given = _NO_FLAGS
        if active is not None and len(active) == rows + (n if bounds else 0):
            start, given = GIVEN, np.ascontiguousarray(active, dtype=np.int32)
        elif warm and self._last_key == key and self._lam is not None:
            start = WARM
        else:
            start = COLD
        exitflag, x, lam, iterations = self._solve_in(workspace, H, g, A, lower, upper, start, given)
        found = exitflag in EXIT_OPTIMAL
        self._last_key = key
        self._lam = lam if found else None
        return QPSolution(x=x, found=found, iterations=iterations, exitflag=exitflag)

    @property
    def last_active(self) -> NDArray[np.int32] | None:
        """Active-set flags of the last successful solve (bounds first, then rows of C)."""
        return None if self._lam is None else (self._lam != 0.0).astype(np.int32)

    def forget(self) -> None:
        """Drop the warm start (the next solve starts cold)."""
        self._last_key = None
        self._lam = None
