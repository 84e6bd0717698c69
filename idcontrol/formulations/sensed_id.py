"""Baseline ID(tᵢ₋ₖ): inverse dynamics with *given* (sensed) contact forces.

The contact forces are not predicted but measured (in simulation: the forces
the simulator applied one or two steps earlier). With the generalized contact
force f_c (``problem.sensed_force``, N) fixed, the unactuated rows of the
dynamics give v⁺_u and the actuated rows the torque (retrieval formula (79)
of the paper with z set to the sensed impulses)::

    M_uu v⁺_u = −M_ua q̇_des − κ_u + Δt f_c,u,     τ = (M v⁺ + κ)_a / Δt − f_c,a
"""

from __future__ import annotations

import time

import numpy as np

from idcontrol.formulations.base import Formulation
from idcontrol.formulations.problem import ContactProblem, SolveResult, failed_result
from idcontrol.formulations.reduced import ReducedDynamics


class SensedID(Formulation):
    """Inverse dynamics with the sensed generalized contact force."""

    name = "sensed_id"
    uses_sensed_forces = True

    def solve(self, problem: ContactProblem) -> SolveResult:
        started = time.perf_counter()
        p = problem
        if p.sensed_force is None:
            return failed_result(p, self.name, "sensed_id needs sensed contact forces (none were given)")
        red = ReducedDynamics(p)
        x_next = red.x0 + p.dt * (red.L_inv @ p.sensed_force[p.unactuated])
        v_next = red.velocity(x_next)
        tau = red.torque(v_next, p.sensed_force[p.actuated])
        zeros = np.zeros(p.n)
        result = self._result(p, v_next, tau, zeros, zeros.copy(), zeros.copy(), iterations=0,
                              message="sensed contact forces", started=started)  # fmt: skip
        result.sensed = True  # the residuals then count the sensed force, not predicted per-contact forces
        return result
