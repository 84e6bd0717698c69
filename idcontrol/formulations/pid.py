"""Baseline: joint-space PID, with no model of the robot or its contacts.

τ = K_p ∘ (q_ref − q) + K_d ∘ (q̇_ref − q̇) + K_i ∘ ∫(q_ref − q) dt on the
actuated joints, the paper's reference controller (Fig. 10) without its
planning-level balance terms. It predicts no contact force.

The tracking errors and gains are the PID's own input (:class:`PIDInput`, set by the controller each tick),
not part of the contact problem.
"""

from __future__ import annotations

import time
from dataclasses import dataclass

import numpy as np
from numpy.typing import NDArray

from idcontrol.formulations.base import Formulation
from idcontrol.formulations.certificate import ContactModel
from idcontrol.formulations.problem import ContactProblem, Residuals, SolveResult, failed_result

Array = NDArray[np.float64]


@dataclass(frozen=True)
class PIDInput:
    """One tick's tracking errors and the baseline's torque gains, all (nu,) on the actuated joints.

    Attributes
    ----------
    position_error : q_ref − q, rad.
    velocity_error : q̇_ref − q̇, rad/s.
    integral_error : ∫(q_ref − q) dt, rad·s; None: no integral term.
    kp, kd, ki : N·m/rad, N·m·s/rad, N·m/(rad·s).
    """

    position_error: Array
    velocity_error: Array
    integral_error: Array | None
    kp: Array
    kd: Array
    ki: Array


class PID(Formulation):
    """Joint PID from its :attr:`input`: the tracking errors and gains."""

    name = "pid"
    uses_tracking = True
    contact_model = ContactModel(friction="none", rigid=False, dynamics=False)  # joint-space torques only

    def __init__(self) -> None:
        #: this tick's errors and gains (the controller sets them before each solve); None: none given
        self.input: PIDInput | None = None

    def solve(self, problem: ContactProblem) -> SolveResult:
        started = time.perf_counter()
        p, given = problem, self.input
        if given is None:
            return failed_result(p, self.name, "pid needs position/velocity errors and gains (PID.input)")
        tau = given.kp * given.position_error + given.kd * given.velocity_error
        if given.integral_error is not None:
            tau = tau + given.ki * given.integral_error
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
