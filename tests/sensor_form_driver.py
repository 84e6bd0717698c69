"""A sensor-form driver on the Python SDK for the conformance tests: the quadruped in MuJoCo, reported as a legged
robot measures it (the joints and an IMU at the base link, noise-free), with one fault on demand.

    python tests/sensor_form_driver.py --endpoint ENDPOINT [--fault none|quaternion3|frozen]

quaternion3 sends an IMU orientation of 3 values (the daemon refuses every state); frozen sends the first reading
again and again (the daemon's estimator takes it for a stale IMU once the robot runs).
"""

from __future__ import annotations

import argparse
import logging
import sys
from dataclasses import dataclass, field

import numpy as np

from idcontrol.control.state import ImuReading
from idcontrol.driver import Driver, RobotSizes
from idcontrol.robot.model import RobotModel
from idcontrol.sim.mujoco import MujocoSim

FAULTS = ("none", "quaternion3", "frozen")
GRAVITY = 9.81


@dataclass
class SensorState:
    """What the SDK sends: ``q`` (nq,), ``v`` (nv,) of which only the joints go out, and the IMU's reading."""

    t: float
    q: np.ndarray
    v: np.ndarray
    imu: ImuReading
    contact_forces: np.ndarray | None = field(default=None)


def rotation(xyzw: np.ndarray) -> np.ndarray:
    """(3, 3) world ← body of a unit quaternion x y z w."""
    x, y, z, w = xyzw
    return np.array(
        [
            [1 - 2 * (y * y + z * z), 2 * (x * y - z * w), 2 * (x * z + y * w)],
            [2 * (x * y + z * w), 1 - 2 * (x * x + z * z), 2 * (y * z - x * w)],
            [2 * (x * z - y * w), 2 * (y * z + x * w), 1 - 2 * (x * x + y * y)],
        ]
    )


class SensorFormDriver(Driver):
    """The quadruped in MuJoCo behind the driver SDK, in the sensor form."""

    def __init__(self, endpoint: str, fault: str) -> None:
        robot = RobotModel("quadruped")
        self.sim = MujocoSim(robot, mu=1.0, timestep=1e-3)
        self.fault = fault
        self._velocity: tuple[float, np.ndarray] | None = None  # (t s, base velocity in world m/s)
        self._acceleration = np.zeros(3)  # of the base origin, world frame, m/s²
        self._first: ImuReading | None = None
        super().__init__(RobotSizes.of(robot), endpoint, clock="realtime")

    def read_state(self) -> SensorState:
        s = self.sim.state()
        R = rotation(s.q[3:7])
        velocity = R @ s.v[0:3]
        if self._velocity is not None and s.t > self._velocity[0]:
            self._acceleration = (velocity - self._velocity[1]) / (s.t - self._velocity[0])
        if self._velocity is None or s.t > self._velocity[0]:
            self._velocity = (s.t, velocity)
        specific_force = R.T @ (self._acceleration + np.array([0.0, 0.0, GRAVITY]))
        imu = ImuReading(s.q[3:7].copy(), s.v[3:6].copy(), specific_force, s.t)
        if self.fault == "quaternion3":
            imu = ImuReading(s.q[3:6].copy(), imu.angular_velocity, imu.linear_acceleration, s.t)
        elif self.fault == "frozen":
            self._first = self._first or imu
            imu = ImuReading(imu.orientation_xyzw, self._first.angular_velocity, self._first.linear_acceleration, s.t)
        return SensorState(s.t, s.q, s.v, imu, s.contact_forces)

    def apply(self, tau: np.ndarray, mode: str) -> None:
        if mode in ("run", "safe_stop"):
            for _ in range(max(1, round(self.period / 1e-3))):
                self.sim.step(tau)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--endpoint", required=True, help="the daemon's control endpoint")
    parser.add_argument("--fault", choices=FAULTS, default="none")
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s driver %(levelname)s %(message)s")
    return SensorFormDriver(args.endpoint, args.fault).main()


if __name__ == "__main__":
    sys.exit(main())
