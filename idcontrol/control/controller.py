"""The controller core: one pure, synchronous solve per tick.

``InverseDynamicsController.solve(state, qdd_des)`` updates the robot model in
place, detects contacts, assembles the :class:`~idcontrol.formulations.problem.ContactProblem`
(appending any movable bodies, paper Section 1.5) and hands it to the selected
formulation. It owns no socket, file or clock; the daemon, replay and the test
harness all call this same core.
"""

from __future__ import annotations

import time
from collections.abc import Mapping

import numpy as np
from numba import njit
from numpy.typing import NDArray

from idcontrol.arrays import ANY_VECTOR, VECTOR, float64
from idcontrol.contacts.detection import ContactDetector, ContactSet, point_wrenches
from idcontrol.contacts.world import Environment, MovableBody, ObjectState
from idcontrol.control.state import RobotState
from idcontrol.errors import ConfigError, IdControlError, InputError, NonFiniteError, ShapeError
from idcontrol.formulations import Formulation, make_formulation
from idcontrol.formulations.certificate import Certifier
from idcontrol.formulations.consistency import rest_correction
from idcontrol.formulations.problem import ContactProblem, SolveResult, as_index
from idcontrol.reference.base import Tracking
from idcontrol.robot.model import RobotModel
from idcontrol.validation import all_finite, check_vector

Array = NDArray[np.float64]


@njit(VECTOR(ANY_VECTOR, float64, float64), cache=True)
def reduced_penetration(phi, tolerance, gain):
    """(n,) signed distances, m, with each penetration φ < 0 replaced by gain · min(φ + tolerance, 0)."""
    out = np.empty_like(phi)
    for i in range(phi.shape[0]):
        out[i] = gain * min(phi[i] + tolerance, 0.0) if phi[i] < 0.0 else phi[i]
    return out


class InverseDynamicsController:
    """Torques from state and desired accelerations, predicting the contact forces.

    Parameters
    ----------
    robot : the robot model (or a robot name / robot.toml path).
    environment : surfaces and movable bodies; default: flat ground with μ = 1
        and the robot configuration's ``[[objects]]``.
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
    ) -> None:
        self.robot = robot if isinstance(robot, RobotModel) else RobotModel(robot)
        if environment is None:
            objects = tuple(MovableBody(o) for o in self.robot.config.objects)
            environment = Environment.flat_ground(1.0, objects)
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
        self.detector = ContactDetector(self.robot, environment, margin=margin, samples_per_contact=samples_per_contact)
        self.formulation = self._make(formulation, formulation_options)
        r = self.robot
        self.m = r.nv + 6 * len(environment.objects)
        self.actuated = as_index(r.actuated_dofs)
        self.unactuated = as_index(np.concatenate([r.unactuated_dofs, np.arange(r.nv, self.m)]))
        self.last_contacts: ContactSet | None = None
        mass = r.total_mass() + sum(body.mass for body in environment.objects)
        self.certifier = Certifier(r.torque_limits, mass)
        self._warm_up()

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

    def initial_object_states(self) -> dict[str, ObjectState]:
        return {o.name: o.initial_state() for o in self.environment.objects}

    # ------------------------------------------------------------------ the tick
    def check_state(self, state: RobotState) -> RobotState:
        """``state`` validated against the robot and its world: float arrays of the right shapes, finite, a
        unit base quaternion, known movable bodies, sensed forces (k, 3). Raises InputError subclasses naming
        the field."""
        q, v = self.robot.check_state(state.q, state.v)
        objects = {name: s.validated(name) for name, s in state.objects.items()} if state.objects else {}
        for name in objects:
            self.environment.object_index(name)  # NameNotFound for a body the environment does not have
        sensed = None if state.sensed_forces is None else self._check_sensed_forces(state.sensed_forces)
        return RobotState(q, v, state.t, objects, sensed, state.contact_mask)

    def build_problem(
        self, state: RobotState, qdd_des: Array, tracking: Tracking | None = None, *, checked: bool = False
    ) -> tuple[ContactProblem, dict[str, float]]:
        """Validate the input (unless ``checked``: the caller validated ``state`` with :meth:`check_state` and
        computed ``qdd_des`` and ``tracking`` from it), update the model, detect contacts and assemble the
        problem."""
        t0 = time.perf_counter()
        r = self.robot
        if not checked:
            state = self.check_state(state)
            qdd_des = check_vector("qdd_des", qdd_des, r.nu)
            if tracking is not None:
                tracking = Tracking(
                    check_vector("position_error", tracking.position_error, r.nu),
                    check_vector("velocity_error", tracking.velocity_error, r.nu),
                    None if tracking.integral_error is None
                    else check_vector("integral_error", tracking.integral_error, r.nu),
                )  # fmt: skip
        q, v, objects = state.q, state.v, state.objects
        r.update(q, v)
        t1 = time.perf_counter()
        mask = state.contact_mask
        if mask is not None:
            mask = np.asarray(mask, dtype=bool)
            if mask.shape != (len(r.sphere_names),):
                raise ShapeError("contact_mask", (len(r.sphere_names),), mask.shape)
        nv = r.nv
        if self.activation_distance is None:
            contacts, N, S, T = self.detector.detect_rows(objects, mask)
        else:  # only contacts whose predicted gap at the end of the period is within the activation distance
            velocity = v if self.m == nv else np.concatenate([v, self._object_velocities(objects)])
            contacts, N, S, T = self.detector.detect_rows(
                objects, mask, velocity=velocity, dt=self.dt, activation_distance=self.activation_distance
            )
        self.last_contacts = contacts
        t2 = time.perf_counter()

        # fresh arrays each tick: a result keeps its problem (for on-demand residuals) after the next tick
        if self.m == nv:
            M, f_ext, v_all = r.M.copy(), np.negative(r.bias), v.copy()
        else:
            M, f_ext, v_all = np.zeros((self.m, self.m)), np.empty(self.m), np.empty(self.m)
            M[:nv, :nv] = r.M
            np.negative(r.bias, out=f_ext[:nv])
            v_all[:nv] = v
        for i, body in enumerate(self.environment.objects):
            s = objects.get(body.name)
            if s is None:
                raise InputError(f"the state has no pose for movable body {body.name!r}")
            rotation = s.rotation
            block = slice(nv + 6 * i, nv + 6 * i + 6)
            M[block, block] = body.inertia(rotation)
            f_ext[block] = body.external_force(rotation, s.angular_velocity, self.environment.gravity)
            v_all[block] = np.concatenate([s.linear_velocity, s.angular_velocity])
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
            qd_des=self._joint_velocity_now(v_all, N, S, T) + self.dt * qdd_des,
            N=N,
            S=S,
            T=T,
            phi=self._phi_for_problem(contacts.phi),
            mu=contacts.mu,
            contact_ids=contacts.ids,
            normals=contacts.normals,
            tangents_s=contacts.tangents_s,
            tangents_t=contacts.tangents_t,
            sensed_force=sensed,
        )
        if tracking is not None:
            problem.position_error = tracking.position_error
            problem.velocity_error = tracking.velocity_error
            problem.integral_error = tracking.integral_error
        problem.kp, problem.kd, problem.ki = r.pid_gains.kp, r.pid_gains.kd, r.pid_gains.ki  # the pid baseline
        t3 = time.perf_counter()
        return problem, {"model": t1 - t0, "contacts": t2 - t1, "build": t3 - t2}

    def _object_velocities(self, objects: Mapping[str, ObjectState]) -> Array:
        """(6 b,) the movable bodies' velocities (linear, angular; world), in the problem's column order."""
        out = np.zeros(self.m - self.robot.nv)
        for i, body in enumerate(self.environment.objects):
            s = objects.get(body.name)
            if s is not None:
                out[6 * i : 6 * i + 3], out[6 * i + 3 : 6 * i + 6] = s.linear_velocity, s.angular_velocity
        return out

    def _joint_velocity_now(self, v_all: Array, N: Array, S: Array, T: Array) -> Array:
        """(nu,) the actuated velocity that q̇_des = q̇ + Δt q̈_des starts from.

        By default the measured q̇. With ``consistent_contact_velocity``, the measured q̇ plus the
        least-squares actuated correction that brings every active contact to rest relative to what it
        touches, base and objects unchanged: a landing foot's approach velocity is then taken up by its
        own joints rather than by an impulse on the whole robot. Contacts already at rest are unchanged.
        """
        qd = v_all[self.actuated]
        if not self.consistent_contact_velocity or N.shape[0] == 0:
            return qd
        J = np.concatenate([N, S, T])
        return qd + rest_correction(J[:, self.actuated], J @ v_all)

    def _phi_for_problem(self, phi: Array) -> Array:
        """Signed distances with penetrations reduced as configured (see the class docstring)."""
        tol, gain = self.penetration_tolerance, self.penetration_gain
        if tol == 0.0 and gain == 1.0:
            return phi
        return reduced_penetration(phi, tol, gain)

    def solve(
        self, state: RobotState, qdd_des: Array, tracking: Tracking | None = None, *, checked: bool = False
    ) -> SolveResult:
        """Torques for one tick (``checked``: see :meth:`build_problem`). Raises InputError subclasses on
        malformed input; solver failure is ``found=False``."""
        started = time.perf_counter()
        problem, timings = self.build_problem(state, qdd_des, tracking, checked=checked)
        result = self.formulation.solve(problem)
        if result.found:
            certified = time.perf_counter()
            certificate = self.certifier.check(problem, result, self.formulation.contact_model)
            if not certificate.passed:
                result.found, result.certificate = False, certificate.check
                result.message = f"{certificate.message()} ({result.message})" if result.message else \
                    certificate.message()  # fmt: skip
            timings["certificate"] = time.perf_counter() - certified
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
