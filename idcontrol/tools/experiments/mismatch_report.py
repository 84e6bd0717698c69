"""docs/mismatch.md from the mismatch experiment's results: the answer first, then the tables, figures and runs.

Figures are PNGs written with matplotlib's Agg back end into a folder beside the report (``<report stem>/``).
Every number in the report comes from the results it is given.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np

from idcontrol.tools.experiments.mismatch import FORMULATIONS, SIMULATORS, WINDOW, outcome, succeeded
from idcontrol.tools.experiments.report import Machine

Row = dict[str, Any]

SIM_LABEL = {
    "rigid": "rigid (impulse LCP)",
    "mujoco": "MuJoCo (soft constraints)",
    "drake": "Drake (SAP)",
    "ess": "ESS (spring-damper, ordered crossings)",
}
TASK_LABEL = {"stand": "quadruped standing", "trot": "quadruped trotting (0.2 m/s)", "grasp": "arm holding the box"}


def _cell(by: dict[tuple[str, str, str], Row], task: str, sim: str, formulation: str) -> Row | None:
    return by.get((task, sim, formulation))


def _force(r: Row | None) -> str:
    if r is None:
        return "(not run)"
    if r["formulation"] == "sensed_id":
        return "— (uses the sensed forces; predicts none)"
    if r["force_err_abs_N"] is None:
        return f"— (no compared tick: {outcome(r)})"
    text = (
        f"{r['force_err_abs_N']:.3g} N ({100 * r['force_err_rel']:.2f} %); "
        f"per contact {r['contact_force_err_abs_N']:.3g} N"
    )
    return text if succeeded(r) else f"{text}; {outcome(r)}"


def _tracking(r: Row | None) -> str:
    if r is None:
        return "(not run)"
    if r["tracking_error_rad"] is None:
        return f"— ({outcome(r)})"
    text = f"{r['tracking_error_rad']:.4f} rad, {r['tau_rate_mean']:.1f} N·m/s"
    return text if succeeded(r) else f"{text} until it failed"


def _outcome(r: Row | None) -> str:
    if r is None:
        return "(not run)"
    solves = "" if r["failed_solves"] is None else f"; {r['failed_solves']} failed solves"
    kinds: dict[str, int] = {}  # a fallback's kind without its details: "lemke regularized", "no LCP solution"
    for message, count in (r.get("fallbacks") or {}).items():
        kind = message.split(" (")[0].split(" eps=")[0].split(":")[0]
        kinds[kind] = kinds.get(kind, 0) + count
    fallbacks = ", ".join(f"{kind} × {count}" for kind, count in sorted(kinds.items()))
    return outcome(r) + solves + (f" (fallbacks: {fallbacks})" if fallbacks else "")


def _table(header: list[str], rows: list[list[str]]) -> list[str]:
    def cells(row: list[str]) -> str:  # a | inside a cell (E|Δτ|) would end it
        return "| " + " | ".join(c.replace("|", "\\|") for c in row) + " |"

    return [cells(header), "|" + "---|" * len(header), *(cells(r) for r in rows), ""]


def _task_tables(by: dict, task: str) -> list[str]:
    sims = SIMULATORS[task]
    header = ["formulation", *(SIM_LABEL[s] for s in sims)]
    out = [
        f"### {TASK_LABEL[task]}",
        "",
        "Normal force, predicted − applied: E|Σf̂ₙ − Σfₙ| (relative to E[Σfₙ]); per contact: E Σₖ|f̂ₙ,ₖ − fₙ,ₖ|",
        "",
    ]
    out += _table(header, [[f, *(_force(_cell(by, task, s, f)) for s in sims)] for f in FORMULATIONS])
    out += ["Tracking error (mean |q_ref − q|) and E|Δτ|", ""]
    out += _table(header, [[f, *(_tracking(_cell(by, task, s, f)) for s in sims)] for f in FORMULATIONS])
    out += ["Outcome, failed solves (no torque: the fallback policy took over) and the solvers' own fallbacks", ""]
    out += _table(header, [[f, *(_outcome(_cell(by, task, s, f)) for s in sims)] for f in FORMULATIONS])
    return out


def _spread(values: list[float]) -> str:
    lo, hi = min(values), max(values)
    return f"{100 * lo:.2f} %" if np.isclose(lo, hi, rtol=0.05) else f"{100 * lo:.2f}–{100 * hi:.2f} %"


def answer(results: list[Row]) -> list[str]:
    """The report's first section, computed from the results: how far off the rigid prediction is on each
    simulator, and which formulation's prediction degrades least from the rigid simulator to the soft ones."""
    by = {(r["task"], r["sim"], r["formulation"]): r for r in results}
    out = ["## The short answer", ""]
    for task in ("trot", "stand", "grasp"):
        per_sim = []
        for sim in SIMULATORS[task]:
            rel = [
                r["force_err_rel"]
                for f in FORMULATIONS
                if (r := by.get((task, sim, f))) is not None and succeeded(r) and r["force_err_rel"] is not None
            ]
            if rel:
                per_sim.append(f"{_spread(rel)} on {SIM_LABEL[sim]}")
        if per_sim:
            out.append(
                f"* **{TASK_LABEL[task]}**: the predicted summed normal force misses the applied one by "
                + "; ".join(per_sim)
                + " (formulations that completed)."
            )
    out.append("")
    ranking = []
    for f in FORMULATIONS:
        if f == "sensed_id":
            continue
        cells = [by.get(("trot", s, f)) for s in SIMULATORS["trot"]]
        if any(c is None for c in cells):
            continue
        failed = [c["sim"] for c in cells if not succeeded(c)]
        rel = {c["sim"]: c["force_err_rel"] for c in cells}
        soft = [rel[s] for s in ("mujoco", "drake", "ess") if rel.get(s) is not None]
        ranking.append(
            (len(failed), max(soft) - rel["rigid"] if soft and rel["rigid"] is not None else np.inf, f, failed, rel)
        )
    if ranking:
        ranking.sort(key=lambda x: (x[0], x[1]))
        out.append(
            "Trot, from the most graceful to the least (first the cells completed, then the growth of the "
            "relative force error from the rigid simulator to the worse soft one):"
        )
        out.append("")
        for i, (_, growth, f, failed, rel) in enumerate(ranking, start=1):
            errors = ", ".join(f"{s} {'—' if rel[s] is None else f'{100 * rel[s]:.2f} %'}" for s in rel)
            fails = f"; failed on {', '.join(failed)}" if failed else ""
            grew = "" if not np.isfinite(growth) else f"; +{100 * growth:.2f} points"
            out.append(f"{i}. `{f}`: {errors}{grew}{fails}")
        out.append("")
    return out


def _plots(results: list[Row], folder: Path) -> list[Path]:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    written = []
    folder.mkdir(parents=True, exist_ok=True)
    for task in ("trot", "grasp"):  # standing, the forces are flat lines: the tables say all there is
        for sim in SIMULATORS[task]:
            rows = [r for r in results if r["task"] == task and r["sim"] == sim and r.get("window")]
            if not rows:
                continue
            fig, axes = plt.subplots(2, 2, figsize=(10, 6), sharex=True, squeeze=False)
            for ax, f in zip(axes.flat, FORMULATIONS, strict=True):
                r = next((x for x in rows if x["formulation"] == f), None)
                ax.set_title(f"{f}" + ("" if r is None or succeeded(r) else f" ({outcome(r)[:40]})"), fontsize=9)
                if r is None:
                    ax.text(0.5, 0.5, "not run", ha="center", transform=ax.transAxes)
                    continue
                w = r["window"]
                t = np.asarray(w["t"], dtype=float) * 1e3
                for i, (contact, applied) in enumerate(w["applied"].items()):
                    ax.plot(t, np.asarray(applied, dtype=float), f"C{i}--", lw=1.2, label=f"{contact} applied")
                    if contact in w["predicted"]:
                        ax.plot(
                            t,
                            np.asarray(w["predicted"][contact], dtype=float),
                            f"C{i}-",
                            lw=1.0,
                            label=f"{contact} predicted",
                        )
                ax.grid(alpha=0.3)
                ax.set_ylabel("normal force (N)")
            for ax in axes[-1]:
                ax.set_xlabel(f"time in the window (ms), {1e3 * WINDOW[task]:.0f} ms before the run's end")
            labelled = [ax for ax in axes.flat if ax.get_legend_handles_labels()[0]]
            if labelled:
                labelled[0].legend(fontsize=7, loc="upper right")
            fig.suptitle(
                f"{TASK_LABEL[task]} on {SIM_LABEL[sim]}: predicted (solid) and applied (dashed) normal forces",
                fontsize=10,
            )
            fig.tight_layout()
            path = folder / f"{task}_{sim}.png"
            fig.savefig(path, dpi=100)
            plt.close(fig)
            written.append(path)
    return written


def _setup(results: list[Row]) -> list[str]:
    from idcontrol.sim.drake import DEFAULT_RELAXATION_TIME, DEFAULT_STIFFNESS
    from idcontrol.sim.ess.backend import DEFAULT_DAMPING as ESS_DAMPING
    from idcontrol.sim.ess.backend import DEFAULT_STIFFNESS as ESS_STIFFNESS

    sink = {
        r["sim"]: r.get("rest_penetration_m")
        for r in results
        if r["task"] == "stand" and r["formulation"] == "two_stage_qp" and r.get("rest_penetration_m") is not None
    }

    def pen(sim: str) -> str:
        return f"{1e6 * sink[sim]:.1f} µm" if sim in sink else "not measured"

    return [
        "## The simulators",
        "",
        *_table(
            ["simulator", "contact model", "feet's penetration, standing (two_stage_qp)"],
            [
                [
                    "rigid",
                    "the controller's own: impulse LCP, four-facet friction pyramid (idcontrol.sim.rigid)",
                    pen("rigid"),
                ],
                [
                    "MuJoCo",
                    "soft constraints, elliptic cones, the stiff default (timeconst 2 Δt, idcontrol.sim.mujoco)",
                    pen("mujoco"),
                ],
                [
                    "Drake",
                    f"SAP compliant point contact, k = {DEFAULT_STIFFNESS:.0e} N/m, τ_d = "
                    f"{DEFAULT_RELAXATION_TIME:g} s, regularized friction (idcontrol.sim.drake)",
                    pen("drake"),
                ],
                [
                    "ESS",
                    f"spring-damper point contact, k = {ESS_STIFFNESS:.0e} N/m, b = {ESS_DAMPING:g} N·s/m, "
                    "bristle friction, crossings in predicted order (idcontrol.sim.ess)",
                    pen("ess"),
                ],
            ],
        ),
        "Penetration: the controller's own contact detection on the simulator's state, mean over the feet and "
        "the last 0.1 s of the stand.",
        "",
    ]


def _count(n: int) -> str:
    """``n`` in words up to nine (a report's prose)."""
    words = ("no", "one", "two", "three", "four", "five", "six", "seven", "eight", "nine")
    return words[n] if n < len(words) else str(n)


def write_report(results: list[Row], path: Path, *, command: str) -> list[Path]:
    """Write the markdown report at ``path`` and its figures beside it; the paths written."""
    folder = path.with_suffix("")
    figures = _plots(results, folder)
    machine = Machine.here()
    from importlib.metadata import PackageNotFoundError, version

    try:
        drake_version = version("drake")
    except PackageNotFoundError:
        drake_version = "not installed"
    by = {(r["task"], r["sim"], r["formulation"]): r for r in results}
    sims = sorted({r["sim"] for r in results})
    soft = [SIM_LABEL[s].split(" (")[0] for s in sims if s != "rigid"]
    lines = [
        f"# Model mismatch: rigid contact predictions against {_count(len(sims))} simulators",
        "",
        f"Made by `{command}` on {machine.cpu} ({machine.cores} cores, load {machine.load}), {machine.date_utc}, "
        f"{machine.python}, commit {machine.commit}, Drake {drake_version}. Every number below is measured in "
        "that run.",
        "",
        "A controller that predicts contact forces trusts its rigid model of the world. This report runs each "
        "formulation against the controller's own rigid model (the rigid simulator) and "
        f"{_count(len(soft))} independent soft ones ({', '.join(soft)}), and measures how far the predicted "
        "contact forces are from the forces each simulator applied, "
        "what that did to tracking and torque smoothness, and whether the robot stayed up and kept the box. "
        "How it is run and what each metric means: `idcontrol/tools/experiments/mismatch.py`.",
        "",
    ]
    lines += answer(results)
    lines += _setup(results)
    lines += ["## Results", ""]
    for task in ("stand", "trot", "grasp"):
        if any(k[0] == task for k in by):
            lines += _task_tables(by, task)
    lines += [
        "## Figures",
        "",
        "Predicted (solid) and applied (dashed) normal force of two contacts over the last "
        "gait cycle of the trot (0.3 s) and the last period of the arm's sinusoid (1/3 s); `sensed_id` "
        "predicts none.",
        "",
    ]
    lines += [f"![{p.stem}]({folder.name}/{p.name})" for p in figures] + [""]
    lines += ["## Runs", ""]
    lines += _table(
        ["cell", "simulated", "wall", "outcome"],
        [
            [
                r["name"],
                f"{r['sim_seconds']:.2f} s of {r['seconds_planned']:g}",
                f"{r['wall_seconds']:.1f} s",
                outcome(r),
            ]
            for r in results
        ],
    )
    path.write_text("\n".join(lines))
    return [path, *figures]
