"""Closed-form kinematics of a 3-DoF leg (HAA about x, then HFE and KFE about y), read from Pinocchio.

The foot position in the base frame is

    p(q) = h + Rx(q₁) [a + Ry(q₂) (b + Ry(q₃) c)]

with h the HAA joint origin in the base frame, a the HFE origin in the HAA
frame, b the KFE origin in the HFE frame and c the foot frame's origin in the
KFE frame, all taken from the model's joint and frame placements. Inverse
kinematics is exact: the HAA angle puts the foot in the leg plane (its
y-offset a_y + b_y + c_y is invariant to q₂, q₃), the knee angle follows from
the hip-to-foot distance and the HFE angle from the direction. Everything is
plain-float arithmetic: a leg costs a few µs in CPython, where small NumPy
calls would cost about 1 µs each.
"""

from __future__ import annotations

import math

import numpy as np
import pinocchio as pin

from idcontrol.errors import ConfigError

Vec3 = tuple[float, float, float]


class LegKinematics:
    """One leg's inverse kinematics with its first and second time derivatives, in the base frame.

    model : Pinocchio model of the floating-base robot.
    joints : (HAA, HFE, KFE) joint names; HAA's parent must be the root (base) joint.
    foot_frame : the foot frame (a point on the KFE joint's body).
    q_knee_branch : a knee angle on the wanted IK branch (e.g. the standing one), rad.
    velocity_limits : (3,) bounds applied to the joint velocities of :meth:`solve`, rad/s.
    """

    def __init__(
        self,
        model: pin.Model,
        joints: tuple[str, str, str],
        foot_frame: str,
        q_knee_branch: float,
        velocity_limits: tuple[float, float, float],
    ) -> None:
        ids = []
        for name in joints:
            if not model.existJointName(name):
                raise ConfigError(f"the leg joint {name!r} is not in the model")
            ids.append(model.getJointId(name))
        kinds = tuple(model.joints[j].shortname() for j in ids)
        parents = (model.parents[ids[0]], model.parents[ids[1]], model.parents[ids[2]])
        if kinds != ("JointModelRX", "JointModelRY", "JointModelRY") or parents != (1, ids[0], ids[1]):
            raise ConfigError(
                f"leg {joints}: the analytic IK needs a chain base → HAA (axis x) → HFE (axis y) → KFE (axis y); "
                f"the model has joint types {kinds} with parents {parents}"
            )
        for j in ids:
            if not np.allclose(model.jointPlacements[j].rotation, np.eye(3), atol=1e-12):
                raise ConfigError(f"leg {joints}: joint {model.names[j]!r} has a rotated origin (rpy ≠ 0)")
        if not model.existFrame(foot_frame) or model.frames[model.getFrameId(foot_frame)].parentJoint != ids[2]:
            raise ConfigError(f"leg {joints}: the foot frame {foot_frame!r} must hang from {joints[2]!r}")
        hx, hy, hz = (float(x) for x in model.jointPlacements[ids[0]].translation)
        ax, ay, az = (float(x) for x in model.jointPlacements[ids[1]].translation)
        bx, by, bz = (float(x) for x in model.jointPlacements[ids[2]].translation)
        cx, cy, cz = (float(x) for x in model.frames[model.getFrameId(foot_frame)].placement.translation)
        self.h: Vec3 = (hx, hy, hz)
        self.a: Vec3 = (ax, ay, az)
        self.b: Vec3 = (bx, by, bz)
        self.c: Vec3 = (cx, cy, cz)
        self.lateral_offset = ay + by + cy  # foot y in the HAA frame, m
        # |b + Ry(q₃) c|² (x-z part) = |b|² + |c|² + 2 (A cos q₃ + B sin q₃)
        self._bc2 = bx * bx + bz * bz + cx * cx + cz * cz
        A, B = bx * cx + bz * cz, bx * cz - bz * cx
        self._R = math.hypot(A, B)
        if self._R < 1e-9:
            raise ConfigError(f"leg {joints}: the shank or thigh has zero length in the x-z plane")
        self._phi = math.atan2(B, A)
        self._planar = (self.lateral_offset, ax, az, bx, bz, cx, cz)
        offset = math.remainder(q_knee_branch - self._phi, math.tau)
        self.knee_sign = 1.0 if offset >= 0.0 else -1.0
        self.velocity_limits = velocity_limits

    def solve(self, p: Vec3, pd: Vec3, pdd: Vec3) -> tuple[Vec3, Vec3, Vec3]:
        """Joint positions, velocities and accelerations tracking a foot trajectory.

        p, pd, pdd : foot position (m), velocity (m/s), acceleration (m/s²) in the base frame.
        Returns q (rad; unreachable targets are clamped), q̇ = J⁻¹ ṗ (rad/s, clipped to the
        velocity limits) and q̈ = J⁻¹ (p̈ − J̇ q̇) (rad/s²), J the 3×3 foot Jacobian.

        In the HAA frame the foot is s = Rx(q₁)ᵀ (p − h) = (s_x, d, s_z); its x-z part, as the
        complex number S = s_z + i s_x, is S = A + e^{iq₂} (B + e^{iq₃} C) (a rotation about y is a
        multiplication by e^{iθ}), with A, B, C the x-z parts of a, b, c. Hence, with the hip-to-foot
        F = S − A and the shank E = e^{i(q₂+q₃)} C, Ṡ = i (q̇₂ F + q̇₃ E): one 2×2 real solve, and the
        HAA rate follows from the y row of Rx(q₁)ᵀ ṗ = q̇₁ x × s + ṡ.
        """
        hx, hy, hz = self.h
        d, ax, az, bx, bz, cx, cz = self._planar
        px, py, pz = p
        X, Y, Z = px - hx, py - hy, pz - hz
        sz = Y * Y + Z * Z - d * d
        sz = -math.sqrt(sz) if sz > 1e-12 else -1e-6  # foot below the hip in the HAA frame
        q1 = math.atan2(Z * d - Y * sz, Y * d + Z * sz)  # angle from (d, s_z) to (Y, Z)
        # hip-to-foot F = S − A and the knee from |F|
        fz, fx = sz - az, X - ax
        cos_knee = (0.5 * (fz * fz + fx * fx - self._bc2)) / self._R
        cos_knee = -1.0 if cos_knee < -1.0 else (1.0 if cos_knee > 1.0 else cos_knee)
        q3 = self._phi + self.knee_sign * math.acos(cos_knee)
        c3, s3 = math.cos(q3), math.sin(q3)
        wz, wx = bz - s3 * cx + c3 * cz, bx + c3 * cx + s3 * cz  # W = B + e^{iq₃} C
        q2 = math.atan2(fx * wz - fz * wx, fz * wz + fx * wx)  # arg(F conj W)
        c23, s23 = math.cos(q2 + q3), math.sin(q2 + q3)
        ez, ex = c23 * cz - s23 * cx, s23 * cz + c23 * cx  # shank E = e^{i(q₂+q₃)} C
        det = fx * ez - fz * ex  # Im(F conj E)
        if -1e-9 < det < 1e-9:
            det = 1e-9 if det >= 0.0 else -1e-9
        c1, s1 = math.cos(q1), math.sin(q1)
        # velocities: u = Rx(q₁)ᵀ ṗ = q̇₁ (0, −s_z, d) + (ṡ_x, 0, ṡ_z); −i Ṡ = q̇₂ F + q̇₃ E
        vx, vy, vz = pd
        uy, uz = c1 * vy + s1 * vz, c1 * vz - s1 * vy
        l1, l2, l3 = self.velocity_limits
        qd1 = -uy / sz
        qd1 = -l1 if qd1 < -l1 else (l1 if qd1 > l1 else qd1)
        sdz = uz - qd1 * d  # Ṡ = sdz + i vx, −i Ṡ = vx − i sdz
        qd2 = (-sdz * ez - vx * ex) / det
        qd2 = -l2 if qd2 < -l2 else (l2 if qd2 > l2 else qd2)
        qd3 = (fx * vx + fz * sdz) / det
        qd3 = -l3 if qd3 < -l3 else (l3 if qd3 > l3 else qd3)
        # Ṡ from the clipped rates: i (q̇₂ F + q̇₃ E)
        sdz, sdx = -(qd2 * fx + qd3 * ex), qd2 * fz + qd3 * ez
        uy, uz = -qd1 * sz, sdz + qd1 * d
        # accelerations: Rx(q₁)ᵀ p̈ = q̈₁ (0, −s_z, d) + s̈ + q̇₁ x × u + q̇₁ x × ṡ, x × v = (0, −v_z, v_y)
        ax_, ay_, az_ = pdd
        gy = c1 * ay_ + s1 * az_ + qd1 * (uz + sdz)
        gz = c1 * az_ - s1 * ay_ - qd1 * uy
        qdd1 = -gy / sz
        # R = S̈ − i q̇₂ Ṡ + q̇₃ (q̇₂ + q̇₃) E = i (q̈₂ F + q̈₃ E)
        w = qd3 * (qd2 + qd3)
        rz = gz - qdd1 * d + qd2 * sdx + w * ez
        rx = ax_ - qd2 * sdz + w * ex
        qdd2 = (-rz * ez - rx * ex) / det
        qdd3 = (fx * rx + fz * rz) / det
        return (q1, q2, q3), (qd1, qd2, qd3), (qdd1, qdd2, qdd3)
