"""The reduced dynamics' record (idcontrol.formulations.reduced): what goes in comes out, whatever the layout."""

from __future__ import annotations

from dataclasses import replace

import numba
import numpy as np
import pytest

from idcontrol.control.controller import InverseDynamicsController
from idcontrol.control.state import RobotState
from idcontrol.formulations.coulomb_lcp import coulomb_solve
from idcontrol.formulations.noslip_lcp.stages import noslip_solve
from idcontrol.formulations.problem import ContactProblem, index_array
from idcontrol.formulations.record import PROBLEM
from idcontrol.formulations.reduced import ReducedDynamics, _reduce, contact_velocity_and_torque, velocity_and_torque
from idcontrol.formulations.two_stage_qp.stages import two_stages
from idcontrol.robot.model import RobotModel
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


def test_index_arrays_are_read_only_contiguous_intp_whatever_the_index():
    """index_array gives the compiled kernels' index type (read-only, C-contiguous intp) for a slice, a writable
    array, a strided one and a read-only one, and leaves the caller's array writable."""
    writable = np.array([0, 2, 5])
    strided = np.arange(12)[::3]
    frozen = np.array([1, 4], dtype=np.intp)
    frozen.setflags(write=False)
    for index, expected in (
        (slice(6, 12), np.arange(6, 12)),
        (writable, writable),
        (strided, strided),
        (frozen, frozen),
    ):
        out = index_array(index, 12)
        assert out.dtype == np.intp and out.flags.c_contiguous and not out.flags.writeable
        np.testing.assert_array_equal(out, expected)
    assert writable.flags.writeable
    assert index_array(frozen, 12) is frozen


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
        red = ReducedDynamics(p)
        a, u = red.a, red.u
        assert np.array_equal(a, index_array(p.actuated, p.m)) and np.array_equal(u, index_array(p.unactuated, p.m))


# ------------------------------------------------------------------------------------------ the problem record
KERNELS = (noslip_solve, coulomb_solve, two_stages, _reduce)


def controller_problems(quadruped: RobotModel, arm: RobotModel) -> list[tuple[str, ContactProblem]]:
    """Problems a controller builds on every path of its assembly: four feet, one foot (a contact mask), none (in
    the air), the contact activation filter, and the arm with its box (m = nv + 6)."""
    out = []
    stand = quadruped.standing_configuration()
    lifted = stand.copy()
    lifted[2] += 0.5
    rng = np.random.default_rng(3)
    for label, robot, q, options, mask in (
        ("four feet", quadruped, stand, {}, None),
        ("one foot", quadruped, stand, {}, np.array([True, False, False, False])),
        ("in the air", quadruped, lifted, {}, None),
        ("activation filter", quadruped, stand, {"activation_distance": 0.01}, None),
        ("arm and box", arm, arm.standing_configuration(), {}, None),
    ):
        controller = InverseDynamicsController(robot, **options)
        state = RobotState(q, rng.normal(0.0, 0.1, robot.nv), objects=controller.initial_object_states())
        out.append((label, controller.build_problem(state, rng.normal(0.0, 1.0, robot.nu), contact_mask=mask)[0]))
    return out


def test_a_controller_s_record_has_the_type_every_compiled_solve_declares(quadruped, arm):
    """The record a controller's assembly builds is of the one record type each formulation's compiled solve
    declares as its first argument, on every path of the assembly."""
    for kernel in KERNELS:
        assert kernel.signatures[0][0] == PROBLEM, kernel.__name__
    for label, p in controller_problems(quadruped, arm):
        assert numba.typeof(p.record) == PROBLEM, label


def test_a_changed_field_changes_the_record(quadruped, arm):
    """A problem's record follows its fields: replaced, assigned, or the rows a solve changed, the record is the
    new fields' (κ = −Δt f_ext − M v⁻ and R = [N; S; T] of the reduction read back)."""
    p = controller_problems(quadruped, arm)[0][1]
    changed = [
        replace(p),
        replace(p, mu=np.zeros(p.n)),
        replace(p, dt=2 * p.dt),
        replace(p, actuated=index_array(p.actuated, p.m)),
        p.with_rows(2 * p.S, p.T, p.qd_des),
    ]
    assigned = replace(p)
    assert assigned.record is not None  # built here, then dropped by the assignment below
    assigned.M = 2 * p.M
    changed.append(assigned)
    for q in changed:
        red = ReducedDynamics(q)
        np.testing.assert_allclose(red.kappa, -q.dt * q.f_ext - q.M @ q.v, rtol=1e-12, atol=1e-12)
        np.testing.assert_array_equal(red.R, np.vstack([q.N, q.S, q.T]))


@pytest.mark.parametrize("formulation", ["two_stage_qp", "coulomb_lcp", "noslip_lcp"])
def test_the_assembly_s_record_is_solved_as_one_built_from_the_fields(quadruped, arm, formulation):
    """The same problem solved with the record the controller's assembly built and with one built from its fields
    gives bit-identical torques, velocities and forces, on every path of the assembly."""
    for label, p in controller_problems(quadruped, arm):
        results = []
        for problem in (p, replace(p)):
            solver = InverseDynamicsController(
                quadruped if p.m == quadruped.nv else arm, formulation=formulation
            ).formulation
            results.append(solver.solve(problem))
        assembled, built = results
        assert assembled.found == built.found, label
        for name in ("tau", "v_next", "f_normal", "f_s", "f_t"):
            np.testing.assert_array_equal(getattr(assembled, name), getattr(built, name), err_msg=f"{label}: {name}")
