"""A trotting gait for a 12-DoF quadruped: planned foot trajectories, then analytic leg IK every tick.

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

from idcontrol.errors import ConfigError, InputError
from idcontrol.reference.base import Array, JointTarget, Reference
from idcontrol.reference.leg import LegKinematics
from idcontrol.robot.model import RobotModel

LEGS = ("LF", "RF", "LH", "RH")
PAPER_TOUCHDOWN_PHASES = {"LF": 0.25, "RF": 0.75, "LH": 0.75, "RH": 0.25}
PAPER_WAYPOINTS = ((0.0, 0.0), (0.25, 0.0), (0.0, 0.25), (0.0, -0.25), (-0.25, 0.0))


def _positive(name: str, value: float) -> float:
    value = float(value)
    if not (value > 0.0 and math.isfinite(value)):
        raise ConfigError(f"trot option {name} must be a finite number > 0, got {value!r}")
    return value


class TrotGait(Reference):
    """The paper's trot planner (Section 7.2) scaled to the 16 cm quadruped, with analytic leg IK.

    Options (SI units; velocities in the heading frame):
    forward_speed, lateral_speed (m/s), yaw_rate (rad/s) : desired base twist (ẋ, ẏ, θ̇).
    cycle_time (s), duty_factor, step_height (m), touchdown_phases (leg → phase in [0, 1)).
    stand_time (s) : standing still before the gait starts.
    max_linear_acceleration (m/s²), max_yaw_acceleration (rad/s²) : ramp of the commanded twist.
    waypoints : optional [(x, y), ...] in the world frame (m), visited in a loop; ``"paper"`` for Fig. 17's.
    waypoint_tolerance (m), turn_in_place_threshold (rad), heading_gain (1/s), max_yaw_rate (rad/s).
    levelling_gain, blend_fraction : see the module docstring.
    max_joint_acceleration (rad/s²) : bound on a_ref.

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
        cycle_time: float = 0.3,
        duty_factor: float = 0.75,
        step_height: float = 0.015,
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
        touchdown_search_speed: float = 0.1,
        touchdown_search_depth: float = 0.02,
    ) -> None:
        if not robot.floating_base:
            raise ConfigError(f"the trot reference needs a floating-base quadruped; {robot.name!r} has a fixed base")
        self.cycle_time = _positive("cycle_time", cycle_time)
        self.duty_factor = float(duty_factor)
        if not 0.0 < self.duty_factor < 1.0:
            raise ConfigError(f"trot option duty_factor must be in (0, 1), got {duty_factor!r}")
        self.stance_time = self.duty_factor * self.cycle_time
        self.swing_time = self.cycle_time - self.stance_time
        self.step_height = float(step_height)
        self.stand_time = float(stand_time)
        if self.stand_time < 0.0 or self.step_height < 0.0:
            raise ConfigError("trot options stand_time and step_height must be >= 0")
        phases = dict(PAPER_TOUCHDOWN_PHASES if touchdown_phases is None else touchdown_phases)
        if sorted(phases) != sorted(LEGS) or not all(0.0 <= float(x) < 1.0 for x in phases.values()):
            raise ConfigError(f"trot option touchdown_phases must give each of {LEGS} a phase in [0, 1), got {phases}")
        self.touchdown_phases = tuple(float(phases[leg]) for leg in LEGS)
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
        self.search_speed = _positive("touchdown_search_speed", touchdown_search_speed)
        self.search_depth = _positive("touchdown_search_depth", touchdown_search_depth)

        m = robot.model
        q_stand = robot.standing_configuration()
        data = m.createData()
        pin.framesForwardKinematics(m, data, q_stand)
        base_in_world = pin.XYZQUATToSE3(q_stand[:7])
        self.base_height = float(q_stand[2])  # h_nom, m
        self.legs: list[LegKinematics] = []
        nominal = []
        slots = []
        for leg in LEGS:
            joints = (f"{leg}_HAA", f"{leg}_HFE", f"{leg}_KFE")
            for j in joints:
                if j not in robot.actuated_joints:
                    raise ConfigError(f"the trot reference needs the actuated leg joint {j!r} ({robot.name!r})")
            idx = [m.joints[m.getJointId(j)].idx_v for j in joints]
            kinematics = LegKinematics(
                m, joints, f"{leg}_foot", float(q_stand[m.joints[m.getJointId(joints[2])].idx_q]),
                tuple(float(m.velocityLimit[i]) for i in idx),  # type: ignore[arg-type]
            )  # fmt: skip
            self.legs.append(kinematics)
            foot = base_in_world.actInv(data.oMf[m.getFrameId(f"{leg}_foot")].translation)
            nominal.append((float(foot[0]), float(foot[1]), float(foot[2])))
            slots.append(tuple(robot.actuated_joints.index(j) for j in joints))
        self.nominal_feet = tuple(nominal)  # in the base frame of the standing pose, m
        names = robot.sphere_names  # the foot spheres, when the robot file names them <leg>_foot
        self._foot_sphere = [names.index(f"{leg}_foot") if f"{leg}_foot" in names else -1 for leg in LEGS]
        self._mask = np.ones(len(names), dtype=bool)
        self._slots = tuple(slots)
        self.nu = robot.nu
        self._template = [*robot.joint_positions(q_stand).tolist(), *([0.0] * (2 * robot.nu))]

        self.desired = (float(forward_speed), float(lateral_speed), float(yaw_rate))
        self.cruise_speed = float(forward_speed)
        self.waypoints: tuple[tuple[float, float], ...] | None = None
        self.set_waypoints(waypoints)
        self.reset()

    def observe_contacts(self, contacts: object) -> None:
        """Which feet the controller had among its active contacts: a planned stance foot lands when it
        first appears there (until then it keeps descending, see ``touchdown_search_speed``)."""
        spheres = contacts.sphere.tolist() if contacts is not None else []
        for i, sphere in enumerate(self._foot_sphere):
            self._touching[i] = sphere in spheres

    def contact_mask(self) -> Array | None:
        """Only the feet planned in stance may touch: a swing foot inside the detection margin
        carries no predicted force (it is being lifted or is about to land)."""
        if -1 in self._foot_sphere:
            return None
        for i, sphere in enumerate(self._foot_sphere):
            self._mask[sphere] = self.in_stance[i]
        return self._mask

    # ------------------------------------------------------------------ run-time commands
    def telemetry(self) -> dict[str, object]:
        """Gait phase in [0, 1), planned stance per leg (LF, RF, LH, RH), commanded twist (m/s, m/s, rad/s)."""
        return {"phase": self.phase, "in_stance": list(self.in_stance), "command": list(self.command)}

    RUNTIME_OPTIONS = ("forward_speed", "lateral_speed", "yaw_rate", "waypoints")

    def update(self, **options: object) -> None:
        """Run-time changes of the commanded motion, keeping the gait's phase: ``forward_speed``,
        ``lateral_speed`` (m/s), ``yaw_rate`` (rad/s) or ``waypoints`` (list of (x, y), "paper", None)."""
        unknown = sorted(set(options) - set(self.RUNTIME_OPTIONS))
        if unknown:
            raise ConfigError(f"trot options {unknown} cannot change while running; these can: {self.RUNTIME_OPTIONS}")
        speeds = [k for k in ("forward_speed", "lateral_speed", "yaw_rate") if k in options]
        if speeds:
            forward, lateral, yaw = (float(options.get(k, d)) for k, d in zip(  # type: ignore[arg-type]
                ("forward_speed", "lateral_speed", "yaw_rate"), self.desired, strict=True))  # fmt: skip
            self.set_base_velocity(forward, lateral, yaw)
            self.cruise_speed = forward
        if "waypoints" in options:
            self.set_waypoints(options["waypoints"])  # type: ignore[arg-type]

    def set_base_velocity(self, forward: float, lateral: float = 0.0, yaw_rate: float = 0.0) -> None:
        """Desired base twist in the heading frame (m/s, m/s, rad/s); stops waypoint following."""
        values = (float(forward), float(lateral), float(yaw_rate))
        if not all(math.isfinite(x) for x in values):
            raise InputError(f"base velocity must be finite, got {values}")
        self.desired = values
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
        n = len(LEGS)
        self.in_stance = [True] * n
        self._p = [[x, y] for x, y, _ in self.nominal_feet]  # stance foot x-y in H at _tau
        self._liftoff = [(0.0, 0.0, 0.0, 0.0)] * n  # (x, y, ẋ, ẏ) in H at liftoff
        self._t_last = [-self.stand_time] * n  # gait time of the last touchdown (or start) / liftoff
        self.landed = [True] * n  # a planned stance foot that has touched the ground since its touchdown
        self._touching = [True] * n  # each foot among the controller's active contacts at the last tick
        D = self.duty_factor
        self._t_next = [((phi + D) % 1.0) * self.cycle_time for phi in self.touchdown_phases]  # first liftoff
        self._tau = -self.stand_time
        self._feet_in_base = [tuple(p) for p in self.nominal_feet]

    @property
    def foot_targets_in_base(self) -> Array:
        """(4, 3) the feet's target positions in the actual base frame at the last sample (LF, RF, LH, RH), m."""
        return np.array(self._feet_in_base)

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
        if tau < self._tau:  # the clock went back: start over
            self.reset()
            return self.sample(t, q, v)
        self._update_command(tau - self._tau, q, tau < 0.0)
        vx, vy, wz = self.command
        T_st, T_sw = self.stance_time, self.swing_time
        self.phase = (tau / self.cycle_time) % 1.0 if tau > 0.0 else 0.0

        # measured attitude: R_rp = Rz(−yaw) R, its transpose maps H to B
        z_base, qx, qy, qz, qw = q[2:7].tolist()  # Python floats: NumPy scalars are several times slower
        r00, r01, r02 = 1.0 - 2.0 * (qy * qy + qz * qz), 2.0 * (qx * qy - qz * qw), 2.0 * (qx * qz + qy * qw)
        r10, r11, r12 = 2.0 * (qx * qy + qz * qw), 1.0 - 2.0 * (qx * qx + qz * qz), 2.0 * (qy * qz - qx * qw)
        r20, r21, r22 = 2.0 * (qx * qz - qy * qw), 2.0 * (qy * qz + qx * qw), 1.0 - 2.0 * (qx * qx + qy * qy)
        norm = math.hypot(r00, r10) or 1.0
        cy_, sy_ = r00 / norm, r10 / norm
        m00, m01, m02 = cy_ * r00 + sy_ * r10, cy_ * r01 + sy_ * r11, cy_ * r02 + sy_ * r12
        m10, m11, m12 = cy_ * r10 - sy_ * r00, cy_ * r11 - sy_ * r01, cy_ * r12 - sy_ * r02
        sag = self.base_height - z_base  # h_nom − z_b, m
        if not self.body_feedback:  # plan in the base frame as if it were level at h_nom
            m00, m01, m02, m10, m11, m12 = 1.0, 0.0, 0.0, 0.0, 1.0, 0.0
            r20, r21, r22, sag = 0.0, 0.0, 1.0, 0.0

        L, blend, a_max = self.levelling_gain, self.blend_time, self.max_joint_acceleration
        out = self._template[:]
        nu, h_step = self.nu, self.step_height
        in_stance, t_next, t_last, liftoff = self.in_stance, self._t_next, self._t_last, self._liftoff
        feet = []
        for i, ((nx, ny, nz), p, leg, (j1, j2, j3)) in enumerate(
            zip(self.nominal_feet, self._p, self.legs, self._slots, strict=True)
        ):
            t_a = self._tau
            while t_next[i] <= tau:  # gait events between the previous sample and this one
                t_e = t_next[i]
                if in_stance[i]:
                    _advance(p, vx, vy, wz, t_e - t_a)
                    liftoff[i] = (p[0], p[1], -vx + wz * p[1], -vy - wz * p[0])
                    t_next[i] = t_e + T_sw
                else:
                    p[0] = nx + 0.5 * T_st * (vx - wz * ny)
                    p[1] = ny + 0.5 * T_st * (vy + wz * nx)
                    t_next[i] = t_e + T_st
                    self.landed[i] = False
                in_stance[i] = not in_stance[i]
                t_last[i] = t_a = t_e
            if in_stance[i] and not self.landed[i]:
                if self._touching[i] or tau - t_last[i] > self.search_depth / self.search_speed:
                    self.landed[i] = True  # touched (or searched as deep as allowed): stance from now on
                    t_last[i] = tau
            if in_stance[i] and not self.landed[i]:  # late touchdown: keep descending until the ground is found
                _advance(p, vx, vy, wz, tau - t_a)
                px, py = p[0], p[1]
                pz = nz - self.search_speed * (tau - t_last[i])
                vxh, vyh, vzh = -vx + wz * py, -vy - wz * px, -self.search_speed
                axh, ayh, azh = wz * vyh, -wz * vxh, 0.0
                w = wd = wdd = 0.0
            elif in_stance[i]:
                _advance(p, vx, vy, wz, tau - t_a)
                px, py, pz = p[0], p[1], nz
                vxh, vyh, vzh = -vx + wz * py, -vy - wz * px, 0.0
                axh, ayh, azh = wz * vyh, -wz * vxh, 0.0
                since, until = tau - t_last[i], t_next[i] - tau
                x = (since if since < until else until) / blend
                if x >= 1.0:
                    s, sd, sdd = 1.0, 0.0, 0.0
                else:
                    rate = 1.0 / blend if since < until else -1.0 / blend
                    s = x * x * x * (10.0 + x * (6.0 * x - 15.0))
                    sd = 30.0 * x * x * (1.0 - x) * (1.0 - x) * rate
                    sdd = 60.0 * x * (1.0 - x) * (1.0 - 2.0 * x) * rate * rate
                w, wd, wdd = L * s, L * sd, L * sdd
            else:
                x0, y0, vx0, vy0 = liftoff[i]
                x1 = nx + 0.5 * T_st * (vx - wz * ny)  # Raibert touchdown point
                y1 = ny + 0.5 * T_st * (vy + wz * nx)
                vx1, vy1 = -vx + wz * y1, -vy - wz * x1
                u = (tau - t_last[i]) / T_sw
                u2, u3 = u * u, u * u * u
                h00, h10, h01, h11 = 2 * u3 - 3 * u2 + 1, (u3 - 2 * u2 + u) * T_sw, 3 * u2 - 2 * u3, (u3 - u2) * T_sw
                g00, g10, g01, g11 = (
                    (6 * u2 - 6 * u) / T_sw,
                    3 * u2 - 4 * u + 1,
                    (6 * u - 6 * u2) / T_sw,
                    3 * u2 - 2 * u,
                )
                k00, k10, k01, k11 = (
                    (12 * u - 6) / T_sw**2,
                    (6 * u - 4) / T_sw,
                    (6 - 12 * u) / T_sw**2,
                    (6 * u - 2) / T_sw,
                )
                px, py = h00 * x0 + h10 * vx0 + h01 * x1 + h11 * vx1, h00 * y0 + h10 * vy0 + h01 * y1 + h11 * vy1
                vxh, vyh = g00 * x0 + g10 * vx0 + g01 * x1 + g11 * vx1, g00 * y0 + g10 * vy0 + g01 * y1 + g11 * vy1
                axh, ayh = k00 * x0 + k10 * vx0 + k01 * x1 + k11 * vx1, k00 * y0 + k10 * vy0 + k01 * y1 + k11 * vy1
                um = 1.0 - u  # lift 64 h u³ (1 − u)³
                pz = nz + 64.0 * h_step * u3 * um * um * um
                vzh = 192.0 * h_step * u2 * um * um * (1.0 - 2.0 * u) / T_sw
                azh = 384.0 * h_step * u * um * (5.0 * u2 - 5.0 * u + 1.0) / (T_sw * T_sw)
                w = wd = wdd = 0.0
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
            if w or wd or wdd:
                ex, ey, ez = px - gx, py - gy, pz - gz
                evx, evy, evz = vxh - gvx, vyh - gvy, vzh - gvz
                gax += w * (axh - gax) + 2.0 * wd * evx + wdd * ex
                gay += w * (ayh - gay) + 2.0 * wd * evy + wdd * ey
                gaz += w * (azh - gaz) + 2.0 * wd * evz + wdd * ez
                gvx, gvy, gvz = gvx + w * evx + wd * ex, gvy + w * evy + wd * ey, gvz + w * evz + wd * ez
                gx, gy, gz = gx + w * ex, gy + w * ey, gz + w * ez
            foot = (gx, gy, gz)
            feet.append(foot)
            (q1, q2, q3), (qd1, qd2, qd3), (qdd1, qdd2, qdd3) = leg.solve(foot, (gvx, gvy, gvz), (gax, gay, gaz))
            out[j1], out[j2], out[j3] = q1, q2, q3
            out[nu + j1], out[nu + j2], out[nu + j3] = qd1, qd2, qd3
            out[2 * nu + j1] = -a_max if qdd1 < -a_max else (a_max if qdd1 > a_max else qdd1)
            out[2 * nu + j2] = -a_max if qdd2 < -a_max else (a_max if qdd2 > a_max else qdd2)
            out[2 * nu + j3] = -a_max if qdd3 < -a_max else (a_max if qdd3 > a_max else qdd3)
        self._tau = tau
        self._feet_in_base = feet
        target = np.array(out).reshape(3, nu)
        return JointTarget(target[0], target[1], target[2])


def _toward(x: float, goal: float, step: float) -> float:
    """``x`` moved toward ``goal`` by at most ``step``."""
    return goal if abs(goal - x) <= step else (x + step if goal > x else x - step)


def _advance(p: list[float], vx: float, vy: float, wz: float, dt: float) -> None:
    """Re-express a ground-fixed point ``p`` (x-y in H, m) after the base moved with the twist
    (vx, vy, wz) (m/s, m/s, rad/s) for ``dt`` s: p ← Rz(−θ) (p − d), the exact rigid motion, in place."""
    if dt <= 0.0:
        return
    th = wz * dt
    if abs(th) < 1e-9:
        p[0] -= vx * dt
        p[1] -= vy * dt
        return
    s, c = math.sin(th), math.cos(th)
    x = p[0] - (s * vx - (1.0 - c) * vy) / wz
    y = p[1] - ((1.0 - c) * vx + s * vy) / wz
    p[0], p[1] = c * x + s * y, c * y - s * x
