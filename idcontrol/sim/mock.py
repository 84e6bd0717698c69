"""A simulator without physics, for tests: it satisfies :class:`~idcontrol.sim.base.Simulator` by a rule simple
enough to replay, so the bridge loop, the daemon and the test harness run without a physics engine.

Each step of Δt = ``timestep`` s drives every actuated joint as a unit double integrator by its torque, clamped
to the robot's torque limits (no gravity, no contact, no coupling between joints), and holds the floating base
and the movable bodies where they started::

    v_a ← v_a + Δt τ / inertia,   q ← q ⊕ Δt v   (semi-implicit Euler; ⊕: Pinocchio's integrate)

The contact forces it reports are zero. :attr:`MockSim.applied` is the last torque applied, and :func:`replay`
runs the rule on a sequence of torques, so a test can check that each command reached the simulator.
"""

from __future__ import annotations

from collections.abc import Iterable

import numpy as np
import pinocchio as pin
from numpy.typing import NDArray

from idcontrol.contacts.world import ObjectState
from idcontrol.errors import ConfigError
from idcontrol.robot.model import RobotModel
from idcontrol.sim.base import SimState, SimulatorBase, base_fell
from idcontrol.validation import check_vector

Array = NDArray[np.float64]


class MockSim(SimulatorBase):
    """A deterministic stand-in for a physics back end (see the module's docstring).

    robot, mu, timestep, with_objects, object_mu : as every back end's (:class:`~idcontrol.sim.base.SimulatorBase`;
    the frictions are not used).  inertia : kg·m² (kg for a prismatic joint) of every actuated joint, > 0.
    initial : (nq,) configuration :meth:`reset` returns to (default: the standing posture).
    """

    kind = "mock"

    def __init__(
        self,
        robot: RobotModel | str,
        mu: float = 1.0,
        timestep: float = 1e-3,
        with_objects: bool = False,
        *,
        object_mu: float | None = None,
        inertia: float = 1.0,
        initial: Array | None = None,
    ) -> None:
        super().__init__(robot, mu, timestep, with_objects, object_mu=object_mu)
        if not (np.isfinite(inertia) and inertia > 0.0):
            raise ConfigError(f"mock: inertia must be a finite number > 0, got {inertia!r}")
        r = self.robot
        self.inertia = float(inertia)
        self.initial = r.standing_configuration() if initial is None else r.check_state(initial, np.zeros(r.nv))[0]
        self._act = np.asarray(r.actuated_dofs, dtype=np.intp)
        self._limits = np.asarray(r.torque_limits, dtype=float)
        self._objects = {o.name: ObjectState(o.initial_position, o.initial_orientation_xyzw) for o in self.objects}
        self.reset()

    def reset(self, q: Array | None = None, v: Array | None = None) -> None:
        """Restart at time 0 from ``q`` (nq,), ``v`` (nv,) (default: ``initial``, at rest); the base's velocity is
        held at zero."""
        r = self.robot
        q, v = r.check_state(self.initial if q is None else q, np.zeros(r.nv) if v is None else v)
        self._q, self._v = q.copy(), np.zeros(r.nv)
        self._v[self._act] = v[self._act]
        self._steps = 0
        self.applied = np.zeros(r.nu)

    @property
    def time(self) -> float:
        """Simulated time, s."""
        return self._steps * self.timestep

    def state(self) -> SimState:
        """The current state (fresh arrays)."""
        forces = np.zeros((len(self.robot.sphere_names), 3))
        return SimState(self.time, self._q.copy(), self._v.copy(), dict(self._objects), forces)

    def step(self, tau: Array) -> None:
        """Apply ``tau`` (nu,), N·m (N), clamped to the torque limits, for one step (ShapeError / NonFiniteError,
        without stepping, for a malformed one)."""
        applied = np.clip(check_vector("tau", tau, self.robot.nu), -self._limits, self._limits)
        self._v[self._act] += self.timestep * applied / self.inertia
        self._q = pin.integrate(self.robot.model, self._q, self.timestep * self._v)
        self.applied = applied
        self._steps += 1

    def fell(self, min_base_height: float) -> bool:
        """Whether the floating base's origin is below ``min_base_height`` (world z, m): it holds still."""
        return base_fell(self.robot, self._q, self._q[2], min_base_height)


def replay(sim: MockSim, torques: Iterable[Array]) -> list[SimState]:
    """The states after each of ``torques`` (nu,) applied in turn to ``sim``, from its current state."""
    out = []
    for tau in torques:
        sim.step(tau)
        out.append(sim.state())
    return out
