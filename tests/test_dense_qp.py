"""The persistent DAQP workspace (idcontrol.solvers.qp.DenseQP) against a generic QP front end, on both of its paths
(DAQP's C API from compiled code, and daqp.Model)."""

from __future__ import annotations

import numpy as np
import pytest
import qpsolvers

from idcontrol.solvers import daqp_native
from idcontrol.solvers.qp import INFINITY, DenseQP


@pytest.fixture(params=[True, False], ids=["native", "model"])
def native(request: pytest.FixtureRequest) -> bool:
    if request.param and not daqp_native.native_available():
        pytest.skip(f"DAQP's compiled path is off here: {daqp_native.native_status()}")
    return request.param


def test_equality_rows_match_a_generic_solver(native: bool) -> None:
    """min ½‖x − x₀‖² with inequality rows G x ≤ h and equality rows A x = b: DenseQP with ``equalities``
    gives qpsolvers' (DAQP back end) solution to 1e-9 on 50 random feasible problems, box bounds or not."""
    rng = np.random.default_rng(7)
    for case in range(50):
        n, m_in, m_eq = 12, int(rng.integers(0, 6)), int(rng.integers(1, 5))
        x_feasible = rng.standard_normal(n)
        G, A = rng.standard_normal((m_in, n)), rng.standard_normal((m_eq, n))
        h, b = G @ x_feasible + rng.uniform(0.0, 1.0, m_in), A @ x_feasible
        x0 = rng.standard_normal(n)
        box = case % 2 == 1
        lb, ub = (np.full(n, -10.0), np.full(n, 10.0)) if box else (None, None)
        expected = qpsolvers.solve_qp(
            np.eye(n), -x0, G if m_in else None, h if m_in else None, A, b, lb, ub, solver="daqp"
        )
        C = np.vstack([G, A])
        upper = np.concatenate([h, b])
        lower = np.full(m_in + m_eq, -INFINITY)
        sol = DenseQP(primal_tol=1e-6, native=native).solve(np.eye(n), -x0, C, lower, upper, lb, ub, equalities=m_eq)
        assert sol.found
        np.testing.assert_allclose(sol.x, expected, atol=1e-9)
        np.testing.assert_allclose(A @ sol.x, b, atol=1e-9)


def test_a_cold_retry_keeps_the_equality_rows(native: bool) -> None:
    """A stale warm start that fails is retried cold; the equality rows stay equalities in the retry."""
    qp = DenseQP(native=native)
    H, g = np.eye(2), np.array([-1.0, -1.0])
    C, lower, upper = np.array([[1.0, 1.0], [1.0, -1.0]]), np.array([-INFINITY, -INFINITY]), np.array([1.0, 0.5])
    sol = qp.solve(H, g, C, lower, upper, active=np.array([1, 0], dtype=np.int32), equalities=1)
    assert sol.found
    assert abs(sol.x[0] - sol.x[1] - 0.5) < 1e-9  # the equality row holds


def test_a_problem_rejected_at_set_up_is_not_found(native: bool) -> None:
    """More equality rows than variables: DAQP rejects the set-up (exit −6); the solve says found=False with
    that status and keeps no workspace, and a later solvable problem of other sizes still solves."""
    qp = DenseQP(native=native)
    C = np.array([[1.0, 0.0], [0.0, 1.0], [1.0, 1.0]])
    b = np.array([1.0, 1.0, 1.0])
    sol = qp.solve(np.eye(2), np.zeros(2), C, np.full(3, -INFINITY), b, equalities=3)
    assert not sol.found and sol.status == "daqp exit -6"
    assert qp.solve(np.eye(2), np.zeros(2), C[:1], np.full(1, -INFINITY), b[:1], equalities=1).found


def test_both_paths_start_and_retry_alike() -> None:
    """On one sequence of warm, given, stale and cold starts over two problem sizes, the compiled path and
    daqp.Model give the same exit flags, iteration counts, x (to 1e-12) and active sets after each solve."""
    if not daqp_native.native_available():
        pytest.skip(f"DAQP's compiled path is off here: {daqp_native.native_status()}")
    rng = np.random.default_rng(11)
    paths = [DenseQP(native=True), DenseQP(native=False)]
    for step in range(40):
        n = 6 if step % 5 else 4  # another size now and then: a warm start only from the same size
        rows = 2 * n
        B = rng.standard_normal((n, n))
        H = B @ B.T + 0.1 * np.eye(n)
        g = rng.standard_normal(n)
        C = rng.standard_normal((rows, n))
        lower, upper = np.full(rows, -INFINITY), rng.uniform(-0.5, 1.0, rows)
        active = rng.integers(0, 2, n + rows).astype(np.int32) if step % 7 == 3 else None  # often stale
        lb, ub = np.full(n, -2.0), np.full(n, 2.0)
        solutions = [qp.solve(H, g, C, lower, upper, lb, ub, warm=step % 3 != 0, active=active) for qp in paths]
        native, model = solutions
        assert (native.exitflag, native.iterations) == (model.exitflag, model.iterations), step
        np.testing.assert_allclose(native.x, model.x, rtol=0, atol=1e-12)
        flags = [qp.last_active for qp in paths]
        assert (flags[0] is None) == (flags[1] is None)
        if flags[0] is not None:
            np.testing.assert_array_equal(flags[0], flags[1])
