"""The controller core: one pure, synchronous solve per tick.

``InverseDynamicsController.solve(state, qdd_des)`` updates the robot model in
place, detects contacts, assembles the :class:`~idcontrol.formulations.problem.ContactProblem`
(appending any movable bodies, paper Section 1.5) and hands it to the selected
formulation. It owns no socket, file or clock; the daemon, replay and the test
harness all call this same core.
"""

from __future__ import annotations

import math
import time
from collections.abc import Mapping

import numpy as np
from numba import njit, types
from numba.experimental import structref
from numpy.typing import NDArray

from idcontrol.arrays import (
    ANY_MATRIX,
    ANY_VECTOR,
    IN_INDICES,
    IN_MATRIX,
    IN_TENSOR,
    IN_VECTOR,
    MATRIX,
    VECTOR,
    boolean,
    float64,
    split,
)
from idcontrol.contacts.detection import ContactDetector, ContactSet, point_wrenches
from idcontrol.contacts.geometry import HalfSpace
from idcontrol.contacts.stance import StanceEstimator, StanceSettings
from idcontrol.contacts.world import Environment, MovableBody, ObjectState
from idcontrol.control.state import RobotState
from idcontrol.errors import ConfigError, IdControlError, InputError, NonFiniteError, ShapeError
from idcontrol.formulations import Formulation, make_formulation
from idcontrol.formulations.certificate import Certifier
from idcontrol.formulations.pid import PIDInput
from idcontrol.formulations.problem import ContactProblem, SolveResult, as_index, index_array
from idcontrol.formulations.record import PROBLEM
from idcontrol.reference.base import Tracking
from idcontrol.robot.model import RobotModel
from idcontrol.solvers.dense import least_norm_lstsq
from idcontrol.validation import all_finite, check_vector, unit_quaternion, valid_state

Array = NDArray[np.float64]
_F64 = np.dtype(np.float64)
_EMPTY = np.zeros(0)

#: Fraction of a period in which the URDF-friction feed-forward would take a joint from rest to the reference's
#: velocity: the feed-forward is clip(M_jj q̇_ref / (FRICTION_RAMP Δt), −F, F). Over stiff dry friction a joint
#: driven with less than F sticks: at a whole period, TIAGo Pro's wrist (F = 1 N·m, M_jj = 5e-4 kg·m²) stood still;
#: at a hundredth, reversals threw light joints. Measured: docs/robots.md, "MuJoCo from a published URDF".
FRICTION_RAMP = 0.1

#: How the controller decides its contacts (see :class:`InverseDynamicsController`'s ``contacts``).
CONTACT_MODES = ("world", "estimated")


@njit(types.void(ANY_VECTOR, ANY_VECTOR, ANY_VECTOR, ANY_VECTOR, float64, VECTOR), cache=True)
def joint_loss_torque(damping, friction, inertia, velocity, dt, out):
    """out (k,) ← D q̇ + clip(M_jj q̇ / (r Δt), −F, F), N·m: what the motors spend against the URDF's joint damping D
    (N·m·s/rad) and dry friction F (N·m) at velocity q̇ (k,) rad/s, with M_jj (k,) the joints' diagonal inertia and
    r = :data:`FRICTION_RAMP` (see :meth:`InverseDynamicsController._bias`)."""
    scale = FRICTION_RAMP * dt
    for i in range(out.shape[0]):
        ramp = min(max(inertia[i] * velocity[i] / scale, -friction[i]), friction[i])
        out[i] = damping[i] * velocity[i] + ramp


@njit(VECTOR(ANY_VECTOR, float64, float64), cache=True)
def reduced_penetration(phi, tolerance, gain):
    """(n,) signed distances, m, with each penetration φ < 0 replaced by gain · min(φ + tolerance, 0)."""
    out = np.empty_like(phi)
    for i in range(phi.shape[0]):
        out[i] = gain * min(phi[i] + tolerance, 0.0) if phi[i] < 0.0 else phi[i]
    return out


@njit(
    types.Tuple((MATRIX, VECTOR, PROBLEM))(
        ANY_MATRIX,
        ANY_VECTOR,
        ANY_VECTOR,
        ANY_VECTOR,
        IN_TENSOR,
        IN_MATRIX,
        IN_MATRIX,
        IN_MATRIX,
        IN_MATRIX,
        IN_MATRIX,
        ANY_VECTOR,
        IN_VECTOR,
        IN_INDICES,
        IN_INDICES,
        float64,
        boolean,
        float64,
        float64,
    ),
    cache=True,
)
def assemble_problem(
    M_robot,
    bias,
    v,
    qdd_des,
    M_bodies,
    f_bodies,
    v_bodies,
    N,
    S,
    T,
    phi,
    mu,
    actuated,
    unactuated,
    dt,
    consistent,
    tolerance,
    gain,
):
    """The problem's arrays in one call, fresh each tick: M (m, m), [f_ext (m,); v (m,); q̇_des (nu,); φ (n,)]
    stacked (one array returned, views of it in Python: docs/benchmarks.md), and the problem's record
    (:mod:`idcontrol.formulations.record`) of these arrays with N, S, T, μ (n,), the actuated and unactuated
    indices and Δt.

    M_robot (nv, nv), bias (nv,) h(q, v): Pinocchio's, at the last model update; v (nv,) the robot's velocity;
    qdd_des (nu,) rad/s²; the movable bodies' blocks M_bodies (b, 6, 6), f_bodies (b, 6), v_bodies (b, 6) appended
    after the robot's DoFs (m = nv + 6b); N, S, T (n, m) the contact rows; φ (n,) m. q̇_des = q̇ + Δt q̈_des, where
    q̇ is the measured actuated velocity or, when ``consistent``, that plus the least-norm least-squares actuated
    change that brings every contact to rest relative to what it touches (base and bodies unchanged). φ has its
    penetrations reduced by ``tolerance`` and ``gain`` (see :func:`reduced_penetration`) unless they are 0 and 1.
    """
    nv = M_robot.shape[0]
    b = M_bodies.shape[0]
    m = nv + 6 * b
    n = N.shape[0]
    nu = actuated.shape[0]
    M = np.zeros((m, m))
    vectors = np.empty(2 * m + nu + n)
    f_ext, v_all, qd_des, phi_out = vectors[:m], vectors[m : 2 * m], vectors[2 * m : 2 * m + nu], vectors[2 * m + nu :]
    for i in range(nv):
        for j in range(nv):
            M[i, j] = M_robot[i, j]
        f_ext[i] = -bias[i]
        v_all[i] = v[i]
    for k in range(b):
        o = nv + 6 * k
        for i in range(6):
            for j in range(6):
                M[o + i, o + j] = M_bodies[k, i, j]
            f_ext[o + i] = f_bodies[k, i]
            v_all[o + i] = v_bodies[k, i]
    for j in range(nu):
        qd_des[j] = v_all[actuated[j]]
    if consistent and n > 0:
        J_a = np.empty((3 * n, nu))  # [N; S; T] on the actuated columns, and −[N; S; T] v
        drift = np.empty(3 * n)
        for block in range(3):
            rows = N if block == 0 else S if block == 1 else T
            for i in range(n):
                r = block * n + i
                s = 0.0
                for c in range(m):
                    s -= rows[i, c] * v_all[c]
                drift[r] = s
                for j in range(nu):
                    J_a[r, j] = rows[i, actuated[j]]
        delta = least_norm_lstsq(J_a, drift, 1e-9)
        for j in range(nu):
            qd_des[j] += delta[j]
    for j in range(nu):
        qd_des[j] += dt * qdd_des[j]
    if tolerance == 0.0 and gain == 1.0:
        phi_out[:] = phi
    else:
        phi_out[:] = reduced_penetration(phi, tolerance, gain)
    record = structref.new(PROBLEM)
    record.M, record.f_ext, record.v, record.qd_des = M, f_ext, v_all, qd_des
    record.N, record.S, record.T, record.phi, record.mu = N, S, T, phi_out, mu
    record.a, record.u, record.dt = actuated, unactuated, dt
    return M, vectors, record


@njit(boolean(ANY_VECTOR, ANY_VECTOR, ANY_VECTOR, ANY_VECTOR), cache=True)
def finite_pose(position, orientation_xyzw, linear_velocity, angular_velocity):
    """Whether a movable body's pose and twist have their shapes, (3,), (4,), (3,), (3,), are finite and the
    quaternion has norm 1 (:func:`~idcontrol.validation.unit_quaternion`; float64 1-D arrays: the signature refuses
    the rest with a TypeError)."""
    if (
        position.shape[0] != 3
        or orientation_xyzw.shape[0] != 4
        or linear_velocity.shape[0] != 3
        or angular_velocity.shape[0] != 3
    ):
        return False
    if not (
        all_finite(position)
        and all_finite(orientation_xyzw)
        and all_finite(linear_velocity)
        and all_finite(angular_velocity)
    ):
        return False
    return unit_quaternion(orientation_xyzw, 0)


@njit((ANY_VECTOR, ANY_VECTOR, IN_MATRIX, float64, IN_VECTOR, MATRIX, VECTOR), cache=True)
def body_terms(orientation_xyzw, angular_velocity, inertia_in_body, mass, gravity, M_out, f_out):
    """A movable body's block of M and its f_ext, in [v_com; ω] world coordinates, written into M_out (6, 6) and
    f_out (6,): diag(m I₃, R I Rᵀ) and [m g; −ω × (R I Rᵀ ω)] (N, N·m), R the (normalized) quaternion's rotation
    (as :meth:`~idcontrol.contacts.world.MovableBody.inertia` and ``external_force``)."""
    x, y, z, w = orientation_xyzw[0], orientation_xyzw[1], orientation_xyzw[2], orientation_xyzw[3]
    norm = math.sqrt(x * x + y * y + z * z + w * w)
    x, y, z, w = x / norm, y / norm, z / norm, w / norm
    R = np.empty((3, 3))
    R[0, 0], R[0, 1], R[0, 2] = 1.0 - 2.0 * (y * y + z * z), 2.0 * (x * y - z * w), 2.0 * (x * z + y * w)
    R[1, 0], R[1, 1], R[1, 2] = 2.0 * (x * y + z * w), 1.0 - 2.0 * (x * x + z * z), 2.0 * (y * z - x * w)
    R[2, 0], R[2, 1], R[2, 2] = 2.0 * (x * z - y * w), 2.0 * (y * z + x * w), 1.0 - 2.0 * (x * x + y * y)
    for i in range(6):
        for j in range(6):
            M_out[i, j] = 0.0
    for i in range(3):
        M_out[i, i] = mass
        f_out[i] = mass * gravity[i]
        for j in range(3):
            s = 0.0
            for a in range(3):
                for c in range(3):
                    s += R[i, a] * inertia_in_body[a, c] * R[j, c]
            M_out[3 + i, 3 + j] = s
    Iw = np.empty(3)
    for i in range(3):
        Iw[i] = (
            M_out[3 + i, 3] * angular_velocity[0]
            + M_out[3 + i, 4] * angular_velocity[1]
            + M_out[3 + i, 5] * angular_velocity[2]
        )
    wx, wy, wz = angular_velocity[0], angular_velocity[1], angular_velocity[2]
    f_out[3] = -(wy * Iw[2] - wz * Iw[1])
    f_out[4] = -(wz * Iw[0] - wx * Iw[2])
    f_out[5] = -(wx * Iw[1] - wy * Iw[0])


class InverseDynamicsController:
    """Torques from state and desired accelerations, predicting the contact forces.

    Parameters
    ----------
    robot : the robot model (or a robot name / robot.toml path).
    environment : surfaces and movable bodies; default: flat ground with μ = 1 under a floating base (none under
        a fixed one: :meth:`Environment.around`) and the robot configuration's ``[[objects]]``.
    formulation : a registered name (see :func:`idcontrol.formulations.available_formulations`) or instance.
    dt : control period Δt, s.
    margin, samples_per_contact : contact detection (see :class:`ContactDetector`).
    penetration_tolerance, penetration_gain : how much of a penetration the next step undoes. A
        penetration φ < 0 enters the problem as γ · min(φ + tolerance, 0), γ = penetration_gain
        (a Baumgarte factor, 0 < γ ≤ 1). The paper (tolerance 0, γ = 1) undoes every penetration
        within one period: N v⁺ ≥ −φ/Δt, so 1 µm at 1 kHz asks for 1 mm/s of separation and the
        1–2 mm of a foot landing on a compliant floor for 1–2 m/s, which the predicted forces then
        deliver. Against a compliant simulator or noisy estimates a small tolerance and γ keep the
        robot from climbing out of the ground.
    contacts : ``"world"`` (the paper's: a contact is a sphere within ``margin`` of the surfaces the controller is
        told, its gap their signed distance, the state's velocity taken as exact) or ``"estimated"``, for a state
        that comes from a robot's sensors: each sphere's stance decided from the gait schedule, kinematics and a
        foot sensor, the ground estimated from the stance feet, stance contacts touching, and v replaced by the
        nearest velocity that keeps the stance feet still (:mod:`idcontrol.contacts.stance`, with ``stance`` its
        settings). Applies to a floating base on a ground of one half-space without movable bodies; a fixed base
        keeps ``"world"``.
    """

    def __init__(
        self,
        robot: RobotModel | str,
        environment: Environment | None = None,
        formulation: str | Formulation = "two_stage_qp",
        *,
        dt: float = 1e-3,
        margin: float = 0.005,
        samples_per_contact: int = 1,
        formulation_options: Mapping[str, object] | None = None,
        penetration_tolerance: float = 0.0,
        penetration_gain: float = 1.0,
        activation_distance: float | None = None,
        consistent_contact_velocity: bool = False,
        contacts: str = "world",
        stance: StanceSettings | None = None,
    ) -> None:
        self.robot = robot if isinstance(robot, RobotModel) else RobotModel(robot)
        if environment is None:
            objects = tuple(MovableBody(o) for o in self.robot.config.objects)
            environment = Environment.around(self.robot.floating_base, 1.0, objects=objects)
        if not dt > 0:
            raise ConfigError(f"control period dt must be > 0 s, got {dt}")
        if not penetration_tolerance >= 0:
            raise ConfigError(f"penetration_tolerance must be >= 0 m, got {penetration_tolerance}")
        if not 0.0 < penetration_gain <= 1.0:
            raise ConfigError(f"penetration_gain must be in (0, 1], got {penetration_gain}")
        if activation_distance is not None and not activation_distance >= 0:
            raise ConfigError(f"activation_distance must be >= 0 m or None, got {activation_distance}")
        self.activation_distance = None if activation_distance is None else float(activation_distance)
        self.consistent_contact_velocity = bool(consistent_contact_velocity)
        self.penetration_tolerance = float(penetration_tolerance)
        self.penetration_gain = float(penetration_gain)
        self.environment = environment
        self.dt = float(dt)
        if contacts not in CONTACT_MODES:
            raise ConfigError(f"contacts must be one of {list(CONTACT_MODES)}, got {contacts!r}")
        #: the estimated contacts' state (None: contacts as the world says, ``contacts = "world"`` or a fixed base)
        self.stance: StanceEstimator | None = None
        if contacts == "estimated" and self.robot.floating_base:
            if (
                environment.objects
                or len(environment.surfaces) != 1
                or not isinstance(environment.surfaces[0].shape, HalfSpace)
            ):
                raise ConfigError(
                    "contacts = 'estimated' takes a ground of one half-space and no movable bodies "
                    f"(this world has {[x.name for x in environment.surfaces]} and "
                    f"{[o.name for o in environment.objects]}); use contacts = 'world'"
                )
            self.stance = StanceEstimator(self.robot, self.dt, stance)
            margin = max(margin, float(self.stance.params[2]) + 0.005)  # every stance sphere is a candidate
        self.contacts_mode = "estimated" if self.stance is not None else "world"
        self._prepared: RobotState | None = None  # the state :meth:`prepare` updated the model and stance for
        self.detector = ContactDetector(self.robot, environment, margin=margin, samples_per_contact=samples_per_contact)
        r = self.robot
        mass = r.total_mass() + sum(body.mass for body in environment.objects)
        self.certifier = Certifier(r.torque_limits, mass)
        self.formulation = self._make(formulation, formulation_options)
        self.m = r.nv + 6 * len(environment.objects)
        self.actuated = as_index(r.actuated_dofs)
        self.unactuated = as_index(np.concatenate([r.unactuated_dofs, np.arange(r.nv, self.m)]))
        self.last_contacts: ContactSet | None = None
        self._actuated_indices = index_array(self.actuated, self.m)
        self._unactuated_indices = index_array(self.unactuated, self.m)
        # the movable bodies' per-tick terms (M blocks, f_ext, velocities), written in place
        b = len(environment.objects)
        # the robot's and the bodies' velocities side by side (the activation filter's (m,) velocity, no copy a
        # tick); the bodies' twists are written in place through their view
        self._v_all = np.zeros(self.m)
        self._v_robot = self._v_all[: r.nv]
        self._body_M, self._body_f = np.zeros((b, 6, 6)), np.zeros((b, 6))
        self._body_v = self._v_all[r.nv :].reshape(b, 6)
        self._body_inertias = [np.ascontiguousarray(o.inertia_in_body, dtype=float) for o in environment.objects]
        self._gravity = np.ascontiguousarray(environment.gravity, dtype=float)
        self._sphere_count = len(r.sphere_names)
        self._q_shape, self._v_shape, self._forces_shape = (r.nq,), (r.nv,), (self._sphere_count, 3)
        self._floating = bool(r.floating_base)
        self._object_names = frozenset(o.name for o in environment.objects)
        # the URDF's joint damping (N·m·s/rad) and dry friction (N·m) of the actuated joints, which the motors must
        # overcome: added to h(q, v) (None: the robot declares neither, and h is Pinocchio's alone)
        damping = np.asarray(r.model.damping, dtype=float)[self.actuated]
        friction = np.asarray(r.model.friction, dtype=float)[self.actuated]
        self._passive = (damping, friction) if np.any(damping) or np.any(friction) else None
        self._h = np.zeros(r.nv)  # buffers of _bias, written each tick
        self._v_ref, self._friction_torque = np.zeros(r.nu), np.zeros(r.nu)
        self._warm_up()

    @property
    def formulation(self) -> Formulation:
        """The formulation each solve uses. Assigning one gives it this controller's certificate terms, so that its
        compiled solve may certify its own answer (:meth:`Certifier.verdict`)."""
        return self._formulation

    @formulation.setter
    def formulation(self, formulation: Formulation) -> None:
        formulation.certify_with(self.certifier)
        self._formulation = formulation

    @staticmethod
    def _make(formulation: str | Formulation, options: Mapping[str, object] | None) -> Formulation:
        if isinstance(formulation, Formulation):
            return formulation
        return make_formulation(formulation, **dict(options or {}))

    def set_formulation(
        self, formulation: str | Formulation, options: Mapping[str, object] | None = None, *, warm_up: bool = True
    ) -> None:
        """Switch formulation (takes effect at the next solve). ``warm_up=False`` for an instance that has
        already solved (a switch between two ticks of a running loop must not cost a tick)."""
        self.formulation = self._make(formulation, options)
        if warm_up:
            self._warm_up()

    def _warm_up(self) -> None:
        """Solve one discarded tick at the standing posture, so that the compiled kernels are loaded now.

        Loading them takes milliseconds on a first call; this keeps that out of
        the control loop. The formulation's warm-start state is then reset.
        """
        r = self.robot
        zeros = np.zeros(r.nu)
        state = RobotState(q=r.standing_configuration(), v=np.zeros(r.nv), objects=self.initial_object_states())
        contacts = self.last_contacts
        try:
            self.solve(state, zeros, Tracking(zeros, zeros))
        except (IdControlError, np.linalg.LinAlgError):
            pass  # a posture this set-up cannot solve: the kernels then load at the first real tick
        self.formulation.reset()
        self.last_contacts = contacts
        if self.stance is not None:
            self.stance.reset()

    def prepare(self, state: RobotState, contact_mask: Array | None, planned_stance: Array | None) -> Array:
        """With estimated contacts, before the reference and the PD law: update the model and the stance for
        ``state`` (validated) and return the contact-consistent velocity (nv,) (the estimator's buffer); the
        next :meth:`build_problem` of this same state reuses both. ``contact_mask``, ``planned_stance``: as in
        :meth:`build_problem`."""
        stance = self.stance
        if stance is None:
            return state.v
        self.robot.update(state.q, state.v)
        mask = state.contact_mask if contact_mask is None else contact_mask
        force = None if state.sensed_forces is None else state.sensed_forces @ stance.normal
        v = stance.update(state.v, mask, planned_stance, force)
        self._prepared = state
        return v

    def ground_relative(self, q: Array) -> Array:
        """``q`` itself, or with estimated contacts a copy with the floating base's pose relative to the estimated
        ground (:meth:`~idcontrol.contacts.stance.StanceEstimator.relative_to_ground`): what a reference means by
        the base's height and attitude, and a fall check by its height and tilt."""
        if self.stance is None:
            return q
        return self.stance.relative_to_ground(q)

    def initial_object_states(self) -> dict[str, ObjectState]:
        return {o.name: o.initial_state() for o in self.environment.objects}

    # ------------------------------------------------------------------ the tick
    def check_state(self, state: RobotState) -> RobotState:
        """``state`` validated against the robot and its world: float arrays of the right shapes, finite, a
        unit base quaternion, known movable bodies, sensed forces (k, 3). Raises InputError subclasses naming
        the field. A state that passes as it is (the protocol's decode makes float64 arrays) is returned itself."""
        if self._passes(state):
            return state
        q, v = self.robot.check_state(state.q, state.v)
        objects = {name: s.validated(name) for name, s in state.objects.items()} if state.objects else {}
        for name in objects:
            self.environment.object_index(name)  # NameNotFound for a body the environment does not have
        sensed = None if state.sensed_forces is None else self._check_sensed_forces(state.sensed_forces)
        if q is state.q and v is state.v and not objects and sensed is state.sensed_forces:
            return state  # already float arrays of the right shapes (the protocol's decode makes them so)
        return RobotState(q, v, state.t, objects, sensed, state.contact_mask, state.imu)

    def _passes(self, state: RobotState) -> bool:
        """Whether ``state`` is valid as it is: float64 arrays of the robot's shapes, known movable bodies with
        float64 poses and twists, all finite, a unit base quaternion (one compiled check per array group)."""
        q, v, forces = state.q, state.v, state.sensed_forces
        if not (
            type(q) is np.ndarray
            and type(v) is np.ndarray
            and q.dtype == _F64
            and v.dtype == _F64
            and q.shape == self._q_shape
            and v.shape == self._v_shape
        ):
            return False
        if forces is None:
            flat = _EMPTY
        elif type(forces) is np.ndarray and forces.dtype == _F64 and forces.shape == self._forces_shape:
            flat = forces.reshape(-1)
        else:
            return False
        if not valid_state(q, v, flat, self._floating):
            return False
        for name, body in state.objects.items():
            if name not in self._object_names or type(body) is not ObjectState:
                return False
            try:
                if not finite_pose(body.position, body.orientation_xyzw, body.linear_velocity, body.angular_velocity):
                    return False
            except TypeError:  # not float64 arrays of the pose's shapes (the compiled check's signature)
                return False
        return True

    def build_problem(
        self,
        state: RobotState,
        qdd_des: Array,
        tracking: Tracking | None = None,
        *,
        checked: bool = False,
        contact_mask: Array | None = None,
        planned_stance: Array | None = None,
    ) -> tuple[ContactProblem, dict[str, float]]:
        """Validate the input (unless ``checked``: the caller validated ``state`` with :meth:`check_state` and
        computed ``qdd_des`` and ``tracking`` from it), update the model, detect contacts and assemble the
        problem. ``contact_mask`` (k,) bool per contact sphere replaces ``state.contact_mask`` when given;
        ``planned_stance`` (k,) bool: the spheres a gait plans in stance now (estimated contacts only)."""
        t0 = time.perf_counter()
        r = self.robot
        if not checked:
            state = self.check_state(state)
            qdd_des = check_vector("qdd_des", qdd_des, r.nu)
            tracking = self._check_tracking(tracking)
        q, v, objects = state.q, state.v, state.objects
        prepared = self._prepared is state  # estimated contacts: model and stance updated for this state already
        if not prepared:
            r.update(q, v)
        t1 = time.perf_counter()
        mask = state.contact_mask if contact_mask is None else contact_mask
        if mask is not None:
            mask = np.asarray(mask, dtype=bool)
            if mask.shape != (self._sphere_count,):
                raise ShapeError("contact_mask", (self._sphere_count,), mask.shape)
        if self.environment.objects:
            self._body_terms(objects)
        phi = None
        if self.stance is not None:  # estimated contacts: stance from what a robot knows, touching, v kept still
            stance = self.stance
            if prepared:
                v = stance.velocity
            else:
                force = None if state.sensed_forces is None else state.sensed_forces @ stance.normal
                v = stance.update(v, mask, planned_stance, force)
            self._prepared = None
            self.detector.set_ground(stance.normal, stance.offset)
            contacts, N, S, T = self.detector.detect_rows(objects, stance.mask)
            phi = np.zeros(contacts.n)
        elif self.activation_distance is None:
            contacts, N, S, T = self.detector.detect_rows(objects, mask)
        else:  # only contacts whose predicted gap at the end of the period is within the activation distance
            velocity = v
            if self.m != r.nv:
                np.copyto(self._v_robot, v)
                velocity = self._v_all
            contacts, N, S, T = self.detector.detect_rows(
                objects, mask, velocity=velocity, dt=self.dt, activation_distance=self.activation_distance
            )
        self.last_contacts = contacts
        t2 = time.perf_counter()

        # fresh arrays each tick: a result keeps its problem (for on-demand residuals) after the next tick
        estimated = phi is not None  # stance contacts touch: no penetration to undo
        M, vectors, record = assemble_problem(
            r.M,
            self._bias(v, tracking),
            v,
            qdd_des,
            self._body_M,
            self._body_f,
            self._body_v,
            N,
            S,
            T,
            phi if estimated else contacts.phi,
            contacts.mu,
            self._actuated_indices,
            self._unactuated_indices,
            self.dt,
            self.consistent_contact_velocity,
            0.0 if estimated else self.penetration_tolerance,
            1.0 if estimated else self.penetration_gain,
        )
        f_ext, v_all, qd_des, phi = split(vectors, self.m, self.m, r.nu)
        sensed = None
        if state.sensed_forces is not None and self.formulation.uses_sensed_forces:
            sensed = self._sensed_generalized_force(state.sensed_forces, contacts, objects)
        problem = ContactProblem(
            dt=self.dt,
            M=M,
            f_ext=f_ext,
            v=v_all,
            actuated=self.actuated,
            unactuated=self.unactuated,
            qd_des=qd_des,
            N=N,
            S=S,
            T=T,
            phi=phi,
            mu=contacts.mu,
            contact_ids=contacts.ids,
            normals=contacts.normals,
            tangents_s=contacts.tangents_s,
            tangents_t=contacts.tangents_t,
            sensed_force=sensed,
            record=record,
        )
        t3 = time.perf_counter()
        return problem, {"model": t1 - t0, "contacts": t2 - t1, "build": t3 - t2}

    def _check_tracking(self, tracking: Tracking | None) -> Tracking | None:
        """``tracking`` with each error checked as a finite (nu,) vector; ShapeError / NonFiniteError naming it."""
        if tracking is None:
            return None
        nu = self.robot.nu
        return Tracking(
            check_vector("position_error", tracking.position_error, nu),
            check_vector("velocity_error", tracking.velocity_error, nu),
            None if tracking.integral_error is None else check_vector("integral_error", tracking.integral_error, nu),
        )

    def _bias(self, v: Array, tracking: Tracking | None) -> Array:
        """(nv,) h(q, v) at the last model update plus the torques the motors must add against the URDF's joint
        damping D and dry friction F at the reference's velocity q̇_ref = q̇ + the tracking's velocity error:
        D q̇_ref + clip(M_jj q̇_ref / (r Δt), −F, F) on each actuated joint j, r = :data:`FRICTION_RAMP`. A
        feed-forward: fed back from the measured q̇, the damping term would undo a simulator's implicit damping
        explicitly, which a light link with strong damping does not survive at 1 kHz (D Δt / M_jj > 2). The
        friction term is the torque that takes the joint from rest to q̇_ref in r periods, capped at ±F: near a
        reversal a full ±F that the real friction does not yet oppose would throw a light joint, and a joint driven
        with less than F sticks. None without a tracking record."""
        if self._passive is None or tracking is None:
            return self.robot.bias
        damping, friction = self._passive
        dofs = self.actuated  # a slice on the usual robot: views, nothing allocated
        h, v_ref, torque = self._h, self._v_ref, self._friction_torque
        np.copyto(h, self.robot.bias)
        np.add(v[dofs], tracking.velocity_error, out=v_ref)
        joint_loss_torque(damping, friction, np.diagonal(self.robot.M)[dofs], v_ref, self.dt, torque)
        h[dofs] += torque
        return h

    def _body_terms(self, objects: Mapping[str, ObjectState]) -> None:
        """The movable bodies' blocks of M, f_ext and velocities (world) for this tick, in place."""
        for i, body in enumerate(self.environment.objects):
            s = objects.get(body.name)
            if s is None:
                raise InputError(f"the state has no pose for movable body {body.name!r}")
            body_terms(
                s.orientation_xyzw,
                s.angular_velocity,
                self._body_inertias[i],
                body.mass,
                self._gravity,
                self._body_M[i],
                self._body_f[i],
            )
            self._body_v[i, :3] = s.linear_velocity
            self._body_v[i, 3:] = s.angular_velocity

    def solve(
        self,
        state: RobotState,
        qdd_des: Array,
        tracking: Tracking | None = None,
        *,
        checked: bool = False,
        contact_mask: Array | None = None,
        planned_stance: Array | None = None,
    ) -> SolveResult:
        """Torques for one tick (``checked``, ``contact_mask``, ``planned_stance``: see :meth:`build_problem`).
        Raises InputError subclasses on malformed input; solver failure is ``found=False``."""
        started = time.perf_counter()
        problem, timings = self.build_problem(
            state, qdd_des, tracking, checked=checked, contact_mask=contact_mask, planned_stance=planned_stance
        )
        formulation = self.formulation
        if formulation.uses_tracking:  # the PID baseline: its own input, the tracking errors and its gains
            if not checked:
                tracking = self._check_tracking(tracking)
            gains = self.robot.pid_gains
            formulation.input = (
                None
                if tracking is None
                else PIDInput(
                    tracking.position_error,
                    tracking.velocity_error,
                    tracking.integral_error,
                    gains.kp,
                    gains.kd,
                    gains.ki,
                )
            )
        result = formulation.solve(problem)
        if result.found:
            certified = time.perf_counter()
            certificate = self.certifier.verdict(problem, result, self.formulation.contact_model)
            if not certificate.passed:
                result.found, result.certificate = False, certificate.check
                result.message = (
                    f"{certificate.message()} ({result.message})" if result.message else certificate.message()
                )
            timings["certificate"] = time.perf_counter() - certified
        if result.found and self.stance is not None:  # which stance feet carry load: the estimator's contacts
            self.stance.observe_loads(self.last_contacts.sphere, result.f_normal)
        result.timings.update(timings)
        result.timings["total"] = time.perf_counter() - started
        return result

    def _check_sensed_forces(self, sensed_forces: object) -> Array:
        """(k, 3) finite measured forces, N, or ShapeError / NonFiniteError."""
        forces = np.asarray(sensed_forces, dtype=float)
        k = len(self.robot.sphere_names)
        if forces.shape != (k, 3):
            raise ShapeError("sensed_forces", (k, 3), forces.shape)
        if not all_finite(forces.ravel()):
            raise NonFiniteError("sensed_forces", np.flatnonzero(~np.isfinite(forces).all(axis=1)))
        return forces

    def _sensed_generalized_force(
        self, forces: Array, contacts: ContactSet, objects: Mapping[str, ObjectState]
    ) -> Array:
        """Σ J_cᵀ f over the spheres' measured world forces (applied at the sphere centres), N."""
        r = self.robot
        out = np.zeros(self.m)
        slot = r.sphere_frame_slot
        lever = r.sphere_centers_in_world - r.frame_origins_in_world[slot]
        out[: r.nv] = np.einsum("kc,kcv->v", point_wrenches(lever, forces), r.frame_jacobians[slot])
        seen: set[tuple[int, int]] = set()
        for i in range(contacts.n):  # reaction on movable bodies in contact, once per (sphere, body)
            b = int(contacts.body[i])
            if b < 0 or (int(contacts.sphere[i]), b) in seen:
                continue
            seen.add((int(contacts.sphere[i]), b))
            body = self.environment.objects[b]
            f = forces[contacts.sphere[i]]
            arm = r.sphere_centers_in_world[contacts.sphere[i]] - objects[body.name].position
            out[r.nv + 6 * b : r.nv + 6 * b + 6] -= point_wrenches(arm, f)
        return out
