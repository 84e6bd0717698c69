"""A closed-loop run as numpy arrays: one row per answered state, whichever transport produced it."""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
from numpy.typing import NDArray

from idcontrol.protocol import MODE_RUN
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
    q_end: Array
    summary: dict[str, object]
    end_reason: str
    objects: dict[str, Array] = field(default_factory=dict)
    missing_records: int = 0

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
        return int(self.clipped.sum())

    @property
    def q_joints(self) -> Array:
        """(n, nu) actuated joint positions, in ``robot.actuated_joints`` order."""
        model = self.robot.model
        return self.q[:, [model.joints[model.getJointId(name)].idx_q for name in self.robot.actuated_joints]]

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

    def sphere_of(self, label: str) -> int:
        """Sphere index of a telemetry contact label ``"sphere/surface[/sample]"``."""
        return self._sphere_index[label.split("/", 1)[0]]

    def add(
        self,
        *,
        t: float,
        q: Array,
        v: Array,
        tau: Array,
        mode: str,
        clipped: int,
        compute_us: float,
        q_ref: Array | None = None,
        qdd_des: Array | None = None,
        found: bool = False,
        timings_us: dict[str, float] | None = None,
        sensed: Array | None = None,
        contact_sphere: NDArray[np.intp] | None = None,
        contact_normal: Array | None = None,
        contact_phi: Array | None = None,
        contact_force: Array | None = None,
        objects: dict[str, Array] | None = None,
    ) -> None:
        """One row. Contact arrays are per candidate contact (``contact_sphere`` gives each one's sphere)."""
        nu, k = self.robot.nu, self.k
        nan = np.full(nu, np.nan)
        force = np.zeros((k, 3))
        normal = np.zeros((k, 3))
        phi = np.full(k, np.nan)
        if contact_sphere is not None and len(contact_sphere):
            normal[contact_sphere] = contact_normal
            np.fmin.at(phi, contact_sphere, contact_phi)
            if contact_force is not None and len(contact_force) == len(contact_sphere):
                np.add.at(force, contact_sphere, contact_force)
        row = self.rows
        row["t"].append(t)
        row["q"].append(np.array(q, dtype=float))
        row["v"].append(np.array(v, dtype=float))
        row["tau"].append(np.array(tau, dtype=float))
        row["q_ref"].append(nan if q_ref is None else np.array(q_ref, dtype=float))
        row["qdd_des"].append(nan if qdd_des is None else np.array(qdd_des, dtype=float))
        row["mode"].append(mode)
        row["clipped"].append(clipped)
        row["found"].append(found)
        row["compute_us"].append(compute_us)
        row["force_predicted"].append(force)
        row["force_sensed"].append(np.zeros((k, 3)) if sensed is None else np.reshape(sensed, (k, 3)).copy())
        row["contact_normal"].append(normal)
        row["contact_phi"].append(phi)
        self.timings.append(timings_us or {})
        for name, position in (objects or {}).items():
            self.objects.setdefault(name, []).append(np.array(position, dtype=float))

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
            objects={name: np.asarray(p) for name, p in self.objects.items()},
            **fields,
        )


ROW_KEYS = ("t", "q", "v", "tau", "q_ref", "qdd_des", "mode", "clipped", "found", "compute_us", "force_predicted",
            "force_sensed", "contact_normal", "contact_phi")  # fmt: skip
