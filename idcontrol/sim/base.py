"""What every simulator gives the bridge loop and the test harness: one protocol, one state type, a registry.

A back end is a class taking ``(robot, *, mu, timestep, with_objects, object_mu)`` (as
:class:`~idcontrol.sim.mujoco.MujocoSim` does) and satisfying :class:`Simulator`. Back ends are named
``"module:Class"`` and imported on first use, so one whose dependencies are missing costs nothing until it
is asked for.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable
from dataclasses import dataclass
from typing import Protocol

import numpy as np
from numpy.typing import NDArray

from idcontrol.contacts.world import ObjectState
from idcontrol.control.state import RobotState
from idcontrol.errors import InputError, UnknownName
from idcontrol.robot.model import RobotModel

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
    """

    t: float
    q: Array
    v: Array
    objects: dict[str, ObjectState]
    contact_forces: Array
    crossings: tuple[tuple[str, float, str], ...] = ()

    def robot_state(self) -> RobotState:
        """This snapshot as the control core's input (as a bridge would report it, sensed forces included)."""
        return RobotState(self.q, self.v, self.t, self.objects, self.contact_forces)


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


SimulatorFactory = Callable[..., Simulator]

_SIMULATORS: dict[str, str | SimulatorFactory] = {
    "mujoco": "idcontrol.sim.mujoco:MujocoSim",
    "rigid": "idcontrol.sim.rigid:RigidSim",  # flat ground here; a launch file's terrain: sim.launch
    "drake": "idcontrol.sim.drake:DrakeSim",  # SAP compliant contact; needs the extra idcontrol[drake]
    "ess": "idcontrol.sim.ess.backend:EssSim",  # compliant contact, ESS integrator; its [bridge] keys: sim.launch
}


def register_simulator(name: str, factory: str | SimulatorFactory) -> None:
    """Make ``name`` buildable: ``factory`` is a callable or a ``"module:attribute"`` path to one."""
    _SIMULATORS[name] = factory


def available_simulators() -> list[str]:
    return sorted(_SIMULATORS)


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
    factory = _SIMULATORS.get(name)
    if factory is None:
        raise UnknownName(f"unknown simulator {name!r}; available: {', '.join(available_simulators())}")
    if isinstance(factory, str):
        module, _, attribute = factory.partition(":")
        factory = getattr(importlib.import_module(module), attribute)
    return factory(robot, mu=mu, timestep=timestep, with_objects=with_objects, object_mu=object_mu)


def base_fell(robot: RobotModel, state: Array, base_z: float, min_base_height: float) -> bool:
    """A simulator's fall test: ``state`` (its own state vector) not finite, or the floating base's origin at
    ``base_z`` below ``min_base_height`` (world z, m). InputError for a fixed-base robot (it cannot fall)."""
    if not robot.floating_base:
        raise InputError(f"robot {robot.name!r} has a fixed base; it cannot fall")
    return not (bool(np.all(np.isfinite(state))) and base_z >= min_base_height)
