"""Lemke's method, its regularized fallback, brute-force enumeration and MINDIFF.

Brute-force enumeration of all 2ⁿ complementary index sets is the independent
reference: every claim about Lemke is checked against it and against
:func:`lcp_residuals`, never against Lemke itself.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis.extra.numpy import arrays

from idcontrol.errors import InputError, NonFiniteError, ShapeError
from idcontrol.solvers.enumeration import enumerate_lcp_solutions, mindiff
from idcontrol.solvers.lcp import lcp_residuals
from idcontrol.solvers.lemke import (
    FACE_EXACT,
    FACE_LEAST_SQUARES,
    FACE_NONE,
    SPREAD_EXACT,
    SPREAD_LEAST_SQUARES,
    SPREAD_NEAR,
    face_solution,
    lemke,
    lemke_regularized,
    nearest_on_face,
    settle_spread,
    spread_answered_gap,
)

Problem = tuple[np.ndarray, np.ndarray]


# ----------------------------------------------------------------------------------------------------------------------
# problem families (all copositive)


def psd_problem(rng: np.random.Generator) -> Problem:
    """M = A Aᵀ with A (n, r), r ≤ n (often rank-deficient)."""
    n = int(rng.integers(1, 9))
    A = rng.standard_normal((n, int(rng.integers(1, n + 1))))
    return A @ A.T, rng.standard_normal(n) * rng.choice([1.0, 10.0])


def pd_problem(rng: np.random.Generator) -> Problem:
    """M = A Aᵀ + c I, c > 0 (unique solution)."""
    n = int(rng.integers(1, 9))
    A = rng.standard_normal((n, n))
    return A @ A.T + rng.uniform(0.05, 1.0) * np.eye(n), rng.standard_normal(n) * rng.choice([1.0, 10.0])


def skew_problem(rng: np.random.Generator) -> Problem:
    """M = [[GᵀG, B], [−Bᵀ, 0]]: PSD block with skew-symmetric coupling."""
    n = int(rng.integers(1, 9))
    k = int(rng.integers(1, n)) if n > 1 else 1
    G = rng.standard_normal((int(rng.integers(1, k + 2)), k))
    B = rng.standard_normal((k, n - k))
    M = np.zeros((n, n))
    M[:k, :k] = G.T @ G
    M[:k, k:] = B
    M[k:, :k] = -B.T
    return M, rng.standard_normal(n)


def coulomb_problem(rng: np.random.Generator, contacts: int = 1, structured: bool | None = None) -> Problem:
    """Coulomb-friction LCP [[NΓNᵀ, NΓFᵀ, 0], [FΓNᵀ, FΓFᵀ, E], [μ, −Eᵀ, 0]] with physical q = [q_N, s, −s, t, −t, 0].

    Γ = A Aᵀ (PSD, possibly singular); F = [S; −S; T; −T] (structured) or random 4k rows; E stacks I four times.
    """
    k = contacts
    if structured is None:
        structured = bool(rng.integers(2))
    m = int(rng.integers(2, 8))
    A = rng.standard_normal((m, int(rng.integers(1, m + 1))))
    Gamma = A @ A.T
    N = rng.standard_normal((k, m))
    S, T = rng.standard_normal((k, m)), rng.standard_normal((k, m))
    F = np.vstack([S, -S, T, -T]) if structured else rng.standard_normal((4 * k, m))
    mu = np.where(rng.random(k) < 0.15, 0.0, rng.uniform(0.1, 1.5, k))
    E = np.vstack([np.eye(k)] * 4)
    R = np.vstack([N, F])
    M = np.zeros((6 * k, 6 * k))
    M[: 5 * k, : 5 * k] = R @ Gamma @ R.T
    M[k : 5 * k, 5 * k :] = E
    M[5 * k :, k : 5 * k] = -E.T
    M[5 * k :, :k] = np.diag(mu)
    s, t = rng.standard_normal(k), rng.standard_normal(k)
    q = np.concatenate([rng.standard_normal(k) * 3.0, s, -s, t, -t, np.zeros(k)])
    return M, q


FAMILIES: dict[str, Callable[[np.random.Generator], Problem]] = {
    "psd": psd_problem,
    "pd": pd_problem,
    "skew": skew_problem,
    "coulomb": coulomb_problem,
}


def is_isolated(M: np.ndarray, q: np.ndarray, z: np.ndarray) -> bool:
    """True if z is strictly complementary with a well-conditioned active block (a locally unique solution)."""
    w = M @ z + q
    if np.min(z + w) <= 1e-7 * max(1.0, np.abs(z).max(), np.abs(q).max()):
        return False
    a = z > 0
    return not a.any() or np.linalg.cond(M[np.ix_(a, a)]) < 1e8


def is_among(z: np.ndarray, solutions: list[np.ndarray], tol: float = 1e-6) -> bool:
    """True if z equals one of ``solutions`` to ``tol`` (relative to max(1, |s|))."""
    return any(np.abs(z - s).max() <= tol * max(1.0, np.abs(s).max()) for s in solutions)


# ----------------------------------------------------------------------------------------------------------------------
# random copositive LCPs against enumeration


def check_against_enumeration(M: np.ndarray, q: np.ndarray) -> None:
    """Shared assertions: Lemke solves iff enumeration finds a solution; valid residuals; same solution if isolated."""
    solutions = enumerate_lcp_solutions(M, q)
    sol = lemke(M, q)
    assert sol.found == bool(solutions), sol.message
    if not sol.found:
        assert sol.message
        return
    assert lcp_residuals(M, q, sol.z, sol.w).worst <= 1e-8
    assert sol.active == sorted(np.flatnonzero(sol.z > 0).tolist())
    if is_isolated(M, q, sol.z):
        assert is_among(sol.z, solutions)


@pytest.mark.parametrize("seed", range(75))
@pytest.mark.parametrize("family", sorted(FAMILIES))
def test_lemke_matches_enumeration(family: str, seed: int) -> None:
    """On a random copositive LCP Lemke succeeds exactly when enumeration finds a solution, and agrees with it."""
    rng = np.random.default_rng([seed, sorted(FAMILIES).index(family)])
    M, q = FAMILIES[family](rng)
    check_against_enumeration(M, q)


@pytest.mark.parametrize("seed", range(75))
def test_lemke_positive_definite_unique(seed: int) -> None:
    """For positive definite M the LCP has exactly one solution and Lemke returns it."""
    M, q = pd_problem(np.random.default_rng([seed, 99]))
    solutions = enumerate_lcp_solutions(M, q)
    assert len(solutions) == 1
    sol = lemke(M, q)
    assert sol.found
    np.testing.assert_allclose(sol.z, solutions[0], rtol=1e-6, atol=1e-6)


@pytest.mark.parametrize(("m_factor", "q_factor"), [(1e-8, 1e-6), (1e-4, 1e6), (1e4, 1e-6), (1e8, 1.0), (1e8, 1e6)])
def test_lemke_scale_invariant(m_factor: float, q_factor: float) -> None:
    """Scaling M and q by positive factors keeps the outcome and scales z by q_factor / m_factor."""
    for seed in range(40):
        family = sorted(FAMILIES)[seed % len(FAMILIES)]
        M, q = FAMILIES[family](np.random.default_rng([seed, 31]))
        ref, sol = lemke(M, q), lemke(m_factor * M, q_factor * q)
        assert sol.found == ref.found
        if ref.found and is_isolated(M, q, ref.z):
            np.testing.assert_allclose(sol.z * m_factor / q_factor, ref.z, rtol=1e-6, atol=1e-9 * np.abs(ref.z).max())


@pytest.mark.parametrize("seed", range(10))
def test_lemke_two_contact_coulomb(seed: int) -> None:
    """The 12-variable, two-contact Coulomb LCP is solved whenever enumeration finds a solution."""
    M, q = coulomb_problem(np.random.default_rng([seed, 7]), contacts=2)
    check_against_enumeration(M, q)


def test_random_families_are_nontrivial() -> None:
    """The seeded families mix solvable and unsolvable LCPs and need real pivoting (guards the test's power)."""
    solved = unsolved = pivots = 0
    for family in sorted(FAMILIES):
        for seed in range(75):
            M, q = FAMILIES[family](np.random.default_rng([seed, sorted(FAMILIES).index(family)]))
            sol = lemke(M, q)
            solved += sol.found
            unsolved += not sol.found
            pivots = max(pivots, sol.pivots)
    assert solved > 200 and unsolved > 20 and pivots >= 6


# Bounded floats on dyadic grids (A in [-3, 3] step 1/8, q in [-5, 5] step 1/64) keep the property off the
# tolerance boundary: with arbitrary floats, M = 0, q = -1e-30 is "solvable" to enumeration's tolerance but not
# exactly, and A = [1e-47, 1] has a solution only at |z| = 1e94, behind a pivot Lemke rightly treats as zero.
psd_data = st.integers(1, 5).flatmap(
    lambda n: st.integers(1, n).flatmap(
        lambda r: st.tuples(
            arrays(np.float64, (n, r), elements=st.integers(-24, 24).map(lambda k: k / 8.0)),
            arrays(np.float64, n, elements=st.integers(-320, 320).map(lambda k: k / 64.0)),
        )
    )
)


@settings(max_examples=150, deadline=None, derandomize=True)
@given(psd_data)
def test_lemke_psd_property(data: tuple[np.ndarray, np.ndarray]) -> None:
    """For PSD M = A Aᵀ and any q, Lemke finds a solution with residual ≤ 1e-8 or enumeration finds none."""
    A, q = data
    M = A @ A.T
    sol = lemke(M, q)
    if sol.found:
        assert lcp_residuals(M, q, sol.z, sol.w).worst <= 1e-8
    else:
        assert enumerate_lcp_solutions(M, q) == []


# ----------------------------------------------------------------------------------------------------------------------
# degenerate problems, trivial and failing cases

# Degenerate LCPs (repeated q entries and zeros, M with repeated columns) on which Lemke cycles when
# ratio ties are broken by the first (resp. last) tied row instead of lexicographically.
CYCLING = [
    pytest.param(
        np.array([[0, 2, 2, 0], [1, 2, 1, 1], [-1, 1, 2, -1], [2, 1, -1, 2]], float),
        -np.ones(4),
        "first",
        id="4x4-first-index-cycles",
    ),
    pytest.param(
        np.array(
            [
                [3, 0, 2, 0, -1, -1],
                [0, 4, 3, 0, 1, 1],
                [2, 3, 5, 2, 1, 1],
                [0, 0, 2, 5, 2, 2],
                [-1, 1, 1, 2, 3, 3],
                [1, 4, 5, 1, 1, 1],
            ],
            float,
        ),
        np.array([-1, -1, -1, 0, 0, -1], float),
        "last",
        id="6x6-last-index-cycles",
    ),
]


@pytest.mark.parametrize(("M", "q", "naive"), CYCLING)
def test_lexicographic_rule_prevents_cycling(M: np.ndarray, q: np.ndarray, naive: str) -> None:
    """A degenerate LCP that cycles under a naive tie-break is solved under the lexicographic rule."""
    sol = lemke(M, q)
    assert sol.found, sol.message
    assert lcp_residuals(M, q, sol.z, sol.w).worst <= 1e-12
    assert is_among(sol.z, enumerate_lcp_solutions(M, q))

    cycling = lemke(M, q, tie_break=naive)  # ties broken by the first (last) tied row of the ratio test
    assert not cycling.found and "cycles" in cycling.message  # the basis that came back ends the run ...
    assert cycling.pivots <= 2 * len(q) + 8  # ... at once, not at the cap of 50 n + 100 pivots


def test_a_basis_that_comes_back_ends_lemke_at_once_and_the_regularized_solve_answers() -> None:
    """A Coulomb LCP of the arm holding its box (24 variables: 4 contacts, the default spread on its diagonal;
    recorded in lock-step MuJoCo, ``launch/arm_grasp.toml --formulation coulomb_lcp``, tick 0.24 s): ties decided
    within the tolerance lead lexicographic Lemke back to a basis it held 4 pivots earlier. The run stops there
    (it went on to the 1300-pivot cap before: 850 µs of a 1 ms tick) and the Tikhonov fallback solves it, its
    answer an ε-near solution of the LCP itself."""
    data = np.load(Path(__file__).parent / "data" / "grasp_coulomb_lcp_cycling.npz")
    M, q = data["M"], data["q"]
    plain = lemke(M, q)
    assert not plain.found and "cycles" in plain.message and plain.pivots <= 2 * len(q) + 8
    regularized = lemke_regularized(M, q)
    assert regularized.found and 0.0 < regularized.regularization <= 1e-10
    assert regularized.pivots <= 2 * plain.pivots + 20  # both attempts together
    assert lcp_residuals(M, q, regularized.z).worst <= 1e-9 * max(1.0, np.abs(q).max(), np.abs(M).max())


def test_highly_degenerate_ties() -> None:
    """Equal q entries and identical columns (every ratio tied) still terminate with a valid solution."""
    n = 6
    M = np.ones((n, n)) + np.diag(np.r_[np.zeros(3), np.ones(3)])
    for q in (-np.ones(n), np.r_[-np.ones(3), np.zeros(3)], np.r_[np.zeros(3), -np.ones(3)]):
        sol = lemke(M, q)
        assert sol.found, sol.message
        assert lcp_residuals(M, q, sol.z, sol.w).worst <= 1e-12
        if is_isolated(M, q, sol.z):
            assert is_among(sol.z, enumerate_lcp_solutions(M, q))


@pytest.mark.parametrize("q", [np.array([1.0, 2.0, 0.5]), np.array([0.0, 3.0, 0.0]), np.zeros(3)])
def test_nonnegative_q_trivial(q: np.ndarray) -> None:
    """q ≥ 0 returns z = 0, w = q with zero pivots."""
    M = np.array([[1.0, -2.0, 0.0], [3.0, 1.0, 1.0], [0.0, 1.0, -1.0]])
    sol = lemke(M, q)
    assert sol.found and sol.pivots == 0 and sol.active == []
    np.testing.assert_array_equal(sol.z, np.zeros(3))
    np.testing.assert_array_equal(sol.w, q)


@pytest.mark.parametrize(
    ("M", "q"),
    [
        (np.array([[-1.0]]), np.array([-1.0])),
        (np.array([[0.0, 1.0], [-1.0, 0.0]]), np.array([-1.0, -1.0])),
        (np.array([[1.0, 0.0], [0.0, 0.0]]), np.array([-1.0, -1.0])),
    ],
)
def test_unsolvable_returns_not_found(M: np.ndarray, q: np.ndarray) -> None:
    """An LCP without solution gives found=False with a ray message and no exception, also when regularized."""
    assert enumerate_lcp_solutions(M, q) == []
    sol = lemke(M, q)
    assert not sol.found
    assert "ray" in sol.message
    reg = lemke_regularized(M, q)
    assert not reg.found and reg.message


def test_regularized_guard_on_original_residual() -> None:
    """Without the original-M guard, an infeasible PSD LCP is 'solved' with |z| ~ 1/ε; the guard refuses it."""
    M, q = np.diag([1.0, 0.0]), -np.ones(2)
    loose = lemke_regularized(M, q, original_tol=None)
    assert loose.found and loose.regularization > 0
    assert loose.z[1] == pytest.approx(1.0 / loose.regularization)
    guarded = lemke_regularized(M, q)
    assert not guarded.found and "violate" in guarded.message


def test_pivot_cap() -> None:
    """Hitting max_pivots gives found=False with a pivot-cap message."""
    M, q = np.eye(5) + 0.1, -np.arange(1.0, 6.0)
    assert lemke(M, q).pivots > 2
    sol = lemke(M, q, max_pivots=2)
    assert not sol.found and "pivot cap" in sol.message


def test_cover_vector() -> None:
    """A non-default covering vector reaches the same (unique) solution of a PD LCP."""
    M, q = pd_problem(np.random.default_rng(11))
    d = np.linspace(0.5, 2.0, len(q))
    np.testing.assert_allclose(lemke(M, q, cover=d).z, lemke(M, q).z, atol=1e-9)


def test_empty_problem() -> None:
    """n = 0 is solved trivially."""
    sol = lemke(np.zeros((0, 0)), np.zeros(0))
    assert sol.found and sol.z.shape == (0,)


# ----------------------------------------------------------------------------------------------------------------------
# regularized fallback


@pytest.mark.parametrize(
    ("M", "q"),
    [
        # copositive, not copositive-plus: plain Lemke hits a secondary ray although a solution exists
        (np.array([[2.0, -1.0, 1.0], [2.0, 0.0, 0.0], [1.0, 2.0, 0.0]]), np.array([2.0, -1.0, -1.0])),
        (np.array([[1.0, -1.0, 0.0], [1.0, 0.0, 2.0], [2.0, -2.0, 0.0]]), np.array([-1.0, 2.0, -1.0])),
    ],
)
def test_regularized_rescues_plain_failure(M: np.ndarray, q: np.ndarray) -> None:
    """lemke_regularized solves a solvable LCP plain Lemke fails on, reporting ε > 0 and an O(ε) residual on M."""
    assert not lemke(M, q).found
    solutions = enumerate_lcp_solutions(M, q)
    assert len(solutions) == 1
    sol = lemke_regularized(M, q)
    assert sol.found and sol.regularization > 0 and "M + εI" in sol.message
    assert lcp_residuals(M + sol.regularization * np.eye(3), q, sol.z, sol.w).worst <= 1e-9
    assert lcp_residuals(M, q, sol.z).worst <= 10 * sol.regularization * max(1.0, np.abs(sol.z).max())
    assert is_among(sol.z, solutions)


@pytest.mark.parametrize("seed", range(10))
def test_regularized_equals_plain_when_plain_succeeds(seed: int) -> None:
    """When plain Lemke succeeds, lemke_regularized returns the same pair with regularization 0."""
    M, q = coulomb_problem(np.random.default_rng([seed, 5]))
    plain, reg = lemke(M, q), lemke_regularized(M, q)
    assert reg.found == plain.found
    assert reg.regularization == 0.0
    np.testing.assert_array_equal(reg.z, plain.z)


# ----------------------------------------------------------------------------------------------------------------------
# enumeration and MINDIFF


def test_enumeration_lists_all_isolated_solutions() -> None:
    """M = [[1, 2], [2, 1]], q = −1 has exactly the three solutions (1, 0), (0, 1), (1/3, 1/3)."""
    solutions = enumerate_lcp_solutions(np.array([[1.0, 2.0], [2.0, 1.0]]), -np.ones(2))
    expected = [np.array([1.0, 0.0]), np.array([0.0, 1.0]), np.full(2, 1.0 / 3.0)]
    assert len(solutions) == 3
    assert all(is_among(e, solutions, 1e-12) for e in expected)


def test_enumeration_refuses_large_n() -> None:
    """Enumeration (and MINDIFF) refuse n > max_n with InputError."""
    with pytest.raises(InputError):
        enumerate_lcp_solutions(np.eye(15), -np.ones(15))
    with pytest.raises(InputError):
        mindiff(np.eye(5), -np.ones(5), lambda z: z, np.zeros(5), max_n=4)


def test_mindiff_known_example() -> None:
    """MINDIFF picks the solution of [[1, 2], [2, 1]], q = −1 whose x = 2z is nearest x_prev."""
    M, q = np.array([[1.0, 2.0], [2.0, 1.0]]), -np.ones(2)
    sol, dist = mindiff(M, q, lambda z: 2.0 * z, np.array([1.8, 0.0]))
    assert sol.found and sol.active == [0]
    np.testing.assert_allclose(sol.z, [1.0, 0.0])
    assert dist == pytest.approx(0.2)
    sol, dist = mindiff(M, q, lambda z: 2.0 * z, np.array([0.6, 0.7]))
    np.testing.assert_allclose(sol.z, [1.0 / 3.0, 1.0 / 3.0])
    assert lcp_residuals(M, q, sol.z, sol.w).worst <= 1e-12


def test_mindiff_matches_direct_loop() -> None:
    """On random LCPs with several solutions MINDIFF returns the enumerated solution nearest x_prev."""
    rng = np.random.default_rng(2024)
    multi = 0
    for _ in range(60):
        n = int(rng.integers(2, 6))
        M = rng.uniform(0.2, 2.0, (n, n))
        M[np.diag_indices(n)] = rng.uniform(0.05, 0.5, n)  # weak diagonal: many solutions
        q = -rng.uniform(0.5, 1.5, n)
        X = rng.standard_normal((3, n))
        x_prev = rng.standard_normal(3)
        solutions = enumerate_lcp_solutions(M, q)
        multi += len(solutions) > 1
        dists = [np.linalg.norm(X @ z - x_prev) for z in solutions]
        sol, dist = mindiff(M, q, lambda z, X=X: X @ z, x_prev)
        assert sol.found
        assert dist == pytest.approx(min(dists), abs=1e-12)
        np.testing.assert_allclose(sol.z, solutions[int(np.argmin(dists))], atol=1e-12)
        assert lcp_residuals(M, q, sol.z, sol.w).worst <= 1e-9
    assert multi >= 20


def test_mindiff_infeasible() -> None:
    """MINDIFF on an LCP with no solution returns found=False and infinite distance."""
    sol, dist = mindiff(np.array([[-1.0]]), np.array([-1.0]), lambda z: z, np.zeros(1))
    assert not sol.found and dist == np.inf and sol.message


def test_mindiff_bad_map_shape() -> None:
    """x_of_z returning a vector shaped unlike x_prev raises ShapeError."""
    with pytest.raises(ShapeError):
        mindiff(np.eye(2), -np.ones(2), lambda z: np.r_[z, 0.0], np.zeros(2))


# ----------------------------------------------------------------------------------------------------------------------
# input validation


@pytest.mark.parametrize(
    ("M", "q", "error"),
    [
        (np.ones((2, 3)), np.ones(2), ShapeError),
        (np.eye(3), np.ones(2), ShapeError),
        (np.eye(2), np.ones((2, 1)), ShapeError),
        (np.ones(4), np.ones(2), ShapeError),
        (np.array([[1.0, np.nan], [0.0, 1.0]]), np.ones(2), NonFiniteError),
        (np.eye(2), np.array([-1.0, np.inf]), NonFiniteError),
    ],
)
def test_bad_input_raises(M: np.ndarray, q: np.ndarray, error: type[Exception]) -> None:
    """Malformed or non-finite M, q raise ShapeError / NonFiniteError in every entry point."""
    for solve in (lemke, lemke_regularized, enumerate_lcp_solutions):
        with pytest.raises(error):
            solve(M, q)
    with pytest.raises(error):
        mindiff(M, q, lambda z: z, np.zeros(2))


def test_bad_cover_raises() -> None:
    """A covering vector of the wrong shape, non-finite or not positive is rejected."""
    M, q = np.eye(2), -np.ones(2)
    with pytest.raises(ShapeError):
        lemke(M, q, cover=np.ones(3))
    with pytest.raises(NonFiniteError):
        lemke(M, q, cover=np.array([1.0, np.nan]))
    with pytest.raises(InputError):
        lemke(M, q, cover=np.array([1.0, 0.0]))


def test_a_numerically_zero_matrix_is_not_solved_with_an_infinite_z() -> None:
    """M = BᵀB with B's columns of norm ~1e-155 (a rough-terrain no-slip stance) and q with negative entries:
    no finite z solves the LCP. Lemke's pivots divide by ~0 and give z = inf, whose residual is NaN; that
    must fail the residual check, not pass it, for plain and regularized Lemke alike."""
    B = np.full((6, 4), 6e-156)
    M, q = B.T @ B, np.array([-58.2, 2424.5, -2148.4, 255.2])
    for solution in (lemke(M, q), lemke_regularized(M, q, original_tol=1e-7)):
        assert not solution.found, solution.message


def test_nearest_on_face_removes_the_regularization_and_keeps_the_distribution() -> None:
    """A degenerate LCP (z₁ + z₂ = 1 on a whole segment): Tikhonov's answer (M + εI) misses it by about ε; the
    nearest exact solution on the same face meets it to rounding with the same split, and an LCP without a
    solution on that face (a gap no variable closes) is not answered."""
    M, q = np.array([[1.0, 1.0], [1.0, 1.0]]), np.array([-1.0, -1.0])
    eps = 1e-2
    z_reg = np.linalg.solve(M + eps * np.eye(2), -q)  # both positive: (1/(2+ε), 1/(2+ε))
    assert abs(z_reg.sum() - 1.0) > eps / 4
    exact, z = nearest_on_face(M, q, z_reg)
    assert exact
    np.testing.assert_allclose(z, [0.5, 0.5], atol=1e-12)
    assert lcp_residuals(M, q, z).worst <= 1e-12
    skewed = np.array([0.7, 0.2])
    exact, z = nearest_on_face(M, q, skewed)
    assert exact and z[0] - z[1] == pytest.approx(0.5) and z.sum() == pytest.approx(1.0)
    M0, q0 = np.zeros((1, 1)), np.array([-1.0])
    assert not nearest_on_face(M0, q0, np.array([100.0]))[0]
    assert spread_answered_gap(np.array([100.0]), q0, 1e-2, 1e-2, 1)  # 1e-2 · 100 = |q|: the regularization's
    assert not spread_answered_gap(z_reg, q, eps, eps, 2)  # ε-near a solution


def test_a_face_met_only_in_the_least_squares_sense_keeps_its_point_where_asked_and_it_moves_continuously() -> None:
    """z₁ + z₂ = 1 and z₁ + z₂ = 1 − δ (a stance asked for a velocity it cannot meet, by δ): no exact solution on
    the face. The least-squares point z₁ + z₂ = 1 − δ/2 is feasible (FACE_LEAST_SQUARES); settle_spread returns it
    when asked for (SPREAD_LEAST_SQUARES) and the ε-near answer otherwise (SPREAD_NEAR). Across the exact test's
    tolerance the least-squares answer moves by about δ/ε, the ε-near one by about ε: the jump that made a no-slip
    stance alternate every tick."""
    M, eps = np.array([[1.0, 1.0], [1.0, 1.0]]), 3e-2
    answers = []
    for delta in (1e-12, 1e-6):  # below and above FACE_TOL (1e-9) of this scale
        q = np.array([-1.0, -1.0 + delta])
        z_reg = np.linalg.solve(M + eps * np.eye(2), -q)
        outcome, z = face_solution(M, q, z_reg)
        assert outcome == (FACE_EXACT if delta < 1e-9 else FACE_LEAST_SQUARES)
        assert z.min() >= 0.0 and z.sum() == pytest.approx(1.0 - delta / 2, abs=1e-12)
        verdict, z_ls = settle_spread(M, q, z_reg, eps, eps, 2, True)
        assert verdict == (SPREAD_EXACT if delta < 1e-9 else SPREAD_LEAST_SQUARES)
        verdict_plain, z_plain = settle_spread(M, q, z_reg, eps, eps, 2, False)
        assert verdict_plain == (SPREAD_EXACT if delta < 1e-9 else SPREAD_NEAR)
        answers.append((z_ls, z_plain))
    # least squares: the split moves with the unreachable part as the regularized one does (about δ/ε), no more;
    # ε-near: a jump of about ε/4 on top
    assert np.abs(answers[1][0] - answers[0][0]).max() < 2 * 1e-6 / eps
    assert np.abs(answers[1][1] - answers[0][1]).max() > eps / 10
    assert face_solution(np.zeros((1, 1)), np.array([-1.0]), np.array([0.0]))[0] == FACE_NONE  # no face at all


def test_nearest_on_face_raises_a_free_variable_to_meet_the_rows_it_drives() -> None:
    """z₂ enters none of its face's equations (the Coulomb LCP's λ of an unloaded contact, free there) but keeps
    row 1 (w₁ = z₂ − 3) nonnegative: the nearest exact solution raises it from the regularized 2.9 to 3, no more."""
    M = np.array([[2.0, 0.0, 0.0], [0.0, 1.0, 1.0], [0.0, 0.0, 0.0]])
    q = np.array([-2.0, -3.0, 0.0])
    exact, z = nearest_on_face(M, q, np.array([0.99, 0.0, 2.9]))
    assert exact
    np.testing.assert_allclose(z, [1.0, 0.0, 3.0], atol=1e-12)
    assert lcp_residuals(M, q, z).worst <= 1e-12
    exact, z = nearest_on_face(M, q, np.array([0.99, 0.0, 3.5]))  # already enough: left where it is
    assert exact and z[2] == 3.5
