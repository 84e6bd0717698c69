"""Assemble a simulator bridge process from a launch file."""

from __future__ import annotations

import logging

from idcontrol.bridges.loop import Simulator, run_bridge
from idcontrol.bridges.simulators import make_simulator
from idcontrol.contacts.world import Environment
from idcontrol.launch_file import LaunchConfig
from idcontrol.realtime import enter_realtime
from idcontrol.robot.model import RobotModel
from idcontrol.security import KeyDirectory


def simulator_for(config: LaunchConfig, robot: RobotModel) -> Simulator:
    """The launch file's simulator (``[bridge]`` kind, friction, substeps, terrain; its movable bodies if
    ``objects``)."""
    b = config.bridge
    timestep = config.controller.dt / b.substeps
    if b.kind == "rigid":
        from idcontrol.bridges.rigid_sim import RigidSim

        # the controller's terrain (idcontrol.daemon.app.world_for) with the simulator's friction
        ground = Environment.ground(b.mu, b.terrain, seed=b.terrain_seed, max_height=b.terrain_height)
        return RigidSim(robot, timestep=timestep, with_objects=config.objects, object_mu=b.mu,
                        environment=ground if robot.floating_base else None)  # fmt: skip
    return make_simulator(b.kind, robot, mu=b.mu, timestep=timestep, with_objects=config.objects, object_mu=b.mu)


def run_bridge_process(config: LaunchConfig) -> int:
    """Build the launch file's simulator and serve it to the daemon until SIGTERM/SIGINT."""
    logging.basicConfig(level=logging.INFO, format="%(asctime)s bridge %(levelname)s %(message)s")
    robot = RobotModel(config.robot)
    b = config.bridge
    sim = simulator_for(config, robot)
    enter_realtime(config.realtime, "bridge")
    return run_bridge(sim, robot, config.endpoints.control, mode=b.mode, period=config.controller.dt,
                      substeps=b.substeps, late_limit=b.late_limit, spin_us=config.realtime.spin_us,
                      curve=KeyDirectory(config.curve_keys) if config.curve_keys else None)  # fmt: skip
