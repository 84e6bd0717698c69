"""A joint sinusoid for any robot: chosen joints swing about the standing posture, the others hold it."""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence

import numpy as np

from idcontrol.errors import ConfigError, NameNotFound
from idcontrol.reference.base import Array, JointTarget, Reference, ramped_sine
from idcontrol.reference.hold import standing_joint_positions
from idcontrol.robot.model import RobotModel


class JointSinusoid(Reference):
    """q_ref(t) = q₀ + e(t) A sin(2π f t) on the chosen joints (q₀ the standing posture, e(t) a quintic start-up
    envelope); every other joint holds q₀.

    joints : the joints that swing (default: the actuated joints that are neither fingers nor on a leg).
    amplitude : A of every chosen joint, rad (m for a prismatic joint); reduced, per joint, to keep q₀ ± A at
        least ``limit_margin`` inside the joint's position limits, and its peak speed 2π f A within the URDF's
        velocity limit (:attr:`reduced` lists those joints). A joint driven past its rated speed meets what the
        URDF does not model: PR2's torso lift, rated 0.013 m/s, swung 0.1 m at 1 Hz (0.63 m/s) needed its whole
        10 kN against its 20 kN·s/m damping and shook the arms by 0.07 rad.
    amplitudes : joint name → A, over ``amplitude`` (implies ``joints`` when that is not given).
    frequency : f, Hz.  ramp_time : s.  limit_margin : rad (m).
    """

    name = "joint_sinusoid"

    def __init__(
        self,
        robot: RobotModel,
        *,
        joints: Sequence[str] | None = None,
        amplitude: float = 0.1,
        amplitudes: Mapping[str, float] | None = None,
        frequency: float = 1.0,
        ramp_time: float = 0.5,
        limit_margin: float = 0.05,
    ) -> None:
        self.frequency, self.ramp_time = float(frequency), float(ramp_time)
        if not (self.frequency > 0 and math.isfinite(self.frequency)) or self.ramp_time < 0:
            raise ConfigError("joint_sinusoid: frequency must be > 0 and ramp_time >= 0")
        on_legs = {j for leg in robot.legs for j in leg.joints}
        if joints is None:
            joints = (
                list(amplitudes)
                if amplitudes
                else [j for j in robot.actuated_joints if j not in robot.fingers and j not in on_legs]
            )
        if not joints:
            raise ConfigError(
                f"joint_sinusoid: every actuated joint of {robot.name!r} is on a leg or a finger; name "
                "the joints to swing (option joints)"
            )
        self.q_center = standing_joint_positions(robot)  # (nu,)
        self.amplitude = np.zeros(robot.nu)  # (nu,)
        self.reduced: list[str] = []
        notes: list[str] = []
        model = robot.model
        for name in joints:
            if name not in robot.actuated_joints:
                raise NameNotFound("actuated joint", name, robot.actuated_joints)
            a = float((amplitudes or {}).get(name, amplitude))
            if not math.isfinite(a) or a < 0:
                raise ConfigError(f"joint_sinusoid: the amplitude of {name!r} must be finite and >= 0, got {a}")
            slot = robot.actuated_joints.index(name)
            joint = model.joints[model.getJointId(name)]
            k = joint.idx_q
            room = min(
                self.q_center[slot] - model.lowerPositionLimit[k], model.upperPositionLimit[k] - self.q_center[slot]
            ) - float(limit_margin)
            why = "to stay inside its position limits"
            speed = float(model.velocityLimit[joint.idx_v])
            swing = speed / (2.0 * math.pi * self.frequency)  # the amplitude whose peak speed is the limit
            if speed > 0.0 and math.isfinite(speed) and swing < room:
                room, why = swing, f"to keep within its URDF velocity limit {speed:g}"
            if a > room:
                self.reduced.append(name)
                notes.append(f"joint_sinusoid: {name}'s amplitude {a:g} reduced to {max(room, 0.0):g} {why}")
                a = max(room, 0.0)
            self.amplitude[slot] = a
        self.joints = tuple(joints)
        self.notes = tuple(notes)
        self.reset()

    def reset(self) -> None:
        self._t0: float | None = None

    def sample(self, t: float, q: Array, v: Array) -> JointTarget:
        if self._t0 is None:
            self._t0 = t
        y, yd, ydd = ramped_sine(t - self._t0, self.frequency, self.ramp_time)
        a = self.amplitude
        return JointTarget(self.q_center + a * y, a * yd, a * ydd)
