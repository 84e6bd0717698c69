"""Assemble a simulator bridge process from a launch file."""

from __future__ import annotations

import logging

from idcontrol.bridges.loop import run_bridge
from idcontrol.realtime import enter_realtime
from idcontrol.robot.model import RobotModel
from idcontrol.security import KeyDirectory
from idcontrol.settings import LaunchConfig
from idcontrol.sim.launch import simulator_for


def run_bridge_process(config: LaunchConfig, hello_timeout_s: float = 10.0) -> int:
    """Build the launch file's simulator and serve it to the daemon until SIGTERM/SIGINT; ``hello_timeout_s``:
    how long to wait for the daemon to answer the first hello."""
    logging.basicConfig(level=logging.INFO, format="%(asctime)s bridge %(levelname)s %(message)s")
    robot = RobotModel(config.robot)
    b = config.bridge
    sim = simulator_for(config, robot)
    enter_realtime(config.realtime, "bridge")
    return run_bridge(
        sim,
        robot,
        config.endpoints.control,
        mode=b.mode,
        period=config.controller.dt,
        substeps=b.substeps,
        late_limit=b.late_limit,
        spin_us=config.realtime.bridge_spin_us,
        curve=KeyDirectory(config.curve_keys) if config.curve_keys else None,
        hello_timeout_s=hello_timeout_s,
    )
