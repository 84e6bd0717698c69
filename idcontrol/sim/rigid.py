"""Rigid-contact time-stepping simulator: the contact model of the paper's simulator (Moby), matched to the controller.

Each step of length Δt solves one velocity-level impulse LCP, the Stewart–Trinkle /
Anitescu–Potra model with a four-facet friction pyramid (spec §2.8, §4.1–4.3, with
the joint torques given instead of the desired velocities)::

    v⁺ = v* + Δt M⁻¹ (Nᵀ f_N + Fᵀ f_F),   v* = v + Δt M⁻¹ (Pᵀ τ − h)
    0 ≤ f_N ⊥ N v⁺ + φ/Δt ≥ 0                 non-penetration, with the gap of every candidate
    0 ≤ f_F ⊥ F v⁺ + E λ ≥ 0                  F = [S; −S; T; −T]: friction opposes the sliding velocity
    0 ≤ λ  ⊥ μ f_N − Eᵀ f_F ≥ 0              λ ≈ the sliding speed; |f_S| + |f_T| ≤ μ f_N (the pyramid)

over z = [f_N (n); f_F (4n, [S+; S−; T+; T−]); λ (one per finite-μ contact)], in force units
(impulse / Δt). A contact with μ = ∞ has no λ row: its tangential velocity is zero. The LCP
matrix is [N; F] M⁻¹ [N; F]ᵀ plus the E / μ blocks: copositive, solved by the project's
Lemke (lexicographic anti-cycling, Tikhonov fallback); a step first tries the previous
step's active set, which is verified like any solution and gives way to Lemke when it fails.
The ± pairs of the no-slip rows make that matrix singular; when Lemke fails on them
(seen on the arm's four-finger grasp), the step is solved again with μ = 1e4 in their place.
Then q⁺ = q ⊕ Δt v⁺ (``pin.integrate``: semi-implicit Euler on the manifold).

The model is the controller's: same URDF (Pinocchio M and h, updated in place), same
contact spheres, same contact detection, Jacobian rows and tangent axes
(:class:`~idcontrol.contacts.detection.ContactDetector`), same worlds (half-spaces, height
maps, boxes; μ per surface). Movable bodies (``[[objects]]``) are six extra DoFs, velocity
[v_com; ω] in world axes as in the controller, integrated with the exponential map. Not
modelled: joint limits, joint damping/friction, contacts between movable bodies and static
surfaces (only the robot's spheres collide).

State exchange uses idcontrol's (Pinocchio) conventions, see :class:`SimState`.

Impact sampling (``impact_sampling=True``, offline studies only): at a touchdown event (a contact not loaded
in the previous step that reaches its surface during this one with an approach velocity), the simulator's
single simultaneous outcome is replaced by one seeded sample of Halm & Posa's Algorithm 1
(:func:`idcontrol.analysis.impacts.sample_outcome`) over the contacts touching then (the arriving ones and the
loaded ones), and the step goes on from the sampled velocity. :attr:`RigidSim.impacts` counts what happened.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field, replace
from typing import Any

import numpy as np
import pinocchio as pin
from numpy.typing import NDArray
from scipy.linalg import cho_factor, cho_solve, solve_triangular

from idcontrol.analysis.impacts import ImpactModel, forced_termination_step, sample_outcome
from idcontrol.contacts.detection import ContactDetector, ContactSet
from idcontrol.contacts.world import Environment, MovableBody, ObjectState
from idcontrol.errors import ConfigError, ContactSolveFailed, InputError
from idcontrol.robot.model import RobotModel
from idcontrol.settings import LaunchConfig
from idcontrol.sim.base import SimState, SimulatorBase, base_fell
from idcontrol.solvers.lemke import ACCEPT_TOL, lemke_regularized, polish

Array = NDArray[np.float64]

#: Friction coefficient standing for μ = ∞ in a step whose exact no-slip LCP Lemke could not solve.
MU_NO_SLIP = 1e4
#: m/s: a contact approaching its surface faster than this when it arrives makes a touchdown event.
IMPACT_MIN_APPROACH = 1e-3


@dataclass
class ImpactStats:
    """What impact sampling did during a run (:attr:`RigidSim.impacts`).

    events : touchdown events whose outcome was sampled.  contacts : contacts in their impacts, summed.
    lcps : Algorithm 1 increments solved.  unterminated : samples still colliding after N increments and the
    forced-termination one (the step's own LCP resolved the rest).  failures : events whose increment LCP was
    not solved (the simulator's own outcome was kept).  energy_ratio_max : the largest kinetic-energy ratio
    after / before a sampled impact.  approach_speed_max : m/s, the fastest arriving contact.
    spread_max : the largest ‖v_sample − v_sim‖_M / ‖v⁻ − v_sim‖_M, v_sim the simultaneous (Anitescu-Potra)
    outcome over the same contacts: how far the sample lands from it, relative to the impact's own size.
    """

    events: int = 0
    contacts: int = 0
    lcps: int = 0
    unterminated: int = 0
    failures: int = 0
    energy_ratio_max: float = 0.0
    approach_speed_max: float = 0.0
    spread_max: float = 0.0


@dataclass
class ContactStep:
    """The contact LCP of the last step and its solution (force units: impulse / Δt).

    contacts : the candidate contacts at the start of the step.
    objects : the movable bodies' states at the start of the step (for their contacts' rows).
    Q, q : the LCP, ``w = Q z + q``; z = [f_N; f_F (4n, [S+; S−; T+; T−]); λ (finite-μ contacts)].
    z, w : its solution.
    f_normal, f_s, f_t : (n,) normal and signed tangential forces along n̂, ŝ, t̂, N.
    finite : indices of the contacts with finite μ (the λ rows, in order).
    pivots : Lemke pivots (0 when the previous step's active set solved this one).
    regularization : Tikhonov ε Lemke needed (0 if none).
    no_slip_stand_in : Lemke failed on the exact no-slip rows of the μ = ∞ contacts, which were then given
        μ = :data:`MU_NO_SLIP` (and λ rows) instead.
    """

    contacts: ContactSet
    objects: dict[str, ObjectState] | None
    Q: Array
    q: Array
    z: Array
    w: Array
    f_normal: Array
    f_s: Array
    f_t: Array
    finite: Array
    pivots: int = 0
    regularization: float = 0.0
    no_slip_stand_in: bool = False


@dataclass
class _Body:
    """A movable body's state during the run (world frame)."""

    body: MovableBody
    position: Array
    rotation: Array
    velocity: Array = field(default_factory=lambda: np.zeros(6))  # [v_com; ω], world axes

    def state(self) -> ObjectState:
        quat = pin.Quaternion(self.rotation)
        return ObjectState(
            self.position.copy(),
            np.array([quat.x, quat.y, quat.z, quat.w]),
            self.velocity[:3].copy(),
            self.velocity[3:].copy(),
        )


def pyramid_lcp(
    R_w: Array, normal_rate: Array, tangent_rate: tuple[Array, Array], mu: Array, dt: float
) -> tuple[Array, Array, Array]:
    """The step's LCP (Q, q) in force units and the indices of the finite-μ contacts.

    R_w : (m, 5n) whitened columns L⁻¹[Nᵀ, Sᵀ, −Sᵀ, Tᵀ, −Tᵀ] (M = L Lᵀ), so R M⁻¹ Rᵀ = R_wᵀ R_w.
    normal_rate : (n,) N v* + φ/Δt, m/s; tangent_rate : (S v*, T v*), each (n,), m/s.
    mu : (n,) friction coefficients (inf: no λ row).
    """
    n = len(mu)
    finite = np.flatnonzero(np.isfinite(mu))
    size = 5 * n + len(finite)
    Q = np.zeros((size, size))
    Q[: 5 * n, : 5 * n] = R_w.T @ R_w
    lam = 5 * n + np.arange(len(finite))
    for direction in range(1, 5):  # E and −Eᵀ
        Q[direction * n + finite, lam] = 1.0
        Q[lam, direction * n + finite] = -1.0
    Q[lam, finite] = mu[finite]
    s_rate, t_rate = tangent_rate
    q = np.concatenate([normal_rate, s_rate, -s_rate, t_rate, -t_rate, np.zeros(len(finite))]) / dt
    return Q, q, finite


def solve_from_active_set(Q: Array, q: Array, active: Array) -> tuple[Array, Array] | None:
    """The LCP solution with z > 0 exactly on ``active`` (w = 0 there), or None if that guess is not one.

    Solves Q_AA z_A = −q_A and accepts the point only if it passes :func:`~idcontrol.solvers.lemke.lemke`'s
    own residual test (z ≥ 0, w ≥ 0, zᵀw = 0 to :data:`ACCEPT_TOL`, relative).
    """
    z = np.zeros(len(q))
    if active.size:
        try:
            z[active] = np.linalg.solve(Q[np.ix_(active, active)], -q[active])
        except np.linalg.LinAlgError:
            return None
    if not np.all(np.isfinite(z)):
        return None
    z, w, relative_residual = polish(Q, q, z, 1e-12)
    return (z, w) if relative_residual <= ACCEPT_TOL else None


class RigidSim(SimulatorBase):
    """A rigid-contact simulation of an idcontrol robot, stepped with joint torques.

    Parameters
    ----------
    robot : the robot model, or a robot name / robot.toml path.
    mu : friction coefficient of the default flat ground (``math.inf``: no slip); ignored with ``environment``.
    timestep : Δt, s.
    with_objects : the robot configuration's ``[[objects]]`` are movable bodies of the world.
    object_mu : friction coefficient of every object (default: each object's configured ``mu``).
    environment : the world (default: flat ground z = 0 for a floating-base robot, nothing for a fixed
        base, plus the objects); it must not hold objects when ``with_objects`` adds them.
    margin : candidate-contact distance, m (a body falling faster than margin / Δt may pass through).
    initial : (nq,) configuration :meth:`reset` returns to (default: the standing posture, raised
        so that no sphere penetrates the terrain).
    impact_sampling : replace the outcome of each touchdown event by a seeded sample of Algorithm 1 (see the
        module's docstring); ``impact_seed`` seeds it (the sequence restarts at :meth:`reset`).
    impact_step : Algorithm 1's impulse step h, N·s (default: at each event, the impulse that would stop its
        fastest arriving contact alone, n̂ᵀ(J M⁻¹ Jᵀ)n̂-weighted: the rocking block's 0.3 N·s is 1.08 times
        its corners'); ``impact_iterations``: its N.
    """

    kind = "rigid"

    @classmethod
    def from_launch(cls, config: LaunchConfig, robot: RobotModel, **options: Any) -> RigidSim:
        """The launch file's rigid simulator on its ``[bridge] terrain`` (the controller's world,
        :func:`idcontrol.control.factory.world_for`, with the simulator's friction)."""
        b = config.bridge
        terrain = {"seed": b.terrain_seed, "max_height": b.terrain_height}
        options.setdefault("environment", Environment.around(robot.floating_base, b.mu, b.terrain, **terrain))
        return super().from_launch(config, robot, **options)

    def __init__(
        self,
        robot: RobotModel | str,
        mu: float = 1.0,
        timestep: float = 1e-3,
        with_objects: bool = False,
        *,
        object_mu: float | None = None,
        environment: Environment | None = None,
        margin: float = 0.005,
        initial: Array | None = None,
        impact_sampling: bool = False,
        impact_seed: int = 0,
        impact_step: float | None = None,
        impact_iterations: int = 10,
    ) -> None:
        super().__init__(robot, mu, timestep, with_objects, object_mu=object_mu)
        r = self.robot
        if impact_step is not None and not (math.isfinite(impact_step) and impact_step > 0):
            raise ConfigError(f"impact_step must be a finite number > 0 N·s, got {impact_step}")
        if not isinstance(impact_iterations, int) or impact_iterations < 1:
            raise ConfigError(f"impact_iterations must be an integer >= 1, got {impact_iterations!r}")
        if not isinstance(impact_seed, int) or isinstance(impact_seed, bool) or impact_seed < 0:
            raise ConfigError(f"impact_seed must be an integer >= 0, got {impact_seed!r}")
        self.impact_sampling = bool(impact_sampling)
        self.impact_seed = impact_seed
        self.impact_step = impact_step
        self.impact_iterations = impact_iterations
        objects = tuple(MovableBody(o if object_mu is None else replace(o, mu=object_mu)) for o in self.objects)
        if environment is None:
            environment = Environment.around(r.floating_base, mu, objects=objects)
        elif objects:
            if environment.objects:
                raise ConfigError("with_objects adds the robot's objects to an environment that already has some")
            environment = Environment(environment.surfaces, objects, environment.gravity)
        self.environment = environment
        self.detector = ContactDetector(r, environment, margin=margin)
        self.m = r.nv + 6 * len(environment.objects)
        self._act = np.asarray(r.actuated_dofs, dtype=np.intp)
        self._f = np.empty(self.m)  # Pᵀτ − h (and the objects' f_ext), N / N·m
        self._M = np.zeros((self.m, self.m))
        self._forces = np.zeros((len(r.sphere_names), 3))
        self.last_step: ContactStep | None = None
        self._warm: tuple[tuple, Array] | None = None  # the last step's contact identities and active set
        self.initial = self._lifted_standing() if initial is None else r.check_state(initial, np.zeros(r.nv))[0]
        self.reset()

    def _lifted_standing(self) -> Array:
        """The standing posture, a floating base raised until no sphere penetrates the terrain."""
        r = self.robot
        q = r.standing_configuration()
        if r.floating_base:
            r.update(q, np.zeros(r.nv))
            contacts = self.detector.detect({b.name: b.initial_state() for b in self.environment.objects})
            if contacts.n and contacts.phi.min() < 0.0:
                q[2] -= contacts.phi.min() / max(float(contacts.normals[np.argmin(contacts.phi), 2]), 1e-3)
        return q

    # ------------------------------------------------------------------ state exchange
    @property
    def time(self) -> float:
        """Simulation time, s."""
        return self._t

    def reset(
        self, q: Array | None = None, v: Array | None = None, objects: dict[str, ObjectState] | None = None
    ) -> None:
        """Restart at time 0 from ``q`` (nq,), ``v`` (nv,) (default: ``initial``, at rest) and object states."""
        r = self.robot
        q = self.initial if q is None else q
        v = np.zeros(r.nv) if v is None else v
        q, v = r.check_state(q, v)
        self._q, self._v = q.copy(), v.copy()
        objects = objects or {}
        for name in objects:
            self.environment.object_index(name)
        self._bodies = []
        for body in self.environment.objects:
            s = objects.get(body.name, body.initial_state()).validated(body.name)
            velocity = np.concatenate([s.linear_velocity, s.angular_velocity])
            self._bodies.append(_Body(body, s.position.copy(), s.rotation.copy(), velocity))
        self._t = 0.0
        self._forces[:] = 0.0
        self._warm = None
        self.last_step = None
        self._loaded: set = set()  # identities of the contacts that carried a normal force in the last step
        self._impact_rng = np.random.default_rng(self.impact_seed) if self.impact_sampling else None
        self.impacts = ImpactStats()

    def object_states(self) -> dict[str, ObjectState]:
        return {b.body.name: b.state() for b in self._bodies}

    def state(self) -> SimState:
        """The current state (fresh arrays) in idcontrol's conventions."""
        return SimState(self._t, self._q.copy(), self._v.copy(), self.object_states(), self._forces.copy())

    def contact_forces(self) -> Array:
        """(k, 3) force the environment applied on each contact sphere during the last step, world frame, N."""
        return self._forces.copy()

    def fell(self, min_base_height: float) -> bool:
        """Whether the floating base's origin is below ``min_base_height`` (world z, m) or the state is not finite."""
        return base_fell(self.robot, self._q, self._q[2], min_base_height)

    # ------------------------------------------------------------------ stepping
    def step(self, tau: Array) -> None:
        """Advance by Δt with joint torques ``tau`` (nu,), N·m, clipped to the robot's limits.

        Raises :class:`ContactSolveFailed` (state unchanged) if the contact LCP cannot be solved.
        """
        r, dt, nv = self.robot, self.timestep, self.robot.nv
        tau = np.clip(np.asarray(tau, dtype=float), -r.torque_limits, r.torque_limits)
        if tau.shape != (r.nu,):
            raise InputError(f"tau must have shape ({r.nu},), got {tau.shape}")
        r.update(self._q, self._v)
        M, f, v = self._M, self._f, np.empty(self.m)
        M[:nv, :nv] = r.M
        np.negative(r.bias, out=f[:nv])
        f[self._act] += tau
        v[:nv] = self._v
        for i, b in enumerate(self._bodies):
            block = slice(nv + 6 * i, nv + 6 * i + 6)
            M[block, block] = b.body.inertia(b.rotation)
            f[block] = b.body.external_force(b.rotation, b.velocity[3:], self.environment.gravity)
            v[block] = b.velocity
        objects = {b.body.name: b.state() for b in self._bodies} if self._bodies else None
        contacts, N, S, T = self.detector.detect_rows(objects)
        factor = cho_factor(M, lower=True, check_finite=False)
        v_free = v + dt * cho_solve(factor, f, check_finite=False)
        self._forces[:] = 0.0
        if contacts.n == 0:
            self.last_step = None
            self._loaded = set()
            self._advance(v_free)
            return
        rows = (N, S, T)
        if self._impact_rng is not None:
            sampled = self._sample_touchdown(contacts, rows, M, v, v_free)
            if sampled is not None:
                v = sampled
                v_free = v + dt * cho_solve(factor, f, check_finite=False)
        self._advance(self._solve_contacts(contacts, objects, factor, v_free, rows))

    def _sample_touchdown(
        self, contacts: ContactSet, rows: tuple[Array, Array, Array], M: Array, v: Array, v_free: Array
    ) -> Array | None:
        """At a touchdown event, one Algorithm-1 sample of the velocity after the impact (m,); else None."""
        N, S, T = rows
        approach = N @ v
        arriving = (contacts.phi + self.timestep * (N @ v_free) <= 0.0) & (approach < -IMPACT_MIN_APPROACH)
        new = np.array([c not in self._loaded for c in contacts.ids], dtype=bool)
        if not (arriving & new).any():
            return None
        loaded = ~new
        touching = np.flatnonzero(arriving | loaded)
        mu = np.where(np.isinf(contacts.mu[touching]), MU_NO_SLIP, contacts.mu[touching])
        stats = self.impacts
        try:
            model = ImpactModel.from_tangents(M, N[touching], S[touching], T[touching], mu)
            step = self.impact_step
            if step is None:  # the impulse that would stop the fastest arriving contact alone
                inverse_mass = np.einsum("ij,ji->i", model.N, model.Minv_J[:, : model.k])
                stopping = -model.normal_velocity(v) / inverse_mass
                step = float(stopping[arriving[touching]].max())
            sample = sample_outcome(model, v, step, self.impact_iterations, self._impact_rng)
            out = sample.v
            if not sample.terminated:
                tol = model.collision_tol(v)
                out, _, _ = model.increment(out, np.full(model.k, forced_termination_step(model, 0.1 * step)))
                stats.lcps += 1
                stats.unterminated += model.colliding(out, tol)
            simultaneous = model.simultaneous(v)
        except ContactSolveFailed:
            stats.failures += 1
            return None
        stats.events += 1
        stats.contacts += model.k
        stats.lcps += sample.steps
        before = model.kinetic_energy(v)
        if before > 0:
            stats.energy_ratio_max = max(stats.energy_ratio_max, model.kinetic_energy(out) / before)
        stats.approach_speed_max = max(stats.approach_speed_max, float(-approach[arriving].min()))
        size = model.kinetic_energy(v - simultaneous)
        if size > 0:
            stats.spread_max = max(stats.spread_max, math.sqrt(model.kinetic_energy(out - simultaneous) / size))
        return out

    def _solve_contacts(
        self, contacts: ContactSet, objects, factor, v_free: Array, rows: tuple[Array, Array, Array]
    ) -> Array:
        """Solve the step's LCP; fill the per-sphere forces and ``last_step``; return v⁺ (m,)."""
        dt, n = self.timestep, contacts.n
        N, S, T = rows
        R = np.vstack([N, S, -S, T, -T])  # (5n, m)
        R_w = solve_triangular(factor[0], R.T, lower=True, check_finite=False)
        rates = (N @ v_free + contacts.phi / dt, (S @ v_free, T @ v_free))
        mu = contacts.mu
        Q, q, finite = pyramid_lcp(R_w, *rates, mu, dt)
        warm = self._warm is not None and self._warm[0] == contacts.ids
        solved = solve_from_active_set(Q, q, self._warm[1]) if warm else None
        pivots, eps, stand_in = 0, 0.0, False
        if solved is None:
            sol = lemke_regularized(Q, q, original_tol=1e-7)
            if not sol.found and np.isinf(mu).any():  # the ± pairs of no-slip rows can defeat Lemke: μ = 1e4
                stand_in = True
                Q, q, finite = pyramid_lcp(R_w, *rates, np.where(np.isinf(mu), MU_NO_SLIP, mu), dt)
                sol = lemke_regularized(Q, q, original_tol=1e-7)
            if not sol.found:
                raise ContactSolveFailed(f"t = {self._t:.4f} s, {n} contacts: {sol.message}")
            solved, pivots, eps = (sol.z, sol.w), sol.pivots, sol.regularization
        z, w = solved
        self._warm = (contacts.ids, np.flatnonzero(z > 0.0)) if not stand_in else None
        f_normal = z[:n]
        self._loaded = {contacts.ids[i] for i in np.flatnonzero(f_normal > 0.0)}
        f_s, f_t = z[n : 2 * n] - z[2 * n : 3 * n], z[3 * n : 4 * n] - z[4 * n : 5 * n]
        self.last_step = ContactStep(
            contacts, objects, Q, q, z, w, f_normal.copy(), f_s, f_t, finite, pivots, eps, stand_in
        )
        force = (
            f_normal[:, None] * contacts.normals
            + f_s[:, None] * contacts.tangents_s
            + f_t[:, None] * contacts.tangents_t
        )
        np.add.at(self._forces, contacts.sphere, force)
        return v_free + dt * cho_solve(factor, R.T @ z[: 5 * n], check_finite=False)

    def _advance(self, v_next: Array) -> None:
        """q⁺ = q ⊕ Δt v⁺ for the robot (Pinocchio), exponential map for the bodies."""
        r, dt, nv = self.robot, self.timestep, self.robot.nv
        self._v = v_next[:nv].copy()
        self._q = pin.integrate(r.model, self._q, self._v * dt)
        for i, b in enumerate(self._bodies):
            b.velocity = v_next[nv + 6 * i : nv + 6 * i + 6].copy()
            b.position = b.position + dt * b.velocity[:3]
            b.rotation = pin.exp3(dt * b.velocity[3:]) @ b.rotation
        self._t += dt
