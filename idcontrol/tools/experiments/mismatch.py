"""``idcontrol experiment mismatch``: how far the controllers' rigid contact predictions are from four simulators.

Each formulation that predicts contact forces solves a rigid-contact model every tick. The simulators apply
their own contact model: ``rigid`` (the paper's impulse LCP, the controller's own model), ``mujoco`` (soft
constraints, the stiff default), ``drake`` (SAP compliant point contact, an independent model:
:mod:`idcontrol.sim.drake`) and ``ess`` (spring-damper point contacts with bristle friction, crossings in order:
:mod:`idcontrol.sim.ess`). This experiment runs every cell of

* the quadruped standing (``stand``) and trotting (``trot``) on rigid, MuJoCo, Drake and ESS;
* the arm holding its box (``grasp``) on MuJoCo and Drake (the rigid simulator is left out: its grasp is
  the controller's model again; ESS models no movable bodies);

with each formulation of :data:`FORMULATIONS`, through the test harness (the daemon's control core, in process),
and measures what the predictions missed. The runs use the shipped launch files: the quadruped's
``launch/quadruped_trot.toml`` (its controller settings and ``[formulations.NAME]`` tables; ``stand`` holds
the posture with them, since the Coulomb LCP needs its contact-consistent q̇_des to stand in a soft simulator)
and ``launch/arm_grasp.toml``, with only ``bridge.kind`` replaced. The launch files' safety guards stay on: a
run they stop is a failed cell, with the reason.

Metrics (per cell): the summed normal force predicted at tick i against the one the simulator applied
during the step that followed, E|Σf̂ₙ − Σfₙ| (N) and relative to E[Σfₙ]; the same per contact,
E Σₖ|f̂ₙ,ₖ − fₙ,ₖ| (N), which also counts a load shared differently among the feet; tracking error
(mean |q_ref − q| over the actuated joints, rad); E|Δτ| (N·m/s); whether the robot fell or dropped the box;
how many solves failed (and the fallbacks that took over).
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass, replace
from functools import partial
from pathlib import Path
from typing import Any

import numpy as np

from idcontrol.robot.model import RobotModel
from idcontrol.settings import LaunchConfig, ReferenceSettings, load_launch
from idcontrol.testing.run import ClosedLoopRun
from idcontrol.tools.experiments.paper import LAUNCH_DIR, force_prediction_error, summed_normal_forces
from idcontrol.tools.experiments.pool import run_all

FORMULATIONS = ("two_stage_qp", "coulomb_lcp", "noslip_lcp", "sensed_id")
SIMULATORS = {
    "stand": ("rigid", "mujoco", "drake", "ess"),
    "trot": ("rigid", "mujoco", "drake", "ess"),
    "grasp": ("mujoco", "drake"),
}
SECONDS = {"stand": 5.0, "trot": 10.0, "grasp": 3.0}
QUICK_SECONDS = {"stand": 0.5, "trot": 1.5, "grasp": 0.5}
LAUNCH = {"stand": "quadruped_trot.toml", "trot": "quadruped_trot.toml", "grasp": "arm_grasp.toml"}
#: The contacts a figure shows (a diagonal pair of the trot alternates with the other; two opposing fingertips).
SHOWN_CONTACTS = {
    "stand": ("LF_foot", "RF_foot"),
    "trot": ("LF_foot", "RF_foot"),
    "grasp": ("fingertip_1", "fingertip_3"),
}
#: The window a figure shows, s: one gait cycle of the trot (0.3 s), one period of the arm's 3 Hz sinusoid.
WINDOW = {"stand": 0.3, "trot": 0.3, "grasp": 1.0 / 3.0}


@dataclass(frozen=True)
class Cell:
    """One run: a task on a simulator with a formulation, for ``seconds`` of simulated time."""

    task: str
    sim: str
    formulation: str
    seconds: float

    @property
    def name(self) -> str:
        return f"{self.task}/{self.sim}/{self.formulation}"

    @property
    def predicts_forces(self) -> bool:
        return self.formulation != "sensed_id"


def plan(quick: bool = False, only: Iterable[str] = ()) -> list[Cell]:
    """Every cell (quick: short runs), keeping those whose name contains any of ``only``."""
    seconds = QUICK_SECONDS if quick else SECONDS
    cells = [
        Cell(task, sim, f, seconds[task]) for task, sims in SIMULATORS.items() for sim in sims for f in FORMULATIONS
    ]
    only = list(only)
    return [c for c in cells if not only or any(part in c.name for part in only)]


def cell_config(cell: Cell, launch_dir: Path = LAUNCH_DIR) -> LaunchConfig:
    """The cell's launch configuration: its task's launch file with the simulator and formulation replaced."""
    config = load_launch(launch_dir / LAUNCH[cell.task]).with_overrides(cell.seconds, cell.formulation, cell.sim)
    if cell.task == "stand":
        config = replace(config, reference=ReferenceSettings("hold"))
    return config


# ---------------------------------------------------------------------------------------------------- metrics
def normal_forces(run: ClosedLoopRun) -> tuple[np.ndarray, np.ndarray]:
    """(n − 1, k) predicted normal force on each contact at tick i and the one applied during the step after, N.

    Normals as :func:`~idcontrol.tools.experiments.paper.summed_normal_forces` takes them (tick i's, else
    tick i + 1's, else vertical).
    """
    normal = run.contact_normal
    has = np.linalg.norm(normal, axis=2) > 0.5
    up = np.zeros_like(normal[:-1])
    up[..., 2] = 1.0
    n = np.where(has[:-1, :, None], normal[:-1], np.where(has[1:, :, None], normal[1:], up))
    predicted = np.einsum("nkj,nkj->nk", run.force_predicted[:-1], normal[:-1])
    applied = np.abs(np.einsum("nkj,nkj->nk", run.force_sensed[1:], n))
    return predicted, applied


def _rounded(values: Iterable[float], digits: int = 4) -> list[float | None]:
    return [None if not np.isfinite(x) else float(f"{x:.{digits}g}") for x in np.asarray(list(values), dtype=float)]


def metrics_of(cell: Cell, run: ClosedLoopRun, wall_s: float) -> dict[str, Any]:
    """The JSON object of one cell: its metrics, its outcome and the figure's window of normal forces."""
    s = run.summary
    planned = int(round(cell.seconds / run.dt))
    in_run = run.ticks_in_run
    completed = in_run >= planned and run.end_reason == "duration reached"
    out: dict[str, Any] = {
        "task": cell.task,
        "sim": cell.sim,
        "formulation": cell.formulation,
        "name": cell.name,
        "seconds_planned": cell.seconds,
        "sim_seconds": in_run * run.dt,
        "wall_seconds": wall_s,
        "completed": bool(completed),
        "end_reason": run.end_reason,
        "fell": bool(s["fell"]),
        "object_dropped_at_s": s.get("object_dropped_at_s"),
        "tracking_error_rad": s["tracking_error_rad"],
        "tau_rate_mean": s["tau_rate_mean"],
        "failed_solves": int(np.count_nonzero(run.in_run & ~run.found)),
        "fallbacks": dict(s.get("fallbacks") or {}),
        "force_err_abs_N": None,
        "force_err_rel": None,
        "contact_force_err_abs_N": None,
        "mean_normal_force_N": None,
    }
    _, applied_sum, rows = summed_normal_forces(run)
    if rows.any():
        out["mean_normal_force_N"] = float(np.mean(applied_sum[rows]))
    if cell.predicts_forces and rows.any():
        out["force_err_abs_N"], out["force_err_rel"] = force_prediction_error(run)
        predicted, applied = normal_forces(run)
        out["contact_force_err_abs_N"] = float(np.mean(np.abs(predicted[rows] - applied[rows]).sum(axis=1)))
    if cell.task == "stand":
        last = np.flatnonzero(run.in_run)[-int(round(0.1 / run.dt)) :]
        phi = run.contact_phi[last]
        out["rest_penetration_m"] = float(-np.nanmean(phi)) if np.isfinite(phi).any() else None
    out["window"] = _window(cell, run)
    return out


def _window(cell: Cell, run: ClosedLoopRun) -> dict[str, Any] | None:
    """Normal forces of the shown contacts over the last full window before the run's end (figure data)."""
    predicted, applied = normal_forces(run)
    ticks = int(round(WINDOW[cell.task] / run.dt))
    rows = np.flatnonzero(run.in_run[:-1])
    if len(rows) < ticks:
        return None
    take = rows[-ticks:]
    names = list(run.robot.sphere_names)
    shown = [c for c in SHOWN_CONTACTS[cell.task] if c in names]
    return {
        "t": _rounded(run.t[take] - run.t[take[0]]),
        "t0": float(run.t[take[0]]),
        "predicted": {c: _rounded(predicted[take, names.index(c)]) for c in shown} if cell.predicts_forces else {},
        "applied": {c: _rounded(applied[take, names.index(c)]) for c in shown},
    }


# ---------------------------------------------------------------------------------------------------- running
def run_cell(cell: Cell, launch_dir: Path = LAUNCH_DIR, reached: list[float] | None = None) -> dict[str, Any]:
    """Run one cell and return its JSON object; ``reached[0]`` follows the simulated time (s)."""
    from idcontrol.sim.launch import simulator_for
    from idcontrol.testing.runners import run_in_process

    config = cell_config(cell, launch_dir)
    robot = RobotModel(config.robot)
    sim = simulator_for(config, robot)
    reached = [0.0] if reached is None else reached
    started = time.perf_counter()
    with np.errstate(all="ignore"):  # a failing solve shows in the metrics, not as a stream of warnings
        run = run_in_process(
            config, cell.seconds, robot=robot, simulator=sim, until=lambda state: reached.__setitem__(0, state.t)
        )
    return metrics_of(cell, run, time.perf_counter() - started)


def run_cell_safely(cell: Cell, launch_dir: Path = LAUNCH_DIR) -> dict[str, Any]:
    """As :func:`run_cell`; an exception (a simulator that cannot step, a solver that raises) is the cell's
    result, with the simulated time it was raised at."""
    started = time.perf_counter()
    reached = [0.0]
    try:
        return run_cell(cell, launch_dir, reached)
    except Exception as e:  # noqa: BLE001 - one broken cell must not end the matrix; its error is its result
        return {
            "task": cell.task,
            "sim": cell.sim,
            "formulation": cell.formulation,
            "name": cell.name,
            "seconds_planned": cell.seconds,
            "sim_seconds": reached[0],
            "wall_seconds": time.perf_counter() - started,
            "completed": False,
            "end_reason": f"error: {type(e).__name__}: {e}",
            "fell": False,
            "object_dropped_at_s": None,
            "tracking_error_rad": None,
            "tau_rate_mean": None,
            "failed_solves": None,
            "fallbacks": {},
            "force_err_abs_N": None,
            "force_err_rel": None,
            "contact_force_err_abs_N": None,
            "mean_normal_force_N": None,
            "window": None,
        }


def run_matrix(
    cells: list[Cell], *, jobs: int = 1, launch_dir: Path = LAUNCH_DIR, progress: Callable[[str], None] = print
) -> list[dict[str, Any]]:
    """Run every cell (``jobs`` processes at a time), reporting each through ``progress``; results in order."""
    return run_all(
        cells,
        partial(run_cell_safely, launch_dir=launch_dir),
        jobs=jobs,
        progress=progress,
        name=lambda cell: cell.name,
        describe=describe,
    )


def succeeded(result: dict[str, Any]) -> bool:
    """The cell ran its whole time without a fall, a stop or a dropped box."""
    return bool(result["completed"] and result.get("object_dropped_at_s") is None)


def outcome(result: dict[str, Any]) -> str:
    """ "completed", or how and when the cell failed."""
    if result.get("object_dropped_at_s") is not None:
        return f"dropped the box at {result['object_dropped_at_s']:.2f} s"
    if result["completed"]:
        return "completed"
    at = f"at {result['sim_seconds']:.2f} s"
    if result["fell"]:
        return f"fell {at}"
    return f"stopped {at}: {result['end_reason']}"


def describe(result: dict[str, Any]) -> str:
    """One line: simulated and wall seconds, the outcome and the headline metrics."""
    head = f"{result['sim_seconds']:.2f} s simulated in {result['wall_seconds']:.1f} s wall; {outcome(result)}"
    if result["tracking_error_rad"] is None:
        return head
    parts = [f"tracking {result['tracking_error_rad']:.4f} rad", f"E|Δτ| {result['tau_rate_mean']:.1f} N·m/s"]
    if result["force_err_rel"] is not None:
        parts.append(f"Σfₙ error {result['force_err_abs_N']:.3f} N ({100 * result['force_err_rel']:.2f} %)")
    if result["failed_solves"]:
        parts.append(f"{result['failed_solves']} failed solves")
    return f"{head}; " + ", ".join(parts)
