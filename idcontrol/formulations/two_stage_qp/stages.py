"""The two-stage QP's compiled stages: Stage I's QP data, Stage II's null-space basis, QP and result.

Stage I is solved over y = [f_N; f_S; f_T] (3n, forces in N) in DAQP's stacked layout; Stage II over w,
y = y₁ + W w with W an orthonormal basis of null(R̃) (:mod:`idcontrol.formulations.two_stage_qp.null_space`).
See :mod:`idcontrol.formulations.two_stage_qp.formulation` for the mathematics.
"""

from __future__ import annotations

import numpy as np
from numba import njit

from idcontrol.formulations.reduced import velocity_and_torque
from idcontrol.formulations.two_stage_qp.null_space import null_space_basis
from idcontrol.solvers.dense import gram


@njit(cache=True)
def _implied_by_facets(mu):  # pragma: no cover - compiled
    """True when the friction pyramid's facets imply f_N ≥ 0 (0 < μ < ∞)."""
    return 0.0 < mu < np.inf


@njit(cache=True)
def stage_one_data(kappa, L_inv, x0, R_w, R, a, u, qd_des, phi, mu, pyramid, dt, infinity):  # pragma: no cover
    """Stage I over y = [f_N; f_S; f_T] in DAQP's stacked layout.

    Returns H = R̃ᵀR̃ (3n, 3n); g = R̃ᵀ(−L⁻¹κ_u/Δt); A = [Ñᵀ R̃; pyramid] (n + p, 3n);
    the stacked bounds ``lower``/``upper`` (3n + n + p: f_N ≥ 0 and free tangential
    forces, then −(N v* + φ/Δt)/Δt ≤ Ñᵀ R̃ y, then 0 ≤ pyramid y); R_a = (R_a)ᵀ (nu, 3n).
    The bound f_N,i ≥ 0 is left out (lower = −∞) where 0 < μᵢ < ∞: the sum of the contact's four
    facets, 4 μᵢ f_N,i ≥ 0, implies it, and a redundant constraint only adds degenerate pivots.
    """
    nb, ny = R_w.shape
    n = ny // 3
    p = pyramid.shape[0]
    H = gram(R_w)
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
        if _implied_by_facets(mu[i]):
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


@njit(cache=True)
def stage_two_data(W, R_a, z1, tau1, pyramid, mu, ridge, infinity):  # pragma: no cover - compiled
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
        lower[i] = -infinity if _implied_by_facets(mu[i]) else -z1[i]
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


@njit(cache=True)
def stage_two_setup(R_w, R, R_a, M, kappa, L_inv, x0, a, u, qd_des, z1, pyramid, mu, null_tol, ridge, dt, infinity):  # noqa: E501 # pragma: no cover
    """Stage II's null-space basis W (3n, k) and its QP (see :func:`stage_two_data`), from Stage I's forces z₁.

    With k = 0 (Stage I's forces are unique) the QP arrays are empty.
    """
    W = null_space_basis(R_w, null_tol)
    if W.shape[1] == 0:
        empty = np.zeros(0)
        return W, np.zeros((0, 0)), empty, np.zeros((0, 0)), empty, empty
    _, tau1 = velocity_and_torque(M, kappa, L_inv, x0, R_w, R, a, u, qd_des, z1, dt)
    H, g, A, lower, upper = stage_two_data(W, R_a, z1, tau1, pyramid, mu, ridge, infinity)
    return W, H, g, A, lower, upper


@njit(cache=True)
def add_to_combination(z1, W, w, n):  # pragma: no cover - compiled
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


@njit(cache=True)
def stage_two_finish(z1, W, w, M, kappa, L_inv, x0, R_w, R, a, u, qd_des, dt):  # pragma: no cover - compiled
    """y = y₁ + W w (f_N clipped at 0), with its v⁺ (m,) and τ (nu,), N·m (see :func:`velocity_and_torque`)."""
    y = add_to_combination(z1, W, w, R.shape[0] // 3)
    v, tau = velocity_and_torque(M, kappa, L_inv, x0, R_w, R, a, u, qd_des, y, dt)
    return y, v, tau
