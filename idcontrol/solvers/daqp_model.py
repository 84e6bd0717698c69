"""DAQP through its Python extension (``daqp.Model``): one persistent workspace per problem size, warm-started.

The path :class:`~idcontrol.solvers.qp.DenseQP` takes when DAQP's C API cannot be called from compiled code
(:mod:`idcontrol.solvers.daqp_native`), and the reference that path's self-check compares against.
"""

from __future__ import annotations

from dataclasses import dataclass

import daqp
import numpy as np
from numpy.typing import NDArray

Array = NDArray[np.float64]
EXIT_OPTIMAL = (1, 2)  # optimal, optimal with soft constraints untouched
_EQUALITY = 5  # DAQP's sense flag of an equality row


@dataclass
class QPSolution:
    """Primal solution and status of a dense QP solve."""

    x: Array
    found: bool
    iterations: int
    exitflag: int

    @property
    def status(self) -> str:
        return f"daqp exit {self.exitflag}"


class ModelQP:
    """``daqp.Model`` workspaces per problem size (variables, rows, box bounds), with a warm start from the last
    found solve of the same size (see :meth:`~idcontrol.solvers.qp.DenseQP.solve_stacked`)."""

    def __init__(self, settings: dict[str, float]) -> None:
        self.settings = settings
        self._workspaces: dict[tuple[int, int, bool], daqp.Model] = {}
        self._last_key: tuple[int, int, bool] | None = None
        self._lam: Array | None = None  # multipliers of the last successful solve

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
        """:meth:`~idcontrol.solvers.qp.DenseQP.solve_stacked` through ``daqp.Model``."""
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
                return QPSolution(x=np.full(g.shape[0], np.nan), found=False, iterations=0, exitflag=exitflag)
            model.settings = self.settings
            self._workspaces[key] = model
        elif A.shape[0]:
            model.update(H=H, f=g, A=A, bupper=upper, blower=lower, sense=sense)
        else:  # DAQP's update indexes A's first row: with no general constraints leave A out
            model.update(H=H, f=g, bupper=upper, blower=lower, sense=sense)
        x, _, exitflag, info = model.solve()
        if exitflag not in EXIT_OPTIMAL and sense[:first_equality].any():  # a stale warm start: retry cold
            sense[:first_equality] = 0
            model.update(sense=sense)
            x, _, exitflag, info = model.solve()
        if exitflag not in EXIT_OPTIMAL:
            # DAQP can declare a degenerate but feasible problem (many constraints active at the
            # solution) infeasible at a tight tolerance; one retry at 100x the tolerance settles it.
            model.settings = {**self.settings, "primal_tol": 100.0 * self.settings["primal_tol"]}
            x, _, exitflag, info = model.solve()
            model.settings = self.settings
        found = exitflag in EXIT_OPTIMAL
        self._last_key = key
        self._lam = info["lam"] if found else None  # a copy; the flags are derived only when asked for
        return QPSolution(x=x, found=found, iterations=info["iterations"], exitflag=exitflag)

    @property
    def last_active(self) -> NDArray[np.int32] | None:
        """Active-set flags of the last successful solve (bounds first, then rows)."""
        return None if self._lam is None else (self._lam != 0.0).astype(np.int32)

    def forget(self) -> None:
        """Drop the warm start (the next solve starts cold)."""
        self._last_key = None
        self._lam = None
