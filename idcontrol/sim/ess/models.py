"""The paper's example systems, as :class:`~idcontrol.sim.ess.integrator.EventSelectedSystem` s.

* :class:`OrderTestSystem`: the 3-D piecewise-affine system of the paper's Table 1, guards on the coordinate
  planes, with its exact solution (:func:`exact_piecewise_affine`, matrix exponentials);
* :class:`Hopper`: the 1-D hopper (a mass on a massless spring leg: z̈ = −g in flight, −g + k(L0 − z)/m in
  stance), piecewise affine too;
* :class:`Plate`: a plate in SE(2) falling on N evenly spaced vertical spring-dampers (frictionless rolling
  contacts), the paper's cost-per-contact model.

Units: SI (m, s, kg, N) for the hopper and the plate; the order test is dimensionless.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import NamedTuple

import numpy as np
from numba import njit
from numpy.typing import NDArray
from scipy.linalg import expm
from scipy.optimize import brentq

from idcontrol.errors import ConfigError
from idcontrol.sim.ess import system as ess_system

Array = NDArray[np.float64]
BoolArray = NDArray[np.bool_]

GRAVITY = 9.81  # m/s²


class PiecewiseAffine:
    """ẋ = A(side) x + b(side): an ESS whose every mode is affine, so its flow is exact by matrix exponential.

    Subclasses give ``modes(side) -> (A (n, n), b (n,))``, ``guards``, ``Dh`` (constant: guards affine in x)
    and ``partner``.
    """

    n: int
    m: int
    partner: NDArray[np.intp]
    H: Array  # (m, n): h(x) = H x + c
    c: Array  # (m,)

    def modes(self, side: BoolArray) -> tuple[Array, Array]:
        raise NotImplementedError

    def field(self, x: Array, side: BoolArray) -> Array:
        A, b = self.modes(side)
        return A @ x + b

    def guards(self, x: Array) -> Array:
        return self.H @ x + self.c

    def rates(self, x: Array, side: BoolArray) -> Array:
        return self.H @ self.field(x, side)

    @property
    def record(self) -> AffineRecord:
        """The compiled record: every mode's (A, b), indexed by the side mask's bits (guard k is bit k)."""
        if getattr(self, "_record", None) is None:
            modes = 1 << self.m
            A, b = np.empty((modes, self.n, self.n)), np.empty((modes, self.n))
            for index in range(modes):
                A[index], b[index] = self.modes(np.array([(index >> k) & 1 == 1 for k in range(self.m)]))
            self._record = AffineRecord(
                A, b, np.ascontiguousarray(self.H, dtype=float), np.ascontiguousarray(self.c, dtype=float)
            )
        return self._record


class AffineRecord(NamedTuple):
    """A :class:`PiecewiseAffine` system for compiled code: A (2^m, n, n), b (2^m, n) per mode (index Σ side_k 2^k),
    the guards h = H x + c, H (m, n), c (m,)."""

    A: Array
    b: Array
    H: Array
    c: Array


@njit(cache=True)
def _affine_field(system, x, side, out):  # pragma: no cover - compiled
    index = 0
    for k in range(side.shape[0]):
        if side[k]:
            index += 1 << k
    A, b = system.A[index], system.b[index]
    for i in range(x.shape[0]):
        acc = b[i]
        for j in range(x.shape[0]):
            acc += A[i, j] * x[j]
        out[i] = acc


@njit(cache=True)
def _affine_guards(system, x, out):  # pragma: no cover - compiled
    H = system.H
    for k in range(H.shape[0]):
        acc = system.c[k]
        for j in range(H.shape[1]):
            acc += H[k, j] * x[j]
        out[k] = acc


@njit(cache=True)
def _affine_rates(system, x, side, out):  # pragma: no cover - compiled
    f = np.empty(x.shape[0])
    _affine_field(system, x, side, f)
    H = system.H
    for k in range(H.shape[0]):
        acc = 0.0
        for j in range(H.shape[1]):
            acc += H[k, j] * f[j]
        out[k] = acc


ess_system.register(AffineRecord, _affine_field, _affine_guards, _affine_rates)


class OrderTestSystem(PiecewiseAffine):
    """The paper's Table 1 system, state (x, y, z), guards h = (x, y, −z): x ≥ 0, y ≥ 0 and z ≤ 0 are the
    "crossed" sides.

    ẋ: (x<0, y<0) −y+1, (x≥0, y<0) −2y+1, (x<0, y≥0) y+1, (x≥0, y≥0) 10x+1.
    ẏ: the table's row labels are lost; ``reading="y<0 first"`` (the digest's presumption) takes its first row
    for y < 0: (x<0) x+1, (x≥0) x/2+2; second row for y ≥ 0: (x<0) −x+1, (x≥0) y+1. ``"y>=0 first"`` swaps them.
    ż: z ≤ 0: 3z−1; z > 0: −z−1.
    """

    n, m = 3, 3
    X0 = np.array([-0.4, -0.15, 0.3])
    T_END = 0.5
    READINGS = ("y<0 first", "y>=0 first")

    def __init__(self, reading: str = "y<0 first") -> None:
        if reading not in self.READINGS:
            raise ConfigError(f"reading must be one of {list(self.READINGS)}, got {reading!r}")
        self.reading = reading
        self.partner = np.full(3, -1, dtype=np.intp)
        self.H = np.diag([1.0, 1.0, -1.0])
        self.c = np.zeros(3)
        self._modes: dict[tuple[bool, bool, bool], tuple[Array, Array]] = {}
        for sx in (False, True):
            for sy in (False, True):
                for sz in (False, True):
                    self._modes[(sx, sy, sz)] = self._build(sx, sy, sz)

    def _build(self, sx: bool, sy: bool, sz: bool) -> tuple[Array, Array]:
        A, b = np.zeros((3, 3)), np.ones(3)
        # ẋ
        if not sx and not sy:
            A[0, 1] = -1.0
        elif sx and not sy:
            A[0, 1] = -2.0
        elif not sx and sy:
            A[0, 1] = 1.0
        else:
            A[0, 0] = 10.0
        # ẏ: first row of the table applies to y < 0 (reading 1) or y ≥ 0 (reading 2)
        first_row = (not sy) if self.reading == "y<0 first" else sy
        if first_row:
            if sx:
                A[1, 0], b[1] = 0.5, 2.0
            else:
                A[1, 0] = 1.0
        else:
            if sx:
                A[1, 1] = 1.0
            else:
                A[1, 0] = -1.0
        # ż: z ≤ 0 is the crossed side of h = −z
        if sz:
            A[2, 2], b[2] = 3.0, -1.0
        else:
            A[2, 2], b[2] = -1.0, -1.0
        return A, b

    def modes(self, side: BoolArray) -> tuple[Array, Array]:
        return self._modes[(bool(side[0]), bool(side[1]), bool(side[2]))]


@dataclass
class Hopper(PiecewiseAffine):
    """The paper's 1-D hopper, state (z m, ż m/s): flight z̈ = −g above the leg length L0, stance
    z̈ = −g + k (L0 − z)/m below; no damping. Guards: touchdown h = L0 − z, lift-off h = z − L0 (partners).

    mass kg, stiffness N/m, leg_length m (the paper gives L0 = 1 and z0 = 2 L0, not k or m).
    """

    mass: float = 1.0
    stiffness: float = 1000.0
    leg_length: float = 1.0

    def __post_init__(self) -> None:
        if not (self.mass > 0 and self.stiffness > 0 and self.leg_length > 0):
            raise ConfigError("the hopper's mass, stiffness and leg length must be > 0")
        self.n, self.m = 2, 2
        self.partner = np.array([1, 0], dtype=np.intp)
        self.H = np.array([[-1.0, 0.0], [1.0, 0.0]])
        self.c = np.array([self.leg_length, -self.leg_length])
        w2 = self.stiffness / self.mass
        self._flight = (np.array([[0.0, 1.0], [0.0, 0.0]]), np.array([0.0, -GRAVITY]))
        self._stance = (np.array([[0.0, 1.0], [-w2, 0.0]]), np.array([0.0, -GRAVITY + w2 * self.leg_length]))

    def modes(self, side: BoolArray) -> tuple[Array, Array]:
        return self._stance if side[0] else self._flight


def _affine_flow(A: Array, b: Array, x0: Array, t: float) -> Array:
    """x(t) of ẋ = A x + b from x0, exactly (the exponential of the augmented (n+1, n+1) matrix)."""
    n = len(x0)
    aug = np.zeros((n + 1, n + 1))
    aug[:n, :n], aug[:n, n] = A, b
    return (expm(aug * t) @ np.append(x0, 1.0))[:n]


def exact_piecewise_affine(system: PiecewiseAffine, x0: Array, times: Array, *, scan: float = 1e-3) -> Array:
    """The exact states (len(times), n) of a :class:`PiecewiseAffine` system from x0 at t = 0: each mode's flow by
    matrix exponential, each switch where a guard's exact value changes sign (bracketed on a ``scan`` grid, then
    Brent's method to 1e-15), the mode given by the signs of h (a partner pair: the crossed guard's side).

    A guard touched without changing sign inside one ``scan`` interval would be missed: keep ``scan`` small
    against the time between switches.
    """
    times = np.asarray(times, dtype=float)
    out = np.empty((len(times), system.n))
    h0 = system.guards(np.asarray(x0, dtype=float))
    side = h0 >= 0.0
    for k, j in enumerate(system.partner.tolist()):
        if 0 <= j and k < j and side[k] and side[j]:
            side[j] = False
    t, x = 0.0, np.asarray(x0, dtype=float)
    t_last = float(times[-1])
    i = 0
    while i < len(times):
        A, b = system.modes(side)
        sign = np.where(side, 1.0, -1.0)  # a guard leaves its side when sign · h goes negative
        n = len(x)
        aug = np.zeros((n + 1, n + 1))
        aug[:n, :n], aug[:n, n] = A, b
        step = expm(aug * scan)  # the scan grid's exact one-step map
        switch = None
        tau, xa = 0.0, np.append(x, 1.0)
        before = sign * system.guards(x)
        while t + tau < t_last:
            x_next = step @ xa
            value = sign * system.guards(x_next[:n])
            gone = np.flatnonzero((value < 0.0) & (before >= 0.0))
            if gone.size:
                start = xa[:n]

                def leaving(s: float, k: int, start=start, A=A, b=b, sign=sign) -> float:
                    return float(sign[k] * system.guards(_affine_flow(A, b, start, s))[k])

                roots = [tau + brentq(leaving, 0.0, scan, args=(k,), xtol=1e-15, rtol=1e-15) for k in gone]
                first = int(np.argmin(roots))
                switch = (roots[first], int(gone[first]))
                break
            tau += scan
            xa, before = x_next, value
        horizon = switch[0] if switch is not None else np.inf
        while i < len(times) and times[i] - t <= horizon:
            out[i] = _affine_flow(A, b, x, times[i] - t)
            i += 1
        if switch is None:
            break
        tau, k = switch
        x = _affine_flow(A, b, x, tau)
        t += tau
        side[k] = not side[k]
        j = system.partner[k]
        if j >= 0:
            side[j] = not side[k]
    return out


class Plate:
    """A plate in SE(2) on N evenly spaced vertical spring-dampers (the paper's Fig. 5 model).

    State (px, pz, θ, vx, vz, ω): the plate's centre (m), angle (rad) and their rates. Spring i stands at
    x = xs_i with its top at rest height L0; the plate's height above it is z_i = pz + tan θ (xs_i − px), the
    spring is compressed when z_i < L0 and then pushes up, vertically, with F_i = max(0, k (L0 − z_i) − b ż_i)
    on the point of the plate above it (frictionless rolling contact). Guards: touchdown h_i = L0 − z_i
    (the paper's L0 + tan θ (px − xs_i) − pz) and lift-off −h_i, partners.

    n_springs : N ≥ 1; span : the springs cover [−span/2, span/2] m; the plate is longer (``length``) so it stays
    above every spring. stiffness N/m and damping N·s/m per spring; mass kg; the plate a thin rod in inertia.
    """

    def __init__(
        self,
        n_springs: int,
        *,
        span: float = 2.0,
        length: float = 3.0,
        mass: float = 1.0,
        stiffness: float = 2000.0,
        damping: float = 20.0,
        rest_height: float = 1.0,
    ) -> None:
        if not isinstance(n_springs, int) or n_springs < 1:
            raise ConfigError(f"n_springs must be a positive integer, got {n_springs!r}")
        if not (span > 0 and length > span and mass > 0 and stiffness > 0 and damping >= 0):
            raise ConfigError("plate: span > 0, length > span, mass > 0, stiffness > 0, damping >= 0")
        self.N = n_springs
        self.xs = np.linspace(-span / 2, span / 2, n_springs) if n_springs > 1 else np.zeros(1)
        self.mass, self.inertia = mass, mass * length**2 / 12.0
        self.k, self.b, self.L0, self.length = stiffness, damping, rest_height, length
        self.n, self.m = 6, 2 * n_springs
        self.partner = np.concatenate([np.arange(n_springs, 2 * n_springs), np.arange(n_springs)]).astype(np.intp)
        #: the compiled record (:class:`PlateRecord`)
        self.record = PlateRecord(
            self.xs, np.array([self.k, self.b, self.L0, self.mass, self.inertia]), np.empty(n_springs)
        )

    def guards(self, x: Array) -> Array:
        h = np.empty(self.m)
        _plate_guards(x, self.xs, self.L0, h)
        return h

    def rates(self, x: Array, side: BoolArray) -> Array:
        r = np.empty(self.m)
        _plate_rates(x, self.xs, r)
        return r

    def forces(self, x: Array, side: BoolArray) -> Array:
        """(N,) spring force on the plate, N (zero where the spring is not in contact)."""
        out, force = np.empty(6), np.empty(self.N)
        _plate_field(x, side, self.xs, self.k, self.b, self.L0, self.mass, self.inertia, out, force)
        return force

    def field(self, x: Array, side: BoolArray) -> Array:
        out, force = np.empty(6), np.empty(self.N)
        _plate_field(x, side, self.xs, self.k, self.b, self.L0, self.mass, self.inertia, out, force)
        return out

    def initial(self, height: float, angle: float) -> Array:
        """At rest, centred over the springs, at ``height`` m and ``angle`` rad."""
        return np.array([0.0, height, angle, 0.0, 0.0, 0.0])


# The plate's per-spring work, compiled: the cost per contact of the paper's Fig. 5 is then the integrator's, not
# numpy's per-call overhead on arrays of N.
@njit(cache=True)
def _plate_guards(x, xs, rest_height, h):  # pragma: no cover
    """h (2N,): touchdown L0 − z_i, then lift-off z_i − L0; z_i = pz + tan θ (xs_i − px)."""
    n = len(xs)
    tan = math.tan(x[2])
    for i in range(n):
        h[i] = rest_height - (x[1] + tan * (xs[i] - x[0]))
        h[n + i] = -h[i]


@njit(cache=True)
def _plate_rates(x, xs, r):  # pragma: no cover
    """ḣ (2N,) along the plate's motion: −ż_i, then ż_i; ż_i = vz + sec²θ (xs_i − px) ω − tan θ vx."""
    n = len(xs)
    tan, sec2 = math.tan(x[2]), 1.0 / math.cos(x[2]) ** 2
    for i in range(n):
        zdot = x[4] + sec2 * (xs[i] - x[0]) * x[5] - tan * x[3]
        r[i] = -zdot
        r[n + i] = zdot


@njit(cache=True)
def _plate_field(x, side, xs, k, b, rest_height, mass, inertia, out, force):  # pragma: no cover
    """ẋ (6,) and each spring's force (N,): F_i = max(0, k (L0 − z_i) − b ż_i) where spring i touches (side[i]),
    applied vertically at the plate point above it: generalized force F_i · ∂z_i/∂(px, pz, θ)."""
    n = len(xs)
    tan, sec2 = math.tan(x[2]), 1.0 / math.cos(x[2]) ** 2
    total = moment = 0.0
    for i in range(n):
        f = 0.0
        if side[i]:
            lever = sec2 * (xs[i] - x[0])
            z = x[1] + tan * (xs[i] - x[0])
            zdot = x[4] + lever * x[5] - tan * x[3]
            f = max(k * (rest_height - z) - b * zdot, 0.0)
            total += f
            moment += f * lever
        force[i] = f
    out[0], out[1], out[2] = x[3], x[4], x[5]
    out[3] = -tan * total / mass
    out[4] = total / mass - GRAVITY
    out[5] = moment / inertia


class PlateRecord(NamedTuple):
    """A :class:`Plate` for compiled code: spring positions xs (N,) m; params [k N/m, b N·s/m, L0 m, mass kg,
    inertia kg·m²]; force (N,) workspace."""

    xs: Array
    params: Array
    force: Array


@njit(cache=True)
def _plate_record_field(system, x, side, out):  # pragma: no cover - compiled
    p = system.params
    _plate_field(x, side, system.xs, p[0], p[1], p[2], p[3], p[4], out, system.force)


@njit(cache=True)
def _plate_record_guards(system, x, out):  # pragma: no cover - compiled
    _plate_guards(x, system.xs, system.params[2], out)


@njit(cache=True)
def _plate_record_rates(system, x, side, out):  # pragma: no cover - compiled
    _plate_rates(x, system.xs, out)


ess_system.register(PlateRecord, _plate_record_field, _plate_record_guards, _plate_record_rates)
