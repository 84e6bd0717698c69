"""Base sway with the feet fixed, for any legged robot: the base moves, the feet stay where they stand.

The base's target position is the standing one plus d(t) = e(t) A sin(2π f t) (A: per-axis amplitudes along the
base's x, y, z, m; e(t) the quintic start-up envelope), level and facing its standing heading. Each leg's end
frame stays where it stands in the world, so in the base frame its target is p₀ − d(t) (velocity −ḋ,
acceleration −d̈), reached by the compiled limb IK of :mod:`idcontrol.reference.chain`; a leg of six or more
joints also keeps its end frame's orientation (a flat foot stays flat). Joints outside the legs hold the
standing posture. Amplitudes default to a fraction of the standing height (``amplitude`` × h on y, as sway
options keep their meaning across robot sizes).
"""

from __future__ import annotations

import math

import numpy as np
import pinocchio as pin
from numba import njit

from idcontrol.errors import ConfigError
from idcontrol.reference.base import Array, JointTarget, Reference
from idcontrol.reference.chain import build_chains, pack, solve_limbs
from idcontrol.robot.model import RobotModel
from idcontrol.robot.urdf import frame_id

IK_ITERATIONS, IK_TOLERANCE = 20, 1e-10


class BaseSway(Reference):
    """Sway the floating base over fixed feet.

    amplitude : lateral amplitude as a fraction of the standing base height (default 0.05: 8 mm on the
        0.16 m quadruped, 5 cm on a 1 m humanoid).
    amplitudes : (x, y, z) amplitudes in m, replacing ``amplitude``.
    frequency : Hz.  ramp_time : s of quintic start-up envelope.
    max_joint_acceleration : bound on a_ref, rad/s².
    """

    name = "sway"

    def __init__(
        self,
        robot: RobotModel,
        *,
        amplitude: float = 0.05,
        amplitudes: tuple[float, float, float] | list[float] | None = None,
        frequency: float = 0.5,
        ramp_time: float = 1.0,
        max_joint_acceleration: float = 2000.0,
    ) -> None:
        if not robot.floating_base or not robot.legs:
            raise ConfigError(
                f"the sway reference needs a legged robot (floating base, legs in its robot file); "
                f"{robot.name!r} has {'no legs' if robot.floating_base else 'a fixed base'}"
            )
        q_stand = robot.standing_configuration()
        height = float(q_stand[2])
        self.amplitudes = np.array(
            [0.0, float(amplitude) * height, 0.0] if amplitudes is None else amplitudes, dtype=float
        )
        self.frequency = float(frequency)
        self.ramp_time = float(ramp_time)
        if self.amplitudes.shape != (3,) or not np.all(np.isfinite(self.amplitudes)):
            raise ConfigError(f"sway option amplitudes must be three finite numbers (m), got {amplitudes!r}")
        if not (self.frequency > 0 and math.isfinite(self.frequency)) or self.ramp_time < 0:
            raise ConfigError("sway options: frequency must be > 0 and ramp_time >= 0")
        self.max_joint_acceleration = float(max_joint_acceleration)
        legs = robot.legs
        q_base = q_stand.copy()
        q_base[:7] = [0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 1.0]
        self.chains = build_chains(
            robot.model,
            [(list(leg.joints), leg.end) for leg in legs],
            robot.actuated_joints,
            q_base,
            orient=[len(leg.joints) >= 6 for leg in legs],
        )
        self._real, self._ints = pack(self.chains)
        data = robot.model.createData()
        pin.framesForwardKinematics(robot.model, data, q_base)
        self._feet = np.array([data.oMf[frame_id(robot.model, leg.end)].translation for leg in legs])  # (L, 3)
        self._targets = np.zeros((len(legs), 9))
        self._template = np.zeros((3, robot.nu))
        self._template[0] = robot.joint_positions(q_stand)
        self.ik_residual = 0.0
        self.reset()

    def reset(self) -> None:
        self._t0: float | None = None
        self._q_legs = self.chains.held.copy()

    def sample(self, t: float, q: Array, v: Array) -> JointTarget:
        if self._t0 is None:
            self._t0 = t
        out = self._template.copy()
        self.ik_residual = _sway_tick(
            t - self._t0,
            self.frequency,
            self.ramp_time,
            self.amplitudes,
            self._feet,
            self._targets,
            self._real,
            self._ints,
            self._q_legs,
            out,
            self.max_joint_acceleration,
        )
        return JointTarget(out[0], out[1], out[2])


@njit(cache=True)
def _sway_tick(s, frequency, ramp_time, amplitudes, feet, targets, real, ints, q_legs, out, a_max):  # pragma: no cover
    """Feet targets p₀ − d(s) in the base frame (d the envelope times the sinusoid), then the legs' IK into out.
    Before its start (s < 0) the sway rests; ``ramp_time`` 0 starts at full amplitude."""
    s = max(s, 0.0)
    w = 2.0 * math.pi * frequency
    sn, cs = math.sin(w * s), math.cos(w * s)
    if s >= ramp_time:
        e, ed, edd = 1.0, 0.0, 0.0
    else:  # quintic rise: e = 10x³ − 15x⁴ + 6x⁵, x = s / ramp_time
        x, r = s / ramp_time, 1.0 / ramp_time
        e = x * x * x * (10.0 + x * (6.0 * x - 15.0))
        ed = 30.0 * x * x * (1.0 - x) * (1.0 - x) * r
        edd = 60.0 * x * (1.0 - x) * (1.0 - 2.0 * x) * r * r
    d, dd, ddd = e * sn, ed * sn + e * w * cs, edd * sn + 2.0 * ed * w * cs - e * w * w * sn
    for i in range(feet.shape[0]):
        for k in range(3):
            targets[i, k] = feet[i, k] - amplitudes[k] * d
            targets[i, 3 + k] = -amplitudes[k] * dd
            targets[i, 6 + k] = -amplitudes[k] * ddd
    return solve_limbs(real, ints, q_legs, targets, out, a_max, IK_TOLERANCE, IK_ITERATIONS)
