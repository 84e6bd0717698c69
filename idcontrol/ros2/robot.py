"""A robot that lives in ROS 2 as a driver of the daemon: ``idcontrol ros2 LAUNCH_FILE --role driver``.

The robot publishes ``joint_states`` (``sensor_msgs/JointState``, every joint of the URDF by name, rad and rad/s,
``header.stamp`` when it measured) and ``imu`` (``sensor_msgs/Imu``), and, for the full state form, its base on
``odom`` (``nav_msgs/Odometry``: pose in the world, twist in the base frame, as a state estimator or motion capture
gives it); it takes efforts on ``effort_controller/commands`` (``std_msgs/Float64MultiArray``, one per actuated
joint in the daemon's joint order, N·m), as ros2_control's effort forward-command controller does.

:class:`RosRobotDriver` is a :class:`~idcontrol.driver.Driver` (docs/driver.md): at each boundary of the daemon's
period it sends the newest measurement to the daemon and publishes the command that answered the previous one, so
the late-command rule and the watchdog (20 late commands in a row: the driver's own damping stop) hold as for any
driver. In ``idle`` and ``stopped`` it publishes nothing: the robot's own controller holds it (its brakes).
Measurements it cannot use (unknown or missing joints, wrong sizes, NaN) are refused with a log line and change
nothing; the state sent is the previous one, whose stamp does not advance.
"""

from __future__ import annotations

import logging
import math
import threading
import time
from dataclasses import dataclass, field
from typing import Any

import numpy as np
from numpy.typing import NDArray

from idcontrol.driver import Driver, DriverReport, DriverState, RobotSizes
from idcontrol.errors import ConfigError
from idcontrol.ros2 import require_rclpy
from idcontrol.settings import LaunchConfig
from idcontrol.timing import Series, percentiles_us

Array = NDArray[np.float64]
log = logging.getLogger("idcontrol.ros2.driver")

#: Topic (relative name) -> message type of the robot's side.
ROBOT_TOPICS = {
    "joint_states": "sensor_msgs/msg/JointState",
    "imu": "sensor_msgs/msg/Imu",
    "odom": "nav_msgs/msg/Odometry",
    "effort_controller/commands": "std_msgs/msg/Float64MultiArray",
}


@dataclass
class RosDriverReport(DriverReport):
    """The driver's report and what ROS added: ``state_age_us`` (the measurement's age when sent to the daemon:
    the ROS hop from the robot plus the wait for the period's boundary, p50/p99/max), ``refused`` measurements."""

    state_age_us: dict[str, float] = field(default_factory=dict)
    refused: int = 0
    measurements: int = 0
    stale_states: int = 0  # states sent without a measurement taken after the last effort (fresh_wait_s ran out)


@dataclass
class Layout:
    """Where a robot's joints go in q and v. joints : names of every movable joint in q's order; idx_q, idx_v :
    their indices; floating : q starts with the base (7) and v with its twist (6)."""

    joints: tuple[str, ...]
    idx_q: NDArray[np.intp]
    idx_v: NDArray[np.intp]
    floating: bool
    nq: int
    nv: int

    @classmethod
    def of(cls, robot: Any) -> Layout:
        m = robot.model
        names = robot.movable_joints
        return cls(
            tuple(names),
            np.asarray([m.joints[m.getJointId(n)].idx_q for n in names], dtype=np.intp),
            np.asarray([m.joints[m.getJointId(n)].idx_v for n in names], dtype=np.intp),
            bool(robot.floating_base),
            int(m.nq),
            int(m.nv),
        )


def joints_from_message(msg: Any, layout: Layout) -> tuple[Array, Array]:
    """(positions rad, velocities rad/s), each (len(layout.joints),) in q's order, from a ``JointState`` naming
    every joint; ValueError says why not."""
    names = list(msg.name)
    if len(msg.position) != len(names) or len(msg.velocity) != len(names):
        raise ValueError(f"{len(names)} names, {len(msg.position)} positions, {len(msg.velocity)} velocities")
    missing = sorted(set(layout.joints) - set(names))
    if missing:
        raise ValueError(f"joints {missing} are missing (the robot's joints: {list(layout.joints)})")
    index = {n: i for i, n in enumerate(names)}
    order = [index[n] for n in layout.joints]
    q, v = np.asarray(msg.position, dtype=float)[order], np.asarray(msg.velocity, dtype=float)[order]
    if not (np.all(np.isfinite(q)) and np.all(np.isfinite(v))):
        raise ValueError("NaN or infinity in the joints")
    return q, v


def base_from_odometry(msg: Any) -> tuple[Array, Array]:
    """(pose (7,) [x y z m world, qx qy qz qw base → world], twist (6,) [linear m/s, angular rad/s, base frame])
    from ``nav_msgs/Odometry``; ValueError for NaN or a quaternion whose norm is not 1 within 1e-3."""
    p, o = msg.pose.pose.position, msg.pose.pose.orientation
    lin, ang = msg.twist.twist.linear, msg.twist.twist.angular
    pose = np.array([p.x, p.y, p.z, o.x, o.y, o.z, o.w])
    twist = np.array([lin.x, lin.y, lin.z, ang.x, ang.y, ang.z])
    if not (np.all(np.isfinite(pose)) and np.all(np.isfinite(twist))):
        raise ValueError("NaN or infinity in the odometry")
    if abs(np.linalg.norm(pose[3:]) - 1.0) > 1e-3:
        raise ValueError(f"orientation quaternion of norm {np.linalg.norm(pose[3:]):.4f}, not 1")
    return pose, twist


def imu_from_message(msg: Any) -> dict[str, Array]:
    """The protocol's ``imu`` map (docs/protocol.md, ``state``) from ``sensor_msgs/Imu``."""
    o, w, a = msg.orientation, msg.angular_velocity, msg.linear_acceleration
    return {
        "orientation_xyzw": np.array([o.x, o.y, o.z, o.w]),
        "angular_velocity": np.array([w.x, w.y, w.z]),
        "linear_acceleration": np.array([a.x, a.y, a.z]),
    }


@dataclass
class Measurement:
    """The newest usable measurement: stamp s (the robot's clock), q (nq,) or joints only, v likewise, imu map."""

    t: float
    q: Array
    v: Array
    imu: dict[str, Array] | None = None


class RosRobotDriver(Driver):
    """The ROS 2 robot's topics behind the driver SDK (see the module docstring).

    config : the daemon's launch file (its robot); endpoint : the daemon's control endpoint; odometry : the robot
    publishes its base on ``odom`` (the full state form) — without it the state is the sensor form (joints and
    ``imu``), for a daemon that estimates the base (``[estimator]``).
    fresh_fraction : after publishing an effort, :meth:`read_state` waits up to this fraction of the period for a
    measurement stamped after it (the robot's answer to it), so that the daemon's next command is computed from the
    state the effort led to and not from the one before (which would add a whole period of delay); when none comes in
    time it sends the newest it has (counted in ``stale_states``).
    """

    def __init__(
        self,
        config: LaunchConfig,
        endpoint: str | None = None,
        *,
        odometry: bool = False,
        ros_args: list[str] | None = None,
        fresh_fraction: float = 0.5,
        **driver_options: Any,
    ) -> None:
        require_rclpy()
        import rclpy
        from rclpy.node import Node
        from rclpy.qos import QoSProfile, ReliabilityPolicy, qos_profile_sensor_data
        from sensor_msgs.msg import Imu, JointState
        from std_msgs.msg import Float64MultiArray

        from idcontrol.robot.model import RobotModel

        robot = RobotModel(config.robot)
        self.layout = Layout.of(robot)
        self.odometry = odometry
        self._odom: tuple[Array, Array] | None = None
        self._imu: dict[str, Array] | None = None
        self._measurement: Measurement | None = None
        self._lock = threading.Condition()
        self._effort_at = -math.inf  # time.time() s when the last effort was published
        self.fresh_fraction = fresh_fraction
        self._ages = Series(1 << 20)
        self._last_refusal: dict[str, float] = {}
        super().__init__(
            RobotSizes.of(robot),
            endpoint or config.endpoints.control,
            credential_endpoint=config.endpoints.control,
            **driver_options,
        )
        self.context = rclpy.Context()
        rclpy.init(args=["idcontrol_driver", *(ros_args or [])], context=self.context)
        self.node = Node("idcontrol_driver", context=self.context)
        sensor = qos_profile_sensor_data
        self.node.create_subscription(JointState, "joint_states", self._on_joints, sensor)
        self.node.create_subscription(Imu, "imu", self._on_imu, sensor)
        if odometry:
            from nav_msgs.msg import Odometry

            self.node.create_subscription(Odometry, "odom", self._on_odom, sensor)
        # ros2_control's forward-command controllers subscribe reliably (the system default QoS): match them
        self.publisher = self.node.create_publisher(
            Float64MultiArray, "effort_controller/commands", QoSProfile(depth=1, reliability=ReliabilityPolicy.RELIABLE)
        )
        self._effort = Float64MultiArray()
        from rclpy.executors import SingleThreadedExecutor

        self.executor = SingleThreadedExecutor(context=self.context)
        self.executor.add_node(self.node)
        self._spin_thread = threading.Thread(target=self._spin, name="ros2-driver", daemon=True)
        self._spin_thread.start()

    def _new_report(self) -> RosDriverReport:
        return RosDriverReport()

    def _spin(self) -> None:
        while self.context.ok() and not self._stop:
            self.executor.spin_once(timeout_sec=0.05)

    def refuse(self, topic: str, reason: str) -> None:
        """Count a refused message and log why (at most once a second per topic)."""
        self.report.refused += 1  # type: ignore[attr-defined]
        now = time.monotonic()
        if now - self._last_refusal.get(topic, -math.inf) >= 1.0:
            self._last_refusal[topic] = now
            log.warning("%s: message refused, nothing changed: %s", topic, reason)

    # ------------------------------------------------------------------ ROS callbacks (the executor's thread)
    def _on_odom(self, msg: Any) -> None:
        try:
            self._odom = base_from_odometry(msg)
        except ValueError as e:
            self.refuse("odom", str(e))

    def _on_imu(self, msg: Any) -> None:
        self._imu = imu_from_message(msg)  # NaN passes: a failed IMU is the daemon's estimator's to judge and say

    def _on_joints(self, msg: Any) -> None:
        try:
            q_joints, v_joints = joints_from_message(msg, self.layout)
        except ValueError as e:
            self.refuse("joint_states", str(e))
            return
        t = msg.header.stamp.sec + 1e-9 * msg.header.stamp.nanosec
        layout = self.layout
        if layout.floating and self.odometry:
            if self._odom is None:
                return  # no base yet
            q, v = np.empty(layout.nq), np.empty(layout.nv)
            q[:7], v[:6] = self._odom
            q[layout.idx_q], v[layout.idx_v] = q_joints, v_joints
            measurement = Measurement(t, q, v)
        elif layout.floating:  # the sensor form: the joints and the IMU; the daemon estimates the base
            if self._imu is None:
                return
            measurement = Measurement(t, q_joints, v_joints, dict(self._imu))
        else:
            q, v = np.empty(layout.nq), np.empty(layout.nv)
            q[layout.idx_q], v[layout.idx_v] = q_joints, v_joints
            measurement = Measurement(t, q, v)
        with self._lock:
            self._measurement = measurement
            self._lock.notify_all()
        self.report.measurements += 1  # type: ignore[attr-defined]

    # ------------------------------------------------------------------ the driver SDK's two calls
    def wait_for_robot(self, timeout_s: float = 10.0) -> None:
        """Block until a usable measurement has arrived; TimeoutError says which topics were silent."""
        deadline = time.monotonic() + timeout_s
        while self._measurement is None:
            if time.monotonic() > deadline:
                topics = "joint_states" + (" and odom" if self.odometry else " and imu")
                raise TimeoutError(f"no usable measurement on {topics} within {timeout_s} s")
            time.sleep(0.01)

    def read_state(self) -> DriverState:
        with self._lock:
            if self._measurement is not None and self._measurement.t < self._effort_at:
                self._lock.wait_for(
                    lambda: self._measurement.t >= self._effort_at, timeout=self.fresh_fraction * (self.period or 0.0)
                )
                if self._measurement.t < self._effort_at:
                    self.report.stale_states += 1  # type: ignore[attr-defined]
            m = self._measurement
        if m is None:
            raise ConfigError("read_state before the robot's first measurement (call wait_for_robot)")
        self._ages.add((time.time() - m.t) * 1e6)
        state = DriverState(t=m.t, q=m.q, v=m.v)
        if m.imu is not None:
            state.imu = m.imu  # type: ignore[attr-defined]
        return state

    def apply(self, tau: Array, mode: str) -> None:
        if mode in ("run", "safe_stop"):
            self._effort.data = np.asarray(tau, dtype=float).tolist()
            self._effort_at = time.time()
            self.publisher.publish(self._effort)

    def safe_stop_torque(self, state: Any) -> Array:
        v = np.asarray(state.v)
        joints_v = v if v.shape[0] == self.robot.nu else v[self._dofs]
        return -self.damping * joints_v

    def _finish(self) -> None:
        self.report.state_age_us = percentiles_us(self._ages.values())  # type: ignore[attr-defined]

    def close(self) -> None:
        self._stop = True
        self._spin_thread.join(timeout=2.0)
        self.node.destroy_node()
        self.context.try_shutdown()


def main(config: LaunchConfig, ros_args: list[str], endpoint: str | None, odometry: bool) -> int:
    """Run the driver until SIGINT/SIGTERM; print its report as one JSON line."""
    logging.basicConfig(level=logging.INFO, format="%(asctime)s ros2 driver %(levelname)s %(message)s")
    driver = RosRobotDriver(config, endpoint, odometry=odometry, ros_args=ros_args)
    try:
        driver.wait_for_robot(30.0)
        return driver.main()
    except TimeoutError as e:
        log.error("%s", e)
        return 2
    finally:
        driver.close()
