"""ID(tᵢ)^one-stage_QP,μ: Stage I of the two-stage QP made strictly convex by regularization.

The Stage I Hessian Rᵀ Γ_P R has rank ≤ nb, so Stage I alone has a set of
optimal contact forces and a solver may jump between them from tick to tick
(torque chatter). Following Todorov (2014), the one-stage variant adds a
Tikhonov term ε·I to the Hessian with ε = ``regularization`` × (mean diagonal
of the Hessian), which selects the minimum-norm forces in the optimal set up to
O(ε) and makes them unique. The default 1e-6 keeps the energy error negligible;
larger values trade physical fidelity for smoothness. The solver is also
warm-started from the previous tick while the contact set is unchanged.
"""

from __future__ import annotations

import time

from idcontrol.formulations.base import Formulation, ReducedDynamics
from idcontrol.formulations.two_stage_qp import StageOne, _finish, _no_contact, solve_stage_one
from idcontrol.problem import ContactProblem, SolveResult, failed_result
from idcontrol.solvers.qp import DenseQP


class OneStageQP(Formulation):
    """Regularized Stage I only (no Stage II)."""

    name = "one_stage_qp"

    def __init__(self, *, regularization: float = 1e-6, repair: bool = True) -> None:
        super().__init__()
        self.regularization = regularization
        self.repair = repair
        self._qp = DenseQP()
        self.reset()

    def reset(self) -> None:
        self._previous_ids: tuple = ()
        self._qp.forget()

    def solve(self, problem: ContactProblem) -> SolveResult:
        started = time.perf_counter()
        p = problem
        if p.n == 0:
            return _no_contact(self, p, started)
        red = ReducedDynamics(p)
        stage = StageOne(p, red)
        warm = p.ids() == self._previous_ids
        z, iterations, status, relaxed = solve_stage_one(
            p, red, stage, self._qp, regularization=self.regularization, warm=warm
        )
        if z is None:
            self.reset()
            return failed_result(p, self.name, f"Stage I failed ({status})", iterations)
        self._previous_ids = p.ids()
        return _finish(self, p, red, stage, z, relaxed, iterations, f"regularized Stage I ({status})", started)
