"""franky-sim, the simulator of libfranka's network protocol, with the arm at a robot file's standing posture.

franky-sim (``pip install 'idcontrol[franka]'``) answers libfranka on TCP port 1337 and UDP like a Franka arm's
controller: MuJoCo steps an FR3 (with its hand) by 1 ms per state it sends, and in torque control it adds the
gravity torque of its own model to the command, as the arm does. It never raises a reflex (its error flags stay
false). Run it on loopback::

    python -m idcontrol.driver.franka.sim --robot panda --hostname 127.0.0.1

It prints ``franky-sim ready at HOST`` once libfranka can connect, and on SIGINT/SIGTERM one JSON line
``{"franky_sim": {...}}``: ticks served and the wall time of each tick, p50 / p99 / max µs (its own rate, which
bounds the driver's).

franky-sim paces itself by the wall clock (at most 1 kHz) and steps whether a command came or not. ``--lockstep``
makes it a lock-step simulator, as the project's own bridges can be: while a motion runs it waits (up to
``--lockstep-timeout`` s) for the command answering its last state before it steps, so a loaded machine slows the
run down instead of making it drop commands (the driver then says ``--clock lockstep``).
"""

from __future__ import annotations

import argparse
import select
import signal
import sys
import time

import numpy as np

from idcontrol import jsontext
from idcontrol.errors import MissingDependency
from idcontrol.robot.model import RobotModel
from idcontrol.timing import Series, percentiles_us


def arm_standing_posture(robot: RobotModel) -> list[float]:
    """(7,) rad: the standing posture of the robot file's seven arm joints (its actuated joints but the fingers)."""
    from idcontrol.driver.franka.joints import ArmJoints

    joints = ArmJoints.of(robot)
    return [float(x) for x in robot.standing_configuration()[joints.idx_q]]


def command_socket(server: object) -> object | None:
    """The UDP socket on which franky-sim's robot server receives libfranka's commands (None when no client)."""
    return getattr(server, "_FrankaServer__udp_socket", None)  # franky-sim keeps it private


def serve(
    robot: RobotModel, hostname: str, realtime: float, lockstep_timeout_s: float | None = None
) -> dict[str, object]:
    """Serve the arm until SIGINT/SIGTERM; ``realtime`` 1.0 paces ticks at 1 kHz of wall time at best (0: as fast
    as it steps); ``lockstep_timeout_s``: lock-step, waiting up to that long for each command while a motion runs.
    Returns the tick statistics (ticks, wall time per tick in µs, rate in Hz, and lock-step waits that timed out).
    """
    try:
        from franky_sim import SimulationServer
        from franky_sim.mujoco_simulator import MujocoSimulator
    except ImportError as e:
        raise MissingDependency("franky-sim", "franka", "the Franka simulator") from e
    stop = False

    def request_stop(*_: object) -> None:
        nonlocal stop
        stop = True

    for sig in (signal.SIGINT, signal.SIGTERM):
        signal.signal(sig, request_stop)
    ticks = Series(1 << 20)
    count = timeouts = 0
    with MujocoSimulator(enable_visualization=False) as sim:
        arm = sim.add_robot(initial_q=arm_standing_posture(robot))
        with SimulationServer(sim, hostname_candidates=[hostname]) as server:
            print(f"franky-sim ready at {arm.hostname}", flush=True)
            robot_server = server.robot_servers[0]
            motion, sent_in_motion = 0, 0  # the motion of the states sent, and how many were sent in it
            while not stop:
                start = time.perf_counter()
                udp = command_socket(robot_server)
                pace = realtime
                # libfranka reads the motion's first state to start it, the control loop reads the second: from
                # then on each state sent is answered before the next
                if lockstep_timeout_s is not None and motion > 0 and sent_in_motion >= 2 and udp is not None:
                    if not select.select([udp], [], [], lockstep_timeout_s)[0]:
                        timeouts += 1
                    pace = 0.0
                server.run_once(pace)
                if robot_server.current_motion_id != motion:
                    motion, sent_in_motion = robot_server.current_motion_id, 0
                sent_in_motion += 1
                ticks.add((time.perf_counter() - start) * 1e6)
                count += 1
    tick_us = percentiles_us(ticks.values())
    mean_us = float(np.mean(ticks.values())) if count else float("nan")
    rate_hz = round(1e6 / mean_us, 1) if count else float("nan")
    return {"ticks": count, "tick_us": tick_us, "rate_hz": rate_hz, "lockstep_timeouts": timeouts}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m idcontrol.driver.franka.sim", description=__doc__.splitlines()[0])
    parser.add_argument("--robot", default="panda", help="the robot file whose standing posture the arm starts in")
    parser.add_argument("--hostname", default="127.0.0.1", help="loopback address to serve on (port 1337)")
    parser.add_argument(
        "--realtime", type=float, default=1.0, help="1: at most 1 kHz of wall time; 0: as fast as it steps"
    )
    parser.add_argument("--lockstep", action="store_true", help="step once per command while a motion runs")
    parser.add_argument(
        "--lockstep-timeout",
        type=float,
        default=0.5,
        help="lock-step: the longest wait for a command, s (libfranka gives up after 1 s)",
    )
    args = parser.parse_args(argv)
    timeout = args.lockstep_timeout if args.lockstep else None
    stats = serve(RobotModel(args.robot), args.hostname, args.realtime, timeout)
    print(jsontext.dumps({"franky_sim": stats}), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
