"""Stage II of the two-stage QP through its dual (idcontrol.formulations.two_stage_qp.pyramid_dual) against the
null-space QP."""

from __future__ import annotations

import numpy as np
import pytest

from idcontrol.formulations.reduced import velocity_and_torque
from idcontrol.formulations.two_stage_qp import TwoStageQP
from idcontrol.formulations.two_stage_qp import formulation as two_stage_qp
from idcontrol.formulations.two_stage_qp.pyramid_dual import (
    project_pyramid,
    stage_two_dual,
    stage_two_ridge,
    stage_two_structured,
)
from idcontrol.formulations.two_stage_qp.stages import stage_two_setup
from idcontrol.solvers.qp import DenseQP
from tests.conftest import random_problem

MUS = (0.0, 0.3, 1.0, np.inf)


def _in_cone(y: np.ndarray, mu: float, tol: float) -> bool:
    fn, fs, ft = y
    if mu == np.inf:
        return fn >= -tol
    return fn >= -tol and abs(fs) + abs(ft) <= mu * fn + tol


def _in_dual_cone(q: np.ndarray, mu: float, tol: float) -> bool:
    a, b, c = q
    if mu == np.inf:
        return a >= -tol and abs(b) <= tol and abs(c) <= tol
    return a >= mu * max(abs(b), abs(c)) - tol


@pytest.mark.parametrize("mu", MUS)
def test_pyramid_projection_satisfies_moreau_and_its_projector_is_the_derivative(mu: float) -> None:
    """For 2000 random points p (many outside the pyramid, some on its faces): y = Π(p) is in K, p − y is in
    the polar cone and orthogonal to y (Moreau's decomposition, to 1e-12); the returned P is a symmetric
    projector with Π(p + h) − Π(p) = P h for small h (points off the faces' boundaries)."""
    rng = np.random.default_rng(11)
    P = np.zeros((3, 3))
    Ph = np.zeros((3, 3))
    for k in range(2000):
        p = rng.standard_normal(3) * 10.0 ** rng.uniform(-3, 3)
        if k % 10 == 0 and np.isfinite(mu):  # exactly on an edge or a facet
            p = np.array([1.0, mu * rng.choice([-1.0, 1.0]), 0.0]) * rng.uniform(0, 5)
        y = np.array(project_pyramid(p[0], p[1], p[2], mu, P)[:3])
        scale = max(1.0, float(np.abs(p).max()))
        assert _in_cone(y, mu, 1e-12 * scale)
        r = p - y  # in the polar cone: −r in K*
        assert _in_dual_cone(-r, mu, 1e-12 * scale)
        assert abs(r @ y) <= 1e-12 * scale**2
        np.testing.assert_allclose(P, P.T, atol=1e-15)
        np.testing.assert_allclose(P @ P, P, atol=1e-12)
        h = rng.standard_normal(3) * 1e-7 * scale
        y_h = np.array(project_pyramid(*(p + h), mu, Ph)[:3])
        if np.abs(Ph - P).max() < 1e-12:  # same face at p + h: Π is linear between them
            np.testing.assert_allclose(y_h - y, P @ h, atol=1e-12 * scale)


@pytest.mark.parametrize("mu", [0.3, 1.0])
def test_pyramid_projection_is_accurate_for_points_far_inside_the_polar_cone(mu: float) -> None:
    """p = y + r with y on an edge or a facet and r a huge normal-cone vector (the dual method's u = −Gᵀζ with
    |ζ| ~ 1/ρ): Π(p) = y to rounding of |p| (1e-14 |p|), not apex-or-edge by a comparison of squared
    distances that rounding decides."""
    rng = np.random.default_rng(12)
    P = np.zeros((3, 3))
    for _ in range(500):
        sign_s, sign_t = rng.choice([-1.0, 1.0], 2)
        if rng.uniform() < 0.5:  # an edge y = c (1, ±μ, 0); the outward normals of its two facets span
            y = rng.uniform(0.1, 20.0) * np.array([1.0, sign_s * mu, 0.0])  # its normal cone: (−μ, ±1, [−1, 1])
            r = np.array([-mu, sign_s, sign_t * rng.uniform(0.0, 1.0)])
        else:  # a facet point y (|f_S| + |f_T| = μ f_N, both nonzero), r along the outward normal
            fn = rng.uniform(0.1, 20.0)
            share = rng.uniform(0.1, 0.9)
            y = np.array([fn, sign_s * share * mu * fn, sign_t * (1 - share) * mu * fn])
            r = -np.array([mu, -sign_s, -sign_t])
        assert abs(r @ y) < 1e-9 * np.linalg.norm(y)
        p = y + 10.0 ** rng.uniform(4, 9) * r
        got = np.array(project_pyramid(p[0], p[1], p[2], mu, P)[:3])
        np.testing.assert_allclose(got, y, atol=1e-14 * np.abs(p).max() + 1e-12)


def _problem(rng: np.random.Generator, case: int):
    """Random problems: uniform μ from MUS, mixed μ, duplicated contacts, one contact."""
    n = int(rng.integers(2, 40))
    mu = np.full(n, MUS[case % 4])
    if case % 5 == 4:
        mu = rng.choice(MUS, n)
    if case % 7 == 6:
        n = 1
        mu = mu[:1]
    problem = random_problem(rng, n=n, mu=mu)
    if case % 6 == 5 and n >= 4:  # duplicate half the contacts (same rows, same μ)
        half = n // 2
        for name in ("N", "S", "T"):
            rows = getattr(problem, name)
            rows[half : 2 * half] = rows[:half]
        problem.mu[half : 2 * half] = problem.mu[:half]
    return problem


def test_structured_stage_two_matches_the_null_space_qp_on_random_problems() -> None:
    """On 200 random problems (μ = 0, 0.3, 1, ∞, mixed, one contact, duplicated contacts) the dual method
    either certifies its solution or says it did not; where it certifies, its Stage II objective
    ½‖τ‖² + ½ρ‖y‖² is never above DAQP's on the null-space QP (where DAQP solves it) by more than 1e-9
    relative, y is in the friction pyramids and R̃ y = R̃ y₁ holds to 1e-12 relative (v⁺ unchanged). It
    certifies most (≥ 85 %; 153 of 170 measured) of them, and says 'not applicable' for one contact (3n ≤ nb)."""
    rng = np.random.default_rng(2026)
    certified = applicable = 0
    for case in range(200):
        p = _problem(rng, case)
        formulation = TwoStageQP()
        z1, stage, red, *_ = formulation.stage_one(p)
        assert z1 is not None
        ok, rho, k = stage_two_ridge(stage.R_a, stage.R_w, formulation.ridge, 1e-6)
        if p.n == 1:
            assert not ok
            continue
        W, H2, g2, C2, l2, u2 = stage_two_setup(red, (stage.R_a, stage.C_pyramid), z1, (1e-9, 1e-7))
        if not ok or W.shape[1] == 0:
            continue
        applicable += 1
        assert W.shape[1] == k
        # the same ρ as the null-space QP's: ridge × the mean diagonal of (R_a W)ᵀ(R_a W)
        assert rho == pytest.approx(1e-7 * max(np.trace(H2) / k - rho, 1e-12), rel=1e-9)
        sol = DenseQP().solve_stacked(H2, g2, C2, l2, u2, bounds=False)
        y_qp = z1 + W @ sol.x
        _, tau1 = velocity_and_torque(red, stage.R_w, stage.R, z1)
        b, e = tau1 + stage.R_a @ z1, stage.R_w @ z1
        done, y, *_ = stage_two_dual(stage.R_a, stage.R_w, b, e, p.mu, rho, np.zeros(0), 1e-10, 60)
        if not done:
            continue
        certified += 1

        if sol.found:  # (DAQP can fail on the duplicated contacts: then there is nothing to compare with)
            ours, daqp = (0.5 * float(np.sum((stage.R_a @ x - b) ** 2)) + 0.5 * rho * float(x @ x) for x in (y, y_qp))
            assert ours <= daqp * (1.0 + 1e-9) + 1e-12
        for i in range(p.n):
            yi = y[[i, p.n + i, 2 * p.n + i]]
            assert _in_cone(yi, p.mu[i], 1e-10 * max(1.0, np.abs(yi).max()))
        assert np.abs(stage.R_w @ y - e).max() <= 1e-12 * max(1.0, np.abs(e).max())
    print(f"certified {certified} of {applicable} applicable problems")
    assert certified >= 0.85 * applicable


@pytest.mark.parametrize("n", [8, 12, 16, 32])
def test_two_stage_qp_gives_the_same_answer_with_and_without_the_dual_method(n: int) -> None:
    """Many contacts (where the formulation takes the dual method), some penetrating (φ < 0, so that the
    non-penetration rows bind Stage I): τ, v⁺ and Stage I's kinetic energy agree with DAQP's path over y
    (τ to 1e-6 relative, v⁺ to 1e-8 m/s, energy to 1e-9 relative). (‖τ‖ itself is compared for the same
    Stage I optimum above: here the two Stage I solutions differ within DAQP's tolerance, and ‖τ‖ with them
    by ~1e-9 relative either way.)"""
    rng = np.random.default_rng(100 + n)
    for _ in range(10):
        p = random_problem(rng, n=n, mu=float(rng.choice([0.5, 1.0, np.inf])))
        p.phi = rng.uniform(-1e-6, 1e-4, n)
        fast, slow = TwoStageQP(), TwoStageQP(structured=False)
        a, b = fast.solve(p), slow.solve(p)
        assert a.found and b.found
        assert fast.free_optimum_solves + fast.structured_solves + fast.structured_fallbacks == 1
        scale = max(1.0, float(np.abs(b.tau).max()))
        np.testing.assert_allclose(a.tau, b.tau, atol=1e-6 * scale)
        np.testing.assert_allclose(a.v_next, b.v_next, atol=1e-8 * max(1.0, float(np.abs(b.v_next).max())))
        e_fast, e_slow = (0.5 * r.v_next @ p.M @ r.v_next for r in (a, b))
        assert e_fast == pytest.approx(e_slow, rel=1e-9, abs=1e-12)
        assert b.message in a.message  # "Stage II over a k-dimensional optimal set"


def test_an_uncertified_dual_falls_back_to_the_null_space_qp(monkeypatch: pytest.MonkeyPatch) -> None:
    """With no Newton iteration allowed the dual method cannot certify: the formulation counts a fallback
    and answers exactly as the null-space QP does."""
    monkeypatch.setattr(two_stage_qp, "STRUCTURED_MAX_ITER", 0)
    p = random_problem(np.random.default_rng(3), n=16, mu=0.8)
    fast, slow = TwoStageQP(), TwoStageQP(structured=False)
    a, b = fast.solve(p), slow.solve(p)
    assert (fast.free_optimum_solves, fast.structured_solves, fast.structured_fallbacks) == (0, 0, 1)
    np.testing.assert_array_equal(a.tau, b.tau)
    np.testing.assert_array_equal(a.v_next, b.v_next)


def test_structured_stage_two_reports_not_applicable_without_a_null_space() -> None:
    """3n ≤ nb (two contacts on a floating base): status 1, Stage I's forces untouched."""
    p = random_problem(np.random.default_rng(4), n=2, mu=0.8)
    formulation = TwoStageQP()
    z1, stage, red, *_ = formulation.stage_one(p)
    status, y, *_ = stage_two_structured(red, stage.R_a, z1, (1e-7, 1e-10, 30))
    assert status == 1
    np.testing.assert_array_equal(y, z1)
