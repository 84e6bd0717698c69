"""DAQP's compiled path (idcontrol.solvers.daqp_native) against daqp.Model, against ProxQP, and its self-check."""

from __future__ import annotations

import copy
import logging
import os

import numpy as np
import proxsuite
import pytest
from numba import njit

from idcontrol.errors import NativeSolverUnavailable
from idcontrol.solvers import daqp_native as dn
from idcontrol.solvers.qp import INFINITY, DenseQP

needs_native = pytest.mark.skipif(not dn.native_available(), reason=f"compiled path off: {dn.native_status()}")


def random_qp(rng: np.random.Generator, n: int, *, bounds: bool, psd: bool, infeasible: bool = False) -> dict:
    """A QP of the project's shapes: box bounds (optional), inequality rows, equality rows last; feasible unless
    ``infeasible`` (then two rows conflict). ``psd``: H is the Gram matrix of 6 rows (rank 6), as Stage I's."""
    rows, equalities = int(rng.integers(1, 2 * n)), int(rng.integers(0, n // 3 + 1))
    rows = max(rows, equalities + 2 * infeasible)
    B = rng.standard_normal((min(6, n), n) if psd else (n, n))
    H = B.T @ B + (0.0 if psd else 0.1 * np.eye(n))
    x_feasible = rng.uniform(-0.5, 0.5, n)
    A = rng.standard_normal((rows, n))
    Ax = A @ x_feasible
    upper = Ax + rng.uniform(0.0, 1.0, rows)
    lower = np.where(rng.random(rows) < 0.5, -INFINITY, Ax - rng.uniform(0.0, 1.0, rows))
    upper[rows - equalities :] = lower[rows - equalities :] = Ax[rows - equalities :]
    if infeasible:  # row 1 = −row 0, both asking for ≥ 1: a x ≥ 1 and a x ≤ −1
        A[1] = -A[0]
        lower[:2], upper[:2] = 1.0, INFINITY
    if bounds:
        lower, upper = np.r_[np.full(n, -1.0), lower], np.r_[np.full(n, 1.0), upper]
    return {"H": H, "A": A, "lower": lower, "upper": upper, "bounds": bounds, "equalities": equalities}


def native_for(p: dict) -> dn.NativeQP:
    n, rows = p["H"].shape[0], p["A"].shape[0]
    return dn.NativeQP(n, rows, bounds=p["bounds"], equalities=p["equalities"])


@needs_native
def test_random_qps_get_daqp_models_answers() -> None:
    """On 150 random QPs of 6 to 40 variables (bounds or not, inequality and equality rows, positive definite and
    rank-6 Hessians, a tenth infeasible), each solved three times with new g (the second and third warm-started):
    the same exit flags, iteration counts and x (to 1e-12) as DenseQP.solve_stacked (daqp.Model)."""
    rng = np.random.default_rng(11)
    statuses = set()
    for case in range(150):
        n = int(rng.choice([6, 9, 12, 20, 40]))
        psd = case % 2 == 1
        p = random_qp(rng, n, bounds=psd or case % 4 != 0, psd=psd, infeasible=case % 10 == 3)
        reference, native = DenseQP(), native_for(p)
        for k in range(3):
            g = 3.0 * rng.standard_normal(n)
            expected = reference.solve_stacked(
                p["H"], g, p["A"], p["lower"], p["upper"], bounds=p["bounds"], warm=k > 0, equalities=p["equalities"]
            )
            flag = dn.solve_stacked(native, p["H"], g, p["A"], p["lower"], p["upper"], dn.WARM if k else dn.COLD)
            statuses.add(flag)
            assert f"daqp exit {flag}" == expected.status, (case, k)
            assert native.iterations == expected.iterations, (case, k)
            assert native.found == expected.found
            np.testing.assert_allclose(native.x, expected.x, rtol=0, atol=1e-12)
    assert {1, -1} <= statuses  # found and infeasible both exercised


def proxqp(H: np.ndarray, g: np.ndarray, p: dict) -> tuple[np.ndarray, float]:
    """ProxQP's (proximal augmented Lagrangian) x and objective for ``p``, tight tolerance."""
    n, rows, eq = H.shape[0], p["A"].shape[0], p["equalities"]
    lower, upper = p["lower"][n if p["bounds"] else 0 :], p["upper"][n if p["bounds"] else 0 :]
    C, l, u = p["A"][: rows - eq], np.maximum(lower[: rows - eq], -1e20), np.minimum(upper[: rows - eq], 1e20)
    qp = proxsuite.proxqp.dense.QP(n, eq, rows - eq, p["bounds"])
    qp.settings.eps_abs, qp.settings.eps_rel, qp.settings.max_iter = 1e-11, 0.0, 100_000
    box = (p["lower"][:n], p["upper"][:n]) if p["bounds"] else ()
    qp.init(H, g, p["A"][rows - eq :], upper[rows - eq :], C, l, u, *box)
    qp.solve()
    assert qp.results.info.status == proxsuite.proxqp.QPSolverOutput.PROXQP_SOLVED
    x = np.array(qp.results.x)
    return x, 0.5 * x @ H @ x + g @ x


@needs_native
def test_random_qps_match_proxqp() -> None:
    """An independent solver: on 40 feasible random QPs, x matches ProxQP's to 1e-6 when H is positive definite
    (a unique minimizer), the objective to 1e-7 (relative) when H is the rank-6 Gram matrix (x is not unique)."""
    rng = np.random.default_rng(12)
    for case in range(40):
        n = int(rng.choice([6, 12, 20]))
        psd = case % 2 == 1
        p = random_qp(rng, n, bounds=True, psd=psd)
        g = 3.0 * rng.standard_normal(n)
        native = native_for(p)
        dn.solve_stacked(native, p["H"], g, p["A"], p["lower"], p["upper"], dn.COLD)
        assert native.found
        x_ref, objective_ref = proxqp(p["H"], g, p)
        x = native.x
        if psd:
            objective = 0.5 * x @ p["H"] @ x + g @ x
            assert abs(objective - objective_ref) <= 1e-7 * (1.0 + abs(objective_ref)), case
        else:
            np.testing.assert_allclose(x, x_ref, rtol=0, atol=1e-6)


@needs_native
def test_a_given_active_set_starts_as_dense_qps_active() -> None:
    """start=GIVEN with flags written into qp.sense gives DenseQP's answer and iterations for ``active=`` (also a
    wrong guess, which costs iterations but not the answer)."""
    rng = np.random.default_rng(13)
    p = random_qp(rng, 12, bounds=True, psd=True)
    g = 3.0 * rng.standard_normal(12)
    m = p["lower"].shape[0]
    for active in (np.zeros(m, np.int32), (rng.random(m) < 0.3).astype(np.int32)):
        active[m - p["equalities"] :] = 0
        expected = DenseQP().solve_stacked(
            p["H"], g, p["A"], p["lower"], p["upper"], bounds=True, active=active, equalities=p["equalities"]
        )
        native = native_for(p)
        native.sense[:] = active
        native.H[:], native.f[:], native.A[:] = p["H"], g, p["A"]
        native.lower[:], native.upper[:] = p["lower"], p["upper"]
        assert dn.solve(native, dn.GIVEN, dn.CHANGED_ALL) == int(expected.status.split()[-1])
        assert native.iterations == expected.iterations
        np.testing.assert_allclose(native.x, expected.x, rtol=0, atol=1e-12)


@needs_native
def test_only_the_changed_parts_are_updated() -> None:
    """After a solve, changing only f and saying so (CHANGED_F) gives the answer of a solve with everything new."""
    rng = np.random.default_rng(14)
    p = random_qp(rng, 12, bounds=True, psd=False)
    g1, g2 = rng.standard_normal(12), rng.standard_normal(12)
    partial, full = native_for(p), native_for(p)
    dn.solve_stacked(partial, p["H"], g1, p["A"], p["lower"], p["upper"], dn.COLD)
    partial.f[:] = g2
    dn.solve(partial, dn.COLD, dn.CHANGED_F)
    dn.solve_stacked(full, p["H"], g2, p["A"], p["lower"], p["upper"], dn.COLD)
    np.testing.assert_allclose(partial.x, full.x, rtol=0, atol=1e-12)


@needs_native
def test_an_infeasible_problem_is_not_found_and_the_next_one_is() -> None:
    """Conflicting rows: exit −1 and found=False (after the tolerance retry, as DenseQP); the same record then
    solves a feasible problem, starting cold although WARM was asked (no found solve to start from)."""
    rng = np.random.default_rng(15)
    bad = random_qp(rng, 9, bounds=True, psd=False, infeasible=True)
    g = rng.standard_normal(9)
    native = native_for(bad)
    expected = DenseQP().solve_stacked(
        bad["H"], g, bad["A"], bad["lower"], bad["upper"], bounds=True, equalities=bad["equalities"]
    )
    assert dn.solve_stacked(native, bad["H"], g, bad["A"], bad["lower"], bad["upper"], dn.COLD) == -1
    assert not native.found and not expected.found and native.iterations == expected.iterations
    good = dict(bad, lower=bad["lower"].copy())
    good["lower"][9:11] = -INFINITY
    dn.solve_stacked(native, good["H"], g, good["A"], good["lower"], good["upper"], dn.WARM)
    assert native.found


@needs_native
def test_a_set_up_daqp_rejects_is_not_found_and_tried_again_on_the_next_solve() -> None:
    """Crossed bounds at the first solve: DAQP rejects the set-up (exit −1, as DenseQP says); the same record sets
    up again on the next solve, with its own tolerances. Three inconsistent equality rows on two variables: exit −6."""
    native = dn.NativeQP(2, 0, bounds=True)
    crossed = np.array([1.0, -1.0]), np.array([-1.0, 1.0])  # lower, upper: x₀ ∈ [1, −1]
    expected = DenseQP().solve_stacked(np.eye(2), np.zeros(2), np.zeros((0, 2)), *crossed, bounds=True)
    flag = dn.solve_stacked(native, np.eye(2), -np.ones(2), np.zeros((0, 2)), *crossed, dn.COLD)
    assert expected.status == f"daqp exit {flag}" == "daqp exit -1" and not native.found
    dn.solve_stacked(native, np.eye(2), -np.ones(2), np.zeros((0, 2)), np.full(2, -0.5), np.full(2, 0.5), dn.WARM)
    assert native.found
    np.testing.assert_allclose(native.x, [0.5, 0.5], atol=1e-12)
    _, settings, _, work = native.c_structs
    assert work[0]["settings"] == settings.ctypes.data and settings[0]["primal_tol"] == 1e-8
    native = dn.NativeQP(2, 3, bounds=False, equalities=3)
    C, b = np.array([[1.0, 0.0], [0.0, 1.0], [1.0, 1.0]]), np.array([1.0, 1.0, 1.0])  # inconsistent
    assert dn.solve_stacked(native, np.eye(2), np.zeros(2), C, np.full(3, -INFINITY), b, dn.COLD) == -6


@needs_native
def test_arrays_of_other_sizes_never_reach_c() -> None:
    """Data of the wrong size is refused before any C call: EXIT_SHAPE_MISMATCH, found=False."""
    native = dn.NativeQP(6, 4, bounds=True)
    H, A = np.eye(6), np.zeros((4, 6))
    assert dn.solve_stacked(native, H, np.zeros(6), A, np.zeros(9), np.zeros(10), dn.COLD) == dn.EXIT_SHAPE_MISMATCH
    assert dn.solve_stacked(native, np.eye(5), np.zeros(6), A, np.zeros(10), np.zeros(10), dn.COLD) < 0
    assert not native.found


def test_a_version_the_layout_was_not_written_for_turns_the_path_off(caplog: pytest.LogCaptureFixture) -> None:
    """daqp 0.12.0 (simulated): the self-check fails naming the version, with one logged warning."""
    with caplog.at_level(logging.WARNING, logger="idcontrol.solvers.daqp_native"):
        ok, reason = dn.self_check(version="0.12.0")
    assert not ok and "0.12.0" in reason
    assert len(caplog.records) == 1 and "compiled path is off" in caplog.records[0].getMessage()


def _perturbed(struct: str, change) -> dict:
    layout = copy.deepcopy(dn.LAYOUT)
    change(layout[struct])
    return layout


def _swap(a: str, b: str):
    def change(entry: dict) -> None:
        entry["fields"][a], entry["fields"][b] = entry["fields"][b], entry["fields"][a]

    return change


def _shrink(entry: dict) -> None:
    entry["size"] -= 16  # the true struct's last fields fall past the end


@pytest.mark.parametrize(
    ("struct", "change"),
    [
        ("settings", _swap("primal_tol", "dual_tol")),
        ("problem", _swap("n", "m")),
        ("problem", _swap("H", "A")),
        ("result", _swap("x", "lam")),
        ("workspace", _shrink),
        ("workspace", _swap("n", "ms")),
    ],
    ids=[
        "settings fields swapped",
        "problem sizes swapped",
        "problem pointers swapped",
        "result pointers swapped",
        "workspace too short",
        "workspace sizes swapped",
    ],
)
def test_a_wrong_layout_is_caught_by_the_probe_in_a_child(struct: str, change) -> None:
    """A layout that does not match the library (simulated: fields swapped, a struct too short) fails the probe,
    run in a child process: a crash there (out-of-bounds writes) is a failed check, never this process's crash."""
    ok, reason = dn.self_check(layout=_perturbed(struct, change), warn=False)
    assert not ok, reason


def test_a_crash_in_the_probe_is_a_failed_check() -> None:
    """A layout that makes DAQP write through a null pointer (the result's x declared where fval is) kills the
    probe's child process with SIGSEGV: the check fails, saying so, and this process goes on."""
    ok, reason = dn.self_check(layout=_perturbed("result", _swap("x", "fval")), warn=False)
    assert not ok and "signal 11" in reason


@needs_native
def test_a_different_answer_turns_the_path_off(monkeypatch: pytest.MonkeyPatch) -> None:
    """If the compiled path's x differs from daqp.Model's by 1e-9 on a known QP, the self-check fails naming it."""
    solve_stacked = dn.solve_stacked

    def off_by_a_little(qp, *args):
        flag = solve_stacked(qp, *args)
        qp.x[0] += 1e-9
        return flag

    monkeypatch.setattr(dn, "solve_stacked", off_by_a_little)
    ok, reason = dn.self_check(warn=False)
    assert not ok and "bounds and inequality rows" in reason


def test_callers_see_the_flag_and_get_an_error_when_the_path_is_off(monkeypatch: pytest.MonkeyPatch) -> None:
    """With the self-check failed, NATIVE_AVAILABLE is False and making a NativeQP raises with the reason."""
    monkeypatch.setattr(dn, "_STATUS", (False, "simulated failure"))
    from idcontrol.solvers.daqp_native import NATIVE_AVAILABLE

    assert NATIVE_AVAILABLE is False and dn.NATIVE_AVAILABLE is False
    with pytest.raises(NativeSolverUnavailable, match="simulated failure"):
        dn.NativeQP(6, 4)


def test_stand_ins_link_but_solve_nothing() -> None:
    """Where the library lacks a function, its stand-in returns EXIT_MISSING_FUNCTION (set-up and update fail)."""
    assert dn._stand_in("setup_daqp_main").ctypes(0, 0, 0, 0) == dn.EXIT_MISSING_FUNCTION
    assert dn._stand_in("daqp_update_ldp").ctypes(0, 0, 0) == dn.EXIT_MISSING_FUNCTION


@njit(cache=False)
def _solve_many(qp, g, count):
    """``count`` warm-started solves with f scaled by 1 ± 0.3 %; how many were found."""
    found = 0
    for k in range(count):
        for i in range(g.shape[0]):
            qp.f[i] = g[i] * (1.0 + 1e-3 * (k % 7 - 3))
        dn.solve(qp, dn.WARM, dn.CHANGED_F)
        found += qp.found
    return found


def _rss() -> int:
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")


@needs_native
@pytest.mark.skipif(not os.path.exists("/proc/self/statm"), reason="reads the resident set size from /proc")
def test_no_memory_grows_over_many_solves_and_set_ups() -> None:
    """100 000 solves on one record and 3 000 records set up and dropped: the resident set grows < 1 MiB
    (a leak of 10 bytes a solve or 350 bytes a set-up would show)."""
    rng = np.random.default_rng(16)
    p = random_qp(rng, 12, bounds=True, psd=True)
    g = 3.0 * rng.standard_normal(12)

    def set_up_and_drop(count: int) -> None:
        for _ in range(count):
            native = native_for(p)
            dn.solve_stacked(native, p["H"], g, p["A"], p["lower"], p["upper"], dn.COLD)

    native = native_for(p)
    dn.solve_stacked(native, p["H"], g, p["A"], p["lower"], p["upper"], dn.COLD)
    _solve_many(native, g, 10_000)
    set_up_and_drop(300)
    before = _rss()
    assert _solve_many(native, g, 100_000) == 100_000
    set_up_and_drop(3_000)
    assert _rss() - before < 1 << 20
