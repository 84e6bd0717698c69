"""What every simulator gives the bridge loop and the test harness: one protocol, one state type, and the
constructor head the back ends share.

A back end is a class taking ``(robot, *, mu, timestep, with_objects, object_mu, **its own keys)`` (a
:class:`SimulatorBase`, as :class:`~idcontrol.sim.mujoco.MujocoSim` is) and satisfying :class:`Simulator`. The back
ends are named in one registry, :mod:`idcontrol.simulators`, with the ``[bridge]`` keys each reads.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, ClassVar, Protocol

import numpy as np
from numpy.typing import NDArray

from idcontrol.contacts.world import ObjectState
from idcontrol.control.state import ImuReading, RobotState
from idcontrol.errors import ConfigError, InputError
from idcontrol.robot.config import ObjectConfig
from idcontrol.robot.model import RobotModel
from idcontrol.simulators import available_simulators, register_simulator, simulator_kind

if TYPE_CHECKING:
    from typing import Self

    from idcontrol.settings import LaunchConfig

Array = NDArray[np.float64]


@dataclass(frozen=True)
class SimState:
    """A snapshot of a simulation in idcontrol's (Pinocchio's) conventions, in fresh arrays.

    t : simulation time, s.
    q : (nq,) configuration: floating base = [base position in world (3), orientation quaternion x y z w (4),
        joints in Pinocchio's order].
    v : (nv,) velocity: floating base = [base linear and angular velocity, both in the base frame, joints].
    objects : movable bodies by name (world frame, centre-of-mass velocities).
    contact_forces : (k, 3) total force the environment applied on each contact sphere during the last step,
        world frame, N, in ``robot.toml`` order.
    crossings : the contact events of the last step in the order they happened, (label, t s, how) each, from a
        back end that knows it (ess); empty otherwise. Sent with the state (the wire's ``crossings``).
    imu : the IMU's reading, from a sensor model that reports what a robot measures (``[bridge.sensors] base =
        "imu"``, :mod:`idcontrol.sim.sensing`); its ``q[0:7]`` and ``v[0:6]`` then hold no measurement (the base
        at the origin, level, at rest). None: the base pose and twist are reported.
    truth : the simulator's own state at this reading's instant, when this state is what a sensor model reports
        (:mod:`idcontrol.sim.sensing`, a floating base); the bridge sends its base for the log (the wire's
        ``truth``), never for the controller. None: this state is the truth, or the robot is fixed.
    """

    t: float
    q: Array
    v: Array
    objects: dict[str, ObjectState]
    contact_forces: Array
    crossings: tuple[tuple[str, float, str], ...] = ()
    imu: ImuReading | None = None
    truth: SimState | None = None

    def robot_state(self) -> RobotState:
        """This snapshot as the control core's input (as a bridge would report it, sensed forces included)."""
        return RobotState(self.q, self.v, self.t, self.objects, self.contact_forces, imu=self.imu)


class Simulator(Protocol):
    """What the bridge loop and the test harness need from a simulation back end.

    A back end that knows the order of its step's contact events reports them in :attr:`SimState.crossings`
    (labels ``"sphere/touchdown"``, ``"sphere/liftoff"``); the bridge sends them with the state (see
    :class:`~idcontrol.sim.ess.backend.EssSim`).
    """

    @property
    def time(self) -> float:
        """Simulated time, s (cheaper than a whole :meth:`state`)."""
        ...

    def state(self) -> SimState: ...

    def step(self, tau: Array) -> None:
        """Apply the joint torques ``tau`` (nu,), N·m, for one physics step."""
        ...


__all__ = ["SimState", "Simulator", "SimulatorBase", "available_simulators", "make_simulator", "register_simulator"]


class SimulatorBase:
    """The constructor head every back end shares: the robot (a model, or a name or path to load), the floor's
    friction ``mu`` (>= 0, inf allowed), the physics step ``timestep`` s, and the robot file's movable bodies when
    ``with_objects`` (their friction ``object_mu``, default their own). ConfigError names a bad value.

    A back end whose launch-file keys are its registry entry's (:mod:`idcontrol.simulators`) builds from a launch
    file through :meth:`from_launch` as it is; one that reads more of ``[bridge]`` (the terrain) overrides it.
    """

    #: the registry's name of the back end (its errors start with it)
    kind: ClassVar[str] = "simulator"

    def __init__(
        self,
        robot: RobotModel | str,
        mu: float = 1.0,
        timestep: float = 1e-3,
        with_objects: bool = False,
        *,
        object_mu: float | None = None,
    ) -> None:
        self.robot = robot if isinstance(robot, RobotModel) else RobotModel(robot)
        if not (isinstance(timestep, (int, float)) and math.isfinite(timestep) and timestep > 0.0):
            raise ConfigError(f"{self.kind}: timestep must be > 0 s, got {timestep}")
        if not mu >= 0.0:
            raise ConfigError(f"{self.kind}: floor: mu must be >= 0 (inf allowed), got {mu}")
        self.timestep = float(timestep)
        self.mu = mu
        self.object_mu = object_mu
        self.objects: tuple[ObjectConfig, ...] = tuple(self.robot.config.objects) if with_objects else ()

    @property
    def dt(self) -> float:
        """The physics step Δt, s (``timestep``)."""
        return self.timestep

    @classmethod
    def from_launch(cls, config: LaunchConfig, robot: RobotModel, **options: Any) -> Self:
        """The back end a launch file describes (:func:`launch_arguments`); ``options``: more constructor
        keywords."""
        return cls(robot, **launch_arguments(config), **options)


def launch_arguments(config: LaunchConfig) -> dict[str, Any]:
    """A back end's constructor keywords from a launch file: the floor's and the objects' friction (``[bridge]
    mu``), the physics step (the control period / ``substeps``), the movable bodies (``objects``), and the keys of
    its kind that the file gives."""
    b = config.bridge
    common = {"mu": b.mu, "timestep": config.controller.dt / b.substeps, "with_objects": config.objects}
    return {**common, "object_mu": b.mu, **simulator_kind(b.kind).arguments(b.back_end)}


def make_simulator(
    name: str,
    robot: RobotModel,
    *,
    mu: float = 1.0,
    timestep: float = 1e-3,
    with_objects: bool = False,
    object_mu: float | None = None,
) -> Simulator:
    """Build the back end ``name`` for ``robot``: floor friction ``mu``, physics step ``timestep`` s,
    the robot file's movable bodies when ``with_objects`` (friction ``object_mu``, default their own)."""
    factory = simulator_kind(name).load()
    return factory(robot, mu=mu, timestep=timestep, with_objects=with_objects, object_mu=object_mu)


def base_fell(robot: RobotModel, state: Array, base_z: float, min_base_height: float) -> bool:
    """A simulator's fall test: ``state`` (its own state vector) not finite, or the floating base's origin at
    ``base_z`` below ``min_base_height`` (world z, m). InputError for a fixed-base robot (it cannot fall)."""
    if not robot.floating_base:
        raise InputError(f"robot {robot.name!r} has a fixed base; it cannot fall")
    return not (bool(np.all(np.isfinite(state))) and base_z >= min_base_height)
