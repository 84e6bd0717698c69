"""The Unitree driver and its simulator: the SDK's own message types and CRC, on real Cyclone DDS over loopback,
with a real daemon (docs/unitree.md)."""

from __future__ import annotations

import importlib.util  # noqa: E402
import json
import logging
import os
import platform
import re
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import numpy as np
import pytest

pytest.importorskip("cyclonedds", reason="the [unitree] extra")
if importlib.util.find_spec("unitree_sdk2py") is None:  # its package __init__ fails on the 1.0.1 wheel: not imported
    pytest.skip("the [unitree] extra (unitree-sdk2)", allow_module_level=True)

from idcontrol.driver.unitree import dds  # noqa: E402
from idcontrol.driver.unitree.driver import POS_STOP_F, LowCommand, layouts  # noqa: E402
from idcontrol.driver.unitree.messages import Message  # noqa: E402
from idcontrol.driver.unitree.motors import MotorMap  # noqa: E402
from idcontrol.errors import ConfigError  # noqa: E402
from idcontrol.robot.model import RobotModel  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
IDCONTROL = [sys.executable, "-m", "idcontrol"]


def domain_id(offset: int) -> int:
    """A DDS domain of this test alone (another test, or another run on the machine, has its own)."""
    return 1 + (os.getpid() * 7 + offset) % 200


def random_message(layout, rng: np.random.Generator) -> Message:
    """A message whose every field holds a random value of its type (floats finite; unsigned values within the signed
    range: the SDK's CRC helper packs some uint8 and uint16 fields as signed)."""
    m = Message(layout)
    for path, f in layout.fields.items():
        view = m.field(path)
        if f.code == "f4":
            view[:] = rng.uniform(-100.0, 100.0, f.count)
        else:
            info = np.iinfo(np.dtype(f.code))
            high = info.max // 2 if f.code in ("u1", "u2") else info.max
            view[:] = rng.integers(info.min, high, f.count, endpoint=True)
    return m


def sdk_crc():
    """The SDK's CRC helper, on its pure-Python path (the 1.0.1 wheel lacks its compiled library for x86-64)."""
    dds.message_types("go")
    from unitree_sdk2py.utils.crc import CRC

    system = platform.system
    platform.system = lambda: "Portable"  # not Linux: the helper takes its own pure-Python CRC
    try:
        return CRC()
    finally:
        platform.system = system


@pytest.mark.parametrize("family", dds.FAMILIES)
def test_messages_are_the_sdk_bytes(family):
    """Every LowCmd and LowState field written here is read back by the SDK's generated type, and the SDK's own
    serialization of it is the same bytes (both families)."""
    rng = np.random.default_rng(0)
    for sdk_type, layout in zip(dds.message_types(family), layouts(family), strict=True):
        ours = random_message(layout, rng)
        theirs = sdk_type.deserialize(ours.wire)
        assert theirs.serialize() == ours.wire
        assert (
            np.float32(theirs.motor_cmd[5].tau if hasattr(theirs, "motor_cmd") else theirs.motor_state[5].q)
            == (ours.field("motor_cmd.5.tau" if hasattr(theirs, "motor_cmd") else "motor_state.5.q")[0])
        )
        assert theirs.crc == ours.field("crc")[0]


@pytest.mark.parametrize("family", dds.FAMILIES)
def test_crc_is_the_sdk_helpers(family):
    """The CRC sealed into each message type is the one the SDK's CRC helper computes for it."""
    rng = np.random.default_rng(1)
    crc = sdk_crc()
    for sdk_type, layout in zip(dds.message_types(family), layouts(family), strict=True):
        for _ in range(3):
            ours = random_message(layout, rng)
            ours.seal()
            assert crc.Crc(sdk_type.deserialize(ours.wire)) == ours.field("crc")[0]
            assert ours.crc_ok()
            ours.field("crc")[0] ^= 1
            assert not ours.crc_ok()


def test_motor_order_and_torque_only_command():
    """The A1's joints map to Unitree's motor order (FR, FL, RR, RL; hip, thigh, calf), and a torque command
    carries τ in those slots with kp = kd = 0, the 'no target' q, motors on, the low-level header."""
    robot = RobotModel("a1")
    motors = MotorMap.of("go", robot.actuated_joints, robot.sphere_names)
    for joint, slot in zip(robot.actuated_joints, motors.motor, strict=True):
        leg, part = joint.split("_")[:2]
        assert slot == 3 * ("FR", "FL", "RR", "RL").index(leg) + ("hip", "thigh", "calf").index(part)
    assert [("FR", "FL", "RR", "RL")[f] for f in motors.feet] == [s[:2] for s in robot.sphere_names]
    command = LowCommand("go", motors)
    tau = np.arange(1.0, 13.0)
    command.torque(tau)
    sdk = dds.message_types("go")[0].deserialize(command.wire(tick=7))
    for joint_index, slot in enumerate(motors.motor):
        m = sdk.motor_cmd[slot]
        assert (m.mode, m.tau, m.kp, m.kd, m.q) == (1, tau[joint_index], 0.0, 0.0, np.float32(POS_STOP_F))
    assert all(sdk.motor_cmd[i].mode == 0 for i in range(12, 20))
    assert list(sdk.head) == [0xFE, 0xEF] and sdk.level_flag == 0xFF and sdk.reserve == 7
    with pytest.raises(ConfigError, match="not a Unitree quadruped's motor"):
        MotorMap.of("go", RobotModel("anymal_b").actuated_joints, ())


def test_humanoid_command_carries_torque_and_the_robots_machine_mode():
    """The humanoid (hg) family: a G1's 29 joints, named as in its URDF and in any order, reach their motor slots;
    the command carries τ there with kp = kd = 0, motors on, the other slots off, ``mode_machine`` copied from the
    robot's LowState, and a CRC the SDK's helper agrees with."""
    from idcontrol.driver.unitree.motors import HG_MOTORS

    names = tuple(f"{n}_joint" for n in HG_MOTORS)[::-1]
    motors = MotorMap.of("hg", names, ())
    assert [HG_MOTORS[slot] + "_joint" for slot in motors.motor] == list(names)
    command = LowCommand("hg", motors)
    tau = np.linspace(-5.0, 5.0, 29)
    command.torque(tau)
    sdk = dds.message_types("hg")[0].deserialize(command.wire(tick=3, mode_machine=5))
    for i, slot in enumerate(motors.motor):
        m = sdk.motor_cmd[slot]
        assert (m.mode, m.kp, m.kd) == (1, 0.0, 0.0) and m.tau == np.float32(tau[i])
    assert all(sdk.motor_cmd[i].mode == 0 for i in range(29, 35))
    assert sdk.mode_machine == 5 and sdk.reserve[0] == 3
    assert sdk_crc().Crc(sdk) == sdk.crc
    with pytest.raises(ConfigError, match="humanoid's motors"):
        MotorMap.of("hg", ("left_hip_pitch_joint", "tail_joint"), ())


def test_driver_reads_only_intact_new_lowstates():
    """A LowState with a wrong CRC is never read (the state the driver sends stays the last intact one, and the
    sample is counted), a repeated tick is not new, and an intact new one is read in Unitree's motor order."""
    from idcontrol.driver.unitree.driver import UnitreeDriver

    robot = RobotModel("a1")
    driver = UnitreeDriver(robot, "tcp://127.0.0.1:9", domain=domain_id(7), sport_check_s=0.0)
    motors = driver.motors
    state = Message(layouts("go")[1])
    q = state.column("motor_state", "q", 20)
    q[motors.motor] = np.arange(12) * 0.1
    state.field("tick")[0] = 5
    state.field("imu_state.quaternion")[:] = (1.0, 0.0, 0.0, 0.0)
    state.seal()
    assert driver._take(state.wire)
    np.testing.assert_allclose(driver._state().q[robot.actuated_idx_q], np.arange(12) * 0.1, atol=1e-6)
    assert not driver._take(state.wire)  # the same tick again
    q[motors.motor] = 9.0
    state.field("tick")[0] = 6
    state.seal()
    bad = bytearray(state.wire)
    bad[-1] ^= 0x01
    assert not driver._take(bytes(bad))
    np.testing.assert_allclose(driver._state().q[robot.actuated_idx_q], np.arange(12) * 0.1, atol=1e-6)
    assert driver.stats["bad_crc_states"] == 1
    driver.socket.close(linger=0)


def test_driver_clips_torque_and_dry_run_sends_only_damping():
    """A run torque reaches the motors clipped to the torque fraction of the URDF's effort (default 0.5); in dry run
    the motors get damping only (τ = 0, kd > 0) whatever the daemon says, and idle is damping too."""
    from idcontrol.driver.unitree.driver import UnitreeDriver

    robot = RobotModel("a1")
    sent: list[bytes] = []
    for dry_run in (False, True):
        driver = UnitreeDriver(robot, "tcp://127.0.0.1:9", domain=domain_id(8), sport_check_s=0.0, dry_run=dry_run)
        driver.link.write = sent.append  # what would go on the wire
        driver.apply(np.full(12, 100.0), "run")
        driver.apply(np.zeros(12), "idle")
        driver.socket.close(linger=0)
    low_cmd = dds.message_types("go")[0]
    (run, idle, dry_run_cmd, dry_idle) = (low_cmd.deserialize(b) for b in sent)
    slots = MotorMap.of("go", robot.actuated_joints, robot.sphere_names).motor
    limit = 0.5 * np.asarray(robot.torque_limits)
    assert [run.motor_cmd[s].tau for s in slots] == pytest.approx(limit) and run.motor_cmd[slots[0]].kd == 0.0
    for cmd in (idle, dry_run_cmd, dry_idle):
        assert all(cmd.motor_cmd[s].tau == 0.0 and cmd.motor_cmd[s].kd > 0.0 for s in slots)


def test_a_vanished_robot_stops_the_driver_within_the_stale_limit(caplog):
    """When no LowState arrives any more (the robot's DDS peer is gone), the driver stops itself on the 5th period
    without one: it says so in its log, its states say bridge_stopped, and from then on the daemon's run torques
    become the motors' damping, also once LowStates come back, until the daemon has left run and started again."""
    from idcontrol.driver.unitree.driver import UnitreeDriver

    caplog.set_level(logging.INFO, logger="idcontrol.driver.unitree")
    robot = RobotModel("a1")
    driver = UnitreeDriver(robot, "tcp://127.0.0.1:9", domain=domain_id(9), sport_check_s=0.0)
    sent: list[bytes] = []
    driver.link.write = sent.append
    state = Message(layouts("go")[1])
    state.field("tick")[0] = 1
    state.field("imu_state.quaternion")[:] = (1.0, 0.0, 0.0, 0.0)
    state.seal()
    assert driver._take(state.wire)
    for _ in range(5):  # nothing on the wire: this domain has no robot
        assert not driver.safe_stopped
        driver.read_state()
        driver.apply(np.full(12, 3.0), "run")
    assert driver.safe_stopped and driver.stats["sensor_stops"] == 1 and driver.stats["stale_periods"] == 5
    assert "no new, intact LowState for 5 periods" in caplog.text
    last = dds.message_types("go")[0].deserialize(sent[-1])
    assert all(last.motor_cmd[s].tau == 0.0 and last.motor_cmd[s].kd > 0.0 for s in driver.motors.motor)
    assert dds.message_types("go")[0].deserialize(sent[-2]).motor_cmd[0].tau == 3.0  # the 4th period still drove
    # LowStates again: still damping while the daemon runs; driven again only after it has left run and restarted
    from idcontrol.protocol import CommandMessage

    for tick, mode in ((2, "run"), (3, "stopped"), (4, "run")):
        state.field("tick")[0] = tick
        state.seal()
        driver.link.take = lambda wire=state.wire: wire  # the robot is back
        driver.read_state()
        driver._apply(CommandMessage(tick, tick * 1e-3, np.full(12, 3.0), mode))
        tau = dds.message_types("go")[0].deserialize(sent[-1]).motor_cmd[driver.motors.motor[0]].tau
        assert tau == (3.0 if tick == 4 else 0.0), (tick, mode)
    assert "LowStates again" in caplog.text
    driver.socket.close(linger=0)


def test_a_missing_dds_names_the_extra(monkeypatch):
    """Without cyclonedds the driver and the simulator say which extra and which SDK to install."""
    from idcontrol.errors import MissingDependency

    monkeypatch.setitem(sys.modules, "cyclonedds", None)
    with pytest.raises(MissingDependency, match=r"idcontrol\[unitree\]' && pip install --no-deps 'unitree-sdk2"):
        dds.message_types("go")


def test_driver_refuses_a_robot_interface_without_hardware_flag():
    """On any interface but loopback the driver does not start without --hardware, and says why."""
    out = subprocess.run(
        [*IDCONTROL, "driver", "unitree", "--network", "eth0"], capture_output=True, text=True, timeout=120
    )
    assert out.returncode == 2
    assert "--hardware" in out.stderr


def start_simulator(launch: Path, domain: int, *extra: str) -> subprocess.Popen:
    command = [*IDCONTROL, "driver", "unitree-sim", str(launch), "--domain", str(domain), *extra]
    return subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, start_new_session=True)


def stop_simulator(sim: subprocess.Popen) -> tuple[dict, str]:
    if sim.poll() is None:
        sim.send_signal(signal.SIGTERM)
    out, err = sim.communicate(timeout=30)
    lines = [line for line in out.splitlines() if line.startswith("{")]
    return (json.loads(lines[-1])["unitree_sim"] if lines else {}), err


def test_simulator_ignores_a_command_with_a_bad_crc():
    """A LowCmd whose CRC is wrong moves nothing (the simulated robot's tick does not advance in lock-step and
    its count of rejected commands says so); the same command with its CRC sealed is applied."""
    domain = domain_id(1)
    sim = start_simulator(ROOT / "launch" / "unitree_stand.toml", domain, "--clock", "lockstep")
    try:
        link = dds.Endpoint.open("go", "lo", domain, "lowcmd")
        state = Message(layouts("go")[1])
        deadline = time.monotonic() + 60
        sample = None
        while sample is None and time.monotonic() < deadline and sim.poll() is None:
            sample = link.wait(0.2)
        assert sample is not None, "no LowState from the simulator"
        state.load(sample)
        assert state.crc_ok()
        tick0 = int(state.field("tick")[0])
        robot = RobotModel("a1")
        command = LowCommand("go", MotorMap.of("go", robot.actuated_joints, robot.sphere_names))
        command.torque(np.full(12, 5.0))
        bad = bytearray(command.wire(tick0))
        bad[-1] ^= 0xFF  # the crc's last byte
        for _ in range(5):
            link.write(bytes(bad))
            time.sleep(0.05)
        newest = tick0
        while (sample := link.take()) is not None:
            state.load(sample)
            newest = int(state.field("tick")[0])
        assert newest == tick0, "a command with a bad CRC advanced the robot"
        link.write(command.wire(tick0))
        advanced = False
        deadline = time.monotonic() + 5
        while not advanced and time.monotonic() < deadline:
            sample = link.wait(0.1)
            if sample is not None:
                state.load(sample)
                advanced = int(state.field("tick")[0]) > tick0
        assert advanced, "the sealed command was not applied"
    finally:
        report, err = stop_simulator(sim)
    assert report["crc_rejected"] == 5, err
    assert report["lowcmds"] == 1
    assert "CRC is wrong" in err


def test_driver_refuses_a_robot_whose_sport_mode_runs():
    """With the robot's sport-mode service running (the simulator publishes rt/sportmodestate), the driver does not
    start, and says to release it (the stand and trot tests run the same check with no sport-mode service)."""
    domain = domain_id(6)
    sim = start_simulator(ROOT / "launch" / "unitree_stand.toml", domain, "--clock", "lockstep", "--sport-mode")
    try:
        link = dds.Endpoint.open("go", "lo", domain, "lowcmd")
        deadline = time.monotonic() + 60
        while link.wait(0.2) is None and time.monotonic() < deadline and sim.poll() is None:
            pass  # the simulator is up
        out = subprocess.run(
            [*IDCONTROL, "driver", "unitree", "--domain", str(domain), "--endpoint", "tcp://127.0.0.1:9"],
            capture_output=True,
            text=True,
            timeout=120,
        )
    finally:
        stop_simulator(sim)
    assert out.returncode == 2 and "sport-mode service is running" in out.stderr, out.stderr[-2000:]


def launch_copy(tmp_path: Path, name: str, duration: float, rate_hz: float = 1000.0) -> Path:
    """A shipped launch file (on this test's private endpoints), ``duration`` s; at ``rate_hz`` with 1 ms physics
    steps and a watchdog of 20 periods (as the driver's late-command rule)."""
    text = (ROOT / "launch" / f"{name}.toml").read_text()
    if rate_hz != 1000.0:
        substeps = round(1000.0 / rate_hz)
        text = text.replace("rate_hz = 1000.0", f"rate_hz = {rate_hz}")
        text = text.replace('kind = "mujoco"', f'kind = "mujoco"\nsubsteps = {substeps}')
        text = text.replace("watchdog_ms = 20.0", f"watchdog_ms = {20 * 1000.0 / rate_hz}")
    text = re.sub(r"^duration = [0-9.]+", f"duration = {duration}", text, flags=re.M)
    path = tmp_path / f"{name}.toml"
    path.write_text(text)
    return path


def run_through_dds(
    tmp_path: Path, name: str, duration: float, domain: int, clock: str, rate_hz: float = 1000.0
) -> tuple[dict, dict, str]:
    """The daemon (``idcontrol launch``) with the unitree driver in place of a bridge, the simulator on the DDS
    topics: the launch's summary, the simulator's report, the logs."""
    launch = launch_copy(tmp_path, name, duration, rate_hz)
    summary_path = tmp_path / "summary.json"
    sim = start_simulator(launch, domain, "--clock", clock)
    try:
        out = subprocess.run(
            [
                *IDCONTROL,
                "launch",
                str(launch),
                "--summary-json",
                str(summary_path),
                "--driver",
                *IDCONTROL,
                "driver",
                "unitree",
                "--domain",
                str(domain),
                "--clock",
                clock,
                "--endpoint",
                "{endpoint}",
            ],
            capture_output=True,
            text=True,
            timeout=900,
        )
    finally:
        report, sim_err = stop_simulator(sim)
    assert out.returncode == 0, out.stderr[-3000:] + sim_err[-2000:]
    return json.loads(summary_path.read_text()), report, out.stderr + sim_err


def test_a1_stands_through_the_dds_path(tmp_path):
    """The daemon stands the A1 through the whole Unitree path (daemon ↔ unitree driver ↔ DDS ↔ the simulator,
    lock-step): the run lasts its duration without a fall or a safe stop, the simulated base stays within 1 cm of its
    standing height through the run, every command had a correct CRC, no LowState was stale, and the round trip
    LowState → LowCmd was measured on every tick."""
    summary, sim, logs = run_through_dds(tmp_path, "unitree_stand", 4.0, domain_id(2), "lockstep")
    assert summary["end"] == "duration reached" and not summary["fell"], logs[-3000:]
    run_ticks = summary["mode_ticks"]["run"]
    assert run_ticks >= 3990
    start = sim["released_at_tick"]  # the run's first torque command
    heights = [z for tick, z, driven in sim["base_height_trace"] if start < tick <= start + run_ticks and driven]
    standing = RobotModel("a1").standing_configuration()[2]
    assert len(heights) >= 15 and min(heights) > standing - 0.01 and max(heights) < standing + 0.01, heights
    assert sim["crc_rejected"] == 0 and sim["roundtrips"] >= run_ticks
    unitree = summary["bridge"]["unitree"]
    assert unitree["bad_crc_states"] == 0 and unitree["sensor_stops"] == 0 and unitree["stale_periods"] == 0
    rtt = sim["roundtrip_us"]
    print(
        f"\nLowState -> LowCmd round trip (lock-step, at the simulator): p50 {rtt['p50']:.0f} "
        f"p99 {rtt['p99']:.0f} max {rtt['max']:.0f} us over {sim['roundtrips']} ticks"
    )


def test_a1_trots_through_the_dds_path(tmp_path):
    """The daemon trots the A1 at 0.2 m/s through the same path for 5 s (lock-step): no fall and no safe stop, the
    simulated base at least 0.7 m forward and within 2 cm of its standing height through the run."""
    summary, sim, logs = run_through_dds(tmp_path, "unitree_trot", 5.0, domain_id(4), "lockstep")
    assert summary["end"] == "duration reached" and not summary["fell"], logs[-3000:]
    start, run_ticks = sim["released_at_tick"], summary["mode_ticks"]["run"]
    heights = [z for tick, z, driven in sim["base_height_trace"] if start < tick <= start + run_ticks and driven]
    standing = RobotModel("a1").standing_configuration()[2]
    assert len(heights) >= 19 and all(abs(z - standing) < 0.02 for z in heights), heights
    assert sim["base_position"][0] > 0.7 and not sim["fell_while_driven"]
    assert sim["crc_rejected"] == 0 and summary["bridge"]["unitree"]["stale_periods"] == 0
    rtt = sim["roundtrip_us"]
    print(
        f"\ntrot: {sim['base_position'][0]:.2f} m in 5 s; LowState -> LowCmd (lock-step) p50 {rtt['p50']:.0f} "
        f"p99 {rtt['p99']:.0f} max {rtt['max']:.0f} us"
    )


@pytest.mark.timing
def test_dds_round_trip():
    """The DDS path's own share of the round trip: a controller in this process answers each LowState of the
    simulator (lock-step, on its stand) with a sealed LowCmd at once, through the same codec and topics as the
    driver; the simulator measures LowState written → LowCmd received over 2000 ticks: p50 under 1.5 ms."""
    domain = domain_id(3)
    sim = start_simulator(ROOT / "launch" / "unitree_stand.toml", domain, "--clock", "lockstep")
    answered = 0
    try:
        link = dds.Endpoint.open("go", "lo", domain, "lowcmd")
        robot = RobotModel("a1")
        command = LowCommand("go", MotorMap.of("go", robot.actuated_joints, robot.sphere_names))
        command.damping(1.0)  # the robot stays on its stand: the simulator does no physics
        state = Message(layouts("go")[1])
        tick = state.field("tick")
        deadline = time.monotonic() + 120
        last = None
        while answered < 2000 and time.monotonic() < deadline and sim.poll() is None:
            sample = link.wait(0.1)
            if sample is None:
                continue
            state.load(sample)
            if int(tick[0]) != last:
                last = int(tick[0])
                link.write(command.wire(last))
                answered += 1
    finally:
        report, err = stop_simulator(sim)
    assert answered == 2000, err[-2000:]
    rtt = report["roundtrip_us"]
    assert report["roundtrips"] >= 1990 and rtt["p50"] < 1500.0, rtt
    print(
        f"\nDDS alone (loopback, lock-step): LowState -> LowCmd p50 {rtt['p50']:.0f} p99 {rtt['p99']:.0f} "
        f"max {rtt['max']:.0f} us over {report['roundtrips']}"
    )


class StandingRobot:
    """This test's own robot on the DDS topics: it publishes the A1 standing still (the joints at the standing
    posture, level, the gyro and accelerometer with a little noise) every ``period`` s with a fresh tick, until
    :attr:`frozen`, from which it repeats its last LowState; it records every LowCmd it takes (s, τ (20,), kd (20,))."""

    def __init__(self, domain: int, period: float) -> None:
        self.link = dds.Endpoint.open("go", "lo", domain, "lowstate")
        self.period, self.frozen, self.stop = period, False, False
        self.commands: list[tuple[float, np.ndarray, np.ndarray]] = []
        robot = RobotModel("a1")
        motors = MotorMap.of("go", robot.actuated_joints, robot.sphere_names)
        self.state = Message(layouts("go")[1])
        q = self.state.column("motor_state", "q", 20)
        q[motors.motor] = robot.standing_configuration()[robot.actuated_idx_q]
        self.state.field("imu_state.quaternion")[:] = (1.0, 0.0, 0.0, 0.0)
        self.command = Message(layouts("go")[0])
        self.thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        rng = np.random.default_rng(0)
        tick, next_at = 0, time.monotonic()
        tau, kd = self.command.column("motor_cmd", "tau", 20), self.command.column("motor_cmd", "kd", 20)
        while not self.stop:
            if not self.frozen:
                tick += round(self.period * 1000)
                self.state.field("tick")[0] = tick
                self.state.field("imu_state.gyroscope")[:] = rng.normal(0.0, 1e-3, 3)
                self.state.field("imu_state.accelerometer")[:] = np.array([0.0, 0.0, 9.81]) + rng.normal(0.0, 1e-3, 3)
                self.state.seal()
            self.link.write(self.state.wire)
            next_at += self.period
            while (remaining := next_at - time.monotonic()) > 0:
                sample = self.link.wait(remaining)
                if sample is not None:
                    self.command.load(sample)
                    if self.command.crc_ok():
                        self.commands.append((time.monotonic(), tau.copy(), kd.copy()))


@pytest.mark.timing
def test_a_stale_lowstate_stops_the_robot_with_damping(tmp_path):
    """A robot whose LowState stops changing (its publisher repeats itself) gets the motors' damping and never a
    torque again: from 5 periods after the first repeated LowState on, every LowCmd is τ = 0 with kd > 0; the
    driver's log says why, and the run ends before its duration (real time, 100 Hz)."""
    domain, period = domain_id(5), 0.01
    launch = launch_copy(tmp_path, "unitree_stand", 60.0, rate_hz=100.0)
    robot = StandingRobot(domain, period)
    robot.thread.start()
    run = subprocess.Popen(
        [
            *IDCONTROL,
            "launch",
            str(launch),
            "--driver",
            *IDCONTROL,
            "driver",
            "unitree",
            "--domain",
            str(domain),
            "--endpoint",
            "{endpoint}",
        ],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,
    )
    try:
        deadline = time.monotonic() + 240
        driven = 0
        while driven < 100 and time.monotonic() < deadline and run.poll() is None:  # 1 s of torque commands
            time.sleep(0.2)
            driven = sum(1 for _, tau, kd in robot.commands if np.any(tau != 0) and np.all(kd == 0))
        assert driven >= 100, "the daemon never drove the robot"
        frozen_at = time.monotonic()
        robot.frozen = True
        time.sleep(1.0)
        out, err = run.communicate(timeout=60)
    finally:
        robot.stop = True
        if run.poll() is None:
            run.send_signal(signal.SIGTERM)
            out, err = run.communicate(timeout=60)
    after = [(t, tau, kd) for t, tau, kd in robot.commands if t > frozen_at + 7 * period]
    assert after, err[-3000:]
    assert all(np.all(tau == 0) and np.any(kd > 0) for _, tau, kd in after), err[-3000:]
    assert "no new, intact LowState for 5 periods" in err
    assert run.returncode == 4, err[-3000:]  # the run ended before its duration
