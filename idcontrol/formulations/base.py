"""The interface every inverse-dynamics formulation implements, and the algebra they share.

Eliminating the equality constraints (spec section 1.2)
-------------------------------------------------------
With P selecting the actuated entries of v, the constraint P v⁺ = q̇_des fixes
the actuated velocities, and the unactuated rows (index set u, the floating
base and any appended movable body) of the dynamics determine the rest::

    M_uu v⁺_u = −M_ua q̇_des − κ_u + (Nᵀ f_N + Fᵀ f_F)_u,   κ = −Δt f_ext − M v⁻

so the effective inverse inertia of the paper's corrected LCPs and QPs is
Γ_P = U M_uu⁻¹ Uᵀ (U selects u). With the Cholesky factor M_uu = L Lᵀ and
whitened coordinates x = Lᵀ v_u, every contact quantity lives in
``nb = len(u)`` dimensions::

    x⁺ = x₀ + Ñ f_N + F̃ f_F,   x₀ = −L⁻¹ (M_ua q̇_des + κ_u),   Ñ = L⁻¹ N_uᵀ

and the LCP/QP matrices are Gram matrices (N Γ_P Nᵀ = ÑᵀÑ). Torques follow
from the actuated rows: τ = (M v⁺ + κ)_a − (Nᵀ f_N + Fᵀ f_F)_a.

All solvers here work in *force* units: an impulse is ``Δt ×`` the force.
"""

from __future__ import annotations

import time
from abc import ABC, abstractmethod
from collections.abc import Hashable, Sequence
from typing import ClassVar

import numpy as np
from numpy.typing import NDArray

from idcontrol.problem import ContactProblem, SolveResult, block

Array = NDArray[np.float64]


class ReducedDynamics:
    """The problem with P v⁺ = q̇_des eliminated, in whitened unactuated coordinates.

    Attributes
    ----------
    nb : number of unactuated DoFs.
    L_inv : (nb, nb) inverse Cholesky factor of M_uu.
    kappa : (m,) κ = −Δt f_ext − M v⁻, impulse units.
    x0 : (nb,) whitened contact-free v⁺_u.
    N_w, S_w, T_w : (nb, n) whitened unactuated contact columns (Ñ, S̃, T̃).
    """

    def __init__(self, problem: ContactProblem) -> None:
        p = problem
        a, u = p.actuated, p.unactuated
        self.problem = p
        self.nb = nb = p.nb
        self.kappa = -p.dt * p.f_ext - p.M @ p.v
        if nb:
            chol = np.linalg.cholesky(block(p.M, u, u))
            self.L_inv = np.linalg.inv(chol)
            self.x0 = -self.L_inv @ (block(p.M, u, a) @ p.qd_des + self.kappa[u])
            self.N_w = self.L_inv @ p.N[:, u].T
            self.S_w = self.L_inv @ p.S[:, u].T
            self.T_w = self.L_inv @ p.T[:, u].T
        else:
            self.L_inv = np.zeros((0, 0))
            self.x0 = np.zeros(0)
            self.N_w = self.S_w = self.T_w = np.zeros((0, p.n))

    def velocity(self, x: Array) -> Array:
        """(m,) v⁺ from whitened unactuated coordinates ``x`` (actuated part = q̇_des)."""
        p = self.problem
        v = np.empty(p.m)
        v[p.actuated] = p.qd_des
        v[p.unactuated] = self.L_inv.T @ x
        return v

    def normal_rate(self, x: Array) -> Array:
        """(n,) N v⁺ + φ/Δt for the velocity given by ``x``, m/s."""
        p = self.problem
        return p.N[:, p.actuated] @ p.qd_des + self.N_w.T @ x + p.phi / p.dt

    def torque(self, v_next: Array, contact_force_actuated: Array | float = 0.0) -> Array:
        """(nu,) actuator torque, N·m, from v⁺ and the actuated rows (nu,) of the generalized contact force, N."""
        p = self.problem
        a = p.actuated
        return (p.M[a] @ v_next + self.kappa[a]) / p.dt - contact_force_actuated


class Formulation(ABC):
    """An inverse-dynamics formulation: ``solve(problem) -> SolveResult``.

    Instances keep their warm-start state (keyed by contact identity) between
    calls; :meth:`reset` forgets it.
    """

    name: ClassVar[str]
    #: True when the model enforces S v⁺ = T v⁺ = 0 (reported in the residuals).
    no_slip: ClassVar[bool] = False

    @abstractmethod
    def solve(self, problem: ContactProblem) -> SolveResult:
        """Compute torques and predicted contact forces for ``problem``."""

    def reset(self) -> None:  # noqa: B027 - optional hook: stateless formulations keep the default
        """Forget warm-start state."""

    # ---------------------------------------------------------------- helpers for subclasses
    def _result(
        self,
        problem: ContactProblem,
        v_next: Array,
        tau: Array,
        f_normal: Array,
        f_s: Array,
        f_t: Array,
        *,
        iterations: int,
        message: str,
        started: float,
        consistency_repaired: bool = False,
        fallback: str | None = None,
    ) -> SolveResult:
        p = problem
        ids = p.ids()
        active = tuple(ids[i] for i in np.flatnonzero(f_normal > 0.0))
        force_in_world = None
        if p.normals is not None and p.n:
            force_in_world = f_normal[:, None] * p.normals + f_s[:, None] * p.tangents_s + f_t[:, None] * p.tangents_t
        result = SolveResult(
            formulation=self.name,
            found=True,
            tau=tau,
            v_next=v_next,
            f_normal=f_normal,
            f_s=f_s,
            f_t=f_t,
            contact_ids=ids,
            force_in_world=force_in_world,
            active=active,
            iterations=iterations,
            problem=p,
            no_slip=self.no_slip,
            consistency_repaired=consistency_repaired,
            fallback=fallback,
            message=message,
        )
        result.timings["solve"] = time.perf_counter() - started
        return result


def map_warm_start(
    previous_ids: Sequence[Hashable], previous_active: Sequence[int], ids: Sequence[Hashable]
) -> list[int]:
    """Translate active indices of the previous tick to this tick's indices, by contact identity.

    Contacts that disappeared are dropped; the order of the rest is kept.
    """
    if not previous_active:
        return []
    index = {cid: i for i, cid in enumerate(ids)}
    out = []
    for j in previous_active:
        if j < len(previous_ids):
            i = index.get(previous_ids[j])
            if i is not None:
                out.append(i)
    return out


def friction_split(n: int, f_friction: Array) -> tuple[Array, Array]:
    """(f_S, f_T) from pyramid components [f_S+; f_S−; f_T+; f_T−] (direction-major, 4n)."""
    return f_friction[:n] - f_friction[n : 2 * n], f_friction[2 * n : 3 * n] - f_friction[3 * n :]
