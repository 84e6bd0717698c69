"""Leg kinematics relative to the IMU: each contact sphere's centre and its Jacobian from the joint encoders alone.

The estimator needs, every tick and before it knows the base pose, where each foot is relative to the IMU
(s (k, 3), IMU frame, m) and how that point moves with the joints (J (k, 3, nj), m/rad). Both depend on the
joint positions only. :class:`LegKinematics` reads the tree of one-DoF joints, their placements and axes from
the Pinocchio model once, and :func:`feet_in_imu` walks it in one compiled call (Pinocchio's own forward
kinematics and frame Jacobians called from Python cost several µs a foot; the tests check this walk against
them).
"""

from __future__ import annotations

from typing import NamedTuple

import numpy as np
import pinocchio as pin
from numba import njit
from numpy.typing import NDArray

from idcontrol.errors import ConfigError
from idcontrol.robot.model import RobotModel
from idcontrol.robot.urdf import frame_id

Array = NDArray[np.float64]

REVOLUTE, PRISMATIC = 0, 1


class LegGeometry(NamedTuple):
    """The joint tree below the floating base, in Pinocchio's joint order (parents before children).

    parent : (nj,) index of each joint's parent joint, -1 for the base.
    placement_rotation, placement_translation : (nj, 3, 3), (nj, 3) each joint's frame in its parent's at q = 0.
    axis : (nj, 3) the joint's axis in its own frame (unit).  kind : (nj,) :data:`REVOLUTE` or :data:`PRISMATIC`.
    foot_joint : (k,) the joint that moves each contact sphere (-1: the base itself).
    foot_point : (k, 3) the sphere centre in that joint's frame, m.
    support : (k, nj) 1 where a joint moves the sphere.
    imu_rotation, imu_translation : (3, 3), (3,) the IMU frame in the base frame (R_BI, p_BI).
    foot_radius : (k,) each sphere's radius, m: a stance sphere rolls about its lowest point, which the filters
        hold still (its centre moves at r·ω as the leg turns: 1 cm/s on the quadruped's trot).
    """

    parent: NDArray[np.intp]
    placement_rotation: Array
    placement_translation: Array
    axis: Array
    kind: NDArray[np.intp]
    foot_joint: NDArray[np.intp]
    foot_point: Array
    support: NDArray[np.intp]
    imu_rotation: Array
    imu_translation: Array
    foot_radius: Array


def leg_geometry(robot: RobotModel) -> LegGeometry:
    """The geometry of ``robot``'s legs and IMU (``robot.toml`` ``[sensors] imu_frame``, default the base
    link).

    Raises ConfigError for a fixed base, or a joint that is not one-DoF revolute or prismatic.
    """
    m = robot.model
    if not robot.floating_base:
        raise ConfigError(f"{robot.name}: the base estimator needs a floating base")
    nj = m.njoints - 2
    if m.nq != 7 + nj or m.nv != 6 + nj:
        raise ConfigError(f"{robot.name}: the base estimator needs one-DoF joints only (nq {m.nq}, nv {m.nv})")
    data = m.createData()
    q0 = pin.neutral(m)
    pin.computeJointJacobians(m, data, q0)
    parent = np.empty(nj, dtype=np.intp)
    rotation = np.empty((nj, 3, 3))
    translation = np.empty((nj, 3))
    axis = np.empty((nj, 3))
    kind = np.empty(nj, dtype=np.intp)
    for j in range(2, m.njoints):
        i = j - 2
        parent[i] = m.parents[j] - 2 if m.parents[j] > 1 else -1
        rotation[i] = m.jointPlacements[j].rotation
        translation[i] = m.jointPlacements[j].translation
        subspace = pin.getJointJacobian(m, data, j, pin.ReferenceFrame.LOCAL)[:, m.joints[j].idx_v]
        linear, angular = subspace[:3], subspace[3:]
        if np.linalg.norm(angular) > 0.5 and np.linalg.norm(linear) < 1e-9:
            kind[i], axis[i] = REVOLUTE, angular / np.linalg.norm(angular)
        elif np.linalg.norm(linear) > 0.5 and np.linalg.norm(angular) < 1e-9:
            kind[i], axis[i] = PRISMATIC, linear / np.linalg.norm(linear)
        else:
            raise ConfigError(f"{robot.name}: joint {m.names[j]!r} is neither revolute nor prismatic")
    k = len(robot.sphere_names)
    foot_joint = np.empty(k, dtype=np.intp)
    foot_point = np.empty((k, 3))
    support = np.zeros((k, nj), dtype=np.intp)
    for f, (fid, offset) in enumerate(zip(robot.sphere_frame_ids, robot.sphere_offsets, strict=True)):
        frame = m.frames[int(fid)]
        foot_joint[f] = frame.parentJoint - 2 if frame.parentJoint > 1 else -1
        foot_point[f] = frame.placement.act(offset)
        for joint in m.supports[frame.parentJoint]:
            if joint > 1:
                support[f, joint - 2] = 1
    name = robot.config.sensors.imu_frame
    imu = pin.SE3.Identity() if name is None else m.frames[frame_id(m, name)].placement
    return LegGeometry(
        parent,
        rotation,
        translation,
        axis,
        kind,
        foot_joint,
        foot_point,
        support,
        np.ascontiguousarray(imu.rotation),
        np.ascontiguousarray(imu.translation),
        robot.sphere_radii.copy(),
    )


@njit(cache=True)
def _rotation_about(axis, angle, out):
    """``out`` (3, 3) = exp(angle · axis×) for a unit ``axis`` (Rodrigues)."""
    c, s = np.cos(angle), np.sin(angle)
    t = 1.0 - c
    x, y, z = axis[0], axis[1], axis[2]
    out[0, 0] = c + x * x * t
    out[0, 1] = x * y * t - z * s
    out[0, 2] = x * z * t + y * s
    out[1, 0] = y * x * t + z * s
    out[1, 1] = c + y * y * t
    out[1, 2] = y * z * t - x * s
    out[2, 0] = z * x * t - y * s
    out[2, 1] = z * y * t + x * s
    out[2, 2] = c + z * z * t


@njit(cache=True)
def feet_in_imu(geometry, joint_q, joint_rotation, joint_origin, feet, jacobian, foot_rotation):
    """Each contact sphere's centre relative to the IMU and its Jacobian, from the joint positions alone.

    geometry : :class:`LegGeometry`.  joint_q : (nj,) rad or m, Pinocchio's order (q[7:]).
    joint_rotation, joint_origin : (nj, 3, 3), (nj, 3) workspace: each joint's frame in the base frame.
    feet : (k, 3) out: s_f = R_BIᵀ (p_Bf − p_BI), the sphere centre in the IMU frame, m.
    jacobian : (k, 3, nj) out: ∂s_f/∂q in the IMU frame (m/rad; 1 for a prismatic joint's own column).
    foot_rotation : (k, 3, 3) out: the orientation of the body each sphere is fixed to, in the IMU frame (R_IF).
    """
    g = geometry
    nj = joint_q.shape[0]
    local = np.empty((3, 3))
    tmp = np.empty((3, 3))
    for i in range(nj):
        p = g.parent[i]
        # frame of joint i in its parent: placement · motion(q)
        a = g.placement_rotation[i]
        b = g.placement_translation[i]
        if p >= 0:
            pr = joint_rotation[p]
            po = joint_origin[p]
            for r in range(3):
                joint_origin[i, r] = po[r] + pr[r, 0] * b[0] + pr[r, 1] * b[1] + pr[r, 2] * b[2]
                for c in range(3):
                    joint_rotation[i, r, c] = pr[r, 0] * a[0, c] + pr[r, 1] * a[1, c] + pr[r, 2] * a[2, c]
        else:
            for r in range(3):
                joint_origin[i, r] = b[r]
                for c in range(3):
                    joint_rotation[i, r, c] = a[r, c]
        if g.kind[i] == REVOLUTE:
            _rotation_about(g.axis[i], joint_q[i], local)
            for r in range(3):
                for c in range(3):
                    tmp[r, c] = (
                        joint_rotation[i, r, 0] * local[0, c]
                        + joint_rotation[i, r, 1] * local[1, c]
                        + joint_rotation[i, r, 2] * local[2, c]
                    )
            joint_rotation[i] = tmp
        else:
            for r in range(3):
                joint_origin[i, r] += joint_q[i] * (
                    joint_rotation[i, r, 0] * g.axis[i, 0]
                    + joint_rotation[i, r, 1] * g.axis[i, 1]
                    + joint_rotation[i, r, 2] * g.axis[i, 2]
                )
    ri = g.imu_rotation
    pi = g.imu_translation
    point = np.empty(3)
    column = np.empty(3)
    ax = np.empty(3)
    for f in range(feet.shape[0]):
        j = g.foot_joint[f]
        c = g.foot_point[f]
        if j >= 0:
            for r in range(3):
                point[r] = joint_origin[j, r] + (
                    joint_rotation[j, r, 0] * c[0] + joint_rotation[j, r, 1] * c[1] + joint_rotation[j, r, 2] * c[2]
                )
                for col in range(3):
                    foot_rotation[f, r, col] = (
                        ri[0, r] * joint_rotation[j, 0, col]
                        + ri[1, r] * joint_rotation[j, 1, col]
                        + ri[2, r] * joint_rotation[j, 2, col]
                    )
        else:
            point[:] = c
            for r in range(3):
                for col in range(3):
                    foot_rotation[f, r, col] = ri[col, r]
        for r in range(3):
            feet[f, r] = ri[0, r] * (point[0] - pi[0]) + ri[1, r] * (point[1] - pi[1]) + ri[2, r] * (point[2] - pi[2])
        for i in range(nj):
            if g.support[f, i] == 0:
                for r in range(3):
                    jacobian[f, r, i] = 0.0
                continue
            for r in range(3):
                ax[r] = (
                    joint_rotation[i, r, 0] * g.axis[i, 0]
                    + joint_rotation[i, r, 1] * g.axis[i, 1]
                    + joint_rotation[i, r, 2] * g.axis[i, 2]
                )
            if g.kind[i] == REVOLUTE:
                dx = point[0] - joint_origin[i, 0]
                dy = point[1] - joint_origin[i, 1]
                dz = point[2] - joint_origin[i, 2]
                column[0] = ax[1] * dz - ax[2] * dy
                column[1] = ax[2] * dx - ax[0] * dz
                column[2] = ax[0] * dy - ax[1] * dx
            else:
                column[:] = ax
            for r in range(3):
                jacobian[f, r, i] = ri[0, r] * column[0] + ri[1, r] * column[1] + ri[2, r] * column[2]


def pack_geometry(geometry: LegGeometry) -> tuple[Array, NDArray[np.intp]]:
    """The geometry as one float and one integer array (what crosses into compiled code; read back with
    :func:`geometry_views`)."""
    g = geometry
    floats = np.concatenate(
        [
            g.placement_rotation.ravel(),
            g.placement_translation.ravel(),
            g.axis.ravel(),
            g.foot_point.ravel(),
            g.imu_rotation.ravel(),
            g.imu_translation.ravel(),
            g.foot_radius,
        ]
    )
    ints = np.concatenate([[len(g.parent), len(g.foot_joint)], g.parent, g.kind, g.foot_joint, g.support.ravel()])
    return floats, ints.astype(np.intp)


@njit(cache=True)
def geometry_views(floats, ints):
    """The :class:`LegGeometry` whose fields are views of :func:`pack_geometry`'s two arrays."""
    nj, k = ints[0], ints[1]
    i = 2
    parent = ints[i : i + nj]
    kind = ints[i + nj : i + 2 * nj]
    foot_joint = ints[i + 2 * nj : i + 2 * nj + k]
    support = ints[i + 2 * nj + k : i + 2 * nj + k + k * nj].reshape((k, nj))
    a = 9 * nj
    b = a + 3 * nj
    c = b + 3 * nj
    d = c + 3 * k
    return LegGeometry(
        parent,
        floats[:a].reshape((nj, 3, 3)),
        floats[a:b].reshape((nj, 3)),
        floats[b:c].reshape((nj, 3)),
        kind,
        foot_joint,
        floats[c:d].reshape((k, 3)),
        support,
        floats[d : d + 9].reshape((3, 3)),
        floats[d + 9 : d + 12],
        floats[d + 12 : d + 12 + k],
    )


class LegKinematics:
    """:func:`feet_in_imu` with its workspace, for use outside the filters' compiled tick (tests, start-up):
    ``update(joint_q)`` fills :attr:`feet` (k, 3) and :attr:`jacobian` (k, 3, nj), IMU frame."""

    def __init__(self, robot: RobotModel) -> None:
        self.geometry = leg_geometry(robot)
        nj = len(self.geometry.parent)
        k = len(self.geometry.foot_joint)
        self.joint_rotation = np.zeros((nj, 3, 3))
        self.joint_origin = np.zeros((nj, 3))
        self.feet = np.zeros((k, 3))
        self.jacobian = np.zeros((k, 3, nj))
        self.foot_rotation = np.zeros((k, 3, 3))

    def update(self, joint_q: Array) -> None:
        feet_in_imu(
            self.geometry, joint_q, self.joint_rotation, self.joint_origin, self.feet, self.jacobian, self.foot_rotation
        )
