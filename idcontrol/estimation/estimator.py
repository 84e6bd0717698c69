"""The floating-base estimator: a :class:`SensorReading` in, an :class:`Estimate` (the Pinocchio q, v, the
covariance and a health verdict) out, one tick at a time. Pure and synchronous; the filters are compiled.

    estimator = BaseEstimator(robot)                    # EstimatorSettings() by default: the invariant EKF
    estimator.reset(first_reading)                      # at rest; base over the origin, lowest foot on z = 0
    estimate = estimator.update(reading)                # every tick, before the controller
    if not estimate.healthy: stop safely (estimate.reason says why)
"""

from __future__ import annotations

import math

import numpy as np

from idcontrol.arrays import unchecked_entry
from idcontrol.errors import InputError, ShapeError, UnknownName
from idcontrol.estimation import inekf, lkf
from idcontrol.estimation.inekf import FilterParameters
from idcontrol.estimation.kinematics import LegKinematics, pack_geometry
from idcontrol.estimation.lie import rotation_from_xyzw, xyzw_from_rotation
from idcontrol.estimation.types import Array, Estimate, EstimatorSettings, ExternalPose, SensorReading
from idcontrol.robot.model import RobotModel

#: The filters, by name.
FILTERS = ("inekf", "lkf")

STATUS_TEXT = {
    inekf.OK: "trustworthy",
    inekf.DIVERGED: "the filter diverged (a non-finite state or a covariance that lost its positive definiteness); "
    "reset it",
    inekf.IMU_NOT_FINITE: "the IMU reading is not finite; the state was not propagated",
    inekf.JOINTS_NOT_FINITE: "the joint encoders are not finite; no leg kinematics were used",
    inekf.IMU_STALE: "the IMU is stale",
    inekf.TILT_UNCERTAIN: "the tilt's standard deviation is beyond its bound",
    inekf.VELOCITY_UNCERTAIN: "the velocity's standard deviation is beyond its bound",
}


def filter_parameters(settings: EstimatorSettings) -> FilterParameters:
    """The numbers the compiled filters read, from the settings."""
    n, b = settings.noise, settings.bounds
    return FilterParameters(
        gyro_noise=n.gyro_noise,
        accel_noise=n.accel_noise,
        gyro_bias_walk=n.gyro_bias_walk,
        accel_bias_walk=n.accel_bias_walk,
        foot_slip=n.foot_slip,
        encoder_noise=n.encoder_noise,
        kinematics_noise=n.kinematics_noise,
        imu_tilt_noise=n.imu_tilt_noise,
        imu_yaw_noise=n.imu_yaw_noise,
        contact_threshold=float(settings.contact_threshold),
        gravity=float(settings.gravity),
        max_tilt_std=b.max_tilt_std,
        max_velocity_std=b.max_velocity_std,
        max_imu_age=b.max_imu_age,
        max_repeats=float(b.max_repeats),
        swing_variance=n.swing_variance,
        foot_velocity_noise=n.foot_velocity_noise,
        position_noise=n.position_noise,
        foot_height_noise=n.foot_height_noise,
    )


class BaseEstimator:
    """Estimates a legged robot's floating base from its IMU and joint encoders (see the module docstring).

    ``covariance_layout`` names the slices of :attr:`Estimate.covariance`: for the invariant EKF the right-
    invariant error of the IMU's (rotation, velocity, position, stance feet 1..k, gyro bias, accelerometer bias),
    world coordinates; for the linear filter the IMU's (position, velocity, feet 1..k).
    """

    def __init__(self, robot: RobotModel, settings: EstimatorSettings | None = None) -> None:
        self.robot = robot
        self.settings = settings or EstimatorSettings()
        if self.settings.filter not in FILTERS:
            raise UnknownName(f"unknown estimator filter {self.settings.filter!r}; available: {', '.join(FILTERS)}")
        self.kinematics = LegKinematics(robot)
        g = self.kinematics.geometry
        self.k = k = len(g.foot_joint)
        self.nj = nj = len(g.parent)
        self.parameters = filter_parameters(self.settings)
        geometry_floats, geometry_ints = pack_geometry(g)
        self.radii = robot.sphere_radii.copy()
        self._invariant = self.settings.filter == "inekf"
        if self._invariant:
            state_length = inekf.state_length(k)
            work_length, work_ints = inekf.work_lengths(k)
            self._entry = unchecked_entry(inekf.inekf_arena)  # its two arrays are made here, their types known
            self.covariance_layout = {
                "rotation": slice(0, 3),
                "velocity": slice(3, 6),
                "position": slice(6, 9),
                **{f"foot:{name}": slice(9 + 3 * i, 12 + 3 * i) for i, name in enumerate(robot.sphere_names)},
                "gyro_bias": slice(9 + 3 * k, 12 + 3 * k),
                "accel_bias": slice(12 + 3 * k, 15 + 3 * k),
            }
        else:
            state_length, work_length, work_ints = lkf.lkf_state_length(k), lkf.lkf_work_length(k), 1
            self._entry = unchecked_entry(lkf.lkf_arena)
            self.covariance_layout = {
                "position": slice(0, 3),
                "velocity": slice(3, 6),
                **{f"foot:{name}": slice(6 + 3 * i, 9 + 3 * i) for i, name in enumerate(robot.sphere_names)},
            }
        # one float and one integer array hold everything the compiled tick reads and writes (inekf.ARENA_HEADER)
        sizes = [
            len(self.parameters),
            len(geometry_floats),
            state_length,
            work_length,
            inekf.kinematics_length(nj, k),
            inekf.sensor_length(k) + 2 * nj,
            robot.nq + robot.nv + 5,
        ]
        offsets = np.concatenate([[0], np.cumsum(sizes)])
        int_offsets = inekf.ARENA_HEADER + np.concatenate([[0], np.cumsum([len(geometry_ints), work_ints])])
        self._floats = np.zeros(int(offsets[-1]))
        self._ints = np.concatenate([offsets, int_offsets, geometry_ints, np.zeros(work_ints)]).astype(np.intp)
        parts = [self._floats[a:b] for a, b in zip(offsets[:-1], offsets[1:], strict=True)]
        self._params, geometry, self._state, self._work, self._kinematics, self._sensor, self._out = parts
        self._params[:] = self.parameters
        geometry[:] = geometry_floats
        self.state = inekf.state_views(self._state, k) if self._invariant else lkf.lkf_state_views(self._state, k)
        n = inekf.sensor_length(k)
        self._joint_q, self._joint_v = self._sensor[n : n + nj], self._sensor[n + nj : n + 2 * nj]
        self._diagnostics = self._out[robot.nq + robot.nv :]
        self.estimate = Estimate(
            q=self._out[: robot.nq],
            v=self._out[robot.nq : robot.nq + robot.nv],
            covariance=self.state.covariance,
            stance=np.zeros(k, dtype=bool),
        )
        self._rotation = np.zeros((3, 3))
        self._pose = np.zeros(4)
        self._t = math.nan
        self._shapes = ((nj,), (nj,), (4,), (3,), (3,))
        self._contact_shape = (k,)
        m = robot.model  # the joint of each entry of joint_v (joint 1 is the floating base)
        self._joint_v_names = [str(m.names[j]) for j in range(2, m.njoints) for _ in range(m.joints[j].nv)]

    def warm_up(self, ticks: int = 20) -> None:
        """Run the whole per-tick path ahead and forget it: :meth:`reset`, then ``ticks`` updates (the standing
        posture, a level IMU at rest, time advancing by 1 ms, every contact sphere standing, then one lifting), and
        :meth:`moving`. In a fresh process the first reset costs tens of milliseconds (the compiled kernels load from
        numba's cache, numpy's first calls): paid here, before the first real reading. The estimator is left as
        built: it must be reset before it is updated."""
        g, k, nj = self.kinematics.geometry, self.k, self.nj
        joint_q, joint_v = self.robot.standing_configuration()[7:].copy(), np.zeros(nj)
        orientation = np.zeros(4)
        xyzw_from_rotation(g.imu_rotation, orientation, 0)  # the base level: R_WI = R_BI
        accel = g.imu_rotation.T @ np.array([0.0, 0.0, self.settings.gravity])  # specific force at rest, IMU frame
        self.moving(joint_v, np.zeros(3))
        self.reset(SensorReading(0.0, joint_q, joint_v, orientation, np.zeros(3), accel, 0.0))
        stance = np.ones(k)
        for i in range(1, ticks + 1):
            if i == ticks and k:
                stance[0] = 0.0  # a foot lifts: the contacts' bookkeeping too
            t = i * 1e-3
            gyro = np.array([1e-4 * (i % 2), 0.0, 0.0])  # not a frozen sensor
            self.update(SensorReading(t, joint_q, joint_v, orientation, gyro, accel, t, stance))
        self._t = math.nan
        est = self.estimate
        est.healthy, est.reason, est.status = False, "not started", -1
        est.stance[:] = False

    # ------------------------------------------------------------------ set-up
    def reset(self, reading: SensorReading, base_position: Array | None = None) -> Estimate:
        """Start from ``reading``, at rest: the IMU's orientation, the base origin at ``base_position`` (world, m;
        default: over the world origin with the lowest contact sphere on z = 0)."""
        self._check(reading)
        n = self.settings.noise
        quat = np.asarray(reading.imu_orientation_xyzw, dtype=float)
        if not np.all(np.isfinite(quat)) or abs(np.linalg.norm(quat) - 1.0) > 1e-3:
            raise InputError(f"the IMU orientation must be a finite unit quaternion to start from, got {quat}")
        self.kinematics.update(np.asarray(reading.joint_q, dtype=float))
        if not np.all(np.isfinite(self.kinematics.feet)):
            raise InputError("the joint encoders must be finite to start from")
        rotation = np.zeros((3, 3))
        rotation_from_xyzw(*quat.tolist(), rotation)
        g = self.kinematics.geometry
        rotation_base = rotation @ g.imu_rotation.T
        if base_position is None:
            feet_world = self.kinematics.feet @ rotation.T  # relative to the IMU
            imu_height = float(np.max(self.radii - feet_world[:, 2])) if self.k else 0.0
            imu_position = np.array([0.0, 0.0, imu_height])
            imu_position[:2] = (rotation_base @ g.imu_translation)[:2]
        else:
            imu_position = np.asarray(base_position, dtype=float) + rotation_base @ g.imu_translation
        s = self.state
        s.memory[:] = 0.0
        s.covariance[:] = 0.0
        if self.settings.filter == "inekf":
            s.rotation[:] = rotation
            s.velocity[:] = 0.0
            s.position[:] = imu_position
            s.bias[:] = 0.0
            s.in_state[:] = 0
            s.feet[:] = 0.0
            P = s.covariance
            P[0, 0] = P[1, 1] = n.initial_tilt_std**2
            P[2, 2] = n.initial_yaw_std**2
            for i in range(3):
                P[3 + i, 3 + i] = n.initial_velocity_std**2
                P[6 + i, 6 + i] = n.initial_position_std**2
                P[9 + 3 * self.k + i, 9 + 3 * self.k + i] = n.initial_gyro_bias_std**2
                P[12 + 3 * self.k + i, 12 + 3 * self.k + i] = n.initial_accel_bias_std**2
        else:
            s.x[:] = 0.0
            s.x[0:3] = imu_position
            s.x[6:] = (imu_position + self.kinematics.feet @ rotation.T - np.outer(self.radii, [0.0, 0.0, 1.0])).ravel()
            s.rotation[:] = rotation
            P = s.covariance
            for i in range(3):
                P[i, i] = n.initial_position_std**2
                P[3 + i, 3 + i] = n.initial_velocity_std**2
            for i in range(6, P.shape[0]):
                P[i, i] = n.kinematics_noise**2
        self._t = float(reading.t)
        return self.update(reading)

    def moving(self, joint_v: Array, angular_velocity: Array) -> str:
        """Why the robot moves too fast for the filter to start from it, with the numbers, or '' when it may start:
        every joint speed within the bounds' ``max_start_joint_speed`` and the gyro's within ``max_start_gyro``.

        joint_v : (nj,) rad/s (m/s), the encoders' velocities.  angular_velocity : (3,) rad/s, the gyro, IMU frame.
        :meth:`reset` starts the base at rest (velocity 0 within ``initial_velocity_std``, 0.05 m/s by default): a
        robot still moving, after a safe stop that timed out for instance, would start with a velocity error the filter
        does not know of, and the controller would act on it. A non-finite value is reported as moving too.
        """
        b = self.settings.bounds
        speeds = np.abs(np.asarray(joint_v, dtype=float))
        parts = []
        if speeds.size:
            j = int(np.argmax(speeds))  # the first NaN, if any
            if not speeds[j] <= b.max_start_joint_speed:
                parts.append(
                    f"joint {self._joint_v_names[j]!r} at {speeds[j]:.2f} rad/s (bound {b.max_start_joint_speed:g})"
                )
        gyro = float(np.linalg.norm(np.asarray(angular_velocity, dtype=float)))
        if not gyro <= b.max_start_gyro:
            parts.append(f"the gyro at {gyro:.2f} rad/s (bound {b.max_start_gyro:g})")
        return "the robot is moving: " + ", ".join(parts) if parts else ""

    # ------------------------------------------------------------------ per tick
    def _check(self, reading: SensorReading) -> None:
        for name, value, n in (
            ("joint_q", reading.joint_q, self.nj),
            ("joint_v", reading.joint_v, self.nj),
            ("imu_orientation_xyzw", reading.imu_orientation_xyzw, 4),
            ("imu_angular_velocity", reading.imu_angular_velocity, 3),
            ("imu_linear_acceleration", reading.imu_linear_acceleration, 3),
        ):
            if np.shape(value) != (n,):
                raise ShapeError(name, (n,), np.shape(value))
        if reading.contact is not None and np.shape(reading.contact) != (self.k,):
            raise ShapeError("contact", (self.k,), np.shape(reading.contact))

    def update(self, reading: SensorReading) -> Estimate:
        """One tick: propagate to ``reading.t``, correct, judge the estimate's health (see :class:`Estimate`).

        Raises ShapeError for arrays of the wrong size (nothing changes then). Non-finite or stale sensor values
        are not errors: the estimate says it is not trustworthy, and the filter keeps its state.
        """
        if math.isnan(self._t):
            raise InputError("the estimator must be reset with a first reading before it is updated")
        joint_q = np.asarray(reading.joint_q, dtype=float)
        joint_v = np.asarray(reading.joint_v, dtype=float)
        orientation = np.asarray(reading.imu_orientation_xyzw, dtype=float)
        gyro = np.asarray(reading.imu_angular_velocity, dtype=float)
        accel = np.asarray(reading.imu_linear_acceleration, dtype=float)
        contact = reading.contact
        if (joint_q.shape, joint_v.shape, orientation.shape, gyro.shape, accel.shape) != self._shapes or (
            contact is not None and np.shape(contact) != self._contact_shape
        ):
            self._check(reading)  # raises the ShapeError naming the field
        t = float(reading.t)
        dt = t - self._t
        if not dt >= 0.0:
            raise InputError(f"readings must come in time order: t = {reading.t} after {self._t}")
        self._t = t
        sensor, k = self._sensor, self.k
        sensor[0] = dt
        sensor[1] = 0.0 if reading.imu_t is None else t - float(reading.imu_t)
        sensor[2:6] = orientation
        sensor[6:9] = gyro
        sensor[9:12] = accel
        sensor[12 : 12 + k] = 0.0 if contact is None else contact
        sensor[19 + k] = sensor[20 + k] = 0.0
        if reading.external_pose is not None and self._invariant:
            self._external_imu_pose(reading.external_pose)
        self._joint_q[:] = joint_q
        self._joint_v[:] = joint_v
        status = self._entry(self._floats, self._ints)
        est = self.estimate
        if self._invariant:
            np.greater(self.state.in_state, 0.5, out=est.stance)
        else:
            np.greater_equal(sensor[12 : 12 + k], self.settings.contact_threshold, out=est.stance)
        est.status = status
        est.healthy = healthy = status == 0
        est.reason = "trustworthy" if healthy else self._reason(int(status))
        diagnostics = self._diagnostics
        est.tilt_std = diagnostics[0]
        est.velocity_std = diagnostics[1]
        return est

    def _external_imu_pose(self, pose: ExternalPose) -> None:
        """The external base pose as the IMU's pose, and its noise, into the sensor vector."""
        g, k, sensor = self.kinematics.geometry, self.k, self._sensor
        quat = np.asarray(pose.orientation_xyzw, dtype=float)
        rotation_from_xyzw(*(quat / np.linalg.norm(quat)).tolist(), self._rotation)
        sensor[12 + k : 15 + k] = np.asarray(pose.position, dtype=float) + self._rotation @ g.imu_translation
        xyzw_from_rotation(self._rotation @ g.imu_rotation, self._pose, 0)
        sensor[15 + k : 19 + k] = self._pose
        sensor[19 + k] = pose.position_std
        sensor[20 + k] = pose.orientation_std

    def _reason(self, status: int) -> str:
        """The words for an untrustworthy estimate, with the numbers that made it so."""
        d, b = self._diagnostics, self.settings.bounds
        text = STATUS_TEXT[status]
        if status == inekf.IMU_STALE:
            text += (
                f": sampled {d[inekf.DIAG_IMU_AGE] * 1e3:.1f} ms ago (bound {b.max_imu_age * 1e3:.1f} ms), "
                f"the same reading {int(d[inekf.DIAG_REPEATS]) + 1} ticks in a row as time advanced "
                f"(bound {b.max_repeats})"
            )
        elif status == inekf.TILT_UNCERTAIN:
            text += f": {math.degrees(d[inekf.DIAG_TILT_STD]):.2f}° > {math.degrees(b.max_tilt_std):.2f}°"
        elif status == inekf.VELOCITY_UNCERTAIN:
            text += (
                f": {d[inekf.DIAG_VELOCITY_STD]:.3f} m/s > {b.max_velocity_std:.3f} m/s "
                f"({int(d[inekf.DIAG_STANCE])} stance feet)"
            )
        return text
