"""Compiled (numba) numerics of the per-tick hot path.

At 1 kHz the controller's cost is dominated not by arithmetic (the matrices
are at most a few dozen rows) but by the ~1 µs Python/numpy overhead of each
small array operation. Each kernel here fuses one step that used to take tens
of numpy calls into a single compiled call; the mathematics is that of the
callers' docstrings, written as explicit loops. Kernels allocate their outputs
(results must stay valid after the next tick) and are compiled lazily and
cached on disk (``cache=True``); :class:`~idcontrol.controller.InverseDynamicsController`
runs one tick at construction so that loading them never lands in the loop.

Index arguments ``a`` and ``u`` are intp arrays (actuated and unactuated DoFs).
"""

from __future__ import annotations

import math

import numpy as np
from numba import njit

# ----------------------------------------------------------------------------------------------------------------------
# validation and kinematics


@njit(cache=True)
def all_finite(x):  # pragma: no cover - compiled
    """True when no entry of the 1-D array ``x`` is NaN or infinite."""
    for value in x:
        if not math.isfinite(value):
            return False
    return True


@njit(cache=True)
def frame_jacobians(J, support, origins, out):  # pragma: no cover - compiled
    """World-aligned Jacobians of frames at ``origins`` (k, 3) from Pinocchio's world-frame joint Jacobian.

    ``J`` (6, nv) is ``data.J`` (spatial velocity at the world origin, linear
    then angular rows); ``support`` (k, nv) flags the DoFs that move each
    frame's parent joint. The velocity of the point p is v₀ + ω × p, so
    ``out[f]`` (6, nv) = [J_lin + J_ang × p; J_ang] on the support, 0 elsewhere,
    which is Pinocchio's ``getFrameJacobian(..., LOCAL_WORLD_ALIGNED)``.
    """
    for f in range(out.shape[0]):
        px, py, pz = origins[f, 0], origins[f, 1], origins[f, 2]
        for c in range(J.shape[1]):
            if support[f, c]:
                wx, wy, wz = J[3, c], J[4, c], J[5, c]
                out[f, 0, c] = J[0, c] + wy * pz - wz * py
                out[f, 1, c] = J[1, c] + wz * px - wx * pz
                out[f, 2, c] = J[2, c] + wx * py - wy * px
                out[f, 3, c] = wx
                out[f, 4, c] = wy
                out[f, 5, c] = wz
            else:
                for r in range(6):
                    out[f, r, c] = 0.0


@njit(cache=True)
def halfspace_contacts(centers, radii, normal, offset, margin):  # pragma: no cover - compiled
    """Spheres within ``margin`` of the plane n̂·x = offset: (indices (h,), φ (h,), midpoints (h, 3)), m."""
    k = centers.shape[0]
    hit = np.empty(k, dtype=np.intp)
    phi = np.empty(k)
    points = np.empty((k, 3))
    h = 0
    for i in range(k):
        distance = centers[i, 0] * normal[0] + centers[i, 1] * normal[1] + centers[i, 2] * normal[2] - offset
        gap = distance - radii[i]
        if gap <= margin:
            hit[h] = i
            phi[h] = gap
            depth = 0.5 * (distance + radii[i])
            for j in range(3):
                points[h, j] = centers[i, j] - depth * normal[j]
            h += 1
    return hit[:h], phi[:h], points[:h]


@njit(cache=True)
def _rows_along(axis, points, slot, origins, jacobians, out):  # pragma: no cover - compiled
    """out[i, :nv] = dᵀ J_lin + (r × d)ᵀ J_ang for d = axis[i], r = point − frame origin."""
    nv = jacobians.shape[2]
    for i in range(points.shape[0]):
        f = slot[i]
        rx = points[i, 0] - origins[f, 0]
        ry = points[i, 1] - origins[f, 1]
        rz = points[i, 2] - origins[f, 2]
        dx, dy, dz = axis[i, 0], axis[i, 1], axis[i, 2]
        mx, my, mz = ry * dz - rz * dy, rz * dx - rx * dz, rx * dy - ry * dx
        for c in range(nv):
            out[i, c] = (dx * jacobians[f, 0, c] + dy * jacobians[f, 1, c] + dz * jacobians[f, 2, c]
                         + mx * jacobians[f, 3, c] + my * jacobians[f, 4, c] + mz * jacobians[f, 5, c])  # fmt: skip


@njit(cache=True)
def contact_rows(points, normals, tangents_s, tangents_t, slot, origins, jacobians, m):  # pragma: no cover
    """(N, S, T), each (n, m): rows dᵀ J_p of the robot point at each contact for d = n̂, ŝ, t̂.

    With r = point − frame origin and the frame's world-aligned Jacobian
    [J_lin; J_ang] (``jacobians[slot[i]]``), dᵀ J_p = dᵀ J_lin + (r × d)ᵀ J_ang
    (paper App. B); columns nv to m (movable bodies) are left zero. The three
    blocks are views of one (3, n, m) array.
    """
    out = np.zeros((3, points.shape[0], m))
    _rows_along(normals, points, slot, origins, jacobians, out[0])
    _rows_along(tangents_s, points, slot, origins, jacobians, out[1])
    _rows_along(tangents_t, points, slot, origins, jacobians, out[2])
    return out[0], out[1], out[2]


@njit(cache=True)
def forces_in_world(f_normal, f_s, f_t, normals, tangents_s, tangents_t):  # pragma: no cover - compiled
    """(n, 3) f_N n̂ + f_S ŝ + f_T t̂ of each contact, N."""
    out = np.empty((f_normal.shape[0], 3))
    for i in range(f_normal.shape[0]):
        for j in range(3):
            out[i, j] = f_normal[i] * normals[i, j] + f_s[i] * tangents_s[i, j] + f_t[i] * tangents_t[i, j]
    return out


# ----------------------------------------------------------------------------------------------------------------------
# reduced dynamics (see idcontrol.formulations.base)


@njit(cache=True)
def reduced_dynamics_data(M, f_ext, v, qd_des, R, a, u, dt):  # pragma: no cover - compiled
    """κ = −Δt f_ext − M v⁻ (m,), M_uu (nb, nb) and X = [R_uᵀ, M_ua q̇_des + κ_u] (nb, r + 1).

    ``R`` (r, m) holds contact rows (e.g. [N; S; T]). With M_uu = L Lᵀ, L⁻¹X
    gives R̃ and −x₀ in one product (see :class:`~idcontrol.formulations.base.ReducedDynamics`).
    """
    m = M.shape[0]
    nb = u.shape[0]
    r = R.shape[0]
    kappa = np.empty(m)
    for i in range(m):
        s = -dt * f_ext[i]
        for j in range(m):
            s -= M[i, j] * v[j]
        kappa[i] = s
    Muu = np.empty((nb, nb))
    X = np.empty((nb, r + 1))
    for i in range(nb):
        for j in range(nb):
            Muu[i, j] = M[u[i], u[j]]
        for c in range(r):
            X[i, c] = R[c, u[i]]
        s = kappa[u[i]]
        for j in range(a.shape[0]):
            s += M[u[i], a[j]] * qd_des[j]
        X[i, r] = s
    return kappa, Muu, X


@njit(cache=True)
def velocity_and_torque(M, kappa, L_inv, x0, R_w, R, a, u, qd_des, y, dt):  # pragma: no cover - compiled
    """v⁺ (m,) and τ (nu,), N·m, for contact forces ``y`` (N) on the rows ``R`` (r, m) whitened as ``R_w``.

    x⁺ = x₀ + Δt R̃ y, v⁺_a = q̇_des, v⁺_u = L⁻ᵀ x⁺, τ = (M_a v⁺ + κ_a)/Δt − (Rᵀ y)_a.
    """
    m = M.shape[0]
    nb = u.shape[0]
    x = np.empty(nb)
    for i in range(nb):
        s = 0.0
        for c in range(y.shape[0]):
            s += R_w[i, c] * y[c]
        x[i] = x0[i] + dt * s
    v = np.empty(m)
    for j in range(a.shape[0]):
        v[a[j]] = qd_des[j]
    for j in range(nb):
        s = 0.0
        for i in range(j, nb):
            s += L_inv[i, j] * x[i]
        v[u[j]] = s
    tau = np.empty(a.shape[0])
    for j in range(a.shape[0]):
        s = kappa[a[j]]
        for c in range(m):
            s += M[a[j], c] * v[c]
        contact = 0.0
        for c in range(y.shape[0]):
            contact += R[c, a[j]] * y[c]
        tau[j] = s / dt - contact
    return v, tau


@njit(cache=True)
def min_gap_rate(N, v, phi, dt):  # pragma: no cover - compiled
    """min over contacts of N v + φ/Δt, m/s (+inf without contacts)."""
    low = np.inf
    for i in range(N.shape[0]):
        s = phi[i] / dt
        for j in range(v.shape[0]):
            s += N[i, j] * v[j]
        low = min(low, s)
    return low


@njit(cache=True)
def max_abs_product(A, v):  # pragma: no cover - compiled
    """max |A v| (0 for an empty A)."""
    high = 0.0
    for i in range(A.shape[0]):
        s = 0.0
        for j in range(v.shape[0]):
            s += A[i, j] * v[j]
        high = max(high, abs(s))
    return high


# ----------------------------------------------------------------------------------------------------------------------
# the two-stage QP (see idcontrol.formulations.two_stage_qp)


@njit(cache=True)
def _gram(A):  # pragma: no cover - compiled
    """AᵀA for A (r, c): the symmetric (c, c) Gram matrix of A's columns."""
    r, c = A.shape
    G = np.zeros((c, c))
    for i in range(c):
        for j in range(i, c):
            s = 0.0
            for k in range(r):
                s += A[k, i] * A[k, j]
            G[i, j] = s
            G[j, i] = s
    return G


@njit(cache=True)
def stage_one_data(kappa, L_inv, x0, R_w, R, a, u, qd_des, phi, pyramid, dt, infinity):  # pragma: no cover
    """Stage I over y = [f_N; f_S; f_T] in DAQP's stacked layout.

    Returns H = R̃ᵀR̃ (3n, 3n); g = R̃ᵀ(−L⁻¹κ_u/Δt); A = [Ñᵀ R̃; pyramid] (n + p, 3n);
    the stacked bounds ``lower``/``upper`` (3n + n + p: f_N ≥ 0 and free tangential
    forces, then −(N v* + φ/Δt)/Δt ≤ Ñᵀ R̃ y, then 0 ≤ pyramid y); R_a = (R_a)ᵀ (nu, 3n).
    """
    nb, ny = R_w.shape
    n = ny // 3
    p = pyramid.shape[0]
    H = _gram(R_w)
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
def stage_two_data(W, R_a, z1, tau1, pyramid, ridge, infinity):  # pragma: no cover - compiled
    """Stage II over w, y = y₁ + W w (W (3n, k) orthonormal), in DAQP's layout.

    Returns H₂ = (R_a W)ᵀ(R_a W) + ρI with ρ = ridge·max(tr/k, 1e-12);
    g₂ = −(R_a W)ᵀτ₁ + ρ Wᵀy₁; A₂ = [W[:n]; pyramid W]; lower₂ = −[y₁[:n]; pyramid y₁]; upper₂ = ∞.
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
    H = _gram(RW)
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
        lower[i] = -z1[i]
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
def null_basis(vt, singular, null_tol):  # pragma: no cover - compiled
    """W (q, q − rank): the rows of Vᵀ past the numerical rank (σ > null_tol·max(σ₀, 1e-300)), as columns."""
    top = singular[0] if singular.shape[0] else 0.0
    threshold = null_tol * max(top, 1e-300)
    rank = 0
    for s in singular:
        if s > threshold:
            rank += 1
    return vt[rank:].T.copy()


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


# ----------------------------------------------------------------------------------------------------------------------
# Lemke's method (see idcontrol.solvers.lemke)


@njit(cache=True)
def lemke_pivot(T, basis, r, c):  # pragma: no cover - compiled
    """Exchange the basic variable of tableau row r for variable c (rank-1 update); return the leaving variable."""
    scale = T[r, c]
    for j in range(T.shape[1]):
        T[r, j] /= scale  # T[r, c] is now exactly 1, so the update below zeroes column c exactly
    for i in range(T.shape[0]):
        factor = T[i, c]
        if i != r:
            for j in range(T.shape[1]):
                T[i, j] -= factor * T[r, j]
    leaving = basis[r]
    basis[r] = c
    return leaving


@njit(cache=True)
def lemke_ratio_rows(T, entering, tol, tie_tol):  # pragma: no cover - compiled
    """Rows tied (to ``tie_tol``) for the minimum ratio rhs / T[:, entering] over pivots > tol·max(1, |col|∞).

    The right-hand side is T's last column. Empty when no entry qualifies (a secondary ray).
    """
    n = T.shape[0]
    rhs = T.shape[1] - 1
    high = 1.0
    for i in range(n):
        high = max(high, abs(T[i, entering]))
    threshold = tol * high
    low = np.inf
    for i in range(n):
        c_i = T[i, entering]
        if c_i > threshold and T[i, rhs] / c_i < low:
            low = T[i, rhs] / c_i
    tied = np.empty(n, dtype=np.intp)
    count = 0
    if low < np.inf:
        bound = low + tie_tol * max(1.0, abs(low))
        for i in range(n):
            c_i = T[i, entering]
            if c_i > threshold and T[i, rhs] / c_i <= bound:
                tied[count] = i
                count += 1
    return tied[:count]
