"""Limb kinematics for references that run inside the 1 kHz tick: a serial chain read from Pinocchio's model,
evaluated in compiled code, and inverse kinematics by damped Newton steps warm-started from the last tick.

Why compiled: the kinematic model is Pinocchio's (joint placements, joint axes, the end frame's placement),
but calling Pinocchio from Python for four legs each tick (forward kinematics, frame Jacobians, classical
accelerations, twice for a Newton step and the velocities) took most of a reference's budget. Here one
compiled call solves every leg (docs/benchmarks.md, "Measured choices in the code"). ``tests/test_chain.py``
checks positions, Jacobians and the classical acceleration J̇q̇ against Pinocchio's on random configurations.

A chain runs from the model's root body (the floating base, or the world of a fixed base) to a limb's end
frame through every joint between them; the limb's own joints are solved, the others held at their value in
the configuration the chains were built from. A chain built with ``orient`` also keeps its end frame's
orientation in the root body's frame (a flat foot's sole stays level): six equations instead of three.
"""

from __future__ import annotations

import math
from typing import NamedTuple

import numpy as np
import pinocchio as pin
from numba import njit
from numpy.typing import NDArray

from idcontrol.errors import ConfigError
from idcontrol.robot.limbs import joint_chain
from idcontrol.robot.urdf import frame_id

Array = NDArray[np.float64]

REVOLUTE, PRISMATIC = 0, 1
_AXES = {"X": (1.0, 0.0, 0.0), "Y": (0.0, 1.0, 0.0), "Z": (0.0, 0.0, 1.0)}


class Chains(NamedTuple):
    """L chains of at most J joints, padded (one typed record across the compiled boundary).

    placement : (L, J + 1, 3, 4) each joint's placement [R | p] in its parent joint's frame; row J: the end frame
        in the last joint's frame.
    kind : (L, J) REVOLUTE or PRISMATIC.  axis : (L, J, 3) joint axis in its own frame (unit).
    count : (L,) joints of each chain.  slot : (L, J) index of the joint in the (nu,) joint vector (-1: held).
    held : (L, J) the value of a held joint (rad or m).
    lower, upper : (L, J) position limits.  speed : (L, J) velocity limits.
    rows : (L,) 3 (end position) or 6 (end position and orientation).
    rotation : (L, 3, 3) the end frame's orientation to keep (rows = 6), in the root body's frame.
    """

    placement: Array
    kind: NDArray[np.int64]
    axis: Array
    count: NDArray[np.int64]
    slot: NDArray[np.int64]
    held: Array
    lower: Array
    upper: Array
    speed: Array
    rows: NDArray[np.int64]
    rotation: Array


def _joint_axis(model: pin.Model, joint: int) -> tuple[int, tuple[float, float, float]]:
    """(REVOLUTE or PRISMATIC, axis in the joint frame) of a one-DoF Pinocchio joint; ConfigError otherwise."""
    j = model.joints[joint]
    name = j.shortname()
    for prefix, kind in (("JointModelR", REVOLUTE), ("JointModelP", PRISMATIC)):
        if name.startswith(prefix):
            rest = name[len(prefix) :]
            if rest in _AXES:
                return kind, _AXES[rest]
            if rest in ("evoluteUnaligned", "rismaticUnaligned"):
                axis = np.asarray(j.extract().axis, dtype=float)  # the generic JointModel does not expose it
                return kind, tuple(float(x) for x in axis / np.linalg.norm(axis))  # type: ignore[return-value]
    raise ConfigError(f"joint {model.names[joint]!r} ({name}): limb kinematics need revolute or prismatic joints")


def build_chains(
    model: pin.Model,
    limbs: list[tuple[list[str], str]],
    actuated: tuple[str, ...],
    q: Array,
    orient: list[bool] | None = None,
) -> Chains:
    """The chains of ``limbs`` ((joint names, end frame) each) of ``model``; joints outside a limb are held at
    their value in ``q`` (nq,); slots index ``actuated``. ``orient[i]``: chain i also keeps its end frame's
    orientation at ``q``."""
    chains = []
    for joints, end in limbs:
        if not model.existFrame(end):
            raise ConfigError(f"limb end frame {end!r} is not in the model")
        fid = frame_id(model, end)
        path = joint_chain(model, model.frames[fid].parentJoint)
        names = [str(model.names[j]) for j in path]
        missing = [n for n in joints if n not in names]
        if missing:
            raise ConfigError(f"limb joints {missing} do not move its end frame {end!r}")
        chains.append((path, fid, joints))
    L = len(chains)
    J = max((len(path) for path, _, _ in chains), default=1)
    out = Chains(
        np.zeros((L, J + 1, 3, 4)),
        np.zeros((L, J), dtype=np.int64),
        np.zeros((L, J, 3)),
        np.zeros(L, dtype=np.int64),
        np.full((L, J), -1, dtype=np.int64),
        np.zeros((L, J)),
        np.zeros((L, J)),
        np.zeros((L, J)),
        np.zeros((L, J)),
        np.full(L, 3, dtype=np.int64),
        np.tile(np.eye(3), (L, 1, 1)),
    )
    data = model.createData()
    pin.framesForwardKinematics(model, data, q)
    for i, (path, fid, joints) in enumerate(chains):
        out.count[i] = len(path)
        for k, j in enumerate(path):
            placement = model.jointPlacements[j]
            out.placement[i, k, :, :3] = placement.rotation
            out.placement[i, k, :, 3] = placement.translation
            out.kind[i, k], out.axis[i, k] = _joint_axis(model, j)
            idx_q, idx_v = model.joints[j].idx_q, model.joints[j].idx_v
            name = str(model.names[j])
            out.slot[i, k] = actuated.index(name) if name in joints and name in actuated else -1
            out.held[i, k] = q[idx_q]
            out.lower[i, k] = max(float(model.lowerPositionLimit[idx_q]), -1e300)
            out.upper[i, k] = min(float(model.upperPositionLimit[idx_q]), 1e300)
            out.speed[i, k] = float(model.velocityLimit[idx_v]) if model.velocityLimit[idx_v] > 0 else math.inf
        frame = model.frames[fid].placement
        out.placement[i, J, :, :3] = frame.rotation
        out.placement[i, J, :, 3] = frame.translation
        if orient is not None and orient[i]:
            out.rows[i] = 6
            base = data.oMi[1] if model.joints[1].shortname() == "JointModelFreeFlyer" else pin.SE3.Identity()
            out.rotation[i] = base.rotation.T @ data.oMf[fid].rotation
    return out


# Packed layout crossing the compiled boundary (two arrays: numba unboxes a named tuple's eleven arrays each call):
# real[i, k]: placement rotation (9, row-major) and translation (3), axis (3), held value, lower, upper, speed limit;
# real[i, J]: the end frame's placement (12), the end orientation to keep (9, row-major);
# ints[i, k] = (kind, slot); ints[i, J] = (joint count, rows).
_AX, _HELD, _LOWER, _UPPER, _SPEED, _ROT = 12, 15, 16, 17, 18, 12


def pack(chains: Chains) -> tuple[Array, NDArray[np.int64]]:
    """The two arrays the kernels take (see the layout above)."""
    L, J = chains.kind.shape
    real = np.zeros((L, J + 1, 21))
    ints = np.zeros((L, J + 1, 2), dtype=np.int64)
    real[:, :, 0:9] = chains.placement[:, :, :, :3].reshape(L, J + 1, 9)
    real[:, :, 9:12] = chains.placement[:, :, :, 3]
    real[:, :J, _AX : _AX + 3] = chains.axis
    real[:, :J, _HELD], real[:, :J, _LOWER], real[:, :J, _UPPER] = chains.held, chains.lower, chains.upper
    real[:, :J, _SPEED] = chains.speed
    real[:, J, _ROT : _ROT + 9] = chains.rotation.reshape(L, 9)
    ints[:, :J, 0], ints[:, :J, 1] = chains.kind, chains.slot
    ints[:, J, 0], ints[:, J, 1] = chains.count, chains.rows
    return real, ints


@njit(cache=True)
def chain_kinematics(real, ints, i, q, origins, axes, end, rot):  # pragma: no cover - compiled
    """Forward kinematics of chain ``i`` at joint values ``q`` (J,), in the root body's frame: each joint's origin
    ``origins`` (J, 3) and world axis ``axes`` (J, 3), the end frame's origin ``end`` (3,) and rotation ``rot``
    (3, 3)."""
    J = ints.shape[1] - 1
    n = ints[i, J, 0]
    r00, r01, r02, r10, r11, r12, r20, r21, r22 = 1.0, 0.0, 0.0, 0.0, 1.0, 0.0, 0.0, 0.0, 1.0
    px = py = pz = 0.0
    for k in range(n):
        P = real[i, k]
        # p += R t; R = R P
        tx, ty, tz = P[9], P[10], P[11]
        px, py, pz = (
            px + r00 * tx + r01 * ty + r02 * tz,
            py + r10 * tx + r11 * ty + r12 * tz,
            pz + r20 * tx + r21 * ty + r22 * tz,
        )
        r00, r01, r02, r10, r11, r12, r20, r21, r22 = (
            r00 * P[0] + r01 * P[3] + r02 * P[6],
            r00 * P[1] + r01 * P[4] + r02 * P[7],
            r00 * P[2] + r01 * P[5] + r02 * P[8],
            r10 * P[0] + r11 * P[3] + r12 * P[6],
            r10 * P[1] + r11 * P[4] + r12 * P[7],
            r10 * P[2] + r11 * P[5] + r12 * P[8],
            r20 * P[0] + r21 * P[3] + r22 * P[6],
            r20 * P[1] + r21 * P[4] + r22 * P[7],
            r20 * P[2] + r21 * P[5] + r22 * P[8],
        )
        origins[k, 0], origins[k, 1], origins[k, 2] = px, py, pz
        x, y, z = P[_AX], P[_AX + 1], P[_AX + 2]
        ax, ay, az = r00 * x + r01 * y + r02 * z, r10 * x + r11 * y + r12 * z, r20 * x + r21 * y + r22 * z
        axes[k, 0], axes[k, 1], axes[k, 2] = ax, ay, az
        if ints[i, k, 0] == 0:  # R = R Rot(axis, q) (Rodrigues)
            c, s = math.cos(q[k]), math.sin(q[k])
            t = 1.0 - c
            x00, x01, x02 = t * x * x + c, t * x * y - s * z, t * x * z + s * y
            x10, x11, x12 = t * x * y + s * z, t * y * y + c, t * y * z - s * x
            x20, x21, x22 = t * x * z - s * y, t * y * z + s * x, t * z * z + c
            r00, r01, r02, r10, r11, r12, r20, r21, r22 = (
                r00 * x00 + r01 * x10 + r02 * x20,
                r00 * x01 + r01 * x11 + r02 * x21,
                r00 * x02 + r01 * x12 + r02 * x22,
                r10 * x00 + r11 * x10 + r12 * x20,
                r10 * x01 + r11 * x11 + r12 * x21,
                r10 * x02 + r11 * x12 + r12 * x22,
                r20 * x00 + r21 * x10 + r22 * x20,
                r20 * x01 + r21 * x11 + r22 * x21,
                r20 * x02 + r21 * x12 + r22 * x22,
            )
        else:
            px, py, pz = px + q[k] * ax, py + q[k] * ay, pz + q[k] * az
        if k + 1 == n:  # the end frame hangs from the last joint: its placement is row J, not row n
            P = real[i, J]
            tx, ty, tz = P[9], P[10], P[11]
            end[0] = px + r00 * tx + r01 * ty + r02 * tz
            end[1] = py + r10 * tx + r11 * ty + r12 * tz
            end[2] = pz + r20 * tx + r21 * ty + r22 * tz
            rot[0, 0] = r00 * P[0] + r01 * P[3] + r02 * P[6]
            rot[0, 1] = r00 * P[1] + r01 * P[4] + r02 * P[7]
            rot[0, 2] = r00 * P[2] + r01 * P[5] + r02 * P[8]
            rot[1, 0] = r10 * P[0] + r11 * P[3] + r12 * P[6]
            rot[1, 1] = r10 * P[1] + r11 * P[4] + r12 * P[7]
            rot[1, 2] = r10 * P[2] + r11 * P[5] + r12 * P[8]
            rot[2, 0] = r20 * P[0] + r21 * P[3] + r22 * P[6]
            rot[2, 1] = r20 * P[1] + r21 * P[4] + r22 * P[7]
            rot[2, 2] = r20 * P[2] + r21 * P[5] + r22 * P[8]
            return


@njit(cache=True)
def _jacobian(ints, i, origins, axes, end, jac):  # pragma: no cover - compiled
    """(6, n) Jacobian of the end point's velocity (rows 0-2) and the end frame's angular velocity (rows 3-5), root
    frame (held joints' columns included)."""
    J = ints.shape[1] - 1
    for k in range(ints[i, J, 0]):
        ax, ay, az = axes[k, 0], axes[k, 1], axes[k, 2]
        if ints[i, k, 0] == 0:
            dx, dy, dz = end[0] - origins[k, 0], end[1] - origins[k, 1], end[2] - origins[k, 2]
            jac[0, k], jac[1, k], jac[2, k] = ay * dz - az * dy, az * dx - ax * dz, ax * dy - ay * dx
            jac[3, k], jac[4, k], jac[5, k] = ax, ay, az
        else:
            jac[0, k], jac[1, k], jac[2, k] = ax, ay, az
            jac[3, k] = jac[4, k] = jac[5, k] = 0.0


@njit(cache=True)
def drift(ints, i, origins, axes, end, jac, qd, out):  # pragma: no cover - compiled
    """J̇ q̇ (6,) into ``out``: the end point's acceleration (0-2) and the end frame's angular acceleration (3-5) at
    q̈ = 0 with joint velocities ``qd`` (J,), the root at rest; ``jac`` the chain's Jacobian here."""
    J = ints.shape[1] - 1
    n = ints[i, J, 0]
    vx = vy = vz = 0.0  # ṗ = J q̇
    for k in range(n):
        vx, vy, vz = vx + jac[0, k] * qd[k], vy + jac[1, k] * qd[k], vz + jac[2, k] * qd[k]
    for r in range(6):
        out[r] = 0.0
    wx = wy = wz = 0.0  # angular velocity of the body carrying joint k
    for k in range(n):
        ax, ay, az = axes[k, 0], axes[k, 1], axes[k, 2]
        dax, day, daz = wy * az - wz * ay, wz * ax - wx * az, wx * ay - wy * ax  # ȧ = ω × a
        if ints[i, k, 0] == 0:
            ox = oy = oz = 0.0  # velocity of joint k's origin
            for m in range(k):
                if ints[i, m, 0] == 0:
                    ex, ey, ez = (
                        origins[k, 0] - origins[m, 0],
                        origins[k, 1] - origins[m, 1],
                        origins[k, 2] - origins[m, 2],
                    )
                    bx, by, bz = axes[m, 0], axes[m, 1], axes[m, 2]
                    ox += qd[m] * (by * ez - bz * ey)
                    oy += qd[m] * (bz * ex - bx * ez)
                    oz += qd[m] * (bx * ey - by * ex)
                else:
                    ox, oy, oz = ox + qd[m] * axes[m, 0], oy + qd[m] * axes[m, 1], oz + qd[m] * axes[m, 2]
            dx, dy, dz = end[0] - origins[k, 0], end[1] - origins[k, 1], end[2] - origins[k, 2]
            ux, uy, uz = vx - ox, vy - oy, vz - oz
            out[0] += qd[k] * ((day * dz - daz * dy) + (ay * uz - az * uy))
            out[1] += qd[k] * ((daz * dx - dax * dz) + (az * ux - ax * uz))
            out[2] += qd[k] * ((dax * dy - day * dx) + (ax * uy - ay * ux))
            out[3] += qd[k] * dax
            out[4] += qd[k] * day
            out[5] += qd[k] * daz
            wx, wy, wz = wx + qd[k] * ax, wy + qd[k] * ay, wz + qd[k] * az
        else:
            out[0] += qd[k] * dax
            out[1] += qd[k] * day
            out[2] += qd[k] * daz


@njit(cache=True)
def _least_norm(A, m, n, b, x, G):  # pragma: no cover - compiled
    """x[:n] minimizing |x| among the least-squares solutions of A[:m, :n] x = b[:m], damped by 1e-12:
    Aᵀ (A Aᵀ + λ I)⁻¹ b when n >= m, else (Aᵀ A + λ I)⁻¹ Aᵀ b; a small Cholesky written out (LAPACK's call
    overhead on a 3 x 3 system is microseconds). ``G`` (6, 7) is workspace."""
    wide = n >= m
    k_ = m if wide else n
    for r in range(k_):
        for c in range(r + 1):
            acc = 0.0
            if wide:
                for k in range(n):
                    acc += A[r, k] * A[c, k]
            else:
                for k in range(m):
                    acc += A[k, r] * A[k, c]
            G[r, c] = acc
        G[r, r] += 1e-12
        if wide:
            G[r, 6] = b[r]
        else:
            acc = 0.0
            for k in range(m):
                acc += A[k, r] * b[k]
            G[r, 6] = acc
    for r in range(k_):  # Cholesky G = L Lᵀ in place (lower triangle)
        for c in range(r + 1):
            acc = G[r, c]
            for k in range(c):
                acc -= G[r, k] * G[c, k]
            if r == c:
                G[r, r] = math.sqrt(acc) if acc > 0.0 else 1e-150
            else:
                G[r, c] = acc / G[c, c]
    for r in range(k_):  # L y = rhs (y in column 6)
        acc = G[r, 6]
        for k in range(r):
            acc -= G[r, k] * G[k, 6]
        G[r, 6] = acc / G[r, r]
    for r in range(k_ - 1, -1, -1):  # Lᵀ z = y
        acc = G[r, 6]
        for k in range(r + 1, k_):
            acc -= G[k, r] * G[k, 6]
        G[r, 6] = acc / G[r, r]
    if wide:
        for k in range(n):
            acc = 0.0
            for r in range(m):
                acc += A[r, k] * G[r, 6]
            x[k] = acc
    else:
        for k in range(n):
            x[k] = G[k, 6]


@njit(cache=True)
def _rotation_error(real, i, J, rot, out):  # pragma: no cover - compiled
    """log(R* Rᵀ) (3,) into ``out[3:6]``: the rotation taking the end frame's ``rot`` to the one to keep, as an
    axis times angle in the root frame."""
    T = real[i, J, _ROT : _ROT + 9]
    e = np.empty((3, 3))
    for r in range(3):
        for c in range(3):
            e[r, c] = T[3 * r] * rot[c, 0] + T[3 * r + 1] * rot[c, 1] + T[3 * r + 2] * rot[c, 2]
    cos = min(max(0.5 * (e[0, 0] + e[1, 1] + e[2, 2] - 1.0), -1.0), 1.0)
    angle = math.acos(cos)
    k = 0.5 if angle < 1e-6 else 0.5 * angle / math.sin(angle)
    out[3], out[4], out[5] = k * (e[2, 1] - e[1, 2]), k * (e[0, 2] - e[2, 0]), k * (e[1, 0] - e[0, 1])


@njit(cache=True)
def solve_limbs(real, ints, q_limbs, targets, out, max_acceleration, tolerance, iterations):  # pragma: no cover
    """Inverse kinematics of every chain (packed by :func:`pack`), warm-started from ``q_limbs`` (L, J), updated.

    targets : (L, 9) the end point's position (m), velocity (m/s) and acceleration (m/s²) in the root body's frame
        (a chain with six rows also keeps its end orientation, at rest).
    out : (3, nu) q_ref, v_ref, a_ref rows: the limb joints' slots are written (velocities clipped to the
        velocity limits, accelerations to ± ``max_acceleration``).
    Each chain takes Newton steps (damped least norm, at most 0.5 rad or m per joint a step, positions kept in
    their limits; a joint a step pushed into its limit stays out of the later steps) until its error is within
    ``tolerance`` (m, rad) or ``iterations`` steps; returns the worst residual.
    """
    L, J = q_limbs.shape
    origins, axes, end, rot = np.empty((J, 3)), np.empty((J, 3)), np.empty(3), np.empty((3, 3))
    jac, jf, G = np.zeros((6, J)), np.zeros((6, J)), np.empty((6, 7))
    cols, step_q, rhs, acc = np.empty(J, dtype=np.int64), np.empty(J), np.empty(6), np.empty(6)
    qd = np.zeros(J)
    blocked = np.zeros(J, dtype=np.bool_)
    worst = 0.0
    for i in range(L):
        n, m = ints[i, J, 0], ints[i, J, 1]
        free = 0
        for k in range(n):
            if ints[i, k, 1] >= 0:
                cols[free] = k
                blocked[free] = False
                free += 1
        q = q_limbs[i]
        residual = 0.0
        for it in range(iterations + 1):
            chain_kinematics(real, ints, i, q, origins, axes, end, rot)
            _jacobian(ints, i, origins, axes, end, jac)
            for c in range(free):  # a joint a step pushed into its limit no longer moves in this sample
                w = 0.0 if blocked[c] else 1.0
                for r in range(m):
                    jf[r, c] = w * jac[r, cols[c]]
            for r in range(3):
                rhs[r] = targets[i, r] - end[r]
            if m == 6:
                _rotation_error(real, i, J, rot, rhs)
            residual = 0.0
            for r in range(m):
                residual += rhs[r] * rhs[r]
            residual = math.sqrt(residual)
            if residual <= tolerance or it == iterations:
                break
            _least_norm(jf, m, free, rhs, step_q, G)
            scale = 1.0
            for c in range(free):
                if abs(step_q[c]) * scale > 0.5:
                    scale = 0.5 / abs(step_q[c])
            for c in range(free):
                k = cols[c]
                x = q[k] + scale * step_q[c]
                if x < real[i, k, _LOWER] or x > real[i, k, _UPPER]:
                    blocked[c] = True
                q[k] = min(max(x, real[i, k, _LOWER]), real[i, k, _UPPER])
        worst = max(worst, residual)
        for r in range(3):
            rhs[r], rhs[r + 3] = targets[i, 3 + r], 0.0
        _least_norm(jf, m, free, rhs, step_q, G)
        for k in range(n):
            qd[k] = 0.0
        for c in range(free):
            k = cols[c]
            qd[k] = min(max(step_q[c], -real[i, k, _SPEED]), real[i, k, _SPEED])
        drift(ints, i, origins, axes, end, jac, qd, acc)
        for r in range(3):
            rhs[r], rhs[r + 3] = targets[i, 6 + r] - acc[r], -acc[r + 3]
        _least_norm(jf, m, free, rhs, step_q, G)
        for c in range(free):
            k = cols[c]
            s = ints[i, k, 1]
            out[0, s] = q[k]
            out[1, s] = qd[k]
            out[2, s] = min(max(step_q[c], -max_acceleration), max_acceleration)
    return worst


def _evaluate(chains: Chains, i: int, q: Array) -> tuple[Array, Array, Array, Array, Array, Array]:
    real, ints = pack(chains)
    J = chains.kind.shape[1]
    origins, axes, end, rot = np.zeros((J, 3)), np.zeros((J, 3)), np.zeros(3), np.zeros((3, 3))
    chain_kinematics(real, ints, i, np.asarray(q, dtype=float), origins, axes, end, rot)
    jac = np.zeros((6, J))
    _jacobian(ints, i, origins, axes, end, jac)
    return ints, origins, axes, end, rot, jac


def chain_point(chains: Chains, i: int, q: Array) -> tuple[Array, Array]:
    """(end point (3,), linear Jacobian (3, n)) of chain ``i`` at joint values ``q`` (J,), for tests and tools."""
    _, _, _, end, _, jac = _evaluate(chains, i, q)
    return end, jac[:3, : int(chains.count[i])]


def chain_pose(chains: Chains, i: int, q: Array) -> tuple[Array, Array, Array]:
    """(end point (3,), end rotation (3, 3), Jacobian (6, n): linear rows, then angular) of chain ``i``."""
    _, _, _, end, rot, jac = _evaluate(chains, i, q)
    return end, rot, jac[:, : int(chains.count[i])]


def chain_drift(chains: Chains, i: int, q: Array, qd: Array) -> Array:
    """J̇ q̇ (6,) of chain ``i``: linear, then angular (see :func:`drift`)."""
    ints, origins, axes, end, _, jac = _evaluate(chains, i, q)
    out = np.zeros(6)
    drift(ints, i, origins, axes, end, jac, np.asarray(qd, dtype=float), out)
    return out
