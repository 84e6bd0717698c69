"""The control core's input: the robot's state as a bridge (a simulator or a robot driver) reports it."""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
from numpy.typing import NDArray

from idcontrol.contacts.world import ObjectState

Array = NDArray[np.float64]


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
    """

    q: Array
    v: Array
    t: float = 0.0
    objects: dict[str, ObjectState] = field(default_factory=dict)
    sensed_forces: Array | None = None
    contact_mask: Array | None = None
