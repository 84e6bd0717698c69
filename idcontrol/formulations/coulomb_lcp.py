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

Standing on more contacts than it needs, the robot makes this LCP degenerate: Lemke returns a vertex of its
solution set (load on two diagonal feet, a humanoid on one corner of one sole). The ``spread`` option (1e-2 by
default; 0 is the paper's method, :data:`PAPER_OPTIONS`) regularizes the force block so that its solution is unique
and shares the load, then answers the exact solution nearest to it (see :class:`CoulombLCP`).

Lemke cannot be warm-started usefully, so successive ticks may pick different
but equally valid force distributions (torque chatter). For a few contacts,
``mindiff=True`` runs the paper's Algorithm 3: it enumerates every solution and
returns the one whose torque is closest to the previous tick's. Its cost grows
as 2^(6n): it is for analysis and small contact counts, not for 1 kHz control.
"""

from __future__ import annotations

import math
import time

import numpy as np
from numba import njit, types
from numpy.typing import NDArray

from idcontrol.arrays import IN_MATRIX, IN_VECTOR, MATRIX, VECTOR, boolean, float64, split
from idcontrol.formulations.base import Formulation, check_nonnegative
from idcontrol.formulations.certificate import UNCHECKED, ContactModel, certify_in_solve
from idcontrol.formulations.consistency import (
    REPAIR_TOL,
    RepairWorkspaces,
    repair_native,
    repair_of_answer,
)
from idcontrol.formulations.problem import ContactProblem, SolveResult, failed_result
from idcontrol.formulations.record import PROBLEM
from idcontrol.formulations.reduced import RECORD, ReducedDynamics, _reduce, min_gap_rate_of, velocity_and_torque
from idcontrol.solvers.daqp_native import RECORD as NATIVE_QP
from idcontrol.solvers.dense import gram_by_loops
from idcontrol.solvers.enumeration import mindiff
from idcontrol.solvers.lemke import (
    SPREAD_UNSOLVABLE,
    compiled_summary,
    lemke_message,
    lemke_regularized_kernel,
    regularized_message,
    settle_spread,
)

Array = NDArray[np.float64]


@njit((RECORD,), cache=True)
def coulomb_lcp_data(red):
    """The Coulomb LCP over z = [f_N; f_S+; f_S−; f_T+; f_T−; λ] in force units.

    From R̃ = [Ñ S̃ T̃] (nb, 3n) and R = [N; S; T] (3n, m): Q (5n + nf)² with the Gram block
    G = R̃₅ᵀR̃₅ of the paper's columns R̃₅ = [Ñ, S̃, −S̃, T̃, −T̃], E, −Eᵀ and μ; q = [N v* + φ/Δt;
    ±S v*; ±T v*; 0]/Δt with v* the contact-free velocity (actuated part q̇_des); R̃₅ (nb, 5n) and the
    matching rows R₅ = [N; S; −S; T; −T] (5n, m), for v⁺ and τ (see :func:`velocity_and_torque`).
    """
    R_w, R, x0, a, qd_des, phi, mu, dt = red.R_w, red.R, red.x0, red.a, red.qd_des, red.phi, red.mu, red.dt
    nb = R_w.shape[0]
    n = R_w.shape[1] // 3
    m = R.shape[1]
    signs = (1.0, 1.0, -1.0, 1.0, -1.0)
    blocks = (0, 1, 1, 2, 2)  # block of R̃ / R behind each of the 5 variable blocks
    R_w5 = np.empty((nb, 5 * n))
    R5 = np.empty((5 * n, m))
    for b in range(5):
        for c in range(n):
            for i in range(nb):
                R_w5[i, b * n + c] = signs[b] * R_w[i, blocks[b] * n + c]
            for j in range(m):
                R5[b * n + c, j] = signs[b] * R[blocks[b] * n + c, j]
    nf = 0
    for c in range(n):
        if math.isfinite(mu[c]):
            nf += 1
    size = 5 * n + nf
    Q = np.zeros((size, size))
    # by loops, not BLAS (faster at a few contacts: docs/benchmarks.md); Lemke's pivoting turns the other rounding
    # into another of this degenerate LCP's solutions on 12 of 3000 recorded trot ticks (up to 2.8 N·m) and 65 of
    # 3000 grasp ticks
    G = gram_by_loops(R_w5)
    Q[: 5 * n, : 5 * n] = G
    k = 0
    for c in range(n):
        if math.isfinite(mu[c]):
            for b in range(1, 5):
                Q[b * n + c, 5 * n + k] = 1.0  # E
                Q[5 * n + k, b * n + c] = -1.0  # −Eᵀ
            Q[5 * n + k, c] = mu[c]  # μ
            k += 1
    q = np.zeros(size)
    for r in range(5 * n):
        s = 0.0
        for j in range(a.shape[0]):
            s += R5[r, a[j]] * qd_des[j]
        for i in range(nb):
            s += R_w5[i, r] * x0[i]
        if r < n:
            s += phi[r] / dt
        q[r] = s / dt
    return Q, q, R_w5, R5


@njit(types.Tuple((types.boolean, RECORD, MATRIX, VECTOR, MATRIX, MATRIX))(PROBLEM), cache=True)
def coulomb_setup(problem):
    """(ok, reduced dynamics, Q, q, R̃₅, R₅) of a problem record in one call (:func:`coulomb_lcp_data` after the
    reduction); ``ok`` False (and the LCP empty) when M_uu is not positive definite."""
    ok, red = _reduce(problem)
    if not ok:
        return False, red, np.zeros((0, 0)), np.zeros(0), np.zeros((0, 0)), np.zeros((0, 0))
    Q, q, R_w5, R5 = coulomb_lcp_data(red)
    return True, red, Q, q, R_w5, R5


@njit(
    types.Tuple((VECTOR, VECTOR, VECTOR, VECTOR, VECTOR, float64))(RECORD, IN_MATRIX, IN_MATRIX, IN_VECTOR),
    cache=True,
)
def coulomb_finish(red, R_w5, R5, z):
    """(v⁺ (m,), τ (nu,) N·m, f_N, f_S, f_T (n,) N, min N v⁺ + φ/Δt m/s) of the LCP's z = [f_N; f_F; λ]
    (f_F direction-major [S+; S−; T+; T−]) with the LCP's maps R_w5 (nb, 5n) and R5 (5n, m):
    f_S = f_S+ − f_S−, f_T = f_T+ − f_T−."""
    n = R5.shape[0] // 5
    v, tau = velocity_and_torque(red, R_w5, R5, z[: 5 * n])
    f_normal = z[:n].copy()
    f_s = np.empty(n)
    f_t = np.empty(n)
    for i in range(n):
        f_s[i] = z[n + i] - z[2 * n + i]
        f_t[i] = z[3 * n + i] - z[4 * n + i]
    return v, tau, f_normal, f_s, f_t, min_gap_rate_of(red, v)


@njit(cache=True)
def _lemke(Q, q):
    """Lemke with its Tikhonov fallback (``lemke_regularized(Q, q, original_tol=1e-7)``'s schedule): (its outcome,
    :func:`~idcontrol.solvers.lemke.lemke_regularized_kernel`; z, zero impulses when the LCP has no solution)."""
    size = q.shape[0]
    outcome = lemke_regularized_kernel(Q, q, np.ones(size), 50 * size + 100, 1e-12, 0, 1e-12, 100.0, 1e-2, 1e-7)
    return outcome, (outcome[1] if outcome[0] else np.zeros(size))


#: the Coulomb LCP's options for :func:`coulomb_solve`: the spread, whether to repair, the certificate's terms
#: (:meth:`~idcontrol.formulations.certificate.Certifier.terms`)
COULOMB_OPTIONS = types.Tuple((float64, boolean, IN_VECTOR))


@njit((PROBLEM, COULOMB_OPTIONS, types.ListType(NATIVE_QP)), cache=True)
def coulomb_solve(problem, options, repairs):
    """The Coulomb LCP's solve in one call: the reduction, the LCP (:func:`coulomb_lcp_data`), Lemke with its
    Tikhonov fallback (``lemke_regularized(Q, q, original_tol=1e-7)``'s schedule; with ``spread``, first on the
    regularized LCP, then its nearest exact solution or the paper's: see :class:`CoulombLCP`), the motion of the
    answer (:func:`coulomb_finish`; zero impulses when the LCP has no solution) and, with ``repair``, when that
    motion penetrates a contact or the LCP had no solution, the Section 4.5 repair on the DAQP workspace
    ``repairs[n − 1]`` (:func:`~idcontrol.formulations.consistency.repair_native`; none there: not attempted, the
    caller repairs).

    Returns (ok: M_uu positive definite, Lemke's outcome without z and w
    (:func:`~idcontrol.solvers.lemke.compiled_summary`), the LCP's size, the answer [f_N; f_S; f_T; v⁺; τ]
    (3n + m + nu,: one array returned, views of it in Python), min N v⁺ + φ/Δt of the LCP's answer, the repair's
    outcome (−1: not attempted; else v⁺ and τ are the repair's, NaN when it failed), the violation it left, m/s,
    its largest change of q̇_des, rad/s, and the certificate of the answer returned under ``terms``: code, value,
    bound, :func:`~idcontrol.formulations.certificate.certify_in_solve`). ``problem``: a
    :data:`~idcontrol.formulations.record.PROBLEM` record; ``options``: :data:`COULOMB_OPTIONS`.
    """
    spread, repair, terms = options
    n = problem.N.shape[0]
    ok, red = _reduce(problem)
    empty = np.zeros(0)
    if not ok:
        Q, q = np.zeros((0, 0)), np.zeros(0)
        outcome = lemke_regularized_kernel(Q, q, q, 100, 1e-12, 0, 1e-12, 100.0, 1e-2, 1e-7)
        return False, compiled_summary(outcome), 0, empty, 0.0, -1, 0.0, 0.0, UNCHECKED, 0.0, 0.0
    Q, q, R_w5, R5 = coulomb_lcp_data(red)
    weight = 0.0
    if spread > 0.0 and n:  # ε · mean(diag of the normal block) on the 5n force variables' diagonal
        for i in range(n):
            weight += Q[i, i]
        weight *= spread / n
        for i in range(5 * n):
            Q[i, i] += weight
    outcome, z = _lemke(Q, q)
    if weight > 0.0 and outcome[0]:
        for i in range(5 * n):  # back to the paper's LCP
            Q[i, i] -= weight
        verdict, z = settle_spread(Q, q, z, weight, spread, 5 * n)
        if verdict == SPREAD_UNSOLVABLE:  # the paper's own answer (none: zero impulses, then the repair)
            outcome, z = _lemke(Q, q)
    v_next, tau, f_normal, f_s, f_t, gap = coulomb_finish(red, R_w5, R5, z)
    repaired, violation, change = -1, 0.0, 0.0
    if repair and n and n <= len(repairs) and (not outcome[0] or gap < -REPAIR_TOL):
        repaired, v_next, tau, violation, change = repair_native(problem, (f_normal, f_s, f_t), False, repairs[n - 1])
    code, value, bound = certify_in_solve(problem, (v_next, tau, f_normal, f_s, f_t), terms)
    answer = np.concatenate((f_normal, f_s, f_t, v_next, tau))
    return True, compiled_summary(outcome), q.shape[0], answer, gap, repaired, violation, change, code, value, bound


def coulomb_lcp(problem: ContactProblem, red: ReducedDynamics) -> tuple[Array, Array, Array, Array]:
    """Build the Coulomb-friction LCP (force units; compiled: :func:`coulomb_lcp_data`).

    Returns
    -------
    Q : (5n + nf, 5n + nf) LCP matrix (nf = contacts with finite μ).
    q : LCP vector.
    R_w5 : (nb, 5n) whitened columns [Ñ, S̃, −S̃, T̃, −T̃] of the variables [f_N; f_F].
    R5 : (5n, m) the matching rows [N; S; −S; T; −T].
    """
    return coulomb_lcp_data(red)


#: The paper's exact method (Section 5): ``make_formulation("coulomb_lcp", **PAPER_OPTIONS)``.
PAPER_OPTIONS = {"spread": 0.0}


class CoulombLCP(Formulation):
    """Coulomb-friction LCP solved by Lemke (optionally MINDIFF for few contacts).

    Parameters
    ----------
    mindiff : use Algorithm 3 when the problem has at most ``mindiff_max_contacts`` contacts.
    repair : run the Section 4.5 consistency repair when needed.
    spread : ε ≥ 0, a relative Tikhonov weight ε · mean(diag of the normal block) added to the LCP matrix on the
        5n force variables (not on the pyramid's λ rows), to choose among the LCP's solutions; default 1e-2, 0 is
        the paper's method. Standing on more feet than the robot needs, the LCP has a set of solutions and Lemke
        returns a vertex of it: two diagonal feet carrying a quadruped, one corner of a flat sole carrying a
        humanoid (which tips onto it), tangential forces at the pyramid's edges squeezing the stance feet
        together. With ε > 0 the regularized LCP has one solution, which shares the load; the answer is the
        paper's LCP's exact solution nearest to it on the same face
        (:func:`~idcontrol.solvers.lemke.face_solution`), so the weight is carried exactly and complementarity
        holds. Where that face holds no exact solution the regularized answer stands (complementarity to ε·f, so
        exact complementarity is claimed only with spread 0), unless the paper's LCP has no solution at all (a
        rigid object squeezed: the regularized answer is about r/ε, 3.75 kN on the shipped grasp,
        :func:`~idcontrol.solvers.lemke.spread_answered_gap`); then the paper's own answer is used. Measured
        (``idcontrol experiment robots``, MuJoCo, the launch files' contact settings): with 1e-2 six legged
        robots stand 10 s with every foot loaded and five quadrupeds trot; with 0 four of them stand with a foot
        unloaded and Talos falls at 3.6 s. It needs ``consistent_contact_velocity`` (docs/locomotion.md): without
        it the quadruped's stand rocks onto diagonal pairs with either answer and the shared answer loads a
        hovering foot, 490 clipped joint-ticks in 2 s against the paper's 42.
    """

    name = "coulomb_lcp"

    def __init__(
        self, *, mindiff: bool = False, mindiff_max_contacts: int = 2, repair: bool = True, spread: float = 1e-2
    ) -> None:
        check_nonnegative(self.name, spread=spread)
        self.mindiff = mindiff
        self.mindiff_max_contacts = mindiff_max_contacts
        self.repair = repair
        self.spread = float(spread)
        # exact complementarity is claimed (and certified) only without the spread, which may trade it to ε·f
        self.contact_model = ContactModel(friction="pyramid", complementarity=self.spread == 0.0)
        self._repairs = RepairWorkspaces(no_slip=False)
        self.reset()

    def reset(self) -> None:
        self._previous_tau: Array | None = None

    def solve(self, problem: ContactProblem) -> SolveResult:
        started = time.perf_counter()
        p = problem
        n = p.n
        if self.mindiff and 0 < n <= self.mindiff_max_contacts and self._previous_tau is not None:
            return self._solve_mindiff(p, started)
        self._repairs.cover(p.nu, n)
        ok, lemke, size, answer, gap_rate, repaired, violation, change, *checked = coulomb_solve(
            p.record, (self.spread, self.repair, self.certificate_terms), self._repairs.by_count
        )
        if not ok:
            raise np.linalg.LinAlgError("Matrix is not positive definite")
        f_normal, f_s, f_t, v_next, tau = split(answer, n, n, n, p.m)
        found, pivots, eps, status, _, rel, entering = lemke[:7]
        cap = 50 * size + 100
        if found and eps == 0.0:  # the usual case: the plain solve's message
            lemke_text = lemke_message(status, pivots, rel, entering, size, cap)
        else:
            lemke_text = regularized_message(lemke, size, cap, 1e-2)
        return self._finish(
            p,
            found,
            eps,
            pivots,
            lemke_text,
            None,
            v_next,
            tau,
            f_normal,
            f_s,
            f_t,
            gap_rate,
            started,
            (repaired, violation, change),
            checked,
        )

    def prepare_repair(self, problem: ContactProblem) -> None:
        super().prepare_repair(problem)
        self._repairs.cover(problem.nu, problem.n)

    def _solve_mindiff(self, p: ContactProblem, started: float) -> SolveResult:
        """Algorithm 3 (``mindiff``): of every LCP solution, the one whose torque is closest to the last tick's."""
        n = p.n
        ok, red, Q, q, R_w5, R5 = coulomb_setup(p.record)
        if not ok:
            raise np.linalg.LinAlgError("Matrix is not positive definite")
        previous = self._previous_tau
        lcp, _distance = mindiff(Q, q, lambda z: velocity_and_torque(red, R_w5, R5, z[: 5 * n])[1], previous)
        z = lcp.z if lcp.found else np.zeros(len(q))
        v_next, tau, f_normal, f_s, f_t, gap_rate = coulomb_finish(red, R_w5, R5, z)
        return self._finish(
            p,
            lcp.found,
            lcp.regularization,
            lcp.pivots,
            lcp.message,
            "mindiff" if lcp.found else None,
            v_next,
            tau,
            f_normal,
            f_s,
            f_t,
            gap_rate,
            started,
        )

    def _finish(
        self,
        p: ContactProblem,
        found: bool,
        eps: float,
        pivots: int,
        lemke_text: str,
        fallback: str | None,
        v_next: Array,
        tau: Array,
        f_normal: Array,
        f_s: Array,
        f_t: Array,
        gap_rate: float,
        started: float,
        repair: tuple[int, float, float] = (-1, 0.0, 0.0),
        checked: tuple[float, float, float] | None = None,
    ) -> SolveResult:
        """The result of the LCP's answer (zero impulses when it had none: then, and when v⁺ penetrates, the
        Section 4.5 repair: ``repair``, the compiled solve's (outcome, violation left, largest change of q̇_des;
        ``v_next`` and ``tau`` then are its), unless it was not attempted). ``checked``: the compiled solve's
        certificate of what it returned (dropped when the repair here changes it)."""
        unsolvable = not found
        if unsolvable:
            if not self.repair:
                self.reset()
                return failed_result(p, self.name, f"Coulomb LCP unsolved: {lemke_text}", pivots)
            # Spec item 25: inconsistent q̇_des can leave the LCP without solution; the impulses are set
            # to zero and the Section 4.5 repair must restore non-penetration by changing q̇_des.
            fallback = f"no LCP solution ({lemke_text}); zero impulses, then repair"
        elif eps:
            fallback = f"lemke regularized eps={eps:.1e}"
        repaired = False
        message = f"Lemke: {lemke_text}"
        if unsolvable or (self.repair and gap_rate < -REPAIR_TOL):
            fix, certified = repair_of_answer(
                p, (f_normal, f_s, f_t), (*repair, v_next, tau), no_slip=False, qp=self.repair_qp
            )
            checked = checked if certified else None
            if not fix.found:
                return failed_result(p, self.name, f"inconsistent q̇_des and {fix.message}", pivots)
            v_next, tau, repaired = fix.v_next, fix.tau, True
            message += f"; q̇_des repaired (max change {fix.qd_change:.3g})"
        if self.mindiff:  # Algorithm 3's reference torque
            self._previous_tau = tau.copy()
        return self._result(
            p,
            v_next,
            tau,
            f_normal,
            f_s,
            f_t,
            iterations=pivots,
            message=message,
            started=started,
            consistency_repaired=repaired,
            fallback=fallback,
            checked=checked,
        )
