"""libfranka's errors as the daemon's stop reasons (docs/franka.md, "When it stops").

libfranka ends a torque-control session with an exception (``ControlException``: the arm's controller aborted the
motion, its flags in ``RobotState.last_motion_errors``; ``NetworkException``: the connection is gone). The driver
turns it into one :class:`FrankaStop`, whose :meth:`~FrankaStop.reason` is the reason of the daemon's stop and
the driver's log line.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass

#: category -> (libfranka's error flags (franka::Errors) in it, what to check first).
CATEGORIES: dict[str, tuple[tuple[str, ...], str]] = {
    "reflex": (
        ("joint_reflex", "cartesian_reflex"),
        "a contact or a torque error beyond the collision thresholds (set_collision_behavior): clear the arm's "
        "path, then automatic error recovery",
    ),
    "communication": (
        ("communication_constraints_violation",),
        "commands missed libfranka's 1 ms cycles (control_command_success_rate fell): a real-time kernel, a direct "
        "cable, nothing else on the control PC's cores",
    ),
    "limit": (
        (
            "joint_position_limits_violation",
            "cartesian_position_limits_violation",
            "self_collision_avoidance_violation",
            "joint_velocity_violation",
            "cartesian_velocity_violation",
            "force_control_safety_violation",
            "power_limit_violation",
            "tau_j_range_violation",
            "cartesian_velocity_profile_safety_violation",
        ),
        "the arm reached a joint, Cartesian, velocity, power or torque limit: move it back inside (guiding mode) "
        "and lower the reference or the gains",
    ),
    "torque_discontinuity": (
        ("controller_torque_discontinuity",),
        "the commanded torque jumped between cycles: a torque-rate limit in the launch file's [safety]",
    ),
    "instability": (("instability_detected",), "the arm's controller saw an instability: lower the gains"),
    "sensor": (
        ("base_acceleration_initialization_timeout", "base_acceleration_invalid_reading"),
        "the arm's base acceleration sensor: restart the arm",
    ),
    "motion": (
        (
            "cartesian_motion_generator_acceleration_discontinuity",
            "cartesian_motion_generator_elbow_limit_violation",
            "cartesian_motion_generator_elbow_sign_inconsistent",
            "cartesian_motion_generator_joint_acceleration_discontinuity",
            "cartesian_motion_generator_joint_position_limits_violation",
            "cartesian_motion_generator_joint_velocity_discontinuity",
            "cartesian_motion_generator_joint_velocity_limits_violation",
            "cartesian_motion_generator_start_elbow_invalid",
            "cartesian_motion_generator_velocity_discontinuity",
            "cartesian_motion_generator_velocity_limits_violation",
            "cartesian_position_motion_generator_invalid_frame",
            "cartesian_position_motion_generator_start_pose_invalid",
            "cartesian_spline_motion_generator_violation",
            "force_controller_desired_force_tolerance_violation",
            "joint_motion_generator_acceleration_discontinuity",
            "joint_motion_generator_position_limits_violation",
            "joint_motion_generator_velocity_discontinuity",
            "joint_motion_generator_velocity_limits_violation",
            "joint_move_in_wrong_direction",
            "joint_p2p_insufficient_torque_for_planning",
            "joint_position_motion_generator_start_pose_invalid",
            "joint_via_motion_generator_planning_joint_limit_violation",
            "max_goal_pose_deviation_violation",
            "max_path_pose_deviation_violation",
            "start_elbow_sign_inconsistent",
        ),
        "a motion generator's error (none runs in torque control): another program commands the arm?",
    ),
}
#: libfranka's exceptions without flags -> category, what to check first.
EXCEPTIONS: dict[str, tuple[str, str]] = {
    "NetworkException": ("network", "the connection to the arm's controller is gone: cable, IP, FCI enabled in Desk"),
    "RealtimeException": ("realtime", "no real-time scheduling: a PREEMPT_RT kernel, or --no-realtime on a test bench"),
    "InvalidOperationException": ("invalid_operation", "another client controls the arm, or it is not ready"),
    "CommandException": ("command", "the arm refused a command: its mode in Desk (FCI, brakes open)"),
}
#: every flag of franka::Errors -> its category
FLAG_CATEGORY: dict[str, str] = {flag: name for name, (flags, _) in CATEGORIES.items() for flag in flags}


@dataclass(frozen=True)
class FrankaStop:
    """Why libfranka ended the session.

    category : ``reflex``, ``communication``, ``limit``, ``torque_discontinuity``, ``instability``, ``sensor``,
        ``motion`` (from the error flags), ``network``, ``realtime``, ``invalid_operation``, ``command`` (from the
        exception's type), or ``robot_error`` (a ControlException without a known flag).
    flags : libfranka's error flags that were set (franka::Errors names).
    detail : libfranka's message.
    """

    category: str
    flags: tuple[str, ...]
    detail: str

    @classmethod
    def of(cls, exception_type: str, flags: Iterable[str], detail: str) -> FrankaStop:
        """The stop for a libfranka exception (its type's name) and the error flags set when it was raised."""
        flags = tuple(flags)
        # the first category in CATEGORIES' order decides: a reflex before the limit it may have caused
        categories = [name for name in CATEGORIES if any(FLAG_CATEGORY.get(f) == name for f in flags)]
        if categories:
            return cls(categories[0], flags, detail)
        if exception_type in EXCEPTIONS:
            return cls(EXCEPTIONS[exception_type][0], flags, detail)
        return cls("robot_error", flags, detail)

    @property
    def hint(self) -> str:
        """What to check first."""
        if self.category in CATEGORIES:
            return CATEGORIES[self.category][1]
        for category, hint in EXCEPTIONS.values():
            if category == self.category:
                return hint
        return "read the arm's log in Desk"

    def reason(self) -> str:
        """The daemon's stop reason: ``franka <category>: <flags or message>; <what to check first>``."""
        what = ", ".join(self.flags) if self.flags else self.detail.strip().splitlines()[0][:200] or "no message"
        return f"franka {self.category}: {what}; {self.hint}"


def flags_in(message: str) -> tuple[str, ...]:
    """The error flags a libfranka message names (it lists them, e.g. ``["joint_reflex"]``), in
    :data:`FLAG_CATEGORY`'s order. (pylibfranka's RobotState does not bind ``last_motion_errors``.)"""
    words = set(re.findall(r"[a-z0-9_]+", message))
    return tuple(flag for flag in FLAG_CATEGORY if flag in words)
