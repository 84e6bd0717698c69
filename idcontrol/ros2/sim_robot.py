"""A ROS 2 robot simulated in MuJoCo: ``idcontrol ros2 LAUNCH_FILE --role sim-robot``.

It speaks a ROS 2 robot's topics (:data:`idcontrol.ros2.robot.ROBOT_TOPICS`) in real time: every period it
publishes ``joint_states`` (every movable joint, rad, rad/s), ``imu`` (orientation base → world, gyro in the base
frame; ``linear_acceleration`` is the specific force of a base at rest, gravity only) and ``odom`` (the simulated
base: pose in the world, twist in the base frame), stamped with the wall clock. Each effort from
``effort_controller/commands`` (N·m, actuated joints in the robot file's order) steps the physics one period and
publishes the new state at once (the simulator keeps pace with the commands, as a robot's control loop keeps pace
with its clock: a measurement is never older than the ROS hop); while no effort comes, like a robot on its brakes
it does not move and publishes its state every period. An effort of the wrong size or with NaN is refused with a
log line.
"""

from __future__ import annotations

import logging
import math
import threading
import time
from typing import Any

import numpy as np

from idcontrol.ros2 import require_rclpy
from idcontrol.ros2.robot import Layout
from idcontrol.settings import LaunchConfig

log = logging.getLogger("idcontrol.ros2.sim_robot")


def _rotate_to_base(quaternion_xyzw: np.ndarray, vector_in_world: np.ndarray) -> np.ndarray:
    """Rᵀ v for the rotation R (base → world) of a unit quaternion x y z w."""
    x, y, z, w = quaternion_xyzw
    r = np.array(
        [
            [1 - 2 * (y * y + z * z), 2 * (x * y - z * w), 2 * (x * z + y * w)],
            [2 * (x * y + z * w), 1 - 2 * (x * x + z * z), 2 * (y * z - x * w)],
            [2 * (x * z - y * w), 2 * (y * z + x * w), 1 - 2 * (x * x + y * y)],
        ]
    )
    return r.T @ vector_in_world


class SimRobot:
    """The simulated robot's node (see the module docstring). rate_hz : publish and step rate (default: the
    launch file's control rate); timestep : MuJoCo's step, s (the period must be a whole number of them);
    hold_after_periods : periods without an effort after which the robot is held and publishes on its own."""

    def __init__(
        self,
        config: LaunchConfig,
        ros_args: list[str] | None = None,
        rate_hz: float | None = None,
        timestep: float = 1e-3,
        hold_after_periods: int = 2,
    ) -> None:
        require_rclpy()
        import rclpy
        from nav_msgs.msg import Odometry
        from rclpy.executors import SingleThreadedExecutor
        from rclpy.node import Node
        from rclpy.qos import QoSProfile, ReliabilityPolicy, qos_profile_sensor_data
        from sensor_msgs.msg import Imu, JointState
        from std_msgs.msg import Float64MultiArray

        from idcontrol.robot.model import RobotModel
        from idcontrol.sim.mujoco import MujocoSim

        self.robot = RobotModel(config.robot)
        self.layout = Layout.of(self.robot)
        self.period = 1.0 / (rate_hz or config.controller.rate_hz)
        self.substeps = round(self.period / timestep)
        if self.substeps < 1 or abs(self.substeps * timestep - self.period) > 1e-9:
            from idcontrol.errors import ConfigError

            raise ConfigError(f"the period {self.period} s is not a whole number of {timestep} s steps")
        self.sim = MujocoSim(self.robot, mu=config.bridge.mu, timestep=timestep)
        self.hold_after = hold_after_periods
        self._last_effort = -math.inf  # time.monotonic() s of the last effort
        self._lock = threading.Lock()  # the simulator: stepped by the efforts' callback, read by the idle loop
        self.efforts = self.refused = self.steps = self.published = 0
        self._last_refusal = -math.inf
        self.context = rclpy.Context()
        rclpy.init(args=["idcontrol_sim_robot", *(ros_args or [])], context=self.context)
        self.node = Node("idcontrol_sim_robot", context=self.context)
        sensor = qos_profile_sensor_data
        self.pub_joints = self.node.create_publisher(JointState, "joint_states", sensor)
        self.pub_imu = self.node.create_publisher(Imu, "imu", sensor)
        self.pub_odom = self.node.create_publisher(Odometry, "odom", sensor)
        self.node.create_subscription(
            Float64MultiArray,
            "effort_controller/commands",
            self._on_effort,
            QoSProfile(depth=1, reliability=ReliabilityPolicy.RELIABLE),
        )
        self._js, self._imu, self._odom = JointState(), Imu(), Odometry()
        self._js.name = list(self.layout.joints)
        self._odom.header.frame_id, self._odom.child_frame_id = "world", "base"
        self.executor = SingleThreadedExecutor(context=self.context)
        self.executor.add_node(self.node)
        self._stop = threading.Event()

    def _on_effort(self, msg: Any) -> None:
        tau = np.asarray(msg.data, dtype=float)
        if tau.shape != (self.robot.nu,) or not np.all(np.isfinite(tau)):
            self.refused += 1
            if time.monotonic() - self._last_refusal >= 1.0:
                self._last_refusal = time.monotonic()
                log.warning(
                    "effort refused, nothing changed: %d values (the robot has %d actuated joints)%s",
                    tau.size,
                    self.robot.nu,
                    "" if np.all(np.isfinite(tau)) else ", NaN",
                )
            return
        with self._lock:
            self._last_effort = time.monotonic()
            for _ in range(self.substeps):
                self.sim.step(tau)
            self.steps += 1
            self.efforts += 1
            self._publish()

    def _publish(self) -> None:
        s = self.sim.state()
        q, v = np.asarray(s.q), np.asarray(s.v)
        stamp = self.node.get_clock().now().to_msg()  # the wall clock: the driver measures the state's age with it
        js = self._js
        js.header.stamp = stamp
        js.position = q[self.layout.idx_q].tolist()
        js.velocity = v[self.layout.idx_v].tolist()
        if self.layout.floating:
            od, imu = self._odom, self._imu
            od.header.stamp = imu.header.stamp = stamp
            p, o = od.pose.pose.position, od.pose.pose.orientation
            p.x, p.y, p.z = (float(x) for x in q[:3])
            o.x, o.y, o.z, o.w = (float(x) for x in q[3:7])
            imu.orientation = o
            t = od.twist.twist
            t.linear.x, t.linear.y, t.linear.z = (float(x) for x in v[:3])
            t.angular.x, t.angular.y, t.angular.z = (float(x) for x in v[3:6])
            imu.angular_velocity = t.angular
            a = imu.linear_acceleration
            a.x, a.y, a.z = (float(x) for x in _rotate_to_base(q[3:7], np.array([0.0, 0.0, 9.81])))
            self.pub_odom.publish(od)  # the base first: the driver pairs the joints with the newest base
            self.pub_imu.publish(imu)
        self.pub_joints.publish(js)
        self.published += 1

    def run(self, duration: float | None = None) -> dict[str, Any]:
        """Publish and step in real time until :meth:`request_stop` or ``duration`` s; returns counts."""
        spin = threading.Thread(target=self._spin, name="ros2-sim-spin", daemon=True)
        spin.start()
        boundary = t0 = time.perf_counter()
        overruns = 0
        try:
            while not self._stop.is_set() and (duration is None or time.perf_counter() - t0 < duration):
                if time.monotonic() - self._last_effort > self.hold_after * self.period:
                    with self._lock:  # no efforts: held still, its state published every period
                        self._publish()
                boundary += self.period
                remaining = boundary - time.perf_counter()
                if remaining > 0:
                    time.sleep(remaining)
                else:
                    overruns += 1
                    boundary = time.perf_counter()
        finally:
            self._stop.set()
            spin.join(timeout=2.0)
        return {
            "published": self.published,
            "steps": self.steps,
            "efforts": self.efforts,
            "refused": self.refused,
            "overruns": overruns,
            "base_height_m": float(np.asarray(self.sim.state().q)[2]),
        }

    def _spin(self) -> None:
        while not self._stop.is_set() and self.context.ok():
            self.executor.spin_once(timeout_sec=0.05)

    def request_stop(self) -> None:
        self._stop.set()

    def close(self) -> None:
        self.node.destroy_node()
        self.context.try_shutdown()


def main(config: LaunchConfig, ros_args: list[str], rate_hz: float | None) -> int:
    """Run the simulated robot until SIGINT/SIGTERM; print its counts as one JSON line."""
    import signal

    from idcontrol import jsontext

    logging.basicConfig(level=logging.INFO, format="%(asctime)s ros2 sim robot %(levelname)s %(message)s")
    robot = SimRobot(config, ros_args, rate_hz)
    for sig in (signal.SIGINT, signal.SIGTERM):
        signal.signal(sig, lambda *_: robot.request_stop())
    try:
        print(jsontext.dumps({"sim_robot": robot.run()}), flush=True)
    finally:
        robot.close()
    return 0
