"""The ROS 2 edge with real parts: a real daemon and bridge, ``idcontrol ros2`` as its own process, and rclpy nodes
in the test on loopback (each test on its own ROS_DOMAIN_ID, discovery kept to this host)."""

from __future__ import annotations

import contextlib
import itertools
import math
import os
import subprocess
import sys
import threading
import time
from pathlib import Path

import msgpack
import numpy as np
import pytest
import zmq

pytest.importorskip("rclpy", reason="the ros2 extra is not installed")

import rclpy  # noqa: E402
from geometry_msgs.msg import Twist, WrenchStamped  # noqa: E402
from nav_msgs.msg import Odometry  # noqa: E402
from rclpy.executors import SingleThreadedExecutor  # noqa: E402
from rclpy.qos import HistoryPolicy, QoSProfile, ReliabilityPolicy  # noqa: E402
from sensor_msgs.msg import JointState  # noqa: E402
from std_srvs.srv import Trigger  # noqa: E402
from trajectory_msgs.msg import JointTrajectory, JointTrajectoryPoint  # noqa: E402

from idcontrol.client import AdminClient  # noqa: E402
from idcontrol.logs.schema import decode_tick_record  # noqa: E402
from tests.test_launch import launch_file, stop, wait_for  # noqa: E402

JOINTS = (
    "LF_HAA",
    "LF_HFE",
    "LF_KFE",
    "LH_HAA",
    "LH_HFE",
    "LH_KFE",
    "RF_HAA",
    "RF_HFE",
    "RF_KFE",
    "RH_HAA",
    "RH_HFE",
    "RH_KFE",
)
_domains = itertools.count(int(os.getpid()) % 50 * 4 + 10)


@pytest.fixture
def ros_domain(monkeypatch) -> int:
    """A ROS_DOMAIN_ID of this test's own (child processes inherit it), discovery on this host only."""
    domain = next(_domains)
    monkeypatch.setenv("ROS_DOMAIN_ID", str(domain))
    monkeypatch.setenv("ROS_AUTOMATIC_DISCOVERY_RANGE", "LOCALHOST")
    monkeypatch.delenv("ROS_LOCALHOST_ONLY", raising=False)  # deprecated since Jazzy: the range above replaces it
    return domain


class Listener:
    """An rclpy node of the test's own, spinning in a thread: keeps every message of the topics it subscribes."""

    def __init__(self) -> None:
        self.context = rclpy.Context()
        rclpy.init(context=self.context)
        self.node = rclpy.create_node("test_listener", context=self.context)
        self.messages: dict[str, list] = {}
        self.arrivals: dict[str, list[float]] = {}
        self.executor = SingleThreadedExecutor(context=self.context)
        self.executor.add_node(self.node)
        self._stop = threading.Event()
        self.thread = threading.Thread(target=self._spin, daemon=True)
        self.thread.start()

    def _spin(self) -> None:
        while not self._stop.is_set():
            self.executor.spin_once(timeout_sec=0.02)

    #: best effort, as the node's state topics: a deep queue, so that the test's own Python callbacks lose nothing
    DEEP = QoSProfile(depth=5000, history=HistoryPolicy.KEEP_LAST, reliability=ReliabilityPolicy.BEST_EFFORT)

    def subscribe(self, kind, topic: str, qos=DEEP) -> None:
        self.messages[topic], self.arrivals[topic] = [], []

        def keep(msg, topic=topic):
            self.messages[topic].append(msg)
            self.arrivals[topic].append(time.monotonic())

        self.node.create_subscription(kind, topic, keep, qos)

    def wait(self, topic: str, count: int = 1, timeout: float = 20.0) -> list:
        deadline = time.monotonic() + timeout
        while len(self.messages[topic]) < count and time.monotonic() < deadline:
            time.sleep(0.02)
        assert len(self.messages[topic]) >= count, f"{topic}: {len(self.messages[topic])} messages of {count}"
        return self.messages[topic]

    def call(self, kind, name: str, timeout: float = 10.0):
        client = self.node.create_client(kind, name)
        assert client.wait_for_service(timeout_sec=timeout), f"no service {name}"
        future = client.call_async(kind.Request())
        deadline = time.monotonic() + timeout
        while not future.done() and time.monotonic() < deadline:
            time.sleep(0.01)
        return future.result()

    def close(self) -> None:
        self._stop.set()
        self.thread.join()
        self.node.destroy_node()
        self.context.try_shutdown()


class Telemetry:
    """The daemon's tick records, decoded, with their arrival time (a ZeroMQ subscriber in a thread)."""

    def __init__(self, endpoint: str) -> None:
        self.socket = zmq.Context.instance().socket(zmq.SUB)
        self.socket.setsockopt(zmq.SUBSCRIBE, b"")
        self.socket.setsockopt(zmq.LINGER, 0)
        self.socket.connect(endpoint)
        self.records: list[tuple[float, dict]] = []
        self._stop = threading.Event()
        self.thread = threading.Thread(target=self._drain, daemon=True)
        self.thread.start()

    def _drain(self) -> None:
        while not self._stop.is_set():
            if self.socket.poll(20):
                self.records.append((time.monotonic(), decode_tick_record(msgpack.unpackb(self.socket.recv()))))

    def since(self, t: float) -> list[dict]:
        return [r for at, r in list(self.records) if at >= t]

    def close(self) -> None:
        self._stop.set()
        self.thread.join()
        self.socket.close(linger=0)


def spawn(*args: str, stderr=subprocess.DEVNULL) -> subprocess.Popen:
    env = {**os.environ, "OPENBLAS_NUM_THREADS": "1", "OMP_NUM_THREADS": "1"}
    return subprocess.Popen(
        [sys.executable, "-m", "idcontrol", *args], stdout=subprocess.DEVNULL, stderr=stderr, env=env
    )


@contextlib.contextmanager
def daemon_bridge_node(
    tmp_path: Path,
    name: str,
    *node_args: str,
    start: bool = True,
    daemon_args: tuple = (),
    endpoint_lines: str = "",
    **replacements: str,
):
    """A daemon and its lock-step bridge for a shipped launch file (``endpoint_lines``: its [endpoints]), started
    (``start``), and ``idcontrol ros2`` beside them (its log lines in ``tmp_path/node.log``); yields (admin,
    endpoints, launch path)."""
    path, endpoints = launch_file(tmp_path, name, endpoint_lines, **replacements)
    log = open(tmp_path / "node.log", "w")  # noqa: SIM115
    procs = [spawn("daemon", str(path), *daemon_args)]
    admin = AdminClient(endpoints["admin"], credential_for=endpoints["control"])
    try:
        wait_for(admin, lambda s: True)
        procs.append(spawn("bridge", str(path)))
        wait_for(admin, lambda s: s["bridge_connected"])
        procs.append(spawn("ros2", str(path), *node_args, stderr=log))
        if start:
            admin.start()
        yield admin, endpoints, path
    finally:
        for p in reversed(procs):
            stop(p)
        admin.close()
        log.close()


STREAM = {'name = "hold"': 'name = "stream"'}


def reference_endpoint(tmp_path: Path) -> str:
    """The [endpoints] line of the stream reference's channel, on which the planner publishes."""
    return f'reference = "ipc://{tmp_path / "reference"}"'


@pytest.mark.timing  # counts messages per tick at the daemon's pace: needs a core free for the node and the listener
def test_the_node_publishes_a_real_daemons_ticks_as_joint_states_commands_odometry_and_contact_wrenches(
    tmp_path, ros_domain
):
    """The quadruped standing: joint_states carry the daemon's joints in its order, joint_commands its torques,
    odom the base at standing height, the predicted wrenches on the feet add up to its weight (world frame, N), and
    joint_states arrive for at least 99 % of the daemon's ticks."""
    listener, counter = Listener(), Listener()  # the count on a node of its own: one wait set, one topic
    counter.subscribe(JointState, "joint_states")
    for kind, topic in ((JointState, "joint_commands"), (Odometry, "odom")):
        listener.subscribe(kind, topic)
    for foot in ("LF_foot", "RF_foot", "LH_foot", "RH_foot"):
        listener.subscribe(WrenchStamped, f"contacts/predicted/{foot}")
    try:
        log = tmp_path / "run.mcap"
        with daemon_bridge_node(tmp_path, "quadruped_stand", daemon_args=("--log", str(log))) as (admin, _, _):
            counter.wait("joint_states", 200, timeout=90.0)  # the node's start: rclpy, the robot model
            listener.wait("contacts/predicted/LF_foot", 5)
            t0, ticks0 = time.monotonic(), admin.request("stats")["ticks"]
            n0 = len(counter.messages["joint_states"])
            time.sleep(3.0)
            ticks = admin.request("stats")["ticks"] - ticks0
            received = len(counter.messages["joint_states"]) - n0
            assert time.monotonic() - t0 < 4.0
    finally:
        listener.close()
        counter.close()
    print(f"joint_states: {received} for {ticks} daemon ticks ({100 * received / ticks:.2f} %)")
    assert ticks > 500
    assert received >= 0.99 * ticks
    js = counter.messages["joint_states"][-1]
    assert tuple(js.name) == JOINTS and len(js.position) == len(js.velocity) == 12
    cmd = listener.messages["joint_commands"][-1]
    assert tuple(cmd.name) == JOINTS and len(cmd.effort) == 12 and any(abs(e) > 0.1 for e in cmd.effort)
    odom = listener.messages["odom"][-1]
    assert odom.header.frame_id == "world" and 0.1 < odom.pose.pose.position.z < 1.0
    o = odom.pose.pose.orientation
    assert abs(o.x * o.x + o.y * o.y + o.z * o.z + o.w * o.w - 1.0) < 1e-6 and o.w > 0.99
    fz = sum(
        listener.messages[f"contacts/predicted/{f}"][-1].wrench.force.z
        for f in ("LF_foot", "RF_foot", "LH_foot", "RH_foot")
    )
    from idcontrol.robot.model import RobotModel

    weight = RobotModel("quadruped").total_mass() * 9.81
    assert fz == pytest.approx(weight, rel=0.1)
    check_ros2_export(log, weight)


def check_ros2_export(log: Path, weight_n: float) -> None:
    """``idcontrol log export --ros2`` of the run's log: an MCAP file of profile ros2 whose CDR messages the mcap
    reader decodes back to the log's ticks (joint order, torques, odometry, forces adding up to the weight)."""
    from mcap.reader import make_reader
    from mcap_ros2.decoder import DecoderFactory

    from idcontrol.logs.reader import read_log

    out = log.with_suffix(".ros2.mcap")
    assert (
        subprocess.run(
            [sys.executable, "-m", "idcontrol", "log", "export", str(log), "--ros2"], capture_output=True, timeout=120
        ).returncode
        == 0
    )
    ticks = read_log(log)
    with open(out, "rb") as f:
        reader = make_reader(f, decoder_factories=[DecoderFactory()])
        assert reader.get_header().profile == "ros2"
        decoded: dict[str, list] = {}
        for schema, channel, _message, ros in reader.iter_decoded_messages():
            assert channel.message_encoding == "cdr" and schema.encoding == "ros2msg"
            decoded.setdefault(channel.topic, []).append(ros)
    assert len(decoded["/joint_states"]) == len(decoded["/joint_commands"]) == len(decoded["/odom"]) == len(ticks)
    last = decoded["/joint_commands"][-1]
    assert tuple(last.name) == JOINTS
    np.testing.assert_array_equal(last.effort, ticks.array("tau")[-1])
    np.testing.assert_array_equal([decoded["/odom"][-1].pose.pose.position.z], [ticks.array("q")[-1, 2]])
    fz = sum(
        decoded[f"/contacts/predicted/{f}"][-1].wrench.force.z for f in ("LF_foot", "RF_foot", "LH_foot", "RH_foot")
    )
    assert fz == pytest.approx(weight_n, rel=0.1)


def trajectory(joints, positions, seconds) -> JointTrajectory:
    msg = JointTrajectory()
    msg.joint_names = list(joints)
    for p, t in zip(positions, seconds, strict=True):
        point = JointTrajectoryPoint()
        point.positions = [float(x) for x in p]
        point.time_from_start.sec, point.time_from_start.nanosec = int(t), int(round((t - int(t)) * 1e9))
        msg.points.append(point)
    return msg


def test_a_joint_trajectory_becomes_the_daemons_stream_reference_and_malformed_messages_change_nothing(
    tmp_path, ros_domain
):
    """A JointTrajectory naming two knees reaches the daemon's stream reference through the credentialed reference
    channel (q_ref follows it, the other joints hold); a trajectory with an unknown joint, a wrong-sized point or
    NaN, and a Twist with NaN, are refused with a log line and leave q_ref as it was."""
    listener = Listener()
    pub_traj = listener.node.create_publisher(JointTrajectory, "joint_trajectory", 10)
    pub_twist = listener.node.create_publisher(Twist, "cmd_vel", 10)
    try:
        with daemon_bridge_node(tmp_path, "quadruped_stand", endpoint_lines=reference_endpoint(tmp_path), **STREAM) as (
            admin,
            endpoints,
            _,
        ):
            telemetry = Telemetry(endpoints["telemetry"])
            try:
                while pub_traj.get_subscription_count() == 0:
                    time.sleep(0.05)
                time.sleep(0.5)
                before = telemetry.since(time.monotonic() - 0.3)[-1]["q_ref"].copy()
                knees = ("LF_KFE", "RH_KFE")
                target = before[[JOINTS.index(k) for k in knees]] - 0.1
                pub_traj.publish(trajectory(knees, [target], [0.2]))
                time.sleep(1.5)
                after = telemetry.since(time.monotonic() - 0.3)[-1]["q_ref"]
                moved = [JOINTS.index(k) for k in knees]
                np.testing.assert_allclose(after[moved], target, atol=1e-6)
                others = [i for i in range(12) if i not in moved]
                np.testing.assert_allclose(after[others], before[others], atol=1e-6)
                unauthorized = admin.request("stats")["reference_unauthorized"]
                bad_unknown = trajectory(("LF_KFE", "NO_SUCH_JOINT"), [[0.0, 0.0]], [0.1])
                bad_size = trajectory(knees, [[0.0]], [0.1])
                bad_nan = trajectory(knees, [[math.nan, 0.0]], [0.1])
                nan_twist = Twist()
                nan_twist.linear.x = math.nan
                for msg in (bad_unknown, bad_size, bad_nan):
                    pub_traj.publish(msg)
                pub_twist.publish(nan_twist)
                time.sleep(1.0)
                final = telemetry.since(time.monotonic() - 0.3)[-1]["q_ref"]
                np.testing.assert_allclose(final, after, atol=1e-9)
                assert admin.request("stats")["reference_unauthorized"] == unauthorized == 0
            finally:
                telemetry.close()
    finally:
        listener.close()
    log = (tmp_path / "node.log").read_text()
    assert "joint_trajectory: message refused" in log and "NO_SUCH_JOINT" in log
    assert "cmd_vel: message refused" in log


def test_start_and_stop_are_services_and_the_formulation_a_parameter(tmp_path, ros_domain):
    """~/start starts the daemon (std_srvs/Trigger), ~/stop stops it, and setting the node's formulation parameter
    switches the daemon's formulation; an unknown formulation is refused and the daemon keeps its own. With the
    parameter state_reliability:=reliable a reliable subscriber (which a best-effort publisher never matches) gets
    joint_states."""
    listener = Listener()
    listener.subscribe(JointState, "joint_states", QoSProfile(depth=10, reliability=ReliabilityPolicy.RELIABLE))
    reliable = ("--ros-args", "-p", "state_reliability:=reliable")
    try:
        with daemon_bridge_node(tmp_path, "quadruped_stand", *reliable, start=False) as (admin, _, _):
            reply = listener.call(Trigger, "/idcontrol/start", timeout=60.0)
            assert reply.success, reply.message
            listener.wait("joint_states", 10)
            assert wait_for(admin, lambda s: s["mode"] == "run", 10.0)
            from rcl_interfaces.msg import Parameter, ParameterType, ParameterValue
            from rcl_interfaces.srv import SetParameters

            client = listener.node.create_client(SetParameters, "/idcontrol/set_parameters")
            assert client.wait_for_service(timeout_sec=10.0)

            def set_formulation(name: str):
                request = SetParameters.Request()
                request.parameters = [
                    Parameter(
                        name="formulation", value=ParameterValue(type=ParameterType.PARAMETER_STRING, string_value=name)
                    )
                ]
                future = client.call_async(request)
                deadline = time.monotonic() + 10.0
                while not future.done() and time.monotonic() < deadline:
                    time.sleep(0.01)
                return future.result().results[0]

            assert set_formulation("noslip_lcp").successful
            assert admin.request("status")["formulation"] == "noslip_lcp"
            refused = set_formulation("no_such_formulation")
            assert not refused.successful and "no_such_formulation" in refused.reason
            assert admin.request("status")["formulation"] == "noslip_lcp"
            reply = listener.call(Trigger, "/idcontrol/stop")
            assert reply.success, reply.message
            assert wait_for(admin, lambda s: s["mode"] == "stopped", 10.0)
    finally:
        listener.close()


@pytest.mark.timing
def test_a_twist_changes_the_trots_commanded_speed_within_50_ms(tmp_path, ros_domain):
    """The quadruped trotting: a Twist on cmd_vel reaches the trot (its commanded forward speed starts moving toward
    linear.x) within 50 ms of wall-clock time of the publish, timed by the daemon's monotonic clock at the tick that
    moved it (the system's clock, which this process shares): not when this test's subscriber got the record."""
    listener = Listener()
    pub = listener.node.create_publisher(Twist, "cmd_vel", 10)
    try:
        with daemon_bridge_node(tmp_path, "quadruped_trot") as (admin, endpoints, _):
            telemetry = Telemetry(endpoints["telemetry"])
            try:
                while pub.get_subscription_count() == 0:
                    time.sleep(0.05)
                time.sleep(1.0)
                delays = []
                for speed in (0.3, 0.1, 0.25):
                    before = telemetry.since(time.monotonic() - 0.2)[-1]["reference"]["command"][0]
                    twist = Twist()
                    twist.linear.x = speed
                    sent = time.monotonic()
                    pub.publish(twist)
                    deadline = sent + 2.0
                    reached = None
                    while reached is None and time.monotonic() < deadline:
                        for _, r in list(telemetry.records):  # the daemon's clock: when its tick ran
                            if (
                                r["now"] >= sent
                                and abs(r["reference"]["command"][0] - before) > 1e-9
                                and (r["reference"]["command"][0] - before) * (speed - before) > 0
                            ):
                                reached = r["now"]
                                break
                        time.sleep(0.002)
                    assert reached is not None, f"the trot's command never moved toward {speed}"
                    delays.append(reached - sent)
                    time.sleep(0.5)
            finally:
                telemetry.close()
    finally:
        listener.close()
    print(f"twist -> trot command: {[f'{1e3 * d:.1f} ms' for d in delays]}")
    assert max(delays) < 0.050


def _json_line(proc: subprocess.Popen, key: str) -> dict:
    import json

    out, _ = proc.communicate(timeout=20)
    lines = [line for line in out.decode().splitlines() if line.startswith("{") and key in line]
    assert lines, f"no {key} line in {out.decode()[-2000:]}"
    return json.loads(lines[-1])[key]


@pytest.mark.timing
def test_a_ros2_robot_stands_through_the_driver_sdk_and_its_watchdog_stops_it_when_the_daemon_dies(
    tmp_path, ros_domain
):
    """A MuJoCo robot that speaks only ROS 2 (joint_states, imu, odom out; efforts in on a Float64MultiArray), driven
    by the daemon through the ROS 2 driver in real time at 100 Hz: it stands 6 s in run mode (base height kept within
    3 cm), the driver's report gives the state's age at send (the ROS hop plus the wait for the boundary); when the
    daemon is killed the driver stops the robot itself after 20 late commands in a row."""
    rate = {"rate_hz = 1000.0": "rate_hz = 100.0", "watchdog_ms = 20.0": "watchdog_ms = 250.0"}
    path, endpoints = launch_file(tmp_path, "quadruped_stand", **rate)
    env = {**os.environ, "OPENBLAS_NUM_THREADS": "1", "OMP_NUM_THREADS": "1"}

    def idcontrol(*args: str) -> subprocess.Popen:
        return subprocess.Popen(
            [sys.executable, "-m", "idcontrol", *args],
            stdout=subprocess.PIPE,
            stderr=open(tmp_path / f"{args[-1]}.log", "w"),
            env=env,
        )  # noqa: SIM115

    daemon = subprocess.Popen(
        [sys.executable, "-m", "idcontrol", "daemon", str(path)],
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    admin = AdminClient(endpoints["admin"], credential_for=endpoints["control"])
    robot = idcontrol("ros2", str(path), "--role", "sim-robot")
    driver = None
    try:
        wait_for(admin, lambda s: True, 120.0)
        driver = idcontrol("ros2", str(path), "--role", "driver", "--odometry")
        wait_for(admin, lambda s: s["bridge_connected"], 60.0)
        telemetry = Telemetry(endpoints["telemetry"])
        try:
            time.sleep(0.5)
            z0 = telemetry.records[-1][1]["q"][2]
            admin.start()
            time.sleep(6.0)
            status = admin.request("status")
            stats = admin.request("stats")
            run = [r for _, r in telemetry.records if r["mode"] == "run"]
        finally:
            telemetry.close()
        assert status["mode"] == "run", (status["reason"], status["last_watchdog_gap_ms"], stats["interventions"])
        assert not stats["fell"]
        heights = np.array([r["q"][2] for r in run])
        assert len(run) > 0.5 * 6.0 * 100, len(run)
        assert np.all(np.abs(heights - z0) < 0.03), (heights.min(), heights.max(), z0)
        daemon.kill()
        daemon.wait()
        time.sleep(1.0)
        driver.send_signal(15)
        report = _json_line(driver, "bridge")
        robot.send_signal(15)
        counts = _json_line(robot, "sim_robot")
    finally:
        for p in (driver, robot, daemon):
            if p is not None:
                stop(p)
        admin.close()
    print(
        f"ROS 2 robot at 100 Hz: driver round trip (ZeroMQ) {report['roundtrip_us']}, state age at send "
        f"{report['state_age_us']}, {report['commands']} commands, {report['late_commands']} late, "
        f"{report['stale_states']} stale states; "
        f"robot {counts}"
    )
    assert report["safe_stops"] == 1 and report["max_late_in_a_row"] >= 20
    assert report["refused"] == 0 and counts["refused"] == 0
    assert counts["efforts"] > 0.5 * 6.0 * 100
    assert report["state_age_us"]["p50"] < 10000.0  # younger than one period at the median


def test_without_rclpy_the_command_says_which_extra_to_install():
    """``idcontrol ros2`` on an installation without rclpy exits 2 with a message naming the ros2 extra."""
    code = (
        "import sys; sys.modules['rclpy'] = None\n"
        "from idcontrol.tools.cli import main\n"
        "sys.exit(main(['ros2', 'launch/quadruped_stand.toml']))"
    )
    done = subprocess.run(
        [sys.executable, "-c", code],
        capture_output=True,
        text=True,
        timeout=120,
        cwd=Path(__file__).resolve().parents[1],
    )
    assert done.returncode == 2
    assert "rclpy" in done.stderr and "pip install 'idcontrol[ros2]'" in done.stderr
