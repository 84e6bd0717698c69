"""Drake back end: SAP compliant contact (Castro, Permenter and Han) on a ``MultibodyPlant`` built from the URDF.

A third, independent contact model beside MuJoCo's soft constraints and the rigid simulator's impulse LCP:
Drake's discrete ``MultibodyPlant`` stepped by its SAP solver (``discrete_contact_approximation = "sap"``,
set explicitly: Drake's default is "lagged"), point contact (``contact_model = "point"``; Drake's default,
hydroelastic with fallback, is not the controller's model). :class:`DrakeSim` builds, from the robot's
URDF and ``robot.toml``:

* the URDF's links, joints and inertias as Drake parses them; a fixed-base robot's root link is welded to the
  world at the origin, as Pinocchio does; a floating base is Drake's quaternion free joint. One
  ``JointActuator`` per joint of ``robot.actuated_joints``; torques are clamped to ``robot.torque_limits``
  before they are applied. The URDF's joint position limits are Drake's (SAP enforces them as constraints)
  and so is its joint damping (the shipped robots have none). Gravity (0, 0, −9.81) m/s².
* the robot file's contact spheres as the robot's only colliding geometry, on the body that carries each
  sphere's frame, so the simulator's contact geometry is the controller's. The URDF's own ``<collision>`` and
  ``<visual>`` elements are removed from the text Drake reads: nothing is drawn, nothing else collides, and
  Drake (which reads no STL collision mesh) parses third-party URDFs too. The spheres do not collide with one
  another.
* the ground: the half-space z ≤ 0 (floating-base robots; the rigid simulator's height map is not modelled).
* with ``with_objects``, each ``[[objects]]`` box as a free body (mass and inertia of
  :class:`~idcontrol.robot.config.ObjectConfig`, centre of mass at the body origin) at its initial pose.

Contact. SAP's compliant point contact gives a contact the normal impulse Δt · max(0, −k φ − τ_d k vₙ), with
stiffness k (N/m) and dissipation time constant τ_d (s, Drake's ``relaxation_time``), solved implicitly with
regularized Coulomb friction. Drake combines two geometries' stiffnesses in series, sums their relaxation
times and takes 2μ₁μ₂/(μ₁ + μ₂) of their friction; every geometry here carries 2k and τ_d / 2, so every
contact pair has exactly ``stiffness`` and ``relaxation_time``. The ground and the spheres carry ``mu`` (the
spheres carry the object's μ when there is no ground), a box its own (``object_mu``): with both a ground and a
box of another μ, a sphere–box pair gets the combination of the two. μ = ∞ stands as :data:`MU_INFINITE`.
SAP caps the stiffness the step resolves (near-rigid threshold β = 1): a contact of effective inverse mass w
(1/kg) is no stiffer than about 4π² / (β² w Δt (Δt + τ_d)), and a sticking contact slips at about
σ w f Δt (σ = 1e−3, f the friction force).

Defaults (:data:`DEFAULT_STIFFNESS`, :data:`DEFAULT_RELAXATION_TIME`): k = 1e6 N/m, the standing quadruped's
feet sink 12 µm; τ_d = 1e−3 s. Measured on the quadruped standing under the two-stage QP (1 s, lock-step):
τ_d = 1e−3 s tracks to 8e−5 rad; τ_d = 0.01 s lowers SAP's cap below k (41 µm instead of 12 µm) and the
stand settles 0.012 rad off its posture; τ_d = 0 bounces until the velocity guard stops it (0.3 s). The
launch file's ``[bridge] contact_stiffness`` and ``contact_relaxation_time`` set them.

Drake's point contact only sees penetrating pairs, so the default initial state sinks a standing robot's base
to the resting penetration of its touching spheres (see :meth:`DrakeSim._resting_sink`); the first step then
starts loaded instead of swinging the legs into the ground.

Sensed forces: Drake's contact results of the step that produced the state (its sampled output port), each
point pair's force mapped to the contact sphere it acts on. State exchange uses idcontrol's (Pinocchio)
conventions, see :meth:`DrakeSim.state`.
"""

from __future__ import annotations

import logging
import math
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any
from xml.etree import ElementTree

import numpy as np
from numpy.typing import NDArray

from idcontrol.contacts.world import GRAVITY, ObjectState
from idcontrol.errors import ConfigError, InputError, MissingDependency, SimulationError
from idcontrol.robot.model import RobotModel
from idcontrol.sim.base import SimState, SimulatorBase, base_fell
from idcontrol.validation import check_vector

try:
    from pydrake.geometry import (
        AddContactMaterial,
        Box,
        CollisionFilterDeclaration,
        GeometrySet,
        HalfSpace,
        ProximityProperties,
        Sphere,
    )
    from pydrake.math import RigidTransform
    from pydrake.multibody.parsing import Parser
    from pydrake.multibody.plant import AddMultibodyPlant, CoulombFriction, MultibodyPlantConfig
    from pydrake.multibody.tree import RotationalInertia, SpatialInertia
    from pydrake.systems.analysis import Simulator as DrakeSimulator
    from pydrake.systems.framework import DiagramBuilder
except ImportError as e:  # the optional extra is missing: DrakeSim says so when it is asked for
    _IMPORT_ERROR: ImportError | None = e
else:
    _IMPORT_ERROR = None

Array = NDArray[np.float64]

#: Drake friction coefficient standing for μ = ∞ (as MuJoCo's back end).
MU_INFINITE = 1e4
#: Default contact stiffness of a contact pair, N/m.
DEFAULT_STIFFNESS = 1e6
#: Default dissipation time constant τ_d of a contact pair (SAP's linear Kelvin–Voigt), s.
DEFAULT_RELAXATION_TIME = 1e-3
#: SAP's near-rigid threshold β (Drake's default, stated here so the experiments can quote it).
NEAR_RIGID_THRESHOLD = 1.0


def require_drake() -> None:
    """Raise :class:`~idcontrol.errors.MissingDependency` naming the extra when Drake is not installed."""
    if _IMPORT_ERROR is not None:
        raise MissingDependency("Drake", "drake", "the 'drake' simulator") from _IMPORT_ERROR


def contact_properties(stiffness: float, relaxation_time: float, mu: float) -> ProximityProperties:
    """Proximity properties of one geometry: point stiffness (N/m), SAP relaxation time (s) and friction."""
    properties = ProximityProperties()
    AddContactMaterial(
        dissipation=None, point_stiffness=stiffness, friction=CoulombFriction(mu, mu), properties=properties
    )
    properties.AddProperty("material", "relaxation_time", relaxation_time)
    return properties


def sap_plant_config(timestep: float) -> MultibodyPlantConfig:
    """A discrete plant of step ``timestep`` s with SAP and point contact, both set explicitly."""
    return MultibodyPlantConfig(
        time_step=timestep,
        discrete_contact_approximation="sap",
        contact_model="point",
        sap_near_rigid_threshold=NEAR_RIGID_THRESHOLD,
    )


class _QuietHalfSpaceWarning(logging.Filter):
    """Drops Drake's warning that half-spaces do not touch deformable bodies (there are none here)."""

    def filter(self, record: logging.LogRecord) -> bool:
        return "half spaces are not currently supported for deformable" not in record.getMessage()


@contextmanager
def quiet_half_space_warning() -> Iterator[None]:
    """Within the block, Drake's warning about half-spaces and deformable bodies is not logged."""
    drake_logger = logging.getLogger("drake")
    quiet = _QuietHalfSpaceWarning()
    drake_logger.addFilter(quiet)
    try:
        yield
    finally:
        drake_logger.removeFilter(quiet)


def _mu_for_drake(mu: float, what: str) -> float:
    if not mu >= 0.0:
        raise ConfigError(f"{what}: mu must be >= 0 (inf allowed), got {mu}")
    return MU_INFINITE if math.isinf(mu) else float(mu)


def _positive(value: float, what: str) -> float:
    if not (isinstance(value, (int, float)) and math.isfinite(value) and value > 0.0):
        raise ConfigError(f"{what} must be a positive finite number, got {value!r}")
    return float(value)


def _kinematics_only(urdf: Path) -> str:
    """The URDF's text without its ``<visual>`` and ``<collision>`` elements (nor a ``<mujoco>`` block).

    The simulation draws nothing and collides only the robot file's spheres, and leaving the shapes out spares
    Drake their meshes (it reads no STL collision mesh, and ``package://`` paths need a package map).
    """
    try:
        root = ElementTree.parse(urdf).getroot()
    except (OSError, ElementTree.ParseError) as e:
        raise ConfigError(f"{urdf}: not a readable URDF: {e}") from e
    for parent in root.iter():
        for child in list(parent):
            if child.tag in ("visual", "collision", "mujoco"):
                parent.remove(child)
    return ElementTree.tostring(root, encoding="unicode")


def _rotation_from_wxyz(w: float, x: float, y: float, z: float) -> Array:
    """(3, 3) rotation matrix of the quaternion (w, x, y, z), normalized first."""
    n = math.sqrt(w * w + x * x + y * y + z * z)
    w, x, y, z = w / n, x / n, y / n, z / n
    return np.array(
        [
            [1.0 - 2.0 * (y * y + z * z), 2.0 * (x * y - w * z), 2.0 * (x * z + w * y)],
            [2.0 * (x * y + w * z), 1.0 - 2.0 * (x * x + z * z), 2.0 * (y * z - w * x)],
            [2.0 * (x * z - w * y), 2.0 * (y * z + w * x), 1.0 - 2.0 * (x * x + y * y)],
        ]
    )


class DrakeSim(SimulatorBase):
    """A Drake (SAP) simulation of an idcontrol robot, stepped with joint torques.

    Parameters
    ----------
    robot : the robot model, or a robot name / robot.toml path.
    mu : friction coefficient of the ground (``math.inf``: no slip, see :data:`MU_INFINITE`).
    timestep : the plant's discrete step, s (one SAP solve per :meth:`step`).
    with_objects : add the robot configuration's ``[[objects]]`` as free bodies.
    object_mu : friction coefficient of every object (default: each object's configured ``mu``).
    stiffness : contact stiffness of every contact pair, N/m (default :data:`DEFAULT_STIFFNESS`).
    relaxation_time : dissipation time constant τ_d of every contact pair, s (default
        :data:`DEFAULT_RELAXATION_TIME`; 0: no dissipation beyond SAP's own).
    floor : add the ground half-space z ≤ 0 (default: for a floating-base robot).
    initial : (nq,) configuration that :meth:`reset` returns to (default: the standing posture).

    Raises :class:`~idcontrol.errors.MissingDependency` when Drake (``pip install 'idcontrol[drake]'``) is not
    installed, ConfigError for bad parameters or a URDF Drake cannot read.
    """

    kind = "drake"

    def __init__(
        self,
        robot: RobotModel | str,
        mu: float = 1.0,
        timestep: float = 1e-3,
        with_objects: bool = False,
        *,
        object_mu: float | None = None,
        stiffness: float | None = None,
        relaxation_time: float | None = None,
        floor: bool | None = None,
        initial: Array | None = None,
    ) -> None:
        require_drake()
        super().__init__(robot, mu, timestep, with_objects, object_mu=object_mu)
        r = self.robot
        self.stiffness = _positive(DEFAULT_STIFFNESS if stiffness is None else stiffness, "contact stiffness (N/m)")
        tau_d = DEFAULT_RELAXATION_TIME if relaxation_time is None else relaxation_time
        if not (isinstance(tau_d, (int, float)) and math.isfinite(tau_d) and tau_d >= 0.0):
            raise ConfigError(f"contact relaxation time (s) must be a finite number >= 0, got {tau_d!r}")
        self.relaxation_time = float(tau_d)
        self.has_floor = r.floating_base if floor is None else floor
        floor_mu = _mu_for_drake(mu, "ground")
        object_mus = [_mu_for_drake(o.mu if object_mu is None else object_mu, o.name) for o in self.objects]
        sphere_mu = floor_mu if self.has_floor or not object_mus else object_mus[0]
        if initial is None:
            initial = r.standing_configuration()
            if self.has_floor and r.floating_base:
                initial[2] -= self._resting_sink(initial)
        self.initial = r.check_state(initial, np.zeros(r.nv))[0]

        # each geometry carries half the pair's compliance: series stiffness 2k ⊕ 2k = k, times τ/2 + τ/2 = τ
        def material(mu_geometry: float) -> ProximityProperties:
            return contact_properties(2.0 * self.stiffness, 0.5 * self.relaxation_time, mu_geometry)

        builder = DiagramBuilder()
        plant, scene_graph = AddMultibodyPlant(sap_plant_config(self.timestep), builder)
        plant.mutable_gravity_field().set_gravity_vector(GRAVITY)
        urdf = r.config.urdf_path
        try:
            (instance,) = Parser(plant).AddModelsFromString(_kinematics_only(urdf), "urdf")
        except (RuntimeError, ValueError) as e:
            raise ConfigError(f"{urdf}: Drake could not read the URDF: {e}") from e
        bodies = [plant.get_body(i) for i in plant.GetBodyIndices(instance)]
        children = {plant.get_joint(j).child_body().index() for j in plant.GetJointIndices(instance)}
        roots = [b for b in bodies if b.index() not in children]
        if len(roots) != 1:
            raise ConfigError(f"{urdf}: Drake found {len(roots)} root links, expected one")
        if not r.floating_base:
            plant.WeldFrames(plant.world_frame(), roots[0].body_frame(), RigidTransform())

        if self.has_floor:
            plant.RegisterCollisionGeometry(
                plant.world_body(), RigidTransform(), HalfSpace(), "ground", material(floor_mu)
            )
        pin_model = r.model
        pin_names = [str(n) for n in pin_model.names]
        self._sphere_of_geometry: dict[Any, int] = {}
        for k, (sphere, fid) in enumerate(zip(r.config.contact_spheres, r.sphere_frame_ids, strict=True)):
            frame = pin_model.frames[int(fid)]
            joint = frame.parentJoint
            if joint == 0:
                body = plant.world_body()
            elif r.floating_base and joint == 1:
                body = roots[0]
            else:
                body = plant.GetJointByName(pin_names[joint], instance).child_body()
            # the sphere centre in the joint frame (= the Drake child body's frame for a URDF joint)
            centre = RigidTransform(np.asarray(frame.placement.act(sphere.offset_in_frame)))
            geometry = plant.RegisterCollisionGeometry(
                body, centre, Sphere(sphere.radius), f"contact:{sphere.name}", material(sphere_mu)
            )
            self._sphere_of_geometry[geometry] = k
        self._object_bodies = []
        for o, o_mu in zip(self.objects, object_mus, strict=True):
            central = RotationalInertia(*np.diag(o.inertia_in_body))
            inertia = SpatialInertia.MakeFromCentralInertia(o.mass, np.zeros(3), central)
            body = plant.AddRigidBody(o.name, plant.AddModelInstance(o.name), inertia)
            plant.RegisterCollisionGeometry(body, RigidTransform(), Box(*o.size), o.name, material(o_mu))
            self._object_bodies.append(body)
        for name, limit in zip(r.actuated_joints, r.torque_limits, strict=True):
            plant.AddJointActuator(name, plant.GetJointByName(name, instance), float(limit))
        plant.Finalize()
        sphere_set = GeometrySet(list(self._sphere_of_geometry))
        scene_graph.collision_filter_manager().Apply(CollisionFilterDeclaration().ExcludeWithin(sphere_set))

        self._plant, self._scene_graph = plant, scene_graph
        self._diagram = builder.Build()
        with quiet_half_space_warning():
            self._simulator = DrakeSimulator(self._diagram)
        self._context = self._simulator.get_mutable_context()
        self._plant_context = plant.GetMyMutableContextFromRoot(self._context)
        self._actuation = plant.get_actuation_input_port()
        self._contact_results = plant.get_contact_results_output_port()
        self._index_state(instance, pin_names)
        self.reset()

    def _index_state(self, instance: Any, pin_names: list[str]) -> None:
        """Map Pinocchio's coordinates onto Drake's by joint name; check Drake's free-joint layout."""
        plant, r = self._plant, self.robot
        nq = plant.num_positions()
        first = 2 if r.floating_base else 1
        pin_q, pin_v, dk_q, dk_v = [], [], [], []
        for j in range(first, len(pin_names)):
            pj = r.model.joints[j]
            if pj.nq != 1 or pj.nv != 1:
                raise ConfigError(f"joint {pin_names[j]!r}: only one-DoF revolute/prismatic joints are supported")
            dj = plant.GetJointByName(pin_names[j], instance)
            pin_q.append(pj.idx_q)
            pin_v.append(pj.idx_v)
            dk_q.append(dj.position_start())
            dk_v.append(nq + dj.velocity_start())  # indices into [q; v]
        self._pin_q, self._pin_v = np.asarray(pin_q, dtype=np.intp), np.asarray(pin_v, dtype=np.intp)
        self._dk_q, self._dk_v = np.asarray(dk_q, dtype=np.intp), np.asarray(dk_v, dtype=np.intp)
        position_names = plant.GetPositionNames(add_model_instance_prefix=False, always_add_suffix=True)
        velocity_names = plant.GetVelocityNames(add_model_instance_prefix=False, always_add_suffix=True)

        def free_slots(body: Any) -> tuple[int, int]:
            """[q; v] offsets of a free body's [qw qx qy qz x y z] and [wx wy wz vx vy vz] (world frame)."""
            a, b = body.floating_positions_start(), body.floating_velocities_start_in_v()
            suffixes = [n.rsplit("_", 1)[-1] for n in position_names[a : a + 7] + velocity_names[b : b + 6]]
            if suffixes != ["qw", "qx", "qy", "qz", "x", "y", "z", "wx", "wy", "wz", "vx", "vy", "vz"]:
                raise ConfigError(
                    f"Drake's free joint of {body.name()!r} has coordinates {suffixes}; "
                    "expected a quaternion floating joint"
                )
            return a, nq + b

        self._base_slots = None
        if r.floating_base:
            floating = [
                plant.get_body(i)
                for i in plant.GetFloatingBaseBodies()
                if plant.get_body(i).model_instance() == instance
            ]
            if len(floating) != 1:
                raise ConfigError(f"Drake found {len(floating)} floating bodies in {r.config.urdf_path}, expected 1")
            self._base_slots = free_slots(floating[0])
        self._object_slots = [
            (o.name, *free_slots(body)) for o, body in zip(self.objects, self._object_bodies, strict=True)
        ]
        actuators = [plant.get_joint_actuator(i) for i in plant.GetJointActuatorIndices()]
        by_name = {a.name(): a for a in actuators}
        self._actuation_index = np.array([by_name[n].input_start() for n in r.actuated_joints], dtype=np.intp)
        self._u = np.zeros(plant.num_actuated_dofs())
        self._x = np.zeros(plant.num_positions() + plant.num_velocities())

    def _resting_sink(self, q: Array) -> float:
        """m by which the base of ``q`` is lowered so that the spheres touching the ground carry the robot's weight.

        Drake's point contact only sees penetrating pairs: a posture whose spheres touch the ground exactly
        (φ = 0) would take its first step with no contact at all, and the torques meant to stand would swing the
        legs into the ground. Sinking the base by m g / (n k), the n touching spheres sharing the weight on
        springs of stiffness k, starts the standing robot near its resting penetration instead.
        """
        import pinocchio as pin

        r = self.robot
        data = r.model.createData()
        pin.framesForwardKinematics(r.model, data, q)
        bottoms = [
            data.oMf[int(fid)].act(s.offset_in_frame)[2] - s.radius
            for s, fid in zip(r.config.contact_spheres, r.sphere_frame_ids, strict=True)
        ]
        touching = sum(1 for z in bottoms if abs(z) <= 1e-6)
        if not touching:
            return 0.0
        return r.total_mass() * -GRAVITY[2] / (touching * self.stiffness)

    # ------------------------------------------------------------------ accessors
    @property
    def plant(self) -> Any:
        """Drake's ``MultibodyPlant`` (finalized)."""
        return self._plant

    @property
    def scene_graph(self) -> Any:
        """Drake's ``SceneGraph`` (the inspector of every geometry's pose and properties)."""
        return self._scene_graph

    @property
    def sphere_geometries(self) -> list[Any]:
        """Drake's ``GeometryId`` of each contact sphere, in ``robot.toml`` order."""
        return sorted(self._sphere_of_geometry, key=self._sphere_of_geometry.__getitem__)

    @property
    def plant_context(self) -> Any:
        """The plant's context inside the running simulation."""
        return self._plant_context

    @property
    def simulator(self) -> Any:
        """Drake's ``systems.analysis.Simulator`` that steps the diagram."""
        return self._simulator

    @property
    def time(self) -> float:
        """Simulation time, s."""
        return self._steps * self.timestep

    # ------------------------------------------------------------------ state exchange
    def reset(
        self, q: Array | None = None, v: Array | None = None, objects: dict[str, ObjectState] | None = None
    ) -> None:
        """Restart at time 0 from ``q`` (nq,), ``v`` (nv,) in Pinocchio conventions (default: ``initial``, at rest).

        ``objects`` sets movable bodies by name; the others start at their configured initial pose, at rest.
        Until the first step the contact forces are zero (Drake samples them at each step).
        """
        r = self.robot
        q, v = r.check_state(self.initial if q is None else q, np.zeros(r.nv) if v is None else v)
        states = {o.name: ObjectState(o.initial_position, o.initial_orientation_xyzw) for o in self.objects}
        for name, s in (objects or {}).items():
            if name not in states:
                raise InputError(f"unknown object {name!r}; the simulation has {sorted(states)}")
            states[name] = s.validated(name)
        x = np.zeros_like(self._x)
        x[self._dk_q] = q[self._pin_q]
        x[self._dk_v] = v[self._pin_v]
        if self._base_slots is not None:
            a, b = self._base_slots
            R = _rotation_from_wxyz(q[6], q[3], q[4], q[5])
            x[a : a + 4] = np.array([q[6], q[3], q[4], q[5]]) / np.linalg.norm(q[3:7])
            x[a + 4 : a + 7] = q[0:3]
            x[b : b + 3] = R @ v[3:6]  # base frame -> world
            x[b + 3 : b + 6] = R @ v[0:3]
        for name, a, b in self._object_slots:
            s = states[name]
            xyzw = np.asarray(s.orientation_xyzw, dtype=float)
            x[a : a + 4] = np.array([xyzw[3], xyzw[0], xyzw[1], xyzw[2]]) / np.linalg.norm(xyzw)
            x[a + 4 : a + 7] = s.position
            x[b : b + 3] = s.angular_velocity  # world, as Drake's
            x[b + 3 : b + 6] = s.linear_velocity  # world; the body origin is the centre of mass
        self._context.SetTime(0.0)
        self._plant.SetPositionsAndVelocities(self._plant_context, x)
        self._simulator.Initialize()
        self._steps = 0

    def step(self, tau: Array) -> None:
        """Apply joint torques ``tau`` (nu,) in ``robot.actuated_joints`` order, N·m (N), for one time step.

        Torques beyond ``robot.torque_limits`` are clamped. Raises ShapeError / NonFiniteError (without
        stepping) for a malformed ``tau``, SimulationError if Drake could not take the step.
        """
        tau = check_vector("tau", tau, self.robot.nu)
        limits = self.robot.torque_limits
        self._u[self._actuation_index] = np.clip(tau, -limits, limits)
        self._actuation.FixValue(self._plant_context, self._u)
        try:
            self._simulator.AdvanceTo((self._steps + 1) * self.timestep)
        except RuntimeError as e:
            raise SimulationError(f"Drake could not step at t = {self.time:.6f} s: {e}") from e
        self._steps += 1

    def state(self) -> SimState:
        """The current state (see :class:`SimState`), converted from Drake's conventions.

        Drake's quaternion free joint holds q = [quaternion w x y z, position] and v = [angular velocity,
        velocity of the body origin], both in the world frame; Pinocchio's free flyer holds q = [position,
        quaternion x y z w] and v = [linear, angular] velocity in the base frame: v_lin = Rᵀ v_W, ω = Rᵀ ω_W.
        Joints are matched by name. Drake's step does not renormalize its quaternions (a tumbling base drifted
        to norm 1.001 in 1.4 s): they are reported normalized.
        """
        r = self.robot
        x = self._plant.GetPositionsAndVelocities(self._plant_context)
        q = np.empty(r.nq)
        v = np.empty(r.nv)
        q[self._pin_q] = x[self._dk_q]
        v[self._pin_v] = x[self._dk_v]
        if self._base_slots is not None:
            a, b = self._base_slots
            w, qx, qy, qz = x[a : a + 4] / np.linalg.norm(x[a : a + 4])
            q[0:3] = x[a + 4 : a + 7]
            q[3:7] = (qx, qy, qz, w)
            R = _rotation_from_wxyz(w, qx, qy, qz)
            v[0:3] = R.T @ x[b + 3 : b + 6]
            v[3:6] = R.T @ x[b : b + 3]
        objects = {}
        for name, a, b in self._object_slots:
            w, qx, qy, qz = x[a : a + 4] / np.linalg.norm(x[a : a + 4])
            objects[name] = ObjectState(
                position=x[a + 4 : a + 7].copy(),
                orientation_xyzw=np.array([qx, qy, qz, w]),
                linear_velocity=x[b + 3 : b + 6].copy(),
                angular_velocity=x[b : b + 3].copy(),
            )
        return SimState(self.time, q, v, objects, self.contact_forces())

    def contact_forces(self) -> Array:
        """(k, 3) force the environment applied on each contact sphere during the last step, world frame, N.

        From Drake's contact results of that step: each point pair's ``contact_force()`` is the force on its
        body B (geometry ``id_B``) in the world frame, so a sphere that is geometry A receives its opposite.
        """
        out = np.zeros((len(self.robot.sphere_names), 3))
        results = self._contact_results.Eval(self._plant_context)
        spheres = self._sphere_of_geometry
        for i in range(results.num_point_pair_contacts()):
            info = results.point_pair_contact_info(i)
            pair = info.point_pair()
            a, b = spheres.get(pair.id_A), spheres.get(pair.id_B)
            if a is None and b is None:
                continue
            force_on_b = info.contact_force()
            if b is not None:
                out[b] += force_on_b
            if a is not None:
                out[a] -= force_on_b
        return out

    def fell(self, min_base_height: float) -> bool:
        """Whether the floating base's origin is below ``min_base_height`` (world z, m) or the state is not finite."""
        x = self._plant.GetPositionsAndVelocities(self._plant_context)
        z = x[self._base_slots[0] + 6] if self._base_slots is not None else 0.0
        return base_fell(self.robot, x, z, min_base_height)
