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

from idcontrol.errors import ConfigError, ShapeError
from idcontrol.formulations.certificate import NO_TERMS, Certifier, ContactModel, Verdict, certificate_of
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
    #: Whether solve() reads the tracking errors and gains the controller sets as its ``input`` before each solve
    #: (the PID baseline's, :class:`~idcontrol.formulations.pid.PIDInput`).
    uses_tracking: ClassVar[bool] = False
    #: True when the model enforces S v⁺ = T v⁺ = 0 (reported in the residuals).
    no_slip: ClassVar[bool] = False
    #: What the formulation claims of its contacts: every found result is checked against it
    #: (:mod:`idcontrol.formulations.certificate`).
    contact_model: ContactModel = ContactModel()  # (an instance's, where its options change the claim)
    _certificate_terms: NDArray[np.float64] = NO_TERMS
    #: the certifier whose terms :attr:`certificate_terms` are (:meth:`certify_with`); None: none
    certifier: Certifier | None = None

    @property
    def certificate_terms(self) -> NDArray[np.float64]:
        """The certificate's claims and bounds (:meth:`~idcontrol.formulations.certificate.Certifier.terms`) that a
        compiled solve may check its answer with (the controller gives its certifier's); empty: none. Always a
        C-contiguous float64 vector, as the compiled solves' options declare it."""
        return self._certificate_terms

    @certificate_terms.setter
    def certificate_terms(self, terms: NDArray[np.float64]) -> None:
        terms = np.ascontiguousarray(terms, dtype=np.float64)  # the same array when it is one already
        if terms.ndim != 1:
            raise ShapeError("certificate_terms", (terms.size,), terms.shape)
        self._certificate_terms = terms
        self.certifier = None

    def certify_with(self, certifier: Certifier) -> None:
        """Certify each answer in the compiled solve with ``certifier``'s terms of this formulation's contact
        model; the verdicts say they were made under them (:meth:`Certifier.verdict` accepts only its own)."""
        self.certificate_terms = certifier.terms(self.contact_model)
        self.certifier = certifier

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
        checked: tuple[float, float, float] | None = None,
        asked: ContactProblem | None = None,
    ) -> SolveResult:
        """The found result of these forces (N), v⁺ and τ (N·m). ``checked``: the (code, value, bound) that
        :func:`~idcontrol.formulations.certificate.certify_in_solve` gave for exactly these arrays under
        :attr:`certificate_terms`, for the problem ``asked`` (default ``problem``: the one solve was given, where
        ``problem`` is the one solved)."""
        p = problem
        # positional, in SolveResult's field order: the one place a result is built in the tick (docs/benchmarks.md)
        out = SolveResult(
            self.name,
            True,
            tau,
            v_next,
            f_normal,
            f_s,
            f_t,
            p.ids(),
            iterations,
            consistency_repaired,
            fallback,
            message,
            {"solve": time.perf_counter() - started},
            p,
            self.no_slip,
        )
        if checked is not None and checked[0] >= 0.0:
            out.verdict = Verdict(
                certificate_of(*checked), self.certifier, self.contact_model, p if asked is None else asked
            )
        return out


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
