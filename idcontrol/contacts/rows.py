"""Contact rows: each contact's normal and tangential rows of N, S, T from the frame Jacobians (paper App. B),
and the predicted contact forces back in the world frame."""

from __future__ import annotations

import numpy as np
from numba import njit

from idcontrol.arrays import IN_INDICES, IN_MATRIX, IN_TENSOR, IN_VECTOR, intp


@njit(cache=True)
def _rows_along(axis, points, slot, origins, jacobians, out):
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


@njit((IN_MATRIX, IN_MATRIX, IN_MATRIX, IN_MATRIX, IN_INDICES, IN_MATRIX, IN_TENSOR, intp), cache=True)
def contact_rows(points, normals, tangents_s, tangents_t, slot, origins, jacobians, m):
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


@njit((IN_VECTOR, IN_VECTOR, IN_VECTOR, IN_MATRIX, IN_MATRIX, IN_MATRIX), cache=True)
def forces_in_world(f_normal, f_s, f_t, normals, tangents_s, tangents_t):
    """(n, 3) f_N n̂ + f_S ŝ + f_T t̂ of each contact, N."""
    out = np.empty((f_normal.shape[0], 3))
    for i in range(f_normal.shape[0]):
        for j in range(3):
            out[i, j] = f_normal[i] * normals[i, j] + f_s[i] * tangents_s[i, j] + f_t[i] * tangents_t[i, j]
    return out
