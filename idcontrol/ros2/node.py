"""``idcontrol ros2 LAUNCH_FILE``: the daemon of a launch file as a ROS 2 node (docs/ros2.md).

The node is a client of the daemon's protocol, beside it like the live view: it subscribes to the telemetry (the
daemon builds its records only while someone listens; a slow node loses records, it never slows the tick),
speaks the admin channel with the daemon's credential, and publishes the planner's targets on the reference channel
with it. Topic names are relative (a namespace and ``--ros-args -r FROM:=TO`` remap them, as for any node).

Published (state: sensor-data QoS, best effort, depth 5, or the parameters ``state_reliability`` and ``state_depth``;
see :data:`TOPICS`):
``joint_states`` (``sensor_msgs/JointState``: actuated joints' position rad, velocity rad/s), ``joint_commands``
(``JointState``: each tick's torque as ``effort``, N·m), ``odom`` (``nav_msgs/Odometry``: base pose in the world,
twist in the base frame; floating base only), ``contacts/predicted/<sphere>`` and ``contacts/sensed/<sphere>``
(``geometry_msgs/WrenchStamped``, world frame, N; at ``contact_rate_hz``), ``diagnostics``
(``diagnostic_msgs/DiagnosticArray``: status and stats, at ``diagnostics_rate_hz``).

Subscribed (reliable, depth 10): ``joint_trajectory`` (``trajectory_msgs/JointTrajectory``: the ``stream``
reference, sampled at ``reference_rate_hz`` and sent on the reference channel), ``cmd_vel``
(``geometry_msgs/Twist``: the trot's ``forward_speed`` = linear.x, ``lateral_speed`` = linear.y, ``yaw_rate`` =
angular.z, through ``set_reference``). Services (``std_srvs/Trigger``): ``~/start``, ``~/stop``. Parameters:
``formulation`` (str) and ``kp``, ``kd`` (N·m/rad, N·m·s/rad, ≥ 0) go to the daemon when set. A message the node
cannot use (wrong size, unknown joint, NaN) is refused with a log line and changes nothing.
"""

from __future__ import annotations

import math
import threading
import time
from dataclasses import dataclass
from typing import Any

import msgpack
import numpy as np
import zmq
from numpy.typing import NDArray

from idcontrol.client import AdminClient, ReferencePublisher
from idcontrol.errors import ConfigError, IdControlError, ProtocolError
from idcontrol.logs.schema import decode_tick_record
from idcontrol.ros2 import require_rclpy
from idcontrol.settings import LaunchConfig

Array = NDArray[np.float64]

#: Topic (relative name) -> message type, as published and subscribed (docs/ros2.md lists them with their QoS).
TOPICS = {
    "joint_states": "sensor_msgs/msg/JointState",
    "joint_commands": "sensor_msgs/msg/JointState",
    "odom": "nav_msgs/msg/Odometry",
    "contacts/predicted/<sphere>": "geometry_msgs/msg/WrenchStamped",
    "contacts/sensed/<sphere>": "geometry_msgs/msg/WrenchStamped",
    "diagnostics": "diagnostic_msgs/msg/DiagnosticArray",
    "joint_trajectory": "trajectory_msgs/msg/JointTrajectory",
    "cmd_vel": "geometry_msgs/msg/Twist",
}
TROT_TWIST = ("forward_speed", "lateral_speed", "yaw_rate")


@dataclass(frozen=True)
class RobotNames:
    """What the node names: actuated joints (``tau`` order) and where they sit in q and v, the contact spheres.

    idx_q, idx_v : (nu,) indices of the actuated joints in q and v.  floating : q starts with the base's 7.
    q_standing : (nu,) the standing posture's joint positions, rad (a trajectory's unnamed joints hold them).
    lower, upper : (nu,) joint position limits, rad.
    """

    robot: str
    joints: tuple[str, ...]
    spheres: tuple[str, ...]
    idx_q: NDArray[np.intp]
    idx_v: NDArray[np.intp]
    floating: bool
    base_frame: str
    q_standing: Array

    @classmethod
    def of(cls, robot_name: str) -> RobotNames:
        from idcontrol.robot.model import RobotModel

        robot = RobotModel(robot_name)
        body = [f.name for f in robot.model.frames if str(f.type) == "BODY" and f.parentJoint == 1]
        base = str(body[0]) if body and robot.floating_base else "base"  # the URDF's root link
        return cls(
            robot.name,
            tuple(robot.actuated_joints),
            tuple(robot.sphere_names),
            np.asarray(robot.actuated_idx_q),
            np.asarray(robot.actuated_dofs),
            bool(robot.floating_base),
            base,
            np.asarray(robot.standing_configuration())[robot.actuated_idx_q].copy(),
        )


class Refused(IdControlError):
    """A ROS message the node cannot use (the log line says why; nothing changed)."""


# ---------------------------------------------------------------------------------------------------- trajectory
@dataclass(frozen=True)
class Trajectory:
    """A ``JointTrajectory`` in the daemon's joint order. t_s : (m,) time from start, s, strictly increasing;
    q, qd, qdd : (m, nu) rad, rad/s, rad/s² (joints the message did not name hold their ``hold`` position)."""

    t_s: Array
    q: Array
    qd: Array
    qdd: Array

    def sample(self, t: float) -> tuple[Array, Array, Array]:
        """The target at ``t`` s from the start: positions interpolated linearly, velocities and accelerations
        interpolated; before the first point the first, after the last the last with zero velocity."""
        if t >= self.t_s[-1]:
            return self.q[-1], np.zeros_like(self.q[-1]), np.zeros_like(self.q[-1])
        if t <= self.t_s[0]:
            return self.q[0], self.qd[0], self.qdd[0]
        i = int(np.searchsorted(self.t_s, t)) - 1
        a = (t - self.t_s[i]) / (self.t_s[i + 1] - self.t_s[i])
        return tuple((1 - a) * x[i] + a * x[i + 1] for x in (self.q, self.qd, self.qdd))  # type: ignore[return-value]


def trajectory_from_message(msg: Any, names: RobotNames, hold: Array) -> Trajectory:
    """Check a ``trajectory_msgs/JointTrajectory`` and put it in the daemon's joint order; Refused says why.

    hold : (nu,) rad, positions of the joints the message does not name.
    """
    joints = list(msg.joint_names)
    unknown = sorted(set(joints) - set(names.joints))
    if unknown:
        raise Refused(f"unknown joints {unknown}; the robot's actuated joints are {list(names.joints)}")
    if len(set(joints)) != len(joints) or not joints:
        raise Refused(f"joint_names must be distinct and not empty, got {joints}")
    if not msg.points:
        raise Refused("a trajectory without points")
    cols = np.asarray([names.joints.index(j) for j in joints], dtype=np.intp)
    m, nu, n = len(msg.points), len(names.joints), len(joints)
    t_s = np.empty(m)
    q = np.tile(hold, (m, 1))
    qd, qdd = np.zeros((m, nu)), np.zeros((m, nu))
    for k, p in enumerate(msg.points):
        t_s[k] = p.time_from_start.sec + 1e-9 * p.time_from_start.nanosec
        if len(p.positions) != n:
            raise Refused(f"point {k} has {len(p.positions)} positions for {n} joints")
        q[k, cols] = p.positions
        for out, values, what in ((qd, p.velocities, "velocities"), (qdd, p.accelerations, "accelerations")):
            if len(values) not in (0, n):
                raise Refused(f"point {k} has {len(values)} {what} for {n} joints (give none or one per joint)")
            if len(values):
                out[k, cols] = values
    if not (np.all(np.isfinite(q)) and np.all(np.isfinite(qd)) and np.all(np.isfinite(qdd))):
        raise Refused("a trajectory with NaN or infinity")
    if m > 1 and not np.all(np.diff(t_s) > 0):
        raise Refused("time_from_start must increase strictly from point to point")
    return Trajectory(t_s, q, qd, qdd)


def twist_options(msg: Any) -> dict[str, float]:
    """A ``geometry_msgs/Twist`` as the trot's run-time options (m/s, m/s, rad/s); Refused for NaN or a twist the
    trot cannot follow (linear.z, angular.x, angular.y not zero)."""
    values = (msg.linear.x, msg.linear.y, msg.angular.z)
    if not all(math.isfinite(v) for v in (*values, msg.linear.z, msg.angular.x, msg.angular.y)):
        raise Refused("a twist with NaN or infinity")
    if msg.linear.z != 0.0 or msg.angular.x != 0.0 or msg.angular.y != 0.0:
        raise Refused("the trot follows linear.x, linear.y and angular.z; linear.z, angular.x, angular.y must be 0")
    return dict(zip(TROT_TWIST, (float(v) for v in values), strict=True))


# ---------------------------------------------------------------------------------------------------- the node
@dataclass
class NodeCounters:
    """What the node did (for tests and the diagnostics): records read, messages published, messages refused."""

    records: int = 0
    joint_states: int = 0
    refused: int = 0
    references_sent: int = 0
    twists_applied: int = 0


class IdControlNode:
    """The node (see the module docstring). ``args``: ROS arguments (``--ros-args ...``) for ``rclpy.init``."""

    def __init__(self, config: LaunchConfig, args: list[str] | None = None, name: str = "idcontrol") -> None:
        require_rclpy()
        import rclpy
        from rclpy.node import Node

        if not config.endpoints.telemetry:
            raise ConfigError(f"{config.path}: the ROS 2 node needs the daemon's telemetry ([endpoints] telemetry)")
        self.config = config
        self.names = RobotNames.of(config.robot)
        self.counters = NodeCounters()
        self.context = rclpy.Context()
        rclpy.init(args=args, context=self.context)
        self.node = Node(name, context=self.context)
        self.log = self.node.get_logger()
        self._declare_parameters()
        self.admin = AdminClient.for_launch(config, timeout=1.0)
        self.reference = ReferencePublisher.for_launch(config) if config.endpoints.reference else None
        self._trajectory: Trajectory | None = None
        self._trajectory_t0 = 0.0
        self._hold = self.names.q_standing.copy()
        self._last_refusal: dict[str, float] = {}
        self._stop = threading.Event()
        self._make_publishers()
        self._make_subscriptions()
        self._telemetry_thread = threading.Thread(target=self._telemetry_loop, name="ros2-telemetry", daemon=True)

    # ------------------------------------------------------------------ set-up
    def _declare_parameters(self) -> None:
        from rcl_interfaces.msg import ParameterDescriptor

        p = self.node.declare_parameter
        self.contact_rate_hz = float(p("contact_rate_hz", 50.0).value)
        self.diagnostics_rate_hz = float(p("diagnostics_rate_hz", 1.0).value)
        self.reference_rate_hz = float(p("reference_rate_hz", 200.0).value)
        self.world_frame = str(p("world_frame", "world").value)
        self.state_reliability = str(p("state_reliability", "best_effort").value)
        self.state_depth = int(p("state_depth", 5).value)
        if self.state_reliability not in ("best_effort", "reliable") or not 1 <= self.state_depth <= 10_000:
            raise ConfigError(
                f"parameter state_reliability must be best_effort or reliable (got "
                f"{self.state_reliability!r}), state_depth in 1..10000 "
                f"(got {self.state_depth})"
            )
        self.base_frame = str(p("base_frame", self.names.base_frame).value)
        for key, rate in (
            ("contact_rate_hz", self.contact_rate_hz),
            ("diagnostics_rate_hz", self.diagnostics_rate_hz),
            ("reference_rate_hz", self.reference_rate_hz),
        ):
            if not 0.0 < rate <= 1000.0:
                raise ConfigError(f"parameter {key} must be in (0, 1000] Hz, got {rate}")
        # the daemon's settings: set them (ros2 param set) and the node asks the daemon; the values shown are what
        # the node last set, "" / -1 for not set by it
        p("formulation", "", ParameterDescriptor(description="the daemon's formulation (set_formulation)"))
        p("kp", -1.0, ParameterDescriptor(description="joint stiffness N·m/rad, all joints (set_gains)"))
        p("kd", -1.0, ParameterDescriptor(description="joint damping N·m·s/rad, all joints (set_gains)"))
        self.node.add_on_set_parameters_callback(self._on_parameters)

    def _make_publishers(self) -> None:
        from diagnostic_msgs.msg import DiagnosticArray
        from geometry_msgs.msg import WrenchStamped
        from nav_msgs.msg import Odometry
        from rclpy.qos import QoSProfile, ReliabilityPolicy
        from sensor_msgs.msg import JointState

        reliability = (
            ReliabilityPolicy.BEST_EFFORT if self.state_reliability == "best_effort" else ReliabilityPolicy.RELIABLE
        )
        node, sensor = self.node, QoSProfile(depth=self.state_depth, reliability=reliability)  # default: sensor data
        self.pub_joints = node.create_publisher(JointState, "joint_states", sensor)
        self.pub_commands = node.create_publisher(JointState, "joint_commands", sensor)
        self.pub_odom = node.create_publisher(Odometry, "odom", sensor) if self.names.floating else None
        self.pub_predicted = {
            s: node.create_publisher(WrenchStamped, f"contacts/predicted/{s}", sensor) for s in self.names.spheres
        }
        self.pub_sensed = {
            s: node.create_publisher(WrenchStamped, f"contacts/sensed/{s}", sensor) for s in self.names.spheres
        }
        self.pub_diagnostics = node.create_publisher(DiagnosticArray, "diagnostics", 10)
        self._msg_joints, self._msg_commands = JointState(), JointState()
        self._msg_joints.name = self._msg_commands.name = list(self.names.joints)
        self._msg_odom = Odometry()
        self._msg_odom.header.frame_id, self._msg_odom.child_frame_id = self.world_frame, self.base_frame

    def _make_subscriptions(self) -> None:
        from geometry_msgs.msg import Twist
        from std_srvs.srv import Trigger
        from trajectory_msgs.msg import JointTrajectory

        node = self.node
        node.create_subscription(Twist, "cmd_vel", self._on_twist, 10)
        if self.reference is not None:
            node.create_subscription(JointTrajectory, "joint_trajectory", self._on_trajectory, 10)
            node.create_timer(1.0 / self.reference_rate_hz, self._send_reference)
        else:
            self.log.info("the launch file has no [endpoints] reference: joint_trajectory is not subscribed")
        node.create_service(Trigger, "~/start", self._on_start)
        node.create_service(Trigger, "~/stop", self._on_stop)
        node.create_timer(1.0 / self.diagnostics_rate_hz, self._publish_diagnostics)

    def refuse(self, topic: str, reason: str) -> None:
        """Count a refused message and log why (at most once a second per topic)."""
        self.counters.refused += 1
        now = time.monotonic()
        if now - self._last_refusal.get(topic, -math.inf) >= 1.0:
            self._last_refusal[topic] = now
            self.log.warning(f"{topic}: message refused, nothing changed: {reason}")

    # ------------------------------------------------------------------ ROS -> daemon
    def _on_trajectory(self, msg: Any) -> None:
        try:
            self._trajectory = trajectory_from_message(msg, self.names, self._hold)
        except Refused as e:
            self.refuse("joint_trajectory", str(e))
            return
        self._trajectory_t0 = time.monotonic()

    def _send_reference(self) -> None:
        if self._trajectory is None or self.reference is None:
            return
        q, qd, qdd = self._trajectory.sample(time.monotonic() - self._trajectory_t0)
        self.reference.publish(q, qd, qdd, time.monotonic())
        self.counters.references_sent += 1

    def _on_twist(self, msg: Any) -> None:
        try:
            options = twist_options(msg)
        except Refused as e:
            self.refuse("cmd_vel", str(e))
            return
        try:
            self.admin.request("set_reference", name="trot", options=options)
        except (ProtocolError, TimeoutError) as e:  # not trotting, or out of range: the daemon says which
            self.refuse("cmd_vel", f"the daemon refused it: {e}")
            return
        self.counters.twists_applied += 1

    def _admin_trigger(self, request: str, response: Any) -> Any:
        try:
            reply = self.admin.start() if request == "start" else self.admin.request(request, reason="ros2 ~/stop")
            response.success, response.message = True, f"mode {reply.get('mode')}"
        except (ProtocolError, TimeoutError) as e:
            response.success, response.message = False, str(e)
        return response

    def _on_start(self, _request: Any, response: Any) -> Any:
        return self._admin_trigger("start", response)

    def _on_stop(self, _request: Any, response: Any) -> Any:
        return self._admin_trigger("stop", response)

    def _on_parameters(self, params: list[Any]) -> Any:
        from rcl_interfaces.msg import SetParametersResult

        gains: dict[str, float] = {}
        for p in params:
            try:
                if p.name == "formulation":
                    self.admin.request("set_formulation", name=str(p.value))
                elif p.name in ("kp", "kd"):
                    value = float(p.value)
                    if not (math.isfinite(value) and value >= 0.0):
                        return SetParametersResult(successful=False, reason=f"{p.name} must be finite and >= 0")
                    gains[p.name] = value
            except (ProtocolError, TimeoutError) as e:
                return SetParametersResult(successful=False, reason=str(e))
            except (TypeError, ValueError) as e:
                return SetParametersResult(successful=False, reason=f"{p.name}: {e}")
        if gains:
            try:
                self.admin.request("set_gains", **gains)
            except (ProtocolError, TimeoutError) as e:
                return SetParametersResult(successful=False, reason=str(e))
        return SetParametersResult(successful=True)

    # ------------------------------------------------------------------ daemon -> ROS
    def _publish_diagnostics(self) -> None:
        from diagnostic_msgs.msg import DiagnosticArray, DiagnosticStatus, KeyValue

        try:
            status = self.admin.request("status", timeout=0.5)
            stats = self.admin.request("stats", timeout=0.5)
        except (ProtocolError, TimeoutError) as e:
            status, stats = None, {"error": str(e)}
        d = DiagnosticStatus(name=f"idcontrol: {self.names.robot}", hardware_id=self.names.robot)
        if status is None:
            d.level, d.message = DiagnosticStatus.STALE, "the daemon does not answer"
        else:
            healthy = status["mode"] in ("idle", "run") and not status.get("fell")
            d.level = DiagnosticStatus.OK if healthy else DiagnosticStatus.WARN
            d.message = f"{status['mode']}: {status.get('reason', '')}"
        values = {**(status or {}), **stats}
        d.values = [KeyValue(key=k, value=_short(v)) for k, v in sorted(values.items())]
        d.values.append(KeyValue(key="ros2_node", value=_short(self.counters.__dict__)))
        msg = DiagnosticArray(status=[d])
        msg.header.stamp = self.node.get_clock().now().to_msg()
        self.pub_diagnostics.publish(msg)

    def _telemetry_loop(self) -> None:
        context = zmq.Context.instance()
        sub = context.socket(zmq.SUB)
        sub.setsockopt(zmq.LINGER, 0)
        sub.setsockopt(zmq.RCVHWM, 2000)
        sub.setsockopt(zmq.SUBSCRIBE, b"")
        if self.config.curve_keys:
            from idcontrol.security import KeyDirectory

            KeyDirectory(self.config.curve_keys).make_client(sub)
        sub.connect(self.config.endpoints.telemetry)
        contact_every = 0.0 if self.contact_rate_hz <= 0 else 1.0 / self.contact_rate_hz
        next_contacts = 0.0
        try:
            while not self._stop.is_set():
                if not sub.poll(100):
                    continue
                raw = sub.recv()
                try:
                    record = decode_tick_record(msgpack.unpackb(raw, raw=False))
                    now = time.monotonic()
                    with_contacts = now >= next_contacts
                    if with_contacts:
                        next_contacts = now + contact_every
                    self.publish_record(record, with_contacts)
                except Exception as e:  # a record the node cannot use: skip it, keep serving
                    self.refuse("telemetry", f"{type(e).__name__}: {e}")
        finally:
            sub.close(linger=0)

    def publish_record(self, record: dict[str, Any], with_contacts: bool) -> None:
        """Publish one tick record (decoded: arrays as numpy) as joint states, command, odometry, wrenches."""
        n = self.names
        q, qd, tau = record["q"], record["qd"], record["tau"]
        stamp = self.node.get_clock().now().to_msg()
        self.counters.records += 1
        js = self._msg_joints
        js.header.stamp = stamp
        js.position = q[n.idx_q].tolist()
        js.velocity = qd[n.idx_v].tolist()
        self.pub_joints.publish(js)
        self.counters.joint_states += 1
        cmd = self._msg_commands
        cmd.header.stamp = stamp
        cmd.effort = tau.tolist()
        self.pub_commands.publish(cmd)
        q_ref = record.get("q_ref")
        if q_ref is not None and self._trajectory is None:
            self._hold = np.array(q_ref)  # a trajectory's unnamed joints hold where the reference is
        if self.pub_odom is not None:
            od = self._msg_odom
            od.header.stamp = stamp
            pose, twist = od.pose.pose, od.twist.twist
            pose.position.x, pose.position.y, pose.position.z = (float(x) for x in q[:3])
            o = pose.orientation
            o.x, o.y, o.z, o.w = (float(x) for x in q[3:7])
            twist.linear.x, twist.linear.y, twist.linear.z = (float(x) for x in qd[:3])
            twist.angular.x, twist.angular.y, twist.angular.z = (float(x) for x in qd[3:6])
            self.pub_odom.publish(od)
        if with_contacts:
            self._publish_contacts(record, stamp)

    def _publish_contacts(self, record: dict[str, Any], stamp: Any) -> None:
        predicted = predicted_force_per_sphere(record, self.names.spheres)
        sensed = record.get("sensed_forces")
        for i, sphere in enumerate(self.names.spheres):
            if predicted is not None:
                self.pub_predicted[sphere].publish(self._wrench(predicted[i], stamp))
            if sensed is not None:
                self.pub_sensed[sphere].publish(self._wrench(np.asarray(sensed).reshape(-1, 3)[i], stamp))

    def _wrench(self, force_in_world: Array, stamp: Any) -> Any:
        from geometry_msgs.msg import WrenchStamped

        w = WrenchStamped()
        w.header.stamp, w.header.frame_id = stamp, self.world_frame
        w.wrench.force.x, w.wrench.force.y, w.wrench.force.z = (float(x) for x in force_in_world)
        return w

    # ------------------------------------------------------------------ running
    def spin(self, stop: threading.Event | None = None) -> None:
        """Serve until ``stop`` is set (or SIGINT/SIGTERM through rclpy's handlers)."""
        from rclpy.executors import SingleThreadedExecutor

        stop = stop or threading.Event()
        executor = SingleThreadedExecutor(context=self.context)
        executor.add_node(self.node)
        self._telemetry_thread.start()
        try:
            while not stop.is_set() and self.context.ok():
                executor.spin_once(timeout_sec=0.05)
        finally:
            self.close()

    def close(self) -> None:
        self._stop.set()
        if self._telemetry_thread.is_alive():
            self._telemetry_thread.join(timeout=2.0)
        self.admin.close()
        if self.reference is not None:
            self.reference.close()
        self.node.destroy_node()
        if self.context.ok():
            self.context.try_shutdown()


def predicted_force_per_sphere(record: dict[str, Any], spheres: tuple[str, ...]) -> Array | None:
    """(k, 3) predicted force on the robot summed per contact sphere, world frame, N (the record's contacts are
    labelled ``sphere/surface``); None outside run mode or when the solve failed."""
    forces, labels = record.get("force_world"), record.get("contact_ids")
    if forces is None or labels is None or len(forces) != len(labels):
        return None
    out = np.zeros((len(spheres), 3))
    for label, f in zip(labels, np.asarray(forces).reshape(-1, 3), strict=True):
        sphere = str(label).split("/", 1)[0]
        if sphere in spheres:
            out[spheres.index(sphere)] += f
    return out


def _short(value: Any) -> str:
    text = str(value)
    return text if len(text) <= 200 else text[:197] + "..."


def main(config: LaunchConfig, ros_args: list[str] | None = None) -> int:
    """Run the node for ``config``'s daemon until SIGINT/SIGTERM."""
    import signal

    stop = threading.Event()
    node = IdControlNode(config, ["idcontrol", *(ros_args or [])])
    for sig in (signal.SIGINT, signal.SIGTERM):
        signal.signal(sig, lambda *_: stop.set())
    node.log.info(f"serving the daemon of {config.path} ({node.names.robot}, {len(node.names.joints)} joints)")
    node.spin(stop)
    return 0
