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

The reduced dynamics cross into compiled code as one record, a numba structref (:class:`ReducedDynamics`),
built by one compiled call from the problem's record (:mod:`idcontrol.formulations.record`): a structref is
cached on disk with the kernels that take it (a jitclass recompiles in every process) and crosses the boundary
as one object (docs/benchmarks.md).
"""

from __future__ import annotations

import numpy as np
from numba import njit, types
from numba.experimental import structref
from numpy.typing import NDArray

from idcontrol.arrays import IN_INDICES, IN_MATRIX, IN_VECTOR, MATRIX, VECTOR, boolean, float64
from idcontrol.formulations.problem import ContactProblem
from idcontrol.formulations.record import PROBLEM
from idcontrol.solvers.dense import cholesky_in_place, lower_inverse

Array = NDArray[np.float64]


@structref.register
class ReducedDynamicsType(types.StructRef):
    """The numba type of :class:`ReducedDynamics`."""

    def preprocess_fields(self, fields):
        return tuple((name, types.unliteral(typ)) for name, typ in fields)


#: the record's fields: the problem's arrays it keeps (read-only) and what the reduction computes
RECORD = ReducedDynamicsType(
    [
        ("M", IN_MATRIX),  # (m, m) generalized inertia
        ("qd_des", IN_VECTOR),  # (nu,) desired actuated velocity, rad/s
        ("phi", IN_VECTOR),  # (n,) signed distances, m
        ("mu", IN_VECTOR),  # (n,) friction coefficients
        ("a", IN_INDICES),  # (nu,) actuated indices into v
        ("u", IN_INDICES),  # (nb,) unactuated indices into v
        ("dt", float64),  # control period, s
        ("kappa", VECTOR),  # (m,) κ = −Δt f_ext − M v⁻, impulse units
        ("L_inv", MATRIX),  # (nb, nb) inverse Cholesky factor of M_uu (lower triangular)
        ("x0", VECTOR),  # (nb,) whitened contact-free v⁺_u
        ("R", MATRIX),  # (3n, m) the contact rows [N; S; T]
        ("R_w", MATRIX),  # (nb, 3n) their whitened unactuated columns R̃ = L⁻¹ R_uᵀ = [Ñ S̃ T̃]
    ]
)


class ReducedDynamics(structref.StructRefProxy):
    """The problem with P v⁺ = q̇_des eliminated, in whitened unactuated coordinates (a numba structref).

    ``ReducedDynamics(problem)`` reduces a :class:`~idcontrol.formulations.problem.ContactProblem` (one
    compiled call). Compiled code reads the fields directly; from Python they are properties (each one a
    compiled call: for tests and diagnostics, not for the tick).

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

    Raises ``numpy.linalg.LinAlgError`` when M_uu is not positive definite.
    """

    def __new__(cls, problem: ContactProblem) -> ReducedDynamics:
        return reduce(problem)

    @property
    def a(self) -> NDArray[np.intp]:
        return _indices(self)[0]

    @property
    def u(self) -> NDArray[np.intp]:
        return _indices(self)[1]

    @property
    def nb(self) -> int:
        return len(self.u)

    @property
    def kappa(self) -> Array:
        return _arrays(self)[0]

    @property
    def L_inv(self) -> Array:
        return _arrays(self)[1]

    @property
    def x0(self) -> Array:
        return _arrays(self)[2]

    @property
    def R(self) -> Array:
        return _arrays(self)[3]

    @property
    def R_w(self) -> Array:
        return _arrays(self)[4]

    @property
    def N_w(self) -> Array:
        R_w = self.R_w
        return R_w[:, : R_w.shape[1] // 3]

    @property
    def S_w(self) -> Array:
        R_w = self.R_w
        n = R_w.shape[1] // 3
        return R_w[:, n : 2 * n]

    @property
    def T_w(self) -> Array:
        R_w = self.R_w
        return R_w[:, 2 * (R_w.shape[1] // 3) :]

    def velocity_and_torque(self, R_w: Array, R: Array, y: Array) -> tuple[Array, Array]:
        """v⁺ (m,) and τ (nu,), N·m, for forces ``y`` (N) on contact rows ``R`` (r, m) whitened as ``R_w`` (nb, r)."""
        return velocity_and_torque(self, R_w, R, y)


structref.define_boxing(ReducedDynamicsType, ReducedDynamics)


def reduce(problem: ContactProblem) -> ReducedDynamics:
    """The reduced dynamics of ``problem`` (one compiled call); LinAlgError when M_uu is not positive definite."""
    ok, red = _reduce(problem.record)
    if not ok:
        raise np.linalg.LinAlgError("Matrix is not positive definite")
    return red


@njit(types.Tuple((boolean, RECORD))(PROBLEM), cache=True)
def _reduce(problem):
    """(ok, the record): the problem (a :data:`~idcontrol.formulations.record.PROBLEM` record) with P v⁺ = q̇_des
    eliminated (see :class:`ReducedDynamics`).

    κ = −Δt f_ext − M v⁻, M_uu = L Lᵀ, x₀ = −L⁻¹ (M_ua q̇_des + κ_u), R̃ = L⁻¹ R_uᵀ; ``ok`` is False (and
    the record unusable) when M_uu is not positive definite.
    """
    M, f_ext, v, qd_des, N, S, T = problem.M, problem.f_ext, problem.v, problem.qd_des, problem.N, problem.S, problem.T
    a, u, dt = problem.a, problem.u, problem.dt
    m = M.shape[0]
    nb = u.shape[0]
    n = N.shape[0]
    red = structref.new(RECORD)
    red.M = M
    red.qd_des = qd_des
    red.phi = problem.phi
    red.mu = problem.mu
    red.a = a
    red.u = u
    red.dt = dt
    R = np.empty((3 * n, m))
    R[:n] = N
    R[n : 2 * n] = S
    R[2 * n :] = T
    red.R = R
    kappa = np.empty(m)
    for i in range(m):
        s = -dt * f_ext[i]
        for j in range(m):
            s -= M[i, j] * v[j]
        kappa[i] = s
    red.kappa = kappa
    L = np.zeros((nb, nb))
    for i in range(nb):
        for j in range(i + 1):
            L[i, j] = M[u[i], u[j]]
    L_inv = np.zeros((nb, nb))
    R_w = np.empty((nb, 3 * n))
    x0 = np.empty(nb)
    red.L_inv = L_inv
    red.R_w = R_w
    red.x0 = x0
    if not cholesky_in_place(L):
        return False, red
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
    return True, red


@njit((RECORD,), cache=True)
def _arrays(red):
    """(κ, L⁻¹, x₀, R, R̃) for the Python properties."""
    return red.kappa, red.L_inv, red.x0, red.R, red.R_w


@njit((RECORD,), cache=True)
def _indices(red):
    """(a, u) for the Python properties."""
    return red.a, red.u


@njit(cache=True)
def velocity_and_inertial_torque(red, x):
    """v⁺ (m,) from v⁺_a = q̇_des and v⁺_u = L⁻ᵀ x, and (M_a v⁺ + κ_a)/Δt (nu,), N·m: the torque before the
    contact forces' share is taken off."""
    M, a = red.M, red.a
    m = M.shape[0]
    v = np.empty(m)
    for j in range(a.shape[0]):
        v[a[j]] = red.qd_des[j]
    unactuated_velocity(red.L_inv, x, red.u, v)
    tau = np.empty(a.shape[0])
    for j in range(a.shape[0]):
        s = red.kappa[a[j]]
        for c in range(m):
            s += M[a[j], c] * v[c]
        tau[j] = s / red.dt
    return v, tau


@njit(cache=True)
def unactuated_velocity(L_inv, x, u, v):
    """v[u] = L⁻ᵀ x (L⁻¹ lower triangular)."""
    nb = u.shape[0]
    for j in range(nb):
        s = 0.0
        for i in range(j, nb):
            s += L_inv[i, j] * x[i]
        v[u[j]] = s


@njit((RECORD, IN_MATRIX, IN_MATRIX, IN_VECTOR), cache=True)
def velocity_and_torque(red, R_w, R, y):
    """v⁺ (m,) and τ (nu,), N·m, for contact forces ``y`` (N) on the rows ``R`` (r, m) whitened as ``R_w``.

    x⁺ = x₀ + Δt R̃ y, v⁺_a = q̇_des, v⁺_u = L⁻ᵀ x⁺, τ = (M_a v⁺ + κ_a)/Δt − (Rᵀ y)_a.
    """
    nb = red.u.shape[0]
    a = red.a
    x = np.empty(nb)
    for i in range(nb):
        s = 0.0
        for c in range(y.shape[0]):
            s += R_w[i, c] * y[c]
        x[i] = red.x0[i] + red.dt * s
    v, tau = velocity_and_inertial_torque(red, x)
    for j in range(a.shape[0]):
        contact = 0.0
        for c in range(y.shape[0]):
            contact += R[c, a[j]] * y[c]
        tau[j] -= contact
    return v, tau


@njit((RECORD, IN_VECTOR), cache=True)
def contact_velocity_and_torque(red, y):
    """:func:`velocity_and_torque` on the record's own rows: y = [f_N; f_S; f_T] (3n,), N."""
    return velocity_and_torque(red, red.R_w, red.R, y)


@njit(cache=True)
def min_gap_rate_of(red, v):
    """min over contacts of N v + φ/Δt, m/s (+inf without contacts), N the record's first n rows: below zero, v
    penetrates a contact within the step."""
    n = red.R.shape[0] // 3
    low = np.inf
    for i in range(n):
        s = red.phi[i] / red.dt
        for j in range(v.shape[0]):
            s += red.R[i, j] * v[j]
        low = min(low, s)
    return low
