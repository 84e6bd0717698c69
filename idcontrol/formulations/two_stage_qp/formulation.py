"""ID(tᵢ)_QP,μ: the complementarity-free two-stage QP (paper Section 6, corrected per spec 5.3–5.8).

The paper writes the contact forces as z = [f_N; f_S+; f_S−; f_T+; f_T−] ≥ 0
(5n) because its solver, Lemke, needs non-negative variables (its footnote 2).
Our QP solver does not, so the tangential forces are signed and the friction
pyramid μᵢ f_N,i ≥ f_S+ + f_S− + f_T+ + f_T− becomes its four facets
μᵢ f_N,i ± f_S,i ± f_T,i ≥ 0: the same set of forces (|f_S| + |f_T| ≤ μ f_N),
in y = [f_N; f_S; f_T] (3n, forces in N) instead of 5n variables, without
the 2n null directions that only add equal amounts to f_S+ and f_S−.

Stage I (maximal dissipation), with P v⁺ = q̇_des and the dynamics eliminated::

    minimize   ½ yᵀ Rᵀ Γ_P R y + yᵀ Rᵀ Γ_P (M v⁻ + Δt f_ext) / Δt        (= KE(v⁺)/Δt² + const)
    subject to N Γ_P R y ≥ −(N v* + φ/Δt)/Δt                           non-penetration
               f_N ≥ 0,   μᵢ f_N,i ± f_S,i ± f_T,i ≥ 0   (finite μᵢ; μ = ∞ drops them: ID(tᵢ)_QP,∞)

with R = [Nᵀ Sᵀ Tᵀ]. In whitened coordinates Rᵀ Γ_P R = R̃ᵀR̃ with R̃ = [Ñ S̃ T̃]
(nb × 3n), so the Hessian has rank ≤ nb and Stage I is only convex.

Stage II (minimum torque in the optimal set): every optimal y has the same
R̃ y, hence the same v⁺, so the optimal set is y₁ + W w with W an orthonormal
basis of null(R̃) (SVD with a tolerance, or a Householder QR where full rank is
certified, see :func:`.null_space.null_space_basis`; 3·4 − 6 = 6-dimensional for four
contacts on a floating base, which is the paper-variable null space of
5·4 − 6 = 14 dimensions less its 8 trivial ± pairs). Along it
τ(w) = τ₁ − R_a W w, and Stage II solves::

    minimize   ½‖τ₁ − R_a W w‖² + ½ ρ ‖y₁ + W w‖²
    subject to f_N ≥ 0 and the pyramid facets, on y₁ + W w

which minimizes the true ‖τ‖² (spec item 11). The tiny ridge ρ (relative
``ridge`` × the Hessian's mean diagonal) only selects the smallest contact
forces among equal-torque solutions, making them unique; it cannot change the
Stage I objective, because W w never changes v⁺.

``dissipation = "contacts"`` (an option; ``"world"``, the paper's, is the default) measures the kinetic
energy relative to v_c = [v_u,c; q̇_des], the unactuated velocity closest to the contact-free one that holds
the active contacts at rest (least squares over [N; S; T], see :func:`.stages.contact_relative_gradient`):
½ (v⁺ − v_c)ᵀ M (v⁺ − v_c) = ½‖x⁺ − Lᵀv_u,c‖², so only g changes, to −R_u δ/Δt. With τ free and P v⁺
fixed, the paper's objective can only act on the base, and its optimum brakes the base toward zero momentum
while stance feet slide, which under sticking feet becomes torques that push against the gait; relative to
v_c the optimum is the sticking one wherever the friction pyramid allows it.

With many contacts (``structured``) the same two problems are solved in low dimension
(:mod:`.pyramid_dual`): Stage II in y-space, minimize ½‖R_a y − b‖² + ½ρ‖y‖² subject to
R̃ y = R̃ y₁ and y in the pyramids, has an (nu + nb)-dimensional dual whose inner minimization is a projection
onto each contact's pyramid; a semismooth Newton method on it finds the active faces, on which y is then solved
exactly and the KKT conditions are checked. Stage I depends on y only through x = R̃ y (nb-dimensional):
without the pyramids its optimum is a projection onto the non-penetration rows, and when the dual method finds
a y in the pyramids with R̃ y = x, that x is Stage I's optimum and y Stage II's. Whatever is not certified
goes to the QPs above.

If Stage I is infeasible (q̇_des drives a contact into the ground), it is
re-solved without the non-penetration rows and the Section 4.5 repair restores
the constraint by changing q̇_des; the result says so.
"""

from __future__ import annotations

import time
from functools import cache

import numpy as np
from numba.typed import List
from numpy.typing import NDArray

from idcontrol.arrays import split
from idcontrol.errors import ConfigError
from idcontrol.formulations.base import Formulation, check_nonnegative
from idcontrol.formulations.certificate import ContactModel
from idcontrol.formulations.consistency import REPAIR_TOL, needs_repair, repair_desired_velocity
from idcontrol.formulations.problem import ContactProblem, SolveResult, failed_result
from idcontrol.formulations.reduced import ReducedDynamics, contact_velocity_and_torque, reduce
from idcontrol.formulations.two_stage_qp.pyramid_dual import (
    normal_rows_hold,
    stage_one_target,
    stage_two_structured,
    stages_at,
)
from idcontrol.formulations.two_stage_qp.stages import (
    STAGES_NOT_PD,
    STAGES_SOLVED,
    clip_normal_forces,
    stage_one_data,
    stage_one_result,
    stage_one_setup,
    stage_two_result,
    stage_two_setup,
    two_stages,
)
from idcontrol.solvers.daqp_native import RECORD as NATIVE_QP
from idcontrol.solvers.daqp_native import NativeQP, native_available
from idcontrol.solvers.qp import INFINITY, DenseQP

Array = NDArray[np.float64]


_PYRAMIDS: dict[bytes, Array] = {}
#: the dual Newton method's relative KKT residual for a certified Stage II, and its iteration cap
STRUCTURED_TOL = 1e-10
STRUCTURED_MAX_ITER = 30

DISSIPATION_REFERENCES = ("world", "contacts")


@cache
def optimal_set_text(k: int) -> str:
    """The message of a Stage II over a k-dimensional optimal set (made once per k, not formatted each tick)."""
    return f"Stage II over a {k}-dimensional optimal set"


def check_dissipation(dissipation: str) -> str:
    """The Stage I ``dissipation`` option, checked: ``"world"`` (the paper's) or ``"contacts"``."""
    if dissipation not in DISSIPATION_REFERENCES:
        raise ConfigError(f"dissipation must be one of {DISSIPATION_REFERENCES}, got {dissipation!r}")
    return dissipation


def pyramid_rows(mu: Array) -> Array:
    """(4 nf, 3n) facets μᵢ f_N,i ± f_S,i ± f_T,i ≥ 0 of the friction pyramid, for the nf contacts with finite μ.

    Read-only and memoized by μ: it only changes with the contact pattern.
    """
    key = np.asarray(mu, dtype=float).tobytes()
    C = _PYRAMIDS.get(key)
    if C is None:
        C = _pyramid_rows(np.asarray(mu, dtype=float))
        C.setflags(write=False)
        if len(_PYRAMIDS) > 1024:
            _PYRAMIDS.clear()
        _PYRAMIDS[key] = C
    return C


def _pyramid_rows(mu: Array) -> Array:
    n = len(mu)
    finite = np.flatnonzero(np.isfinite(mu))
    nf = len(finite)
    C = np.zeros((4 * nf, 3 * n))
    for k, (sign_s, sign_t) in enumerate(((1.0, 1.0), (1.0, -1.0), (-1.0, 1.0), (-1.0, -1.0))):
        rows = k * nf + np.arange(nf)
        C[rows, finite] = mu[finite]
        C[rows, n + finite] = sign_s
        C[rows, 2 * n + finite] = sign_t
    return C


def remap_active_set(
    flags: NDArray[np.int32] | None,
    previous_ids: tuple,
    previous_mu: Array,
    ids: tuple,
    mu: Array,
    *,
    stage_one: bool,
) -> NDArray[np.int32] | None:
    """Carry a QP's active-set flags to a new contact set, contact by contact (by identity, not index).

    Flag layouts (as :class:`DenseQP` takes them), per contact blocks in
    contact order: Stage I: bounds of [f_N; f_S; f_T] (3n), non-penetration
    rows (n), pyramid facets (4 per contact with finite μ, facet-major);
    Stage II: f_N ≥ 0 rows (n), pyramid facets. New contacts start inactive.
    """
    n0 = len(previous_ids)
    finite0 = np.flatnonzero(np.isfinite(previous_mu))
    per_contact = 4 if stage_one else 1  # bounds (3) + normal row (1), or the f_N row
    if flags is None or len(flags) != per_contact * n0 + 4 * len(finite0):
        return None
    head0 = flags[: per_contact * n0].reshape(per_contact, n0)
    facets0 = np.zeros((4, n0), dtype=np.int32)
    facets0[:, finite0] = flags[per_contact * n0 :].reshape(4, len(finite0))
    where = {cid: j for j, cid in enumerate(previous_ids)}
    n = len(ids)
    head = np.zeros((per_contact, n), dtype=np.int32)
    facets = np.zeros((4, n), dtype=np.int32)
    for i, cid in enumerate(ids):
        j = where.get(cid)
        if j is not None:
            head[:, i] = head0[:, j]
            facets[:, i] = facets0[:, j]
    return np.concatenate([head.ravel(), facets[:, np.isfinite(mu)].ravel()])


class StageOne:
    """Stage I data of one problem over y = [f_N; f_S; f_T], in force units (built once per tick).

    ``A``, ``lower``, ``upper`` hold the QP in DAQP's stacked layout: bounds of y
    (3n), then the non-penetration rows (n), then the pyramid facets.
    """

    def __init__(self, problem: ContactProblem, red: ReducedDynamics, dissipation: str = "world") -> None:
        C_pyramid = pyramid_rows(problem.mu)
        self._set(problem.n, red, C_pyramid, *stage_one_data(red, C_pyramid, dissipation == "contacts", INFINITY))

    @classmethod
    def of(cls, problem: ContactProblem, dissipation: str = "world") -> StageOne:
        """Stage I of ``problem`` with its reduced dynamics (:attr:`red`), both from one compiled call
        (:func:`.stages.stage_one_setup`). Raises ``numpy.linalg.LinAlgError`` when M_uu is not positive definite."""
        p = problem
        ok, red, C_pyramid, H, g, A, lower, upper, R_a = stage_one_setup(p.record, dissipation == "contacts", INFINITY)
        if not ok:
            raise np.linalg.LinAlgError("Matrix is not positive definite")
        stage = cls.__new__(cls)
        stage._set(p.n, red, C_pyramid, H, g, A, lower, upper, R_a)
        return stage

    def _set(
        self,
        n: int,
        red: ReducedDynamics,
        C_pyramid: Array,
        H: Array,
        g: Array,
        A: Array,
        lower: Array,
        upper: Array,
        R_a: Array,
    ) -> None:
        self.n = n
        self.red = red
        self.C_pyramid = C_pyramid
        self.H, self.g, self.A, self.lower, self.upper, self.R_a = H, g, A, lower, upper, R_a
        self.C_normal = A[:n]  # Ñᵀ R̃, (n, 3n)
        self.l_normal = lower[3 * n : 4 * n]
        # f_N ≥ 0 (left out where the pyramid implies it); tangential forces signed. R_a: (nu, 3n)
        self.lb, self.ub = lower[: 3 * n], upper[: 3 * n]

    @property
    def R_w(self) -> Array:
        """R̃ (nb, 3n), the contact rows' whitened unactuated columns."""
        return self.red.R_w

    @property
    def R(self) -> Array:
        """[N; S; T] (3n, m)."""
        return self.red.R

    def constraints(self, with_normal: bool = True) -> tuple[Array, Array, Array]:
        """(C, l, u) of the rows l ≤ C y ≤ u: non-penetration (optional), then the pyramid facets."""
        first = 0 if with_normal else self.n
        return self.A[first:], self.lower[3 * self.n + first :], self.upper[3 * self.n + first :]

    def velocity_and_torque(self, problem: ContactProblem, red: ReducedDynamics, y: Array) -> tuple[Array, Array]:
        """v⁺ (m,) and τ (nu,), N·m, for the contact forces y."""
        return contact_velocity_and_torque(red, y)

    def clip(self, y: Array) -> Array:
        """y with f_N's rounding-level negatives set to zero (in place)."""
        clip_normal_forces(y, self.n)
        return y


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
    ny = 3 * stage.n
    H = stage.H
    if regularization:
        H = H.copy()
        H.flat[:: ny + 1] += regularization * max(float(np.trace(H)) / ny, 1e-12)
    sol = qp.solve_stacked(H, stage.g, stage.A, stage.lower, stage.upper, bounds=True, warm=warm, active=active)
    if sol.found:
        return stage.clip(sol.x), sol.iterations, sol.status, False
    C, l, u = stage.constraints(with_normal=False)
    relaxed = qp.solve(
        H, stage.g, C if len(C) else None, l if len(C) else None, u if len(C) else None, stage.lb, stage.ub
    )
    if relaxed.found:
        return stage.clip(relaxed.x), sol.iterations + relaxed.iterations, sol.status, True
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
    dissipation : ``"world"`` (the paper's Stage I objective, the kinetic energy) or ``"contacts"`` (the
        kinetic energy relative to the motion that holds the active contacts at rest; see the module
        docstring). Legged locomotion under prescribed joint velocities needs ``"contacts"``.
    structured : with enough contacts that 3n − nb ≥ nu + nb (8 or more on the quadruped), solve
        Stage II through its (nu + nb)-dimensional dual by a semismooth Newton method and exactly on the
        pyramid faces it identifies (:mod:`.pyramid_dual`), and first try both stages in
        x = R̃y (see :meth:`_stages_in_x`); the QPs over y and w stay the fallback whenever the KKT
        conditions are not certified. The counters ``free_optimum_solves`` (both stages in x),
        ``structured_solves`` (Stage II by the dual after Stage I over y) and ``structured_fallbacks``
        (Stage II by the null-space QP after the dual did not certify) say how often each path answered
        (docs/benchmarks.md measures what the structured path saves on many contacts).
    """

    name = "two_stage_qp"
    contact_model = ContactModel(friction="pyramid")

    def __init__(
        self,
        *,
        null_tol: float = 1e-9,
        ridge: float = 1e-7,
        repair: bool = True,
        warm_start: bool = False,
        dissipation: str = "world",
        structured: bool = True,
    ) -> None:
        check_nonnegative(self.name, null_tol=null_tol, ridge=ridge)
        self.dissipation = check_dissipation(dissipation)
        self.null_tol = null_tol
        self.ridge = ridge
        self.repair = repair
        self.warm_start = warm_start
        self.structured = structured
        self._stage_one = DenseQP()
        self._stage_two = DenseQP()
        self._stage_one_x = DenseQP()  # Stage I over x = R̃y without the pyramids (nb variables)
        #: both stages in one compiled call when DAQP's C API is usable: its workspaces by contact count and μ
        self._native = native_available()
        self._native_qps: dict[tuple[int, bytes], List] = {}
        #: Stage II solves certified by the dual Newton method, and those that fell back to the null-space QP
        self.structured_solves = 0
        self.structured_fallbacks = 0
        #: ticks where both stages were solved in x = R̃y and by the dual method (the pyramids did not bind Stage I)
        self.free_optimum_solves = 0
        self.reset()

    @property
    def _dual_options(self) -> tuple[float, float, int]:
        """The dual method's options (:data:`~.pyramid_dual.DUAL_OPTIONS`)."""
        return float(self.ridge), STRUCTURED_TOL, STRUCTURED_MAX_ITER

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
        return remap_active_set(
            qp.last_active, self._previous_ids, self._previous_mu, ids, problem.mu, stage_one=with_normal
        )

    def stage_one(self, problem: ContactProblem) -> tuple[Array | None, StageOne, ReducedDynamics, int, str, bool]:
        """Stage I alone: (z₁, data, reduced dynamics, iterations, status, normal rows dropped)."""
        stage = StageOne.of(problem, self.dissipation)
        return self._stage_one_with(problem, stage.red, stage)

    def _stage_one_with(
        self, problem: ContactProblem, red: ReducedDynamics, stage: StageOne
    ) -> tuple[Array | None, StageOne, ReducedDynamics, int, str, bool]:
        warm = self.warm_start and problem.ids() == self._previous_ids
        active = self._carried(self._stage_one, problem, with_normal=True)
        z, its, status, relaxed = solve_stage_one(problem, red, stage, self._stage_one, warm=warm, active=active)
        return z, stage, red, its, status, relaxed

    def solve(self, problem: ContactProblem) -> SolveResult:
        started = time.perf_counter()
        p = problem
        ids = p.ids()
        if p.n == 0:
            return no_contact(self, p, started)
        if self._native and not self.warm_start:
            done = self._both_stages(p, started)
            if done is not None:
                self._previous_ids, self._previous_mu = ids, p.mu
                return done
        stage = StageOne.of(p, self.dissipation)
        red = stage.red
        if self._structured_applies(p, stage):
            done = self._stages_in_x(p, red, stage, started)
            if done is not None:
                self._previous_ids, self._previous_mu = ids, p.mu
                return done
        z1, stage, red, iterations, status, relaxed = self._stage_one_with(p, red, stage)
        if z1 is None:
            self.reset()
            return failed_result(p, self.name, f"Stage I failed ({status})", iterations)
        warm = self.warm_start and ids == self._previous_ids
        active = self._carried(self._stage_two, p, with_normal=False)
        self._previous_ids, self._previous_mu = ids, p.mu
        z, its2, message, v_next, tau, gap_rate = self._stage_two_solve(stage, p, red, z1, warm, active)
        iterations += its2
        return finish(self, p, z, v_next, tau, relaxed, iterations, message, started, gap_rate=gap_rate)

    def _stages_in_x(
        self, p: ContactProblem, red: ReducedDynamics, stage: StageOne, started: float
    ) -> SolveResult | None:
        """Both stages by the dual method when Stage I's optimum without the pyramids is reachable within them.

        Stage I depends on y only through x = R̃y (6-D): without the pyramids it is the projection of −w̄
        (g = R̃ᵀw̄) onto the non-penetration rows Ñᵀx ≥ l, which is −w̄ itself when those hold there, else a
        QP in nb variables. If the dual method then certifies Stage II with R̃y = x, the pyramids did not
        bind Stage I and the result is both stages' optimum; otherwise (None) Stage I is solved over y.
        """
        ok, w_bar = stage_one_target(red, stage.g)
        if not ok:
            return None
        x = -w_bar
        if not normal_rows_hold(red, x, stage.l_normal):
            nb = len(x)
            C = np.ascontiguousarray(red.N_w.T)
            sol = self._stage_one_x.solve(np.eye(nb), w_bar, C, stage.l_normal, np.full(p.n, INFINITY))
            if not sol.found:
                return None
            x = sol.x
        status, y, v_next, tau, its, k = stages_at(red, stage.R_a, x, self._dual_options)
        if status != 0:
            return None
        self.free_optimum_solves += 1
        message = f"Stage I in x = R̃y; Stage II over a {k}-dimensional optimal set"
        return finish(self, p, y, v_next, tau, False, its, message, started)

    def _both_stages(self, p: ContactProblem, started: float) -> SolveResult | None:
        """Both stages in one compiled call on DAQP's C API (:func:`.stages.two_stages`), where the structured path
        does not apply; None when that call could not finish (Stage I infeasible, an R̃ whose rank gives an
        optimal set of unexpected dimension, the structured path's sizes): the QP path then starts over."""
        n = p.n
        nu, nb = p.nu, p.nb
        if self.structured and 3 * n - nb >= nu + nb:
            return None
        mu = p.mu
        key = (n, mu.tobytes())  # the workspaces' sizes follow n and which μ are finite
        qps = self._native_qps.get(key)
        if qps is None:  # [Stage I's workspace, Stage II's for each dimension k = 1 … 3n its optimal set may have]
            rows = n + 4 * int(np.count_nonzero(np.isfinite(mu)))
            qps = List.empty_list(NATIVE_QP)
            qps.append(NativeQP(3 * n, rows, bounds=True))
            for k in range(1, 3 * n + 1):
                qps.append(NativeQP(k, rows, bounds=False))
            if len(self._native_qps) > 256:
                self._native_qps.clear()
            self._native_qps[key] = qps
        options = (self.dissipation == "contacts", self.null_tol, self.ridge, self.certificate_terms)
        outcome, its1, k, solved, its2, answer, gap_rate, *checked = two_stages(p.record, options, qps)
        if outcome == STAGES_NOT_PD:
            raise np.linalg.LinAlgError("Matrix is not positive definite")
        if outcome != STAGES_SOLVED:
            return None
        y, v_next, tau = split(answer, 3 * n, p.m)
        if k == 0:
            message = "Stage I solution is unique"
        elif solved:
            message = optimal_set_text(k)
        else:
            message = f"Stage II failed (daqp exit {qps[k].exitflag}); Stage I forces used"
        return finish(self, p, y, v_next, tau, False, its1 + its2, message, started, gap_rate=gap_rate, checked=checked)

    def _structured_applies(self, p: ContactProblem, stage: StageOne) -> bool:
        """``structured`` and Stage II's dual has no more variables (nu + nb) than its null-space QP (3n − nb).

        With fewer contacts DAQP's small QPs are as fast, and degenerate stances (two or three feet) are where
        the dual method most often fails to certify (forced on in the trot: 295 of 2372 three- and four-contact
        ticks fell back to the null-space QP).
        """
        nu = stage.R_a.shape[0]
        nb = p.m - nu
        return self.structured and 3 * p.n - nb >= nu + nb

    def _stage_two_solve(
        self,
        stage: StageOne,
        p: ContactProblem,
        red: ReducedDynamics,
        z1: Array,
        warm: bool,
        active: NDArray[np.int32] | None = None,
    ) -> tuple[Array, int, str, Array, Array, float | None]:
        """Stage II from Stage I's forces z₁: (forces, iterations, message, v⁺, τ, min N v⁺ + φ/Δt or None).

        First by the dual Newton method (:mod:`.pyramid_dual`) when ``structured`` and its
        nu + nb multipliers are no more than the null-space QP's 3n − nb variables (8 or more contacts on
        the quadruped); whenever it does not certify optimality, by the null-space QP over w.
        """
        if self._structured_applies(p, stage):
            status, y, v_next, tau, its, k = stage_two_structured(red, stage.R_a, z1, self._dual_options)
            if status == 0:
                self.structured_solves += 1
                return y, its, f"Stage II over a {k}-dimensional optimal set", v_next, tau, None
            if status == 2:
                self.structured_fallbacks += 1
        W, H2, g2, C2, l2, u2 = stage_two_setup(red, (stage.R_a, stage.C_pyramid), z1, (self.null_tol, self.ridge))
        k = W.shape[1]  # W: (3n, k) orthonormal basis of null(R̃)
        if k == 0:
            return z1, 0, "Stage I solution is unique", *stage_one_result(red, z1)[1:]
        sol = self._stage_two.solve_stacked(H2, g2, C2, l2, u2, bounds=False, warm=warm, active=active)
        if not sol.found:
            message = f"Stage II failed ({sol.status}); Stage I forces used"
            return z1, sol.iterations, message, *stage_one_result(red, z1)[1:]
        z, v_next, tau, gap_rate = stage_two_result(red, z1, W, sol.x)
        return z, sol.iterations, f"Stage II over a {k}-dimensional optimal set", v_next, tau, gap_rate


def no_contact(formulation: Formulation, p: ContactProblem, started: float) -> SolveResult:
    """The result without contacts: v⁺_u = L⁻ᵀx₀, τ from the actuated rows."""
    empty = np.zeros(0)
    v_next, tau = contact_velocity_and_torque(reduce(p), empty)
    return formulation._result(
        p, v_next, tau, empty, empty, empty, iterations=0, message="no contacts", started=started
    )


def finish(
    formulation: Formulation,
    p: ContactProblem,
    z: Array,
    v_next: Array,
    tau: Array,
    relaxed: bool,
    iterations: int,
    message: str,
    started: float,
    *,
    repair: bool = True,
    gap_rate: float | None = None,
    checked: tuple[float, float, float] | None = None,
) -> SolveResult:
    """The result for forces z = [f_N; f_S; f_T] with their v⁺ and τ, repairing q̇_des if needed (and
    ``repair``; otherwise a penetrating q̇_des is a failed result). ``gap_rate``: min N v⁺ + φ/Δt (m/s) when the
    caller has it (else computed here); ``checked``: the compiled solve's certificate of z, v⁺ and τ (dropped when
    the repair changes them)."""
    n = p.n
    f_normal, f_s, f_t = z[:n], z[n : 2 * n], z[2 * n :]  # views of this tick's own z
    repaired = False
    penetrates = needs_repair(p, v_next, no_slip=False) if gap_rate is None else gap_rate < -REPAIR_TOL
    if relaxed or penetrates:
        if not repair:
            return failed_result(p, formulation.name, "desired accelerations penetrate a contact", iterations)
        fix = repair_desired_velocity(p, f_normal, f_s, f_t, no_slip=False, qp=formulation.repair_qp)
        if not fix.found:
            return failed_result(p, formulation.name, f"inconsistent q̇_des and {fix.message}", iterations)
        v_next, tau, repaired, checked = fix.v_next, fix.tau, True, None
        message += f"; q̇_des repaired (max change {fix.qd_change:.3g})"
    return formulation._result(
        p,
        v_next,
        tau,
        f_normal,
        f_s,
        f_t,
        iterations=iterations,
        message=message,
        started=started,
        consistency_repaired=repaired,
        checked=checked,
    )
