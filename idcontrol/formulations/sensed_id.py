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
from numba import njit

from idcontrol.arrays import IN_VECTOR
from idcontrol.formulations.base import Formulation
from idcontrol.formulations.certificate import ContactModel
from idcontrol.formulations.problem import ContactProblem, SolveResult, failed_result
from idcontrol.formulations.reduced import RECORD, reduce, velocity_and_inertial_torque


class SensedID(Formulation):
    """Inverse dynamics with the sensed generalized contact force."""

    name = "sensed_id"
    contact_model = ContactModel(friction="none", rigid=False)  # the measured forces: no model of its own
    uses_sensed_forces = True

    def solve(self, problem: ContactProblem) -> SolveResult:
        started = time.perf_counter()
        p = problem
        if p.sensed_force is None:
            return failed_result(p, self.name, "sensed_id needs sensed contact forces (none were given)")
        v_next, tau = sensed_velocity_and_torque(reduce(p), np.ascontiguousarray(p.sensed_force, dtype=float))
        zeros = np.zeros(p.n)
        result = self._result(
            p,
            v_next,
            tau,
            zeros,
            zeros.copy(),
            zeros.copy(),
            iterations=0,
            message="sensed contact forces",
            started=started,
        )
        result.sensed = True  # the residuals then count the sensed force, not predicted per-contact forces
        return result


@njit((RECORD, IN_VECTOR), cache=True)
def sensed_velocity_and_torque(red, sensed_force):
    """v⁺ (m,) and τ (nu,), N·m, with the generalized contact force ``sensed_force`` (m,), N, held fixed:
    x⁺ = x₀ + Δt L⁻¹ f_c,u, v⁺_u = L⁻ᵀ x⁺, τ = (M_a v⁺ + κ_a)/Δt − f_c,a."""
    L_inv, u, a = red.L_inv, red.u, red.a
    nb = u.shape[0]
    x = np.empty(nb)
    for i in range(nb):
        s = 0.0
        for k in range(i + 1):
            s += L_inv[i, k] * sensed_force[u[k]]
        x[i] = red.x0[i] + red.dt * s
    v, tau = velocity_and_inertial_torque(red, x)
    for j in range(a.shape[0]):
        tau[j] -= sensed_force[a[j]]
    return v, tau
