"""The daemon and the MuJoCo bridge as real processes, over real loopback sockets."""

from __future__ import annotations

import contextlib
import json
import os
import re
import signal
import subprocess
import sys
import time
import tomllib
from pathlib import Path

import msgpack
import numpy as np
import pytest
import zmq

from idcontrol import protocol as wire
from idcontrol.client import AdminClient
from idcontrol.daemon.endpoints import bind
from idcontrol.robot.model import RobotModel
from idcontrol.security import Credential
from idcontrol.settings import private_endpoint

LAUNCH = Path(__file__).resolve().parents[1] / "launch"
SUMMARY_KEYS = {
    "ticks",
    "deadline_misses",
    "fell",
    "compute_us",
    "roundtrip_us",
    "tracking_error_rad",
    "tau_rate_mean",
    "formulation",
}


def launch_file(
    tmp_path: Path, name: str = "quadruped_stand", endpoint_lines: str = "", **replacements: str
) -> tuple[Path, dict[str, str]]:
    """A copy of a shipped launch file in ``tmp_path``, each replacement (old text: new text) made and
    ``endpoint_lines`` as its ``[endpoints]`` table; and the endpoints its daemon binds, by channel: those named,
    the others private to this test (conftest's ``runtime_dir_of_the_test``)."""
    text = (LAUNCH / f"{name}.toml").read_text()
    for old, new in replacements.items():
        assert old in text, f"{old!r} is not in launch/{name}.toml"
        text = text.replace(old, new)
    if endpoint_lines:
        text += f"\n[endpoints]\n{endpoint_lines}\n"
    path = tmp_path / f"{name}.toml"
    path.write_text(text)
    named = tomllib.loads(text).get("endpoints", {})
    private = {channel: private_endpoint(channel) for channel in ("control", "admin", "telemetry")}
    return path, private | named


def spawn(*args: str, stdout=subprocess.DEVNULL, new_session: bool = False) -> subprocess.Popen:
    """``python -m idcontrol ARGS``; ``new_session``: in its own process group (for killpg)."""
    env = {**os.environ, "OPENBLAS_NUM_THREADS": "1", "OMP_NUM_THREADS": "1"}
    return subprocess.Popen(
        [sys.executable, "-m", "idcontrol", *args],
        stdout=stdout,
        stderr=subprocess.DEVNULL,
        env=env,
        start_new_session=new_session,
    )


def stop(proc: subprocess.Popen) -> None:
    if proc.poll() is None:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


def reject_constant(name: str) -> None:
    raise AssertionError(f"{name} is not JSON (strict parsers refuse it)")


def wait_for(admin: AdminClient, predicate, timeout: float = 60.0) -> dict:
    deadline = time.monotonic() + timeout
    status = None
    while time.monotonic() < deadline:
        try:
            status = admin.request("status", timeout=1.0)
        except TimeoutError:
            continue
        if predicate(status):
            return status
        time.sleep(0.02)
    raise AssertionError(f"condition not reached in {timeout} s; last status {status}")


@contextlib.contextmanager
def daemon_and_bridge(launch: Path, endpoints: dict[str, str], *daemon_args: str, new_session: bool = False):
    """The daemon for ``launch`` (with ``daemon_args``) and its lock-step bridge, connected and started;
    yields (daemon, admin). Whatever still runs at the end is stopped."""
    daemon = spawn("daemon", str(launch), *daemon_args, new_session=new_session)
    admin = AdminClient(endpoints["admin"], credential_for=endpoints["control"])
    bridge = None
    try:
        wait_for(admin, lambda s: True)
        bridge = spawn("bridge", str(launch))
        wait_for(admin, lambda s: s["bridge_connected"])
        admin.request("start")
        yield daemon, admin
    finally:
        admin.close()
        for p in (bridge, daemon):
            if p is not None:
                stop(p)


def test_sigterm_to_the_launcher_stops_the_run_and_both_processes(tmp_path):
    """`kill` (SIGTERM, as timeout, systemd and CI runners send it) ends a run as Ctrl-C does: the robot
    safe-stops, daemon and bridge exit, the summary is printed, and the ports are free for the next launch."""
    path, endpoints = launch_file(tmp_path)
    command = [sys.executable, "-m", "idcontrol", "launch", str(path), "--duration", "0", "--quiet"]
    launcher = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    admin = AdminClient(endpoints["admin"], credential_for=endpoints["control"])
    try:
        wait_for(admin, lambda s: s["mode"] == "run" and s["ticks"] > 100, timeout=120.0)
        launcher.send_signal(signal.SIGTERM)
        out, err = launcher.communicate(timeout=60)
    finally:
        admin.close()
        if launcher.poll() is None:
            launcher.kill()
    assert launcher.returncode == 0, err[-3000:]
    assert "interrupted" in out + err
    for channel, endpoint in endpoints.items():  # nothing left bound: daemon and bridge are gone
        ctx = zmq.Context()
        probe = ctx.socket(zmq.REP)
        try:
            bind(probe, endpoint, channel)  # as a daemon binds: refused where a process still serves an ipc:// path
        finally:
            probe.close(linger=0)
            ctx.term()


def test_launch_runs_the_quadruped_standing_and_writes_the_summary(tmp_path):
    """`idcontrol launch` runs daemon + MuJoCo bridge lock-step and reports the required summary keys."""
    path, _ = launch_file(tmp_path)
    summary_path = tmp_path / "summary.json"
    command = [
        sys.executable,
        "-m",
        "idcontrol",
        "launch",
        str(path),
        "--duration",
        "0.5",
        "--quiet",
        "--summary-json",
        str(summary_path),
    ]
    out = subprocess.run(command, capture_output=True, text=True, timeout=180)
    assert out.returncode == 0, out.stderr[-3000:]
    summary = json.loads(summary_path.read_text(), parse_constant=reject_constant)  # strict JSON: no NaN
    assert SUMMARY_KEYS <= set(summary)
    assert summary["formulation"] == "two_stage_qp" and summary["fell"] is False
    assert summary["ticks"] >= 500
    for key in ("compute_us", "roundtrip_us"):
        assert set(summary[key]) == {"p50", "p99", "max"} and summary[key]["p50"] > 0
    assert isinstance(summary["deadline_misses"], int) and summary["tracking_error_rad"] >= 0
    assert "deadline misses" in out.stdout and "round trip" in out.stdout
    assert np.abs(summary["base_travel_m"]).max() < 0.005  # m: standing still ("base travel" in the table)
    assert "base travel" in out.stdout
    phases = summary["phase_mean_us"]  # where the time goes, also printed as one line
    line = next((text for text in out.stdout.splitlines() if text.startswith("mean per tick")), "(none)")
    # transport (round trip − compute) is negative when the command reaches the bridge before the daemon's send call
    # returns (seen: −5 µs beside a 53 µs send); it cannot be below −send: nothing arrives before it is sent
    assert re.search(
        rf"mean per tick +decode {phases['decode']:.0f}, core tick {phases['core_tick']:.0f} "
        rf"\(model \d+, contacts \d+, build \d+, solve \d+\), send \d+, transport -?\d+ µs",
        line,
    ), (line, phases)
    assert phases["transport"] >= -phases["send"], phases


def test_launch_fails_fast_on_a_bad_launch_file(tmp_path):
    path, _ = launch_file(tmp_path, **{'robot = "quadruped"': 'robot = "hexapod"'})
    out = subprocess.run(
        [sys.executable, "-m", "idcontrol", "launch", str(path)], capture_output=True, text=True, timeout=60
    )
    assert out.returncode == 2 and "unknown robot 'hexapod'" in out.stderr


def test_killed_bridge_leaves_the_daemon_waiting_and_a_new_bridge_resumes_only_after_start(tmp_path):
    path, endpoints = launch_file(tmp_path)
    daemon = spawn("daemon", str(path))
    bridges = []
    admin = AdminClient(endpoints["admin"], credential_for=endpoints["control"])
    try:
        wait_for(admin, lambda s: True)
        bridges.append(spawn("bridge", str(path)))
        wait_for(admin, lambda s: s["bridge_connected"])
        admin.request("start")
        wait_for(admin, lambda s: s["t"] > 0.2)
        bridges[0].kill()  # SIGKILL: no goodbye
        stopped = wait_for(admin, lambda s: s["mode"] in ("safe_stop", "stopped"), timeout=10)
        assert "watchdog" in stopped["reason"] and daemon.poll() is None, stopped
        wait_for(admin, lambda s: s["mode"] == "stopped")
        bridges.append(spawn("bridge", str(path)))
        t_restart = wait_for(admin, lambda s: s["bridge_connected"])["t"]  # the new simulation's clock
        time.sleep(0.5)
        status = admin.request("status")
        assert status["mode"] == "stopped", status  # no resume without an explicit start
        assert status["t"] == t_restart, status  # a stopped robot is not simulated forward
        admin.request("start")
        resumed = wait_for(admin, lambda s: s["t"] > t_restart + 0.05, timeout=120)
        assert resumed["mode"] == "run", resumed
    finally:
        for b in bridges:
            stop(b)
        admin.close()
        stop(daemon)
    assert daemon.returncode == 0


def test_sigterm_sends_safe_stop_commands_before_the_daemon_exits(tmp_path):
    """The shutdown is orderly: states keep being answered with safe_stop until the robot is at rest."""
    path, endpoints = launch_file(tmp_path)
    robot = RobotModel("quadruped")
    daemon = spawn("daemon", str(path))
    ctx = zmq.Context()
    bridge = ctx.socket(zmq.DEALER)
    bridge.setsockopt(zmq.LINGER, 0)
    bridge.connect(endpoints["control"])
    admin = AdminClient(endpoints["admin"], context=ctx, credential_for=endpoints["control"])
    q, v = robot.standing_configuration(), np.zeros(robot.nv)
    v[robot.actuated_dofs] = 1.0  # moving joints: the safe stop must damp them
    modes = []
    try:
        wait_for(admin, lambda s: True)
        token = Credential.of_daemon(endpoints["control"]).token
        bridge.send(wire.encode_hello(robot.name, robot.nq, robot.nv, robot.nu, "lockstep", token))  # paced here
        assert bridge.poll(5000) and msgpack.unpackb(bridge.recv(), raw=False)["type"] == "welcome"
        admin.request("start")
        seq = 0
        while daemon.poll() is None and seq < 5000:
            seq += 1
            bridge.send(wire.encode_state(seq, seq * 1e-3, q, v))
            if not bridge.poll(200):
                break
            reply = msgpack.unpackb(bridge.recv(), raw=False)
            modes.append(reply["mode"])
            if seq == 10:
                daemon.send_signal(signal.SIGTERM)
            if reply["mode"] == "safe_stop":
                tau = np.frombuffer(reply["tau"], "<f8")
                assert np.all(tau < 0)  # damping opposes the +1 rad/s joint velocities
                v[robot.actuated_dofs] *= 0.9  # the robot slows down
        daemon.wait(timeout=60)
    finally:
        bridge.close(linger=0)
        admin.close()
        ctx.term()
        stop(daemon)
    assert modes[:10] == ["run"] * 10
    assert "safe_stop" in modes and modes[-1] in ("safe_stop", "stopped")
    assert daemon.returncode == 0


def test_bridge_refuses_a_daemon_of_another_robot(tmp_path):
    quad, endpoints = launch_file(tmp_path)
    arm_text = quad.read_text().replace('robot = "quadruped"', 'robot = "arm"')
    arm = tmp_path / "arm.toml"
    arm.write_text(arm_text)
    daemon = spawn("daemon", str(quad))
    admin = AdminClient(endpoints["admin"], credential_for=endpoints["control"])
    try:
        wait_for(admin, lambda s: True)
        bridge = subprocess.run(
            [sys.executable, "-m", "idcontrol", "bridge", str(arm)], capture_output=True, text=True, timeout=60
        )
        assert bridge.returncode == 2 and "robot_mismatch" in bridge.stderr + bridge.stdout
    finally:
        admin.close()
        stop(daemon)


@pytest.mark.parametrize("formulation", ["noslip_lcp", "coulomb_lcp"])
def test_formulation_override_reaches_the_daemon(tmp_path, formulation):
    path, endpoints = launch_file(tmp_path)
    daemon = spawn("daemon", str(path), "--formulation", formulation)
    admin = AdminClient(endpoints["admin"], credential_for=endpoints["control"])
    try:
        assert wait_for(admin, lambda s: True)["formulation"] == formulation
    finally:
        admin.close()
        stop(daemon)


def run_launch(path: Path, tmp_path: Path, *extra: str, status: int = 0) -> dict:
    """`idcontrol launch PATH --quiet --summary-json ... EXTRA`; asserts its exit ``status``; the summary."""
    summary_path = tmp_path / "summary.json"
    command = [
        sys.executable,
        "-m",
        "idcontrol",
        "launch",
        str(path),
        "--quiet",
        "--summary-json",
        str(summary_path),
        *extra,
    ]
    out = subprocess.run(command, capture_output=True, text=True, timeout=300)
    assert out.returncode == status, out.stderr[-3000:]
    if status:
        assert f"idcontrol: exit {status}: " in out.stderr
    return json.loads(summary_path.read_text())


def test_launch_exit_status_says_how_the_run_ended():
    """0: as asked (duration, Ctrl-C); 3: a fall, however the run then ended; 4: any other early end."""
    from idcontrol.launcher import EXIT_ENDED_EARLY, EXIT_FELL, exit_status

    assert exit_status({"end": "duration reached", "fell": False}) == 0
    assert exit_status({"end": "interrupted", "fell": False}) == 0
    assert exit_status({"end": "fell", "fell": True}) == EXIT_FELL == 3
    assert exit_status({"end": "daemon left run mode: watchdog", "fell": True}) == EXIT_FELL
    assert exit_status({"end": "daemon left run mode: solve failed", "fell": False}) == EXIT_ENDED_EARLY == 4
    assert exit_status({"end": "the bridge exited with code 1", "fell": False}) == EXIT_ENDED_EARLY


def test_arm_holds_the_box_through_its_sinusoid_in_a_no_slip_world(tmp_path):
    path, _ = launch_file(tmp_path, "arm_grasp")
    summary = run_launch(path, tmp_path, "--duration", "1.0")
    assert summary["object_dropped_at_s"] is None and summary["fell"] is False
    assert summary["tracking_error_rad"] < 0.02 and summary["sim_time_s"] >= 1.0
    assert summary["base_travel_m"] is None  # a fixed base


def test_arm_stops_and_says_why_when_its_grasp_model_is_wrong(tmp_path):
    """μ = 1 in the world while the controller assumes μ = ∞ (no squeeze): as the box slips, the controller's
    answers need more than 30 times the arm's torque limits (sent clipped, they used to fling the box away); the
    certificate rejects them, the fallback holds and then stops the arm within 0.5 s, and the summary says why.
    (A box that is dropped is reported: tests/test_mismatch.py.)"""
    path, _ = launch_file(
        tmp_path,
        "arm_grasp",
        **{
            'mode = "lockstep"\nmu = inf': 'mode = "lockstep"\nmu = 1.0',  # the world (bridge section)
            "mu = 1.0\nwatchdog_ms": "mu = inf\nwatchdog_ms",  # the controller
        },
    )
    assert 'mode = "lockstep"\nmu = 1.0' in path.read_text() and "mu = inf\nwatchdog_ms" in path.read_text()
    summary = run_launch(path, tmp_path, "--duration", "0.5", status=4)  # ended before its duration
    assert "certificate: torque_bound" in summary["end"] and summary["sim_time_s"] < 0.5, summary["end"]
    assert summary["interventions"]["certificate"] >= 1 and summary["interventions"]["safe_controller"] == 1


def test_switching_formulation_mid_trot_over_admin_misses_no_tick(tmp_path):
    """Daemon + MuJoCo bridge trotting lock-step: three run-time switches, every state answered, no fall."""
    path, endpoints = launch_file(tmp_path, "quadruped_trot")
    with daemon_and_bridge(path, endpoints) as (_, admin):
        wait_for(admin, lambda s: s["t"] > 0.7)  # trotting (0.5 s stand, then the gait)
        for name in ("two_stage_qp", "coulomb_lcp", "two_stage_qp"):
            t_switch = admin.request("status")["t"]
            assert admin.request("set_formulation", name=name)["formulation"] == name
            wait_for(admin, lambda s, t0=t_switch: s["t"] > t0 + 0.1)
        status = admin.request("status")
        stats = admin.request("stats")
        assert status["mode"] == "run" and not status["fell"], status
        assert stats["states_skipped"] == 0 and stats["states_dropped"] == 0, stats
        assert stats["solve_failures"] == 0, stats
        assert stats["ticks"] >= int(status["t"] * 1000) - 1, (stats["ticks"], status["t"])


def _children_running(pattern: str) -> list[int]:
    """PIDs of processes whose command line contains ``pattern``."""
    pids = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                if pattern in (entry / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace"):
                    pids.append(int(entry.name))
            except OSError:
                continue
    return pids


def test_launch_says_so_stops_the_bridge_and_fails_when_the_daemon_is_killed(tmp_path):
    """kill -9 of the daemon under `idcontrol launch`: a clear message (no traceback), the bridge stopped, a
    non-zero exit."""
    path, endpoints = launch_file(tmp_path, **{"duration = 5.0": "duration = 60.0"})
    launch = subprocess.Popen(
        [sys.executable, "-m", "idcontrol", "launch", str(path), "--quiet"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    admin = AdminClient(endpoints["admin"], credential_for=endpoints["control"])
    try:
        wait_for(admin, lambda s: s["mode"] == "run" and s["ticks"] > 100, timeout=120.0)
        daemons = _children_running(f"idcontrol daemon {path}")
        assert len(daemons) == 1
        os.kill(daemons[0], signal.SIGKILL)
        _, err = launch.communicate(timeout=60)
    finally:
        admin.close()
        if launch.poll() is None:
            launch.kill()
    assert launch.returncode != 0
    assert "Traceback" not in err and "the daemon was killed by signal SIGKILL" in err, err[-2000:]
    assert not _children_running(f"idcontrol bridge {path}")


def test_terminate_kills_a_child_that_does_not_exit_on_sigterm_and_says_so():
    from idcontrol.processes import terminate

    deaf = subprocess.Popen(
        [
            sys.executable,
            "-c",
            "import signal, sys, time\n"
            "signal.signal(signal.SIGTERM, signal.SIG_IGN); print('ready', flush=True)\n"
            "time.sleep(60)",
        ],
        stdout=subprocess.PIPE,
    )
    assert deaf.stdout.readline().strip() == b"ready"  # its SIGTERM handler is in place
    started = time.monotonic()
    assert terminate(deaf, timeout=0.5) is False
    assert deaf.returncode == -signal.SIGKILL and time.monotonic() - started < 10.0
    polite = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    assert terminate(polite, timeout=10.0) is True and polite.returncode == -signal.SIGTERM
    assert terminate(polite) is True  # already ended: nothing to do
