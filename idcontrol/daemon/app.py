"""Run a daemon process from a launch file: the control core (:mod:`idcontrol.control.factory`) on its sockets."""

from __future__ import annotations

import logging

from idcontrol.control.factory import build_core
from idcontrol.daemon.server import Daemon
from idcontrol.realtime import enter_realtime
from idcontrol.security import KeyDirectory
from idcontrol.settings import LaunchConfig


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
    # the warmer's shadow core: its own robot model, formulation and reference, sharing nothing with the served one
    shadow = build_core(config, quiet=True) if config.realtime.warm else None
    daemon = Daemon(
        core,
        config.endpoints,
        watchdog=config.controller.watchdog_ms * 1e-3,
        curve=curve,
        logger=logger,
        spin_us=config.realtime.spin_us,
        shadow=shadow,
    )
    daemon.serve()
    return 0
