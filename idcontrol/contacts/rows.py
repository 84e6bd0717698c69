"""Contact rows: each contact's normal and tangential rows of N, S, T from the frame Jacobians (paper App. B),
and the predicted contact forces back in the world frame."""

from __future__ import annotations

import numpy as np
from numba import njit

from idcontrol.arrays import IN_INDICES, IN_MATRIX, IN_TENSOR, IN_VECTOR, intp


@njit(cache=True)
def robot_row(out, px, py, pz, dx, dy, dz, f, origins, jacobians):
    """out[:nv] = dᵀ J_lin + (r × d)ᵀ J_ang: the row dᵀ J_p of the robot point p (m) for the direction d, with
    r = p − the origin of frame slot ``f`` and its world-aligned Jacobian [J_lin; J_ang] ``jacobians[f]``."""
    nv = jacobians.shape[2]
    rx = px - origins[f, 0]
    ry = py - origins[f, 1]
    rz = pz - origins[f, 2]
    mx, my, mz = ry * dz - rz * dy, rz * dx - rx * dz, rx * dy - ry * dx
    for c in range(nv):
        out[c] = (
            dx * jacobians[f, 0, c]
            + dy * jacobians[f, 1, c]
            + dz * jacobians[f, 2, c]
            + mx * jacobians[f, 3, c]
            + my * jacobians[f, 4, c]
            + mz * jacobians[f, 5, c]
        )


@njit(cache=True)
def body_columns(out, column, px, py, pz, dx, dy, dz, cx, cy, cz):
    """out[column : column + 6] = −[d; a × d]: minus the row dᵀ J_p of the point p (m) of a movable body whose
    centre is c (m), a = p − c, in the body's [v_com; ω] world columns."""
    ax, ay, az = px - cx, py - cy, pz - cz
    out[column] = -dx
    out[column + 1] = -dy
    out[column + 2] = -dz
    out[column + 3] = -(ay * dz - az * dy)
    out[column + 4] = -(az * dx - ax * dz)
    out[column + 5] = -(ax * dy - ay * dx)


@njit(cache=True)
def fill_rows(out, i, px, py, pz, normal, tangent_s, tangent_t, f, origins, jacobians, column, cx, cy, cz):
    """Row i of N, S, T (``out[0]``, ``out[1]``, ``out[2]``, each (n, m)) for the contact at p (m) on frame slot
    ``f``, directions n̂, ŝ, t̂ (each (3,)); against a movable body (``column`` ≥ 0: its first column; centre c,
    m) minus the body point's row, as :func:`body_columns`."""
    for a in range(3):
        d = normal if a == 0 else tangent_s if a == 1 else tangent_t
        row = out[a, i]
        robot_row(row, px, py, pz, d[0], d[1], d[2], f, origins, jacobians)
        if column >= 0:
            body_columns(row, column, px, py, pz, d[0], d[1], d[2], cx, cy, cz)


@njit(
    (IN_MATRIX, IN_MATRIX, IN_MATRIX, IN_MATRIX, IN_INDICES, IN_MATRIX, IN_TENSOR, intp, IN_INDICES, IN_MATRIX),
    cache=True,
)
def contact_rows(points, normals, tangents_s, tangents_t, slot, origins, jacobians, m, body, body_centres):
    """(N, S, T), each (n, m): rows dᵀ J_p of the robot point at each contact for d = n̂, ŝ, t̂.

    With r = point − frame origin and the frame's world-aligned Jacobian
    [J_lin; J_ang] (``jacobians[slot[i]]``), dᵀ J_p = dᵀ J_lin + (r × d)ᵀ J_ang
    (paper App. B). A contact on movable body b = ``body[i]`` ≥ 0 (centre
    ``body_centres[b]``, m) also gets −[d; a × d], a = point − centre, in the
    body's columns nv + 6b … nv + 6b + 5: the relative Jacobian. The three
    blocks are views of one (3, n, m) array.
    """
    nv = jacobians.shape[2]
    out = np.zeros((3, points.shape[0], m))
    for i in range(points.shape[0]):
        b = body[i]
        column, cx, cy, cz = -1, 0.0, 0.0, 0.0
        if b >= 0:
            column, cx, cy, cz = nv + 6 * b, body_centres[b, 0], body_centres[b, 1], body_centres[b, 2]
        fill_rows(
            out,
            i,
            points[i, 0],
            points[i, 1],
            points[i, 2],
            normals[i],
            tangents_s[i],
            tangents_t[i],
            slot[i],
            origins,
            jacobians,
            column,
            cx,
            cy,
            cz,
        )
    return out[0], out[1], out[2]


@njit((IN_VECTOR, IN_VECTOR, IN_VECTOR, IN_MATRIX, IN_MATRIX, IN_MATRIX), cache=True)
def forces_in_world(f_normal, f_s, f_t, normals, tangents_s, tangents_t):
    """(n, 3) f_N n̂ + f_S ŝ + f_T t̂ of each contact, N."""
    out = np.empty((f_normal.shape[0], 3))
    for i in range(f_normal.shape[0]):
        for j in range(3):
            out[i, j] = f_normal[i] * normals[i, j] + f_s[i] * tangents_s[i, j] + f_t[i] * tangents_t[i, j]
    return out
