"""DAQP through its Python extension (``daqp.Model``): one persistent workspace per problem size.

The path :class:`~idcontrol.solvers.qp.DenseQP` takes when DAQP's C API cannot be called from compiled code
(:mod:`idcontrol.solvers.daqp_native`), and the reference that path's self-check compares against. A
:class:`ModelQP` is the Python counterpart of a :class:`~idcontrol.solvers.daqp_native.NativeQP`: the same start
and retries (:mod:`idcontrol.solvers.daqp_start`), the same answers.
"""

from __future__ import annotations

from dataclasses import dataclass

import daqp
import numpy as np
from numpy.typing import NDArray

from idcontrol.solvers.daqp_start import GIVEN, LOOSE_FACTOR, RETRY_COLD, RETRY_NONE, optimal, retry_after, start_flags

Array = NDArray[np.float64]
EXIT_OPTIMAL = (1, 2)  # optimal, optimal with soft constraints untouched


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
    """One ``daqp.Model`` workspace for QPs of one size: min ½ xᵀHx + gᵀx s.t. lower ≤ [x; A x] ≤ upper
    (``bounds``) or lower ≤ A x ≤ upper, the last ``equalities`` rows of A equalities A x = upper.

    Parameters as :class:`~idcontrol.solvers.daqp_native.NativeQP`'s; DAQP is set up at the first solve.
    """

    def __init__(
        self,
        n: int,
        rows: int,
        *,
        bounds: bool = True,
        equalities: int = 0,
        primal_tol: float = 1e-8,
        iter_limit: int = 1000,
    ) -> None:
        self.n, self.rows, self.equalities = n, rows, equalities
        self.m = rows + (n if bounds else 0)
        self.settings = {"primal_tol": primal_tol, "iter_limit": iter_limit}
        self._model: daqp.Model | None = None
        self._lam = np.zeros(self.m)  # the multipliers of the last found solve (when _warm_ok)
        self._warm_ok = False

    def solve_stacked(
        self, H: Array, g: Array, A: Array, lower: Array, upper: Array, start: int, given: NDArray[np.int32]
    ) -> tuple[int, Array, Array, int]:
        """(exit flag, x (n,), λ (m,), iterations) of the QP with data H (n, n), g (n,), A (rows, n), lower and
        upper (m,), started as ``start`` (:data:`~idcontrol.solvers.daqp_start.COLD`, ``WARM`` from this
        workspace's last found solve, or ``GIVEN`` the flags ``given`` (m,)), as
        :func:`~idcontrol.solvers.daqp_native.solve_copied` answers for a NativeQP."""
        first_equality = self.m - self.equalities
        sense = np.zeros(self.m, dtype=np.int32)
        if start == GIVEN:
            count = min(given.shape[0], self.m)
            sense[:count] = given[:count]
        start_flags(sense, self._lam, self._warm_ok, start, first_equality)
        model = self._model
        if model is None:
            model = daqp.Model()
            exitflag, _ = model.setup(H, g, A, upper, lower, sense)
            if exitflag < 0:  # rejected at set-up (more equality rows than variables): set up again next time
                self._warm_ok = False
                return exitflag, np.full(self.n, np.nan), np.zeros(self.m), 0
            model.settings = self.settings
            self._model = model
        elif self.rows:
            model.update(H=H, f=g, A=A, bupper=upper, blower=lower, sense=sense)
        else:  # DAQP's update indexes A's first row: with no general constraints leave A out
            model.update(H=H, f=g, bupper=upper, blower=lower, sense=sense)
        x, _, exitflag, info = model.solve()
        retry = retry_after(exitflag, RETRY_NONE, sense, first_equality)
        while retry != RETRY_NONE:
            if retry == RETRY_COLD:
                model.update(sense=sense)
                x, _, exitflag, info = model.solve()
            else:
                model.settings = {**self.settings, "primal_tol": LOOSE_FACTOR * self.settings["primal_tol"]}
                x, _, exitflag, info = model.solve()
                model.settings = self.settings
            retry = retry_after(exitflag, retry, sense, first_equality)
        lam = np.ascontiguousarray(info["lam"], dtype=np.float64)
        self._warm_ok = optimal(exitflag)
        if self._warm_ok:
            self._lam = lam
        return exitflag, x, lam, info["iterations"]
