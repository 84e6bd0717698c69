"""SO(3) and SE_K(3) helpers for the filters' compiled kernels (3x3 work on scalars).

``skew(u)`` is u× (u× w = u × w). ``exp_so3(phi)`` is Exp(φ) = exp(φ×); ``gammas`` gives the integrals of
Exp that an IMU with constant ω and a over a step integrates to (Hartley et al. 2020, Γ_m(φ) = Σ_n (φ×)^n /
(n + m)!): Γ0 = Exp(φ), Γ1 the left Jacobian of SO(3), Γ2 its integral.
"""

from __future__ import annotations

import math

import numpy as np
from numba import njit

#: Below this rotation angle (rad) the Γ coefficients are taken from their Taylor series (error < 1e-16).
SMALL_ANGLE = 1e-4


@njit(cache=True)
def skew(u, out):
    """``out`` (3, 3) = u× for ``u`` (3,)."""
    out[0, 0] = 0.0
    out[0, 1] = -u[2]
    out[0, 2] = u[1]
    out[1, 0] = u[2]
    out[1, 1] = 0.0
    out[1, 2] = -u[0]
    out[2, 0] = -u[1]
    out[2, 1] = u[0]
    out[2, 2] = 0.0


@njit(cache=True)
def gammas(phi, g0, g1, g2):
    """Γ0 = Exp(φ), Γ1 = Σ (φ×)^n/(n+1)!, Γ2 = Σ (φ×)^n/(n+2)! for ``phi`` (3,) rad, into (3, 3) ``g0 g1 g2``."""
    theta2 = phi[0] * phi[0] + phi[1] * phi[1] + phi[2] * phi[2]
    theta = math.sqrt(theta2)
    if theta < SMALL_ANGLE:
        a0, b0 = 1.0 - theta2 / 6.0, 0.5 - theta2 / 24.0
        a1, b1 = 0.5 - theta2 / 24.0, 1.0 / 6.0 - theta2 / 120.0
        a2, b2 = 1.0 / 6.0 - theta2 / 120.0, 1.0 / 24.0 - theta2 / 720.0
    else:
        s, c = math.sin(theta), math.cos(theta)
        a0, b0 = s / theta, (1.0 - c) / theta2
        a1, b1 = (1.0 - c) / theta2, (theta - s) / (theta2 * theta)
        a2, b2 = (theta - s) / (theta2 * theta), (theta2 + 2.0 * c - 2.0) / (2.0 * theta2 * theta2)
    x, y, z = phi[0], phi[1], phi[2]
    # (φ×)² = φφᵀ − θ² I
    for r in range(3):
        for col in range(3):
            sq = phi[r] * phi[col] - (theta2 if r == col else 0.0)
            g0[r, col] = (1.0 if r == col else 0.0) + b0 * sq
            g1[r, col] = (1.0 if r == col else 0.0) + b1 * sq
            g2[r, col] = (0.5 if r == col else 0.0) + b2 * sq
    _add_skew(g0, a0 * x, a0 * y, a0 * z)
    _add_skew(g1, a1 * x, a1 * y, a1 * z)
    _add_skew(g2, a2 * x, a2 * y, a2 * z)


@njit(cache=True)
def _add_skew(out, x, y, z):
    """``out`` += (x, y, z)×."""
    out[0, 1] -= z
    out[0, 2] += y
    out[1, 0] += z
    out[1, 2] -= x
    out[2, 0] -= y
    out[2, 1] += x


@njit(cache=True)
def log_so3(rotation, out):
    """``out`` (3,) = Log(R), the rotation vector of a rotation matrix, rad (|out| ≤ π)."""
    c = 0.5 * (rotation[0, 0] + rotation[1, 1] + rotation[2, 2] - 1.0)
    c = min(1.0, max(-1.0, c))
    theta = math.acos(c)
    wx = rotation[2, 1] - rotation[1, 2]
    wy = rotation[0, 2] - rotation[2, 0]
    wz = rotation[1, 0] - rotation[0, 1]
    if theta < 1e-6:
        f = 0.5 + theta * theta / 12.0
    elif theta > math.pi - 1e-4:
        # near π: the axis from the diagonal (the antisymmetric part vanishes)
        d = np.array([rotation[0, 0], rotation[1, 1], rotation[2, 2]])
        i = int(np.argmax(d))
        axis = np.empty(3)
        axis[i] = math.sqrt(max(0.0, (d[i] - c) / (1.0 - c)))
        for j in range(3):
            if j != i:
                axis[j] = (rotation[i, j] + rotation[j, i]) / (2.0 * (1.0 - c) * axis[i])
        sign = 1.0 if axis[0] * wx + axis[1] * wy + axis[2] * wz >= 0.0 else -1.0
        for j in range(3):
            out[j] = sign * theta * axis[j]
        return
    else:
        f = 0.5 * theta / math.sin(theta)
    out[0] = f * wx
    out[1] = f * wy
    out[2] = f * wz


@njit(cache=True)
def rotation_from_xyzw(x, y, z, w, out):
    """``out`` (3, 3): the rotation of the unit quaternion (x, y, z, w)."""
    out[0, 0] = 1.0 - 2.0 * (y * y + z * z)
    out[0, 1] = 2.0 * (x * y - z * w)
    out[0, 2] = 2.0 * (x * z + y * w)
    out[1, 0] = 2.0 * (x * y + z * w)
    out[1, 1] = 1.0 - 2.0 * (x * x + z * z)
    out[1, 2] = 2.0 * (y * z - x * w)
    out[2, 0] = 2.0 * (x * z - y * w)
    out[2, 1] = 2.0 * (y * z + x * w)
    out[2, 2] = 1.0 - 2.0 * (x * x + y * y)


@njit(cache=True)
def xyzw_from_rotation(rotation, out, start):
    """``out[start:start + 4]`` = the unit quaternion (x, y, z, w) of a rotation matrix, w ≥ 0 (Shepperd)."""
    m = rotation
    t = m[0, 0] + m[1, 1] + m[2, 2]
    if t > 0.0:
        s = 2.0 * math.sqrt(t + 1.0)
        w, x, y, z = 0.25 * s, (m[2, 1] - m[1, 2]) / s, (m[0, 2] - m[2, 0]) / s, (m[1, 0] - m[0, 1]) / s
    elif m[0, 0] > m[1, 1] and m[0, 0] > m[2, 2]:
        s = 2.0 * math.sqrt(1.0 + m[0, 0] - m[1, 1] - m[2, 2])
        w, x, y, z = (m[2, 1] - m[1, 2]) / s, 0.25 * s, (m[0, 1] + m[1, 0]) / s, (m[0, 2] + m[2, 0]) / s
    elif m[1, 1] > m[2, 2]:
        s = 2.0 * math.sqrt(1.0 + m[1, 1] - m[0, 0] - m[2, 2])
        w, x, y, z = (m[0, 2] - m[2, 0]) / s, (m[0, 1] + m[1, 0]) / s, 0.25 * s, (m[1, 2] + m[2, 1]) / s
    else:
        s = 2.0 * math.sqrt(1.0 + m[2, 2] - m[0, 0] - m[1, 1])
        w, x, y, z = (m[1, 0] - m[0, 1]) / s, (m[0, 2] + m[2, 0]) / s, (m[1, 2] + m[2, 1]) / s, 0.25 * s
    if w < 0.0:
        w, x, y, z = -w, -x, -y, -z
    norm = math.sqrt(w * w + x * x + y * y + z * z)
    out[start], out[start + 1], out[start + 2], out[start + 3] = x / norm, y / norm, z / norm, w / norm
