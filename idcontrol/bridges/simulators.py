"""Simulation back ends by name: the bridge process and the test harness build their simulator here.

Every back end is a class taking ``(robot, *, mu, timestep, with_objects, object_mu)`` (as
:class:`~idcontrol.bridges.mujoco_sim.MujocoSim` does) and satisfying
:class:`~idcontrol.bridges.loop.Simulator`. Classes are named ``"module:Class"`` and imported
on first use, so a back end whose dependencies are missing costs nothing until it is asked for.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable

from idcontrol.bridges.loop import Simulator
from idcontrol.errors import UnknownName
from idcontrol.robot.model import RobotModel

SimulatorFactory = Callable[..., Simulator]

_SIMULATORS: dict[str, str | SimulatorFactory] = {
    "mujoco": "idcontrol.bridges.mujoco_sim:MujocoSim",
    "rigid": "idcontrol.bridges.rigid_sim:RigidSim",  # flat ground; a launch file's terrain: bridges.app
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
