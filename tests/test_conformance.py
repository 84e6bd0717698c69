"""The conformance suite on real drivers: the Python SDK's example, the MuJoCo bridge, the C++ example (built with
CMake here), and a driver that breaks the late-command rule, each against a real daemon.

The suite runs the daemon at 100 Hz and, where the scheduler allows it, daemon, driver and proxy under SCHED_FIFO
here: the obligations depend on neither, and both keep the checks about the driver on a loaded 2-core machine. On a
virtual machine, round trips through the proxy take about 2 ms and the processes stall for 5-20 ms now and then; at
250 Hz such stalls made a compliant driver skip a tenth of its period boundaries, at 100 Hz they rarely skip one.
``idcontrol conformance`` defaults to 1 kHz and normal scheduling.
"""

from __future__ import annotations

import os
import shutil
import stat
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest

from idcontrol.driver import files
from idcontrol.security import RUNTIME_DIR_ENV
from idcontrol.settings import load_launch, private_endpoint
from idcontrol.tools.conformance import Suite

RATE_HZ = 100.0
PRIORITY = 30  # SCHED_FIFO; refused (no permission): the processes run at normal priority
OBLIGATIONS = {
    "hello and version",
    "credentials",
    "zeromq's routing id",
    "field shapes",
    "quaternion order x y z w",
    "units and frames",
    "period and jitter",
    "late command (reuse once)",
    "error replies",
    "reconnect with a new credential",
    "stop after 20 late",
    "watchdog (a silent daemon)",
    "safe stop on stop",
    "safe stop on daemon shutdown",
    "exit on SIGTERM",
    "seq monotonic",
}
IDCONTROL = [sys.executable, "-m", "idcontrol"]


def run_suite(command: list[str], **options) -> dict[str, object]:
    checks, _ = run_suite_keeping(command, **options)
    return checks


def run_suite_keeping(command: list[str], **options) -> tuple[dict[str, object], Suite]:
    lines: list[str] = []
    suite = Suite(command, rate_hz=RATE_HZ, log=lines.append, priority=PRIORITY, **options)
    checks = suite.run()
    print("\n" + "\n".join(lines))
    return {c.name: c for c in checks}, suite


def private_folder_of(suite: Suite) -> Path:
    """The one folder of the run's ipc:// sockets, checked to be this user's and 0700."""
    assert all(e.startswith("ipc://") for e in suite.endpoints.values()), suite.endpoints
    (folder,) = {Path(e.removeprefix("ipc://")).parent for e in suite.endpoints.values()}
    info = folder.lstat()
    assert stat.S_ISDIR(info.st_mode) and info.st_uid == os.getuid() and stat.S_IMODE(info.st_mode) == 0o700
    return folder


def test_the_suite_binds_private_ipc_sockets_and_loopback_tcp_only_for_a_too_long_workdir(tmp_path):
    """The daemon's and the proxy's channels are ipc:// sockets in a 0700 folder of the run (inside a work
    directory others may enter, too), in both launch files; a work directory too long for a socket path binds
    loopback TCP instead, and the run says so."""
    lines: list[str] = []
    suite = Suite(["true"], log=lines.append)
    folder = private_folder_of(suite)
    daemon, driver = load_launch(suite.daemon_launch).endpoints, load_launch(suite.driver_launch).endpoints
    assert (daemon.control, daemon.admin, daemon.telemetry) == tuple(
        suite.endpoints[k] for k in ("control", "admin", "telemetry")
    )
    assert driver.control == suite.endpoints["proxy"] and "tcp://" not in suite.driver_launch.read_text()
    suite.close()
    assert not folder.exists() and not lines

    workdir = Path(tempfile.mkdtemp(prefix="idc-"))  # short enough for socket paths
    try:
        workdir.chmod(0o755)
        suite = Suite(["true"], workdir=workdir, log=lines.append)
        folder = private_folder_of(suite)
        assert folder.parent == workdir and suite.daemon_launch.parent == workdir
        suite.close()
        assert not folder.exists() and suite.daemon_launch.exists() and not lines
    finally:
        shutil.rmtree(workdir)

    long = tmp_path / ("w" * 110)
    suite = Suite(["true"], workdir=long, log=lines.append)
    suite.close()
    assert all(e.startswith("tcp://127.0.0.1:") for e in suite.endpoints.values()), suite.endpoints
    assert sorted(long.iterdir()) == sorted([suite.daemon_launch, suite.driver_launch])  # no socket folder left
    assert len(lines) == 1 and "too long a path for a unix socket" in lines[0] and "loopback TCP" in lines[0]


def assert_compliant(checks: dict) -> None:
    assert set(checks) == OBLIGATIONS
    failed = [c.line() for c in checks.values() if not c.passed]
    assert not failed, "\n".join(failed)


@pytest.mark.timing  # real time at 100 Hz under SCHED_FIFO: alone, after the parallel tests
def test_the_python_sdk_example_driver_is_compliant():
    """A driver written on the SDK (read_state/apply around MuJoCo) keeps every obligation."""
    assert_compliant(run_suite([sys.executable, "-m", "idcontrol.driver.example", "--endpoint", "{endpoint}"]))


@pytest.mark.timing  # real time at 100 Hz under SCHED_FIFO: alone, after the parallel tests
def test_the_mujoco_bridge_is_compliant():
    """idcontrol bridge, real-time, on the launch file the suite hands it: every obligation."""
    assert_compliant(run_suite([*IDCONTROL, "bridge", "{launch}"], bridge_kind="mujoco"))


@pytest.mark.timing  # real time at 100 Hz under SCHED_FIFO: alone, after the parallel tests
def test_a_driver_that_ignores_the_late_limit_fails_the_obligations_about_it():
    """The suite can fail: a driver that stops only after 50 late commands fails 'stop after 20', the watchdog and
    the shutdown obligations, with the 50th late command as evidence, and keeps hello, credentials and seq."""
    checks = run_suite(
        [sys.executable, "-m", "idcontrol.driver.example", "--endpoint", "{endpoint}", "--late-limit", "50"]
    )
    failed = {name for name, c in checks.items() if not c.passed}
    assert {"stop after 20 late", "watchdog (a silent daemon)", "safe stop on daemon shutdown"} <= failed
    assert not failed & {"hello and version", "credentials", "seq monotonic", "field shapes"}
    assert "50th late command" in checks["stop after 20 late"].evidence


@pytest.mark.timing  # real time at 100 Hz under SCHED_FIFO: alone, after the parallel tests
def test_the_cpp_example_driver_is_compliant_and_allocates_nothing_in_its_loop(cpp_driver):
    """The header-only C++ client in the MuJoCo example keeps every obligation; its loop made no allocation."""
    binary, model = cpp_driver
    checks, suite = run_suite_keeping([str(binary), "--model", str(model), "--endpoint", "{endpoint}"])
    assert_compliant(checks)
    report = (suite.driver_output or {}).get("bridge", {})
    assert report["allocations_in_loop"] == 0  # operator new calls during run()
    assert report["states_sent"] > 4 * RATE_HZ and report["safe_stops"] >= 3  # more than 4 s of periods


CPP_DEFAULTS = """#include <idcontrol/driver.hpp>
#include <iostream>
int main() {
  std::cout << idcontrol::Driver::Options{}.endpoint << "\\n";
}
"""


def test_the_cpp_client_connects_to_the_private_control_endpoint_by_default(tmp_path, monkeypatch):
    """Driver::Options' default endpoint is the private control socket the Python side binds and connects to
    (ipc://RUNTIME/control), for each way the runtime directory is chosen; not a loopback port nobody serves."""
    if shutil.which("c++") is None or not Path("/usr/include/zmq.hpp").exists():
        pytest.skip("needs a C++17 compiler and libzmq3-dev, cppzmq-dev, libmsgpack-cxx-dev (.ci/run installs them)")
    source = tmp_path / "defaults.cpp"
    source.write_text(CPP_DEFAULTS)
    binary = tmp_path / "defaults"
    command = ["c++", "-std=c++17", f"-I{files.include_dir()}", str(source), "-o", str(binary), "-lzmq"]
    subprocess.run(command, check=True, capture_output=True, timeout=300)
    runtime = os.environ[RUNTIME_DIR_ENV]
    for env in (
        {RUNTIME_DIR_ENV: runtime},
        {RUNTIME_DIR_ENV: "", "XDG_RUNTIME_DIR": str(tmp_path)},
        {RUNTIME_DIR_ENV: "", "XDG_RUNTIME_DIR": "", "TMPDIR": str(tmp_path)},
    ):
        for name, value in env.items():
            monkeypatch.setenv(name, value)
        monkeypatch.setattr(tempfile, "tempdir", None)  # gettempdir() reads TMPDIR again
        out = subprocess.run([str(binary)], check=True, capture_output=True, text=True, timeout=60, env=os.environ)
        assert out.stdout.split() == [private_endpoint("control")], env


def test_idcontrol_driver_prints_the_include_and_cmake_directories():
    """`idcontrol driver --include` is where idcontrol/driver.hpp is; --cmake-dir holds the CMake config."""
    out = subprocess.run(
        [*IDCONTROL, "driver", "--include", "--cmake-dir"], capture_output=True, text=True, check=True, timeout=60
    ).stdout.split()
    assert (Path(out[0]) / "idcontrol" / "driver.hpp").is_file()
    assert (Path(out[1]) / "idcontrol_driverConfig.cmake").is_file()
