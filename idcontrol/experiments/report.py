"""docs/results.md from the experiments' results: the paper's tables beside ours, the targets, the plots, the machine.

Plots are PNGs written with matplotlib's Agg back end into a folder beside the report (``<report stem>/``).
"""

from __future__ import annotations

import datetime
import os
import platform
import subprocess
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from idcontrol.experiments.paper import CONTROLLERS, RIGID_MU_INFINITE, TERRAINS, Target, check_targets
from idcontrol.reference.trot import PAPER_WAYPOINTS as PAPER_WAYPOINTS_M

Row = dict[str, Any]

# The paper's numbers (Section 8; ``None``: "−", the quadruped fell). Keys: terrain, then controller.
PAPER_TABLE3: dict[str, dict[str, tuple[float, float] | None]] = {
    "rigid_low": {"qp_mu": (0.0310, 1.9425), "qp_inf": (0.0483, 2.6295), "lcp_mu": (0.0239, 1.8386), "lcp_inf": None,
                  "pid": (0.0895, 1.5569), "sensed_1": (0.0325, 1.7952), "sensed_2": (0.0328, 1.7830)},
    "rigid_high": {"qp_mu": (0.0486, 2.2596), "qp_inf": (0.0654, 2.5737), "lcp_mu": (0.0259, 1.8784),
                   "lcp_inf": (0.0260, 1.8950), "pid": (0.0916, 1.4653), "sensed_1": (0.1317, 2.5585),
                   "sensed_2": (0.1316, 2.5608)},
    "compliant_low": {"qp_mu": (0.0217, 2.0365), "qp_inf": None, "lcp_mu": (0.0219, 2.0786), "lcp_inf": None,
                      "pid": (0.0850, 1.5845), "sensed_1": (0.0265, 1.8858), "sensed_2": (0.0267, 1.8742)},
    "compliant_high": {"qp_mu": (0.0342, 2.9360), "qp_inf": (0.0446, 3.9779), "lcp_mu": (0.0226, 2.1243),
                       "lcp_inf": None, "pid": (0.0850, 1.5845), "sensed_1": (0.1270, 4.4377),
                       "sensed_2": (0.1270, 4.2061)},
}  # fmt: skip
#: Table 4: E|Δτ| (N·m/s, presumably), E|τ| (N·m); the paper does not say on which terrain.
PAPER_TABLE4: dict[str, tuple[float, float]] = {
    "qp_mu": (52.5718, 0.2016), "qp_inf": (245.5117, 0.4239), "lcp_mu": (677.9693, 0.8351),
    "lcp_inf": (351.1803, 0.4055), "sensed_1": (974.3312, 0.9918), "sensed_2": (17528.0, 2.7416),
    "pid": (100.1571, 0.3413),
}  # fmt: skip
#: Table 5: absolute (N) and relative (fraction) error of the summed normal force.
PAPER_TABLE5: dict[str, dict[str, tuple[float, float] | None]] = {
    "rigid_low": {"qp_mu": (3.8009, 0.1253), "qp_inf": (8.4567, 0.2226), "lcp_mu": (0.9371, 0.0194), "lcp_inf": None},
    "rigid_high": {"qp_mu": (13.8457, 0.2748), "qp_inf": (12.4153, 0.2526), "lcp_mu": (1.2768, 0.0155),
                   "lcp_inf": (0.3572, 0.0116)},
    "compliant_low": {"qp_mu": (7.8260, 0.1712), "qp_inf": None, "lcp_mu": (4.6385, 0.0637), "lcp_inf": None},
    "compliant_high": {"qp_mu": (14.9225, 0.3086), "qp_inf": (15.1897, 0.3066), "lcp_mu": (12.4896, 0.2400),
                       "lcp_inf": None},
}  # fmt: skip
LABEL = {c.key: c.label for c in CONTROLLERS}
COLOR = {c.key: f"C{i}" for i, c in enumerate(CONTROLLERS)}  # the same colour for a controller in every plot
PLANAR = ("rigid_low", "rigid_high", "compliant_low", "compliant_high")


@dataclass(frozen=True)
class Machine:
    cpu: str
    cores: int
    load: str
    date_utc: str
    python: str
    commit: str

    @classmethod
    def here(cls) -> Machine:
        from idcontrol.bench import cpu_name

        try:
            commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True,
                                    cwd=Path(__file__).parent, timeout=5).stdout.strip()  # fmt: skip
        except (OSError, subprocess.SubprocessError):
            commit = ""
        load = ", ".join(f"{x:.1f}" for x in os.getloadavg()) if hasattr(os, "getloadavg") else "?"
        return cls(cpu_name(), os.cpu_count() or 0, load,
                   datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%d %H:%M UTC"),
                   f"{platform.python_implementation()} {platform.python_version()}", commit or "?")  # fmt: skip


# ---------------------------------------------------------------------------------------------------- formatting
def _f(x: float | None, digits: int = 4) -> str:
    return "n/a" if x is None else f"{x:.{digits}f}"


def _ours(r: Row | None, key: str, digits: int = 4, scale: float = 1.0) -> str:
    """A metric of a run as the paper prints it: "−" when the run did not complete (with how far it got)."""
    if r is None:
        return "(not run)"
    value = r.get(key)
    text = (
        "n/a"
        if value is None
        else f"{value * scale:.3g}"
        if abs(value * scale) >= 1e6
        else f"{value * scale:.{digits}f}"
    )
    if not r["completed"]:
        how = "fell" if r["fell"] else "raised" if str(r["end_reason"]).startswith("error") else "stopped"
        return f"− ({how} at {r['sim_seconds']:.1f} s" + ("" if value is None else f"; {text} until then") + ")"
    return text


def _paper(value: tuple[float, float] | None, i: int, digits: int = 4, scale: float = 1.0) -> str:
    return "−" if value is None else f"{value[i] * scale:.{digits}f}"


def _table(header: list[str], rows: list[list[str]]) -> list[str]:
    def cells(row: list[str]) -> str:  # a | inside a cell (E|τ|) would end it
        return "| " + " | ".join(c.replace("\\|", "|").replace("|", "\\|") for c in row) + " |"

    return [cells(header), "|" + "---|" * len(header), *(cells(row) for row in rows)]


# ---------------------------------------------------------------------------------------------------- the report
def write_report(
    results: list[Row],
    path: Path,
    *,
    command: str,
    quick: bool,
    calibration: dict[str, float] | None = None,
    bench_rows: list[Any] | None = None,
    machine: Machine | None = None,
) -> list[Path]:
    """Write the markdown report and its plots; returns the files written."""
    path = Path(path)
    machine = machine or Machine.here()
    figures = path.parent / path.stem
    figures.mkdir(parents=True, exist_ok=True)
    written = _plots(results, figures, bench_rows)
    by = {(r["experiment"], r["terrain"], r["controller"]): r for r in results}
    trot_terrains = [t for t in TERRAINS["trot"] if any(("trot", t.key, c.key) in by for c in CONTROLLERS)]
    lines = [
        "# Reproducing the paper's experiments",
        "",
        "Generated by `idcontrol experiment paper` (idcontrol/experiments/); do not edit by hand. The paper is "
        'Zapolsky & Drumwright, "Inverse Dynamics with Rigid Contact and Friction", Sections 7 and 8.',
        "",
        "## How this was made",
        "",
        f"* Command: `{command}`" + (" (quick mode: short runs, a subset of terrains)" if quick else ""),
        f"* Machine: {machine.cpu}, {machine.cores} cores, load average {machine.load} when the report was written "
        "(the machine was shared with other work, so wall times and Fig. 19 timings are pessimistic); "
        f"{machine.python}; commit {machine.commit}; {machine.date_utc}.",
        f"* Run lengths: {_lengths(results)}. Every run is the daemon's control core in process "
        "(`idcontrol.testing.run_in_process`), 1 kHz control, one simulator step per tick.",
        "",
        *_setup_text(calibration),
        "",
    ]
    lines += _table3(by, trot_terrains)
    lines += _table4(by, trot_terrains)
    lines += _table5(by, trot_terrains)
    lines += _rough_and_com(by, trot_terrains)
    lines += _grasp(by)
    lines += _fig19(bench_rows)
    lines += _targets(check_targets(results))
    lines += _figures(written, path.parent)
    lines += _runs(results)
    path.write_text("\n".join(lines) + "\n")
    return [path, *written]


def _lengths(results: list[Row]) -> str:
    seconds = sorted({(r["experiment"], r["seconds_planned"]) for r in results})
    return ", ".join(f"{e} {s:g} s" for e, s in seconds) or "none"


def _setup_text(calibration: dict[str, float] | None) -> list[str]:
    cal = calibration or {}
    pen = cal.get("compliant_rest_penetration_m")
    stiff = cal.get("stiff_rest_penetration_m")
    return [
        "## Set-up",
        "",
        "* **Quadruped trot**: `launch/quadruped_trot.toml` (the paper's trot: 0.3 s cycle, duty factor 0.75, "
        "1.5 cm steps, 0.2 m/s; activation distance 0.1 mm, contact-consistent q̇_des, q̈_des gains "
        "kp = 1000 1/s², kd = 60 1/s, penetration tolerance 1 mm) visiting the paper's waypoints "
        f'{PAPER_WAYPOINTS_M} m in a loop (trot option `waypoints = "paper"`), after 0.5 s standing. The same '
        "reference and q̈_des gains for every controller.",
        '* **Terrains**: *rigid* = the model-matched rigid-contact simulator (`bridge.kind = "rigid"`, '
        "Stewart-Trinkle / Anitescu-Potra step, four-facet friction pyramid); μ = ∞ is its stand-in "
        f"μ = {RIGID_MU_INFINITE:g} (with exact no-slip rows the Coulomb LCP's trot fell at 2.1 s in it; with "
        "μ = 10, 10³ or 10⁴ it completes). *Compliant* = MuJoCo with its default contact softness "
        "(solref (0.02, 1), solimp (0.9, 0.95, 0.001, 0.5, 2)): "
        + (
            f"measured rest penetration of the standing quadruped's feet {1e3 * pen:.2f} mm"
            if pen is not None
            else "rest penetration not measured in this run"
        )
        + (f" (MuJoCo's stiffest setting, used for the arm: {1e3 * stiff:.3f} mm)" if stiff is not None else "")
        + "; μ = ∞ is MuJoCo's 10⁴. *Rough* = the rigid simulator on a 3 cm height map (seed 0), μ drawn once "
        "from U(0.1, 1.5) with the same seed; the trot's planner assumes flat ground (no foothold planning).",
        "* **Controllers**: ID(tᵢ)_QP,μ and ID(tᵢ)_QP,∞ = `two_stage_qp` with the terrain's μ and with μ = ∞;"
        " ID(tᵢ)_LCP,μ = `coulomb_lcp`; ID(tᵢ)_LCP,∞ = `noslip_lcp`, on the trot with options spread = 10⁻², "
        "rank_tol = 10⁻³ (without them it fell at 0.19 s, standing, on rigid μ = 0.1 and at 0.78 s on μ = ∞; "
        "on the grasp they make it predict 10³⁰⁰ N forces, so the grasp runs it with its defaults); ID(tᵢ₋₁) "
        "and ID(tᵢ₋₂) = `sensed_id` fed the simulator's contact forces of the previous step (a state's forces"
        " are those of the step that produced it) or, through a wrapper, of the step before. On μ = ∞ terrain"
        " the Coulomb models (QP,μ and LCP,μ) assume the launch file's μ = 1 (a Coulomb model needs a finite "
        "μ); on the other terrains they assume the simulator's μ.",
        "* **PID**: the `pid` formulation, a joint-space torque PD from the robot file's `[pid_gains]`: "
        "kp = 30 N·m/rad, kd = 0.3 N·m·s/rad, no integral (the core keeps none). Sizing: the paper gives no gains. "
        "kp bounds the sag under the largest stance torque of the trot (two legs carrying 4.8 kg, about "
        "1.5 N·m at the knees) to about 0.05 rad; kd·Δt / I = 0.64 on the lightest link (the swinging knee, "
        "I = 4.7·10⁻⁴ kg·m²), inside the limit 2 of an explicit 1 kHz damper, and its damping ratio there is "
        "1.26. The robot file's `[gains]` (150, 8: q̈ gains, not torque gains) chatter into the 8 N·m limits "
        "(E|Δτ| about 14 000 N·m/s, falls in 1.3 s). The arm's `[pid_gains]`: kp = 400 (N·m/rad, N/m on the "
        "fingers), holding the shoulder's ~19 N·m of gravity within ~0.05 rad, and kd = 2 √(kp I) per joint "
        "(critical damping on the diagonal I of the mass matrix at the start posture).",
        "* **Metrics** (Section 8.1), over the ticks in run mode: pos = E[E_j|q_ref − q|] (rad), "
        "vel = E[E_j|q̇_ref − q̇|] (rad/s), E|Δτ| = E[E_j|τᵢ − τᵢ₋₁|]/Δt (N·m/s), E|τ| = E[E_j|τ|] (N·m). "
        "Force error: the ℓ₁ norm of the normal forces the controller predicted at tick i against the one the "
        "simulator applied during the following step (row i + 1 of the sensed forces), absolute E|Σf̂ₙ − Σfₙ| (N) "
        'and relative to E[Σfₙ]; ticks whose solve failed are left out. "−": the run did not complete '
        "(the quadruped fell; the controller stopped; or a solver raised an exception, which ends a run: see the "
        "Runs table for the message); the simulated time it got to is given.",
        "* **Compliant terrain**: the trot launch file's penetration tolerance (1 mm, for MuJoCo's stiff contact) is "
        "below the soft floor's sinking, so the predictive ID controllers kept pushing the feet out of the floor: "
        "with it every one of them (QP and LCP, μ and ∞) fell within 1 s of the 30 s trot. On compliant terrain "
        "they leave up to 5 mm of penetration alone (`COMPLIANT_PENETRATION_TOLERANCE`); PID and the sensed-force "
        "controllers do not use it.",
        "* **Safety guards**: as in the paper a run ends only by a fall; the launch files' joint-limit guards "
        "(a damping stop beyond a URDF limit) are off in the experiments; torque limits stay on.",
    ]


def _runs_of(by: dict, experiment: str, terrains) -> Iterator[tuple[Any, Any, dict]]:
    """(terrain, controller, result) of every run of ``experiment`` that ``by`` holds, terrain by terrain."""
    for t in terrains:
        for c in CONTROLLERS:
            r = by.get((experiment, t.key, c.key))
            if r is not None:
                yield t, c, r


def _table3(by: dict, terrains: list) -> list[str]:
    planar = [t for t in terrains if t.key in PLANAR]
    if not planar:
        return []
    rows = []
    for t, c, r in _runs_of(by, "trot", planar):
        p = PAPER_TABLE3[t.key].get(c.key)
        paper = (_paper(p, 0), _paper(p, 1)) if c.paper else ("", "")  # a variant: not in the paper
        rows.append([t.label, c.label, _ours(r, "pos_err_rad"), paper[0], _ours(r, "vel_err_rad_s"), paper[1]])
    return ["## Table 3: joint tracking on planar terrain", "",
            *_table(["terrain", "controller", "pos (rad)", "paper", "vel (rad/s)", "paper"], rows), ""]  # fmt: skip


def _table4(by: dict, terrains: list) -> list[str]:
    planar = [t for t in terrains if t.key in PLANAR]
    if not planar:
        return []
    header = ["controller", "paper E|Δτ|", "paper E|τ|"]
    for t in planar:
        header += [f"E|Δτ| {t.key.replace('_', ' ')}", f"E|τ| {t.key.replace('_', ' ')}"]
    rows = []
    for c in CONTROLLERS:
        p = PAPER_TABLE4.get(c.key)
        row = [c.label, f"{p[0]:.1f}" if p else "", f"{p[1]:.4f}" if p else ""]
        for t in planar:
            r = by.get(("trot", t.key, c.key))
            row += [_ours(r, "tau_rate_mean", 1), _ours(r, "tau_mean")]
        rows.append(row)
    return ["## Table 4: torque smoothness (N·m/s) and magnitude (N·m)", "",
            "The paper gives one value per controller without naming the terrain; ours are per terrain.", "",
            *_table(header, rows), ""]  # fmt: skip


def _table5(by: dict, terrains: list) -> list[str]:
    rows = []
    for t, c, r in _runs_of(by, "trot", terrains):
        if not c.predicts_forces:
            continue
        p = PAPER_TABLE5.get(t.key, {}).get(c.key) if t.key in PAPER_TABLE5 else None
        paper = (_paper(p, 0), _paper(p, 1, 2, 100)) if t.key in PAPER_TABLE5 and c.paper else ("", "")
        rows.append([t.label, c.label, _ours(r, "force_err_abs_N"), paper[0],
                     _ours(r, "force_err_rel", 2, 100), paper[1]])  # fmt: skip
    if not rows:
        return []
    return ["## Table 5: contact-force prediction (summed normal forces against the simulator's)", "",
            *_table(["terrain", "controller", "abs (N)", "paper", "rel (%)", "paper (%)"], rows), "",
            "The QP formulations' footnote (about 1 % against a simulator using their own model) is not "
            "reproduced: no simulator here steps with the QP's contact model.", ""]  # fmt: skip


def _rough_and_com(by: dict, terrains: list) -> list[str]:
    rows = []
    for t, c, r in _runs_of(by, "trot", terrains):
        end = r.get("com_end")
        rows.append([t.label, c.label, "completed" if r["completed"] else _ours(r, "pos_err_rad"),
                     _f(r.get("pos_err_rad")), _f(r.get("distance_m"), 2),
                     "" if end is None else f"({end[0]:.2f}, {end[1]:.2f})", str(r.get("failed_solves", "")),
                     str(r.get("clipped_joint_ticks", ""))])  # fmt: skip
    if not rows:
        return []
    return ["## Every trot run: outcome, centre-of-mass path, solver failures, torque clips", "",
            "Rough terrain (the paper's Fig. 16): ID(tᵢ) reduced the tracking error 19 % below PID; only ID(tᵢ₋₁) "
            "tracked better. COM (Fig. 17): PID and ID(tᵢ) follow the waypoint lines, the sensed-force "
            "controllers worse. pos is given here also for runs that did not complete (up to their end).", "",
            *_table(["terrain", "controller", "outcome", "pos (rad)", "COM path (m)", "COM end (x, y) m",
                     "failed solves", "clipped joint-ticks"], rows), ""]  # fmt: skip


def _grasp(by: dict) -> list[str]:
    rows = []
    for t, c, r in _runs_of(by, "grasp", TERRAINS["grasp"]):
        drop = r.get("object_dropped_at_s")
        rows.append([t.label, c.label, _ours(r, "pos_err_rad"), _ours(r, "vel_err_rad_s", 3),
                     _ours(r, "tau_rate_mean", 1), _ours(r, "tau_mean", 3),
                     "−" if not r["completed"] else "kept" if drop is None else f"{1e3 * drop:.0f} ms",
                     _ours(r, "force_err_rel", 2, 100) if c.predicts_forces else "n/a"])  # fmt: skip
    if not rows:
        return []
    return ["## Manipulator: the arm holding the 6000 kg/m³ box along its 3 Hz sinusoid (Fig. 18)", "",
            "`launch/arm_grasp.toml` in MuJoCo (its stiffest contact; the box's friction is the terrain's μ). "
            "Paper: at μ = 1 PID and ID(tᵢ)_QP,μ dropped the box at about 1500 ms, ID(tᵢ₋₁) kept it for the 3 s; "
            "PID and ID(tᵢ₋₁) tracked worse while grasping.", "",
            *_table(["box", "controller", "pos (rad)", "vel (rad/s)", "E|Δτ|", "E|τ|", "box dropped",
                     "force err (%)"], rows), ""]  # fmt: skip


def _fig19(bench_rows: list[Any] | None) -> list[str]:
    if not bench_rows:
        return []
    contacts = sorted({b.contacts for b in bench_rows})
    formulations = list(dict.fromkeys(b.formulation for b in bench_rows))
    cell = {(b.formulation, b.contacts): b for b in bench_rows}
    rows = [[f, *(f"{cell[f, k].p50_us:.0f} / {cell[f, k].p99_us:.0f}" if (f, k) in cell else "" for k in contacts)]
            for f in formulations]  # fmt: skip
    ticks = max(b.ticks for b in bench_rows)
    return ["## Fig. 19: time of one whole tick against the number of contacts", "",
            f"`idcontrol bench --scenarios fig19` run by the same command (up to {ticks} ticks per cell), the "
            "standing quadruped with each foot's contact repeated; median / 99th percentile, µs. The machine was "
            "shared and loaded while this ran. Paper (2.7 GHz Core i7, 2011): the no-slip LCP under 1 ms beyond "
            "40 contacts, the QPs up to about 30, the Coulomb LCP below 4.", "",
            *_table(["formulation", *(f"{k} contacts" for k in contacts)], rows), ""]  # fmt: skip


def _targets(targets: list[Target]) -> list[str]:
    if not targets:
        return []
    rows = [[t.name, t.terrain, t.paper, t.measured, "met" if t.met else "**missed**"] for t in targets]
    return ["## The issue's targets", "", *_table(["target", "terrain", "paper", "measured", ""], rows), ""]


def _figures(written: list[Path], folder: Path) -> list[str]:
    out = ["## Figures", ""]
    for p in written:
        out += [f"![{p.stem}]({p.relative_to(folder).as_posix()})", ""]
    return out if written else []


def _runs(results: list[Row]) -> list[str]:
    rows = [[f"{r['experiment']}/{r['terrain']}/{r['controller']}", f"{r['sim_seconds']:.2f}",
             f"{r['wall_seconds']:.1f}", r["end_reason"]] for r in results]  # fmt: skip
    return ["## Runs", "", *_table(["run", "simulated s", "wall s", "end"], rows)]


# ---------------------------------------------------------------------------------------------------- plots
def _plots(results: list[Row], folder: Path, bench_rows: list[Any] | None) -> list[Path]:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    by = {(r["experiment"], r["terrain"], r["controller"]): r for r in results}
    written = []
    terrains = [t for t in TERRAINS["trot"] if any(("trot", t.key, c.key) in by for c in CONTROLLERS)]
    if terrains:
        fig, axes = plt.subplots(len(terrains), 1, figsize=(8, 2.4 * len(terrains)), sharex=True, squeeze=False)
        for ax, t in zip(axes[:, 0], terrains, strict=True):
            for c in CONTROLLERS:
                r = by.get(("trot", t.key, c.key))
                if r and r.get("series", {}).get("pos_err_rad"):
                    s = r["series"]
                    ax.plot(
                        s["t"][: len(s["pos_err_rad"])], s["pos_err_rad"], label=c.label, lw=0.9, color=COLOR[c.key]
                    )
            ax.set_yscale("log")
            ax.set_ylim(bottom=1e-4)  # standing still, the ID controllers track to rounding
            ax.set_title(t.label, fontsize=9)
            ax.set_ylabel("E_j|q_ref − q| (rad)", fontsize=8)
        axes[-1, 0].set_xlabel("t (s)")
        handles = {label: h for ax in axes[:, 0] for h, label in zip(*ax.get_legend_handles_labels(), strict=True)}
        axes[0, 0].legend(handles.values(), handles.keys(), fontsize=7, ncol=4)
        fig.tight_layout()
        written.append(_save(fig, folder / "fig14_tracking_error.png"))
        fig, axes = plt.subplots(1, len(terrains), figsize=(3.2 * len(terrains), 3.4), squeeze=False)
        wx, wy = zip(*(*PAPER_WAYPOINTS_M, PAPER_WAYPOINTS_M[0]), strict=True)
        for ax, t in zip(axes[0], terrains, strict=True):
            ax.plot(wx, wy, "k:", lw=1, label="waypoints")
            for c in CONTROLLERS:
                r = by.get(("trot", t.key, c.key))
                if r and r.get("series", {}).get("com_xy"):
                    x, y = r["series"]["com_xy"]
                    ax.plot(x, y, lw=0.9, label=c.label, color=COLOR[c.key], ls="-" if r["completed"] else "--")
            ax.set_title(t.label, fontsize=8)
            ax.set_aspect("equal", adjustable="datalim")
            ax.set_xlabel("x (m)")
        axes[0, 0].set_ylabel("y (m)")
        axes[0, 0].plot([], [], "k--", lw=0.9, label="did not complete")
        handles = {label: h for ax in axes[0] for h, label in zip(*ax.get_legend_handles_labels(), strict=True)}
        fig.legend(handles.values(), handles.keys(), fontsize=7, loc="lower center", ncol=5)
        fig.tight_layout(rect=(0, 0.12, 1, 1))
        written.append(_save(fig, folder / "fig17_com_paths.png"))
    if bench_rows:
        fig, ax = plt.subplots(figsize=(6, 4))
        for f in dict.fromkeys(b.formulation for b in bench_rows):
            points = sorted((b.contacts, b.p50_us) for b in bench_rows if b.formulation == f)
            ax.plot(*zip(*points, strict=True), "o-", label=f)
        ax.axhline(1000, color="k", ls=":", lw=1)
        ax.set_xscale("log", base=2)
        ax.set_yscale("log")
        ax.set_xlabel("contacts")
        ax.set_ylabel("median tick time (µs)")
        ax.legend(fontsize=8)
        fig.tight_layout()
        written.append(_save(fig, folder / "fig19_timing.png"))
    return written


def _save(fig: Any, path: Path) -> Path:
    import matplotlib.pyplot as plt

    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path
