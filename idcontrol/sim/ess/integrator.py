"""The event-selected-system (ESS) integrator of Anderson & Revzen, "Rapid Integrator for a Class of
Multi-Contact Systems", generic over the system (f, h).

The system
----------
A state x (n,), event functions h(x) (m,) and a vector field f(x, side) whose dependence on the mode is only
through ``side`` (m,) bool: which side of each guard h_k = 0 the state is on (True: h_k ≥ 0, "crossed").
In the class the paper treats (an ESS), f is smooth in x for each fixed ``side`` and every guard is *live*:
inside its band −ε ≤ h_k ≤ ε, ḣ_k = ∇h_k·f > c > 0 in every mode, so each guard is crossed upwards, once, at
a rate bounded below. A contact is two guards, touchdown (h = −gap) and lift-off (h = +gap), each the
other's *partner* (``partner[k]``): crossing one puts the state on the negative side of the other.

The algorithm (the paper's Listing 1, with its defects handled)
-----------------------------------------------------------------
Each loop is one of two steps:

* **projection** (some not-yet-crossed guard is inside its band, at a positive rate): the corner vector field
  G = f(x, side) and the guard rates r = Dh(x)·G are sampled once at x; each band guard's crossing time is
  predicted as Δt_k = −h_k / r_k; the state moves in a straight line x += G·Δt_j to the first one, j, whose side
  flips (and its partner's too). Guards are crossed one at a time, in predicted order, each with the field of
  the mode the previous crossings produced;
* **integration** (no guard can be projected): an event-stopping ODE solver (scipy's ``solve_ivp``, RK45 =
  the paper's dopri5 by default) integrates ẋ = f(x, side) with the mode held fixed until a guard enters its
  band from below (the next loop projects it) or the interval ends.

The mode is the ``side`` mask this integrator keeps, never the signs of h recomputed from x: after a projection
onto a nonlinear guard, h_j may read −1e−12 (one of the paper's defects); ``side[j]`` is True regardless.

Guards are **re-armed** individually. A guard on its negative side becomes a candidate for projection
(*armed*) only once it has been seen below its band (h < −ε): the lift-off guard of a contact that just
touched down starts at h ≈ 0 inside its band and is falling; projecting it then would step back in time.
The paper's re-arming (every guard by sign once all are crossed) never happens with many contacts in
different phases; this per-guard rule is its generalization (the "guard reset matrix" it proposes).

The paper's other defects:

* **a step that jumps over the band**: the integration step cannot (the solver locates the band entry
  h_k = −ε by root finding on its dense output); a projection could, moving a fast guard from below its
  band to past zero while projecting a slow one. A projection is therefore cut where the first armed guard
  outside its band would enter it (a *split*: no crossing; the next loop orders both);
* **time overshooting the end** t_f: the end of the interval is itself a guard h = t − t_f (rate 1) in the
  projection's ordering, and the ODE solver stops at t_f; time never passes it. A guard left inside its
  band at t_f is crossed by the next call (the next control tick, with the next torque);
* **a guard found past zero without having been crossed** (a step that went over a guard the solver's event
  function missed, a projection landing a guard a hair past zero): it is crossed where it was found,
  recorded as ``swept``. Round-off never flips a guard: an armed guard is swept only past 1e−9 ε, a guard
  whose partner was just crossed only past its band, and the event that locates a crossing waits 1e−9 ε past
  zero (a foot at rest on the ground would otherwise chatter across its guards on the kinematics' round-off).

Liveness is checked, not assumed: a candidate guard inside its band whose rate is not above ``min_rate``
(grazing contact, a foot resting inside the band) is not projected; the ODE solver then integrates with an
event at h_k = 0 and crosses it where the root finder locates it (``located``), as a conventional hybrid
integrator would. A guard without a partner that goes back below zero (not possible in the class) flips back
where it is located (``reversed``). Each crossing is recorded with its time and how it was made, in order.

Accuracy (measured on the paper's Table 1 system, see :mod:`idcontrol.sim.ess.models`): the final-state error
is second order in ε (first order per crossing in the paper's proof).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import NamedTuple, Protocol

import numpy as np
from numba import njit
from numpy.typing import NDArray
from scipy.integrate import solve_ivp

from idcontrol.errors import ConfigError, InputError, SimulationError
from idcontrol.sim.ess import dopri
from idcontrol.sim.ess import system as ess_system

Array = NDArray[np.float64]
BoolArray = NDArray[np.bool_]

#: ``Crossing.guard`` of the end of the interval (the control tick's boundary h = t − t_f).
TICK = -1

#: How a crossing was made.
PROJECTED, LOCATED, SWEPT, REVERSED, END = "projected", "located", "swept", "reversed", "tick"

# event kinds of an integration step (each event is normalized to rise through zero)
_BAND, _LOCATE, _ARM, _REVERSE = 0, 1, 2, 3

#: :class:`EssIntegrator`'s engines
ENGINES = ("auto", "compiled", "scipy")


class EventSelectedSystem(Protocol):
    """What the integrator needs from a system. n: state size, m: number of guards.

    partner : (m,) int, the guard that is this guard's negative (−1: none).
    """

    n: int
    m: int
    partner: NDArray[np.intp]

    def field(self, x: Array, side: BoolArray) -> Array:
        """ẋ (n,) at x in the mode ``side`` (m,) (True: on the h_k ≥ 0 side of guard k)."""
        ...

    def guards(self, x: Array) -> Array:
        """h(x) (m,)."""
        ...

    def rates(self, x: Array, side: BoolArray) -> Array:
        """Dh(x)·f(x, side) (m,): each guard's rate of change along the field."""
        ...


class FunctionSystem:
    """An :class:`EventSelectedSystem` from plain functions, as the paper's interface takes them.

    f(x, side) -> (n,); h(x) -> (m,); Dh(x) -> (m, n); partner : (m,) ints or None (no partners).
    """

    def __init__(
        self,
        f: Callable[[Array, BoolArray], Array],
        h: Callable[[Array], Array],
        Dh: Callable[[Array], Array],
        n: int,
        m: int,
        partner: NDArray[np.intp] | list[int] | None = None,
    ) -> None:
        self.f, self.h, self.Dh, self.n, self.m = f, h, Dh, int(n), int(m)
        self.partner = _check_partner(partner, self.m)

    def field(self, x: Array, side: BoolArray) -> Array:
        return np.asarray(self.f(x, side), dtype=float)

    def guards(self, x: Array) -> Array:
        return np.asarray(self.h(x), dtype=float)

    def rates(self, x: Array, side: BoolArray) -> Array:
        return np.asarray(self.Dh(x), dtype=float) @ self.field(x, side)


def _check_partner(partner: NDArray[np.intp] | list[int] | None, m: int) -> NDArray[np.intp]:
    if partner is None:
        return np.full(m, -1, dtype=np.intp)
    p = np.asarray(partner, dtype=np.intp)
    if p.shape != (m,):
        raise ConfigError(f"partner must have one entry per guard, shape ({m},), got {p.shape}")
    for k, j in enumerate(p.tolist()):
        if j >= m or j < -1 or j == k or (j >= 0 and p[j] != k):
            raise ConfigError(f"partner[{k}] = {j}: partners must be distinct guards that name each other")
    return p


@dataclass(frozen=True, slots=True)
class Crossing:
    """One guard crossing: time t (the system's unit, s for a simulator), guard index (or :data:`TICK`) and how
    (:data:`PROJECTED`, :data:`LOCATED`, :data:`SWEPT`, :data:`REVERSED` or :data:`END`)."""

    t: float
    guard: int
    how: str


@dataclass
class GuardMemory:
    """What the integrator remembers about the guards between calls (one control tick to the next).

    side : (m,) the mode: True where the state is on the h_k ≥ 0 side (crossed).
    armed : (m,) a negative-side guard that has been seen below its band, so it may be projected.
    """

    side: BoolArray
    armed: BoolArray

    def copy(self) -> GuardMemory:
        return GuardMemory(self.side.copy(), self.armed.copy())


@dataclass
class EssStats:
    """Counters of what the integrator did (cumulative over calls)."""

    projections: int = 0  # projection steps that crossed a guard
    splits: int = 0  # projections cut where a guard outside its band would have entered it
    end_projections: int = 0  # projections cut at the end of an interval
    integrations: int = 0  # solve_ivp calls
    rhs_evaluations: int = 0
    crossings: dict[str, int] = field(default_factory=lambda: {PROJECTED: 0, LOCATED: 0, SWEPT: 0, REVERSED: 0})

    @property
    def liveness_failures(self) -> int:
        """Crossings the projection could not make: located by the ODE solver, swept, or reversed."""
        return self.crossings[LOCATED] + self.crossings[SWEPT] + self.crossings[REVERSED]


@dataclass
class Advance:
    """The result of :meth:`EssIntegrator.advance`: the state at t_f and the crossings on the way, in order
    (the last is the end of the interval, guard :data:`TICK`)."""

    x: Array
    crossings: list[Crossing]


class EssIntegrator:
    """Integrate an :class:`EventSelectedSystem` with the ESS algorithm (see the module docstring).

    Parameters
    ----------
    system : the system (f, h, Dh·f, partners).
    eps : band half-width ε, in the units of h.
    min_rate : liveness bound c, units of h per unit time: a guard is projected only while ḣ_k > min_rate.
    method, rtol, atol, max_step : ``solve_ivp``'s, for the integration steps.
    engine : ``"compiled"``: the whole of :meth:`advance` in one compiled call (:func:`_advance_kernel`, its
        integration steps :func:`idcontrol.sim.ess.dopri.integrate`, scipy's RK45 reproduced); needs a system
        with a compiled ``record`` (:mod:`idcontrol.sim.ess.system`), ``method = "RK45"`` and a scalar rtol.
        ``"scipy"``: the algorithm in Python with ``solve_ivp`` (any system, any method). ``"auto"`` (default):
        compiled where it can be.
    """

    def __init__(
        self,
        system: EventSelectedSystem,
        eps: float,
        *,
        min_rate: float = 0.0,
        method: str = "RK45",
        rtol: float = 1e-6,
        atol: float | Array = 1e-9,
        max_step: float = np.inf,
        engine: str = "auto",
    ) -> None:
        if engine not in ENGINES:
            raise ConfigError(f"engine must be one of {list(ENGINES)}, got {engine!r}")
        if not (np.isfinite(eps) and eps > 0.0):
            raise ConfigError(f"eps (the band half-width) must be finite and > 0, got {eps!r}")
        if not (np.isfinite(min_rate) and min_rate >= 0.0):
            raise ConfigError(f"min_rate (the liveness bound) must be finite and >= 0, got {min_rate!r}")
        if not max_step > 0.0:
            raise ConfigError(f"max_step must be > 0, got {max_step!r}")
        self.system = system
        self.partner = _check_partner(system.partner, system.m)
        self.eps, self.min_rate = float(eps), float(min_rate)
        self.method, self.rtol, self.atol, self.max_step = method, rtol, atol, max_step
        self.stats = EssStats()
        self._band = -self.eps * (1.0 + 1e-9)  # a guard projected to −ε reads −ε ± round-off: in its band
        self._zero = 1e-9 * self.eps  # |h| below this is on the guard (round-off of h and of root finding)
        self._first_step: float | None = None
        record = getattr(system, "record", None)
        compilable = record is not None and method == "RK45" and np.ndim(rtol) == 0
        if engine == "compiled" and not compilable:
            raise ConfigError(
                "engine 'compiled' needs a system with a compiled record, method 'RK45' and a scalar "
                f"rtol (system {type(system).__name__}, method {method!r})"
            )
        self.engine = "compiled" if compilable and engine != "scipy" else "scipy"
        if self.engine == "compiled":
            self._record = record
            self._settings = np.array([self.eps, self.min_rate, float(rtol), float(max_step)])
            self._atol = np.ascontiguousarray(np.broadcast_to(np.asarray(atol, dtype=float), (system.n,)))
            self._first = np.zeros(1)
            self._counts = np.zeros(9, dtype=np.int64)

    # ------------------------------------------------------------------ guard memory
    def start(self, x0: Array) -> GuardMemory:
        """The guard memory at x0: each guard's side by its sign; a guard on the negative side is armed (a
        candidate) as in the paper's Listing 1. Of two partners both at exactly zero, the first is crossed."""
        h = self._h(np.asarray(x0, dtype=float))
        side = h >= 0.0
        for k, j in enumerate(self.partner.tolist()):
            if 0 <= j and k < j and side[k] and side[j]:
                side[j] = False
        return GuardMemory(side, ~side)

    def _h(self, x: Array) -> Array:
        h = self.system.guards(x)
        if h.shape != (self.system.m,) or not np.all(np.isfinite(h)):
            raise SimulationError(f"the event functions gave {h!r} (expected {self.system.m} finite values)")
        return h

    def _cross(self, memory: GuardMemory, k: int, t: float, how: str, out: list[Crossing]) -> None:
        memory.side[k] = True
        memory.armed[k] = False
        j = self.partner[k]
        if j >= 0:  # now on the partner's negative side, inside its band: armed once it has left the band below
            memory.side[j] = False
            memory.armed[j] = False
        out.append(Crossing(t, k, how))
        self.stats.crossings[how] += 1

    # ------------------------------------------------------------------ main loop
    def advance(self, x0: Array, t0: float, tf: float, memory: GuardMemory, *, max_loops: int = 100_000) -> Advance:
        """Integrate from (t0, x0) to exactly tf; ``memory`` (from :meth:`start` or the previous call) is updated.

        Raises :class:`~idcontrol.errors.SimulationError` if the solver fails or the state stops being finite.
        """
        if not tf >= t0:
            raise InputError(f"the interval must not run backwards: t0 = {t0}, tf = {tf}")
        x = np.array(x0, dtype=float)
        if x.shape != (self.system.n,):
            raise InputError(f"x0 has shape {x.shape}, expected ({self.system.n},)")
        t = float(t0)
        if self.engine == "compiled":
            return self._advance_compiled(x, t, float(tf), memory, max_loops)
        crossings: list[Crossing] = []
        side, armed, band = memory.side, memory.armed, self._band
        for _ in range(max_loops):
            h = self._h(x)
            self._sweep(memory, h, t, crossings)
            remaining = tf - t
            if remaining <= 1e-15 * max(1.0, abs(tf)):
                break
            candidate = ~side & armed & (h >= band)
            if candidate.any():
                G = self.system.field(x, side)
                r = self.system.rates(x, side)
                live = candidate & (r > self.min_rate)
                if live.any():
                    self.stats.rhs_evaluations += 1
                    x, t, done = self._project(x, t, tf, h, G, r, live, memory, crossings)
                    if done:
                        break
                    continue
            x, t = self._integrate(x, t, tf, h, memory, crossings)
        else:
            raise SimulationError(f"the ESS integrator made {max_loops} steps without reaching t = {tf} (at t = {t})")
        if not np.all(np.isfinite(x)):
            raise SimulationError(f"the state is not finite at t = {t}")
        crossings.append(Crossing(tf, TICK, END))
        return Advance(x, crossings)

    def _advance_compiled(self, x: Array, t0: float, tf: float, memory: GuardMemory, max_loops: int) -> Advance:
        """:meth:`advance` in one compiled call (the engine ``"compiled"``)."""
        counts = self._counts
        counts[:] = 0
        status, t, out, count = _advance_kernel(
            self._record,
            x,
            t0,
            tf,
            memory.side,
            memory.armed,
            self.partner,
            self._settings,
            self._atol,
            self._first,
            counts,
            max_loops,
        )
        stats = self.stats
        stats.projections += int(counts[_S_PROJECTIONS])
        stats.splits += int(counts[_S_SPLITS])
        stats.end_projections += int(counts[_S_END])
        stats.integrations += int(counts[_S_INTEGRATIONS])
        stats.rhs_evaluations += int(counts[_S_EVALUATIONS])
        for i, how in enumerate(_HOW):
            stats.crossings[how] += int(counts[_S_CROSSINGS + i])
        self._first_step = float(self._first[0]) if self._first[0] > 0.0 else None
        if status == _SOLVER_FAILED:
            raise SimulationError(f"the ODE solver failed at t = {t}: the step size fell below 10 ulp of t")
        if status == _TOO_MANY_LOOPS:
            raise SimulationError(f"the ESS integrator made {max_loops} steps without reaching t = {tf} (at t = {t})")
        if status == _GUARDS_NOT_FINITE:
            raise SimulationError(f"the event functions are not finite at t = {t}")
        if status == _STATE_NOT_FINITE:
            raise SimulationError(f"the state is not finite at t = {t}")
        t_list, guard_list, how_list = out.t[:count].tolist(), out.guard[:count].tolist(), out.how[:count].tolist()
        crossings = [Crossing(ct, cg, _HOW[ch]) for ct, cg, ch in zip(t_list, guard_list, how_list, strict=True)]
        crossings.append(Crossing(tf, TICK, END))
        return Advance(x, crossings)

    def _sweep(self, memory: GuardMemory, h: Array, t: float, out: list[Crossing]) -> None:
        """Settle the guards' memory against h(x): arm guards seen below their band; cross an armed guard found
        past zero, or a pending one found past its band (``swept``); flip back an unpartnered crossed guard found
        below its band (``reversed``). Round-off around zero never flips a guard: a guard just projected may
        read −1e−12, its partner +1e−12."""
        side, armed = memory.side, memory.armed
        armed |= ~side & (h < self._band)
        past = ~side & np.where(armed, h > self._zero, h > self.eps)
        if past.any():
            for k in np.flatnonzero(past)[np.argsort(-h[past])].tolist():  # the furthest past first
                if not side[k]:
                    self._cross(memory, k, t, SWEPT, out)
        back = side & (self.partner < 0) & (h < self._band)
        if back.any():
            for k in np.flatnonzero(back).tolist():
                side[k] = False
                armed[k] = bool(h[k] < self._band)
                out.append(Crossing(t, k, REVERSED))
                self.stats.crossings[REVERSED] += 1

    def _project(self, x, t, tf, h, G, r, live, memory, crossings) -> tuple[Array, float, bool]:
        """One projection step with the corner field G; returns (x, t, reached tf)."""
        dt = np.full(len(h), np.inf)
        dt[live] = np.maximum(-h[live] / r[live], 0.0)
        j = int(np.argmin(dt))
        step = float(dt[j])
        # an armed guard below its band that the straight line would carry past its band before guard j:
        # stop where it enters the band, so the next projection orders the two (the band-jump defect)
        outside = ~memory.side & memory.armed & (h < self._band) & (r > 0.0)
        split = False
        if outside.any():
            enter = (-self.eps - h[outside]) / r[outside]
            first = float(enter.min())
            if first < step:
                step, split = max(first, 0.0), True
        remaining = tf - t
        if remaining <= step:
            self.stats.end_projections += 1
            return x + G * remaining, tf, True
        x = x + G * step
        t = t + step
        if split:
            self.stats.splits += 1
        else:
            self.stats.projections += 1
            self._cross(memory, j, t, PROJECTED, crossings)
        return x, t, False

    def _integrate(self, x, t, tf, h, memory, crossings) -> tuple[Array, float]:
        """One integration step in the current mode until an event (see the module docstring) or tf."""
        side, armed, band, zero = memory.side, memory.armed, self._band, self._zero
        partner = self.partner
        # each event e_k(x) = sign · (h_k(x) − level), negative now, rising through zero when it happens
        idx, sign, level, kind = [], [], [], []

        def add(k: np.ndarray, s: float, lev: np.ndarray | float, what: int) -> None:
            if k.size:
                idx.append(k)
                sign.append(np.full(k.size, s))
                level.append(np.broadcast_to(np.asarray(lev, dtype=float), k.shape))
                kind.append(np.full(k.size, what))

        neg = ~side
        entering = np.flatnonzero(neg & armed & (h < band))
        add(entering, 1.0, -self.eps, _BAND)
        inside = np.flatnonzero(neg & (h >= band))  # pending (just re-armed) or not live: cross where located
        # crossed where it rises a hair (round-off) past zero, or past where it starts if it starts there: a guard
        # at rest on its zero level must not chatter across it on the kinematics' round-off
        add(inside, 1.0, np.maximum(h[inside], 0.0) + zero, _LOCATE)
        # leaves its band below (a hair below, so that it then tests as outside): armed, projected at its next entry
        add(inside, -1.0, -self.eps - 2.0 * zero, _ARM)
        lone = np.flatnonzero(side & (partner < 0) & (h > zero))
        add(lone, -1.0, 0.0, _REVERSE)
        fun = self._rhs(side)
        first = None if self._first_step is None else min(self._first_step, tf - t)
        options = {"first_step": first} if first else {}
        if idx:
            k_all, s_all, l_all, kind_all = (np.concatenate(a) for a in (idx, sign, level, kind))
            system = self.system

            def event(_t: float, y: Array) -> float:
                return float(np.max(s_all * (system.guards(y)[k_all] - l_all)))

            event.terminal = True  # type: ignore[attr-defined]
            event.direction = 1.0  # type: ignore[attr-defined]
            events = [event]
        else:
            events = None
        sol = solve_ivp(
            fun,
            (t, tf),
            x,
            method=self.method,
            rtol=self.rtol,
            atol=self.atol,
            max_step=self.max_step,
            events=events,
            **options,
        )
        self.stats.integrations += 1
        self.stats.rhs_evaluations += int(sol.nfev)
        if sol.status < 0:
            raise SimulationError(f"the ODE solver failed at t = {t}: {sol.message}")
        if len(sol.t) >= 3:
            self._first_step = float(np.max(np.diff(sol.t[:-1])))
        x_new, t_new = sol.y[:, -1].copy(), float(sol.t[-1])
        if sol.status == 1:  # events: every one at its level here (symmetric contacts reach theirs together)
            h_new = self._h(x_new)
            values = s_all * (h_new[k_all] - l_all)
            for i in np.flatnonzero(values >= -zero)[np.argsort(-values[values >= -zero])].tolist():
                k, what = int(k_all[i]), int(kind_all[i])
                if what == _LOCATE and not side[k]:
                    self._cross(memory, k, t_new, LOCATED, crossings)
                elif what == _ARM:
                    armed[k] = True
                elif what == _REVERSE and side[k]:
                    side[k] = False
                    armed[k] = False
                    crossings.append(Crossing(t_new, k, REVERSED))
                    self.stats.crossings[REVERSED] += 1
                # _BAND: the next loop projects it
        else:
            t_new = tf  # solve_ivp ends exactly at t_span's end
        return x_new, t_new

    def _rhs(self, side: BoolArray) -> Callable[[float, Array], Array]:
        mode = side.copy()  # the mode is fixed during an integration step
        system = self.system

        def fun(_t: float, y: Array) -> Array:
            return system.field(y, mode)

        return fun

    # ------------------------------------------------------------------ convenience
    def integrate(self, x0: Array, t0: float, tf: float, samples: Array | None = None) -> Trajectory:
        """Integrate from t0 to tf in one go, or through the times ``samples`` (increasing, within (t0, tf]),
        each a guard like a control tick; returns the states at those times and every crossing."""
        memory = self.start(x0)
        times = np.array([tf], dtype=float) if samples is None else np.asarray(samples, dtype=float)
        if times.ndim != 1 or np.any(np.diff(times) <= 0) or times[0] <= t0 or times[-1] > tf:
            raise InputError("samples must be increasing times within (t0, tf]")
        states = np.empty((len(times), self.system.n))
        x, t = np.asarray(x0, dtype=float), float(t0)
        crossings: list[Crossing] = []
        for i, t_next in enumerate(times.tolist()):
            step = self.advance(x, t, t_next, memory)
            x, t = step.x, t_next
            states[i] = x
            crossings.extend(c for c in step.crossings if c.guard != TICK)
        return Trajectory(times, states, crossings, memory)


@dataclass
class Trajectory:
    """States at the sample times t (s,) -> x (s, n), every guard crossing in order, the final guard memory."""

    t: Array
    x: Array
    crossings: list[Crossing]
    memory: GuardMemory


# ---------------------------------------------------------------------------------------------------- compiled
# The same algorithm as EssIntegrator.advance, _sweep, _project and _integrate above, in one compiled call for a
# system with a compiled record (idcontrol.sim.ess.system); the integration steps are dopri.integrate (scipy's
# RK45 reproduced). Guard orderings that numpy leaves to an unstable sort are stable here (ties by index).

#: the compiled kernel's crossing kinds (the ``how`` of :class:`Crossing`, by index)
_HOW = (PROJECTED, LOCATED, SWEPT, REVERSED)
_H_PROJECTED, _H_LOCATED, _H_SWEPT, _H_REVERSED = 0, 1, 2, 3
#: the compiled kernel's counters (:class:`EssStats`, in this order)
_STAT_FIELDS = ("projections", "splits", "end_projections", "integrations", "rhs_evaluations")
_S_PROJECTIONS, _S_SPLITS, _S_END, _S_INTEGRATIONS, _S_EVALUATIONS, _S_CROSSINGS = 0, 1, 2, 3, 4, 5
#: the compiled kernel's status
_OK, _SOLVER_FAILED, _TOO_MANY_LOOPS, _GUARDS_NOT_FINITE, _STATE_NOT_FINITE = 0, 1, 2, 3, 4


class _Crossings(NamedTuple):
    """The crossings of one compiled call, in order: time, guard, kind (index into _HOW); ``count`` used."""

    t: Array
    guard: NDArray[np.int64]
    how: NDArray[np.int64]


@njit(cache=True)
def _push(out, count, t, guard, how, stats):  # pragma: no cover - compiled
    """Append a crossing to ``out`` (grown when full); returns the (possibly new) buffers."""
    if count == out.t.shape[0]:
        size = 2 * count
        grown = _Crossings(np.empty(size), np.empty(size, np.int64), np.empty(size, np.int64))
        grown.t[:count] = out.t[:count]
        grown.guard[:count] = out.guard[:count]
        grown.how[:count] = out.how[:count]
        out = grown
    out.t[count], out.guard[count], out.how[count] = t, guard, how
    stats[_S_CROSSINGS + how] += 1
    return out


@njit(cache=True)
def _cross(side, armed, partner, k):  # pragma: no cover - compiled
    side[k] = True
    armed[k] = False
    j = partner[k]
    if j >= 0:
        side[j] = False
        armed[j] = False


@njit(cache=True)
def _order_descending(values, index, count):  # pragma: no cover - compiled
    """index[:count] sorted by values[index] descending, ties by index (insertion sort: a few entries)."""
    for a in range(1, count):
        i = index[a]
        b = a - 1
        while b >= 0 and (values[index[b]] < values[i] or (values[index[b]] == values[i] and index[b] > i)):
            index[b + 1] = index[b]
            b -= 1
        index[b + 1] = i


@njit(cache=True)
def _sweep_kernel(side, armed, partner, h, t, band, zero, eps, lone, out, count, order, stats):  # pragma: no cover
    """EssIntegrator._sweep, and whether a guard is then a candidate for projection (on its negative side, armed,
    in its band); ``lone``: some guard has no partner. Returns (out, count, candidate, finite)."""
    m = h.shape[0]
    past = 0
    candidate = False
    for k in range(m):
        hk = h[k]
        if not np.isfinite(hk):
            return out, count, False, False
        if not side[k]:
            if hk < band:
                armed[k] = True
            elif armed[k]:
                if hk > zero:
                    order[past] = k
                    past += 1
                else:
                    candidate = True
            elif hk > eps:
                order[past] = k
                past += 1
    if past:
        _order_descending(h, order, past)  # the furthest past first
        for a in range(past):
            k = order[a]
            if not side[k]:
                _cross(side, armed, partner, k)
                out = _push(out, count, t, k, _H_SWEPT, stats)
                count += 1
        candidate = False  # the crossings changed sides: look again
        for k in range(m):
            if not side[k] and armed[k] and h[k] >= band:
                candidate = True
                break
    if lone:
        for k in range(m):
            if side[k] and partner[k] < 0 and h[k] < band:
                side[k] = False
                armed[k] = True
                out = _push(out, count, t, k, _H_REVERSED, stats)
                count += 1
    return out, count, candidate, True


@njit(cache=True)
def _advance_kernel(
    system, x, t0, tf, side, armed, partner, settings, atol, first_step, stats, max_loops
):  # pragma: no cover - compiled
    """EssIntegrator.advance for a compiled system: x (n,) is advanced in place from t0 to tf; side, armed (m,)
    updated; settings = [ε, min_rate, rtol, max_step]; first_step (1,) the integration steps' memory (0: none);
    stats (9,) counters added to. Returns (status, t reached, crossings, their count)."""
    eps, min_rate, rtol, max_step = settings[0], settings[1], settings[2], settings[3]
    band = -eps * (1.0 + 1e-9)
    zero = 1e-9 * eps
    n, m = x.shape[0], side.shape[0]
    h, r, G = np.empty(m), np.empty(m), np.empty(n)
    x_end = np.empty(n)
    order = np.empty(4 * m + 1, np.int64)
    ek, es, el = np.empty(4 * m, np.int64), np.empty(4 * m), np.empty(4 * m)
    ekind = np.empty(4 * m, np.int64)
    values = np.empty(4 * m)
    lone = False
    for k in range(m):
        lone = lone or partner[k] < 0
    out = _Crossings(np.empty(8), np.empty(8, np.int64), np.empty(8, np.int64))
    count = 0
    t = t0
    for _ in range(max_loops):
        ess_system.guards(system, x, h)
        out, count, candidate, finite = _sweep_kernel(
            side, armed, partner, h, t, band, zero, eps, lone, out, count, order, stats
        )
        if not finite:
            return _GUARDS_NOT_FINITE, t, out, count
        if tf - t <= 1e-15 * max(1.0, abs(tf)):
            break
        if candidate:
            ess_system.field(system, x, side, G)
            ess_system.rates(system, x, side, r)
            # projection: the first live band guard's predicted crossing (first index on ties), and the first entry
            # into its band of an armed guard below it that the line carries up (a split, if it comes first)
            j, step = -1, np.inf
            first = np.inf
            for k in range(m):
                if side[k] or not armed[k]:
                    continue
                if h[k] >= band:
                    if r[k] > min_rate:
                        dt = max(-h[k] / r[k], 0.0)
                        if j < 0 or dt < step:
                            j, step = k, dt
                elif r[k] > 0.0:
                    first = min(first, (-eps - h[k]) / r[k])
            if j >= 0:
                stats[_S_EVALUATIONS] += 1
                split = False
                if first < step:
                    step, split = max(first, 0.0), True
                if tf - t <= step:
                    stats[_S_END] += 1
                    remaining = tf - t
                    for i in range(n):
                        x[i] = x[i] + G[i] * remaining
                    t = tf
                    break
                for i in range(n):
                    x[i] = x[i] + G[i] * step
                t = t + step
                if split:
                    stats[_S_SPLITS] += 1
                else:
                    stats[_S_PROJECTIONS] += 1
                    _cross(side, armed, partner, j)
                    out = _push(out, count, t, j, _H_PROJECTED, stats)
                    count += 1
                continue
        # integration step: the events of EssIntegrator._integrate, in its order
        e = 0
        for k in range(m):
            if not side[k] and armed[k] and h[k] < band:
                ek[e], es[e], el[e], ekind[e] = k, 1.0, -eps, _BAND
                e += 1
        for k in range(m):
            if not side[k] and h[k] >= band:
                ek[e], es[e], el[e], ekind[e] = k, 1.0, max(h[k], 0.0) + zero, _LOCATE
                e += 1
        for k in range(m):
            if not side[k] and h[k] >= band:
                ek[e], es[e], el[e], ekind[e] = k, -1.0, -eps - 2.0 * zero, _ARM
                e += 1
        for k in range(m):
            if side[k] and partner[k] < 0 and h[k] > zero:
                ek[e], es[e], el[e], ekind[e] = k, -1.0, 0.0, _REVERSE
                e += 1
        first_try = min(first_step[0], tf - t) if first_step[0] > 0.0 else 0.0
        status, t_new, evaluations, steps, largest = dopri.integrate(
            system, side, t, x, tf, rtol, atol, max_step, first_try, ek[:e], es[:e], el[:e], h, x_end
        )
        stats[_S_INTEGRATIONS] += 1
        stats[_S_EVALUATIONS] += evaluations
        if status == dopri.FAILED:
            return _SOLVER_FAILED, t, out, count
        if steps >= 2:
            first_step[0] = largest
        x[:] = x_end
        if status == dopri.EVENT:
            ess_system.guards(system, x, h)
            hits = 0
            for i in range(e):
                values[i] = es[i] * (h[ek[i]] - el[i])
                if values[i] >= -zero:
                    order[hits] = i
                    hits += 1
            _order_descending(values, order, hits)
            for a in range(hits):
                i = order[a]
                k, what = ek[i], ekind[i]
                if what == _LOCATE and not side[k]:
                    _cross(side, armed, partner, k)
                    out = _push(out, count, t_new, k, _H_LOCATED, stats)
                    count += 1
                elif what == _ARM:
                    armed[k] = True
                elif what == _REVERSE and side[k]:
                    side[k] = False
                    armed[k] = False
                    out = _push(out, count, t_new, k, _H_REVERSED, stats)
                    count += 1
            t = t_new
        else:
            t = tf
    else:
        return _TOO_MANY_LOOPS, t, out, count
    for i in range(n):
        if not np.isfinite(x[i]):
            return _STATE_NOT_FINITE, t, out, count
    return _OK, t, out, count
