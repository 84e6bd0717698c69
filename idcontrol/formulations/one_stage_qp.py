"""ID(tᵢ)^one-stage_QP,μ: Stage I of the two-stage QP made strictly convex by regularization.

The Stage I Hessian Rᵀ Γ_P R has rank ≤ nb, so Stage I alone has a set of
optimal contact forces and a solver may jump between them from tick to tick
(torque chatter). Following Todorov (2014), the one-stage variant adds a
Tikhonov term ε·I to the Hessian with ε = ``regularization`` × (mean diagonal
of the Hessian), which selects the minimum-norm forces in the optimal set up to
O(ε) and makes them unique. The default 1e-6 keeps the energy error negligible;
larger values trade physical fidelity for smoothness. ``warm_start=True`` also
starts the QP from the previous tick's active set, carried by contact identity
(off by default: with DAQP it measured slower, see :class:`TwoStageQP`). ``dissipation`` is Stage I's
objective, as for :class:`TwoStageQP`.
"""

from __future__ import annotations

import time

import numpy as np

from idcontrol.formulations.base import Formulation, check_nonnegative
from idcontrol.formulations.certificate import ContactModel
from idcontrol.formulations.problem import ContactProblem, SolveResult, failed_result
from idcontrol.formulations.reduced import reduce
from idcontrol.formulations.two_stage_qp import (
    StageOne,
    check_dissipation,
    finish,
    no_contact,
    remap_active_set,
    solve_stage_one,
)
from idcontrol.solvers.qp import DenseQP


class OneStageQP(Formulation):
    """Regularized Stage I only (no Stage II)."""

    name = "one_stage_qp"
    contact_model = ContactModel(friction="pyramid")

    def __init__(
        self, *, regularization: float = 1e-6, repair: bool = True, warm_start: bool = False, dissipation: str = "world"
    ) -> None:
        check_nonnegative(self.name, regularization=regularization)
        self.dissipation = check_dissipation(dissipation)
        self.regularization = regularization
        self.repair = repair
        self.warm_start = warm_start
        self._qp = DenseQP()
        self.reset()

    def reset(self) -> None:
        self._previous_ids: tuple = ()
        self._previous_mu = np.zeros(0)
        self._qp.forget()

    def solve(self, problem: ContactProblem) -> SolveResult:
        started = time.perf_counter()
        p = problem
        if p.n == 0:
            return no_contact(self, p, started)
        red = reduce(p)
        stage = StageOne(p, red, self.dissipation)
        warm = self.warm_start and p.ids() == self._previous_ids
        active = None
        if self.warm_start and not warm:  # carry the active set contact by contact
            active = remap_active_set(
                self._qp.last_active, self._previous_ids, self._previous_mu, p.ids(), p.mu, stage_one=True
            )
        z, iterations, status, relaxed = solve_stage_one(
            p, red, stage, self._qp, regularization=self.regularization, warm=warm, active=active
        )
        if z is None:
            self.reset()
            return failed_result(p, self.name, f"Stage I failed ({status})", iterations)
        self._previous_ids, self._previous_mu = p.ids(), p.mu
        v_next, tau = stage.velocity_and_torque(p, red, z)
        return finish(
            self, p, z, v_next, tau, relaxed, iterations, f"regularized Stage I ({status})", started, repair=self.repair
        )
