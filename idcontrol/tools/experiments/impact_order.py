"""``idcontrol experiment impact-order``: how each formulation's trot copes with touchdown outcomes it cannot
predict.

The sweep ``sweeps/impact_order.toml`` trots the quadruped (``launch/quadruped_trot.toml``) in the rigid
simulator, whose contact model is the controllers' own, with impact sampling on: at every touchdown the
simulator's single outcome is replaced by a seeded sample of Halm & Posa's Algorithm 1, one ordering among the
many a rigid simultaneous impact allows. Each formulation runs once with the simulator's own outcome
("nominal", deterministic) and once per seed with sampled ones. The study runs on the sweep engine (resumable,
``--workers N`` or ``--ray``), then pools the seeds per formulation into a table and a plot.
"""

from __future__ import annotations

import platform
import time
from dataclasses import replace
from pathlib import Path
from typing import Any

import numpy as np

from idcontrol import jsontext
from idcontrol.errors import ConfigError
from idcontrol.tools.sweep.run import run_sweep
from idcontrol.tools.sweep.spec import Sweep, load_sweep

SPEC = Path(__file__).resolve().parents[3] / "sweeps" / "impact_order.toml"


def study_sweep(
    seeds: int | None = None, output: str | Path | None = None, seconds: float | None = None, spec: Path = SPEC
) -> Sweep:
    """The spec's cells, the nominal ones with seed 0 only (they do not depend on the seed), the sampled ones
    with the first ``seeds`` seeds (default: the spec's); ``seconds`` replaces the spec's run length."""
    sweep = load_sweep(spec, output=output)
    if seconds is not None:
        if not 0.0 < seconds < 3600.0:
            raise ConfigError(f"--seconds must be in (0, 3600) s, got {seconds}")
        sweep.seconds = float(seconds)
        sweep.cells = [replace(c, seconds=float(seconds)) for c in sweep.cells]
    if seeds is not None:
        available = sweep.axes["seed"]
        if not 1 <= seeds <= len(available):
            raise ConfigError(f"--seeds must be in 1..{len(available)} (the spec's seeds), got {seeds}")
        keep = set(available[:seeds])
    else:
        keep = set(sweep.axes["seed"])
    first = sweep.axes["seed"][0]
    sweep.cells = [
        c
        for c in sweep.cells
        if c.params["seed"] in keep and (c.params["options"] == "sampled" or c.params["seed"] == first)
    ]
    return sweep


def _stats(values: list[float]) -> dict[str, float | None]:
    v = np.array([x for x in values if x is not None], dtype=float)
    if not v.size:
        return {"mean": None, "std": None, "min": None, "max": None}
    return {"mean": float(v.mean()), "std": float(v.std()), "min": float(v.min()), "max": float(v.max())}


def summarize(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Per formulation: the nominal run and the sampled runs pooled."""
    out = []
    for formulation in dict.fromkeys(r["formulation"] for r in rows):
        nominal = next(
            (
                {k: v for k, v in r.items() if k not in ("host", "traceback")}
                for r in rows
                if r["formulation"] == formulation and r["options"] == "nominal"
            ),
            None,
        )
        sampled = [r for r in rows if r["formulation"] == formulation and r["options"] == "sampled"]
        done = [r for r in sampled if r.get("status") == "done"]
        loaded = sum(r["loaded_contacts"] for r in done)
        events = sum(r.get("impact_events", 0) for r in done)
        line = {
            "formulation": formulation,
            "nominal": nominal,
            "runs": len(sampled),
            "errors": len(sampled) - len(done),
            "completed": sum(r["completed"] for r in done),
            "fell": sum(r["fell"] for r in done),
            "stopped": sum(not r["completed"] and not r["fell"] for r in done),
            "tracking_error_rad": _stats([r["tracking_error_rad"] for r in done]),
            "tau_rate_mean": _stats([r["tau_rate_mean"] for r in done]),
            "distance_m": _stats([r.get("distance_m") for r in done]),
            "cone_violation_rate": (sum(r["cone_violations"] for r in done) / loaded) if loaded else None,
            "cone_ratio_max": max(
                (r["cone_ratio_max"] for r in done if r.get("cone_ratio_max") is not None), default=None
            ),
            "failed_solves": sum(r["failed_solves"] for r in done),
            "runs_with_failed_solves": sum(r["failed_solves"] > 0 for r in done),
            "fallback_solves": sum(r["fallback_solves"] for r in done),
            "impact_events": events,
            "impact_events_per_run": events / len(done) if done else None,
            "impact_lcps_per_event": sum(r.get("impact_lcps", 0) for r in done) / events if events else None,
            "impact_unterminated": sum(r.get("impact_unterminated", 0) for r in done),
            "impact_failures": sum(r.get("impact_failures", 0) for r in done),
        }
        if nominal is not None and nominal.get("status") == "done":
            worse = [r["tracking_error_rad"] > nominal["tracking_error_rad"] for r in done]
            line["tracking_worse_than_nominal"] = sum(worse)
        out.append(line)
    return out


def _f(x: float | None, fmt: str = ".4f") -> str:
    return "−" if x is None else format(x, fmt)


def table(summary: list[dict[str, Any]]) -> list[str]:
    """The study's Markdown table: nominal beside sampled, per formulation."""
    head = [
        "formulation",
        "runs",
        "fell",
        "tracking (rad): nominal → sampled mean ± sd [max]",
        "E\\|Δτ\\| (N·m/s): nominal → sampled mean ± sd [max]",
        "cone violations (predicted)",
        "failed solves (runs)",
        "fallback solves",
        "sampled touchdowns per run (LCPs each)",
    ]
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for s in summary:
        n = s["nominal"] or {}
        t, d = s["tracking_error_rad"], s["tau_rate_mean"]
        fell = f"{s['fell']} / {s['runs']}" + (f" (+{s['stopped']} stopped)" if s["stopped"] else "")
        fell += f"; nominal {'fell' if n.get('fell') else 'no'}"
        cone = "−" if s["cone_violation_rate"] is None else f"{100 * s['cone_violation_rate']:.2f} %"
        if n.get("loaded_contacts"):
            cone += f" (nominal {100 * n['cone_violations'] / n['loaded_contacts']:.2f} %)"
        lines.append(
            "| "
            + " | ".join(
                [
                    f"`{s['formulation']}`",
                    str(s["runs"]),
                    fell,
                    f"{_f(n.get('tracking_error_rad'))} → {_f(t['mean'])} ± {_f(t['std'])} [{_f(t['max'])}]",
                    f"{_f(n.get('tau_rate_mean'), '.1f')} → {_f(d['mean'], '.1f')} ± {_f(d['std'], '.1f')} "
                    f"[{_f(d['max'], '.1f')}]",
                    cone,
                    f"{s['failed_solves']} ({s['runs_with_failed_solves']})",
                    f"{s['fallback_solves']} (nominal {n.get('fallback_solves', '−')})",
                    f"{_f(s['impact_events_per_run'], '.1f')} ({_f(s['impact_lcps_per_event'], '.2f')})",
                ]
            )
            + " |"
        )
    return lines


def draw(rows: list[dict[str, Any]], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    formulations = list(dict.fromkeys(r["formulation"] for r in rows))
    metrics = [
        ("tracking_error_rad", "mean joint tracking error (rad)"),
        ("tau_rate_mean", "E|Δτ|/Δt (N·m/s)"),
        ("distance_m", "distance travelled (m)"),
        ("impact_events", "sampled touchdowns"),
    ]
    fig, axes = plt.subplots(1, len(metrics), figsize=(4.2 * len(metrics), 4.2))
    rng = np.random.default_rng(0)
    for ax, (key, label) in zip(axes, metrics, strict=True):
        for i, f in enumerate(formulations):
            sampled = [
                r
                for r in rows
                if r["formulation"] == f
                and r["options"] == "sampled"
                and r.get("status") == "done"
                and r.get(key) is not None
            ]
            values = np.array([r[key] for r in sampled], dtype=float)
            fell = np.array([r["fell"] or not r["completed"] for r in sampled], dtype=bool)
            if values.size:
                ax.boxplot(values, positions=[i], widths=0.5, showfliers=False)
                x = i + 0.12 * rng.standard_normal(values.size)
                ax.scatter(x[~fell], values[~fell], s=8, color="0.3", zorder=3)
                ax.scatter(
                    x[fell],
                    values[fell],
                    s=14,
                    color="tab:red",
                    marker="v",
                    zorder=3,
                    label="fell or stopped" if i == 0 else None,
                )
            nominal = next(
                (r for r in rows if r["formulation"] == f and r["options"] == "nominal" and r.get(key) is not None),
                None,
            )
            if nominal is not None:
                ax.scatter(
                    [i],
                    [nominal[key]],
                    marker="x",
                    s=80,
                    color="tab:blue",
                    zorder=4,
                    label="nominal (simulator's outcome)" if i == 0 else None,
                )
        ax.set_xticks(range(len(formulations)), formulations, rotation=15)
        ax.set_ylabel(label)
        ax.grid(alpha=0.3)
    handles, labels = axes[0].get_legend_handles_labels()
    if handles:
        axes[0].legend(fontsize=8)
    fig.suptitle("Trot in the rigid simulator with sampled touchdown outcomes (Algorithm 1), one point per seed")
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def write_report(
    rows: list[dict[str, Any]],
    summary: list[dict[str, Any]],
    report: Path,
    plot: Path,
    *,
    command: str,
    where: str,
    wall_s: float,
    ran: int,
    seconds: float,
) -> None:
    seeds = sorted({r["seed"] for r in rows if r["options"] == "sampled"})
    lines = [
        "# Impact-order robustness of the trot",
        "",
        f"`{command}`: {len(rows)} runs of {seconds:g} s ({ran} run in this invocation, {where}, {wall_s:.0f} s "
        f"wall, {platform.machine()}, Python {platform.python_version()}).",
        "",
        "The quadruped trots (`launch/quadruped_trot.toml`: 0.5 s standing, then the trot at 0.2 m/s) in the rigid "
        "simulator, the controllers' own contact model, μ = 1. *Nominal*: the simulator resolves every touchdown "
        "as one simultaneous impact (its LCP). *Sampled*: at every touchdown event the outcome is one seeded "
        "sample of Halm & Posa's Algorithm 1 over the contacts touching then, an ordering the controller cannot "
        f"know; seeds {seeds[0]}..{seeds[-1]} ({len(seeds)} runs per formulation)."
        if seeds
        else "",
        "",
        *table(summary),
        "",
        f"![tracking, E|Δτ|, distance and touchdowns per run]({plot.name})",
        "",
        "Columns: *fell*: the core's fall criterion; *tracking*: mean over joints and ticks of |q_ref − q|; "
        "*E\\|Δτ\\|*: mean over joints and ticks of |τᵢ − τᵢ₋₁|/Δt; *cone violations*: predicted contact forces "
        "outside the Coulomb cone |f_t| ≤ μ f_n (+1e-6 N) among loaded contact-ticks (the QP's four-facet "
        "pyramid allows |f_t| up to √2 μ f_n); *failed solves*: ticks the formulation returned no solution "
        "(the fallback policy answered; runs with any in parentheses); *fallback solves*: ticks answered by a "
        "formulation's fallback solver after its primary did not certify a solution; last column: sampled "
        "touchdown events per run and Algorithm-1 LCPs per event.",
    ]
    report.parent.mkdir(parents=True, exist_ok=True)
    report.write_text("\n".join(lines) + "\n")


def run(
    seeds: int | None,
    workers: int,
    ray: str | None,
    output: str | None,
    report: str,
    json_path: str | None,
    progress: bool = True,
    seconds: float | None = None,
) -> int:
    """The command: run (or resume) the sweep, then write the table, the plot and the pooled JSON."""
    sweep = study_sweep(seeds, output, seconds)
    report_path = Path(report)
    plot_path = report_path.with_suffix(".png")
    parts = ["idcontrol experiment impact-order"] + ([f"--seeds {seeds}"] if seeds else [])
    parts += [f"--seconds {seconds:g}"] if seconds is not None else []
    parts += [f"--workers {workers}"] if workers > 1 else []
    parts += (["--ray"] if ray == "local" else [f"--ray {ray}"]) if ray else []
    parts += [f"--report {report}"]
    command = " ".join(parts)
    print(
        f"impact-order study: {len(sweep.cells)} runs of {sweep.seconds:g} s "
        f"({'Ray ' + ray if ray else str(workers) + ' worker(s)'}); results in {sweep.output}",
        flush=True,
    )
    started = time.perf_counter()
    outcome = run_sweep(sweep, workers=workers, ray=ray, progress=progress, command=command)
    rows = outcome.rows
    summary = summarize(rows)
    where = f"Ray ({ray})" if ray else (f"{workers} worker processes" if workers > 1 else "in one process")
    draw(rows, plot_path)
    write_report(
        rows,
        summary,
        report_path,
        plot_path,
        command=command,
        where=where,
        wall_s=time.perf_counter() - started,
        ran=outcome.ran,
        seconds=sweep.seconds,
    )
    for line in table(summary):
        print(line)
    print(f"wrote {report_path} and {plot_path}")
    if json_path:
        Path(json_path).write_text(jsontext.dumps(summary, indent=1) + "\n")
        print(f"wrote {json_path}")
    return 0 if all(r.get("status") == "done" for r in rows) else 1
