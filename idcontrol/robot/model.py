"""The robot's rigid-body model: Pinocchio ``(model, data)`` updated in place each tick."""

from __future__ import annotations

import numpy as np
import pinocchio as pin
from numba import njit
from numpy.typing import NDArray

from idcontrol.errors import ConfigError, NameNotFound
from idcontrol.robot.config import Gains, LimbConfig, RobotConfig, load_robot_config
from idcontrol.robot.limbs import limbs_from_spheres
from idcontrol.robot.preflight import preflight
from idcontrol.robot.urdf import frame_id
from idcontrol.validation import check_unit_quaternion, check_vector

Array = NDArray[np.float64]
IntArray = NDArray[np.intp]

#: CRBA in the world convention fills the joint Jacobians (data.J) and placements (data.oMi) on its way, which saves
#: a separate computeJointJacobians pass. Pinocchio releases before the convention argument get the two passes.
_CRBA_WORLD = getattr(getattr(pin, "Convention", None), "WORLD", None)


@njit(cache=True)
def frame_jacobians(J, support, origins, out):
    """World-aligned Jacobians of frames at ``origins`` (k, 3) from Pinocchio's world-frame joint Jacobian.

    ``J`` (6, nv) is ``data.J`` (spatial velocity at the world origin, linear
    then angular rows); ``support`` (k, nv) flags the DoFs that move each
    frame's parent joint. The velocity of the point p is v₀ + ω × p, so
    ``out[f]`` (6, nv) = [J_lin + J_ang × p; J_ang] on the support, 0 elsewhere,
    which is Pinocchio's ``getFrameJacobian(..., LOCAL_WORLD_ALIGNED)``.
    """
    for f in range(out.shape[0]):
        px, py, pz = origins[f, 0], origins[f, 1], origins[f, 2]
        for c in range(J.shape[1]):
            if support[f, c]:
                wx, wy, wz = J[3, c], J[4, c], J[5, c]
                out[f, 0, c] = J[0, c] + wy * pz - wz * py
                out[f, 1, c] = J[1, c] + wz * px - wx * pz
                out[f, 2, c] = J[2, c] + wx * py - wy * px
                out[f, 3, c] = wx
                out[f, 4, c] = wy
                out[f, 5, c] = wz
            else:
                for r in range(6):
                    out[f, r, c] = 0.0


@njit(cache=True)
def frame_kinematics(J, support, translations, origins, out, sphere_slot, centers, centers_at_origins):
    """Copy the frames' world ``translations`` (tuple of (3,) views of Pinocchio's data) into ``origins`` (k, 3),
    fill ``out`` as :func:`frame_jacobians` does and, when ``centers_at_origins``, the sphere centres
    (s, 3) from the origins of their frames (``sphere_slot`` (s,)).

    Kept beside Pinocchio: ``getFrameJacobian`` called per frame from Python costs ten times as much
    (docs/benchmarks.md, "Measured choices in the code"). Its type includes the number of frames (a
    tuple of views), so it has no fixed signature: :class:`RobotModel` runs it once when it is built.
    """
    for f in range(len(translations)):
        t = translations[f]
        for j in range(3):
            origins[f, j] = t[j]
    frame_jacobians(J, support, origins, out)
    if centers_at_origins:
        for k in range(sphere_slot.shape[0]):
            for j in range(3):
                centers[k, j] = origins[sphere_slot[k], j]


class RobotModel:
    """A robot loaded from its URDF and ``robot.toml``.

    The generalized velocity ``v`` (length ``nv``) follows Pinocchio's layout:
    for a floating base the first six entries are the base twist (linear then
    angular, in the base frame) and the configuration ``q`` (length ``nq``)
    holds the base position and unit quaternion (x, y, z, w) first.

    Attributes
    ----------
    actuated_dofs : (nu,) indices into ``v`` of the actuated joints (the
        selection matrix P of the paper picks these).
    actuated_idx_q : (nu,) indices into ``q`` of the actuated (one-DoF) joints.
    movable_joints : every joint that moves, in ``q``'s order (the floating base's excluded); the actuated
        joints unless the robot file names fewer.
    unactuated_dofs : (nv - nu,) the remaining indices (floating base first).
    torque_limits : (nu,) N·m (or N for prismatic joints).
    """

    def __init__(self, config: RobotConfig | str) -> None:
        if isinstance(config, str):
            config = load_robot_config(config)
        self.config = config
        # the URDF's numbers, bodies, effort limits and every name of the robot file, checked before any use
        self.preflight = preflight(config)
        self.preflight.raise_for_errors()
        self.model = self.preflight.model
        self.data = self.model.createData()
        m = self.model
        self.nq = m.nq
        self.nv = m.nv

        joint_names = [str(n) for n in m.names]
        movable = [n for n in joint_names[1:] if m.joints[m.getJointId(n)].nv > 0]
        if config.floating_base:
            movable = [n for n in movable if m.joints[m.getJointId(n)].shortname() != "JointModelFreeFlyer"]
        actuated = list(config.actuated_joints) if config.actuated_joints is not None else movable
        dofs: list[int] = []
        for name in actuated:
            if name not in movable:
                raise NameNotFound("joint", name, movable)
            j = m.joints[m.getJointId(name)]
            dofs.extend(range(j.idx_v, j.idx_v + j.nv))
        self.movable_joints: tuple[str, ...] = tuple(movable)
        self.actuated_joints: tuple[str, ...] = tuple(actuated)
        self.actuated_dofs: IntArray = np.asarray(dofs, dtype=np.intp)
        self.actuated_idx_q: IntArray = np.asarray([m.joints[m.getJointId(n)].idx_q for n in actuated], dtype=np.intp)
        mask = np.ones(self.nv, dtype=bool)
        mask[self.actuated_dofs] = False
        self.unactuated_dofs: IntArray = np.flatnonzero(mask)
        self.nu = len(self.actuated_dofs)

        limits = np.asarray(m.effortLimit, dtype=float)[self.actuated_dofs].copy()
        overrides = dict(config.torque_limit_overrides)
        if "default" in overrides:
            limits[:] = overrides.pop("default")
        for name, value in overrides.items():
            if name not in actuated:
                raise NameNotFound("actuated joint", name, actuated)
            j = m.joints[m.getJointId(name)]
            limits[dofs.index(j.idx_v)] = value
        if np.any(~(limits > 0)):
            bad = [actuated[i] for i in np.flatnonzero(~(limits > 0))]
            raise ConfigError(
                f"{config.path}: joints {bad} have no positive torque limit (URDF effort or [limits.torque])"
            )
        self.torque_limits: Array = limits
        self.gains = self._resolve_gains(config, config.gains_raw, "gains")
        self.pid_gains = self._resolve_pid_gains(config)

        frame_names = [f.name for f in m.frames]
        self.sphere_names = tuple(s.name for s in config.contact_spheres)
        self.sphere_radii: Array = np.array([s.radius for s in config.contact_spheres], dtype=float)
        self.sphere_offsets: Array = np.array([s.offset_in_frame for s in config.contact_spheres], dtype=float).reshape(
            -1, 3
        )
        frame_ids = []
        for s in config.contact_spheres:
            if not m.existFrame(s.frame):
                raise NameNotFound("frame", s.frame, frame_names)
            frame_ids.append(frame_id(m, s.frame))
        self.sphere_frame_ids: IntArray = np.asarray(frame_ids, dtype=np.intp)
        # Spheres on the same frame share one Jacobian evaluation.
        self._unique_frames, self.sphere_frame_slot = np.unique(self.sphere_frame_ids, return_inverse=True)
        self._frame_ids = [int(f) for f in self._unique_frames]
        self._zero_offsets = not np.any(self.sphere_offsets)
        k = len(frame_ids)
        self.sphere_centers_in_world: Array = np.zeros((k, 3))
        self.frame_origins_in_world: Array = np.zeros((len(self._unique_frames), 3))
        # only kept up to date when a sphere has an offset from its frame
        self._frame_rotations: Array = np.zeros((len(self._unique_frames), 3, 3))
        self.frame_jacobians: Array = np.zeros((len(self._unique_frames), 6, self.nv))
        # DoFs that move each frame's parent joint: the non-zero columns of its Jacobian
        self._frame_support = np.zeros((len(self._frame_ids), self.nv), dtype=np.bool_)
        for slot, fid in enumerate(self._frame_ids):
            for joint in m.supports[m.frames[fid].parentJoint]:
                if joint > 0:
                    self._frame_support[slot, m.joints[joint].idx_v : m.joints[joint].idx_v + m.joints[joint].nv] = True
        #: the robot file's [[limbs]], or one per chain of actuated joints moving a contact sphere (legs when the
        #: base floats); the fingers: actuated joints that close a grip
        self.limbs: tuple[LimbConfig, ...] = (
            config.limbs
            if config.limbs is not None
            else limbs_from_spheres(
                m, [s.frame for s in config.contact_spheres], self.actuated_joints, config.floating_base
            )
        )
        self.fingers: tuple[str, ...] = config.fingers
        self._bind_views()
        # a binding that returned copies would leave the views at their initial values: re-read them each tick then
        neutral = pin.neutral(m)
        pin.computeJointJacobians(m, self.data, neutral)
        pin.updateFramePlacements(m, self.data)
        pin.crba(m, self.data, neutral)
        pin.nonLinearEffects(m, self.data, neutral, np.ones(self.nv))
        fresh = [self.data.oMf[f].translation for f in self._frame_ids]
        self._views_live = (
            np.array_equal(self._J, self.data.J)
            and np.array_equal(self._M, self.data.M)
            and np.array_equal(self._nle, self.data.nle)
            and all(np.array_equal(view, now) for view, now in zip(self._translations, fresh, strict=True))
        )
        if self._translations:  # the frame kernel specializes on the number of frames: load it now, not in a tick
            self._frame_kinematics()

    # ------------------------------------------------------------------ set-up helpers
    def _resolve_pid_gains(self, config: RobotConfig) -> Gains:
        """Torque gains of the ``pid`` baseline (N·m/rad, N·m·s/rad, N·m/(rad·s)): ``[pid_gains]``, else
        the numbers of ``[gains]``, which the other formulations use as q̈_des gains (1/s², 1/s, 1/s³)."""
        if config.pid_gains_raw is None:
            return self.gains
        return self._resolve_gains(config, config.pid_gains_raw, "pid_gains")

    def _resolve_gains(self, config: RobotConfig, table: dict, section: str) -> Gains:
        out = {}
        defaults = {"kp": 100.0, "kd": 10.0, "ki": 0.0}
        for key, default in defaults.items():
            raw = table.get(key, default)
            if isinstance(raw, dict):
                values = np.full(self.nu, float(raw.get("default", default)))
                for name, value in raw.items():
                    if name == "default":
                        continue
                    if name not in self.actuated_joints:
                        raise NameNotFound("actuated joint", name, self.actuated_joints)
                    values[self.actuated_joints.index(name)] = float(value)
            else:
                values = np.full(self.nu, float(raw))
            if np.any(values < 0) or not np.all(np.isfinite(values)):
                raise ConfigError(f"{config.path}: {section}.{key} must be finite and >= 0")
            out[key] = values
        return Gains(**out)

    @property
    def name(self) -> str:
        return self.config.name

    @property
    def floating_base(self) -> bool:
        return self.config.floating_base

    @property
    def legs(self) -> tuple[LimbConfig, ...]:
        """The limbs that stand on the ground."""
        return tuple(limb for limb in self.limbs if limb.kind == "leg")

    def neutral_configuration(self) -> Array:
        """(nq,) Pinocchio's neutral configuration."""
        return pin.neutral(self.model).copy()

    def standing_configuration(self) -> Array:
        """(nq,) the nominal posture of ``robot.toml`` ``[standing]`` (neutral where unspecified)."""
        q = self.neutral_configuration()
        c = self.config
        if self.floating_base:
            if c.standing_base_position is not None:
                q[0:3] = c.standing_base_position
            if c.standing_base_orientation_xyzw is not None:
                quat = c.standing_base_orientation_xyzw
                q[3:7] = quat / np.linalg.norm(quat)
        for name, value in c.standing_joints.items():
            if not self.model.existJointName(name):
                raise NameNotFound("joint", name, [str(n) for n in self.model.names[1:]])
            j = self.model.joints[self.model.getJointId(name)]
            if j.nq != 1:
                raise ConfigError(f"{c.path}: standing joint {name!r} is not a one-DoF joint")
            q[j.idx_q] = value
        return q

    def joint_positions(self, q: Array) -> Array:
        """(nu,) actuated joint positions taken from a configuration (one-DoF joints)."""
        return np.asarray(q)[self.actuated_idx_q]

    def actuated_position_limits(self) -> tuple[Array, Array]:
        """(q_min, q_max), each (nu,): the actuated joints' URDF position limits, rad or m (±inf for a joint
        without limits, which the model holds as none or as an empty interval)."""
        lower = np.asarray(self.model.lowerPositionLimit, dtype=float)[self.actuated_idx_q]
        upper = np.asarray(self.model.upperPositionLimit, dtype=float)[self.actuated_idx_q]
        bounded = lower < upper
        return np.where(bounded, lower, -np.inf), np.where(bounded, upper, np.inf)

    def _bind_views(self) -> None:
        """Take numpy views of the Pinocchio outputs read each tick (its accessors cost ~1 µs per call).

        eigenpy exposes ``data.J`` and the frame placements as views of the C++
        memory, which the algorithms update in place, so they are taken once.
        """
        d = self.data
        self._J = d.J
        self._M, self._nle = d.M, d.nle
        self._translations = tuple(d.oMf[f].translation for f in self._frame_ids)
        self._rotations = [d.oMf[f].rotation for f in self._frame_ids]

    # ------------------------------------------------------------------ per tick
    def check_state(self, q: object, v: object) -> tuple[Array, Array]:
        """Validate a state; return float arrays. Raises ShapeError / NonFiniteError."""
        q = check_vector("q", q, self.nq)
        v = check_vector("v", v, self.nv)
        if self.floating_base:
            check_unit_quaternion("q[3:7]", q[3:7])
        return q, v

    def update(self, q: Array, v: Array) -> None:
        """Compute M, the bias forces, frame placements and the contact frames' Jacobians in place.

        ``q`` and ``v`` must already be validated (see :meth:`check_state`).
        """
        m, d = self.model, self.data
        if _CRBA_WORLD is not None:
            pin.crba(m, d, q, _CRBA_WORLD)  # also the placements and joint Jacobians
        else:
            pin.computeJointJacobians(m, d, q)  # also runs forward kinematics
            pin.crba(m, d, q)
        pin.nonLinearEffects(m, d, q, v)
        pin.updateFramePlacements(m, d)
        if not self._views_live:
            self._bind_views()
        origins = self.frame_origins_in_world
        if self._translations:
            self._frame_kinematics()
        if not self._zero_offsets:
            for slot, rotation in enumerate(self._rotations):
                self._frame_rotations[slot] = rotation
            rot = self._frame_rotations[self.sphere_frame_slot]
            np.einsum("kij,kj->ki", rot, self.sphere_offsets, out=self.sphere_centers_in_world)
            self.sphere_centers_in_world += origins[self.sphere_frame_slot]

    def _frame_kinematics(self) -> None:
        """Origins, Jacobians and (spheres centred at their frame origins, the usual case) sphere centres."""
        frame_kinematics(
            self._J,
            self._frame_support,
            self._translations,
            self.frame_origins_in_world,
            self.frame_jacobians,
            self.sphere_frame_slot,
            self.sphere_centers_in_world,
            self._zero_offsets,
        )

    @property
    def M(self) -> Array:
        """(nv, nv) generalized inertia at the last :meth:`update`, symmetric positive definite (a view of
        Pinocchio's, taken once: its accessor costs 0.3 µs a call)."""
        return self._M if self._views_live else self.data.M

    @property
    def bias(self) -> Array:
        """(nv,) Coriolis, centrifugal and gravity forces h(q, v) at the last update (M v̇ + h = ...)."""
        return self._nle if self._views_live else self.data.nle

    def total_mass(self) -> float:
        return float(sum(i.mass for i in self.model.inertias))
