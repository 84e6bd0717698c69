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

from idcontrol.validation import all_finite

# ----------------------------------------------------------------------------------------------------------------------
# validation and kinematics


@njit(cache=True)
def least_norm_solution(A, b, rcond):  # pragma: no cover - compiled
    """x (k,) minimizing ‖A x − b‖ with the least norm, A (r, k) C-contiguous; singular values below
    ``rcond`` × the largest ignored (LAPACK gelsd, as numpy.linalg.lstsq, without its Python overhead)."""
    x, _, _, _ = np.linalg.lstsq(A, b, rcond=rcond)
    return x


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
def frame_kinematics(J, support, translations, origins, out, sphere_slot, centers, centers_at_origins):  # noqa: E501 # pragma: no cover
    """Copy the frames' world ``translations`` (tuple of (3,) views of Pinocchio's data) into ``origins`` (k, 3),
    fill ``out`` as :func:`frame_jacobians` does and, when ``centers_at_origins``, the sphere centres
    (s, 3) from the origins of their frames (``sphere_slot`` (s,)).
    """
    for f in range(len(translations)):
        t = translations[f]
        for j in range(3):
            origins[f, j] = t[j]
    frame_jacobians(J, support, origins, out)
    if centers_at_origins:
        for k in range(sphere_slot.shape[0]):
            for j in range(3):
                centers[k, j] = origins[sphere_slot[k], j]


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
def lower_inverse(L, out):  # pragma: no cover - compiled
    """out ← L⁻¹ for the lower triangle of L (n, n), column by column (forward substitution on eⱼ); out's
    upper triangle is left as it is (zeros from the caller)."""
    n = L.shape[0]
    for j in range(n):
        out[j, j] = 1.0 / L[j, j]
        for i in range(j + 1, n):
            s = 0.0
            for k in range(j, i):
                s -= L[i, k] * out[k, j]
            out[i, j] = s / L[i, i]


@njit(cache=True)
def reduced_dynamics(M, f_ext, v, qd_des, N, S, T, a, u, dt):  # pragma: no cover - compiled
    """The problem with P v⁺ = q̇_des eliminated (see :class:`~idcontrol.formulations.base.ReducedDynamics`).

    Returns (ok, κ (m,), L⁻¹ (nb, nb), R = [N; S; T] (3n, m), R̃ = L⁻¹ R_uᵀ (nb, 3n), x₀ (nb,)) with
    κ = −Δt f_ext − M v⁻, M_uu = L Lᵀ and x₀ = −L⁻¹ (M_ua q̇_des + κ_u); ``ok`` is False (and the rest
    unusable) when M_uu is not positive definite.
    """
    m = M.shape[0]
    nb = u.shape[0]
    n = N.shape[0]
    R = np.empty((3 * n, m))
    R[:n] = N
    R[n : 2 * n] = S
    R[2 * n :] = T
    kappa = np.empty(m)
    for i in range(m):
        s = -dt * f_ext[i]
        for j in range(m):
            s -= M[i, j] * v[j]
        kappa[i] = s
    L = np.zeros((nb, nb))
    for i in range(nb):
        for j in range(i + 1):
            L[i, j] = M[u[i], u[j]]
    L_inv = np.zeros((nb, nb))
    R_w = np.empty((nb, 3 * n))
    x0 = np.empty(nb)
    if not cholesky_in_place(L):
        return False, kappa, L_inv, R, R_w, x0
    lower_inverse(L, L_inv)
    for i in range(nb):
        for c in range(3 * n):
            s = 0.0
            for k in range(i + 1):
                s += L_inv[i, k] * R[c, u[k]]
            R_w[i, c] = s
        s = 0.0
        for k in range(i + 1):
            t = kappa[u[k]]
            for j in range(a.shape[0]):
                t += M[u[k], a[j]] * qd_des[j]
            s += L_inv[i, k] * t
        x0[i] = -s
    return True, kappa, L_inv, R, R_w, x0


@njit(cache=True)
def velocity_and_torque(M, kappa, L_inv, x0, R_w, R, a, u, qd_des, y, dt):  # pragma: no cover - compiled
    """v⁺ (m,) and τ (nu,), N·m, for contact forces ``y`` (N) on the rows ``R`` (r, m) whitened as ``R_w``.

    x⁺ = x₀ + Δt R̃ y, v⁺_a = q̇_des, v⁺_u = L⁻ᵀ x⁺, τ = (M_a v⁺ + κ_a)/Δt − (Rᵀ y)_a.
    """
    nb = u.shape[0]
    x = np.empty(nb)
    for i in range(nb):
        s = 0.0
        for c in range(y.shape[0]):
            s += R_w[i, c] * y[c]
        x[i] = x0[i] + dt * s
    v, tau = _velocity_and_inertial_torque(M, kappa, L_inv, x, a, u, qd_des, dt)
    for j in range(a.shape[0]):
        contact = 0.0
        for c in range(y.shape[0]):
            contact += R[c, a[j]] * y[c]
        tau[j] -= contact
    return v, tau


@njit(cache=True)
def _velocity_and_inertial_torque(M, kappa, L_inv, x, a, u, qd_des, dt):  # pragma: no cover - compiled
    """v⁺ (m,) from v⁺_a = q̇_des and v⁺_u = L⁻ᵀ x, and (M_a v⁺ + κ_a)/Δt (nu,), N·m: the torque before the
    contact forces' share is taken off."""
    m = M.shape[0]
    v = np.empty(m)
    for j in range(a.shape[0]):
        v[a[j]] = qd_des[j]
    _unactuated_velocity(L_inv, x, u, v)
    tau = np.empty(a.shape[0])
    for j in range(a.shape[0]):
        s = kappa[a[j]]
        for c in range(m):
            s += M[a[j], c] * v[c]
        tau[j] = s / dt
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
def gram(A):  # pragma: no cover - compiled
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
def null_space_basis(R_w, null_tol):  # pragma: no cover - compiled
    """(q, k) orthonormal basis of null(R_w) for R_w (nb, q): right singular vectors with σ ≤ null_tol · σ_max.

    The usual case, R_w of full row rank, takes a Householder QR of R_wᵀ = Q [R; 0]: null(R_w) is then
    spanned by Q's last q − nb columns. Full rank is certified with σ_min ≥ 1/‖R⁻¹‖_F and σ_max ≤ ‖R‖_F:
    when 1/‖R⁻¹‖_F > null_tol ‖R‖_F, the SVD's tolerance would keep every singular value too, so both
    give the same subspace. Otherwise (or for q ≤ nb) the SVD decides the rank.
    """
    nb, q = R_w.shape
    if nb == 0:
        return np.eye(q)
    if q > nb:
        W = _null_space_qr(R_w, null_tol)
        if W.shape[0] == q:
            return W
    _, singular, vt = np.linalg.svd(R_w, full_matrices=True)
    return null_basis(vt, singular, null_tol)


@njit(cache=True)
def _null_space_qr(R_w, null_tol):  # pragma: no cover - compiled
    """Q's last q − nb columns of R_wᵀ = Q [R; 0] (Householder), or a (0, 0) array when full rank is not certain."""
    nb, q = R_w.shape
    A = R_w.T.copy()  # (q, nb)
    V = np.zeros((q, nb))  # Householder vectors, unit norm
    for j in range(nb):
        norm = 0.0
        for i in range(j, q):
            norm += A[i, j] * A[i, j]
        norm = math.sqrt(norm)
        if norm == 0.0:
            return np.zeros((0, 0))
        householder_step(A, V, j, norm, nb)
    R_norm = 0.0  # ‖R‖_F and ‖R⁻¹‖_F (R = A[:nb], upper triangular)
    for i in range(nb):
        for c in range(i, nb):
            R_norm += A[i, c] * A[i, c]
    R_inv = np.zeros((nb, nb))
    for c in range(nb):
        R_inv[c, c] = 1.0 / A[c, c]
        for i in range(c - 1, -1, -1):
            t = 0.0
            for k in range(i + 1, c + 1):
                t += A[i, k] * R_inv[k, c]
            R_inv[i, c] = -t / A[i, i]
    inv_norm = 0.0
    for i in range(nb):
        for c in range(i, nb):
            inv_norm += R_inv[i, c] * R_inv[i, c]
    if not 1.0 / math.sqrt(inv_norm) > null_tol * math.sqrt(R_norm):
        return np.zeros((0, 0))
    W = np.zeros((q, q - nb))
    for c in range(q - nb):
        W[nb + c, c] = 1.0
    apply_reflections(V, W, True)  # W = H₀ H₁ … H_{nb−1} [0; I]
    return W


@njit(cache=True)
def householder_step(A, V, j, norm, cols):  # pragma: no cover - compiled
    """Step j of a Householder QR of A (d, ·), with norm = ‖A[j:, j]‖ > 0: V[:, j] ← the unit vector v of the
    reflection I − 2vvᵀ that maps A[j:, j] to ∓norm·e_j, applied to A's columns j … cols − 1 in place."""
    d = A.shape[0]
    alpha = -norm if A[j, j] >= 0.0 else norm
    for i in range(j, d):
        V[i, j] = A[i, j]
    V[j, j] -= alpha
    vnorm = 0.0
    for i in range(j, d):
        vnorm += V[i, j] * V[i, j]
    vnorm = math.sqrt(vnorm)
    for i in range(j, d):
        V[i, j] /= vnorm
    for c in range(j, cols):
        t = 0.0
        for i in range(j, d):
            t += V[i, j] * A[i, c]
        for i in range(j, d):
            A[i, c] -= 2.0 * t * V[i, j]


@njit(cache=True)
def apply_reflections(V, X, reverse):  # pragma: no cover - compiled
    """X ← H_{k−1}⋯H₀ X (reverse: H₀⋯H_{k−1} X), H_j = I − 2 v_j v_jᵀ with V's unit columns v_j; X (d, c)."""
    d, k = V.shape
    for jj in range(k):
        j = k - 1 - jj if reverse else jj
        for c in range(X.shape[1]):
            t = 0.0
            for i in range(j, d):
                t += V[i, j] * X[i, c]
            if t != 0.0:
                for i in range(j, d):
                    X[i, c] -= 2.0 * t * V[i, j]


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


@njit(cache=True)
def lemke_step(T, basis, entering, tol, tie_tol, z0_row):  # pragma: no cover - compiled
    """One complementary pivot of Lemke's method, when its minimum-ratio test needs no tie-break.

    Returns (leaving variable, tied rows). The pivot is made when a single row attains the
    minimum ratio or z₀'s row ``z0_row`` ties for it (z₀ then leaves: a solution); otherwise
    the tableau is untouched and the leaving variable is −1 (ties: the caller breaks them
    lexicographically and pivots) or −2 (no row: a secondary ray).
    """
    tied = lemke_ratio_rows(T, entering, tol, tie_tol)
    if tied.shape[0] == 0:
        return -2, tied
    row = tied[0]
    if tied.shape[0] > 1:
        row = -1
        for r in tied:
            if r == z0_row:
                row = z0_row
        if row < 0:
            return -1, tied
    return lemke_pivot(T, basis, row, entering), tied


# ----------------------------------------------------------------------------------------------------------------------
# Algorithms 1 and 2 and the no-slip LCP (see idcontrol.solvers.ppm and idcontrol.formulations.noslip_lcp)


@njit(cache=True)
def find_independent_columns(X, rel_tol):  # pragma: no cover - compiled
    """Algorithm 1 on whitened columns: (selected (r,), Q (d, r) orthonormal, R (r, r) upper, X[:, selected] = Q R).

    Column j is kept when its residual orthogonal to the columns kept before it
    exceeds ``rel_tol`` times its norm (greedy, left to right, Gram–Schmidt).
    """
    d, k = X.shape
    residual = X.copy()
    threshold = np.empty(k)
    for j in range(k):
        s = 0.0
        for i in range(d):
            s += X[i, j] * X[i, j]
        threshold[j] = rel_tol * max(math.sqrt(s), 2.2250738585072014e-308)
    selected = np.empty(min(d, k), dtype=np.intp)
    Q = np.zeros((d, min(d, k)))
    count = 0
    j = 0
    while j < k and count < d:
        s = 0.0
        for i in range(d):
            s += residual[i, j] * residual[i, j]
        norm = math.sqrt(s)
        if norm > threshold[j]:
            for i in range(d):
                Q[i, count] = residual[i, j] / norm
            for c in range(j + 1, k):  # remove the new direction from the later columns
                t = 0.0
                for i in range(d):
                    t += Q[i, count] * residual[i, c]
                for i in range(d):
                    residual[i, c] -= t * Q[i, count]
            selected[count] = j
            count += 1
        j += 1
    Q = Q[:, :count].copy()
    R = np.zeros((count, count))
    for a in range(count):
        for b in range(count):
            s = 0.0
            for i in range(d):
                s += Q[i, a] * X[i, selected[b]]
            R[a, b] = s
    return selected[:count].copy(), Q, R


@njit(cache=True)
def cholesky_in_place(A):  # pragma: no cover - compiled
    """Lower Cholesky factor of the SPD matrix A, overwriting A's lower triangle; False if a pivot is not > 0."""
    n = A.shape[0]
    for j in range(n):
        s = A[j, j]
        for k in range(j):
            s -= A[j, k] * A[j, k]
        if not s > 0.0:
            return False
        A[j, j] = math.sqrt(s)
        for i in range(j + 1, n):
            t = A[i, j]
            for k in range(j):
                t -= A[i, k] * A[j, k]
            A[i, j] = t / A[j, j]
    return True


@njit(cache=True)
def cholesky_solve_in_place(L, y):  # pragma: no cover - compiled
    """y ← (L Lᵀ)⁻¹ y for the lower Cholesky factor L of :func:`cholesky_in_place` (forward, then back)."""
    n = y.shape[0]
    for i in range(n):
        s = y[i]
        for k in range(i):
            s -= L[i, k] * y[k]
        y[i] = s / L[i, i]
    for i in range(n - 1, -1, -1):
        s = y[i]
        for k in range(i + 1, n):
            s -= L[k, i] * y[k]
        y[i] = s / L[i, i]


@njit(cache=True)
def _active_gram_factor(B, rows, active, k):  # pragma: no cover - compiled
    """Cholesky factor L of BₐᵀBₐ (B's first ``rows`` rows, columns ``active[:k]``), whether it exists, and the
    smallest and largest diagonal of L (a cheap conditioning check). Returns (L, factored, low, high)."""
    A = np.empty((k, k))
    for a in range(k):
        for b in range(a + 1):
            s = 0.0
            for i in range(rows):
                s += B[i, active[a]] * B[i, active[b]]
            A[a, b] = s
            A[b, a] = s
    factored = cholesky_in_place(A)
    low, high = np.inf, 0.0
    if factored:
        for a in range(k):
            low = min(low, A[a, a])
            high = max(high, A[a, a])
    return A, factored, low, high


#: :func:`ppm_kernel` status codes
PPM_SOLVED, PPM_RANK, PPM_SINGULAR, PPM_ILL, PPM_CHECK, PPM_CAP = 0, 1, 2, 3, 4, 5


@njit(cache=True)
def _warm_set(warm, n, capacity):  # pragma: no cover - compiled
    """A starting index set from a warm start: (membership mask (n,), indices (capacity,), count), keeping the
    first occurrence of each index of ``warm`` in 0 … n − 1 and ignoring the rest."""
    member = np.zeros(n, dtype=np.bool_)
    indices = np.empty(capacity, dtype=np.intp)
    size = 0
    for i in warm:
        if 0 <= i < n and not member[i]:
            member[i] = True
            indices[size] = i
            size += 1
    return member, indices, size


@njit(cache=True)
def ppm_kernel(B, r, warm, tol, cap):  # pragma: no cover - compiled
    """Algorithm 2 on LCP(r, BᵀB), warm-started from the active indices ``warm`` (see ``solvers.ppm.ppm``).

    Returns (z (n,), w (n,), status (a ``PPM_*`` code), pivots, active indices in the order held).
    Assumes n > 0 and min r < −tol (the caller handles the trivial solution).
    """
    d, n = B.shape
    z = np.zeros(n)
    in_active, active, size = _warm_set(warm, n, n + 1)
    if size == 0:
        best = 0
        for i in range(n):
            if r[i] < r[best]:
                best = i
        active[0] = best
        in_active[best] = True
        size = 1
    scale = 1.0
    for i in range(n):
        scale = max(scale, abs(r[i]))
    w = r.copy()
    Bz = np.empty(d)
    for pivots in range(1, cap + 1):
        if size > d:
            return z, r.copy(), PPM_RANK, pivots, active[:size].copy()
        A, factored, low, high = _active_gram_factor(B, d, active, size)
        if not factored:
            return z, r.copy(), PPM_SINGULAR, pivots, active[:size].copy()
        if low < 1e-6 * max(high, 1e-300):  # condition number of BₐᵀBₐ above ~1e12
            return z, r.copy(), PPM_ILL, pivots, active[:size].copy()
        za = np.empty(size)  # z_a = −(L Lᵀ)⁻¹ r_a
        for a in range(size):
            za[a] = -r[active[a]]
        cholesky_solve_in_place(A, za)
        for i in range(d):
            s = 0.0
            for a in range(size):
                s += B[i, active[a]] * za[a]
            Bz[i] = s
        i_min, w_min = 0, np.inf  # most negative w among the basic (inactive) contacts
        for c in range(n):
            if not in_active[c]:
                s = r[c]
                for i in range(d):
                    s += B[i, c] * Bz[i]
                if s < w_min:
                    i_min, w_min = c, s
        j_min = 0
        for a in range(1, size):
            if za[a] < za[j_min]:
                j_min = a
        if w_min >= -tol * scale:
            if za[j_min] < -tol * scale:
                in_active[active[j_min]] = False
                for a in range(j_min, size - 1):
                    active[a] = active[a + 1]
                size -= 1
                continue
            for a in range(size):
                z[active[a]] = max(za[a], 0.0)
            for i in range(d):
                s = 0.0
                for a in range(size):
                    s += B[i, active[a]] * z[active[a]]
                Bz[i] = s
            z_max = 1.0
            for c in range(n):
                z_max = max(z_max, z[c])
            bound = 1e3 * tol * scale
            bad = False
            for c in range(n):
                s = r[c]
                for i in range(d):
                    s += B[i, c] * Bz[i]
                if in_active[c] and abs(s) < bound:
                    s = 0.0
                w[c] = s
                if s < -bound or abs(z[c] * s) > bound * z_max:
                    bad = True
            # a numerically zero block (columns of norm ~1e-155) passes the relative conditioning test and
            # puts inf in z, which every comparison above lets through
            bad = bad or not (all_finite(z) and all_finite(w))
            return z, w, PPM_CHECK if bad else PPM_SOLVED, pivots, active[:size].copy()
        drop = active[j_min] if za[j_min] < -tol * scale else -1
        active[size] = i_min
        size += 1
        in_active[i_min] = True
        if drop >= 0:
            for a in range(j_min, size - 1):
                active[a] = active[a + 1]
            size -= 1
            in_active[drop] = False
    return z, r.copy(), PPM_CAP, cap, active[:size].copy()


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
def _unactuated_velocity(L_inv, x, u, v):  # pragma: no cover - compiled
    """v[u] = L⁻ᵀ x (L⁻¹ lower triangular)."""
    nb = u.shape[0]
    for j in range(nb):
        s = 0.0
        for i in range(j, nb):
            s += L_inv[i, j] * x[i]
        v[u[j]] = s


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
    A, factored, low, high = _active_gram_factor(B, nb, active, k)
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


@njit(cache=True)
def _free_step(BF, gF, scale):  # pragma: no cover - compiled
    """Newton step on the free columns BF (d, f), or a null-space descent direction when they are dependent.

    Returns (step (f,), unbounded): ``unbounded`` marks a direction along which the objective decreases
    linearly (BF step = 0).
    """
    d, f = BF.shape
    if f <= d:
        A = BF.T @ BF
        if cholesky_in_place(A):
            low, high = np.inf, 0.0
            for i in range(f):
                low = min(low, A[i, i])
                high = max(high, A[i, i])
            if low > 1e-6 * high:
                step = gF.copy()  # step = −(L Lᵀ)⁻¹ gF
                cholesky_solve_in_place(A, step)
                return -step, False
    if d == 0:  # no rows: the objective is linear in every direction
        sv, Vt = np.zeros(0), np.zeros((0, f))
    else:
        _, sv, Vt = np.linalg.svd(BF, full_matrices=False)
    rank = 0
    top = max(sv[0], 1e-300) if sv.shape[0] else 1e-300
    for s in sv:
        if s > 1e-10 * top:
            rank += 1
    coef = np.empty(rank)  # Vᵀ gF
    for j in range(rank):
        s = 0.0
        for i in range(f):
            s += Vt[j, i] * gF[i]
        coef[j] = s
    null_part = gF.copy()
    for i in range(f):
        for j in range(rank):
            null_part[i] -= Vt[j, i] * coef[j]
    if math.sqrt(np.sum(null_part * null_part)) > 1e-9 * scale:
        return -null_part, True
    step = np.zeros(f)
    for i in range(f):
        for j in range(rank):
            step[i] -= Vt[j, i] * coef[j] / (sv[j] * sv[j])
    return step, False


#: :func:`active_set_kernel` status codes
ACTIVE_SET_SOLVED, ACTIVE_SET_UNBOUNDED, ACTIVE_SET_CAP = 0, 1, 2


@njit(cache=True)
def active_set_kernel(B, r, warm, tol, cap):  # pragma: no cover - compiled
    """Primal active-set method on min ½‖Bz‖² + rᵀz, z ≥ 0 (see ``solvers.ppm.active_set``).

    Returns (z (n,), w (n,), status (an ``ACTIVE_SET_*`` code), iterations, free indices in the order held).
    Assumes n > 0 and min r < −tol.
    """
    d, n = B.shape
    z = np.zeros(n)
    is_free, free, size = _warm_set(warm, n, n)
    scale = 1.0
    for i in range(n):
        scale = max(scale, abs(r[i]))
    for iteration in range(1, cap + 1):
        g = B.T @ (B @ z) + r
        step = np.zeros(0)
        unbounded = False
        if size:
            BF = np.empty((d, size))
            gF = np.empty(size)
            for k in range(size):
                BF[:, k] = B[:, free[k]]
                gF[k] = g[free[k]]
            step, unbounded = _free_step(BF, gF, scale)
            if not all_finite(step):  # a numerically zero block: z would leave every bound, as if unbounded
                return z, g, ACTIVE_SET_UNBOUNDED, iteration, free[:size].copy()
        step_max = 0.0
        for s in step:
            step_max = max(step_max, abs(s))
        z_max = 1.0
        for s in z:
            z_max = max(z_max, abs(s))
        if step.shape[0] == 0 or step_max <= 1e-13 * z_max:
            j, w_min = 0, np.inf
            for c in range(n):
                if not is_free[c] and g[c] < w_min:
                    j, w_min = c, g[c]
            if w_min >= -tol * scale:
                for k in range(size):
                    if abs(g[free[k]]) < 1e3 * tol * scale:
                        g[free[k]] = 0.0
                return z, g, ACTIVE_SET_SOLVED, iteration, free[:size].copy()
            free[size] = j
            size += 1
            is_free[j] = True
            continue
        k_block, alpha_block = 0, np.inf
        for k in range(size):
            if step[k] < -1e-15:
                ratio = z[free[k]] / -step[k]
                if ratio < alpha_block:
                    k_block, alpha_block = k, ratio
        if unbounded and not math.isfinite(alpha_block):
            return z, g, ACTIVE_SET_UNBOUNDED, iteration, free[:size].copy()
        alpha = alpha_block if unbounded else min(1.0, alpha_block)
        for k in range(size):
            z[free[k]] += alpha * step[k]
        if unbounded or alpha_block <= 1.0:
            blocked = free[k_block]
            z[blocked] = 0.0
            is_free[blocked] = False
            for k in range(k_block, size - 1):
                free[k] = free[k + 1]
            size -= 1
        for c in range(n):
            z[c] = max(z[c], 0.0)
    return z, B.T @ (B @ z) + r, ACTIVE_SET_CAP, cap, free[:size].copy()


# ----------------------------------------------------------------------------------------------------------------------
# the Coulomb-friction LCP (see idcontrol.formulations.coulomb_lcp)


@njit(cache=True)
def coulomb_lcp_data(R_w, R, x0, a, qd_des, phi, mu, dt):  # pragma: no cover - compiled
    """The Coulomb LCP over z = [f_N; f_S+; f_S−; f_T+; f_T−; λ] in force units.

    From R̃ = [Ñ S̃ T̃] (nb, 3n) and R = [N; S; T] (3n, m): Q (5n + nf)² with the Gram block
    G = R̃₅ᵀR̃₅ of the paper's columns R̃₅ = [Ñ, S̃, −S̃, T̃, −T̃], E, −Eᵀ and μ; q = [N v* + φ/Δt;
    ±S v*; ±T v*; 0]/Δt with v* the contact-free velocity (actuated part q̇_des); R̃₅ (nb, 5n) and the
    matching rows R₅ = [N; S; −S; T; −T] (5n, m), for v⁺ and τ (see :func:`velocity_and_torque`).
    """
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
    G = gram(R_w5)
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
