"""The linear Kalman filter of MIT Cheetah 3 (Bledt et al., IROS 2018), the baseline, compiled.

Orientation and angular velocity are taken from the IMU (its own filter's quaternion and the gyro); the filter
estimates x = (p, v, d_1 .. d_K) (n = 6 + 3K): the IMU's position and velocity and each contact sphere's
position, all in the world. With a = R f + g (f: the accelerometer's specific force, R = R_WI):

    p⁺ = p + v Δt + a Δt²/2,  v⁺ = v + a Δt,  d⁺ = d;   Q = diag(σ_p² Δt, σ_a² Δt, σ_c² Δt per foot)

and per foot three measurements, linear in x:

    d − p = R s − r e_z                  (the leg's kinematics; s the sphere's centre relative to the IMU, d its
                                          lowest point, r its radius)
    v = −R (ω × s + J q̇)                  (the foot does not move while it stands)
    d_z = 0                              (the foot is on flat ground at z = 0: Cheetah's height measurement)

A foot whose contact probability is below the threshold keeps its measurements and process noise but with
their variances multiplied by ``swing_variance`` (Cheetah's "high suspect number"), so it stops constraining
the estimate; a foot that lands is pulled to its kinematic position by the first updates.
"""

from __future__ import annotations

import math
from typing import NamedTuple

import numpy as np
from numba import njit
from numpy.typing import NDArray

from idcontrol.arrays import INDICES, VECTOR, intp
from idcontrol.estimation.inekf import (
    DIAG_IMU_AGE,
    DIAG_REPEATS,
    DIAG_STANCE,
    DIAG_TILT_STD,
    DIAG_VELOCITY_STD,
    DIVERGED,
    IMU_STALE,
    JOINTS_NOT_FINITE,
    OK,
    SENSOR_DT,
    SENSOR_IMU,
    SENSOR_IMU_AGE,
    VELOCITY_UNCERTAIN,
    arena_parts,
    base_state,
    kinematics_views,
    parameters_from,
    screen_inputs,
)
from idcontrol.estimation.kinematics import feet_in_imu, geometry_views
from idcontrol.estimation.lie import rotation_from_xyzw

Array = NDArray[np.float64]


class LkfState(NamedTuple):
    """x (6 + 3k,) = (p, v, d_1 .. d_k) world; covariance (n, n); rotation (3, 3) R_WI last read from the IMU;
    omega (3,) the IMU's last angular velocity, IMU frame; memory (8,) as the InEKF's."""

    x: Array
    covariance: Array
    rotation: Array
    omega: Array
    memory: Array


class LkfWork(NamedTuple):
    h: Array  # (7k, n)
    y: Array  # (7k,)
    noise: Array  # (7k,)
    pht: Array  # (n, 7k)
    s: Array  # (7k, 7k)
    a: Array  # (n, n)
    t: Array  # (n, n)


def lkf_state_length(k: int) -> int:
    n = 6 + 3 * k
    return n + n * n + 9 + 3 + 8


@njit(cache=True)
def lkf_state_views(flat, k):
    """The :class:`LkfState` whose fields are views of ``flat`` (:func:`lkf_state_length` (k,))."""
    n = 6 + 3 * k
    a = n + n * n
    return LkfState(
        flat[:n],
        flat[n:a].reshape((n, n)),
        flat[a : a + 9].reshape((3, 3)),
        flat[a + 9 : a + 12],
        flat[a + 12 : a + 20],
    )


def lkf_work_length(k: int) -> int:
    n, m = 6 + 3 * k, 7 * k
    return m * n + 2 * m + n * m + m * m + 2 * n * n


@njit(cache=True)
def lkf_work_views(flat, k):
    n, m = 6 + 3 * k, 7 * k
    o = 0
    h = flat[o : o + m * n].reshape((m, n))
    o += m * n
    y = flat[o : o + m]
    o += m
    noise = flat[o : o + m]
    o += m
    pht = flat[o : o + n * m].reshape((n, m))
    o += n * m
    s = flat[o : o + m * m].reshape((m, m))
    o += m * m
    a = flat[o : o + n * n].reshape((n, n))
    o += n * n
    t = flat[o : o + n * n].reshape((n, n))
    return LkfWork(h, y, noise, pht, s, a, t)


@njit(cache=True)
def lkf_tick(s, prm, w, dt, feet_rel, foot_radius, jacobian, joint_v, imu, imu_age, stance, diagnostics):
    """One step of the linear filter (arguments as :func:`~idcontrol.estimation.inekf.inekf_tick`'s, plus
    ``joint_v`` (nj,) rad/s); returns a status code. The tilt comes from the IMU: its variance is not estimated."""
    x, P, R = s.x, s.covariance, s.rotation
    n = x.shape[0]
    k = (n - 6) // 3
    mem = s.memory
    status, joints_finite = screen_inputs(imu, feet_rel, joint_v, mem, dt)
    if status == OK:
        rotation_from_xyzw(imu[0], imu[1], imu[2], imu[3], R)
        for j in range(3):
            s.omega[j] = imu[4 + j]
        # --- predict
        if dt > 0.0:
            for j in range(3):
                a = R[j, 0] * imu[7] + R[j, 1] * imu[8] + R[j, 2] * imu[9] - (prm.gravity if j == 2 else 0.0)
                x[j] += x[3 + j] * dt + 0.5 * a * dt * dt
                x[3 + j] += a * dt
            A, T = w.a, w.t
            A[:, :] = 0.0
            for i in range(n):
                A[i, i] = 1.0
            for j in range(3):
                A[j, 3 + j] = dt
            # T = A P Aᵀ
            for r in range(n):
                for c in range(n):
                    T[r, c] = P[r, c] + (dt * P[r + 3, c] if r < 3 else 0.0)
            for r in range(n):
                for c in range(n):
                    P[r, c] = T[r, c] + (dt * T[r, c + 3] if c < 3 else 0.0)
            qp, qa = prm.position_noise * prm.position_noise * dt, prm.accel_noise * prm.accel_noise * dt
            qc = prm.foot_slip * prm.foot_slip * dt
            for j in range(3):
                P[j, j] += qp
                P[3 + j, 3 + j] += qa
            for f in range(k):
                scale = 1.0 if stance[f] >= prm.contact_threshold else prm.swing_variance
                for j in range(3):
                    P[6 + 3 * f + j, 6 + 3 * f + j] += qc * scale
        # --- update
        if joints_finite:
            m = 7 * k
            H, y, noise = w.h, w.y, w.noise
            H[:, :] = 0.0
            nj = joint_v.shape[0]
            eq, ek = prm.encoder_noise * prm.encoder_noise, prm.kinematics_noise * prm.kinematics_noise
            for f in range(k):
                scale = 1.0 if stance[f] >= prm.contact_threshold else prm.swing_variance
                sf = feet_rel[f]
                rel = np.empty(3)
                for j in range(3):
                    rel[j] = s.omega[(j + 1) % 3] * sf[(j + 2) % 3] - s.omega[(j + 2) % 3] * sf[(j + 1) % 3]
                    for i in range(nj):
                        rel[j] += jacobian[f, j, i] * joint_v[i]
                for j in range(3):
                    row = 3 * f + j
                    y[row] = R[j, 0] * sf[0] + R[j, 1] * sf[1] + R[j, 2] * sf[2] - (foot_radius[f] if j == 2 else 0.0)
                    H[row, j] = -1.0
                    H[row, 6 + 3 * f + j] = 1.0
                    jj = 0.0
                    for i in range(nj):
                        jj += jacobian[f, j, i] * jacobian[f, j, i]
                    noise[row] = (ek + eq * jj) * scale
                    row = 3 * k + 3 * f + j
                    y[row] = -(R[j, 0] * rel[0] + R[j, 1] * rel[1] + R[j, 2] * rel[2])
                    H[row, 3 + j] = 1.0
                    noise[row] = prm.foot_velocity_noise * prm.foot_velocity_noise * scale
                row = 6 * k + f
                y[row] = 0.0
                height_variance = prm.foot_height_noise * prm.foot_height_noise
                if height_variance > 0.0:
                    H[row, 6 + 3 * f + 2] = 1.0
                noise[row] = (height_variance if height_variance > 0.0 else 1.0) * scale
            # innovation and gain: K = P Hᵀ S⁻¹
            pht, S = w.pht, w.s
            for r in range(n):
                for c in range(m):
                    acc = 0.0
                    for i in range(n):
                        acc += P[r, i] * H[c, i]
                    pht[r, c] = acc
            for r in range(m):
                for c in range(m):
                    acc = 0.0
                    for i in range(n):
                        acc += H[r, i] * pht[i, c]
                    S[r, c] = acc + (noise[r] if r == c else 0.0)
            innovation = y - H @ x
            gain_t = np.linalg.solve(S, pht.T)  # (m, n) = S⁻¹ H P
            x += gain_t.T @ innovation
            P -= pht @ gain_t
            for r in range(n):
                for c in range(r + 1, n):
                    P[r, c] = P[c, r] = 0.5 * (P[r, c] + P[c, r])
        finite = True
        for i in range(n):
            if not (math.isfinite(x[i]) and math.isfinite(P[i, i])):
                finite = False
        if not finite:
            mem[7] = 1.0
            status = DIVERGED
        elif not joints_finite:
            status = JOINTS_NOT_FINITE
        elif imu_age > prm.max_imu_age or mem[6] >= prm.max_repeats:
            status = IMU_STALE
    velocity_var = max(P[3, 3], max(P[4, 4], P[5, 5]))
    diagnostics[DIAG_TILT_STD] = 0.0
    diagnostics[DIAG_VELOCITY_STD] = math.sqrt(velocity_var) if velocity_var >= 0.0 else math.nan
    diagnostics[DIAG_IMU_AGE] = imu_age
    diagnostics[DIAG_REPEATS] = mem[6]
    stance_count = 0.0
    for f in range(k):
        if stance[f] >= prm.contact_threshold:
            stance_count += 1.0
    diagnostics[DIAG_STANCE] = stance_count
    if status == OK and not diagnostics[DIAG_VELOCITY_STD] <= prm.max_velocity_std:
        status = VELOCITY_UNCERTAIN
    return status


@njit(cache=True)
def lkf_estimate(
    params, geometry_floats, geometry_ints, state, work, work_ints, kinematics, sensor, joint_q, joint_v, out
):
    """One tick of the linear filter in one compiled call (arguments as
    :func:`~idcontrol.estimation.inekf.inekf_estimate`'s; ``work_ints`` unused)."""
    g = geometry_views(geometry_floats, geometry_ints)
    nj, k = geometry_ints[0], geometry_ints[1]
    s = lkf_state_views(state, k)
    w = lkf_work_views(work, k)
    joint_rotation, joint_origin, feet, jacobian, foot_rotation = kinematics_views(kinematics, nj, k)
    feet_in_imu(g, joint_q, joint_rotation, joint_origin, feet, jacobian, foot_rotation)
    imu = sensor[SENSOR_IMU : SENSOR_IMU + 10]
    diagnostics = out[13 + 2 * nj : 18 + 2 * nj]
    status = lkf_tick(
        s,
        parameters_from(params),
        w,
        sensor[SENSOR_DT],
        feet,
        g.foot_radius,
        jacobian,
        joint_v,
        imu,
        sensor[SENSOR_IMU_AGE],
        sensor[12 : 12 + k],
        diagnostics,
    )
    base_state(
        s.rotation,
        s.x[3:6],
        s.x[0:3],
        s.omega,
        g.imu_rotation,
        g.imu_translation,
        joint_q,
        joint_v,
        out[: 7 + nj],
        out[7 + nj : 13 + 2 * nj],
    )
    return status


@njit(intp(VECTOR, INDICES), cache=True)
def lkf_arena(floats, ints):
    """:func:`lkf_estimate` on an estimator's arena (:data:`~idcontrol.estimation.inekf.ARENA_HEADER`)."""
    params, geometry, geometry_ints, state, work, work_ints, kinematics, sensor, joint_q, joint_v, out = arena_parts(
        floats, ints
    )
    return lkf_estimate(
        params, geometry, geometry_ints, state, work, work_ints, kinematics, sensor, joint_q, joint_v, out
    )
