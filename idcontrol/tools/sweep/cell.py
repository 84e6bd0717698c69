"""One cell of a sweep: an in-process closed-loop run with the test harness's runner, and its metrics.

A cell's row holds its grid values and:

* the run: ``status`` ("done", or "error" with ``error``), ``completed`` (every planned tick in run mode),
  ``fell``, ``end_reason``, ``sim_seconds``;
* what the core measured (its run metrics): ``tracking_error_rad``, ``velocity_error_rad_s``,
  ``tau_rate_mean`` (E|Δτ|/Δt, N·m/s), ``tau_mean``;
* the formulation's solves: ``failed_solves`` (no solution: the fallback policy answered),
  ``fallback_solves`` (answered by a formulation's fallback solver, whose primary did not certify a solution);
* the predicted forces: ``loaded_contacts`` (contact-ticks with f_n > 0), ``cone_violations`` (of them, outside
  the Coulomb cone |f_t| ≤ μ f_n + 1e-6 N), ``cone_ratio_max`` (largest |f_t| / (μ f_n)), ``pulling_forces``
  (f_n < −1e-6 N);
* ``distance_m`` (the floating base's horizontal travel), and with impact sampling ``impact_events``,
  ``impact_lcps``, ``impact_unterminated``, ``impact_failures``, ``impact_approach_max`` (m/s, the fastest
  touchdown) and ``impact_spread_max`` (how far a sample fell from the simultaneous outcome, relative to the
  impact's size; :class:`~idcontrol.sim.rigid.ImpactStats`);
* timings, which differ from run to run: ``wall_s``, ``compute_us_p50``, ``host`` (:data:`TIMING_FIELDS`).
"""

from __future__ import annotations

import math
import platform
import time
import traceback
from typing import Any

import numpy as np

from idcontrol.tools.sweep.spec import Cell

#: Fields that depend on the machine and the moment, not on the cell (left out when comparing results).
TIMING_FIELDS = frozenset({"wall_s", "compute_us_p50", "host"})
CONE_TOL = 1e-6  # N


def cone_metrics(force: np.ndarray, normal: np.ndarray, mu: float) -> dict[str, Any]:
    """Coulomb-cone checks of forces (n, k, 3) against contact normals (n, k, 3) (zero rows: no contact)."""
    has = np.any(normal != 0.0, axis=2)
    f_n = np.einsum("nkc,nkc->nk", force, normal)
    f_t = np.linalg.norm(force - f_n[..., None] * normal, axis=2)
    loaded = has & (f_n > CONE_TOL)
    out = {"loaded_contacts": int(loaded.sum()), "pulling_forces": int((has & (f_n < -CONE_TOL)).sum())}
    if not loaded.any():
        return {**out, "cone_violations": 0, "cone_ratio_max": None}
    if math.isinf(mu):
        return {**out, "cone_violations": 0, "cone_ratio_max": 0.0}
    ratio = f_t[loaded] / (mu * f_n[loaded])
    out["cone_violations"] = int(np.count_nonzero(f_t[loaded] > mu * f_n[loaded] + CONE_TOL))
    out["cone_ratio_max"] = float(ratio.max())
    return out


def run_cell(cell: Cell) -> dict[str, Any]:
    """Run the cell; its row (an exception of the run becomes the row's ``error``)."""
    started = time.perf_counter()
    row: dict[str, Any] = {
        "key": cell.key,
        "index": cell.index,
        **cell.params,
        "seconds": cell.seconds,
        "signature": cell.signature,
    }
    try:
        row.update(_run(cell))
        row["status"] = "done"
    except Exception as e:  # noqa: BLE001 - one broken cell must not end the sweep; its error is its result
        row.update(status="error", error=f"{type(e).__name__}: {e}", traceback=traceback.format_exc(limit=4))
    row["wall_s"] = time.perf_counter() - started
    row["host"] = platform.node()
    return row


def _run(cell: Cell) -> dict[str, Any]:
    from idcontrol.robot.model import RobotModel
    from idcontrol.sim.launch import simulator_for
    from idcontrol.testing.runners import run_in_process

    config = cell.config()
    robot = RobotModel(config.robot)
    sim = simulator_for(config, robot)
    truth = getattr(sim, "truth", sim.state)  # behind sensor models, the simulator's own state
    start = np.array(truth().q)
    with np.errstate(all="ignore"):  # a failing solve shows in the metrics, not as a stream of warnings
        run = run_in_process(config, cell.seconds, robot=robot, simulator=sim)
    s = run.summary
    planned = int(round(cell.seconds / run.dt))
    out: dict[str, Any] = {
        "robot": config.robot,
        "formulation": run.formulation,
        "simulator": config.bridge.kind,
        "terrain": config.bridge.terrain,
        "completed": bool(run.ticks_in_run >= planned and run.end_reason == "duration reached"),
        "fell": bool(s["fell"]),
        "end_reason": run.end_reason,
        "sim_seconds": run.ticks_in_run * run.dt,
        "tracking_error_rad": s["tracking_error_rad"],
        "velocity_error_rad_s": s["velocity_error_rad_s"],
        "tau_rate_mean": s["tau_rate_mean"],
        "tau_mean": s["tau_mean"],
        "failed_solves": int(np.count_nonzero(run.in_run & ~run.found)),
        "fallback_solves": int(sum((s.get("fallbacks") or {}).values())),
        **cone_metrics(run.force_predicted[run.in_run], run.contact_normal[run.in_run], run.mu),
        "compute_us_p50": float(np.median(run.compute_us[run.in_run])) if run.ticks_in_run else None,
    }
    if robot.floating_base and run.n:  # from the simulator's truth (the rows hold what the sensors reported)
        out["distance_m"] = float(np.linalg.norm(run.q_end[:2] - start[:2]))
        out["base_height_drop_m"] = float(start[2] - run.q_end[2])
    impacts = getattr(sim, "impacts", None)
    if impacts is not None and getattr(sim, "impact_sampling", False):
        out.update(
            impact_events=impacts.events,
            impact_lcps=impacts.lcps,
            impact_unterminated=impacts.unterminated,
            impact_failures=impacts.failures,
            impact_approach_max=impacts.approach_speed_max,
            impact_spread_max=impacts.spread_max,
        )
    return out
