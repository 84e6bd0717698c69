"""The ESS integrator (Anderson & Revzen) on systems whose answers are known: the paper's order test, crossings
worked out by hand, and the defects of the paper's Listing 1."""

from __future__ import annotations

import math

import numpy as np
import pytest

from idcontrol.errors import ConfigError, InputError
from idcontrol.sim.ess.integrator import (
    LOCATED,
    PROJECTED,
    REVERSED,
    TICK,
    EssIntegrator,
    FunctionSystem,
)
from idcontrol.sim.ess.models import Hopper, OrderTestSystem, exact_piecewise_affine


def constant_system(rates_of_mode, n: int, partner=None) -> FunctionSystem:
    """ẋ piecewise constant (``rates_of_mode(side) -> (n,)``), guards h_k = x_k."""
    return FunctionSystem(
        lambda x, side: np.asarray(rates_of_mode(side), dtype=float),
        lambda x: np.array(x[:n]),
        lambda x: np.eye(n),
        n,
        n,
        partner,
    )


def test_order_test_error_is_second_order_in_eps():
    """On the paper's Table 1 system the final-state error falls 100-fold per 10-fold smaller ε (slope ≥ 1.95),
    and matches the reproduction's 1.41e-4 at ε = 1e-2."""
    system = OrderTestSystem()
    exact = exact_piecewise_affine(system, system.X0, [system.T_END])[0]
    errors = []
    for eps in (1e-2, 1e-3):
        integrator = EssIntegrator(system, eps, method="DOP853", rtol=1e-12, atol=1e-14)
        run = integrator.integrate(system.X0, 0.0, system.T_END)
        errors.append(float(np.linalg.norm(run.x[-1] - exact)))
        assert [c.guard for c in run.crossings] == [1, 2, 0]  # y, then z, then x
        assert all(c.how == PROJECTED for c in run.crossings)
    slope = math.log10(errors[0] / errors[1])
    assert slope >= 1.95
    assert errors[0] == pytest.approx(1.41e-4, rel=0.02)


def test_exact_order_test_solution_follows_each_modes_field():
    """The exact piecewise solution (the order test's reference) is continuous across its switches and, between
    them, its finite-difference rate is the field of the mode given by the signs of h."""
    system = OrderTestSystem()
    h = 1e-6
    times = np.sort(np.concatenate([np.linspace(0.01, 0.49, 25), np.linspace(0.01, 0.49, 25) + h]))
    x = exact_piecewise_affine(system, system.X0, times)
    for i in range(0, len(times), 2):
        before, after = x[i], x[i + 1]
        assert np.linalg.norm(after - before) < 10 * h  # continuous
        if np.all(np.sign(system.guards(after)) == np.sign(system.guards(before))):  # no switch within h
            assert np.allclose((after - before) / h, system.field(before, system.guards(before) >= 0), atol=1e-4)


def test_three_guards_in_the_band_are_crossed_one_at_a_time_in_predicted_order():
    """Three guards inside their bands, piecewise-constant field that changes with each crossing: the order
    and the times are the ones computed by hand (1 at 0.01, then 0 at 0.02, then 2 at 0.10)."""

    def rates(side):  # ẋ0 speeds up once guard 1 is crossed, ẋ2 once guard 0 is
        return [1.0 + 3.0 * side[1], 2.0, 0.5 + 0.5 * side[0]]

    integrator = EssIntegrator(constant_system(rates, 3), eps=0.1)
    run = integrator.integrate(np.array([-0.05, -0.02, -0.09]), 0.0, 0.2)
    assert [c.guard for c in run.crossings] == [1, 0, 2]
    assert [c.t for c in run.crossings] == pytest.approx([0.01, 0.02, 0.10], abs=1e-14)
    assert all(c.how == PROJECTED for c in run.crossings)
    # by hand: x0 = 4 (t − 0.02), x1 = 0.02 + 2 (t − 0.02), x2 = (t − 0.10) · 1.0 after the last crossing
    assert run.x[-1] == pytest.approx([0.72, 0.38, 0.10], abs=1e-12)
    assert integrator.stats.projections == 3


def test_a_projection_does_not_jump_a_fast_guard_over_its_band():
    """Listing 1's defect: projecting a slow guard (in its band) carried a fast one from below its band to past
    zero, so its next "projection" went back in time. The projection stops where the fast guard enters its band:
    both are crossed in their true order at their true times, and time never runs backwards."""
    eps = 0.1
    integrator = EssIntegrator(constant_system(lambda side: [1.0, 100.0], 2), eps=eps)
    run = integrator.integrate(np.array([-0.09, -0.2]), 0.0, 0.5)
    assert [c.guard for c in run.crossings] == [1, 0]  # the fast guard first
    assert [c.t for c in run.crossings] == pytest.approx([0.002, 0.09], abs=1e-14)
    assert integrator.stats.splits == 1
    times = [c.t for c in run.crossings]
    assert times == sorted(times)
    # what Listing 1 would have done: project the slow guard (Δt = 0.09), leaving the fast one 8.8 past zero
    assert -0.2 + 100.0 * 0.09 > eps


def test_an_integration_step_stops_where_a_guard_enters_its_band():
    """With one ODE step spanning the whole interval (constant field, no step limit), the band entry is found by
    root finding, not at the step's end: both guards are projected from −ε, at their exact times."""
    integrator = EssIntegrator(constant_system(lambda side: [1.0, 100.0], 2), eps=0.1)
    run = integrator.integrate(np.array([-0.5, -20.0]), 0.0, 1.0)
    assert [c.guard for c in run.crossings] == [1, 0]
    assert [c.t for c in run.crossings] == pytest.approx([0.2, 0.5], abs=1e-12)
    assert all(c.how == PROJECTED for c in run.crossings)


def test_time_never_passes_the_end_of_the_interval():
    """A guard whose predicted crossing lies beyond t_f is left in its band at exactly t_f (the tick boundary is
    a guard), and the next interval crosses it at the right time."""
    integrator = EssIntegrator(constant_system(lambda side: [1.0], 1), eps=0.1)
    memory = integrator.start(np.array([-0.05]))
    first = integrator.advance(np.array([-0.05]), 0.0, 0.02, memory)
    assert first.x == pytest.approx([-0.03], abs=1e-15)
    assert [c.guard for c in first.crossings] == [TICK] and first.crossings[-1].t == 0.02
    assert not memory.side[0]
    second = integrator.advance(first.x, 0.02, 0.1, memory)
    assert [(c.guard, c.how) for c in second.crossings] == [(0, PROJECTED), (TICK, "tick")]
    assert second.crossings[0].t == pytest.approx(0.05, abs=1e-15)
    assert memory.side[0]


def test_a_guard_read_just_below_zero_after_its_projection_stays_crossed():
    """Projecting onto the curved guard h = x1 − x0² lands it at −6.25e-4 (the linearization's error, a large
    case of the paper's −1e−12 reading): the mode stays the crossed one, the guard is not crossed twice, and
    the state then follows the crossed mode's field."""

    def f(x, side):
        return np.array([1.0, 8.0]) if side[0] else np.array([1.0, 4.0])

    system = FunctionSystem(f, lambda x: np.array([x[1] - x[0] ** 2]), lambda x: np.array([[-2 * x[0], 1.0]]), 2, 1)
    integrator = EssIntegrator(system, eps=0.1)
    run = integrator.integrate(np.array([1.0, 0.95]), 0.0, 0.1)
    assert [c.guard for c in run.crossings] == [0]
    t_cross = run.crossings[0].t
    assert t_cross == pytest.approx(0.025)  # −h / (Dh·f) = 0.05 / (4 − 2)
    projected = np.array([1.0, 0.95]) + 0.025 * np.array([1.0, 4.0])
    assert system.guards(projected)[0] == pytest.approx(-6.25e-4)
    assert run.x[-1] == pytest.approx(projected + (0.1 - t_cross) * np.array([1.0, 8.0]), abs=1e-9)
    assert run.memory.side[0]


def test_a_grazing_guard_is_located_by_the_solver_not_projected():
    """Liveness fails near the top of an oscillation that just reaches the guard (ḣ → 0 inside the band): the
    guard is not projected but crossed where the ODE solver's root finder puts it, at the exact time; when the
    oscillation falls back, the guard (unpartnered) is flipped back where it is located again."""
    level = 1.0 - 1e-4  # p(t) = −cos t reaches 1 at t = π: the guard sits just below the top

    def f(x, side):
        return np.array([x[1], -x[0]])  # harmonic oscillator, the same in both modes

    system = FunctionSystem(f, lambda x: np.array([x[0] - level]), lambda x: np.array([[1.0, 0.0]]), 2, 1)
    integrator = EssIntegrator(system, eps=1e-2, min_rate=0.5, rtol=1e-12, atol=1e-14)
    run = integrator.integrate(np.array([-1.0, 0.0]), 0.0, 3.2)
    assert [(c.guard, c.how) for c in run.crossings] == [(0, LOCATED), (0, REVERSED)]
    up = math.acos(-level)
    assert [c.t for c in run.crossings] == pytest.approx([up, 2 * math.pi - up], abs=1e-8)
    assert integrator.stats.liveness_failures == 2
    assert integrator.stats.projections == 0


def test_partner_guards_hop_the_hopper_through_touchdown_and_liftoff():
    """The 1-D hopper's touchdown and lift-off guards (partners) are crossed alternately, each projected, and the
    error against the exact trajectory falls about 100-fold with a 10-fold smaller ε."""
    hopper = Hopper()
    times = np.arange(1, 21) * 0.1
    exact = exact_piecewise_affine(hopper, np.array([2.0, 0.0]), times)
    errors = []
    for eps in (1e-2, 1e-3):
        integrator = EssIntegrator(hopper, eps=eps, rtol=1e-10, atol=1e-12)
        run = integrator.integrate(np.array([2.0, 0.0]), 0.0, 2.0, samples=times)
        assert [c.guard for c in run.crossings] == [0, 1, 0, 1]  # touchdown 0.45 s, lift-off 0.55 s, ...
        assert all(c.how == PROJECTED for c in run.crossings)
        errors.append(np.max(np.abs(run.x[:, 0] - exact[:, 0])))
    assert errors[0] / errors[1] > 50.0
    assert errors[1] < 2e-4


def test_bad_settings_and_inputs_are_named():
    """ε, the liveness bound, partners and the interval are checked with errors that say what is wrong."""
    system = constant_system(lambda side: [1.0, 1.0], 2)
    with pytest.raises(ConfigError, match="eps"):
        EssIntegrator(system, eps=0.0)
    with pytest.raises(ConfigError, match="min_rate"):
        EssIntegrator(system, eps=0.1, min_rate=-1.0)
    with pytest.raises(ConfigError, match="partner"):
        constant_system(lambda side: [1.0, 1.0], 2, partner=[1, 1])
    integrator = EssIntegrator(system, eps=0.1)
    memory = integrator.start(np.array([-1.0, -1.0]))
    with pytest.raises(InputError, match="backwards"):
        integrator.advance(np.array([-1.0, -1.0]), 1.0, 0.5, memory)
    with pytest.raises(InputError, match="shape"):
        integrator.advance(np.array([-1.0]), 0.0, 0.5, memory)
