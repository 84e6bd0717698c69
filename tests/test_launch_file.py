"""Launch files: the shipped ones load; bad ones fail fast with a message that names the problem."""

from __future__ import annotations

import logging
import math
import os
import struct
import subprocess
import sys
import time
from pathlib import Path

import pytest
import zmq

from idcontrol.errors import ConfigError, RobotFileNotFound, UnknownFormulation, UnknownRobot
from idcontrol.launcher import check_endpoints_free
from idcontrol.settings import load_launch

LAUNCH = Path(__file__).resolve().parents[1] / "launch"

GOOD = """
robot = "quadruped"
duration = 1.0
[controller]
formulation = "two_stage_qp"
rate_hz = 1000.0
[reference]
name = "hold"
[bridge]
mode = "lockstep"
[endpoints]
control = "tcp://127.0.0.1:15555"
admin = "tcp://127.0.0.1:15556"
telemetry = "tcp://127.0.0.1:15557"
"""


def write(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "run.toml"
    path.write_text(text)
    return path


@pytest.mark.parametrize("name", ["quadruped_stand", "quadruped_trot", "arm_grasp"])
def test_shipped_launch_files_load(name, runtime_dir_of_the_test):
    """Each required launch file names robot, bridge, formulation, rate and duration; its endpoints are the private
    ipc:// sockets in the runtime directory."""
    config = load_launch(LAUNCH / f"{name}.toml")
    assert config.robot and config.duration > 0 and config.controller.rate_hz == 1000.0
    assert config.endpoints.control == f"ipc://{runtime_dir_of_the_test}/control"


def test_arm_launch_file_has_a_no_slip_world_a_conservative_controller_and_the_box():
    config = load_launch(LAUNCH / "arm_grasp.toml")
    assert math.isinf(config.bridge.mu) and config.controller.mu == 1.0 and config.objects


def test_overrides_replace_duration_and_formulation(tmp_path):
    config = load_launch(write(tmp_path, GOOD)).with_overrides(duration=7.5, formulation="noslip_lcp")
    assert config.duration == 7.5 and config.controller.formulation == "noslip_lcp"
    with pytest.raises(UnknownFormulation):
        config.with_overrides(formulation="nope")
    with pytest.raises(ConfigError):
        config.with_overrides(duration=-1)


@pytest.mark.parametrize(
    ("change", "error", "words"),
    [
        (('robot = "quadruped"', 'robot = "hexapod"'), UnknownRobot, "hexapod"),
        (("rate_hz = 1000.0", "rate_hz = 0.0"), ConfigError, "rate_hz"),
        (("rate_hz = 1000.0", "rate_hz = 1e6"), ConfigError, "rate_hz"),
        (("rate_hz = 1000.0", 'rate_hz = "fast"'), ConfigError, "rate_hz"),
        (('formulation = "two_stage_qp"', 'formulation = "magic"'), UnknownFormulation, "magic"),
        (('mode = "lockstep"', 'mode = "turbo"'), ConfigError, "turbo"),
        (("127.0.0.1:15555", "192.168.1.5:15555"), ConfigError, "loopback"),
        (("127.0.0.1:15556", "127.0.0.1:15555"), ConfigError, "differ"),
        (("duration = 1.0", "duration = -1.0"), ConfigError, "duration"),
        (("duration = 1.0", "duraton = 1.0"), ConfigError, "duraton"),
        (("[bridge]", "[bridge]\nspeed = 3"), ConfigError, "speed"),
        (("[controller]", "[controller]\nmu = -0.5"), ConfigError, "mu"),
        (("[controller]", "[controller]\nwatchdog_ms = 1.0"), ConfigError, "watchdog"),
        (("[endpoints]", "[endpoints"), ConfigError, "TOML"),
        (("[reference]", "[formulations.magic]\nx = 1\n[reference]"), UnknownFormulation, "magic"),
        (("[reference]", "[formulations]\nnoslip_lcp = 3\n[reference]"), ConfigError, "formulations.noslip_lcp"),
        (("[reference]", "[formulations.two_stage_qp]\nridgee = 1\n[reference]"), ConfigError, "ridgee"),
        (
            ("[reference]", '[formulations.one_stage_qp]\ndissipation = "base"\n[reference]'),
            ConfigError,
            "one_stage_qp",
        ),
    ],
)
def test_bad_launch_files_fail_with_a_clear_message(tmp_path, change, error, words):
    old, new = change
    assert old in GOOD
    with pytest.raises(error, match=words):
        load_launch(write(tmp_path, GOOD.replace(old, new, 1)))


def test_wildcard_ports_may_repeat_and_each_socket_gets_its_own(tmp_path):
    """``tcp://127.0.0.1:*`` on every endpoint is allowed (the system gives each socket a free port, and the daemon's
    ready line names them); the same fixed port twice is not."""
    text = GOOD
    for port in ("15555", "15556", "15557"):
        text = text.replace(f"127.0.0.1:{port}", "127.0.0.1:*")
    endpoints = load_launch(write(tmp_path, text)).endpoints
    assert endpoints.control == endpoints.admin == endpoints.telemetry == "tcp://127.0.0.1:*"
    with pytest.raises(ConfigError, match="differ"):
        load_launch(write(tmp_path, GOOD.replace("127.0.0.1:15557", "127.0.0.1:15556")))


def test_formulation_tables_reach_every_formulation_the_daemon_builds(tmp_path):
    """[formulations.NAME] options apply at start-up, after --formulation, and to the instance a run-time
    switch swaps in; controller.options override them for the launch formulation."""
    from idcontrol.control.factory import build_core

    text = GOOD.replace(
        "[reference]",
        """[formulations.two_stage_qp]
dissipation = "contacts"
ridge = 1e-6
[formulations.noslip_lcp]
spread = 0.01
[reference]""",
    ).replace("rate_hz = 1000.0", "rate_hz = 1000.0\noptions = { ridge = 1e-5 }")
    config = load_launch(write(tmp_path, text))
    assert config.formulation_options("two_stage_qp") == {"dissipation": "contacts", "ridge": 1e-5}
    assert config.formulation_options("noslip_lcp") == {"spread": 0.01}
    core = build_core(config)
    assert core.controller.formulation.dissipation == "contacts" and core.controller.formulation.ridge == 1e-5
    core.warm_up(ticks=1)
    core.set_formulation("noslip_lcp")
    assert core.controller.formulation.spread == 0.01
    overridden = config.with_overrides(formulation="noslip_lcp")
    switched = build_core(overridden)
    assert switched.controller.formulation.spread == 0.01
    assert overridden.formulation_options("two_stage_qp") == {"dissipation": "contacts", "ridge": 1e-5}


def test_a_client_reads_the_endpoints_without_checking_the_formulations(tmp_path):
    """load_launch(check_formulations=False), for a client that only needs the endpoints, takes a file whose
    formulation names or options would be refused; the default check refuses them."""
    for text in (
        GOOD.replace('formulation = "two_stage_qp"', 'formulation = "magic_qp"'),
        GOOD.replace("[reference]", "[formulations.two_stage_qp]\nnot_an_option = 1\n[reference]"),
    ):
        path = write(tmp_path, text)
        with pytest.raises(ConfigError):
            load_launch(path)
        config = load_launch(path, check_formulations=False)
        assert config.endpoints.admin == "tcp://127.0.0.1:15556"


def test_missing_launch_file_names_the_path(tmp_path):
    with pytest.raises(RobotFileNotFound, match="nowhere.toml"):
        load_launch(tmp_path / "nowhere.toml")


def test_port_in_use_is_reported_before_anything_starts(tmp_path):
    config = load_launch(write(tmp_path, GOOD))
    ctx = zmq.Context.instance()
    blocker = ctx.socket(zmq.PUB)
    blocker.bind("tcp://127.0.0.1:15556")
    try:
        with pytest.raises(ConfigError, match="admin endpoint"):
            check_endpoints_free(config)
    finally:
        blocker.close(linger=0)
    for _ in range(50):  # ZeroMQ releases the port in its I/O thread, shortly after close
        try:
            check_endpoints_free(config)  # free again: no false alarm
            break
        except ConfigError:
            time.sleep(0.02)
    else:
        raise AssertionError("the port stayed reported as in use after the blocker closed")


def test_realtime_table_is_checked_at_load(tmp_path):
    """[realtime] priority (0-99), CPU indices, spin_us and bridge_spin_us (0-10000 µs) and cpu_latency_us (an
    integer, 0-1e6 µs) are validated when the file is read; the shipped file spins the daemon, not the bridge."""
    base = (LAUNCH / "quadruped_stand_realtime.toml").read_text()
    settings = load_launch(LAUNCH / "quadruped_stand_realtime.toml").realtime
    assert (settings.priority, settings.io_cpu, settings.cpu_latency_us) == (50, 0, 0)
    assert (settings.spin_us, settings.bridge_spin_us) == (1000.0, 0.0)
    bad_priorities = ("priority = 100", "priority = -1", f"bridge_cpu = {os.cpu_count()}")
    bad_spins = (
        "spin_us = 20000.0",
        "spin_us = -1.0",
        "spin_us = 1000.0\nbridge_spin_us = 20000.0",
        "spin_us = 1000.0\nbridge_spin_us = -1.0",
        "spin_us = 1000.0\nbridge_spin_us = true",
    )
    bad_io = (("io_cpu = 0 ", f"io_cpu = {os.cpu_count()} "), ("io_cpu = 0 ", "io_cpu = true "))
    bad_latency = ("cpu_latency_us = -1 ", "cpu_latency_us = 1.5 ", "cpu_latency_us = 2000000 ")
    for old, bad in [
        *(("priority = 50", b) for b in bad_priorities),
        *(("spin_us = 1000.0", b) for b in bad_spins),
        *bad_io,
        *(("cpu_latency_us = 0 ", b) for b in bad_latency),
    ]:
        assert old in base
        path = tmp_path / "bad.toml"
        path.write_text(base.replace(old, bad))
        with pytest.raises(ConfigError, match="realtime"):
            load_launch(path)


def test_realtime_settings_take_effect_or_say_why_not():
    """enter_realtime gives the process SCHED_FIFO and its CPU, or logs a warning naming what was refused; its
    ZeroMQ threads get the priority above and run on io_cpu, and a child process starts at normal priority."""
    io_cpu = max(os.sched_getaffinity(0))  # a CPU this process may use
    code = (
        "import logging, os, sys\n"
        "logging.basicConfig(level=logging.INFO, stream=sys.stdout, format='%(levelname)s %(message)s')\n"
        "from idcontrol.realtime import RealtimeSettings, enter_realtime\n"
        f"enter_realtime(RealtimeSettings(priority=10, bridge_cpu=0, io_cpu={io_cpu}), 'bridge')\n"
        "policy = os.sched_getscheduler(0) & ~os.SCHED_RESET_ON_FORK\n"
        "print('fifo', policy == os.SCHED_FIFO, 'cpus', sorted(os.sched_getaffinity(0)))\n"
        "import threading, time, zmq\n"
        "s = zmq.Context.instance().socket(zmq.PUB)\n"  # starts the I/O thread, which sets its own priority
        "time.sleep(0.3)\n"
        "io = [t for t in os.listdir('/proc/self/task') if int(t) != threading.get_native_id()]\n"
        "print('io', sorted(os.sched_getparam(int(t)).sched_priority for t in io))\n"
        "print('io_cpus', sorted({c for t in io for c in os.sched_getaffinity(int(t))}))\n"
        "print('child', os.popen('chrt -p $$ 2>&1 || true').read().strip())\n"
        "s.close()\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60).stdout
    assert "fifo True" in out or "could not get SCHED_FIFO priority 10" in out, out
    if "fifo True" in out:  # the ZeroMQ I/O thread one above the process; a child back at normal priority
        assert "I/O thread: SCHED_FIFO priority 11" in out and "io [11, 11]" in out, out  # I/O and reaper
        assert "SCHED_FIFO" not in out.split("child", 1)[1], out
    assert "cpus [0]" in out or "could not be pinned to CPU 0" in out, out
    assert f"io_cpus [{io_cpu}]" in out and f"I/O thread pinned to CPU {io_cpu}" in out, out


@pytest.mark.skipif(len(os.sched_getaffinity(0)) < 2, reason="needs two CPUs")
def test_an_io_cpu_outside_the_process_cpus_is_a_warning_not_an_abort():
    """ZeroMQ aborts a process whose I/O thread cannot be pinned; enter_realtime leaves it unpinned and says so."""
    first, other = sorted(os.sched_getaffinity(0))[:2]
    code = (
        "import logging, os, sys, time, zmq\n"
        "logging.basicConfig(level=logging.INFO, stream=sys.stdout, format='%(levelname)s %(message)s')\n"
        "from idcontrol.realtime import RealtimeSettings, enter_realtime\n"
        f"os.sched_setaffinity(0, {{{first}}})\n"
        f"enter_realtime(RealtimeSettings(io_cpu={other}), 'daemon')\n"
        "s = zmq.Context.instance().socket(zmq.PUB)\n"
        "s.bind('tcp://127.0.0.1:*')\n"
        "time.sleep(0.2)\n"
        "print('alive')\n"
        "s.close()\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert out.returncode == 0 and "alive" in out.stdout, out.stderr
    assert f"I/O thread not pinned: CPU {other} is outside this process's CPUs [{first}]" in out.stdout, out.stdout


def test_a_cpu_latency_request_is_written_and_held_or_its_refusal_said(tmp_path, caplog):
    """cpu_latency_us writes the latency as a native int32 to the PM QoS device and keeps the file open (the
    kernel drops the request when it closes); a device that cannot be opened gives a warning, not an error."""
    from idcontrol.realtime import _latency_requests, hold_cpu_latency

    device = tmp_path / "cpu_dma_latency"
    device.write_bytes(b"")
    held = len(_latency_requests)
    assert hold_cpu_latency(0, "daemon", str(device))
    try:
        assert device.read_bytes() == struct.pack("=i", 0)
        assert len(_latency_requests) == held + 1 and not _latency_requests[-1].closed
    finally:
        _latency_requests.pop().close()
    with caplog.at_level(logging.WARNING, logger="idcontrol.realtime"):
        assert not hold_cpu_latency(0, "bridge", str(tmp_path / "absent" / "cpu_dma_latency"))
    assert "could not request a CPU latency of 0 µs" in caplog.text


def test_an_observer_enters_idle_priority_for_itself_and_the_threads_it_starts():
    """enter_background puts the calling thread under SCHED_IDLE (Linux), and a thread it starts afterwards
    inherits it; the caller's other threads keep their policy."""
    import threading

    from idcontrol.realtime import enter_background

    if not hasattr(os, "SCHED_IDLE"):
        pytest.skip("no SCHED_IDLE on this platform")
    seen: dict[str, int] = {}

    def observer() -> None:
        seen["got"] = enter_background("test observer") == "idle"
        child = threading.Thread(target=lambda: seen.update(child=os.sched_getscheduler(0)))
        child.start()
        child.join()
        seen["self"] = os.sched_getscheduler(0)

    thread = threading.Thread(target=observer)
    thread.start()
    thread.join()
    assert seen == {"got": True, "child": os.SCHED_IDLE, "self": os.SCHED_IDLE}
    assert os.sched_getscheduler(0) != os.SCHED_IDLE


def test_a_spinning_daemon_rests_as_much_as_the_kernels_real_time_budget_requires(tmp_path):
    """The share of each period a spinning daemon blocks: the part of sched_rt_period_us that
    sched_rt_runtime_us leaves to other tasks, plus 1 %; none when the budget is off or unreadable."""
    from idcontrol.realtime import rt_rest_fraction

    def budget(runtime: str, period: str = "1000000") -> float:
        (tmp_path / "sched_rt_runtime_us").write_text(runtime + "\n")
        (tmp_path / "sched_rt_period_us").write_text(period + "\n")
        return rt_rest_fraction(str(tmp_path))

    assert budget("950000") == pytest.approx(0.06)
    assert budget("500000", "1000000") == pytest.approx(0.51)
    assert budget("-1") == 0.0
    assert rt_rest_fraction(str(tmp_path / "absent")) == 0.0


@pytest.mark.parametrize(
    ("change", "words"),
    [
        (("[controller]", '[controller]\nmu = "one"'), "controller.mu must be a number, got 'one'"),
        (("[bridge]", '[bridge]\nmu = "one"'), "bridge.mu must be a number, got 'one'"),
        (("rate_hz = 1000.0", 'rate_hz = "fast"'), "must be a number"),
        (("[reference]", '[formulations.noslip_lcp]\nspread = "wide"\n[reference]'), "spread"),
    ],
)
def test_a_value_of_the_wrong_type_is_reported_as_a_type_error_not_a_range_error(tmp_path, change, words):
    """mu = "one" says a number was expected (it used to report a range)."""
    old, new = change
    with pytest.raises(ConfigError, match=words):
        load_launch(write(tmp_path, GOOD.replace(old, new, 1)))


def test_the_soak_runs_with_the_shipped_real_time_settings(tmp_path):
    """`idcontrol soak` under SCHED_FIFO on CPUs 0 and 1 uses the real-time table of
    launch/quadruped_stand_realtime.toml (pinning, spin, latency request, warm); on other CPUs, the same pinned to
    the first two it may use; with no priority or one CPU, none of it. Its controller, reference and bridge are
    the shipped file's, whatever the formulation."""
    from dataclasses import replace

    from idcontrol.tools.soak import LAUNCH_TEMPLATE, realtime_table

    def soak_launch(priority: int, cpus: set[int], formulation: str = "two_stage_qp"):
        path = tmp_path / "soak.toml"
        path.write_text(
            LAUNCH_TEMPLATE.format(
                formulation=formulation,
                priority=priority,
                realtime=realtime_table(priority, cpus),
                folder=tmp_path,
            )
        )
        return load_launch(path)

    def soak_settings(priority: int, cpus: set[int]):
        return soak_launch(priority, cpus).realtime

    stand = load_launch(LAUNCH / "quadruped_stand_realtime.toml")
    shipped = stand.realtime
    assert soak_settings(50, {0, 1}) == shipped
    for formulation in ("two_stage_qp", "noslip_lcp"):
        soak = soak_launch(50, {0, 1}, formulation)
        assert soak.controller == replace(stand.controller, formulation=formulation)
        assert (soak.reference, soak.bridge, soak.robot) == (stand.reference, stand.bridge, stand.robot)
    if (os.cpu_count() or 1) >= 3:
        assert soak_settings(50, {2, 1}) == replace(shipped, bridge_cpu=1, io_cpu=1, daemon_cpu=2)
    for priority, cpus in ((50, {1}), (0, {0, 1})):
        settings = soak_settings(priority, cpus)
        assert settings.spin_us == 0.0 and not settings.warm and settings.daemon_cpu is None


def test_a_relative_robot_path_is_taken_beside_the_launch_file(tmp_path, monkeypatch):
    """`robot = "./myq"` in a launch file means the folder beside it, whatever the working folder (it was taken
    from the working folder, and the error named neither the launch file nor the key)."""
    from idcontrol.robot.config import SHIPPED_ROBOTS_DIR

    shipped = SHIPPED_ROBOTS_DIR / "quadruped"
    (tmp_path / "myq").mkdir()
    (tmp_path / "myq" / "robot.toml").write_text(
        (shipped / "robot.toml")
        .read_text()
        .replace('urdf = "quadruped.urdf"', f'urdf = "{shipped / "quadruped.urdf"}"')
    )
    launch = tmp_path / "run.toml"
    launch.write_text('robot = "./myq"\n')
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    monkeypatch.chdir(elsewhere)
    assert Path(load_launch(launch).robot) == (tmp_path / "myq").resolve()
    launch.write_text('robot = "./nomyq"\n')
    with pytest.raises(RobotFileNotFound, match=r"run.toml: robot = './nomyq': robot configuration not found"):
        load_launch(launch)


@pytest.mark.parametrize(
    ("text", "says"),
    [
        ('duration = "5"\n', r"duration must be a number, got '5'"),
        ("duration = inf\n", r"duration must be a finite number of s >= 0 \(0: until Ctrl-C\)"),
        (
            '[controller]\nformulation = "two_stage_qpp"\n',
            r"\[controller\] formulation: unknown formulation 'two_stage_qpp'",
        ),
        ('[reference]\nname = "holdd"\n', r"\[reference\] name: unknown reference 'holdd'; available: .*hold"),
    ],
)
def test_a_launch_files_mistakes_are_named_with_the_file_and_key_when_it_is_read(tmp_path, text, says):
    """Each error names the launch file and the key, when the file is read: an unknown reference had been found
    only by the daemon, after the bridge had started, and said neither."""
    path = tmp_path / "run.toml"
    path.write_text('robot = "quadruped"\n' + text)
    with pytest.raises(ConfigError, match=says) as e:
        load_launch(path)
    assert str(e.value).startswith(str(path))
