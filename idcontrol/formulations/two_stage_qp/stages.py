"""The two-stage QP's compiled stages, one call each, fed by the reduced dynamics' record.

* :func:`stage_one_setup`: the reduced dynamics, the pyramid's facets and Stage I's QP (:func:`stage_one_data`), one
  call from the problem's record;
* :func:`stage_one_data`: Stage I's QP over y = [f_N; f_S; f_T] (3n, forces in N) in DAQP's stacked layout;
* :func:`stage_two_setup`: Stage II's null-space basis W (:mod:`.null_space`) and its QP over w, y = y₁ + W w;
* :func:`stage_two_finish`: y, v⁺ and τ from Stage II's w;
* :func:`two_stages`: both stages, their QPs solved on DAQP's C API (:mod:`idcontrol.solvers.daqp_native`), in one
  call.

See :mod:`idcontrol.formulations.two_stage_qp.formulation` for the mathematics.
"""

from __future__ import annotations

import math

import numpy as np
from numba import njit, types

from idcontrol.arrays import IN_MATRIX, IN_VECTOR, MATRIX, VECTOR, boolean, float64
from idcontrol.formulations.certificate import UNCHECKED, certify_in_solve
from idcontrol.formulations.consistency import least_norm_solution
from idcontrol.formulations.record import PROBLEM
from idcontrol.formulations.reduced import RECORD, _reduce, min_gap_rate_of, velocity_and_torque
from idcontrol.formulations.two_stage_qp.null_space import null_space_basis
from idcontrol.solvers.daqp_abi import INFINITY
from idcontrol.solvers.daqp_native import COLD
from idcontrol.solvers.daqp_native import RECORD as NATIVE_QP
from idcontrol.solvers.daqp_native import solve_stacked as native_solve_stacked
from idcontrol.solvers.dense import cholesky_in_place, cholesky_solve_in_place, gram


@njit(cache=True)
def implied_by_facets(mu):
    """True when the friction pyramid's facets imply f_N ≥ 0 (0 < μ < ∞)."""
    return 0.0 < mu < np.inf


@njit(cache=True)
def contact_relative_gradient(red):
    """(3n,) Stage I's linear term g with the kinetic energy measured relative to v_c (``dissipation = "contacts"``).

    δ (nb,), the change of the contact-free unactuated v⁺ that with P v⁺ = q̇_des holds the contacts at rest, is
    the least-norm least-squares solution of R_u δ ≈ −(R_u v_f + R_a q̇_des) over the 3n contact rows (singular
    values below 1e-9 relative ignored), with v_f = L⁻ᵀ x₀ the contact-free unactuated velocity. Then
    ½‖x⁺ − Lᵀv_c‖²/Δt² with x⁺ = x₀ + Δt R̃ y gives g = R̃ᵀ(x₀ − Lᵀv_c)/Δt = −R_u δ/Δt.
    """
    R, a, u, L_inv, x0 = red.R, red.a, red.u, red.L_inv, red.x0
    rows, nb = R.shape[0], u.shape[0]
    R_u = np.empty((rows, nb))
    for c in range(rows):
        for k in range(nb):
            R_u[c, k] = R[c, u[k]]
    v_free = np.empty(nb)  # L⁻ᵀ x₀
    for k in range(nb):
        s = 0.0
        for i in range(k, nb):
            s += L_inv[i, k] * x0[i]
        v_free[k] = s
    drift = np.empty(rows)  # −(R_u v_f + R_a q̇_des)
    for c in range(rows):
        s = 0.0
        for k in range(nb):
            s += R_u[c, k] * v_free[k]
        for j in range(a.shape[0]):
            s += R[c, a[j]] * red.qd_des[j]
        drift[c] = -s
    delta = np.zeros(nb)
    if rows and nb:
        delta = least_norm_solution(R_u, drift, 1e-9)
    g = np.empty(rows)
    for c in range(rows):
        s = 0.0
        for k in range(nb):
            s -= R_u[c, k] * delta[k]
        g[c] = s / red.dt
    return g


@njit((RECORD, IN_MATRIX, boolean, float64), cache=True)
def stage_one_data(red, pyramid, contacts_relative, infinity):
    """Stage I over y = [f_N; f_S; f_T] in DAQP's stacked layout, for the facets ``pyramid`` (p, 3n).

    Returns H = R̃ᵀR̃ (3n, 3n); g = R̃ᵀ(−L⁻¹κ_u/Δt) (or :func:`contact_relative_gradient` when
    ``contacts_relative``); A = [Ñᵀ R̃; pyramid] (n + p, 3n); the stacked bounds ``lower``/``upper``
    (3n + n + p: f_N ≥ 0 and free tangential forces, then −(N v* + φ/Δt)/Δt ≤ Ñᵀ R̃ y, then
    0 ≤ pyramid y); R_a = (R_a)ᵀ (nu, 3n). The bound f_N,i ≥ 0 is left out (lower = −∞) where
    0 < μᵢ < ∞: the sum of the contact's four facets, 4 μᵢ f_N,i ≥ 0, implies it, and a redundant
    constraint only adds degenerate pivots.
    """
    R_w, R, a, u, L_inv, kappa, x0 = red.R_w, red.R, red.a, red.u, red.L_inv, red.kappa, red.x0
    phi, mu, qd_des, dt = red.phi, red.mu, red.qd_des, red.dt
    nb, ny = R_w.shape
    n = ny // 3
    p = pyramid.shape[0]
    H = gram(R_w)
    if contacts_relative:
        g = contact_relative_gradient(red)
    else:
        w = np.zeros(nb)  # −L⁻¹ κ_u / Δt
        for i in range(nb):
            s = 0.0
            for k in range(i + 1):
                s += L_inv[i, k] * kappa[u[k]]
            w[i] = -s / dt
        g = np.zeros(ny)
        for j in range(ny):
            s = 0.0
            for k in range(nb):
                s += R_w[k, j] * w[k]
            g[j] = s
    A = np.zeros((n + p, ny))
    A[:n] = H[:n]  # Ñᵀ R̃: the first n rows of R̃ᵀ R̃
    A[n:] = pyramid
    lower = np.zeros(ny + n + p)
    upper = np.full(ny + n + p, infinity)
    lower[n:ny] = -infinity
    for i in range(n):
        if implied_by_facets(mu[i]):
            lower[i] = -infinity
    for i in range(n):  # −(N_a q̇_des + Ñᵀ x₀ + φ/Δt)/Δt
        s = phi[i] / dt
        for j in range(a.shape[0]):
            s += R[i, a[j]] * qd_des[j]
        for k in range(nb):
            s += R_w[k, i] * x0[k]
        lower[ny + i] = -s / dt
    R_a = np.empty((a.shape[0], ny))
    for j in range(a.shape[0]):
        for c in range(ny):
            R_a[j, c] = R[c, a[j]]
    return H, g, A, lower, upper, R_a


@njit(MATRIX(IN_VECTOR), cache=True)
def pyramid_facets(mu):
    """(4 nf, 3n) facets μᵢ f_N,i ± f_S,i ± f_T,i ≥ 0 of the friction pyramid over y = [f_N; f_S; f_T], for the nf
    contacts with finite μ, facet-major (signs (+, +), (+, −), (−, +), (−, −) of (f_S, f_T)), contacts in order."""
    n = mu.shape[0]
    nf = 0
    for i in range(n):
        if math.isfinite(mu[i]):
            nf += 1
    C = np.zeros((4 * nf, 3 * n))
    for k in range(4):
        sign_s = 1.0 if k < 2 else -1.0
        sign_t = 1.0 if k % 2 == 0 else -1.0
        row = k * nf
        for i in range(n):
            if math.isfinite(mu[i]):
                C[row, i] = mu[i]
                C[row, n + i] = sign_s
                C[row, 2 * n + i] = sign_t
                row += 1
    return C


@njit(
    types.Tuple((boolean, RECORD, MATRIX, MATRIX, VECTOR, MATRIX, VECTOR, VECTOR, MATRIX))(PROBLEM, boolean, float64),
    cache=True,
)
def stage_one_setup(problem, contacts_relative, infinity):
    """(ok, reduced dynamics, pyramid facets, H, g, A, lower, upper, R_a) of a problem record in one call: the
    reduction (:mod:`idcontrol.formulations.reduced`), :func:`pyramid_facets` and :func:`stage_one_data`.
    ``ok`` is False (and the QP arrays empty) when M_uu is not positive definite."""
    ok, red = _reduce(problem)
    C = pyramid_facets(problem.mu)
    if not ok:
        empty = np.zeros(0)
        return False, red, C, np.zeros((0, 0)), empty, np.zeros((0, 0)), empty, empty, np.zeros((0, 0))
    H, g, A, lower, upper, R_a = stage_one_data(red, C, contacts_relative, infinity)
    return True, red, C, H, g, A, lower, upper, R_a


@njit(cache=True)
def stage_two_data(W, R_a, z1, tau1, pyramid, mu, ridge, infinity):
    """Stage II over w, y = y₁ + W w (W (3n, k) orthonormal), in DAQP's layout.

    Returns H₂ = (R_a W)ᵀ(R_a W) + ρI with ρ = ridge·max(tr/k, 1e-12);
    g₂ = −(R_a W)ᵀτ₁ + ρ Wᵀy₁; A₂ = [W[:n]; pyramid W]; lower₂ = −[y₁[:n]; pyramid y₁]; upper₂ = ∞,
    with the f_N ≥ 0 rows the facets imply left out (lower₂ = −∞, see :func:`stage_one_data`).
    """
    ny, k = W.shape
    n = ny // 3
    p = pyramid.shape[0]
    nu = R_a.shape[0]
    RW = np.zeros((nu, k))
    for i in range(nu):
        for c in range(ny):
            r = R_a[i, c]
            if r != 0.0:
                for j in range(k):
                    RW[i, j] += r * W[c, j]
    H = gram(RW)
    trace = 0.0
    for i in range(k):
        trace += H[i, i]
    rho = ridge * max(trace / k, 1e-12)
    g = np.zeros(k)
    for j in range(k):
        H[j, j] += rho
        s = 0.0
        for r in range(nu):
            s -= RW[r, j] * tau1[r]
        t = 0.0
        for c in range(ny):
            t += W[c, j] * z1[c]
        g[j] = s + rho * t
    A = np.zeros((n + p, k))
    lower = np.empty(n + p)
    for i in range(n):
        A[i] = W[i]
        lower[i] = -infinity if implied_by_facets(mu[i]) else -z1[i]
    for i in range(p):
        t = 0.0
        for c in range(ny):
            pc = pyramid[i, c]
            if pc != 0.0:
                t += pc * z1[c]
                for j in range(k):
                    A[n + i, j] += pc * W[c, j]
        lower[n + i] = -t
    return H, g, A, lower, np.full(n + p, infinity)


#: Stage I's matrices that Stage II takes (:func:`stage_two_setup`): R_a (nu, 3n), the actuated rows of the
#: torque's map, and the friction pyramid's facets (4 nf, 3n).
STAGE_ONE_MAPS = types.UniTuple(IN_MATRIX, 2)
#: Stage II's options (:func:`stage_two_setup`): the null-space basis's rank tolerance and the ridge ρ's scale.
STAGE_TWO_OPTIONS = types.UniTuple(float64, 2)


@njit((RECORD, STAGE_ONE_MAPS, IN_VECTOR, STAGE_TWO_OPTIONS), cache=True)
def stage_two_setup(red, stage_one, z1, options):
    """Stage II's null-space basis W (3n, k) and its QP (see :func:`stage_two_data`), from Stage I's forces z₁;
    ``stage_one``: :data:`STAGE_ONE_MAPS`, ``options``: :data:`STAGE_TWO_OPTIONS`.

    Returns (W, H₂, g₂, A₂, lower₂, upper₂); with k = 0 (Stage I's forces are unique) the QP arrays are empty.
    """
    R_a, pyramid = stage_one
    null_tol, ridge = options
    W = null_space_basis(red.R_w, null_tol)
    if W.shape[1] == 0:
        empty = np.zeros(0)
        return W, np.zeros((0, 0)), empty, np.zeros((0, 0)), empty, empty
    _, tau1 = velocity_and_torque(red, red.R_w, red.R, z1)
    H, g, A, lower, upper = stage_two_data(W, R_a, z1, tau1, pyramid, red.mu, ridge, INFINITY)
    return W, H, g, A, lower, upper


@njit(cache=True)
def add_to_combination(z1, W, w, n):
    """y₁ + W w with f_N's rounding-level negatives (first n entries) set to zero."""
    y = z1.copy()
    for c in range(y.shape[0]):
        s = 0.0
        for j in range(w.shape[0]):
            s += W[c, j] * w[j]
        y[c] += s
    for i in range(n):
        y[i] = max(y[i], 0.0)
    return y


@njit((RECORD, IN_VECTOR, IN_MATRIX, IN_VECTOR), cache=True)
def stage_two_finish(red, z1, W, w):
    """y = y₁ + W w (f_N clipped at 0), with its v⁺ (m,) and τ (nu,), N·m."""
    y = add_to_combination(z1, W, w, red.R.shape[0] // 3)
    v, tau = velocity_and_torque(red, red.R_w, red.R, y)
    return y, v, tau


@njit(cache=True)
def _result(red, y):
    """(y, v⁺, τ, min N v⁺ + φ/Δt) of the forces y."""
    v, tau = velocity_and_torque(red, red.R_w, red.R, y)
    return y, v, tau, min_gap_rate_of(red, v)


@njit(types.Tuple((VECTOR, VECTOR, VECTOR, float64))(RECORD, IN_VECTOR, IN_MATRIX, IN_VECTOR), cache=True)
def stage_two_result(red, z1, W, w):
    """(y, v⁺ (m,), τ (nu,) N·m, min N v⁺ + φ/Δt m/s) of y = y₁ + W w (f_N clipped at 0); the last entry says
    whether v⁺ penetrates a contact."""
    return _result(red, add_to_combination(z1, W, w, red.R.shape[0] // 3))


@njit(types.Tuple((VECTOR, VECTOR, VECTOR, float64))(RECORD, IN_VECTOR), cache=True)
def stage_one_result(red, z1):
    """:func:`stage_two_result` of Stage I's forces y₁ themselves (unique, or Stage II failed)."""
    return _result(red, z1.copy())


@njit((VECTOR, types.intp), cache=True)
def clip_normal_forces(y, n):
    """y[:n] (f_N, N) with its rounding-level negatives set to zero, in place."""
    for i in range(n):
        if y[i] < 0.0:
            y[i] = 0.0


# ---------------------------------------------------------------------------------------------------------------------
# both stages in one call, on DAQP's C API

#: :func:`two_stages` outcomes: both stages solved; M_uu not positive definite; a workspace of other sizes than the
#: problem's; Stage I not solved (the caller drops the non-penetration rows and repairs, see the formulation)
STAGES_SOLVED, STAGES_NOT_PD, STAGES_SIZES, STAGES_STAGE_ONE_FAILED = 0, 1, 2, 3


@njit(cache=True)
def unconstrained_if_feasible(H, g, A, lower):
    """(True, w) for w = −H⁻¹g, the unconstrained minimizer of ½wᵀHw + gᵀw (H (k, k) SPD), when A w ≥ lower holds
    on every row: w is then the optimum of the QP with those rows, none of them active. (False, w) otherwise.

    Stage II on a robot standing or walking usually ends here: no pyramid facet binds the minimum-torque forces.
    It is cheaper than DAQP there (docs/benchmarks.md), whose proximal iterations also stop ~1e-5 N from this
    exact minimizer.
    """
    L = H.copy()
    w = -g
    if not cholesky_in_place(L):
        return False, w
    cholesky_solve_in_place(L, w)
    for i in range(A.shape[0]):
        s = 0.0
        for j in range(w.shape[0]):
            s += A[i, j] * w[j]
        if not s >= lower[i]:
            return False, w
    return True, w


#: the two-stage QP's options for :func:`two_stages`: whether the dissipation is contact-relative, the null-space
#: tolerance, the ridge, the certificate's terms (:meth:`~idcontrol.formulations.certificate.Certifier.terms`)
TWO_STAGE_OPTIONS = types.Tuple((boolean, float64, float64, IN_VECTOR))


@njit((PROBLEM, TWO_STAGE_OPTIONS, types.ListType(NATIVE_QP)), cache=True)
def two_stages(problem, options, qps):
    """Stage I and Stage II (:mod:`.formulation`) of ``problem`` (a
    :data:`~idcontrol.formulations.record.PROBLEM` record) in one call, the QPs on the DAQP workspaces ``qps[0]``
    (3n variables with bounds, n + 4 nf rows) and ``qps[k]`` (k = 3n − rank R̃ variables, n + 4 nf rows), both
    started cold; workspaces of other sizes are only checked. ``options``: :data:`TWO_STAGE_OPTIONS`. Stage II takes
    its unconstrained minimizer where that satisfies every row (:func:`unconstrained_if_feasible`, 0 iterations),
    else DAQP. The answer is certified under the options' terms
    (:func:`~idcontrol.formulations.certificate.certify_in_solve`; empty: not).

    Returns (outcome, Stage I iterations, k, whether Stage II was solved, its iterations, [y; v⁺; τ] (3n + m + nu,),
    min N v⁺ + φ/Δt, the certificate's code, value and bound): with k = 0 or Stage II unsolved, y is Stage I's z₁.
    For any outcome but STAGES_SOLVED the caller starts over on the QP path (Stage I's data are not returned; y, v⁺
    and τ come stacked in one array).
    """
    contacts_relative, null_tol, ridge, terms = options
    ok, red, C, H, g, A, lower, upper, R_a = stage_one_setup(problem, contacts_relative, INFINITY)
    empty = np.zeros(0)
    if not ok:
        return STAGES_NOT_PD, 0, 0, False, 0, empty, 0.0, UNCHECKED, 0.0, 0.0
    qp1 = qps[0]
    if qp1.n != g.shape[0] or qp1.rows != A.shape[0] or qp1.ms != g.shape[0]:
        return STAGES_SIZES, 0, 0, False, 0, empty, 0.0, UNCHECKED, 0.0, 0.0
    native_solve_stacked(qp1, H, g, A, lower, upper, COLD)
    its1 = qp1.iterations
    if not qp1.found:
        return STAGES_STAGE_ONE_FAILED, its1, 0, False, 0, empty, 0.0, UNCHECKED, 0.0, 0.0
    n = problem.N.shape[0]
    z1 = qp1.x.copy()
    clip_normal_forces(z1, n)
    W, H2, g2, C2, l2, u2 = stage_two_setup(red, (R_a, C), z1, (null_tol, ridge))
    k = W.shape[1]
    solved, its2 = True, 0
    if k == 0:
        y, v_next, tau, gap = stage_one_result(red, z1)
    else:
        free, w = unconstrained_if_feasible(H2, g2, C2, l2)
        if free:
            y, v_next, tau, gap = stage_two_result(red, z1, W, w)
        else:
            if k >= len(qps) or qps[k].n != k or qps[k].rows != C2.shape[0] or qps[k].ms != 0:
                return STAGES_SIZES, its1, k, False, 0, empty, 0.0, UNCHECKED, 0.0, 0.0
            qp2 = qps[k]
            native_solve_stacked(qp2, H2, g2, C2, l2, u2, COLD)
            solved, its2 = qp2.found, qp2.iterations
            y, v_next, tau, gap = stage_two_result(red, z1, W, qp2.x) if solved else stage_one_result(red, z1)
    code, value, bound = certify_in_solve(problem, (v_next, tau, y[:n], y[n : 2 * n], y[2 * n :]), terms)
    return STAGES_SOLVED, its1, k, solved, its2, np.concatenate((y, v_next, tau)), gap, code, value, bound
