"""``idcontrol experiment robots``: every robot × formulation × task through the generic launch files.

Tasks (each run is the launch file with ``--robot`` and ``--formulation``, in process through the test harness,
lock-step MuJoCo):

* ``stand``: ``launch/stand.toml``, the legged robots, with each formulation's own defaults;
* ``stand_trot_options``: the same with the trot launch file's ``[formulations.*]`` options (the no-slip LCP's
  locomotion options, the QPs' contact-relative dissipation);
* ``trot``: ``launch/trot.toml``, the quadrupeds, forward at 0.2 m/s;
* ``sinusoid``: ``launch/joint_sinusoid.toml``, the arms, 0.1 rad at 1 Hz.

Per run: mean joint tracking error, whether and how it fell (the core's fall cause), unloaded feet while
standing (legs whose summed simulator normal force stays below 1 N for over half of the second half of the
run), distance and speed of the trot (from the end of its 0.5 s start-up), clipped joint-ticks. Per quadruped,
the trot reference's own ``sample`` cost (p50 / p99 µs over 3000 walking samples). ``--readme PATH`` rewrites
the tables between the ``robots-table`` markers of that file.
"""

from __future__ import annotations

import time
import traceback
from collections.abc import Callable, Iterable
from dataclasses import dataclass, replace
from functools import partial
from pathlib import Path
from typing import Any

import numpy as np

from idcontrol.tools.experiments.pool import run_all

LAUNCH_DIR = Path(__file__).resolve().parents[3] / "launch"
FORMULATIONS = ("two_stage_qp", "coulomb_lcp", "noslip_lcp")
LEGGED = ("quadruped", "solo12", "a1", "anymal_b", "hyq", "talos")
QUADRUPEDS = ("quadruped", "solo12", "a1", "anymal_b", "hyq")
ARMS = ("arm", "ur5", "kinova")
SECONDS = {"stand": 10.0, "stand_trot_options": 10.0, "trot": 10.0, "sinusoid": 5.0}
QUICK_SECONDS = {"stand": 2.0, "stand_trot_options": 2.0, "trot": 2.0, "sinusoid": 1.5}
LAUNCH = {
    "stand": "stand.toml",
    "stand_trot_options": "stand.toml",
    "trot": "trot.toml",
    "sinusoid": "joint_sinusoid.toml",
}
TROT_START = 0.5  # s: the trot's stand_time
MARK_START, MARK_END = "<!-- robots-table:start -->", "<!-- robots-table:end -->"


@dataclass(frozen=True)
class RunSpec:
    task: str
    robot: str
    formulation: str
    seconds: float

    @property
    def name(self) -> str:
        return f"{self.task}/{self.robot}/{self.formulation}"


def plan(quick: bool = False, only: Iterable[str] = ()) -> list[RunSpec]:
    """The matrix (``only``: keep runs whose name contains any of these substrings)."""
    seconds = QUICK_SECONDS if quick else SECONDS
    specs = []
    for task, robots in (("stand", LEGGED), ("stand_trot_options", LEGGED), ("trot", QUADRUPEDS), ("sinusoid", ARMS)):
        for robot in robots:
            for formulation in FORMULATIONS:
                specs.append(RunSpec(task, robot, formulation, seconds[task]))
    only = [o for o in only if o]
    return [s for s in specs if not only or any(o in s.name for o in only)]


def _config(spec: RunSpec, launch_dir: Path):
    from idcontrol.settings import load_launch

    config = load_launch(launch_dir / LAUNCH[spec.task]).with_overrides(formulation=spec.formulation, robot=spec.robot)
    if spec.task == "stand_trot_options":
        trot = load_launch(launch_dir / "trot.toml")
        config = replace(config, formulations={**config.formulations, **trot.formulations})
    elif spec.task == "stand":
        config = replace(config, formulations={}, controller=replace(config.controller, options={}))
    return config


def run_one(spec: RunSpec, launch_dir: Path = LAUNCH_DIR) -> dict[str, Any]:
    """One run's metrics (see the module docstring)."""
    import logging

    from idcontrol.testing.runners import run_in_process

    logging.getLogger("idcontrol.sim.mujoco").setLevel(logging.ERROR)  # the model differences: in `robot check`
    started = time.perf_counter()
    run = run_in_process(_config(spec, launch_dir), spec.seconds)
    robot = run.robot
    out: dict[str, Any] = {
        "task": spec.task,
        "robot": spec.robot,
        "formulation": spec.formulation,
        "seconds": spec.seconds,
        "sim_seconds": float(run.t[-1] + run.dt) if run.n else 0.0,
        "wall_seconds": time.perf_counter() - started,
        "ticks": run.ticks_in_run,
        "completed": run.ticks_in_run >= int(round(spec.seconds * 1000)) - 1,
        "tracking_error_rad": float(run.summary["tracking_error_rad"]),
        "fell": bool(run.summary["fell"]),
        "fall_cause": run.summary.get("fall_cause"),
        "end_reason": run.end_reason,
        "clipped": run.clip_count_in_run,
    }
    if robot.legs and spec.task != "trot" and run.ticks_in_run:
        out["unloaded_feet"] = _unloaded_feet(run)
    if spec.task == "trot" and run.n:
        moving = run.t >= TROT_START
        if np.count_nonzero(moving) > 1:
            first, last = np.flatnonzero(moving)[[0, -1]]
            out["distance_m"] = float(run.q[last, 0] - run.q[first, 0])
            out["speed_m_s"] = out["distance_m"] / max(float(run.t[last] - run.t[first]), 1e-9)
    return out


def _unloaded_feet(run) -> list[str]:
    """Legs whose summed simulator normal force is below 1 N on over half of the run's second half."""
    robot = run.robot
    m = robot.model
    legs = robot.legs
    loads = np.zeros((run.n, len(legs)))
    for k, frame in enumerate(robot.sphere_frame_ids):
        joint = m.frames[int(frame)].parentJoint
        for i, leg in enumerate(legs):
            if m.getJointId(leg.joints[-1]) == joint:
                loads[:, i] += run.force_sensed[:, k, 2]
    half = loads[run.n // 2 :]
    if not len(half):
        return []
    return [leg.name for i, leg in enumerate(legs) if np.mean(half[:, i] < 1.0) > 0.5]


def _run_safely(spec: RunSpec, launch_dir: Path) -> dict[str, Any]:
    try:
        return run_one(spec, launch_dir)
    except Exception as e:  # a run that raises is a result, not the end of the matrix
        return {
            "task": spec.task,
            "robot": spec.robot,
            "formulation": spec.formulation,
            "seconds": spec.seconds,
            "error": f"{type(e).__name__}: {e}",
            "traceback": traceback.format_exc(limit=3),
        }


def sample_costs(robots: Iterable[str] = QUADRUPEDS, samples: int = 3000) -> dict[str, tuple[float, float]]:
    """The trot reference's ``sample`` cost per quadruped (p50, p99 µs over the walking samples, base standing)."""
    from idcontrol.reference import make_reference
    from idcontrol.robot.model import RobotModel

    out = {}
    for name in robots:
        robot = RobotModel(name)
        gait = make_reference("trot", robot)
        q, v = robot.standing_configuration(), np.zeros(robot.nv)
        costs = []
        for k in range(samples):
            t0 = time.perf_counter()
            gait.sample(k * 1e-3, q, v)
            costs.append(time.perf_counter() - t0)
        walking = np.array(costs[1000:]) * 1e6
        out[name] = (float(np.percentile(walking, 50)), float(np.percentile(walking, 99)))
    return out


def run_matrix(
    specs: list[RunSpec], *, jobs: int = 1, launch_dir: Path = LAUNCH_DIR, progress: Callable[[str], None] = print
) -> list[dict[str, Any]]:
    """Run every spec (``jobs`` processes at a time), reporting each result; results in ``specs`` order."""
    return run_all(
        specs,
        partial(_run_safely, launch_dir=launch_dir),
        jobs=jobs,
        progress=progress,
        name=lambda spec: spec.name,
        describe=describe,
    )


def describe(r: dict[str, Any]) -> str:
    """One line per run."""
    if "error" in r:
        return f"raised {r['error']}"
    head = f"{r['sim_seconds']:.2f} s in {r['wall_seconds']:.0f} s wall, " + (
        f"{r['tracking_error_rad']:.4f} rad" if r["ticks"] else "no tick in run mode"
    )
    if r["fell"]:
        head += f", FELL at {r['sim_seconds']:.2f} s ({r['fall_cause']})"
    elif not r["completed"]:
        head += f", stopped: {r['end_reason']}"
    if "distance_m" in r:
        head += f", {r['distance_m']:.2f} m at {r['speed_m_s']:.3f} m/s"
    if r.get("unloaded_feet"):
        head += f", unloaded {r['unloaded_feet']}"
    return head


# ---------------------------------------------------------------------------------------------------- the tables
def _cell(r: dict[str, Any] | None) -> str:
    if r is None:
        return "—"
    if "error" in r:
        return "raised " + r["error"].split(":")[0]
    if r["fell"]:
        cause = (r.get("fall_cause") or "").split(" when ")[0].split(" (")[0]
        return f"**fell** at {r['sim_seconds']:.1f} s ({cause})"
    if not r["completed"]:
        return f"**stopped** at {r['sim_seconds']:.1f} s ({r['end_reason'].split(':')[0]})"
    text = f"{r['tracking_error_rad']:.4f} rad"
    if "distance_m" in r:
        text = f"{r['distance_m']:.2f} m, {r['speed_m_s']:.2f} m/s, {r['tracking_error_rad']:.3f} rad"
    if r.get("unloaded_feet"):
        text += f", unloaded {', '.join(r['unloaded_feet'])}"
    return text


def tables(results: list[dict[str, Any]], costs: dict[str, tuple[float, float]], command: str) -> str:
    """The robots tables of docs/robots.md (markdown) from the matrix's results."""
    by = {(r["task"], r["robot"], r["formulation"]): r for r in results}
    lines = [
        f"Measured with `{command}` (lock-step MuJoCo, μ = 1; a cell: mean joint error, or how the run ended; "
        "'unloaded': feet carrying under 1 N for most of the second half)."
    ]
    sections = (
        ("stand", LEGGED, "Stand {} s, `launch/stand.toml`, each formulation's defaults"),
        ("stand_trot_options", LEGGED, "Stand {} s, with the trot launch file's formulation options"),
        (
            "trot",
            QUADRUPEDS,
            "Trot {} s forward at 0.2 m/s, `launch/trot.toml` (distance and speed after the 0.5 s start-up)",
        ),
        ("sinusoid", ARMS, "1 Hz joint sinusoid (0.1 rad) {} s, `launch/joint_sinusoid.toml`"),
    )
    for task, robots, title in sections:
        seconds = sorted({r["seconds"] for r in results if r["task"] == task})
        title = title.format("/".join(f"{x:g}" for x in seconds))
        present = [robot for robot in robots if any((task, robot, f) in by for f in FORMULATIONS)]
        if not present:
            continue
        extra = task == "trot" and costs
        lines += [
            "",
            f"{title}:",
            "",
            "| robot | " + " | ".join(FORMULATIONS) + (" | trot `sample` p50 / p99 |" if extra else " |"),
            "|---|" + "---|" * (len(FORMULATIONS) + (1 if extra else 0)),
        ]
        for robot in present:
            cells = [_cell(by.get((task, robot, f))) for f in FORMULATIONS]
            if extra:
                p50, p99 = costs.get(robot, (float("nan"), float("nan")))
                cells.append(f"{p50:.1f} / {p99:.1f} µs")
            lines.append(f"| {robot} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


def write_readme_tables(path: Path, text: str) -> None:
    """Replace what lies between the robots-table markers of ``path`` (ConfigError without the markers)."""
    from idcontrol.errors import ConfigError

    content = path.read_text()
    if MARK_START not in content or MARK_END not in content:
        raise ConfigError(f"{path} has no {MARK_START} ... {MARK_END} markers to write the table between")
    head, rest = content.split(MARK_START, 1)
    _, tail = rest.split(MARK_END, 1)
    path.write_text(f"{head}{MARK_START}\n{text}\n{MARK_END}{tail}")
