"""ID(tᵢ)_LCP,∞: inverse dynamics with rigid, non-impacting, no-slip contact (paper Section 4).

Per tick (spec section 3.11, in the reduced coordinates of
:mod:`idcontrol.formulations.base`):

1. Algorithm 1 keeps the tangential rows J = [P; S_𝒮; T_𝒯] that leave the
   equality block non-singular (:func:`idcontrol.solvers.ppm.find_indices`).
2. With J eliminated the normal impulses solve the symmetric PSD
   LCP(N v* + φ/Δt, N Γ_J Nᵀ); Algorithm 2 (:func:`idcontrol.solvers.ppm.ppm`)
   solves it, warm-started from the previous tick's active contacts (matched by
   contact identity, so torques do not jump between equally valid force
   distributions). Algorithm 2 stalls when an entering contact is dependent on
   the active ones (more candidate contacts than free DoFs); it then falls back
   to a primal active-set method on the same convex QP (warm-started from the
   same set), and last to regularized Lemke. The result names the fallback.
3. v⁺, the tangential impulses and τ follow by linear algebra; the Section
   4.5 check repairs q̇_des if a dropped tangential row or a contact is violated.
"""

from __future__ import annotations

import time
from functools import cache

import numpy as np

from idcontrol.errors import ConfigError
from idcontrol.formulations.base import Formulation, ReducedDynamics, map_warm_start
from idcontrol.formulations.consistency import needs_repair, repair_desired_velocity
from idcontrol.problem import ContactProblem, SolveResult, failed_result
from idcontrol.solvers.kernels import noslip_finish, noslip_setup, refine_normal_forces
from idcontrol.solvers.lemke import lemke_regularized
from idcontrol.solvers.ppm import active_set, ppm


class NoSlipLCP(Formulation):
    """No-slip LCP with Find-Indices and warm-started modified principal pivoting.

    Parameters
    ----------
    rank_tol : relative tolerance of Algorithm 1's independence test.
    tol : absolute LCP tolerance, m/s².
    repair : run the Section 4.5 consistency repair when needed.
    spread : ε ≥ 0, relative Tikhonov weight on the normal impulses (default 0: the paper's LCP).
        Standing on more feet than the no-slip constraints need, the LCP has a whole set of
        solutions and Algorithm 2 returns a vertex of it (two diagonal feet carrying a quadruped);
        a compliant world (MuJoCo, a real floor) shares the load instead. With ε > 0 the LCP matrix
        becomes BᵀB + ε·mean(diag BᵀB)·I, whose unique solution tends to the least-norm solution of
        the original LCP as ε → 0; complementarity then holds to ε·f.
    """

    name = "noslip_lcp"
    no_slip = True

    def __init__(self, *, rank_tol: float = 1e-8, tol: float = 1e-10, repair: bool = True, spread: float = 0.0) -> None:
        if not spread >= 0.0:
            raise ConfigError(f"noslip_lcp option spread must be >= 0, got {spread!r}")
        self.spread = float(spread)
        self.rank_tol = rank_tol
        self.tol = tol
        self.repair = repair
        _load_fallback_kernels()
        self.reset()

    def reset(self) -> None:
        self._previous_ids: tuple = ()
        self._previous_active: list[int] = []

    def solve(self, problem: ContactProblem) -> SolveResult:
        started = time.perf_counter()
        p = problem
        red = ReducedDynamics(p)
        n, dt = p.n, p.dt
        ids = p.ids()
        # Algorithm 1 on the whitened tangential columns (S₁, T₁, S₂, ...), then v* and N Γ_J Nᵀ = BᵀB
        sel, Q, R, C_a, x_star, B, r = noslip_setup(red.N_w, red.S_w, red.T_w, red.x0, p.N, p.S, p.T, red.a,
                                                    p.qd_des, p.phi, dt, self.rank_tol)  # fmt: skip
        warm = map_warm_start(self._previous_ids, self._previous_active, ids)
        if self.spread > 0.0 and n:  # BᵀB + εI = [B; √ε I]ᵀ [B; √ε I]: Algorithm 2 keeps working on a factor
            weight = self.spread * max(float(np.einsum("ij,ij->", B, B)) / n, np.finfo(float).tiny)
            B = np.vstack([B, np.sqrt(weight) * np.eye(n)])
        lcp = ppm(B, r, warm, tol=self.tol)
        fallback = None
        if not lcp.found:
            fallback = f"active set (PPM: {lcp.message})"
            lcp = active_set(B, r, warm, tol=self.tol)
        if not lcp.found:
            fallback = f"lemke (active set: {lcp.message})"
            lcp = lemke_regularized(B.T @ B, r, original_tol=1e-7)
            if lcp.regularization:
                fallback += f", regularized eps={lcp.regularization:.1e}"
        unsolvable = not lcp.found
        if unsolvable:
            # Spec item 25: inconsistent q̇_des can make the LCP unsolvable; the contact impulses are
            # then set to zero and the Section 4.5 repair must restore the constraints.
            if not self.repair:
                self.reset()
                out = failed_result(p, self.name, f"no-slip LCP unsolved: {lcp.message}", lcp.pivots)
                out.fallback = fallback
                return out
            fallback = f"no LCP solution ({lcp.message}); zero normal impulses, then repair"
            lcp.z = np.zeros(n)
            lcp.active = []
        f_normal = lcp.z
        B = B[: red.nb]  # without the spreading rows, if any
        if lcp.found and self.spread == 0.0:  # complementarity in the robot's coordinates, not only the whitened ones
            active = np.flatnonzero(f_normal > 0.0)
            refine_normal_forces(f_normal, active, x_star, B, red.L_inv, p.N, p.phi, red.a, red.u, p.qd_des, dt)
        v_next, tau, f_s, f_t = noslip_finish(f_normal, x_star, B, red.x0, red.N_w, Q, R, sel, C_a, p.M,
                                              red.kappa, red.L_inv, p.N, red.a, red.u, p.qd_des, dt)  # fmt: skip
        self._previous_ids = ids
        self._previous_active = [i for i in lcp.active if f_normal[i] > 0.0]

        repaired = False
        message = f"solved ({len(sel)} tangential rows kept of {2 * n})"
        if unsolvable or (self.repair and needs_repair(p, v_next, no_slip=True)):
            fix = repair_desired_velocity(p, f_normal, f_s, f_t, no_slip=True)
            if not fix.found:
                out = failed_result(p, self.name, f"inconsistent q̇_des and {fix.message}", lcp.pivots)
                out.fallback = fallback
                return out
            v_next, tau, repaired = fix.v_next, fix.tau, True
            message += f"; q̇_des repaired (max change {fix.qd_change:.3g})"
        return self._result(
            p, v_next, tau, f_normal, f_s, f_t, iterations=lcp.pivots, message=message, started=started,
            consistency_repaired=repaired, fallback=fallback,
        )  # fmt: skip


@cache
def _load_fallback_kernels() -> None:
    """Load the compiled LCP kernels now, the fallback's too: a standing warm-up tick may not reach it,
    and a first call in the control loop would pay their loading (or compiling) there."""
    B, r = np.array([[1.0, 1.0]]), np.array([-1.0, -1.0])
    ppm(B, r)
    active_set(B, r)
