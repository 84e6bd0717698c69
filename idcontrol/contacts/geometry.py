"""Closest-feature contact geometry between a robot's contact spheres and the world (paper Sec. 3.3, App. B).

Conventions, shared by every shape here:

* ``phi`` is the signed distance between the closest points, m (> 0 separated,
  < 0 interpenetrating);
* the contact normal n̂ points *from the other body toward the sphere*, so the
  sphere moving along +n̂ separates, and d(phi)/d(centre) = n̂;
* the contact point is the midpoint of the two closest points: the sphere's
  surface point ``c − r n̂`` and the other body's surface point;
* the tangents (ŝ, t̂) of :func:`tangent_bases` complete a right-handed
  orthonormal frame, ŝ × t̂ = n̂.

All arrays are in the world frame unless a name says otherwise; lengths in m.

The geometry is computed by compiled kernels (numba, explicit signatures) behind the shapes' methods, which
check their inputs; the detection kernel calls the scalar ones (:func:`box_sphere`, :func:`map_sphere`,
:func:`tangent_frame`) directly.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
from numba import njit
from numpy.typing import NDArray

from idcontrol.arrays import IN_MATRIX, IN_VECTOR, float64, intp
from idcontrol.errors import ConfigError, InputError, NonFiniteError, ShapeError

Array = NDArray[np.float64]

# Tangent frame: blend from "ŝ = x̂ projected" to "t̂ = ŷ projected" as |n̂ₓ| goes from cos 40° to cos 20°.
_BLEND_START_COS = math.cos(math.radians(40.0))
_BLEND_END_COS = math.cos(math.radians(20.0))
_TINY = 1e-300
# Height map closest-point iteration.
_HM_NEWTON_ITERATIONS = 30  # per cell
_HM_MAX_CELLS = 64  # cells walked across creases
_HM_STEP_TOLERANCE = 1e-14  # m
_HM_MAX_HALVINGS = 40
_HM_DIRECTION_MIN_DISTANCE = 1e-4  # m: below this the surface normal is used instead of (c − p)/|c − p|
_ORTHONORMAL_TOLERANCE = 1e-6
_BOX_INSIDE_TOLERANCE = 1e-12  # m: a centre closer than this to the box counts as on its surface


# ---------------------------------------------------------------------------------------------------------------------
# validation helpers


def _as_array(name: str, x: object, shape: tuple[int, ...]) -> Array:
    """``x`` as a finite float array of ``shape`` (−1 = any length); ShapeError / NonFiniteError otherwise."""
    try:
        arr = np.asarray(x, dtype=float)
    except (TypeError, ValueError) as exc:
        raise InputError(f"{name} must be numeric, got {type(x).__name__}") from exc
    if arr.ndim != len(shape) or any(e != -1 and g != e for g, e in zip(arr.shape, shape, strict=True)):
        raise ShapeError(name, shape, arr.shape)
    finite = all(map(math.isfinite, arr.ravel().tolist())) if arr.size <= 16 else bool(np.isfinite(arr).all())
    if not finite:
        raise NonFiniteError(name, np.flatnonzero(~np.isfinite(arr)))
    return arr


def _as_scalar(name: str, x: object) -> float:
    """``x`` as a finite float; ShapeError / NonFiniteError otherwise."""
    if isinstance(x, (float, int)) and not isinstance(x, bool):
        value = float(x)
        if not math.isfinite(value):
            raise NonFiniteError(name, [0])
        return value
    return float(_as_array(name, x, ()))


def _check_radius(radius: float) -> None:
    if radius < 0.0:
        raise InputError(f"sphere radius must be >= 0 m, got {radius}")


def _check_radii(radii: Array) -> None:
    if radii.size and float(radii.min()) < 0.0:
        raise InputError(f"sphere radii must be >= 0 m, got {radii[radii < 0.0][:5]}")


def _check_rotation(name: str, rotation: object) -> Array:
    """``rotation`` as a (3, 3) proper rotation matrix (to 1e-6); InputError otherwise."""
    R = _as_array(name, rotation, (3, 3))
    (a, b, c), (d, e, f), (g, h, i) = R.tolist()
    gram = (
        a * a + d * d + g * g - 1.0,
        b * b + e * e + h * h - 1.0,
        c * c + f * f + i * i - 1.0,
        a * b + d * e + g * h,
        a * c + d * f + g * i,
        b * c + e * f + h * i,
    )
    det = a * (e * i - f * h) - b * (d * i - f * g) + c * (d * h - e * g)
    if max(map(abs, gram)) > _ORTHONORMAL_TOLERANCE or det < 0.0:
        raise InputError(f"{name} is not a rotation matrix (RᵀR ≠ I or det < 0): {R.tolist()}")
    return R


def _readonly(arr: Array) -> Array:
    arr = np.array(arr, dtype=float)  # own copy
    arr.setflags(write=False)
    return arr


# ---------------------------------------------------------------------------------------------------------------------
# result type and tangent frames


@dataclass(frozen=True, eq=False)
class ContactGeometry:
    """Closest-feature geometry of one sphere against one body.

    Attributes
    ----------
    phi : signed distance between the closest points, m.
    point_in_world : (3,) midpoint of the two closest points, m.
    normal_in_world : (3,) unit normal from the other body toward the sphere.
    """

    phi: float
    point_in_world: Array
    normal_in_world: Array

    @property
    def tangents_in_world(self) -> tuple[Array, Array]:
        """(ŝ, t̂), each (3,), of :func:`tangent_basis` for this normal."""
        return tangent_basis(self.normal_in_world)


@njit(cache=True)
def tangent_frame(nx, ny, nz):
    """(ŝₓ, ŝ_y, ŝ_z, t̂ₓ, t̂_y, t̂_z) of one non-zero normal (normalized here), by :func:`tangent_bases`' rule."""
    norm = math.sqrt(nx * nx + ny * ny + nz * nz)
    nx, ny, nz = nx / norm, ny / norm, nz / norm
    # primary: ŝ = (x̂ − n̂ₓ n̂)/L with L = |x̂ − n̂ₓ n̂| = √(n̂_y² + n̂_z²) (zero only at n̂ = ±x̂, where w = 1)
    inv_l = 1.0 / max(math.sqrt(ny * ny + nz * nz), _TINY)
    sx = (1.0 - nx * nx) * inv_l
    sy = -nx * ny * inv_l
    sz = -nx * nz * inv_l
    if abs(nx) > _BLEND_START_COS:
        u = min(max((abs(nx) - _BLEND_START_COS) / (_BLEND_END_COS - _BLEND_START_COS), 0.0), 1.0)
        w = u * u * (3.0 - 2.0 * u)
        if w >= 1.0:  # the fallback ŝ = ŷ × n̂/|ŷ × n̂| = (n̂_z, 0, −n̂ₓ)/√(n̂ₓ² + n̂_z²) (zero only at ±ŷ, where w = 0)
            inv_m = 1.0 / max(math.sqrt(nx * nx + nz * nz), _TINY)
            sx, sy, sz = nz * inv_m, 0.0, -nx * inv_m
        elif w > 0.0:
            # Rotating ŝ by a about n̂ gives cos a ŝ + sin a (n̂ × ŝ), n̂ × ŝ = (0, n̂_z, −n̂_y)/L; the fallback is at
            # angle θ = atan2(n̂ₓ n̂_y, n̂_z) from ŝ.
            a = w * math.atan2(nx * ny, nz)
            ca, sa = math.cos(a), math.sin(a)
            sx, sy, sz = ca * sx, ca * sy + sa * nz * inv_l, ca * sz - sa * ny * inv_l
    return sx, sy, sz, ny * sz - nz * sy, nz * sx - nx * sz, nx * sy - ny * sx


@njit((IN_MATRIX,), cache=True)
def tangent_frames(normals):
    """(ŝ, t̂), each (k, 3), of (k, 3) non-zero normals: :func:`tangent_bases` without its input checks."""
    k = normals.shape[0]
    s = np.empty((k, 3))
    t = np.empty((k, 3))
    for i in range(k):
        s[i, 0], s[i, 1], s[i, 2], t[i, 0], t[i, 1], t[i, 2] = tangent_frame(
            normals[i, 0], normals[i, 1], normals[i, 2]
        )
    return s, t


def tangent_bases(normals: Array) -> tuple[Array, Array]:
    """Deterministic tangents (ŝ, t̂) completing each normal to a right-handed frame, ŝ × t̂ = n̂.

    Rule, with c₄₀ = cos 40° and c₂₀ = cos 20°:

    * |n̂ₓ| ≤ c₄₀ (normal more than 40° from the world x axis): ŝ = normalized
      projection of x̂ onto the tangent plane, t̂ = n̂ × ŝ. Ground (n̂ = +ẑ) gives
      ŝ = x̂, t̂ = ŷ exactly;
    * |n̂ₓ| ≥ c₂₀ (within 20° of ±x̂): fall back to the world y axis, t̂ =
      normalized projection of ŷ, ŝ = t̂ × n̂;
    * in between, ŝ is rotated about n̂ from the first choice toward the second
      by the fraction w = smoothstep((|n̂ₓ| − c₄₀) / (c₂₀ − c₄₀)) of the angle
      between them, so (ŝ, t̂) is C¹ across the blend band.

    No tangent field on the sphere is continuous everywhere (hairy-ball
    theorem). This one is smooth except on two short arcs of downward-pointing
    normals, n̂_y = 0, n̂_z < 0 and 20° < angle(n̂, ±x̂) < 40°, where the two
    choices are opposite and ŝ jumps; upward and horizontal-facing contacts
    never hit it. Off that cut, |Δŝ|, |Δt̂| ≤ 8 |Δn̂| for n̂_z ≥ 0 and ≤ 16 |Δn̂|
    elsewhere (the blend turns ŝ by up to 90°, resp. 180°, across 20°).

    Parameters
    ----------
    normals : (k, 3) normals; normalized here, must be non-zero.

    Returns
    -------
    s, t : (k, 3) unit tangents in world.
    """
    n = np.ascontiguousarray(_as_array("normals", normals, (-1, 3)))
    norm = np.sqrt(np.einsum("ij,ij->i", n, n))
    if n.shape[0] and float(norm.min()) < 1e-12:
        raise InputError(f"normals must be non-zero, got zero rows {np.flatnonzero(norm < 1e-12)[:10].tolist()}")
    return tangent_frames(n)


def tangent_basis(normal: Array) -> tuple[Array, Array]:
    """(ŝ, t̂), each (3,), for one (3,) normal; see :func:`tangent_bases` for the rule."""
    n = _as_array("normal", normal, (3,))
    s, t = tangent_bases(n[None, :])
    return s[0], t[0]


# ---------------------------------------------------------------------------------------------------------------------
# shapes


@dataclass(frozen=True, eq=False)
class HalfSpace:
    """The solid half-space {x : n̂·x ≤ offset}; points with n̂·x ≥ offset are outside.

    Ground z ≥ 0 is ``HalfSpace(normal=(0, 0, 1), offset=0)``. A non-unit
    ``normal`` is normalized and ``offset`` divided by its length, so the set
    described is unchanged.

    Attributes
    ----------
    normal : (3,) unit outward normal in world.
    offset : m, signed distance of the boundary plane from the origin along ``normal``.
    name : surface name used in contact identities.
    """

    normal: Array
    offset: float = 0.0
    name: str = "ground"

    def __post_init__(self) -> None:
        n = _as_array(f"HalfSpace {self.name!r} normal", self.normal, (3,))
        length = float(np.linalg.norm(n))
        if length < 1e-12:
            raise ConfigError(f"HalfSpace {self.name!r}: normal must be non-zero, got {n.tolist()}")
        offset = _as_scalar(f"HalfSpace {self.name!r} offset", self.offset)
        object.__setattr__(self, "normal", _readonly(n / length))
        object.__setattr__(self, "offset", offset / length)

    def sphere_contact(self, center_in_world: Array, radius: float) -> ContactGeometry:
        """Contact of a sphere (centre (3,), m; radius, m) with this half-space."""
        c = _as_array("center_in_world", center_in_world, (3,))
        r = _as_scalar("radius", radius)
        _check_radius(r)
        n = self.normal
        d = float(n @ c) - self.offset
        return ContactGeometry(d - r, c - (0.5 * (d + r)) * n, n.copy())

    def sphere_contacts(self, centers_in_world: Array, radii: Array) -> tuple[Array, Array, Array]:
        """Vectorized :meth:`sphere_contact`.

        Parameters
        ----------
        centers_in_world : (k, 3) sphere centres, m.
        radii : (k,) sphere radii, m.

        Returns
        -------
        phi : (k,) m; points : (k, 3) midpoints, m; normals : (k, 3) unit.
        """
        c = _as_array("centers_in_world", centers_in_world, (-1, 3))
        r = _as_array("radii", radii, (c.shape[0],))
        _check_radii(r)
        n = self.normal
        d = c @ n - self.offset
        points = c - (0.5 * (d + r))[:, None] * n
        return d - r, points, np.tile(n, (c.shape[0], 1))


# ---------------------------------------------------------------------------------------------------------------------
# height map kernels: a grid is the tuple (heights (·,) flattened row-major from ``start``, rows, cols, x₀, y₀,
# spacing), m; heights[i, j] is at (x₀ + i spacing, y₀ + j spacing). Compiled: the same search in Python cost four
# times as much a tick (docs/benchmarks.md, "Measured choices in the code").


@njit(cache=True)
def map_evaluate(grid, x, y):
    """(h, ∂h/∂x, ∂h/∂y) at (x, y), m (one-sided derivatives on grid lines; 0 across a held border)."""
    heights, start, rows, cols, x0, y0, spacing = grid
    imax, jmax = rows - 1, cols - 1
    u = (x - x0) / spacing
    v = (y - y0) / spacing
    inside_u = 0.0 <= u <= imax
    inside_v = 0.0 <= v <= jmax
    u = min(max(u, 0.0), float(imax))
    v = min(max(v, 0.0), float(jmax))
    i = min(int(u), imax - 1)
    j = min(int(v), jmax - 1)
    fu, fv = u - i, v - j
    row0 = start + i * cols
    row1 = row0 + cols
    h00, h10, h01, h11 = heights[row0 + j], heights[row1 + j], heights[row0 + j + 1], heights[row1 + j + 1]
    a = h10 - h00
    b = h01 - h00
    cxy = h11 - h10 - h01 + h00
    h = h00 + a * fu + b * fv + cxy * fu * fv
    hx = (a + cxy * fv) / spacing if inside_u else 0.0
    hy = (b + cxy * fu) / spacing if inside_v else 0.0
    return h, hx, hy


@njit(cache=True)
def _patch_axis(i, imax, origin, s):
    """Along one grid axis, cell ``i`` of ``imax`` (−1 and ``imax``: the held-border strips) as (lo, hi, a, b):
    its bounds, and u = a + b δ, the cell's local coordinate in [0, 1] of δ from its reference line (constant in a
    strip)."""
    if i < 0:
        return -math.inf, origin, 0.0, 0.0
    if i >= imax:
        return origin + imax * s, math.inf, 1.0, 0.0
    return origin + i * s, origin + (i + 1) * s, 0.0, 1.0 / s


@njit(cache=True)
def _map_patch(grid, i, j):
    """Cell (i, j) (−1 and rows − 1, cols − 1: the held-border strips) as (xlo, xhi, ylo, yhi, xr, yr, A, B, C, D).

    On the cell h = A + B δx + C δy + D δx δy with δx = x − xr, δy = y − yr. Bounds are infinite for the
    held-border strips; neighbouring cells share bit-identical bounds.
    """
    heights, start, rows, cols, x0, y0, s = grid
    imax, jmax = rows - 1, cols - 1
    ic, jc = min(max(i, 0), imax - 1), min(max(j, 0), jmax - 1)
    xr, yr = x0 + ic * s, y0 + jc * s
    xlo, xhi, au, bu = _patch_axis(i, imax, x0, s)
    ylo, yhi, av, bv = _patch_axis(j, jmax, y0, s)
    row0 = start + ic * cols
    row1 = row0 + cols
    h00, h10, h01, h11 = heights[row0 + jc], heights[row1 + jc], heights[row0 + jc + 1], heights[row1 + jc + 1]
    a, b, e = h10 - h00, h01 - h00, h11 - h10 - h01 + h00  # h = h00 + a u + b v + e u v, u = au + bu δx, …
    return (
        xlo,
        xhi,
        ylo,
        yhi,
        xr,
        yr,
        h00 + a * au + b * av + e * au * av,
        (a + e * av) * bu,
        (b + e * au) * bv,
        e * bu * bv,
    )


@njit(cache=True)
def _patch_distance2(patch, px, py, cx, cy, cz):
    """|S(px, py) − c|², m², on one cell."""
    xr, yr, A, B, C, D = patch[4], patch[5], patch[6], patch[7], patch[8], patch[9]
    dx, dy = px - xr, py - yr
    rz = A + B * dx + C * dy + D * dx * dy - cz
    return (px - cx) ** 2 + (py - cy) ** 2 + rz * rz


@njit(cache=True)
def _solve_patch(patch, x, y, cx, cy, cz):
    """Minimize f = |S(x, y) − c|² over one cell by projected Newton (Gauss–Newton where the Hessian is
    indefinite) with backtracking, from (x, y); returns (x, y, f)."""
    xlo, xhi, ylo, yhi, xr, yr, A, B, C, D = patch
    x, y = min(max(x, xlo), xhi), min(max(y, ylo), yhi)
    f = _patch_distance2(patch, x, y, cx, cy, cz)
    for _ in range(_HM_NEWTON_ITERATIONS):
        dx, dy = x - xr, y - yr
        hx, hy = B + D * dy, C + D * dx
        rz = A + B * dx + C * dy + D * dx * dy - cz
        gx, gy = x - cx + rz * hx, y - cy + rz * hy  # ∇f / 2
        free_x = not ((x <= xlo and gx > 0.0) or (x >= xhi and gx < 0.0))
        free_y = not ((y <= ylo and gy > 0.0) or (y >= yhi and gy < 0.0))
        hxx, hyy, hxy = 1.0 + hx * hx, 1.0 + hy * hy, hx * hy + rz * D  # Hessian / 2
        if free_x and free_y:
            det = hxx * hyy - hxy * hxy
            if det <= 1e-9 * hxx * hyy:
                hxy = hx * hy
                det = hxx * hyy - hxy * hxy
            sx, sy = -(hyy * gx - hxy * gy) / det, -(hxx * gy - hxy * gx) / det
        elif free_x:
            sx, sy = -gx / hxx, 0.0
        elif free_y:
            sx, sy = 0.0, -gy / hyy
        else:
            break
        t = 1.0
        qx, qy, fq = x, y, f
        descended = False
        for _ in range(_HM_MAX_HALVINGS):
            qx, qy = min(max(x + t * sx, xlo), xhi), min(max(y + t * sy, ylo), yhi)
            fq = _patch_distance2(patch, qx, qy, cx, cy, cz)
            if fq <= f:
                descended = True
                break
            t *= 0.5
        if not descended:
            break
        moved = abs(qx - x) + abs(qy - y)
        x, y, f = qx, qy, fq
        if moved < _HM_STEP_TOLERANCE:
            break
    return x, y, f


@njit(cache=True)
def _map_closest_xy(grid, cx, cy, cz):
    """Local minimizer (x, y) of |S(x, y) − c|², m, walking from the cell below the centre across creases while
    the distance drops."""
    x0, y0, spacing = grid[4], grid[5], grid[6]
    imax, jmax = grid[2] - 1, grid[3] - 1
    u = (cx - x0) / spacing
    v = (cy - y0) / spacing
    i = -1 if u < 0.0 else imax if u > imax else min(int(u), imax - 1)
    j = -1 if v < 0.0 else jmax if v > jmax else min(int(v), jmax - 1)
    patch = _map_patch(grid, i, j)
    x, y, f = _solve_patch(patch, cx, cy, cx, cy, cz)
    for _ in range(_HM_MAX_CELLS):
        xlo, xhi, ylo, yhi = patch[0], patch[1], patch[2], patch[3]
        found = False
        best_i, best_j, best_patch, best_x, best_y, best_f = i, j, patch, x, y, f
        for a in range(3):  # steps in i: 0, then −1 on the low bound, +1 on the high bound
            di = 0 if a == 0 else -1 if a == 1 else 1
            if (a == 1 and not x <= xlo) or (a == 2 and not x >= xhi):
                continue
            for b in range(3):
                dj = 0 if b == 0 else -1 if b == 1 else 1
                if (b == 1 and not y <= ylo) or (b == 2 and not y >= yhi):
                    continue
                ni, nj = i + di, j + dj
                if (di == 0 and dj == 0) or not (-1 <= ni <= imax and -1 <= nj <= jmax):
                    continue
                neighbour = _map_patch(grid, ni, nj)
                xn, yn, fn = _solve_patch(neighbour, x, y, cx, cy, cz)
                if fn < f * (1.0 - 1e-12) and (not found or fn < best_f):
                    found = True
                    best_i, best_j, best_patch, best_x, best_y, best_f = ni, nj, neighbour, xn, yn, fn
        if not found:
            break
        i, j, patch, x, y, f = best_i, best_j, best_patch, best_x, best_y, best_f
    return x, y


@njit(cache=True)
def map_sphere(grid, cx, cy, cz, r):
    """(φ, point xyz, normal xyz) of a sphere (centre, m; radius r, m) against a height map; see
    :meth:`HeightMap.sphere_contact`."""
    px, py = _map_closest_xy(grid, cx, cy, cz)
    pz, hx, hy = map_evaluate(grid, px, py)
    sign = -1.0 if cz < map_evaluate(grid, cx, cy)[0] else 1.0
    dx, dy, dz = cx - px, cy - py, cz - pz
    distance = math.sqrt(dx * dx + dy * dy + dz * dz)
    if distance >= _HM_DIRECTION_MIN_DISTANCE:
        scale = sign / distance
        nx, ny, nz = dx * scale, dy * scale, dz * scale
    else:
        scale = 1.0 / math.sqrt(1.0 + hx * hx + hy * hy)
        nx, ny, nz = -hx * scale, -hy * scale, scale
    return (
        sign * distance - r,
        0.5 * (px + cx - r * nx),
        0.5 * (py + cy - r * ny),
        0.5 * (pz + cz - r * nz),
        nx,
        ny,
        nz,
    )


@njit((IN_VECTOR, intp, intp, float64, float64, float64, IN_MATRIX, IN_VECTOR), cache=True)
def map_sphere_contacts(heights, rows, cols, x0, y0, spacing, centers, radii):
    """φ (k,), midpoints (k, 3) and normals (k, 3) of spheres (centres (k, 3), radii (k,), m) against the height
    map of ``heights`` ((rows × cols,) row-major, m), no input checks."""
    grid = (heights, 0, rows, cols, x0, y0, spacing)
    k = centers.shape[0]
    phi = np.empty(k)
    points = np.empty((k, 3))
    normals = np.empty((k, 3))
    for i in range(k):
        phi[i], points[i, 0], points[i, 1], points[i, 2], normals[i, 0], normals[i, 1], normals[i, 2] = map_sphere(
            grid, centers[i, 0], centers[i, 1], centers[i, 2], radii[i]
        )
    return phi, points, normals


@njit((IN_VECTOR, intp, intp, float64, float64, float64, float64, float64), cache=True)
def _map_evaluate_at(heights, rows, cols, x0, y0, spacing, x, y):
    """:func:`map_evaluate` on one grid from Python."""
    return map_evaluate((heights, 0, rows, cols, x0, y0, spacing), x, y)


@dataclass(frozen=True, eq=False)
class HeightMap:
    """Terrain z = h(x, y): bilinear interpolation of a regular grid; outside the grid the border value is held.

    ``heights[i, j]`` is the height at ``origin_xy + (i * spacing, j * spacing)``.
    The surface is continuous but its normal jumps across grid lines (creases).

    Attributes
    ----------
    origin_xy : (2,) world (x, y) of ``heights[0, 0]``, m.
    spacing : grid step, m (> 0).
    heights : (nx, ny) heights, m; nx, ny ≥ 2.
    name : surface name used in contact identities.
    """

    origin_xy: Array
    spacing: float
    heights: Array
    name: str = "terrain"

    def __post_init__(self) -> None:
        origin = _as_array(f"HeightMap {self.name!r} origin_xy", self.origin_xy, (2,))
        spacing = _as_scalar(f"HeightMap {self.name!r} spacing", self.spacing)
        if spacing <= 0.0:
            raise ConfigError(f"HeightMap {self.name!r}: spacing must be > 0 m, got {spacing}")
        heights = _as_array(f"HeightMap {self.name!r} heights", self.heights, (-1, -1))
        if heights.shape[0] < 2 or heights.shape[1] < 2:
            raise ConfigError(f"HeightMap {self.name!r}: heights needs at least 2 x 2 samples, got {heights.shape}")
        object.__setattr__(self, "origin_xy", _readonly(origin))
        object.__setattr__(self, "spacing", spacing)
        object.__setattr__(self, "heights", _readonly(heights))
        # the compiled kernels' view of the grid (not a dataclass field): (heights flattened row-major, rows, cols,
        # x₀, y₀, spacing)
        object.__setattr__(
            self,
            "_grid",
            (self.heights.ravel(), heights.shape[0], heights.shape[1], float(origin[0]), float(origin[1]), spacing),
        )

    # -- evaluation ---------------------------------------------------------------------------------------------------

    def height(self, x: float, y: float) -> float:
        """Terrain height h(x, y), m."""
        return _map_evaluate_at(*self._grid, _as_scalar("x", x), _as_scalar("y", y))[0]

    def gradient(self, x: float, y: float) -> tuple[float, float]:
        """(∂h/∂x, ∂h/∂y), dimensionless (one-sided on grid lines, 0 across a held border)."""
        _, hx, hy = _map_evaluate_at(*self._grid, _as_scalar("x", x), _as_scalar("y", y))
        return hx, hy

    def heights_at(self, x: Array, y: Array) -> Array:
        """Vectorized h(x, y) for same-shape arrays of coordinates, m."""
        xa = np.asarray(x, dtype=float)
        ya = np.asarray(y, dtype=float)
        if xa.shape != ya.shape:
            raise ShapeError("y", xa.shape, ya.shape)
        imax, jmax = self.heights.shape[0] - 1, self.heights.shape[1] - 1
        u = np.clip((xa - self.origin_xy[0]) / self.spacing, 0.0, imax)
        v = np.clip((ya - self.origin_xy[1]) / self.spacing, 0.0, jmax)
        i = np.minimum(u.astype(np.intp), imax - 1)
        j = np.minimum(v.astype(np.intp), jmax - 1)
        fu, fv = u - i, v - j
        H = self.heights
        return (
            H[i, j] * (1 - fu) * (1 - fv)
            + H[i + 1, j] * fu * (1 - fv)
            + H[i, j + 1] * (1 - fu) * fv
            + H[i + 1, j + 1] * fu * fv
        )

    # -- contact ------------------------------------------------------------------------------------------------------

    def sphere_contact(self, center_in_world: Array, radius: float) -> ContactGeometry:
        """Contact of a sphere (centre (3,), m; radius, m) with the terrain.

        The closest terrain point p minimizes |S(x, y) − c|², S = (x, y, h):
        starting below the centre, each bilinear cell is solved by projected
        Newton (Gauss–Newton where the Hessian is indefinite, backtracking,
        ≤ 30 steps, stop when a step < 1e-14 m), and the search moves to a
        neighbouring cell across a crease while that lowers the distance. It
        ends at a local minimizer, on a cell interior, a crease or a vertex, to
        about 1e-14 m (one Newton step on a plane), so d(phi)/d(c) = n̂ holds to
        finite-difference accuracy. It is the global one unless the terrain has
        several local minima within |phi + r| of the centre: a bilinear
        surface's twisted cells can create some far from it, which on
        :meth:`bumps`-like terrain with centres ≤ 5 cm above it differ from the
        global distance by ≲ 1e-5 m. Cost: 1–2 cell solves typically (≤ 10 seen), a few Newton steps each.

        Returns
        -------
        ContactGeometry with phi = ±|c − p| − r (minus when the centre is below
        the terrain), the normal (c − p)/|c − p| oriented upward out of the
        terrain, which equals the surface normal (−hₓ, −h_y, 1)/‖·‖ at a smooth
        closest point and is the gradient of phi at a crease; the surface
        normal itself is used when |c − p| < 0.1 mm.
        """
        c = _as_array("center_in_world", center_in_world, (3,))
        r = _as_scalar("radius", radius)
        _check_radius(r)
        phi, points, normals = map_sphere_contacts(*self._grid, np.ascontiguousarray(c[None, :]), np.array([r]))
        return ContactGeometry(float(phi[0]), points[0], normals[0])

    def sphere_contacts(self, centers_in_world: Array, radii: Array) -> tuple[Array, Array, Array]:
        """:meth:`sphere_contact` for centres (k, 3) and radii (k,), m: phi (k,), points, normals (k, 3)."""
        c = np.ascontiguousarray(_as_array("centers_in_world", centers_in_world, (-1, 3)))
        r = np.ascontiguousarray(_as_array("radii", radii, (c.shape[0],)))
        _check_radii(r)
        return map_sphere_contacts(*self._grid, c, r)

    @classmethod
    def bumps(
        cls,
        size_m: float,
        spacing: float,
        max_height: float,
        n_bumps: int,
        seed: int,
        *,
        sigma_range: tuple[float, float] = (0.03, 0.10),
        name: str = "terrain",
    ) -> HeightMap:
        """Square terrain of side ``size_m`` centred on the world origin with random Gaussian bumps.

        Each bump has a centre uniform over the square, a width σ uniform in
        ``sigma_range`` (m, raised to at least 3 × spacing) and an amplitude
        uniform in [max_height / 4, max_height]; the sum is scaled down if its
        maximum exceeds ``max_height``, so 0 ≤ h ≤ max_height (the paper's rough
        terrain: bumps ≤ 3 cm).
        """
        size = _as_scalar("size_m", size_m)
        step = _as_scalar("spacing", spacing)
        top = _as_scalar("max_height", max_height)
        if size <= 0.0 or step <= 0.0 or step > size:
            raise ConfigError(f"bumps: need 0 < spacing <= size_m, got spacing={step}, size_m={size}")
        if top < 0.0:
            raise ConfigError(f"bumps: max_height must be >= 0 m, got {top}")
        if int(n_bumps) < 0:
            raise ConfigError(f"bumps: n_bumps must be >= 0, got {n_bumps}")
        lo, hi = (float(s) for s in sigma_range)
        if not 0.0 < lo <= hi:
            raise ConfigError(f"bumps: sigma_range must satisfy 0 < low <= high, got {sigma_range}")
        rng = np.random.default_rng(seed)
        count = int(round(size / step)) + 1
        axis = -0.5 * size + step * np.arange(count)
        X, Y = np.meshgrid(axis, axis, indexing="ij")
        heights = np.zeros((count, count))
        for _ in range(int(n_bumps)):
            mx, my = rng.uniform(-0.5 * size, 0.5 * size, size=2)
            sigma = max(rng.uniform(lo, hi), 3.0 * step)
            amplitude = rng.uniform(0.25 * top, top)
            heights += amplitude * np.exp(-((X - mx) ** 2 + (Y - my) ** 2) / (2.0 * sigma**2))
        peak = float(heights.max()) if heights.size else 0.0
        if peak > top > 0.0 or (top == 0.0 and peak > 0.0):
            heights *= top / peak
        return cls(origin_xy=np.array([-0.5 * size, -0.5 * size]), spacing=step, heights=heights, name=name)


# ---------------------------------------------------------------------------------------------------------------------
# box kernels. Compiled: with numpy on four spheres (and numpy's tangent_bases), the grasp's detection and rows
# cost twice as much a tick (docs/benchmarks.md, "Measured choices in the code").


@njit(cache=True)
def box_sphere(half, rotation, position, cx, cy, cz, r):
    """(φ, point xyz, normal xyz) of a sphere (centre, m; radius r, m) against the box of half extents ``half``
    (3,), m, at pose (``rotation`` (3, 3) box → world, ``position`` (3,), m); see :meth:`BoxShape.sphere_contact`."""
    R = rotation
    dx, dy, dz = cx - position[0], cy - position[1], cz - position[2]
    p0 = dx * R[0, 0] + dy * R[1, 0] + dz * R[2, 0]  # centre in box coordinates: Rᵀ (c − p)
    p1 = dx * R[0, 1] + dy * R[1, 1] + dz * R[2, 1]
    p2 = dx * R[0, 2] + dy * R[1, 2] + dz * R[2, 2]
    q0 = min(max(p0, -half[0]), half[0])
    q1 = min(max(p1, -half[1]), half[1])
    q2 = min(max(p2, -half[2]), half[2])
    e0, e1, e2 = p0 - q0, p1 - q1, p2 - q2
    distance = math.sqrt(e0 * e0 + e1 * e1 + e2 * e2)
    if distance > _BOX_INSIDE_TOLERANCE:
        n0, n1, n2 = e0 / distance, e1 / distance, e2 / distance
        signed = distance
    else:  # least-penetration face; ties: lowest axis, then +side
        d0, d1, d2 = half[0] - abs(p0), half[1] - abs(p1), half[2] - abs(p2)
        n0, n1, n2 = 0.0, 0.0, 0.0
        q0, q1, q2 = p0, p1, p2
        if d0 <= d1 and d0 <= d2:
            n0 = -1.0 if p0 < 0.0 else 1.0
            q0 = n0 * half[0]
            signed = -d0
        elif d1 <= d2:
            n1 = -1.0 if p1 < 0.0 else 1.0
            q1 = n1 * half[1]
            signed = -d1
        else:
            n2 = -1.0 if p2 < 0.0 else 1.0
            q2 = n2 * half[2]
            signed = -d2
    b0 = 0.5 * (q0 + (p0 - r * n0))  # midpoint of the closest points, box coordinates
    b1 = 0.5 * (q1 + (p1 - r * n1))
    b2 = 0.5 * (q2 + (p2 - r * n2))
    return (
        signed - r,
        b0 * R[0, 0] + b1 * R[0, 1] + b2 * R[0, 2] + position[0],
        b0 * R[1, 0] + b1 * R[1, 1] + b2 * R[1, 2] + position[1],
        b0 * R[2, 0] + b1 * R[2, 1] + b2 * R[2, 2] + position[2],
        n0 * R[0, 0] + n1 * R[0, 1] + n2 * R[0, 2],
        n0 * R[1, 0] + n1 * R[1, 1] + n2 * R[1, 2],
        n0 * R[2, 0] + n1 * R[2, 1] + n2 * R[2, 2],
    )


@njit((IN_MATRIX, IN_VECTOR, IN_VECTOR, IN_MATRIX, IN_VECTOR), cache=True)
def box_sphere_contacts(centers, radii, half, rotation, position):
    """φ (k,), midpoints (k, 3) and normals (k, 3) of spheres (centres (k, 3), radii (k,), m) against a box,
    no input checks; see :func:`box_sphere`."""
    k = centers.shape[0]
    phi = np.empty(k)
    points = np.empty((k, 3))
    normals = np.empty((k, 3))
    for i in range(k):
        phi[i], points[i, 0], points[i, 1], points[i, 2], normals[i, 0], normals[i, 1], normals[i, 2] = box_sphere(
            half, rotation, position, centers[i, 0], centers[i, 1], centers[i, 2], radii[i]
        )
    return phi, points, normals


@dataclass(frozen=True, eq=False)
class BoxShape:
    """A solid oriented box centred on its frame's origin (static obstacle or the grasped movable box).

    Attributes
    ----------
    half_extents : (3,) half side lengths along the box axes, m (> 0).
    name : body name used in contact identities.
    """

    half_extents: Array
    name: str = "box"

    def __post_init__(self) -> None:
        h = _as_array(f"BoxShape {self.name!r} half_extents", self.half_extents, (3,))
        if np.any(h <= 0.0):
            raise ConfigError(f"BoxShape {self.name!r}: half_extents must be > 0 m, got {h.tolist()}")
        object.__setattr__(self, "half_extents", _readonly(h))

    @staticmethod
    def checked_pose(rotation_box_to_world: object, position_box_in_world: object) -> tuple[Array, Array]:
        """(R (3, 3), p (3,), m) as C-contiguous float arrays: a rotation (to 1e-6) and a finite position;
        InputError / ShapeError / NonFiniteError otherwise."""
        R = _check_rotation("rotation_box_to_world", rotation_box_to_world)
        position = _as_array("position_box_in_world", position_box_in_world, (3,))
        return np.ascontiguousarray(R), np.ascontiguousarray(position)

    def sphere_contact(
        self,
        center_in_world: Array,
        radius: float,
        rotation_box_to_world: Array,
        position_box_in_world: Array,
    ) -> ContactGeometry:
        """Contact of a sphere (centre (3,), m; radius, m) with the box at pose (R (3, 3), p (3,), m).

        Centre outside the box: the closest box point clamps the centre in box
        coordinates; n̂ = (c − q)/|c − q|, phi = |c − q| − r. Centre inside (or on
        the surface): the face of least penetration depth d (ties: lowest axis,
        then +side); n̂ = its outward normal, phi = −d − r.
        """
        c = _as_array("center_in_world", center_in_world, (3,))
        r = _as_scalar("radius", radius)
        _check_radius(r)
        R, position = self.checked_pose(rotation_box_to_world, position_box_in_world)
        phi, points, normals = box_sphere_contacts(
            np.ascontiguousarray(c[None, :]), np.array([r]), self.half_extents, R, position
        )
        return ContactGeometry(float(phi[0]), points[0], normals[0])

    def sphere_contacts(
        self,
        centers_in_world: Array,
        radii: Array,
        rotation_box_to_world: Array,
        position_box_in_world: Array,
    ) -> tuple[Array, Array, Array]:
        """Vectorized :meth:`sphere_contact` for (k, 3) centres and (k,) radii.

        Returns
        -------
        phi : (k,) m; points : (k, 3) midpoints in world, m; normals : (k, 3) unit, in world.
        """
        c = np.ascontiguousarray(_as_array("centers_in_world", centers_in_world, (-1, 3)))
        r = np.ascontiguousarray(_as_array("radii", radii, (c.shape[0],)))
        _check_radii(r)
        R, position = self.checked_pose(rotation_box_to_world, position_box_in_world)
        return box_sphere_contacts(c, r, self.half_extents, R, position)
