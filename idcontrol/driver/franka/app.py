"""``idcontrol driver franka LAUNCH_FILE --robot-ip IP``: the Franka driver as a process (docs/franka.md).

This module imports nothing of libfranka until the driver runs, so the command line builds without the
``franka`` extra and says which extra is missing when it is asked for.
"""

from __future__ import annotations

import argparse
import logging
import sys

from idcontrol.errors import IdControlError

#: The exit codes: 0 served (or asked to stop), 2 no session (no daemon, no arm), 3 libfranka ended the session.
EXIT_OK, EXIT_NO_SESSION, EXIT_STOPPED = 0, 2, 3


def add_parser(actions: argparse._SubParsersAction) -> argparse.ArgumentParser:
    """Add the ``franka`` action to ``idcontrol driver``."""
    franka = actions.add_parser(
        "franka",
        help="drive a Franka arm (Panda, FR3) through libfranka's torque control",
        description=__doc__.splitlines()[0],
    )
    franka.add_argument("launch_file", help="the daemon's launch file (its robot file, endpoints and credential)")
    franka.add_argument("--robot-ip", required=True, help="the arm's controller (127.0.0.1: franky-sim)")
    franka.add_argument(
        "--hardware", action="store_true", help="allow an address off loopback: a real arm (read docs/franka.md first)"
    )
    franka.add_argument(
        "--endpoint",
        default=None,
        help="the daemon's control endpoint (default: the launch file's; {endpoint} of conformance)",
    )
    franka.add_argument(
        "--gravity",
        choices=("model", "libfranka"),
        default="model",
        help="whose gravity torque is taken out of the daemon's (libfranka adds its own; default "
        "model: the robot file's)",
    )
    franka.add_argument(
        "--torque-fraction",
        type=float,
        default=0.5,
        help="torque limit as a fraction of the robot file's limits (default 0.5; at most 1)",
    )
    franka.add_argument("--dry-run", action="store_true", help="read the arm and log the torques, send none")
    franka.add_argument(
        "--realtime",
        choices=("enforce", "ignore"),
        default=None,
        help="libfranka's real-time check (default: enforce with --hardware, else ignore)",
    )
    franka.add_argument(
        "--clock",
        choices=("realtime", "lockstep"),
        default="realtime",
        help="lockstep: a simulator that waits for each command (franky-sim via "
        "python -m idcontrol.driver.franka.sim --lockstep); default realtime",
    )
    franka.add_argument("--duration", type=float, default=None, help="stop after this long of the arm's time, s")
    franka.add_argument(
        "--no-admin",
        action="store_true",
        help="do not send the daemon a stop with libfranka's reason (its watchdog stops it)",
    )
    franka.set_defaults(func=run)
    return franka


def run(args: argparse.Namespace) -> int:
    """Run the driver for ``args`` (see :func:`add_parser`); returns the exit code."""
    logging.basicConfig(level=logging.INFO, format="%(asctime)s franka %(levelname)s %(message)s")
    log = logging.getLogger("idcontrol.driver.franka")
    from idcontrol.client import AdminClient
    from idcontrol.settings import load_launch

    try:
        from idcontrol.driver.franka.driver import FrankaDriver, FrankaSettings, FrankaStopped
        from idcontrol.robot.model import RobotModel

        config = load_launch(args.launch_file)
        realtime = args.hardware if args.realtime is None else args.realtime == "enforce"
        settings = FrankaSettings(
            robot_ip=args.robot_ip,
            hardware=args.hardware,
            gravity=args.gravity,
            torque_fraction=args.torque_fraction,
            dry_run=args.dry_run,
            realtime=realtime,
            clock=args.clock,
        )
        admin = None if args.no_admin else AdminClient.for_launch(config)
        driver = FrankaDriver(
            RobotModel(config.robot), args.endpoint or config.endpoints.control, settings, admin=admin
        )
    except FrankaStopped as e:
        print(f"idcontrol driver franka: {e}", file=sys.stderr)
        return EXIT_NO_SESSION
    except IdControlError as e:
        print(f"idcontrol driver franka: {e}", file=sys.stderr)
        return EXIT_NO_SESSION
    code = driver.main(args.duration)
    if driver.report.stop_reason is not None:
        log.error("stopped: %s", driver.report.stop_reason)
        return EXIT_STOPPED
    return code


def main(argv: list[str] | None = None) -> int:
    """``python -m idcontrol.driver.franka.app ...``: the same as ``idcontrol driver franka ...``."""
    parser = argparse.ArgumentParser(prog="idcontrol driver")
    add_parser(parser.add_subparsers(dest="action", required=True))
    args = parser.parse_args(argv)
    return args.func(args)


if __name__ == "__main__":
    sys.exit(main())
