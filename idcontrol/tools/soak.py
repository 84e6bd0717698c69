"""``idcontrol soak``: the closed loop at 1 kHz in real time for minutes; memory and deadlines over time.

The daemon and a real-time MuJoCo bridge run as separate processes (as ``idcontrol launch`` starts them),
the quadruped standing, on free loopback ports. Every ``sample_s`` seconds the resident set size (RSS) of
both processes and the daemon's tick and deadline counters are sampled; at the end the daemon's
statistics and the bridge's report are collected. A safe stop on the way (20 late commands in a row on a
busy machine, say) is recorded and the robot started again (after a fall, with a new bridge process: a
fresh simulation), so that memory is watched for the whole run.
Memory is flat when the RSS slope over the second half of the run is near zero.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import tempfile
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from idcontrol import jsontext
from idcontrol.client import AdminClient
from idcontrol.launcher import Launch
from idcontrol.settings import load_launch

#: the quadruped standing as the shipped ``launch/quadruped_stand_realtime.toml`` stands it, with its controller
#: settings: without the contact-consistent q̇_des and the activation distance, the no-slip LCP's answers went over
#: the torque bound (the stand file without the former: 1922 refused in a minute; the soak without both: 81 safe
#: stops and 41 falls in 10 minutes); its channels are ipc:// sockets in the soak's own temporary folder (0700), which
#: no other user's process can reach
LAUNCH_TEMPLATE = """
robot = "quadruped"
duration = 0.0
[controller]
formulation = "{formulation}"
penetration_tolerance = 0.001
activation_distance = 0.0001
consistent_contact_velocity = true
[reference]
name = "hold"
[bridge]
mode = "realtime"
[realtime]
priority = {priority}
{realtime}
[endpoints]
control = "ipc://{folder}/control"
admin = "ipc://{folder}/admin"
telemetry = "ipc://{folder}/telemetry"
"""


#: With a real-time priority and two CPUs or more to run on, the soak runs with the real-time settings of the
#: shipped ``launch/quadruped_stand_realtime.toml``: a CPU each (the daemon on the second of the CPUs it may use,
#: the bridge and both ZeroMQ I/O threads on the first), the daemon spinning for each state and warming its tick
#: meanwhile, idle CPUs kept from deep sleep.
REALTIME_SETTINGS = """daemon_cpu = {daemon_cpu}
bridge_cpu = {bridge_cpu}
io_cpu = {bridge_cpu}
spin_us = 1000.0
cpu_latency_us = 0
warm = true"""


def realtime_table(priority: int, cpus: set[int]) -> str:
    """The soak's [realtime] keys beyond the priority, for a process that may run on ``cpus``:
    :data:`REALTIME_SETTINGS` under SCHED_FIFO with two CPUs or more, none otherwise (spinning without a real-time
    priority, or on one CPU, would only starve the bridge)."""
    if priority <= 0 or len(cpus) < 2:
        return ""
    first, second = sorted(cpus)[:2]
    return REALTIME_SETTINGS.format(daemon_cpu=second, bridge_cpu=first)


def rss_mb(pid: int) -> float:
    """Resident set size of a process, MiB (Linux /proc)."""
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024.0
    return float("nan")


@dataclass
class SoakReport:
    minutes: float
    formulation: str
    samples: list[dict[str, float]] = field(default_factory=list)  # t_s, daemon/bridge RSS MiB, ticks, misses
    end: str = ""
    stops: list[str] = field(default_factory=list)  # why run mode ended each time before the end (then restarted)
    bridge_restarts: int = 0  # new bridge processes after a fall (the bridge's RSS samples then restart)
    stats: dict[str, Any] = field(default_factory=dict)  # the daemon's final statistics
    bridge: dict[str, Any] = field(default_factory=dict)  # the bridge's report
    rss_slope_mb_per_min: dict[str, float] = field(default_factory=dict)  # over the second half of the run


def slope_per_min(t_s: list[float], values: list[float]) -> float:
    """Least-squares slope of values over time, per minute (NaN with fewer than 3 samples)."""
    if len(t_s) < 3:
        return float("nan")
    return float(np.polyfit(np.asarray(t_s) / 60.0, np.asarray(values), 1)[0])


def run_soak(
    minutes: float, formulation: str = "two_stage_qp", sample_s: float = 10.0, priority: int = 50
) -> SoakReport:
    """``priority``: the daemon's and bridge's SCHED_FIFO priority (0: normal scheduling; see idcontrol.realtime)."""
    report = SoakReport(minutes, formulation)
    with tempfile.TemporaryDirectory(prefix="idc-") as tmp:  # private; short: ipc paths are limited to ~100 bytes
        path = Path(tmp) / "soak.toml"
        realtime = realtime_table(priority, os.sched_getaffinity(0))
        path.write_text(
            LAUNCH_TEMPLATE.format(
                formulation=formulation,
                priority=priority,
                realtime=realtime,
                folder=tmp,
            )
        )
        run = Launch(load_launch(path), [], live=False)
        admin = AdminClient.for_launch(run.config)
        try:
            run.daemon = run._spawn("daemon")
            run._wait_daemon_ready(admin)
            run.bridge = run._spawn("bridge", stdout=subprocess.PIPE)
            run._wait(admin, lambda s: s["bridge_connected"], 60.0, "the bridge")
            admin.start()
            started = time.monotonic()
            next_sample = started
            report.end = "duration reached"
            while time.monotonic() - started < minutes * 60.0:
                time.sleep(max(0.0, min(1.0, next_sample - time.monotonic())))
                status = admin.request("status")
                if status["mode"] != "run":  # a safe stop (e.g. late commands on a busy machine): note it, go on
                    report.stops.append(f"t = {time.monotonic() - started:.1f} s: {status['reason']}")
                    run._wait(admin, lambda s: s["mode"] in ("stopped", "idle"), 10.0, "the safe stop")
                    if "fell" in status["reason"]:  # a fresh simulation: a new bridge process, standing
                        run.bridge.send_signal(signal.SIGTERM)
                        run.bridge.communicate(timeout=10)
                        report.bridge_restarts += 1
                        run.bridge = run._spawn("bridge", stdout=subprocess.PIPE)
                        time.sleep(1.0)  # the old connection's states stop: the daemon takes the new one
                        run._wait(admin, lambda s: s["bridge_connected"], 60.0, "the new bridge")
                    admin.start()
                    continue
                if time.monotonic() >= next_sample:
                    next_sample += sample_s
                    sample = {
                        "t_s": round(time.monotonic() - started, 1),
                        "daemon_rss_mb": round(rss_mb(run.daemon.pid), 2),
                        "bridge_rss_mb": round(rss_mb(run.bridge.pid), 2),
                        "ticks": status["ticks"],
                        "deadline_misses": status["deadline_misses"],
                    }
                    report.samples.append(sample)
                    print(jsontext.dumps(sample), file=sys.stderr, flush=True)
            if admin.request("status")["mode"] == "run":
                admin.request("stop", reason="soak over")
            run._wait(admin, lambda s: s["mode"] in ("stopped", "idle"), 5.0, "the safe stop")
            report.stats = admin.request("stats")
            admin.request("shutdown")
        finally:
            admin.close()
            report.bridge = run._stop_children()
    half = [s for s in report.samples if s["t_s"] >= report.samples[-1]["t_s"] / 2] if report.samples else []
    for who in ("daemon", "bridge"):
        report.rss_slope_mb_per_min[who] = slope_per_min([s["t_s"] for s in half], [s[f"{who}_rss_mb"] for s in half])
    return report


def main(minutes: float, formulation: str, sample_s: float, json_path: str | None, priority: int = 50) -> int:
    report = run_soak(minutes, formulation, sample_s, priority)
    s = report.stats
    first, last = (report.samples[0], report.samples[-1]) if report.samples else ({}, {})
    summary = {
        "minutes": minutes,
        "priority": priority,
        "end": report.end,
        "ticks": s.get("ticks"),
        "on_deadline_fraction": s.get("on_deadline_fraction"),
        "deadline_misses": s.get("deadline_misses"),
        "compute_us": s.get("compute_us"),
        "roundtrip_us": s.get("roundtrip_us"),
        "slack_us": s.get("slack_us"),
        "safe_stops_then_restarted": len(report.stops),
        "first_stops": report.stops[:5],
        "bridge_restarts_after_a_fall": report.bridge_restarts,
        "bridge_late_commands": report.bridge.get("late_commands"),
        "bridge_safe_stops": report.bridge.get("safe_stops"),
        "daemon_rss_mb": [first.get("daemon_rss_mb"), last.get("daemon_rss_mb")],
        "bridge_rss_mb": [first.get("bridge_rss_mb"), last.get("bridge_rss_mb")],
        "rss_slope_mb_per_min": report.rss_slope_mb_per_min,
    }
    print(jsontext.dumps(summary, indent=1))
    if json_path:
        Path(json_path).write_text(jsontext.dumps(asdict(report), indent=1) + "\n")
    return 0
