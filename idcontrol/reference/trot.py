"""A trotting gait for any quadruped: planned foot trajectories, then inverse kinematics of each leg every tick.

Legs. The robot file's four legs (``[[limbs]]`` of kind ``leg``, or the chains moving its contact spheres):
each leg's joints and end frame, whose origin is the foot point planned here. The diagonal pairs come from
where the feet stand: the front-left and hind-right feet touch down at phase ``0.25``, the other two at
``0.75`` (the paper's trot); ``touchdown_phases`` may give any leg, by name, another phase. Joint targets come
from the feet by damped Newton steps on each leg's chain, warm-started from the previous tick
(:mod:`idcontrol.reference.chain`: Pinocchio's kinematic model, compiled); the planning itself is compiled
too, so a sample costs a few microseconds.

Size. Defaults that are lengths or times scale with the robot: with h the standing base height and
h₀ = 0.163 m the paper's quadruped's, ``cycle_time`` is 0.3 s · √(h/h₀) (Froude scaling), ``step_height``
0.015 m · h/h₀ and ``touchdown_search_depth`` 0.02 m · h/h₀, ``touchdown_search_speed`` 0.1 m/s · √(h/h₀).
Values given explicitly are used as they are (SI units).

Centre of mass. Two feet carry the robot at a time, so the gait places the feet about the point under the centre
of mass: the nominal feet are the standing ones shifted (x-y, base frame) until their centroid is under it, and
during ``stand_time`` the stance feet move there (quintic in time), that is, the base shifts over its feet. A
standing posture with the centre of mass off the feet's centroid (the A1's published one: 34 mm behind it)
otherwise tips the body toward the far side of every diagonal pair (generic trot, 10 s: the A1's two-stage QP
fell at 1.3 s and now trots at 0.0030 rad, its Coulomb LCP 0.0125 -> 0.0048 rad, HyQ's QP 0.0081 -> 0.0053 rad;
``centre_under_com = False`` keeps the standing feet).

Frames. The *heading frame* H has its origin at the base origin, z vertical
and x along the base's heading (the yaw of its x axis). Feet are planned in
H as if the base stood level at its nominal (standing) height: the ground is
the plane z = z_nom (the standing feet's height below the base). Stance feet
slide backward in H at the commanded base twist, −(v + ω × p); swing feet
follow a cubic Hermite curve in x-y from liftoff (matching the stance
velocity there) to a Raibert touchdown point p_nom + (v + ω × p_nom) T_stance/2
(re-aimed every tick from the current command) while lifting by
h_step · 64 u³(1 − u)³ (zero vertical velocity and acceleration at liftoff and
touchdown; the peak, at mid-swing, is the step height).

Balance (in place of the paper's VIIP). A planned point p_H is expressed in
the actual base frame B, using the measured base roll/pitch R_rp and height
z_b (flat ground at z = 0), as the ground-relative point
p_g = R_rpᵀ (p_H + (h_nom − z_b) e_z): a swing foot follows p_g, so it clears
and lands on the actual ground. A stance foot is pulled toward
p_g + L (p_H − p_g): with the levelling gain L = 1 that is p_H itself, the foot
position relative to a base standing level at the nominal height, so the
joint-space PD (q_ref − q) on the stance legs is what levels the body and
holds its height; L > 1 strengthens this feedback, L = 0 only tracks the
ground. The weight of p_H blends in smoothly (quintic, over
``blend_fraction`` of the stance) after each touchdown and out before each
liftoff, so targets stay continuous when the base is tilted.

Touchdown. A swing foot is a contact candidate (``contact_mask``) in the last quarter of its swing, and when
the controller finds it touching (``observe_contacts``) it lands there and then: its stance starts at the point
the swing has reached, and its liftoff stays on the schedule. Tracking a swing with a joint PD, a foot arrives
a few millimetres early or late; masked to the planned touchdown, one that arrived early struck the floor as a
contact the controller did not model and bounced (HyQ: up to 6 mm, landing 50-100 ms late). Measured on the
generic trot, 10 s on five quadrupeds, mean joint error: two_stage_qp 0.0030-0.0170 -> 0.0020-0.0054 rad,
coulomb_lcp 0.0048-0.0140 -> 0.0031-0.0099 rad; from the last half of the swing on, the no-slip LCP's
quadruped drifted 16 cm sideways in 5 s, hence the last quarter (``early_touchdown = False`` keeps the planned
touchdowns; the controller's ``activation_distance`` decides when an arriving foot enters its problem).

Footholds (``footholds``; the hardware launch files turn it on). The plan's ground is not assumed flat. When a foot
lands, its height in the world is measured (forward kinematics of the leg at the encoders' angles, the base's height
and attitude from the state) and kept for its stance: the stance foot's target height is that foothold, not the
plane z = 0, and its levelling point p_H puts it that far above or below the footholds' mean. The swings plan their
touchdown, and the late-touchdown search starts, at the footholds' mean height, filtered over half a stance so a
landing moves the plan smoothly; a stance target blends from where the swing's target was at touchdown to the
foothold over half a stance, so targets stay continuous. On ground that is not flat a stance foot pulled toward a
common plane is a leg pushing against a foothold that cannot give: with diagonal feet 3 cm apart in height on ± 2 cm
bumps the stance legs straightened and raised the base until a knee reached its limit. A foot's height is only as
good as the base estimate at its touchdown; an error common to all footholds (a height bias) cancels in p_H.

Timing: time starts at the first :meth:`TrotGait.sample` after
:meth:`TrotGait.reset`; the robot stands still for ``stand_time``, then trots
while the commanded twist approaches the desired one under acceleration
limits (the start-up ramp). Foot states advance event by event between
samples, so any sampling period works.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence

import numpy as np
import pinocchio as pin
from numba import njit

from idcontrol.errors import ConfigError
from idcontrol.reference.base import Array, JointTarget, Reference
from idcontrol.reference.chain import _HELD, build_chains, chain_kinematics, pack, solve_limbs
from idcontrol.robot.model import RobotModel
from idcontrol.robot.urdf import frame_id

#: Standing base height of the paper's quadruped (the shipped one), m: the trot's defaults are the paper's there.
REFERENCE_HEIGHT = 0.1629684374568977
PAPER_WAYPOINTS = ((0.0, 0.0), (0.25, 0.0), (0.0, 0.25), (0.0, -0.25), (-0.25, 0.0))
#: s: a state whose time is this far ahead of the previous sample restarts the gait from standing, rather than
#: replaying every gait event in between (a clock that leapt by 1e9 s kept the planner busy for hours).
MAX_CLOCK_JUMP_S = 1.0
#: The largest commanded base speeds, m/s (forward, lateral) and rad/s (yaw), at start-up and while running:
#: beyond what any legged robot trots (a command of 1e308 m/s ramped the gait's speed without bound).
MAX_BASE_SPEED, MAX_BASE_YAW_RATE = 10.0, 10.0
#: Fraction of the swing after which a foot that touches the ground lands early (``early_touchdown``).
EARLY_TOUCHDOWN = 0.75
#: Newton steps per tick at most, and the foot position tolerance, m.
IK_ITERATIONS, IK_TOLERANCE = 20, 1e-10
_NO_SPHERES = np.zeros(0, dtype=np.intp)

# columns of the per-leg state array
_PX, _PY, _LX, _LY, _LVX, _LVY, _TLAST, _TNEXT, _STANCE, _LANDED, _TOUCH, _NX, _NY, _NZ, _SEEN, _DZ, _DZ0, _FZ = range(
    18
)
# entries of the parameter array
(
    _TAU,
    _TAU_PREV,
    _VX,
    _VY,
    _WZ,
    _TST,
    _TSW,
    _BLEND,
    _GAIN,
    _HSTEP,
    _SSPEED,
    _SDEPTH,
    _FEEDBACK,
    _HEIGHT,
    _AMAX,
    _SHIFTX,
    _SHIFTY,
    _TSTAND,
    _EARLY,
    _GROUND,
    _FOOTHOLDS,
) = range(21)


def _positive(name: str, value: float) -> float:
    value = float(value)
    if not (value > 0.0 and math.isfinite(value)):
        raise ConfigError(f"trot option {name} must be a finite number > 0, got {value!r}")
    return value


def base_velocity(forward: float, lateral: float, yaw_rate: float) -> tuple[float, float, float]:
    """The commanded base twist (m/s, m/s, rad/s) as floats; ConfigError unless each is finite and within
    :data:`MAX_BASE_SPEED` (forward, lateral) or :data:`MAX_BASE_YAW_RATE` (yaw)."""
    values = (float(forward), float(lateral), float(yaw_rate))
    limits = (MAX_BASE_SPEED, MAX_BASE_SPEED, MAX_BASE_YAW_RATE)
    for name, value, limit in zip(("forward_speed", "lateral_speed", "yaw_rate"), values, limits, strict=True):
        if not abs(value) <= limit:
            raise ConfigError(f"trot option {name} must be a finite number within ±{limit:g}, got {value!r}")
    return values


def default_touchdown_phases(names: Sequence[str], feet: Array) -> dict[str, float]:
    """The paper's trot for any four feet (n, 3) in the base frame: front-left and hind-right touch down at 0.25,
    front-right and hind-left at 0.75 (front: x above the feet's mean; left: y above it)."""
    centre = feet.mean(axis=0)
    out = {}
    for name, foot in zip(names, feet, strict=True):
        front, left = foot[0] > centre[0], foot[1] > centre[1]
        out[name] = 0.25 if front == left else 0.75
    return out


class TrotGait(Reference):
    """The paper's trot planner (Section 7.2) for any quadruped, sized from its standing posture.

    Options (SI units; velocities in the heading frame):
    forward_speed, lateral_speed (m/s), yaw_rate (rad/s) : desired base twist (ẋ, ẏ, θ̇).
    cycle_time (s), duty_factor, step_height (m), touchdown_phases (leg name → phase in [0, 1)).
    stand_time (s) : standing before the gait starts (the base shifts over the feet: ``centre_under_com``).
    max_linear_acceleration (m/s²), max_yaw_acceleration (rad/s²) : ramp of the commanded twist.
    waypoints : optional [(x, y), ...] in the world frame (m), visited in a loop; ``"paper"`` for Fig. 17's.
    waypoint_tolerance (m), turn_in_place_threshold (rad), heading_gain (1/s), max_yaw_rate (rad/s).
    levelling_gain, blend_fraction : see the module docstring.
    max_joint_acceleration (rad/s²) : bound on a_ref.
    touchdown_search_speed (m/s), touchdown_search_depth (m) : a planned stance foot that has not touched keeps
        descending at this speed, at most this deep.
    cycle_time, step_height and the touchdown search default to sizes scaled with the robot (module docstring).
    centre_under_com : place the feet about the point under the centre of mass (module docstring).
    early_touchdown : a swing foot found touching in the last quarter of its swing lands early (module docstring).
    joint_limit_margin (rad, m for a prismatic joint) : the legs' joint targets stay this far inside the URDF limits.
    footholds : hold each stance foot at the height where it touched down and plan the swings to the footholds'
        mean height (module docstring; with ``body_feedback``); False plans every foot on the plane z = 0.

    Telemetry: :attr:`phase`, :attr:`in_stance`, :attr:`foot_targets_in_base`, :attr:`command`.
    """

    name = "trot"

    def __init__(
        self,
        robot: RobotModel,
        *,
        forward_speed: float = 0.2,
        lateral_speed: float = 0.0,
        yaw_rate: float = 0.0,
        cycle_time: float | None = None,
        duty_factor: float = 0.75,
        step_height: float | None = None,
        touchdown_phases: Mapping[str, float] | None = None,
        stand_time: float = 0.5,
        max_linear_acceleration: float = 0.5,
        max_yaw_acceleration: float = 2.0,
        waypoints: Sequence[Sequence[float]] | str | None = None,
        waypoint_tolerance: float = 0.05,
        turn_in_place_threshold: float = 0.5,
        heading_gain: float = 2.0,
        max_yaw_rate: float = 1.0,
        levelling_gain: float = 1.0,
        blend_fraction: float = 0.15,
        max_joint_acceleration: float = 2000.0,
        body_feedback: bool = True,
        touchdown_search_speed: float | None = None,
        touchdown_search_depth: float | None = None,
        centre_under_com: bool = True,
        early_touchdown: bool = True,
        joint_limit_margin: float = 0.15,
        footholds: bool = False,
    ) -> None:
        if not robot.floating_base:
            raise ConfigError(f"the trot reference needs a floating-base quadruped; {robot.name!r} has a fixed base")
        legs = robot.legs
        if len(legs) != 4:
            names = [leg.name for leg in legs]
            raise ConfigError(
                f"the trot reference needs four legs; {robot.name!r} has {len(legs)} ({names}; legs "
                "are the robot file's [[limbs]] of kind 'leg')"
            )
        q_stand = robot.standing_configuration()
        self.base_height = float(q_stand[2])  # h_nom, m
        size = self.base_height / REFERENCE_HEIGHT
        self.cycle_time = _positive("cycle_time", 0.3 * math.sqrt(size) if cycle_time is None else cycle_time)
        self.duty_factor = float(duty_factor)
        if not 0.0 < self.duty_factor < 1.0:
            raise ConfigError(f"trot option duty_factor must be in (0, 1), got {duty_factor!r}")
        self.stance_time = self.duty_factor * self.cycle_time
        self.swing_time = self.cycle_time - self.stance_time
        self.step_height = float(0.015 * size if step_height is None else step_height)
        self.stand_time = float(stand_time)
        if self.stand_time < 0.0 or self.step_height < 0.0:
            raise ConfigError("trot options stand_time and step_height must be >= 0")
        self.max_linear_acceleration = _positive("max_linear_acceleration", max_linear_acceleration)
        self.max_yaw_acceleration = _positive("max_yaw_acceleration", max_yaw_acceleration)
        self.waypoint_tolerance = _positive("waypoint_tolerance", waypoint_tolerance)
        self.turn_in_place_threshold = _positive("turn_in_place_threshold", turn_in_place_threshold)
        self.heading_gain = _positive("heading_gain", heading_gain)
        self.max_yaw_rate = _positive("max_yaw_rate", max_yaw_rate)
        self.levelling_gain = float(levelling_gain)
        self.blend_time = _positive("blend_fraction", blend_fraction) * self.stance_time
        if blend_fraction > 0.5 or self.levelling_gain < 0.0:
            raise ConfigError("trot options: blend_fraction must be in (0, 0.5] and levelling_gain >= 0")
        self.max_joint_acceleration = _positive("max_joint_acceleration", max_joint_acceleration)
        self.body_feedback = bool(body_feedback)
        self.footholds = bool(footholds)
        self.early_touchdown = bool(early_touchdown)
        self.search_speed = _positive(
            "touchdown_search_speed",
            0.1 * math.sqrt(size) if touchdown_search_speed is None else touchdown_search_speed,
        )
        self.search_depth = _positive(
            "touchdown_search_depth", 0.02 * size if touchdown_search_depth is None else touchdown_search_depth
        )

        # the legs' chains in the base frame (the base at the origin, level), joints outside the legs held
        q_base = q_stand.copy()
        q_base[:7] = [0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 1.0]
        self.leg_names = tuple(leg.name for leg in legs)
        self.chains = build_chains(
            robot.model, [(list(leg.joints), leg.end) for leg in legs], robot.actuated_joints, q_base
        )
        self._keep_off_limits(joint_limit_margin)
        self._chain_arrays = pack(self.chains)
        self._q_standing_legs = self.chains.held.copy()  # (4, J) every chain joint at its standing value
        self._q_legs = self._q_standing_legs.copy()
        model = robot.model
        data = model.createData()
        pin.framesForwardKinematics(model, data, q_base)
        nominal = np.array([data.oMf[frame_id(model, leg.end)].translation for leg in legs])  # (4, 3) base frame
        self.nominal_feet = tuple(tuple(float(x) for x in foot) for foot in nominal)
        _check_step_directions(robot, legs, q_base, forward_speed, lateral_speed)
        phases = default_touchdown_phases(self.leg_names, nominal)
        # the feet's centroid under the centre of mass (x-y, base frame, m): the stance shifts the base by it
        # while standing, and the gait places its feet about it
        com = pin.centerOfMass(model, data, q_base)
        self.com_shift = (com[:2] - nominal[:, :2].mean(axis=0)) if centre_under_com else np.zeros(2)
        self.centred_feet = nominal.copy()
        self.centred_feet[:, :2] += self.com_shift
        if touchdown_phases is not None:
            unknown = sorted(set(touchdown_phases) - set(self.leg_names))
            if unknown or not all(0.0 <= float(x) < 1.0 for x in touchdown_phases.values()):
                raise ConfigError(
                    f"trot option touchdown_phases must give legs of {self.leg_names} a phase in "
                    f"[0, 1), got {dict(touchdown_phases)}"
                )
            phases.update({k: float(v) for k, v in touchdown_phases.items()})
        self.touchdown_phases = tuple(phases[name] for name in self.leg_names)
        # contact spheres of each leg: those its last joint moves
        frames = [model.frames[int(f)].parentJoint for f in robot.sphere_frame_ids]
        last = [model.getJointId(leg.joints[-1]) for leg in legs]
        self._leg_of_sphere = np.array([last.index(j) if j in last else -1 for j in frames], dtype=np.intp)
        self._mask = np.ones(len(robot.sphere_names), dtype=bool)
        self.nu = robot.nu
        self._idx_q = np.asarray(robot.actuated_idx_q, dtype=np.int64)
        self._template = np.zeros((3, robot.nu))
        self._template[0] = robot.joint_positions(q_stand)
        self._state = np.zeros((4, 18))
        self._state[:, _NX : _NZ + 1] = self.centred_feet
        self._params = np.zeros(21)
        self._targets = np.zeros((4, 9))
        self.ik_residual = 0.0  # the worst foot position error of the last sample's IK, m

        self.desired = base_velocity(forward_speed, lateral_speed, yaw_rate)
        self.cruise_speed = self.desired[0]
        self.waypoints: tuple[tuple[float, float], ...] | None = None
        self.set_waypoints(waypoints)
        self.reset()

    def _keep_off_limits(self, margin: float) -> None:
        """Plan every leg joint at least ``margin`` rad (m) inside its URDF limits (at most a quarter of its range
        and never past its standing value): a foot asked beyond its reach (a dip, a late touchdown's search) stops
        short of a straight knee, where a leg is singular and the tracking overshoot trips the limit guard."""
        margin = float(margin)
        if not (margin >= 0.0 and math.isfinite(margin)):
            raise ConfigError(f"trot option joint_limit_margin must be a finite number >= 0, got {margin!r}")
        c = self.chains
        span = c.upper - c.lower
        bounded = np.isfinite(span) & (span < 1e300)
        inset = np.where(bounded, np.minimum(margin, 0.25 * np.where(bounded, span, 0.0)), 0.0)
        c.lower[:] = np.where(bounded, np.minimum(c.lower + inset, c.held), c.lower)
        c.upper[:] = np.where(bounded, np.maximum(c.upper - inset, c.held), c.upper)

    # ------------------------------------------------------------------ leg state views
    @property
    def in_stance(self) -> list[bool]:
        """Planned stance of each leg (in leg order) at the last sample (each flag 0.0 or 1.0 in the state)."""
        return [x > 0.5 for x in self._state[:, _STANCE].tolist()]

    @property
    def landed(self) -> list[bool]:
        """Whether each planned stance foot has touched since its touchdown."""
        return [bool(x) for x in self._state[:, _LANDED]]

    def observe_contacts(self, contacts: object) -> None:
        """Which feet the controller had among its active contacts: a planned stance foot lands when it
        first appears there (until then it keeps descending, see ``touchdown_search_speed``), and a swing foot
        that appears there at the end of its swing lands early."""
        observe_feet(self._leg_of_sphere, _NO_SPHERES if contacts is None else contacts.sphere, self._state)

    def contact_mask(self) -> Array | None:
        """Only the feet planned in stance, and swing feet in the last quarter of their swing (``early_touchdown``),
        may touch: a lifting swing foot inside the detection margin carries no predicted force. (Computed by the
        last :meth:`sample`, with the plan.)"""
        return self._mask

    def planned_stance(self) -> Array | None:
        """The feet of the legs the plan has in stance at the last sample (a sphere on no leg: always)."""
        legs = self._leg_of_sphere
        stance = self._state[:, _STANCE]
        return np.array([leg < 0 or stance[leg] > 0.5 for leg in legs.tolist()], dtype=bool)

    # ------------------------------------------------------------------ run-time commands
    def telemetry(self) -> dict[str, object]:
        """Gait phase in [0, 1), planned stance per leg (leg order), commanded twist (m/s, m/s, rad/s)."""
        return {"phase": self.phase, "in_stance": self.in_stance, "command": list(self.command)}

    RUNTIME_OPTIONS = ("forward_speed", "lateral_speed", "yaw_rate", "waypoints")

    def update(self, **options: object) -> None:
        """Run-time changes of the commanded motion, keeping the gait's phase: ``forward_speed``,
        ``lateral_speed`` (m/s), ``yaw_rate`` (rad/s) or ``waypoints`` (list of (x, y), "paper", None)."""
        unknown = sorted(set(options) - set(self.RUNTIME_OPTIONS))
        if unknown:
            raise ConfigError(f"trot options {unknown} cannot change while running; these can: {self.RUNTIME_OPTIONS}")
        speeds = [k for k in ("forward_speed", "lateral_speed", "yaw_rate") if k in options]
        if speeds:
            forward, lateral, yaw = (
                float(options.get(k, d))
                for k, d in zip(  # type: ignore[arg-type]
                    ("forward_speed", "lateral_speed", "yaw_rate"), self.desired, strict=True
                )
            )
            self.set_base_velocity(forward, lateral, yaw)
            self.cruise_speed = forward
        if "waypoints" in options:
            self.set_waypoints(options["waypoints"])  # type: ignore[arg-type]

    def set_base_velocity(self, forward: float, lateral: float = 0.0, yaw_rate: float = 0.0) -> None:
        """Desired base twist in the heading frame (m/s, m/s, rad/s); stops waypoint following."""
        self.desired = base_velocity(forward, lateral, yaw_rate)
        self.waypoints = None

    def set_waypoints(self, waypoints: Sequence[Sequence[float]] | str | None) -> None:
        """Follow world-frame (x, y) waypoints (m) in a loop at ``forward_speed``; None stops following."""
        if waypoints is None:
            self.waypoints = None
            return
        points = PAPER_WAYPOINTS if waypoints == "paper" else waypoints
        try:
            parsed = tuple((float(x), float(y)) for x, y in points)  # type: ignore[misc]
        except (TypeError, ValueError) as e:
            raise ConfigError(f"trot option waypoints must be a list of (x, y) pairs or 'paper': {e}") from e
        if not parsed or not all(math.isfinite(c) for point in parsed for c in point):
            raise ConfigError(f"trot option waypoints must be a non-empty list of finite (x, y), got {waypoints!r}")
        self.waypoints = parsed
        self.waypoint_index = 0

    def reset(self) -> None:
        self._t0: float | None = None
        self.waypoint_index = 0
        self.command = (0.0, 0.0, 0.0)  # commanded twist (ẋ, ẏ, θ̇) after the ramp
        self.phase = 0.0  # gait phase in [0, 1), 0 while standing
        s = self._state
        s[:, _PX : _PY + 1] = s[:, _NX : _NY + 1]  # stance foot x-y in H at _tau
        s[:, _LX : _LVY + 1] = 0.0  # (x, y, ẋ, ẏ) in H at liftoff
        s[:, _TLAST] = -self.stand_time  # gait time of the last touchdown (or start) / liftoff
        s[:, _STANCE] = 1.0
        s[:, _LANDED] = 1.0  # a planned stance foot that has touched the ground since its touchdown
        s[:, _TOUCH] = 1.0  # each foot among the controller's active contacts at the last tick
        s[:, _SEEN] = 0.0  # the same, but only as observed (a swing foot never lands early without an observation)
        s[:, _DZ] = math.nan  # each foot's last foothold: its height above the plane z = 0 (the first sample's), m
        # the height its target had at touchdown, from which the stance blends to the foothold (in swing: at liftoff), m
        s[:, _DZ0] = math.nan
        D = self.duty_factor
        s[:, _TNEXT] = [((phi + D) % 1.0) * self.cycle_time for phi in self.touchdown_phases]  # first liftoff
        self._tau = -self.stand_time
        self._targets[:, 0:3] = self.nominal_feet
        self._q_legs[:] = self._q_standing_legs
        p = self._params  # the constant parameters of plan_feet and the IK
        p[_TST], p[_TSW], p[_BLEND], p[_GAIN] = self.stance_time, self.swing_time, self.blend_time, self.levelling_gain
        p[_HSTEP], p[_SSPEED], p[_SDEPTH] = self.step_height, self.search_speed, self.search_depth
        p[_FEEDBACK], p[_HEIGHT], p[_AMAX] = float(self.body_feedback), self.base_height, self.max_joint_acceleration
        p[_SHIFTX], p[_SHIFTY], p[_TSTAND] = self.com_shift[0], self.com_shift[1], self.stand_time
        p[_EARLY] = EARLY_TOUCHDOWN if self.early_touchdown else math.inf
        p[_GROUND] = math.nan  # the footholds' mean height, filtered over half a stance, m (the first sample's)
        p[_FOOTHOLDS] = float(self.footholds and self.body_feedback)

    @property
    def foot_targets_in_base(self) -> Array:
        """(4, 3) the feet's target positions in the actual base frame at the last sample (leg order), m."""
        return self._targets[:, 0:3].copy()

    # ------------------------------------------------------------------ the tick
    def _update_command(self, dt: float, q: Array, standing: bool) -> None:
        vx, vy, wz = self.desired
        if standing:
            vx = vy = wz = 0.0
        elif self.waypoints is not None:
            x, y, _, qx, qy, qz, qw = q[:7].tolist()
            yaw = math.atan2(2.0 * (qw * qz + qx * qy), 1.0 - 2.0 * (qy * qy + qz * qz))
            wx_, wy_ = self.waypoints[self.waypoint_index]
            if math.hypot(wx_ - x, wy_ - y) < self.waypoint_tolerance:
                self.waypoint_index = (self.waypoint_index + 1) % len(self.waypoints)
                wx_, wy_ = self.waypoints[self.waypoint_index]
            error = math.remainder(math.atan2(wy_ - y, wx_ - x) - yaw, math.tau)
            wz = max(-self.max_yaw_rate, min(self.max_yaw_rate, self.heading_gain * error))
            vx = 0.0 if abs(error) > self.turn_in_place_threshold else self.cruise_speed
            vy = 0.0
        a, alpha = self.max_linear_acceleration * dt, self.max_yaw_acceleration * dt
        cx, cy, cw = self.command
        self.command = (_toward(cx, vx, a), _toward(cy, vy, a), _toward(cw, wz, alpha))

    def sample(self, t: float, q: Array, v: Array) -> JointTarget:
        if self._t0 is None:
            self._t0 = t
        tau = t - self._t0 - self.stand_time  # gait time, s (< 0 while standing)
        if tau < self._tau or tau - self._tau > MAX_CLOCK_JUMP_S:  # the clock went back, or leapt: start over
            self.reset()
            return self.sample(t, q, v)
        self._update_command(tau - self._tau, q, tau < 0.0)
        self.phase = (tau / self.cycle_time) % 1.0 if tau > 0.0 else 0.0
        p = self._params
        p[_TAU], p[_TAU_PREV] = tau, self._tau
        p[_VX], p[_VY], p[_WZ] = self.command
        out = self._template.copy()
        real, ints = self._chain_arrays
        self.ik_residual = _tick(
            p,
            q,
            self._state,
            self._targets,
            real,
            ints,
            self._q_legs,
            out,
            self._leg_of_sphere,
            self._mask,
            self._idx_q,
        )
        self._tau = tau
        return JointTarget(out[0], out[1], out[2])


def _check_step_directions(robot: RobotModel, legs: Sequence, q_base: Array, forward: float, lateral: float) -> None:
    """ConfigError when a commanded speed needs the feet to move along a base axis (x forward, y lateral) that no
    leg's joints can move its foot along at the standing posture: example-robot-data's `quadruped`, whose hips and
    knees all turn about x, trotted in place at a forward command."""
    model = robot.model
    data = model.createData()
    pin.computeJointJacobians(model, data, q_base)
    pin.updateFramePlacements(model, data)
    reach = np.zeros(2)  # per base axis x, y: the best leg's fraction of a unit foot motion its joints can make
    for leg in legs:
        J = pin.getFrameJacobian(model, data, frame_id(model, leg.end), pin.LOCAL_WORLD_ALIGNED)[:3]
        J = J[:, [model.joints[model.getJointId(name)].idx_v for name in leg.joints]]
        for axis in range(2):
            goal = np.eye(3)[axis]
            made = J @ np.linalg.lstsq(J, goal, rcond=None)[0]
            reach[axis] = max(reach[axis], float(made @ goal))
    for axis, (speed, option) in enumerate(((forward, "forward_speed"), (lateral, "lateral_speed"))):
        if speed != 0.0 and reach[axis] < 0.5:
            other = "lateral_speed" if axis == 0 else "forward_speed"
            raise ConfigError(
                f"trot option {option} = {speed:g} m/s: no leg of {robot.name!r} can move its foot "
                f"along the base's {'xy'[axis]} axis at the standing posture (its joints turn about "
                f"it), so the trot would step in place; set {option} = 0 and command {other} if "
                "the legs step along the other axis"
            )


@njit(cache=True)
def _tick(
    params, q, state, targets, real, ints, q_legs, out, leg_of_sphere, mask, idx_q
):  # pragma: no cover - compiled
    """One sample in one compiled call: :func:`plan_feet`, the legs' inverse kinematics into ``out``, and the
    contact mask (k,) of :meth:`TrotGait.contact_mask`: a sphere not on a leg, or on a leg in stance or past
    ``params[_EARLY]`` of its swing."""
    if params[_FOOTHOLDS] > 0.5:
        measure_feet(real, ints, q, idx_q, state, params[_HEIGHT])
    plan_feet(params, q, state, targets)
    residual = solve_limbs(real, ints, q_legs, targets, out, params[_AMAX], IK_TOLERANCE, IK_ITERATIONS)
    for sphere in range(leg_of_sphere.shape[0]):
        leg = leg_of_sphere[sphere]
        if leg < 0:
            mask[sphere] = True
        else:
            s = state[leg]
            landing = s[_STANCE] + ((params[_TAU] - s[_TLAST]) >= params[_EARLY] * params[_TSW])
            mask[sphere] = landing > 0.5
    return residual


@njit(cache=True)
def measure_feet(real, ints, q, idx_q, state, height):  # pragma: no cover - compiled
    """Each leg's foot point height above the plane the gait plans its feet on (its ``_FZ`` column), m: the
    forward kinematics of its chain at the measured joints of ``q`` (nq,) (``idx_q``: each actuated joint's index in
    q) and the base's height and attitude, less the foot's height when the base stands level at its nominal
    ``height`` (m) on that plane."""
    J = ints.shape[1] - 1
    qj, origins, axes, end, rot = np.empty(J), np.empty((J, 3)), np.empty((J, 3)), np.empty(3), np.empty((3, 3))
    qx, qy, qz, qw = q[3], q[4], q[5], q[6]
    r20, r21, r22 = 2.0 * (qx * qz - qy * qw), 2.0 * (qy * qz + qx * qw), 1.0 - 2.0 * (qx * qx + qy * qy)
    for i in range(state.shape[0]):
        for k in range(ints[i, J, 0]):
            slot = ints[i, k, 1]
            qj[k] = q[idx_q[slot]] if slot >= 0 else real[i, k, _HELD]
        chain_kinematics(real, ints, i, qj, origins, axes, end, rot)
        state[i, _FZ] = q[2] + r20 * end[0] + r21 * end[1] + r22 * end[2] - state[i, _NZ] - height


@njit(cache=True)
def observe_feet(leg_of_sphere, sphere, state):  # pragma: no cover - compiled
    """Mark in ``state`` (its touch and seen columns) the legs whose feet are among the contacts ``sphere`` (n,)."""
    for leg in range(state.shape[0]):
        state[leg, _TOUCH] = 0.0
    for c in range(sphere.shape[0]):
        leg = leg_of_sphere[sphere[c]]
        if leg >= 0:
            state[leg, _TOUCH] = 1.0
    for leg in range(state.shape[0]):
        state[leg, _SEEN] = state[leg, _TOUCH]


@njit(cache=True)
def plan_feet(params, q, state, targets):  # pragma: no cover - compiled
    """Advance each leg's gait events to the gait time and write its foot target (position, velocity,
    acceleration; (4, 9), in the measured base frame) from the commanded twist, the measured attitude and height
    (``q``) and the parameters (see the module docstring)."""
    tau, t_prev = params[_TAU], params[_TAU_PREV]
    vx, vy, wz = params[_VX], params[_VY], params[_WZ]
    T_st, T_sw, blend, L = params[_TST], params[_TSW], params[_BLEND], params[_GAIN]
    h_step, s_speed, s_depth = params[_HSTEP], params[_SSPEED], params[_SDEPTH]
    # while standing (τ < 0) the stance feet start from the standing posture and shift, quintic in time, to the
    # feet centred under the centre of mass: p = p_centred − δ (1 − σ(u)), u = (τ + T_stand) / T_stand
    shift_x, shift_y, t_stand = params[_SHIFTX], params[_SHIFTY], params[_TSTAND]
    lag = lag_d = lag_dd = 0.0  # −(1 − σ), its first and second time derivatives
    if tau < 0.0 and t_stand > 0.0 and (shift_x != 0.0 or shift_y != 0.0):
        u = min(max((tau + t_stand) / t_stand, 0.0), 1.0)
        sigma, sigma_d, sigma_dd = smoothstep(u, 1.0)
        lag, lag_d, lag_dd = sigma - 1.0, sigma_d / t_stand, sigma_dd / (t_stand * t_stand)
    # measured attitude: R_rp = Rz(−yaw) R, its transpose maps H to B
    z_base, qx, qy, qz, qw = q[2], q[3], q[4], q[5], q[6]
    r00, r01, r02 = 1.0 - 2.0 * (qy * qy + qz * qz), 2.0 * (qx * qy - qz * qw), 2.0 * (qx * qz + qy * qw)
    r10, r11, r12 = 2.0 * (qx * qy + qz * qw), 1.0 - 2.0 * (qx * qx + qz * qz), 2.0 * (qy * qz - qx * qw)
    r20, r21, r22 = 2.0 * (qx * qz - qy * qw), 2.0 * (qy * qz + qx * qw), 1.0 - 2.0 * (qx * qx + qy * qy)
    norm = math.hypot(r00, r10)
    if norm == 0.0:
        norm = 1.0
    cy_, sy_ = r00 / norm, r10 / norm
    m00, m01, m02 = cy_ * r00 + sy_ * r10, cy_ * r01 + sy_ * r11, cy_ * r02 + sy_ * r12
    m10, m11, m12 = cy_ * r10 - sy_ * r00, cy_ * r11 - sy_ * r01, cy_ * r12 - sy_ * r02
    sag = params[_HEIGHT] - z_base  # h_nom − z_b, m
    # the footholds' mean height, first-order filtered over half a stance: its value, rate and acceleration
    holds = params[_FOOTHOLDS] > 0.5
    ground = ground_d = ground_dd = 0.0
    if holds:
        mean = 0.0
        for i in range(state.shape[0]):
            if math.isnan(state[i, _DZ]):  # the first sample: the standing feet are the first footholds
                state[i, _DZ] = state[i, _DZ0] = state[i, _FZ]
            mean += state[i, _DZ]
        mean /= state.shape[0]
        t_filter = 0.5 * T_st
        if math.isnan(params[_GROUND]):
            params[_GROUND] = mean
        step = min(max(tau - t_prev, 0.0), t_filter)
        ground = params[_GROUND] = params[_GROUND] + (mean - params[_GROUND]) * step / t_filter
        ground_d = (mean - ground) / t_filter
        ground_dd = -ground_d / t_filter
    if params[_FEEDBACK] == 0.0:  # plan in the base frame as if it were level at h_nom
        m00, m01, m02, m10, m11, m12 = 1.0, 0.0, 0.0, 0.0, 1.0, 0.0
        r20, r21, r22, sag = 0.0, 0.0, 1.0, 0.0
    for i in range(state.shape[0]):
        s = state[i]
        nx, ny, nz = s[_NX], s[_NY], s[_NZ]
        t_a = t_prev
        while s[_TNEXT] <= tau:  # gait events between the previous sample and this one
            t_e = s[_TNEXT]
            if s[_STANCE] > 0.5:
                _advance(s, vx, vy, wz, t_e - t_a)
                if holds:  # the swing starts from the stance target's height
                    x = min((t_e - s[_TLAST]) / (0.5 * T_st), 1.0)
                    s[_DZ0] = s[_DZ0] + smoothstep(x, s[_DZ] - s[_DZ0])[0]
                s[_LX], s[_LY], s[_LVX], s[_LVY] = s[_PX], s[_PY], -vx + wz * s[_PY], -vy - wz * s[_PX]
                s[_TNEXT] = t_e + T_sw
                s[_STANCE] = 0.0
            else:
                s[_PX] = nx + 0.5 * T_st * (vx - wz * ny)
                s[_PY] = ny + 0.5 * T_st * (vy + wz * nx)
                s[_TNEXT] = t_e + T_st
                s[_LANDED] = 0.0
                s[_STANCE] = 1.0
            s[_TLAST] = t_a = t_e
        if s[_STANCE] < 0.5 and s[_SEEN] > 0.5 and tau - s[_TLAST] >= params[_EARLY] * T_sw:
            # an early touchdown: stance from here, where the swing has brought the foot, on the planned schedule
            u = (tau - s[_TLAST]) / T_sw
            x1 = nx + 0.5 * T_st * (vx - wz * ny)
            y1 = ny + 0.5 * T_st * (vy + wz * nx)
            h00, h10, h01, h11 = (
                2 * u**3 - 3 * u**2 + 1,
                (u**3 - 2 * u**2 + u) * T_sw,
                3 * u**2 - 2 * u**3,
                (u**3 - u**2) * T_sw,
            )
            s[_PX] = h00 * s[_LX] + h10 * s[_LVX] + h01 * x1 + h11 * (-vx + wz * y1)
            s[_PY] = h00 * s[_LY] + h10 * s[_LVY] + h01 * y1 + h11 * (-vy - wz * x1)
            s[_TNEXT] += T_st
            s[_TLAST] = t_a = tau
            s[_STANCE] = s[_LANDED] = 1.0
            if holds:
                um = 1.0 - u
                s[_DZ0] = (
                    s[_DZ0] + (ground - s[_DZ0]) * smoothstep(u, 1.0)[0] + 64.0 * h_step * u * u * u * um * um * um
                )
                s[_DZ] = s[_FZ]
        stance = s[_STANCE] > 0.5
        if stance and s[_LANDED] < 0.5:
            if s[_TOUCH] > 0.5 or tau - s[_TLAST] > s_depth / s_speed:
                s[_LANDED] = 1.0  # touched (or searched as deep as allowed): stance from now on
                if holds:
                    s[_DZ0] = ground - s_speed * min(tau - s[_TLAST], s_depth / s_speed)
                    s[_DZ] = s[_FZ]
                s[_TLAST] = tau
        w = wd = wdd = 0.0
        if stance and s[_LANDED] < 0.5:  # late touchdown: keep descending until the ground is found
            _advance(s, vx, vy, wz, tau - t_a)
            px, py = s[_PX], s[_PY]
            pz = nz + ground - s_speed * (tau - s[_TLAST])
            vxh, vyh, vzh = -vx + wz * py, -vy - wz * px, ground_d - s_speed
            axh, ayh, azh = wz * vyh, -wz * vxh, ground_dd
        elif stance:
            _advance(s, vx, vy, wz, tau - t_a)
            # the foothold's height, blended (quintic) from the target's at touchdown over half a stance
            since, t_hold = tau - s[_TLAST], 0.5 * T_st
            dz, dz0 = (s[_DZ], s[_DZ0]) if holds else (0.0, 0.0)
            if since < t_hold and dz != dz0:
                rise, rise_d, rise_dd = smoothstep(since / t_hold, dz - dz0)
                pz, vzh, azh = nz + dz0 + rise, rise_d / t_hold, rise_dd / (t_hold * t_hold)
            else:
                pz, vzh, azh = nz + dz, 0.0, 0.0
            px, py = s[_PX], s[_PY]
            vxh, vyh = -vx + wz * py, -vy - wz * px
            axh, ayh = wz * vyh, -wz * vxh
            if lag != 0.0 or lag_d != 0.0:  # standing, the base shifting over the feet
                px, py = px + shift_x * lag, py + shift_y * lag
                vxh, vyh, axh, ayh = (
                    vxh + shift_x * lag_d,
                    vyh + shift_y * lag_d,
                    axh + shift_x * lag_dd,
                    ayh + shift_y * lag_dd,
                )
            since, until = tau - s[_TLAST], s[_TNEXT] - tau
            x = (since if since < until else until) / blend
            if x >= 1.0:
                sb, sd, sdd = 1.0, 0.0, 0.0
            else:
                rate = 1.0 / blend if since < until else -1.0 / blend
                sb, sd, sdd = smoothstep(x, 1.0)
                sd, sdd = sd * rate, sdd * rate * rate
            w, wd, wdd = L * sb, L * sd, L * sdd
        else:
            x0, y0, vx0, vy0 = s[_LX], s[_LY], s[_LVX], s[_LVY]
            x1 = nx + 0.5 * T_st * (vx - wz * ny)  # Raibert touchdown point
            y1 = ny + 0.5 * T_st * (vy + wz * nx)
            vx1, vy1 = -vx + wz * y1, -vy - wz * x1
            u = (tau - s[_TLAST]) / T_sw
            u2, u3 = u * u, u * u * u
            h00, h10, h01, h11 = 2 * u3 - 3 * u2 + 1, (u3 - 2 * u2 + u) * T_sw, 3 * u2 - 2 * u3, (u3 - u2) * T_sw
            g00, g10, g01, g11 = (6 * u2 - 6 * u) / T_sw, 3 * u2 - 4 * u + 1, (6 * u - 6 * u2) / T_sw, 3 * u2 - 2 * u
            k00, k10 = (12 * u - 6) / (T_sw * T_sw), (6 * u - 4) / T_sw
            k01, k11 = (6 - 12 * u) / (T_sw * T_sw), (6 * u - 2) / T_sw
            px, py = h00 * x0 + h10 * vx0 + h01 * x1 + h11 * vx1, h00 * y0 + h10 * vy0 + h01 * y1 + h11 * vy1
            vxh, vyh = g00 * x0 + g10 * vx0 + g01 * x1 + g11 * vx1, g00 * y0 + g10 * vy0 + g01 * y1 + g11 * vy1
            axh, ayh = k00 * x0 + k10 * vx0 + k01 * x1 + k11 * vx1, k00 * y0 + k10 * vy0 + k01 * y1 + k11 * vy1
            um = 1.0 - u  # lift 64 h u³ (1 − u)³
            pz = nz + 64.0 * h_step * u3 * um * um * um
            vzh = 192.0 * h_step * u2 * um * um * (1.0 - 2.0 * u) / T_sw
            azh = 384.0 * h_step * u * um * (5.0 * u2 - 5.0 * u + 1.0) / (T_sw * T_sw)
            if holds:  # from the liftoff height to the footholds' mean, quintic over the swing
                rise = ground - s[_DZ0]
                # σ(u) of :func:`smoothstep` and its time derivatives, on the Hermite curve's powers of u
                sg = u3 * (10.0 + u * (6.0 * u - 15.0))
                sg_d = 30.0 * u2 * um * um / T_sw
                sg_dd = 60.0 * u * um * (1.0 - 2.0 * u) / (T_sw * T_sw)
                pz += s[_DZ0] + rise * sg
                vzh += rise * sg_d + ground_d * sg
                azh += rise * sg_dd + 2.0 * ground_d * sg_d + ground_dd * sg
        # ground-relative point in B: p_g = R_rpᵀ (p_H + sag e_z), then blend toward p_H
        zg = pz + sag
        gx = m00 * px + m10 * py + r20 * zg
        gy = m01 * px + m11 * py + r21 * zg
        gz = m02 * px + m12 * py + r22 * zg
        gvx, gvy, gvz = (
            m00 * vxh + m10 * vyh + r20 * vzh,
            m01 * vxh + m11 * vyh + r21 * vzh,
            m02 * vxh + m12 * vyh + r22 * vzh,
        )
        gax, gay, gaz = (
            m00 * axh + m10 * ayh + r20 * azh,
            m01 * axh + m11 * ayh + r21 * azh,
            m02 * axh + m12 * ayh + r22 * azh,
        )
        if w != 0.0 or wd != 0.0 or wdd != 0.0:
            # the levelling point p_H: the foothold's height relative to the footholds' mean (0 without footholds)
            ex, ey, ez = px - gx, py - gy, pz - ground - gz
            evx, evy, evz = vxh - gvx, vyh - gvy, vzh - ground_d - gvz
            gax += w * (axh - gax) + 2.0 * wd * evx + wdd * ex
            gay += w * (ayh - gay) + 2.0 * wd * evy + wdd * ey
            gaz += w * (azh - ground_dd - gaz) + 2.0 * wd * evz + wdd * ez
            gvx, gvy, gvz = gvx + w * evx + wd * ex, gvy + w * evy + wd * ey, gvz + w * evz + wd * ez
            gx, gy, gz = gx + w * ex, gy + w * ey, gz + w * ez
        targets[i, 0], targets[i, 1], targets[i, 2] = gx, gy, gz
        targets[i, 3], targets[i, 4], targets[i, 5] = gvx, gvy, gvz
        targets[i, 6], targets[i, 7], targets[i, 8] = gax, gay, gaz


def _toward(x: float, goal: float, step: float) -> float:
    """``x`` moved toward ``goal`` by at most ``step``."""
    return goal if abs(goal - x) <= step else (x + step if goal > x else x - step)


@njit(cache=True)
def smoothstep(x, scale):  # pragma: no cover - compiled
    """``scale`` times the quintic σ(x) = x³ (10 − 15 x + 6 x²), which rises from 0 at x = 0 to 1 at x = 1 with zero
    slope and curvature at both ends, and ``scale`` times its first and second derivatives dσ/dx, d²σ/dx²."""
    return (
        scale * x * x * x * (10.0 + x * (6.0 * x - 15.0)),
        scale * 30.0 * x * x * (1.0 - x) * (1.0 - x),
        scale * 60.0 * x * (1.0 - x) * (1.0 - 2.0 * x),
    )


@njit(cache=True)
def _advance(s, vx, vy, wz, dt):  # pragma: no cover - compiled
    """Re-express a ground-fixed point (the stance foot x-y in H of leg state ``s``, m) after the base moved with
    the twist (vx, vy, wz) (m/s, m/s, rad/s) for ``dt`` s: p ← Rz(−θ) (p − d), the exact rigid motion, in place."""
    if dt <= 0.0:
        return
    th = wz * dt
    if abs(th) < 1e-9:
        s[_PX] -= vx * dt
        s[_PY] -= vy * dt
        return
    sn, c = math.sin(th), math.cos(th)
    x = s[_PX] - (sn * vx - (1.0 - c) * vy) / wz
    y = s[_PY] - ((1.0 - c) * vx + sn * vy) / wz
    s[_PX], s[_PY] = c * x + sn * y, c * y - sn * x
