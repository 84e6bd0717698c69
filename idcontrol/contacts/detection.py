"""Candidate contacts of the robot's spheres and their rows of N, S, T (paper Sections 3.3, 4.1, App. B).

Every sphere–surface and sphere–object pair whose signed distance is within
``margin`` becomes a candidate contact (the paper includes every contact that
may become active during [t₀, t₀ + Δt]; the φ/Δt term of the non-penetration
constraint keeps distant ones inactive). Each contact has a stable identity
``(sphere, other body, sample)`` so warm starts follow contacts across ticks.

Row i of N is n̂ᵢᵀ J_p,i with J_p,i the world-aligned translational Jacobian of
the robot point coincident with the contact point; against a movable body the
relative Jacobian (robot point minus body point) is used, with n̂ pointing from
the body toward the robot, so N v > 0 means separation.

Detection and rows are one compiled call per tick (:func:`detect_kernel`): the world is packed once per
detector into two flat arrays (:func:`pack_world`), the movable bodies' poses come with each call, and
Python only assembles the :class:`ContactSet` (identities, bodies and μ cached per contact pattern).
"""

from __future__ import annotations

import math
from collections.abc import Hashable, Mapping
from dataclasses import dataclass
from typing import Any, NamedTuple

import numpy as np
from numba import njit
from numpy.typing import NDArray

from idcontrol.arrays import IN_INDICES, IN_MASK, IN_MATRIX, IN_TENSOR, IN_VECTOR, boolean, float64
from idcontrol.contacts.geometry import (
    BoxShape,
    HalfSpace,
    HeightMap,
    box_sphere,
    map_sphere,
    tangent_basis,
    tangent_frame,
)
from idcontrol.contacts.rows import body_columns, contact_rows, fill_rows, robot_row
from idcontrol.contacts.world import Environment, ObjectState, rotation_rows
from idcontrol.errors import ConfigError, InputError, NonFiniteError, ShapeError
from idcontrol.robot.model import RobotModel

Array = NDArray[np.float64]
IntArray = NDArray[np.intp]

# what a slot of the world is (the order of the contacts: half-spaces, the other surfaces, the movable bodies)
_HALF_SPACE, _HEIGHT_MAP, _BOX, _BODY = 0, 1, 2, 3
#: floats per slot in :attr:`World.params`
_PARAMS = 16
#: floats per movable body in the kernel's ``bodies`` argument: present (1 or 0), centre (3, m), rotation body →
#: world (9, row-major)
_POSE = 13
#: the kernel's status: 0 when it ran; then these, or 1 + b for a movable body b with a non-finite pose
_MASK_LENGTH, _VELOCITY_LENGTH = -1, -2
#: a sphere whose centre is this far above a height map's highest point beyond the margin is not a candidate, m
_ABOVE_MAP_SLACK = 1e-9


class World(NamedTuple):
    """The world and the robot's spheres as the detection kernel reads them (world frame, m): views of the two
    flat arrays :func:`pack_world` builds once per detector.

    Each slot (a surface or a movable body, in contact order) has a kind and a row of parameters:

    * ``_HALF_SPACE``: unit outward normal n̂ (3), offset (m), its tangents ŝ (3), t̂ (3);
    * ``_HEIGHT_MAP``: start of its heights in ``heights``, rows, columns, x₀, y₀ (m), spacing (m), highest
      height (m); heights[i, j] is at (x₀ + i spacing, y₀ + j spacing);
    * ``_BOX``: half extents (3, m), box → world rotation (9, row-major), centre (3, m);
    * ``_BODY``: half extents (3, m), the movable body's index.

    Two flat arrays because numba unboxes every argument of every call (docs/benchmarks.md, "Measured choices in
    the code").
    """

    kind: IntArray  # (w,) _HALF_SPACE, _HEIGHT_MAP, _BOX or _BODY
    frame_slot: IntArray  # (k,) the robot's frame slot of each contact sphere
    m: int  # columns of the rows: nv + 6 × movable bodies
    radii: Array  # (k,) the contact spheres' radii, m
    ring: Array  # (samples, 2) sample points on a contact patch along (ŝ, t̂), × the sphere radius
    params: Array  # (w, _PARAMS) each slot's parameters
    heights: Array  # every height map's heights, row-major, one map after the other, m
    margin: float  # candidate distance, m


def pack_world(
    kind: list[int],
    params: Array,
    heights: Array,
    frame_slot: IntArray,
    m: int,
    radii: Array,
    ring: Array,
    margin: float,
) -> tuple[IntArray, Array]:
    """(ints, floats), read-only: the :class:`World` in two flat arrays.

    ints = [w, k, samples, m, kind (w), frame_slot (k)]; floats = [margin, radii (k), ring (samples × 2),
    params (w × _PARAMS), heights].
    """
    ints = np.concatenate([[len(kind), len(radii), len(ring), m], kind, frame_slot]).astype(np.intp)
    floats = np.concatenate([[margin], radii, np.ravel(ring), np.ravel(params), heights]).astype(float)
    return read_only(ints), read_only(floats)


@njit(cache=True)
def world_views(ints, floats):
    """The :class:`World` of :func:`pack_world`'s two arrays (views, no copies)."""
    w, k, samples, m = ints[0], ints[1], ints[2], ints[3]
    ring = floats[1 + k : 1 + k + 2 * samples].reshape((samples, 2))
    start = 1 + k + 2 * samples
    params = floats[start : start + _PARAMS * w].reshape((w, _PARAMS))
    return World(
        ints[4 : 4 + w],
        ints[4 + w : 4 + w + k],
        m,
        floats[1 : 1 + k],
        ring,
        params,
        floats[start + _PARAMS * w :],
        floats[0],
    )


@njit(cache=True)
def _candidates(world, centers, allowed, bodies):
    """Every (slot, sphere) pair within the margin, in contact order: (count h, codes (·,) slot × k + sphere,
    φ (·,) m, geometry (·, 12): midpoint (m), n̂, ŝ, t̂); the first h rows are filled."""
    k = centers.shape[0]
    slots = world.kind.shape[0]
    margin = world.margin
    code = np.empty(slots * k, dtype=np.intp)
    phi = np.empty(slots * k)
    geometry = np.empty((slots * k, 12))
    h = 0
    for w in range(slots):
        kind = world.kind[w]
        par = world.params[w]
        if kind == _BODY and bodies[int(par[3]), 0] == 0.0:  # not in this call's objects
            continue
        for i in range(k):
            if not allowed[i]:
                continue
            cx, cy, cz, r = centers[i, 0], centers[i, 1], centers[i, 2], world.radii[i]
            g = geometry[h]
            if kind == _HALF_SPACE:
                distance = cx * par[0] + cy * par[1] + cz * par[2] - par[3]
                gap = distance - r
                if not gap <= margin:
                    continue
                depth = 0.5 * (distance + r)
                g[0], g[1], g[2] = cx - depth * par[0], cy - depth * par[1], cz - depth * par[2]
                g[3:6] = par[0:3]
                g[6:12] = par[4:10]
            else:
                if kind == _HEIGHT_MAP:
                    if cz - r - par[6] > margin + _ABOVE_MAP_SLACK:  # φ ≥ this: no candidate
                        continue
                    grid = (world.heights, int(par[0]), int(par[1]), int(par[2]), par[3], par[4], par[5])
                    gap, g[0], g[1], g[2], g[3], g[4], g[5] = map_sphere(grid, cx, cy, cz, r)
                elif kind == _BOX:
                    rotation = par[3:12].reshape((3, 3))
                    gap, g[0], g[1], g[2], g[3], g[4], g[5] = box_sphere(par[0:3], rotation, par[12:15], cx, cy, cz, r)
                else:
                    pose = bodies[int(par[3])]
                    rotation = pose[4:13].reshape((3, 3))
                    gap, g[0], g[1], g[2], g[3], g[4], g[5] = box_sphere(par[0:3], rotation, pose[1:4], cx, cy, cz, r)
                if not gap <= margin:
                    continue
                g[6], g[7], g[8], g[9], g[10], g[11] = tangent_frame(g[3], g[4], g[5])
            code[h] = w * k + i
            phi[h] = gap
            h += 1
    return h, code, phi, geometry


@njit(
    (IN_INDICES, IN_VECTOR, IN_MATRIX, IN_MASK, IN_MATRIX, IN_MATRIX, IN_TENSOR, boolean, IN_VECTOR, float64, float64),
    cache=True,
)
def detect_kernel(
    world_ints, world_floats, centers, allowed, bodies, origins, jacobians, with_rows, velocity, dt, activation
):
    """Candidate contacts of the robot's spheres (centres (k, 3), m; ``allowed`` (k,)) with the world
    (:func:`pack_world`'s arrays) and the movable bodies (``bodies`` (b, 13): present, centre (m), rotation
    body → world), and with ``with_rows`` their rows of N, S, T (frame origins (f, 3), m, and world-aligned frame
    Jacobians (f, 6, nv) of the robot's contact frames).

    With ``with_rows`` and a finite ``activation`` (m), only the contacts whose predicted gap
    φ + Δt N v (``velocity`` (m,), ``dt`` s) is ≤ ``activation`` are kept.

    Returns (status, key, frames (5, n, 3): midpoints m, n̂, ŝ, t̂ and in [4, :, 0] each contact's code
    ((slot × k + sphere) × samples + sample, as a float); φ (n,) m; N, S, T (3, n, m), or (3, 0, m) without
    ``with_rows``). ``status`` is 0, or :data:`_MASK_LENGTH`, :data:`_VELOCITY_LENGTH`, 1 + b for a movable body b
    with a non-finite pose (and the arrays are empty). ``key`` is the set of codes as bits when there can be at
    most 62 codes, else −1.

    Three arrays out: numba boxes each array it returns, views taken in Python cost less (the cheapest of
    returning 1, 3, 4 or 9 arrays).
    """
    world = world_views(world_ints, world_floats)
    k = centers.shape[0]
    m = world.m
    samples = world.ring.shape[0]
    nv = jacobians.shape[2]
    filtering = with_rows and activation < math.inf
    status = 0
    if allowed.shape[0] != k:
        status = _MASK_LENGTH
    elif filtering and velocity.shape[0] != m:
        status = _VELOCITY_LENGTH
    for b in range(bodies.shape[0]):
        if bodies[b, 0] != 0.0:
            for a in range(1, _POSE):
                if status == 0 and not math.isfinite(bodies[b, a]):
                    status = 1 + b
    if status != 0:
        return status, 0, np.empty((5, 0, 3)), np.empty(0), np.empty((3, 0, m))
    h, code, phi, geometry = _candidates(world, centers, allowed, bodies)
    total = h * samples
    if samples > 1:  # a ring of points on each contact patch (paper Fig. 19: redundant contacts)
        sample_code = np.empty(total, dtype=np.intp)
        sample_phi = np.empty(total)
        sample_geometry = np.empty((total, 12))
        for c in range(h):
            radius = world.radii[code[c] % k]
            g = geometry[c]
            for j in range(samples):
                e = c * samples + j
                sample_code[e] = code[c] * samples + j
                sample_phi[e] = phi[c]
                s = sample_geometry[e]
                s[:] = g
                u, v = world.ring[j, 0], world.ring[j, 1]
                for a in range(3):
                    s[a] = g[a] + radius * (u * g[6 + a] + v * g[9 + a])
        code, phi, geometry = sample_code, sample_phi, sample_geometry
    keep = np.ones(total, dtype=np.bool_)
    n = total
    if filtering:  # the predicted gap φ + Δt N v, as N[:, :nv] @ v + N[:, nv:] @ v_bodies
        row = np.zeros(m)
        for e in range(total):
            g = geometry[e]
            w = code[e] // samples // k
            robot_row(
                row, g[0], g[1], g[2], g[3], g[4], g[5], world.frame_slot[code[e] // samples % k], origins, jacobians
            )
            ahead = 0.0
            for c in range(nv):
                ahead += row[c] * velocity[c]
            gap = phi[e] + dt * ahead
            if m > nv and world.kind[w] == _BODY:
                b = int(world.params[w, 3])
                column = nv + 6 * b
                body_columns(row, column, g[0], g[1], g[2], g[3], g[4], g[5], bodies[b, 1], bodies[b, 2], bodies[b, 3])
                ahead = 0.0
                for c in range(nv, m):
                    ahead += row[c] * velocity[c]
                gap += dt * ahead
                row[column : column + 6] = 0.0
            if not gap <= activation:
                keep[e] = False
                n -= 1
    frames = np.zeros((5, n, 3))
    out_phi = np.empty(n)
    rows = np.zeros((3, n if with_rows else 0, m))
    bits = world.kind.shape[0] * k * samples <= 62
    key = 0
    i = 0
    for e in range(total):
        if not keep[e]:
            continue
        g = geometry[e]
        for a in range(4):
            frames[a, i, 0], frames[a, i, 1], frames[a, i, 2] = g[3 * a], g[3 * a + 1], g[3 * a + 2]
        frames[4, i, 0] = code[e]
        out_phi[i] = phi[e]
        if bits:
            key |= 1 << code[e]
        if with_rows:
            w = code[e] // samples // k
            column, cx, cy, cz = -1, 0.0, 0.0, 0.0
            if world.kind[w] == _BODY:
                b = int(world.params[w, 3])
                column, cx, cy, cz = nv + 6 * b, bodies[b, 1], bodies[b, 2], bodies[b, 3]
            fill_rows(
                rows,
                i,
                g[0],
                g[1],
                g[2],
                frames[1, i],
                frames[2, i],
                frames[3, i],
                world.frame_slot[code[e] // samples % k],
                origins,
                jacobians,
                column,
                cx,
                cy,
                cz,
            )
        i += 1
    return 0, key if bits else -1, frames, out_phi, rows


def point_wrenches(lever: Array, vectors: Array) -> Array:
    """(..., 6) wrenches [v; lever × v] of vectors v (..., 3) applied at ``lever`` (..., 3) from a frame origin.

    Times a world-aligned frame Jacobian [J_lin; J_ang] (6, nv), a wrench gives the
    row vᵀ J_p of the point at ``lever`` (App. B): vᵀ(v_o + ω × r) = vᵀJ_lin + (r × v)ᵀJ_ang.
    The same product of a force's wrench is that force's generalized force.
    """
    lx, ly, lz = lever[..., 0], lever[..., 1], lever[..., 2]
    vx, vy, vz = vectors[..., 0], vectors[..., 1], vectors[..., 2]
    out = np.empty(np.broadcast_shapes(lever.shape, vectors.shape)[:-1] + (6,))
    out[..., :3] = vectors
    out[..., 3] = ly * vz - lz * vy
    out[..., 4] = lz * vx - lx * vz
    out[..., 5] = lx * vy - ly * vx
    return out


def read_only(array: Array) -> Array:
    """``array``, marked read-only (in place)."""
    array.setflags(write=False)
    return array


@dataclass
class ContactSet:
    """n candidate contacts at t₀ (arrays in world frame, metres).

    ``sphere`` indexes the robot's contact spheres; ``body`` is −1 for a
    static surface, else the index of the movable body. ``mu`` and ``body``
    are read-only (shared between ticks with the same contacts; one array
    type for the compiled kernels, which specialize on it).
    """

    ids: tuple[Hashable, ...]
    phi: Array  # (n,)
    points: Array  # (n, 3)
    normals: Array  # (n, 3)
    tangents_s: Array  # (n, 3)
    tangents_t: Array  # (n, 3)
    mu: Array  # (n,)
    sphere: IntArray  # (n,)
    body: IntArray  # (n,)

    @property
    def n(self) -> int:
        return len(self.phi)

    def subset(self, keep: IntArray) -> ContactSet:
        """The contacts at indices ``keep`` (increasing), in the same order."""
        return ContactSet(
            tuple(self.ids[i] for i in keep.tolist()),
            self.phi[keep],
            self.points[keep],
            self.normals[keep],
            self.tangents_s[keep],
            self.tangents_t[keep],
            read_only(self.mu[keep]),
            self.sphere[keep],
            read_only(self.body[keep]),
        )


class ContactDetector:
    """Finds candidate contacts and builds their Jacobian rows.

    The world (surfaces, the movable bodies' shapes) and the robot's spheres
    are packed once, here, for one compiled call per tick
    (:func:`detect_kernel`); the movable bodies' poses come with each call.

    Parameters
    ----------
    margin : candidate distance, m (φ ≤ margin).
    samples_per_contact : contact points sampled on each sphere's contact
        patch (1 = the closest point). More samples reproduce the paper's
        Fig. 19 experiment: indeterminate, redundant contacts at every foot.
    sample_radius : radius of the sample ring as a fraction of the sphere radius.
    """

    def __init__(
        self,
        robot: RobotModel,
        environment: Environment,
        *,
        margin: float = 0.005,
        samples_per_contact: int = 1,
        sample_radius: float = 0.5,
    ) -> None:
        if margin < 0:
            raise ConfigError(f"contact margin must be >= 0 m, got {margin}")
        if samples_per_contact < 1:
            raise ConfigError(f"samples_per_contact must be >= 1, got {samples_per_contact}")
        self.robot = robot
        self.environment = environment
        self.margin = float(margin)
        self.samples = int(samples_per_contact)
        angles = 2.0 * np.pi * np.arange(self.samples) / self.samples
        ring = (
            np.zeros((1, 2))
            if self.samples == 1
            else sample_radius * np.stack([np.cos(angles), np.sin(angles)], axis=1)
        )
        self.m = robot.nv + 6 * len(environment.objects)
        surfaces, objects = environment.surfaces, environment.objects
        order = [i for i, s in enumerate(surfaces) if isinstance(s.shape, HalfSpace)]
        order += [i for i, s in enumerate(surfaces) if not isinstance(s.shape, HalfSpace)]
        kind: list[int] = []
        params = np.zeros((len(order) + len(objects), _PARAMS))
        maps: list[Array] = []
        start = 0
        for slot, i in enumerate(order):
            shape, row = surfaces[i].shape, params[slot]
            if isinstance(shape, HalfSpace):
                kind.append(_HALF_SPACE)
                s_axis, t_axis = tangent_basis(shape.normal)
                row[:10] = [*shape.normal, shape.offset, *s_axis, *t_axis]
            elif isinstance(shape, HeightMap):
                kind.append(_HEIGHT_MAP)
                rows, cols = shape.heights.shape
                row[:7] = [start, rows, cols, *shape.origin_xy, shape.spacing, shape.heights.max()]
                maps.append(shape.heights.ravel())
                start += rows * cols
            elif isinstance(shape, BoxShape):
                kind.append(_BOX)
                rotation, position = BoxShape.checked_pose(surfaces[i].rotation, surfaces[i].position)
                row[:15] = [*shape.half_extents, *rotation.ravel(), *position]
            else:
                raise ConfigError(f"surface {surfaces[i].name!r}: unknown shape {type(shape).__name__}")
        for b, body in enumerate(objects):
            kind.append(_BODY)
            params[len(order) + b, :4] = [*body.shape.half_extents, b]
        self._world_ints, self._world_floats = pack_world(
            kind,
            params,
            np.concatenate([*maps, np.zeros(0)]),
            robot.sphere_frame_slot,
            self.m,
            robot.sphere_radii,
            ring,
            self.margin,
        )
        #: per slot (the contacts' order): the name in contact identities, the body index (−1: static) and μ
        self._slot_names = tuple([surfaces[i].name for i in order] + [o.name for o in objects])
        self._slot_body = [-1] * len(order) + list(range(len(objects)))
        self._slot_mu = [float(surfaces[i].mu) for i in order] + [float(o.mu) for o in objects]
        self._body_names = tuple(o.name for o in objects)
        self._everyone = np.ones(len(robot.sphere_radii), dtype=bool)
        self._no_velocity = np.zeros(0)
        self._no_bodies = np.zeros((0, _POSE))
        #: per contact pattern: identities, spheres (copied for each set), body indices and μ (read-only, shared)
        self._id_cache: dict[Hashable, tuple[tuple[Hashable, ...], IntArray, IntArray, Array]] = {}
        self._ground_params: Array | None = None  # the ground's slot of the world's floats, once it moves

    def set_ground(self, normal: Array, offset: float) -> None:
        """Move the world's first half-space (the ground) to n̂·x = ``offset`` (m) with unit ``normal`` (3,) in
        world, at most 40° from the vertical, and its tangents (ŝ the projection of x̂, t̂ = n̂ × ŝ, the rule of
        :func:`~idcontrol.contacts.geometry.tangent_bases` there): a ground estimated each tick
        (:mod:`idcontrol.contacts.stance`). ConfigError for a world without a half-space."""
        if self._ground_params is None:
            slots = self._world_ints[0]
            kinds = self._world_ints[4 : 4 + slots]
            if slots == 0 or kinds[0] != _HALF_SPACE:
                raise ConfigError("the world has no ground half-space to estimate")
            floats = self._world_floats.copy()  # writable from now on: the ground moves
            self._world_floats = floats
            k, samples = self._world_ints[1], self._world_ints[2]
            start = 1 + k + 2 * samples
            self._ground_params = floats[start : start + 10]
        nx, ny, nz = (float(x) for x in normal)
        sx, sy, sz = 1.0 - nx * nx, -nx * ny, -nx * nz
        norm = math.sqrt(sx * sx + sy * sy + sz * sz)
        sx, sy, sz = sx / norm, sy / norm, sz / norm
        self._ground_params[:] = (
            nx,
            ny,
            nz,
            offset,
            sx,
            sy,
            sz,
            ny * sz - nz * sy,
            nz * sx - nx * sz,
            nx * sy - ny * sx,
        )

    # ------------------------------------------------------------------ per tick
    def detect(self, objects: Mapping[str, ObjectState] | None = None, allowed: Array | None = None) -> ContactSet:
        """Candidate contacts for the robot pose of the last ``robot.update`` (none for a robot without
        contact spheres).

        allowed : (k,) bool per contact sphere: only these may be candidates (a gait's planned
            stance feet); None: every sphere.
        """
        key, frames, phi, _ = self._call(objects, allowed, False, None, 0.0, None)
        return self._contact_set(key, frames, phi)

    def detect_rows(
        self,
        objects: Mapping[str, ObjectState] | None = None,
        allowed: Array | None = None,
        *,
        velocity: Array | None = None,
        dt: float = 0.0,
        activation_distance: float | None = None,
    ) -> tuple[ContactSet, Array, Array, Array]:
        """:meth:`detect` and :meth:`rows` in one compiled call: (contacts, N, S, T), N, S, T each (n, m).

        With ``activation_distance`` (m), only the contacts whose predicted gap at the end of the period,
        φ + ``dt`` N ``velocity`` (``velocity`` (m,): the robot's v, then the movable bodies' [v_com; ω] in
        world; ``dt`` s), is at most ``activation_distance`` are kept, in order.
        """
        key, frames, phi, rows = self._call(objects, allowed, True, velocity, dt, activation_distance)
        return self._contact_set(key, frames, phi), rows[0], rows[1], rows[2]

    def _call(
        self,
        objects: Mapping[str, ObjectState] | None,
        allowed: Array | None,
        with_rows: bool,
        velocity: Array | None,
        dt: float,
        activation_distance: float | None,
    ) -> tuple[Hashable, Array, Array, Array]:
        """:func:`detect_kernel` for the robot pose of the last ``robot.update`` and the movable bodies in
        ``objects``: (pattern key, frames, φ, rows)."""
        robot = self.robot
        bodies = self._poses(objects) if self._body_names else self._no_bodies
        mask = self._everyone if allowed is None else allowed
        v = self._no_velocity if velocity is None else velocity
        limit = math.inf if activation_distance is None else float(activation_distance)
        try:
            status, key, frames, phi, rows = self._kernel(mask, bodies, with_rows, v, float(dt), limit)
        except TypeError:  # a mask or velocity of another type or layout (a list, a strided view): converted
            mask, v = np.ascontiguousarray(mask, dtype=bool), np.ascontiguousarray(v, dtype=float)
            if mask.ndim != 1:
                raise ShapeError("allowed", (len(robot.sphere_radii),), mask.shape) from None
            if v.ndim != 1:
                raise ShapeError("velocity", (self.m,), v.shape) from None
            status, key, frames, phi, rows = self._kernel(mask, bodies, with_rows, v, float(dt), limit)
        if status:
            self._raise(status, allowed, velocity)
        return (key if key >= 0 else frames[4].tobytes()), frames, phi, rows

    def _kernel(self, mask: Any, bodies: Any, with_rows: bool, v: Any, dt: float, limit: float) -> tuple:
        """:func:`detect_kernel` on this detector's world and the robot's last pose (TypeError for a mask or velocity
        the kernel's signature does not take)."""
        robot = self.robot
        return detect_kernel(
            self._world_ints,
            self._world_floats,
            robot.sphere_centers_in_world,
            mask,
            bodies,
            robot.frame_origins_in_world,
            robot.frame_jacobians,
            with_rows,
            v,
            dt,
            limit,
        )

    def _contact_set(self, key: Hashable, frames: Array, phi: Array) -> ContactSet:
        """The contact set of :func:`detect_kernel`'s ``frames`` and ``phi``, with the identities, spheres, bodies
        and μ of its pattern ``key``."""
        cached = self._id_cache.get(key)
        if cached is None:
            cached = self._pattern(key, frames[4, :, 0])
        ids, spheres, bodies, mus = cached
        return ContactSet(ids, phi, frames[0], frames[1], frames[2], frames[3], mus, spheres.copy(), bodies)

    def _poses(self, objects: Mapping[str, ObjectState] | None) -> Array:
        """(b, 13) the movable bodies in ``objects``: present (1, else 0 and the rest unset), centre (m), rotation
        body → world (row-major)."""
        bodies = np.zeros((len(self._body_names), _POSE))
        if objects:
            for b, name in enumerate(self._body_names):
                state = objects.get(name)
                if state is not None:
                    pose = bodies[b]
                    pose[0] = 1.0
                    pose[1:4] = state.position
                    rotation_rows(state.orientation_xyzw, pose[4:13])
        return bodies

    def _raise(self, status: int, allowed: object, velocity: object) -> None:
        """The error of :func:`detect_kernel`'s ``status``."""
        if status == _MASK_LENGTH:
            raise ShapeError("allowed", (len(self.robot.sphere_radii),), np.shape(allowed))
        if status == _VELOCITY_LENGTH:
            raise ShapeError("velocity", (self.m,), np.shape(velocity))
        raise NonFiniteError(f"{self._body_names[status - 1]} pose (position, rotation)", [status - 1])

    def _pattern(self, key: Hashable, codes: Array) -> tuple[tuple[Hashable, ...], IntArray, IntArray, Array]:
        """Stable contact identities, spheres, body indices and μ of the contacts ``codes`` ((slot × k + sphere)
        × samples + sample), cached under ``key``. Bodies and μ are read-only: they are shared by every tick with
        the same pattern."""
        names, k, samples = self.robot.sphere_names, len(self.robot.sphere_radii), self.samples
        ids, spheres, bodies, mus = [], [], [], []
        for code in codes.astype(np.intp).tolist():
            pair, j = divmod(code, samples)
            slot, sphere = divmod(pair, k)
            name = self._slot_names[slot]
            ids.append((names[sphere], name) if samples == 1 else (names[sphere], name, j))
            spheres.append(sphere)
            bodies.append(self._slot_body[slot])
            mus.append(self._slot_mu[slot])
        if len(self._id_cache) > 4096:
            self._id_cache.clear()
        cached = self._id_cache[key] = (
            tuple(ids),
            np.array(spheres, dtype=np.intp),
            read_only(np.array(bodies, dtype=np.intp)),
            read_only(np.array(mus, dtype=float)),
        )
        return cached

    def rows(
        self, contacts: ContactSet, objects: Mapping[str, ObjectState] | None = None
    ) -> tuple[Array, Array, Array]:
        """(N, S, T), each (n, m) with m = nv + 6 × (number of movable bodies)."""
        robot = self.robot
        centres = np.zeros((len(self._body_names), 3))
        if self._body_names and contacts.n:
            for b in {b for b in contacts.body.tolist() if b >= 0}:
                state = (objects or {}).get(self._body_names[b])
                if state is None:
                    raise InputError(f"a contact touches movable body {self._body_names[b]!r}, which has no pose")
                centres[b] = state.position
        slot = robot.sphere_frame_slot[contacts.sphere]
        return contact_rows(
            contacts.points,
            contacts.normals,
            contacts.tangents_s,
            contacts.tangents_t,
            slot,
            robot.frame_origins_in_world,
            robot.frame_jacobians,
            self.m,
            contacts.body,
            centres,
        )
