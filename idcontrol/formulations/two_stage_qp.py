"""ID(tᵢ)_QP,μ: the complementarity-free two-stage QP (paper Section 6, corrected per spec 5.3–5.8).

Stage I (maximal dissipation), with P v⁺ = q̇_des and the dynamics eliminated,
over z = [f_N; f_S+; f_S−; f_T+; f_T−] (5n, direction-major, forces in N)::

    minimize   ½ zᵀ Rᵀ Γ_P R z + zᵀ Rᵀ Γ_P (M v⁻ + Δt f_ext) / Δt        (= KE(v⁺)/Δt² + const)
    subject to N Γ_P R z ≥ −(N v* + φ/Δt)/Δt                           non-penetration
               z ≥ 0,   μᵢ f_N,i − Σ f_F,i ≥ 0  (finite μᵢ only; μ = ∞ drops the row: ID(tᵢ)_QP,∞)

In whitened coordinates Rᵀ Γ_P R = R̃ᵀR̃ with R̃ = [Ñ F̃] (nb × 5n), so the
Hessian has rank ≤ nb and Stage I is only convex: many z are optimal.

Stage II (minimum torque in the optimal set): every optimal z has the same
R̃ z, hence the same v⁺, so the optimal set is z₁ + W w with W an orthonormal
basis of null(R̃) (SVD with a tolerance; 14-dimensional for four contacts on a
floating base). Along it τ(w) = τ₁ − R_a W w, and Stage II solves::

    minimize   ½‖τ₁ − R_a W w‖² + ½ ρ ‖z₁ + W w‖²
    subject to z₁ + W w ≥ 0,  friction rows on z₁ + W w

which minimizes the true ‖τ‖² (spec item 11). The tiny ridge ρ (relative
``ridge`` × the Hessian's mean diagonal) only selects the smallest contact
forces among equal-torque solutions, making z unique; it cannot change the
Stage I objective, because W w never changes v⁺.

If Stage I is infeasible (q̇_des drives a contact into the ground), it is
re-solved without the non-penetration rows and the Section 4.5 repair restores
the constraint by changing q̇_des; the result says so.
"""

from __future__ import annotations

import time

import numpy as np
from numpy.typing import NDArray

from idcontrol.formulations.base import Formulation, ReducedDynamics, friction_split
from idcontrol.formulations.consistency import needs_repair, repair_desired_velocity
from idcontrol.problem import ContactProblem, SolveResult, failed_result
from idcontrol.solvers.qp import INFINITY, DenseQP

Array = NDArray[np.float64]


def friction_rows(mu: Array) -> Array:
    """(nf, 5n) rows μᵢ f_N,i − Σ f_F,i of the pyramid constraint, one per contact with finite μ."""
    n = len(mu)
    finite = np.flatnonzero(np.isfinite(mu))
    rows = np.arange(len(finite))
    C = np.zeros((len(finite), 5 * n))
    C[rows, finite] = mu[finite]
    for k in range(1, 5):
        C[rows, k * n + finite] = -1.0
    return C


def remap_active_set(
    flags: NDArray[np.int32] | None,
    previous_ids: tuple,
    previous_mu: Array,
    ids: tuple,
    mu: Array,
    *,
    with_normal: bool,
) -> NDArray[np.int32] | None:
    """Carry a QP's active-set flags to a new contact set, contact by contact (by identity, not index).

    Flag layout (as :class:`DenseQP` takes it): 5n per-component flags of z ≥ 0
    (direction-major), then n non-penetration rows (if ``with_normal``), then one
    friction row per contact with finite μ. New contacts start inactive.
    """
    n0 = len(previous_ids)
    finite0 = np.flatnonzero(np.isfinite(previous_mu))
    if flags is None or len(flags) != 5 * n0 + (n0 if with_normal else 0) + len(finite0):
        return None
    box0 = flags[: 5 * n0].reshape(5, n0)
    offset = 5 * n0
    normal0 = flags[offset : offset + n0] if with_normal else None
    offset += n0 if with_normal else 0
    friction0 = np.zeros(n0, dtype=np.int32)
    friction0[finite0] = flags[offset:]
    where = {cid: j for j, cid in enumerate(previous_ids)}
    n = len(ids)
    box = np.zeros((5, n), dtype=np.int32)
    normal = np.zeros(n, dtype=np.int32)
    friction = np.zeros(n, dtype=np.int32)
    for i, cid in enumerate(ids):
        j = where.get(cid)
        if j is not None:
            box[:, i] = box0[:, j]
            friction[i] = friction0[j]
            if normal0 is not None:
                normal[i] = normal0[j]
    parts = [box.ravel(), normal] if with_normal else [box.ravel()]
    return np.concatenate([*parts, friction[np.isfinite(mu)]])


class StageOne:
    """Stage I data of one problem, in force units (built once per tick)."""

    def __init__(self, problem: ContactProblem, red: ReducedDynamics) -> None:
        p = problem
        n, dt = p.n, p.dt
        self.n = n
        self.R_w = np.hstack([red.N_w, red.S_w, -red.S_w, red.T_w, -red.T_w])  # (nb, 5n)
        self.H = self.R_w.T @ self.R_w
        self.g = self.R_w.T @ (-(red.L_inv @ red.kappa[p.unactuated]) / dt)
        r_normal = red.normal_rate(red.x0)
        self.C_normal = red.N_w.T @ self.R_w  # (n, 5n)
        self.l_normal = -r_normal / dt
        self.C_friction = friction_rows(p.mu)
        a = p.actuated
        self.R_a = np.hstack([p.N[:, a].T, p.S[:, a].T, -p.S[:, a].T, p.T[:, a].T, -p.T[:, a].T])  # (nu, 5n)

    def constraints(self, with_normal: bool = True) -> tuple[Array, Array, Array]:
        if with_normal:
            C = np.vstack([self.C_normal, self.C_friction])
            l = np.concatenate([self.l_normal, np.zeros(len(self.C_friction))])
        else:
            C, l = self.C_friction, np.zeros(len(self.C_friction))
        return C, l, np.full(len(l), INFINITY)

    def velocity_and_torque(self, problem: ContactProblem, red: ReducedDynamics, z: Array) -> tuple[Array, Array]:
        x_next = red.x0 + problem.dt * (self.R_w @ z)
        v_next = red.velocity(x_next)
        contact = np.zeros(problem.m)
        contact[problem.actuated] = self.R_a @ z
        return v_next, red.torque(v_next, contact)


def solve_stage_one(
    problem: ContactProblem,
    red: ReducedDynamics,
    stage: StageOne,
    qp: DenseQP,
    *,
    regularization: float = 0.0,
    warm: bool,
    active: NDArray[np.int32] | None = None,
) -> tuple[Array | None, int, str, bool]:
    """Solve Stage I (optionally Tikhonov-regularized). Returns (z, iterations, status, normal rows dropped).

    ``warm``: start from the previous active set (same contacts); ``active``: a given starting active set.
    """
    nz = 5 * stage.n
    H = stage.H
    if regularization:
        H = H + regularization * max(float(np.trace(H)) / nz, 1e-12) * np.eye(nz)
    lb, ub = np.zeros(nz), np.full(nz, INFINITY)
    C, l, u = stage.constraints(with_normal=True)
    sol = qp.solve(H, stage.g, C, l, u, lb, ub, warm=warm, active=active)
    if sol.found:
        return np.maximum(sol.x, 0.0), sol.iterations, sol.status, False
    C, l, u = stage.constraints(with_normal=False)
    relaxed = qp.solve(H, stage.g, C if len(C) else None, l if len(C) else None, u if len(C) else None, lb, ub)
    if relaxed.found:
        return np.maximum(relaxed.x, 0.0), sol.iterations + relaxed.iterations, sol.status, True
    return None, sol.iterations + relaxed.iterations, f"{sol.status}/{relaxed.status}", True


class TwoStageQP(Formulation):
    """Two-stage QP: maximal dissipation, then minimum ‖τ‖ in Stage I's optimal set.

    Parameters
    ----------
    null_tol : relative singular-value tolerance for null(R̃).
    ridge : relative ridge ρ of Stage II (unique contact forces).
    repair : apply the Section 4.5 repair when Stage I is infeasible.
    warm_start : start both QPs from the previous tick's active sets, carried by
        contact identity. Off by default: with DAQP on the standing quadruped and
        Solo12 it *raised* the iteration count (28 vs 17 per tick at 4 contacts,
        76 vs 43 at 8) and the tick time; torque continuity comes from Stage II,
        whose optimal torque is unique, not from the warm start.
    """

    name = "two_stage_qp"

    def __init__(
        self, *, null_tol: float = 1e-9, ridge: float = 1e-7, repair: bool = True, warm_start: bool = False
    ) -> None:
        super().__init__()
        self.null_tol = null_tol
        self.ridge = ridge
        self.repair = repair
        self.warm_start = warm_start
        self._stage_one = DenseQP()
        self._stage_two = DenseQP()
        self.reset()

    def reset(self) -> None:
        self._previous_ids: tuple = ()
        self._previous_mu = np.zeros(0)
        self._stage_one.forget()
        self._stage_two.forget()

    def _carried(self, qp: DenseQP, problem: ContactProblem, with_normal: bool) -> NDArray[np.int32] | None:
        """The previous tick's active set of ``qp`` mapped onto this tick's contacts (None if unchanged)."""
        ids = problem.ids()
        if not self.warm_start or ids == self._previous_ids:
            return None  # cold, or same contacts in the same order: DenseQP reuses its own active set
        return remap_active_set(qp.last_active, self._previous_ids, self._previous_mu, ids, problem.mu,
                                with_normal=with_normal)  # fmt: skip

    def stage_one(self, problem: ContactProblem) -> tuple[Array | None, StageOne, ReducedDynamics, int, str, bool]:
        """Stage I alone: (z₁, data, reduced dynamics, iterations, status, normal rows dropped)."""
        red = ReducedDynamics(problem)
        stage = StageOne(problem, red)
        warm = self.warm_start and problem.ids() == self._previous_ids
        active = self._carried(self._stage_one, problem, with_normal=True)
        z, its, status, relaxed = solve_stage_one(problem, red, stage, self._stage_one, warm=warm, active=active)
        return z, stage, red, its, status, relaxed

    def solve(self, problem: ContactProblem) -> SolveResult:
        started = time.perf_counter()
        p = problem
        ids = p.ids()
        if p.n == 0:
            return _no_contact(self, p, started)
        z1, stage, red, iterations, status, relaxed = self.stage_one(p)
        if z1 is None:
            self.reset()
            return failed_result(p, self.name, f"Stage I failed ({status})", iterations)
        warm = self.warm_start and ids == self._previous_ids
        active = self._carried(self._stage_two, p, with_normal=False)
        self._previous_ids, self._previous_mu = ids, p.mu
        z, its2, message = self._stage_two_solve(stage, p, red, z1, warm, active)
        iterations += its2
        return _finish(self, p, red, stage, z, relaxed, iterations, message, started)

    def _stage_two_solve(
        self,
        stage: StageOne,
        p: ContactProblem,
        red: ReducedDynamics,
        z1: Array,
        warm: bool,
        active: NDArray[np.int32] | None = None,
    ) -> tuple[Array, int, str]:
        _, singular, vt = np.linalg.svd(stage.R_w, full_matrices=True)
        rank = int(np.sum(singular > self.null_tol * max(singular[0] if singular.size else 0.0, 1e-300)))
        W = vt[rank:].T  # (5n, k), orthonormal
        k = W.shape[1]
        if k == 0:
            return z1, 0, "Stage I solution is unique"
        _, tau1 = stage.velocity_and_torque(p, red, z1)
        RW = stage.R_a @ W
        H2 = RW.T @ RW
        rho = self.ridge * max(float(np.trace(H2)) / k, 1e-12)
        H2[np.diag_indices(k)] += rho
        g2 = -RW.T @ tau1 + rho * (W.T @ z1)
        C2 = np.vstack([W, stage.C_friction @ W])
        l2 = -np.concatenate([z1, stage.C_friction @ z1])
        sol = self._stage_two.solve(H2, g2, C2, l2, np.full(len(l2), INFINITY), warm=warm, active=active)
        if not sol.found:
            return z1, sol.iterations, f"Stage II failed ({sol.status}); Stage I forces used"
        return np.maximum(z1 + W @ sol.x, 0.0), sol.iterations, f"Stage II over a {k}-dimensional optimal set"


def _no_contact(formulation: Formulation, p: ContactProblem, started: float) -> SolveResult:
    red = ReducedDynamics(p)
    v_next = red.velocity(red.x0)
    tau = red.torque(v_next, np.zeros(p.m))
    empty = np.zeros(0)
    return formulation._result(p, v_next, tau, empty, empty, empty, iterations=0, message="no contacts",
                               started=started)  # fmt: skip


def _finish(
    formulation: Formulation,
    p: ContactProblem,
    red: ReducedDynamics,
    stage: StageOne,
    z: Array,
    relaxed: bool,
    iterations: int,
    message: str,
    started: float,
) -> SolveResult:
    n = p.n
    v_next, tau = stage.velocity_and_torque(p, red, z)
    f_normal = z[:n].copy()
    f_s, f_t = friction_split(n, z[n:])
    repaired = False
    if relaxed or needs_repair(p, v_next, no_slip=False):
        if not getattr(formulation, "repair", True):
            return failed_result(p, formulation.name, "desired accelerations penetrate a contact", iterations)
        fix = repair_desired_velocity(p, f_normal, f_s, f_t, no_slip=False)
        if not fix.found:
            return failed_result(p, formulation.name, f"inconsistent q̇_des and {fix.message}", iterations)
        v_next, tau, repaired = fix.v_next, fix.tau, True
        message += f"; q̇_des repaired (max change {fix.qd_change:.3g})"
    return formulation._result(p, v_next, tau, f_normal, f_s, f_t, iterations=iterations, message=message,
                               started=started, consistency_repaired=repaired)  # fmt: skip
