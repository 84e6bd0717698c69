"""A Pinocchio robot with compliant point contacts at its contact spheres, as an event-selected system.

State x (n = nq + nv + 5k): the configuration q (Pinocchio layout; the base quaternion is integrated as four
numbers and normalized when read), the velocity v, the impulse each contact sphere has received since the start
of the control tick (k, 3), N·s, world frame (so that a tick's mean contact force is exact), and each sphere's
friction bristle deflection z (k, 2), m, world x and y.

Guards, per contact sphere i (k of them) against the ground plane z = 0: touchdown h_i = −φ_i and lift-off
h_{k+i} = +φ_i (partners), φ_i = z_centre − radius the gap, m. The mode of contact i is the touchdown guard's
side (True: in contact).

In contact, the force on the sphere at its lowest point p_i is

* normal: f_n = max(0, k d + b ḋ), d = −φ_i the penetration, m (a linear spring-damper that pushes, never
  pulls; k ``stiffness`` N/m, b ``damping`` N·s/m);
* tangential: elasto-plastic bristle friction (a Dahl/LuGre-type model, smooth): the contact point drags a
  bristle whose deflection z obeys ż = v_t − s (k_t / C) z, s = sqrt(|v_t|² + v_e²), C = max(μ f_n, C_min), and
  pushes back with f_t = −(k_t z + c_t v_t), held inside the cone |f_t| ≤ μ f_n. Sliding steadily, the bristle
  settles at k_t |z| = C |v_t| / s and the force is μ f_n (Coulomb, exactly: the cone holds it there); under a
  load below the cone it holds the foot elastically (deflection |f_t| / k_t) and creeps only at
  v_e ρ / sqrt(1 − ρ²), ρ = |f_t| / (μ f_n). k_t and c_t equal the normal k and b: the Coulomb LCP stands the
  quadruped on one diagonal pair of feet with |f_t| / f_n = 0.7, and a tangential spring ten or three times
  softer let that stance bounce off in under 1 s (measured). Unlike regularized Coulomb friction
  (f_t = −μ f_n v_t / sqrt(|v_t|² + v_s²), which creeps at v_s ρ and is stiff for small v_s), the bristle holds a
  standing foot without the ODE solver paying for it. C_min = μ k ε bounds the bristle's rate when the normal
  force vanishes, and the rate s k_t / C is capped at r_max = 2e4/s (a foot sliding at 1 m/s would otherwise
  make the ODE stiff at 4e5/s; the bristle then overshoots the cone's deflection and the cone clips the force, so
  sliding friction stays μ f_n); in the air ż = −z / τ_r (τ_r = 2 ms).
  There is no stick/slip guard.

The field is smooth within a mode except where the clamps max(0, ·) and the cone release a contact (the ODE
solver's step control takes those kinks; they are not guards). The joint torques are held constant over a tick
(zero-order hold, :attr:`RobotContactSystem.tau`).

Not modelled: joint limits, joint damping and friction, movable bodies, terrain other than the plane z = 0.
"""

from __future__ import annotations

import math
from typing import NamedTuple

import numpy as np
import pinocchio as pin
from numba import njit
from numpy.typing import NDArray

from idcontrol.errors import ConfigError
from idcontrol.robot.model import RobotModel
from idcontrol.sim.ess import dynamics
from idcontrol.sim.ess import system as ess_system

Array = NDArray[np.float64]
BoolArray = NDArray[np.bool_]


@njit(cache=True)
def contact_field(
    J, support, centres, radii, v, bristle, touching, params, tau, force, gap_rate, bristle_rate
):  # pragma: no cover
    """The contact forces, their generalized force and the bristles' rates, compiled (k spheres, nv DoFs).

    J : (6, nv) joint Jacobian columns in world (spatial velocity at the world origin, world axes).
    support : (k, nv) 1.0 on the DoFs that move sphere i.  centres : (k, 3) sphere centres, m.  radii : (k,) m.
    v : (nv,) velocity.  bristle : (k, 2) bristle deflections z, m.  touching : (k,) the contact mode.
    params : [k N/m, b N·s/m, μ, v_e m/s, k_t N/m, c_t N·s/m, C_min N, τ_r s, r_max 1/s] (module docstring).
    tau : (nv,) generalized force, N·m, to which Σ Jᵀ f is added.  force : (k, 3) out, N, world.
    gap_rate : (k,) out, φ̇ m/s.  bristle_rate : (k, 2) out, ż m/s.
    """
    k, nv = support.shape
    stiffness, damping, mu, v_e = params[0], params[1], params[2], params[3]
    k_t, c_t, c_min, relax, max_rate = params[4], params[5], params[6], params[7], params[8]
    twist = np.empty(6)
    for i in range(k):
        twist[:] = 0.0
        for j in range(nv):
            if support[i, j] != 0.0:
                for a in range(6):
                    twist[a] += J[a, j] * v[j]
        px, py, pz = centres[i, 0], centres[i, 1], centres[i, 2] - radii[i]
        wx, wy, wz = twist[3], twist[4], twist[5]
        vx = twist[0] + wy * pz - wz * py
        vy = twist[1] + wz * px - wx * pz
        vz = twist[2] + wx * py - wy * px
        gap_rate[i] = vz
        zx, zy = bristle[i, 0], bristle[i, 1]
        fx = fy = fz = 0.0
        if touching[i]:
            fz = max(stiffness * (radii[i] - centres[i, 2]) - damping * vz, 0.0)
            # elasto-plastic bristle: ż = v_t − s (k_t / C) z, s = sqrt(|v_t|² + v_e²), C = max(μ f_n, C_min)
            cone = mu * fz
            rate = min(math.sqrt(vx * vx + vy * vy + v_e * v_e) * k_t / max(cone, c_min), max_rate)
            dzx, dzy = vx - rate * zx, vy - rate * zy
            fx, fy = -(k_t * zx + c_t * vx), -(k_t * zy + c_t * vy)
            size = math.sqrt(fx * fx + fy * fy)
            if size > cone:  # never outside the friction cone (only when μ f_n < C_min or in a transient)
                shrink = cone / size
                fx, fy = fx * shrink, fy * shrink
        else:  # in the air the bristles relax
            dzx, dzy = -zx / relax, -zy / relax
        bristle_rate[i, 0], bristle_rate[i, 1] = dzx, dzy
        force[i, 0], force[i, 1], force[i, 2] = fx, fy, fz
        if fz == 0.0:
            continue
        mx, my, mz = py * fz - pz * fy, pz * fx - px * fz, px * fy - py * fx
        for j in range(nv):
            if support[i, j] != 0.0:
                tau[j] += J[0, j] * fx + J[1, j] * fy + J[2, j] * fz + J[3, j] * mx + J[4, j] * my + J[5, j] * mz


@njit(cache=True)
def configuration_rate(q, v, floating, out):  # pragma: no cover
    """q̇ (nq,) into ``out`` from a configuration q with a unit quaternion and v: base position R v_lin, quaternion
    ½ q ⊗ (ω, 0) (x y z w, ω in the base frame), joints v (one-DoF joints)."""
    if floating:
        x, y, z, w = q[3], q[4], q[5], q[6]
        a, b, c = v[0], v[1], v[2]
        out[0] = (1 - 2 * (y * y + z * z)) * a + 2 * (x * y - z * w) * b + 2 * (x * z + y * w) * c
        out[1] = 2 * (x * y + z * w) * a + (1 - 2 * (x * x + z * z)) * b + 2 * (y * z - x * w) * c
        out[2] = 2 * (x * z - y * w) * a + 2 * (y * z + x * w) * b + (1 - 2 * (x * x + y * y)) * c
        wx, wy, wz = v[3], v[4], v[5]
        out[3] = 0.5 * (w * wx + y * wz - z * wy)
        out[4] = 0.5 * (w * wy + z * wx - x * wz)
        out[5] = 0.5 * (w * wz + x * wy - y * wx)
        out[6] = -0.5 * (x * wx + y * wy + z * wz)
        for i in range(7, len(q)):
            out[i] = v[i - 1]
    else:
        for i in range(len(q)):
            out[i] = v[i]


class RobotContactSystem:
    """The ESS of ``robot`` on the ground plane z = 0 (floating-base robots; a fixed base has no contacts).

    stiffness N/m, damping N·s/m (normal, per contact); mu friction coefficient (finite); slip_velocity v_e m/s,
    the bristle friction's creep scale; min_cone C_min N (see the module docstring).
    """

    #: the bristle's stiffness and damping over the normal ones (see the module docstring)
    TANGENTIAL_RATIO = 1.0
    #: s, the bristles' relaxation in the air
    BRISTLE_RELAXATION = 2e-3
    #: 1/s, the fastest the bristle yields while sliding (the cone clips the force meanwhile)
    BRISTLE_MAX_RATE = 2e4

    def __init__(
        self,
        robot: RobotModel,
        *,
        stiffness: float,
        damping: float,
        mu: float,
        slip_velocity: float,
        min_cone: float = 1.0,
    ) -> None:
        if not (np.isfinite(stiffness) and stiffness > 0):
            raise ConfigError(f"ess: stiffness must be finite and > 0 N/m, got {stiffness!r}")
        if not (np.isfinite(damping) and damping >= 0):
            raise ConfigError(f"ess: damping must be finite and >= 0 N·s/m, got {damping!r}")
        if not (np.isfinite(mu) and mu >= 0):
            raise ConfigError(
                f"ess: mu must be finite and >= 0 (the regularized friction has no no-slip limit), got {mu!r}"
            )
        if not (np.isfinite(slip_velocity) and slip_velocity > 0):
            raise ConfigError(f"ess: slip_velocity must be finite and > 0 m/s, got {slip_velocity!r}")
        if not (np.isfinite(min_cone) and min_cone >= 0):
            raise ConfigError(f"ess: min_cone must be finite and >= 0 N, got {min_cone!r}")
        self.robot = robot
        self.model = model = robot.model
        self.data = model.createData()  # our own: the controller may share the RobotModel
        self.stiffness, self.damping, self.mu, self.slip_velocity = stiffness, damping, mu, slip_velocity
        self.floating = robot.floating_base
        first = 2 if self.floating else 1
        for j in range(first, model.njoints):
            joint = model.joints[j]
            if joint.nq != joint.nv:
                raise ConfigError(
                    f"ess: joint {model.names[j]!r} ({joint.shortname()}) has nq != nv; only one-DoF "
                    f"revolute/prismatic joints below the base are supported"
                )
        self.nq, self.nv = model.nq, model.nv
        self.base_q, self.base_v = (7, 6) if self.floating else (0, 0)
        # contact spheres: only a floating-base robot stands on the ground (as the MuJoCo back end's floor)
        self.k = len(robot.sphere_names) if self.floating else 0
        k = self.k
        self.n = self.nq + self.nv + 5 * k
        self.m = 2 * k
        self.partner = np.concatenate([np.arange(k, 2 * k), np.arange(k)]).astype(np.intp)
        self.frame_ids = [int(f) for f in robot.sphere_frame_ids[:k]]
        self.radii = robot.sphere_radii[:k].copy()
        self.offsets = robot.sphere_offsets[:k].copy()
        self._offset = bool(np.any(self.offsets))
        support = np.zeros((k, self.nv))
        for i, fid in enumerate(self.frame_ids):
            for joint in model.supports[model.frames[fid].parentJoint]:
                if joint > 0:
                    jm = model.joints[joint]
                    support[i, jm.idx_v : jm.idx_v + jm.nv] = 1.0
        self.support = support  # (k, nv): the DoFs that move sphere i
        r = self.TANGENTIAL_RATIO
        self.params = np.array(
            [
                stiffness,
                damping,
                mu,
                slip_velocity,
                r * stiffness,
                r * damping,
                max(min_cone, 1e-9),
                self.BRISTLE_RELAXATION,
                self.BRISTLE_MAX_RATE,
            ]
        )
        self.tau = np.zeros(self.nv)  # generalized actuation (zero on the base), N·m, held over a tick
        self._qn = np.zeros(self.nq)
        self._centres = np.zeros((k, 3))
        self._force = np.zeros((k, 3))
        self._gap_rate = np.zeros(k)
        self._bristle_rate = np.zeros((k, 2))
        self._tau = np.zeros(self.nv)
        d = self.data
        self._translations = [d.oMf[f].translation for f in self.frame_ids]
        self._rotations = [d.oMf[f].rotation for f in self.frame_ids]
        pin.framesForwardKinematics(model, d, robot.standing_configuration())
        # eigenpy gives views of Pinocchio's memory; a build that returned copies is read afresh each call
        self._views_live = (
            all(
                np.array_equal(t, d.oMf[f].translation) for t, f in zip(self._translations, self.frame_ids, strict=True)
            )
            and k > 0
        )
        #: the compiled record (:class:`RobotRecord`; None if the tree has a joint the compiled dynamics lack)
        self.record = self._compiled_record()

    def _compiled_record(self) -> RobotRecord | None:
        tree = dynamics.tree_of(self.model)
        if tree is None:
            return None
        k, model = self.k, self.model
        body = np.array([model.frames[f].parentJoint for f in self.frame_ids], dtype=np.int64)
        point = np.zeros((k, 3))
        for i, f in enumerate(self.frame_ids):  # the sphere's centre in its joint's frame
            placement = model.frames[f].placement
            point[i] = placement.translation + placement.rotation @ self.offsets[i]
        sizes = np.array([self.nq, self.nv, k, int(self.floating)], dtype=np.int64)
        return RobotRecord(
            tree,
            dynamics.work_for(tree),
            sizes,
            body,
            point,
            self.radii.copy(),
            self.params,
            self.tau,
            np.zeros(self.nq),
        )

    # ------------------------------------------------------------------ layout
    def q_of(self, x: Array) -> Array:
        """(nq,) the configuration in x, with a unit quaternion (a buffer reused by the next call)."""
        q = self._qn
        q[:] = x[: self.nq]
        if self.floating:
            q[3:7] /= math.sqrt(q[3] * q[3] + q[4] * q[4] + q[5] * q[5] + q[6] * q[6])
        return q

    def v_of(self, x: Array) -> Array:
        return x[self.nq : self.nq + self.nv]

    def impulses_of(self, x: Array) -> Array:
        """(k, 3) impulse on each contact sphere since the tick began, N·s, world frame (a view)."""
        start = self.nq + self.nv
        return x[start : start + 3 * self.k].reshape(self.k, 3)

    def bristles_of(self, x: Array) -> Array:
        """(k, 2) friction bristle deflections, m, world x y (a view)."""
        return x[self.nq + self.nv + 3 * self.k :].reshape(self.k, 2)

    # ------------------------------------------------------------------ kinematics
    def _read_centres(self) -> Array:
        """(k, 3) sphere centres in world, after forward kinematics and frame placements."""
        d, c = self.data, self._centres
        if self._views_live:
            for i, t in enumerate(self._translations):
                c[i] = t
        else:
            for i, f in enumerate(self.frame_ids):
                c[i] = d.oMf[f].translation
        if self._offset:
            rotations = self._rotations if self._views_live else [d.oMf[f].rotation for f in self.frame_ids]
            for i, R in enumerate(rotations):
                c[i] += R @ self.offsets[i]
        return c

    def gaps(self, x: Array) -> Array:
        """(k,) φ: height of each sphere's lowest point above the ground, m."""
        pin.framesForwardKinematics(self.model, self.data, self.q_of(x))
        return self._read_centres()[:, 2] - self.radii

    def guards(self, x: Array) -> Array:
        if not self.k:
            return np.zeros(0)
        phi = self.gaps(x)
        return np.concatenate([-phi, phi])

    def _contacts(self, x: Array, side: BoolArray) -> None:
        """Forces (``_force``), gap rates (``_gap_rate``), bristle rates (``_bristle_rate``) and the generalized
        force τ + Σ Jᵀ f (``_tau``) at x."""
        model, d = self.model, self.data
        pin.computeJointJacobians(model, d, self.q_of(x))
        pin.updateFramePlacements(model, d)
        self._tau[:] = self.tau
        contact_field(
            d.J,
            self.support,
            self._read_centres(),
            self.radii,
            self.v_of(x),
            self.bristles_of(x),
            side[: self.k],
            self.params,
            self._tau,
            self._force,
            self._gap_rate,
            self._bristle_rate,
        )

    def rates(self, x: Array, side: BoolArray) -> Array:
        if not self.k:
            return np.zeros(0)
        self._contacts(x, side)
        return np.concatenate([-self._gap_rate, self._gap_rate])

    def forces(self, x: Array, side: BoolArray) -> Array:
        """(k, 3) the force on each sphere at x in mode ``side``, world frame, N (a fresh array)."""
        if not self.k:
            return np.zeros((0, 3))
        self._contacts(x, side)
        return self._force.copy()

    # ------------------------------------------------------------------ dynamics
    def field(self, x: Array, side: BoolArray) -> Array:
        out = np.empty(self.n)
        nq, nv = self.nq, self.nv
        v = self.v_of(x)
        if self.k:
            self._contacts(x, side)  # normalizes q into _qn
            tau = self._tau
            k3 = nq + nv + 3 * self.k
            out[nq + nv : k3] = self._force.ravel()
            out[k3:] = self._bristle_rate.ravel()
            q = self._qn
        else:
            tau, q = self.tau, self.q_of(x)
        out[nq : nq + nv] = pin.aba(self.model, self.data, q, v, tau)
        configuration_rate(q, v, self.floating, out[:nq])
        return out


class RobotRecord(NamedTuple):
    """A :class:`RobotContactSystem` for compiled code (:mod:`idcontrol.sim.ess.system`).

    tree, work : the robot's kinematic tree and its workspace (:mod:`idcontrol.sim.ess.dynamics`).
    sizes : [nq, nv, k, floating].  body : (k,) the joint (body) each contact sphere is fixed to.
    point : (k, 3) each sphere's centre in that body's frame, m.  radii : (k,) m.  params : the contact's (see
    :func:`contact_field`).  tau : (nv,) the held generalized actuation (the system's own array).
    q : (nq,) workspace (the configuration with a unit quaternion).
    """

    tree: dynamics.Tree
    work: dynamics.TreeWork
    sizes: NDArray[np.int64]
    body: NDArray[np.int64]
    point: Array
    radii: Array
    params: Array
    tau: Array
    q: Array


@njit(cache=True)
def _unit_configuration(system, x):  # pragma: no cover - compiled
    """``system.q``: the configuration in x with its base quaternion normalized."""
    q = system.q
    for i in range(q.shape[0]):
        q[i] = x[i]
    if system.sizes[3]:
        norm = math.sqrt(q[3] * q[3] + q[4] * q[4] + q[5] * q[5] + q[6] * q[6])
        for i in range(3, 7):
            q[i] /= norm
    return q


@njit(cache=True)
def _lowest_point(system, i):  # pragma: no cover - compiled
    """Sphere i's lowest point in world (x, y, z), after forward kinematics."""
    b = system.body[i]
    R, p, c = system.work.R[b], system.work.p[b], system.point[i]
    return (
        p[0] + R[0, 0] * c[0] + R[0, 1] * c[1] + R[0, 2] * c[2],
        p[1] + R[1, 0] * c[0] + R[1, 1] * c[1] + R[1, 2] * c[2],
        p[2] + R[2, 0] * c[0] + R[2, 1] * c[1] + R[2, 2] * c[2] - system.radii[i],
    )


@njit(cache=True)
def _point_velocity(system, i, px, py, pz):  # pragma: no cover - compiled
    """The world velocity of the point (px, py, pz) of sphere i's body, after :func:`dynamics.velocities`."""
    t = system.work.vel[system.body[i]]
    wx, wy, wz = t[3], t[4], t[5]
    return t[0] + wy * pz - wz * py, t[1] + wz * px - wx * pz, t[2] + wx * py - wy * px


@njit(cache=True)
def robot_field(system, x, side, out):  # pragma: no cover - compiled
    """ẋ (n,) of the robot on its contacts (the module docstring's model; :meth:`RobotContactSystem.field`)."""
    nq, nv, k = system.sizes[0], system.sizes[1], system.sizes[2]
    q = _unit_configuration(system, x)
    v = x[nq : nq + nv]
    tree, work = system.tree, system.work
    dynamics.forward_kinematics(tree, work, q)
    dynamics.velocities(tree, work, v)
    fext = work.fext
    fext[:] = 0.0
    params = system.params
    stiffness, damping, mu, v_e = params[0], params[1], params[2], params[3]
    k_t, c_t, c_min, relax, max_rate = params[4], params[5], params[6], params[7], params[8]
    impulse, bristle = nq + nv, nq + nv + 3 * k
    for i in range(k):
        px, py, pz = _lowest_point(system, i)
        vx, vy, vz = _point_velocity(system, i, px, py, pz)
        zx, zy = x[bristle + 2 * i], x[bristle + 2 * i + 1]
        fx = fy = fz = 0.0
        if side[i]:
            fz = max(-stiffness * pz - damping * vz, 0.0)
            cone = mu * fz
            rate = min(math.sqrt(vx * vx + vy * vy + v_e * v_e) * k_t / max(cone, c_min), max_rate)
            dzx, dzy = vx - rate * zx, vy - rate * zy
            fx, fy = -(k_t * zx + c_t * vx), -(k_t * zy + c_t * vy)
            size = math.sqrt(fx * fx + fy * fy)
            if size > cone:
                shrink = cone / size
                fx, fy = fx * shrink, fy * shrink
        else:
            dzx, dzy = -zx / relax, -zy / relax
        out[bristle + 2 * i], out[bristle + 2 * i + 1] = dzx, dzy
        out[impulse + 3 * i], out[impulse + 3 * i + 1], out[impulse + 3 * i + 2] = fx, fy, fz
        if fz != 0.0:
            f = fext[system.body[i]]  # the force at the world origin: (F, P × F)
            f[0] += fx
            f[1] += fy
            f[2] += fz
            f[3] += py * fz - pz * fy
            f[4] += pz * fx - px * fz
            f[5] += px * fy - py * fx
    dynamics.aba(tree, work, system.tau, out[nq : nq + nv])
    configuration_rate(q, v, system.sizes[3] != 0, out[:nq])


@njit(cache=True)
def robot_guards(system, x, out):  # pragma: no cover - compiled
    """h (2k,): −φ (touchdown) then φ (lift-off), φ each sphere's gap (:meth:`RobotContactSystem.guards`)."""
    k = system.sizes[2]
    dynamics.forward_kinematics(system.tree, system.work, _unit_configuration(system, x))
    for i in range(k):
        phi = _lowest_point(system, i)[2]
        out[i] = -phi
        out[k + i] = phi


@njit(cache=True)
def robot_rates(system, x, side, out):  # pragma: no cover - compiled
    """Dh·f (2k,): −φ̇ then φ̇ (:meth:`RobotContactSystem.rates`; the gaps do not depend on the mode)."""
    nq, nv, k = system.sizes[0], system.sizes[1], system.sizes[2]
    dynamics.forward_kinematics(system.tree, system.work, _unit_configuration(system, x))
    dynamics.velocities(system.tree, system.work, x[nq : nq + nv])
    for i in range(k):
        px, py, pz = _lowest_point(system, i)
        vz = _point_velocity(system, i, px, py, pz)[2]
        out[i] = -vz
        out[k + i] = vz


ess_system.register(RobotRecord, robot_field, robot_guards, robot_rates)
