"""Stage II's null-space basis (Householder QR with an SVD fallback) against the SVD it replaces."""

from __future__ import annotations

import numpy as np
import pytest

from idcontrol.formulations.two_stage_qp.null_space import null_basis, null_space_basis


def _svd_null_space(R_w: np.ndarray, null_tol: float) -> np.ndarray:
    _, singular, vt = np.linalg.svd(R_w, full_matrices=True)
    return null_basis(vt, singular, null_tol)


@pytest.mark.parametrize(
    ("nb", "q", "dependent_rows"), [(6, 12, 0), (6, 96, 0), (12, 30, 0), (6, 12, 1), (6, 12, 3), (6, 4, 0), (0, 5, 0)]
)
def test_null_space_basis_spans_the_svd_null_space(nb: int, q: int, dependent_rows: int) -> None:
    """Orthonormal, annihilated by R_w, and the same subspace as the SVD's (full rank, rank-deficient, q ≤ nb)."""
    rng = np.random.default_rng(nb * 1000 + q + dependent_rows)
    for _ in range(20):
        R_w = rng.standard_normal((nb, q))
        for i in range(dependent_rows):  # rows that repeat combinations of others: R_w loses row rank
            R_w[nb - 1 - i] = rng.standard_normal(nb - dependent_rows) @ R_w[: nb - dependent_rows]
        W = null_space_basis(R_w, 1e-9)
        expected = _svd_null_space(R_w, 1e-9) if nb else np.eye(q)
        assert W.shape == expected.shape
        np.testing.assert_allclose(W.T @ W, np.eye(W.shape[1]), atol=1e-12)
        np.testing.assert_allclose(R_w @ W, 0.0, atol=1e-12 * max(1.0, np.abs(R_w).max(initial=0.0)))
        np.testing.assert_allclose(W @ W.T, expected @ expected.T, atol=1e-10)
