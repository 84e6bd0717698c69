"""The problem record: one tick's problem as compiled code takes it, a numba structref.

Every formulation's compiled solve and the certificate take the problem as this one record, then their own options
and workspace: ``solve(record, options, workspace)``. The controller's compiled assembly builds it with the arrays it
assembles (``assemble_problem``); a problem built from arrays alone builds it from them (:func:`record_of`).

Fields (shapes for n contacts on m DoFs, nu of them actuated; units as in
:class:`~idcontrol.formulations.problem.ContactProblem`): M (m, m), f_ext (m,), v (m,), qd_des (nu,), N, S, T (n, m),
phi (n,), mu (n,), a (nu,) and u (nb,) the actuated and unactuated indices into v, dt (s). Arrays are C-contiguous
float64 (intp for the indices) and only read.
"""

from __future__ import annotations

import numpy as np
from numba import njit, types
from numba.experimental import structref

from idcontrol.arrays import IN_INDICES, IN_MATRIX, IN_VECTOR, float64


@structref.register
class ProblemRecordType(types.StructRef):
    """The numba type of :class:`ProblemRecord`."""

    def preprocess_fields(self, fields):
        return tuple((name, types.unliteral(typ)) for name, typ in fields)


#: the record's numba type, for the compiled entries' signatures
PROBLEM = ProblemRecordType(
    [
        ("M", IN_MATRIX),  # (m, m) generalized inertia
        ("f_ext", IN_VECTOR),  # (m,) non-contact, non-actuated generalized force, N / N·m
        ("v", IN_VECTOR),  # (m,) generalized velocity now, v⁻
        ("qd_des", IN_VECTOR),  # (nu,) desired actuated velocity at t₀ + Δt
        ("N", IN_MATRIX),  # (n, m) normal contact rows
        ("S", IN_MATRIX),  # (n, m) first tangential rows
        ("T", IN_MATRIX),  # (n, m) second tangential rows
        ("phi", IN_VECTOR),  # (n,) signed distances, m
        ("mu", IN_VECTOR),  # (n,) friction coefficients (inf allowed)
        ("a", IN_INDICES),  # (nu,) actuated indices into v
        ("u", IN_INDICES),  # (nb,) unactuated indices into v
        ("dt", float64),  # control period, s
    ]
)


class ProblemRecord(structref.StructRefProxy):
    """One tick's problem as compiled code takes it (see the module docstring); from Python it is passed on, not
    read."""


structref.define_boxing(ProblemRecordType, ProblemRecord)

#: (M, f_ext, v, q̇_des, N, S, T, φ, μ) as :func:`_record` takes them
_ARRAYS = types.Tuple(
    (IN_MATRIX, IN_VECTOR, IN_VECTOR, IN_VECTOR, IN_MATRIX, IN_MATRIX, IN_MATRIX, IN_VECTOR, IN_VECTOR)
)


@njit(PROBLEM(_ARRAYS, types.UniTuple(IN_INDICES, 2), float64), cache=True)
def _record(arrays, indices, dt):
    """The record of (M, f_ext, v, q̇_des, N, S, T, φ, μ), (a, u) and Δt."""
    record = structref.new(PROBLEM)
    record.M, record.f_ext, record.v, record.qd_des, record.N, record.S, record.T, record.phi, record.mu = arrays
    record.a, record.u = indices
    record.dt = dt
    return record


@njit(PROBLEM(PROBLEM, IN_MATRIX, IN_MATRIX, IN_VECTOR), cache=True)
def with_rows(record, S, T, qd_des):
    """A record with other tangential rows S, T (n, m) and q̇_des (nu,), every other field the same arrays."""
    out = structref.new(PROBLEM)
    out.M, out.f_ext, out.v, out.qd_des = record.M, record.f_ext, record.v, qd_des
    out.N, out.S, out.T, out.phi, out.mu = record.N, S, T, record.phi, record.mu
    out.a, out.u, out.dt = record.a, record.u, record.dt
    return out


def _floats(x: object) -> np.ndarray:
    return np.ascontiguousarray(x, dtype=np.float64)


def record_of(M, f_ext, v, qd_des, N, S, T, phi, mu, a, u, dt) -> ProblemRecord:  # noqa: ANN001 - arrays
    """The record of these arrays (converted to C-contiguous float64, the index arrays to intp; the same arrays
    when they are so already)."""
    arrays = tuple(_floats(x) for x in (M, f_ext, v, qd_des, N, S, T, phi, mu))
    indices = (np.ascontiguousarray(a, dtype=np.intp), np.ascontiguousarray(u, dtype=np.intp))
    return _record(arrays, indices, float(dt))
