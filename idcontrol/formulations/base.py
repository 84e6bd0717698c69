"""The interface every inverse-dynamics formulation implements, and the helpers they share.

The reduced dynamics the contact formulations start from are in :mod:`idcontrol.formulations.reduced`.
All solvers here work in *force* units: an impulse is ``Δt ×`` the force.
"""

from __future__ import annotations

import time
from abc import ABC, abstractmethod
from collections.abc import Hashable, Sequence
from typing import ClassVar

import numpy as np
from numpy.typing import NDArray

from idcontrol.errors import ConfigError
from idcontrol.formulations.certificate import ContactModel
from idcontrol.formulations.consistency import repair_desired_velocity
from idcontrol.formulations.problem import ContactProblem, SolveResult
from idcontrol.solvers.qp import DenseQP

Array = NDArray[np.float64]


class Formulation(ABC):
    """An inverse-dynamics formulation: ``solve(problem) -> SolveResult``.

    Instances keep their warm-start state (keyed by contact identity) between
    calls; :meth:`reset` forgets it.
    """

    name: ClassVar[str]
    #: Whether solve() reads ``problem.sensed_force`` (otherwise the controller does not build it).
    uses_sensed_forces: ClassVar[bool] = False
    #: True when the model enforces S v⁺ = T v⁺ = 0 (reported in the residuals).
    no_slip: ClassVar[bool] = False
    #: What the formulation claims of its contacts: every found result is checked against it
    #: (:mod:`idcontrol.formulations.certificate`).
    contact_model: ContactModel = ContactModel()  # (an instance's, where its options change the claim)

    @abstractmethod
    def solve(self, problem: ContactProblem) -> SolveResult:
        """Compute torques and predicted contact forces for ``problem``."""

    def reset(self) -> None:  # noqa: B027 - optional hook: stateless formulations keep the default
        """Forget warm-start state."""

    def prepare_repair(self, problem: ContactProblem) -> None:
        """Set up the repair QP's workspace for ``problem``'s sizes (its first use costs a set-up that a warm-up,
        not a tick, should pay); the repair's answer is discarded."""
        if problem.n:
            zeros = np.zeros(problem.n)
            repair_desired_velocity(problem, zeros, zeros, zeros, no_slip=self.no_slip, qp=self.repair_qp)

    @property
    def repair_qp(self) -> DenseQP:
        """The Section 4.5 repair's QP workspaces (:func:`~idcontrol.formulations.consistency.repair_desired_velocity`):
        DAQP's set-up kept per problem size from one tick to the next, with DAQP's own tolerance (1e-6) and cap."""
        qp = self.__dict__.get("_repair_qp")
        if qp is None:
            qp = self._repair_qp = DenseQP(primal_tol=1e-6, iter_limit=10000)
        return qp

    # ---------------------------------------------------------------- helpers for subclasses
    def _result(
        self,
        problem: ContactProblem,
        v_next: Array,
        tau: Array,
        f_normal: Array,
        f_s: Array,
        f_t: Array,
        *,
        iterations: int,
        message: str,
        started: float,
        consistency_repaired: bool = False,
        fallback: str | None = None,
    ) -> SolveResult:
        p = problem
        result = SolveResult(
            formulation=self.name,
            found=True,
            tau=tau,
            v_next=v_next,
            f_normal=f_normal,
            f_s=f_s,
            f_t=f_t,
            contact_ids=p.ids(),
            iterations=iterations,
            problem=p,
            no_slip=self.no_slip,
            consistency_repaired=consistency_repaired,
            fallback=fallback,
            message=message,
        )
        result.timings["solve"] = time.perf_counter() - started
        return result


def check_nonnegative(formulation: str, **options: float) -> None:
    """ConfigError naming the option unless each of ``options`` (a tolerance, a ridge, a spread) is >= 0 (NaN
    is not)."""
    for name, value in options.items():
        if not value >= 0.0:
            raise ConfigError(f"{formulation} option {name} must be >= 0, got {value!r}")


def map_warm_start(
    previous_ids: Sequence[Hashable], previous_active: Sequence[int], ids: Sequence[Hashable]
) -> list[int]:
    """Translate active indices of the previous tick to this tick's indices, by contact identity.

    Contacts that disappeared are dropped; the order of the rest is kept.
    """
    if len(previous_active) == 0:  # a list or an index array
        return []
    index = {cid: i for i, cid in enumerate(ids)}
    out = []
    for j in previous_active:
        if j < len(previous_ids):
            i = index.get(previous_ids[j])
            if i is not None:
                out.append(i)
    return out
