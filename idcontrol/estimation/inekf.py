"""The contact-aided right-invariant EKF (Hartley, Ghaffari, Eustice, Grizzle, IJRR 2020), compiled.

State, world-centric, on SE_{2+K}(3) plus the IMU biases:
    X = [R v p d_1 .. d_K; 0 I], R = R_WI (world ← IMU), v, p the IMU's velocity and position in the world,
    d_i the world position of the i-th contact sphere while it stands (feet in swing are not in the state);
    θ = (b_g, b_a), the gyro (rad/s) and accelerometer (m/s²) biases in the IMU frame.
Error: the true state is X = Exp(ξ) X̂ (right-invariant, ξ in world coordinates), θ = θ̂ + ζ. The covariance P
(n, n), n = 15 + 3K, orders the error as (ξ_R, ξ_v, ξ_p, ξ_d1 .. ξ_dK, ζ_g, ζ_a); the rows and columns of a
foot not in the state are zero.

Per tick (:func:`inekf_tick`):

1. Propagation with the IMU's bias-corrected ω, a over Δt (exact for constant ω, a: R⁺ = R Γ0(ωΔt),
   v⁺ = v + (R Γ1 a + g)Δt, p⁺ = p + vΔt + (R Γ2 a + g/2)Δt², stance feet fixed). The error dynamics
   ξ̇ = A ξ + Ad_X̂ w have A independent of the state except in the bias columns (the invariant EKF's point):
   Φ = I + AΔt + (AΔt)²/2, Q = Ad Q_c Adᵀ Δt with the state before the step (Q_c: gyro, accelerometer,
   foot slip, bias random walks, white and isotropic).
2. Correction, one stacked update: each stance foot already in the state measures its position relative to
   the IMU from the encoders, s = Rᵀ(d − p) (right-invariant: z = R̂ s − (d̂ − p̂) = ξ_d − ξ_p, noise
   R̂ (J Σ_q Jᵀ + σ_k² I) R̂ᵀ with J the leg Jacobian); the IMU's own roll and pitch, when given a noise
   (z = Log(R_imu R̂ᵀ) = ξ_R, its yaw row nearly unweighted); an external pose when one is given. X⁺ = Exp(δ) X̂,
   θ⁺ = θ̂ + δ_θ, P⁺ = P − K S Kᵀ.
3. Contacts that ended leave the state (their rows and columns are zeroed); contacts that began enter it at
   d = p + R s with the covariance of p plus that of the kinematics (the paper's augmentation).

Formulas checked against the paper and its authors' public C++ reference (its world-centric right-invariant
branch); this is a fresh implementation, with a fixed-size state so that the tick never resizes an array.
"""

from __future__ import annotations

import math
from typing import NamedTuple

import numpy as np
from numba import njit
from numpy.typing import NDArray

from idcontrol.arrays import INDICES, VECTOR, intp
from idcontrol.estimation.kinematics import feet_in_imu, geometry_views
from idcontrol.estimation.lie import gammas, log_so3, rotation_from_xyzw, skew, xyzw_from_rotation

Array = NDArray[np.float64]

#: Status codes of a tick (:data:`STATUS_TEXT` says each in words); 0 is a trustworthy estimate.
OK, DIVERGED, IMU_NOT_FINITE, JOINTS_NOT_FINITE, IMU_STALE, TILT_UNCERTAIN, VELOCITY_UNCERTAIN = range(7)
#: Slots of the diagnostics vector a tick fills.
DIAG_TILT_STD, DIAG_VELOCITY_STD, DIAG_IMU_AGE, DIAG_REPEATS, DIAG_STANCE = range(5)


class FilterParameters(NamedTuple):
    """The numbers a filter kernel reads (SI units; see :class:`idcontrol.estimation.types.NoiseModel` and
    :class:`~idcontrol.estimation.types.HealthBounds` for what each is)."""

    gyro_noise: float
    accel_noise: float
    gyro_bias_walk: float
    accel_bias_walk: float
    foot_slip: float
    encoder_noise: float
    kinematics_noise: float
    imu_tilt_noise: float
    imu_yaw_noise: float
    contact_threshold: float
    gravity: float
    max_tilt_std: float
    max_velocity_std: float
    max_imu_age: float
    max_repeats: float
    swing_variance: float
    foot_velocity_noise: float
    position_noise: float
    foot_height_noise: float


class InekfState(NamedTuple):
    """The filter's state (see the module docstring), updated in place by :func:`inekf_tick`.

    rotation (3, 3) R_WI; velocity, position (3,) of the IMU in the world, m/s, m; feet (k, 3) world, m;
    in_state (k,) 1 while a foot is in the state; bias (6,) b_g rad/s, b_a m/s²; covariance (n, n);
    memory (8,): the last IMU reading (6), how many ticks it repeated, 1 once the state diverged;
    touchdown (k, 3, 3): the world orientation of each stance sphere's body when it touched down.
    """

    rotation: Array
    velocity: Array
    position: Array
    feet: Array
    in_state: Array
    bias: Array
    covariance: Array
    memory: Array
    touchdown: Array


class InekfWork(NamedTuple):
    """Scratch of :func:`inekf_tick` (m = 3k + 9 measurement rows at most, e = 2k + 4 entries of H)."""

    first: Array  # (n, n)
    second: Array  # (n, n)
    pht: Array  # (n, m)
    s: Array  # (m, m)
    z: Array  # (m,)
    entry_matrix: Array  # (e, 3, 3)
    entry_index: NDArray[np.intp]  # (e, 2): measurement block, state row
    blocks: Array  # (9 + k, 3, 3) Φ − I
    block_index: NDArray[np.intp]  # (9 + k, 2)
    small: Array  # (8, 3, 3)
    vectors: Array  # (8, 3)


def state_size(k: int) -> int:
    """n, the error's dimension for k contact spheres."""
    return 15 + 3 * k


def state_length(k: int) -> int:
    """The length of the one array that holds an :class:`InekfState` (:func:`state_views`)."""
    n = state_size(k)
    return 29 + 13 * k + n * n


@njit(cache=True)
def state_views(flat, k):
    """The :class:`InekfState` whose fields are views of ``flat`` (:func:`state_length` (k,))."""
    n = 15 + 3 * k
    a = 15 + 3 * k
    b = a + k + 14 + n * n
    return InekfState(
        flat[0:9].reshape((3, 3)),
        flat[9:12],
        flat[12:15],
        flat[15:a].reshape((k, 3)),
        flat[a : a + k],
        flat[a + k : a + k + 6],
        flat[a + k + 14 : b].reshape((n, n)),
        flat[a + k + 6 : a + k + 14],
        flat[b : b + 9 * k].reshape((k, 3, 3)),
    )


def work_lengths(k: int) -> tuple[int, int]:
    """The lengths of the float and integer scratch arrays of :func:`work_views`."""
    n, m, e = state_size(k), 3 * k + 9, 2 * k + 4
    return 2 * n * n + n * m + m * m + m + 9 * e + 9 * (9 + k) + 72 + 24, 2 * e + 2 * (9 + k)


@njit(cache=True)
def work_views(floats, ints, k):
    """The :class:`InekfWork` whose fields are views of the two scratch arrays (:func:`work_lengths`)."""
    n, m, e = 15 + 3 * k, 3 * k + 9, 2 * k + 4
    o = 0
    first = floats[o : o + n * n].reshape((n, n))
    o += n * n
    second = floats[o : o + n * n].reshape((n, n))
    o += n * n
    pht = floats[o : o + n * m].reshape((n, m))
    o += n * m
    s = floats[o : o + m * m].reshape((m, m))
    o += m * m
    z = floats[o : o + m]
    o += m
    entry_matrix = floats[o : o + 9 * e].reshape((e, 3, 3))
    o += 9 * e
    blocks = floats[o : o + 9 * (9 + k)].reshape((9 + k, 3, 3))
    o += 9 * (9 + k)
    small = floats[o : o + 72].reshape((8, 3, 3))
    o += 72
    vectors = floats[o : o + 24].reshape((8, 3))
    entry_index = ints[: 2 * e].reshape((e, 2))
    block_index = ints[2 * e : 2 * e + 2 * (9 + k)].reshape((9 + k, 2))
    return InekfWork(first, second, pht, s, z, entry_matrix, entry_index, blocks, block_index, small, vectors)


# ---------------------------------------------------------------------------------------------------- 3x3 helpers
@njit(cache=True)
def _matmul3(a, b, out):
    for r in range(3):
        for c in range(3):
            out[r, c] = a[r, 0] * b[0, c] + a[r, 1] * b[1, c] + a[r, 2] * b[2, c]


@njit(cache=True)
def _matvec3(a, x, out):
    for r in range(3):
        out[r] = a[r, 0] * x[0] + a[r, 1] * x[1] + a[r, 2] * x[2]


@njit(cache=True)
def _noise_product(u, has_u, w, has_w, scale, out):
    """``out`` += scale · S_u S_wᵀ with S = u× (or I when ``has_u`` is False): the gyro noise's coupling."""
    if not has_u and not has_w:
        for r in range(3):
            out[r, r] += scale
    elif not has_u:  # I (w×)ᵀ = −w×
        out[0, 1] += scale * w[2]
        out[0, 2] -= scale * w[1]
        out[1, 0] -= scale * w[2]
        out[1, 2] += scale * w[0]
        out[2, 0] += scale * w[1]
        out[2, 1] -= scale * w[0]
    elif not has_w:  # u× Iᵀ
        out[0, 1] -= scale * u[2]
        out[0, 2] += scale * u[1]
        out[1, 0] += scale * u[2]
        out[1, 2] -= scale * u[0]
        out[2, 0] -= scale * u[1]
        out[2, 1] += scale * u[0]
    else:  # (u×)(w×)ᵀ = (u·w) I − w uᵀ
        dot = u[0] * w[0] + u[1] * w[1] + u[2] * w[2]
        for r in range(3):
            for c in range(3):
                out[r, c] += scale * ((dot if r == c else 0.0) - w[r] * u[c])


# ---------------------------------------------------------------------------------------------------- propagation
@njit(cache=True)
def _propagate(s, prm, w, dt, omega, acc, active, na):
    """Step 1 of the module docstring: covariance with the state before the step, then the mean. ``active[:na]``:
    the covariance's rows in use (those of feet out of the state are zero and stay so)."""
    R, v, p, P = s.rotation, s.velocity, s.position, s.covariance
    k = s.feet.shape[0]
    bg, ba = 9 + 3 * k, 12 + 3 * k
    gvec = w.vectors[0]
    gvec[0], gvec[1], gvec[2] = 0.0, 0.0, -prm.gravity
    gx, tmp = w.small[0], w.small[1]
    skew(gvec, gx)
    B, idx = w.blocks, w.block_index
    nb = 0
    # (R, b_g): −R Δt
    for r in range(3):
        for c in range(3):
            B[nb, r, c] = -R[r, c] * dt
    idx[nb, 0], idx[nb, 1] = 0, bg
    nb += 1
    # (v, R): g× Δt ; (p, R): g× Δt²/2
    for r in range(3):
        for c in range(3):
            B[nb, r, c] = gx[r, c] * dt
            B[nb + 1, r, c] = 0.5 * gx[r, c] * dt * dt
    idx[nb, 0], idx[nb, 1] = 3, 0
    idx[nb + 1, 0], idx[nb + 1, 1] = 6, 0
    nb += 2
    # (v, b_g): −v×R Δt − g×R Δt²/2 ; (p, b_g): −p×R Δt − v×R Δt²/2
    vx, px = w.small[2], w.small[3]
    skew(v, vx)
    skew(p, px)
    vxR, pxR, gxR = w.small[4], w.small[5], w.small[6]
    _matmul3(vx, R, vxR)
    _matmul3(px, R, pxR)
    _matmul3(gx, R, gxR)
    for r in range(3):
        for c in range(3):
            B[nb, r, c] = -vxR[r, c] * dt - 0.5 * gxR[r, c] * dt * dt
            B[nb + 1, r, c] = -pxR[r, c] * dt - 0.5 * vxR[r, c] * dt * dt
    idx[nb, 0], idx[nb, 1] = 3, bg
    idx[nb + 1, 0], idx[nb + 1, 1] = 6, bg
    nb += 2
    # (v, b_a): −R Δt ; (p, b_a): −R Δt²/2 ; (p, v): I Δt
    for r in range(3):
        for c in range(3):
            B[nb, r, c] = -R[r, c] * dt
            B[nb + 1, r, c] = -0.5 * R[r, c] * dt * dt
            B[nb + 2, r, c] = dt if r == c else 0.0
    idx[nb, 0], idx[nb, 1] = 3, ba
    idx[nb + 1, 0], idx[nb + 1, 1] = 6, ba
    idx[nb + 2, 0], idx[nb + 2, 1] = 6, 3
    nb += 3
    # (d_i, b_g): −d_i×R Δt for the feet in the state
    for i in range(k):
        if s.in_state[i] > 0.5:
            skew(s.feet[i], tmp)
            _matmul3(tmp, R, w.small[7])
            for r in range(3):
                for c in range(3):
                    B[nb, r, c] = -w.small[7][r, c] * dt
            idx[nb, 0], idx[nb, 1] = 9 + 3 * i, bg
            nb += 1
    # T = Φ P (rows), then Φ P Φᵀ = T Φᵀ (columns), each from an untouched copy
    T, out = w.first, w.second
    T[:, :] = P
    for b in range(nb):
        a0, b0 = idx[b, 0], idx[b, 1]
        for r in range(3):
            for ci in range(na):
                c = active[ci]
                T[a0 + r, c] += B[b, r, 0] * P[b0, c] + B[b, r, 1] * P[b0 + 1, c] + B[b, r, 2] * P[b0 + 2, c]
    out[:, :] = T
    for b in range(nb):
        a0, b0 = idx[b, 0], idx[b, 1]
        for ri in range(na):
            r = active[ri]
            for c in range(3):
                out[r, a0 + c] += T[r, b0] * B[b, c, 0] + T[r, b0 + 1] * B[b, c, 1] + T[r, b0 + 2] * B[b, c, 2]
    # + Ad Q_c Adᵀ Δt: the gyro noise enters R, v, p and the feet through Ad_X̂ = [R; v×R; p×R; d×R]
    qg = prm.gyro_noise * prm.gyro_noise * dt
    for a in range(3 + k):
        if a >= 3 and s.in_state[a - 3] < 0.5:
            continue
        ua = v if a == 1 else p if a == 2 else s.feet[a - 3] if a >= 3 else v
        for b in range(3 + k):
            if b >= 3 and s.in_state[b - 3] < 0.5:
                continue
            ub = v if b == 1 else p if b == 2 else s.feet[b - 3] if b >= 3 else v
            tmp[:, :] = 0.0
            _noise_product(ua, a != 0, ub, b != 0, qg, tmp)
            ra, rb = (3 * a if a < 3 else 9 + 3 * (a - 3)), (3 * b if b < 3 else 9 + 3 * (b - 3))
            for r in range(3):
                for c in range(3):
                    out[ra + r, rb + c] += tmp[r, c]
    qa = prm.accel_noise * prm.accel_noise * dt
    qc = prm.foot_slip * prm.foot_slip * dt
    qbg = prm.gyro_bias_walk * prm.gyro_bias_walk * dt
    qba = prm.accel_bias_walk * prm.accel_bias_walk * dt
    for r in range(3):
        out[3 + r, 3 + r] += qa
        out[bg + r, bg + r] += qbg
        out[ba + r, ba + r] += qba
        for i in range(k):
            if s.in_state[i] > 0.5:
                out[9 + 3 * i + r, 9 + 3 * i + r] += qc
    for ri in range(na):
        r = active[ri]
        for ci in range(na):
            c = active[ci]
            P[r, c] = 0.5 * (out[r, c] + out[c, r])
    # the mean
    phi = w.vectors[1]
    for j in range(3):
        phi[j] = omega[j] * dt
    g0, g1, g2 = w.small[0], w.small[1], w.small[2]
    gammas(phi, g0, g1, g2)
    ra1, ra2 = w.vectors[2], w.vectors[3]
    _matvec3(g1, acc, ra1)
    _matvec3(g2, acc, ra2)
    rg1, rg2 = w.vectors[4], w.vectors[5]
    _matvec3(R, ra1, rg1)
    _matvec3(R, ra2, rg2)
    for j in range(3):
        gj = -prm.gravity if j == 2 else 0.0
        p[j] += v[j] * dt + (rg2[j] + 0.5 * gj) * dt * dt
        v[j] += (rg1[j] + gj) * dt
    _matmul3(R, g0, tmp)
    R[:, :] = tmp


# ---------------------------------------------------------------------------------------------------- correction
@njit(cache=True)
def _add_entry(w, ne, block, state_row, matrix, sign):
    """Measurement block ``block`` reads the state's rows ``state_row:state_row + 3`` through sign · ``matrix``."""
    for r in range(3):
        for c in range(3):
            w.entry_matrix[ne, r, c] = sign * matrix[r, c]
    w.entry_index[ne, 0], w.entry_index[ne, 1] = block, state_row
    return ne + 1


@njit(cache=True)
def _correct(s, w, ne, m, active, na):
    """One stacked update from the ``ne`` entries of H (3-row blocks, m rows) and w.s = N, w.z = z, on the
    covariance's rows ``active[:na]``."""
    P = s.covariance
    k = s.feet.shape[0]
    pht = w.pht
    pht[:, :m] = 0.0
    for e in range(ne):
        b3, c0 = 3 * w.entry_index[e, 0], w.entry_index[e, 1]
        M = w.entry_matrix[e]
        for ri in range(na):
            r = active[ri]
            for j in range(3):
                pht[r, b3 + j] += P[r, c0] * M[j, 0] + P[r, c0 + 1] * M[j, 1] + P[r, c0 + 2] * M[j, 2]
    S = w.s
    for e in range(ne):
        b3, c0 = 3 * w.entry_index[e, 0], w.entry_index[e, 1]
        M = w.entry_matrix[e]
        for j in range(3):
            for c in range(m):
                S[b3 + j, c] += M[j, 0] * pht[c0, c] + M[j, 1] * pht[c0 + 1, c] + M[j, 2] * pht[c0 + 2, c]
    # Cholesky S = L Lᵀ in place (lower triangle)
    for j in range(m):
        d = S[j, j]
        for t in range(j):
            d -= S[j, t] * S[j, t]
        if not d > 0.0:
            return False
        d = math.sqrt(d)
        S[j, j] = d
        for i in range(j + 1, m):
            x = S[i, j]
            for t in range(j):
                x -= S[i, t] * S[j, t]
            S[i, j] = x / d
    # Y = L⁻¹ (PHᵀ)ᵀ into the first m rows of w.first; y = L⁻¹ z (row operations: the inner loops run along
    # contiguous rows without a dependency chain, which the compiler vectorizes)
    Y = w.first
    z = w.z
    for i in range(m):
        row = Y[i]
        for ci in range(na):
            c = active[ci]
            row[c] = pht[c, i]
        for t in range(i):
            f = S[i, t]
            other = Y[t]
            for ci in range(na):
                c = active[ci]
                row[c] -= f * other[c]
        inverse = 1.0 / S[i, i]
        for ci in range(na):
            c = active[ci]
            row[c] *= inverse
        x = z[i]
        for t in range(i):
            x -= S[i, t] * z[t]
        z[i] = x * inverse
    # δ = Yᵀ y ; P −= Yᵀ Y
    delta = w.second[0]
    for ci in range(na):
        delta[active[ci]] = 0.0
    for i in range(m):
        row, zi = Y[i], z[i]
        for ci in range(na):
            c = active[ci]
            delta[c] += row[c] * zi
    for i in range(m):
        row = Y[i]
        for ri in range(na):
            r = active[ri]
            f = row[r]
            target = P[r]
            for ci in range(na):
                c = active[ci]
                target[c] -= f * row[c]
    # X⁺ = Exp(δ_X) X̂ ; θ⁺ = θ̂ + δ_θ
    g0, g1, g2 = w.small[0], w.small[1], w.small[2]
    gammas(delta[0:3], g0, g1, g2)
    R, tmp = s.rotation, w.small[3]
    _matmul3(g0, R, tmp)
    R[:, :] = tmp
    a, b = w.vectors[0], w.vectors[1]
    _left_act(g0, g1, s.velocity, delta[3:6], a, b)
    _left_act(g0, g1, s.position, delta[6:9], a, b)
    for i in range(k):
        if s.in_state[i] > 0.5:
            _left_act(g0, g1, s.feet[i], delta[9 + 3 * i : 12 + 3 * i], a, b)
    for j in range(6):
        s.bias[j] += delta[9 + 3 * k + j]
    return True


@njit(cache=True)
def _left_act(g0, g1, vector, correction, a, b):
    """``vector`` = Γ0 vector + Γ1 correction: a column of X after X⁺ = Exp(δ) X̂."""
    _matvec3(g0, vector, a)
    _matvec3(g1, correction, b)
    for j in range(3):
        vector[j] = a[j] + b[j]


@njit(cache=True)
def _kinematics_noise(prm, jacobian, f, rotation, out, tmp):
    """``out`` (3, 3) = R (σ_q² J Jᵀ + σ_k² I) Rᵀ, the world covariance of foot f's relative position."""
    jf = jacobian[f]
    eq, ek = prm.encoder_noise * prm.encoder_noise, prm.kinematics_noise * prm.kinematics_noise
    for r in range(3):
        for c in range(3):
            x = 0.0
            for i in range(jf.shape[1]):
                x += jf[r, i] * jf[c, i]
            tmp[r, c] = eq * x + (ek if r == c else 0.0)
    _matmul3(rotation, tmp, out)
    for r in range(3):
        for c in range(3):
            tmp[r, c] = out[r, 0] * rotation[c, 0] + out[r, 1] * rotation[c, 1] + out[r, 2] * rotation[c, 2]
    out[:, :] = tmp


# ---------------------------------------------------------------------------------------------------- one tick
@njit(cache=True)
def screen_inputs(imu, feet_rel, joint_v, memory, dt):
    """(status, encoders finite) a tick starts from: DIVERGED once the filter diverged (``memory[7]``), else
    IMU_NOT_FINITE for a non-finite ``imu`` (10,), else OK, counting in ``memory[6]`` the ticks whose ω and specific
    force repeat the last ones exactly (kept in ``memory[0:6]``) while time advanced (``dt`` > 0 s): a state sent again
    at the same time (a driver that repeats its last state while its commands are late) is not a frozen sensor, and
    neither adds to the count nor clears it. The encoders are finite when ``feet_rel`` (k, 3) and ``joint_v`` (any
    length; empty when a filter does not read it) are."""
    imu_finite = True
    for j in range(10):
        if not math.isfinite(imu[j]):
            imu_finite = False
    joints_finite = True
    for f in range(feet_rel.shape[0]):
        for j in range(3):
            if not math.isfinite(feet_rel[f, j]):
                joints_finite = False
    for j in range(joint_v.shape[0]):
        if not math.isfinite(joint_v[j]):
            joints_finite = False
    if memory[7] > 0.0:
        return DIVERGED, joints_finite
    if not imu_finite:
        return IMU_NOT_FINITE, joints_finite
    repeated = True
    for j in range(6):
        if imu[4 + j] != memory[j]:
            repeated = False
        memory[j] = imu[4 + j]
    if not repeated:
        memory[6] = 0.0
    elif dt > 0.0:
        memory[6] += 1.0
    return OK, joints_finite


@njit(cache=True)
def inekf_tick(
    s,
    prm,
    w,
    dt,
    feet_rel,
    foot_radius,
    foot_rotation,
    jacobian,
    imu,
    imu_age,
    stance,
    external,
    external_noise,
    diagnostics,
):
    """Propagate over ``dt`` s with the IMU reading, correct, update the contacts; returns a status code.

    feet_rel (k, 3), jacobian (k, 3, nj): the contact spheres relative to the IMU and their Jacobian (IMU frame,
    :func:`~idcontrol.estimation.kinematics.feet_in_imu`; NaN when the encoders are not finite). foot_radius (k,)
    m: the state's foot point d is where the sphere touched down, its centre then less r along the world's vertical;
    a sphere that rolls (its body turned by Δθ, world frame, since then: foot_rotation (k, 3, 3) R_IF) has its
    centre at d + r e_z + r Δθ × e_z.
    imu (10,): orientation (x, y, z, w) world ← IMU from the IMU's own filter, ω (3,) rad/s, specific force (3,)
    m/s², IMU frame. imu_age: s since the IMU sampled it. stance (k,): contact probability or flag per sphere.
    external (7,): an IMU pose (position m, quaternion x y z w) in the world, used when external_noise (2,)
    (position m, orientation rad) is positive. diagnostics (5,) out: see ``DIAG_*``.
    """
    R, P = s.rotation, s.covariance
    k = s.feet.shape[0]
    mem = s.memory
    status, joints_finite = screen_inputs(imu, feet_rel, imu[:0], mem, dt)
    if status == OK:
        omega, acc = w.vectors[6], w.vectors[7]
        for j in range(3):
            omega[j] = imu[4 + j] - s.bias[j]
            acc[j] = imu[7 + j] - s.bias[3 + j]
        active = np.empty(P.shape[0], dtype=np.intp)
        na = 0
        for r in range(P.shape[0]):
            if r < 9 or r >= 9 + 3 * k or s.in_state[(r - 9) // 3] > 0.5:
                active[na] = r
                na += 1
        if dt > 0.0:
            _propagate(s, prm, w, dt, omega, acc, active, na)
        # --- correction: stance feet in the state, the IMU's tilt, an external pose
        ne, nblocks = 0, 0
        m_max = w.z.shape[0]
        w.s[:, :] = 0.0
        tmp, eye, noise = w.small[4], w.small[5], w.small[6]
        eye[:, :] = 0.0
        for j in range(3):
            eye[j, j] = 1.0
        if joints_finite:
            for f in range(k):
                if s.in_state[f] > 0.5 and stance[f] >= prm.contact_threshold:
                    b3 = 3 * nblocks
                    _matvec3(R, feet_rel[f], w.vectors[0])
                    # the roll since touchdown: Δθ = Log(R R_IF R_F0ᵀ), centre offset r Δθ × e_z = r (Δθ_y, −Δθ_x, 0)
                    _matmul3(R, foot_rotation[f], tmp)
                    for r in range(3):
                        for c in range(3):
                            noise[r, c] = (
                                tmp[r, 0] * s.touchdown[f, c, 0]
                                + tmp[r, 1] * s.touchdown[f, c, 1]
                                + tmp[r, 2] * s.touchdown[f, c, 2]
                            )
                    roll = w.vectors[1]
                    log_so3(noise, roll)
                    w.vectors[0][0] -= foot_radius[f] * roll[1]
                    w.vectors[0][1] += foot_radius[f] * roll[0]
                    w.vectors[0][2] -= foot_radius[f]
                    for j in range(3):
                        w.z[b3 + j] = w.vectors[0][j] - (s.feet[f, j] - s.position[j])
                    ne = _add_entry(w, ne, nblocks, 6, eye, -1.0)
                    ne = _add_entry(w, ne, nblocks, 9 + 3 * f, eye, 1.0)
                    _kinematics_noise(prm, jacobian, f, R, noise, tmp)
                    w.s[b3 : b3 + 3, b3 : b3 + 3] = noise
                    nblocks += 1
        if prm.imu_tilt_noise > 0.0:
            b3 = 3 * nblocks
            rotation_from_xyzw(imu[0], imu[1], imu[2], imu[3], noise)
            for r in range(3):
                for c in range(3):
                    tmp[r, c] = noise[r, 0] * R[c, 0] + noise[r, 1] * R[c, 1] + noise[r, 2] * R[c, 2]
            log_so3(tmp, w.z[b3 : b3 + 3])
            ne = _add_entry(w, ne, nblocks, 0, eye, 1.0)
            w.s[b3, b3] = prm.imu_tilt_noise * prm.imu_tilt_noise
            w.s[b3 + 1, b3 + 1] = prm.imu_tilt_noise * prm.imu_tilt_noise
            w.s[b3 + 2, b3 + 2] = prm.imu_yaw_noise * prm.imu_yaw_noise
            nblocks += 1
        if external_noise[0] > 0.0:
            b3 = 3 * nblocks
            for j in range(3):
                w.z[b3 + j] = external[j] - s.position[j]
                w.s[b3 + j, b3 + j] = external_noise[0] * external_noise[0]
            skew(s.position, tmp)
            ne = _add_entry(w, ne, nblocks, 0, tmp, -1.0)
            ne = _add_entry(w, ne, nblocks, 6, eye, 1.0)
            nblocks += 1
        if external_noise[1] > 0.0:
            b3 = 3 * nblocks
            rotation_from_xyzw(external[3], external[4], external[5], external[6], noise)
            for r in range(3):
                for c in range(3):
                    tmp[r, c] = noise[r, 0] * R[c, 0] + noise[r, 1] * R[c, 1] + noise[r, 2] * R[c, 2]
            log_so3(tmp, w.z[b3 : b3 + 3])
            for j in range(3):
                w.s[b3 + j, b3 + j] = external_noise[1] * external_noise[1]
            ne = _add_entry(w, ne, nblocks, 0, eye, 1.0)
            nblocks += 1
        if nblocks > 0 and 3 * nblocks <= m_max:
            if not _correct(s, w, ne, 3 * nblocks, active, na):
                mem[7] = 1.0
        # --- contacts: remove those that ended, add those that began
        if joints_finite:
            n = P.shape[0]
            for f in range(k):
                standing = stance[f] >= prm.contact_threshold
                r0 = 9 + 3 * f
                if s.in_state[f] > 0.5 and not standing:
                    s.in_state[f] = 0.0
                    P[r0 : r0 + 3, :] = 0.0
                    P[:, r0 : r0 + 3] = 0.0
                elif standing and s.in_state[f] < 0.5:
                    _matvec3(R, feet_rel[f], w.vectors[0])
                    w.vectors[0][2] -= foot_radius[f]
                    for j in range(3):
                        s.feet[f, j] = s.position[j] + w.vectors[0][j]
                    _matmul3(R, foot_rotation[f], s.touchdown[f])
                    for c in range(n):
                        for j in range(3):
                            P[r0 + j, c] = P[6 + j, c]
                    for r in range(n):
                        for j in range(3):
                            P[r, r0 + j] = P[r, 6 + j]
                    _kinematics_noise(prm, jacobian, f, R, noise, tmp)
                    for r in range(3):
                        for c in range(3):
                            P[r0 + r, r0 + c] += noise[r, c]
                    s.in_state[f] = 1.0
        # --- health
        finite = True
        for r in range(P.shape[0]):
            if not math.isfinite(P[r, r]):
                finite = False
        for j in range(3):
            if not (math.isfinite(s.position[j]) and math.isfinite(s.velocity[j]) and math.isfinite(R[j, 0])):
                finite = False
        if not finite:
            mem[7] = 1.0
        if mem[7] > 0.0:
            status = DIVERGED
        elif not joints_finite:
            status = JOINTS_NOT_FINITE
        elif imu_age > prm.max_imu_age or mem[6] >= prm.max_repeats:
            status = IMU_STALE
    tilt_var = max(P[0, 0], P[1, 1])
    velocity_var = max(P[3, 3], max(P[4, 4], P[5, 5]))
    diagnostics[DIAG_TILT_STD] = math.sqrt(tilt_var) if tilt_var >= 0.0 else math.nan
    diagnostics[DIAG_VELOCITY_STD] = math.sqrt(velocity_var) if velocity_var >= 0.0 else math.nan
    diagnostics[DIAG_IMU_AGE] = imu_age
    diagnostics[DIAG_REPEATS] = mem[6]
    diagnostics[DIAG_STANCE] = np.sum(s.in_state)
    if status == OK:
        if not diagnostics[DIAG_TILT_STD] <= prm.max_tilt_std:
            status = TILT_UNCERTAIN
        elif not diagnostics[DIAG_VELOCITY_STD] <= prm.max_velocity_std:
            status = VELOCITY_UNCERTAIN
    return status


@njit(cache=True)
def base_state(rotation, velocity, position, omega_imu, imu_rotation, imu_translation, joint_q, joint_v, q, v):
    """The floating base's Pinocchio state from the IMU's: q (nq,) = (p_WB, quaternion x y z w of R_WB, joints),
    v (nv,) = (base linear velocity, base angular velocity, joints), both base-frame.

    R_WB = R_WI R_BIᵀ, p_WB = p_WI − R_WB p_BI, ω_B = R_BI ω_I, v_B = R_WBᵀ v_WI + p_BI × ω_B (the base origin's
    velocity: v_WI + ω × (p_WB − p_WI), in the base frame).
    """
    rwb = np.empty((3, 3))
    for r in range(3):
        for c in range(3):
            rwb[r, c] = (
                rotation[r, 0] * imu_rotation[c, 0]
                + rotation[r, 1] * imu_rotation[c, 1]
                + rotation[r, 2] * imu_rotation[c, 2]
            )
    for r in range(3):
        q[r] = position[r] - (
            rwb[r, 0] * imu_translation[0] + rwb[r, 1] * imu_translation[1] + rwb[r, 2] * imu_translation[2]
        )
    xyzw_from_rotation(rwb, q, 3)
    wb = np.empty(3)
    _matvec3(imu_rotation, omega_imu, wb)
    vb = np.empty(3)
    for r in range(3):
        vb[r] = rwb[0, r] * velocity[0] + rwb[1, r] * velocity[1] + rwb[2, r] * velocity[2]
    pb = imu_translation
    v[0] = vb[0] + pb[1] * wb[2] - pb[2] * wb[1]
    v[1] = vb[1] + pb[2] * wb[0] - pb[0] * wb[2]
    v[2] = vb[2] + pb[0] * wb[1] - pb[1] * wb[0]
    for j in range(3):
        v[3 + j] = wb[j]
    for j in range(joint_q.shape[0]):
        q[7 + j] = joint_q[j]
        v[6 + j] = joint_v[j]


# ---------------------------------------------------------------------------------------------------- entry point
#: Slots of the sensor vector an estimator tick reads (then stance (k,), external pose (7,), its noise (2,)).
SENSOR_DT, SENSOR_IMU_AGE, SENSOR_IMU = 0, 1, 2


@njit(cache=True)
def sensor_length(k):
    """The filter's part of the sensor vector (the joints' positions and velocities follow it)."""
    return 12 + k + 9


@njit(cache=True)
def parameters_from(p):
    """The :class:`FilterParameters` held in the vector ``p`` (its fields in order)."""
    return FilterParameters(
        p[0],
        p[1],
        p[2],
        p[3],
        p[4],
        p[5],
        p[6],
        p[7],
        p[8],
        p[9],
        p[10],
        p[11],
        p[12],
        p[13],
        p[14],
        p[15],
        p[16],
        p[17],
        p[18],
    )


def kinematics_length(nj: int, k: int) -> int:
    return 12 * nj + 3 * k + 3 * k * nj + 9 * k


@njit(cache=True)
def kinematics_views(floats, nj, k):
    """(joint_rotation (nj, 3, 3), joint_origin (nj, 3), feet (k, 3), jacobian (k, 3, nj), foot_rotation (k, 3, 3))
    in one array."""
    a, b, c, d = 9 * nj, 12 * nj, 12 * nj + 3 * k, 12 * nj + 3 * k + 3 * k * nj
    return (
        floats[:a].reshape((nj, 3, 3)),
        floats[a:b].reshape((nj, 3)),
        floats[b:c].reshape((k, 3)),
        floats[c:d].reshape((k, 3, nj)),
        floats[d : d + 9 * k].reshape((k, 3, 3)),
    )


@njit(cache=True)
def inekf_estimate(
    params, geometry_floats, geometry_ints, state, work, work_ints, kinematics, sensor, joint_q, joint_v, out
):
    """One estimator tick in one compiled call: the legs' kinematics, :func:`inekf_tick`, the base's Pinocchio
    state. ``out`` = (q (nq,), v (nv,), diagnostics (5,)); returns the status code."""
    g = geometry_views(geometry_floats, geometry_ints)
    nj, k = geometry_ints[0], geometry_ints[1]
    s = state_views(state, k)
    w = work_views(work, work_ints, k)
    joint_rotation, joint_origin, feet, jacobian, foot_rotation = kinematics_views(kinematics, nj, k)
    feet_in_imu(g, joint_q, joint_rotation, joint_origin, feet, jacobian, foot_rotation)
    imu = sensor[SENSOR_IMU : SENSOR_IMU + 10]
    stance = sensor[12 : 12 + k]
    diagnostics = out[13 + 2 * nj : 18 + 2 * nj]
    status = inekf_tick(
        s,
        parameters_from(params),
        w,
        sensor[SENSOR_DT],
        feet,
        g.foot_radius,
        foot_rotation,
        jacobian,
        imu,
        sensor[SENSOR_IMU_AGE],
        stance,
        sensor[12 + k : 19 + k],
        sensor[19 + k : 21 + k],
        diagnostics,
    )
    omega = w.vectors[0]
    for j in range(3):
        omega[j] = imu[4 + j] - s.bias[j]
    base_state(
        s.rotation,
        s.velocity,
        s.position,
        omega,
        g.imu_rotation,
        g.imu_translation,
        joint_q,
        joint_v,
        out[: 7 + nj],
        out[7 + nj : 13 + 2 * nj],
    )
    return status


# ---------------------------------------------------------------------------------------------------- one array
#: An estimator's arrays live in one float and one integer array (each array crossing into compiled code costs
#: its unboxing: 11 of them took longer than the filter). The integer array starts with this many offsets:
#: params, geometry, state, work, kinematics, sensor (its joints after the filter's part), out, end of floats;
#: geometry ints, work ints, end of ints.
ARENA_HEADER = 11


@njit(cache=True)
def arena_parts(floats, ints):
    """The parts of an estimator's arena (see :data:`ARENA_HEADER`), as views."""
    h = ints
    geometry_ints = ints[h[8] : h[9]]
    nj, k = geometry_ints[0], geometry_ints[1]
    sensor = floats[h[5] : h[6]]
    n = sensor_length(k)
    return (
        floats[h[0] : h[1]],
        floats[h[1] : h[2]],
        geometry_ints,
        floats[h[2] : h[3]],
        floats[h[3] : h[4]],
        ints[h[9] : h[10]],
        floats[h[4] : h[5]],
        sensor,
        sensor[n : n + nj],
        sensor[n + nj : n + 2 * nj],
        floats[h[6] : h[7]],
    )


@njit(intp(VECTOR, INDICES), cache=True)
def inekf_arena(floats, ints):
    """:func:`inekf_estimate` on an estimator's arena: one compiled call, two arrays unboxed."""
    params, geometry, geometry_ints, state, work, work_ints, kinematics, sensor, joint_q, joint_v, out = arena_parts(
        floats, ints
    )
    return inekf_estimate(
        params, geometry, geometry_ints, state, work, work_ints, kinematics, sensor, joint_q, joint_v, out
    )
