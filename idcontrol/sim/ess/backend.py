"""``bridge.kind = "ess"``: a compliant multi-contact simulator on the ESS integrator, with a known crossing order.

:class:`EssSim` integrates a robot (its URDF through Pinocchio: forward dynamics by ABA) with spring-damper
point contacts at the contact spheres of its ``robot.toml`` against the ground plane z = 0 and elasto-plastic
bristle friction (smooth; :mod:`idcontrol.sim.ess.robot`), using the ESS integrator
(:mod:`idcontrol.sim.ess.integrator`): touchdowns and lift-offs are guards crossed one at a time in their
predicted order, and each step's end (the control tick's boundary) is a guard too, so no step passes it.
After each :meth:`EssSim.step`, :attr:`EssSim.last_crossings` lists the contact events of that step in the
order they were crossed, with their times; the bridge sends them with the next state (``crossings``).

Parameters of the contact (the launch file's ``[bridge]`` table, see :mod:`idcontrol.settings`):

* ``stiffness`` k (default :data:`DEFAULT_STIFFNESS` = 1e6 N/m per contact) and ``damping`` b (default
  :data:`DEFAULT_DAMPING` = 2000 N·s/m per contact): normal force max(0, k d + b ḋ); the quadruped (4.8 kg)
  sinks 12 µm on four feet at rest. The controllers assume rigid contact: on softer ground the Coulomb LCP's
  diagonal stance (kp 1000, kd 60) bounced off within 1 s (k = 2e5 or 5e5 N/m), and k = 2e4 to 1e5 N/m with b =
  300 to 500 N·s/m ended even the two-stage QP's stand in a joint-velocity stop within 0.3 s (measured);
* ``epsilon`` ε (default :data:`DEFAULT_EPSILON` = 5e-6 m): the guards' band half-width, in metres of gap;
* ``slip_velocity`` v_e (default :data:`DEFAULT_SLIP_VELOCITY` = 1e-4 m/s): the bristle friction's creep scale:
  a foot loaded at a fraction ρ of its friction cone creeps at v_e ρ / sqrt(1 − ρ²).

Liveness (the integrator's class) fails where a contact's gap changes slower than ``min_rate`` (default
ε per step: a guard would take longer than a step to cross its band): a grazing touchdown or lift-off is then
crossed where the ODE solver's event root finder locates it (``located`` in :attr:`EssSim.last_crossings`);
a foot resting on the ground sits away from its guards (12 µm deep with the defaults, 2.4 ε; a lighter load
may rest inside the band, where its guard is located rather than projected); sticking is no guard at all with
the bristle friction (a foot held by its bristle's spring).

Sensed contact forces (:meth:`EssSim.state`): the mean force on each sphere over the last step (its impulse
over the step divided by the step), world frame, N: exact for the integrated trajectory.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from numpy.typing import NDArray

from idcontrol.errors import ConfigError
from idcontrol.robot.model import RobotModel
from idcontrol.sim.base import SimState, SimulatorBase, base_fell
from idcontrol.sim.ess.integrator import END, TICK, Crossing, EssIntegrator, EssStats, GuardMemory
from idcontrol.sim.ess.robot import RobotContactSystem
from idcontrol.validation import check_vector

Array = NDArray[np.float64]

DEFAULT_STIFFNESS = 1.0e6  # N/m per contact
DEFAULT_DAMPING = 2000.0  # N·s/m per contact
DEFAULT_EPSILON = 5e-6  # m of gap
DEFAULT_SLIP_VELOCITY = 1e-4  # m/s


@dataclass(frozen=True, slots=True)
class ContactCrossing:
    """A contact event: time t (s), the contact sphere, ``touchdown`` or ``liftoff``, and how the integrator
    crossed it (``projected``, ``located``, ``swept``)."""

    t: float
    sphere: str
    event: str
    how: str

    @property
    def label(self) -> str:
        """``"sphere/event"``, e.g. ``"LF_foot/touchdown"``."""
        return f"{self.sphere}/{self.event}"


class EssSim(SimulatorBase):
    """The robot on compliant ground, integrated by the ESS integrator; satisfies :class:`~idcontrol.sim.Simulator`.

    Parameters
    ----------
    robot : the robot model, or a robot name / robot.toml path.
    mu : friction coefficient of the ground (finite).
    timestep : the step (a control tick), s; its boundary is a guard.
    with_objects : must be False for a robot with ``[[objects]]`` (movable bodies are not modelled).
    object_mu : unused (the constructor signature of every back end).
    stiffness N/m, damping N·s/m, epsilon m, slip_velocity m/s : the contact (module docstring).
    min_rate : the integrator's liveness bound, m/s of gap (default epsilon / timestep).
    rtol, atol : the ODE solver's tolerances (atol on positions m and rad; ×100 on velocities and impulses,
        ×1e-4 on the friction bristles).
    method : the ODE solver of the integration steps (``solve_ivp``'s name; RK45 is the paper's dopri5).
    engine : the integrator's engine (:class:`~idcontrol.sim.ess.integrator.EssIntegrator`): ``"auto"``
        (default) runs each step as one compiled call (the robot's dynamics compiled,
        :mod:`idcontrol.sim.ess.dynamics`) where the robot's joints allow it, else the Python engine on scipy
        and Pinocchio; ``"scipy"`` forces the latter. The compiled code is loaded (or compiled, the first time)
        when the simulator is built, not in its first step.
    initial : (nq,) configuration :meth:`reset` returns to (default: the standing posture at rest on the springs:
        raised until no sphere penetrates, then lowered by its weight over the touching spheres' stiffness).
    """

    kind = "ess"

    def __init__(
        self,
        robot: RobotModel | str,
        mu: float = 1.0,
        timestep: float = 1e-3,
        with_objects: bool = False,
        *,
        object_mu: float | None = None,
        stiffness: float = DEFAULT_STIFFNESS,
        damping: float = DEFAULT_DAMPING,
        epsilon: float = DEFAULT_EPSILON,
        slip_velocity: float = DEFAULT_SLIP_VELOCITY,
        min_rate: float | None = None,
        rtol: float = 1e-5,
        atol: float = 1e-8,
        method: str = "RK45",
        initial: Array | None = None,
        engine: str = "auto",
    ) -> None:
        super().__init__(robot, mu, timestep, with_objects, object_mu=object_mu)
        r = self.robot
        if self.objects:
            raise ConfigError(
                f"ess: robot {r.name!r} has movable bodies ([[objects]]); the ess simulator models "
                f"only the robot on the ground plane (use bridge.kind 'mujoco' or 'rigid')"
            )
        self.system = RobotContactSystem(
            r,
            stiffness=stiffness,
            damping=damping,
            mu=mu,
            slip_velocity=slip_velocity,
            min_cone=mu * stiffness * epsilon,
        )
        s = self.system
        if min_rate is None:
            min_rate = epsilon / self.timestep
        # bristles ~0.1 mm deep whose error the bristle damping turns into force: 1e-4 of atol keeps a sliding
        # contact's friction within 1e-4 of μ f_n (atol itself: 0.5 % weak, measured on a sliding block)
        atol_vector = np.concatenate(
            [
                np.full(s.nq, atol),
                np.full(s.nv, 100 * atol),
                np.full(3 * s.k, 100 * atol),
                np.full(2 * s.k, 1e-4 * atol),
            ]
        )
        self.integrator = EssIntegrator(
            s, epsilon, min_rate=min_rate, rtol=rtol, atol=atol_vector, method=method, engine=engine
        )
        self.epsilon, self.mu = float(epsilon), float(mu)
        self._labels = [(name, "touchdown") for name in r.sphere_names[: s.k]]
        self._labels += [(name, "liftoff") for name in r.sphere_names[: s.k]]
        self._act = np.asarray(r.actuated_dofs, dtype=np.intp)
        self.initial = self._resting_posture() if initial is None else r.check_state(initial, np.zeros(r.nv))[0]
        self.last_crossings: tuple[ContactCrossing, ...] = ()
        self.reset()
        if self.integrator.engine == "compiled":  # load the kernel now: an empty interval, on copies
            self.integrator.advance(self._x.copy(), 0.0, 0.0, self._memory.copy())

    def _resting_posture(self) -> Array:
        """The standing posture; a floating base raised until no sphere penetrates the ground, then lowered by
        m g / (k n) onto the n spheres that touch it (static equilibrium of the springs, if the weight is shared)."""
        r, s = self.robot, self.system
        q = r.standing_configuration()
        if not s.k:
            return q
        x = np.concatenate([q, np.zeros(s.nv + 5 * s.k)])
        phi = s.gaps(x)
        q[2] -= phi.min()
        touching = int(np.count_nonzero(phi - phi.min() < 1e-6))
        q[2] -= r.total_mass() * 9.81 / (s.stiffness * touching)
        return q

    # ------------------------------------------------------------------ state exchange
    @property
    def time(self) -> float:
        """Simulated time, s."""
        return self._ticks * self.timestep

    @property
    def stats(self) -> EssStats:
        """The integrator's counters since construction (projections, crossings by kind, solver calls)."""
        return self.integrator.stats

    @property
    def memory(self) -> GuardMemory:
        """The guards' memory: ``side[:k]`` is each contact sphere's mode (True: in contact)."""
        return self._memory

    def reset(self, q: Array | None = None, v: Array | None = None) -> None:
        """Restart at time 0 from ``q`` (nq,), ``v`` (nv,) (default: ``initial``, at rest)."""
        r, s = self.robot, self.system
        q, v = r.check_state(self.initial if q is None else q, np.zeros(r.nv) if v is None else v)
        self._x = np.concatenate([q, v, np.zeros(5 * s.k)])
        self._memory = self.integrator.start(self._x)
        self._ticks = 0
        self._forces = np.zeros((len(r.sphere_names), 3))
        self.last_crossings = ()

    def state(self) -> SimState:
        """The current state (fresh arrays) in idcontrol's conventions; ``contact_forces`` is the mean force of the
        last step on each sphere."""
        s = self.system
        crossings = tuple((c.label, c.t, c.how) for c in self.last_crossings)
        return SimState(self.time, s.q_of(self._x).copy(), s.v_of(self._x).copy(), {}, self._forces.copy(), crossings)

    def contact_forces(self) -> Array:
        """(k, 3) mean force the ground applied on each contact sphere during the last step, world frame, N."""
        return self._forces.copy()

    def fell(self, min_base_height: float) -> bool:
        """Whether the floating base's origin is below ``min_base_height`` (world z, m) or the state is not finite."""
        return base_fell(self.robot, self._x, self._x[2], min_base_height)

    # ------------------------------------------------------------------ stepping
    def step(self, tau: Array) -> None:
        """Advance one step with joint torques ``tau`` (nu,), N·m, clipped to the robot's limits and held over the
        step. Raises ShapeError / NonFiniteError for a malformed ``tau`` and
        :class:`~idcontrol.errors.SimulationError` if the integration fails (the state is then unchanged)."""
        r, s = self.robot, self.system
        tau = np.clip(check_vector("tau", tau, r.nu), -r.torque_limits, r.torque_limits)
        s.tau[:] = 0.0
        s.tau[self._act] = tau
        x = self._x.copy()
        s.impulses_of(x)[:] = 0.0
        t0, t1 = self._ticks * self.timestep, (self._ticks + 1) * self.timestep
        memory = self._memory.copy()
        advance = self.integrator.advance(x, t0, t1, memory)
        x = advance.x
        if s.floating:
            x[3:7] /= np.linalg.norm(x[3:7])
        self._x, self._memory = x, memory
        self._ticks += 1
        self._forces[: s.k] = s.impulses_of(x) / self.timestep
        self.last_crossings = tuple(self._contact_crossing(c) for c in advance.crossings if c.guard != TICK)

    def _contact_crossing(self, c: Crossing) -> ContactCrossing:
        sphere, event = self._labels[c.guard]
        return ContactCrossing(c.t, sphere, event, c.how)

    def contact_modes(self) -> NDArray[np.bool_]:
        """(k,) True where the contact sphere is in contact (its touchdown guard crossed)."""
        return self._memory.side[: self.system.k].copy()


__all__ = ["END", "ContactCrossing", "EssSim"]
