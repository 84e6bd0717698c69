"""``idcontrol launch``: start the daemon and the bridge of a launch file, run, stop, summarize.

The daemon and the bridge run as separate processes (each in its own
session, so Ctrl-C reaches only the launcher, which then stops the robot
in order: safe stop, statistics, daemon shutdown, bridge stop). While the
run goes on, one status line shows bridge time, mode, ticks, deadline misses
and compute time.
"""

from __future__ import annotations

import json
import math
import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import zmq

from idcontrol import jsontext
from idcontrol.client import AdminClient
from idcontrol.daemon.endpoints import bind
from idcontrol.errors import IdControlError, ProtocolError
from idcontrol.processes import terminate
from idcontrol.settings import LaunchConfig

SUMMARY_KEYS = (
    "ticks",
    "deadline_misses",
    "fell",
    "compute_us",
    "roundtrip_us",
    "tracking_error_rad",
    "tau_rate_mean",
    "formulation",
)


def check_endpoints_free(config: LaunchConfig) -> None:
    """Fail fast, before any process starts, when an endpoint's port is taken."""
    ctx = zmq.Context.instance()
    for name, endpoint in config.endpoints.items():
        s = ctx.socket(zmq.PUB)
        s.setsockopt(zmq.LINGER, 0)
        try:
            bind(s, endpoint, name)
        finally:
            s.close(linger=0)


@dataclass(frozen=True)
class LiveView:
    """How a launch starts the live view beside the daemon (the view is a tool: ``idcontrol launch`` gives
    :mod:`idcontrol.tools.live`'s). spawn : ``(launch file, port)`` -> its process.  connect : ``(port, timeout
    s)`` -> a client (closed at once) when its server accepts connections."""

    spawn: Callable[[Path, int], subprocess.Popen]
    connect: Callable[[int, float], Any]


class Launch:
    """One launched run. ``overrides`` are passed on to both child processes, ``daemon_args`` to the daemon;
    ``prepare`` is called with the admin client once the bridge is connected, before the robot is started
    (e.g. to set gains)."""

    def __init__(
        self,
        config: LaunchConfig,
        overrides: list[str],
        live: bool = True,
        prepare: Callable[[AdminClient], None] | None = None,
        daemon_args: list[str] | None = None,
        driver_command: list[str] | None = None,
        foxglove_port: int | None = None,
        viewer: LiveView | None = None,
    ) -> None:
        self.config = config
        self.foxglove_port = foxglove_port or config.telemetry.foxglove  # the live view (idcontrol.tools.live)
        if self.foxglove_port and viewer is None:
            raise IdControlError(
                f"a live view on port {self.foxglove_port} needs the launch's viewer (idcontrol launch gives it)"
            )
        self.viewer = viewer
        self.live_view: subprocess.Popen | None = None
        self.driver_command = driver_command  # a robot driver's command in place of the bridge
        self.overrides = overrides
        self.daemon_args = daemon_args or []
        self.live = live
        self.prepare = prepare
        self.daemon: subprocess.Popen | None = None
        self.bridge: subprocess.Popen | None = None
        self._bridge_stopped = False
        self._interrupted = False

    #: s the daemon may take to answer its admin channel (importing, loading the robot, compiled kernels' caches)
    DAEMON_READY_TIMEOUT_S = 60.0
    #: s the bridge, started with the daemon, waits for the daemon's welcome: longer than the daemon may take
    BRIDGE_HELLO_TIMEOUT_S = DAEMON_READY_TIMEOUT_S + 30.0

    def _spawn(self, role: str, stdout: int | None = None, extra: tuple[str, ...] = ()) -> subprocess.Popen:
        cmd = [sys.executable, "-m", "idcontrol", role, str(self.config.path), *self.overrides, *extra]
        if role == "bridge" and self.driver_command:
            cmd = driver_command(self.driver_command, self.config.endpoints.control, self.config.path)
        return subprocess.Popen(cmd, stdout=stdout, start_new_session=True)

    def _wait_daemon_ready(self, admin: AdminClient, timeout: float = DAEMON_READY_TIMEOUT_S) -> dict[str, Any]:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.daemon.poll() is not None:
                raise IdControlError(f"the daemon exited with code {self.daemon.returncode} before it was ready")
            if self.bridge is not None and self.bridge.poll() is not None:
                raise IdControlError(
                    f"the bridge exited with code {self.bridge.returncode} before the daemon was ready"
                )
            try:
                return admin.request("status", timeout=0.5)
            except TimeoutError:
                continue
        raise IdControlError(f"the daemon did not answer within {timeout:.0f} s")

    def _wait(self, admin: AdminClient, predicate, timeout: float, what: str) -> dict[str, Any]:
        deadline = time.monotonic() + timeout
        while True:
            status = admin.request("status")
            if predicate(status):
                return status
            for name, proc in (("daemon", self.daemon), ("bridge", self.bridge)):
                if proc is not None and proc.poll() is not None:
                    waiting = "before it connected" if what == f"the {name}" else f"while waiting for {what}"
                    raise IdControlError(f"the {name} exited with code {proc.returncode} {waiting}")
            if time.monotonic() > deadline:
                raise IdControlError(f"timed out after {timeout:.0f} s waiting for {what}")
            time.sleep(0.05)

    def run(self) -> dict[str, Any]:
        """Run to the end (duration, Ctrl-C, a fall, or a safe stop); return the summary."""
        check_endpoints_free(self.config)
        # Ctrl-C, and SIGTERM (kill, timeout, systemd, a CI runner), end the run as its duration would: the robot
        # safe-stops and daemon and bridge exit; by default SIGTERM ended the launcher alone and left them running
        previous = {sig: signal.signal(sig, self._on_interrupt) for sig in (signal.SIGINT, signal.SIGTERM)}
        admin = AdminClient.for_launch(self.config)
        started_wall = time.monotonic()
        bridge_report: dict[str, Any] = {}
        try:
            # The processes start together: each takes seconds to import and load its robot, and this project's
            # own bridge and live view wait for the daemon by themselves. A robot driver starts once the daemon
            # answers, since its wait for the daemon may be short.
            self.daemon = self._spawn("daemon", extra=tuple(self.daemon_args))
            if not self.driver_command:
                self.bridge = self._spawn(
                    "bridge", stdout=subprocess.PIPE, extra=("--hello-timeout", f"{self.BRIDGE_HELLO_TIMEOUT_S:g}")
                )
            if self.foxglove_port and self.viewer is not None:
                if self.config.realtime.spin_us > 0 and len(os.sched_getaffinity(0)) <= 2:
                    print(
                        "idcontrol: warning: the live view shares two CPUs with a spinning daemon; "
                        "a view that wants more CPU than the loop leaves idle gets it from the kernel in bursts of "
                        "up to 50 ms, which stall the loop (late commands, the watchdog). Set [realtime] "
                        "spin_us = 0, give it a third CPU, or watch a lock-step run (docs/benchmarks.md)",
                        file=sys.stderr,
                    )
                self.live_view = self.viewer.spawn(self.config.path, self.foxglove_port)
            self._wait_daemon_ready(admin)
            if self.live_view is not None and self.viewer is not None:
                self.viewer.connect(self.foxglove_port, 30.0).close()  # serving before the run starts, not during it
            if self.bridge is None:
                self.bridge = self._spawn("bridge", stdout=subprocess.PIPE)
            self._wait(admin, lambda s: s["bridge_connected"], 60.0, "the bridge")
            if self.prepare is not None:
                self.prepare(admin)
            status = admin.start()
            status = admin.request("status")
            t0 = status["t"]
            end_reason = self._monitor(admin, t0)
            status = admin.request("status")
            if status["mode"] == "run":
                admin.request("stop", reason=end_reason)
            self._wait(admin, lambda s: s["mode"] in ("stopped", "idle"), 5.0, "the safe stop")
            stats = admin.request("stats")
            sim_time = status["t"] - t0
            # the bridge first: a real-time bridge left without its daemon counts late commands until it stops
            bridge_report = self._stop_bridge()
            try:
                admin.request("shutdown")
            except TimeoutError:  # it may exit before its reply leaves; _stop_children ends it either way
                print("idcontrol: the daemon did not acknowledge shutdown; stopping it", file=sys.stderr)
        except TimeoutError:  # the admin channel went silent: the daemon died or hangs
            raise IdControlError(self._daemon_lost()) from None
        finally:
            for sig, handler in previous.items():
                signal.signal(sig, handler)
            admin.close()
            bridge_report = self._stop_children() or bridge_report
        summary = {key: stats[key] for key in SUMMARY_KEYS}
        summary.update(
            {
                "robot": self.config.robot,
                "launch_file": str(self.config.path),
                "end": end_reason,
                "sim_time_s": sim_time,
                "wall_time_s": time.monotonic() - started_wall,
                "bridge_mode": self.config.bridge.mode,
                "on_deadline_fraction": stats["on_deadline_fraction"],
                "velocity_error_rad_s": stats["velocity_error_rad_s"],
                "tau_mean": stats["tau_mean"],
                "phase_mean_us": stats["phase_mean_us"],
                "torque_clips": stats["torque_clips"],
                "torque_clips_run": stats["torque_clips_run"],
                "solve_failures": stats["solve_failures"],
                "fallbacks": stats["fallbacks"],
                "certificate_rejections": stats.get("certificate_rejections") or {},
                "no_slip": stats.get("no_slip"),
                "interventions": stats["interventions"],
                "object_dropped_at_s": stats["object_dropped_at_s"],
                "base_travel_m": stats.get("base_travel_m"),
                "fall_cause": stats.get("fall_cause"),
                "states_skipped": stats["states_skipped"],
                "errors": stats["errors"],
                "bridge": bridge_report,
                "mode_ticks": stats["mode_ticks"],
                "long_roundtrips": stats["long_roundtrips"],
                "overhead_us": stats["overhead_us"],
            }
        )
        if "log_path" in stats:
            summary.update(log_path=stats["log_path"], log_dropped=stats["log_dropped"])
        return summary

    def _daemon_lost(self) -> str:
        """What to tell the user when the daemon stops answering (the bridge is then stopped by ``finally``)."""
        code = self.daemon.poll() if self.daemon is not None else None
        if code is None:
            what = "stopped answering its admin channel (it is being stopped)"
        elif code < 0:
            what = f"was killed by signal {signal.Signals(-code).name}"
        else:
            what = f"exited with code {code}"
        return (
            f"the daemon {what}; the bridge was stopped (a robot driver's own watchdog stops the robot). "
            "No summary: the daemon's statistics went with it (a --log file keeps every tick up to the end)"
        )

    def _on_interrupt(self, *_: object) -> None:
        self._interrupted = True

    def _monitor(self, admin: AdminClient, t0: float) -> str:
        duration = self.config.duration
        last_print = 0.0
        while True:
            time.sleep(0.05)
            status = admin.request("status")
            if math.isnan(t0):  # no state was answered before the start: the run's time starts at the first
                t0 = status["t"]
            elapsed = status["t"] - t0 if not math.isnan(t0) else 0.0
            if self.live and time.monotonic() - last_print > 0.5:
                last_print = time.monotonic()
                line = (
                    f"t {elapsed:7.2f} s  mode {status['mode']:<9} formulation {status['formulation']:<13} "
                    f"ticks {status['ticks']:>7}  late {status['deadline_misses']:>5}"
                )
                print(
                    "\r" + line if sys.stderr.isatty() else line,
                    end="" if sys.stderr.isatty() else "\n",
                    file=sys.stderr,
                    flush=True,
                )
            if self._interrupted:
                return "interrupted"
            if status["fell"]:
                return "fell"
            if status["mode"] != "run":
                return f"daemon left run mode: {status['reason']}"
            if duration and elapsed >= duration:
                return "duration reached"
            for name, proc in (("daemon", self.daemon), ("bridge", self.bridge)):
                if proc.poll() is not None:
                    return f"the {name} exited with code {proc.returncode}"

    def _stop_bridge(self) -> dict[str, Any]:
        """Stop the bridge and return its report; {} if it gave none or was stopped before."""
        report: dict[str, Any] = {}
        if self.bridge is not None and not self._bridge_stopped:
            self._bridge_stopped = True
            if self.bridge.poll() is None:
                self.bridge.send_signal(signal.SIGTERM)
            try:
                out, _ = self.bridge.communicate(timeout=10)
                for line in reversed((out or b"").decode().splitlines()):
                    if line.startswith("{"):
                        report = json.loads(line).get("bridge", {})
                        break
            except subprocess.TimeoutExpired:
                self.bridge.kill()
                self.bridge.wait()
        return report

    def _stop_children(self) -> dict[str, Any]:
        """Stop the bridge, then the daemon (already told to shut down); the bridge's report, if it gave one now."""
        report = self._stop_bridge()
        terminate(self.live_view)
        if self.daemon is not None:
            try:
                self.daemon.wait(timeout=5)
            except subprocess.TimeoutExpired:
                terminate(self.daemon, timeout=5)
        return report


def driver_command(command: list[str], endpoint: str, launch_file: str | Path) -> list[str]:
    """A robot driver's command line with ``{endpoint}`` (the daemon's control endpoint) and ``{launch}`` (the
    launch file) filled in."""
    return [arg.replace("{endpoint}", endpoint).replace("{launch}", str(launch_file)) for arg in command]


def _phase_line(means: dict[str, float]) -> str:
    """Where a tick's time goes, from the daemon's phase means (µs): its own stages, the controller's, transport."""
    if "core_tick" not in means:
        return "n/a"
    inner = ", ".join(f"{key} {means[key]:.0f}" for key in ("model", "contacts", "build", "solve") if key in means)
    tick = f"core tick {means['core_tick']:.0f}" + (f" ({inner})" if inner else "")
    parts = [f"decode {means['decode']:.0f}", tick, f"send {means['send']:.0f}"]
    if "transport" in means:
        parts.append(f"transport {means['transport']:.0f}")
    return ", ".join(parts) + " µs"


def _ticks_line(ticks: int, by_mode: dict[str, int]) -> str:
    """The states answered, split by the daemon's mode: before the start (idle), the run, and the safe stop
    that ends every run (damping until every joint is slower than the rest velocity, or the safe-stop timeout:
    a robot sagging under damping takes the whole timeout, 1 s by default)."""
    parts = [f"{name} {by_mode[name]}" for name in ("run", "safe_stop", "idle", "stopped") if by_mode.get(name)]
    text = f"{ticks} ({', '.join(parts)})" if parts else f"{ticks}"
    if by_mode.get("safe_stop"):  # in lock-step the timeout's wall seconds hold more simulated ticks
        text += "; the safe stop ends at rest or after safe_stop_timeout s of the daemon's clock"
    return text


def _misses_line(summary: dict[str, Any]) -> str:
    """Deadline misses; in lock-step, the controller's own lateness, with the long round trips (which hold the
    simulator's step) apart."""
    misses, ticks = summary["deadline_misses"], max(summary["ticks"], 1)
    text = f"{misses} ({100.0 * misses / ticks:.3f} %)"
    if summary.get("bridge_mode") == "lockstep":
        long_trips = summary.get("long_roundtrips", 0)
        text += (
            f": compute over the period (lock-step; {long_trips} round trips over the period, "
            f"{100.0 * long_trips / ticks:.1f} %, hold the simulator's step)"
        )
    return text


def _failures_line(interventions: dict[str, int], rejections: dict[str, int]) -> str:
    """Run-mode solves whose torque was not sent, by cause (certificate failures by check), and what the fallback
    policy did instead."""
    c = interventions
    checks = ", ".join(f"{check} {count}" for check, count in sorted(rejections.items()))
    return (
        f"{c.get('certificate', 0)} failed the certificate{f' ({checks})' if checks else ''}, "
        f"{c.get('solve_failed', 0)} failed, "
        f"{c.get('non_finite', 0)} non-finite, {c.get('over_budget', 0)} over budget; "
        f"{c.get('held', 0)} held the previous torque, {c.get('safe_controller', 0)} safe stops"
    )


def format_summary(summary: dict[str, Any]) -> str:
    def q(d: dict[str, float]) -> str:
        return f"p50 {d['p50']:.0f}  p99 {d['p99']:.0f}  max {d['max']:.0f} µs"

    ticks = summary["ticks"]
    ran = (summary.get("mode_ticks") or {}).get("run", 0) > 0  # metrics of a run that never ran are no result
    rows = [
        ("robot / formulation", f"{summary['robot']} / {summary['formulation']} ({summary['bridge_mode']})"),
        ("ended", summary["end"]),
        ("simulated time", f"{summary['sim_time_s']:.2f} s in {summary['wall_time_s']:.1f} s wall"),
        ("ticks", _ticks_line(ticks, summary.get("mode_ticks") or {})),
        ("deadline misses", _misses_line(summary)),
        ("compute", q(summary["compute_us"])),
        ("round trip", q(summary["roundtrip_us"]) if not math.isnan(summary["roundtrip_us"]["p50"]) else "n/a"),
        ("mean per tick", _phase_line(summary.get("phase_mean_us") or {})),
        (
            "tracking error",
            f"{summary['tracking_error_rad']:.4f} rad, {summary['velocity_error_rad_s']:.3f} rad/s"
            if ran
            else "n/a (no tick in run mode)",
        ),
        ("E|Δτ|, E|τ|", f"{summary['tau_rate_mean']:.1f} N·m/s, {summary['tau_mean']:.3f} N·m" if ran else "n/a"),
        ("fell", f"yes: {summary.get('fall_cause') or 'fell'}" if summary["fell"] else "no"),
        (
            "solves not used",
            _failures_line(summary.get("interventions") or {}, summary.get("certificate_rejections") or {}),
        ),
    ]
    if summary.get("no_slip"):
        held, of = summary["no_slip"]["held"], summary["no_slip"]["of"]
        released = f" ({of - held} released under load: with their rows the answer was beyond the certificate's bounds)"
        rows.append(("no-slip held", f"on {held} of {of} loaded contact-ticks" + (released if of > held else "")))
    if summary.get("base_travel_m") is not None:
        dx, dy, dz = summary["base_travel_m"]
        rows.append(("base travel", f"x {dx:+.3f}  y {dy:+.3f}  z {dz:+.3f} m"))
    if "log_path" in summary:
        rows.append(("log", f"{summary['log_path']} ({summary['log_dropped']} records dropped)"))
    if summary.get("object_dropped_at_s") is not None:
        rows.append(("object dropped", f"at t = {summary['object_dropped_at_s']:.3f} s"))
    return "\n".join(f"{k:<20} {v}" for k, v in rows)


def launch(
    config: LaunchConfig,
    overrides: list[str],
    summary_json: str | None,
    live: bool = True,
    daemon_args: list[str] | None = None,
    driver: list[str] | None = None,
    foxglove: int | None = None,
    viewer: LiveView | None = None,
) -> int:
    try:
        summary = Launch(
            config,
            overrides,
            live,
            daemon_args=daemon_args,
            driver_command=driver,
            foxglove_port=foxglove,
            viewer=viewer,
        ).run()
    except ProtocolError as e:
        raise IdControlError(f"the daemon refused a request: {e.code}: {e}") from None
    print("", file=sys.stderr)
    print(format_summary(summary))
    if summary_json:
        Path(summary_json).write_text(jsontext.dumps(summary, indent=1) + "\n")
        print(f"wrote {summary_json}", file=sys.stderr)
    code = exit_status(summary)
    if code:
        print(
            f"idcontrol: exit {code}: "
            + ("the robot fell" if code == EXIT_FELL else f"the run ended before its duration ({summary['end']})"),
            file=sys.stderr,
        )
    return code


#: ``idcontrol launch``'s exit statuses beyond 0 (the run ended as asked: its duration, or Ctrl-C) and 2 (an error
#: before or around the run: a bad launch file, a process that would not start or died, a refused request)
EXIT_FELL, EXIT_ENDED_EARLY = 3, 4


def exit_status(summary: dict[str, Any]) -> int:
    """0 when the run ended as asked (its duration reached, or interrupted) without a fall; EXIT_FELL when the
    robot fell; EXIT_ENDED_EARLY when it stopped for another reason (a safe stop, the bridge's late-command rule,
    a process that exited)."""
    if summary["fell"]:
        return EXIT_FELL
    return 0 if summary["end"] in ("duration reached", "interrupted") else EXIT_ENDED_EARLY
