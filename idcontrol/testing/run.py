"""A closed-loop run as numpy arrays: one row per answered state, whichever transport produced it."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np
from numpy.typing import NDArray

from idcontrol.control.modes import MODE_RUN
from idcontrol.robot.model import RobotModel

Array = NDArray[np.float64]


@dataclass
class ClosedLoopRun:
    """What a run did, tick by tick (n rows; k = the robot's contact spheres, in ``robot.sphere_names`` order).

    t : (n,) bridge time of each state, s.
    q, v : (n, nq), (n, nv) the state the tick answered (Pinocchio conventions, see docs/protocol.md).
    tau : (n, nu) the command sent, after the safety guards, N·m.
    q_ref, qdd_des : (n, nu) reference position (rad) and desired acceleration (rad/s²); NaN outside run mode.
    mode : (n,) the daemon's mode after each tick ("run", "safe_stop", ...).
    clipped : (n,) joints whose torque hit a limit.  found : (n,) the formulation succeeded.
    compute_us : (n,) time to answer the state, µs (in process: the core's tick; over the protocol:
        the daemon's decode + tick + encode).  timings_us : phase -> (n,) the formulation's own timings, µs.
    force_predicted, force_sensed : (n, k, 3) contact force on each sphere, world frame, N: predicted by
        the formulation (zero off contact and outside run mode) and measured by the simulator.
    contact_normal : (n, k, 3) unit normal of each sphere's candidate contact (zero when it has none).
    contact_phi : (n, k) signed distance of each sphere's candidate contact, m (NaN when none).
    objects : body name -> (n, 3) movable body positions in world, m (in process only: telemetry has none).
    crossings : the contact events the simulator reported (the ess simulator), in crossing order over the run:
        (t s, label ``"sphere/touchdown"`` or ``"sphere/liftoff"``, how the ESS integrator crossed it).
    coupling, coupling_held : (n,) the contact-coupling diagnostic (:mod:`idcontrol.contacts.coupling`): the largest
        normalized coupling of contacts on different limbs, every joint free and through the unactuated DoFs
        alone, in [0, 1]; NaN where the tick has none (outside run mode).  coupled_touchdown : (n,) bool, a
        coupled pair touched down within 2 ms of each other, the later on that tick.
    mu : friction coefficient the controller assumed.
    q_end : (nq,) the state after the last command was applied (over the protocol, when the daemon left run
        mode early, the last recorded state instead).
    summary : the core's run metrics (tracking_error_rad, tau_rate_mean, fell, ...) over run-mode ticks.
    end_reason : why the daemon left run mode, or why the run ended.
    missing_records : states answered during the run but not recorded (telemetry a subscriber lost).
    """

    robot: RobotModel
    transport: str
    formulation: str
    dt: float
    mu: float
    t: Array
    q: Array
    v: Array
    tau: Array
    q_ref: Array
    qdd_des: Array
    mode: NDArray[np.str_]
    clipped: NDArray[np.int64]
    found: NDArray[np.bool_]
    compute_us: Array
    timings_us: dict[str, Array]
    force_predicted: Array
    force_sensed: Array
    contact_normal: Array
    contact_phi: Array
    coupling: Array
    coupling_held: Array
    coupled_touchdown: NDArray[np.bool_]
    q_end: Array
    summary: dict[str, object]
    end_reason: str
    objects: dict[str, Array] = field(default_factory=dict)
    missing_records: int = 0
    crossings: list[tuple[float, str, str]] = field(default_factory=list)

    @property
    def n(self) -> int:
        return len(self.t)

    @property
    def in_run(self) -> NDArray[np.bool_]:
        """(n,) rows answered in run mode."""
        return self.mode == MODE_RUN

    @property
    def ticks_in_run(self) -> int:
        return int(np.count_nonzero(self.in_run))

    @property
    def end_mode(self) -> str:
        return str(self.mode[-1]) if self.n else ""

    @property
    def clip_count(self) -> int:
        """Joint-ticks clipped to the torque limit, in every mode (a safe stop's too)."""
        return int(self.clipped.sum())

    @property
    def clip_count_in_run(self) -> int:
        """Joint-ticks clipped to the torque limit while the controller ran (not the safe stop after it)."""
        return int(self.clipped[self.in_run].sum())

    @property
    def q_joints(self) -> Array:
        """(n, nu) actuated joint positions, in ``robot.actuated_joints`` order."""
        return self.q[:, self.robot.actuated_idx_q]

    @property
    def tracking_error(self) -> Array:
        """(n,) mean over actuated joints of |q_ref − q|, rad (NaN outside run mode)."""
        return np.mean(np.abs(self.q_ref - self.q_joints), axis=1)

    @property
    def tau_rate(self) -> Array:
        """(n − 1,) mean over joints of |τᵢ − τᵢ₋₁| / Δt, N·m/s (NaN unless both rows are in run mode)."""
        rate = np.mean(np.abs(np.diff(self.tau, axis=0)), axis=1) / self.dt
        both = self.in_run[1:] & self.in_run[:-1]
        return np.where(both, rate, np.nan)


class RunRecorder:
    """Collects rows one at a time (lists of arrays, stacked once at the end)."""

    def __init__(self, robot: RobotModel) -> None:
        self.robot = robot
        self.k = len(robot.sphere_names)
        self._sphere_index = {name: i for i, name in enumerate(robot.sphere_names)}
        self.rows: dict[str, list] = {key: [] for key in ROW_KEYS}
        self.timings: list[dict[str, float]] = []
        self.objects: dict[str, list[Array]] = {}
        self.crossings: list[tuple[float, str, str]] = []

    def sphere_of(self, label: str) -> int:
        """Sphere index of a telemetry contact label ``"sphere/surface[/sample]"``."""
        return self._sphere_index[label.split("/", 1)[0]]

    def add(self, record: dict[str, Any]) -> None:
        """One row from a tick record (:data:`idcontrol.logs.schema.TICK_FIELDS`, arrays as numpy arrays, as
        :func:`~idcontrol.logs.schema.tick_record` builds them or :func:`~idcontrol.logs.schema.decode_tick_record`
        decodes them): per-contact fields are gathered per contact sphere."""
        nu, k = self.robot.nu, self.k
        nan = np.full(nu, np.nan)
        force = np.zeros((k, 3))
        normal = np.zeros((k, 3))
        phi = np.full(k, np.nan)
        labels = record.get("contact_ids")
        if labels:
            spheres = np.array([self.sphere_of(label) for label in labels], dtype=np.intp)
            normal[spheres] = np.reshape(record["contact_normals"], (-1, 3))
            np.fmin.at(phi, spheres, record["contact_phi"])
            forces = np.reshape(record["force_world"], (-1, 3))
            if len(forces) == len(spheres):
                np.add.at(force, spheres, forces)
        sensed = record.get("sensed_forces")
        row = self.rows
        row["t"].append(record["t"])
        row["q"].append(np.array(record["q"], dtype=float))
        row["v"].append(np.array(record["qd"], dtype=float))
        row["tau"].append(np.array(record["tau"], dtype=float))
        row["q_ref"].append(np.array(record["q_ref"], dtype=float) if "q_ref" in record else nan)
        row["qdd_des"].append(np.array(record["qdd_des"], dtype=float) if "qdd_des" in record else nan)
        row["mode"].append(record["mode"])
        row["clipped"].append(record["clipped"])
        row["found"].append(bool(record.get("found", False)))
        row["compute_us"].append(record["compute_us"])
        row["force_predicted"].append(force)
        row["force_sensed"].append(np.zeros((k, 3)) if sensed is None else np.reshape(sensed, (k, 3)).copy())
        row["contact_normal"].append(normal)
        row["contact_phi"].append(phi)
        row["coupling"].append(record.get("coupling", np.nan))
        row["coupling_held"].append(record.get("coupling_held", np.nan))
        row["coupled_touchdown"].append(bool(record.get("coupled_touchdown", False)))
        self.timings.append(record.get("timings_us") or {})
        for name, pose in (record.get("objects") or {}).items():
            self.objects.setdefault(name, []).append(np.array(pose["position"], dtype=float))
        events = record.get("crossings")
        if events:
            self.crossings.extend(zip((float(t) for t in events["t"]), events["label"], events["how"], strict=True))

    def finish(self, **fields: object) -> ClosedLoopRun:
        """The run; ``fields`` are the non-row ones of :class:`ClosedLoopRun` (transport, summary, ...)."""
        r, n, nq, nv, nu, k = self.rows, len(self.rows["t"]), self.robot.nq, self.robot.nv, self.robot.nu, self.k

        def stack(key: str, shape: tuple[int, ...], dtype: type = float) -> np.ndarray:
            return np.asarray(r[key], dtype=dtype).reshape((n, *shape))

        phases = sorted({name for row in self.timings for name in row})
        return ClosedLoopRun(
            robot=self.robot,
            t=stack("t", ()),
            q=stack("q", (nq,)),
            v=stack("v", (nv,)),
            tau=stack("tau", (nu,)),
            q_ref=stack("q_ref", (nu,)),
            qdd_des=stack("qdd_des", (nu,)),
            mode=np.asarray(r["mode"], dtype="U16").reshape(n),  # room for any mode name
            clipped=stack("clipped", (), np.int64),
            found=stack("found", (), bool),
            compute_us=stack("compute_us", ()),
            timings_us={p: np.array([row.get(p, np.nan) for row in self.timings]) for p in phases},
            force_predicted=stack("force_predicted", (k, 3)),
            force_sensed=stack("force_sensed", (k, 3)),
            contact_normal=stack("contact_normal", (k, 3)),
            contact_phi=stack("contact_phi", (k,)),
            coupling=stack("coupling", ()),
            coupling_held=stack("coupling_held", ()),
            coupled_touchdown=stack("coupled_touchdown", (), bool),
            objects={name: np.asarray(p) for name, p in self.objects.items()},
            crossings=list(self.crossings),
            **fields,
        )


#: The rows of a run; each is a tick record's field (``v`` is ``qd``) or, for the (n, k, ...) ones, its
#: per-contact fields gathered per contact sphere.
ROW_KEYS = (
    "t",
    "q",
    "v",
    "tau",
    "q_ref",
    "qdd_des",
    "mode",
    "clipped",
    "found",
    "compute_us",
    "force_predicted",
    "force_sensed",
    "contact_normal",
    "contact_phi",
    "coupling",
    "coupling_held",
    "coupled_touchdown",
)
