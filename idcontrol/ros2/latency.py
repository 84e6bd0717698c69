"""What ROS 2 adds to a control period, measured: ``idcontrol ros2 LAUNCH_FILE --role latency``.

A probe node publishes a ``sensor_msgs/JointState`` (the robot's joints, sensor-data QoS) every period, and an echo
node in another process answers each one at once with a ``std_msgs/Float64MultiArray`` of nu efforts (reliable,
depth 1), the two messages and QoS of a ROS 2 robot and its driver (:mod:`idcontrol.ros2.robot`); the echo's last
element carries the probe's sequence number back (a measuring device's own field; a robot's effort message has
exactly nu). The round trip, probe publish → answer received, is what the two ROS hops add to each period of a ROS 2
robot driven by the daemon; a period is held when its answer arrives before the next period starts.
"""

from __future__ import annotations

import os
import subprocess
import sys
import time
from typing import Any

import numpy as np

from idcontrol.ros2 import require_rclpy
from idcontrol.timing import percentiles_us


def echo(nu: int, seconds: float) -> int:
    """The echo node: answer every JointState with nu + 1 values (efforts, then the probe's sequence number)."""
    require_rclpy()
    import rclpy
    from rclpy.qos import QoSProfile, ReliabilityPolicy, qos_profile_sensor_data
    from sensor_msgs.msg import JointState
    from std_msgs.msg import Float64MultiArray

    from idcontrol.ros2 import Spinner

    rclpy.init()
    node = rclpy.create_node("idcontrol_latency_echo")
    pub = node.create_publisher(
        Float64MultiArray, "effort_controller/commands", QoSProfile(depth=1, reliability=ReliabilityPolicy.RELIABLE)
    )
    answer = Float64MultiArray()
    efforts = [0.0] * nu

    def on_joints(msg: Any) -> None:
        answer.data = [*efforts, float(msg.header.stamp.nanosec)]
        pub.publish(answer)

    node.create_subscription(JointState, "joint_states", on_joints, qos_profile_sensor_data)
    spinner = Spinner(node, rclpy.get_default_context(), "latency-echo")
    spinner.thread.join(timeout=seconds)
    spinner.stop()
    node.destroy_node()
    rclpy.try_shutdown()
    return 0


def measure(nu: int, rates_hz: list[float], seconds: float, joint_names: list[str] | None = None) -> list[dict]:
    """The round trip at each rate (an echo process for the run): per rate, p50/p99/max µs and the fraction of
    periods whose answer came within the period. Returns one dict per rate."""
    require_rclpy()
    import rclpy
    from rclpy.qos import QoSProfile, ReliabilityPolicy, qos_profile_sensor_data
    from sensor_msgs.msg import JointState
    from std_msgs.msg import Float64MultiArray

    from idcontrol.ros2 import Spinner

    total = sum(seconds + 1.0 for _ in rates_hz) + 10.0
    proc = subprocess.Popen(
        [sys.executable, "-m", "idcontrol.ros2.latency", "--echo", str(nu), str(total)], env=dict(os.environ)
    )
    context = rclpy.Context()
    rclpy.init(context=context)
    node = rclpy.create_node("idcontrol_latency_probe", context=context)
    pub = node.create_publisher(JointState, "joint_states", qos_profile_sensor_data)
    sent: dict[int, float] = {}
    rtts: dict[int, float] = {}

    def on_answer(msg: Any) -> None:
        at = time.perf_counter()
        if len(msg.data) == nu + 1:
            seq = int(msg.data[-1])
            if seq in sent:
                rtts[seq] = at - sent[seq]

    node.create_subscription(
        Float64MultiArray,
        "effort_controller/commands",
        on_answer,
        QoSProfile(depth=1, reliability=ReliabilityPolicy.RELIABLE),
    )
    spinner = Spinner(node, context, "latency-probe")
    msg = JointState()
    msg.name = joint_names or [f"joint{i}" for i in range(nu)]
    msg.position = msg.velocity = [0.0] * nu
    results = []
    seq = 0
    try:
        deadline = time.monotonic() + 15.0  # the echo's discovery: wait for its first answer
        while not rtts and time.monotonic() < deadline:
            seq += 1
            sent[seq] = time.perf_counter()
            msg.header.stamp.nanosec = seq
            pub.publish(msg)
            time.sleep(0.05)
        if not rtts:
            raise TimeoutError("the echo node never answered (ROS discovery failed?)")
        for rate in rates_hz:
            period = 1.0 / rate
            first = seq + 1
            boundary = time.perf_counter()
            t_end = boundary + seconds
            while boundary < t_end:
                seq = seq + 1 if seq < 999_999_999 else 1
                sent[seq] = time.perf_counter()
                msg.header.stamp.nanosec = seq
                pub.publish(msg)
                boundary += period
                remaining = boundary - time.perf_counter()
                if remaining > 0:
                    time.sleep(remaining)
            time.sleep(0.2)  # the last answers
            window = [rtts.get(s) for s in range(first, seq + 1)]
            got = np.array([r for r in window if r is not None])
            held = float(np.mean([r is not None and r < period for r in window]))
            results.append(
                {
                    "rate_hz": rate,
                    "periods": len(window),
                    "answered": int(got.size),
                    "held_fraction": held,
                    "roundtrip_us": percentiles_us(got * 1e6),
                }
            )
    finally:
        spinner.stop()
        node.destroy_node()
        context.try_shutdown()
        proc.terminate()
        proc.wait(timeout=10)
    return results


def machine() -> str:
    """What the measurement ran on: CPU model, CPUs, the ROS middleware."""
    model = "unknown CPU"
    try:
        for line in open("/proc/cpuinfo"):
            if line.startswith("model name"):
                model = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    return f"{model}, {os.cpu_count()} CPUs, {os.environ.get('RMW_IMPLEMENTATION', 'rmw_fastrtps_cpp (default)')}"


def main(rates: str, seconds: float, nu: int = 12) -> int:
    """Print the round trip at each rate and the highest rate held at ≥ 99.9 %."""
    from idcontrol.errors import ConfigError

    try:
        rates_hz = [float(r) for r in rates.split(",") if r.strip()]
    except ValueError:
        raise ConfigError(f"--rates must be a comma list of numbers, got {rates!r}") from None
    print(f"ROS 2 round trip (JointState out, Float64MultiArray back), {nu} joints, on {machine()}")
    held = []
    for r in measure(nu, rates_hz, seconds):
        p = r["roundtrip_us"]
        print(
            f"{r['rate_hz']:7.0f} Hz: p50 {p['p50']:7.1f} µs, p99 {p['p99']:7.1f} µs, max {p['max']:8.1f} µs; "
            f"{r['answered']}/{r['periods']} answered, {100 * r['held_fraction']:.2f} % in time"
        )
        if r["held_fraction"] >= 0.999:
            held.append(r["rate_hz"])
    print(f"highest rate held at >= 99.9 %: {max(held):.0f} Hz" if held else "no rate held at >= 99.9 %")
    return 0


if __name__ == "__main__":
    if sys.argv[1:2] == ["--echo"]:
        sys.exit(echo(int(sys.argv[2]), float(sys.argv[3])))
    sys.exit(main(",".join(sys.argv[1:]) or "1000,500,250", 5.0))
