"""Every formulation against the discretized model and against independent solvers (random problems)."""

from __future__ import annotations

import re
from dataclasses import replace
from pathlib import Path

import numpy as np
import proxsuite
import pytest

from idcontrol.errors import ConfigError, NonFiniteError, ShapeError, UnknownFormulation
from idcontrol.formulations import available_formulations, contact_formulations, make_formulation
from idcontrol.formulations.consistency import independent_equalities, needs_repair, repair_desired_velocity
from idcontrol.formulations.coulomb_lcp import coulomb_lcp
from idcontrol.formulations.noslip_lcp import PAPER_OPTIONS, NoSlipLCP, project_desired_velocity
from idcontrol.formulations.problem import ContactProblem, index_array
from idcontrol.formulations.reduced import ReducedDynamics
from idcontrol.formulations.two_stage_qp import TwoStageQP
from idcontrol.solvers.enumeration import enumerate_lcp_solutions
from tests.conftest import random_problem

CONTACT_FORMULATIONS = contact_formulations()


def _proxqp(H: np.ndarray, g: np.ndarray, C: np.ndarray, l: np.ndarray, lb: np.ndarray) -> np.ndarray:
    """min ½xᵀHx + gᵀx s.t. Cx ≥ l, x ≥ lb with ProxQP (a proximal augmented-Lagrangian method), tight tolerance."""
    n = len(g)
    qp = proxsuite.proxqp.dense.QP(n, 0, len(l), True)
    qp.settings.eps_abs, qp.settings.eps_rel, qp.settings.eps_dual_inf = 1e-11, 0.0, 1e-14
    qp.settings.max_iter = 100_000
    qp.init(H, g, None, None, C, l, np.full(len(l), 1e20), np.maximum(lb, -1e20), np.full(n, 1e20))
    qp.solve()
    assert qp.results.info.status == proxsuite.proxqp.QPSolverOutput.PROXQP_SOLVED
    return np.array(qp.results.x)


def kinetic_energy(problem, v_next) -> float:
    return 0.5 * float(v_next @ problem.M @ v_next)


@pytest.mark.parametrize("name", CONTACT_FORMULATIONS)
@pytest.mark.parametrize("seed", range(25))
def test_output_satisfies_discretized_dynamics_and_tracking(name: str, seed: int) -> None:
    """M(v⁺−v⁻) = Nᵀf_N + Sᵀf_S + Tᵀf_T + Pᵀτ + Δt f_ext to 1e-8, and P v⁺ = q̇_des on feasible requests."""
    rng = np.random.default_rng(seed)
    # no-slip fixes 2n tangential velocities: with 6 base DoFs, n ≤ 3 keeps random requests feasible
    n = int(rng.integers(1, 4 if name == "noslip_lcp" else 6))
    problem = random_problem(rng, n=n, mu=float(rng.choice([0.0, 0.3, 1.0, np.inf])), phi_scale=1e-4)
    result = make_formulation(name).solve(problem)
    assert result.found, result.message
    scale = max(1.0, np.abs(result.tau).max(), np.abs(result.f_normal).max(initial=0.0))  # N, N·m
    assert result.residuals.dynamics <= 1e-8 * scale
    if not result.consistency_repaired:
        assert result.residuals.tracking <= 1e-10
    assert result.residuals.penetration <= 1e-8
    assert result.residuals.friction <= 1e-8
    # recompute the dynamics residual here, independently of the package's checker (impulse form)
    p = problem
    impulse = p.dt * (p.N.T @ result.f_normal + p.S.T @ result.f_s + p.T.T @ result.f_t + p.f_ext)
    impulse[p.actuated] += p.dt * result.tau
    np.testing.assert_allclose(p.M @ (result.v_next - p.v), impulse, rtol=0, atol=1e-8 * p.dt * scale)


@pytest.mark.parametrize("seed", range(100))
def test_noslip_lcp_output_is_complementary_and_slip_free(seed: int) -> None:
    """No-slip LCP, the paper's method: f_N ≥ 0, N v⁺ + φ/Δt ≥ 0, f_N ⊥ (N v⁺ + φ/Δt), and S v⁺ = T v⁺ = 0, all
    to 1e-8."""
    rng = np.random.default_rng(1000 + seed)
    problem = random_problem(rng, n=int(rng.integers(1, 4)), mu=np.inf, phi_scale=1e-4)
    result = make_formulation("noslip_lcp", **PAPER_OPTIONS).solve(problem)
    assert result.found, result.message
    assert result.f_normal.min() >= 0.0
    r = result.residuals
    assert max(r.penetration, r.complementarity, r.slip) <= 1e-8, r


def test_with_rows_copies_the_problem_and_leaves_the_original_alone() -> None:
    """``ContactProblem.with_rows``: the copy has the new S, T and q̇_des and every other field of the original; the
    original keeps its own (the certificate checks a no-slip result against the rows it solved with)."""
    rng = np.random.default_rng(7)
    problem = random_problem(rng, n=3, mu=np.inf, phi_scale=1e-4)
    S, T, qd_des = problem.S.copy(), problem.T.copy(), problem.qd_des.copy()
    S2, T2, qd2 = np.zeros_like(S), np.ones_like(T), qd_des + 1.0
    copy = problem.with_rows(S2, T2, qd2)
    assert type(copy) is ContactProblem and copy is not problem
    assert copy.S is S2 and copy.T is T2 and copy.qd_des is qd2
    assert copy.M is problem.M and copy.N is problem.N and copy.contact_ids == problem.contact_ids
    np.testing.assert_array_equal(problem.S, S)
    np.testing.assert_array_equal(problem.T, T)
    np.testing.assert_array_equal(problem.qd_des, qd_des)


def _duplicated_contacts(rng: np.random.Generator):
    """A random problem whose contacts 2 and 3 repeat the rows of contacts 0 and 1 (two feet on one spot each)."""
    base = random_problem(rng, n=2, mu=np.inf, phi_scale=1e-4)
    twice = {k: np.concatenate([getattr(base, k)] * 2) for k in ("N", "S", "T", "phi", "mu")}
    return replace(base, **twice, contact_ids=("a", "b", "a2", "b2"))


def _dynamics_gap(problem, result) -> float:
    """max |M(v⁺−v⁻) − Δt(Nᵀf_N + Sᵀf_S + Tᵀf_T + Pᵀτ + f_ext)|, impulse units."""
    p = problem
    impulse = p.dt * (p.N.T @ result.f_normal + p.S.T @ result.f_s + p.T.T @ result.f_t + p.f_ext)
    impulse[p.actuated] += p.dt * result.tau
    return float(np.abs(p.M @ (result.v_next - p.v) - impulse).max())


@pytest.mark.parametrize("seed", range(20))
def test_noslip_lcp_share_friction_splits_tangential_forces_like_the_normal_ones(seed: int) -> None:
    """share_friction: a repeated contact carries the same tangential force as its twin (Algorithm 1 alone gives
    it none), and the solution still satisfies the dynamics and the no-slip constraints."""
    problem = _duplicated_contacts(np.random.default_rng(6000 + seed))
    plain = make_formulation("noslip_lcp", **{**PAPER_OPTIONS, "spread": 1e-2}).solve(problem)
    shared = make_formulation("noslip_lcp", **{**PAPER_OPTIONS, "spread": 1e-2, "share_friction": True}).solve(problem)
    assert plain.found and shared.found
    assert np.count_nonzero(plain.f_s[2:]) + np.count_nonzero(plain.f_t[2:]) == 0  # dependent rows: no force
    for first, second in ((0, 2), (1, 3)):
        if plain.f_normal[first] > 0.0:
            tangential = np.array([shared.f_s, shared.f_t])
            np.testing.assert_allclose(tangential[:, first], tangential[:, second], atol=1e-8 * plain.f_normal.max())
    np.testing.assert_allclose(shared.f_s[:2] + shared.f_s[2:], plain.f_s[:2], atol=1e-7 * plain.f_normal.max())
    scale = max(1.0, np.abs(shared.tau).max(), shared.f_normal.max())
    assert _dynamics_gap(problem, shared) <= 1e-8 * problem.dt * scale
    assert shared.residuals.slip <= 1e-8


def test_noslip_lcp_release_unloaded_leaves_no_friction_without_normal_force() -> None:
    """release_unloaded: wherever the LCP leaves a contact without normal force, that contact has no tangential
    force (Algorithm 1 alone gives some such contacts one), unless releasing it moved the load onto it (then it
    keeps its rows, and the message says so); and the dynamics hold (60 random problems)."""
    released = 0
    for seed in range(60):
        rng = np.random.default_rng(7000 + seed)
        problem = random_problem(rng, n=int(rng.integers(2, 4)), mu=np.inf, phi_scale=1e-3)
        result = make_formulation("noslip_lcp", release_unloaded=True).solve(problem)
        assert result.found, result.message
        if (result.fallback or "").startswith("no LCP solution"):
            continue  # zero normal impulses by the fallback, not by the LCP: nothing is released
        unloaded = result.f_normal <= 0.0
        frictional = np.count_nonzero(unloaded & ((result.f_s != 0.0) | (result.f_t != 0.0)))
        restored = re.search(r"(\d+) contact\(s\) kept their tangential rows", result.message)
        assert frictional <= (int(restored.group(1)) if restored else 0), (seed, result.message)
        scale = max(1.0, np.abs(result.tau).max(), result.f_normal.max())
        assert _dynamics_gap(problem, result) <= 1e-8 * problem.dt * scale, seed
        assert result.residuals.penetration <= 1e-8, seed
        released += "released" in result.message
    assert released >= 5, released


@pytest.mark.parametrize("seed", range(20))
def test_project_desired_velocity_is_no_slip_consistent_and_idempotent(seed: int) -> None:
    """The projected q̇_des lets all 2n tangential rows vanish for some base twist (n = 4 over-determines the six
    base DoFs), projecting it again changes nothing, and noslip_lcp with project then needs no repair."""
    rng = np.random.default_rng(8000 + seed)
    problem = random_problem(rng, n=4, mu=np.inf)
    qd = project_desired_velocity(problem)
    J = np.concatenate([problem.S, problem.T])
    J_u, J_a = J[:, problem.unactuated], J[:, problem.actuated]
    V, *_ = np.linalg.lstsq(J_u, -J_a @ qd, rcond=None)
    assert np.abs(J_u @ V + J_a @ qd).max() <= 1e-9 * max(1.0, np.abs(J_a @ qd).max())
    assert np.abs(J_u @ np.linalg.lstsq(J_u, -J_a @ problem.qd_des, rcond=None)[0] + J_a @ problem.qd_des).max() > 1e-6
    np.testing.assert_allclose(project_desired_velocity(replace(problem, qd_des=qd)), qd, atol=1e-12)


@pytest.mark.parametrize("seed", range(5))
def test_a_desired_velocity_that_moves_no_stance_leg_is_projected_to_itself(seed: int) -> None:
    """q̇_des with J_a q̇_des = 0 exactly (all zero, or moving only joints no contact row depends on: a swing
    leg) comes back unchanged, bit for bit what the projection's two least-squares solves give it."""
    from idcontrol.formulations.noslip_lcp.stages import PROJECTION_RCOND, projected_velocity, rest_correction_kernel

    rng = np.random.default_rng(8100 + seed)
    problem = random_problem(rng, n=3, mu=np.inf)
    a, u = index_array(problem.actuated, problem.m), index_array(problem.unactuated, problem.m)
    swing = a[: len(a) // 3]  # joints no contact row depends on
    S, T = problem.S.copy(), problem.T.copy()
    S[:, swing] = T[:, swing] = 0.0
    for qd in (np.zeros(len(a)), np.where(np.isin(a, swing), rng.normal(size=len(a)), 0.0)):
        out = projected_velocity(S, T, a, u, qd, PROJECTION_RCOND)
        J = np.concatenate([S, T])
        J_a, J_u = np.ascontiguousarray(J[:, a]), np.ascontiguousarray(J[:, u])
        drift = J_a @ qd
        assert np.all(drift == 0.0)
        V = rest_correction_kernel(J_u, drift, PROJECTION_RCOND)
        solved = qd + rest_correction_kernel(J_a, J_u @ V + drift, PROJECTION_RCOND)
        np.testing.assert_array_equal(out, qd)
        np.testing.assert_array_equal(out, solved)
        assert out is not qd


def test_noslip_lcp_releases_feet_hovering_by_micrometres_without_a_second_round() -> None:
    """Solo12 standing with joint angles swayed by 0.1 mrad (the bench's states): two diagonal feet hover µm above
    the floor and the friction share leaves them ~10⁻⁶ N of tangential force. They lose their rows with no
    tangential force and the answer is the one-round answer's within 10⁻⁵ N·m; the controller certifies it. (A
    second solve had answered the same torques, 10⁻⁶ N·m apart, and doubled the bench's no-slip tick.)"""
    from idcontrol.control.controller import InverseDynamicsController
    from idcontrol.control.state import RobotState
    from idcontrol.reference.base import Tracking
    from idcontrol.robot.model import RobotModel

    robot = RobotModel("solo12")
    controller = InverseDynamicsController(robot, formulation="noslip_lcp")
    q0 = robot.standing_configuration()
    joints = robot.actuated_idx_q
    tracking = Tracking(np.zeros(robot.nu), np.zeros(robot.nu))
    hovering = 0
    for i in range(0, 400, 20):
        q = q0.copy()
        q[joints] += 1e-4 * np.sin(0.05 * i + np.arange(robot.nu))
        state = RobotState(q=q, v=np.zeros(robot.nv))
        problem, _ = controller.build_problem(state, np.zeros(robot.nu), tracking, checked=True)
        one_round = NoSlipLCP(release_unloaded=False).solve(problem)
        result = NoSlipLCP().solve(problem)
        assert result.found, result.message
        unloaded = result.f_normal <= 0.0
        hovering += int(unloaded.sum())
        assert np.all(result.f_s[unloaded] == 0.0) and np.all(result.f_t[unloaded] == 0.0)
        np.testing.assert_allclose(result.tau, one_round.tau, atol=1e-5)
        assert controller.solve(state, np.zeros(robot.nu), tracking).found
    assert hovering >= 20  # two feet on most states: what the case is about


def _h1_stance(tag: str) -> ContactProblem:
    """A no-slip problem recorded from Unitree H1 standing in MuJoCo (``robot init`` of unitree_ros' h1.urdf,
    ``launch/stand.toml --formulation noslip_lcp``): eight corner spheres on two 28 x 3 cm soles of 5-DoF legs, 16
    tangential rows of rank 9 in q̇_a. ``tag``: "repair" (a tick whose Section 4.5 repair was infeasible) or
    "project" (one whose projection asked 2000 rad/s)."""
    data = np.load(Path(__file__).parent / "data" / "h1_stance_noslip.npz")
    fields = ("M", "f_ext", "v", "qd_des", "N", "S", "T", "phi", "mu", "actuated", "unactuated")
    arrays = {k: data[f"{tag}_{k}"] for k in fields}
    return ContactProblem(dt=float(data[f"{tag}_dt"]), contact_ids=tuple(range(len(arrays["phi"]))), **arrays)


@pytest.mark.parametrize("tag", ["repair", "project"])
def test_noslip_lcp_stands_a_humanoid_on_dependent_corner_rows(tag: str) -> None:
    """On H1's two-sole stance the no-slip LCP answers torques within the robot's 300 N·m with exact dynamics, no
    penetration and no slip, changing q̇_des by under 0.01 rad/s. Before: the repair handed DAQP 16 dependent
    equalities and was reported infeasible (a safe stop after 0.24 s), and the projection answered 10⁻⁴ m/s
    of slip along directions at 10⁻⁷ of the largest singular value with 2000 rad/s (4.5·10⁶ N·m, certificate)."""
    problem = _h1_stance(tag)
    J = np.concatenate([problem.S, problem.T])[:, problem.actuated]
    assert np.linalg.matrix_rank(J) < J.shape[0]  # the rows are dependent: what the case is about
    result = NoSlipLCP().solve(problem)
    assert result.found, result.message
    assert np.abs(result.tau).max() <= 300.0
    r = result.residuals
    assert r.dynamics <= 1e-8 * max(1.0, np.abs(result.f_normal).max()) and r.penetration <= 1e-8 and r.slip <= 1e-8
    assert r.tracking <= 1e-2


def test_the_repair_meets_dependent_no_slip_rows() -> None:
    """Given the LCP's forces on H1's stance (v⁺ penetrating by 5·10⁻⁶ m/s), the Section 4.5 repair finds a v⁺
    meeting all 16 tangential rows and every normal row."""
    problem = _h1_stance("repair")
    unrepaired = NoSlipLCP(repair=False).solve(problem)
    solved = unrepaired.problem  # the rows and q̇_des as solved (unloaded contacts released)
    assert needs_repair(solved, unrepaired.v_next, no_slip=True)
    fix = repair_desired_velocity(solved, unrepaired.f_normal, unrepaired.f_s, unrepaired.f_t, no_slip=True)
    assert fix.found, fix.message
    assert not needs_repair(solved, fix.v_next, no_slip=True, tol=1e-9)
    assert fix.qd_change <= 1e-2


@pytest.mark.parametrize("seed", range(10))
def test_independent_equalities_keep_the_solution_set(seed: int) -> None:
    """Dependent, consistent equalities A x = b become orthonormal rows with the same solutions: the least-norm
    solution and the null space agree with numpy's."""
    rng = np.random.default_rng(seed)
    rank = int(rng.integers(1, 6))
    A = rng.standard_normal((12, rank)) @ rng.standard_normal((rank, 9))
    b = A @ rng.standard_normal(9)
    R, c = independent_equalities(A, b)
    assert R.shape == (rank, 9)
    np.testing.assert_allclose(R @ R.T, np.eye(rank), atol=1e-12)
    x = np.linalg.lstsq(R, c, rcond=None)[0]
    np.testing.assert_allclose(x, np.linalg.lstsq(A, b, rcond=None)[0], atol=1e-9)
    np.testing.assert_allclose(A @ x, b, atol=1e-9)
    null = np.linalg.svd(A)[2][rank:]
    np.testing.assert_allclose(R @ null.T, 0.0, atol=1e-10)


@pytest.mark.parametrize("seed", range(100))
def test_coulomb_lcp_output_is_complementary_and_inside_the_pyramid(seed: int) -> None:
    """Coulomb LCP: non-negativity, normal complementarity and |f_S|+|f_T| ≤ μ f_N hold to 1e-8."""
    rng = np.random.default_rng(2000 + seed)
    problem = random_problem(rng, n=int(rng.integers(1, 5)), mu=rng.uniform(0.0, 1.5, 1)[0], phi_scale=1e-4)
    result = make_formulation("coulomb_lcp").solve(problem)
    assert result.found, result.message
    assert result.f_normal.min() >= 0.0
    r = result.residuals
    assert max(r.penetration, r.complementarity, r.friction) <= 1e-8, r


@pytest.mark.parametrize("seed", range(60))
def test_coulomb_lcp_solution_is_one_of_the_enumerated_solutions(seed: int) -> None:
    """The Coulomb LCP solved by Lemke is among the solutions found by brute-force enumeration (n ≤ 2)."""
    rng = np.random.default_rng(3000 + seed)
    n = int(rng.integers(1, 3))
    problem = random_problem(rng, n=n, mu=0.5, phi_scale=1e-4)
    red = ReducedDynamics(problem)
    Q, q, _, _ = coulomb_lcp(problem, red)
    solutions = enumerate_lcp_solutions(Q, q)
    result = make_formulation("coulomb_lcp", repair=False).solve(problem)
    if not solutions:
        assert not result.found
        return
    assert result.found
    z = np.concatenate([result.f_normal])
    assert any(np.allclose(s[:n], z, atol=1e-6 * max(1.0, np.abs(s).max())) for s in solutions)


@pytest.mark.parametrize("seed", range(60))
def test_stage_one_matches_a_generic_qp_solver(seed: int) -> None:
    """Stage I's kinetic energy equals that of an independent QP solver (ProxQP, a proximal method) on the model."""
    rng = np.random.default_rng(4000 + seed)
    n = int(rng.integers(1, 6))
    problem = random_problem(rng, n=n, mu=float(rng.choice([0.2, 1.0, np.inf])), phi_scale=1e-4)
    formulation = TwoStageQP()
    z1, stage, red, _, _, relaxed = formulation.stage_one(problem)
    assert z1 is not None and not relaxed
    C, l, _ = stage.constraints()
    z_ref = _proxqp(stage.H, stage.g, C, l, stage.lb)
    v1, _ = stage.velocity_and_torque(problem, red, z1)
    v_ref, _ = stage.velocity_and_torque(problem, red, z_ref)
    scale = max(1.0, kinetic_energy(problem, v_ref))
    assert kinetic_energy(problem, v1) == pytest.approx(kinetic_energy(problem, v_ref), abs=1e-6 * scale)


@pytest.mark.parametrize("seed", range(60))
def test_stage_two_never_raises_the_stage_one_objective(seed: int) -> None:
    """Stage II keeps the Stage I kinetic energy (to 1e-9 relative) and never raises ‖τ‖ (to 1e-6 relative)."""
    rng = np.random.default_rng(5000 + seed)
    problem = random_problem(rng, n=int(rng.integers(1, 6)), mu=float(rng.choice([0.3, 1.0, np.inf])))
    formulation = TwoStageQP()
    z1, stage, red, _, _, _ = formulation.stage_one(problem)
    v1, tau1 = stage.velocity_and_torque(problem, red, z1)
    formulation.reset()
    result = formulation.solve(problem)
    assert result.found
    e1, e2 = kinetic_energy(problem, v1), kinetic_energy(problem, result.v_next)
    assert e2 <= e1 + 1e-9 * max(1.0, e1)
    # ‖τ‖ is minimized up to the documented ridge (1e-7 relative) and the QP tolerance
    assert np.linalg.norm(result.tau) <= np.linalg.norm(tau1) * (1.0 + 1e-6) + 1e-9


@pytest.mark.parametrize("seed", range(40))
def test_stage_two_unconstrained_minimizer_is_taken_only_where_it_is_the_qp_optimum(seed: int) -> None:
    """``unconstrained_if_feasible`` answers True only when every row holds at −H⁻¹g, and its w is then ProxQP's
    optimum of the constrained QP; with a row cutting through the minimizer it answers False."""
    from idcontrol.formulations.two_stage_qp.stages import unconstrained_if_feasible

    rng = np.random.default_rng(9000 + seed)
    k, rows = int(rng.integers(1, 13)), int(rng.integers(1, 30))
    B = rng.normal(size=(k + 3, k))
    H, g, A = B.T @ B + 1e-3 * np.eye(k), rng.normal(size=k), rng.normal(size=(rows, k))
    w_free = -np.linalg.solve(H, g)
    d = rng.normal(size=k)
    A[0] = d  # the row that will cut the minimizer off; w_free + d stays strictly feasible
    lower = np.minimum(A @ w_free, A @ (w_free + d)) - rng.uniform(0.0, 1.0, rows)  # every row holds at both
    lower[rng.random(rows) < 0.2] = -1e20  # rows the facets imply (DAQP's −∞)
    free, w = unconstrained_if_feasible(H, g, A, lower)
    assert free

    def reference() -> np.ndarray:  # ProxQP on the finite rows (it takes ±1e20 as numbers, not as infinity)
        kept = lower > -1e19
        return _proxqp(H, g, A[kept], lower[kept], np.full(k, -1e20)) if kept.any() else w_free

    np.testing.assert_allclose(w, reference(), atol=1e-7)
    cut = 0
    lower[cut] = A[cut] @ w_free + 0.5 * d @ d  # this row now excludes the minimizer, not w_free + d
    free, _ = unconstrained_if_feasible(H, g, A, lower)
    assert not free
    assert A[cut] @ reference() == pytest.approx(lower[cut], abs=1e-6)  # the optimum lies on the row (ProxQP: 1e-6)


@pytest.mark.parametrize("seed", range(40))
def test_contact_relative_stage_one_holds_the_contacts_at_rest_where_it_can(seed: int) -> None:
    """``dissipation = "contacts"``: Stage I's objective matches ProxQP's; where its unconstrained minimum is
    feasible (sticking forces inside the cone, no penetration), the predicted contacts are at rest
    ([N; S; T] v⁺ = 0), and Stage II leaves v⁺ unchanged. With n ≤ 2 contacts on 6 base DoFs such a base
    velocity always exists; the cone decides whether it is reachable."""
    rng = np.random.default_rng(7000 + seed)
    problem = random_problem(rng, n=int(rng.integers(1, 3)), mu=float(rng.choice([0.5, 1.0, np.inf])))
    formulation = TwoStageQP(dissipation="contacts")
    z1, stage, red, _, _, relaxed = formulation.stage_one(problem)
    assert z1 is not None and not relaxed
    C, l, _ = stage.constraints()
    z_ref = _proxqp(stage.H, stage.g, C, l, stage.lb)

    def objective(z: np.ndarray) -> float:
        return 0.5 * float(z @ stage.H @ z) + float(stage.g @ z)

    unconstrained = -0.5 * float(stage.g @ np.linalg.pinv(stage.H) @ stage.g)
    scale = max(1.0, abs(unconstrained))
    assert objective(z1) == pytest.approx(objective(z_ref), abs=1e-6 * scale)
    v1, _ = stage.velocity_and_torque(problem, red, z1)
    contact_rows = np.vstack([problem.N, problem.S, problem.T])
    if objective(z1) <= unconstrained + 1e-9 * scale:
        np.testing.assert_allclose(contact_rows @ v1, 0.0, atol=1e-8)
    formulation.reset()
    result = formulation.solve(problem)
    assert result.found, result.message
    np.testing.assert_allclose(result.v_next, v1, atol=1e-9 * max(1.0, np.abs(v1).max()))


def test_contact_relative_stage_one_sticks_somewhere_and_world_stage_one_brakes() -> None:
    """One contact, μ = ∞ (40 random problems): "contacts" holds the contact at rest wherever the normal
    impulse that does so is non-negative (measured: 25 of 40); the paper's "world" objective leaves it moving
    in every one of those (it brakes the unactuated DoFs instead)."""
    sticking = moving_with_world = 0
    for seed in range(40):
        problem = random_problem(np.random.default_rng(7000 + seed), n=1, mu=np.inf)
        rows = np.vstack([problem.N, problem.S, problem.T])
        contacts = TwoStageQP(dissipation="contacts").solve(problem)
        world = TwoStageQP().solve(problem)
        if np.abs(rows @ contacts.v_next).max() < 1e-8:
            sticking += 1
            moving_with_world += np.abs(rows @ world.v_next).max() > 1e-6
    assert sticking >= 15, sticking
    assert moving_with_world == sticking, (moving_with_world, sticking)


def test_dissipation_option_is_checked() -> None:
    """An unknown Stage I dissipation reference is a ConfigError naming the valid ones."""
    for name in ("two_stage_qp", "one_stage_qp"):
        with pytest.raises(ConfigError, match="contacts"):
            make_formulation(name, dissipation="base")


@pytest.mark.parametrize(
    ("name", "option", "value", "says"),
    [
        ("two_stage_qp", "null_tol", float("nan"), "not NaN"),  # the robot fell, no certificate failing
        ("two_stage_qp", "ridge", -1.0, "ridge must be >= 0"),  # rougher torques, silently
        ("noslip_lcp", "tol", -1e-10, "tol must be >= 0"),
        ("noslip_lcp", "spread", float("nan"), "not NaN"),
        ("coulomb_lcp", "spread", -1.0, "spread must be >= 0"),
        ("one_stage_qp", "regularization", -1e-6, "regularization must be >= 0"),
    ],
)
def test_a_nan_or_negative_tolerance_is_refused(name, option, value, says) -> None:
    """Tolerances, ridges and spreads are numbers >= 0: a NaN or a negative one is a ConfigError naming it."""
    with pytest.raises(ConfigError, match=f"{option}.*{says}|{says}"):
        make_formulation(name, **{option: value})


def test_registry_lists_the_launch_file_names_and_rejects_unknown_ones() -> None:
    """Formulations are chosen by their launch-file names; an unknown name lists the valid ones."""
    assert set(available_formulations()) == {*CONTACT_FORMULATIONS, "pid", "sensed_id"}
    with pytest.raises(UnknownFormulation, match="two_stage_qp"):
        make_formulation("two_stage")


def test_unknown_options_and_malformed_problems_raise_package_errors() -> None:
    """A misspelt formulation option and a problem with inconsistent shapes raise idcontrol errors."""
    with pytest.raises(ConfigError, match="ridge"):
        make_formulation("two_stage_qp", rigde=1e-6)
    problem = random_problem(np.random.default_rng(0), n=3)
    problem.validate()
    problem.phi = np.zeros(2)
    with pytest.raises(ShapeError, match="phi"):
        problem.validate()
    problem.phi = np.array([0.0, np.nan, 0.0])
    with pytest.raises(NonFiniteError, match="phi"):
        problem.validate()


def test_stage_two_null_space_has_the_corrected_dimension() -> None:
    """Four contacts on a floating base: null space 14-dim in the paper's 5n variables, 6-dim in signed ones (not 2).

    The 8 extra directions in the paper's variables only add equal amounts to f_S+ and f_S− (or f_T+, f_T−).
    """
    problem = random_problem(np.random.default_rng(7), n=4, mu=0.7)
    red = ReducedDynamics(problem)
    paper_variables = np.hstack([red.N_w, red.S_w, -red.S_w, red.T_w, -red.T_w])
    assert paper_variables.shape[1] - np.linalg.matrix_rank(paper_variables) == 14
    result = TwoStageQP().solve(problem)
    assert "6-dimensional" in result.message


def test_qp_workspace_reused_for_a_box_constrained_qp_solves_it_again() -> None:
    """A persistent QP workspace with bounds only (no general rows: Stage I relaxed at μ = ∞) updates and
    solves on every call, matching the clipped unconstrained minimizer."""
    from idcontrol.solvers.qp import DenseQP

    qp = DenseQP()
    H, lb, ub = np.eye(3), np.zeros(3), np.full(3, 10.0)
    for k in range(1, 4):
        g = k * np.array([1.0, -2.0, 0.5])
        solution = qp.solve(H, g, None, None, None, lb, ub)
        assert solution.found
        np.testing.assert_allclose(solution.x, np.clip(-g, lb, ub), atol=1e-12)
