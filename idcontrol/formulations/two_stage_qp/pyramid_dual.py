"""Stage II of the two-stage QP through its low-dimensional dual (a semismooth Newton method).

Stage II in the contact forces y = [f_N; f_S; f_T] (3n) reads::

    minimize   ½‖R_a y − b‖² + ½ρ‖y‖²
    subject to R̃ y = e,   y ∈ K = K₁ × … × K_n

with b = τ₁ + R_a y₁ (τ(y) = b − R_a y on the optimal set R̃ y = e = R̃ y₁ of Stage I) and K_i the friction
pyramid |f_S| + |f_T| ≤ μᵢ f_N (f_N ≥ 0 alone for μ = ∞, f_S = f_T = 0 ≤ f_N for μ = 0). With G = [R_a; R̃]
(nu + nb rows) and the multipliers scaled by 1/ρ, ζ = (ζ_λ, ζ_ν), the inner minimization over y separates
contact by contact into a Euclidean projection, y(ζ) = Π_K(−Gᵀζ), and the dual is the unconstrained
minimization of the convex, piecewise quadratic, C¹ function::

    θ(ζ) = ½‖Π_K(−Gᵀζ)‖² + bᵀζ_λ + eᵀζ_ν + ½ρ‖ζ_λ‖²,      −∇θ = F(ζ) = G y(ζ) − [b + ρζ_λ; e].

Its dimension is nu + nb (18 for a quadruped), whatever the number of contacts. A generalized Jacobian of F
is −(G P Gᵀ + ρ diag(I, 0)), P the block-diagonal projector onto the faces of the pyramids that hold y(ζ),
so Newton's method with an Armijo search on θ converges in a few steps and identifies the active faces.

Newton's iterates carry rounding of order ε|Gᵀζ| ~ ε|τ|/ρ in y, so they only pick the faces: on the faces
they identify, y = B z is solved exactly (a QR of (R̃B)ᵀ and a ridge regression in the remaining directions,
:func:`polish_on_faces`), and the KKT conditions of the full problem are checked on that y: y in K, R̃ y = e,
stationarity along the faces and the multipliers q = ∇f(y) + R̃ᵀν in the dual cones K_i*, each relative to
the magnitude of its terms. A failed check starts a few primal-dual active-set exchanges (the faces of
Π_K(y − q/ρ)); anything still not certified is reported as such, and the caller falls back to the
null-space QP. The dual's optimal set is unbounded where the fiber {y ∈ K: R̃ y = e} is degenerate (two or
three feet), which is where it fails most; see the tests for the measured rates.
"""

from __future__ import annotations

import math

import numpy as np
from numba import njit, types

from idcontrol.arrays import IN_MATRIX, IN_VECTOR, MATRIX, float64, intp
from idcontrol.formulations.reduced import RECORD, velocity_and_inertial_torque, velocity_and_torque
from idcontrol.solvers.dense import (
    apply_reflections,
    cholesky_in_place,
    cholesky_solve_in_place,
    gram,
    householder_step,
    lower_inverse,
)

# face codes of a contact's projection (for tests and diagnostics)
FACE_INTERIOR, FACE_FACET, FACE_EDGE, FACE_APEX = 3, 2, 1, 0


@njit((float64, float64, float64, float64, MATRIX), cache=True)
def project_pyramid(fn, fs, ft, mu, P):
    """Euclidean projection of (fn, fs, ft) onto {|f_S| + |f_T| ≤ μ f_N}; P (3, 3) receives the projector onto
    the span of the face holding the projection (the generalized Jacobian). Returns (yn, ys, yt, face code).

    μ = ∞: f_N ≥ 0 only; μ = 0: f_S = f_T = 0 ≤ f_N. For 0 < μ < ∞ the point is reflected into the
    quadrant f_S, f_T ≥ 0, where the candidates are the interior, the facet μ f_N = f_S + f_T, its two edges
    and the apex, told apart by the signs of the facet projection's f_S and f_T and by the polar cone.
    """
    for i in range(3):
        for j in range(3):
            P[i, j] = 0.0
    if not mu < np.inf:
        if fn > 0.0:
            P[0, 0] = 1.0
        P[1, 1] = 1.0
        P[2, 2] = 1.0
        return max(fn, 0.0), fs, ft, FACE_INTERIOR if fn > 0.0 else FACE_FACET
    if mu <= 0.0:
        if fn > 0.0:
            P[0, 0] = 1.0
            return fn, 0.0, 0.0, FACE_EDGE
        return 0.0, 0.0, 0.0, FACE_APEX
    ss = 1.0 if fs >= 0.0 else -1.0
    st = 1.0 if ft >= 0.0 else -1.0
    s, t = abs(fs), abs(ft)
    if s + t <= mu * fn:
        P[0, 0] = 1.0
        P[1, 1] = 1.0
        P[2, 2] = 1.0
        return fn, fs, ft, FACE_INTERIOR
    if fn <= -mu * max(s, t):  # in the polar cone: the apex
        return 0.0, 0.0, 0.0, FACE_APEX
    # the region is decided by signs, not by comparing distances: with |p| ≫ |Π(p)| (the dual's large
    # multipliers) squared distances lose Π(p) to rounding
    a2 = mu * mu + 2.0  # the facet μ f_N − f_S − f_T = 0, normal a = (μ, −1, −1)
    c = (mu * fn - s - t) / a2
    qn, qs, qt = fn - c * mu, s + c, t + c
    e2 = 1.0 + mu * mu
    if qs >= 0.0 and qt >= 0.0:
        face, yn, ys, yt = FACE_FACET, qn, qs, qt
    elif qt < 0.0:  # beyond the facet's edge f_T = 0: the edge (1, μ, 0)
        c1 = max((fn + mu * s) / e2, 0.0)
        face, yn, ys, yt = FACE_EDGE if c1 > 0.0 else FACE_APEX, c1, c1 * mu, 0.0
    else:  # the edge (1, 0, μ)
        c2 = max((fn + mu * t) / e2, 0.0)
        face, yn, ys, yt = 5 if c2 > 0.0 else FACE_APEX, c2, 0.0, c2 * mu  # 5: the second edge, mapped below
    sign = (1.0, ss, st)
    if face == FACE_FACET:
        v = (mu, -1.0, -1.0)
        for i in range(3):
            for j in range(3):
                P[i, j] = sign[i] * sign[j] * ((1.0 if i == j else 0.0) - v[i] * v[j] / a2)
    elif face == FACE_EDGE:
        v = (1.0, mu, 0.0)
        for i in range(3):
            for j in range(3):
                P[i, j] = sign[i] * sign[j] * v[i] * v[j] / e2
    elif face == 5:
        face = FACE_EDGE
        v = (1.0, 0.0, mu)
        for i in range(3):
            for j in range(3):
                P[i, j] = sign[i] * sign[j] * v[i] * v[j] / e2
    return yn, ss * ys, st * yt, face


@njit(cache=True)
def _dual_point(G, zeta, mu, y, Ps, faces):
    """y = Π_K(−Gᵀζ) with the per-contact projectors Ps (n, 3, 3); returns ½‖y‖²."""
    mg, ny = G.shape
    n = ny // 3
    half = 0.0
    for i in range(n):
        u = np.zeros(3)
        for k in range(3):
            c = k * n + i
            s = 0.0
            for r in range(mg):
                s -= G[r, c] * zeta[r]
            u[k] = s
        yn, ys, yt, face = project_pyramid(u[0], u[1], u[2], mu[i], Ps[i])
        y[i], y[n + i], y[2 * n + i] = yn, ys, yt
        faces[i] = face
        half += 0.5 * (yn * yn + ys * ys + yt * yt)
    return half


@njit(cache=True)
def _theta_change(y, y_new, zeta, step, alpha, b, e, rho):
    """θ(ζ + α step) − θ(ζ), from y = y(ζ) and y_new = y(ζ + α step), summed as differences: θ itself is
    of the order |τ|²/ρ, so subtracting two values of it would lose the decrease to rounding."""
    nl = b.shape[0]
    s = 0.0
    for c in range(y.shape[0]):
        s += 0.5 * (y_new[c] - y[c]) * (y_new[c] + y[c])
    for r in range(nl):
        s += alpha * step[r] * (b[r] + rho * (zeta[r] + 0.5 * alpha * step[r]))
    for r in range(e.shape[0]):
        s += alpha * step[nl + r] * e[r]
    return s


@njit(cache=True)
def _residual(G, y, zeta, b, e, rho, F):
    """F = G y − [b + ρζ_λ; e]; returns max over rows of |F_r| / scale_r, a backward error.

    scale_r = Σ_c |G_rc| (|y_c| + w_c) + |h_r| with w_c = Σ_s |G_sc ζ_s|, the magnitude of the terms that
    make up u_c = −(Gᵀζ)_c before the projection: y is computed from ζ with absolute rounding errors of
    about ε w_c, which the ridge's small ρ makes large (|ζ| ~ 1/ρ), so F cannot be smaller than ~ε scale_r.
    """
    mg, ny = G.shape
    nl = b.shape[0]
    w = np.zeros(ny)
    for c in range(ny):
        s = 0.0
        for r in range(mg):
            s += abs(G[r, c] * zeta[r])
        w[c] = s + abs(y[c])
    worst = 0.0
    for r in range(mg):
        s = 0.0
        mag = 0.0
        for c in range(ny):
            s += G[r, c] * y[c]
            mag += abs(G[r, c]) * w[c]
        h = b[r] + rho * zeta[r] if r < nl else e[r - nl]
        F[r] = s - h
        mag += abs(h)
        if mag > 0.0:
            worst = max(worst, abs(F[r]) / mag)
        elif F[r] != 0.0:
            worst = np.inf
    return worst


@njit(cache=True)
def _newton_matrix(G, Ps, rho, nl, H):
    """H = G P Gᵀ + ρ diag(I_nl, 0) (mg, mg)."""
    mg, ny = G.shape
    n = ny // 3
    for r in range(mg):
        for s in range(mg):
            H[r, s] = 0.0
    GP = np.empty((mg, 3))
    for i in range(n):
        P = Ps[i]
        for r in range(mg):
            for k in range(3):
                s = 0.0
                for j in range(3):
                    s += G[r, j * n + i] * P[j, k]
                GP[r, k] = s
        for r in range(mg):
            for s in range(r, mg):
                t = 0.0
                for k in range(3):
                    t += GP[r, k] * G[s, k * n + i]
                H[r, s] += t
    for r in range(mg):
        if r < nl:
            H[r, r] += rho
        for s in range(r):
            H[r, s] = H[s, r]


@njit(cache=True)
def _regularized_solve(H, delta, F):
    """(H + δI)⁻¹ F by Cholesky, with two steps of refinement against H + δI; None when not positive definite."""
    m = H.shape[0]
    L = H.copy()
    for r in range(m):
        L[r, r] += delta
    if not cholesky_in_place(L):
        return False, F
    x = np.zeros(m)
    rhs = F.copy()
    for _ in range(3):
        z = rhs.copy()
        cholesky_solve_in_place(L, z)
        for i in range(m):
            x[i] += z[i]
        for i in range(m):
            s = F[i] - delta * x[i]
            for k in range(m):
                s -= H[i, k] * x[k]
            rhs[i] = s
    return True, x


@njit(cache=True)
def _face_directions(Ps, n):
    """An orthonormal basis of each contact's face span, the range of its projector Ps[i]: (d, 3) directions
    with their contact indices (d,) (Gram–Schmidt on the projector's columns)."""
    dirs = np.zeros((3 * n, 3))
    owner = np.zeros(3 * n, dtype=np.int64)
    d = 0
    for i in range(n):
        first = d
        for j in range(3):
            v = Ps[i, :, j].copy()
            for q in range(first, d):
                t = dirs[q, 0] * v[0] + dirs[q, 1] * v[1] + dirs[q, 2] * v[2]
                for k in range(3):
                    v[k] -= t * dirs[q, k]
            norm = math.sqrt(v[0] * v[0] + v[1] * v[1] + v[2] * v[2])
            if norm > 1e-6:
                for k in range(3):
                    dirs[d, k] = v[k] / norm
                owner[d] = i
                d += 1
    return dirs[:d], owner[:d]


@njit(cache=True)
def polish_on_faces(R_a, R_w, b, e, rho, mu, Ps, dual_tol, qv):
    """Stage II restricted to the faces spanned by the projectors Ps, solved exactly, and its optimality checked.

    On the faces y = B z (B orthonormal, block diagonal), with (R̃B)ᵀ = Q [R; 0] (Householder),
    z = Q [R⁻ᵀe; w] and w = A₂ᵀ(A₂A₂ᵀ + ρI)⁻¹(b − R_a B Q₁ R⁻ᵀe), A₂ = R_a B Q₂: the same ridge regression
    as the null-space QP's, without 1/ρ. Then the KKT conditions of the full problem are checked: y in K, and
    the multipliers q = ∇f(y) + R̃ᵀν (ν from the face's stationarity) in the dual cones K_i*, both relative to
    the magnitudes of the terms (``dual_tol``). ``qv`` (3n,) receives q. Returns (certified, y, reason):
    reason 0 = certified, 1 = equalities not met on these faces, 3 = ridge regression not positive definite,
    4/5 = y outside K (f_N < 0 / pyramid), 6 = not stationary along a face, 7/8 = q outside K*.
    """
    nu, ny = R_a.shape
    nb = R_w.shape[0]
    n = ny // 3
    dirs, owner = _face_directions(Ps, n)
    d = dirs.shape[0]
    y = np.zeros(ny)
    X = np.zeros((d, nb))  # (R̃ B)ᵀ
    Y = np.zeros((d, nu))  # (R_a B)ᵀ
    for j in range(d):
        i = owner[j]
        for r in range(nb):
            X[j, r] = R_w[r, i] * dirs[j, 0] + R_w[r, n + i] * dirs[j, 1] + R_w[r, 2 * n + i] * dirs[j, 2]
        for r in range(nu):
            Y[j, r] = R_a[r, i] * dirs[j, 0] + R_a[r, n + i] * dirs[j, 1] + R_a[r, 2 * n + i] * dirs[j, 2]
    V = np.zeros((d, nb))
    perm = np.arange(nb)  # column pivoting: the equalities in the order the QR takes them
    scale = 0.0
    for j in range(nb):
        norm = 0.0
        for i in range(d):
            norm += X[i, j] * X[i, j]
        scale = max(scale, math.sqrt(norm))
    rank = 0
    for j in range(min(nb, d)):  # Householder QR of X with column pivoting
        best, norm = j, -1.0
        for c in range(j, nb):
            t = 0.0
            for i in range(j, d):
                t += X[i, c] * X[i, c]
            if t > norm:
                best, norm = c, t
        norm = math.sqrt(norm)
        if not norm > 1e-9 * scale:
            break  # the remaining equalities depend on these: checked on y below
        if best != j:
            for i in range(d):
                X[i, j], X[i, best] = X[i, best], X[i, j]
            perm[j], perm[best] = perm[best], perm[j]
        householder_step(X, V, j, norm, nb)
        rank += 1
    V = V[:, :rank].copy()
    apply_reflections(V, Y, False)  # Qᵀ (R_a B)ᵀ
    c1 = np.zeros(rank)  # Rᵀ c1 = e (pivoted), R = X[:rank, :rank] upper triangular
    for i in range(rank):
        s = e[perm[i]]
        for k in range(i):
            s -= X[k, i] * c1[k]
        c1[i] = s / X[i, i]
    r = b.copy()
    for q in range(nu):
        for k in range(rank):
            r[q] -= Y[k, q] * c1[k]
    m2 = d - rank
    z = np.zeros((d, 1))
    for k in range(rank):
        z[k, 0] = c1[k]
    if m2 <= nu:  # w = (A₂ᵀA₂ + ρI)⁻¹A₂ᵀr: well conditioned when A₂ has full column rank
        S = np.zeros((m2, m2))
        rhs = np.zeros(m2)
        for p in range(m2):
            for q in range(p, m2):
                t = 0.0
                for k in range(nu):
                    t += Y[rank + p, k] * Y[rank + q, k]
                S[p, q] = t
                S[q, p] = t
            S[p, p] += rho
            t = 0.0
            for k in range(nu):
                t += Y[rank + p, k] * r[k]
            rhs[p] = t
        ok, w = _regularized_solve(S, 0.0, rhs)
        if not ok:
            return False, y, 3
        for k in range(m2):
            z[rank + k, 0] = w[k]
    else:  # w = A₂ᵀ(A₂A₂ᵀ + ρI)⁻¹r: well conditioned when A₂ has full row rank
        S = np.zeros((nu, nu))
        for p in range(nu):
            for q in range(p, nu):
                t = 0.0
                for k in range(rank, d):
                    t += Y[k, p] * Y[k, q]
                S[p, q] = t
                S[q, p] = t
            S[p, p] += rho
        ok, t_vec = _regularized_solve(S, 0.0, r)
        if not ok:
            return False, y, 3
        for k in range(m2):
            s = 0.0
            for q in range(nu):
                s += Y[rank + k, q] * t_vec[q]
            z[rank + k, 0] = s
    apply_reflections(V, z, True)  # Q [c1; w]
    for j in range(d):
        i = owner[j]
        y[i] += dirs[j, 0] * z[j, 0]
        y[n + i] += dirs[j, 1] * z[j, 0]
        y[2 * n + i] += dirs[j, 2] * z[j, 0]
    for r in range(nb):  # every equality, the ones the QR left out included
        s = -e[r]
        m = abs(e[r])
        for c in range(ny):
            s += R_w[r, c] * y[c]
            m += abs(R_w[r, c] * y[c])
        if abs(s) > dual_tol * m:
            return False, y, 1
    # the multipliers: λ = R_a y − b, g = R_aᵀλ + ρy, ν from Bᵀ(g + R̃ᵀν) = 0, q = g + R̃ᵀν
    lam = np.zeros(nu)
    lam_mag = np.zeros(nu)
    for q in range(nu):
        s = -b[q]
        m = abs(b[q])
        for c in range(ny):
            s += R_a[q, c] * y[c]
            m += abs(R_a[q, c] * y[c])
        lam[q] = s
        lam_mag[q] = m
    g = np.zeros(ny)
    g_mag = np.zeros(ny)
    for c in range(ny):
        s = rho * y[c]
        m = abs(s)
        for q in range(nu):
            s += R_a[q, c] * lam[q]
            m += abs(R_a[q, c]) * lam_mag[q]
        g[c] = s
        g_mag[c] = m
    h = np.zeros((d, 1))
    for j in range(d):
        i = owner[j]
        h[j, 0] = dirs[j, 0] * g[i] + dirs[j, 1] * g[n + i] + dirs[j, 2] * g[2 * n + i]
    apply_reflections(V, h, False)
    nu_mult = np.zeros(nb)  # R ν = −(Qᵀ Bᵀ g)[:rank] (pivoted); the dependent equalities get none
    for i in range(rank - 1, -1, -1):
        s = -h[i, 0]
        for k in range(i + 1, rank):
            s -= X[i, k] * nu_mult[perm[k]]
        nu_mult[perm[i]] = s / X[i, i]
    why = 0
    for i in range(n):
        qm = 0.0
        for k in range(3):
            c = k * n + i
            s = g[c]
            m = g_mag[c]
            for r in range(nb):
                s += R_w[r, c] * nu_mult[r]
                m += abs(R_w[r, c] * nu_mult[r])
            qv[c] = s
            qm = max(qm, m)
        if why:
            continue
        # y in K ...
        fn, fs, ft = y[i], y[n + i], y[2 * n + i]
        slack = dual_tol * math.sqrt(fn * fn + fs * fs + ft * ft)
        if fn < -slack:
            why = 4
        elif mu[i] < np.inf and abs(fs) + abs(ft) > mu[i] * fn + slack:
            why = 5
        a0, a1, a2 = qv[i], qv[n + i], qv[2 * n + i]
        slack = dual_tol * qm
        # ... the multiplier vanishes along the face (stationarity within it) ...
        for j in range(d):
            if owner[j] == i and abs(dirs[j, 0] * a0 + dirs[j, 1] * a1 + dirs[j, 2] * a2) > slack:
                why = 6
        # ... and across it, it lies in the dual cone K_i*
        if mu[i] < np.inf:
            if a0 < mu[i] * max(abs(a1), abs(a2)) - slack:
                why = 7
        elif a0 < -slack or abs(a1) > slack or abs(a2) > slack:
            why = 8
    return why == 0, y, why


@njit(cache=True)
def _exchange_faces(y, qv, rho, mu, Ps, faces):
    """The faces of Π_K(y − q/ρ), contact by contact (a primal-dual active-set step from an exact y, q)."""
    n = mu.shape[0]
    for i in range(n):
        _, _, _, faces[i] = project_pyramid(
            y[i] - qv[i] / rho, y[n + i] - qv[n + i] / rho, y[2 * n + i] - qv[2 * n + i] / rho, mu[i], Ps[i]
        )


@njit(cache=True)
def _polish_rounds(R_a, R_w, b, e, rho, mu, Ps, faces, tol, rounds):
    """:func:`polish_on_faces` on the faces Ps, then up to ``rounds`` − 1 primal-dual active-set exchanges
    (:func:`_exchange_faces`) while the checks fail on y or q. Returns (certified, y, reason)."""
    n = mu.shape[0]
    qv = np.zeros(3 * n)
    Ps_next = Ps.copy()
    faces_next = faces.copy()
    certified, y, why = polish_on_faces(R_a, R_w, b, e, rho, mu, Ps_next, tol, qv)
    for _ in range(rounds - 1):
        if certified or why < 4:
            break
        previous = faces_next.copy()
        _exchange_faces(y, qv, rho, mu, Ps_next, faces_next)
        same = True
        for i in range(n):
            if faces_next[i] != previous[i]:
                same = False
        if same:
            break
        certified, y, why = polish_on_faces(R_a, R_w, b, e, rho, mu, Ps_next, tol, qv)
    return certified, y, why


@njit((IN_MATRIX, IN_MATRIX, IN_VECTOR, IN_VECTOR, IN_VECTOR, float64, IN_VECTOR, float64, intp), cache=True)
def stage_two_dual(R_a, R_w, b, e, mu, rho, zeta0, tol, max_iter):
    """Stage II by a semismooth Newton method on its dual, then exactly on the faces it identifies.

    R_a (nu, 3n), R_w = R̃ (nb, 3n), b (nu,), e (nb,), μ (n,), ρ > 0, ζ₀ (nu + nb,) a starting point (scaled
    multipliers) or an empty array for a cold start (the first step takes every contact force as interior).
    Each new face pattern met once the Newton residual's backward error is below 1e-10, or once the face
    pattern repeats, or when the Newton iterations stop short, goes to :func:`_polish_rounds`.
    Returns (certified, y (3n,), ζ, iterations, backward error, status): status 0 = certified,
    1 = iteration cap, 2 = line search failed, 3 = Newton matrix not positive definite, 10 + reason of
    :func:`polish_on_faces` for the last pattern tried.
    """
    nu, ny = R_a.shape
    nb = R_w.shape[0]
    n = ny // 3
    mg = nu + nb
    G = np.empty((mg, ny))
    G[:nu] = R_a
    G[nu:] = R_w
    zeta = np.zeros(mg)
    cold = zeta0.shape[0] != mg
    if not cold:
        zeta[:] = zeta0
    y = np.zeros(ny)
    Ps = np.zeros((n, 3, 3))
    faces = np.zeros(n, dtype=np.int64)
    previous = np.full(n, -1, dtype=np.int64)
    polished = np.full(n, -1, dtype=np.int64)
    F = np.zeros(mg)
    H = np.zeros((mg, mg))
    y_try = np.zeros(ny)
    Ps_try = np.zeros((n, 3, 3))
    faces_try = np.zeros(n, dtype=np.int64)
    _dual_point(G, zeta, mu, y, Ps, faces)
    worst = _residual(G, y, zeta, b, e, rho, F)
    if cold:
        for i in range(n):
            for j in range(3):
                for k in range(3):
                    Ps[i, j, k] = 1.0 if j == k else 0.0
    iterations = 0
    status = 1
    while True:
        if not (cold and iterations == 0):
            repeated = True
            new = False
            for i in range(n):
                if faces[i] != previous[i]:
                    repeated = False
                if faces[i] != polished[i]:
                    new = True
            if new and (worst <= 1e-10 or repeated):
                polished[:] = faces
                certified, y_exact, why = _polish_rounds(R_a, R_w, b, e, rho, mu, Ps, faces, tol, 4)
                if certified:
                    return True, y_exact, zeta, iterations, worst, 0
                status = 10 + why
            elif not new and worst <= 1e-14:
                break  # converged to a pattern whose exact solution failed the checks: stalled
        previous[:] = faces
        if iterations >= max_iter:
            if status < 10:
                status = 1
            break
        iterations += 1
        _newton_matrix(G, Ps, rho, nu, H)
        scale = 0.0
        for r in range(mg):
            scale = max(scale, H[r, r])
        ok, step = _regularized_solve(H, 1e-13 * max(scale, 1e-300), F)
        if not ok:
            status = 3
            break
        slope = 0.0  # −∇θᵀ step = Fᵀ step ≥ 0
        for r in range(mg):
            slope += F[r] * step[r]
        alpha = 1.0
        accepted = False
        zeta_try = np.empty(mg)
        for _ in range(40):
            for r in range(mg):
                zeta_try[r] = zeta[r] + alpha * step[r]
            _dual_point(G, zeta_try, mu, y_try, Ps_try, faces_try)
            if _theta_change(y, y_try, zeta, step, alpha, b, e, rho) <= -1e-4 * alpha * slope:
                accepted = True
                break
            alpha *= 0.5
        if not accepted:
            status = 2
            break
        zeta[:] = zeta_try
        y[:] = y_try
        Ps[:] = Ps_try
        faces[:] = faces_try
        worst = _residual(G, y, zeta, b, e, rho, F)
    new = False
    for i in range(n):
        if faces[i] != polished[i]:
            new = True
    if new and not (cold and iterations == 0):
        certified, y_exact, why = _polish_rounds(R_a, R_w, b, e, rho, mu, Ps, faces, tol, 4)
        if certified:
            return True, y_exact, zeta, iterations, worst, 0
    return False, y, zeta, iterations, worst, status


@njit((IN_MATRIX, IN_MATRIX, float64, float64), cache=True)
def stage_two_ridge(R_a, R_w, ridge, certify_tol):
    """(ok, ρ, k): Stage II's ridge ρ = ridge·max(‖R_a W‖²_F / k, 1e-12) over an orthonormal basis W of null(R̃),
    k = 3n − nb, without forming W: ‖R_a W‖²_F = ‖R_a‖²_F − ‖L⁻¹ R̃ R_aᵀ‖²_F with R̃R̃ᵀ = L Lᵀ.

    ``ok`` is False (use the null-space QP) unless R̃ is of full row rank with margin:
    1/‖L⁻¹‖_F > certify_tol·‖L‖_F (a lower bound on σ_min(R̃)/σ_max(R̃)), and 3n > nb.
    """
    nu, ny = R_a.shape
    nb = R_w.shape[0]
    k = ny - nb
    if nb == 0 or k <= 0:
        return False, 0.0, k
    L = gram(R_w.T)  # R̃R̃ᵀ, then its lower Cholesky factor in place (only the lower triangle is read below)
    if not cholesky_in_place(L):
        return False, 0.0, k
    L_norm = 0.0
    for i in range(nb):
        for j in range(i + 1):
            L_norm += L[i, j] * L[i, j]
    L_inv = np.zeros((nb, nb))
    lower_inverse(L, L_inv)
    inv_norm = 0.0
    for i in range(nb):
        for j in range(i + 1):
            inv_norm += L_inv[i, j] * L_inv[i, j]
    if not 1.0 / math.sqrt(inv_norm) > certify_tol * math.sqrt(L_norm):
        return False, 0.0, k
    total = 0.0
    for r in range(nu):
        for c in range(ny):
            total += R_a[r, c] * R_a[r, c]
    X = np.zeros((nb, nu))  # R̃ R_aᵀ
    for i in range(nb):
        for r in range(nu):
            s = 0.0
            for c in range(ny):
                s += R_w[i, c] * R_a[r, c]
            X[i, r] = s
    for r in range(nu):
        for i in range(nb):
            s = 0.0
            for q in range(i + 1):
                s += L_inv[i, q] * X[q, r]
            total -= s * s
    return True, ridge * max(max(total, 0.0) / k, 1e-12), k


#: The dual method's options (:func:`stage_two_structured`, :func:`stages_at`): the ridge's scale, the tolerance
#: of its optimality certificate and its iteration limit.
DUAL_OPTIONS = types.Tuple((float64, float64, intp))


@njit((RECORD, IN_MATRIX, IN_VECTOR, DUAL_OPTIONS), cache=True)
def stage_two_structured(red, R_a, z1, options):
    """Stage II from Stage I's forces z₁ by :func:`stage_two_dual`, with its data (b, e, ρ) built here;
    ``options``: :data:`DUAL_OPTIONS`.

    Returns (status, y, v⁺, τ, iterations, k), k = 3n − nb the dimension of Stage I's optimal set in y:
    status 0 = certified optimal, 1 = not applicable (R̃ not certified of full row rank, or 3n ≤ nb),
    2 = not certified (use the null-space QP). Cold started: on the standing quadruped a warm start from
    the previous tick's multipliers took more iterations and failed more often than the all-interior guess.
    """
    ridge, tol, max_iter = options
    R_w = red.R_w
    ok, rho, k = stage_two_ridge(R_a, R_w, ridge, 1e-6)
    if not ok:
        return 1, z1.copy(), z1.copy(), z1.copy(), 0, k
    _, tau1 = velocity_and_torque(red, R_w, red.R, z1)
    b = tau1 + R_a @ z1
    e = R_w @ z1
    certified, y, _, iterations, _, _ = stage_two_dual(R_a, R_w, b, e, red.mu, rho, np.zeros(0), tol, max_iter)
    if not certified:
        return 2, z1.copy(), z1.copy(), z1.copy(), iterations, k
    v, tau = velocity_and_torque(red, R_w, red.R, y)
    return 0, y, v, tau, iterations, k


@njit((RECORD, IN_VECTOR), cache=True)
def stage_one_target(red, g):
    """(ok, w̄) with R̃ᵀw̄ = g: Stage I's objective ½yᵀR̃ᵀR̃y + gᵀy is ½‖R̃y + w̄‖² − ½‖w̄‖², a function of
    x = R̃y alone. ``ok`` is False when R̃R̃ᵀ is not positive definite or g is not in range(R̃ᵀ) to 1e-12."""
    R_w = red.R_w
    nb, ny = R_w.shape
    S = gram(R_w.T)  # R̃R̃ᵀ w̄ = R̃g
    rhs = np.zeros(nb)
    for i in range(nb):
        s = 0.0
        for c in range(ny):
            s += R_w[i, c] * g[c]
        rhs[i] = s
    solved, w_bar = _regularized_solve(S, 0.0, rhs)
    if not solved:
        return False, w_bar
    g_norm = 0.0
    for c in range(ny):
        g_norm = max(g_norm, abs(g[c]))
    for c in range(ny):
        s = 0.0
        m = abs(g[c])
        for i in range(nb):
            s += R_w[i, c] * w_bar[i]
            m += abs(R_w[i, c] * w_bar[i])
        if abs(s - g[c]) > 1e-12 * max(m, g_norm):
            return False, w_bar
    return True, w_bar


@njit((RECORD, IN_VECTOR, IN_VECTOR), cache=True)
def normal_rows_hold(red, x, l_normal):
    """Ñᵀx ≥ l, row by row, to rounding of the terms (1e-12 relative)."""
    R_w = red.R_w
    nb, ny = R_w.shape
    for i in range(ny // 3):
        s = 0.0
        m = abs(l_normal[i])
        for r in range(nb):
            s += R_w[r, i] * x[r]
            m += abs(R_w[r, i] * x[r])
        if s < l_normal[i] - 1e-12 * m:
            return False
    return True


@njit((RECORD, IN_MATRIX, IN_VECTOR, DUAL_OPTIONS), cache=True)
def stages_at(red, R_a, x, options):
    """Both stages at once, given Stage I's optimum x = R̃y of a relaxation (without the friction pyramids).

    If some y in the pyramids gives R̃y = x, then x is Stage I's optimum too and Stage I's optimal set is
    Stage II's feasible set with e = x; Stage II's dual method certifies that feasibility and Stage II's
    optimality in one go (its b = τ(y) + R_a y depends only on x). Returns (status, y, v⁺, τ, iterations,
    k) as :func:`stage_two_structured`; status 2 = not certified (x may be out of the pyramids' reach).
    ``options``: :data:`DUAL_OPTIONS`.
    """
    ridge, tol, max_iter = options
    R_w = red.R_w
    ok, rho, k = stage_two_ridge(R_a, R_w, ridge, 1e-6)
    if not ok:
        return 1, x.copy(), x.copy(), x.copy(), 0, k
    _, b = velocity_and_inertial_torque(red, red.x0 + red.dt * x)  # τ at x⁺ = x₀ + Δt x with no contact force
    certified, y, _, iterations, _, _ = stage_two_dual(R_a, R_w, b, x, red.mu, rho, np.zeros(0), tol, max_iter)
    if not certified:
        return 2, x.copy(), x.copy(), x.copy(), iterations, k
    v, tau = velocity_and_torque(red, R_w, red.R, y)
    return 0, y, v, tau, iterations, k
