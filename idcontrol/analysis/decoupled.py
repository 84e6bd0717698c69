"""A mechanical system with decoupled limbs (Pace & Burden), integrated event by event to machine precision.

Pace & Burden show that when every limb that can touch the ground is inertially decoupled from the others
(block-diagonal mass matrix, each contact constraint depending on its own limb only, the body's effort the sum
of the limbs'), the state at a later time is a C¹ function of the initial state even where the order of the
touchdowns changes: the left and right derivatives through a simultaneous touchdown agree. Their Theorem 1 is
checked here on the smallest such system, the fixture of the related-seeds digest:

* a planar body (position x, z, pitch θ; mass 1 kg, inertia 0.1 kg·m²) with two hips at +0.5 m and −0.4 m
  along its axis, at (x + x_j cos θ, z + x_j sin θ);
* a point foot of its own under each hip (0.1 kg and 0.15 kg, at (x_j, z_j)), joined to it by a spring-damper
  leg along the hip-foot line, force F_j = k (l₀ − l_j) − b l̇_j (k = 400 N/m, b = 4 N·s/m, l₀ = 0.3 m),
  pushing the hip away from the foot; the mass matrix is diagonal, each foot's constraint z_j ≥ 0 its own;
* a foot in flight falls under gravity and its leg force; a foot on the ground is held there by the ground's
  force (F_j's vertical part + m_j g ≥ 0) and leaves when that force would pull; touchdown is plastic (the
  foot's normal velocity is set to 0, the map I − P_J acting on the foot's coordinates only). ``stance``
  says what holds the foot along the ground: ``"pinned"`` (it stops there and stays) or ``"sliding"``
  (frictionless: only z_j = 0 is imposed);
* released at rest from z = 0.9 m with the legs at rest length, hanging straight down (``leg_axis = "world"``)
  or along the body's own vertical axis (``"body"``), the body pitched by θ₀: at θ₀ = 0 both feet touch down
  together at t = √(2·0.6/g) ≈ 0.35 s.

The digest that describes this fixture does not say which way the legs hang or what holds a foot on the
ground; :data:`READINGS` lists the four readings the experiment reports.

:func:`outcome` integrates from θ₀ to t (DOP853 at 1e-13 relative tolerance, each touchdown and lift-off located
as an event and the reset applied there; touchdowns at the same instant are applied as a set), and
:func:`derivative_gaps` compares the left and right finite-difference derivatives of the outcome.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
from numpy.typing import NDArray
from scipy.integrate import solve_ivp

from idcontrol.errors import InputError, SimulationError

Array = NDArray[np.float64]

GRAVITY = 9.81  # m/s²


#: The readings of the digest's description (leg_axis, stance): the first is the default.
READINGS: tuple[tuple[str, str], ...] = (
    ("world", "pinned"),
    ("world", "sliding"),
    ("body", "pinned"),
    ("body", "sliding"),
)


@dataclass(frozen=True)
class SpringLeggedBody:
    """The fixture's parameters (SI units).

    State x (14,) = [q; q̇], q = [x, z, θ, x₁, z₁, x₂, z₂] (m, rad): the body's centre and pitch, then each foot.
    """

    body_mass: float = 1.0
    body_inertia: float = 0.1
    foot_masses: tuple[float, float] = (0.1, 0.15)
    hips: tuple[float, float] = (0.5, -0.4)  # m along the body axis
    stiffness: float = 400.0  # N/m
    damping: float = 4.0  # N·s/m
    rest_length: float = 0.3  # m
    drop_height: float = 0.9  # m, the body's initial height
    gravity: float = GRAVITY
    leg_axis: str = "world"  # the legs hang straight down ("world") or along the body's axis ("body") at release
    stance: str = "pinned"  # a standing foot is "pinned" to the ground or "sliding" on it without friction

    def __post_init__(self) -> None:
        if self.leg_axis not in ("world", "body"):
            raise InputError(f"leg_axis must be 'world' or 'body', got {self.leg_axis!r}")
        if self.stance not in ("pinned", "sliding"):
            raise InputError(f"stance must be 'pinned' or 'sliding', got {self.stance!r}")

    def hip(self, x: Array, j: int) -> tuple[Array, Array]:
        """Hip j's position (2,) m and velocity (2,) m/s in the plane."""
        th, dth = x[2], x[9]
        s, c = math.sin(th), math.cos(th)
        h = self.hips[j]
        return np.array([x[0] + h * c, x[1] + h * s]), np.array([x[7] - h * s * dth, x[8] + h * c * dth])

    def initial_state(self, theta0: float) -> Array:
        """At rest, body at ``drop_height`` pitched by θ₀ (rad), legs at rest length along ``leg_axis``."""
        x = np.zeros(14)
        x[1], x[2] = self.drop_height, theta0
        down = np.array([0.0, -1.0]) if self.leg_axis == "world" else np.array([math.sin(theta0), -math.cos(theta0)])
        for j in range(2):
            x[3 + 2 * j : 5 + 2 * j] = self.hip(x, j)[0] + self.rest_length * down
        return x

    def leg_forces(self, x: Array) -> Array:
        """(2, 2) N: leg j's force on its hip (its foot gets the opposite)."""
        out = np.empty((2, 2))
        for j in range(2):
            p, dp = self.hip(x, j)
            r = p - x[3 + 2 * j : 5 + 2 * j]
            length = math.hypot(r[0], r[1])
            u = r / length
            rate = float(u @ (dp - x[10 + 2 * j : 12 + 2 * j]))
            out[j] = (self.stiffness * (self.rest_length - length) - self.damping * rate) * u
        return out

    def field(self, x: Array, stance: tuple[bool, bool]) -> Array:
        """ẋ (14,) in the contact mode ``stance`` (which feet are on the ground)."""
        F = self.leg_forces(x)
        g = self.gravity
        dx = np.zeros(14)
        dx[:7] = x[7:]
        dx[7] = (F[0, 0] + F[1, 0]) / self.body_mass
        dx[8] = (F[0, 1] + F[1, 1]) / self.body_mass - g
        torque = 0.0
        for j in range(2):
            r = self.hip(x, j)[0] - x[:2]
            torque += r[0] * F[j, 1] - r[1] * F[j, 0]
        dx[9] = torque / self.body_inertia
        for j in range(2):
            mf = self.foot_masses[j]
            horizontal, vertical = 10 + 2 * j, 11 + 2 * j
            if not stance[j]:
                dx[horizontal], dx[vertical] = -F[j, 0] / mf, -F[j, 1] / mf - g
            else:
                dx[4 + 2 * j] = dx[vertical] = 0.0
                if self.stance == "pinned":
                    dx[3 + 2 * j] = dx[horizontal] = 0.0
                else:
                    dx[horizontal] = -F[j, 0] / mf
        return dx

    def contact_force(self, x: Array, j: int) -> float:
        """N: the ground's normal force on foot j while it stands."""
        return float(self.leg_forces(x)[j, 1] + self.foot_masses[j] * self.gravity)

    def touch_down(self, x: Array, j: int) -> None:
        """The plastic impact of foot j, in place: its normal velocity (and, pinned, its tangential one) is 0."""
        x[4 + 2 * j] = 0.0
        x[11 + 2 * j] = 0.0
        if self.stance == "pinned":
            x[10 + 2 * j] = 0.0


RTOL = 1e-13
ATOL = 1e-13


def outcome(system: SpringLeggedBody, theta0: float, t_end: float, *, max_events: int = 20) -> Array:
    """The state x(t_end) (14,) from :meth:`SpringLeggedBody.initial_state` (θ₀), through every touchdown
    (plastic) and lift-off on the way."""
    if not (math.isfinite(theta0) and math.isfinite(t_end) and t_end > 0):
        raise InputError(f"need a finite θ₀ and t_end > 0, got θ₀ = {theta0!r}, t_end = {t_end!r}")
    x = system.initial_state(theta0)
    t = 0.0
    stance = [False, False]
    for _ in range(max_events):
        events = []
        for j in range(2):
            if stance[j]:
                ev = lambda _t, y, j=j: system.contact_force(y, j)  # noqa: E731 - lift-off: force reaches 0
            else:
                ev = lambda _t, y, j=j: y[4 + 2 * j]  # noqa: E731 - touchdown: the foot reaches the ground
            ev.terminal, ev.direction = True, -1.0
            events.append(ev)
        mode = tuple(stance)
        sol = solve_ivp(
            lambda _t, y, mode=mode: system.field(y, mode),
            (t, t_end),
            x,
            method="DOP853",
            rtol=RTOL,
            atol=ATOL,
            events=events,
        )
        if sol.status == -1:
            raise SimulationError(f"integration failed at t = {sol.t[-1]:.6f} s: {sol.message}")
        if sol.status == 0:
            return sol.y[:, -1]
        hit = [j for j in range(2) if len(sol.t_events[j])]
        first = min(hit, key=lambda j: sol.t_events[j][0])
        t, x = float(sol.t_events[first][0]), sol.y_events[first][0].copy()
        # events within round-off of the first are one simultaneous event: applied as a set
        for j in range(2):
            crossed = (x[4 + 2 * j] <= 1e-12) if not stance[j] else (system.contact_force(x, j) <= 1e-9)
            if j == first or crossed:
                stance[j] = not stance[j]
                if stance[j]:
                    system.touch_down(x, j)
    raise SimulationError(f"more than {max_events} contact events before t = {t_end} s")


@dataclass(frozen=True)
class DerivativeGap:
    """Left and right finite-difference derivatives of the outcome at one step size.

    step : δ.  left, right : D⁻ = (f(x) − f(x − δ)) / δ and D⁺ = (f(x + δ) − f(x)) / δ.
    gap : max |D⁺ − D⁻| over the outcome's components.  jump : max |f(x + δ) − f(x − δ)|.
    """

    step: float
    left: Array
    right: Array
    gap: float
    jump: float


def derivative_gaps(f, x0: float, steps: tuple[float, ...]) -> list[DerivativeGap]:
    """Compare the one-sided finite-difference derivatives of ``f`` (a scalar → vector map) at ``x0``."""
    center = np.asarray(f(x0), dtype=float)
    out = []
    for h in steps:
        plus, minus = np.asarray(f(x0 + h), dtype=float), np.asarray(f(x0 - h), dtype=float)
        right, left = (plus - center) / h, (center - minus) / h
        out.append(DerivativeGap(h, left, right, float(np.abs(right - left).max()), float(np.abs(plus - minus).max())))
    return out
