"""A certificate for every solve: the result checked against the model its formulation claims.

A solver can return ``found=True`` with an answer that no physics allows: the no-slip LCP's paper method, on
states a few hundredths of a radian from a stance, has answered with 1e14 N·m torques and 8.7e14 N tangential
forces whose internal components cancel in the dynamics. Every result is therefore checked, in a few
microseconds, before its torque may reach the robot; a result that fails is ``found=False`` with the failed
check named, and the control core's fallback policy takes over.

The checks, with their tolerances (all in physical units; ``f`` are forces, N; velocities in m/s):

* ``non_finite``: τ, v⁺ and the forces are finite;
* ``dynamics``: the discretized dynamics with the v⁺ the result returns,
  max |M (v⁺ − v⁻)/Δt − (Nᵀf_N + Sᵀf_S + Tᵀf_T + Pᵀτ + f_ext [+ the sensed contact force])| ≤ 1e-6 N (N·m);
* ``normal_force``: f_N ≥ −1e-6 N (contacts only push);
* ``penetration``: N v⁺ + φ/Δt ≥ −1e-6 m/s (rigid models: the contacts do not close within the step);
* ``friction`` (pyramid models): |f_S| + |f_T| ≤ μ f_N + 1e-6 N where μ is finite;
* ``slip`` (no-slip models): |S v⁺|, |T v⁺| ≤ 1e-6 m/s at each contact carrying more than 1e-6 N whose
  tangential rows the formulation kept. The no-slip LCP's ``release_unloaded`` removes the rows of contacts it
  finds unloaded, and gives them back when a later round loads them; only where that answer is absurd does it
  keep a loaded contact released, and the result says how many (``SolveResult.loaded_released``: the summary's
  and the log's "no-slip held on k of n loaded contacts");
* ``complementarity`` (LCP models): a contact carrying more than 1e-6 N does not separate faster than 1e-6 m/s;
* ``force_bound``: the contact forces' magnitudes summed, Σᵢ |fᵢ| ≤ m (10 g + (v_c + 1 m/s)/Δt), with m the
  robot's and its movable bodies' mass and v_c the fastest contact point now: what stops the whole robot,
  moving faster than any of its contacts, within one period, plus ten times its weight;
* ``torque_bound``: each |τ_j| ≤ 30 × the joint's torque limit: an answer the safety filter would cut to a
  thirtieth describes a motion this robot cannot make (the no-slip LCP's paper method gave 1e7 to 1e14 N·m).
  The factor is measured, not derived: answers beyond the limits are the safety filter's to clip (the Coulomb
  LCP's vertex answers at a stance reach 22 times the quadruped's limits and the two-stage QP's trot on a
  low-friction floor 11 times, and both hold the robot sent clipped; rejecting them at 10 times made the
  fallback stop or chatter), while the no-slip LCP's default stance fell within 0.5 s when its answers up to
  100 times the limits were sent clipped instead of rejected.

A formulation whose solve is one compiled call may run the same checks at its end (:func:`certify_in_solve`,
with the bounds and claims its controller's :class:`Certifier` packs in :meth:`Certifier.terms`), cheaper than
the check from Python (docs/benchmarks.md). The certifier accepts such a verdict (:meth:`Certifier.verdict`)
only for the problem it was made of, under its own terms and the formulation's claims; a result whose answer
is assigned or replaced after the solve drops its verdict, and any other result the certifier checks itself.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
from numba import njit, types
from numpy.typing import NDArray

from idcontrol.arrays import ANY_VECTOR, boolean, float64, intp
from idcontrol.formulations.record import PROBLEM
from idcontrol.validation import all_finite

Array = NDArray[np.float64]

#: The checks, in the order they are made; ``CHECKS[code - 1]`` names a failed certificate's check.
CHECKS = (
    "non_finite",
    "dynamics",
    "normal_force",
    "penetration",
    "friction",
    "slip",
    "complementarity",
    "force_bound",
    "torque_bound",
)
#: Tolerances (see the module docstring).
DYNAMICS_TOL = 1e-6  # N or N·m
FORCE_TOL = 1e-6  # N
VELOCITY_TOL = 1e-6  # m/s
#: Physical bounds (see the module docstring).
WEIGHTS = 10.0  # the robot's weight, times this
SPEED_MARGIN = 1.0  # m/s over the fastest contact point
TORQUE_FACTOR = 30.0  # times the torque limit

FRICTION_PYRAMID, FRICTION_NO_SLIP, FRICTION_NONE = 0, 1, 2


_FRICTION_CODES = {"pyramid": FRICTION_PYRAMID, "no_slip": FRICTION_NO_SLIP, "none": FRICTION_NONE}


@dataclass(frozen=True)
class ContactModel:
    """What a formulation claims of its contacts, for its certificate.

    friction : "pyramid" (|f_S| + |f_T| ≤ μ f_N), "no_slip" (S v⁺ = T v⁺ = 0 where loaded) or "none" (a
        baseline that predicts no contact forces of its own).
    rigid : the contacts do not close within the step (N v⁺ + φ/Δt ≥ 0).
    complementarity : a loaded contact does not separate (the LCPs).
    dynamics : the result's v⁺ and forces satisfy the discretized dynamics (False: a joint-space baseline that
        predicts no v⁺; only its torques are checked).
    """

    friction: str = "pyramid"
    rigid: bool = True
    complementarity: bool = False
    dynamics: bool = True

    @property
    def friction_code(self) -> int:
        return _FRICTION_CODES[self.friction]


@dataclass(frozen=True)
class Certificate:
    """The outcome of :func:`certify`: ``check`` is "" when every check passed, else the first that failed,
    with the ``value`` found and the ``bound`` it exceeded (in that check's units)."""

    check: str = ""
    value: float = 0.0
    bound: float = 0.0

    @property
    def passed(self) -> bool:
        return not self.check

    def message(self) -> str:
        return f"certificate: {self.check} {self.value:.3g} beyond {self.bound:.3g}"


PASSED = Certificate()

#: The layout of :meth:`Certifier.terms`: the claims of a :class:`ContactModel` (friction code, rigid,
#: complementarity, dynamics as 0/1), the mass (kg), then the torque bounds (nu,), N·m: one array in the solves'
#: options.
TERM_FRICTION, TERM_RIGID, TERM_COMPLEMENTARITY, TERM_DYNAMICS, TERM_MASS, TERM_TAU_BOUND = range(6)
#: No terms: a compiled solve given these does not certify (its verdict's code is :data:`UNCHECKED`).
NO_TERMS = np.zeros(0)
NO_TERMS.setflags(write=False)
UNCHECKED = -1.0


@njit(cache=True)
def _checks(problem, answer, sensed, claims):
    """:func:`certificate_kernel`'s checks, compiled for the layouts of each compiled caller. An empty ``sensed`` is
    no sensed force (a solve's own certificate: nothing allocated for it each tick)."""
    M, v, f_ext, dt, N, S, T = problem.M, problem.v, problem.f_ext, problem.dt, problem.N, problem.S, problem.T
    phi, mu, actuated = problem.phi, problem.mu, problem.a
    v_next, tau, f_normal, f_s, f_t = answer
    dynamics, friction, rigid, complementarity, tau_bound, mass = claims
    m = M.shape[0]
    n = N.shape[0]
    nu = actuated.shape[0]
    if not (all_finite(tau) and all_finite(f_normal) and all_finite(f_s) and all_finite(f_t)):
        return 1.0, math.nan, 0.0
    if not dynamics:
        for k in range(nu):
            if abs(tau[k]) > tau_bound[k]:
                return 9.0, tau[k], tau_bound[k]
        return 0.0, 0.0, 0.0
    if not all_finite(v_next):
        return 1.0, math.nan, 0.0
    generalized = np.empty(m)
    for j in range(m):
        s = f_ext[j] + (sensed[j] if sensed.shape[0] else 0.0)
        for i in range(n):
            s += N[i, j] * f_normal[i] + S[i, j] * f_s[i] + T[i, j] * f_t[i]
        generalized[j] = s
    for k in range(nu):
        generalized[actuated[k]] += tau[k]
    worst = 0.0
    for j in range(m):
        s = 0.0
        for c in range(m):
            s += M[j, c] * (v_next[c] - v[c])
        worst = max(worst, abs(s / dt - generalized[j]))
    if worst > DYNAMICS_TOL:
        return 2.0, worst, DYNAMICS_TOL
    fastest = 0.0
    for i in range(n):
        if f_normal[i] < -FORCE_TOL:
            return 3.0, f_normal[i], -FORCE_TOL
        normal_now, s_now, t_now, gap_rate, slip_s, slip_t = 0.0, 0.0, 0.0, phi[i] / dt, 0.0, 0.0
        for j in range(m):
            normal_now += N[i, j] * v[j]
            s_now += S[i, j] * v[j]
            t_now += T[i, j] * v[j]
            gap_rate += N[i, j] * v_next[j]
            slip_s += S[i, j] * v_next[j]
            slip_t += T[i, j] * v_next[j]
        fastest = max(fastest, math.sqrt(normal_now * normal_now + s_now * s_now + t_now * t_now))
        if rigid and gap_rate < -VELOCITY_TOL:
            return 4.0, gap_rate, -VELOCITY_TOL
        if friction == FRICTION_PYRAMID and math.isfinite(mu[i]):
            excess = abs(f_s[i]) + abs(f_t[i]) - mu[i] * f_normal[i]
            if excess > FORCE_TOL:
                return 5.0, excess, FORCE_TOL
        loaded = f_normal[i] > FORCE_TOL
        if friction == FRICTION_NO_SLIP and loaded and max(abs(slip_s), abs(slip_t)) > VELOCITY_TOL:
            return 6.0, max(abs(slip_s), abs(slip_t)), VELOCITY_TOL
        if complementarity and loaded and gap_rate > VELOCITY_TOL:
            return 7.0, gap_rate, VELOCITY_TOL
    force_bound = mass * (WEIGHTS * 9.81 + (fastest + SPEED_MARGIN) / dt)
    total = 0.0
    for i in range(n):
        total += math.sqrt(f_normal[i] * f_normal[i] + f_s[i] * f_s[i] + f_t[i] * f_t[i])
    if total > force_bound:
        return 8.0, total, force_bound
    for k in range(nu):
        if abs(tau[k]) > tau_bound[k]:
            return 9.0, tau[k], tau_bound[k]
    return 0.0, 0.0, 0.0


#: the answer a certificate checks: v⁺ (m,), τ (nu,), f_N, f_S, f_T (n,), any layout
ANSWER = types.UniTuple(ANY_VECTOR, 5)
#: the claims of a :class:`ContactModel` and the bounds: dynamics, friction code, rigid, complementarity, the torque
#: bounds (nu,) N·m, the mass kg
CLAIMS = types.Tuple((boolean, intp, boolean, boolean, ANY_VECTOR, float64))


@njit(types.UniTuple(float64, 3)(PROBLEM, ANSWER, ANY_VECTOR, CLAIMS), cache=True)
def certificate_kernel(problem, answer, sensed, claims):
    """(code, value, bound): code 0 when every check passes, else 1 + the index of the first failed check in
    :data:`CHECKS`, for the ``answer`` (v⁺, τ, f_N, f_S, f_T) of ``problem`` (a
    :data:`~idcontrol.formulations.record.PROBLEM` record). ``sensed`` (m,) is the measured contact force's
    generalized force (zeros when none); ``claims`` (dynamics: the result claims a v⁺ (a PID baseline does not:
    only τ is checked); the friction code; rigid; complementarity; the torque bounds (nu,), N·m; the robot's and
    its bodies' mass, kg)."""
    return _checks(problem, answer, sensed, claims)


@njit(cache=True)
def certify_in_solve(problem, answer, terms):
    """:func:`certificate_kernel` with the claims and bounds packed in ``terms`` (:meth:`Certifier.terms`; no
    sensed force), for a compiled solve to run on its own ``answer`` (v⁺, τ, f_N, f_S, f_T): (code, value, bound),
    code :data:`UNCHECKED` when ``terms`` is empty."""
    if terms.shape[0] == 0:
        return UNCHECKED, 0.0, 0.0
    no_sensed = terms[:0]  # an empty view: no sensed force, nothing allocated
    claims = (
        terms[TERM_DYNAMICS] != 0.0,
        int(terms[TERM_FRICTION]),
        terms[TERM_RIGID] != 0.0,
        terms[TERM_COMPLEMENTARITY] != 0.0,
        terms[TERM_TAU_BOUND:],
        terms[TERM_MASS],
    )
    return _checks(problem, answer, no_sensed, claims)


def certificate_of(code: float, value: float, bound: float) -> Certificate:
    """The :class:`Certificate` of a kernel's (code, value, bound) (code 0: :data:`PASSED`)."""
    return PASSED if code == 0.0 else Certificate(CHECKS[int(code) - 1], float(value), float(bound))


@dataclass(eq=False, slots=True)
class Verdict:
    """A certificate a formulation's compiled solve made of its own answer: ``certificate`` for the answer of the
    result that holds it (a result drops its verdict when its answer is assigned or replaced), of ``problem``,
    under the claims of ``model``."""

    certificate: Certificate
    certifier: object  # the Certifier whose terms the solve was given (None: none)
    model: ContactModel
    problem: object


class Certifier:
    """Certificates for one robot's solves: :meth:`check` a result against its formulation's model.

    tau_limit : (nu,) the robot's torque limits, N·m.  mass : the robot's and its movable bodies' mass, kg.
    """

    def __init__(self, tau_limit: Array, mass: float) -> None:
        self.tau_bound = np.ascontiguousarray(TORQUE_FACTOR * np.asarray(tau_limit, dtype=np.float64))
        self.mass = float(mass)
        self._zeros = np.zeros(0)  # no sensed force, (m,)
        self._terms: dict[ContactModel, Array] = {}

    def _no_sensed(self, m: int) -> Array:
        if self._zeros.shape[0] != m:
            self._zeros = np.zeros(m)
        return self._zeros

    def terms(self, model: ContactModel) -> Array:
        """The claims of ``model`` and this certifier's bounds packed for :func:`certify_in_solve` (read-only,
        one array per model)."""
        packed = self._terms.get(model)
        if packed is None:
            claims = (model.friction_code, model.rigid, model.complementarity, model.dynamics, self.mass)
            packed = np.concatenate([np.asarray(claims, dtype=np.float64), self.tau_bound])
            packed.setflags(write=False)
            self._terms[model] = packed
        return packed

    def verdict(self, problem, result, model: ContactModel) -> Certificate:
        """The certificate of ``result`` (found) of ``problem``: the one its solve made (``result.verdict``) when
        that was made of this problem under this certifier's terms of ``model`` (the result's answer unchanged
        since: else it has no verdict), else :meth:`check`'s."""
        made = result.verdict
        if made is not None and made.problem is problem and made.model == model and made.certifier is self:
            return made.certificate
        return self.check(problem, result, model)

    def check(self, problem, result, model: ContactModel) -> Certificate:
        """Check ``result`` (a found :class:`~idcontrol.formulations.problem.SolveResult`) of ``problem``."""
        p = problem
        sensed = p.sensed_force if result.sensed and p.sensed_force is not None else self._no_sensed(p.m)
        # the tangential rows the formulation solved with: a no-slip LCP that released a contact claims no slip
        # only where it kept them (the result counts loaded contacts it released: ``loaded_released``)
        solved = result.problem if result.problem is not None and result.problem.n == p.n else p
        record = p.record if solved is p else p.with_rows(solved.S, solved.T, p.qd_des).record
        answer = tuple(
            np.asarray(x, dtype=np.float64)
            for x in (result.v_next, result.tau, result.f_normal, result.f_s, result.f_t)
        )
        claims = (model.dynamics, model.friction_code, model.rigid, model.complementarity, self.tau_bound, self.mass)
        code, value, bound = certificate_kernel(record, answer, np.asarray(sensed, dtype=np.float64), claims)
        return certificate_of(code, value, bound)
