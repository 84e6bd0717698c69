"""The contact-coupling diagnostic: limbs from the kinematic tree, the Delassus coupling, the touchdown flag."""

from __future__ import annotations

import numpy as np
import pytest

from idcontrol.contacts.coupling import (
    coupling_diagnostic,
    delassus_coupling,
    delassus_coupling_factored,
    delassus_coupling_held,
    delassus_coupling_whitened,
    sphere_limbs,
    touchdown_ages,
)
from idcontrol.control.controller import InverseDynamicsController
from idcontrol.control.state import RobotState
from idcontrol.robot.model import RobotModel


def reference_coupling(N, M, limb):
    """Independent numpy reference: the largest |D_ij| / √(D_ii D_jj) over pairs on different limbs."""
    D = N @ np.linalg.solve(M, N.T)
    d = np.sqrt(np.diag(D))
    C = np.abs(D) / np.outer(d, d)
    different = limb[:, None] != limb[None, :]
    return float(C[different].max()) if different.any() else 0.0


def test_each_leg_of_the_quadruped_is_a_limb_and_the_arm_is_one():
    """Feet on four legs get four labels; the arm's fingertips share the arm's joints, so one limb."""
    assert sphere_limbs(RobotModel("quadruped")).tolist() == [0, 1, 2, 3]
    assert sphere_limbs(RobotModel("arm")).tolist() == [0, 0, 0, 0]


@pytest.mark.parametrize("seed", range(5))
def test_the_compiled_coupling_equals_the_numpy_reference(seed):
    """On random SPD inertias and contact rows, with random limbs, the kernel gives the reference value."""
    rng = np.random.default_rng(seed)
    m, n = 12, 5
    A = rng.standard_normal((m, m))
    M = A @ A.T + m * np.eye(m)
    N = rng.standard_normal((n, m))
    limb = rng.integers(0, 3, n)
    age = np.full(n, 1.0)
    value, flag = delassus_coupling(N, M, limb, age, 0.002, 0.1)
    assert value == pytest.approx(reference_coupling(N, M, limb), rel=1e-12)
    assert not flag  # every contact touched down a second ago
    L = np.linalg.cholesky(M)
    assert delassus_coupling_factored(N, L, limb, age, 0.002, 0.1)[0] == pytest.approx(value, rel=1e-12)


def test_block_diagonal_inertia_with_one_contact_per_block_is_decoupled():
    """Condition (6) of Pace & Burden: limbs with their own inertia blocks give coupling 0; shared rows give 1."""
    M = np.diag([1.0, 2.0, 3.0, 4.0])
    N = np.array([[1.0, 0.5, 0.0, 0.0], [0.0, 0.0, 2.0, 1.0]])
    assert delassus_coupling(N, M, np.array([0, 1]), np.zeros(2), 0.002, 0.1) == (0.0, False)
    same = np.array([[1.0, 0.5, 0.0, 0.0], [2.0, 1.0, 0.0, 0.0]])
    value, flag = delassus_coupling(same, M, np.array([0, 1]), np.zeros(2), 0.002, 0.1)
    assert value == pytest.approx(1.0) and flag
    assert delassus_coupling(same, M, np.array([0, 0]), np.zeros(2), 0.002, 0.1) == (0.0, False)  # one limb


def test_the_flag_needs_a_coupled_pair_touching_down_together_now():
    """Flagged only when a pair with coupling ≥ threshold touched down within the window, the later one now."""
    M = np.eye(2)
    N = np.array([[1.0, 0.0], [1.0, 1.0]])  # coupling 1/√2
    limb = np.array([0, 1])
    assert delassus_coupling(N, M, limb, np.array([0.001, 0.0]), 0.002, 0.1)[1]
    assert not delassus_coupling(N, M, limb, np.array([0.003, 0.0]), 0.002, 0.1)[1]  # too far apart
    assert not delassus_coupling(N, M, limb, np.array([0.002, 0.001]), 0.002, 0.1)[1]  # not on this tick
    assert not delassus_coupling(N, M, limb, np.zeros(2), 0.002, 0.8)[1]  # below the threshold
    assert delassus_coupling(N[:1], M, limb[:1], np.zeros(1), 0.002, 0.1) == (0.0, False)


def test_touchdown_ages_follow_each_sphere_and_restart_after_it_leaves():
    """A sphere's age grows while it stays active and restarts at 0 after it leaves the active set."""
    since = np.full(3, np.nan)
    assert touchdown_ages(np.array([0]), since, 1.0).tolist() == [0.0]
    assert touchdown_ages(np.array([0, 2]), since, 1.001).tolist() == pytest.approx([0.001, 0.0])
    assert touchdown_ages(np.array([2]), since, 1.002).tolist() == pytest.approx([0.001])
    assert np.isnan(since[0])
    assert touchdown_ages(np.array([0, 2]), since, 1.003).tolist() == pytest.approx([0.0, 0.002])


def test_a_clock_that_goes_back_makes_no_touchdown_of_the_spheres_already_down():
    """A restarted simulator's time starts below the last session's: the spheres still active are not taken for
    touchdowns at that instant (ages 0, a coupled touchdown flagged on a robot standing still); their touchdown is
    long past, and a sphere that touches down afterwards starts at age 0."""
    since = np.full(3, np.nan)
    touchdown_ages(np.array([0, 1]), since, 5.0)
    ages = touchdown_ages(np.array([0, 1]), since, 0.0)  # the bridge's clock restarted
    assert np.all(np.isinf(ages)) and np.all(ages > 0)
    assert touchdown_ages(np.array([0, 1, 2]), since, 0.001).tolist()[2] == 0.0


def test_the_quadrupeds_feet_are_nearly_decoupled_with_free_joints_and_coupled_through_the_base():
    """Standing, the feet's normal rows are almost M⁻¹-orthogonal (light legs, free joints: condition (6) nearly
    holds), while with the joints held (the controller's model: the base's 6 DoFs only) they are coupled."""
    robot = RobotModel("quadruped")
    controller = InverseDynamicsController(robot, formulation="two_stage_qp")
    problem, _ = controller.build_problem(
        RobotState(robot.standing_configuration(), np.zeros(robot.nv)), np.zeros(robot.nu)
    )
    limb = sphere_limbs(robot)[controller.last_contacts.sphere]
    age = np.ones(problem.n)
    free, _ = delassus_coupling(problem.N, problem.M, limb, age, 0.002, 0.1)
    u = robot.unactuated_dofs
    held, _ = delassus_coupling_held(problem.N, problem.M, u, limb, age, 0.002, 0.1)
    assert free == pytest.approx(reference_coupling(problem.N, problem.M, limb), rel=1e-10)
    assert held == pytest.approx(reference_coupling(problem.N[:, u], problem.M[np.ix_(u, u)], limb), rel=1e-10)
    assert free < 0.01 < 0.2 < held
    # the formulations' whitened unactuated normal columns give the held value directly
    from idcontrol.formulations.reduced import ReducedDynamics

    whitened = ReducedDynamics(problem).N_w
    assert delassus_coupling_whitened(np.ascontiguousarray(whitened), limb, age, 0.002, 0.1)[0] == pytest.approx(held)


def test_the_one_call_diagnostic_equals_its_parts():
    """coupling_diagnostic gives delassus_coupling, delassus_coupling_held and the held flag, and keeps the
    spheres' touchdown times as touchdown_ages does."""
    rng = np.random.default_rng(4)
    m = 10
    A = rng.standard_normal((m, m))
    M = A @ A.T + m * np.eye(m)
    N = rng.standard_normal((3, m))
    sphere = np.array([0, 2, 3])
    limb_of_sphere = np.array([0, 1, 1, 2])
    unactuated = np.arange(4)
    since = np.array([0.5, np.nan, 0.999, np.nan])
    free, held, flag = coupling_diagnostic(N, M, unactuated, sphere, limb_of_sphere, since, 1.0, 0.002, 0.1)
    age = np.array([0.5, 0.0, 0.001])
    limb = limb_of_sphere[sphere]
    assert np.isnan(since[1]) and since[[0, 2, 3]].tolist() == [0.5, 0.999, 1.0]
    assert free == pytest.approx(delassus_coupling(N, M, limb, age, 0.002, 0.1)[0], rel=1e-12)
    expected_held, expected_flag = delassus_coupling_held(N, M, unactuated, limb, age, 0.002, 0.1)
    assert held == pytest.approx(expected_held, rel=1e-12) and flag == expected_flag
    assert coupling_diagnostic(N[:1], M, unactuated, sphere[:1], limb_of_sphere, since, 1.001, 0.002, 0.1) == (
        0.0,
        0.0,
        False,
    )


def test_the_bench_row_times_the_diagnostic_on_recorded_trot_ticks():
    """``idcontrol bench --scenarios coupling`` records a trot and times the diagnostic on every tick."""
    from idcontrol.tools.bench import bench_coupling

    row = bench_coupling(300)
    assert row["ticks"] == 300 and row["contacts_max"] >= 2
    assert 0 < row["p50_us"] <= row["p99_us"] <= row["max_us"]
    assert row["coupling_max"] < 0.01 < 0.2 < row["coupling_held_median"]


def test_a_runs_records_carry_the_coupling_diagnostic():
    """A closed-loop trot's tick records hold the core's coupling diagnostic (asked for after each tick, off the
    tick's path): both couplings in [0, 1], the held one above the free one wherever two feet on different legs
    are down, zero with fewer than two contacts, and a flag only where a pair is coupled."""
    from idcontrol.settings import load_launch
    from idcontrol.testing.runners import run_in_process
    from tests.conftest import REPO

    run = run_in_process(load_launch(REPO / "launch" / "quadruped_trot.toml"), seconds=1.0)
    free, held, flagged = run.coupling, run.coupling_held, run.coupled_touchdown
    contacts = np.isfinite(run.contact_phi).sum(axis=1)  # one candidate contact per foot on flat ground
    assert free.shape == held.shape == contacts.shape and np.isfinite(free).all()
    assert ((free >= 0) & (free <= 1) & (held >= 0) & (held <= 1)).all()
    assert (free[contacts < 2] == 0).all() and (held[contacts < 2] == 0).all()
    several = contacts >= 2
    assert several.any() and (held[several] > free[several]).all()
    assert not flagged[held < 0.1].any()
