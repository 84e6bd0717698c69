"""Algorithms 1 and 2 against independent references."""

from __future__ import annotations

import itertools

import numpy as np
import pytest
import qpsolvers

from idcontrol.formulations.noslip_lcp import find_indices
from idcontrol.solvers.lcp import lcp_residuals
from idcontrol.solvers.ppm import active_set, ppm


def _qp_reference(Q: np.ndarray, r: np.ndarray) -> np.ndarray | None:
    """The convex QP equivalent of a PSD LCP: min ½zᵀQz + rᵀz, z ≥ 0 (DAQP, a dual active-set solver).

    None when the QP is unbounded below, i.e. the LCP has no solution.
    """
    return qpsolvers.solve_qp(Q, r, lb=np.zeros(len(r)), solver="daqp")


@pytest.mark.parametrize("seed", range(300))
def test_ppm_agrees_with_convex_qp_on_random_psd_lcps(seed: int) -> None:
    """On random PSD LCP(r, BᵀB), PPM solves the LCP and matches the QP's objective and w = Qz + r."""
    rng = np.random.default_rng(seed)
    d = int(rng.integers(1, 7))
    n = int(rng.integers(1, 25))
    B = rng.standard_normal((d, n))
    if seed % 3 == 0:  # redundant, duplicated columns (indeterminate contacts)
        B[:, n // 2 :] = B[:, : n - n // 2]
    r = rng.standard_normal(n)
    if seed % 5 == 0:
        r = -np.abs(r)
    if seed % 7 == 0:  # a feasible, well-posed case: r in the range of Bᵀ plus a positive part
        r = B.T @ rng.standard_normal(d) + np.abs(rng.standard_normal(n))
    Q = B.T @ B
    sol = ppm(B, r)
    z_ref = _qp_reference(Q, r)
    if z_ref is None or lcp_residuals(Q, r, z_ref).worst > 1e-6:  # no solution exists: PPM must not claim one
        assert not sol.found or lcp_residuals(Q, r, sol.z, sol.w).worst <= 1e-8 * max(1.0, np.abs(r).max())
        return
    if not sol.found:  # documented fallback path: the caller switches to Lemke
        assert any(word in sol.message for word in ("singular", "ill-conditioned", "rank bound", "cap", "check"))
        return
    res = lcp_residuals(Q, r, sol.z, sol.w)
    assert res.worst <= 1e-8 * max(1.0, np.abs(r).max())
    objective = 0.5 * sol.z @ Q @ sol.z + r @ sol.z
    objective_ref = 0.5 * z_ref @ Q @ z_ref + r @ z_ref
    assert objective <= objective_ref + 1e-9 * max(1.0, abs(objective_ref))  # PPM is exact: never worse
    assert objective == pytest.approx(objective_ref, abs=1e-6 * max(1.0, abs(objective_ref)))
    # w = Qz + r is unique over a PSD LCP's solutions; DAQP's default tolerances are about 1e-6.
    np.testing.assert_allclose(Q @ sol.z + r, Q @ z_ref + r, atol=1e-5 * max(1.0, np.abs(r).max()))


@pytest.mark.parametrize("d,n", [(1, 4), (6, 4), (6, 20), (3, 20), (6, 64), (2, 128)])
def test_active_set_solves_every_solvable_rank_deficient_lcp(d: int, n: int) -> None:
    """The active-set fallback solves every random solvable LCP(r, BᵀB), including n ≫ rank B where PPM stalls."""
    for seed in range(60):
        rng = np.random.default_rng(10_000 + seed)
        B = rng.standard_normal((d, n))
        r = B.T @ (-np.abs(rng.standard_normal(d))) + 0.3 * np.abs(rng.standard_normal(n))  # a pushed-in contact set
        Q = B.T @ B
        z_ref = _qp_reference(Q, r)
        sol = active_set(B, r)
        if z_ref is None:
            continue
        assert sol.found, sol.message
        assert lcp_residuals(Q, r, sol.z, sol.w).worst <= 1e-8 * max(1.0, np.abs(r).max())
        np.testing.assert_allclose(Q @ sol.z + r, Q @ z_ref + r, atol=1e-5 * max(1.0, np.abs(r).max()))
        warm = active_set(B, r, sol.active)
        assert warm.found and warm.pivots <= 2  # warm-started from its own active set: at most one check


def test_ppm_trivial_solution_when_r_nonnegative() -> None:
    """r ≥ 0 gives z = 0 with no pivot and an empty active set."""
    sol = ppm(np.ones((3, 4)), np.array([0.0, 1.0, 2.0, 3.0]))
    assert sol.found and sol.pivots == 0 and sol.active == [] and not sol.z.any()


def test_a_numerically_zero_lcp_matrix_is_reported_unsolved_not_solved_with_inf() -> None:
    """B with columns of norm ~1e-155 (every normal direction spanned by the kept tangential rows, seen on a
    rough-terrain stance) and a negative r: no finite solution exists; PPM and the active-set method say so
    instead of returning z = inf as solved."""
    B = np.full((6, 4), 6e-156)
    r = np.array([-58.2, 2424.5, -2148.4, 255.2])
    for solver in (ppm, active_set):
        solution = solver(B, r)
        assert not solution.found or (np.isfinite(solution.z).all() and np.isfinite(solution.w).all()), solver
        if solution.found:  # a finite answer must then really solve LCP(r, BᵀB)
            assert lcp_residuals(B.T @ B, r, solution.z).worst <= 1e-8 * np.abs(r).max()


def test_ppm_warm_start_reuses_the_active_set() -> None:
    """Warm-started from its own active set, PPM returns the same solution in a single iteration."""
    rng = np.random.default_rng(3)
    B = rng.standard_normal((6, 6))
    r = B.T @ (-np.abs(rng.standard_normal(6))) + 0.3 * np.abs(rng.standard_normal(6))
    cold = ppm(B, r)
    assert cold.found
    warm = ppm(B, r, cold.active)
    assert warm.found and warm.pivots == 1
    np.testing.assert_allclose(warm.z, cold.z, atol=1e-12)


def test_find_indices_matches_the_papers_greedy_singularity_test() -> None:
    """Find-Indices keeps exactly the columns the paper's Xᵀ M⁻¹ X test would keep, in order."""
    for seed in range(50):
        rng = np.random.default_rng(seed)
        d = int(rng.integers(1, 7))
        k = int(rng.integers(1, 12))
        X = rng.standard_normal((d, k))
        for j in range(1, k):  # dependent columns
            if rng.random() < 0.3:
                X[:, j] = X[:, :j] @ rng.standard_normal(j)
        M = np.eye(d)  # columns are whitened: M⁻¹ = I
        expected: list[int] = []
        for j in range(k):
            trial = X[:, expected + [j]]
            if np.linalg.matrix_rank(trial.T @ np.linalg.solve(M, trial), tol=1e-8) == len(expected) + 1:
                expected.append(j)
        kept = find_indices(X)
        assert kept.selected == expected
        np.testing.assert_allclose(kept.basis @ kept.triangular, X[:, kept.selected], atol=1e-10)
        np.testing.assert_allclose(kept.basis.T @ kept.basis, np.eye(len(expected)), atol=1e-10)


def test_find_indices_keeps_at_most_the_dimension() -> None:
    """No more rows than the unactuated dimension are kept, however many contacts there are."""
    rng = np.random.default_rng(0)
    X = rng.standard_normal((6, 256))
    assert find_indices(X).selected == list(range(6))
    assert list(itertools.islice(find_indices(np.zeros((6, 4))).selected, 1)) == []


@pytest.mark.parametrize("seed", range(40))
def test_ppm_with_a_diagonal_is_bit_for_bit_the_stacked_factor(seed: int) -> None:
    """LCP(r, BᵀB + diag(s)²) given as B and s (the Tikhonov rows never formed) gives exactly the z, w, pivots and
    status of the same LCP given as the stacked factor [B; diag(s)] (zero rows of diag(s) left out)."""
    rng = np.random.default_rng(9000 + seed)
    d, n = int(rng.integers(1, 7)), int(rng.integers(2, 40))
    B = rng.standard_normal((d, n))
    if seed % 3 == 0:
        B[:, n // 2 :] = B[:, : n - n // 2]  # duplicated columns: without s the LCP is indeterminate there
    s = np.where(rng.random(n) < 0.7, 0.1 * rng.random(n) * np.linalg.norm(B, axis=0), 0.0)
    r = rng.standard_normal(n) - 0.5
    warm = rng.choice(n, size=int(rng.integers(0, n)), replace=False)
    stacked = np.vstack([B, np.diag(s)[s != 0.0]])
    compact = ppm(B, r, warm, diagonal=s)
    full = ppm(stacked, r, warm)
    assert (compact.found, compact.pivots, compact.active, compact.message) == (
        full.found,
        full.pivots,
        full.active,
        full.message,
    )
    np.testing.assert_array_equal(compact.z, full.z)
    np.testing.assert_array_equal(compact.w, full.w)
    if compact.found:
        Q = B.T @ B + np.diag(s * s)
        assert lcp_residuals(Q, r, compact.z, compact.w).worst <= 1e-8 * max(1.0, np.abs(r).max())
