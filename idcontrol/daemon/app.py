"""Assemble a daemon from a launch file: robot, world, controller, reference, core, sockets."""

from __future__ import annotations

import logging
from dataclasses import replace

from idcontrol.contacts.world import Environment, MovableBody
from idcontrol.controller import InverseDynamicsController
from idcontrol.daemon.core import ControlCore
from idcontrol.daemon.server import Daemon
from idcontrol.launch_file import LaunchConfig
from idcontrol.realtime import enter_realtime
from idcontrol.reference import make_reference
from idcontrol.robot.model import RobotModel
from idcontrol.security import KeyDirectory


def world_for(robot: RobotModel, config: LaunchConfig, mu: float) -> Environment:
    """The bridge's terrain (flat ground or its height map) plus, when the launch file asks, the robot file's
    movable bodies; all with friction ``mu``."""
    objects = tuple(MovableBody(replace(o, mu=mu)) for o in robot.config.objects) if config.objects else ()
    b = config.bridge
    return Environment.ground(mu, b.terrain, seed=b.terrain_seed, max_height=b.terrain_height, objects=objects)


def build_core(config: LaunchConfig, robot: RobotModel | None = None) -> ControlCore:
    robot = robot or RobotModel(config.robot)
    c = config.controller
    controller = InverseDynamicsController(
        robot, world_for(robot, config, c.mu), c.formulation, dt=c.dt,
        formulation_options=config.formulation_options(c.formulation),
        penetration_tolerance=float(c.penetration_tolerance), activation_distance=c.activation_distance,
        consistent_contact_velocity=c.consistent_contact_velocity,
    )  # fmt: skip
    reference = make_reference(config.reference.name, robot, **config.reference.options)
    core = ControlCore(controller, reference, config.safety, formulation_options=config.formulations)
    if c.gains:
        core.set_gains(**c.gains)  # ConfigError for a negative or non-finite gain
    return core


def run_daemon(config: LaunchConfig, log_path: str | None = None, log_max_bytes: int = 1 << 30) -> int:
    """Serve until SIGINT/SIGTERM or an admin ``shutdown``; returns the process exit code.

    log_path : record every tick to this MCAP file (see :mod:`idcontrol.logs`); None: no log.
    """
    logging.basicConfig(level=logging.INFO, format="%(asctime)s daemon %(levelname)s %(message)s")
    core = build_core(config)
    logger = None
    if log_path is not None:
        from idcontrol.logs.recorder import LogRecorder, describe_run

        logger = LogRecorder(log_path, describe_run(config, core), max_bytes=log_max_bytes)
    curve = KeyDirectory(config.curve_keys) if config.curve_keys else None
    enter_realtime(config.realtime, "daemon")  # before the first socket: its I/O thread gets the priority too
    daemon = Daemon(core, config.endpoints, watchdog=config.controller.watchdog_ms * 1e-3, curve=curve, logger=logger,
                    spin_us=config.realtime.spin_us)  # fmt: skip
    daemon.serve()
    return 0
