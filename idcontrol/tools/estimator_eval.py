"""The base estimator measured on MuJoCo's truth: record a closed-loop run, synthesize what the robot would have
measured, run the estimator open-loop over it, compare.

* :func:`record_truth` runs a launch file in process with truth feedback (the controller sees the simulator's
  state, as today) and keeps, each tick, the true state, the foot contacts (MuJoCo's contact force on each
  sphere) and the IMU's true readings: MuJoCo's own accelerometer and gyro quantities (``mj_rnePostConstraint``,
  then ``mj_objectAcceleration`` and ``mj_objectVelocity`` of the base link, ``mjOBJ_XBODY``: its frame, not its
  inertia frame; local axes), as its ``accelerometer`` and ``gyro`` sensors compute them, moved to the robot
  file's IMU frame. ``mj_step`` evaluates them at the start of a step, so the reading that comes with state
  k + 1 is the motion that led from k to k + 1.
* :func:`synthesize` turns the truth into sensor readings with seeded errors (:class:`SensorErrors`).
* :func:`evaluate` runs a :class:`~idcontrol.estimation.BaseEstimator` over them and measures the errors the
  issue's targets name (:class:`EstimateErrors`); ``idcontrol experiment estimator`` prints them.
* :func:`closed_loop` runs a launch file with the estimator in the tick (``launch/trot_estimated.toml``: the bridge's
  sensor form, the core estimating the base it controls from) and measures the same errors against the simulator's
  truth, with the contact decision against the true contacts (``idcontrol experiment estimator --closed-loop``).

Private to the estimator's evaluation: the simulator bridges' sensor models are a separate piece.
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass, field
from pathlib import Path

import mujoco
import numpy as np
from numpy.typing import NDArray

from idcontrol.estimation import BaseEstimator, Estimate, EstimatorSettings, SensorReading
from idcontrol.robot.model import RobotModel
from idcontrol.settings import LaunchConfig, load_launch

Array = NDArray[np.float64]

REPO = Path(__file__).resolve().parents[2]
#: A contact sphere stands in the truth when MuJoCo's normal force on it is above this, N.
CONTACT_FORCE = 1.0


@dataclass
class TruthRecording:
    """A closed-loop run's truth, one row per tick (n rows; k contact spheres).

    t (n,) s; q (n, nq), v (n, nv) the true state (Pinocchio conventions); gyro (n, 3) rad/s and accel (n, 3) m/s²
    the IMU's true angular velocity and specific force, IMU frame; contact (n, k) bool; fell: the run ended early.
    """

    robot: RobotModel
    t: Array
    q: Array
    v: Array
    gyro: Array
    accel: Array
    contact: NDArray[np.bool_]
    end_reason: str


def _imu_placement(robot: RobotModel) -> tuple[Array, Array]:
    """(R_BI, p_BI): the IMU frame in the base frame."""
    name = robot.config.sensors.imu_frame
    if name is None:
        return np.eye(3), np.zeros(3)
    from idcontrol.robot.urdf import frame_id

    placement = robot.model.frames[frame_id(robot.model, name)].placement
    return placement.rotation.copy(), placement.translation.copy()


def record_truth(config: LaunchConfig, seconds: float, robot: RobotModel | None = None) -> TruthRecording:
    """Run ``config`` (a MuJoCo bridge) in process for ``seconds`` and record its truth (see the module)."""
    from idcontrol.sim.launch import simulator_for
    from idcontrol.sim.mujoco import MujocoSim
    from idcontrol.testing.runners import run_in_process

    robot = robot or RobotModel(config.robot)
    sim = simulator_for(config, robot)
    if not isinstance(sim, MujocoSim):
        raise TypeError(f"the estimator's evaluation records MuJoCo's IMU quantities, not {type(sim).__name__}'s")
    m, d = sim.model, sim.data
    base = int(m.jnt_bodyid[m.joint(str(robot.model.names[1])).id])  # the free joint's body: the base link
    rotation_bi, offset_bi = _imu_placement(robot)
    rows: dict[str, list] = {key: [] for key in ("t", "q", "v", "gyro", "accel", "contact")}
    acc6, vel6 = np.zeros(6), np.zeros(6)

    def until(s) -> bool:  # noqa: ANN001 - a SimState
        mujoco.mj_rnePostConstraint(m, d)
        mujoco.mj_objectAcceleration(m, d, mujoco.mjtObj.mjOBJ_XBODY, base, acc6, 1)
        mujoco.mj_objectVelocity(m, d, mujoco.mjtObj.mjOBJ_XBODY, base, vel6, 1)
        omega, alpha, accel = vel6[:3], acc6[:3], acc6[3:]
        at_imu = accel + np.cross(alpha, offset_bi) + np.cross(omega, np.cross(omega, offset_bi))
        rows["t"].append(s.t)
        rows["q"].append(np.array(s.q))
        rows["v"].append(np.array(s.v))
        rows["gyro"].append(rotation_bi.T @ omega)
        rows["accel"].append(rotation_bi.T @ at_imu)
        rows["contact"].append(np.asarray(s.contact_forces)[:, 2] > CONTACT_FORCE)
        return False

    run = run_in_process(config, seconds, robot=robot, simulator=sim, until=until)
    n = min(len(rows["t"]), run.n)  # the rows the controller answered (a state it refused ends the run)
    return TruthRecording(
        robot,
        *(np.asarray(rows[key][:n]) for key in ("t", "q", "v", "gyro", "accel")),
        contact=np.asarray(rows["contact"][:n]),
        end_reason=run.end_reason,
    )


# ---------------------------------------------------------------------------------------------------- sensors
@dataclass(frozen=True)
class SensorErrors:
    """Seeded sensor errors (white-noise densities are per √Hz; per sample σ = density · √rate).

    Defaults: a MEMS IMU of the class legged robots carry (Bosch BMI088: gyro 0.014 °/s/√Hz, accelerometer
    175 µg/√Hz; biases as left after a start-up calibration at rest), an IMU filter's attitude good to a few
    tenths of a degree with a drifting yaw, 14-bit joint encoders and differentiated joint velocities.
    """

    gyro_noise_density: float = 2.4e-4  # rad/s/√Hz
    gyro_bias: float = 3e-3  # rad/s, each axis, random sign
    accel_noise_density: float = 1.7e-3  # m/s²/√Hz
    accel_bias: float = 0.03  # m/s², each axis, random sign
    attitude_error: float = math.radians(0.2)  # rad, the IMU filter's constant roll and pitch error
    attitude_noise: float = math.radians(0.05)  # rad, per sample
    yaw_drift: float = math.radians(1.0) / 60.0  # rad/s, the IMU filter's yaw
    encoder_resolution: float = 2.0 * math.pi / 2**14  # rad
    joint_velocity_noise: float = 0.05  # rad/s


def _quat_xyzw(rotation: Array) -> Array:
    w = math.sqrt(max(0.0, 1.0 + rotation[0, 0] + rotation[1, 1] + rotation[2, 2])) / 2.0
    if w > 1e-6:
        x = (rotation[2, 1] - rotation[1, 2]) / (4 * w)
        y = (rotation[0, 2] - rotation[2, 0]) / (4 * w)
        z = (rotation[1, 0] - rotation[0, 1]) / (4 * w)
        out = np.array([x, y, z, w])
    else:
        import pinocchio as pin

        out = pin.Quaternion(rotation).coeffs().copy()
    return out / np.linalg.norm(out)


def _rotation_xyzw(quat: Array) -> Array:
    import pinocchio as pin

    x, y, z, w = quat
    return pin.Quaternion(w, x, y, z).normalized().toRotationMatrix()


def _exp(phi: Array) -> Array:
    import pinocchio as pin

    return pin.exp3(phi)


def synthesize(truth: TruthRecording, errors: SensorErrors | None = None, seed: int = 0) -> list[SensorReading]:
    """The sensor readings a robot with ``errors`` would have made over ``truth`` (seeded)."""
    errors = errors or SensorErrors()
    rng = np.random.default_rng(seed)
    robot = truth.robot
    n = len(truth.t)
    dt = float(np.median(np.diff(truth.t))) if n > 1 else 1e-3
    rate = 1.0 / dt
    rotation_bi, _ = _imu_placement(robot)
    gyro_bias = errors.gyro_bias * rng.choice([-1.0, 1.0], 3)
    accel_bias = errors.accel_bias * rng.choice([-1.0, 1.0], 3)
    tilt_axis = rng.normal(size=2)
    tilt_error = np.array([*(errors.attitude_error * tilt_axis / np.linalg.norm(tilt_axis)), 0.0])
    out = []
    resolution = errors.encoder_resolution
    for i in range(n):
        q, v = truth.q[i], truth.v[i]
        rotation_wi = _rotation_xyzw(q[3:7]) @ rotation_bi
        error = tilt_error + np.array([*rng.normal(0.0, errors.attitude_noise, 2), errors.yaw_drift * truth.t[i]])
        quat = _quat_xyzw(_exp(error) @ rotation_wi)
        joint_q = q[7:] if resolution <= 0 else np.round(q[7:] / resolution) * resolution
        out.append(
            SensorReading(
                t=float(truth.t[i]),
                joint_q=np.ascontiguousarray(joint_q, dtype=float),
                joint_v=v[6:] + rng.normal(0.0, errors.joint_velocity_noise, robot.nv - 6),
                imu_orientation_xyzw=quat,
                imu_angular_velocity=truth.gyro[i]
                + gyro_bias
                + rng.normal(0.0, errors.gyro_noise_density * math.sqrt(rate), 3),
                imu_linear_acceleration=truth.accel[i]
                + accel_bias
                + rng.normal(0.0, errors.accel_noise_density * math.sqrt(rate), 3),
                contact=truth.contact[i].astype(float),
            )
        )
    return out


# ---------------------------------------------------------------------------------------------------- errors
@dataclass
class EstimateErrors:
    """The estimate against the truth over a run (the issue's targets in brackets).

    height_max : m, the largest |z error| of the base origin [1 cm].  tilt_max : rad, the largest angle between
    the estimated and the true vertical in the base frame [0.5°].  velocity_rms : m/s, RMS of the base
    velocity error's norm, world frame [0.05].  drift_percent : the final horizontal position error as % of the
    horizontal distance travelled [2 %].  distance : m travelled.  healthy_fraction : ticks judged trustworthy.
    tick_us : µs per ``update`` call, p50 and p99.
    """

    height_max: float
    tilt_max: float
    velocity_rms: float
    drift_percent: float
    drift: float
    distance: float
    healthy_fraction: float
    first_unhealthy: str
    tick_us_p50: float
    tick_us_p99: float
    estimates: Array = field(repr=False, default_factory=lambda: np.zeros(0))

    def as_row(self) -> dict[str, float | str]:
        return {
            "height_max_mm": self.height_max * 1e3,
            "tilt_max_deg": math.degrees(self.tilt_max),
            "velocity_rms_mps": self.velocity_rms,
            "drift_percent": self.drift_percent,
            "distance_m": self.distance,
            "healthy_fraction": self.healthy_fraction,
            "tick_us_p50": self.tick_us_p50,
            "tick_us_p99": self.tick_us_p99,
        }


def _tilt_and_velocity(q: Array, v: Array, q_est: Array, v_est: Array) -> tuple[Array, float]:
    """Per row, the angle between the true and the estimated vertical in the base frame (rad), and the RMS of the
    base velocity error's norm over the rows (m/s, world frame)."""
    up_true = np.array([_rotation_xyzw(x[3:7])[2] for x in q])  # the world's z in the base frame
    up_est = np.array([_rotation_xyzw(x[3:7])[2] for x in q_est])
    tilt = np.arccos(np.clip(np.sum(up_true * up_est, axis=1), -1.0, 1.0))
    vel_true = np.array([_rotation_xyzw(x[3:7]) @ y[:3] for x, y in zip(q, v, strict=True)])
    vel_est = np.array([_rotation_xyzw(x[3:7]) @ y[:3] for x, y in zip(q_est, v_est, strict=True)])
    return tilt, float(np.sqrt(np.mean(np.sum((vel_est - vel_true) ** 2, axis=1))))


def evaluate(
    truth: TruthRecording,
    readings: list[SensorReading],
    settings: EstimatorSettings | None = None,
    estimator: BaseEstimator | None = None,
) -> EstimateErrors:
    """Run the estimator open-loop over ``readings`` (reset at the true start position) and compare to ``truth``."""
    robot = truth.robot
    est = estimator or BaseEstimator(robot, settings)
    n = len(readings)
    q_est = np.zeros((n, robot.nq))
    v_est = np.zeros((n, robot.nv))
    healthy = np.zeros(n, dtype=bool)
    first_unhealthy = ""
    costs = np.zeros(n)
    estimate: Estimate = est.reset(readings[0], base_position=truth.q[0, :3])
    for i in range(n):
        if i:
            started = time.perf_counter()
            estimate = est.update(readings[i])
            costs[i] = time.perf_counter() - started
        q_est[i] = estimate.q
        v_est[i] = estimate.v
        healthy[i] = estimate.healthy
        if not estimate.healthy and not first_unhealthy:
            first_unhealthy = f"t = {readings[i].t:.3f} s: {estimate.reason}"
    tilt, velocity_rms = _tilt_and_velocity(truth.q, truth.v, q_est, v_est)
    steps = np.linalg.norm(np.diff(truth.q[:, :2], axis=0), axis=1)
    distance = float(np.sum(steps))
    drift = float(np.linalg.norm(q_est[-1, :2] - truth.q[-1, :2]))
    tick_us = costs[1:] * 1e6
    return EstimateErrors(
        height_max=float(np.max(np.abs(q_est[:, 2] - truth.q[:, 2]))),
        tilt_max=float(np.max(tilt)),
        velocity_rms=velocity_rms,
        drift_percent=100.0 * drift / distance if distance > 0 else math.nan,
        drift=drift,
        distance=distance,
        healthy_fraction=float(np.mean(healthy)),
        first_unhealthy=first_unhealthy,
        tick_us_p50=float(np.percentile(tick_us, 50)) if len(tick_us) else math.nan,
        tick_us_p99=float(np.percentile(tick_us, 99)) if len(tick_us) else math.nan,
        estimates=np.hstack([q_est, v_est]),
    )


def trot_config(robot: str = "quadruped", formulation: str = "two_stage_qp", speed: float = 0.2) -> LaunchConfig:
    """The shipped trot's launch file (``launch/quadruped_trot.toml``) for ``robot`` and ``formulation``."""
    from dataclasses import replace

    config = load_launch(REPO / "launch" / ("quadruped_trot.toml" if robot == "quadruped" else "trot.toml"))
    options = dict(config.reference.options, forward_speed=speed)
    return replace(
        config,
        robot=robot if robot != "quadruped" else config.robot,
        controller=replace(config.controller, formulation=formulation),
        reference=replace(config.reference, options=options),
    )


def run(robot: str, formulation: str, seconds: float, seed: int, json_path: str | None) -> int:
    """``idcontrol experiment estimator``: record the trot, then each filter with ideal and typical sensors;
    prints a table (and writes it as JSON)."""
    import json

    config = trot_config(robot, formulation)
    started = time.perf_counter()
    truth = record_truth(config, seconds)
    print(
        f"{config.robot} trot, {formulation}, {len(truth.t) / 1000:.1f} s recorded in "
        f"{time.perf_counter() - started:.0f} s ({truth.end_reason})"
    )
    rows = []
    ideal = SensorErrors(0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0)
    for sensors, errors in (("ideal", ideal), ("typical", SensorErrors())):
        readings = synthesize(truth, errors, seed=seed)
        for name in ("inekf", "lkf"):
            e = evaluate(truth, readings, EstimatorSettings(filter=name))
            rows.append({"filter": name, "sensors": sensors, **e.as_row(), "first_unhealthy": e.first_unhealthy})
    header = (
        "filter",
        "sensors",
        "height_max_mm",
        "tilt_max_deg",
        "velocity_rms_mps",
        "drift_percent",
        "distance_m",
        "healthy_fraction",
        "tick_us_p50",
        "tick_us_p99",
    )
    print("| " + " | ".join(header) + " |")
    print("|" + "---|" * len(header))
    for row in rows:
        cells = [row[h] if isinstance(row[h], str) else f"{row[h]:.3g}" for h in header]
        print("| " + " | ".join(cells) + " |")
    if json_path:
        Path(json_path).write_text(
            json.dumps(
                {"robot": config.robot, "formulation": formulation, "seconds": seconds, "seed": seed, "rows": rows},
                indent=1,
            )
        )
    return 0


# ---------------------------------------------------------------------------------------------------- closed loop
@dataclass
class ClosedLoopErrors:
    """A closed-loop run with the estimator in the tick, judged on the simulator's truth (the targets in brackets).

    end_reason : why the run ended; ticks : in run mode; fell : the true base fell (below half its standing height
    or tilted beyond 60°).  height_max : m, largest |z error| [1 cm].  tilt_max : rad [0.5°]; it starts at the IMU's
    own attitude error, which the filter starts from.  tilt_settled : rad, the largest after the first second.
    velocity_rms : m/s,
    world frame [0.05].  drift_percent : final horizontal error of the displacement, % of the distance [2 %].
    distance : m, travelled (truth).  contact_agreement : fraction of foot-ticks whose contact state (the feet the
    estimator holds still: the stance feet the formulation loads, :attr:`StanceEstimator.anchors`) is the
    simulator's contact (a normal force above :data:`CONTACT_FORCE`) [98 %].  longest_disagreement : s, the longest
    run of ticks one foot disagreed [10 ms].  stance_agreement : the same for the controller's stance decision (its
    candidate contacts, which a formulation may leave unloaded).  estimator_us_p50, _p99 : the estimator's call per
    tick, µs [10].
    """

    end_reason: str
    ticks: int
    fell: bool
    height_max: float
    tilt_max: float
    tilt_settled: float
    velocity_rms: float
    drift_percent: float
    distance: float
    contact_agreement: float
    longest_disagreement: float
    stance_agreement: float
    estimator_us_p50: float
    estimator_us_p99: float

    def as_row(self) -> dict[str, float | str | bool]:
        return {
            "end_reason": self.end_reason,
            "ticks": self.ticks,
            "fell": self.fell,
            "height_max_mm": self.height_max * 1e3,
            "tilt_max_deg": math.degrees(self.tilt_max),
            "tilt_settled_deg": math.degrees(self.tilt_settled),
            "velocity_rms_mps": self.velocity_rms,
            "drift_percent": self.drift_percent,
            "drift_mm": self.drift_percent * self.distance * 10.0,
            "distance_m": self.distance,
            "contact_agreement": self.contact_agreement,
            "longest_disagreement_ms": self.longest_disagreement * 1e3,
            "stance_agreement": self.stance_agreement,
            "estimator_us_p50": self.estimator_us_p50,
            "estimator_us_p99": self.estimator_us_p99,
        }


def closed_loop(config: LaunchConfig, seconds: float, robot: RobotModel | None = None) -> ClosedLoopErrors:
    """Run ``config`` in process (its bridge's sensor form and its ``[estimator]``) for ``seconds`` and judge the
    estimate the controller used on the simulator's truth (see :class:`ClosedLoopErrors`)."""
    from idcontrol.control.factory import build_core
    from idcontrol.control.modes import MODE_RUN
    from idcontrol.sim.launch import simulator_for

    robot = robot or RobotModel(config.robot)
    core = build_core(config, robot)
    if core.estimator is None:
        raise ValueError(f"{config.path}: no [estimator] to judge")
    sim = simulator_for(config, robot)
    truth_of = getattr(sim, "truth", sim.state)
    standing = float(robot.standing_configuration()[2])
    rows: dict[str, list] = {key: [] for key in ("q", "v", "q_est", "v_est", "stance", "candidates", "contact", "cost")}
    core.start(0.0)
    end_reason, fell = "duration reached", False
    for _ in range(int(round(seconds / core.dt))):
        s = sim.state()
        truth = truth_of()
        out = core.tick(s.robot_state(), now=s.t)
        if out.mode != MODE_RUN:
            end_reason = core.reason
            break
        estimate = core.estimator.estimate
        rows["q"].append(np.array(truth.q))
        rows["v"].append(np.array(truth.v))
        rows["q_est"].append(estimate.q.copy())
        rows["v_est"].append(estimate.v.copy())
        rows["stance"].append(estimate.stance.copy())
        rows["candidates"].append(core.controller.stance.mask.copy())
        rows["contact"].append(np.asarray(truth.contact_forces)[:, 2] > CONTACT_FORCE)
        rows["cost"].append(core.estimate_seconds)
        up = _rotation_xyzw(truth.q[3:7])[2, 2]
        if truth.q[2] < 0.5 * standing or up < 0.5:
            end_reason, fell = f"fell at t = {truth.t:.3f} s (truth)", True
            break
        for _ in range(config.bridge.substeps):
            sim.step(out.tau)
    q, v, q_est, v_est = (np.asarray(rows[key]) for key in ("q", "v", "q_est", "v_est"))
    n = len(q)
    if n < 2:
        return ClosedLoopErrors(end_reason, n, fell, *([math.nan] * 11))
    tilt, velocity_rms = _tilt_and_velocity(q, v, q_est, v_est)
    distance = float(np.sum(np.linalg.norm(np.diff(q[:, :2], axis=0), axis=1)))
    moved_true, moved_est = q[-1, :2] - q[0, :2], q_est[-1, :2] - q_est[0, :2]
    drift = float(np.linalg.norm(moved_est - moved_true))
    agree = np.asarray(rows["stance"]) == np.asarray(rows["contact"])
    longest = 0
    for foot in agree.T:  # the longest run of disagreeing ticks, per foot
        run_length = 0
        for ok in foot:
            run_length = 0 if ok else run_length + 1
            longest = max(longest, run_length)
    cost = np.asarray(rows["cost"][1:]) * 1e6
    return ClosedLoopErrors(
        end_reason=end_reason,
        ticks=n,
        fell=fell,
        height_max=float(np.max(np.abs(q_est[:, 2] - q[:, 2]))),
        tilt_max=float(np.max(tilt)),
        tilt_settled=float(np.max(settled)) if len(settled := tilt[int(round(1.0 / core.dt)) :]) else math.nan,
        velocity_rms=velocity_rms,
        drift_percent=100.0 * drift / distance if distance > 0 else math.nan,
        distance=distance,
        contact_agreement=float(np.mean(agree)),
        longest_disagreement=longest * core.dt,
        stance_agreement=float(np.mean(np.asarray(rows["candidates"]) == np.asarray(rows["contact"]))),
        estimator_us_p50=float(np.percentile(cost, 50)),
        estimator_us_p99=float(np.percentile(cost, 99)),
    )


def run_closed_loop(
    launch: str, robot: str | None, formulation: str | None, seconds: float, json_path: str | None
) -> int:
    """``idcontrol experiment estimator --closed-loop LAUNCH``: one closed-loop run, its errors as a table row."""
    import json

    config = load_launch(launch).with_overrides(robot=robot, formulation=formulation)
    started = time.perf_counter()
    errors = closed_loop(config, seconds)
    row = {
        "robot": config.robot,
        "formulation": config.controller.formulation,
        "estimator": config.estimator.kind,
        "seconds": seconds,
        **errors.as_row(),
    }
    print(f"{Path(launch).name}, {time.perf_counter() - started:.0f} s wall")
    print("| " + " | ".join(row) + " |")
    print("|" + "---|" * len(row))
    print("| " + " | ".join(f"{x:.3g}" if isinstance(x, float) else str(x) for x in row.values()) + " |")
    if json_path:
        Path(json_path).write_text(json.dumps(row, indent=1))
    return 0 if not errors.fell else 1
