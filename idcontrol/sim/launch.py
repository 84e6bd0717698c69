"""The simulator a launch file asks for: its ``[bridge] kind`` built by the registry (:mod:`idcontrol.simulators`)
from the keys every kind reads and its own, behind the sensor and actuator models."""

from __future__ import annotations

from typing import Any

from idcontrol.robot.model import RobotModel
from idcontrol.settings import LaunchConfig
from idcontrol.sim.base import Simulator, launch_arguments
from idcontrol.sim.sensing import sensed
from idcontrol.simulators import simulator_kind


def simulator_for(config: LaunchConfig, robot: RobotModel, **options: Any) -> Simulator:
    """The launch file's simulator (``[bridge]`` kind, friction, substeps, terrain, the kind's own keys; its
    movable bodies if ``objects``), behind its sensor and actuator models (``[bridge.sensors]``,
    ``[bridge.actuators]``: :mod:`idcontrol.sim.sensing`; none when both are ideal). ``options``: more keywords of
    the back end's constructor (the ess simulator's ``engine="scipy"``, to measure against the compiled one)."""
    b = config.bridge
    factory = simulator_kind(b.kind).load()
    from_launch = getattr(factory, "from_launch", None)
    if from_launch is not None:
        sim = from_launch(config, robot, **options)
    else:  # a registered callable that is not a SimulatorBase
        sim = factory(robot, **launch_arguments(config), **options)
    return sensed(sim, robot, b.sensors, b.actuators, period=config.controller.dt, substeps=b.substeps)
