"""``idcontrol plot``: the figures people otherwise make by hand from a log (PNG, matplotlib Agg).

* ``torques.png`` — commanded τ per joint and its rate Δτ/Δt;
* ``contact_forces.png`` — per contact sphere, the predicted force (summed over its contacts)
  against the force the simulator measured (when the bridge reported it), x, y and z;
* ``tracking.png`` — joint position error q_ref − q per joint (run-mode ticks);
* ``timing.png`` — histograms of the daemon's compute time and the bridge's round trip, with
  the deadline (one control period) marked;
* ``coupling.png`` — the contact-coupling diagnostic (Pace & Burden's condition 6) over time, every joint free and
  through the unactuated DoFs alone, with the ticks flagged for a coupled near-simultaneous touchdown.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

from idcontrol.errors import LogError
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


def plot_log(path: str | Path, output: str | Path | None = None) -> list[Path]:
    """Write every figure of the log at ``path`` into ``output`` (default ``<log stem>_plots/``)."""
    log = read_log(path)
    if not len(log):
        raise LogError(f"{path} holds no ticks to plot")
    out = Path(output) if output else Path(path).with_name(f"{Path(path).stem}_plots")
    out.mkdir(parents=True, exist_ok=True)
    return [plot(log, out) for plot in (plot_torques, plot_contact_forces, plot_tracking, plot_timing, plot_coupling)]
