"""The hand-written small dense factorizations (idcontrol.solvers.dense) against numpy's LAPACK-backed ones."""

from __future__ import annotations

import math

import numpy as np
import pytest
from numba import njit

from idcontrol.solvers.dense import (
    apply_reflections,
    cholesky_in_place,
    cholesky_solve_in_place,
    gram,
    gram_by_loops,
    gram_cholesky,
    householder_step,
    least_norm_lstsq,
    lower_inverse,
)

SIZES = (1, 2, 6, 12, 18)


def _spd(rng: np.random.Generator, n: int, condition: float = 1e3) -> np.ndarray:
    Q, _ = np.linalg.qr(rng.standard_normal((n, n)))
    return (Q * np.geomspace(1.0, 1.0 / condition, n)) @ Q.T


@njit
def _factor(A):
    L = A.copy()
    ok = cholesky_in_place(L)
    for i in range(L.shape[0]):
        for j in range(i + 1, L.shape[0]):
            L[i, j] = 0.0
    return ok, L


@njit
def _solve(A, b):
    L = A.copy()
    cholesky_in_place(L)
    x = b.copy()
    cholesky_solve_in_place(L, x)
    return x


@njit
def _inverse(L):
    out = np.zeros_like(L)
    lower_inverse(L, out)
    return out


@njit
def _qr(A):
    """Householder QR of A (d, c), d ≥ c: (Q (d, d), R (d, c)) from householder_step and apply_reflections."""
    d, c = A.shape
    R = A.copy()
    V = np.zeros((d, c))
    for j in range(c):
        norm = 0.0
        for i in range(j, d):
            norm += R[i, j] * R[i, j]
        householder_step(R, V, j, np.sqrt(norm), c)
    Q = np.eye(d)
    apply_reflections(V, Q, True)
    return Q, R


@pytest.mark.parametrize("n", SIZES)
def test_cholesky_is_lapacks_on_random_and_ill_conditioned_matrices(n: int) -> None:
    """L Lᵀ = A to 1e-14 relative (backward stable), and L equals numpy.linalg.cholesky's to the forward error
    bound of both, 1e-15·κ relative, for condition numbers κ from 10 to 1e12."""
    rng = np.random.default_rng(n)
    for condition in (1e1, 1e6, 1e12):
        for _ in range(20):
            A = _spd(rng, n, condition)
            ok, L = _factor(A)
            assert ok
            np.testing.assert_allclose(L @ L.T, A, atol=1e-14 * np.abs(A).max())
            np.testing.assert_allclose(L, np.linalg.cholesky(A), atol=1e-15 * condition * np.abs(L).max())


@pytest.mark.parametrize("n", SIZES)
def test_cholesky_refuses_what_lapack_refuses(n: int) -> None:
    """Indefinite, negative definite and zero matrices: False where numpy.linalg.cholesky raises."""
    rng = np.random.default_rng(100 + n)
    X = rng.standard_normal((n, n))
    indefinite = X + X.T - (np.abs(np.linalg.eigvalsh(X + X.T)).max() + 1.0) * np.eye(n) * (n > 1)
    for A in (-_spd(rng, n), np.zeros((n, n)), indefinite):
        with pytest.raises(np.linalg.LinAlgError):
            np.linalg.cholesky(A)
        assert not _factor(A)[0]


@pytest.mark.parametrize("n", SIZES)
def test_cholesky_solve_is_numpys_solve(n: int) -> None:
    """(L Lᵀ)⁻¹ b equals numpy.linalg.solve(A, b) to their forward error bound, 1e-15·κ relative (κ ≤ 1e6)."""
    rng = np.random.default_rng(200 + n)
    for condition in (1e1, 1e6):
        for _ in range(20):
            A, b = _spd(rng, n, condition), rng.standard_normal(n)
            expected = np.linalg.solve(A, b)
            np.testing.assert_allclose(_solve(A, b), expected, atol=1e-15 * condition * np.abs(expected).max())


@pytest.mark.parametrize("n", SIZES)
def test_lower_inverse_is_numpys_inverse(n: int) -> None:
    """L⁻¹ of a Cholesky factor equals numpy.linalg.inv(L) (1e-10 relative) and is lower triangular."""
    rng = np.random.default_rng(300 + n)
    for _ in range(20):
        L = np.linalg.cholesky(_spd(rng, n, 1e4))
        inverse = _inverse(L)
        expected = np.linalg.inv(L)
        np.testing.assert_allclose(inverse, expected, atol=1e-10 * np.abs(expected).max())
        assert not np.triu(inverse, 1).any()


def test_gram_cholesky_factors_the_chosen_columns_gram_matrix() -> None:
    """The Cholesky factor of BₐᵀBₐ (rows and columns chosen) equals numpy's; a dependent set is not factored."""
    rng = np.random.default_rng(4)
    B = rng.standard_normal((6, 9))
    active = np.array([7, 2, 4], dtype=np.intp)
    L, factored, low, high = gram_cholesky(B, 6, active, 3)
    Ba = B[:, active]
    np.testing.assert_allclose(np.tril(L), np.linalg.cholesky(Ba.T @ Ba), atol=1e-12)
    assert factored and 0.0 < low <= high
    B[:, 4] = B[:, 2] + B[:, 7]
    assert not gram_cholesky(B, 6, active, 3)[1] or gram_cholesky(B, 6, active, 3)[2] < 1e-6


@pytest.mark.parametrize(("d", "c"), [(1, 1), (6, 3), (12, 6), (30, 12), (96, 6)])
def test_householder_steps_are_a_qr_decomposition(d: int, c: int) -> None:
    """Q orthogonal, R upper triangular, Q R = A (1e-12), and |R| equal to numpy.linalg.qr's up to signs."""
    rng = np.random.default_rng(d * 100 + c)
    A = rng.standard_normal((d, c))
    Q, R = _qr(A)
    np.testing.assert_allclose(Q.T @ Q, np.eye(d), atol=1e-12)
    assert not np.tril(R[:c], -1).round(12).any() and not R[c:].round(12).any()
    np.testing.assert_allclose(Q @ R, A, atol=1e-12 * np.abs(A).max())
    np.testing.assert_allclose(np.abs(R[:c]), np.abs(np.linalg.qr(A)[1]), atol=1e-12 * np.abs(A).max())


@pytest.mark.parametrize(
    ("r", "c"),
    [(6, 0), (0, 4), (6, 1), (6, 6), (12, 3), (12, 6), (24, 6), (6, 9), (6, 12), (6, 20), (48, 6), (12, 90), (6, 96)],
)
def test_gram_is_the_exactly_symmetric_blas_product(r: int, c: int) -> None:
    """AᵀA on both sides of the loops/BLAS switch, for a C-ordered A and its transposed view, full rank and of rank
    one: numpy's A.T @ A to 1e-13 relative, exactly symmetric, and the loops' result to the same tolerance."""
    rng = np.random.default_rng(r * 1000 + c)
    for A in (rng.standard_normal((r, c)), np.outer(rng.standard_normal(r), rng.standard_normal(c))):
        for X in (A, np.ascontiguousarray(A.T).T):
            G = gram(X)
            expected = A.T @ A
            scale = max(1.0, float(np.abs(expected).max(initial=0.0)))
            np.testing.assert_allclose(G, expected, atol=1e-13 * scale)
            np.testing.assert_array_equal(G, G.T)
            np.testing.assert_allclose(G, gram_by_loops(X), atol=1e-13 * scale)


def _rank_deficient(rng: np.random.Generator, r: int, c: int, rank: int) -> np.ndarray:
    return rng.standard_normal((r, rank)) @ rng.standard_normal((rank, c))


@pytest.mark.parametrize(("r", "c"), [(1, 1), (3, 12), (6, 6), (8, 12), (12, 6), (12, 12), (18, 12), (24, 18)])
def test_least_norm_lstsq_is_numpys_minimum_norm_least_squares(r: int, c: int) -> None:
    """The complete orthogonal decomposition gives numpy.linalg.lstsq's (gelsd) answer to 1e-12 relative on full-rank,
    rank-deficient (products of rank 1 .. min − 1, repeated and zero columns, zero rows) and zero systems."""
    rng = np.random.default_rng(r * 100 + c)
    systems = [rng.standard_normal((r, c)), np.zeros((r, c))]
    for rank in range(1, min(r, c)):
        systems.append(_rank_deficient(rng, r, c, rank))
    if c > 1:
        repeated = rng.standard_normal((r, c))
        repeated[:, -1] = repeated[:, 0]
        repeated[:, c // 2] = 0.0
        systems.append(repeated)
    if r > 1:
        zero_row = rng.standard_normal((r, c))
        zero_row[r // 2] = 0.0
        systems.append(zero_row)
    for A in systems:
        b = rng.standard_normal(r)
        expected = np.linalg.lstsq(A, b, rcond=1e-9)[0]
        scale = max(1.0, float(np.abs(expected).max()))
        np.testing.assert_allclose(least_norm_lstsq(A, b, 1e-9), expected, rtol=0, atol=1e-12 * scale)


def _kahan(n: int, c: float) -> np.ndarray:
    """Kahan's upper-triangular matrix: column pivoting leaves it as it is, its diagonal s^(n−1) looks harmless, and
    its smallest singular value is orders of magnitude below that."""
    s = math.sqrt(1.0 - c * c)
    K = np.triu(-c * np.ones((n, n)), 1) + np.eye(n)
    return np.diag(s ** np.arange(n)) @ K * (1.0 - 1e-10 * np.arange(n))  # (the perturbation keeps the order)


@pytest.mark.parametrize(("n", "c", "rcond"), [(8, 0.6, 1e-2), (10, 0.7, 1e-3), (12, 0.6, 1e-3), (12, 0.7, 1e-4)])
def test_least_norm_lstsq_finds_the_rank_the_diagonal_hides(n: int, c: float, rcond: float) -> None:
    """On Kahan's matrices, where every diagonal entry passes rcond · |R₀₀| but the smallest singular value is below
    rcond · σ_max, the answer drops the ill-conditioned direction as gelsd does: its norm within 3 × gelsd's (a
    truncated QR keeps other directions than a truncated SVD; the diagonal test alone returned answers up to 230 ×
    longer: the 1/σ_min blow-up), its residual below ‖b‖."""
    A = _kahan(n, c)
    sigma = np.linalg.svd(A, compute_uv=False)
    assert np.abs(np.diag(A)).min() > rcond * np.abs(A[:, 0]).max() and sigma[-1] < rcond * sigma[0]
    rng = np.random.default_rng(n)
    for _ in range(5):
        b = rng.standard_normal(n)
        expected = np.linalg.lstsq(A, b, rcond=rcond)[0]
        x = least_norm_lstsq(A, b, rcond)
        assert np.linalg.norm(x) <= 3.0 * np.linalg.norm(expected)
        assert np.linalg.norm(A @ x - b) < np.linalg.norm(b)


def test_least_norm_lstsq_keeps_the_residual_orthogonal_to_the_range() -> None:
    """Aᵀ(A x − b) = 0 and x ⟂ null(A) on 500 random shapes and ranks (the two conditions that define the answer)."""
    rng = np.random.default_rng(7)
    for _ in range(500):
        r, c = (int(x) for x in rng.integers(1, 19, size=2))
        rank = int(rng.integers(1, min(r, c) + 1))
        A = _rank_deficient(rng, r, c, rank)
        b = rng.standard_normal(r)
        x = least_norm_lstsq(A, b, 1e-9)
        scale = np.abs(A).max() * (np.abs(b).max() + np.abs(A).max() * np.abs(x).max())
        np.testing.assert_allclose(A.T @ (A @ x - b), 0.0, atol=1e-11 * scale)
        _, s, vt = np.linalg.svd(A)
        null = vt[int(np.sum(s > 1e-9 * s[0])) :]
        np.testing.assert_allclose(null @ x, 0.0, atol=1e-11 * max(1.0, np.abs(x).max()))
