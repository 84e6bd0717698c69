"""The sensor form (docs/protocol.md, "The sensor form") from the driver's side: the C++ client sends it as the
daemon's own decoder reads it, and the form its daemon's welcome asks for; the C++ example stands the quadruped on
its IMU and joints against a daemon that estimates the base; ``idcontrol conformance --state-form sensors`` passes
sensor-form drivers (the SDK's bridge, the C++ example) and fails broken ones by the obligation they break.

The conformance runs are real time under SCHED_FIFO where allowed, as in tests/test_conformance.py, at 50 Hz: the
sensor form's tick (the estimator in the daemon, the sensor model in the bridge) is longer, and at 100 Hz a loaded
two-CPU machine's round trips (7 ms p50 through the proxy) made a compliant bridge's second period late too.
"""

from __future__ import annotations

import json
import subprocess
import sys
import time
from pathlib import Path

import msgpack
import numpy as np
import pytest
import zmq

from idcontrol import protocol as wire
from idcontrol.errors import ProtocolError
from idcontrol.robot.model import RobotModel
from idcontrol.security import Credential
from idcontrol.tools.conformance import OBLIGATIONS, SENSOR_OBLIGATIONS, Suite
from idcontrol.tools.ports import free_ports

RATE_HZ = 50.0
PRIORITY = 30  # SCHED_FIFO; refused (no permission): the processes run at normal priority
IDCONTROL = [sys.executable, "-m", "idcontrol"]
FAULTY_DRIVER = [sys.executable, str(Path(__file__).with_name("sensor_form_driver.py")), "--endpoint", "{endpoint}"]
ROOT = Path(__file__).resolve().parents[1]


# ---------------------------------------------------------------------------------------------------- the wire
def shape_of(robot: RobotModel) -> wire.RobotShape:
    """The sizes and names the daemon's welcome carries, as the daemon makes them."""
    return wire.RobotShape(robot.name, robot.nq, robot.nv, tuple(robot.actuated_joints), tuple(robot.sphere_names), ())


def states_from_the_cpp_client(binary: Path, model: Path, state_form: str, count: int = 20) -> list[bytes]:
    """Open a session with the C++ example from a stand-in daemon whose welcome says ``state_form``; return the raw
    ``state`` messages the client sends."""
    robot = RobotModel("quadruped")
    endpoint = f"tcp://127.0.0.1:{free_ports(1)[0]}"
    credential = Credential.create(endpoint)
    context = zmq.Context()
    router = context.socket(zmq.ROUTER)
    router.setsockopt(zmq.LINGER, 0)
    router.bind(endpoint)
    driver = subprocess.Popen(
        [str(binary), "--model", str(model), "--endpoint", endpoint],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
    )
    states: list[bytes] = []
    try:
        deadline = time.monotonic() + 30.0
        while len(states) < count and time.monotonic() < deadline:
            if not router.poll(1000):
                continue
            peer, raw = router.recv_multipart()
            message = msgpack.unpackb(raw)
            if message["type"] == "hello":
                assert credential.accepts(message["token"])
                shape = shape_of(robot)
                estimator = "inekf" if state_form == "sensors" else "none"
                router.send_multipart([peer, wire.encode_welcome(shape, 0.01, "idle", state_form, estimator)])
            else:
                states.append(raw)
    finally:
        driver.terminate()
        driver.wait(timeout=10)
        router.close(linger=0)
        context.term()
        credential.remove()
    assert len(states) == count, driver.stderr.read().decode() if driver.stderr else ""
    return states


def test_the_cpp_client_sends_the_sensor_form_the_daemon_decodes(cpp_driver):
    """Welcomed with state_form "sensors", the C++ client sends the joints alone (q f64[nq-7], qd f64[nv-6]) and an
    ``imu`` the daemon's decoder accepts: the standing quadruped's IMU level (x y z w), at rest (+g along its z, m/s²),
    sampled at the state's t."""
    binary, model = cpp_driver
    robot = RobotModel("quadruped")
    shape = shape_of(robot)
    for raw in states_from_the_cpp_client(binary, model, "sensors"):
        message = msgpack.unpackb(raw)
        assert len(message["q"]) == 8 * (robot.nq - 7) and len(message["qd"]) == 8 * (robot.nv - 6)
        assert set(message["imu"]) == {"orientation_xyzw", "angular_velocity", "linear_acceleration", "t"}
        state = wire.decode_control(raw, shape, estimates=True).state
        imu = state.imu
        assert imu is not None and imu.t == state.t
        np.testing.assert_allclose(imu.orientation_xyzw, [0.0, 0.0, 0.0, 1.0], atol=1e-9)
        np.testing.assert_allclose(imu.linear_acceleration, [0.0, 0.0, 9.81], atol=1e-9)
        np.testing.assert_allclose(imu.angular_velocity, 0.0, atol=1e-9)
        np.testing.assert_allclose(state.q[7:], robot.standing_configuration()[7:], atol=1e-6)
        with pytest.raises(ProtocolError, match="no estimator"):  # a daemon without one refuses it
            wire.decode_control(raw, shape, estimates=False)


def test_the_cpp_client_sends_the_full_state_when_the_welcome_asks_for_it(cpp_driver):
    """Welcomed with state_form "full", the same program sends the base in q (f64[nq], level, at the standing
    height) and no ``imu``."""
    binary, model = cpp_driver
    robot = RobotModel("quadruped")
    shape = shape_of(robot)
    for raw in states_from_the_cpp_client(binary, model, "full", count=5):
        message = msgpack.unpackb(raw)
        assert "imu" not in message and len(message["q"]) == 8 * robot.nq
        state = wire.decode_control(raw, shape, estimates=False).state
        assert state.imu is None and state.q[6] == pytest.approx(1.0)
        assert state.q[2] == pytest.approx(robot.standing_configuration()[2], abs=0.01)


# ---------------------------------------------------------------------------------------------------- standing
STAND_ESTIMATED = """# the quadruped on its IMU and joints, the daemon estimating the base
robot = "quadruped"
duration = {duration}

[controller]
formulation = "two_stage_qp"
rate_hz = 1000.0
mu = 1.0
watchdog_ms = 20.0
contacts = "estimated"
consistent_contact_velocity = true

[formulations.two_stage_qp]
dissipation = "contacts"

[reference]
name = "hold"

[bridge]
kind = "mujoco"
mode = "lockstep"
mu = 1.0

[estimator]
kind = "inekf"
noise = {{ imu_tilt_noise = 0.0 }}

[safety]
position_margin = 0.05
hold_ticks = 5
safe_controller = "damping"

[endpoints]
control = "tcp://127.0.0.1:{control}"
admin = "tcp://127.0.0.1:{admin}"
telemetry = "tcp://127.0.0.1:{telemetry}"
"""


def test_the_cpp_example_stands_on_its_imu_against_an_estimating_daemon(cpp_driver, tmp_path):
    """The C++ example in the sensor form (lock-step, 1 kHz) against a daemon with the invariant EKF: 5 s of run
    without a fall or a stop, the simulated base within 1 cm of its standing height throughout, the daemon's
    estimated base within 1 cm of where it started, and no allocation in the client's loop."""
    binary, model = cpp_driver
    control, admin, telemetry = free_ports(3)
    launch = tmp_path / "stand_estimated.toml"
    launch.write_text(STAND_ESTIMATED.format(duration=5.0, control=control, admin=admin, telemetry=telemetry))
    summary_path = tmp_path / "summary.json"
    command = [str(binary), "--model", str(model), "--endpoint", "{endpoint}", "--lockstep"]
    out = subprocess.run(
        [*IDCONTROL, "launch", str(launch), "--summary-json", str(summary_path), "--driver", *command],
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert out.returncode == 0, out.stderr[-3000:]
    summary = json.loads(summary_path.read_text())
    bridge = summary["bridge"]
    low, high = bridge["base_height_range"]
    standing = RobotModel("quadruped").standing_configuration()[2]
    print(
        f"\nC++ sensor form, lock-step 1 kHz: {summary['mode_ticks']['run']} run ticks, simulated base height "
        f"{low:.6f} .. {high:.6f} m (standing {standing:.6f}), estimated travel {summary['base_travel_m']} m"
    )
    assert summary["end"] == "duration reached" and not summary["fell"]
    assert bridge["state_form"] == "sensors" and bridge["allocations_in_loop"] == 0
    assert summary["mode_ticks"]["run"] >= 4900
    assert standing - 0.01 < low <= high < standing + 0.01
    assert np.abs(summary["base_travel_m"]).max() < 0.01


# ---------------------------------------------------------------------------------------------------- conformance
def run_suite(command: list[str]) -> tuple[dict[str, object], Suite]:
    lines: list[str] = []
    suite = Suite(command, rate_hz=RATE_HZ, log=lines.append, priority=PRIORITY, state_form="sensors")
    checks = suite.run()
    print("\n" + "\n".join(lines))
    return {c.name: c for c in checks}, suite


def assert_compliant(checks: dict) -> None:
    assert set(checks) == set(OBLIGATIONS + SENSOR_OBLIGATIONS)
    failed = [c.line() for c in checks.values() if not c.passed]
    assert not failed, "\n".join(failed)


@pytest.mark.timing  # real time under SCHED_FIFO: alone, after the parallel tests
def test_the_sdk_bridge_in_the_sensor_form_is_compliant():
    """idcontrol bridge (a driver on the Python SDK) sending the sensor form ([bridge.sensors] base = "imu") to a
    daemon that estimates the base keeps every obligation, the IMU's three included."""
    checks, _ = run_suite([*IDCONTROL, "bridge", "{launch}"])
    assert_compliant(checks)


@pytest.mark.timing  # real time under SCHED_FIFO: alone, after the parallel tests
def test_an_sdk_driver_in_the_sensor_form_is_compliant():
    """The test driver on the Python SDK without a fault keeps every obligation (the faults below are all that
    differ)."""
    checks, _ = run_suite([*FAULTY_DRIVER, "--fault", "none"])
    assert_compliant(checks)


@pytest.mark.timing  # real time under SCHED_FIFO: alone, after the parallel tests
def test_the_cpp_example_in_the_sensor_form_is_compliant_and_allocates_nothing(cpp_driver):
    """The C++ client, welcomed with state_form "sensors", keeps every obligation; its loop made no allocation."""
    binary, model = cpp_driver
    checks, suite = run_suite([str(binary), "--model", str(model), "--endpoint", "{endpoint}"])
    assert_compliant(checks)
    report = (suite.driver_output or {}).get("bridge", {})
    assert report["allocations_in_loop"] == 0 and report["state_form"] == "sensors"


@pytest.mark.timing  # real time under SCHED_FIFO: alone, after the parallel tests
def test_an_imu_quaternion_of_three_values_fails_imu_fields():
    """The suite can fail: an IMU orientation of 3 values fails 'imu fields' naming the field and its size, with the
    daemon's refusal as evidence; hello, credentials and seq still pass."""
    checks, _ = run_suite([*FAULTY_DRIVER, "--fault", "quaternion3"])
    assert not checks["imu fields"].passed
    assert "imu.orientation_xyzw is 24 bytes" in checks["imu fields"].evidence
    assert "bad_field" in checks["imu fields"].evidence
    assert all(checks[name].passed for name in ("hello and version", "credentials", "seq monotonic"))


@pytest.mark.timing  # real time under SCHED_FIFO: alone, after the parallel tests
def test_a_frozen_imu_fails_imu_not_frozen():
    """The suite can fail: an IMU that repeats its first gyro and accelerometer reading fails 'imu not frozen', with
    the repeats and the daemon's own stop as evidence, and passes the IMU's fields and time."""
    checks, _ = run_suite([*FAULTY_DRIVER, "--fault", "frozen"])
    frozen = checks["imu not frozen"]
    assert not frozen.passed
    assert "the IMU is stale" in frozen.evidence
    assert checks["imu fields"].passed and checks["imu time"].passed
