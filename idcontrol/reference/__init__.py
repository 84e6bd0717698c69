"""Joint reference generators: what the robot should do, sampled every control tick.

``make_reference(name, robot, **options)`` builds one by name, each sized from the robot file: ``hold``
(:class:`HoldPose`: any robot stands), ``sway`` (:class:`BaseSway`: a legged robot's base sways over fixed
feet), ``trot`` (:class:`TrotGait`: any quadruped), ``joint_sinusoid`` (:class:`JointSinusoid`: any robot,
any joints), ``arm_sinusoid`` (:class:`ArmSinusoid`: an arm swings while its fingers grip),
``grasp_hold`` (:class:`GraspHold`: fingers grip, the arm holds) or ``stream``
(:class:`StreamReference`, fed by the user's planner). :func:`desired_acceleration` turns a sampled
:class:`JointTarget` into q̈_des with the PD(I) law of paper Section 7.3.
"""

from __future__ import annotations

import inspect

from idcontrol.errors import ConfigError, UnknownOption, UnknownReference
from idcontrol.reference.arm import ArmSinusoid, GraspHold
from idcontrol.reference.base import JointTarget, Reference, desired_acceleration
from idcontrol.reference.hold import HoldPose, StreamReference
from idcontrol.reference.sinusoid import JointSinusoid
from idcontrol.reference.sway import BaseSway
from idcontrol.reference.trot import TrotGait
from idcontrol.robot.model import RobotModel
from idcontrol.validation import check_option_types

REFERENCES: dict[str, type[Reference]] = {
    cls.name: cls for cls in (HoldPose, BaseSway, TrotGait, JointSinusoid, ArmSinusoid, GraspHold, StreamReference)
}


def available_references() -> list[str]:
    return sorted(REFERENCES)


def reference_options(name: str) -> list[str]:
    """The keyword options a registered reference accepts."""
    names: list[str] = []
    for cls in REFERENCES[name].__mro__:  # a subclass passing **options on takes its base's options too
        if "__init__" not in vars(cls):
            continue
        parameters = inspect.signature(cls.__init__).parameters.values()
        names += [p.name for p in parameters if p.kind is inspect.Parameter.KEYWORD_ONLY and p.name not in names]
        if not any(p.kind is inspect.Parameter.VAR_KEYWORD for p in parameters):
            break
    return names


def make_reference(name: str, robot: RobotModel, **options: object) -> Reference:
    """Build a registered reference for ``robot``; ConfigError for an unknown name, option or value."""
    if name not in REFERENCES:
        raise UnknownReference(name, available_references())
    valid = reference_options(name)
    unknown = sorted(set(options) - set(valid))
    if unknown:
        raise UnknownOption(f"reference {name!r}", unknown, valid)
    check_option_types(f"reference {name!r}", REFERENCES[name].__init__, options)
    try:
        return REFERENCES[name](robot, **options)  # type: ignore[call-arg]
    except (TypeError, ValueError, AttributeError) as e:
        raise ConfigError(f"reference {name!r}: invalid option value: {e}") from e


__all__ = [
    "ArmSinusoid",
    "BaseSway",
    "GraspHold",
    "JointSinusoid",
    "HoldPose",
    "JointTarget",
    "REFERENCES",
    "Reference",
    "StreamReference",
    "TrotGait",
    "available_references",
    "desired_acceleration",
    "make_reference",
    "reference_options",
]
