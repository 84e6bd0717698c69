"""Which Unitree motor drives which joint of a robot file.

Unitree numbers the motors of its low-level messages itself:

* ``go`` quadrupeds (Go2, B2, Go1, A1): legs FR, FL, RR, RL, each hip (abduction), thigh, calf: motor
  ``3 * leg + part``; foot forces in the same leg order; 12 of the message's 20 motor slots;
* ``hg`` humanoids (G1, 29 motors): left leg (hip pitch, roll, yaw, knee, ankle pitch, roll), right leg, waist
  (yaw, roll, pitch), left arm (shoulder pitch, roll, yaw, elbow, wrist roll, pitch, yaw), right arm; 35 slots.

A robot file's joints are matched by name (the published URDFs' ``FL_hip_joint`` ..., ``left_hip_pitch_joint``
...); a robot file whose joints cannot all be matched is refused, with the names it has and the names expected.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

import numpy as np
from numpy.typing import NDArray

from idcontrol.errors import ConfigError

GO_LEGS = ("FR", "FL", "RR", "RL")
GO_PARTS = ("hip", "thigh", "calf")
GO_SLOTS, HG_SLOTS = 20, 35
_HG_SIDE = ("hip_pitch", "hip_roll", "hip_yaw", "knee", "ankle_pitch", "ankle_roll")
_HG_ARM = ("shoulder_pitch", "shoulder_roll", "shoulder_yaw", "elbow", "wrist_roll", "wrist_pitch", "wrist_yaw")
#: G1 (29 motors): the joint each motor index drives, without the URDF's ``_joint`` suffix
HG_MOTORS = (
    tuple(f"left_{j}" for j in _HG_SIDE)
    + tuple(f"right_{j}" for j in _HG_SIDE)
    + ("waist_yaw", "waist_roll", "waist_pitch")
    + tuple(f"left_{j}" for j in _HG_ARM)
    + tuple(f"right_{j}" for j in _HG_ARM)
)


@dataclass(frozen=True)
class MotorMap:
    """The robot file's actuated joints (``tau`` order) against the message's motor slots.

    motor : (nu,) the motor slot of each actuated joint.  feet : (k,) for each contact sphere, its foot's index in
    ``foot_force`` (-1: none), or None when the message family has no foot forces.
    """

    family: str
    joints: tuple[str, ...]
    motor: NDArray[np.intp]
    feet: NDArray[np.intp] | None
    slots: int

    @classmethod
    def of(cls, family: str, joints: tuple[str, ...], spheres: tuple[str, ...]) -> MotorMap:
        if family == "go":
            return cls._go(joints, spheres)
        if family == "hg":
            return cls._hg(joints)
        raise ConfigError(f"message family must be 'go' or 'hg', got {family!r}")

    @classmethod
    def _go(cls, joints: tuple[str, ...], spheres: tuple[str, ...]) -> MotorMap:
        pattern = re.compile(r"^(FR|FL|RR|RL)_(hip|thigh|calf)(_joint)?$")
        motor = []
        for name in joints:
            m = pattern.match(name)
            if m is None:
                expected = [f"{leg}_{part}_joint" for leg in GO_LEGS for part in GO_PARTS]
                raise ConfigError(
                    f"joint {name!r} is not a Unitree quadruped's motor; the robot file's actuated "
                    f"joints {list(joints)} must be {expected} in some order"
                )
            motor.append(3 * GO_LEGS.index(m.group(1)) + GO_PARTS.index(m.group(2)))
        if sorted(motor) != list(range(12)):
            raise ConfigError(f"the actuated joints {list(joints)} do not drive each of the 12 motors once")
        feet = [next((GO_LEGS.index(leg) for leg in GO_LEGS if s.upper().startswith(leg)), -1) for s in spheres]
        return cls("go", joints, np.asarray(motor, dtype=np.intp), np.asarray(feet, dtype=np.intp), GO_SLOTS)

    @classmethod
    def _hg(cls, joints: tuple[str, ...]) -> MotorMap:
        motor = []
        for name in joints:
            base = name.removesuffix("_joint")
            if base not in HG_MOTORS:
                raise ConfigError(f"joint {name!r} is not one of the humanoid's motors {list(HG_MOTORS)}")
            motor.append(HG_MOTORS.index(base))
        return cls("hg", joints, np.asarray(motor, dtype=np.intp), None, HG_SLOTS)
