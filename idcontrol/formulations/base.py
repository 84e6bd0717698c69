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

from idcontrol.formulations.problem import ContactProblem, SolveResult, index_array
from idcontrol.solvers.kernels import forces_in_world, reduced_dynamics, velocity_and_torque

Array = NDArray[np.float64]


class ReducedDynamics:
    """The problem with P v⁺ = q̇_des eliminated, in whitened unactuated coordinates.

    Attributes
    ----------
    nb : number of unactuated DoFs.
    a, u : (nu,), (nb,) actuated and unactuated indices into v.
    L_inv : (nb, nb) inverse Cholesky factor of M_uu.
    kappa : (m,) κ = −Δt f_ext − M v⁻, impulse units.
    x0 : (nb,) whitened contact-free v⁺_u.
    R : (3n, m) the contact rows [N; S; T].
    R_w : (nb, 3n) their whitened unactuated columns R̃ = [Ñ S̃ T̃].
    N_w, S_w, T_w : (nb, n) views of R_w (Ñ, S̃, T̃).
    """

    def __init__(self, problem: ContactProblem) -> None:
        p = problem
        n = p.n
        self.problem = p
        self.a = index_array(p.actuated, p.m)
        self.u = index_array(p.unactuated, p.m)
        self.nb = len(self.u)
        ok, self.kappa, self.L_inv, self.R, self.R_w, self.x0 = reduced_dynamics(
            p.M, p.f_ext, p.v, p.qd_des, p.N, p.S, p.T, self.a, self.u, p.dt
        )
        if not ok:
            raise np.linalg.LinAlgError("Matrix is not positive definite")
        self.N_w, self.S_w, self.T_w = self.R_w[:, :n], self.R_w[:, n : 2 * n], self.R_w[:, 2 * n :]

    def velocity_and_torque(self, R_w: Array, R: Array, y: Array) -> tuple[Array, Array]:
        """v⁺ (m,) and τ (nu,), N·m, for forces ``y`` (N) on contact rows ``R`` (r, m) whitened as ``R_w`` (nb, r)."""
        p = self.problem
        return velocity_and_torque(p.M, self.kappa, self.L_inv, self.x0, R_w, R, self.a, self.u, p.qd_des, y, p.dt)

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
    #: Whether solve() reads ``problem.sensed_force`` (otherwise the controller does not build it).
    uses_sensed_forces: ClassVar[bool] = False
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
        active = tuple(cid for cid, f in zip(ids, f_normal.tolist(), strict=True) if f > 0.0)
        force_in_world = None
        if p.normals is not None and p.n:
            force_in_world = forces_in_world(f_normal, f_s, f_t, p.normals, p.tangents_s, p.tangents_t)
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
