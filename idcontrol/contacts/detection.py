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
"""

from __future__ import annotations

from collections.abc import Hashable, Mapping
from dataclasses import dataclass

import numpy as np
from numba import njit
from numpy.typing import NDArray

from idcontrol.arrays import IN_MATRIX, IN_VECTOR, float64
from idcontrol.contacts.geometry import BoxShape, HalfSpace, tangent_bases, tangent_basis
from idcontrol.contacts.rows import contact_rows
from idcontrol.contacts.world import Environment, ObjectState
from idcontrol.errors import ConfigError
from idcontrol.robot.model import RobotModel

Array = NDArray[np.float64]
IntArray = NDArray[np.intp]


@njit((IN_MATRIX, IN_VECTOR, IN_VECTOR, float64, float64), cache=True)
def halfspace_contacts(centers, radii, normal, offset, margin):
    """Spheres within ``margin`` of the plane n̂·x = offset: (indices (h,), φ (h,), midpoints (h, 3)), m."""
    k = centers.shape[0]
    hit = np.empty(k, dtype=np.intp)
    phi = np.empty(k)
    points = np.empty((k, 3))
    h = 0
    for i in range(k):
        distance = centers[i, 0] * normal[0] + centers[i, 1] * normal[1] + centers[i, 2] * normal[2] - offset
        gap = distance - radii[i]
        if gap <= margin:
            hit[h] = i
            phi[h] = gap
            depth = 0.5 * (distance + radii[i])
            for j in range(3):
                points[h, j] = centers[i, j] - depth * normal[j]
            h += 1
    return hit[:h], phi[:h], points[:h]


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
        return ContactSet(tuple(self.ids[i] for i in keep.tolist()), self.phi[keep], self.points[keep],
                          self.normals[keep], self.tangents_s[keep], self.tangents_t[keep], read_only(self.mu[keep]),
                          self.sphere[keep], read_only(self.body[keep]))  # fmt: skip


class ContactDetector:
    """Finds candidate contacts and builds their Jacobian rows.

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
        self._ring = (
            np.zeros((1, 2))
            if self.samples == 1
            else sample_radius * np.stack([np.cos(angles), np.sin(angles)], axis=1)
        )
        self._halfspaces = []  # (surface index, n̂, offset, ŝ, t̂), frames tiled per sphere: they never change
        for i, surface in enumerate(environment.surfaces):
            if isinstance(surface.shape, HalfSpace):
                s_axis, t_axis = tangent_basis(surface.shape.normal)
                tiles = [np.tile(axis, (len(robot.sphere_radii), 1)) for axis in (surface.shape.normal, s_axis, t_axis)]
                self._halfspaces.append((i, tiles[0], surface.shape.offset, tiles[1], tiles[2]))
        self._id_cache: dict[tuple, tuple[tuple[Hashable, ...], IntArray, Array]] = {}
        self._others = [i for i, s in enumerate(environment.surfaces) if not isinstance(s.shape, HalfSpace)]

    def detect(self, objects: Mapping[str, ObjectState] | None = None, allowed: Array | None = None) -> ContactSet:
        """Candidate contacts for the robot pose of the last ``robot.update`` (none for a robot without
        contact spheres).

        allowed : (k,) bool per contact sphere: only these may be candidates (a gait's planned
            stance feet); None: every sphere.
        """
        robot, env = self.robot, self.environment
        if not len(robot.sphere_radii):  # a robot without contact spheres touches nothing (an arm in free space)
            return self._assemble([])
        centers = robot.sphere_centers_in_world
        radii = robot.sphere_radii
        if allowed is not None and allowed.all():
            allowed = None
        plane_radii = radii if allowed is None else np.where(allowed, radii, -np.inf)  # masked: never near a plane
        chunks: list[tuple] = []  # (sphere indices, body, surface name, phi, points, normals, ŝ, t̂, μ)
        for si, normal, offset, s_axis, t_axis in self._halfspaces:
            surface = env.surfaces[si]
            hit, phi, points = halfspace_contacts(centers, plane_radii, normal[0], offset, self.margin)
            if hit.size:
                k = hit.size
                # every row of a plane's contact frame is the same: slice pre-tiled copies (no per-tick work)
                chunks.append((hit, -1, surface.name, phi, points, normal[:k], s_axis[:k], t_axis[:k], surface.mu))
        for si in self._others:
            surface = env.surfaces[si]
            if isinstance(surface.shape, BoxShape):
                found = surface.shape.sphere_contacts(centers, radii, surface.rotation, surface.position)
            else:
                found = surface.shape.sphere_contacts(centers, radii)
            self._append(chunks, allowed, -1, surface.name, surface.mu, *found)
        for bi, body in enumerate(env.objects):
            state = (objects or {}).get(body.name)
            if state is not None:
                found = body.shape.sphere_contacts(centers, radii, state.rotation, state.position)
                self._append(chunks, allowed, bi, body.name, body.mu, *found)
        return self._assemble(chunks)

    def _append(
        self,
        chunks: list[tuple],
        allowed: Array | None,
        body: int,
        name: str,
        mu: float,
        phi: Array,
        points: Array,
        normals: Array,
    ) -> None:
        """Keep the candidates within the margin (and ``allowed``), with their (curved-surface) tangent frames."""
        within = phi <= self.margin
        if allowed is not None:
            within &= allowed
        hit = np.flatnonzero(within)
        if hit.size:
            s_axis, t_axis = tangent_bases(normals[hit])
            chunks.append((hit, body, name, phi[hit], points[hit], normals[hit], s_axis, t_axis, mu))

    def _pattern(self, chunks: list[tuple]) -> tuple[tuple[Hashable, ...], IntArray, Array]:
        """Stable contact identities, body indices and μ of the chunks' spheres, cached per contact pattern.

        The arrays are read-only: they are shared by every tick with the same pattern.
        """
        key = tuple((c[2], tuple(c[0].tolist())) for c in chunks)
        cached = self._id_cache.get(key)
        if cached is None:
            names = self.robot.sphere_names
            if self.samples == 1:
                ids = tuple((names[k], name) for name, spheres in key for k in spheres)
            else:
                ids = tuple((names[k], name, j) for name, spheres in key for k in spheres for j in range(self.samples))
            bodies = read_only(np.concatenate([np.full(len(c[0]), c[1], dtype=np.intp) for c in chunks]))
            mus = read_only(np.concatenate([np.full(len(c[0]), c[8], dtype=float) for c in chunks]))
            if len(self._id_cache) > 4096:
                self._id_cache.clear()
            cached = self._id_cache[key] = (ids, bodies, mus)
        return cached

    def _assemble(self, chunks: list[tuple]) -> ContactSet:
        if not chunks:
            empty3 = np.zeros((0, 3))
            return ContactSet((), np.zeros(0), empty3, empty3, empty3, empty3, read_only(np.zeros(0)),
                              np.zeros(0, dtype=np.intp), read_only(np.zeros(0, dtype=np.intp)))  # fmt: skip
        ids, bodies, mus = self._pattern(chunks)
        if len(chunks) == 1:
            spheres, _, _, phi, points, normals, s_axis, t_axis, _ = chunks[0]
        else:
            spheres = np.concatenate([c[0] for c in chunks])
            phi = np.concatenate([c[3] for c in chunks])
            points = np.concatenate([c[4] for c in chunks])
            normals = np.concatenate([c[5] for c in chunks])
            s_axis = np.concatenate([c[6] for c in chunks])
            t_axis = np.concatenate([c[7] for c in chunks])
        if self.samples > 1:  # a ring of points on each contact patch (paper Fig. 19: redundant contacts)
            rep = np.repeat(np.arange(len(spheres)), self.samples)
            ring = np.tile(self._ring, (len(spheres), 1))
            radii = self.robot.sphere_radii[spheres][rep]
            s_axis, t_axis, normals = s_axis[rep], t_axis[rep], normals[rep]
            points = points[rep] + radii[:, None] * (ring[:, :1] * s_axis + ring[:, 1:] * t_axis)
            spheres, bodies, phi, mus = spheres[rep], read_only(bodies[rep]), phi[rep], read_only(mus[rep])
        return ContactSet(ids, phi, points, normals, s_axis, t_axis, mus, spheres, bodies)

    def rows(
        self, contacts: ContactSet, objects: Mapping[str, ObjectState] | None = None
    ) -> tuple[Array, Array, Array]:
        """(N, S, T), each (n, m) with m = nv + 6 × (number of movable bodies)."""
        robot = self.robot
        nv = robot.nv
        m = nv + 6 * len(self.environment.objects)
        if contacts.n == 0:
            out = np.zeros((3, 0, m))
            return out[0], out[1], out[2]
        slot = robot.sphere_frame_slot[contacts.sphere]
        N, S, T = contact_rows(contacts.points, contacts.normals, contacts.tangents_s, contacts.tangents_t, slot,
                               robot.frame_origins_in_world, robot.frame_jacobians, m)  # fmt: skip
        on_body = np.flatnonzero(contacts.body >= 0) if self.environment.objects else ()
        if len(on_body):  # minus the body's point velocity: relative Jacobian, all such contacts at once
            names = [o.name for o in self.environment.objects]
            bodies = contacts.body[on_body]
            centres = np.array([(objects or {})[names[b]].position for b in bodies.tolist()])
            arms = contacts.points[on_body] - centres
            directions = np.stack([contacts.normals[on_body], contacts.tangents_s[on_body],
                                   contacts.tangents_t[on_body]], axis=1)  # fmt: skip
            wrenches = -point_wrenches(arms[:, None, :], directions)  # (h, 3, 6) for n̂, ŝ, t̂
            cols = nv + 6 * bodies[:, None] + np.arange(6)
            rows = on_body[:, None]
            N[rows, cols], S[rows, cols], T[rows, cols] = wrenches[:, 0], wrenches[:, 1], wrenches[:, 2]
        return N, S, T
