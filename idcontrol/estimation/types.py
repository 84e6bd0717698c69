"""The estimator's records: what it reads (:class:`SensorReading`), what it gives (:class:`Estimate`), and what
it is told (:class:`EstimatorSettings`: the noise model and the bounds of a trustworthy estimate).

docs/estimation.md explains each number, where the defaults come from and how to tune them for a robot.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field, fields

import numpy as np
from numpy.typing import NDArray

from idcontrol.errors import ConfigError

Array = NDArray[np.float64]


@dataclass
class ExternalPose:
    """A measured pose of the floating base (motion capture, a map), world frame.

    position : (3,) base origin, m.  orientation_xyzw : (4,) world ← base.
    position_std : m per axis (0: the position is not used).  orientation_std : rad per axis (0: not used).
    """

    position: Array
    orientation_xyzw: Array
    position_std: float = 0.005
    orientation_std: float = 0.0


@dataclass
class SensorReading:
    """What a legged robot measures in one tick.

    t : s, the time of the reading (the filter steps by the difference of consecutive readings).
    joint_q, joint_v : (nj,) the joints' encoder positions (rad or m) and velocities, in Pinocchio's joint order
        (as RobotState's q[7:] and v[6:]).
    imu_orientation_xyzw : (4,) world ← IMU, the IMU's own filter's estimate (its yaw may drift).
    imu_angular_velocity : (3,) rad/s, gyro, IMU frame.
    imu_linear_acceleration : (3,) m/s², accelerometer (specific force: +9.81 up at rest), IMU frame.
    imu_t : s, when the IMU sampled (None: at ``t``); an IMU older than the bounds' ``max_imu_age`` is stale.
    contact : (k,) per contact sphere (``robot.sphere_names`` order), the probability or flag (0/1) that it
        stands; None: unknown, no foot is used (the estimate then drifts and soon says it is not trustworthy).
    external_pose : an optional measured base pose.
    """

    t: float
    joint_q: Array
    joint_v: Array
    imu_orientation_xyzw: Array
    imu_angular_velocity: Array
    imu_linear_acceleration: Array
    imu_t: float | None = None
    contact: Array | None = None
    external_pose: ExternalPose | None = None


@dataclass
class Estimate:
    """An estimator's output for one tick (one object, updated in place each tick: copy what you keep).

    q : (nq,) Pinocchio configuration: base position (world, m), base orientation (x, y, z, w, world ← base),
        joints.  v : (nv,) base linear and angular velocity (base frame, m/s, rad/s), joint velocities.
    covariance : (n, n) the filter's error covariance (its layout: the filter's ``covariance_layout``).
    stance : (k,) bool, the contact spheres used as stance feet this tick.
    healthy : the estimate is trustworthy; when False, ``reason`` says why and a controller must not use it.
    status : the filter's status code (``idcontrol.estimation.inekf.OK`` ...).
    tilt_std, velocity_std : rad, m/s: the largest roll/pitch and velocity standard deviations of the covariance
        (numpy scalars).
    """

    q: Array
    v: Array
    covariance: Array
    stance: NDArray[np.bool_]
    healthy: bool = False
    reason: str = "not started"
    status: int = -1
    tilt_std: float = math.nan
    velocity_std: float = math.nan


@dataclass(frozen=True)
class NoiseModel:
    """The filters' noise model: white-noise densities (continuous time) and standard deviations, SI units.

    gyro_noise : rad/s/√Hz.  accel_noise : m/s²/√Hz.  gyro_bias_walk : rad/s²/√Hz.  accel_bias_walk : m/s³/√Hz.
    foot_slip : m/s/√Hz, how fast a stance foot may wander.  encoder_noise : rad.  kinematics_noise : m, the
    leg model's error at the foot (link lengths, a rolling sphere, soft ground).  imu_tilt_noise : rad, the
    IMU's own roll and pitch error (0: not used).  imu_yaw_noise : rad, its yaw (large: a drifting yaw).
    Linear filter only: foot_velocity_noise m/s, position_noise m/√s, foot_height_noise m (0: no flat-ground
    measurement), swing_variance (the factor on a swing foot's variances).
    initial_* : the standard deviations the filter starts with.
    """

    gyro_noise: float = 2e-3
    accel_noise: float = 5e-2
    gyro_bias_walk: float = 1e-4
    accel_bias_walk: float = 1e-3
    foot_slip: float = 2e-3
    encoder_noise: float = 2e-3
    kinematics_noise: float = 2e-3
    imu_tilt_noise: float = 0.01
    imu_yaw_noise: float = 10.0
    foot_velocity_noise: float = 0.1
    position_noise: float = 1e-3
    foot_height_noise: float = 0.0
    swing_variance: float = 1e4
    initial_tilt_std: float = 0.02
    initial_yaw_std: float = 1e-3
    initial_velocity_std: float = 0.05
    initial_position_std: float = 1e-3
    initial_gyro_bias_std: float = 0.01
    initial_accel_bias_std: float = 0.05


@dataclass(frozen=True)
class HealthBounds:
    """When an estimate stops being trustworthy.

    max_tilt_std : rad, the largest roll or pitch standard deviation (2°: the controller's tilt margin).
    max_velocity_std : m/s, the largest velocity standard deviation.
    max_imu_age : s, how old an IMU sample may be.  max_repeats : ticks an IMU may repeat the exact same
    reading (a frozen sensor) while time advances before it is stale.
    max_start_joint_speed : rad/s (m/s), the fastest a joint may move when the filter starts; max_start_gyro : rad/s,
    the largest angular velocity the gyro may read then. The filter starts with the base at rest (its velocity 0
    within ``initial_velocity_std``), so it does not start on a robot moving faster
    (:meth:`~idcontrol.estimation.estimator.BaseEstimator.moving`): the control core sends damping until the robot is
    still, then starts it (docs/estimation.md).
    """

    max_tilt_std: float = math.radians(2.0)
    max_velocity_std: float = 0.1
    max_imu_age: float = 0.005
    max_repeats: int = 5
    max_start_joint_speed: float = 0.5
    max_start_gyro: float = 0.2


@dataclass(frozen=True)
class EstimatorSettings:
    """filter : ``"inekf"`` (the contact-aided invariant EKF, default) or ``"lkf"`` (Cheetah 3's linear filter).
    contact_threshold : a sphere stands when its contact probability is at least this.  gravity : m/s²."""

    filter: str = "inekf"
    noise: NoiseModel = field(default_factory=NoiseModel)
    bounds: HealthBounds = field(default_factory=HealthBounds)
    contact_threshold: float = 0.5
    gravity: float = 9.81

    def __post_init__(self) -> None:
        for record in (self.noise, self.bounds):
            for f in fields(record):
                value = getattr(record, f.name)
                if not (isinstance(value, (int, float)) and value >= 0.0):
                    raise ConfigError(f"estimator {f.name} must be a number >= 0, got {value!r}")
        if not 0.0 < self.contact_threshold <= 1.0:
            raise ConfigError(f"estimator contact_threshold must be in (0, 1], got {self.contact_threshold!r}")
        if not self.gravity > 0.0:
            raise ConfigError(f"estimator gravity must be > 0 m/s², got {self.gravity!r}")
