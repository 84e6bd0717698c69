"""Persistent, warm-started dense QP workspaces (DAQP back end).

qpsolvers sets a solver up anew on every call; at 1 kHz we keep one DAQP
workspace per problem size instead, update its data in place
and, when the caller says the problem is the same one as last tick, start the
dual active-set iterations from the previous tick's active set. DAQP is exact
on small dense QPs (an active-set method, not an iterative one) and handles the
positive *semi*-definite Stage I Hessian with its automatic proximal
regularization.

Two paths, the same answers: DAQP's C API called from compiled code (:mod:`idcontrol.solvers.daqp_native`, when
its self-check passed) and its Python extension's ``daqp.Model`` (:mod:`idcontrol.solvers.daqp_model`).
"""

from __future__ import annotations

import numpy as np
from numpy.typing import NDArray

from idcontrol.solvers import daqp_native
from idcontrol.solvers.daqp_abi import INFINITY
from idcontrol.solvers.daqp_model import EXIT_OPTIMAL, ModelQP, QPSolution

Array = NDArray[np.float64]
_NO_FLAGS = np.zeros(0, dtype=np.int32)

__all__ = ["INFINITY", "DenseQP", "QPSolution"]


class DenseQP:
    """min ½ xᵀHx + gᵀx  s.t.  l ≤ C x ≤ u,  lb ≤ x ≤ ub (box optional); C's last rows may be equalities.

    Parameters
    ----------
    primal_tol : primal feasibility tolerance (problem units).
    iter_limit : iteration cap; hitting it is reported as ``found=False``.
    native : solve through :mod:`idcontrol.solvers.daqp_native` (DAQP's C API, one compiled call a solve: 4.5
        against 13 µs on the trot's QPs, the same answers) or through ``daqp.Model``; None (default): natively
        when that path passed its self-check.
    """

    def __init__(self, *, primal_tol: float = 1e-8, iter_limit: int = 1000, native: bool | None = None) -> None:
        self.settings = {"primal_tol": primal_tol, "iter_limit": iter_limit}
        self.native = daqp_native.native_available() if native is None else bool(native)
        self._model = None if self.native else ModelQP(self.settings)
        self._workspaces: dict[tuple, daqp_native.NativeQP] = {}  # per problem size
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
        if self._model is not None:
            return self._model.solve_stacked(H, g, A, lower, upper, bounds=bounds, warm=warm, active=active,
                                             equalities=equalities)  # fmt: skip
        return self._solve_native(H, g, A, lower, upper, bounds, warm, active, equalities)

    def _solve_native(
        self,
        H: Array,
        g: Array,
        A: Array,
        lower: Array,
        upper: Array,
        bounds: bool,
        warm: bool,
        active: NDArray[np.int32] | None,
        equalities: int,
    ) -> QPSolution:
        """:meth:`solve_stacked` through a :class:`~idcontrol.solvers.daqp_native.NativeQP` per problem size (the
        same warm start and retries, one compiled call)."""
        n, rows = g.shape[0], A.shape[0]
        key = (n, rows, bounds, equalities)
        qp = self._workspaces.get(key)
        if qp is None:
            qp = self._workspaces[key] = daqp_native.NativeQP(n, rows, bounds=bounds, equalities=equalities,
                                                              primal_tol=self.settings["primal_tol"],
                                                              iter_limit=self.settings["iter_limit"])  # fmt: skip
        given = _NO_FLAGS
        m = rows + (n if bounds else 0)
        if active is not None and len(active) == m:
            start, given = daqp_native.GIVEN, np.ascontiguousarray(active, dtype=np.int32)
        elif warm and self._last_key == key and self._lam is not None:
            start = daqp_native.WARM
        else:
            start = daqp_native.COLD
        exitflag, x, lam, iterations = daqp_native.solve_copied(qp, H, g, A, lower, upper, start, given)
        found = exitflag in EXIT_OPTIMAL
        self._last_key = key
        self._lam = lam if found else None
        return QPSolution(x=x, found=found, iterations=iterations, exitflag=exitflag)

    @property
    def last_active(self) -> NDArray[np.int32] | None:
        """Active-set flags of the last successful solve (bounds first, then rows of C)."""
        if self._model is not None:
            return self._model.last_active
        return None if self._lam is None else (self._lam != 0.0).astype(np.int32)

    def forget(self) -> None:
        """Drop the warm start (the next solve starts cold)."""
        if self._model is not None:
            self._model.forget()
        self._last_key = None
        self._lam = None
