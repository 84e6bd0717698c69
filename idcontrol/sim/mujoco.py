"""MuJoCo physics back end for the simulator bridge, built from the robot's URDF.

The URDF is the single source of truth: :class:`MujocoSim` loads it with
``mujoco.MjSpec.from_file`` (``package://`` mesh paths resolved against the
URDF's folders) and adds, programmatically,

* a free joint on the root link for a floating-base robot (MuJoCo's URDF
  import fixes the root link to the world), named like Pinocchio's
  (``root_joint``);
* one ``motor`` actuator per joint of ``robot.actuated_joints``, in that
  order: gear 1, ctrl clamped to ± ``robot.torque_limits`` and nothing
  else (the joints' URDF ``actuatorfrcrange`` is lifted);
* the floor plane z = 0 (default: floating-base robots only);
* a free box body per ``[[objects]]`` entry (``with_objects``), its mass and
  inertia those of :class:`~idcontrol.robot.config.ObjectConfig` (density ×
  volume), placed at the configured initial pose;
* one sphere geom per contact sphere of ``robot.toml``. These spheres are the
  robot's only colliding geoms: the URDF's visual and collision geoms are
  kept for display but never collide, so the simulator's contact geometry is
  the controller's. Spheres do not collide with one another.

Everything else comes from the URDF: link inertias (``inertiafromgeom`` is
off, so a link without ``<inertial>`` is massless as in Pinocchio), joint
axes and limits, damping and friction from ``<dynamics>`` (zero if absent),
armature zero. Gravity is (0, 0, −9.81) m/s².

Published URDFs (:meth:`MujocoSim._adapt`):

* ``package://<name>/...`` meshes are found in a folder ``<name>`` above the URDF, relative ones beside it; a
  visual or collision element whose mesh file is missing is dropped, as is a ``<visual>``'s second ``<material>``
  (:func:`urdf_for_mujoco`);
* a mesh MuJoCo cannot decode (COLLADA ``.dae``: it reads ``.stl``, ``.obj``, ``.msh``) is dropped with the
  geoms that show it: they only display, since the contacts are the robot file's spheres;
* a link MuJoCo rejects (the preflight names each: a placeholder whose inertia no rigid body has, a rod's or a
  point mass's zero principal moment, a massless link between two joints) is given the nearest inertia MuJoCo
  accepts only when the robot file says ``[sim] repair_inertia = true``: the principal moments are raised to
  :data:`REPAIR_MIN_MOMENT` at least and until they satisfy the triangle inequality, and a moving body without
  mass gets :data:`REPAIR_MASS_FRACTION` of the robot's mass;
* continuous joints are unlimited hinges, as the controller's revolute joints without limits;
* a ``<mimic>`` joint, which MuJoCo's import couples to the joint it mimics by an equality constraint, is left
  independent, as the controller's model has it (the preflight warns of it).

Every such change, and every difference between this model and the controller's (total and body masses,
joint limits, the URDF's joint damping and friction, which MuJoCo simulates and the controller only adds as a
feed-forward at the reference's velocity), is listed in
:attr:`MujocoSim.model_differences` and logged as a warning when the simulator is built.

Contact model (chosen to match the controller's rigid Coulomb contact):

* ``condim = 3`` (normal + 2D sliding friction; no torsional/rolling).
* Elliptic friction cones (``opt.cone``): the exact Coulomb cone rather than a
  pyramid, and the constraint regulariser R does not grow with μ² as it does
  for pyramids (at μ = 10⁴ a pyramid's R is 10⁸ times larger, i.e. friction
  would be mush), so a very large μ stays stiff. ``opt.impratio = 10`` makes
  friction ten times stiffer than the normal direction (MuJoCo's advice
  against creeping slip for elliptic cones).
* μ: MuJoCo uses the friction of the geom with the highest ``priority``: the
  floor (priority 2, μ = ``mu``) governs sphere–floor and box–floor
  contacts, a box (priority 1, μ from its config or ``object_mu``) governs
  sphere–box contacts. ``mu = math.inf`` is mapped to
  :data:`MU_INFINITE` = 1e4 (no slip below a force ratio of 10⁴).
* Softness: ``solref = (timeconst, dampratio)`` and ``solimp``. The default
  is as stiff as MuJoCo allows at the time step: ``timeconst = 2 ·
  timestep``, critical damping, ``solimp =`` :data:`STIFF_SOLIMP` (the
  quadruped's feet sink 2 µm at rest at 1 kHz). :data:`COMPLIANT_SOLREF`,
  :data:`COMPLIANT_SOLIMP` (MuJoCo's defaults) model compliant terrain:
  about 1.1 mm.
* No noslip post-iterations: with impratio 10, the quadruped pushed sideways
  by 0.3 m g (μ = 1) moves its contact points by about 0.4 mm in 0.8 s, and
  noslip iterations barely change that; ``model.opt.noslip_iterations`` can be
  raised on :attr:`MujocoSim.model` if it matters.
* The URDF's joint friction (``<dynamics friction>``, MuJoCo's ``frictionloss``) is as stiff as the contacts:
  ``solref_friction = (2 · timestep, 1)``. MuJoCo's friction is regularized: below F a joint creeps as under a
  drag. At its default (0.02 s) the shipped arm's wrist with F = 1 N·m (M_jj = 0.003 kg·m²) pushed with 0.8 F
  creeps at 0.6 rad/s; at 2 · timestep, 0.07 rad/s, nearer the dry friction the URDF declares and the
  controller compensates.
* Integrator: MuJoCo's semi-implicit Euler (joint damping implicit), as the
  controller's time stepping. MuJoCo's automatic reset on divergence is
  disabled: a diverged step raises :class:`SimulationDiverged` instead of
  silently teleporting the robot.

State exchange uses idcontrol's (Pinocchio) conventions, see :meth:`MujocoSim.state`.
"""

from __future__ import annotations

import contextlib
import logging
import math
import os
import xml.etree.ElementTree as ET
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import mujoco
import numpy as np
from numpy.typing import NDArray

from idcontrol.contacts.world import GRAVITY, ObjectState
from idcontrol.errors import ConfigError, InputError, SimulationDiverged
from idcontrol.robot.model import RobotModel
from idcontrol.robot.urdf import drop_missing_meshes, read_urdf
from idcontrol.settings import UNKNOWN_TERRAINS, LaunchConfig
from idcontrol.sim.base import SimState, SimulatorBase, base_fell
from idcontrol.validation import check_vector

Array = NDArray[np.float64]

#: MuJoCo friction coefficient standing for μ = ∞.
MU_INFINITE = 1e4
#: Default ``solimp``: impedance 0.99 → 0.999 over 1 mm penetration.
STIFF_SOLIMP = (0.99, 0.999, 0.001, 0.5, 2.0)
#: Compliant terrain (MuJoCo's own defaults): about 1.1 mm rest penetration of the quadruped's feet.
COMPLIANT_SOLREF = (0.02, 1.0)
COMPLIANT_SOLIMP = (0.9, 0.95, 0.001, 0.5, 2.0)
_FLOOR_PRIORITY, _OBJECT_PRIORITY, _SPHERE_PRIORITY = 2, 1, 0
#: Mesh files MuJoCo decodes (by extension).
MESH_FORMATS = (".stl", ".obj", ".msh")
_LOG = logging.getLogger(__name__)
_DIVERGENCE_WARNINGS = np.array(
    [mujoco.mjtWarning.mjWARN_BADQPOS, mujoco.mjtWarning.mjWARN_BADQVEL, mujoco.mjtWarning.mjWARN_BADQACC],
    dtype=np.intp,
)
#: A repaired link's principal moments are at least this (kg·m²): ten times the least MuJoCo accepts.
REPAIR_MIN_MOMENT = 1e-13
#: A moving body without mass is given this fraction of the robot's mass when its inertia is repaired.
REPAIR_MASS_FRACTION = 1e-6


def _physical_moments(moments: Array) -> Array:
    """Principal moments (ascending, kg·m²) raised to the nearest a rigid body has that MuJoCo accepts: at least
    1e-9 of the largest and :data:`REPAIR_MIN_MOMENT`, and I₁ + I₂ ≥ I₃ (the two smaller raised together by half
    the shortfall each, and 1e-6 of I₃ more, as MuJoCo's compiler checks the inequality in floating point)."""
    out = np.maximum(np.sort(moments), max(1e-9 * float(np.max(moments)), REPAIR_MIN_MOMENT))
    shortfall = out[2] * (1.0 + 1e-6) - out[0] - out[1]
    if shortfall > 0:
        out[0] += 0.5 * shortfall
        out[1] += 0.5 * shortfall
    return out


def _inertia_tensor(body: mujoco.MjsBody) -> Array:
    """(3, 3) a spec body's rotational inertia as the URDF gave it (its full inertia, or its principal moments)."""
    full = np.array(body.fullinertia)
    if np.isnan(full[0]):
        full = np.array([*body.inertia, 0.0, 0.0, 0.0])
    return np.array([[full[0], full[3], full[4]], [full[3], full[1], full[5]], [full[4], full[5], full[2]]])


def _repair_moments(body: mujoco.MjsBody) -> tuple[Array, Array]:
    """Give a spec body the nearest inertia MuJoCo accepts (:func:`_physical_moments`, same principal axes); returns
    its principal moments before and after, kg·m²."""
    moments, axes = np.linalg.eigh(_inertia_tensor(body))
    repaired = _physical_moments(moments)
    fixed = (axes * repaired) @ axes.T
    body.fullinertia = [fixed[0, 0], fixed[1, 1], fixed[2, 2], fixed[0, 1], fixed[0, 2], fixed[1, 2]]
    return moments, repaired


def _mu_for_mujoco(mu: float, what: str) -> float:
    if not mu >= 0.0:
        raise ConfigError(f"{what}: mu must be >= 0 (inf allowed), got {mu}")
    return MU_INFINITE if math.isinf(mu) else float(mu)


def _xyzw_from_wxyz(quaternion_wxyz: Array) -> Array:
    return quaternion_wxyz[[1, 2, 3, 0]]


def _rotation_from_wxyz(quaternion_wxyz: Array) -> Array:
    out = np.empty(9)
    mujoco.mju_quat2Mat(out, quaternion_wxyz)
    return out.reshape(3, 3)


@contextlib.contextmanager
def _warnings_logged() -> Iterator[None]:
    """MuJoCo's warnings go to this module's log while it reads a URDF, not to MUJOCO_LOG.TXT in the working folder
    (a URDF joint whose limits are [0, 0], read by both models as no limits, warns there)."""
    previous = mujoco.get_mju_user_warning()
    mujoco.set_mju_user_warning(lambda text: _LOG.warning("MuJoCo: %s", text))
    try:
        yield
    finally:
        mujoco.set_mju_user_warning(previous)


def urdf_for_mujoco(urdf_path: Path) -> tuple[str, list[str]]:
    """The URDF's text as MuJoCo's importer should read it, and what was changed, one line each.

    * every mesh file name made absolute (:func:`~idcontrol.robot.urdf.resolve_mesh`: a relative one against the
      URDF's folder, as URDF readers take it; MuJoCo would also prefix a ``<mujoco><compiler meshdir>`` the URDF
      may carry, and look for ``meshes/meshes/...``);
    * a ``<visual>`` or ``<collision>`` whose mesh file does not exist is dropped: it only displays, the contacts
      are the robot file's spheres;
    * a ``<visual>`` with several ``<material>`` keeps the first (MuJoCo refuses the repeated element).
    """
    root = read_urdf(urdf_path).tree.getroot()  # (a fresh parse: changed here freely)
    changes: list[str] = []
    missing = drop_missing_meshes(root, urdf_path)
    materials = 0
    for visual in root.iter("visual"):
        for extra in visual.findall("material")[1:]:
            visual.remove(extra)
            materials += 1
    if missing:
        shown = ", ".join(sorted(set(missing))[:3]) + (" ..." if len(set(missing)) > 3 else "")
        changes.append(
            f"{len(missing)} visual/collision element(s) dropped: their mesh file is missing ({shown}); "
            "they only display (the contact spheres collide)"
        )
    if materials:
        changes.append(f"{materials} repeated <material> element(s) of a <visual> dropped (MuJoCo reads one)")
    return ET.tostring(root, encoding="unicode"), changes


@dataclass(frozen=True)
class Terrain:
    """Ground the controller is not told of (``[bridge] terrain``), built around the robot's standing footprint.

    kind : ``"bumps"``: a height field of smooth random bumps within ± ``height`` m (drawn with ``seed``), flat under
        the standing feet; ``"slope"``: the floor rises at ``slope_deg`` degrees along +x from just ahead of the
        front feet; ``"step"``: the floor steps up by ``height`` m there.
    """

    kind: str
    height: float = 0.02
    slope_deg: float = 10.0
    seed: int = 0

    #: m the terrain starts ahead of the standing feet (slope, step); the bumps grow over this beyond a flat pad
    #: reaching ``PAD`` m past the standing feet (the feet start on flat ground, whatever the field's grid)
    CLEARANCE, PAD = 0.1, 0.05
    #: the bumps' field: half extent (m), grid spacing (m), spacing of the random heights it interpolates (m)
    FIELD_HALF_EXTENT, FIELD_SPACING, BUMP_SPACING = 6.0, 0.02, 0.16

    def add_to(self, spec: mujoco.MjSpec, footprint: Array, floor: dict[str, Any]) -> None:
        """Add this terrain's geoms to ``spec``; ``footprint`` (2, 2) the standing feet's [min, max] x and y in
        world, m; ``floor`` the floor geom's contact attributes."""
        front = float(footprint[0, 1]) + self.CLEARANCE
        if self.kind == "step":
            half = np.array([self.FIELD_HALF_EXTENT, self.FIELD_HALF_EXTENT, 0.5 * self.height])
            spec.worldbody.add_geom(
                name="terrain:step",
                type=mujoco.mjtGeom.mjGEOM_BOX,
                size=half,
                pos=[front + half[0], 0.0, 0.5 * self.height],
                **floor,
            )
        elif self.kind == "slope":
            angle = math.radians(self.slope_deg)
            half = np.array([self.FIELD_HALF_EXTENT, self.FIELD_HALF_EXTENT, 0.5])
            # the box's top face passes through (front, ·, 0), rising along +x
            normal = np.array([-math.sin(angle), 0.0, math.cos(angle)])
            centre = (
                np.array([front, 0.0, 0.0])
                + half[0] * np.array([math.cos(angle), 0.0, math.sin(angle)])
                - half[2] * normal
            )
            quat = [math.cos(-0.5 * angle), 0.0, math.sin(-0.5 * angle), 0.0]  # w x y z: about y by −angle
            spec.worldbody.add_geom(
                name="terrain:slope", type=mujoco.mjtGeom.mjGEOM_BOX, size=half, pos=centre, quat=quat, **floor
            )
        elif self.kind == "bumps":
            heights = self.bump_heights(footprint)
            n, low, high = heights.shape[0], float(heights.min()), float(heights.max())
            # MuJoCo scales the field's data to [0, 1], then to [0, size[2]] above the geom: the geom sits at the
            # lowest height, so that every height lands where it was drawn
            spec.add_hfield(
                name="terrain:bumps",
                size=[self.FIELD_HALF_EXTENT, self.FIELD_HALF_EXTENT, max(high - low, 1e-6), 0.1],
                nrow=n,
                ncol=n,
                userdata=heights.ravel().tolist(),
            )
            spec.worldbody.add_geom(
                name="terrain:bumps",
                type=mujoco.mjtGeom.mjGEOM_HFIELD,
                hfieldname="terrain:bumps",
                pos=[0.0, 0.0, low],
                **floor,
            )
            spec.geom("floor").pos = [0.0, 0.0, low - 0.1]  # below the field: its dips are the ground
        else:
            raise ConfigError(f"unknown terrain {self.kind!r}; MuJoCo builds bumps, slope, step")

    def height_at(self, x: float, y: float, footprint: Array) -> float:
        """The terrain's height at world (x, y), m (``footprint`` as in :meth:`add_to`)."""
        front = float(footprint[0, 1]) + self.CLEARANCE
        if self.kind == "step":
            return self.height if x >= front else 0.0
        if self.kind == "slope":
            return max(0.0, x - front) * math.tan(math.radians(self.slope_deg))
        E, h = self.FIELD_HALF_EXTENT, self.FIELD_SPACING
        if not (-E <= x <= E and -E <= y <= E):
            return 0.0
        heights = self.bump_heights(footprint)
        return float(heights[int(round((y + E) / h)), int(round((x + E) / h))])

    def bump_heights(self, footprint: Array) -> Array:
        """(n, n) heights of the bumps' field, m, row i at y = −E + i·spacing, column j at x = −E + j·spacing: random
        heights on a coarse grid, bilinearly interpolated, faded to 0 over the standing footprint and ``PAD`` beyond."""
        rng = np.random.default_rng(self.seed)
        E = self.FIELD_HALF_EXTENT
        axis = np.arange(-E, E + 0.5 * self.FIELD_SPACING, self.FIELD_SPACING)
        coarse_axis = np.arange(-E, E + 0.5 * self.BUMP_SPACING, self.BUMP_SPACING)
        coarse = rng.uniform(-self.height, self.height, (coarse_axis.size, coarse_axis.size))
        rows = np.array([np.interp(axis, coarse_axis, row) for row in coarse])  # along x
        field = np.array([np.interp(axis, coarse_axis, column) for column in rows.T]).T  # along y
        x, y = np.meshgrid(axis, axis)  # field[i, j] at (x = axis[j], y = axis[i])
        dx = np.maximum(np.maximum(footprint[0, 0] - x, x - footprint[0, 1]), 0.0)
        dy = np.maximum(np.maximum(footprint[1, 0] - y, y - footprint[1, 1]), 0.0)
        fade = np.clip((np.hypot(dx, dy) - self.PAD) / self.CLEARANCE, 0.0, 1.0)
        return field * fade * fade * (3.0 - 2.0 * fade)


class MujocoSim(SimulatorBase):
    """A MuJoCo simulation of an idcontrol robot, stepped with joint torques.

    Parameters
    ----------
    robot : the robot model, or a robot name / robot.toml path.
    mu : friction coefficient of the floor (``math.inf``: no slip, see :data:`MU_INFINITE`).
    timestep : physics step, s.
    with_objects : add the robot configuration's ``[[objects]]`` as free bodies.
    object_mu : friction coefficient of every object (default: each object's configured ``mu``).
    floor : add the floor plane z = 0 (default: for a floating-base robot).
    solref : MuJoCo contact ``(timeconst s, dampratio)`` (default: ``(2 · timestep, 1)``).
    solimp : MuJoCo contact impedance (5 numbers, default :data:`STIFF_SOLIMP`).
    impratio : frictional-to-normal stiffness ratio of the elliptic cones.
    initial : (nq,) configuration that :meth:`reset` returns to (default: the standing posture).
    terrain : ground the controller is not told of (:class:`Terrain`), with the floor; floating base only.
    """

    kind = "mujoco"

    @classmethod
    def from_launch(cls, config: LaunchConfig, robot: RobotModel, **options: Any) -> MujocoSim:
        """The launch file's MuJoCo, on its ``[bridge] terrain`` (flat, or one the controller is not told of)."""
        b = config.bridge
        if b.terrain in UNKNOWN_TERRAINS:
            terrain = Terrain(b.terrain, height=b.terrain_height, slope_deg=b.terrain_slope, seed=b.terrain_seed)
            options.setdefault("terrain", terrain)
        return super().from_launch(config, robot, **options)

    def __init__(
        self,
        robot: RobotModel | str,
        mu: float = 1.0,
        timestep: float = 1e-3,
        with_objects: bool = False,
        *,
        object_mu: float | None = None,
        floor: bool | None = None,
        solref: tuple[float, float] | None = None,
        solimp: tuple[float, float, float, float, float] = STIFF_SOLIMP,
        impratio: float = 10.0,
        initial: Array | None = None,
        terrain: Terrain | None = None,
    ) -> None:
        super().__init__(robot, mu, timestep, with_objects, object_mu=object_mu)
        r = self.robot
        floor_mu = _mu_for_mujoco(mu, "floor")
        self.has_floor = r.floating_base if floor is None else floor
        self.initial = r.standing_configuration() if initial is None else r.check_state(initial, np.zeros(r.nv))[0]
        contact = {
            "condim": 3,
            "solref": list(solref) if solref is not None else [2.0 * timestep, 1.0],
            "solimp": list(solimp),
        }

        text, read_changes = urdf_for_mujoco(Path(r.config.urdf_path))
        try:
            with _warnings_logged():
                spec = mujoco.MjSpec.from_string(text)
        except ValueError as e:
            raise ConfigError(f"{r.config.urdf_path}: MuJoCo could not read the URDF: {e}") from e
        self.model_differences: list[str] = read_changes + self._adapt(spec)
        spec.compiler.inertiafromgeom = mujoco.mjtInertiaFromGeom.mjINERTIAFROMGEOM_FALSE
        spec.compiler.alignfree = False  # free-joint qpos is the body frame, not the inertia frame
        opt = spec.option
        opt.timestep = timestep
        opt.gravity = GRAVITY
        opt.cone = mujoco.mjtCone.mjCONE_ELLIPTIC
        opt.impratio = impratio
        opt.disableflags |= mujoco.mjtDisableBit.mjDSBL_AUTORESET
        for joint in spec.joints:  # the URDF's dry friction as stiff as its contacts (see the module's notes)
            if joint.frictionloss > 0.0:
                joint.solref_friction = [2.0 * timestep, 1.0]
        for geom in spec.geoms:  # the URDF's own geoms: display only
            geom.contype = geom.conaffinity = 0

        pin_model = r.model
        pin_names = [str(n) for n in pin_model.names]
        root = spec.worldbody.first_body()
        if r.floating_base:
            root.add_freejoint(name=pin_names[1])
        for name in r.actuated_joints:
            limit = float(r.torque_limits[r.actuated_joints.index(name)])
            spec.joint(name).actfrclimited = mujoco.mjtLimited.mjLIMITED_FALSE
            spec.add_actuator(
                name=name,
                target=name,
                trntype=mujoco.mjtTrn.mjTRN_JOINT,
                gear=[1.0, 0, 0, 0, 0, 0],
                ctrllimited=mujoco.mjtLimited.mjLIMITED_TRUE,
                ctrlrange=[-limit, limit],
            )
        if self.has_floor:
            spec.worldbody.add_geom(
                name="floor",
                type=mujoco.mjtGeom.mjGEOM_PLANE,
                size=[0.0, 0.0, 0.05],
                contype=1,
                conaffinity=1,
                priority=_FLOOR_PRIORITY,
                friction=[floor_mu, 0.0, 0.0],
                **contact,
            )
            self.terrain = terrain
            if terrain is not None:
                self._footprint = self._standing_footprint()
                attributes = {
                    "contype": 1,
                    "conaffinity": 1,
                    "priority": _FLOOR_PRIORITY,
                    "friction": [floor_mu, 0.0, 0.0],
                    **contact,
                }
                terrain.add_to(spec, self._footprint, attributes)
        for o in self.objects:
            w_x_y_z = np.roll(o.initial_orientation_xyzw, 1)
            body = spec.worldbody.add_body(
                name=o.name,
                pos=o.initial_position,
                quat=w_x_y_z / np.linalg.norm(w_x_y_z),
                mass=o.mass,
                ipos=[0.0, 0.0, 0.0],  # centre of mass at the body origin (MjSpec leaves it undefined)
                iquat=[1.0, 0.0, 0.0, 0.0],
                inertia=np.diag(o.inertia_in_body),
                explicitinertial=True,
            )
            body.add_freejoint()
            body.add_geom(
                name=o.name,
                type=mujoco.mjtGeom.mjGEOM_BOX,
                size=np.asarray(o.size) / 2.0,
                contype=1,
                conaffinity=1,
                priority=_OBJECT_PRIORITY,
                friction=[_mu_for_mujoco(o.mu if object_mu is None else object_mu, o.name), 0.0, 0.0],
                **contact,
            )
        for sphere, fid in zip(r.config.contact_spheres, r.sphere_frame_ids, strict=True):
            frame = pin_model.frames[int(fid)]
            joint = frame.parentJoint
            if joint == 0:
                body = spec.worldbody
            elif r.floating_base and joint == 1:
                body = root
            else:
                body = spec.joint(pin_names[joint]).parent
            body.add_geom(
                name=f"contact:{sphere.name}",
                type=mujoco.mjtGeom.mjGEOM_SPHERE,
                size=[sphere.radius, 0.0, 0.0],
                pos=frame.placement.act(sphere.offset_in_frame),  # sphere centre in the joint (= MuJoCo body) frame
                contype=1,
                conaffinity=0,
                priority=_SPHERE_PRIORITY,
                **contact,
            )
        try:
            self._model = spec.compile()
        except ValueError as e:
            raise ConfigError(f"{r.config.urdf_path}: MuJoCo could not build the model: {e}") from e
        self._spec = spec
        self.model_differences += self._compare()
        for line in self.model_differences:
            _LOG.warning("simulated %s differs from the controller's model: %s", r.name, line)
        self._data = mujoco.MjData(self._model)
        self._warning_counts = self._data.warning.number  # a view: MuJoCo's live warning counters
        self._index_state(pin_names)
        self.reset()

    def _adapt(self, spec: mujoco.MjSpec) -> list[str]:
        """Make a published URDF's spec compile (see the module docstring); what was changed, one line each."""
        r = self.robot
        changes = []
        unreadable = {}
        for mesh in list(spec.meshes):  # (their paths are absolute: urdf_for_mujoco)
            if os.path.splitext(mesh.file)[1].lower() not in MESH_FORMATS:
                unreadable[mesh.name] = mesh
        if unreadable:
            dropped = [g for g in spec.geoms if g.type == mujoco.mjtGeom.mjGEOM_MESH and g.meshname in unreadable]
            for geom in dropped:
                spec.delete(geom)
            kinds = sorted({os.path.splitext(m.file)[1] for m in unreadable.values()})
            for mesh in unreadable.values():
                spec.delete(mesh)
            changes.append(
                f"{len(dropped)} mesh geom(s) dropped: MuJoCo cannot decode {', '.join(kinds)} "
                f"({len(unreadable)} mesh file(s)); they only display (the contact spheres collide)"
            )
        mimics = [e for e in spec.equalities if e.type == mujoco.mjtEq.mjEQ_JOINT]  # the URDF's <mimic> joints
        for equality in mimics:
            changes.append(
                f"joint {equality.name1!r}: the URDF's <mimic> of {equality.name2!r} is not simulated; "
                "it moves independently, as in the controller's model"
            )
            spec.delete(equality)
        bad = r.preflight.repairable_links
        changes += self._round_off_inertias(spec, set(bad))
        if bad and not r.config.sim.repair_inertia:
            raise ConfigError(
                f"{r.config.urdf_path}: link(s) {list(bad)} have an inertia MuJoCo rejects (see "
                f"`idcontrol robot check {r.config.path}`); set [sim] "
                "repair_inertia = true in the robot file to simulate the nearest it accepts"
            )
        for name in bad:
            body = spec.body(name)
            if body is None:
                continue
            moments, repaired = _repair_moments(body)
            mass = f"mass {body.mass:g} kg"
            if name in r.preflight.massless_links:  # a moving body without mass
                body.mass = REPAIR_MASS_FRACTION * r.total_mass()
                mass = f"mass 0 -> {body.mass:.3g} kg ({REPAIR_MASS_FRACTION:g} of the robot's)"
            changes.append(
                f"link {name!r}: inertia repaired ([sim] repair_inertia), principal moments "
                f"({', '.join(f'{x:.3g}' for x in moments)}) -> ({', '.join(f'{x:.3g}' for x in repaired)})"
                f" kg·m², {mass}"
            )
        return changes

    @staticmethod
    def _round_off_inertias(spec: mujoco.MjSpec, skip: set[str]) -> list[str]:
        """Links whose principal moments break I₁ + I₂ ≥ I₃ by round-off only (a thin plate's I₃ written with more
        digits than I₁ and I₂: the preflight accepts it to 1e-6 relative, MuJoCo's compiler not at all) get the
        nearest moments MuJoCo accepts (:func:`_physical_moments`, a change of about 1e-6 relative); what changed,
        one line each. ``skip``: the links the preflight names (repaired under ``[sim] repair_inertia``)."""
        changes = []
        for body in spec.bodies:
            if body.name in skip or body.mass <= 0.0:
                continue
            moments, _ = np.linalg.eigh(_inertia_tensor(body))
            shortfall = float(moments[2] - moments[0] - moments[1])
            if moments[0] + moments[1] >= moments[2] or shortfall > 1e-6 * float(moments[2]) or moments[0] <= 0.0:
                continue  # physical, or a real defect (the preflight's, or MuJoCo's own message)
            _repair_moments(body)
            changes.append(
                f"link {body.name!r}: principal moments ({', '.join(f'{x:.6g}' for x in moments)}) "
                f"kg·m² break I1 + I2 >= I3 by round-off ({shortfall:.2g}); raised by about 1e-6 relative"
            )
        return changes

    def _compare(self) -> list[str]:
        """Differences between the compiled model and the controller's: masses, joint limits, damping, friction."""
        r, m = self.robot, self._model
        pin_model = r.model
        out = []
        objects = {o.name for o in self.objects}
        moving = [b for b in range(1, m.nbody) if m.body(b).name not in objects and m.body_weldid[b] != 0]
        mass_mj = float(sum(m.body_mass[b] for b in moving))
        mass_pin = float(sum(pin_model.inertias[j].mass for j in range(1, pin_model.njoints)))
        if abs(mass_mj - mass_pin) > 1e-6 * max(mass_pin, 1.0):
            out.append(f"moving mass {mass_mj:.6g} kg in MuJoCo, {mass_pin:.6g} kg in the controller")
        passive: dict[str, list[str]] = {"damping": [], "friction": [], "armature": []}
        for j in range(1, pin_model.njoints):
            name = str(pin_model.names[j])
            if pin_model.joints[j].shortname() == "JointModelFreeFlyer" or pin_model.joints[j].nq != 1:
                continue
            jid = m.joint(name).id
            k = pin_model.joints[j].idx_q
            lo, hi = float(pin_model.lowerPositionLimit[k]), float(pin_model.upperPositionLimit[k])
            bounded = lo > -1e300 and hi < 1e300
            if bool(m.jnt_limited[jid]) != bounded or (bounded and not np.allclose(m.jnt_range[jid], [lo, hi])):
                shown = tuple(m.jnt_range[jid]) if m.jnt_limited[jid] else "none"
                out.append(f"joint {name!r}: limits {shown} in MuJoCo, ({lo:g}, {hi:g}) in the controller")
            dof = m.jnt_dofadr[jid]
            for what, value in (
                ("damping", m.dof_damping[dof]),
                ("friction", m.dof_frictionloss[dof]),
                ("armature", m.dof_armature[dof]),
            ):
                if value != 0.0:
                    passive[what].append(f"{name} {value:g}")
        for what, joints in passive.items():
            if joints:
                how = (
                    "the controller adds it at the reference's velocity (a feed-forward)"
                    if what != "armature"
                    else "the controller does not model it"
                )
                out.append(f"the URDF's joint {what} acts in MuJoCo, {how}: " + ", ".join(joints))
        return out

    def _index_state(self, pin_names: list[str]) -> None:
        """Map Pinocchio's joint coordinates onto MuJoCo's, by joint name."""
        m, r = self._model, self.robot
        first = 2 if r.floating_base else 1
        pin_q, pin_v, mj_q, mj_v = [], [], [], []
        for j in range(first, len(pin_names)):
            pj = r.model.joints[j]
            if pj.nq != 1 or pj.nv != 1:
                raise ConfigError(f"joint {pin_names[j]!r}: only one-DoF revolute/prismatic joints are supported")
            mj = m.joint(pin_names[j])
            pin_q.append(pj.idx_q)
            pin_v.append(pj.idx_v)
            mj_q.append(m.jnt_qposadr[mj.id])
            mj_v.append(m.jnt_dofadr[mj.id])
        self._pin_q, self._pin_v = np.asarray(pin_q, dtype=np.intp), np.asarray(pin_v, dtype=np.intp)
        self._mj_q, self._mj_v = np.asarray(mj_q, dtype=np.intp), np.asarray(mj_v, dtype=np.intp)
        if r.floating_base:
            base = m.joint(pin_names[1]).id
            self._base_q, self._base_v = int(m.jnt_qposadr[base]), int(m.jnt_dofadr[base])
        self._object_slots = []
        for o in self.objects:
            joint = int(m.body_jntadr[m.body(o.name).id])
            self._object_slots.append((o.name, int(m.jnt_qposadr[joint]), int(m.jnt_dofadr[joint])))
        sphere_geoms = [m.geom(f"contact:{s}").id for s in r.sphere_names]
        self._sphere_of_geom = np.full(m.ngeom, -1, dtype=np.intp)
        self._sphere_of_geom[sphere_geoms] = np.arange(len(sphere_geoms))
        self._wrench = np.zeros(6)

    # ------------------------------------------------------------------ accessors
    @property
    def model(self) -> mujoco.MjModel:
        return self._model

    @property
    def data(self) -> mujoco.MjData:
        return self._data

    @property
    def spec(self) -> mujoco.MjSpec:
        """The edited specification the model was compiled from (e.g. ``spec.to_xml()`` to inspect it)."""
        return self._spec

    def ground_height(self, x: float, y: float) -> float:
        """The ground's height under world (x, y), m: the terrain's, or the floor's 0."""
        terrain = getattr(self, "terrain", None)
        return 0.0 if terrain is None else terrain.height_at(x, y, self._footprint)

    def _standing_footprint(self) -> Array:
        """(2, 2) [min, max] world x and y of the contact spheres at the initial posture, m (updates the robot
        model's kinematics: at construction only)."""
        r = self.robot
        r.update(self.initial, np.zeros(r.nv))
        centres = r.sphere_centers_in_world
        return np.array([[centres[:, 0].min(), centres[:, 0].max()], [centres[:, 1].min(), centres[:, 1].max()]])

    @property
    def time(self) -> float:
        """Simulation time, s."""
        return float(self._data.time)

    # ------------------------------------------------------------------ state exchange
    def reset(
        self, q: Array | None = None, v: Array | None = None, objects: dict[str, ObjectState] | None = None
    ) -> None:
        """Restart at time 0 from ``q`` (nq,), ``v`` (nv,) in Pinocchio conventions (default: ``initial``, at rest).

        ``objects`` sets movable bodies by name; the others start at their configured initial pose, at rest.
        Contact forces are then those of ``mj_forward`` with zero torque.
        """
        r, m, d = self.robot, self._model, self._data
        q, v = r.check_state(self.initial if q is None else q, np.zeros(r.nv) if v is None else v)
        states = {o.name: ObjectState(o.initial_position, o.initial_orientation_xyzw) for o in self.objects}
        for name, s in (objects or {}).items():
            if name not in states:
                raise InputError(f"unknown object {name!r}; the simulation has {sorted(states)}")
            states[name] = s.validated(name)
        mujoco.mj_resetData(m, d)
        d.qpos[self._mj_q] = q[self._pin_q]
        d.qvel[self._mj_v] = v[self._pin_v]
        if r.floating_base:
            a, b = self._base_q, self._base_v
            quat_wxyz = np.roll(q[3:7], 1) / np.linalg.norm(q[3:7])
            d.qpos[a : a + 3] = q[0:3]
            d.qpos[a + 3 : a + 7] = quat_wxyz
            d.qvel[b : b + 3] = _rotation_from_wxyz(quat_wxyz) @ v[0:3]  # base frame -> world
            d.qvel[b + 3 : b + 6] = v[3:6]  # both in the base frame
        for name, a, b in self._object_slots:
            s = states[name]
            quat_wxyz = np.roll(s.orientation_xyzw, 1) / np.linalg.norm(s.orientation_xyzw)
            d.qpos[a : a + 3] = s.position
            d.qpos[a + 3 : a + 7] = quat_wxyz
            d.qvel[b : b + 3] = s.linear_velocity  # world, body origin = centre of mass
            d.qvel[b + 3 : b + 6] = _rotation_from_wxyz(quat_wxyz).T @ s.angular_velocity  # world -> body
        mujoco.mj_forward(m, d)

    def step(self, tau: Array) -> None:
        """Apply joint torques ``tau`` (nu,) in ``robot.actuated_joints`` order, N·m (N), for one time step.

        Torques beyond ``robot.torque_limits`` are clamped. Raises ShapeError / NonFiniteError
        (without stepping) for a malformed ``tau``, SimulationDiverged if MuJoCo's state blew up.
        """
        self._data.ctrl[:] = check_vector("tau", tau, self.robot.nu)
        before = self._divergence_count()
        mujoco.mj_step(self._model, self._data)
        if self._divergence_count() != before:
            raise SimulationDiverged(f"MuJoCo's state diverged at t = {self._data.time:.6f} s; reset the simulation")

    def _divergence_count(self) -> int:
        return int(self._warning_counts[_DIVERGENCE_WARNINGS].sum())

    def state(self) -> SimState:
        """The current state (see :class:`SimState`), converted from MuJoCo's conventions.

        MuJoCo's free joint holds qpos = [position, quaternion w x y z] and qvel =
        [linear velocity of the body origin in world, angular velocity in the body frame];
        Pinocchio's free-flyer v has the linear velocity in the body frame: v_lin = Rᵀ qvel_lin.
        """
        r, d = self.robot, self._data
        q = np.empty(r.nq)
        v = np.empty(r.nv)
        q[self._pin_q] = d.qpos[self._mj_q]
        v[self._pin_v] = d.qvel[self._mj_v]
        if r.floating_base:
            a, b = self._base_q, self._base_v
            quat_wxyz = d.qpos[a + 3 : a + 7]
            q[0:3] = d.qpos[a : a + 3]
            q[3:7] = _xyzw_from_wxyz(quat_wxyz)
            v[0:3] = _rotation_from_wxyz(quat_wxyz).T @ d.qvel[b : b + 3]
            v[3:6] = d.qvel[b + 3 : b + 6]
        objects = {}
        for name, a, b in self._object_slots:
            quat_wxyz = d.qpos[a + 3 : a + 7]
            objects[name] = ObjectState(
                position=d.qpos[a : a + 3].copy(),
                orientation_xyzw=_xyzw_from_wxyz(quat_wxyz),
                linear_velocity=d.qvel[b : b + 3].copy(),
                angular_velocity=_rotation_from_wxyz(quat_wxyz) @ d.qvel[b + 3 : b + 6],
            )
        return SimState(float(d.time), q, v, objects, self.contact_forces())

    def contact_forces(self) -> Array:
        """(k, 3) force the environment applied on each contact sphere during the last step, world frame, N.

        ``mj_contactForce`` gives the force of geom1 on geom2 in the contact frame, whose
        rows (``contact.frame``) are the normal, pointing from geom1 to geom2, and two tangents.
        """
        m, d = self._model, self._data
        out = np.zeros((len(self.robot.sphere_names), 3))
        if d.ncon == 0:
            return out
        frames = d.contact.frame.reshape(-1, 3, 3)
        # sphere index (or -1) of each contact's geom1 and geom2
        for i, (s1, s2) in enumerate(self._sphere_of_geom[d.contact.geom].tolist()):
            if s1 < 0 and s2 < 0:
                continue
            mujoco.mj_contactForce(m, d, i, self._wrench)
            on_geom2_world = frames[i].T @ self._wrench[:3]
            if s2 >= 0:
                out[s2] += on_geom2_world
            if s1 >= 0:
                out[s1] -= on_geom2_world
        return out

    def fell(self, min_base_height: float) -> bool:
        """Whether the floating base's origin is below ``min_base_height`` (world z, m) or the state is not finite."""
        qpos = self._data.qpos
        return base_fell(self.robot, qpos, qpos[self._base_q + 2] if self.robot.floating_base else 0.0, min_base_height)
