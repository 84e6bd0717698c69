"""What a real robot measures and how its actuators respond, around any simulator.

A :class:`SensedSimulator` wraps a back end (MuJoCo, rigid, Drake, ESS) and gives the bridge the state a robot's
sensors would report, while the back end keeps the truth (:meth:`SensedSimulator.truth`, for the log and for
judging a run). Its torques pass an actuator model before they reach the joints. Every random stream is drawn
from one seeded generator, so a run is reproducible.

Sensors (``[bridge.sensors]``, :class:`SensorSettings`):

* joint encoders: quantized to ``encoder_resolution`` (rad or m) plus white noise ``encoder_noise``;
* joint velocities: the simulator's plus white noise ``joint_velocity_noise``, or (``joint_velocity =
  "differentiated"``) the difference of two successive encoder readings over the period, as most drives give it;
* the IMU: the base orientation off by a constant tilt ``imu_tilt`` (rad, about a horizontal axis drawn from the
  seed), a yaw drift ``imu_yaw_drift`` (rad/s) and white noise ``imu_orientation_noise`` (rad per axis); the base
  angular velocity from a gyro with a constant bias (each axis drawn with σ = ``gyro_bias``, rad/s) and white
  noise ``gyro_noise``;
* the base position and linear velocity, which a legged robot never measures: here the output of an estimator,
  the truth plus its errors: a height bias ``base_height_bias`` (m) and a position random walk
  ``base_position_walk`` (m/√s); a velocity bias ``base_velocity_bias`` (m/s, horizontal, direction from the seed)
  and a Gauss–Markov error of standard deviation ``base_velocity_error`` (m/s per axis) and correlation time
  ``base_velocity_correlation`` (s);
* with ``base = "imu"`` (the sensor form), no base pose or twist at all: the state's ``q[0:7]`` and ``v[0:6]``
  hold the origin, level, at rest, and the reading carries the IMU's (:class:`~idcontrol.control.state.ImuReading`,
  in the robot file's ``[sensors] imu_frame``): the orientation above (world ← IMU), the gyro above (IMU axes), and
  the accelerometer's specific force: the IMU point's true acceleration over the last period (the difference of its
  world velocities, so every back end has one), less gravity, in IMU axes, plus a constant bias (each axis drawn with
  σ = ``accel_bias``, m/s²) and white noise ``accel_noise`` (m/s² per sample). The daemon estimates the base;
* foot force sensors, only where the robot file declares them (``[sensors] feet = "force"``), with white noise
  ``foot_force_noise`` (N per axis); without them the state carries no contact forces;
* a sensor latency of ``latency_ticks`` control periods.

Actuators (``[bridge.actuators]``, :class:`ActuatorSettings`): a command reaches the joints ``delay_ticks`` periods
late, through a first-order torque response of bandwidth ``bandwidth_hz`` (0: instant), less an unmodelled joint
friction (Coulomb ``coulomb_friction`` × the joint's effort limit, smoothed over 0.01 rad/s, and viscous
``viscous_friction`` N·m·s/rad), and within a torque limit that falls linearly to zero from ``speed_knee`` × the
URDF velocity limit to the velocity limit while the motor drives the joint (braking is not limited).

Presets: ``ideal`` (everything off: the simulator's truth and an instant actuator, the default) and ``typical``
(:data:`~idcontrol.settings.SENSOR_PRESETS`, :data:`~idcontrol.settings.ACTUATOR_PRESETS`; the values and their
sources are in docs/robustness.md). A table may name a preset and override any of its keys.
"""

from __future__ import annotations

import math
from collections import deque
from dataclasses import replace
from typing import Any

import numpy as np
from numpy.typing import NDArray

from idcontrol.control.state import ImuReading
from idcontrol.robot.model import RobotModel
from idcontrol.settings import ActuatorSettings, SensorSettings
from idcontrol.sim.base import SimState, Simulator

Array = NDArray[np.float64]


# ---------------------------------------------------------------------------------------------------- rotations
def _quat_multiply(a: Array, b: Array) -> Array:
    """Hamilton product of two quaternions (x, y, z, w)."""
    ax, ay, az, aw = a
    bx, by, bz, bw = b
    return np.array(
        [
            aw * bx + ax * bw + ay * bz - az * by,
            aw * by - ax * bz + ay * bw + az * bx,
            aw * bz + ax * by - ay * bx + az * bw,
            aw * bw - ax * bx - ay * by - az * bz,
        ]
    )


def _quat_from_rotation_vector(r: Array) -> Array:
    """Quaternion (x, y, z, w) of the rotation vector ``r`` (3,), rad."""
    angle = float(np.linalg.norm(r))
    if angle < 1e-12:
        return np.array([0.5 * r[0], 0.5 * r[1], 0.5 * r[2], 1.0]) / math.sqrt(1.0 + 0.25 * angle * angle)
    s = math.sin(0.5 * angle) / angle
    return np.array([s * r[0], s * r[1], s * r[2], math.cos(0.5 * angle)])


def _quat_from_matrix(rotation: Array) -> Array:
    """Quaternion (x, y, z, w) of a rotation matrix."""
    import pinocchio as pin

    return np.array(pin.Quaternion(rotation).coeffs())


def _rotation(quaternion_xyzw: Array) -> Array:
    x, y, z, w = quaternion_xyzw / np.linalg.norm(quaternion_xyzw)
    return np.array(
        [
            [1 - 2 * (y * y + z * z), 2 * (x * y - z * w), 2 * (x * z + y * w)],
            [2 * (x * y + z * w), 1 - 2 * (x * x + z * z), 2 * (y * z - x * w)],
            [2 * (x * z - y * w), 2 * (y * z + x * w), 1 - 2 * (x * x + y * y)],
        ]
    )


# ---------------------------------------------------------------------------------------------------- the wrapper
class SensedSimulator:
    """A :class:`~idcontrol.sim.base.Simulator` that reports what the robot's sensors would and drives the joints
    through an actuator model.

    sim : the back end (its state is the truth).  robot : the model of its robot.
    sensors, actuators : the models (their ``ideal`` presets leave the truth and the torque as they are).
    period : control period, s; ``substeps`` physics steps of ``sim`` per period (the delays count periods).
    """

    def __init__(
        self,
        sim: Simulator,
        robot: RobotModel,
        sensors: SensorSettings,
        actuators: ActuatorSettings,
        *,
        period: float = 1e-3,
        substeps: int = 1,
    ) -> None:
        self.sim, self.robot = sim, robot
        self.sensors, self.actuators = sensors, actuators
        self.period, self.substeps = float(period), int(substeps)
        self._rng = np.random.default_rng(sensors.seed)
        r = robot
        self._floating = bool(r.floating_base)
        self._joint_q = np.arange(7 if self._floating else 0, r.nq)
        self._joint_v = np.arange(6 if self._floating else 0, r.nv)
        feet = sensors.foot_sensors
        self._feet = (r.config.sensors.feet if feet == "robot" else feet) == "force"
        # constant errors, drawn once from the seed
        axis = self._rng.uniform(0.0, 2.0 * math.pi)
        self._tilt_axis = np.array([math.cos(axis), math.sin(axis), 0.0])
        self._gyro_bias = self._rng.normal(0.0, sensors.gyro_bias, 3) if sensors.gyro_bias else np.zeros(3)
        heading = self._rng.uniform(0.0, 2.0 * math.pi)
        self._velocity_bias = sensors.base_velocity_bias * np.array([math.cos(heading), math.sin(heading), 0.0])
        # slowly varying errors, advanced once a period
        self._position_walk = np.zeros(3)
        self._velocity_error = np.zeros(3)
        self._previous_encoder: Array | None = None
        self._history: deque[SimState] = deque(maxlen=sensors.latency_ticks + 1)
        self._last_t: float | None = None
        self._last: SimState | None = None
        self._truth: SimState | None = None
        # actuators
        a = actuators
        self._pending: deque[Array] = deque()
        self._delay_steps = a.delay_ticks * self.substeps
        self._tau_applied = np.zeros(r.nu)
        step = self.period / self.substeps
        self._alpha = 1.0 - math.exp(-2.0 * math.pi * a.bandwidth_hz * step) if a.bandwidth_hz > 0 else 1.0
        self._coulomb = a.coulomb_friction * np.asarray(r.torque_limits, dtype=float)
        limits = np.asarray(r.model.velocityLimit, dtype=float)[self._joint_v]
        self._speed_limit = np.where(np.isfinite(limits) & (limits > 0), limits, np.inf)
        self._ideal_actuators = a.ideal
        # the sensor form: the IMU's placement in the base and its accelerometer's state (drawn last: the other
        # streams stay as they were for a seed)
        self._imu = self._floating and sensors.base == "imu"
        self._imu_rotation, self._imu_offset = np.eye(3), np.zeros(3)
        self._accel_bias = np.zeros(3)
        self._imu_velocity: tuple[float, Array] | None = None  # (t, the IMU point's world velocity)
        if self._imu:
            name = r.config.sensors.imu_frame
            if name is not None:
                from idcontrol.robot.urdf import frame_id

                placement = r.model.frames[frame_id(r.model, name)].placement
                self._imu_rotation, self._imu_offset = placement.rotation.copy(), placement.translation.copy()
            if sensors.accel_bias:
                self._accel_bias = self._rng.normal(0.0, sensors.accel_bias, 3)

    # -------------------------------------------------------------------- the Simulator protocol
    @property
    def time(self) -> float:
        return self.sim.time

    def truth(self) -> SimState:
        """The simulator's own state now (what the sensors measure)."""
        t = self.sim.time
        if self._truth is None or self._truth.t != t:
            self._truth = self.sim.state()
        return self._truth

    def state(self) -> SimState:
        """What the robot's sensors report now (one reading per simulated instant: a second call returns it)."""
        truth = self.truth()
        if self._last is not None and self._last_t == truth.t:
            return self._last
        reading = self._read(truth)
        self._history.append(reading)
        self._last, self._last_t = self._history[0], truth.t
        return self._last

    def step(self, tau: Array) -> None:
        """Apply ``tau`` (nu,) N·m through the actuator model for one physics step."""
        if self._ideal_actuators:
            self.sim.step(tau)
            return
        a = self.actuators
        self._pending.append(np.array(tau, dtype=float))
        command = (
            self._pending.popleft() if len(self._pending) > self._delay_steps else np.zeros_like(self._tau_applied)
        )
        self._tau_applied += self._alpha * (command - self._tau_applied)
        joint_v = self.truth().v[self._joint_v]
        out = self._tau_applied - self._coulomb * np.tanh(joint_v / 0.01) - a.viscous_friction * joint_v
        if a.speed_knee < 1.0:
            knee = a.speed_knee * self._speed_limit
            scale = np.clip(
                (self._speed_limit - np.abs(joint_v)) / np.maximum(self._speed_limit - knee, 1e-9), 0.0, 1.0
            )
            limit = np.asarray(self.robot.torque_limits, dtype=float) * scale
            driving = out * joint_v > 0.0
            out = np.where(driving, np.clip(out, -limit, limit), out)
        self.sim.step(out)

    def __getattr__(self, name: str) -> Any:
        """Anything else (a back end's own methods: ``fell``, ``reset``, ``model``...) is the back end's."""
        return getattr(self.sim, name)

    # -------------------------------------------------------------------- one reading
    def _read(self, truth: SimState) -> SimState:
        s, rng = self.sensors, self._rng
        q, v = truth.q.copy(), truth.v.copy()
        jq, jv = self._joint_q, self._joint_v
        encoder = q[jq]
        if s.encoder_resolution > 0.0:
            encoder = np.round(encoder / s.encoder_resolution) * s.encoder_resolution
        if s.encoder_noise > 0.0:
            encoder = encoder + rng.normal(0.0, s.encoder_noise, encoder.shape)
        if s.joint_velocity == "differentiated":
            previous = encoder if self._previous_encoder is None else self._previous_encoder
            joint_velocity = (encoder - previous) / self.period
        else:
            joint_velocity = v[jv]
        if s.joint_velocity_noise > 0.0:
            joint_velocity = joint_velocity + rng.normal(0.0, s.joint_velocity_noise, joint_velocity.shape)
        self._previous_encoder = encoder
        q[jq], v[jv] = encoder, joint_velocity
        imu = None
        if self._imu:
            imu = self._read_imu(truth, q, v)
        elif self._floating:
            self._read_base(truth, q, v)
        forces = truth.contact_forces if self._feet else None
        if forces is not None and s.foot_force_noise > 0.0:
            forces = forces + rng.normal(0.0, s.foot_force_noise, forces.shape)
        return replace(truth, q=q, v=v, contact_forces=forces, imu=imu, truth=truth if self._floating else None)

    def _read_imu(self, truth: SimState, q: Array, v: Array) -> ImuReading:
        """The IMU's reading of ``truth`` (the module's sensor form); the base part of ``q`` and ``v`` emptied."""
        s, rng = self.sensors, self._rng
        R_true = _rotation(truth.q[3:7])
        rotation_bi, offset_bi = self._imu_rotation, self._imu_offset
        omega_base = truth.v[3:6]
        # the IMU point's world velocity, and its change over the last period (at the first reading: at rest)
        velocity = R_true @ (truth.v[0:3] + np.cross(omega_base, offset_bi))
        acceleration = np.zeros(3)
        if self._imu_velocity is not None and truth.t > self._imu_velocity[0]:
            acceleration = (velocity - self._imu_velocity[1]) / (truth.t - self._imu_velocity[0])
        self._imu_velocity = (truth.t, velocity)
        rotation_wi = R_true @ rotation_bi
        specific_force = rotation_wi.T @ (acceleration + np.array([0.0, 0.0, 9.81]))
        specific_force = specific_force + self._accel_bias
        if s.accel_noise > 0.0:
            specific_force = specific_force + rng.normal(0.0, s.accel_noise, 3)
        # the IMU filter's orientation: a constant tilt, a yaw drift and white noise, applied in the world frame
        error = s.imu_tilt * self._tilt_axis + np.array([0.0, 0.0, s.imu_yaw_drift * truth.t])
        if s.imu_orientation_noise > 0.0:
            error = error + rng.normal(0.0, s.imu_orientation_noise, 3)
        quaternion = _quat_multiply(_quat_from_rotation_vector(error), _quat_from_matrix(rotation_wi))
        quaternion /= np.linalg.norm(quaternion)
        if quaternion[3] < 0.0:
            quaternion = -quaternion
        gyro = rotation_bi.T @ omega_base + rotation_bi.T @ self._gyro_bias
        if s.gyro_noise > 0.0:
            gyro = gyro + rng.normal(0.0, s.gyro_noise, 3)
        q[0:7] = (0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 1.0)
        v[0:6] = 0.0
        return ImuReading(quaternion, gyro, specific_force, truth.t)

    def _read_base(self, truth: SimState, q: Array, v: Array) -> None:
        """The base pose and twist of ``truth`` with the IMU's and the estimator's errors, into ``q`` and ``v``."""
        s, rng, dt = self.sensors, self._rng, self.period
        R_true = _rotation(truth.q[3:7])
        velocity_world = R_true @ truth.v[0:3]
        # the IMU's orientation: a constant tilt, a yaw drift and white noise, applied in the world frame
        error = s.imu_tilt * self._tilt_axis + np.array([0.0, 0.0, s.imu_yaw_drift * truth.t])
        if s.imu_orientation_noise > 0.0:
            error = error + rng.normal(0.0, s.imu_orientation_noise, 3)
        quaternion = _quat_multiply(_quat_from_rotation_vector(error), truth.q[3:7])
        quaternion /= np.linalg.norm(quaternion)
        if quaternion[3] < 0.0:
            quaternion = -quaternion
        q[3:7] = quaternion
        # the estimator's position and velocity errors
        if s.base_position_walk > 0.0:
            self._position_walk += rng.normal(0.0, s.base_position_walk * math.sqrt(dt), 3)
        q[0:3] = truth.q[0:3] + self._position_walk + np.array([0.0, 0.0, s.base_height_bias])
        if s.base_velocity_error > 0.0:
            decay = math.exp(-dt / s.base_velocity_correlation)
            self._velocity_error = decay * self._velocity_error + rng.normal(
                0.0, s.base_velocity_error * math.sqrt(1.0 - decay * decay), 3
            )
        v[0:3] = _rotation(quaternion).T @ (velocity_world + self._velocity_bias + self._velocity_error)
        # the gyro: body rates with a constant bias and white noise
        gyro = truth.v[3:6] + self._gyro_bias
        if s.gyro_noise > 0.0:
            gyro = gyro + rng.normal(0.0, s.gyro_noise, 3)
        v[3:6] = gyro


def sensed(
    sim: Simulator,
    robot: RobotModel,
    sensors: SensorSettings,
    actuators: ActuatorSettings,
    *,
    period: float,
    substeps: int = 1,
) -> Simulator:
    """``sim`` itself when both models are ideal (the truth and an instant actuator), else wrapped in a
    :class:`SensedSimulator`."""
    if sensors.ideal and actuators.ideal:
        return sim
    return SensedSimulator(sim, robot, sensors, actuators, period=period, substeps=substeps)
