"""The arm task's reference (paper Section 7.2): a sinusoid about the grasp posture, fingers squeezing."""

from __future__ import annotations

import math
from collections.abc import Mapping

import numpy as np

from idcontrol.errors import ConfigError, NameNotFound
from idcontrol.reference.base import Array, JointTarget, Reference
from idcontrol.reference.hold import standing_joint_positions
from idcontrol.robot.model import RobotModel

#: Default amplitudes, rad: a twist of the hand about its (vertical) axis, which leaves the box centre in
#: place, and two small wrist swings that move the box centre by about 1 cm.
DEFAULT_AMPLITUDES = {"arm_j5": 0.05, "arm_j6": 0.05, "arm_j7": 0.1}


class ArmSinusoid(Reference):
    """q_ref(t) = q_grasp + e(t) A sin(2π f t) on the arm joints; fingers held closed past the box surface.

    amplitudes : joint name → amplitude A (rad); joints not named stay at the grasp posture.
    frequency : f, Hz (the paper: about three oscillations per second).
    squeeze : how far (m) each finger's position reference lies past its standing (just touching)
        opening, so a finger that lost contact closes further; its velocity and acceleration are zero.
    ramp_time : the envelope e(t) rises from 0 to 1 over this long (quintic), s; 0 starts at full amplitude.
    fingers : the prismatic finger joints.

    Time starts at the first :meth:`sample` after :meth:`reset`.
    """

    name = "arm_sinusoid"

    def __init__(
        self,
        robot: RobotModel,
        *,
        amplitudes: Mapping[str, float] | None = None,
        frequency: float = 3.0,
        squeeze: float = 0.002,
        ramp_time: float = 0.5,
        fingers: tuple[str, ...] = ("finger_1", "finger_2", "finger_3", "finger_4"),
    ) -> None:
        self.nu = robot.nu
        self.frequency = float(frequency)
        self.ramp_time = float(ramp_time)
        self.squeeze = float(squeeze)
        if not (self.frequency > 0 and math.isfinite(self.frequency)) or self.ramp_time < 0 or self.squeeze < 0:
            raise ConfigError("arm_sinusoid: frequency must be > 0, ramp_time and squeeze >= 0")
        amplitudes = DEFAULT_AMPLITUDES if amplitudes is None else amplitudes
        self.amplitude = np.zeros(robot.nu)  # (nu,) rad
        for joint, value in amplitudes.items():
            if joint not in robot.actuated_joints:
                raise NameNotFound("actuated joint", joint, robot.actuated_joints)
            self.amplitude[robot.actuated_joints.index(joint)] = float(value)
        self.q_center = standing_joint_positions(robot)  # (nu,) the grasp posture
        for finger in fingers:
            if finger not in robot.actuated_joints:
                raise NameNotFound("actuated joint", finger, robot.actuated_joints)
            if self.amplitude[robot.actuated_joints.index(finger)] != 0.0:
                raise ConfigError(f"arm_sinusoid: finger {finger!r} cannot oscillate (its v_ref and a_ref are zero)")
            self.q_center[robot.actuated_joints.index(finger)] += self.squeeze
        self.reset()

    def reset(self) -> None:
        self._t0: float | None = None

    def sample(self, t: float, q: Array, v: Array) -> JointTarget:
        if self._t0 is None:
            self._t0 = t
        s = t - self._t0
        w = 2.0 * math.pi * self.frequency
        sin, cos = math.sin(w * s), math.cos(w * s)
        if s >= self.ramp_time:
            e, ed, edd = 1.0, 0.0, 0.0
        else:  # quintic rise: e = 10x³ − 15x⁴ + 6x⁵, x = s / ramp_time
            x, r = s / self.ramp_time, 1.0 / self.ramp_time
            e = x * x * x * (10.0 + x * (6.0 * x - 15.0))
            ed = 30.0 * x * x * (1.0 - x) * (1.0 - x) * r
            edd = 60.0 * x * (1.0 - x) * (1.0 - 2.0 * x) * r * r
        target = np.empty((3, self.nu))
        np.multiply(self.amplitude, e * sin, out=target[0])
        target[0] += self.q_center
        np.multiply(self.amplitude, ed * sin + e * w * cos, out=target[1])
        np.multiply(self.amplitude, edd * sin + 2.0 * ed * w * cos - e * w * w * sin, out=target[2])
        return JointTarget(target[0], target[1], target[2])
