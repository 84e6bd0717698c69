"""Constant-pose references: :class:`HoldPose` and the externally fed :class:`StreamReference`."""

from __future__ import annotations

from collections.abc import Mapping

import numpy as np

from idcontrol.errors import ConfigError, NameNotFound
from idcontrol.reference.base import Array, JointTarget, Reference
from idcontrol.robot.model import RobotModel
from idcontrol.validation import check_vector


def _frozen(x: Array) -> Array:
    x = np.array(x, dtype=float)
    x.setflags(write=False)
    return x


def standing_joint_positions(robot: RobotModel, pose: Mapping[str, float] | None = None) -> Array:
    """(nu,) the standing configuration's actuated joint positions, with ``pose`` overriding some (rad or m)."""
    q_ref = robot.joint_positions(robot.standing_configuration()).copy()
    for joint, value in (pose or {}).items():
        if joint not in robot.actuated_joints:
            raise NameNotFound("actuated joint", joint, robot.actuated_joints)
        try:
            q_ref[robot.actuated_joints.index(joint)] = float(value)
        except (TypeError, ValueError) as e:
            raise ConfigError(f"pose[{joint!r}] must be a number, got {value!r}") from e
    if not np.all(np.isfinite(q_ref)):
        raise ConfigError("pose values must be finite")
    return q_ref


class HoldPose(Reference):
    """Hold one joint configuration with zero velocity and acceleration.

    pose : joint name → position (rad or m) overriding the standing configuration's actuated joints.
    """

    name = "hold"

    def __init__(self, robot: RobotModel, *, pose: Mapping[str, float] | None = None) -> None:
        zero = _frozen(np.zeros(robot.nu))
        self.target = JointTarget(_frozen(standing_joint_positions(robot, pose)), zero, zero)

    def sample(self, t: float, q: Array, v: Array) -> JointTarget:
        return self.target


class StreamReference(Reference):
    """The newest target published by the user's planner (see docs/protocol.md, reference channel).

    Holds the standing posture until the first :meth:`set_target`.
    """

    name = "stream"
    accepts_targets = True

    def __init__(self, robot: RobotModel) -> None:
        self.nu = robot.nu
        self.joint_names = robot.actuated_joints
        self.q_min, self.q_max = robot.actuated_position_limits()
        zero = _frozen(np.zeros(robot.nu))
        self.target = JointTarget(_frozen(standing_joint_positions(robot)), zero, zero)

    def set_target(self, q_ref: Array, v_ref: Array, a_ref: Array) -> str:
        """Replace the target: each (nu,) rad, rad/s, rad/s². A position outside its joint's URDF limits is
        clipped to the limit, with the joint's velocity and acceleration set to 0 there; returns what was clipped
        ("" when nothing). Raises ShapeError / NonFiniteError."""
        q_ref = check_vector("q_ref", q_ref, self.nu).copy()
        v_ref = check_vector("v_ref", v_ref, self.nu).copy()
        a_ref = check_vector("a_ref", a_ref, self.nu).copy()
        outside = np.flatnonzero((q_ref < self.q_min) | (q_ref > self.q_max))
        clipped = ""
        if outside.size:
            j = int(outside[0])
            clipped = f"{self.joint_names[j]} {q_ref[j]:.4g} outside [{self.q_min[j]:.4g}, {self.q_max[j]:.4g}]" + (
                f" and {outside.size - 1} more" if outside.size > 1 else ""
            )
            np.clip(q_ref, self.q_min, self.q_max, out=q_ref)
            v_ref[outside] = 0.0
            a_ref[outside] = 0.0
        self.target = JointTarget(_frozen(q_ref), _frozen(v_ref), _frozen(a_ref))
        return clipped

    def sample(self, t: float, q: Array, v: Array) -> JointTarget:
        return self.target
