"""``idcontrol experiment hardware``: the robots on what a real robot measures (docs/robustness.md).

Each run is ``launch/stand_hw.toml`` or ``launch/trot_hw.toml`` with ``--robot`` and ``--formulation``, in process
through the test harness, lock-step MuJoCo behind the bridge's sensor and actuator models:

* ``stand``: 60 s standing, `typical` sensors and actuators (a tick of delay);
* ``trot``: 20 s at 0.2 m/s, `typical` sensors and actuators; ``trot_ideal``: the same with `ideal` sensors (the
  truth, same actuators), the reference the issue's "within 2×" is measured against;
* ``trot_bumps``, ``trot_slope``, ``trot_step``: the trot on ground the controller is not told of (± 2 cm bumps, a
  10° slope, a 4 cm step), ``stand_<terrain>`` the no-slip LCP standing there.

Judged on the simulator's truth, not on what the sensors said: a run holds when it completes its time in run mode;
it fell when the true base ends below half its standing height above the ground under it or tilted past 60°. Per
run: mean joint tracking error and E|Δτ| (the core's), the true distance travelled, the end reason.
``--margins PATH`` instead reads a finished ``idcontrol sweep sweeps/robustness.toml`` and prints the largest
error each formulation held, standing and trotting, one error at a time.
"""

from __future__ import annotations

import json
import math
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
QUADRUPEDS = ("quadruped", "solo12", "a1", "anymal_b", "hyq")
TERRAINS = {"bumps": 0.02, "slope": 0.0, "step": 0.04}  # terrain → terrain_height, m
SECONDS = {"stand": 60.0, "trot": 20.0}
QUICK_SECONDS = {"stand": 3.0, "trot": 3.0}


@dataclass(frozen=True)
class RunSpec:
    task: str  # stand, trot, trot_ideal, trot_<terrain>, stand_<terrain>
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
    for robot in QUADRUPEDS:
        for formulation in FORMULATIONS:
            specs += [
                RunSpec("stand", robot, formulation, seconds["stand"]),
                RunSpec("trot", robot, formulation, seconds["trot"]),
                RunSpec("trot_ideal", robot, formulation, seconds["trot"]),
            ]
        for terrain in TERRAINS:
            specs += [RunSpec(f"trot_{terrain}", robot, f, seconds["trot"]) for f in ("two_stage_qp", "coulomb_lcp")]
            specs.append(RunSpec(f"stand_{terrain}", robot, "noslip_lcp", seconds["trot"]))
    only = [o for o in only if o]
    return [s for s in specs if not only or any(o in s.name for o in only)]


def _config(spec: RunSpec, launch_dir: Path):
    from idcontrol.settings import load_launch, sensor_settings

    motion, _, terrain = spec.task.partition("_")
    launch = "stand_hw.toml" if motion == "stand" else "trot_hw.toml"
    config = load_launch(launch_dir / launch).with_overrides(formulation=spec.formulation, robot=spec.robot)
    bridge = config.bridge
    if terrain == "ideal":
        bridge = replace(bridge, sensors=sensor_settings({"preset": "ideal"}, "experiment"))
    elif terrain:
        bridge = replace(bridge, terrain=terrain, terrain_height=TERRAINS[terrain] or bridge.terrain_height)
    return replace(config, bridge=bridge)


def run_one(spec: RunSpec, launch_dir: Path = LAUNCH_DIR) -> dict[str, Any]:
    """One run's metrics, judged on the simulator's truth (see the module docstring)."""
    import logging

    from idcontrol.robot.model import RobotModel
    from idcontrol.sim.launch import simulator_for
    from idcontrol.testing.runners import run_in_process

    logging.getLogger("idcontrol.sim.mujoco").setLevel(logging.ERROR)
    started = time.perf_counter()
    config = _config(spec, launch_dir)
    robot = RobotModel(config.robot)
    sim = simulator_for(config, robot)
    truth = getattr(sim, "truth", sim.state)
    start = np.array(truth().q)
    with np.errstate(all="ignore"):
        run = run_in_process(config, spec.seconds, robot=robot, simulator=sim)
    end = np.array(truth().q)
    standing = float(robot.standing_configuration()[2])
    ground = _ground_height(sim, end[:2])
    x, y = float(end[4]), float(end[3])
    tilt = math.acos(max(-1.0, min(1.0, 1.0 - 2.0 * (x * x + y * y))))
    fell = bool(end[2] - ground < 0.5 * standing or tilt > math.radians(60.0) or not np.all(np.isfinite(end)))
    planned = int(round(spec.seconds / run.dt))
    return {
        "task": spec.task,
        "robot": spec.robot,
        "formulation": spec.formulation,
        "seconds": spec.seconds,
        "sim_seconds": run.ticks_in_run * run.dt,
        "wall_seconds": time.perf_counter() - started,
        "held": bool(run.ticks_in_run >= planned and run.end_reason == "duration reached") and not fell,
        "fell": fell,
        "end_reason": run.end_reason,
        "tracking_error_rad": float(run.summary["tracking_error_rad"]),
        "tau_rate_mean": float(run.summary["tau_rate_mean"]),
        "distance_m": float(np.linalg.norm(end[:2] - start[:2])),
        "base_height_above_ground_m": float(end[2] - ground),
    }


def _ground_height(sim: Any, xy: np.ndarray) -> float:
    """The simulated ground's height under ``xy``, m (a back end without terrain: 0)."""
    inner = getattr(sim, "sim", sim)
    height = getattr(inner, "ground_height", None)
    return 0.0 if height is None else float(height(float(xy[0]), float(xy[1])))


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
    verdict = "held" if r["held"] else ("FELL" if r["fell"] else "stopped")
    return (
        f"{verdict} {r['sim_seconds']:.2f} s ({r['end_reason']}), {r['tracking_error_rad']:.4f} rad, "
        f"E|Δτ| {r['tau_rate_mean']:.0f} N·m/s, {r['distance_m']:.2f} m, {r['wall_seconds']:.0f} s wall"
    )


def table(results: list[dict[str, Any]], command: str) -> str:
    """Markdown: a row per task and robot, a column per formulation: held (or how far it got), tracking, E|Δτ|,
    distance."""
    cells: dict[tuple[str, str], dict[str, str]] = {}
    for r in results:
        if "error" in r:
            text = f"error: {r['error'][:60]}"
        else:
            head = (
                "held"
                if r["held"]
                else (
                    f"**fell** at {r['sim_seconds']:.1f} s" if r["fell"] else f"**stopped** at {r['sim_seconds']:.1f} s"
                )
            )
            text = f"{head}, {r['tracking_error_rad']:.4f} rad, {r['tau_rate_mean']:.0f} N·m/s"
            if r["task"] != "stand":
                text += f", {r['distance_m']:.2f} m"
        cells.setdefault((r["task"], r["robot"]), {})[r["formulation"]] = text
    lines = [
        f"`{command}`",
        "",
        "| task | robot | " + " | ".join(FORMULATIONS) + " |",
        "|---|---|" + "---|" * len(FORMULATIONS),
    ]
    for (task, robot), row in cells.items():
        lines.append(f"| {task} | {robot} | " + " | ".join(row.get(f, "—") for f in FORMULATIONS) + " |")
    return "\n".join(lines) + "\n"


# ---------------------------------------------------------------------------------------------------- margins
#: the sweep's error axes: option-name label → (the error's name, its unit)
ERRORS = {
    "height": ("base height bias", "m"),
    "tilt": ("base tilt (IMU)", "rad"),
    "velocity": ("base velocity error (Gauss–Markov σ)", "m/s"),
    "jointvel": ("joint velocity noise", "rad/s"),
    "delay": ("actuation delay", "ticks"),
}


def margins(rows: list[dict[str, Any]]) -> str:
    """Markdown: for each robot, motion and error, the largest error (by magnitude; a bias both ways) at which each
    formulation held its run, from the rows of ``idcontrol sweep sweeps/robustness.toml``. A run holds when it
    completed without a fall; ``≥ x``: the largest error tried held; ``< x``: even the smallest tried did not;
    ``—``: not run."""
    held: dict[tuple[str, str, str, str], list[tuple[float, bool]]] = {}
    for row in rows:
        name = str(row.get("options", ""))
        motion, _, rest = name.partition("-")
        label, _, value = rest.partition("-")
        if label not in ERRORS:
            continue
        number = float(value.replace("m", "-").replace("_", "."))
        ok = row.get("status") == "done" and bool(row.get("completed")) and not bool(row.get("fell"))
        held.setdefault((str(row["robot"]), motion, label, str(row["formulation"])), []).append((number, ok))
    lines = ["| robot | motion | error | " + " | ".join(FORMULATIONS) + " |", "|---|---|---|" + "---|" * 3]
    for robot in sorted({k[0] for k in held}):
        for motion in ("stand", "trot"):
            for label, (what, unit) in ERRORS.items():
                row = []
                for f in FORMULATIONS:
                    runs = held.get((robot, motion, label, f), [])
                    if not runs:
                        row.append("—")
                        continue
                    # the largest magnitude up to which every smaller one held too, on each side of zero
                    sides = []
                    for sign in (1.0, -1.0):
                        side = sorted((abs(v), ok) for v, ok in runs if v * sign > 0)
                        best, all_held = 0.0, True
                        for magnitude, ok in side:
                            if not ok:
                                all_held = False
                                break
                            best = magnitude
                        if side:
                            prefix = "+" if sign > 0 and any(v < 0 for v, _ in runs) else "−" if sign < 0 else ""
                            text = f"{best:g}" if best else f"< {side[0][0]:g}"
                            sides.append(("≥ " if all_held else "") + prefix + text)
                    row.append(" / ".join(sides) + f" {unit}")
                lines.append(f"| {robot} | {motion} | {what} | " + " | ".join(row) + " |")
    return "\n".join(lines) + "\n"


def read_rows(path: Path) -> list[dict[str, Any]]:
    """A sweep's rows (its JSON output)."""
    from idcontrol.tools.sweep.results import load_rows

    if path.suffix == ".json":
        return json.loads(path.read_text()) if path.read_text().lstrip().startswith("[") else load_rows(path)
    return load_rows(path)
