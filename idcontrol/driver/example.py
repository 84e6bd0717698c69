"""An example robot driver in Python: a robot SDK's two calls wired to the driver SDK.

Here the "robot SDK" is MuJoCo simulating the quadruped (the model the bridge builds from the URDF); on a robot,
``read_state`` and ``apply`` call the vendor's SDK instead (docs/driver.md shows one). Run it against a daemon::

    python -m idcontrol.driver.example                    # the private endpoint: a launch file without [endpoints]
    python -m idcontrol.driver.example --endpoint tcp://127.0.0.1:5555   # one that names TCP ports

or through the conformance suite: ``idcontrol conformance -- python -m idcontrol.driver.example --endpoint {endpoint}``.
"""

from __future__ import annotations

import argparse
import logging
import sys

import numpy as np

from idcontrol.driver import Driver, DriverState, RobotSizes
from idcontrol.robot.model import RobotModel
from idcontrol.settings import private_endpoint
from idcontrol.sim.mujoco import MujocoSim


class MujocoRobotDriver(Driver):
    """The quadruped in MuJoCo behind the driver SDK: ``read_state`` measures, ``apply`` steps."""

    def __init__(self, endpoint: str, late_limit: int = 20) -> None:
        robot = RobotModel("quadruped")
        self.sim = MujocoSim(robot, mu=1.0, timestep=1e-3)  # 1 ms steps; the daemon's period is a whole number
        super().__init__(RobotSizes.of(robot), endpoint, clock="realtime", late_limit=late_limit)

    def read_state(self) -> DriverState:
        s = self.sim.state()  # already in the protocol's conventions (quaternion x y z w, base-frame twist)
        return DriverState(t=s.t, q=s.q, v=s.v, contact_forces=s.contact_forces)

    def apply(self, tau: np.ndarray, mode: str) -> None:
        if mode in ("run", "safe_stop"):  # idle, stopped: a simulated robot on its brakes does not move
            for _ in range(max(1, round(self.period / 1e-3))):  # the period comes from the daemon's welcome
                self.sim.step(tau)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m idcontrol.driver.example", description=__doc__.splitlines()[0])
    parser.add_argument(
        "--endpoint",
        default=None,
        help="the daemon's control endpoint (default: the private one a launch file without [endpoints] binds, "
        "ipc://RUNTIME/control)",
    )
    parser.add_argument("--duration", type=float, default=None, help="stop after this long, s (default: a signal)")
    parser.add_argument("--late-limit", type=int, default=20, help="late commands before the own safe stop")
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s driver %(levelname)s %(message)s")
    endpoint = args.endpoint or private_endpoint("control")
    return MujocoRobotDriver(endpoint, args.late_limit).main(args.duration)


if __name__ == "__main__":
    sys.exit(main())
