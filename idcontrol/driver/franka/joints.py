"""Which of a robot file's joints are the arm's seven, in libfranka's order (joint 1 at the base to joint 7)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np
from numpy.typing import NDArray

from idcontrol.errors import ConfigError

#: libfranka's arm: seven revolute joints; the hand's fingers are the Gripper's, not the torque loop's.
ARM_DOF = 7


@dataclass(frozen=True)
class ArmJoints:
    """The arm's joints in a robot file (a Panda or FR3 URDF, with or without the hand).

    names : (7,) joint names, base to flange: libfranka's q[0..6].
    idx_q, idx_v : (7,) their indices into the protocol's q and v.
    idx_tau : (7,) their indices into the daemon's tau (``welcome.joint_names`` order).
    other_idx_q, other_idx_tau : the robot file's other actuated joints (the fingers): reported at their standing
        posture and at rest, their torque dropped (libfranka's Gripper drives them, not the torque loop).
    """

    names: tuple[str, ...]
    idx_q: NDArray[np.intp]
    idx_v: NDArray[np.intp]
    idx_tau: NDArray[np.intp]
    other_idx_q: NDArray[np.intp]
    other_idx_tau: NDArray[np.intp]

    @classmethod
    def of(cls, robot: Any) -> ArmJoints:
        """The arm of a :class:`~idcontrol.robot.model.RobotModel`: its actuated joints but the fingers, which must
        be seven one-DoF joints on a fixed base. ConfigError otherwise."""
        if robot.floating_base:
            raise ConfigError(f"{robot.name}: a Franka arm has a fixed base; the robot file says floating")
        fingers = set(robot.config.fingers)
        arm = [(i, n) for i, n in enumerate(robot.actuated_joints) if n not in fingers]
        if len(arm) != ARM_DOF:
            raise ConfigError(
                f"{robot.name}: a Franka arm has {ARM_DOF} joints besides its fingers; the robot file "
                f"actuates {len(arm)}: {[n for _, n in arm]} (list the hand's joints in `fingers`)"
            )
        model = robot.model
        joints = [model.joints[model.getJointId(n)] for _, n in arm]
        if any(j.nq != 1 or j.nv != 1 for j in joints):
            raise ConfigError(f"{robot.name}: the arm's joints must be one-DoF joints")
        other = [i for i, n in enumerate(robot.actuated_joints) if n in fingers]
        return cls(
            names=tuple(n for _, n in arm),
            idx_q=np.asarray([j.idx_q for j in joints], dtype=np.intp),
            idx_v=np.asarray([j.idx_v for j in joints], dtype=np.intp),
            idx_tau=np.asarray([i for i, _ in arm], dtype=np.intp),
            other_idx_q=np.asarray(robot.actuated_idx_q[other], dtype=np.intp),
            other_idx_tau=np.asarray(other, dtype=np.intp),
        )
