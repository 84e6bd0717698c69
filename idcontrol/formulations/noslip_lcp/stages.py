"""The no-slip LCP's compiled stages: setup (Algorithm 1 and the LCP data) and finish (the normal forces'
refinement, the kept tangential forces, v⁺ and τ). See :mod:`idcontrol.formulations.noslip_lcp.formulation`."""

from __future__ import annotations

import numpy as np
from numba import njit

from idcontrol.formulations.noslip_lcp.find_indices import find_independent_columns
from idcontrol.formulations.reduced import _unactuated_velocity, _velocity_and_inertial_torque
from idcontrol.solvers.dense import cholesky_solve_in_place, gram_cholesky


@njit(cache=True)
def noslip_setup(N_w, S_w, T_w, x0, N, S, T, a, qd_des, phi, dt, rank_tol):  # pragma: no cover - compiled
    """The no-slip LCP's data after Algorithm 1 (see :class:`~idcontrol.formulations.noslip_lcp.NoSlipLCP`).

    Algorithm 1 runs on the whitened tangential columns in the order S̃₁, T̃₁, S̃₂, ...
    Returns: ``selected`` (r,) kept columns (2i: S row of contact i, 2i + 1: its T row);
    Q (nb, r), R (r, r) with X[:, selected] = Q R; C_a (r, nu) the kept rows' actuated
    columns; x* (nb,) the whitened contact-free velocity with the kept rows held
    (J v* = [q̇_des; 0]); B (nb, n) = (I − QQᵀ)Ñ with negligible columns zeroed
    (N Γ_J Nᵀ = BᵀB); r (n,) = (N v* + φ/Δt)/Δt, force units.
    """
    nb, n = N_w.shape
    nu = a.shape[0]
    X = np.empty((nb, 2 * n))
    for i in range(nb):
        for c in range(n):
            X[i, 2 * c] = S_w[i, c]
            X[i, 2 * c + 1] = T_w[i, c]
    selected, Q, R = find_independent_columns(X, rank_tol)
    k = selected.shape[0]
    C_a = np.empty((k, nu))
    b = np.empty(k)  # −C_a q̇_des
    for s in range(k):
        contact = selected[s] // 2
        rows = S if selected[s] % 2 == 0 else T
        t = 0.0
        for j in range(nu):
            C_a[s, j] = rows[contact, a[j]]
            t += C_a[s, j] * qd_des[j]
        b[s] = -t
    y = np.empty(k)  # Rᵀ y = b (R upper triangular)
    for s in range(k):
        t = b[s]
        for p in range(s):
            t -= R[p, s] * y[p]
        y[s] = t / R[s, s]
    x_star = x0.copy()
    for s in range(k):
        t = 0.0
        for i in range(nb):
            t += Q[i, s] * x0[i]
        for i in range(nb):
            x_star[i] += Q[i, s] * (y[s] - t)
    B = N_w.copy()
    for c in range(n):
        for s in range(k):
            t = 0.0
            for i in range(nb):
                t += Q[i, s] * N_w[i, c]
            for i in range(nb):
                B[i, c] -= t * Q[i, s]
        before = 0.0
        after = 0.0
        for i in range(nb):
            before += N_w[i, c] * N_w[i, c]
            after += B[i, c] * B[i, c]
        if after <= 1e-18 * before:  # the kept rows already fix this normal: no effect on v⁺, rounding only
            for i in range(nb):
                B[i, c] = 0.0
    r = np.empty(n)
    for c in range(n):
        t = phi[c] / dt
        for j in range(nu):
            t += N[c, a[j]] * qd_des[j]
        for i in range(nb):
            t += N_w[i, c] * x_star[i]
        r[c] = t / dt
    return selected, Q, R, C_a, x_star, B, r


@njit(cache=True)
def refine_normal_forces(f_normal, active, x_star, B, L_inv, N, phi, a, u, qd_des, dt):  # pragma: no cover
    """One step of iterative refinement of the active contacts' normal forces (N), in place.

    The LCP is solved in whitened coordinates, where N v⁺ + φ/Δt = 0 holds on the
    active contacts to rounding; evaluated in the robot's coordinates (v⁺ = L⁻ᵀ x⁺)
    it is off by rounding amplified by the whitening. With g the active contacts'
    N v⁺ + φ/Δt in robot coordinates, f_a ← max(f_a − (BₐᵀBₐ)⁻¹ g/Δt, 0). Skipped when the
    active block is not well conditioned or the step is more than a rounding-level correction.
    """
    nb, n = B.shape
    k = active.shape[0]
    if k == 0 or k > nb:
        return
    m = N.shape[1]
    x = x_star.copy()
    for i in range(nb):
        s = 0.0
        for c in range(n):
            s += B[i, c] * f_normal[c]
        x[i] += dt * s
    v = np.empty(m)
    for j in range(a.shape[0]):
        v[a[j]] = qd_des[j]
    _unactuated_velocity(L_inv, x, u, v)
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
            s += N[c, j] * v[j]
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
def noslip_finish(f_normal, x_star, B, x0, N_w, Q, R, selected, C_a, M, kappa, L_inv, N, a, u, qd_des, dt):  # noqa: E501 # pragma: no cover
    """v⁺ (m,), τ (nu,) N·m, f_S and f_T (n,) N of the no-slip solution with normal forces ``f_normal`` (N).

    x⁺ = x* + Δt B f_N; the kept tangential forces solve Q R f_kept = x⁺ − x₀ − Δt Ñ f_N (divided by Δt);
    τ = (M_a v⁺ + κ_a)/Δt − N_aᵀ f_N − C_aᵀ f_kept.
    """
    nb, n = N_w.shape
    k = selected.shape[0]
    x = np.empty(nb)
    gap = np.empty(nb)  # x⁺ − x₀ − Δt Ñ f_N
    for i in range(nb):
        s = 0.0
        t = 0.0
        for c in range(n):
            s += B[i, c] * f_normal[c]
            t += N_w[i, c] * f_normal[c]
        x[i] = x_star[i] + dt * s
        gap[i] = x[i] - x0[i] - dt * t
    kept = np.empty(k)
    for s in range(k - 1, -1, -1):  # R kept = Qᵀ gap
        t = 0.0
        for i in range(nb):
            t += Q[i, s] * gap[i]
        for p in range(s + 1, k):
            t -= R[s, p] * kept[p]
        kept[s] = t / R[s, s]
    f_s = np.zeros(n)
    f_t = np.zeros(n)
    for s in range(k):
        kept[s] /= dt
        if selected[s] % 2 == 0:
            f_s[selected[s] // 2] = kept[s]
        else:
            f_t[selected[s] // 2] = kept[s]
    v, tau = _velocity_and_inertial_torque(M, kappa, L_inv, x, a, u, qd_des, dt)
    for j in range(a.shape[0]):
        contact = 0.0
        for c in range(n):
            contact += N[c, a[j]] * f_normal[c]
        for s2 in range(k):
            contact += C_a[s2, j] * kept[s2]
        tau[j] -= contact
    return v, tau, f_s, f_t
