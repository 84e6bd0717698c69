"""The reduced dynamics' record (idcontrol.formulations.reduced): what goes in comes out, whatever the layout."""

from __future__ import annotations

from dataclasses import replace

import numpy as np
import pytest

from idcontrol.control.controller import InverseDynamicsController
from idcontrol.control.state import RobotState
from idcontrol.formulations.problem import index_array
from idcontrol.formulations.reduced import (
    ReducedDynamics,
    contact_velocity_and_torque,
    reduction_arguments,
    velocity_and_torque,
)
from tests.conftest import random_problem


def test_the_record_round_trips_the_reduction() -> None:
    """Fields read back from the record equal their definitions: κ = −Δt f_ext − M v⁻, R = [N; S; T],
    L⁻¹ with L Lᵀ = M_uu, R̃ = L⁻¹ R_uᵀ, x₀ = −L⁻¹(M_ua q̇_des + κ_u) (1e-12 relative), and the index sets."""
    p = random_problem(np.random.default_rng(5), n=5)
    red = ReducedDynamics(p)
    u, a = np.arange(6), np.arange(6, p.m)
    L_inv = np.linalg.inv(np.linalg.cholesky(p.M[np.ix_(u, u)]))
    kappa = -p.dt * p.f_ext - p.M @ p.v
    R = np.vstack([p.N, p.S, p.T])
    np.testing.assert_array_equal(red.u, u)
    np.testing.assert_array_equal(red.a, a)
    assert red.nb == 6
    np.testing.assert_array_equal(red.R, R)
    np.testing.assert_allclose(red.kappa, kappa, rtol=1e-12, atol=1e-12)
    np.testing.assert_allclose(red.L_inv, L_inv, rtol=1e-12, atol=1e-12)
    np.testing.assert_allclose(red.R_w, L_inv @ R[:, u].T, rtol=1e-10, atol=1e-12)
    np.testing.assert_allclose(red.x0, -L_inv @ (p.M[np.ix_(u, a)] @ p.qd_des + kappa[u]), rtol=1e-10, atol=1e-12)
    np.testing.assert_array_equal(red.N_w, red.R_w[:, :5])
    np.testing.assert_array_equal(red.T_w, red.R_w[:, 10:])


def test_strided_read_only_and_integer_inputs_give_the_same_record() -> None:
    """A strided view for N, a read-only μ and M, integer index lists and slices: converted at the boundary,
    the same record as from C-contiguous float arrays (bit for bit)."""
    p = random_problem(np.random.default_rng(6), n=4)
    reference = ReducedDynamics(p)
    wide = np.zeros((4, 2 * p.m))
    wide[:, ::2] = p.N
    M = p.M.copy()
    M.setflags(write=False)
    mu = p.mu.copy()
    mu.setflags(write=False)
    q = replace(p, N=wide[:, ::2], M=M, mu=mu, actuated=list(range(6, p.m)), unactuated=slice(0, 6))
    red = ReducedDynamics(q)
    for name in ("kappa", "L_inv", "x0", "R", "R_w", "a", "u"):
        np.testing.assert_array_equal(getattr(red, name), getattr(reference, name), err_msg=name)


def test_velocity_and_torque_is_the_reduced_dynamics_solved_for_given_forces() -> None:
    """v⁺ and τ for forces y satisfy the discretized dynamics M(v⁺ − v⁻) = Δt(Rᵀy + Pᵀτ + f_ext) and P v⁺ = q̇_des."""
    p = random_problem(np.random.default_rng(7), n=4)
    red = ReducedDynamics(p)
    y = np.random.default_rng(8).standard_normal(12)
    v, tau = contact_velocity_and_torque(red, y)
    v2, tau2 = velocity_and_torque(red, red.R_w, red.R, y)
    np.testing.assert_array_equal(v, v2)
    np.testing.assert_array_equal(tau, tau2)
    generalized = red.R.T @ y + p.f_ext
    generalized[6:] += tau
    np.testing.assert_allclose(p.M @ (v - p.v), p.dt * generalized, atol=1e-9)
    np.testing.assert_allclose(v[6:], p.qd_des, atol=1e-12)


def test_a_singular_unactuated_inertia_raises() -> None:
    """M_uu not positive definite: numpy's LinAlgError, as from numpy.linalg.cholesky."""
    p = random_problem(np.random.default_rng(9), n=2)
    p.M[:6, :6] = 0.0
    with pytest.raises(np.linalg.LinAlgError):
        ReducedDynamics(p)


def test_the_reduction_s_index_arrays_are_each_problem_s_own(quadruped, arm):
    """The index arrays kept for the last problem's slices are used only for a problem with those very slices:
    problems of two robots (and one with index arrays instead of slices) solved in turn each get their own."""
    problems = []
    for robot in (quadruped, arm):
        controller = InverseDynamicsController(robot)
        objects = controller.initial_object_states()
        state = RobotState(robot.standing_configuration(), np.zeros(robot.nv), objects=objects)
        problems.append(controller.build_problem(state, np.zeros(robot.nu))[0])
    p = problems[0]
    problems.append(replace(p, actuated=index_array(p.actuated, p.m), unactuated=index_array(p.unactuated, p.m)))
    for p in problems * 3:
        a, u = reduction_arguments(p)[9:11]
        assert np.array_equal(a, index_array(p.actuated, p.m)) and np.array_equal(u, index_array(p.unactuated, p.m))
