"""Rigid-body dynamics of a Pinocchio model's kinematic tree, compiled, for the ESS simulator's field.

The ESS simulator evaluates the robot's forward dynamics a hundred times a control tick; through Pinocchio's
Python bindings each evaluation costs tens of µs of call overhead, and it cannot be called from the compiled
integrator at all. This module reads the tree once from the Pinocchio model (:func:`tree_of`) and computes, in
compiled code:

* :func:`forward_kinematics`: each body's world rotation and position;
* :func:`velocities`: each joint's motion subspace S and each body's spatial velocity, in the world frame;
* :func:`aba`: the articulated-body algorithm (Featherstone, "Rigid Body Dynamics Algorithms", ch. 7) for the
  joint accelerations q̈ under the joint forces τ, gravity and external forces on the bodies.

Conventions are Pinocchio's: spatial vectors are (linear, angular); a free-flyer's velocity is the base's twist
in its own frame and its acceleration that twist's derivative (what ``pin.aba`` returns); the configuration of
a free-flyer is (position, quaternion x y z w), taken as unit. The algorithm runs in world coordinates (spatial
velocities and forces at the world origin, world axes: Featherstone's §7.3 variant), so an articulated
inertia passes to its parent without a change of frame. Armature is added to each joint's inertia, as in
Pinocchio; joint damping and friction are not modelled (as in ``pin.aba``).

Supported: a free-flyer as the root joint (or none: a fixed base), below it revolute and prismatic joints with
any axis (Pinocchio's R*, P*, unaligned ones). :func:`tree_of` returns None for anything else. Checked against
``pin.aba`` and Pinocchio's kinematics in tests/test_ess_dynamics.py.
"""

from __future__ import annotations

import math
from typing import NamedTuple

import numpy as np
import pinocchio as pin
from numba import njit
from numpy.typing import NDArray

Array = NDArray[np.float64]

#: joint kinds of :class:`Tree`
WORLD, FREE, REVOLUTE, PRISMATIC = 0, 1, 2, 3


class Tree(NamedTuple):
    """A kinematic tree of nb bodies (body 0 the world; each body carries the joint of the same index).

    parent, kind, idx_q, idx_v : (nb,) int64.  axis : (nb, 3) a one-DoF joint's axis in its own frame (unit).
    place_R, place_p : (nb, 3, 3), (nb, 3) each joint's placement in its parent body's frame.
    mass : (nb,) kg.  com : (nb, 3) m, body frame.  inertia : (nb, 3, 3) kg·m², about the centre of mass.
    armature : (nv,) added to each DoF's inertia.  gravity : (3,) m/s², world.
    """

    parent: NDArray[np.int64]
    kind: NDArray[np.int64]
    idx_q: NDArray[np.int64]
    idx_v: NDArray[np.int64]
    axis: Array
    place_R: Array
    place_p: Array
    mass: Array
    com: Array
    inertia: Array
    armature: Array
    gravity: Array


class TreeWork(NamedTuple):
    """Workspace of the compiled functions (nb bodies), world frame.

    R, p : body rotations and positions.  S : (nb, 6) a one-DoF joint's motion subspace; S_free (6, 6) the root
    free-flyer's.  vel : body spatial velocities.  c : velocity-product accelerations.  bias : (articulated) bias
    forces.  IA : articulated inertias.  U, D, u : the one-DoF joints' IA S, Sᵀ IA S + armature, τ − Sᵀ bias.
    acc : body spatial accelerations.  fext : (nb, 6) external force on each body at the world origin (the
    caller's input to :func:`aba`).  free : (3, 6, 6) the root free-flyer's U = IA S, D = Sᵀ IA S and D's
    Cholesky factor.  vec : (4, 6), rot : (3, 3, 3) scratch (no allocation in the compiled calls).
    """

    R: Array
    p: Array
    S: Array
    S_free: Array
    vel: Array
    c: Array
    bias: Array
    IA: Array
    U: Array
    D: Array
    u: Array
    acc: Array
    fext: Array
    free: Array
    vec: Array
    rot: Array


def tree_of(model: pin.Model) -> Tree | None:
    """The tree of a Pinocchio model, or None if it has a joint the compiled dynamics do not support (see the
    module docstring)."""
    nb = model.njoints
    parent = np.array([int(p) for p in model.parents], dtype=np.int64)
    kind = np.zeros(nb, dtype=np.int64)
    axis = np.zeros((nb, 3))
    place_R = np.tile(np.eye(3), (nb, 1, 1))
    place_p = np.zeros((nb, 3))
    mass, com, inertia = np.zeros(nb), np.zeros((nb, 3)), np.zeros((nb, 3, 3))
    idx_q, idx_v = np.zeros(nb, dtype=np.int64), np.zeros(nb, dtype=np.int64)
    for j in range(1, nb):
        joint = model.joints[j]
        idx_q[j], idx_v[j] = joint.idx_q, joint.idx_v
        if joint.shortname() == "JointModelFreeFlyer":
            if parent[j] != 0:
                return None
            kind[j] = FREE
        elif joint.nq == 1 and joint.nv == 1:
            data = joint.createData()
            joint.calc(data, np.zeros(1))
            S = np.asarray(data.S).reshape(6)
            linear, angular = S[:3], S[3:]
            if np.allclose(linear, 0.0) and np.isclose(np.linalg.norm(angular), 1.0):
                kind[j], axis[j] = REVOLUTE, angular
            elif np.allclose(angular, 0.0) and np.isclose(np.linalg.norm(linear), 1.0):
                kind[j], axis[j] = PRISMATIC, linear
            else:
                return None
        else:
            return None
        placement = model.jointPlacements[j]
        place_R[j], place_p[j] = placement.rotation, placement.translation
        body = model.inertias[j]
        mass[j], com[j], inertia[j] = body.mass, body.lever, body.inertia
    armature = np.array(model.armature, dtype=float).reshape(model.nv)
    return Tree(
        parent,
        kind,
        idx_q,
        idx_v,
        axis,
        place_R,
        place_p,
        mass,
        com,
        inertia,
        armature,
        np.array(model.gravity.linear, dtype=float),
    )


def work_for(tree: Tree) -> TreeWork:
    """A workspace for ``tree``."""
    nb = tree.parent.shape[0]
    return TreeWork(
        np.zeros((nb, 3, 3)),
        np.zeros((nb, 3)),
        np.zeros((nb, 6)),
        np.zeros((6, 6)),
        np.zeros((nb, 6)),
        np.zeros((nb, 6)),
        np.zeros((nb, 6)),
        np.zeros((nb, 6, 6)),
        np.zeros((nb, 6)),
        np.zeros(nb),
        np.zeros(nb),
        np.zeros((nb, 6)),
        np.zeros((nb, 6)),
        np.zeros((3, 6, 6)),
        np.zeros((4, 6)),
        np.zeros((3, 3, 3)),
    )


@njit(cache=True)
def _joint_rotation(ax, ay, az, angle, out):  # pragma: no cover - compiled
    """Rotation about the unit axis (ax, ay, az) by ``angle`` rad (Rodrigues) into ``out`` (3, 3)."""
    c, s = math.cos(angle), math.sin(angle)
    t = 1.0 - c
    out[0, 0], out[0, 1], out[0, 2] = t * ax * ax + c, t * ax * ay - s * az, t * ax * az + s * ay
    out[1, 0], out[1, 1], out[1, 2] = t * ax * ay + s * az, t * ay * ay + c, t * ay * az - s * ax
    out[2, 0], out[2, 1], out[2, 2] = t * ax * az - s * ay, t * ay * az + s * ax, t * az * az + c


@njit(cache=True)
def _quaternion_rotation(x, y, z, w, out):  # pragma: no cover - compiled
    """The rotation of the unit quaternion (x, y, z, w) into ``out`` (3, 3)."""
    out[0, 0], out[0, 1], out[0, 2] = 1 - 2 * (y * y + z * z), 2 * (x * y - z * w), 2 * (x * z + y * w)
    out[1, 0], out[1, 1], out[1, 2] = 2 * (x * y + z * w), 1 - 2 * (x * x + z * z), 2 * (y * z - x * w)
    out[2, 0], out[2, 1], out[2, 2] = 2 * (x * z - y * w), 2 * (y * z + x * w), 1 - 2 * (x * x + y * y)


@njit(cache=True)
def forward_kinematics(tree, work, q):  # pragma: no cover - compiled
    """Each body's world rotation ``work.R`` and position ``work.p`` at the configuration q (nq,) (a free-flyer's
    quaternion unit)."""
    R, p = work.R, work.p
    M, J = work.rot[0], work.rot[1]
    for a in range(3):
        p[0, a] = 0.0
        for b in range(3):
            R[0, a, b] = 1.0 if a == b else 0.0
    for i in range(1, tree.parent.shape[0]):
        lam = tree.parent[i]
        iq = tree.idx_q[i]
        Rp, pp = tree.place_R[i], tree.place_p[i]
        # the joint's frame in the parent body: M = R_λ Rp, origin p_λ + R_λ pp
        for a in range(3):
            acc = p[lam, a]
            for b in range(3):
                acc += R[lam, a, b] * pp[b]
                s = 0.0
                for c in range(3):
                    s += R[lam, a, c] * Rp[c, b]
                M[a, b] = s
            p[i, a] = acc
        kind = tree.kind[i]
        if kind == FREE:
            _quaternion_rotation(q[iq + 3], q[iq + 4], q[iq + 5], q[iq + 6], J)
            for a in range(3):
                p[i, a] += M[a, 0] * q[iq] + M[a, 1] * q[iq + 1] + M[a, 2] * q[iq + 2]
        elif kind == REVOLUTE:
            _joint_rotation(tree.axis[i, 0], tree.axis[i, 1], tree.axis[i, 2], q[iq], J)
        else:
            for a in range(3):
                for b in range(3):
                    J[a, b] = 1.0 if a == b else 0.0
                p[i, a] += (M[a, 0] * tree.axis[i, 0] + M[a, 1] * tree.axis[i, 1] + M[a, 2] * tree.axis[i, 2]) * q[iq]
        for a in range(3):
            for b in range(3):
                R[i, a, b] = M[a, 0] * J[0, b] + M[a, 1] * J[1, b] + M[a, 2] * J[2, b]


@njit(cache=True)
def _motion_cross(v, m, out):  # pragma: no cover - compiled
    """out = v × m (spatial motion cross product, (linear, angular))."""
    vx, vy, vz, wx, wy, wz = v[0], v[1], v[2], v[3], v[4], v[5]
    mx, my, mz, nx, ny, nz = m[0], m[1], m[2], m[3], m[4], m[5]
    out[0] = wy * mz - wz * my + vy * nz - vz * ny
    out[1] = wz * mx - wx * mz + vz * nx - vx * nz
    out[2] = wx * my - wy * mx + vx * ny - vy * nx
    out[3] = wy * nz - wz * ny
    out[4] = wz * nx - wx * nz
    out[5] = wx * ny - wy * nx


@njit(cache=True)
def velocities(tree, work, v):  # pragma: no cover - compiled
    """After :func:`forward_kinematics`: the joints' motion subspaces (``work.S``, ``work.S_free``), the bodies'
    spatial velocities ``work.vel`` and velocity-product accelerations ``work.c`` (Ṡ q̇), world frame at the world
    origin, at the velocity v (nv,)."""
    R, p, S, vel, c = work.R, work.p, work.S, work.vel, work.c
    vJ = work.vec[0]
    for a in range(6):
        vel[0, a] = 0.0
        c[0, a] = 0.0
    for i in range(1, tree.parent.shape[0]):
        lam = tree.parent[i]
        iv = tree.idx_v[i]
        kind = tree.kind[i]
        if kind == FREE:
            # twist at the world origin of the local twist (v_l, ω_l): ω = R ω_l, v = R v_l + p × ω
            F = work.S_free
            for a in range(3):
                for b in range(3):
                    F[a, b] = R[i, a, b]
                    F[a + 3, b + 3] = R[i, a, b]
                    F[a + 3, b] = 0.0
            px, py, pz = p[i, 0], p[i, 1], p[i, 2]
            for b in range(3):
                rx, ry, rz = R[i, 0, b], R[i, 1, b], R[i, 2, b]
                F[0, b + 3] = py * rz - pz * ry
                F[1, b + 3] = pz * rx - px * rz
                F[2, b + 3] = px * ry - py * rx
            for a in range(6):
                acc = vel[lam, a]
                for b in range(6):
                    acc += F[a, b] * v[iv + b]
                vel[i, a] = acc
                c[i, a] = 0.0  # v × v
            continue
        ax = R[i, 0, 0] * tree.axis[i, 0] + R[i, 0, 1] * tree.axis[i, 1] + R[i, 0, 2] * tree.axis[i, 2]
        ay = R[i, 1, 0] * tree.axis[i, 0] + R[i, 1, 1] * tree.axis[i, 1] + R[i, 1, 2] * tree.axis[i, 2]
        az = R[i, 2, 0] * tree.axis[i, 0] + R[i, 2, 1] * tree.axis[i, 1] + R[i, 2, 2] * tree.axis[i, 2]
        if kind == REVOLUTE:  # rotation about the axis through the joint's origin: v at the world origin p × a
            px, py, pz = p[i, 0], p[i, 1], p[i, 2]
            S[i, 0], S[i, 1], S[i, 2] = py * az - pz * ay, pz * ax - px * az, px * ay - py * ax
            S[i, 3], S[i, 4], S[i, 5] = ax, ay, az
        else:
            S[i, 0], S[i, 1], S[i, 2] = ax, ay, az
            S[i, 3] = S[i, 4] = S[i, 5] = 0.0
        qd = v[iv]
        for a in range(6):
            vJ[a] = S[i, a] * qd
            vel[i, a] = vel[lam, a] + vJ[a]
        _motion_cross(vel[i], vJ, c[i])


@njit(cache=True)
def _world_inertia(tree, work, i, out):  # pragma: no cover - compiled
    """Body i's spatial inertia at the world origin, world axes, into ``out`` (6, 6): [[m 1, −m [c]×],
    [m [c]×, I_c − m [c]×[c]×]], c the world centre of mass, I_c the rotated inertia about it."""
    R, m = work.R[i], tree.mass[i]
    lc, Ic = tree.com[i], tree.inertia[i]
    cx = work.p[i, 0] + R[0, 0] * lc[0] + R[0, 1] * lc[1] + R[0, 2] * lc[2]
    cy = work.p[i, 1] + R[1, 0] * lc[0] + R[1, 1] * lc[1] + R[1, 2] * lc[2]
    cz = work.p[i, 2] + R[2, 0] * lc[0] + R[2, 1] * lc[1] + R[2, 2] * lc[2]
    T = work.rot[2]  # R I_c
    for a in range(3):
        for b in range(3):
            T[a, b] = R[a, 0] * Ic[0, b] + R[a, 1] * Ic[1, b] + R[a, 2] * Ic[2, b]
    for a in range(3):
        for b in range(3):
            out[a + 3, b + 3] = T[a, 0] * R[b, 0] + T[a, 1] * R[b, 1] + T[a, 2] * R[b, 2]
            out[a, b] = m if a == b else 0.0
    # −m [c]×[c]× = m (|c|² 1 − c cᵀ)
    c2 = cx * cx + cy * cy + cz * cz
    out[3, 3] += m * (c2 - cx * cx)
    out[4, 4] += m * (c2 - cy * cy)
    out[5, 5] += m * (c2 - cz * cz)
    out[3, 4] -= m * cx * cy
    out[4, 3] -= m * cx * cy
    out[3, 5] -= m * cx * cz
    out[5, 3] -= m * cx * cz
    out[4, 5] -= m * cy * cz
    out[5, 4] -= m * cy * cz
    # m [c]× (angular-linear block) and its transpose −m [c]× (linear-angular)
    out[3, 0], out[3, 1], out[3, 2] = 0.0, -m * cz, m * cy
    out[4, 0], out[4, 1], out[4, 2] = m * cz, 0.0, -m * cx
    out[5, 0], out[5, 1], out[5, 2] = -m * cy, m * cx, 0.0
    for a in range(3):
        for b in range(3):
            out[a, b + 3] = out[b + 3, a]


@njit(cache=True)
def _solve_spd6(A, rhs, x, L):  # pragma: no cover - compiled
    """x = A⁻¹ rhs for a 6x6 symmetric positive definite A, by Cholesky (factor into L (6, 6)) written out
    (LAPACK's call costs more than the factorization at this size). A is not modified."""
    for j in range(6):
        s = A[j, j]
        for k in range(j):
            s -= L[j, k] * L[j, k]
        d = math.sqrt(s)
        L[j, j] = d
        for i in range(j + 1, 6):
            s = A[i, j]
            for k in range(j):
                s -= L[i, k] * L[j, k]
            L[i, j] = s / d
    for i in range(6):
        s = rhs[i]
        for k in range(i):
            s -= L[i, k] * x[k]
        x[i] = s / L[i, i]
    for i in range(5, -1, -1):
        s = x[i]
        for k in range(i + 1, 6):
            s -= L[k, i] * x[k]
        x[i] = s / L[i, i]


@njit(cache=True)
def aba(tree, work, tau, ddq):  # pragma: no cover - compiled
    """Joint accelerations q̈ (nv,) into ``ddq`` under the joint forces τ (nv,), gravity and the external forces
    ``work.fext`` (nb, 6) (world frame, at the world origin), after :func:`forward_kinematics` and
    :func:`velocities` at the same state."""
    nb = tree.parent.shape[0]
    vel, c, bias, IA, S = work.vel, work.c, work.bias, work.IA, work.S
    U, D, u, acc = work.U, work.D, work.u, work.acc
    h, pa, a_pre = work.vec[1], work.vec[2], work.vec[3]
    for i in range(1, nb):  # rigid-body inertias and bias forces v ×* (I v) − f_ext
        Ii, vi = IA[i], vel[i]
        _world_inertia(tree, work, i, Ii)
        for a in range(6):
            h[a] = (
                Ii[a, 0] * vi[0]
                + Ii[a, 1] * vi[1]
                + Ii[a, 2] * vi[2]
                + Ii[a, 3] * vi[3]
                + Ii[a, 4] * vi[4]
                + Ii[a, 5] * vi[5]
            )
        vx, vy, vz, wx, wy, wz = vel[i, 0], vel[i, 1], vel[i, 2], vel[i, 3], vel[i, 4], vel[i, 5]
        bias[i, 0] = wy * h[2] - wz * h[1] - work.fext[i, 0]
        bias[i, 1] = wz * h[0] - wx * h[2] - work.fext[i, 1]
        bias[i, 2] = wx * h[1] - wy * h[0] - work.fext[i, 2]
        bias[i, 3] = wy * h[5] - wz * h[4] + vy * h[2] - vz * h[1] - work.fext[i, 3]
        bias[i, 4] = wz * h[3] - wx * h[5] + vz * h[0] - vx * h[2] - work.fext[i, 4]
        bias[i, 5] = wx * h[4] - wy * h[3] + vx * h[1] - vy * h[0] - work.fext[i, 5]
    for i in range(nb - 1, 0, -1):  # articulated inertias and bias forces, leaves to root
        lam = tree.parent[i]
        if tree.kind[i] == FREE:
            continue  # the root: solved in the forward pass
        iv = tree.idx_v[i]
        d = tree.armature[iv]
        ui = tau[iv]
        Ii, Si, Ui, bi, ci = IA[i], S[i], U[i], bias[i], c[i]
        for a in range(6):
            s = (
                Ii[a, 0] * Si[0]
                + Ii[a, 1] * Si[1]
                + Ii[a, 2] * Si[2]
                + Ii[a, 3] * Si[3]
                + Ii[a, 4] * Si[4]
                + Ii[a, 5] * Si[5]
            )
            Ui[a] = s
            d += Si[a] * s
            ui -= Si[a] * bi[a]
        D[i], u[i] = d, ui
        if lam == 0:
            continue
        # Ia = IA − U Uᵀ / D, pa = bias + Ia c + U u / D, both added to the parent (world frame: no transform)
        inv = 1.0 / d
        Il, bl = IA[lam], bias[lam]
        for a in range(6):
            wa = Ui[a] * inv
            s = bi[a] + wa * ui
            for b in range(6):
                e = Ii[a, b] - wa * Ui[b]
                s += e * ci[b]
                Il[a, b] += e
            bl[a] += s
    g = tree.gravity
    acc[0, 0], acc[0, 1], acc[0, 2] = -g[0], -g[1], -g[2]
    acc[0, 3] = acc[0, 4] = acc[0, 5] = 0.0
    for i in range(1, nb):  # accelerations, root to leaves
        lam = tree.parent[i]
        iv = tree.idx_v[i]
        for a in range(6):
            a_pre[a] = acc[lam, a] + c[i, a]
        if tree.kind[i] == FREE and _no_armature(tree.armature, iv):
            # with D = Sᵀ IA S: S q̈ = IA⁻¹ (S⁻ᵀ τ − bias) − a_pre, so the body's acceleration is IA⁻¹ (f − bias), f
            # the base's joint force as a world wrench, and q̈ = S⁻¹ (acc − a_pre) (S⁻¹: R, p below)
            R, pw = work.R[i], work.p[i]
            for a in range(3):
                h[a] = R[a, 0] * tau[iv] + R[a, 1] * tau[iv + 1] + R[a, 2] * tau[iv + 2]
                h[a + 3] = R[a, 0] * tau[iv + 3] + R[a, 1] * tau[iv + 4] + R[a, 2] * tau[iv + 5]
            h[3] += pw[1] * h[2] - pw[2] * h[1]
            h[4] += pw[2] * h[0] - pw[0] * h[2]
            h[5] += pw[0] * h[1] - pw[1] * h[0]
            for a in range(6):
                h[a] -= bias[i, a]
            _solve_spd6(IA[i], h, pa, work.free[2])
            for a in range(6):
                acc[i, a] = pa[a]
                pa[a] -= a_pre[a]
            # v_l = Rᵀ (d_lin − p × d_ang), ω_l = Rᵀ d_ang
            dx = pa[0] - (pw[1] * pa[5] - pw[2] * pa[4])
            dy = pa[1] - (pw[2] * pa[3] - pw[0] * pa[5])
            dz = pa[2] - (pw[0] * pa[4] - pw[1] * pa[3])
            for a in range(3):
                ddq[iv + a] = R[0, a] * dx + R[1, a] * dy + R[2, a] * dz
                ddq[iv + 3 + a] = R[0, a] * pa[3] + R[1, a] * pa[4] + R[2, a] * pa[5]
            continue
        if tree.kind[i] == FREE:
            # q̈ = D⁻¹ (τ − Sᵀ bias − Uᵀ a_pre) with U = IA S, D = Sᵀ IA S + armature (Uᵀ = Sᵀ IA: IA symmetric)
            F, Uf, Df = work.S_free, work.free[0], work.free[1]
            for a in range(6):
                for b in range(6):
                    s = 0.0
                    for k in range(6):
                        s += IA[i, a, k] * F[k, b]
                    Uf[a, b] = s
            for k in range(6):  # bias + IA a_pre, into the solve's output for now
                pa[k] = bias[i, k] + _dot6(IA[i, k], a_pre)
            for a in range(6):
                r = tau[iv + a]
                for k in range(6):
                    r -= F[k, a] * pa[k]
                h[a] = r
                for b in range(6):
                    s = 0.0
                    for k in range(6):
                        s += F[k, a] * Uf[k, b]
                    Df[a, b] = s
                Df[a, a] += tree.armature[iv + a]
            _solve_spd6(Df, h, pa, work.free[2])
            for a in range(6):
                ddq[iv + a] = pa[a]
            for a in range(6):
                s = a_pre[a]
                for b in range(6):
                    s += F[a, b] * pa[b]
                acc[i, a] = s
            continue
        s = u[i]
        for a in range(6):
            s -= U[i, a] * a_pre[a]
        qdd = s / D[i]
        ddq[iv] = qdd
        for a in range(6):
            acc[i, a] = a_pre[a] + S[i, a] * qdd


@njit(cache=True)
def _no_armature(armature, first):  # pragma: no cover - compiled
    """Whether a free-flyer's six DoFs from ``first`` have no armature."""
    for a in range(first, first + 6):
        if armature[a] != 0.0:
            return False
    return True


@njit(cache=True)
def _dot6(a, b):  # pragma: no cover - compiled
    return a[0] * b[0] + a[1] * b[1] + a[2] * b[2] + a[3] * b[3] + a[4] * b[4] + a[5] * b[5]
