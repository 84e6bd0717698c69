"""``idcontrol experiment ess``: the checks of Anderson & Revzen's ESS integrator paper, on idcontrol's integrator.

* **Order test** (the paper's Table 1 system, exact solution by matrix exponentials): final-state error at
  t = 0.5 for ε = 1e-2, 1e-3, 1e-4 and the log-log slope, for both readings of the table's lost row labels.
* **Hopper calibration** (the paper's 1-D hopper, z0 = 2 L0 at rest, t ∈ [0, 2] s, samples every 2 ms): the RMS
  difference of the ESS trajectory from MuJoCo's against ε, each one's RMS error from the exact solution, and the
  ε' at which the ESS integrator's error equals MuJoCo's (bisection in log ε). MuJoCo's hopper is built with its
  model-editing API (``MjSpec``): a point mass on a vertical slide joint whose leg spring is a fixed tendon with a
  dead band above the leg length (the same force law as the exact model), semi-implicit Euler at 2 ms.
* **Cost per contact** (the paper's Fig. 5): a plate in SE(2) dropped from rest at random heights in (2, 3) m and
  angles in (−0.1, 0.1) rad on 2 to 100 evenly spaced identical springs, integrated for ``plate_seconds`` with
  ε = ε' and steps of at most 2 ms; the same plate in MuJoCo (``MjSpec``: slide x, slide z, hinge y; sphere
  tops as the springs, frictionless contacts, MuJoCo's direct stiffness/damping ``solref``; 2 ms steps). The
  per-spring stiffness and damping are the bed's divided by the spring count, so the plate's motion, and the
  ODE solver's step count, do not change with the count: the runtime's growth is the per-contact work. Reported:
  median CPU time per simulated second for each count, and the marginal cost per contact between counts.
* **Closed loop** (``closed_loop_seconds`` > 0): the quadruped standing and trotting under two_stage_qp and
  coulomb_lcp (the launch files ``quadruped_stand.toml`` and ``quadruped_trot.toml`` with ``[bridge] kind`` set to
  ``ess``, and to ``mujoco`` for comparison; :data:`LOOP_CASES`), in process, lock-step; CPU time per simulator
  step and per controller tick, and the fastest joint speed of the run (the stand file's guard stops at 30 rad/s).

``engine`` chooses the ESS integrator's engine for the plate, the hopper's timing and the closed loop: "auto"
(compiled where it can be, :class:`~idcontrol.sim.ess.integrator.EssIntegrator`) or "scipy" (the Python engine on
scipy's solve_ivp and, for the robot, Pinocchio: what was measured before the compiled engine). The order test
always runs on scipy's DOP853.

Times are CPU time of this process (``time.process_time``), so other load on the machine inflates them less than
wall time; the JSON records the machine.
"""

from __future__ import annotations

import math
import os
import platform
import time
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import mujoco
import numpy as np

from idcontrol.sim.ess.integrator import EssIntegrator
from idcontrol.sim.ess.models import GRAVITY, Hopper, OrderTestSystem, Plate, exact_piecewise_affine

ORDER_EPS = (1e-2, 1e-3, 1e-4)
HOPPER_DT = 0.002  # s, MuJoCo's step and the sample spacing (the paper's)
HOPPER_SECONDS = 2.0
HOPPER_EPS = (0.3, 0.1, 3e-2, 1e-2, 3e-3, 1e-3)
PLATE_COUNTS = (2, 5, 10, 20, 30, 40, 50, 60, 70, 80, 90, 100)
PLATE_BED_STIFFNESS = 2000.0  # N/m, all springs together
PLATE_BED_DAMPING = 4.0  # N·s/m, all springs together (damping ratio 0.045 on the 1 kg plate)
LAUNCH = Path(__file__).resolve().parents[3] / "launch"


def machine() -> dict[str, Any]:
    return {
        "cpu": platform.processor() or platform.machine(),
        "cpus": os.cpu_count(),
        "python": platform.python_version(),
        "numpy": np.__version__,
        "mujoco": mujoco.__version__,
        "load_average": list(os.getloadavg()),
    }


def log_slope(eps: list[float], errors: list[float]) -> float:
    """Least-squares slope of log10(error) against log10(ε)."""
    return float(np.polyfit(np.log10(eps), np.log10(errors), 1)[0])


# ---------------------------------------------------------------------------------------------------- order test
def order_test(eps_values: tuple[float, ...] = ORDER_EPS) -> dict[str, Any]:
    """Final-state error of the Table 1 system at t = 0.5 against ε (DOP853 at rtol 1e-12 in the integration
    steps, so that the projections' error is what is measured), for each reading of the lost row labels."""
    out: dict[str, Any] = {"x0": OrderTestSystem.X0.tolist(), "t_end": OrderTestSystem.T_END, "readings": {}}
    for reading in OrderTestSystem.READINGS:
        system = OrderTestSystem(reading)
        exact = exact_piecewise_affine(system, system.X0, [system.T_END])[0]
        rows = []
        for eps in eps_values:
            integrator = EssIntegrator(system, eps, method="DOP853", rtol=1e-12, atol=1e-14)
            started = time.process_time()
            run = integrator.integrate(system.X0, 0.0, system.T_END)
            cpu = time.process_time() - started
            rows.append(
                {
                    "eps": eps,
                    "final_error": float(np.linalg.norm(run.x[-1] - exact)),
                    "crossings": [{"t": c.t, "guard": "xyz"[c.guard], "how": c.how} for c in run.crossings],
                    "cpu_s": cpu,
                }
            )
        out["readings"][reading] = {
            "exact_final_state": exact.tolist(),
            "runs": rows,
            "slope": log_slope(list(eps_values), [r["final_error"] for r in rows]),
        }
    return out


# ---------------------------------------------------------------------------------------------------- hopper
def mujoco_hopper(hopper: Hopper, z0: float, seconds: float, dt: float = HOPPER_DT) -> tuple[np.ndarray, float]:
    """MuJoCo's hopper: (samples (n, 2) of (z, ż) after each step, CPU s). A point mass on a vertical slide joint;
    the leg a fixed tendon on that joint with stiffness k and a dead band [L0, 1e9] (force k (L0 − z) below L0)."""
    spec = mujoco.MjSpec()
    spec.option.timestep = dt
    spec.option.gravity = [0.0, 0.0, -GRAVITY]
    body = spec.worldbody.add_body(name="hopper", mass=hopper.mass, inertia=[1e-3, 1e-3, 1e-3], explicitinertial=True)
    body.add_joint(name="z", type=mujoco.mjtJoint.mjJNT_SLIDE, axis=[0.0, 0.0, 1.0])
    leg = spec.add_tendon(name="leg", stiffness=[hopper.stiffness, 0.0, 0.0], springlength=[hopper.leg_length, 1e9])
    leg.wrap_joint("z", 1.0)
    model = spec.compile()
    data = mujoco.MjData(model)
    data.qpos[0] = z0
    steps = int(round(seconds / dt))
    out = np.empty((steps, 2))
    started = time.process_time()
    for i in range(steps):
        mujoco.mj_step(model, data)
        out[i, 0], out[i, 1] = data.qpos[0], data.qvel[0]
    return out, time.process_time() - started


def ess_hopper(hopper: Hopper, eps: float, z0: float, times: np.ndarray) -> np.ndarray:
    """The ESS integrator's hopper sampled at ``times`` (each one a guard, like a control tick), steps of at most
    2 ms: (len(times), 2)."""
    integrator = EssIntegrator(hopper, eps, rtol=1e-8, atol=1e-10, max_step=HOPPER_DT)
    return integrator.integrate(np.array([z0, 0.0]), 0.0, float(times[-1]), samples=times).x


def ess_hopper_cpu(hopper: Hopper, eps: float, z0: float, seconds: float, engine: str = "auto") -> float:
    """CPU seconds of the ESS integrator's hopper over [0, seconds] in one call (no samples: what the paper timed
    against MuJoCo, whose steps it matched with a 2 ms step limit); the compiled engine's code is loaded first."""
    integrator = EssIntegrator(hopper, eps, rtol=1e-8, atol=1e-10, max_step=HOPPER_DT, engine=engine)
    x0 = np.array([z0, 0.0])
    integrator.advance(x0, 0.0, HOPPER_DT, integrator.start(x0))
    started = time.process_time()
    integrator.advance(x0, 0.0, seconds, integrator.start(x0))
    return time.process_time() - started


def rms(a: np.ndarray, b: np.ndarray) -> float:
    """RMS over samples of the state difference's 2-norm (z in m and ż in m/s together, as the paper's)."""
    return float(np.sqrt(np.mean(np.sum((a - b) ** 2, axis=1))))


def hopper_calibration(
    eps_values: tuple[float, ...] = HOPPER_EPS, seconds: float = HOPPER_SECONDS, engine: str = "auto"
) -> dict[str, Any]:
    """ESS against MuJoCo and the exact solution on the 1-D hopper (mass 1 kg, k = 1000 N/m, L0 = 1 m, z0 = 2 m)."""
    hopper = Hopper()
    z0 = 2.0 * hopper.leg_length
    times = np.arange(1, int(round(seconds / HOPPER_DT)) + 1) * HOPPER_DT
    exact = exact_piecewise_affine(hopper, np.array([z0, 0.0]), times)
    mj, mj_cpu = mujoco_hopper(hopper, z0, seconds)
    mujoco_error = rms(mj, exact)
    rows = []
    for eps in eps_values:
        x = ess_hopper(hopper, eps, z0, times)
        rows.append(
            {
                "eps": eps,
                "rms_vs_mujoco": rms(x, mj),
                "rms_vs_exact": rms(x, exact),
                "cpu_s": ess_hopper_cpu(hopper, eps, z0, seconds, engine),
            }
        )

    def excess(log_eps: float) -> float:
        return rms(ess_hopper(hopper, 10.0**log_eps, z0, times), exact) - mujoco_error

    calibrated = None
    lo, hi = -4.0, -1.0
    if excess(lo) < 0.0 < excess(hi):
        for _ in range(12):  # log10 ε to 4e-4 decades
            mid = 0.5 * (lo + hi)
            lo, hi = (mid, hi) if excess(mid) < 0.0 else (lo, mid)
        calibrated = 10.0 ** (0.5 * (lo + hi))
    cal_cpu = ess_hopper_cpu(hopper, calibrated, z0, seconds, engine) if calibrated else None
    return {
        "model": {
            "mass_kg": hopper.mass,
            "stiffness_N_per_m": hopper.stiffness,
            "leg_length_m": hopper.leg_length,
            "z0_m": z0,
            "seconds": seconds,
            "sample_dt_s": HOPPER_DT,
        },
        "mujoco": {
            "rms_vs_exact": mujoco_error,
            "cpu_s": mj_cpu,
            "integrator": "Euler (semi-implicit)",
            "dt_s": HOPPER_DT,
        },
        "ess": rows,
        "calibrated_eps": calibrated,
        "calibrated_ess_cpu_s": cal_cpu,
        "rms_vs_exact_slope": log_slope([r["eps"] for r in rows[-3:]], [r["rms_vs_exact"] for r in rows[-3:]]),
    }


# ---------------------------------------------------------------------------------------------------- plate
def mujoco_plate(plate: Plate, x0: np.ndarray, seconds: float, dt: float = HOPPER_DT) -> float:
    """CPU seconds MuJoCo takes to simulate ``seconds`` of the plate on its springs."""
    spec = mujoco.MjSpec()
    spec.option.timestep = dt
    spec.option.gravity = [0.0, 0.0, -GRAVITY]
    half_thickness, radius = 0.005, 0.005
    k_mass, b_mass = plate.k / plate.mass, plate.b / plate.mass  # MuJoCo's direct form: per unit mass
    contact = {"condim": 1, "solref": [-k_mass, -b_mass], "solimp": [0.99, 0.99, 0.001, 0.5, 2.0]}
    for i, xs in enumerate(plate.xs):
        spec.worldbody.add_geom(
            name=f"spring{i}",
            type=mujoco.mjtGeom.mjGEOM_SPHERE,
            size=[radius, 0, 0],
            pos=[xs, 0.0, plate.L0 - half_thickness - radius],
            contype=1,
            conaffinity=0,
            **contact,
        )
    body = spec.worldbody.add_body(
        name="plate", mass=plate.mass, inertia=[plate.inertia, plate.inertia, 1e-3], explicitinertial=True
    )
    body.add_joint(name="x", type=mujoco.mjtJoint.mjJNT_SLIDE, axis=[1.0, 0.0, 0.0])
    body.add_joint(name="z", type=mujoco.mjtJoint.mjJNT_SLIDE, axis=[0.0, 0.0, 1.0])
    body.add_joint(name="theta", type=mujoco.mjtJoint.mjJNT_HINGE, axis=[0.0, -1.0, 0.0])  # our θ: +x end up
    body.add_geom(
        type=mujoco.mjtGeom.mjGEOM_BOX,
        size=[plate.length / 2, 0.05, half_thickness],
        contype=0,
        conaffinity=1,
        **contact,
    )
    model = spec.compile()
    data = mujoco.MjData(model)
    data.qpos[:] = x0[:3]
    steps = int(round(seconds / dt))
    started = time.process_time()
    for _ in range(steps):
        mujoco.mj_step(model, data)
    return time.process_time() - started


def ess_plate(
    plate: Plate, x0: np.ndarray, seconds: float, eps: float, engine: str = "auto"
) -> tuple[float, dict[str, int]]:
    """CPU seconds the ESS integrator takes for ``seconds`` of the plate (steps of at most 2 ms), and its work:
    crossings, projections, splits, ODE solver calls, field evaluations."""
    integrator = EssIntegrator(plate, eps, rtol=1e-6, atol=1e-9, max_step=HOPPER_DT, engine=engine)
    started = time.process_time()
    memory = integrator.start(x0)
    step = integrator.advance(x0, 0.0, seconds, memory)
    cpu = time.process_time() - started
    s = integrator.stats
    return cpu, {
        "crossings": len(step.crossings) - 1,
        "projections": s.projections,
        "splits": s.splits,
        "solver_calls": s.integrations,
        "field_evaluations": s.rhs_evaluations,
    }


def plate_cost(
    eps: float,
    counts: tuple[int, ...] = PLATE_COUNTS,
    conditions: int = 20,
    seconds: float = 2.0,
    seed: int = 0,
    engine: str = "auto",
) -> dict[str, Any]:
    """Median CPU time per simulated second against the spring count, ESS and MuJoCo, and marginal costs."""
    rng = np.random.default_rng(seed)
    starts = [(float(rng.uniform(2.0, 3.0)), float(rng.uniform(-0.1, 0.1))) for _ in range(conditions)]
    warm = Plate(3)  # load the compiled plate kernels and MuJoCo's first-call work before anything is timed
    ess_plate(warm, warm.initial(2.0, 0.05), 0.1, eps, engine)
    mujoco_plate(warm, warm.initial(2.0, 0.05), 0.1)
    plates = {n: Plate(n, stiffness=PLATE_BED_STIFFNESS / n, damping=PLATE_BED_DAMPING / n) for n in counts}
    ess_times: dict[int, list[float]] = {n: [] for n in counts}
    mj_times: dict[int, list[float]] = {n: [] for n in counts}
    work: dict[int, list[dict[str, int]]] = {n: [] for n in counts}
    for height, angle in starts:  # every size per start, so that the machine's changing load hits all sizes alike
        for n in counts:
            x0 = plates[n].initial(height, angle)
            cpu, done = ess_plate(plates[n], x0, seconds, eps, engine)
            ess_times[n].append(cpu / seconds)
            work[n].append(done)
            mj_times[n].append(mujoco_plate(plates[n], x0, seconds) / seconds)
    rows = []
    for n in counts:
        rows.append(
            {
                "contacts": n,
                "ess_s_per_s": float(np.median(ess_times[n])),
                "mujoco_s_per_s": float(np.median(mj_times[n])),
                **{f"ess_{key}_median": float(np.median([w[key] for w in work[n]])) for key in work[n][0]},
            }
        )
    marginal = []
    for a, b in zip(rows[:-1], rows[1:], strict=True):
        dn = b["contacts"] - a["contacts"]
        marginal.append(
            {
                "from": a["contacts"],
                "to": b["contacts"],
                "ess_s_per_s_per_contact": (b["ess_s_per_s"] - a["ess_s_per_s"]) / dn,
                "mujoco_s_per_s_per_contact": (b["mujoco_s_per_s"] - a["mujoco_s_per_s"]) / dn,
            }
        )

    def fit(key: str, low: int, high: int) -> float:
        """Marginal cost: the least-squares slope of the median cost over the counts in [low, high]."""
        pts = [(r["contacts"], r[key]) for r in rows if low <= r["contacts"] <= high]
        if len(pts) < 2:
            return math.nan
        return float(np.polyfit([p[0] for p in pts], [p[1] for p in pts], 1)[0])

    windows = {"10-40": (10, 40), "40-100": (40, 100), "10-100": (10, 100)}
    slopes = {name: {"ess": fit("ess_s_per_s", *w), "mujoco": fit("mujoco_s_per_s", *w)} for name, w in windows.items()}
    low, high = slopes["10-40"]["ess"], slopes["40-100"]["ess"]
    flat = max(low, high) / min(low, high) if min(low, high) > 0 else math.inf
    return {
        "eps": eps,
        "seconds": seconds,
        "conditions": conditions,
        "seed": seed,
        "engine": engine,
        "bed": {
            "stiffness_N_per_m": PLATE_BED_STIFFNESS,
            "damping_N_s_per_m": PLATE_BED_DAMPING,
            "mass_kg": 1.0,
            "length_m": 3.0,
            "span_m": 2.0,
            "rest_height_m": 1.0,
        },
        "rows": rows,
        "marginal_between_counts": marginal,
        "marginal_fit_s_per_s_per_contact": slopes,
        "ess_marginal_ratio_10_40_vs_40_100": flat,
    }


# ---------------------------------------------------------------------------------------------------- closed loop
@dataclass(frozen=True)
class LoopCase:
    """One closed-loop run: a launch file (its [bridge] kind replaced), a formulation, and what is changed."""

    name: str
    launch: str
    formulation: str
    gains: tuple[float, float] | None = None  # kp, kd replacing the launch file's
    hold: bool = False  # the hold reference in place of the launch file's
    controller: tuple[tuple[str, Any], ...] = ()  # [controller] keys replacing the launch file's


#: The targets' runs. The Coulomb LCP stands on one diagonal pair of feet: with the stand launch file's controller
#: as it is (the robot file's gains kp 1000, kd 60; no contact-consistent velocities) a knee spikes past the file's
#: velocity guard (1.5 × 20 rad/s) within 10 s, in MuJoCo and in ess alike; with ``consistent_contact_velocity``
#: (q̇_des from the joint velocities that hold the active feet still, as the generic ``stand.toml`` and the trot
#: file have it) its joints stay below 7 rad/s and it stands 10 s on both, under the same guard.
LOOP_CASES = (
    LoopCase("stand", "quadruped_stand.toml", "two_stage_qp"),
    LoopCase("stand", "quadruped_stand.toml", "coulomb_lcp"),
    LoopCase(
        "stand (+ consistent_contact_velocity)",
        "quadruped_stand.toml",
        "coulomb_lcp",
        controller=(("consistent_contact_velocity", True),),
    ),
    LoopCase("stand (trot file's controller, hold)", "quadruped_trot.toml", "coulomb_lcp", hold=True),
    LoopCase("trot", "quadruped_trot.toml", "two_stage_qp"),
    LoopCase("trot", "quadruped_trot.toml", "coulomb_lcp"),
)


def closed_loop(
    seconds: float,
    cases: tuple[LoopCase, ...] = LOOP_CASES,
    simulators: tuple[str, ...] = ("ess", "mujoco"),
    engine: str = "auto",
) -> list[dict]:
    """The quadruped's standing and trotting runs (``cases``), ``seconds`` each, on each simulator, in process,
    lock-step: whether it stayed in run mode, how it tracked, its fastest joint, and the CPU time of each simulator
    step (``engine``: the ess simulator's)."""
    from idcontrol.control.factory import build_core
    from idcontrol.robot.model import RobotModel
    from idcontrol.settings import ReferenceSettings, load_launch
    from idcontrol.sim.launch import simulator_for

    out = []
    for case in cases:
        for kind in simulators:
            config = load_launch(LAUNCH / case.launch).with_overrides(seconds, case.formulation)
            config = replace(config, bridge=replace(config.bridge, kind=kind))
            if case.hold:
                config = replace(config, reference=ReferenceSettings("hold"))
            if case.controller:
                config = replace(config, controller=replace(config.controller, **dict(case.controller)))
            robot = RobotModel(config.robot)
            core = build_core(config, robot)
            if case.gains is not None:
                core.set_gains(kp=case.gains[0], kd=case.gains[1])
            core.warm_up()
            sim = simulator_for(config, robot, engine=engine)
            core.start(0.0)
            sim_cpu = core_cpu = 0.0
            ticks, reason, crossings = 0, "duration reached", 0
            x_start = sim.state().q[:3].copy()
            joints = np.asarray(robot.actuated_dofs, dtype=np.intp)
            fastest = 0.0
            for _ in range(int(round(seconds / core.dt))):
                s = sim.state()
                fastest = max(fastest, float(np.max(np.abs(s.v[joints]), initial=0.0)))
                started = time.process_time()
                command = core.tick(s.robot_state(), now=s.t)
                core_cpu += time.process_time() - started
                if command.mode != "run":
                    reason = core.reason
                    break
                started = time.process_time()
                sim.step(command.tau)
                sim_cpu += time.process_time() - started
                crossings += len(getattr(sim, "last_crossings", ()))
                ticks += 1
            summary = core.metrics.summary()
            q_end = sim.state().q
            row = {
                "case": case.name,
                "launch": case.launch,
                "formulation": case.formulation,
                "simulator": kind,
                "gains": list(case.gains) if case.gains else "launch file's",
                "reference": "hold" if case.hold else config.reference.name,
                "controller_overrides": dict(case.controller),
                "seconds_run": ticks * core.dt,
                "end_reason": reason,
                "fastest_joint_rad_s": fastest,
                "completed": ticks * core.dt >= seconds - 0.5 * core.dt,
                "fell": bool(summary.get("fell")),
                "tracking_error_rad": summary.get("tracking_error_rad"),
                "distance_m": float(np.hypot(*(q_end[:2] - x_start[:2]))),
                "base_height_m": float(q_end[2]),
                "sim_cpu_ms_per_step": 1e3 * sim_cpu / max(ticks, 1),
                "core_cpu_ms_per_tick": 1e3 * core_cpu / max(ticks, 1),
            }
            if kind == "ess":
                row["engine"] = sim.integrator.engine
                stats = sim.stats
                row.update(
                    {
                        "rhs_evaluations_per_step": stats.rhs_evaluations / max(ticks, 1),
                        "solver_calls_per_step": stats.integrations / max(ticks, 1),
                        "crossings": crossings,
                        "crossings_by_kind": dict(stats.crossings),
                        "splits": stats.splits,
                    }
                )
            out.append(row)
    return out


# ---------------------------------------------------------------------------------------------------- command
def run(
    *,
    quick: bool = False,
    conditions: int | None = None,
    closed_loop_seconds: float = 0.0,
    engine: str = "auto",
    progress=print,
) -> dict[str, Any]:
    """Every check, in order; ``progress`` gets a line as each one ends."""
    started = time.perf_counter()
    result: dict[str, Any] = {"machine": machine(), "quick": quick, "engine": engine}
    result["order_test"] = order = order_test(ORDER_EPS[:2] if quick else ORDER_EPS)
    for reading, r in order["readings"].items():
        errors = ", ".join(f"{row['final_error']:.3g}" for row in r["runs"])
        progress(
            f"order test ({reading}): final-state error {errors} at eps = "
            f"{', '.join(str(row['eps']) for row in r['runs'])}; log-log slope {r['slope']:.3f}"
        )
    hopper = hopper_calibration(HOPPER_EPS[-3:-1] if quick else HOPPER_EPS, 1.0 if quick else HOPPER_SECONDS, engine)
    result["hopper"] = hopper
    progress(
        f"hopper: MuJoCo RMS error {hopper['mujoco']['rms_vs_exact']:.3g} ({hopper['mujoco']['cpu_s']:.4f} s); "
        + "; ".join(
            f"eps {r['eps']:g}: RMS vs MuJoCo {r['rms_vs_mujoco']:.3g}, vs exact {r['rms_vs_exact']:.3g}"
            for r in hopper["ess"]
        )
        + (
            f"; calibrated eps' = {hopper['calibrated_eps']:.3g} m ({hopper['calibrated_ess_cpu_s']:.4f} s)"
            if hopper["calibrated_eps"]
            else "; no eps' in [1e-4, 1e-1]"
        )
    )
    eps = hopper["calibrated_eps"] or 1e-3
    counts = (2, 10, 20) if quick else PLATE_COUNTS
    plate = plate_cost(eps, counts, conditions or (2 if quick else 30), 1.0 if quick else 2.0, engine=engine)
    result["plate"] = plate
    for row in plate["rows"]:
        progress(
            f"plate, {row['contacts']:3d} contacts: ESS {1e3 * row['ess_s_per_s']:.1f} ms, MuJoCo "
            f"{1e3 * row['mujoco_s_per_s']:.3f} ms CPU per simulated s (ESS: {row['ess_crossings_median']:.0f} "
            f"crossings, {row['ess_projections_median'] + row['ess_splits_median']:.0f} projections, "
            f"{row['ess_solver_calls_median']:.0f} solver calls, {row['ess_field_evaluations_median']:.0f} field "
            f"evaluations)"
        )
    for name, slope in plate["marginal_fit_s_per_s_per_contact"].items():
        progress(
            f"plate, marginal cost per contact {name}: ESS {1e6 * slope['ess']:.1f} us, MuJoCo "
            f"{1e6 * slope['mujoco']:.2f} us per simulated s"
        )
    if closed_loop_seconds > 0:
        result["closed_loop"] = runs = closed_loop(closed_loop_seconds, engine=engine)
        for r in runs:
            work = f" ({r['rhs_evaluations_per_step']:.0f} field evaluations)" if r["simulator"] == "ess" else ""
            progress(
                f"{r['case']} {r['formulation']} on {r['simulator']}: {r['seconds_run']:.1f} s, "
                f"{r['end_reason']}, fell {r['fell']}, {r['distance_m']:.2f} m, "
                f"joint error {r['tracking_error_rad']:.4f} rad, "
                f"fastest joint {r['fastest_joint_rad_s']:.1f} rad/s; "
                f"step {r['sim_cpu_ms_per_step']:.2f} ms CPU{work}, controller {r['core_cpu_ms_per_tick']:.2f} ms"
            )
    result["wall_s"] = time.perf_counter() - started
    return result
