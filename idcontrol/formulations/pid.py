"""Baseline: joint-space PID, with no model of the robot or its contacts.

τ = K_p ∘ (q_ref − q) + K_d ∘ (q̇_ref − q̇) + K_i ∘ ∫(q_ref − q) dt on the
actuated joints, the paper's reference controller (Fig. 10) without its
planning-level balance terms. It predicts no contact force.
"""

from __future__ import annotations

import time

import numpy as np

from idcontrol.formulations.base import Formulation
from idcontrol.formulations.certificate import ContactModel
from idcontrol.formulations.problem import ContactProblem, Residuals, SolveResult, failed_result


class PID(Formulation):
    """Joint PID from the problem's tracking errors and gains."""

    name = "pid"
    contact_model = ContactModel(friction="none", rigid=False, dynamics=False)  # joint-space torques only

    def solve(self, problem: ContactProblem) -> SolveResult:
        started = time.perf_counter()
        p = problem
        if p.position_error is None or p.velocity_error is None or p.kp is None or p.kd is None:
            return failed_result(p, self.name, "pid needs position/velocity errors and gains in the problem")
        tau = p.kp * p.position_error + p.kd * p.velocity_error
        if p.ki is not None and p.integral_error is not None:
            tau = tau + p.ki * p.integral_error
        n = p.n
        zeros = np.zeros(n)
        result = SolveResult(
            formulation=self.name,
            found=True,
            tau=tau,
            v_next=np.full(p.m, np.nan),  # the PID has no model to predict v⁺
            f_normal=zeros,
            f_s=zeros.copy(),
            f_t=zeros.copy(),
            contact_ids=p.ids(),
            _residuals=Residuals(),
            message="joint PID (no contact prediction)",
        )
        result.timings["solve"] = time.perf_counter() - started
        return result
