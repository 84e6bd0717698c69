"""The no-slip LCP's compiled stages, one call each, fed by the reduced dynamics' record.

* :func:`noslip_setup`: Algorithm 1 and the LCP data: a :class:`NoSlipData` record, and B, r of
  LCP(r, BᵀB) for Algorithm 2 (a generic solver, :mod:`idcontrol.solvers.ppm`);
* :func:`noslip_finish`: from the LCP's normal forces, their refinement, the kept tangential forces, v⁺, τ
  and, optionally, the tangential forces shared in proportion to the normal ones and none on an unloaded contact;
* :func:`noslip_solve`: the whole solve, the options' projection and release loop included, in one call.

See :mod:`idcontrol.formulations.noslip_lcp.formulation` for the mathematics.
"""

from __future__ import annotations

import math

import numpy as np
from numba import njit, types
from numba.experimental import structref

from idcontrol.arrays import IN_INDICES, IN_VECTOR, INDICES, MATRIX, VECTOR, boolean, float64
from idcontrol.formulations.certificate import (
    FORCE_TOL,
    SPEED_MARGIN,
    TERM_MASS,
    TERM_TAU_BOUND,
    UNCHECKED,
    WEIGHTS,
    certify_in_solve,
)
from idcontrol.formulations.consistency import REPAIR_TOL, least_norm_solution, repair_native
from idcontrol.formulations.noslip_lcp.find_indices import find_independent_columns
from idcontrol.formulations.record import PROBLEM, with_rows
from idcontrol.formulations.reduced import (
    RECORD,
    _reduce,
    unactuated_velocity,
    velocity_and_inertial_torque,
    velocity_and_torque,
)
from idcontrol.solvers.daqp_native import RECORD as NATIVE_QP
from idcontrol.solvers.dense import cholesky_solve_in_place, gram_by_loops, gram_cholesky
from idcontrol.solvers.lemke import (
    SPREAD_EXACT,
    SPREAD_LEAST_SQUARES,
    SPREAD_UNSOLVABLE,
    lemke_regularized_kernel,
    settle_spread,
)
from idcontrol.solvers.ppm import (
    ACTIVE_SET_SOLVED,
    PPM_SOLVED,
    active_set_kernel,
    ppm_kernel,
    stack_diagonal,
    stacked_rows,
)


@structref.register
class NoSlipDataType(types.StructRef):
    """The numba type of the no-slip LCP's data after Algorithm 1."""

    def preprocess_fields(self, fields):
        return tuple((name, types.unliteral(typ)) for name, typ in fields)


#: Algorithm 1's kept rows and what the finish needs of them (see :func:`noslip_setup`)
NOSLIP_DATA = NoSlipDataType(
    [
        ("selected", INDICES),  # (k,) kept tangential rows: 2i the S row of contact i, 2i + 1 its T row
        ("Q", MATRIX),  # (nb, k) orthonormal basis of the kept whitened rows
        ("triangular", MATRIX),  # (k, k) upper triangular, X[:, selected] = Q · triangular
        ("C_a", MATRIX),  # (k, nu) the kept rows' actuated columns
        ("x_star", VECTOR),  # (nb,) whitened contact-free velocity with the kept rows held
        ("B", MATRIX),  # (nb, n) (I − QQᵀ)Ñ, negligible columns zeroed: N Γ_J Nᵀ = BᵀB
    ]
)


class NoSlipData(structref.StructRefProxy):
    """Algorithm 1's result and the no-slip LCP's factor (a numba structref, made by :func:`noslip_setup`)."""


structref.define_boxing(NoSlipDataType, NoSlipData)


@njit((RECORD, float64), cache=True)
def noslip_setup(red, rank_tol):
    """The no-slip LCP's data after Algorithm 1 (see :class:`~idcontrol.formulations.noslip_lcp.NoSlipLCP`).

    Algorithm 1 runs on the whitened tangential columns in the order S̃₁, T̃₁, S̃₂, ... Returns
    (data, B (nb, n), r (n,), k): the :data:`NOSLIP_DATA` record (kept rows, their QR, x* the whitened
    contact-free velocity with the kept rows held, J v* = [q̇_des; 0]); B = (I − QQᵀ)Ñ with negligible
    columns zeroed (N Γ_J Nᵀ = BᵀB); r = (N v* + φ/Δt)/Δt in force units; k the number of kept rows.
    """
    R_w, R, a, x0, qd_des, phi, dt = red.R_w, red.R, red.a, red.x0, red.qd_des, red.phi, red.dt
    nb = R_w.shape[0]
    n = R_w.shape[1] // 3
    nu = a.shape[0]
    X = np.empty((nb, 2 * n))
    for i in range(nb):
        for c in range(n):
            X[i, 2 * c] = R_w[i, n + c]
            X[i, 2 * c + 1] = R_w[i, 2 * n + c]
    selected, Q, triangular = find_independent_columns(X, rank_tol)
    k = selected.shape[0]
    C_a = np.empty((k, nu))
    b = np.empty(k)  # −C_a q̇_des
    for s in range(k):
        row = (n if selected[s] % 2 == 0 else 2 * n) + selected[s] // 2  # its S or T row in R
        t = 0.0
        for j in range(nu):
            C_a[s, j] = R[row, a[j]]
            t += C_a[s, j] * qd_des[j]
        b[s] = -t
    y = np.empty(k)  # Rᵀ y = b (R upper triangular)
    for s in range(k):
        t = b[s]
        for p in range(s):
            t -= triangular[p, s] * y[p]
        y[s] = t / triangular[s, s]
    x_star = x0.copy()
    for s in range(k):
        t = 0.0
        for i in range(nb):
            t += Q[i, s] * x0[i]
        for i in range(nb):
            x_star[i] += Q[i, s] * (y[s] - t)
    B = np.empty((nb, n))
    for i in range(nb):
        for c in range(n):
            B[i, c] = R_w[i, c]
    for c in range(n):
        for s in range(k):
            t = 0.0
            for i in range(nb):
                t += Q[i, s] * R_w[i, c]
            for i in range(nb):
                B[i, c] -= t * Q[i, s]
        before = 0.0
        after = 0.0
        for i in range(nb):
            before += R_w[i, c] * R_w[i, c]
            after += B[i, c] * B[i, c]
        if after <= 1e-18 * before:  # the kept rows already fix this normal: no effect on v⁺, rounding only
            for i in range(nb):
                B[i, c] = 0.0
    r = np.empty(n)
    for c in range(n):
        t = phi[c] / dt
        for j in range(nu):
            t += R[c, a[j]] * qd_des[j]
        for i in range(nb):
            t += R_w[i, c] * x_star[i]
        r[c] = t / dt
    data = structref.new(NOSLIP_DATA)
    data.selected = selected
    data.Q = Q
    data.triangular = triangular
    data.C_a = C_a
    data.x_star = x_star
    data.B = B
    return data, B, r, k


@njit(cache=True)
def refine_normal_forces(red, data, f_normal):
    """One step of iterative refinement of the active contacts' normal forces (N), in place.

    The LCP is solved in whitened coordinates, where N v⁺ + φ/Δt = 0 holds on the
    active contacts to rounding; evaluated in the robot's coordinates (v⁺ = L⁻ᵀ x⁺)
    it is off by rounding amplified by the whitening. With g the active contacts'
    N v⁺ + φ/Δt in robot coordinates, f_a ← max(f_a − (BₐᵀBₐ)⁻¹ g/Δt, 0). Skipped when the
    active block is not well conditioned or the step is more than a rounding-level correction.
    """
    B, R, phi, dt = data.B, red.R, red.phi, red.dt
    nb, n = B.shape
    active = np.flatnonzero(f_normal > 0.0)
    k = active.shape[0]
    if k == 0 or k > nb:
        return
    m = R.shape[1]
    x = data.x_star.copy()
    for i in range(nb):
        s = 0.0
        for c in range(n):
            s += B[i, c] * f_normal[c]
        x[i] += dt * s
    v = np.empty(m)
    for j in range(red.a.shape[0]):
        v[red.a[j]] = red.qd_des[j]
    unactuated_velocity(red.L_inv, x, red.u, v)
    A, factored, low, high = gram_cholesky(B, nb, active, k)
    if not factored:
        return
    if low < 1e-6 * high:  # dependent active contacts (the active-set fallback allows them): no unique step
        return
    step = np.empty(k)
    for p in range(k):  # δ = −(L Lᵀ)⁻¹ g / Δt
        c = active[p]
        s = phi[c] / dt
        for j in range(m):
            s += R[c, j] * v[j]
        step[p] = -s / dt
    cholesky_solve_in_place(A, step)
    size = 1.0
    largest = 0.0
    for p in range(k):
        size = max(size, f_normal[active[p]])
        largest = max(largest, abs(step[p]))
    if largest > 1e-6 * size:  # a refinement corrects rounding; anything larger means the step is not one
        return
    for p in range(k):
        f_normal[active[p]] = max(f_normal[active[p]] + step[p], 0.0)


@njit(cache=True)
def kept_rows_solution(red, data, f_normal):
    """v⁺ (m,), τ (nu,) N·m, f_S and f_T (n,) N of the no-slip solution with normal forces ``f_normal`` (N).

    x⁺ = x* + Δt B f_N; the kept tangential forces solve Q R f_kept = x⁺ − x₀ − Δt Ñ f_N (divided by Δt);
    τ = (M_a v⁺ + κ_a)/Δt − N_aᵀ f_N − C_aᵀ f_kept.
    """
    B, Q, triangular, selected, C_a = data.B, data.Q, data.triangular, data.selected, data.C_a
    R_w, R, a, x0, dt = red.R_w, red.R, red.a, red.x0, red.dt
    nb, n = B.shape
    k = selected.shape[0]
    x = np.empty(nb)
    gap = np.empty(nb)  # x⁺ − x₀ − Δt Ñ f_N
    for i in range(nb):
        s = 0.0
        t = 0.0
        for c in range(n):
            s += B[i, c] * f_normal[c]
            t += R_w[i, c] * f_normal[c]
        x[i] = data.x_star[i] + dt * s
        gap[i] = x[i] - x0[i] - dt * t
    kept = np.empty(k)
    for s in range(k - 1, -1, -1):  # R kept = Qᵀ gap
        t = 0.0
        for i in range(nb):
            t += Q[i, s] * gap[i]
        for p in range(s + 1, k):
            t -= triangular[s, p] * kept[p]
        kept[s] = t / triangular[s, s]
    f_s = np.zeros(n)
    f_t = np.zeros(n)
    for s in range(k):
        kept[s] /= dt
        if selected[s] % 2 == 0:
            f_s[selected[s] // 2] = kept[s]
        else:
            f_t[selected[s] // 2] = kept[s]
    v, tau = velocity_and_inertial_torque(red, x)
    for j in range(a.shape[0]):
        contact = 0.0
        for c in range(n):
            contact += R[c, a[j]] * f_normal[c]
        for s2 in range(k):
            contact += C_a[s2, j] * kept[s2]
        tau[j] -= contact
    return v, tau, f_s, f_t


@njit(cache=True)
def share_tangential(red, data, f_normal, f_s, f_t):
    """(shared, f_S, f_T): the tangential forces (N) that minimize Σᵢ |f_T,i|² / f_N,i with the same impulse along
    the kept whitened tangential directions Q (nb, k) as (f_S, f_T); ``shared`` False (and the inputs returned)
    when no contact is loaded or the weighted least-norm solution does not reproduce the impulse. A contact
    without normal force gets a weight 10⁻⁶ of the largest one."""
    n = f_normal.shape[0]
    Q, R_w = data.Q, red.R_w
    nb, k = Q.shape
    top = f_normal.max()
    if not top > 0.0 or k == 0:
        return False, f_s, f_t
    root = np.empty(2 * n)
    for c in range(n):
        root[c] = math.sqrt(f_normal[c] + 1e-6 * top)
        root[n + c] = root[c]
    A = np.zeros((k, 2 * n))  # Qᵀ [S̃ T̃] (k, 2n)
    for s in range(k):
        for i in range(nb):
            q = Q[i, s]
            for j in range(2 * n):
                A[s, j] += q * R_w[i, n + j]
    h = np.zeros(k)  # A [f_S; f_T]
    scaled = np.empty((k, 2 * n))  # A diag(root)
    for s in range(k):
        t = 0.0
        for c in range(n):
            t += A[s, c] * f_s[c] + A[s, n + c] * f_t[c]
        h[s] = t
        for j in range(2 * n):
            scaled[s, j] = A[s, j] * root[j]
    z = least_norm_solution(scaled, h, 1e-12)
    f_s_new, f_t_new = np.empty(n), np.empty(n)
    for c in range(n):
        f_s_new[c] = root[c] * z[c]
        f_t_new[c] = root[n + c] * z[n + c]
    error, scale = 0.0, 1.0
    for s in range(k):
        t = -h[s]
        for c in range(n):
            t += A[s, c] * f_s_new[c] + A[s, n + c] * f_t_new[c]
        error = max(error, abs(t))
        scale = max(scale, abs(h[s]))
    if error > 1e-9 * scale:
        return False, f_s, f_t
    return True, f_s_new, f_t_new


@njit(cache=True)
def _absurd(v, dt, N, S, T, tau, f_normal, f_s, f_t, terms):
    """Whether an answer is one no robot can give, whatever the repair does after it: non-finite, or beyond the
    certificate's force or torque bound (``terms``: :meth:`~idcontrol.formulations.certificate.Certifier.terms`;
    without them, only non-finite)."""
    n = f_normal.shape[0]
    for k in range(tau.shape[0]):
        if not math.isfinite(tau[k]) or (terms.shape[0] and abs(tau[k]) > terms[TERM_TAU_BOUND + k]):
            return True
    fastest, total = 0.0, 0.0
    for i in range(n):
        if not (math.isfinite(f_normal[i]) and math.isfinite(f_s[i]) and math.isfinite(f_t[i])):
            return True
        normal, s_now, t_now = 0.0, 0.0, 0.0
        for j in range(v.shape[0]):
            normal += N[i, j] * v[j]
            s_now += S[i, j] * v[j]
            t_now += T[i, j] * v[j]
        fastest = max(fastest, math.sqrt(normal * normal + s_now * s_now + t_now * t_now))
        total += math.sqrt(f_normal[i] * f_normal[i] + f_s[i] * f_s[i] + f_t[i] * f_t[i])
    return terms.shape[0] > 0 and total > terms[TERM_MASS] * (WEIGHTS * 9.81 + (fastest + SPEED_MARGIN) / dt)


#: an unloaded contact's tangential forces below this × the largest normal force are none (``release_unloaded``):
#: the friction share (:func:`share_tangential`) leaves it ~10⁻⁶ of the load by its weight floor, and releasing it
#: for that in a new round solved Solo12's standing problem twice a tick to change the torques by 10⁻⁶ N·m
RELEASE_FLOOR = 1e-4


@njit((RECORD, NOSLIP_DATA, VECTOR, boolean, boolean, boolean), cache=True)
def noslip_finish(red, data, f_normal, refine, share, quiet):
    """v⁺ (m,), τ (nu,) N·m, f_S, f_T (n,) N from the LCP's normal forces ``f_normal`` (N, refined in place when
    ``refine``: :func:`refine_normal_forces`), the kept rows' tangential forces (:func:`kept_rows_solution`),
    when ``share``, those shared in proportion to the normal forces (:func:`share_tangential`), and with
    ``quiet`` an unloaded contact's tangential forces under ``RELEASE_FLOOR`` of the largest normal force set to
    zero; v⁺ and τ follow the forces kept, computed once."""
    n = f_normal.shape[0]
    if refine:
        refine_normal_forces(red, data, f_normal)
    v, tau, f_s, f_t = kept_rows_solution(red, data, f_normal)
    changed = False
    if share and n > 1:
        shared, f_s_new, f_t_new = share_tangential(red, data, f_normal, f_s, f_t)
        if shared:
            f_s, f_t, changed = f_s_new, f_t_new, True
    if quiet and n:  # the share's floor on an unloaded contact (see RELEASE_FLOOR): none
        floor = RELEASE_FLOOR * f_normal.max()
        for c in range(n):
            if (
                f_normal[c] <= 0.0
                and (f_s[c] != 0.0 or f_t[c] != 0.0)
                and abs(f_s[c]) <= floor
                and abs(f_t[c]) <= floor
            ):
                f_s[c] = 0.0
                f_t[c] = 0.0
                changed = True
    if changed:
        y = np.empty(3 * n)
        y[:n] = f_normal
        y[n : 2 * n] = f_s
        y[2 * n :] = f_t
        v, tau = velocity_and_torque(red, red.R_w, red.R, y)
    return v, tau, f_s, f_t


# ---------------------------------------------------------------------------------------------------------------------
# the whole solve in one call

#: the projection of q̇_des (``project``) leaves directions below this × the largest singular value alone: Unitree
#: H1's soles have spurious ones at 10⁻⁷ (answered with 2000 rad/s at 10⁻⁹). Measured at 10⁻³ / 10⁻⁴ / 10⁻⁶: the
#: arm's recorded grasp needed the repair on 97 / 25 / 36 % of its ticks (36 % at 10⁻⁹), the quadruped's trot
#: tracked 0.008 / 0.009 / 0.019 rad (docs/locomotion.md)
PROJECTION_RCOND = 1e-4

#: which solver answered the LCP (:func:`noslip_solve`): Algorithm 2, its active-set fallback, regularized Lemke,
#: or none (zero normal impulses, for the repair)
BY_PPM, BY_ACTIVE_SET, BY_LEMKE, BY_NONE = 0, 1, 2, 3


@njit(cache=True)
def rest_correction_kernel(J_free, drift, rcond):
    """δ (k,): the least-norm least-squares J_free δ ≈ −drift, directions below ``rcond`` × the largest singular value
    left alone (see ``consistency.rest_correction``)."""
    if J_free.shape[0] == 0 or J_free.shape[1] == 0:
        return np.zeros(J_free.shape[1])
    return least_norm_solution(J_free, -drift, rcond)


@njit(cache=True)
def projected_velocity(S, T, a, u, qd_des, rcond):
    """(nu,) the no-slip-consistent q̇_des for the tangential rows S, T (n, m) (``rcond``: ``PROJECTION_RCOND``):
    see :func:`~idcontrol.formulations.noslip_lcp.formulation.project_desired_velocity`."""
    n = S.shape[0]
    nu, nb = a.shape[0], u.shape[0]
    J_a = np.empty((2 * n, nu))
    J_u = np.empty((2 * n, nb))
    for block in range(2):
        rows = S if block == 0 else T
        for i in range(n):
            for j in range(nu):
                J_a[block * n + i, j] = rows[i, a[j]]
            for j in range(nb):
                J_u[block * n + i, j] = rows[i, u[j]]
    drift = np.empty(2 * n)
    consistent = True
    for r in range(2 * n):
        s = 0.0
        for j in range(nu):
            s += J_a[r, j] * qd_des[j]
        drift[r] = s
        consistent = consistent and s == 0.0
    if consistent:  # no stance leg asked to move (a robot holding still): both solves would return exact zeros
        return qd_des.copy()
    V = rest_correction_kernel(J_u, drift, rcond)
    for r in range(2 * n):
        s = drift[r]
        for j in range(nb):
            s += J_u[r, j] * V[j]
        drift[r] = s
    delta = rest_correction_kernel(J_a, drift, rcond)
    out = qd_des.copy()
    for j in range(nu):
        out[j] += delta[j]
    return out


@njit(cache=True)
def _solve_normal_lcp(B, s, r, warm, tol):
    """The normal impulses' LCP w = FᵀF z + r for the factor F = [B; diag(s)] (B (rows, n), s (n,) ≥ 0, r (n,)) by
    Algorithm 2, then its active-set and regularized-Lemke fallbacks (on F formed:
    :func:`~idcontrol.solvers.ppm.stack_diagonal`):
    (z (n,), active, found, (the BY_* solver that answered, PPM's status, its active count, the active-set
    method's status or −1, Lemke's ε or −1, pivots)). Unsolvable: z = 0, BY_NONE."""
    n = r.shape[0]
    none = np.zeros(0, dtype=np.intp)
    trivial = True
    for c in range(n):
        if r[c] < -tol:
            trivial = False
    by, ppm_status, ppm_active, as_status, lemke_eps, pivots = BY_PPM, PPM_SOLVED, 0, -1, -1.0, 0
    if trivial:  # z = 0 solves the LCP (also without contacts)
        return np.zeros(n), none, True, (by, ppm_status, ppm_active, as_status, lemke_eps, pivots)
    z, w, ppm_status, pivots, active = ppm_kernel(B, s, r, warm, tol, 2 * n + 20)
    ppm_active = active.shape[0]
    found = ppm_status == PPM_SOLVED
    F = B
    if not found:
        by = BY_ACTIVE_SET
        F = stack_diagonal(B, s)
        z, w, as_status, pivots, active = active_set_kernel(F, r, warm, tol, 4 * n + 50)
        found = as_status == ACTIVE_SET_SOLVED
    if not found:
        by = BY_LEMKE
        outcome = lemke_regularized_kernel(F.T @ F, r, np.ones(n), 50 * n + 100, 1e-12, 0, 1e-12, 100.0, 1e-2, 1e-7)
        found, z, pivots, lemke_eps = outcome[0], outcome[1], outcome[3], outcome[4]
        active = np.flatnonzero(z > 0.0)
    if not found:
        # Spec item 25: inconsistent q̇_des can make the LCP unsolvable; the contact impulses are then set to zero
        # and the Section 4.5 repair must restore the constraints.
        by, z, active = BY_NONE, np.zeros(n), none
    return z, active, found, (by, ppm_status, ppm_active, as_status, lemke_eps, pivots)


@njit(cache=True)
def _solve_once(problem, warm, options, quiet):
    """Algorithms 1 and 2 (with their fallbacks) and the linear algebra after them, for tangential rows S, T and
    the desired velocity ``qd_des``; with ``quiet``, an unloaded contact's tangential forces under ``RELEASE_FLOOR``
    of the largest normal force are set to zero and v⁺, τ follow. Returns (ok: M_uu positive definite, pivots,
    active indices, kept rows, f_N, v⁺, τ, f_S, f_T, diagnostics (the BY_* solver that answered, PPM's status, its
    active count, the factor's rows, the active-set method's status or −1, Lemke's ε or −1 when it was not run)).
    ``problem``: a :data:`~idcontrol.formulations.record.PROBLEM` record; ``options``: (rank_tol, tol, spread,
    share) as :func:`noslip_solve` takes them."""
    rank_tol, tol, spread, share = options
    n = problem.N.shape[0]
    ok, red = _reduce(problem)
    empty = np.zeros(0)
    none = np.zeros(0, dtype=np.intp)
    if not ok:
        return False, 0, none, 0, empty, empty, empty, empty, empty, (BY_NONE, PPM_SOLVED, 0, 0, -1, -1.0)
    data, B, r, kept = noslip_setup(red, rank_tol)
    spread_weight = 0.0  # > 0: Algorithm 2 runs on the spread's factor
    root = np.zeros(n)  # BᵀB + εD = [B; √ε D]ᵀ [B; √ε D]: Algorithm 2 keeps working on a factor
    if spread > 0.0 and n:
        # D: the contacts whose impulse moves v⁺ (a zero column of B: the kept rows already fix that normal, its
        # impulse is indeterminate and its row stays the paper's; spreading it would answer r/ε for a gap it
        # cannot close, 10³⁰⁰ N on a grasp whose tangential rows hold the object)
        total, moving = 0.0, np.zeros(n, dtype=np.bool_)
        for c in range(n):
            column = 0.0
            for i in range(B.shape[0]):
                column += B[i, c] * B[i, c]
            moving[c] = column > 0.0
            total += column
        count = np.count_nonzero(moving)
        if count:
            spread_weight = spread * total / count
            for c in range(n):
                if moving[c]:
                    root[c] = math.sqrt(spread_weight)
    z, active, found, diagnostics = _solve_normal_lcp(B, root, r, warm, tol)
    refine = found and spread_weight == 0.0
    # spread: the paper's LCP's solution nearest to the spread's, on its face, or where the face's equations hold only
    # in the least-squares sense (a velocity the stance cannot meet) that point, the repair answering the rest; none
    # there: the spread's (ε-near), unless the paper's LCP has no solution and the spread answered about r/ε: then
    # the paper's answer
    if spread_weight > 0.0 and found:
        verdict, z = settle_spread(gram_by_loops(B), r, z, spread_weight, spread, n, True)
        if verdict == SPREAD_EXACT or verdict == SPREAD_LEAST_SQUARES:
            active = np.flatnonzero(z > 0.0)
        elif verdict == SPREAD_UNSOLVABLE:
            root[:] = 0.0
            z, active, found, diagnostics = _solve_normal_lcp(B, root, r, warm, tol)
            refine = found
    by, ppm_status, ppm_active, as_status, lemke_eps, pivots = diagnostics
    f_normal = z.copy()
    # complementarity in the robot's coordinates, not only the whitened ones (refine: a vertex answer's);
    # then the kept rows' tangential forces, optionally shared in proportion to the normal forces
    v_next, tau, f_s, f_t = noslip_finish(red, data, f_normal, refine, share and found, quiet and found)
    rows = stacked_rows(B, root)  # the factor's rows: Algorithm 2's rank bound
    return (
        True,
        pivots,
        active,
        kept,
        f_normal,
        v_next,
        tau,
        f_s,
        f_t,
        (by, ppm_status, ppm_active, rows, as_status, lemke_eps),
    )


#: the no-slip LCP's options for :func:`noslip_solve`: rank_tol, tol, spread, project, release_unloaded, share,
#: repair (see :class:`~idcontrol.formulations.noslip_lcp.NoSlipLCP`) and the certificate's terms
#: (:meth:`~idcontrol.formulations.certificate.Certifier.terms`)
NOSLIP_OPTIONS = types.Tuple((float64, float64, float64, boolean, boolean, boolean, boolean, IN_VECTOR))


@njit((PROBLEM, IN_INDICES, NOSLIP_OPTIONS, types.ListType(NATIVE_QP)), cache=True)
def noslip_solve(problem, warm, options, repairs):
    """The no-slip LCP's solve in one call (see :class:`~idcontrol.formulations.noslip_lcp.NoSlipLCP`): ``project``
    q̇_des, Algorithms 1 and 2 and their fallbacks, then, with ``release_unloaded``, the tangential rows of every
    contact left without normal force removed, and, while one of them carried a tangential force (above the
    ``RELEASE_FLOOR``: below it, zero), the problem solved again (q̇_des projected again for the rows kept, the
    LCP warm-started from the last round's loaded contacts). Released contacts that a later round loads (more
    than the certificate's ``FORCE_TOL``) get their rows back for good, and the problem is solved again, so that
    no loaded contact slides; such a contact may end unloaded again with a tangential force, which the no-slip
    model (μ = ∞) allows. Only when that answer is one no robot can give (:func:`_absurd`: the forces or torques
    beyond the certificate's bounds, the usual outcome of rows held at a contact with almost no load) does the
    released answer stand, and the contacts it loads without rows are counted. Each contact is released and
    given its rows back at most once: at most 2n + 1 rounds.

    Then, with ``repair``, when v⁺ violates a constraint (penetrates or slips by more than
    :data:`~idcontrol.formulations.consistency.REPAIR_TOL`) or the LCP had no solution, the Section 4.5 repair on
    the DAQP workspace ``repairs[n − 1]`` (:func:`~idcontrol.formulations.consistency.repair_native`; none there:
    not attempted, the caller repairs).

    Returns (ok, pivots (all rounds'), the loaded contacts (the active ones with f_N > 0: the next tick's warm
    start), kept rows, the answer [f_N; f_S; f_T; v⁺; τ; q̇_des as solved] (3n + m + 2 nu,), diagnostics (see
    :func:`_solve_once`), the number of contacts (released, given their rows back, loaded without rows), [S; T] as
    solved (2, n, m), whether the LCP's v⁺ violates
    a constraint, the repair's outcome (−1: not attempted; else v⁺ and τ are the repair's, NaN when it failed), the
    violation it left, m/s, its largest change of q̇_des, rad/s, and the certificate of the answer returned under
    ``terms``: code, value, bound, :func:`~idcontrol.formulations.certificate.certify_in_solve`). Scalars where
    Python needs no more, and arrays stacked (docs/benchmarks.md). ``problem``: a
    :data:`~idcontrol.formulations.record.PROBLEM` record (its q̇_des the one asked for); ``warm``: the contacts
    that start Algorithm 2 (the last tick's loaded ones); ``options``: :data:`NOSLIP_OPTIONS`; ``repairs``: the
    repair's DAQP workspaces by contact count.
    """
    rank_tol, tol, spread, project, release_unloaded, share, repair, terms = options
    settings = (rank_tol, tol, spread, share)
    N, S, T, phi, dt, a, u, qd_des = (
        problem.N,
        problem.S,
        problem.T,
        problem.phi,
        problem.dt,
        problem.a,
        problem.u,
        problem.qd_des,
    )
    n = N.shape[0]
    qd = projected_velocity(S, T, a, u, qd_des, PROJECTION_RCOND) if project and n else qd_des.copy()
    rows = np.empty((2, n, S.shape[1]))  # S and T as solved, returned as one array
    S_now, T_now = rows[0], rows[1]
    S_now[:] = S
    T_now[:] = T
    released = np.zeros(n, dtype=np.bool_)
    restored = np.zeros(n, dtype=np.bool_)  # released, then loaded by a later round: its rows given back for good
    ok, pivots, active, kept, f_normal, v_next, tau, f_s, f_t, diagnostics = _solve_once(
        with_rows(problem, S_now, T_now, qd), warm, settings, release_unloaded
    )
    rounds_pivots = pivots
    # the answer before the first contact got its rows back, and its releases: it stands if the rounds after are
    # absurd (copied only then; until then these name the arrays in use, for their types)
    before = (pivots, active, kept, f_normal, v_next, tau, f_s, f_t, diagnostics, qd, rows, released)
    tried = False
    while ok and release_unloaded and diagnostics[0] != BY_NONE:
        back = 0  # released contacts this round loads: without their rows they would slide under the load
        for c in range(n):
            if released[c] and not restored[c] and f_normal[c] > FORCE_TOL:
                back += 1
        if back:
            if not tried:
                before = (
                    pivots,
                    active,
                    kept,
                    f_normal,
                    v_next,
                    tau,
                    f_s,
                    f_t,
                    diagnostics,
                    qd,
                    rows.copy(),
                    released.copy(),
                )
                tried = True
            loaded = active[f_normal[active] > 0.0]
            for c in range(n):
                if released[c] and not restored[c] and f_normal[c] > FORCE_TOL:
                    released[c], restored[c] = False, True
                    S_now[c] = S[c]
                    T_now[c] = T[c]
            qd = projected_velocity(S_now, T_now, a, u, qd_des, PROJECTION_RCOND) if project else qd
            ok, pivots, active, kept, f_normal, v_next, tau, f_s, f_t, diagnostics = _solve_once(
                with_rows(problem, S_now, T_now, qd), loaded, settings, True
            )
            rounds_pivots += pivots
            continue
        more = False
        for c in range(n):
            if f_normal[c] <= 0.0 and not released[c] and not restored[c]:
                released[c] = True  # its rows go; solved again only if it carried a tangential force
                more = more or f_s[c] != 0.0 or f_t[c] != 0.0
                S_now[c] = 0.0
                T_now[c] = 0.0
        if not more:
            break
        qd = projected_velocity(S_now, T_now, a, u, qd_des, PROJECTION_RCOND) if project else qd
        # the last round's loaded contacts start this one: releasing unloaded contacts rarely moves the load,
        # where the previous tick's set would take its pivots again (2.0 a round on 64 contacts, up to 15)
        loaded = active[f_normal[active] > 0.0]
        ok, pivots, active, kept, f_normal, v_next, tau, f_s, f_t, diagnostics = _solve_once(
            with_rows(problem, S_now, T_now, qd), loaded, settings, True
        )
        rounds_pivots += pivots
    if tried and (
        not ok or diagnostics[0] == BY_NONE or _absurd(problem.v, dt, N, S_now, T_now, tau, f_normal, f_s, f_t, terms)
    ):
        # with their rows the answer is one no robot can give: the released answer stands, and the contacts it
        # loads without rows are counted
        pivots, active, kept, f_normal, v_next, tau, f_s, f_t, diagnostics, qd, saved_rows, saved_released = before
        rows[:] = saved_rows
        released[:] = saved_released
        restored[:] = False
        ok = True
    violated = False
    if ok and n:
        for c in range(n):
            gap, slip_s, slip_t = phi[c] / dt, 0.0, 0.0
            for j in range(v_next.shape[0]):
                gap += N[c, j] * v_next[j]
                slip_s += S_now[c, j] * v_next[j]
                slip_t += T_now[c, j] * v_next[j]
            if gap < -REPAIR_TOL or abs(slip_s) > REPAIR_TOL or abs(slip_t) > REPAIR_TOL:
                violated = True
    outcome, violation, change = -1, 0.0, 0.0
    solved = with_rows(problem, S_now, T_now, qd)  # the problem as solved: its kept rows, q̇_des as projected
    if ok and repair and n and n <= len(repairs) and (violated or diagnostics[0] == BY_NONE):
        outcome, v_next, tau, violation, change = repair_native(solved, (f_normal, f_s, f_t), True, repairs[n - 1])
    loaded = active[f_normal[active] > 0.0] if ok else active
    code, value, bound = (
        certify_in_solve(solved, (v_next, tau, f_normal, f_s, f_t), terms) if ok else (UNCHECKED, 0.0, 0.0)
    )
    answer = np.concatenate((f_normal, f_s, f_t, v_next, tau, qd))
    counts = (
        np.count_nonzero(released),
        np.count_nonzero(restored),
        np.count_nonzero(released & (f_normal > FORCE_TOL)) if ok else 0,
    )
    return (
        ok,
        rounds_pivots,
        loaded,
        kept,
        answer,
        diagnostics,
        counts,
        rows,
        violated,
        outcome,
        violation,
        change,
        code,
        value,
        bound,
    )
