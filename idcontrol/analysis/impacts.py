"""Set-valued simultaneous frictional impacts (Halm & Posa): sample one outcome, or approximate the set of them.

When several contacts collide at once (two feet, heel and toe, two fingers), an inelastic rigid impact has no
single outcome: which contact takes its impulse first, and how fast relative to the others, decides the
post-impact velocity, and no sensor resolves that ordering. Halm & Posa model the impact as a differential
inclusion in the accumulated normal impulse, with any relative rates among the colliding contacts, and
discretize it into small impulse increments, each one a linear complementarity problem (their eqs. 72-75).

One increment at the impact configuration q (all matrices at q), for k contacts with d friction directions
each (unit tangent directions ±ŝ, ±t̂ give d = 4; a planar contact ±t̂ gives d = 2)::

    z = [β (k); λ_n (k); λ_D (k d); γ (k)],   w = W z + q_lcp ≥ 0,  z ≥ 0,  zᵀw = 0
    q_lcp = [λ_max; J_n v; J_D v; 0]
    W = [[0,  −I,            0,             0 ],
         [I,  J_n M⁻¹J_nᵀ,   J_n M⁻¹J_Dᵀ,   0 ],
         [0,  J_D M⁻¹J_nᵀ,   J_D M⁻¹J_Dᵀ,   E ],
         [0,  diag(μ),       −Eᵀ,           0 ]]
    v' = v + M⁻¹ (J_nᵀ λ_n + J_Dᵀ λ_D)

E is block-diagonal with a column of d ones per contact. The first two row blocks say: each contact takes
its whole sampled impulse λ_max,i unless it stops colliding first (J_n,i v' ≥ 0); the last two are the
linearized Coulomb law at the incremented velocity v' (the Anitescu-Potra impact LCP's rows). W is
copositive, so Lemke's method solves every increment (Theorem 6); each increment dissipates kinetic energy
(Theorem 7).

* :func:`sample_outcome` is Algorithm 1: draw λ_max ~ h·U([0, 1]ᵏ), solve the increment, repeat while some
  contact is colliding (J_n v < 0), at most N times.
* :func:`approximate_set` is Algorithm 2: M samples of Algorithm 1, each followed by one forced-termination
  increment of ε/(3ψ) per contact (ψ = σ_max(M⁻¹J̄ᵀ)·k·(1 + max μ) + 1), keeping the non-colliding outcomes.
* :meth:`ImpactModel.simultaneous` and :meth:`ImpactModel.sequential` are the two classical single answers
  the set is compared with: all contacts resolved at once by the Anitescu-Potra impact LCP (their eq. 31), or
  one contact at a time in a given order, repeated until none collides.

Every increment is solved by the project's Lemke (:func:`idcontrol.solvers.lemke.lemke`), with the Tikhonov
fallback of :func:`~idcontrol.solvers.lemke.lemke_regularized` held to the original LCP's residuals.

Units: velocities m/s and rad/s, impulses N·s (and N·m·s), masses kg, inertias kg·m².
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import numpy as np
from numpy.typing import ArrayLike, NDArray

from idcontrol.errors import ContactSolveFailed, InputError, NonFiniteError, ShapeError
from idcontrol.solvers.lcp import LCPSolution
from idcontrol.solvers.lemke import lemke, lemke_regularized

Array = NDArray[np.float64]

#: A velocity still collides when some active contact's normal velocity is below −TERMINATION_TOL × the
#: largest approach speed of the pre-impact velocity (the LCP solutions are exact to ~1e-9 relative).
TERMINATION_TOL = 1e-7


@dataclass
class ImpactModel:
    """The impact data of k active contacts at one configuration, with the increment LCP's fixed matrix.

    Parameters
    ----------
    M : (m, m) generalized inertia, symmetric positive definite (kg, kg·m²).
    N : (k, m) contact normal rows J_n: J_n v is each contact's normal velocity, m/s (> 0: separating).
    D : (k·d, m) friction direction rows J_D, grouped per contact (rows i·d .. i·d + d − 1 belong to contact i):
        J_D v is the sliding velocity along each direction, m/s. The directions of a contact must positively
        span its tangent plane (e.g. ±ŝ, ±t̂).
    mu : (k,) finite friction coefficients ≥ 0 (stand in a large number for no slip).
    d : directions per contact.
    """

    M: Array
    N: Array
    D: Array
    mu: Array
    d: int
    Minv_J: Array = field(init=False, repr=False)  # (m, k + k·d) M⁻¹ J̄ᵀ
    W: Array = field(init=False, repr=False)  # (3k + k·d, 3k + k·d) the increment LCP's matrix

    def __post_init__(self) -> None:
        M = np.array(self.M, dtype=float)
        N = np.atleast_2d(np.array(self.N, dtype=float))
        m = M.shape[0]
        if M.shape != (m, m):
            raise ShapeError("M", (m, m), M.shape)
        k = N.shape[0]
        if N.shape != (k, m):
            raise ShapeError("N", (k, m), N.shape)
        if k == 0:
            raise InputError("an impact needs at least one active contact (N has no rows)")
        if not isinstance(self.d, (int, np.integer)) or self.d < 1:
            raise InputError(f"d (friction directions per contact) must be an integer >= 1, got {self.d!r}")
        D = np.array(self.D, dtype=float).reshape(-1, m) if np.size(self.D) else np.zeros((0, m))
        if D.shape != (k * self.d, m):
            raise ShapeError("D", (k * self.d, m), D.shape)
        mu = np.array(self.mu, dtype=float).reshape(-1)
        if mu.shape != (k,):
            raise ShapeError("mu", (k,), mu.shape)
        for name, a in (("M", M), ("N", N), ("D", D), ("mu", mu)):
            bad = ~np.isfinite(a)
            if bad.any():
                raise NonFiniteError(name, np.flatnonzero(bad).tolist())
        if (mu < 0).any():
            raise InputError(f"mu must be >= 0 at every contact, got {mu.tolist()}")
        try:
            L = np.linalg.cholesky(M)
        except np.linalg.LinAlgError:
            raise InputError("M is not symmetric positive definite") from None
        self.M, self.N, self.D, self.mu = M, N, D, mu
        J = np.vstack([N, D])  # J̄ = [J_n; J_D]
        self.Minv_J = np.linalg.solve(L.T, np.linalg.solve(L, J.T))
        G = J @ self.Minv_J
        G = 0.5 * (G + G.T)
        kd = k * self.d
        n = 3 * k + kd
        W = np.zeros((n, n))
        beta, lam_n, lam_d, gamma = self._blocks()
        W[beta, lam_n] = -np.eye(k)
        W[lam_n, beta] = np.eye(k)
        W[k : 2 * k + kd, k : 2 * k + kd] = G
        E = self.E
        W[lam_d, gamma] = E
        W[gamma, lam_n] = np.diag(mu)
        W[gamma, lam_d] = -E.T
        self.W = W

    # ------------------------------------------------------------------ structure
    @property
    def k(self) -> int:
        """Number of active contacts."""
        return self.N.shape[0]

    @property
    def m(self) -> int:
        """Number of generalized velocities."""
        return self.M.shape[0]

    @property
    def E(self) -> Array:
        """(k·d, k) block-diagonal columns of d ones."""
        return np.kron(np.eye(self.k), np.ones((self.d, 1)))

    def _blocks(self) -> tuple[slice, slice, slice, slice]:
        k, kd = self.k, self.k * self.d
        return slice(0, k), slice(k, 2 * k), slice(2 * k, 2 * k + kd), slice(2 * k + kd, 3 * k + kd)

    @classmethod
    def from_tangents(cls, M: ArrayLike, N: ArrayLike, S: ArrayLike, T: ArrayLike, mu: ArrayLike) -> ImpactModel:
        """Contacts with two tangent rows each, S (k, m) and T (k, m): directions ±ŝ, ±t̂ (the four-facet pyramid)."""
        S, T = np.atleast_2d(np.asarray(S, dtype=float)), np.atleast_2d(np.asarray(T, dtype=float))
        k, m = S.shape
        if T.shape != (k, m):
            raise ShapeError("T", (k, m), T.shape)
        D = np.stack([S, -S, T, -T], axis=1).reshape(4 * k, m)
        return cls(np.asarray(M, dtype=float), np.asarray(N, dtype=float), D, np.asarray(mu, dtype=float), 4)

    # ------------------------------------------------------------------ quantities
    def normal_velocity(self, v: ArrayLike) -> Array:
        """(k,) J_n v, m/s."""
        return self.N @ np.asarray(v, dtype=float)

    def kinetic_energy(self, v: ArrayLike) -> float:
        """½ vᵀ M v, J."""
        v = np.asarray(v, dtype=float)
        return 0.5 * float(v @ self.M @ v)

    def collision_tol(self, v0: ArrayLike) -> float:
        """m/s: normal velocities above −this count as not colliding (scaled by v0's largest approach speed)."""
        approach = float(max(0.0, -self.normal_velocity(v0).min()))
        return TERMINATION_TOL * max(approach, 1e-12)

    def colliding(self, v: ArrayLike, tol: float) -> bool:
        """Whether some contact's normal velocity is below −tol (m/s): v is in the colliding set C(q)."""
        return bool(self.normal_velocity(v).min() < -tol)

    def check_velocity(self, v: ArrayLike) -> Array:
        v = np.array(v, dtype=float).reshape(-1)
        if v.shape != (self.m,):
            raise ShapeError("v", (self.m,), v.shape)
        if not np.isfinite(v).all():
            raise NonFiniteError("v", np.flatnonzero(~np.isfinite(v)).tolist())
        return v

    # ------------------------------------------------------------------ one increment (eq. 75)
    def increment(self, v: Array, lam_max: Array) -> tuple[Array, Array, int]:
        """One impulse increment from velocity v (m,) with normal impulse caps λ_max (k,) ≥ 0, N·s.

        Returns (v' (m,), λ̄ = [λ_n; λ_D] (k + k·d,) N·s, Lemke pivots).
        Raises :class:`~idcontrol.errors.ContactSolveFailed` when the LCP is not solved.
        """
        k, kd = self.k, self.k * self.d
        q = np.concatenate([lam_max, self.N @ v, self.D @ v, np.zeros(k)])
        sol = _solve(self.W, q)
        lam = sol.z[k : 2 * k + kd]
        return v + self.Minv_J @ lam, lam, sol.pivots

    # ------------------------------------------------------------------ the classical single answers
    def simultaneous(self, v: ArrayLike, contacts: ArrayLike | None = None) -> Array:
        """The Anitescu-Potra impact (eq. 31) over ``contacts`` (default all) at once: v⁺ (m,).

        0 ≤ Λ_n ⊥ J_n v⁺ ≥ 0 and linearized Coulomb friction at v⁺, with v⁺ = v + M⁻¹ J̄ᵀ Λ̄.
        """
        v = self.check_velocity(v)
        idx = np.arange(self.k) if contacts is None else np.asarray(contacts, dtype=np.intp).reshape(-1)
        k, d = len(idx), self.d
        rows = np.concatenate([idx, self.k + (idx[:, None] * d + np.arange(d)).reshape(-1)])  # rows of J̄
        Minv_J = self.Minv_J[:, rows]
        J = np.vstack([self.N, self.D])[rows]
        G = J @ Minv_J
        E = np.kron(np.eye(k), np.ones((d, 1)))
        n = k + k * d + k
        W = np.zeros((n, n))
        W[: k + k * d, : k + k * d] = 0.5 * (G + G.T)
        W[k : k + k * d, k + k * d :] = E
        W[k + k * d :, :k] = np.diag(self.mu[idx])
        W[k + k * d :, k : k + k * d] = -E.T
        q = np.concatenate([J @ v, np.zeros(k)])
        sol = _solve(W, q)
        return v + Minv_J @ sol.z[: k + k * d]

    def sequential(self, v: ArrayLike, order: ArrayLike, max_rounds: int = 100, *, path: list | None = None) -> Array:
        """Single-contact impacts (eq. 31 for one contact) in ``order``, cycling until no contact collides: v⁺.

        path : if given, each intermediate velocity (m,) is appended to it, the pre-impact one first.
        """
        v = self.check_velocity(v)
        order = [int(i) for i in np.asarray(order).reshape(-1)]
        tol = self.collision_tol(v)
        if path is not None:
            path.append(v)
        for _ in range(max_rounds):
            if not self.colliding(v, tol):
                return v
            for i in order:
                if self.normal_velocity(v)[i] < -tol:
                    v = self.simultaneous(v, [i])
                    if path is not None:
                        path.append(v)
        return v


def _solve(W: Array, q: Array) -> LCPSolution:
    sol = lemke(W, q)
    if not sol.found:
        sol = lemke_regularized(W, q, original_tol=1e-7)
    if not sol.found:
        raise ContactSolveFailed(f"impact LCP ({len(q)} variables) not solved: {sol.message}")
    return sol


# ---------------------------------------------------------------------------------------------------- Algorithm 1
@dataclass
class ImpactSample:
    """One outcome of Algorithm 1.

    v : (m,) the post-impact velocity.  steps : increments (LCP solves) taken.
    terminated : v is not colliding (every contact's normal velocity ≥ −tol).  pivots : Lemke pivots in all.
    path : (steps + 1, m) the velocity after each increment, the pre-impact one first (when recorded).
    """

    v: Array
    steps: int
    terminated: bool
    pivots: int = 0
    path: Array | None = None


def check_step(step: float, max_steps: int) -> None:
    if not (isinstance(step, (int, float)) and math.isfinite(step) and step > 0):
        raise InputError(f"the impulse step h must be a finite number > 0 N·s, got {step!r}")
    if not isinstance(max_steps, (int, np.integer)) or isinstance(max_steps, bool) or max_steps < 1:
        raise InputError(f"the iteration limit N must be an integer >= 1, got {max_steps!r}")


def sample_outcome(
    model: ImpactModel,
    v0: ArrayLike,
    step: float,
    max_steps: int,
    rng: np.random.Generator,
    *,
    record_path: bool = False,
    tol: float | None = None,
) -> ImpactSample:
    """Algorithm 1 (Sim(h, x₀, N)): one post-impact velocity for the pre-impact velocity v0 (m,).

    step : h, N·s: each increment's normal impulse caps are drawn from h·U([0, 1]ᵏ).
    max_steps : N, the most increments taken.  rng : the random source (seed it for a reproducible sample).
    tol : m/s, the collision tolerance (default :meth:`ImpactModel.collision_tol` of v0).
    """
    check_step(step, max_steps)
    v = model.check_velocity(v0)
    tol = model.collision_tol(v) if tol is None else tol
    path = [v.copy()] if record_path else None
    steps = pivots = 0
    while steps < max_steps and model.colliding(v, tol):
        lam_max = step * rng.random(model.k)
        v, _, p = model.increment(v, lam_max)
        steps += 1
        pivots += p
        if path is not None:
            path.append(v.copy())
    return ImpactSample(v, steps, not model.colliding(v, tol), pivots, None if path is None else np.array(path))


# ---------------------------------------------------------------------------------------------------- Algorithm 2
@dataclass
class ImpactSet:
    """Algorithm 2's approximation of the set of post-impact velocities, with what it cost.

    v : (M, m) every sample's velocity after its forced-termination increment.
    steps : (M,) Algorithm 1 increments per sample (the forced one not counted).
    terminated : (M,) Algorithm 1 ended non-colliding within N increments.
    kept : (M,) non-colliding after the forced-termination increment (the set is ``v[kept]``).
    forced_step : the forced increment's cap per contact, ε / (3ψ), N·s.
    paths : the first recorded samples' velocity paths (each (steps + 1, m)).
    """

    v: Array
    steps: NDArray[np.int64]
    terminated: NDArray[np.bool_]
    kept: NDArray[np.bool_]
    forced_step: float
    pivots: int
    paths: list[Array] = field(default_factory=list)

    @property
    def outcomes(self) -> Array:
        """(kept, m) the approximated post-impact set."""
        return self.v[self.kept]


def forced_termination_step(model: ImpactModel, eps: float) -> float:
    """ε / (3ψ), N·s, with ψ = σ_max(M⁻¹ J̄ᵀ) · k · (1 + max μ) + 1 (Algorithm 2, line 2)."""
    sigma = float(np.linalg.norm(model.Minv_J, 2))
    psi = sigma * model.k * (1.0 + float(model.mu.max())) + 1.0
    return eps / (3.0 * psi)


def approximate_set(
    model: ImpactModel,
    v0: ArrayLike,
    step: float,
    eps: float,
    max_steps: int,
    samples: int,
    rng: np.random.Generator,
    *,
    record_paths: int = 0,
) -> ImpactSet:
    """Algorithm 2 (Approximate(h, x₀, ε, N, M)): ``samples`` runs of Algorithm 1, each followed by one
    forced-termination increment with caps ε / (3ψ), keeping the non-colliding results.

    eps : ε ∈ (0, h), the approximation's resolution (N·s).  record_paths : keep the velocity paths of this
    many samples (for drawing).
    """
    check_step(step, max_steps)
    if not (isinstance(eps, (int, float)) and 0.0 < eps < step):
        raise InputError(f"eps must be in (0, h) = (0, {step}) N·s, got {eps!r}")
    if not isinstance(samples, (int, np.integer)) or samples < 1:
        raise InputError(f"samples (M) must be an integer >= 1, got {samples!r}")
    v0 = model.check_velocity(v0)
    tol = model.collision_tol(v0)
    forced = forced_termination_step(model, eps)
    out = np.empty((samples, model.m))
    steps = np.empty(samples, dtype=np.int64)
    terminated = np.empty(samples, dtype=bool)
    kept = np.empty(samples, dtype=bool)
    paths: list[Array] = []
    pivots = 0
    caps = np.full(model.k, forced)
    for i in range(samples):
        s = sample_outcome(model, v0, step, max_steps, rng, record_path=i < record_paths, tol=tol)
        v = s.v
        if model.colliding(v, tol):
            v, _, p = model.increment(v, caps)
            pivots += p
        out[i], steps[i], terminated[i], kept[i] = v, s.steps, s.terminated, not model.colliding(v, tol)
        pivots += s.pivots
        if s.path is not None:
            paths.append(s.path)
    return ImpactSet(out, steps, terminated, kept, forced, pivots, paths)


# ---------------------------------------------------------------------------------------------------- rocking block
@dataclass(frozen=True)
class RockingBlock:
    """The planar rocking block of Halm & Posa (Fig. 1, Table 4) landing flat on both bottom corners.

    width w, height h (m), mass (kg), uniform density: I = m (w² + h²) / 12. Generalized velocity
    v = (ẋ, ż, θ̇) of the centre of mass (m/s) and the rotation (rad/s, counter-clockwise). Corner A is the
    bottom-left one (x = −w/2), B the bottom-right one. Friction directions ±x̂ per corner (d = 2).
    """

    width: float = 1.0
    height: float = 2.0
    mass: float = 1.0
    mu: float = 1.0
    falling_speed: float = 0.4429  # m/s, the pre-impact downward velocity

    def model(self) -> ImpactModel:
        w, h, m = self.width, self.height, self.mass
        inertia = m * (w**2 + h**2) / 12.0
        M = np.diag([m, m, inertia])
        # corner velocity = (ẋ − θ̇ r_z, ż + θ̇ r_x) for the corner at r = (r_x, r_z) from the centre of mass
        corners = ((-w / 2, -h / 2), (w / 2, -h / 2))
        N = np.array([[0.0, 1.0, rx] for rx, _ in corners])
        tangent = np.array([[1.0, 0.0, -rz] for _, rz in corners])
        D = np.stack([tangent, -tangent], axis=1).reshape(4, 3)
        return ImpactModel(M, N, D, np.full(2, self.mu), 2)

    def pre_impact_velocity(self) -> Array:
        return np.array([0.0, -self.falling_speed, 0.0])
