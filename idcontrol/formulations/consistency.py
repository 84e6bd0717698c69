"""Section 4.5: detect and repair desired accelerations that contradict the contacts.

A contact solve can succeed while the requested q̇_des is inconsistent with the
contacts (a robot standing without slip that tries to splay its legs). With the
contact impulses held fixed, the repair finds the actuated velocities closest to
q̇_des that keep every contact unpenetrated (and, for no-slip models, every
tangential velocity zero)::

    minimize_{v⁺, τ}  ½‖P v⁺ − q̇_des‖²
    subject to        N v⁺ ≥ −φ/Δt,  [S v⁺ = 0, T v⁺ = 0],
                      M v⁺ = M v⁻ + Nᵀf_N + Sᵀf_S + Tᵀf_T + Pᵀτ + Δt f_ext

The unactuated rows of the dynamics give v⁺_u as an affine function of
v⁺_a = P v⁺, so the QP is over v⁺_a alone with an identity Hessian; τ then
follows from the actuated rows. It is not always feasible (spec section 9,
item 24): failure is reported, never hidden.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from numba import njit, types
from numba.typed import List
from numpy.typing import NDArray

from idcontrol.arrays import IN_MATRIX, IN_VECTOR, MATRIX, VECTOR, boolean, float64
from idcontrol.formulations.problem import ContactProblem
from idcontrol.formulations.record import PROBLEM
from idcontrol.solvers.daqp_native import CHANGED_ALL, COLD, NativeQP, native_available
from idcontrol.solvers.daqp_native import RECORD as NATIVE_RECORD
from idcontrol.solvers.daqp_native import solve as native_solve
from idcontrol.solvers.dense import cholesky_in_place, cholesky_solve_in_place, least_norm_lstsq
from idcontrol.solvers.qp import INFINITY, DenseQP
from idcontrol.validation import all_finite

Array = NDArray[np.float64]


@njit((IN_MATRIX, IN_VECTOR, float64), cache=True)
def least_norm_solution(A, b, rcond):
    """x (k,) minimizing ‖A x − b‖ with the least norm, A (r, k) C-contiguous; directions below ``rcond`` × the
    largest ignored (:func:`~idcontrol.solvers.dense.least_norm_lstsq`, numpy.linalg.lstsq's answer in a
    tenth of its time at these sizes)."""
    return least_norm_lstsq(A, b, rcond)


@njit((IN_MATRIX, IN_VECTOR, IN_VECTOR, float64), cache=True)
def min_gap_rate(N, v, phi, dt):
    """min over contacts of N v + φ/Δt, m/s (+inf without contacts)."""
    low = np.inf
    for i in range(N.shape[0]):
        s = phi[i] / dt
        for j in range(v.shape[0]):
            s += N[i, j] * v[j]
        low = min(low, s)
    return low


@njit((IN_MATRIX, IN_VECTOR), cache=True)
def max_abs_product(A, v):
    """max |A v| (0 for an empty A)."""
    high = 0.0
    for i in range(A.shape[0]):
        s = 0.0
        for j in range(v.shape[0]):
            s += A[i, j] * v[j]
        high = max(high, abs(s))
    return high


@dataclass
class Repair:
    """Outcome of :func:`repair_desired_velocity` (forces in N, torques in N·m)."""

    found: bool
    v_next: Array
    tau: Array
    qd_change: float  # max |v⁺_a − q̇_des|, rad/s
    message: str


def rest_correction(J_free: Array, drift: Array, rcond: float = 1e-9) -> Array:
    """The least-norm least-squares change δ of some velocities that brings contact velocities to rest.

    J_free (r, k): the contact rows' columns of the velocities that may change; drift (r,): the contact
    velocities now, m/s. Returns δ (k,) with J_free δ ≈ −drift (singular values below ``rcond`` × the largest
    ignored: a direction the velocities barely move would be answered by a huge δ), in those velocities' units.
    """
    if J_free.size == 0:  # no contact rows, or nothing free to change
        return np.zeros(J_free.shape[1])
    return least_norm_solution(np.ascontiguousarray(J_free), -drift, rcond)


#: m/s: a contact velocity beyond this calls for the repair (penetration rate, or slip for no-slip models)
REPAIR_TOL = 1e-7


def needs_repair(problem: ContactProblem, v_next: Array, *, no_slip: bool, tol: float = REPAIR_TOL) -> bool:
    """True when v⁺ penetrates a contact (N v⁺ < −φ/Δt) or, for no-slip models, slips."""
    p = problem
    if p.n == 0:
        return False
    if min_gap_rate(p.N, v_next, p.phi, p.dt) < -tol:
        return True
    return bool(no_slip and max(max_abs_product(p.S, v_next), max_abs_product(p.T, v_next)) > tol)


def repair_desired_velocity(
    problem: ContactProblem, f_normal: Array, f_s: Array, f_t: Array, *, no_slip: bool, qp: DenseQP | None = None
) -> Repair:
    """Solve the Section 4.5 QP with the contact forces (N) held fixed. ``qp``: a persistent workspace (a
    formulation's own, which keeps DAQP's set-up per problem size between ticks); default a new one."""
    p = problem
    record = p.record
    forces = tuple(np.ascontiguousarray(f, dtype=np.float64) for f in (f_normal, f_s, f_t))
    ok, C, upper, c0, D, momentum = repair_data(record, forces, no_slip)
    nu = p.nu
    if not ok:
        nan = np.full(p.m, np.nan)
        return Repair(False, nan, np.full(nu, np.nan), np.inf, "repair: M_uu is not positive definite")
    equalities = 0
    if no_slip and p.n:  # redundant contacts (four corners of a sole) make the no-slip rows dependent
        rows, values = independent_equalities(C[p.n :], upper[p.n :])
        C, upper, equalities = np.vstack([C[: p.n], rows]), np.concatenate([upper[: p.n], values]), len(values)
    lower = np.full(len(upper), -INFINITY)
    # DAQP's own defaults (tolerance 1e-6, 10000 iterations): the repair is a one-off QP, not a per-tick one
    qp = qp if qp is not None else DenseQP(primal_tol=1e-6, iter_limit=10000)
    try:
        constraints = (C, lower, upper) if len(C) else (None, None, None)
        sol = qp.solve(_identity(nu), -p.qd_des, *constraints, equalities=equalities)
    except Exception as e:  # back-end errors become a failed repair, not a crash
        va = None
        reason = f"repair QP raised {type(e).__name__}: {e}"
    else:
        va = sol.x if sol.found else None
        reason = "repair QP infeasible"
    if va is None or not np.all(np.isfinite(va)):
        nan = np.full(p.m, np.nan)
        return Repair(False, nan, np.full(nu, np.nan), np.inf, reason)
    va = np.ascontiguousarray(va, dtype=np.float64)
    v_next, tau, violation, change = repair_result(record, (va, c0, D, momentum), no_slip)
    if violation > 1e-6:
        return Repair(False, v_next, tau, change, f"repair QP left a violation of {violation:.2e} m/s")
    return Repair(True, v_next, tau, change, "desired velocity repaired")


#: singular values of the no-slip rows below this × the largest: dependent directions (:func:`independent_equalities`)
EQUALITY_RCOND = 1e-9


def independent_equalities(A: Array, b: Array, rcond: float = EQUALITY_RCOND) -> tuple[Array, Array]:
    """The equalities A x = b (A (r, k), b (r,)) as orthonormal rows spanning A's row space: (R (s, k), c (s,)) with
    R = Σ⁻¹Uᵀ A and c = Σ⁻¹Uᵀ b over the singular values above ``rcond`` × the largest.

    Four corners of a sole give eight tangential rows of rank three, and an active-set QP handed dependent
    equalities reports them infeasible (Unitree H1 standing under the no-slip LCP). What the dropped directions
    leave unmet, (I − UUᵀ) b, is caught by the repair's final check on every original row.
    """
    if A.shape[0] == 0:
        return A.copy(), b.copy()
    U, sigma, Vt = np.linalg.svd(A, full_matrices=False)
    keep = sigma > rcond * sigma[0] if sigma[0] > 0.0 else np.zeros(len(sigma), dtype=bool)
    return np.ascontiguousarray(Vt[keep]), (U[:, keep].T @ b) / sigma[keep]


_IDENTITIES: dict[int, Array] = {}


def _identity(n: int) -> Array:
    """The (n, n) identity (the repair QP's Hessian), made once per size (writable: DAQP's binding takes writable
    buffers only; nothing writes to it)."""
    eye = _IDENTITIES.get(n)
    if eye is None:
        eye = _IDENTITIES[n] = np.eye(n)
    return eye


#: the contact forces a repair holds fixed: f_N, f_S, f_T (n,), N
FORCES = types.UniTuple(IN_VECTOR, 3)


@njit(types.Tuple((boolean, MATRIX, VECTOR, VECTOR, MATRIX, VECTOR))(PROBLEM, FORCES, boolean), cache=True)
def repair_data(problem, forces, no_slip):
    """The repair QP's constraints over v⁺_a: (ok, C, upper, c₀, D, momentum) with C v⁺_a ≤ upper (the first n rows:
    non-penetration, −(N_a + N_u D) v⁺_a ≤ N_u c₀ + φ/Δt; with ``no_slip`` then the 2n equalities
    (S_a + S_u D) v⁺_a = −S_u c₀ and the same for T), where v⁺_u = c₀ + D v⁺_a solves the unactuated rows of the
    dynamics (M_uu c₀ = (M v⁻ + Δt (f_ext + contact))_u, M_uu D = −M_ua) and momentum = M v⁻ + Δt (f_ext +
    Nᵀf_N + Sᵀf_S + Tᵀf_T) = M v⁺ − Pᵀτ. ``ok`` is False when M_uu is not positive definite."""
    M, v, f_ext, N, S, T, phi, dt = (
        problem.M,
        problem.v,
        problem.f_ext,
        problem.N,
        problem.S,
        problem.T,
        problem.phi,
        problem.dt,
    )
    a, u = problem.a, problem.u
    f_normal, f_s, f_t = forces
    m = M.shape[0]
    n = N.shape[0]
    nu, nb = a.shape[0], u.shape[0]
    momentum = np.empty(m)
    for j in range(m):
        contact = 0.0
        for i in range(n):
            contact += N[i, j] * f_normal[i] + S[i, j] * f_s[i] + T[i, j] * f_t[i]
        s = 0.0
        for c in range(m):
            s += M[j, c] * v[c]
        momentum[j] = s + dt * (f_ext[j] + contact)
    c0 = np.zeros(nb)
    D = np.zeros((nb, nu))
    rows = 3 * n if no_slip else n
    if nb:
        L = np.empty((nb, nb))
        for i in range(nb):
            for j in range(nb):
                L[i, j] = M[u[i], u[j]]
        if not cholesky_in_place(L):
            return False, np.zeros((0, nu)), np.zeros(0), c0, D, momentum
        for i in range(nb):
            c0[i] = momentum[u[i]]
        cholesky_solve_in_place(L, c0)
        column = np.empty(nb)
        for j in range(nu):
            for i in range(nb):
                column[i] = -M[u[i], a[j]]
            cholesky_solve_in_place(L, column)
            for i in range(nb):
                D[i, j] = column[i]
    C = np.empty((rows, nu))
    upper = np.empty(rows)
    for r in range(rows):
        K = N if r < n else S if r < 2 * n else T
        i = r % n if n else 0
        offset = 0.0
        for k in range(nb):
            offset += K[i, u[k]] * c0[k]
        for j in range(nu):
            s = K[i, a[j]]
            for k in range(nb):
                s += K[i, u[k]] * D[k, j]
            C[r, j] = -s if r < n else s
        upper[r] = offset + phi[i] / dt if r < n else -offset
    return True, C, upper, c0, D, momentum


#: a repaired v⁺_a (nu,) and the data it is completed with: c₀ (nb,), D (nb, nu), the momentum (m,)
REPAIRED_VELOCITY = types.Tuple((IN_VECTOR, IN_VECTOR, IN_MATRIX, IN_VECTOR))


@njit(types.Tuple((VECTOR, VECTOR, float64, float64))(PROBLEM, REPAIRED_VELOCITY, boolean), cache=True)
def repair_result(problem, repaired, no_slip):
    """(v⁺ (m,), τ (nu,) N·m, the worst remaining violation m/s, max |v⁺_a − q̇_des| rad/s) of the repaired v⁺_a:
    v⁺_u = c₀ + D v⁺_a, τ = (M_a v⁺ − momentum_a)/Δt; the violation is the penetration rate and, with ``no_slip``,
    the slip."""
    M, N, S, T, phi, dt = problem.M, problem.N, problem.S, problem.T, problem.phi, problem.dt
    a, u, qd_des = problem.a, problem.u, problem.qd_des
    va, c0, D, momentum = repaired
    m = M.shape[0]
    n = N.shape[0]
    nu, nb = a.shape[0], u.shape[0]
    v_next = np.empty(m)
    change = 0.0
    for j in range(nu):
        v_next[a[j]] = va[j]
        change = max(change, abs(va[j] - qd_des[j]))
    for i in range(nb):
        s = c0[i]
        for j in range(nu):
            s += D[i, j] * va[j]
        v_next[u[i]] = s
    tau = np.empty(nu)
    for j in range(nu):
        s = 0.0
        for c in range(m):
            s += M[a[j], c] * v_next[c]
        tau[j] = (s - momentum[a[j]]) / dt
    violation = 0.0
    for i in range(n):
        gap, slip_s, slip_t = phi[i] / dt, 0.0, 0.0
        for c in range(m):
            gap += N[i, c] * v_next[c]
            slip_s += S[i, c] * v_next[c]
            slip_t += T[i, c] * v_next[c]
        violation = max(violation, -gap)
        if no_slip:
            violation = max(violation, abs(slip_s), abs(slip_t))
    return v_next, tau, violation, change


#: :func:`repair_native` outcomes: repaired; M_uu not positive definite; the QP infeasible; a violation left; a
#: workspace of other sizes than the problem's (nothing solved)
REPAIRED, REPAIR_NOT_PD, REPAIR_INFEASIBLE, REPAIR_VIOLATION, REPAIR_SIZES = 0, 1, 2, 3, 4


@njit(cache=True)
def repair_native(problem, forces, no_slip, qp):
    """The Section 4.5 repair (:func:`repair_desired_velocity`) of ``problem`` (a
    :data:`~idcontrol.formulations.record.PROBLEM` record) with the contact ``forces`` (f_N, f_S, f_T) held, its QP
    on the DAQP workspace ``qp`` (nu variables, no bounds, n rows and, with ``no_slip``, 2n equality rows after
    them), from compiled code.

    Returns (outcome: REPAIRED, REPAIR_NOT_PD, REPAIR_INFEASIBLE, REPAIR_VIOLATION or REPAIR_SIZES; v⁺ (m,); τ (nu,)
    N·m; the violation left, m/s; max |v⁺_a − q̇_des|, rad/s).
    """
    M, N, a, qd_des = problem.M, problem.N, problem.a, problem.qd_des
    nu = a.shape[0]
    m = M.shape[0]
    empty_v, empty_tau = np.full(m, np.nan), np.full(nu, np.nan)
    ok, C, upper, c0, D, momentum = repair_data(problem, forces, no_slip)
    if not ok:
        return REPAIR_NOT_PD, empty_v, empty_tau, np.inf, np.inf
    rows = C.shape[0]
    if qp.n != nu or qp.rows != rows or qp.ms != 0 or qp.equalities != (2 * N.shape[0] if no_slip else 0):
        return REPAIR_SIZES, empty_v, empty_tau, np.inf, np.inf
    for i in range(nu):
        for j in range(nu):
            qp.H[i, j] = 1.0 if i == j else 0.0
        qp.f[i] = -qd_des[i]
    for r in range(rows):
        for j in range(nu):
            qp.A[r, j] = C[r, j]
        qp.lower[r] = -INFINITY
        qp.upper[r] = upper[r]
    native_solve(qp, COLD, CHANGED_ALL)
    if not qp.found or not all_finite(qp.x):
        return REPAIR_INFEASIBLE, empty_v, empty_tau, np.inf, np.inf
    v_next, tau, violation, change = repair_result(problem, (qp.x, c0, D, momentum), no_slip)
    return (REPAIR_VIOLATION if violation > 1e-6 else REPAIRED), v_next, tau, violation, change


def repair_text(outcome: int, violation: float) -> str:
    """What :func:`repair_native`'s ``outcome`` says, as :func:`repair_desired_velocity`'s messages."""
    if outcome == REPAIRED:
        return "desired velocity repaired"
    if outcome == REPAIR_NOT_PD:
        return "repair: M_uu is not positive definite"
    if outcome == REPAIR_INFEASIBLE:
        return "repair QP infeasible"
    return f"repair QP left a violation of {violation:.2e} m/s"


def repair_of_answer(
    p: ContactProblem,
    forces: tuple[Array, Array, Array],
    compiled: tuple[int, float, float, Array, Array],
    *,
    no_slip: bool,
    qp: DenseQP,
    again_if_infeasible: bool = False,
) -> tuple[Repair, bool]:
    """The Section 4.5 repair of an answer whose v⁺ penetrates (or, no-slip, slips): the compiled solve's
    ``compiled`` = (outcome, violation left, largest change of q̇_des, its v⁺, its τ), or, when it was not
    attempted (outcome −1; with ``again_if_infeasible`` also when its QP was infeasible), this one's on ``qp``
    from the forces (f_N, f_S, f_T). Returns the repair and whether the compiled solve's certificate still
    describes it (False when the repair was made here)."""
    outcome, violation, change, v_next, tau = compiled
    if outcome >= 0 and not (again_if_infeasible and outcome == REPAIR_INFEASIBLE):
        return Repair(outcome == REPAIRED, v_next, tau, change, repair_text(outcome, violation)), True
    return repair_desired_velocity(p, *forces, no_slip=no_slip, qp=qp), False


def repair_workspace(nu: int, n: int, no_slip: bool) -> NativeQP:
    """A DAQP workspace for :func:`repair_native` (``n`` contacts, ``nu`` actuated DoFs), with DAQP's own tolerance
    and cap as the Python path has them."""
    return NativeQP(
        nu, 3 * n if no_slip else n, bounds=False, equalities=2 * n if no_slip else 0, primal_tol=1e-6, iter_limit=10000
    )


class RepairWorkspaces:
    """The repair's DAQP workspaces for the compiled path (:func:`repair_native`), one per contact count 1 … n,
    each made once; :attr:`by_count` (a typed List, entry n − 1 for n contacts) goes to the compiled solve. Empty
    when the compiled path's self-check failed (the formulation then repairs through :class:`DenseQP`)."""

    def __init__(self, no_slip: bool) -> None:
        self.no_slip = no_slip
        self.native = native_available()
        self.by_count = List.empty_list(NATIVE_RECORD)
        self._count = 0  # kept here: a typed List's len() is slow from Python (docs/benchmarks.md)

    def cover(self, nu: int, n: int) -> None:
        """Workspaces for up to ``n`` contacts with ``nu`` actuated DoFs."""
        if self.native and self._count < n:
            for k in range(self._count + 1, n + 1):
                self.by_count.append(repair_workspace(nu, k, self.no_slip))
            self._count = n
