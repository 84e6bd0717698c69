"""``idcontrol experiment differentiability``: left and right derivatives of an outcome through a simultaneous
touchdown (Pace & Burden), on a decoupled fixture and on the rigid floating-base quadruped in closed loop.

For an initial condition x swept through the value where two touchdowns coincide, the one-sided
finite-difference derivatives D⁺ = (f(x + δ) − f(x)) / δ and D⁻ = (f(x) − f(x − δ)) / δ are compared as δ
shrinks. Where the outcome is C¹, max |D⁺ − D⁻| ≈ |f''| δ falls tenfold per decade; where it has a kink it
tends to a non-zero constant; where it jumps it grows like 1/δ.

* The fixture (:mod:`idcontrol.analysis.decoupled`): a planar body on two spring legs with their own feet,
  outcome = the state 0.42 s after release, x = the initial pitch θ₀ (both feet land together at θ₀ = 0).
* The quadruped: dropped 5 mm onto flat ground in the rigid-contact simulator, holding its standing posture
  with each formulation (options and gains of ``launch/quadruped_trot.toml``; the joint PID as the baseline
  that predicts no contact force), x = the initial pitch (at 0 the four feet land together), outcome = the
  base's velocity (6) and the commanded torques (12) 60 ms after release, about 28 ms after touchdown.
"""

from __future__ import annotations

import math
import time
from dataclasses import replace
from pathlib import Path
from typing import Any

import numpy as np

from idcontrol import jsontext
from idcontrol.analysis.decoupled import READINGS, SpringLeggedBody, derivative_gaps, outcome
from idcontrol.robot.model import RobotModel
from idcontrol.settings import LaunchConfig, ReferenceSettings, load_launch

STEPS = (1e-3, 1e-4, 1e-5)
#: The quadruped's steps go one decade further: its verdicts are read off the last decade.
QUADRUPED_STEPS = (1e-3, 1e-4, 1e-5, 1e-6)
#: The digest's check on the fixture: max |D⁺ − D⁻| at each step.
DIGEST_GAPS = {1e-3: 0.1135, 1e-4: 0.01135, 1e-5: 0.001135}
FIXTURE_T = 0.42  # s
QUADRUPED_T = 0.06  # s after release
QUADRUPED_DROP = 0.005  # m above the standing height
FORMULATIONS = ("two_stage_qp", "coulomb_lcp", "noslip_lcp", "pid")
LAUNCH = Path(__file__).resolve().parents[3] / "launch" / "quadruped_trot.toml"


def verdict(gaps: list[float]) -> str:
    """How max |D⁺ − D⁻| behaves over the last decade of steps."""
    a, b = gaps[-2], gaps[-1]
    if b <= 1e-9 * max(1.0, a):
        return "converges (locally linear)"
    ratio = b / a if a > 0 else math.inf
    if ratio < 0.3:
        return f"converges (×{ratio:.2f} per decade)"
    if ratio <= 3.0:
        return f"kink: D⁺ ≠ D⁻ (×{ratio:.2f} per decade)"
    return f"jump: grows ×{ratio:.1f} per decade"


# ---------------------------------------------------------------------------------------------------- the fixture
def fixture_rows(steps: tuple[float, ...] = STEPS) -> list[dict[str, Any]]:
    """One row per reading of the fixture: the gaps and jumps at each step."""
    rows = []
    for axis, stance in READINGS:
        system = SpringLeggedBody(leg_axis=axis, stance=stance)
        gaps = derivative_gaps(lambda th, s=system: outcome(s, th, FIXTURE_T), 0.0, steps)
        rows.append(
            {
                "legs": axis,
                "stance": stance,
                "default": (axis, stance) == READINGS[0],
                "steps": list(steps),
                "gaps": [g.gap for g in gaps],
                "jumps": [g.jump for g in gaps],
                "verdict": verdict([g.gap for g in gaps]),
            }
        )
    return rows


# ---------------------------------------------------------------------------------------------------- the quadruped
def quadruped_config(formulation: str, launch: Path = LAUNCH) -> LaunchConfig:
    """The trot launch file's controller with ``formulation`` (its options), holding the posture, on the rigid
    simulator (flat ground, μ = 1), no joint-limit stop."""
    base = load_launch(launch).with_overrides(formulation=formulation)
    return replace(
        base,
        reference=ReferenceSettings(name="hold", options={}),
        bridge=replace(base.bridge, kind="rigid"),
        safety=replace(base.safety, position_margin=math.inf, velocity_factor=math.inf),
    )


def quadruped_outcome(
    config: LaunchConfig, robot: RobotModel, pitch: float, seconds: float = QUADRUPED_T, drop: float = QUADRUPED_DROP
) -> np.ndarray:
    """(18,) the base velocity (6, base frame) and the last commanded torques (12, N·m) ``seconds`` after
    releasing the quadruped ``drop`` m above its standing height, pitched by ``pitch`` rad, at rest."""
    from idcontrol.sim.launch import simulator_for
    from idcontrol.testing.runners import run_in_process

    sim = simulator_for(config, robot)
    q = sim.initial.copy()
    q[2] += drop
    q[3:7] = [0.0, math.sin(pitch / 2), 0.0, math.cos(pitch / 2)]
    sim.reset(q, np.zeros(robot.nv))
    with np.errstate(all="ignore"):
        run = run_in_process(config, seconds, robot=robot, simulator=sim)
    return np.concatenate([sim.state().v[:6], run.tau[-1]])


def quadruped_rows(
    formulations: tuple[str, ...] = FORMULATIONS,
    steps: tuple[float, ...] = QUADRUPED_STEPS,
    sweep: int = 41,
    sweep_range: float = 0.01,
) -> list[dict[str, Any]]:
    """Per formulation: gaps and jumps of the base velocity and of the torques at each step, and the outcome
    over ``sweep`` pitches in ±``sweep_range`` rad (0: none)."""
    robot = RobotModel("quadruped")
    rows = []
    for name in formulations:
        config = quadruped_config(name)
        started = time.perf_counter()
        f = lambda pitch, c=config: quadruped_outcome(c, robot, pitch)  # noqa: E731
        center = f(0.0)
        base_gaps, tau_gaps, base_jumps, tau_jumps = [], [], [], []
        for h in steps:
            plus, minus = f(h), f(-h)
            gap = np.abs((plus - center) / h - (center - minus) / h)
            base_gaps.append(float(gap[:6].max()))
            tau_gaps.append(float(gap[6:].max()))
            base_jumps.append(float(np.abs(plus - minus)[:6].max()))
            tau_jumps.append(float(np.abs(plus - minus)[6:].max()))
        row = {
            "formulation": name,
            "steps": list(steps),
            "base_gaps": base_gaps,
            "tau_gaps": tau_gaps,
            "base_jumps": base_jumps,
            "tau_jumps": tau_jumps,
            "base_verdict": verdict(base_gaps),
            "tau_verdict": verdict(tau_gaps),
            "center": center.tolist(),
        }
        if sweep:
            pitches = np.linspace(-sweep_range, sweep_range, sweep)
            row["sweep_pitch"] = pitches.tolist()
            row["sweep_outcome"] = [f(p).tolist() for p in pitches]
        row["wall_s"] = time.perf_counter() - started
        rows.append(row)
    return rows


# ---------------------------------------------------------------------------------------------------- output
def draw(fixture: list[dict[str, Any]], quadruped: list[dict[str, Any]], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    swept = [r for r in quadruped if "sweep_pitch" in r]
    fig, axes = plt.subplots(1, 1 + 2 * bool(swept), figsize=(16 if swept else 6, 5))
    axes = np.atleast_1d(axes)
    ax = axes[0]
    for r in fixture:
        ax.loglog(r["steps"], r["gaps"], "o-", label=f"fixture, legs {r['legs']}, foot {r['stance']}")
    ax.loglog(list(DIGEST_GAPS), list(DIGEST_GAPS.values()), "k*--", label="digest's fixture")
    for r in quadruped:
        ax.loglog(r["steps"], np.maximum(r["tau_gaps"], 1e-12), "s:", label=f"quadruped τ, {r['formulation']}")
    ax.set_xlabel("finite-difference step δ (rad)")
    ax.set_ylabel("max |D⁺ − D⁻|")
    ax.set_title("left vs right derivatives through a simultaneous touchdown")
    ax.legend(fontsize=7)
    ax.grid(alpha=0.3, which="both")
    if swept:
        for r in swept:
            out = np.array(r["sweep_outcome"])
            axes[1].plot(r["sweep_pitch"], out[:, 4], ".-", ms=3, label=r["formulation"])
            axes[2].plot(r["sweep_pitch"], out[:, 7], ".-", ms=3, label=r["formulation"])
        axes[1].set_ylabel("base pitch rate 60 ms after release (rad/s)")
        axes[2].set_ylabel("LF hip flexion torque at 60 ms (N·m)")
        for ax in axes[1:]:
            ax.set_xlabel("initial pitch (rad); 0: four feet land together")
            ax.set_xticks(np.linspace(min(swept[0]["sweep_pitch"]), max(swept[0]["sweep_pitch"]), 5))
            ax.legend(fontsize=8)
            ax.grid(alpha=0.3)
        axes[1].set_title("rigid quadruped dropped 5 mm, holding its posture")
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def run(json_path: str | None, plot_path: str | None, quick: bool = False) -> int:
    """The command: the fixture's table against the digest, then the quadruped's per formulation."""
    started = time.perf_counter()
    fixture = fixture_rows()
    print(
        f"decoupled fixture (planar body on two spring legs), outcome at {FIXTURE_T} s, x = initial pitch; "
        "max |D⁺ − D⁻| at δ = " + ", ".join(f"{h:g}" for h in STEPS)
    )
    print("  digest: " + ", ".join(f"{DIGEST_GAPS[h]:.4g}" for h in STEPS))
    for r in fixture:
        off = ", ".join(f"{100 * (g / DIGEST_GAPS[h] - 1):+.0f} %" for h, g in zip(STEPS, r["gaps"], strict=True))
        print(
            f"  legs {r['legs']:<5} foot {r['stance']:<7}: "
            + ", ".join(f"{g:.4g}" for g in r["gaps"])
            + f"  ({off} from the digest); {r['verdict']}"
            + ("  [default]" if r["default"] else "")
        )
    formulations = ("two_stage_qp", "pid") if quick else FORMULATIONS
    quadruped = quadruped_rows(formulations, sweep=0 if quick else 41)
    print(
        f"rigid quadruped, dropped {1e3 * QUADRUPED_DROP:g} mm, holding its posture; outcome "
        f"{1e3 * QUADRUPED_T:g} ms after release, x = initial pitch (rad); δ = "
        + ", ".join(f"{h:g}" for h in QUADRUPED_STEPS)
    )
    for r in quadruped:
        print(
            f"  {r['formulation']:<13} base velocity gaps "
            + ", ".join(f"{g:.3g}" for g in r["base_gaps"])
            + f" ({r['base_verdict']}); torque gaps "
            + ", ".join(f"{g:.3g}" for g in r["tau_gaps"])
            + f" N·m/rad ({r['tau_verdict']}); torque jumps |τ(+δ) − τ(−δ)| "
            + ", ".join(f"{g:.2g}" for g in r["tau_jumps"])
            + " N·m"
        )
    out = {
        "steps": list(STEPS),
        "quadruped_steps": list(QUADRUPED_STEPS),
        "digest_gaps": [DIGEST_GAPS[h] for h in STEPS],
        "fixture": fixture,
        "quadruped": quadruped,
        "wall_s": time.perf_counter() - started,
    }
    if json_path:
        Path(json_path).write_text(jsontext.dumps(out, indent=1) + "\n")
        print(f"wrote {json_path}")
    if plot_path:
        draw(fixture, quadruped, Path(plot_path))
        print(f"wrote {plot_path}")
    return 0
