"""The two processes of ``idcontrol driver unitree`` and ``idcontrol driver unitree-sim`` (docs/unitree.md)."""

from __future__ import annotations

import argparse
import logging

from idcontrol.driver.unitree.dds import FAMILIES
from idcontrol.errors import IdControlError

log = logging.getLogger("idcontrol.driver.unitree")


def add_link_arguments(p: argparse.ArgumentParser) -> None:
    """The flags both sides share: the network interface, the DDS domain, the message family, the clock."""
    p.add_argument(
        "--network",
        default="lo",
        metavar="INTERFACE",
        help="network interface to the robot (default lo: a simulator on this machine); a Go2's "
        "wired port is usually on 192.168.123.0/24 (docs/unitree.md)",
    )
    p.add_argument("--domain", type=int, default=0, help="DDS domain id (default 0, the robot's)")
    p.add_argument(
        "--messages",
        choices=FAMILIES,
        default="go",
        help="message family: go (Go2, B2, Go-class quadrupeds) or hg (the humanoids)",
    )
    p.add_argument(
        "--clock",
        choices=("realtime", "lockstep"),
        default="realtime",
        help="realtime (a robot) or lockstep (a simulator that steps on each command)",
    )


def add_driver_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "--robot",
        default="a1",
        metavar="NAME_OR_PATH",
        help="the daemon's robot file (a shipped name or a folder with robot.toml; default a1)",
    )
    p.add_argument(
        "--endpoint",
        default=None,
        help="the daemon's control endpoint (default: the private one a launch file without [endpoints] binds, "
        "ipc://RUNTIME/control)",
    )
    add_link_arguments(p)
    p.add_argument(
        "--hardware",
        action="store_true",
        help="allow an interface other than loopback: a real robot (read docs/unitree.md first)",
    )
    p.add_argument("--dry-run", action="store_true", help="log the daemon's torques, command the motors' damping only")
    p.add_argument(
        "--torque-fraction",
        type=float,
        default=0.5,
        help="torque limit as a fraction of the robot file's effort limits (default 0.5)",
    )
    p.add_argument(
        "--motor-damping",
        type=float,
        default=2.0,
        help="kd of the motors' damping when the daemon does not drive them, N·m·s/rad (default 2)",
    )
    p.add_argument(
        "--stale-limit",
        type=int,
        default=5,
        help="periods without a new, intact LowState before the driver stops the robot (default 5)",
    )
    p.add_argument("--duration", type=float, default=None, help="stop after this long, s (default: a signal)")


def add_simulator_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "launch_file", help="the launch file whose [bridge] and robot to simulate, e.g. launch/unitree_stand.toml"
    )
    p.add_argument("--robot", default=None, metavar="NAME_OR_PATH", help="override the launch file's robot")
    add_link_arguments(p)
    p.add_argument(
        "--sport-mode",
        action="store_true",
        help="also publish rt/sportmodestate, as a robot whose sport-mode service runs",
    )
    p.add_argument("--duration", type=float, default=None, help="stop after this long, s (default: a signal)")


def run_driver(args: argparse.Namespace) -> int:
    from idcontrol.driver.unitree.driver import UnitreeDriver
    from idcontrol.robot.model import RobotModel
    from idcontrol.settings import private_endpoint

    logging.basicConfig(level=logging.INFO, format="%(asctime)s unitree-driver %(levelname)s %(message)s")
    try:
        driver = UnitreeDriver(
            RobotModel(args.robot),
            args.endpoint or private_endpoint("control"),
            family=args.messages,
            interface=args.network,
            domain=args.domain,
            clock=args.clock,
            hardware=args.hardware,
            torque_fraction=args.torque_fraction,
            motor_damping=args.motor_damping,
            stale_limit=args.stale_limit,
            dry_run=args.dry_run,
        )
    except IdControlError as e:
        log.error("%s", e)
        return 2
    return driver.main(args.duration)


def run_simulator(args: argparse.Namespace) -> int:
    from idcontrol.driver.unitree.simulator import UnitreeSimulator
    from idcontrol.robot.model import RobotModel
    from idcontrol.settings import load_launch

    logging.basicConfig(level=logging.INFO, format="%(asctime)s unitree-sim %(levelname)s %(message)s")
    config = load_launch(args.launch_file).with_overrides(None, None, None, args.robot)
    sim = UnitreeSimulator(
        config,
        RobotModel(config.robot),
        family=args.messages,
        interface=args.network,
        domain=args.domain,
        clock=args.clock,
        sport_mode=args.sport_mode,
    )
    return sim.main(args.duration)
