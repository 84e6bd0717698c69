"""Limbs from the kinematic tree: chains of joints from the base to an end frame.

A robot file may list its limbs (``[[limbs]]``, written by ``idcontrol robot init``); one that does not
gets them from its contact spheres (:func:`limbs_from_spheres`): each sphere's frame ends the chain of
actuated joints that moves it, and on a floating-base robot such a chain is a leg.
"""

from __future__ import annotations

import os

import numpy as np
import pinocchio as pin

from idcontrol.robot.config import LimbConfig
from idcontrol.robot.urdf import frame_id


def joint_chain(model: pin.Model, joint: int) -> list[int]:
    """Joint ids from the root outward to ``joint``: its ancestors with a degree of freedom, free flyer excluded."""
    out = []
    while joint > 0:
        j = model.joints[joint]
        if j.nv > 0 and j.shortname() != "JointModelFreeFlyer":
            out.append(joint)
        joint = model.parents[joint]
    return out[::-1]


def leaf_joints(model: pin.Model) -> list[int]:
    """Joints no other joint hangs from (the ends of the kinematic tree), in model order."""
    parents = set(model.parents[1:])
    return [
        j
        for j in range(1, model.njoints)
        if j not in parents and model.joints[j].nv > 0 and model.joints[j].shortname() != "JointModelFreeFlyer"
    ]


def end_frame(model: pin.Model, joint: int) -> str:
    """The distal body frame moved by ``joint``: of its link and the links fixed to it, the one deepest in the
    chain of fixed joints (a foot or sole link below the shank), the farthest from the joint on a tie."""
    best, best_key = str(model.names[joint]), (-1, -1.0)
    for fid, frame in enumerate(model.frames):
        if frame.parentJoint != joint or frame.type != pin.FrameType.BODY:
            continue
        depth, f = 0, fid
        while model.frames[f].parentJoint == joint and model.frames[f].parentFrame != f and depth < 1000:
            f = model.frames[f].parentFrame
            depth += 1
        key = (depth, float(np.linalg.norm(frame.placement.translation)))
        if key > best_key:
            best, best_key = str(frame.name), key
    return best


def limb_name(joint_names: list[str], end: str) -> str:
    """A short name for a limb: the common prefix of its joints' names (``FL`` of ``FL_HAA, FL_HFE, FL_KFE``),
    else its end frame's name."""
    prefix = os.path.commonprefix(joint_names).rstrip("_-. ")
    return prefix if len(prefix) >= 2 and len(joint_names) > 1 else end


def limbs_from_spheres(
    model: pin.Model, sphere_frames: list[str], actuated: tuple[str, ...], floating_base: bool
) -> tuple[LimbConfig, ...]:
    """One limb per distinct chain of actuated joints moving a contact sphere's frame (in sphere order): a leg on
    a floating-base robot, "other" on a fixed one. Joints shared by several chains stay in each."""
    chains: dict[tuple[str, ...], str] = {}
    for frame in sphere_frames:
        joint = model.frames[frame_id(model, frame)].parentJoint
        chain = tuple(str(model.names[j]) for j in joint_chain(model, joint) if str(model.names[j]) in actuated)
        if chain and chain not in chains:
            chains[chain] = frame
    names: list[str] = []
    limbs = []
    for chain, frame in chains.items():
        shared = {j for other in chains if other != chain for j in other}
        own = [j for j in chain if j not in shared] or list(chain)
        name = limb_name(own, frame)
        name = name if name not in names else frame
        names.append(name)
        limbs.append(LimbConfig(name, "leg" if floating_base else "other", chain, frame))
    return tuple(limbs)
