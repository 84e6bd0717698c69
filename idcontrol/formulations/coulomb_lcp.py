"""ID(tᵢ)_LCP,μ: rigid, non-impacting contact with linearized Coulomb friction (paper Section 5).

The mixed LCP (59) with v⁺ and τ eliminated through Γ_P (corrected LCP (64')
of the spec), over z = [f_N (n); f_F (4n, direction-major [S+; S−; T+; T−]); λ]::

    | ÑᵀÑ   ÑᵀF̃   0 | | f_N |   | N v* + φ/Δt |   | w_N |
    | F̃ᵀÑ   F̃ᵀF̃   E | | f_F | + | F v*        | = | w_F |   (force units, divided by Δt)
    | μ     −Eᵀ    0 | | λ   |   | 0           |   | w_λ |

The matrix is copositive; Lemke's algorithm with the lexicographic ratio test
solves it, with Tikhonov regularization (M + εI, ε growing geometrically) as
the documented fallback. Contacts with μ = ∞ have no λ row: their friction is
unbounded, i.e. they do not slip.

Lemke cannot be warm-started usefully, so successive ticks may pick different
but equally valid force distributions (torque chatter). For a few contacts,
``mindiff=True`` runs the paper's Algorithm 3: it enumerates every solution and
returns the one whose torque is closest to the previous tick's. Its cost grows
as 2^(6n): it is for analysis and small contact counts, not for 1 kHz control.
"""

from __future__ import annotations

import time

import numpy as np
from numpy.typing import NDArray

from idcontrol.formulations.base import Formulation, ReducedDynamics, friction_split
from idcontrol.formulations.consistency import needs_repair, repair_desired_velocity
from idcontrol.problem import ContactProblem, SolveResult, failed_result
from idcontrol.solvers.enumeration import mindiff
from idcontrol.solvers.lemke import lemke_regularized

Array = NDArray[np.float64]


def coulomb_lcp(problem: ContactProblem, red: ReducedDynamics) -> tuple[Array, Array, Array, Array]:
    """Build the Coulomb-friction LCP (force units).

    Returns
    -------
    Q : (5n + nf, 5n + nf) LCP matrix (nf = contacts with finite μ).
    q : LCP vector.
    F_w : (nb, 4n) whitened friction columns [S̃, −S̃, T̃, −T̃].
    F_a : (nu, 4n) actuated rows of Fᵀ.
    """
    p = problem
    n, dt = p.n, p.dt
    a = p.actuated
    F_w = np.hstack([red.S_w, -red.S_w, red.T_w, -red.T_w])
    R_w = np.hstack([red.N_w, F_w])
    finite = np.flatnonzero(np.isfinite(p.mu))
    nf = len(finite)
    size = 5 * n + nf
    Q = np.zeros((size, size))
    Q[: 5 * n, : 5 * n] = R_w.T @ R_w
    for k, i in enumerate(finite):
        rows = [n + i, 2 * n + i, 3 * n + i, 4 * n + i]
        Q[rows, 5 * n + k] = 1.0  # E
        Q[5 * n + k, rows] = -1.0  # −Eᵀ
        Q[5 * n + k, i] = p.mu[i]  # μ
    x0 = red.x0
    s_rate = p.S[:, a] @ p.qd_des + red.S_w.T @ x0
    t_rate = p.T[:, a] @ p.qd_des + red.T_w.T @ x0
    q = np.concatenate([red.normal_rate(x0), s_rate, -s_rate, t_rate, -t_rate, np.zeros(nf)]) / dt
    F_a = np.hstack([p.S[:, a].T, -p.S[:, a].T, p.T[:, a].T, -p.T[:, a].T])
    return Q, q, F_w, F_a


class CoulombLCP(Formulation):
    """Coulomb-friction LCP solved by Lemke (optionally MINDIFF for few contacts).

    Parameters
    ----------
    mindiff : use Algorithm 3 when the problem has at most ``mindiff_max_contacts`` contacts.
    repair : run the Section 4.5 consistency repair when needed.
    """

    name = "coulomb_lcp"

    def __init__(self, *, mindiff: bool = False, mindiff_max_contacts: int = 2, repair: bool = True) -> None:
        self.mindiff = mindiff
        self.mindiff_max_contacts = mindiff_max_contacts
        self.repair = repair
        self.reset()

    def reset(self) -> None:
        self._previous_tau: Array | None = None

    def solve(self, problem: ContactProblem) -> SolveResult:
        started = time.perf_counter()
        p = problem
        n, dt = p.n, p.dt
        red = ReducedDynamics(p)
        Q, q, F_w, F_a = coulomb_lcp(p, red)
        N_a = p.N[:, p.actuated].T

        def velocity_and_torque(z: Array) -> tuple[Array, Array]:
            f_normal, f_friction = z[:n], z[n : 5 * n]
            x_next = red.x0 + dt * (red.N_w @ f_normal + F_w @ f_friction)
            v_next = red.velocity(x_next)
            return v_next, red.torque(v_next, N_a @ f_normal + F_a @ f_friction)

        fallback = None
        if self.mindiff and 0 < n <= self.mindiff_max_contacts and self._previous_tau is not None:
            previous = self._previous_tau
            lcp, _distance = mindiff(Q, q, lambda z: velocity_and_torque(z)[1], previous)
            fallback = "mindiff" if lcp.found else None
        else:
            lcp = lemke_regularized(Q, q, original_tol=1e-7)
        unsolvable = not lcp.found
        if unsolvable:
            if not self.repair:
                self.reset()
                return failed_result(p, self.name, f"Coulomb LCP unsolved: {lcp.message}", lcp.pivots)
            # Spec item 25: inconsistent q̇_des can leave the LCP without solution; the impulses are set
            # to zero and the Section 4.5 repair must restore non-penetration by changing q̇_des.
            fallback = f"no LCP solution ({lcp.message}); zero impulses, then repair"
            lcp.z = np.zeros(len(q))
        elif lcp.regularization:
            fallback = f"lemke regularized eps={lcp.regularization:.1e}"
        z = lcp.z
        v_next, tau = velocity_and_torque(z)
        f_normal = z[:n].copy()
        f_s, f_t = friction_split(n, z[n : 5 * n])
        repaired = False
        message = f"Lemke: {lcp.message}"
        if unsolvable or (self.repair and needs_repair(p, v_next, no_slip=False)):
            fix = repair_desired_velocity(p, f_normal, f_s, f_t, no_slip=False)
            if not fix.found:
                return failed_result(p, self.name, f"inconsistent q̇_des and {fix.message}", lcp.pivots)
            v_next, tau, repaired = fix.v_next, fix.tau, True
            message += f"; q̇_des repaired (max change {fix.qd_change:.3g})"
        self._previous_tau = tau.copy()
        return self._result(p, v_next, tau, f_normal, f_s, f_t, iterations=lcp.pivots, message=message,
                            started=started, consistency_repaired=repaired, fallback=fallback)  # fmt: skip
