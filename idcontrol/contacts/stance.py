"""Which feet stand, on what ground, and how fast the robot really moves: contacts decided from what a robot knows.

A real robot measures its joints and an IMU; its base position and linear velocity are an estimate, and it does
not know the terrain. Deciding contacts by the absolute signed distance to a terrain it is told, at a fraction of a
millimetre, and realizing in one period a post-step velocity computed from an estimated state taken as exact, turns
every estimation error into a lost contact or a force spike. :class:`StanceEstimator` replaces both, each tick,
in one compiled call (:func:`stance_kernel`):

* **The ground.** A plane n̂·x = d (world frame, n̂ up) through the stance feet: each contact sphere's lowest
  point while it stands, and its last footprint for a while after it lifts (so a trot's two stance feet and the
  two footprints before them still fix a tilt). With three or more points not on a line, the least-squares plane
  (its normal within ``max_ground_tilt`` of the vertical); with fewer, the normal is kept and only d is fitted.
  Both are low-passed with the time constant ``ground_time_constant``. A run starts standing: its first ground is
  the plane normal to the base's z axis through the lowest sphere (a robot standing on a slope stands on it).
* **The stance of each sphere**, with hysteresis, from the gait schedule (the reference's candidates and planned
  stance, when it has them), kinematics and a foot force sensor when the robot has one. A candidate sphere lands
  when its gap to the ground, predicted one period ahead, is within ``touchdown_height``; or when the schedule
  plans it in stance and it is within ``scheduled_height`` of the ground and no longer descends faster than
  ``settle_speed`` (it rests on something the plane does not show: a bump, a step); or when its sensor reads more
  than ``force_on``. A stance sphere lifts when the schedule no longer allows it, or when it is more than
  ``liftoff_height`` above the ground.
* **A contact-consistent velocity.** The stance feet do not move: the estimated v (nv,) is replaced by the
  nearest v_c with J_s v_c = 0, J_s the normal and tangential rows of the stance contacts, in the metric of the
  estimate's confidence, v_c = v − W J_sᵀ (J_s W J_sᵀ + εI)⁻¹ J_s v with W = diag(σ²): the base's linear
  velocity (σ_b, an estimate), its angular velocity (σ_ω, a gyro) and the joints' (σ_j, encoders). An error in
  the estimated base velocity, which every stance foot sees as the same slip, is taken out of the base, where it
  came from, and is never turned into a force; leg odometry does the same. A foot that lands is taken to land
  plastically, by its own leg's joints when other feet pin the base.

* **The feet the estimator holds still.** A stance sphere is a candidate contact: the formulation decides whether
  it carries load, and a rigid model's answer often does not share it (a trot's four stance feet in double support
  are statically indeterminate, and an LCP's vertex answer loads one diagonal pair while the other two feet lift a
  fraction of a millimetre). Only the stance spheres whose predicted normal force, low-passed with
  ``load_time_constant``, reaches ``force_on`` are the floating-base estimator's contacts (:attr:`anchors`); a foot
  with no answer yet (a run's start) counts as loaded, and a failed solve leaves the last found answer's loads. A
  foot lands a few milliseconds after its stance begins (the stance is decided one period ahead, within millimetres
  of the ground): it becomes a contact once its speed under the estimated velocity is at most ``settle_speed``, or
  after ``anchor_wait``, whichever comes first, so the estimator does not hold still a foot still descending.

The controller then takes each stance contact's gap as 0 (touching) and its normal and tangents from the ground
plane, and realizes q̇_des from v_c (:class:`~idcontrol.control.controller.InverseDynamicsController`,
``contacts = "estimated"``).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, fields

import numpy as np
from numba import njit
from numpy.typing import NDArray

from idcontrol.contacts.rows import robot_row
from idcontrol.errors import ConfigError
from idcontrol.robot.model import RobotModel

Array = NDArray[np.float64]

# the ground's slots in the estimator's state vector: normal (3), offset (m), initialized (0 or 1)
_NX, _NY, _NZ, _D, _READY = 0, 1, 2, 3, 4
# the parameters' slots
(
    _TD,
    _SCHED,
    _LIFT,
    _SETTLE,
    _FON,
    _DT,
    _ALPHA,
    _COS_TILT,
    _MEMORY,
    _SIG_B,
    _SIG_W,
    _SIG_J,
    _FLOATING,
    _ALPHA_V,
    _NPARAMS,
) = range(15)
# the base velocity's correction (6,) after the ground's slots in the state vector
_CORRECTION = 5


@dataclass(frozen=True)
class StanceSettings:
    """How contacts are decided from estimates (see the module docstring); lengths in m, speeds in m/s.

    None (the default of the lengths) scales with the robot: ``touchdown_height`` 2 mm, ``scheduled_height`` and
    ``liftoff_height`` 15 % and 25 % of the standing height of the base above the feet (at most 3 and 5 cm),
    ``force_on`` (N, a foot sensor's reading or the formulation's predicted normal force at which a foot is loaded)
    5 % of the robot's weight.
    """

    touchdown_height: float | None = None
    scheduled_height: float | None = None
    liftoff_height: float | None = None
    settle_speed: float = 0.05
    force_on: float | None = None
    ground_time_constant: float = 0.02  # s
    velocity_time_constant: float = 0.02  # s
    max_ground_tilt: float = 30.0  # degrees
    footprint_memory: float = 0.5  # s a lifted foot's footprint still fixes the ground
    base_velocity_sigma: float = 0.1  # m/s
    base_rate_sigma: float = 0.02  # rad/s
    joint_velocity_sigma: float = 0.05  # rad/s (m/s for a prismatic joint)
    load_time_constant: float = 0.003  # s: the predicted normal force's low-pass, for the estimator's contacts
    anchor_wait: float = 0.03  # s: a loaded stance foot still moving faster than settle_speed anchors after this

    @classmethod
    def from_table(cls, table: object, where: str) -> StanceSettings:
        """``[controller] stance = {...}`` checked (ConfigError naming the key)."""
        if table is None:
            return cls()
        if not isinstance(table, dict):
            raise ConfigError(f"{where}: controller.stance must be a table")
        known = {f.name for f in fields(cls)}
        unknown = sorted(set(table) - known)
        if unknown:
            raise ConfigError(f"{where}: unknown key(s) {unknown} in controller.stance; known: {sorted(known)}")
        for key, value in table.items():
            if not isinstance(value, (int, float)) or isinstance(value, bool) or not math.isfinite(value) or value < 0:
                raise ConfigError(f"{where}: controller.stance.{key} must be a finite number >= 0, got {value!r}")
        out = cls(**{k: float(v) for k, v in table.items()})
        if (
            out.ground_time_constant <= 0
            or out.velocity_time_constant <= 0
            or out.load_time_constant <= 0
            or out.max_ground_tilt >= 80
        ):
            raise ConfigError(
                f"{where}: controller.stance's time constants must be > 0 s and max_ground_tilt < 80 degrees"
            )
        return out


@njit(cache=True)
def _plane_fit(points, count, normal):
    """Least-squares plane through ``points[:count]`` (·, 3): (normal (3,) up, offset, ok), the normal from the
    smallest eigenvector of the points' covariance; ok False when they lie near a line (then ``normal`` is
    returned and the offset is the mean of n̂·p)."""
    centre = np.zeros(3)
    for i in range(count):
        for a in range(3):
            centre[a] += points[i, a]
    centre /= count
    if count >= 3:
        C = np.zeros((3, 3))
        for i in range(count):
            for a in range(3):
                for b in range(3):
                    C[a, b] += (points[i, a] - centre[a]) * (points[i, b] - centre[b])
        w, V = np.linalg.eigh(C)
        # a plane needs spread in two directions: the middle eigenvalue well above the smallest
        if w[1] > 1e-6 * count and w[0] < 0.25 * w[1]:
            n = V[:, 0].copy()
            if n[2] < 0.0:
                n = -n
            return n, n[0] * centre[0] + n[1] * centre[1] + n[2] * centre[2], True
    return normal, normal[0] * centre[0] + normal[1] * centre[1] + normal[2] * centre[2], False


@njit(cache=True)
def _project(rows, count, v, weights, out):
    """out (nv,) ← v − W Jᵀ (J W Jᵀ + εI)⁻¹ J v, J = rows[:count] (·, nv), W = diag(weights)."""
    out[:] = v
    if count == 0:
        return
    nv = v.shape[0]
    J = rows[:count]
    A = np.empty((count, count))
    for i in range(count):
        for j in range(i + 1):
            s = 0.0
            for c in range(nv):
                s += J[i, c] * weights[c] * J[j, c]
            A[i, j] = s
            A[j, i] = s
    scale = 0.0
    for i in range(count):
        scale = max(scale, A[i, i])
    for i in range(count):
        A[i, i] += 1e-9 * scale + 1e-12
    b = J @ v
    y = np.linalg.solve(A, b)
    for c in range(nv):
        s = 0.0
        for i in range(count):
            s += J[i, c] * y[i]
        out[c] -= weights[c] * s


@njit(cache=True)
def stance_kernel(
    params,
    ground,
    stance,
    footprints,
    centres,
    radii,
    slot,
    origins,
    jacobians,
    v,
    allowed,
    planned,
    normal_force,
    v_out,
    gaps,
    speed,
    age,
    rows,
):
    """One tick of :class:`StanceEstimator` (arrays updated in place; see the module docstring).

    params (_NPARAMS,); ground (11,) [n̂, d, ready, the base velocity's correction (6,)]; stance (k,) 1.0
    standing, 0.0 not; footprints (k, 4) the last stance point (m) and its age (s); centres (k, 3), radii (k,),
    slot (k,): the spheres and their frame slots; origins (f, 3), jacobians (f, 6, nv): the frames' world-aligned
    Jacobians; v (nv,) the estimated velocity; allowed (k,) the schedule's candidates; planned (k,) its planned
    stance; normal_force (k,) a foot sensor's normal force, N (NaN: no sensor); out: v_out (nv,) the
    contact-consistent velocity, gaps (k,) m, speed (k,) m/s each sphere's speed under ``v``, age (k,) s since each
    stance sphere landed, rows (3k, nv) scratch. Returns the number of spheres in stance.
    """
    k = centres.shape[0]
    dt = params[_DT]
    nv = v.shape[0]
    weights = np.empty(nv)
    for c in range(nv):
        weights[c] = params[_SIG_J] ** 2
    if params[_FLOATING] > 0.5:
        for c in range(3):
            weights[c] = params[_SIG_B] ** 2
            weights[3 + c] = params[_SIG_W] ** 2
    if ground[_READY] < 0.5:  # the plane normal to ground[:3] (set by the caller) through the lowest sphere
        lowest = np.inf
        for i in range(k):
            lowest = min(
                lowest, ground[0] * centres[i, 0] + ground[1] * centres[i, 1] + ground[2] * centres[i, 2] - radii[i]
            )
        ground[_D], ground[_READY] = lowest, 1.0
    nx, ny, nz, d = ground[_NX], ground[_NY], ground[_NZ], ground[_D]
    # the ground's tangents: x̂ projected onto the plane, and n̂ × ŝ
    sx, sy, sz = 1.0 - nx * nx, -nx * ny, -nx * nz
    norm = math.sqrt(sx * sx + sy * sy + sz * sz)
    sx, sy, sz = sx / norm, sy / norm, sz / norm
    tx, ty, tz = ny * sz - nz * sy, nz * sx - nx * sz, nx * sy - ny * sx
    points = np.empty((k, 3))
    for i in range(k):
        for a in range(3):
            points[i, a] = centres[i, a] - radii[i] * ground[a]
        gaps[i] = nx * points[i, 0] + ny * points[i, 1] + nz * points[i, 2] - d
        f = slot[i]
        robot_row(rows[3 * i], points[i, 0], points[i, 1], points[i, 2], nx, ny, nz, f, origins, jacobians)
        robot_row(rows[3 * i + 1], points[i, 0], points[i, 1], points[i, 2], sx, sy, sz, f, origins, jacobians)
        robot_row(rows[3 * i + 2], points[i, 0], points[i, 1], points[i, 2], tx, ty, tz, f, origins, jacobians)
    # the velocity that keeps the last tick's stance feet still; each sphere's normal velocity under it
    stacked = np.empty((3 * k, nv))
    count = _stack(rows, stance, stacked)
    _project(stacked, count, v, weights, v_out)
    changed = False
    for i in range(k):
        u = 0.0
        squared = 0.0
        for r in range(3):
            w = 0.0
            for c in range(nv):
                w += rows[3 * i + r, c] * v[c]
            squared += w * w
        speed[i] = math.sqrt(squared)
        for c in range(nv):
            u += rows[3 * i, c] * v_out[c]
        sensed = not math.isnan(normal_force[i])
        if stance[i] > 0.5:
            if allowed[i] < 0.5 or gaps[i] > params[_LIFT]:
                stance[i] = 0.0
                changed = True
            else:
                age[i] += dt
        elif allowed[i] > 0.5:
            arriving = gaps[i] + dt * min(u, 0.0) <= params[_TD]
            resting = planned[i] > 0.5 and gaps[i] <= params[_SCHED] and u >= -params[_SETTLE]
            pressed = sensed and normal_force[i] > params[_FON]
            if arriving or resting or pressed:
                stance[i] = 1.0
                age[i] = 0.0
                changed = True
    if changed:
        count = _stack(rows, stance, stacked)
        _project(stacked, count, v, weights, v_out)
    # the base's velocity corrected by the low-passed correction the stance feet ask for; the joints as measured
    if params[_FLOATING] > 0.5:
        alpha_v = params[_ALPHA_V] if count > 0 else 0.0
        for c in range(6):
            ground[_CORRECTION + c] += alpha_v * (v_out[c] - v[c] - ground[_CORRECTION + c])
        for c in range(nv):
            weights[c] = 0.0 if c < 6 else params[_SIG_J] ** 2
        corrected = v.copy()
        for c in range(6):
            corrected[c] += ground[_CORRECTION + c]
        # the joints, with the base now fixed, keep the stance feet still (least norm; a swing leg's: as measured)
        _project(stacked, count, corrected, weights, v_out)

    # the ground through the stance points and the recent footprints
    fit = np.empty((k, 3))
    used = 0
    standing = 0
    for i in range(k):
        if stance[i] > 0.5:
            footprints[i, 0], footprints[i, 1], footprints[i, 2], footprints[i, 3] = (
                points[i, 0],
                points[i, 1],
                points[i, 2],
                0.0,
            )
            standing += 1
        else:
            footprints[i, 3] += dt
        if footprints[i, 3] <= params[_MEMORY]:
            fit[used, 0], fit[used, 1], fit[used, 2] = footprints[i, 0], footprints[i, 1], footprints[i, 2]
            used += 1
    if standing > 0:
        normal = np.array([nx, ny, nz])
        n_fit, d_fit, _ = _plane_fit(fit, used, normal)
        if n_fit[2] < params[_COS_TILT]:  # steeper than the largest tilt: keep the normal, fit the offset
            n_fit = normal
            d_fit = 0.0
            for i in range(used):
                d_fit += normal[0] * fit[i, 0] + normal[1] * fit[i, 1] + normal[2] * fit[i, 2]
            d_fit /= used
        alpha = params[_ALPHA]
        mx, my, mz = nx + alpha * (n_fit[0] - nx), ny + alpha * (n_fit[1] - ny), nz + alpha * (n_fit[2] - nz)
        norm = math.sqrt(mx * mx + my * my + mz * mz)
        ground[_NX], ground[_NY], ground[_NZ] = mx / norm, my / norm, mz / norm
        ground[_D] = d + alpha * (d_fit - d)
    return standing


@njit(cache=True)
def _stack(rows, stance, out):
    """Copy the three rows of each stance sphere into ``out``; their count."""
    count = 0
    for i in range(stance.shape[0]):
        if stance[i] > 0.5:
            for r in range(3):
                out[count] = rows[3 * i + r]
                count += 1
    return count


@njit(cache=True)
def _observe_loads(load, sphere, normal_force, alpha):
    """Low-pass each sphere's predicted normal force (k,) N toward this answer's: the largest of the contacts on
    it (``sphere`` (n,) their sphere indices, ``normal_force`` (n,) N), 0 for a sphere with none; a sphere not
    known yet (NaN) takes the answer's value."""
    for i in range(load.shape[0]):
        f = 0.0
        for c in range(sphere.shape[0]):
            if sphere[c] == i and normal_force[c] > f:
                f = normal_force[c]
        load[i] = f if math.isnan(load[i]) else load[i] + alpha * (f - load[i])


@njit(cache=True)
def _anchor(stance, load, force_on, speed, settle_speed, age, wait, anchors):
    """anchors (k,) in place: 0 for a sphere out of stance or whose load is below ``force_on`` (NaN: not known
    yet, loaded); a loaded stance sphere becomes 1 once its speed is at most ``settle_speed`` m/s or it has stood
    ``wait`` s, and stays 1 while it stands loaded."""
    for i in range(stance.shape[0]):
        if stance[i] < 0.5 or load[i] < force_on:
            anchors[i] = 0.0
        elif speed[i] <= settle_speed or age[i] >= wait:
            anchors[i] = 1.0


class StanceEstimator:
    """The stance of each contact sphere, the ground under the feet and the contact-consistent velocity, tick by
    tick (see the module docstring). Persistent state: reset it when a run starts (:meth:`reset`).

    robot : the model, updated for this tick before :meth:`update`.  dt : control period, s.
    """

    def __init__(self, robot: RobotModel, dt: float, settings: StanceSettings | None = None) -> None:
        s = settings or StanceSettings()
        self.robot, self.dt, self.settings = robot, float(dt), s
        k = len(robot.sphere_radii)
        r = robot
        r.update(r.standing_configuration(), np.zeros(r.nv))
        feet = r.sphere_centers_in_world[:, 2] - r.sphere_radii if k else np.zeros(1)
        height = float(r.standing_configuration()[2] - feet.min()) if r.floating_base else 0.3
        total_weight = 9.81 * r.total_mass()
        params = np.zeros(_NPARAMS)
        params[_TD] = 0.002 if s.touchdown_height is None else s.touchdown_height
        params[_SCHED] = min(0.15 * height, 0.03) if s.scheduled_height is None else s.scheduled_height
        params[_LIFT] = min(0.25 * height, 0.05) if s.liftoff_height is None else s.liftoff_height
        if params[_LIFT] <= params[_SCHED]:
            raise ConfigError(
                f"controller.stance: liftoff_height ({params[_LIFT]} m) must exceed scheduled_height "
                f"({params[_SCHED]} m), or a resting foot would lift as soon as it lands"
            )
        params[_SETTLE] = s.settle_speed
        params[_FON] = 0.05 * total_weight if s.force_on is None else s.force_on
        params[_DT] = self.dt
        params[_ALPHA] = 1.0 - math.exp(-self.dt / s.ground_time_constant)
        params[_COS_TILT] = math.cos(math.radians(s.max_ground_tilt))
        params[_MEMORY] = s.footprint_memory
        params[_SIG_B], params[_SIG_W], params[_SIG_J] = (
            s.base_velocity_sigma,
            s.base_rate_sigma,
            s.joint_velocity_sigma,
        )
        params[_FLOATING] = 1.0 if r.floating_base else 0.0
        params[_ALPHA_V] = 1.0 - math.exp(-self.dt / s.velocity_time_constant)
        self.params = params
        self.ground = np.zeros(11)
        self.stance = np.zeros(k)
        self.footprints = np.zeros((k, 4))
        self.gaps = np.zeros(k)
        self.speed = np.zeros(k)  # m/s, each sphere's speed under the estimated velocity
        self.age = np.zeros(k)  # s since each stance sphere landed
        self.velocity = np.zeros(r.nv)
        self._rows = np.zeros((3 * k, r.nv))
        self._everyone = np.ones(k)
        self._no_force = np.full(k, np.nan)
        self._allowed = np.ones(k)
        self._planned = np.ones(k)
        #: (k,) N: each sphere's predicted normal force, low-passed (NaN: no answer yet)
        self.load = np.full(k, np.nan)
        self._load_alpha = 1.0 - math.exp(-self.dt / s.load_time_constant)
        self._anchors = np.zeros(k)
        self._anchor_wait = s.anchor_wait
        self.reset()

    def reset(self) -> None:
        """Forget the ground and every stance (the next update starts from the lowest sphere's plane)."""
        self.ground[:] = 0.0
        self.stance[:] = 0.0
        self.footprints[:] = 0.0
        self.footprints[:, 3] = np.inf
        self.load[:] = np.nan
        self.age[:] = 0.0
        self._anchors[:] = 0.0

    @property
    def normal(self) -> Array:
        """(3,) the ground's unit normal in world (a view)."""
        return self.ground[:3]

    @property
    def offset(self) -> float:
        """The ground plane's offset d (n̂·x = d), m."""
        return float(self.ground[_D])

    @property
    def mask(self) -> NDArray[np.bool_]:
        """(k,) which spheres stand."""
        return self.stance > 0.5

    @property
    def anchors(self) -> Array:
        """(k,) 1.0 for each stance sphere the last answers load (or that has no answer yet) and that has settled,
        else 0.0: the contacts a floating-base estimator holds still (a buffer, rewritten each tick)."""
        return self._anchors

    def observe_loads(self, sphere: NDArray[np.int64], normal_force: Array) -> None:
        """Take a found answer's predicted normal forces (n,) N at its contacts on the spheres ``sphere`` (n,)."""
        _observe_loads(self.load, sphere, normal_force, self._load_alpha)
        self._anchor()

    def _anchor(self) -> None:
        p = self.params
        _anchor(self.stance, self.load, p[_FON], self.speed, p[_SETTLE], self.age, self._anchor_wait, self._anchors)

    def relative_to_ground(self, q: Array) -> Array:
        """A copy of a floating base's ``q`` (nq,) expressed relative to the ground: the base's height above it
        (along the vertical) and its orientation relative to the ground's frame (the rotation that turns the
        vertical onto n̂, about the horizontal axis between them). A body level with sloped ground is level here."""
        out = q.copy()
        out[2] = self.height_above_ground(q[:3])
        n = self.ground
        if n[_READY] < 0.5:
            return out
        # the ground's rotation: about a = ẑ × n̂ by the angle between them, as the quaternion (a sin(θ/2), cos(θ/2))
        cos_t = min(1.0, max(-1.0, float(n[2])))
        half_cos, half_sin = math.sqrt(0.5 * (1.0 + cos_t)), math.sqrt(max(0.0, 0.5 * (1.0 - cos_t)))
        ax, ay = -float(n[1]), float(n[0])
        norm = math.hypot(ax, ay)
        if norm < 1e-12:
            return out
        gx, gy, gw = -half_sin * ax / norm, -half_sin * ay / norm, half_cos  # the inverse rotation (z part 0)
        x, y, z, w = (float(c) for c in q[3:7])
        out[3] = gw * x + gx * w + gy * z
        out[4] = gw * y - gx * z + gy * w
        out[5] = gw * z + gx * y - gy * x
        out[6] = gw * w - gx * x - gy * y
        return out

    def height_above_ground(self, position: Array) -> float:
        """Vertical distance of the world point ``position`` (3,) above the ground plane, m."""
        n = self.ground
        if n[_READY] < 0.5:  # no ground yet: the world's z = 0
            return float(position[2])
        return float((n[0] * position[0] + n[1] * position[1] + n[2] * position[2] - n[_D]) / n[2])

    def update(self, v: Array, allowed: Array | None, planned: Array | None, normal_force: Array | None) -> Array:
        """One tick at the model's last update: the stance, the ground, and the contact-consistent velocity (nv,)
        (a buffer of this estimator, rewritten each tick), from the estimated ``v`` (nv,), the schedule's
        ``allowed`` and ``planned`` (k,) bool (None: every sphere) and a foot sensor's ``normal_force`` (k,) N
        (None: no sensor)."""
        r = self.robot
        if self.ground[_READY] < 0.5:  # a run starts standing: the first ground is normal to the base's z axis
            self.ground[:3] = r.data.oMi[1].rotation[:, 2] if r.floating_base else (0.0, 0.0, 1.0)
        allowed_f = self._everyone if allowed is None else self._as_float(allowed, self._allowed)
        planned_f = allowed_f if planned is None else self._as_float(planned, self._planned)
        force = self._no_force if normal_force is None else normal_force
        stance_kernel(
            self.params,
            self.ground,
            self.stance,
            self.footprints,
            r.sphere_centers_in_world,
            r.sphere_radii,
            r.sphere_frame_slot,
            r.frame_origins_in_world,
            r.frame_jacobians,
            v,
            allowed_f,
            planned_f,
            force,
            self.velocity,
            self.gaps,
            self.speed,
            self.age,
            self._rows,
        )
        self._anchor()
        return self.velocity

    @staticmethod
    def _as_float(mask: Array, out: Array) -> Array:
        np.copyto(out, mask)
        return out
