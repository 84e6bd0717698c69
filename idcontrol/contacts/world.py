"""What the robot can touch: static surfaces and movable rigid bodies.

A movable body (paper Section 1.5) contributes six unactuated DoFs appended
after the robot's: its centre-of-mass velocity and angular velocity, both in
world axes. Its block of M is diag(m I₃, R I_body Rᵀ) and its f_ext is
[m g; −ω × (I ω)].
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any

import numpy as np
from numba import njit, types
from numpy.typing import NDArray

from idcontrol.arrays import ANY_VECTOR, VECTOR
from idcontrol.contacts.geometry import BoxShape, HalfSpace, HeightMap
from idcontrol.errors import ConfigError, NameNotFound
from idcontrol.robot.config import ObjectConfig
from idcontrol.validation import check_unit_quaternion, check_vector

Array = NDArray[np.float64]
GRAVITY = np.array([0.0, 0.0, -9.81])


def rotation_from_xyzw(quaternion_xyzw: Array) -> Array:
    """(3, 3) rotation matrix of a quaternion given as (x, y, z, w) (normalized first)."""
    out = np.empty(9)
    rotation_rows(np.asarray(quaternion_xyzw, dtype=float), out)
    return out.reshape(3, 3)


@njit(types.void(ANY_VECTOR, VECTOR), cache=True)
def rotation_rows(quaternion_xyzw, out):
    """Write the (3, 3) rotation of the quaternion (x, y, z, w) (normalized first) row by row into ``out`` (9,)."""
    x, y, z, w = quaternion_xyzw[0], quaternion_xyzw[1], quaternion_xyzw[2], quaternion_xyzw[3]
    norm = math.sqrt(x * x + y * y + z * z + w * w)
    x, y, z, w = x / norm, y / norm, z / norm, w / norm
    out[0], out[1], out[2] = 1.0 - 2.0 * (y * y + z * z), 2.0 * (x * y - z * w), 2.0 * (x * z + y * w)
    out[3], out[4], out[5] = 2.0 * (x * y + z * w), 1.0 - 2.0 * (x * x + z * z), 2.0 * (y * z - x * w)
    out[6], out[7], out[8] = 2.0 * (x * z - y * w), 2.0 * (y * z + x * w), 1.0 - 2.0 * (x * x + y * y)


@dataclass(frozen=True)
class Surface:
    """A static surface with its friction coefficient (``inf`` for no slip)."""

    shape: HalfSpace | HeightMap | BoxShape
    mu: float = 1.0
    rotation: Array = field(default_factory=lambda: np.eye(3))  # boxes only: box → world
    position: Array = field(default_factory=lambda: np.zeros(3))  # boxes only: centre in world, m

    @property
    def name(self) -> str:
        return self.shape.name


@dataclass
class ObjectState:
    """Pose and twist of a movable body (world frame; velocities of the centre of mass)."""

    position: Array
    orientation_xyzw: Array
    linear_velocity: Array = field(default_factory=lambda: np.zeros(3))
    angular_velocity: Array = field(default_factory=lambda: np.zeros(3))
    _rotation: Array | None = field(default=None, init=False, repr=False, compare=False)

    @property
    def rotation(self) -> Array:
        """(3, 3) body → world rotation (computed once per state)."""
        if self._rotation is None:
            self._rotation = rotation_from_xyzw(self.orientation_xyzw)
        return self._rotation

    def validated(self, name: str) -> ObjectState:
        """This pose as float arrays of its shapes, finite, its quaternion of unit norm; else an InputError."""
        state = ObjectState(
            check_vector(f"{name}.position", self.position, 3),
            check_vector(f"{name}.orientation_xyzw", self.orientation_xyzw, 4),
            check_vector(f"{name}.linear_velocity", self.linear_velocity, 3),
            check_vector(f"{name}.angular_velocity", self.angular_velocity, 3),
        )
        check_unit_quaternion(f"{name}.orientation_xyzw", state.orientation_xyzw)
        return state


class MovableBody:
    """A box the robot manipulates, appended to the multi-body as six unactuated DoFs."""

    def __init__(self, config: ObjectConfig) -> None:
        self.config = config
        self.name = config.name
        self.mass = config.mass
        self.inertia_in_body = config.inertia_in_body
        self.shape = BoxShape(half_extents=np.asarray(config.size) / 2.0, name=config.name)
        self.mu = config.mu

    def initial_state(self) -> ObjectState:
        return ObjectState(self.config.initial_position.copy(), self.config.initial_orientation_xyzw.copy())

    def inertia(self, rotation: Array) -> Array:
        """(6, 6) block of M in [v_com; ω] world coordinates."""
        out = np.zeros((6, 6))
        out[:3, :3] = self.mass * np.eye(3)
        out[3:, 3:] = rotation @ self.inertia_in_body @ rotation.T
        return out

    def external_force(self, rotation: Array, angular_velocity: Array, gravity: Array = GRAVITY) -> Array:
        """(6,) f_ext of the body: gravity and the gyroscopic term −ω × (I ω), N and N·m."""
        inertia_world = rotation @ self.inertia_in_body @ rotation.T
        return np.concatenate([self.mass * gravity, -np.cross(angular_velocity, inertia_world @ angular_velocity)])


class Environment:
    """Static surfaces plus movable bodies; ``gravity`` in world, m/s²."""

    def __init__(
        self,
        surfaces: list[Surface] | tuple[Surface, ...] = (),
        objects: list[MovableBody] | tuple[MovableBody, ...] = (),
        gravity: Array = GRAVITY,
    ) -> None:
        self.surfaces = tuple(surfaces)
        self.objects = tuple(objects)
        self.gravity = np.asarray(gravity, dtype=float)
        names = [o.name for o in self.objects]
        if len(set(names)) != len(names):
            raise ConfigError(f"movable body names must be unique, got {names}")
        for s in self.surfaces:
            if not s.mu >= 0:
                raise ConfigError(f"surface {s.name!r}: mu must be >= 0 (inf allowed), got {s.mu}")

    @classmethod
    def flat_ground(cls, mu: float = 1.0, objects: tuple[MovableBody, ...] = ()) -> Environment:
        """The ground plane z = 0 with friction ``mu``."""
        return cls([Surface(HalfSpace(normal=np.array([0.0, 0.0, 1.0]), offset=0.0, name="ground"), mu)], objects)

    @classmethod
    def rough_ground(
        cls, mu: float, max_height: float, seed: int, objects: tuple[MovableBody, ...] = ()
    ) -> Environment:
        """The paper's rough terrain: a 4 m × 4 m height map (2 cm grid) of random bumps 0 … ``max_height`` m
        high (:meth:`HeightMap.bumps`, 80 bumps drawn with ``seed``), friction ``mu``, held flat beyond."""
        return cls([Surface(HeightMap.bumps(4.0, 0.02, max_height, 80, seed, name="ground"), mu)], objects)

    @classmethod
    def ground(
        cls,
        mu: float,
        terrain: str = "flat",
        *,
        seed: int = 0,
        max_height: float = 0.03,
        objects: tuple[MovableBody, ...] = (),
    ) -> Environment:
        """A launch file's terrain by name: ``flat`` (:meth:`flat_ground`) or ``height_map`` (:meth:`rough_ground`)."""
        if terrain == "flat":
            return cls.flat_ground(mu, objects)
        if terrain == "height_map":
            return cls.rough_ground(mu, max_height, seed, objects)
        raise NameNotFound("terrain", terrain, ["flat", "height_map"])

    @classmethod
    def around(
        cls,
        floating_base: bool,
        mu: float,
        terrain: str = "flat",
        *,
        objects: tuple[MovableBody, ...] = (),
        **terrain_options: Any,
    ) -> Environment:
        """The world a robot is in, the same for its controller and every simulator: the terrain of :meth:`ground`
        (``terrain`` and its ``seed``, ``max_height``) under a floating base; none under a fixed base, whose URDF
        z = 0 is its mount, not a floor (an arm may reach below it); the movable bodies either way."""
        if not floating_base:
            return cls((), objects)
        return cls.ground(mu, terrain, objects=objects, **terrain_options)

    def object_index(self, name: str) -> int:
        for i, o in enumerate(self.objects):
            if o.name == name:
                return i
        raise NameNotFound("object", name, [o.name for o in self.objects])
