"""The reduced dynamics every contact formulation starts from: the problem with P v⁺ = q̇_des eliminated.

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

import numpy as np
from numba import njit
from numpy.typing import NDArray

from idcontrol.formulations.problem import ContactProblem, index_array
from idcontrol.solvers.dense import cholesky_in_place, lower_inverse

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


@njit(cache=True)
def reduced_dynamics(M, f_ext, v, qd_des, N, S, T, a, u, dt):  # pragma: no cover - compiled
    """The problem with P v⁺ = q̇_des eliminated (see :class:`ReducedDynamics`).

    Returns (ok, κ (m,), L⁻¹ (nb, nb), R = [N; S; T] (3n, m), R̃ = L⁻¹ R_uᵀ (nb, 3n), x₀ (nb,)) with
    κ = −Δt f_ext − M v⁻, M_uu = L Lᵀ and x₀ = −L⁻¹ (M_ua q̇_des + κ_u); ``ok`` is False (and the rest
    unusable) when M_uu is not positive definite.
    """
    m = M.shape[0]
    nb = u.shape[0]
    n = N.shape[0]
    R = np.empty((3 * n, m))
    R[:n] = N
    R[n : 2 * n] = S
    R[2 * n :] = T
    kappa = np.empty(m)
    for i in range(m):
        s = -dt * f_ext[i]
        for j in range(m):
            s -= M[i, j] * v[j]
        kappa[i] = s
    L = np.zeros((nb, nb))
    for i in range(nb):
        for j in range(i + 1):
            L[i, j] = M[u[i], u[j]]
    L_inv = np.zeros((nb, nb))
    R_w = np.empty((nb, 3 * n))
    x0 = np.empty(nb)
    if not cholesky_in_place(L):
        return False, kappa, L_inv, R, R_w, x0
    lower_inverse(L, L_inv)
    for i in range(nb):
        for c in range(3 * n):
            s = 0.0
            for k in range(i + 1):
                s += L_inv[i, k] * R[c, u[k]]
            R_w[i, c] = s
        s = 0.0
        for k in range(i + 1):
            t = kappa[u[k]]
            for j in range(a.shape[0]):
                t += M[u[k], a[j]] * qd_des[j]
            s += L_inv[i, k] * t
        x0[i] = -s
    return True, kappa, L_inv, R, R_w, x0


@njit(cache=True)
def velocity_and_torque(M, kappa, L_inv, x0, R_w, R, a, u, qd_des, y, dt):  # pragma: no cover - compiled
    """v⁺ (m,) and τ (nu,), N·m, for contact forces ``y`` (N) on the rows ``R`` (r, m) whitened as ``R_w``.

    x⁺ = x₀ + Δt R̃ y, v⁺_a = q̇_des, v⁺_u = L⁻ᵀ x⁺, τ = (M_a v⁺ + κ_a)/Δt − (Rᵀ y)_a.
    """
    nb = u.shape[0]
    x = np.empty(nb)
    for i in range(nb):
        s = 0.0
        for c in range(y.shape[0]):
            s += R_w[i, c] * y[c]
        x[i] = x0[i] + dt * s
    v, tau = _velocity_and_inertial_torque(M, kappa, L_inv, x, a, u, qd_des, dt)
    for j in range(a.shape[0]):
        contact = 0.0
        for c in range(y.shape[0]):
            contact += R[c, a[j]] * y[c]
        tau[j] -= contact
    return v, tau


@njit(cache=True)
def _velocity_and_inertial_torque(M, kappa, L_inv, x, a, u, qd_des, dt):  # pragma: no cover - compiled
    """v⁺ (m,) from v⁺_a = q̇_des and v⁺_u = L⁻ᵀ x, and (M_a v⁺ + κ_a)/Δt (nu,), N·m: the torque before the
    contact forces' share is taken off."""
    m = M.shape[0]
    v = np.empty(m)
    for j in range(a.shape[0]):
        v[a[j]] = qd_des[j]
    _unactuated_velocity(L_inv, x, u, v)
    tau = np.empty(a.shape[0])
    for j in range(a.shape[0]):
        s = kappa[a[j]]
        for c in range(m):
            s += M[a[j], c] * v[c]
        tau[j] = s / dt
    return v, tau


@njit(cache=True)
def _unactuated_velocity(L_inv, x, u, v):  # pragma: no cover - compiled
    """v[u] = L⁻ᵀ x (L⁻¹ lower triangular)."""
    nb = u.shape[0]
    for j in range(nb):
        s = 0.0
        for i in range(j, nb):
            s += L_inv[i, j] * x[i]
        v[u[j]] = s
