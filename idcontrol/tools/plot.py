"""``idcontrol plot``: the figures people otherwise make by hand from a log (PNG, matplotlib Agg).

* ``torques.png`` — commanded τ per joint and its rate Δτ/Δt;
* ``contact_forces.png`` — per contact sphere, the predicted force (summed over its contacts)
  against the force the simulator measured (when the bridge reported it), x, y and z;
* ``tracking.png`` — joint position error q_ref − q per joint (run-mode ticks);
* ``timing.png`` — histograms of the daemon's compute time and the bridge's round trip, with
  the deadline (one control period) marked;
* ``coupling.png`` — the contact-coupling diagnostic (Pace & Burden's condition 6) over time, every joint free and
  through the unactuated DoFs alone, with the ticks flagged for a coupled near-simultaneous touchdown;
* ``estimate.png`` — a log with an estimate (``[estimator]``): the estimated floating base against the simulator's
  truth, position, height, roll and pitch, world velocity, each with its ±2σ band, the height error against its
  ±2σ, and each foot's stance against its true contact; ``idcontrol plot LOG --figure estimate`` also prints the
  errors (:func:`idcontrol.logs.estimate.estimate_summary`).
"""

from __future__ import annotations

import argparse
from pathlib import Path

import numpy as np

from idcontrol.errors import LogError
from idcontrol.logs.estimate import (
    BASE_ERROR_LAYOUT,
    compared_ticks,
    estimate_summary,
    has_estimate,
    rotation_xyzw,
    true_contacts,
)
from idcontrol.logs.reader import TickLog, read_log


def _figure(rows: int, title: str, height: float = 2.6):
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(rows, 1, figsize=(10, height * rows), sharex=rows > 1, squeeze=False)
    fig.suptitle(title)
    return fig, axes[:, 0]


def _save(fig, path: Path) -> Path:
    import matplotlib.pyplot as plt

    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)
    return path


def _joint_legend(ax, names: list[str]) -> None:
    if names:
        ax.legend(names, fontsize=6, ncol=min(len(names), 6), loc="upper right")


def plot_torques(log: TickLog, out: Path) -> Path:
    t, tau = log.array("t"), log.array("tau")
    names = log.config.get("joint_names", [])
    fig, (ax_tau, ax_rate) = _figure(2, f"{log.config.get('robot')}: commanded torques")
    ax_tau.plot(t, tau, lw=0.8)
    ax_tau.set_ylabel("τ (N·m)")
    _joint_legend(ax_tau, names)
    dt = np.diff(t)
    rate = np.diff(tau, axis=0) / np.where(dt > 0, dt, np.nan)[:, None]
    ax_rate.plot(t[1:], rate, lw=0.6)
    ax_rate.set_ylabel("Δτ/Δt (N·m/s)")
    ax_rate.set_xlabel("bridge time t (s)")
    return _save(fig, out / "torques.png")


def sphere_forces(log: TickLog) -> np.ndarray:
    """(T, k, 3) predicted force per contact sphere of the robot file (world frame, N): its contacts summed."""
    spheres = log.config.get("contact_names", [])
    labels, forces = log.array("contact_ids"), np.nan_to_num(log.array("force_world"))
    sphere_of_label = np.vectorize(lambda label: label.split("/", 1)[0], otypes=[str])
    owners = sphere_of_label(labels) if labels.size else labels
    out = np.zeros((len(log), len(spheres), 3))
    for j, name in enumerate(spheres):
        out[:, j] = np.einsum("tc,tcx->tx", (owners == name).astype(float), forces) if labels.size else 0.0
    return out


def plot_contact_forces(log: TickLog, out: Path) -> Path:
    t = log.array("t")
    spheres = log.config.get("contact_names", [])
    if not spheres:
        raise LogError(f"{log.path}: the robot has no contact spheres to plot")
    predicted = sphere_forces(log)
    sensed = log.array("sensed_forces")
    fig, axes = _figure(len(spheres), f"{log.config.get('robot')}: contact forces, predicted vs simulator", 1.8)
    for j, (ax, name) in enumerate(zip(axes, spheres, strict=True)):
        for k, (axis, colour) in enumerate(zip("xyz", ("C0", "C1", "C2"), strict=True)):
            ax.plot(t, predicted[:, j, k], color=colour, lw=0.8, label=f"predicted {axis}")
            if sensed.size:
                ax.plot(t, sensed[:, j, k], color=colour, lw=0.8, ls="--", label=f"simulator {axis}")
        ax.set_ylabel(f"{name} (N)")
    axes[0].legend(fontsize=6, ncol=6, loc="upper right")
    axes[-1].set_xlabel("bridge time t (s)")
    return _save(fig, out / "contact_forces.png")


def joint_positions(log: TickLog) -> np.ndarray:
    """(T, nu) actuated joint positions from the logged configurations, rad."""
    from idcontrol.robot.model import RobotModel

    robot = RobotModel(log.config["robot"])
    idx = [robot.model.joints[robot.model.getJointId(n)].idx_q for n in log.config["joint_names"]]
    return log.array("q")[:, idx]


def plot_tracking(log: TickLog, out: Path) -> Path:
    t, q_ref = log.array("t"), log.array("q_ref")
    fig, (ax,) = _figure(1, f"{log.config.get('robot')}: joint tracking error (run mode)", 3.5)
    if q_ref.size:
        ax.plot(t, q_ref - joint_positions(log), lw=0.8)
        _joint_legend(ax, log.config.get("joint_names", []))
    ax.set_ylabel("q_ref − q (rad)")
    ax.set_xlabel("bridge time t (s)")
    return _save(fig, out / "tracking.png")


def plot_timing(log: TickLog, out: Path) -> Path:
    deadline_us = log.dt * 1e6
    series = [
        ("compute (state in → command out)", log.array("compute_us")),
        ("bridge round trip", log.array("last_rtt_us")),
    ]
    series = [(label, x[np.isfinite(x)]) for label, x in series if np.isfinite(x).any()]
    fig, axes = _figure(len(series), f"{log.config.get('robot')}: tick timing ({len(log)} ticks)", 3.0)
    for ax, (label, x) in zip(axes, series, strict=True):
        late = int((x > deadline_us).sum())
        ax.hist(x, bins=100, range=(0, max(float(np.percentile(x, 99.9)), deadline_us) * 1.1), color="C0")
        ax.axvline(deadline_us, color="C3", lw=1.5, label=f"deadline {deadline_us:.0f} µs ({late} late)")
        ax.set_yscale("log")
        ax.set_xlabel(f"{label} (µs)")
        ax.set_ylabel("ticks")
        ax.legend(fontsize=8)
    return _save(fig, out / "timing.png")


def plot_coupling(log: TickLog, out: Path) -> Path:
    t, free, held = log.array("t"), log.array("coupling"), log.array("coupling_held")
    flagged = log.array("coupled_touchdown")
    fig, (ax,) = _figure(1, f"{log.config.get('robot')}: coupling of contacts on different limbs", 3.0)
    if free.size and np.isfinite(free).any():
        ax.plot(t, free, lw=0.8, label="every joint free (the impact)")
        ax.plot(t, held, lw=0.8, label="unactuated DoFs alone (the controller's model)")
        hits = np.flatnonzero(flagged.astype(bool)) if flagged.size else np.zeros(0, dtype=int)
        for i in hits:
            ax.axvline(t[i], color="C3", lw=0.8, alpha=0.6)
        if hits.size:
            ax.plot([], [], color="C3", lw=0.8, label=f"coupled touchdown ({hits.size})")
        ax.legend(fontsize=7, loc="upper right")
    ax.set_ylim(0.0, 1.05)
    ax.set_ylabel("max |D_ij| / √(D_ii D_jj)")
    ax.set_xlabel("bridge time t (s)")
    return _save(fig, out / "coupling.png")


def _roll_pitch_yaw(quat: np.ndarray) -> np.ndarray:
    """(T, 3) roll, pitch, yaw (rad, Z-Y-X) of quaternions (T, 4) x y z w."""
    x, y, z, w = quat.T
    roll = np.arctan2(2 * (w * x + y * z), 1 - 2 * (x * x + y * y))
    pitch = np.arcsin(np.clip(2 * (w * y - z * x), -1.0, 1.0))
    yaw = np.arctan2(2 * (w * z + x * y), 1 - 2 * (y * y + z * z))
    return np.stack([roll, pitch, yaw], axis=1)


def _band(ax, t: np.ndarray, centre: np.ndarray, std: np.ndarray, colour: str) -> None:
    """A ±2σ band around ``centre`` (NaN σ: none)."""
    if np.isfinite(std).any():
        ax.fill_between(t, centre - 2 * std, centre + 2 * std, color=colour, alpha=0.2, lw=0)


def plot_estimate(log: TickLog, out: Path) -> Path:
    """``estimate.png``: the estimate (solid, ±2σ shaded) against the truth (dashed, where the bridge sent it)."""
    if not has_estimate(log):
        raise LogError(
            f"{log.path}: this log has no estimate (its launch file has no [estimator]: see docs/estimation.md)"
        )
    t = log.array("t")
    q, qd = log.array("estimate_q"), log.array("estimate_qd")
    fields = log.fields()
    std = log.array("estimate_std") if "estimate_std" in fields else np.zeros((len(log), 0))
    if std.shape[1] != 9:
        std = np.full((len(log), 9), np.nan)
    truth = compared_ticks(log).any()
    estimated = np.isfinite(q).all(axis=1)[:, None]  # the truth where there is an estimate to compare it with
    truth_q = np.where(estimated, log.array("truth_q"), np.nan) if truth else np.full_like(q, np.nan)
    truth_qd = np.where(estimated, log.array("truth_qd"), np.nan) if truth else np.full_like(qd, np.nan)
    rotation = rotation_xyzw(np.nan_to_num(q[:, 3:7], nan=0.0) + np.isnan(q[:, 3:7]) * [0, 0, 0, 1])
    v_world = np.einsum("tij,tj->ti", rotation, qd[:, :3])
    v_truth = np.einsum("tij,tj->ti", rotation_xyzw(np.nan_to_num(truth_q[:, 3:7])), truth_qd[:, :3])
    angles, angles_truth = _roll_pitch_yaw(q[:, 3:7]), _roll_pitch_yaw(truth_q[:, 3:7])
    # the world-frame rotation σ in the heading frame (roll about the heading, pitch across it; correlations left out)
    sx, sy = std[:, BASE_ERROR_LAYOUT["rotation"]][:, :2].T
    c, s = np.cos(angles[:, 2]), np.sin(angles[:, 2])
    tilt_std = np.stack([np.sqrt((c * sx) ** 2 + (s * sy) ** 2), np.sqrt((s * sx) ** 2 + (c * sy) ** 2)], axis=1)
    position_std, velocity_std = std[:, BASE_ERROR_LAYOUT["position"]], std[:, BASE_ERROR_LAYOUT["velocity"]]
    spheres = log.config.get("contact_names", [])
    title = f"{log.config.get('robot')}: estimated base (solid, ±2σ) against the truth (dashed)"
    if not truth:
        title = f"{log.config.get('robot')}: estimated base (±2σ); the log holds no truth"
    fig, axes = _figure(7, title, 2.1)
    ax_xy, ax_z, ax_tilt, ax_v, ax_dz, ax_dtilt, ax_contact = axes
    for axis, colour in ((0, "C0"), (1, "C1")):
        ax_xy.plot(t, q[:, axis], color=colour, lw=0.8, label="xy"[axis])
        ax_xy.plot(t, truth_q[:, axis], color=colour, lw=0.8, ls="--")
        _band(ax_xy, t, q[:, axis], position_std[:, axis], colour)
    ax_xy.set_ylabel("position (m)")
    ax_xy.legend(fontsize=7, loc="upper left")
    ax_z.plot(t, q[:, 2], color="C2", lw=0.8)
    ax_z.plot(t, truth_q[:, 2], color="C2", lw=0.8, ls="--")
    _band(ax_z, t, q[:, 2], position_std[:, 2], "C2")
    ax_z.set_ylabel("height z (m)")
    for axis, (name, colour) in enumerate((("roll", "C0"), ("pitch", "C1"))):
        ax_tilt.plot(t, np.degrees(angles[:, axis]), color=colour, lw=0.8, label=name)
        ax_tilt.plot(t, np.degrees(angles_truth[:, axis]), color=colour, lw=0.8, ls="--")
        _band(ax_tilt, t, np.degrees(angles[:, axis]), np.degrees(tilt_std[:, axis]), colour)
    ax_tilt.set_ylabel("tilt (°)")
    ax_tilt.legend(fontsize=7, loc="upper left")
    for axis, colour in enumerate(("C0", "C1", "C2")):
        ax_v.plot(t, v_world[:, axis], color=colour, lw=0.8, label="xyz"[axis])
        ax_v.plot(t, v_truth[:, axis], color=colour, lw=0.8, ls="--")
        _band(ax_v, t, v_world[:, axis], velocity_std[:, axis], colour)
    ax_v.set_ylabel("velocity, world (m/s)")
    ax_v.legend(fontsize=7, loc="upper left", ncol=3)
    error = log.array("estimate_error") if truth else np.full((len(log), 9), np.nan)
    ax_dz.plot(t, 1e3 * error[:, 8], color="C2", lw=0.8, label="ẑ − z")
    _band(ax_dz, t, np.zeros_like(t), 1e3 * position_std[:, 2], "C2")
    ax_dz.axhline(0.0, color="k", lw=0.5)
    ax_dz.set_ylabel("height error (mm)")
    ax_dz.legend(fontsize=7, loc="upper left")
    tilt_error = log.array("tilt_error") if truth else np.full(len(log), np.nan)
    ax_dtilt.plot(t, np.degrees(tilt_error), color="C3", lw=0.8, label="tilt error")
    ax_dtilt.plot(t, np.degrees(2 * np.max(tilt_std, axis=1)), color="C3", lw=0.6, ls=":", label="2σ (larger axis)")
    ax_dtilt.set_ylabel("tilt error (°)")
    ax_dtilt.legend(fontsize=7, loc="upper left")
    stance = log.array("estimate_contact") if "estimate_contact" in fields else np.zeros((len(log), 0))
    contact = true_contacts(log).astype(float)
    for j in range(len(spheres)):
        if j < stance.shape[1]:
            ax_contact.plot(t, j + 0.8 * stance[:, j], color=f"C{j}", lw=0.9, drawstyle="steps-post")
        if j < contact.shape[1]:
            truth_row = np.where(np.isfinite(q[:, 0]), j + 0.8 * contact[:, j], np.nan)
            ax_contact.plot(t, truth_row, color=f"C{j}", lw=0.9, ls="--", drawstyle="steps-post")
    ax_contact.set_yticks(np.arange(len(spheres)) + 0.4, spheres, fontsize=7)
    ax_contact.set_ylabel("stance (solid)\ntrue contact (dashed)", fontsize=8)
    ax_contact.set_xlabel("bridge time t (s)")
    return _save(fig, out / "estimate.png")


#: The figures by name (``idcontrol plot --figure NAME``), in the order they are written.
FIGURES = {
    "torques": plot_torques,
    "contact_forces": plot_contact_forces,
    "tracking": plot_tracking,
    "timing": plot_timing,
    "coupling": plot_coupling,
    "estimate": plot_estimate,
}


def plot_figures(log: TickLog, out: Path, figures: list[str] | None = None) -> list[Path]:
    """Write the ``figures`` (names of :data:`FIGURES`; default: every one the log has data for) into ``out``."""
    if not len(log):
        raise LogError(f"{log.path} holds no ticks to plot")
    unknown = sorted(set(figures or ()) - FIGURES.keys())
    if unknown:
        raise LogError(f"unknown figure(s) {unknown}; figures: {', '.join(FIGURES)}")
    names = figures or [name for name in FIGURES if name != "estimate" or has_estimate(log)]
    out.mkdir(parents=True, exist_ok=True)
    return [FIGURES[name](log, out) for name in names]


def plot_log(path: str | Path, output: str | Path | None = None, figures: list[str] | None = None) -> list[Path]:
    """Write the figures of the log at ``path`` into ``output`` (default ``<log stem>_plots/``): ``figures`` by
    name, or every one the log has data for."""
    log = read_log(path)
    out = Path(output) if output else Path(path).with_name(f"{Path(path).stem}_plots")
    return plot_figures(log, out, figures)


def plot_command(args: argparse.Namespace) -> int:
    """``idcontrol plot LOG [-o DIR] [--figure NAME ...]``: the figures, and with the estimate figure the estimate's
    errors against the truth."""
    log = read_log(args.log)
    out = Path(args.output) if args.output else Path(args.log).with_name(f"{Path(args.log).stem}_plots")
    for path in plot_figures(log, out, args.figure):
        print(f"wrote {path}")
    if has_estimate(log) and (not args.figure or "estimate" in args.figure):
        if compared_ticks(log).any():
            print(estimate_summary(log).text())
        else:
            print("the log holds no truth to compare the estimate with (a simulator bridge's sensor models send it)")
    return 0
