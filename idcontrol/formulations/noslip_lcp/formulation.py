"""ID(tᵢ)_LCP,∞: inverse dynamics with rigid, non-impacting, no-slip contact (paper Section 4).

Per tick (spec section 3.11, in the reduced coordinates of
:mod:`idcontrol.formulations.base`):

1. Algorithm 1 keeps the tangential rows J = [P; S_𝒮; T_𝒯] that leave the
   equality block non-singular (:func:`~idcontrol.formulations.noslip_lcp.find_indices.find_indices`).
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

Three options, on by default, adapt the solution to a robot on a real floor (see :class:`NoSlipLCP`):
``project`` (a no-slip-consistent q̇_des before the solve), ``release_unloaded`` (no tangential rows on a
contact without normal force) and ``share_friction`` (tangential forces split in proportion to the normal
ones). The paper's exact method is these three off (:data:`PAPER_OPTIONS`): on states a few hundredths of a
radian from a stance it answered with torques to 1e14 N·m whose internal forces cancel in the dynamics (every
one of 200 perturbed quadruped stance states; the certificate rejects them all), where the defaults gave
certified answers on all 200 (``idcontrol experiment certificates``).
"""

from __future__ import annotations

import time
from functools import cache

import numpy as np

from idcontrol.arrays import split
from idcontrol.formulations.base import Formulation, check_nonnegative, map_warm_start
from idcontrol.formulations.certificate import FORCE_TOL, ContactModel
from idcontrol.formulations.consistency import (
    RepairWorkspaces,
    repair_of_answer,
    rest_correction,
)
from idcontrol.formulations.noslip_lcp.stages import (
    BY_ACTIVE_SET,
    BY_LEMKE,
    BY_NONE,
    BY_PPM,
    PROJECTION_RCOND,
    noslip_solve,
)
from idcontrol.formulations.problem import ContactProblem, SolveResult, failed_result
from idcontrol.solvers.ppm import (
    ACTIVE_SET_CAP,
    ACTIVE_SET_UNBOUNDED,
    PPM_CAP,
    PPM_CHECK,
    PPM_ILL,
    PPM_RANK,
    PPM_SINGULAR,
)

#: The paper's exact method (Section 4): ``make_formulation("noslip_lcp", **PAPER_OPTIONS)``.
PAPER_OPTIONS = {"spread": 0.0, "rank_tol": 1e-8, "project": False, "release_unloaded": False, "share_friction": False}


class NoSlipLCP(Formulation):
    """No-slip LCP with Find-Indices and warm-started modified principal pivoting.

    Parameters
    ----------
    rank_tol : relative tolerance of Algorithm 1's independence test (default 1e-3; ``PAPER_OPTIONS``: 1e-8, a
        rounding-level test). Flat ground gives a stance's tangential rows rank 3 in the base's coordinates
        (in-plane translation and yaw); feet a few mm apart in height make a fourth row "independent" at a
        relative 1e-5..1e-4, and holding it asks for opposite tangential forces of 10⁷ N on two feet (a
        standing A1, Talos' soles, the trot on Drake: the certificate stopped each). At 1e-3 such a row is
        dependent: the stance gets the in-plane rows it really has.
    tol : absolute LCP tolerance, m/s².
    repair : run the Section 4.5 consistency repair when needed.
    spread : ε ≥ 0, relative Tikhonov weight on the normal impulses (default 3e-2; 0 is the paper's LCP).
        Standing on more feet than the no-slip constraints need, the LCP has a whole set of solutions and
        Algorithm 2 returns a vertex of it (two diagonal feet carrying a quadruped, a corner of a humanoid's
        sole); a compliant world (MuJoCo, a real floor) shares the load instead. With ε > 0 the LCP matrix
        becomes BᵀB + ε·mean(diag BᵀB)·D (D: the contacts whose impulse moves v⁺; a contact the kept rows
        already hold keeps the paper's row), whose unique solution tends to the least-norm solution of the
        original LCP as ε → 0. The answer is then the paper's LCP's solution nearest to it on its face (the same
        load distribution, exact complementarity: :func:`~idcontrol.solvers.lemke.face_solution`); where the
        face's equations can be met only in the least-squares sense (the stance cannot meet part of the requested
        velocity), that least-squares point, the repair answering the rest; where that face has none, the spread's
        own (complementarity to ε·f), unless the paper's LCP has no solution
        at all (:func:`~idcontrol.solvers.lemke.spread_answered_gap`: the spread answered about r/ε), when the
        paper's answer stands (zero impulses, then the repair). The spread's load distribution answers the
        stance's small velocity mismatches (a leg's PD step, a soft floor's rebound) with gain ~1/ε, and in
        closed loop that gain can exceed one: at 1e-2 the Go1, Go2 and Laikago (``robot init`` from
        example-robot-data) standing in MuJoCo traded the load between diagonal foot pairs every tick, growing
        ×1.26 a tick to ±10 N·m of torque chatter (E|Δτ| 5300-9500 N·m/s); at 3e-2, 0-4 N·m/s (docs/locomotion.md).
    project : replace q̇_des, before the solve, by the closest one that lets every contact stand still
        tangentially (:func:`project_desired_velocity`: the least-squares unactuated twist for the stance
        legs' desired motion, then the least-norm change of the actuated velocities that makes it exact).
        A gait's stance legs rarely keep the distance between two planted feet fixed; without this the
        Section 4.5 repair changes q̇_des after the solve, with the contact forces of the inconsistent one.
    release_unloaded : a contact the LCP leaves without normal force (a foot landing or lifting) keeps its
        normal row but loses its two tangential rows, and, if one of them carried a tangential force, the problem
        is solved again, until no unloaded contact carries one (a force under 10⁻⁴ of the largest normal force,
        ``RELEASE_FLOOR``, the friction share's floor, is set to zero instead). With μ = ∞ a contact at f_N = 0
        may hold any tangential force; a real floor gives none, and torques that count on one slide or lift the
        other feet. A released contact onto which a later round moves the load gets its rows back for good (the
        message says how many): no contact the answer loads is without them, so none slides.
    share_friction : among the tangential forces that give the same impulse along the directions Find-Indices
        kept, take the one minimizing Σᵢ |f_T,i|² / f_N,i (forces in proportion to the normal forces:
        :func:`.stages.share_tangential`). Algorithm 1 otherwise puts the whole tangential force on the rows it
        took first and none on the dependent ones (a landing foot that carries the weight and no friction,
        feet that carry friction and almost no weight). v⁺ keeps the kept rows' constraints; τ follows the
        new forces.
    """

    name = "noslip_lcp"
    no_slip = True

    def __init__(
        self,
        *,
        rank_tol: float = 1e-3,
        tol: float = 1e-10,
        repair: bool = True,
        spread: float = 3e-2,
        project: bool = True,
        release_unloaded: bool = True,
        share_friction: bool = True,
    ) -> None:
        check_nonnegative(self.name, spread=spread, rank_tol=rank_tol, tol=tol)
        self.spread = float(spread)
        self.rank_tol = float(rank_tol)
        self.tol = float(tol)
        self.repair = repair
        self.project = bool(project)
        self.release_unloaded = bool(release_unloaded)
        self.share_friction = bool(share_friction)
        # exact complementarity is claimed (and certified) only without the spread, which may trade it to ε·f
        self.contact_model = ContactModel(friction="no_slip", complementarity=self.spread == 0.0)
        self._repairs = RepairWorkspaces(no_slip=True)
        self.reset()

    def reset(self) -> None:
        self._previous_ids: tuple = ()
        self._previous_active: np.ndarray = _NO_WARM_START  # indices of the last tick's loaded contacts

    def solve(self, problem: ContactProblem) -> SolveResult:
        started = time.perf_counter()
        p = asked = problem
        ids = p.ids()
        if ids is self._previous_ids or ids == self._previous_ids:  # the same contacts (usual): the same indices
            warm = self._previous_active
        else:
            warm = np.asarray(map_warm_start(self._previous_ids, self._previous_active, ids), dtype=np.intp)
        n, m, nu = p.N.shape[0], p.M.shape[0], p.nu
        self._repairs.cover(nu, n)
        options = (
            self.rank_tol,
            self.tol,
            self.spread,
            self.project,
            self.release_unloaded,
            self.share_friction,
            self.repair,
            self.certificate_terms,
        )
        outcome = noslip_solve(p.record, warm, options, self._repairs.by_count)
        (
            ok,
            pivots,
            loaded,
            kept,
            answer,
            diagnostics,
            (n_released, n_restored, n_slid),
            rows,
            violated,
            repair_outcome,
            repair_violation,
            repair_change,
            *checked,
        ) = outcome
        if not ok:
            raise np.linalg.LinAlgError("Matrix is not positive definite")
        f_normal, f_s, f_t, v_next, tau, qd_des = split(answer, n, n, n, m, nu)
        n_loaded = int(np.count_nonzero(f_normal > FORCE_TOL))
        if self.project or n_released or n_restored:  # the problem as solved: its rows are what no-slip is claimed on
            p = p.with_rows(rows[0], rows[1], qd_des)
        found = diagnostics[0] != BY_NONE
        fallback = fallback_text(diagnostics)
        if not found and not self.repair:
            self.reset()
            out = failed_result(p, self.name, f"no-slip LCP unsolved: {fallback}", pivots)
            out.fallback = fallback
            return out
        self._previous_ids = ids
        self._previous_active = loaded

        repaired = False
        message = solved_text(kept, n)
        if n_released:
            message += f"; {n_released} unloaded contact(s) released"
        if n_restored:
            message += f"; {n_restored} contact(s) kept their tangential rows (released, the load moved onto them)"
        if n_slid:
            message += (
                f"; no-slip held on {n_loaded - n_slid} of {n_loaded} loaded contacts ({n_slid} released: "
                "with their rows the answer was beyond the force or torque bounds)"
            )
        if not found or (self.repair and violated):
            # when the compiled repair's QP was infeasible, the Python path hands DAQP the no-slip rows'
            # independent part (redundant contacts make them dependent)
            fix, certified = repair_of_answer(
                p,
                (f_normal, f_s, f_t),
                (repair_outcome, repair_violation, repair_change, v_next, tau),
                no_slip=True,
                qp=self.repair_qp,
                again_if_infeasible=True,
            )
            checked = checked if certified else None
            if not fix.found:
                out = failed_result(p, self.name, f"inconsistent q̇_des and {fix.message}", pivots)
                out.fallback = fallback
                return out
            v_next, tau, repaired = fix.v_next, fix.tau, True
            message += f"; q̇_des repaired (max change {fix.qd_change:.3g})"
        out = self._result(
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
            asked=asked,
        )
        out.loaded_contacts, out.loaded_released = n_loaded, n_slid
        return out

    def prepare_repair(self, problem: ContactProblem) -> None:
        super().prepare_repair(problem)
        self._repairs.cover(problem.nu, problem.n)


_NO_WARM_START = np.zeros(0, dtype=np.intp)


@cache
def solved_text(kept: int, n: int) -> str:
    """The message of a solve that kept ``kept`` of its n contacts' 2n tangential rows (made once per pair, not
    formatted each tick)."""
    return f"solved ({kept} tangential rows kept of {2 * n})"


_PPM_TEXT = {
    PPM_RANK: "active block of {a} contacts exceeds rank bound {d}",
    PPM_SINGULAR: "active block of {a} contacts is singular",
    PPM_ILL: "active block of {a} contacts is ill-conditioned",
    PPM_CHECK: "final solution failed its complementarity check",
    PPM_CAP: "pivot cap reached",
}
_ACTIVE_SET_TEXT = {ACTIVE_SET_UNBOUNDED: "unbounded: the LCP has no solution", ACTIVE_SET_CAP: "iteration cap reached"}


def fallback_text(diagnostics: tuple) -> str | None:
    """Which fallback answered the LCP and why (None: Algorithm 2 did), from :func:`.stages.noslip_solve`'s
    diagnostics."""
    by, ppm_status, ppm_active, rows, as_status, lemke_eps = diagnostics
    if by == BY_PPM:
        return None
    text = f"active set (PPM: {_PPM_TEXT[ppm_status].format(a=ppm_active, d=rows)})"
    if by == BY_ACTIVE_SET:
        return text
    text = f"lemke (active set: {_ACTIVE_SET_TEXT[as_status]})"
    if by == BY_LEMKE:
        return text + (f", regularized eps={lemke_eps:.1e}" if lemke_eps > 0.0 else "")
    return f"no LCP solution ({text}: no solution); zero normal impulses, then repair"


def project_desired_velocity(problem: ContactProblem, rcond: float = PROJECTION_RCOND) -> np.ndarray:
    """(nu,) rad/s: a q̇_des under which every contact can stand still tangentially for some unactuated velocity.

    With J = [S; T] (2n, m): the least-squares unactuated twist V of J_u V = −J_a q̇_des, then the least-norm
    actuated change δ with J_a δ = −(J_u V + J_a q̇_des); returns q̇_des + δ (unchanged when consistent).
    Directions of J_a or J_u with singular values below ``rcond`` × the largest are left alone
    (:data:`~.stages.PROJECTION_RCOND`): on Unitree H1's 5-DoF legs and narrow soles such directions asked
    2000 rad/s of q̇_des to cancel 10⁻⁴ m/s of slip.
    """
    p = problem
    J = np.concatenate([p.S, p.T])
    J_a, J_u = J[:, p.actuated], J[:, p.unactuated]
    drift = J_a @ p.qd_des
    V = rest_correction(J_u, drift, rcond)
    return p.qd_des + rest_correction(J_a, J_u @ V + drift, rcond)
