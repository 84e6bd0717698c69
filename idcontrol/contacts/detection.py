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
from numpy.typing import NDArray

from idcontrol.contacts.geometry import BoxShape, HalfSpace, tangent_bases
from idcontrol.contacts.world import Environment, ObjectState, rotation_from_xyzw
from idcontrol.errors import ConfigError
from idcontrol.robot.model import RobotModel

Array = NDArray[np.float64]
IntArray = NDArray[np.intp]


@dataclass
class ContactSet:
    """n candidate contacts at t₀ (arrays in world frame, metres).

    ``sphere`` indexes the robot's contact spheres; ``body`` is −1 for a
    static surface, else the index of the movable body.
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
        self._halfspaces = [i for i, s in enumerate(environment.surfaces) if isinstance(s.shape, HalfSpace)]
        self._others = [i for i, s in enumerate(environment.surfaces) if not isinstance(s.shape, HalfSpace)]

    def detect(self, objects: Mapping[str, ObjectState] | None = None) -> ContactSet:
        """Candidate contacts for the robot pose of the last ``robot.update``."""
        robot, env = self.robot, self.environment
        centers = robot.sphere_centers_in_world
        radii = robot.sphere_radii
        found: list[tuple[int, int, str, float, Array, Array, float]] = []  # sphere, body, name, phi, p, n, mu
        for si in self._halfspaces:
            surface = env.surfaces[si]
            phi, points, normals = surface.shape.sphere_contacts(centers, radii)
            for k in np.flatnonzero(phi <= self.margin):
                found.append((int(k), -1, surface.name, float(phi[k]), points[k], normals[k], surface.mu))
        for si in self._others:
            surface = env.surfaces[si]
            for k in range(len(radii)):
                if isinstance(surface.shape, BoxShape):
                    g = surface.shape.sphere_contact(centers[k], radii[k], surface.rotation, surface.position)
                else:
                    g = surface.shape.sphere_contact(centers[k], radii[k])
                if g.phi <= self.margin:
                    found.append((k, -1, surface.name, g.phi, g.point_in_world, g.normal_in_world, surface.mu))
        for bi, body in enumerate(env.objects):
            state = (objects or {}).get(body.name)
            if state is None:
                continue
            rotation = rotation_from_xyzw(state.orientation_xyzw)
            for k in range(len(radii)):
                g = body.shape.sphere_contact(centers[k], radii[k], rotation, state.position)
                if g.phi <= self.margin:
                    found.append((k, bi, body.name, g.phi, g.point_in_world, g.normal_in_world, body.mu))
        return self._assemble(found)

    def _assemble(self, found: list[tuple[int, int, str, float, Array, Array, float]]) -> ContactSet:
        names = self.robot.sphere_names
        count = len(found) * self.samples
        if not found:
            empty3 = np.zeros((0, 3))
            return ContactSet((), np.zeros(0), empty3, empty3, empty3.copy(), empty3.copy(), np.zeros(0),
                              np.zeros(0, dtype=np.intp), np.zeros(0, dtype=np.intp))  # fmt: skip
        base_normals = np.array([f[5] for f in found])
        base_s, base_t = tangent_bases(base_normals)
        base_points = np.array([f[4] for f in found])
        rep = np.repeat(np.arange(len(found)), self.samples)
        ring = np.tile(self._ring, (len(found), 1))  # (count, 2)
        radii = self.robot.sphere_radii[[f[0] for f in found]][rep]
        points = base_points[rep] + radii[:, None] * (ring[:, :1] * base_s[rep] + ring[:, 1:] * base_t[rep])
        ids = tuple(
            (names[f[0]], f[2], j) if self.samples > 1 else (names[f[0]], f[2])
            for f in found
            for j in range(self.samples)
        )
        assert len(ids) == count
        return ContactSet(
            ids=ids,
            phi=np.array([f[3] for f in found])[rep],
            points=points,
            normals=base_normals[rep],
            tangents_s=base_s[rep],
            tangents_t=base_t[rep],
            mu=np.array([f[6] for f in found], dtype=float)[rep],
            sphere=np.array([f[0] for f in found], dtype=np.intp)[rep],
            body=np.array([f[1] for f in found], dtype=np.intp)[rep],
        )

    def rows(
        self, contacts: ContactSet, objects: Mapping[str, ObjectState] | None = None
    ) -> tuple[Array, Array, Array]:
        """(N, S, T), each (n, m) with m = nv + 6 × (number of movable bodies)."""
        robot = self.robot
        nv = robot.nv
        m = nv + 6 * len(self.environment.objects)
        n = contacts.n
        out = np.zeros((3, n, m))
        if n == 0:
            return out[0], out[1], out[2]
        directions = np.stack([contacts.normals, contacts.tangents_s, contacts.tangents_t], axis=1)  # (n, 3, 3)
        slot = robot.sphere_frame_slot[contacts.sphere]
        lever = contacts.points - robot.frame_origins_in_world[slot]  # (n, 3)
        wrench = np.concatenate([directions, np.cross(lever[:, None, :], directions)], axis=2)  # (n, 3, 6)
        rows = np.einsum("ndk,nkv->dnv", wrench, robot.frame_jacobians[slot])  # (3, n, nv)
        out[:, :, :nv] = rows
        for i in np.flatnonzero(contacts.body >= 0):
            body = self.environment.objects[contacts.body[i]]
            state = (objects or {})[body.name]
            arm = contacts.points[i] - state.position
            cols = slice(nv + 6 * contacts.body[i], nv + 6 * contacts.body[i] + 6)
            out[:, i, cols] = -np.concatenate([directions[i], np.cross(arm, directions[i])], axis=1)
        return out[0], out[1], out[2]
