"""The experiments of Zapolsky & Drumwright (Section 7) on idcontrol: the matrix, the runs and the metrics.

Every run goes through the test harness (:func:`idcontrol.testing.run_in_process`), so it exercises the
daemon's own control core. The runs are built from the shipped launch files with ``dataclasses.replace``:

* ``trot``: ``launch/quadruped_trot.toml`` (the trot's activation distance, contact-consistent q̇_des, gains
  and penetration tolerance) trotting around the paper's waypoints (Fig. 17) on five terrains;
* ``grasp``: ``launch/arm_grasp.toml``, the arm holding the 6000 kg/m³ box while following its 3 Hz sinusoid.

Metrics follow the paper's Section 8.1 (see :func:`metrics_of`); the contact-force error compares the summed
normal force the controller predicted at tick i with the one the simulator applied during the step that
followed (a state's ``contact_forces`` are those of the step that produced it, so row i + 1's).
"""

from __future__ import annotations

import math
import time
from collections import deque
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import numpy as np
from numpy.typing import NDArray

from idcontrol.formulations.coulomb_lcp import PAPER_OPTIONS as COULOMB_PAPER_OPTIONS
from idcontrol.robot.model import RobotModel
from idcontrol.settings import LaunchConfig, load_launch
from idcontrol.sim.base import Simulator
from idcontrol.testing.run import ClosedLoopRun
from idcontrol.tools.experiments.paper_values import PAPER_TABLE3

Array = NDArray[np.float64]

LAUNCH_DIR = Path(__file__).resolve().parents[3] / "launch"
TROT_LAUNCH = "quadruped_trot.toml"
GRASP_LAUNCH = "arm_grasp.toml"
FULL_TROT_SECONDS = 30.0  # the paper's task (Section 7.6)
FULL_GRASP_SECONDS = 3.0
QUICK_TROT_SECONDS = 1.5  # 0.5 s standing, then 1 s of trot
QUICK_GRASP_SECONDS = 1.0
SERIES_PERIOD = 0.05  # s between the points of the stored time series (window means)
ROUGH_MU_RANGE = (0.1, 1.5)  # μ ~ U(0.1, 1.5) on the rough terrain (Section 7.5)
#: The rigid simulator's stand-in for μ = ∞, as MuJoCo's (``mujoco_sim.MU_INFINITE``): with exact no-slip rows
#: the Coulomb LCP's trot fell at 2.1 s in it, with μ = 10, 10³ or 10⁴ it completes.
RIGID_MU_INFINITE = 1e4


# ---------------------------------------------------------------------------------------------------- the matrix
@dataclass(frozen=True)
class Terrain:
    """Where a run happens.

    key : short name ("rigid_low", ...).  label : the paper's name for it.
    kind : simulator back end, "rigid" (model-matched rigid contact) or "mujoco".
    mu : the simulator's friction (``inf``: no slip; MuJoCo stands in 1e4).
    compliant : MuJoCo with its soft default contact (about 1 mm rest penetration) instead of its stiffest.
    height_map, seed : the rigid height map (bumps up to 3 cm) drawn with ``seed``; its μ is drawn with it too.
    penetration_tolerance : m of penetration the controllers leave alone here (default: the launch file's).
    """

    key: str
    label: str
    kind: str
    mu: float
    compliant: bool = False
    height_map: bool = False
    seed: int = 0
    penetration_tolerance: float | None = None


@dataclass(frozen=True)
class ControllerSpec:
    """One of the paper's controllers (Figs. 10-12) as an idcontrol formulation.

    friction : "terrain" uses the terrain's μ (the launch file's finite μ where the terrain has none: a
        Coulomb model needs one), "inf" assumes no slip.
    options : formulation options in every experiment (the Coulomb LCP's ``PAPER_OPTIONS``: the paper's method,
        not this project's default spread).
    trot_options : formulation options on the trot, over ``options``.
    sensed_delay : extra ticks of delay on the simulator's forces (a state's forces are already one step old).
    paper : one of the paper's controllers; False for this project's variants, which run the trot only.
    """

    key: str
    label: str
    formulation: str
    friction: str = "terrain"
    options: dict[str, Any] = field(default_factory=dict)
    trot_options: dict[str, Any] = field(default_factory=dict)
    sensed_delay: int = 0
    paper: bool = True

    @property
    def predicts_forces(self) -> bool:
        return self.formulation not in ("pid", "sensed_id")


#: m: the compliant floor sinks 1.1 mm under the standing quadruped, about twice that under two trotting feet; a
#: controller correcting penetration beyond the launch file's 1 mm pushes against the give of the floor every tick
#: (every predictive ID controller fell within 1 s so), so on compliant terrain they leave up to 5 mm alone.
COMPLIANT_PENETRATION_TOLERANCE = 0.005

TERRAINS: dict[str, tuple[Terrain, ...]] = {
    "trot": (
        Terrain("rigid_low", "Rigid, low friction (μ = 0.1)", "rigid", 0.1),
        Terrain("rigid_high", "Rigid, high friction (μ = ∞)", "rigid", math.inf),
        Terrain(
            "compliant_low",
            "Compliant, low friction (μ = 0.1)",
            "mujoco",
            0.1,
            compliant=True,
            penetration_tolerance=COMPLIANT_PENETRATION_TOLERANCE,
        ),
        Terrain(
            "compliant_high",
            "Compliant, high friction (μ = ∞)",
            "mujoco",
            math.inf,
            compliant=True,
            penetration_tolerance=COMPLIANT_PENETRATION_TOLERANCE,
        ),
        Terrain("rough", "Rough (3 cm height map, μ ~ U(0.1, 1.5))", "rigid", math.nan, height_map=True, seed=0),
    ),
    "grasp": (
        Terrain("grasp_inf", "Box, μ = ∞", "mujoco", math.inf),
        Terrain("grasp_1", "Box, μ = 1", "mujoco", 1.0),
    ),
}

#: The no-slip LCP's options on the trot: the least-squares spread and rank tolerance it needs for the
#: rank-deficient no-slip rows of the stance feet (without them it fell at 0.19 s on rigid μ = 0.1, standing, and
#: at 0.78 s on μ = ∞). They are its defaults now; the trot names them so that the run does not change with them.
NOSLIP_OPTIONS = {"spread": 1e-2, "rank_tol": 1e-3}

CONTROLLERS: tuple[ControllerSpec, ...] = (
    ControllerSpec("qp_mu", "ID(tᵢ)_QP,μ", "two_stage_qp"),
    ControllerSpec("qp_inf", "ID(tᵢ)_QP,∞", "two_stage_qp", friction="inf"),
    ControllerSpec("lcp_mu", "ID(tᵢ)_LCP,μ", "coulomb_lcp", options=COULOMB_PAPER_OPTIONS),
    ControllerSpec("lcp_inf", "ID(tᵢ)_LCP,∞", "noslip_lcp", friction="inf", trot_options=NOSLIP_OPTIONS),
    ControllerSpec("pid", "PID", "pid"),
    ControllerSpec("sensed_1", "ID(tᵢ₋₁)", "sensed_id"),
    ControllerSpec("sensed_2", "ID(tᵢ₋₂)", "sensed_id", sensed_delay=1),
    # this project's variants (formulation options of launch/quadruped_trot.toml; see docs/formulations.md)
    ControllerSpec(
        "cqp_mu", "ID(tᵢ)_QP,μ contact-relative", "two_stage_qp", trot_options={"dissipation": "contacts"}, paper=False
    ),
    ControllerSpec(
        "slcp_inf",
        "ID(tᵢ)_LCP,∞ shared friction",
        "noslip_lcp",
        friction="inf",
        paper=False,
        trot_options={"spread": 1e-2, "project": True, "release_unloaded": True, "share_friction": True},
    ),
)
CONTROLLER_BY_KEY = {c.key: c for c in CONTROLLERS}


@dataclass(frozen=True)
class RunSpec:
    """One cell of the matrix: an experiment on a terrain with a controller, for ``seconds`` of simulated time."""

    experiment: str
    terrain: Terrain
    controller: ControllerSpec
    seconds: float

    @property
    def name(self) -> str:
        return f"{self.experiment}/{self.terrain.key}/{self.controller.key}"


#: Quick mode (CI): the rigid planar terrains, whose simulator matches the controllers' contact model,
#: and the μ = 1 grasp, all controllers, at lengths the targets can be checked at.
QUICK_TERRAINS = ("rigid_low", "rigid_high", "grasp_1")


def plan(quick: bool = False, only: Iterable[str] = ()) -> list[RunSpec]:
    """The runs of the paper's matrix (quick: the CI subset), keeping those whose name contains any ``only``."""
    runs = []
    for experiment, terrains in TERRAINS.items():
        seconds = {
            "trot": QUICK_TROT_SECONDS if quick else FULL_TROT_SECONDS,
            "grasp": QUICK_GRASP_SECONDS if quick else FULL_GRASP_SECONDS,
        }[experiment]
        for terrain in terrains:
            if quick and terrain.key not in QUICK_TERRAINS:
                continue
            for controller in CONTROLLERS:
                if controller.paper or experiment == "trot":
                    runs.append(RunSpec(experiment, terrain, controller, seconds))
    only = list(only)
    return [r for r in runs if not only or any(part in r.name for part in only)]


# ---------------------------------------------------------------------------------------------------- building a run
def rough_mu(seed: int) -> float:
    """The rough terrain's friction for ``seed``: one draw of μ ~ U(0.1, 1.5)."""
    return float(np.random.default_rng(seed).uniform(*ROUGH_MU_RANGE))


def terrain_mu(terrain: Terrain) -> float:
    return rough_mu(terrain.seed) if terrain.height_map else terrain.mu


def run_config(spec: RunSpec, launch_dir: Path = LAUNCH_DIR) -> LaunchConfig:
    """The run's launch configuration: the experiment's launch file with the terrain and controller replaced."""
    base = load_launch(launch_dir / (TROT_LAUNCH if spec.experiment == "trot" else GRASP_LAUNCH))
    c, t = spec.controller, spec.terrain
    mu = terrain_mu(t)
    controller_mu = math.inf if c.friction == "inf" else (mu if math.isfinite(mu) else base.controller.mu)
    options = {**c.options, **c.trot_options} if spec.experiment == "trot" else dict(c.options)
    controller = replace(base.controller, formulation=c.formulation, mu=controller_mu, options=options)
    if t.penetration_tolerance is not None:
        controller = replace(controller, penetration_tolerance=t.penetration_tolerance)
    sim_mu = mu if math.isfinite(mu) or t.kind == "mujoco" else RIGID_MU_INFINITE  # MuJoCo maps inf itself
    bridge = replace(
        base.bridge, kind=t.kind, mu=sim_mu, terrain="height_map" if t.height_map else "flat", terrain_seed=t.seed
    )
    reference = base.reference
    if spec.experiment == "trot":
        reference = replace(reference, options={**reference.options, "waypoints": "paper"})
    # as in the paper, a run ends only by a fall: the launch files' joint-limit guards (a damping stop) are off
    safety = replace(base.safety, position_margin=math.inf, velocity_factor=math.inf)
    # each controller runs with its spec's options only: the launch file's [formulations.NAME] tables (such as
    # the QPs' contact-relative dissipation) are not the paper's controllers
    return replace(
        base,
        duration=spec.seconds,
        controller=controller,
        bridge=bridge,
        reference=reference,
        safety=safety,
        formulations={},
    )


class DelayedForces:
    """A simulator whose states carry the contact forces of ``ticks`` steps earlier (zeros before the first).

    Wraps any :class:`~idcontrol.sim.base.Simulator` whose states are dataclasses with ``contact_forces``.
    """

    def __init__(self, sim: Simulator, ticks: int) -> None:
        self.sim = sim
        self._forces: deque[Array] = deque(maxlen=ticks + 1)
        self._last_time: float | None = None

    @property
    def time(self) -> float:
        return self.sim.time

    def state(self) -> Any:
        s = self.sim.state()
        if self._last_time != s.t:  # a new step: its forces join the history
            self._forces.append(np.array(s.contact_forces))
            self._last_time = s.t
        delayed = self._forces[0] if len(self._forces) == self._forces.maxlen else np.zeros_like(s.contact_forces)
        return replace(s, contact_forces=delayed)

    def step(self, tau: Array) -> None:
        self.sim.step(tau)


def make_simulator_for(spec: RunSpec, config: LaunchConfig, robot: RobotModel) -> Simulator:
    """The terrain's simulator, with the controller's extra sensing delay."""
    from idcontrol.sim.launch import simulator_for

    if spec.terrain.compliant:
        from idcontrol.sim.mujoco import COMPLIANT_SOLIMP, COMPLIANT_SOLREF, MujocoSim

        b = config.bridge
        sim: Simulator = MujocoSim(
            robot,
            mu=b.mu,
            timestep=config.controller.dt / b.substeps,
            with_objects=config.objects,
            object_mu=b.mu,
            solref=COMPLIANT_SOLREF,
            solimp=COMPLIANT_SOLIMP,
        )
    else:
        sim = simulator_for(config, robot)
    if spec.controller.sensed_delay:
        sim = DelayedForces(sim, spec.controller.sensed_delay)
    return sim


# ---------------------------------------------------------------------------------------------------- metrics
def summed_normal_forces(run: ClosedLoopRun) -> tuple[Array, Array, NDArray[np.bool_]]:
    """Predicted and simulated ℓ₁ norms of the normal forces, N, and the rows they are compared on.

    Returns (predicted, sensed, rows), each (n − 1,): ``predicted[i]`` = Σ_k f̂_k · n_k at tick i,
    ``sensed[i]`` = Σ_k |f_k · n_k| for the forces the simulator applied during the step after tick i
    (``force_sensed`` of row i + 1). n_k is the normal of sphere k's contact at tick i, else at tick i + 1,
    else vertical. ``rows``: ticks in run mode whose solve succeeded with finite forces.
    """
    normal = run.contact_normal
    has = np.linalg.norm(normal, axis=2) > 0.5
    up = np.zeros_like(normal[:-1])
    up[..., 2] = 1.0
    n_next = np.where(has[1:, :, None], normal[1:], up)
    n_sensed = np.where(has[:-1, :, None], normal[:-1], n_next)
    predicted = np.einsum("nkj,nkj->n", run.force_predicted[:-1], normal[:-1])
    sensed = np.abs(np.einsum("nkj,nkj->nk", run.force_sensed[1:], n_sensed)).sum(axis=1)
    rows = run.in_run[:-1] & run.found[:-1] & np.isfinite(predicted) & np.isfinite(sensed)
    return predicted, sensed, rows


def force_prediction_error(run: ClosedLoopRun) -> tuple[float | None, float | None]:
    """(E|Σf̂ₙ − Σfₙ| in N, that over E[Σfₙ]) over the compared ticks (Table 5); None without any."""
    predicted, sensed, rows = summed_normal_forces(run)
    if not rows.any():
        return None, None
    err = float(np.mean(np.abs(predicted[rows] - sensed[rows])))
    mean_sensed = float(np.mean(sensed[rows]))
    return err, (err / mean_sensed if mean_sensed > 0 else None)


def com_path(run: ClosedLoopRun, rows: NDArray[np.intp]) -> Array:
    """(len(rows), 3) the robot's centre of mass in world at ``rows``, m."""
    import pinocchio as pin

    model, data = run.robot.model, run.robot.model.createData()
    return np.array([pin.centerOfMass(model, data, run.q[i]) for i in rows])


def _window_means(values: Array, window: int) -> Array:
    n = len(values) // window * window
    if n == 0:
        return np.zeros(0)
    return np.nanmean(values[:n].reshape(-1, window), axis=1)


def _rounded(values: Array, digits: int = 5) -> list[float | None]:
    return [None if not np.isfinite(x) else float(f"{x:.{digits}g}") for x in np.asarray(values, dtype=float)]


def metrics_of(spec: RunSpec, run: ClosedLoopRun, wall_s: float) -> dict[str, Any]:
    """The JSON object of one run: the paper's metrics (Section 8.1) and what explains them."""
    s = run.summary
    planned = int(round(spec.seconds / run.dt))
    in_run = run.ticks_in_run
    completed = in_run >= planned and run.end_reason == "duration reached"
    force_abs, force_rel = force_prediction_error(run) if spec.controller.predicts_forces else (None, None)
    window = max(1, int(round(SERIES_PERIOD / run.dt)))
    rows = np.flatnonzero(run.in_run)[::window]
    out: dict[str, Any] = {
        "experiment": spec.experiment,
        "terrain": spec.terrain.key,
        "terrain_label": spec.terrain.label,
        "controller": spec.controller.key,
        "controller_label": spec.controller.label,
        "formulation": spec.controller.formulation,
        "controller_mu": run.mu,
        "sim": spec.terrain.kind + (" (compliant)" if spec.terrain.compliant else ""),
        "pos_err_rad": s["tracking_error_rad"],
        "vel_err_rad_s": s["velocity_error_rad_s"],
        "tau_rate_mean": s["tau_rate_mean"],
        "tau_mean": s["tau_mean"],
        "force_err_abs_N": force_abs,
        "force_err_rel": force_rel,
        "fell": bool(s["fell"]),
        "completed": bool(completed),
        "end_reason": run.end_reason,
        "object_dropped_at_s": s.get("object_dropped_at_s"),
        "seconds_planned": spec.seconds,
        "ticks": in_run,
        "sim_seconds": in_run * run.dt,
        "wall_seconds": wall_s,
        "failed_solves": int(np.count_nonzero(run.in_run & ~run.found)),
        "fallbacks": dict(s.get("fallbacks") or {}),
        "clipped_joint_ticks": run.clip_count_in_run,
        "compute_us_p50": float(np.median(run.compute_us[run.in_run])) if in_run else None,
    }
    if run.robot.floating_base and len(rows):
        com = com_path(run, rows)
        out["com_start"] = _rounded(com[0])
        out["com_end"] = _rounded(com[-1])
        out["distance_m"] = float(np.sum(np.linalg.norm(np.diff(com[:, :2], axis=0), axis=1)))
    else:
        com = None
    out["series"] = {
        "t": _rounded(run.t[rows]),
        "pos_err_rad": _rounded(_window_means(np.where(run.in_run, run.tracking_error, np.nan), window)),
        "tau_rate": _rounded(_window_means(np.append(run.tau_rate, np.nan), window)),
    }
    if com is not None:
        out["series"]["com_xy"] = [_rounded(com[:, 0]), _rounded(com[:, 1])]
    return out


# ---------------------------------------------------------------------------------------------------- running
def run_one(spec: RunSpec, launch_dir: Path = LAUNCH_DIR, reached: list[float] | None = None) -> dict[str, Any]:
    """Run one cell of the matrix and return its JSON object. ``reached[0]`` follows the simulated time (s)."""
    from idcontrol.testing.runners import run_in_process

    config = run_config(spec, launch_dir)
    robot = RobotModel(config.robot)
    sim = make_simulator_for(spec, config, robot)
    reached = [0.0] if reached is None else reached
    started = time.perf_counter()
    with np.errstate(all="ignore"):  # a failing solve shows in the metrics, not as a stream of warnings
        run = run_in_process(
            config, spec.seconds, robot=robot, simulator=sim, until=lambda state: reached.__setitem__(0, state.t)
        )
    return {
        **metrics_of(spec, run, time.perf_counter() - started),
        "sim_mu": config.bridge.mu,
        "penetration_tolerance_m": config.controller.penetration_tolerance,
    }


def _run_one_safely(spec: RunSpec, launch_dir: Path) -> dict[str, Any]:
    """As :func:`run_one`; an exception of the run (a simulator that diverges, a solver that raises) becomes
    the run's result, with the simulated time it was raised at."""
    started = time.perf_counter()
    reached = [0.0]
    try:
        return run_one(spec, launch_dir, reached)
    except Exception as e:  # noqa: BLE001 - one broken run must not end the matrix; its error is its result
        return {
            "experiment": spec.experiment,
            "terrain": spec.terrain.key,
            "terrain_label": spec.terrain.label,
            "controller": spec.controller.key,
            "controller_label": spec.controller.label,
            "formulation": spec.controller.formulation,
            "pos_err_rad": None,
            "vel_err_rad_s": None,
            "tau_rate_mean": None,
            "tau_mean": None,
            "force_err_abs_N": None,
            "force_err_rel": None,
            "fell": False,
            "completed": False,
            "end_reason": f"error: {type(e).__name__}: {e}",
            "seconds_planned": spec.seconds,
            "ticks": int(round(reached[0] * 1e3)),
            "sim_seconds": reached[0],
            "wall_seconds": time.perf_counter() - started,
        }


def run_matrix(
    specs: list[RunSpec],
    *,
    jobs: int = 1,
    launch_dir: Path = LAUNCH_DIR,
    progress: Callable[[str], None] = print,
    ray: str | None = None,
) -> list[dict[str, Any]]:
    """Run every spec on the sweep engine (``jobs`` processes at a time, or Ray tasks: ``ray`` is ``"local"`` or
    a cluster's address), reporting each result through ``progress``; results in ``specs`` order."""
    from idcontrol.tools.sweep.engine import run_tasks

    results: dict[int, dict[str, Any]] = {}
    tasks = [(spec, launch_dir) for spec in specs]
    for done, (i, result) in enumerate(run_tasks(_run_task, tasks, workers=jobs, ray=ray), start=1):
        results[i] = result
        progress(f"[{done}/{len(specs)}] {specs[i].name}: {describe(result)}")
    return [results[i] for i in range(len(specs))]


def _run_task(task: tuple[RunSpec, Path]) -> dict[str, Any]:
    """One cell for the sweep engine: :func:`_run_one_safely` of (spec, launch directory)."""
    return _run_one_safely(*task)


def describe(result: dict[str, Any]) -> str:
    """One line: simulated and wall seconds, then the outcome and the headline metrics."""
    head = f"{result['sim_seconds']:.2f} s simulated in {result['wall_seconds']:.1f} s wall"
    if result["pos_err_rad"] is None:
        return f"{head}; {result['end_reason']}"
    outcome = (
        "completed" if result["completed"] else ("FELL" if result["fell"] else f"stopped ({result['end_reason']})")
    )
    parts = [
        f"pos {result['pos_err_rad']:.4f} rad",
        f"vel {result['vel_err_rad_s']:.3f} rad/s",
        f"E|Δτ| {result['tau_rate_mean']:.1f} N·m/s",
        f"E|τ| {result['tau_mean']:.3f} N·m",
    ]
    if result.get("force_err_rel") is not None:
        parts.append(f"force err {result['force_err_abs_N']:.3f} N ({100 * result['force_err_rel']:.2f} %)")
    if result.get("distance_m") is not None:
        parts.append(f"COM path {result['distance_m']:.2f} m")
    if result.get("object_dropped_at_s") is not None:
        parts.append(f"box dropped at {result['object_dropped_at_s']:.3f} s")
    return f"{head}; {outcome}; " + ", ".join(parts)


# ---------------------------------------------------------------------------------------------------- calibration
def rest_penetration(compliant: bool, seconds: float = 1.0, launch_dir: Path = LAUNCH_DIR) -> float:
    """m: mean penetration of the quadruped's feet into MuJoCo's floor (its contacts' ``dist``) after standing
    ``seconds`` under the model-free PID (``launch/quadruped_stand.toml``), with the compliant terrain's contact
    softness or the default stiff one."""
    from idcontrol.sim.mujoco import COMPLIANT_SOLIMP, COMPLIANT_SOLREF, STIFF_SOLIMP, MujocoSim
    from idcontrol.testing.runners import run_in_process

    config = load_launch(launch_dir / "quadruped_stand.toml")
    config = replace(config, controller=replace(config.controller, formulation="pid"))
    robot = RobotModel(config.robot)
    softness = {"solref": COMPLIANT_SOLREF, "solimp": COMPLIANT_SOLIMP} if compliant else {"solimp": STIFF_SOLIMP}
    sim = MujocoSim(robot, mu=config.bridge.mu, timestep=config.controller.dt, **softness)
    run_in_process(config, seconds, robot=robot, simulator=sim)
    data = sim.data
    return float(np.mean([-data.contact[i].dist for i in range(data.ncon)])) if data.ncon else math.nan


# ---------------------------------------------------------------------------------------------------- targets
@dataclass(frozen=True)
class Target:
    """One of the issue's targets on one terrain: what the paper reports, what we measured, whether it holds."""

    name: str
    terrain: str
    paper: str
    measured: str
    met: bool


def _index(results: list[dict[str, Any]]) -> dict[tuple[str, str, str], dict[str, Any]]:
    return {(r["experiment"], r["terrain"], r["controller"]): r for r in results}


def check_targets(results: list[dict[str, Any]]) -> list[Target]:
    """The issue's targets on every trot terrain the results cover (a run that did not complete misses)."""
    by = _index(results)
    out = []
    terrains = [t.key for t in TERRAINS["trot"] if any(("trot", t.key, c.key) in by for c in CONTROLLERS)]
    for t in terrains:
        if t.startswith("rigid") or t == "rough":
            for c in ("lcp_mu", "lcp_inf"):
                r = by.get(("trot", t, c))
                if r is None:
                    continue
                rel = r.get("force_err_rel")
                ok = bool(r["completed"] and rel is not None and rel <= 0.02)
                got = "did not complete" if not r["completed"] else f"{100 * rel:.2f} %" if rel is not None else "n/a"
                out.append(
                    Target(
                        f"{CONTROLLER_BY_KEY[c].label} force prediction vs the rigid simulator ≤ 2 %",
                        t,
                        "1.16-1.94 %",
                        got,
                        ok,
                    )
                )
        qp, pid, lcp = (by.get(("trot", t, c)) for c in ("qp_mu", "pid", "lcp_mu"))
        if qp and pid and lcp and None not in (qp["tau_rate_mean"], pid["tau_rate_mean"], lcp["tau_rate_mean"]):
            a, b, c = qp["tau_rate_mean"], pid["tau_rate_mean"], lcp["tau_rate_mean"]
            ok = bool(qp["completed"] and a < b and 5 * a <= c)
            got = f"{a:.1f} vs PID {b:.1f}, Coulomb LCP {c:.1f} ({c / a:.1f}×)"
            unfinished = [x["controller_label"] for x in (qp, pid, lcp) if not x["completed"]]
            if unfinished:
                got += f"; {', '.join(unfinished)} did not complete (E|Δτ| until it stopped)"
            out.append(
                Target("two-stage QP E|Δτ| < PID's and ≤ Coulomb LCP's / 5", t, "52.6 < 100.2; 678.0 / 5", got, ok)
            )
        if t.startswith("rigid"):
            sensed = by.get(("trot", t, "sensed_1"))
            for c in ("qp_mu", "qp_inf", "lcp_mu", "lcp_inf"):
                r = by.get(("trot", t, c))
                if r is None or pid is None or sensed is None:
                    continue
                rivals = [x for x in (pid, sensed) if x["completed"]]
                ok = bool(r["completed"] and all(r["pos_err_rad"] <= x["pos_err_rad"] for x in rivals))
                got = (
                    "did not complete"
                    if not r["completed"]
                    else (f"{r['pos_err_rad']:.4f} rad vs PID {_err(pid)}, ID(tᵢ₋₁) {_err(sensed)}")
                )
                out.append(
                    Target(
                        f"{CONTROLLER_BY_KEY[c].label} tracks at least as well as PID and ID(tᵢ₋₁)",
                        t,
                        _paper_tracking(t, c),
                        got,
                        ok,
                    )
                )
        if qp is not None:
            out.append(
                Target(
                    "no fall of the QP controller (ID(tᵢ)_QP,μ)",
                    t,
                    "no fall",
                    "completed" if qp["completed"] else _stop(qp),
                    bool(qp["completed"]),
                )
            )
    return out


def _err(r: dict[str, Any]) -> str:
    return f"{r['pos_err_rad']:.4f} rad" if r["completed"] else "− (did not complete)"


def _stop(r: dict[str, Any]) -> str:
    return f"{'fell' if r['fell'] else r['end_reason']} at {r['sim_seconds']:.2f} s"


def _paper_tracking(terrain: str, controller: str) -> str:
    rows = PAPER_TABLE3.get(terrain, {})
    mine, pid, sensed = rows.get(controller), rows.get("pid"), rows.get("sensed_1")
    fmt = lambda x: "−" if x is None else f"{x[0]:.4f}"  # noqa: E731
    return f"{fmt(mine)} vs PID {fmt(pid)}, ID(tᵢ₋₁) {fmt(sensed)}" if rows else ""
