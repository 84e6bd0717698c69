"""``idcontrol experiment impacts``: Halm & Posa's rocking block, the set of its post-impact velocities.

The block (w = 1 m, h = 2 m, 1 kg, μ = 1) lands flat at 0.4429 m/s on both bottom corners. Algorithm 2 draws
M = 2¹⁴ samples of Algorithm 1 (impulse step h = 0.3 N·s, at most N = 10 increments each) and the figures are
printed beside the related-seeds digest's reference; the set is drawn in the plane of the two corners' normal
velocities with the three classical outcomes (simultaneous: at rest; A then B and B then A: pivoting).
"""

from __future__ import annotations

import platform
import time
from pathlib import Path
from typing import Any

import numpy as np

from idcontrol import jsontext
from idcontrol.analysis.impacts import ImpactSet, RockingBlock, approximate_set

#: The digest's reference (a reimplementation with a Lemke solver) and the paper's Table 3.
REFERENCE = {
    "mean_lcps_per_sample": 2.465,
    "paper_mean_lcps_per_sample": 2.67,
    "kinetic_energy_ratio_max": 0.068,
    "at_rest_fraction": 0.33,
    "largest_separation_speed": 0.0907,
    "sequential_separation_speed": 0.093,
}
STEP = 0.3  # N·s
MAX_STEPS = 10
SAMPLES = 2**14
EPS = 1e-3  # N·s, Algorithm 2's resolution ε (its forced increment is ε / 3ψ per contact)
AT_REST = 1e-6  # a sample whose kinetic energy is below this fraction of the pre-impact one is at rest


def rocking_block_figures(samples: int = SAMPLES, seed: int = 0, record_paths: int = 200) -> tuple[dict, ImpactSet]:
    """Run Algorithm 2 on the rocking block; return (figures, the set)."""
    block = RockingBlock()
    model = block.model()
    v0 = block.pre_impact_velocity()
    started = time.perf_counter()
    result = approximate_set(
        model, v0, STEP, EPS, MAX_STEPS, samples, np.random.default_rng(seed), record_paths=record_paths
    )
    wall = time.perf_counter() - started
    ke0 = model.kinetic_energy(v0)
    ratio = np.array([model.kinetic_energy(v) for v in result.v]) / ke0
    normal = result.v @ model.N.T
    sequential = model.sequential(v0, [0, 1])
    figures = {
        "samples": samples,
        "seed": seed,
        "step_Ns": STEP,
        "max_steps": MAX_STEPS,
        "eps_Ns": EPS,
        "mean_lcps_per_sample": float(result.steps.mean()),
        "lcps_per_sample_histogram": np.bincount(result.steps).tolist(),
        "terminated_fraction": float(result.terminated.mean()),
        "kept_fraction": float(result.kept.mean()),
        "kinetic_energy_ratio_max": float(ratio.max()),
        "kinetic_energy_ratio_p99": float(np.percentile(ratio, 99)),
        "kinetic_energy_ratio_mean": float(ratio.mean()),
        "at_rest_fraction": float(np.mean(ratio < AT_REST)),
        "largest_separation_speed": float(normal.max()),
        "sequential_separation_speed": float((model.N @ sequential).max()),
        "sequential_velocity": sequential.tolist(),
        "simultaneous_velocity": model.simultaneous(v0).tolist(),
        "wall_s": wall,
        "ms_per_sample": 1e3 * wall / samples,
        "ms_per_lcp": 1e3 * wall / max(1, int(result.steps.sum())),
        "machine": f"{platform.machine()} {platform.python_implementation()} {platform.python_version()}",
    }
    return figures, result


def check(figures: dict[str, Any]) -> list[tuple[str, str, str, bool]]:
    """(figure, measured, reference, within) rows."""
    f, r = figures, REFERENCE
    return [
        (
            "mean LCPs per sample",
            f"{f['mean_lcps_per_sample']:.3f}",
            f"{r['mean_lcps_per_sample']} (paper {r['paper_mean_lcps_per_sample']})",
            0.95 * r["mean_lcps_per_sample"] <= f["mean_lcps_per_sample"] <= 1.05 * r["paper_mean_lcps_per_sample"],
        ),
        (
            "every sample terminates (within N = 10)",
            f"{100 * f['terminated_fraction']:.2f} %",
            "yes",
            f["terminated_fraction"] == 1.0,
        ),
        (
            "kinetic-energy ratio, largest",
            f"{f['kinetic_energy_ratio_max']:.4f}",
            f"≤ {r['kinetic_energy_ratio_max']}",
            f["kinetic_energy_ratio_max"] <= r["kinetic_energy_ratio_max"],
        ),
        (
            "samples at rest (KE < 1e-6 KE₀)",
            f"{100 * f['at_rest_fraction']:.1f} %",
            "about 33 %",
            abs(f["at_rest_fraction"] - r["at_rest_fraction"]) <= 0.03,
        ),
        (
            "largest separation speed, m/s",
            f"{f['largest_separation_speed']:.4f}",
            f"{r['largest_separation_speed']}, approaching the sequential {r['sequential_separation_speed']}",
            abs(f["largest_separation_speed"] - r["largest_separation_speed"]) <= 0.02 * r["largest_separation_speed"]
            and f["largest_separation_speed"] <= f["sequential_separation_speed"] + 1e-9,
        ),
    ]


def draw(result: ImpactSet, figures: dict[str, Any], path: Path) -> None:
    """The set in the plane of the corners' normal velocities (with sampled paths and the classical outcomes),
    and how the samples' separation speeds are distributed."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    block = RockingBlock()
    model = block.model()
    v0 = block.pre_impact_velocity()
    fig, axes = plt.subplots(1, 2, figsize=(11, 5))
    ax = axes[0]
    for path_v in result.paths:
        n = path_v @ model.N.T
        ax.plot(n[:, 0], n[:, 1], color="0.8", lw=0.6, zorder=1)
    n = result.outcomes @ model.N.T
    ax.scatter(n[:, 0], n[:, 1], s=4, color="0.2", zorder=2, label=f"Algorithm 2 outcomes ({len(n)})")
    a_then_b: list = []
    b_then_a: list = []
    model.sequential(v0, [0, 1], path=a_then_b)
    model.sequential(v0, [1, 0], path=b_then_a)
    classical = {
        "simultaneous (at rest)": ([v0, model.simultaneous(v0)], "tab:blue"),
        "A then B": (a_then_b, "tab:red"),
        "B then A": (b_then_a, "goldenrod"),
    }
    for label, (vs, color) in classical.items():
        n = np.array(vs) @ model.N.T
        ax.plot(n[:, 0], n[:, 1], color=color, lw=1.5, label=label, zorder=3)
        ax.scatter(*n[-1], color=color, s=40, zorder=4)
    ax.scatter(*(model.N @ v0), marker="x", color="k", zorder=4, label="pre-impact")
    ax.set_xlabel("corner A normal velocity (m/s)")
    ax.set_ylabel("corner B normal velocity (m/s)")
    ax.set_title("post-impact set (grey: 200 sampled paths)")
    ax.legend(fontsize=8, loc="lower right")
    ax = axes[1]
    separation = (result.outcomes @ model.N.T).max(axis=1)
    ax.hist(separation, bins=60, color="0.35")
    ax.axvline(figures["sequential_separation_speed"], color="tab:red", ls="--", label="sequential (A then B)")
    ax.set_yscale("log")
    ax.set_xlabel("separation speed of the lifting corner (m/s)")
    ax.set_ylabel("samples")
    ax.set_title(
        f"{100 * figures['at_rest_fraction']:.1f} % at rest; largest {figures['largest_separation_speed']:.4f} m/s"
    )
    ax.legend(fontsize=8)
    for ax in axes:
        ax.grid(alpha=0.3)
    fig.suptitle(
        f"Rocking block (Halm & Posa): h = {STEP} N·s, N = {MAX_STEPS}, M = {figures['samples']}, "
        f"seed {figures['seed']}; {figures['mean_lcps_per_sample']:.3f} LCPs per sample"
    )
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)


def run(samples: int, seed: int, json_path: str | None, plot_path: str | None) -> int:
    """The command: figures against the reference (each marked within or OUTSIDE), optional JSON and drawing."""
    figures, result = rocking_block_figures(samples, seed)
    rows = check(figures)
    print(
        f"rocking block, Algorithm 2: M = {samples} samples (seed {seed}) in {figures['wall_s']:.1f} s "
        f"({figures['ms_per_sample']:.2f} ms per sample, {figures['ms_per_lcp']:.2f} ms per LCP; "
        f"the paper: 2.1 ms and 0.80 ms in MATLAB with PATH)"
    )
    width = max(len(r[0]) for r in rows)
    print(f"{'figure':<{width}}  {'measured':>10}  reference")
    for name, got, ref, ok in rows:
        print(f"{name:<{width}}  {got:>10}  {ref}  {'within' if ok else 'OUTSIDE'}")
    s = figures["largest_separation_speed"]
    print(
        f"note: a sample pivoting on one sticking corner at separation speed s keeps a kinetic-energy ratio of "
        f"{_pivot_ratio():.3f}·s²: {_pivot_ratio() * s**2:.4f} at this run's s = {s:.4f} m/s, "
        f"{_pivot_ratio() * 0.0907**2:.4f} at the reference's 0.0907"
    )
    figures["checks"] = [{"figure": n, "measured": g, "reference": r, "within": bool(ok)} for n, g, r, ok in rows]
    figures["reference"] = REFERENCE
    if json_path:
        Path(json_path).write_text(jsontext.dumps(figures, indent=1) + "\n")
        print(f"wrote {json_path}")
    if plot_path:
        draw(result, figures, Path(plot_path))
        print(f"wrote {plot_path}")
    return 0


def _pivot_ratio() -> float:
    """KE⁺/KE₀ per (m/s)² of separation speed for the block pivoting on a sticking corner: v = (s, s/2, −s)."""
    block = RockingBlock()
    model = block.model()
    v = np.array([1.0, 0.5, -1.0])
    return model.kinetic_energy(v) / model.kinetic_energy(block.pre_impact_velocity())
