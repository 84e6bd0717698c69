"""The arm task's reference (paper Section 7.2): a sinusoid about the grasp posture; the fingers grip.

Paper: "the four fingers are commanded to keep zero velocity and acceleration while gripping, and to close
further if not in contact". Why the fingers are never driven *into* the box (no position squeeze):

* The ID controller fixes the actuated velocities, P v⁺ = q̇_des (eq 39), and the box is rigid. Two opposing
  fingers whose q̇_des close the gap between them (q̇_des,1 + q̇_des,2 > 0) ask for an impossible motion:
  the solve is infeasible or, with slightly off-centre contact points, feasible only through a near-singular
  box rotation with kilonewton forces (measured: 70–300 kN predicted, every torque clipped, box flung away).
  A position "squeeze" offset does exactly that (K_p Δt × offset of closing velocity on every finger).
* The grip force is the controller's business: with a finite μ the two-stage QP picks the smallest normal
  forces whose friction cone carries the box (Stage II, minimum torque). Zero velocity keeps the fingers
  consistent with the rigid box whatever the force.

So a gripping finger has q_ref = the opening at which it touched, v_ref = a_ref = 0; the finger gains of
``robots/arm/robot.toml`` (K_d = 1/Δt) make q̇_des = q̇ + Δt q̈_des exactly zero rather than 0.96 q̇.

"In contact" needs the contact state, which :meth:`Reference.sample` does not receive: the loop reports it
with :meth:`ArmSinusoid.observe_contacts` (the controller's candidate contacts of the previous tick). A
finger whose fingertip is farther than ``contact_tolerance`` from the object closes at ``close_speed``,
slowing as the gap shrinks (gap / ``approach_time``), and holds the opening where it touches again. Without
observations every finger is taken as gripping.
"""

from __future__ import annotations

import math
from collections.abc import Mapping

import numpy as np
from numba import njit, types

from idcontrol.arrays import ANY_VECTOR, IN_INDICES, MATRIX, VECTOR, float64, intp
from idcontrol.errors import ConfigError, NameNotFound
from idcontrol.reference.base import Array, JointTarget, Reference, ramped_sine
from idcontrol.reference.hold import standing_joint_positions
from idcontrol.robot.model import RobotModel

#: Default amplitudes, rad, of the last three joints before the fingers (the wrist): on the shipped arm a twist
#: of the hand about its (vertical) axis, which leaves the box centre in place, and two small wrist swings that
#: move the box centre by about 1 cm.
DEFAULT_WRIST_AMPLITUDES = (0.05, 0.05, 0.1)


def default_amplitudes(robot: RobotModel, fingers: tuple[str, ...]) -> dict[str, float]:
    """The wrist's default amplitudes: the last three actuated joints that are not fingers."""
    arm = [j for j in robot.actuated_joints if j not in fingers]
    return dict(zip(arm[-3:], DEFAULT_WRIST_AMPLITUDES[-len(arm[-3:]) :] if arm else (), strict=True))


class ArmSinusoid(Reference):
    """q_ref(t) = q_grasp + e(t) A sin(2π f t) on the arm joints; fingers grip (zero velocity) or close.

    amplitudes : joint name → amplitude A (rad); joints not named stay at the grasp posture.
    frequency : f, Hz (the paper: about three oscillations per second).
    squeeze : how far (m) a gripping finger's position reference lies past its touching opening. Keep 0
        (see the module docstring: any closing command on a rigid grasp is inconsistent).
    ramp_time : the envelope e(t) rises from 0 to 1 over this long (quintic), s; 0 starts at full amplitude.
    fingers : the finger joints (q grows as a finger closes; default: the robot file's ``fingers``).
    close_speed : closing speed of a finger out of contact, m/s.
    approach_time : near the object a closing finger's speed is gap / approach_time (at most close_speed), s.
    contact_tolerance : a fingertip within this distance of the object (signed, m) is in contact.

    Time starts at the first :meth:`sample` after :meth:`reset`.
    """

    name = "arm_sinusoid"

    def __init__(
        self,
        robot: RobotModel,
        *,
        amplitudes: Mapping[str, float] | None = None,
        frequency: float = 3.0,
        squeeze: float = 0.0,
        ramp_time: float = 0.5,
        fingers: tuple[str, ...] | None = None,
        close_speed: float = 0.02,
        approach_time: float = 0.01,
        contact_tolerance: float = 2e-5,
    ) -> None:
        self.nu = robot.nu
        self.frequency = float(frequency)
        self.ramp_time = float(ramp_time)
        self.squeeze = float(squeeze)
        self.close_speed = float(close_speed)
        self.approach_time = float(approach_time)
        self.contact_tolerance = float(contact_tolerance)
        if not (self.frequency > 0 and math.isfinite(self.frequency)) or self.ramp_time < 0 or self.squeeze < 0:
            raise ConfigError("arm_sinusoid: frequency must be > 0, ramp_time and squeeze >= 0")
        if not (self.close_speed >= 0 and self.approach_time > 0 and self.contact_tolerance >= 0):
            raise ConfigError("arm_sinusoid: close_speed and contact_tolerance must be >= 0, approach_time > 0")
        fingers = tuple(robot.fingers if fingers is None else fingers)
        amplitudes = default_amplitudes(robot, fingers) if amplitudes is None else amplitudes
        self.amplitude = np.zeros(robot.nu)  # (nu,) rad
        for joint, value in amplitudes.items():
            if joint not in robot.actuated_joints:
                raise NameNotFound("actuated joint", joint, robot.actuated_joints)
            self.amplitude[robot.actuated_joints.index(joint)] = float(value)
        self.q_center = standing_joint_positions(robot)  # (nu,) the grasp posture
        model = robot.model
        finger_slots, finger_q, finger_v, upper, sphere_of = [], [], [], [], []
        for finger in fingers:
            if finger not in robot.actuated_joints:
                raise NameNotFound("actuated joint", finger, robot.actuated_joints)
            slot = robot.actuated_joints.index(finger)
            if self.amplitude[slot] != 0.0:
                raise ConfigError(f"arm_sinusoid: finger {finger!r} cannot oscillate (its v_ref and a_ref are zero)")
            joint = model.getJointId(finger)
            finger_slots.append(slot)
            finger_q.append(model.joints[joint].idx_q)
            finger_v.append(model.joints[joint].idx_v)
            upper.append(float(model.upperPositionLimit[model.joints[joint].idx_q]))
            # the contact sphere(s) this finger carries: those whose frame hangs off the finger joint
            frames = robot.sphere_frame_ids
            sphere_of.append([k for k, f in enumerate(frames) if model.frames[int(f)].parentJoint == joint])
        self._fingers = np.asarray(finger_slots, dtype=np.intp)
        self._finger_q = np.asarray(finger_q, dtype=np.intp)
        self._finger_v = np.asarray(finger_v, dtype=np.intp)
        self._finger_upper = np.asarray(upper)
        self._sphere_finger = np.full(len(robot.sphere_names), -1, dtype=np.intp)  # sphere index → finger index
        for i, spheres in enumerate(sphere_of):
            self._sphere_finger[spheres] = i
        self._grasp = self.q_center[self._fingers].copy()  # (nf,) the opening each finger touches at
        self.reset()

    def reset(self) -> None:
        self._t0: float | None = None
        self._hold = self._grasp.copy()  # (nf,) opening a gripping finger holds, m
        self._gap = np.full(len(self._fingers), -np.inf)  # (nf,) last observed fingertip gap; -inf: gripping
        self._was_gripping = np.ones(len(self._fingers), dtype=bool)  # (both updated in place by arm_target)

    # ------------------------------------------------------------------ contact state
    def observe_contacts(self, contacts: object) -> None:
        """Record each fingertip's gap to the object from the controller's candidate contacts (a ContactSet).

        A fingertip without a candidate contact (farther than the detection margin) has an infinite gap.
        Call once per tick, e.g. with ``controller.last_contacts`` after the solve.
        """
        if contacts is None:
            self._gap = np.full(len(self._fingers), np.inf)
        else:
            self._gap = fingertip_gaps(
                self._sphere_finger,
                len(self._fingers),
                np.asarray(contacts.sphere, np.intp),
                np.asarray(contacts.body, np.intp),
                np.asarray(contacts.phi, float),
            )

    @property
    def gripping(self) -> Array:
        """(nf,) bool: which fingers were in contact at the last observation."""
        return self._gap <= self.contact_tolerance

    # ------------------------------------------------------------------ the target
    def sample(self, t: float, q: Array, v: Array) -> JointTarget:
        if self._t0 is None:
            self._t0 = t
        y, yd, ydd = ramped_sine(t - self._t0, self.frequency, self.ramp_time)
        target = arm_target(
            self.q_center,
            self.amplitude,
            y,
            yd,
            ydd,
            np.asarray(q, dtype=float),
            self._fingers,
            self._finger_q,
            self._finger_upper,
            self._gap,
            self._hold,
            self._was_gripping,
            self.contact_tolerance,
            self.squeeze,
            self.close_speed,
            self.approach_time,
        )
        return JointTarget(target[0], target[1], target[2])


@njit(
    MATRIX(
        ANY_VECTOR,
        ANY_VECTOR,
        float64,
        float64,
        float64,
        ANY_VECTOR,
        IN_INDICES,
        IN_INDICES,
        ANY_VECTOR,
        ANY_VECTOR,
        VECTOR,
        types.Array(types.boolean, 1, "C"),
        float64,
        float64,
        float64,
        float64,
    ),
    cache=True,
)
def arm_target(
    q_center,
    amplitude,
    y,
    yd,
    ydd,
    q,
    fingers,
    finger_q,
    finger_upper,
    gap,
    hold,
    was_gripping,
    tolerance,
    squeeze,
    close_speed,
    approach_time,
):
    """(3, nu) the target (q_ref, v_ref, a_ref): the arm joints at q_center + A·(y, ẏ, ÿ) of the ramped sinusoid;
    each finger gripping (its gap ≤ ``tolerance``, m) holds the opening where it last touched (``hold``, updated in
    place when it touches again; q_ref = hold + squeeze, v_ref = 0), the others close at
    min(close_speed, gap / approach_time + 1 mm/s) from where they are, up to their upper limit
    (``was_gripping`` (nf,) updated in place)."""
    nu = q_center.shape[0]
    target = np.empty((3, nu))
    for j in range(nu):
        target[0, j] = q_center[j] + amplitude[j] * y
        target[1, j] = amplitude[j] * yd
        target[2, j] = amplitude[j] * ydd
    for i in range(fingers.shape[0]):
        q_f = q[finger_q[i]]
        gripping = gap[i] <= tolerance
        if gripping and not was_gripping[i]:  # touched again: hold here
            hold[i] = q_f
        was_gripping[i] = gripping
        closing = not gripping and q_f < finger_upper[i]
        speed = min(close_speed, max(gap[i], 0.0) / approach_time + 1e-3)
        j = fingers[i]
        target[0, j] = hold[i] + squeeze if gripping else (q_f if closing else finger_upper[i])
        target[1, j] = speed if closing else 0.0
        target[2, j] = 0.0
    return target


@njit(VECTOR(IN_INDICES, intp, IN_INDICES, IN_INDICES, ANY_VECTOR), cache=True)
def fingertip_gaps(sphere_finger, fingers, sphere, body, phi):
    """(nf,) each finger's smallest signed distance to a movable body over the contacts ``sphere``, ``body``,
    ``phi`` (m; +inf for a finger without one), fingers found by ``sphere_finger`` (−1: not a finger's)."""
    gap = np.full(fingers, np.inf)
    for c in range(sphere.shape[0]):
        finger = sphere_finger[sphere[c]]
        if finger >= 0 and body[c] >= 0:
            gap[finger] = min(gap[finger], phi[c])
    return gap


class GraspHold(ArmSinusoid):
    """Any arm whose fingers its robot file names: the fingers grip (zero velocity where they touch, closing
    where they do not), the arm holds its grasp posture. Options as :class:`ArmSinusoid`'s (``amplitudes``
    default: none)."""

    name = "grasp_hold"

    def __init__(self, robot: RobotModel, *, amplitudes: Mapping[str, float] | None = None, **options) -> None:
        if not (options.get("fingers") or robot.fingers):
            raise ConfigError(
                f"the grasp_hold reference needs fingers; {robot.name!r}'s robot file names none (fingers = [...])"
            )
        super().__init__(robot, amplitudes=amplitudes or {}, **options)
