"""The control core's input: the robot's state as a bridge (a simulator or a robot driver) reports it."""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
from numpy.typing import NDArray

from idcontrol.contacts.world import ObjectState

Array = NDArray[np.float64]


@dataclass
class ImuReading:
    """What an IMU reports, in its own frame (the robot file's ``[sensors] imu_frame``).

    orientation_xyzw : (4,) world ← IMU, from the IMU's own filter (its yaw may drift).
    angular_velocity : (3,) rad/s, the gyro.  linear_acceleration : (3,) m/s², the accelerometer's specific force
    (+9.81 up at rest).  t : s, when it sampled (None: with the state).
    """

    orientation_xyzw: Array
    angular_velocity: Array
    linear_acceleration: Array
    t: float | None = None


@dataclass
class RobotState:
    """What a bridge reports each tick (the wire's ``state`` message, decoded once by the daemon).

    Attributes
    ----------
    q : (nq,) configuration (floating base: position, quaternion x y z w, joints).
    v : (nv,) generalized velocity (Pinocchio layout).
    t : bridge time, s.
    objects : poses and twists of movable bodies, by name.
    sensed_forces : (k, 3) measured contact force on each contact sphere, world frame, N (sensed_id only).
    contact_mask : (k,) bool per contact sphere: only these may touch this tick (a gait's planned
        stance feet, so that a swing foot still inside the detection margin gets no force); None: all.
    imu : the IMU's reading (the sensor form: a robot that measures no base pose). With an estimator (the launch
        file's ``[estimator]``) the core replaces the base part of ``q`` and ``v`` by its estimate; without one a
        state must carry the base pose and twist itself.
    """

    q: Array
    v: Array
    t: float = 0.0
    objects: dict[str, ObjectState] = field(default_factory=dict)
    sensed_forces: Array | None = None
    contact_mask: Array | None = None
    imu: ImuReading | None = None
