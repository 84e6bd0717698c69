"""The compiled ESS engine against scipy: Dormand–Prince 5(4) (idcontrol.sim.ess.dopri) against
``solve_ivp(method="RK45")`` on the same systems and tolerances, and the whole compiled integrator against the
Python one (``engine="scipy"``) and against crossings worked out by hand."""

from __future__ import annotations

import numpy as np
import pytest
from scipy.integrate import solve_ivp

from idcontrol.errors import ConfigError, SimulationError
from idcontrol.sim.ess import dopri
from idcontrol.sim.ess.integrator import PROJECTED, TICK, EssIntegrator, FunctionSystem
from idcontrol.sim.ess.models import Hopper, PiecewiseAffine, Plate

EPS_PLATE = 0.00291  # m, the band the experiment's plate runs at


class ConstantRates(PiecewiseAffine):
    """ẋ = b(side), piecewise constant; guards h_k = x_k (a compiled twin of the hand-worked cases' systems)."""

    def __init__(self, rates_of_mode, n: int, partner=None) -> None:
        self.n = self.m = n
        self.partner = np.full(n, -1, dtype=np.intp) if partner is None else np.asarray(partner, dtype=np.intp)
        self.H, self.c = np.eye(n), np.zeros(n)
        self._rates = rates_of_mode

    def modes(self, side):
        return np.zeros((self.n, self.n)), np.asarray(self._rates(side), dtype=float)


def plate_in_contact(n: int) -> tuple[Plate, np.ndarray, np.ndarray]:
    """A plate on ``n`` springs just after touching down, tilted and moving: (plate, x, side with all in contact)."""
    plate = Plate(n, stiffness=2000.0 / n, damping=4.0 / n)
    x = np.array([0.01, 0.995, 0.02, 0.1, -0.8, 0.3])
    side = np.zeros(2 * n, dtype=np.bool_)
    side[:n] = True
    return plate, x, side


def scipy_rhs(system, side):
    return lambda _t, y: system.field(y, side)


@pytest.mark.parametrize("first_step", [0.0, 3e-4])
def test_dopri_takes_scipys_rk45_steps(first_step):
    """Without events, on the plate in contact (stiff springs, 0.2 s), the compiled solver makes as many field
    evaluations as scipy's RK45 at rtol 1e-6, atol 1e-9, max_step 2 ms and ends at the same state to 1e-12
    (chosen first step, and a given one)."""
    plate, x, side = plate_in_contact(10)
    atol = np.full(6, 1e-9)
    y = np.empty(6)
    status, t, evaluations, steps, largest = dopri.integrate(
        plate.record,
        side,
        0.0,
        x,
        0.2,
        1e-6,
        atol,
        2e-3,
        first_step,
        np.zeros(0, np.int64),
        np.zeros(0),
        np.zeros(0),
        np.empty(plate.m),
        y,
    )
    options = {"first_step": first_step} if first_step else {}
    ref = solve_ivp(
        scipy_rhs(plate, side), (0.0, 0.2), x, method="RK45", rtol=1e-6, atol=atol, max_step=2e-3, **options
    )
    assert status == dopri.FINISHED and ref.status == 0 and t == 0.2
    assert evaluations == ref.nfev and steps == len(ref.t) - 1
    assert largest == pytest.approx(np.max(np.diff(ref.t[:-1])), rel=1e-12)
    assert y == pytest.approx(ref.y[:, -1], rel=1e-12, abs=1e-13)


def test_dopri_stops_at_scipys_event():
    """A terminal rising event g = max_i s_i (h_{k_i} − l_i) (the plate's centre spring compressed 4 mm, or the
    plate's end risen 1 cm): the compiled solver stops where scipy's solve_ivp does (brentq on the dense output),
    to 1e-13 s, with the same state to 1e-12."""
    plate, x, side = plate_in_contact(11)
    k = np.array([5, 2 * 11 - 1], dtype=np.int64)  # touchdown guard of the centre spring, lift-off of the last
    s, l = np.array([1.0, 1.0]), np.array([0.004, 0.01])
    atol = np.full(6, 1e-9)
    y = np.empty(6)
    status, t, evaluations, _, _ = dopri.integrate(
        plate.record, side, 0.0, x, 0.5, 1e-6, atol, 2e-3, 0.0, k, s, l, np.empty(plate.m), y
    )

    def event(_t, yy):
        return float(np.max(s * (plate.guards(yy)[k] - l)))

    event.terminal, event.direction = True, 1.0
    ref = solve_ivp(
        scipy_rhs(plate, side), (0.0, 0.5), x, method="RK45", rtol=1e-6, atol=atol, max_step=2e-3, events=[event]
    )
    assert ref.status == 1 and status == dopri.EVENT
    assert t == pytest.approx(ref.t[-1], abs=1e-13) and evaluations == ref.nfev
    assert y == pytest.approx(ref.y[:, -1], rel=1e-12, abs=1e-13)
    assert abs(event(t, y)) < 1e-12


def test_dopri_fails_on_a_nan_field():
    """A field that is NaN: the solver reports a failure and returns (scipy's RK45 would loop for ever here: its
    initial step is NaN, and no NaN step is ever below the smallest step); the ESS integrator raises."""
    system = ConstantRates(lambda side: [np.nan], 1)
    y = np.empty(1)
    for first_step in (0.0, 1e-3):  # chosen (NaN), or given: every step rejected until below 10 ulp of t
        status, t, *_ = dopri.integrate(
            system.record,
            np.zeros(1, np.bool_),
            0.0,
            np.array([-1.0]),
            1.0,
            1e-6,
            np.full(1, 1e-9),
            np.inf,
            first_step,
            np.zeros(0, np.int64),
            np.zeros(0),
            np.zeros(0),
            np.empty(1),
            y,
        )
        assert status == dopri.FAILED and t == 0.0
    integrator = EssIntegrator(system, eps=0.1)
    with pytest.raises(SimulationError, match="ODE solver failed"):
        integrator.advance(np.array([-1.0]), 0.0, 1.0, integrator.start(np.array([-1.0])))


@pytest.mark.parametrize("springs", [3, 40])
def test_the_compiled_integrator_repeats_the_python_one_on_the_plate(springs):
    """The plate dropped on its springs for 1 s: the compiled engine crosses the same guards in the same order at
    the same times (1e-12 s) as the Python engine on scipy, with the same counts of projections, splits, solver
    calls and field evaluations, and ends at the same state (1e-10)."""
    plate = Plate(springs, stiffness=2000.0 / springs, damping=4.0 / springs)
    x0 = plate.initial(1.3, 0.05)
    runs = {}
    for engine in ("scipy", "compiled"):
        integrator = EssIntegrator(plate, EPS_PLATE, rtol=1e-6, atol=1e-9, max_step=2e-3, engine=engine)
        assert integrator.engine == engine
        runs[engine] = (integrator.integrate(x0, 0.0, 1.0, samples=np.arange(1, 51) * 0.02), integrator.stats)
    (ref, ref_stats), (run, stats) = runs["scipy"], runs["compiled"]
    assert len(run.crossings) > springs
    assert [(c.guard, c.how) for c in run.crossings] == [(c.guard, c.how) for c in ref.crossings]
    assert [c.t for c in run.crossings] == pytest.approx([c.t for c in ref.crossings], abs=1e-12)
    assert stats == ref_stats
    assert run.x == pytest.approx(ref.x, rel=1e-10, abs=1e-12)
    assert np.array_equal(run.memory.side, ref.memory.side) and np.array_equal(run.memory.armed, ref.memory.armed)


def test_the_compiled_integrator_repeats_the_python_one_on_the_hopper():
    """The hopper through two hops with 2 ms samples (each a tick): the same crossings and states (1e-10)."""
    hopper = Hopper()
    times = np.arange(1, 1001) * 0.002
    runs = [
        EssIntegrator(hopper, 1e-3, rtol=1e-8, atol=1e-10, max_step=2e-3, engine=e).integrate(
            np.array([2.0, 0.0]), 0.0, 2.0, samples=times
        )
        for e in ("scipy", "compiled")
    ]
    assert [c.guard for c in runs[1].crossings] == [c.guard for c in runs[0].crossings] == [0, 1, 0, 1]
    assert [c.t for c in runs[1].crossings] == pytest.approx([c.t for c in runs[0].crossings], abs=1e-12)
    assert runs[1].x == pytest.approx(runs[0].x, rel=1e-10, abs=1e-12)


def test_compiled_three_guards_in_the_band_are_crossed_in_the_order_worked_out_by_hand():
    """The integrator tests' hand-worked case on the compiled engine: guard 1 at 0.01, guard 0 at 0.02, guard 2
    at 0.10, all projected, and the final state by hand."""
    system = ConstantRates(lambda side: [1.0 + 3.0 * side[1], 2.0, 0.5 + 0.5 * side[0]], 3)
    integrator = EssIntegrator(system, eps=0.1, engine="compiled")
    run = integrator.integrate(np.array([-0.05, -0.02, -0.09]), 0.0, 0.2)
    assert [c.guard for c in run.crossings] == [1, 0, 2]
    assert [c.t for c in run.crossings] == pytest.approx([0.01, 0.02, 0.10], abs=1e-14)
    assert all(c.how == PROJECTED for c in run.crossings)
    assert run.x[-1] == pytest.approx([0.72, 0.38, 0.10], abs=1e-12)
    assert integrator.stats.projections == 3


def test_compiled_projection_does_not_jump_a_fast_guard_over_its_band():
    """The band-jump defect on the compiled engine: the projection of the slow guard is split where the fast one
    enters its band; the fast guard is crossed first, at 0.002, the slow one at 0.09."""
    integrator = EssIntegrator(ConstantRates(lambda side: [1.0, 100.0], 2), eps=0.1, engine="compiled")
    run = integrator.integrate(np.array([-0.09, -0.2]), 0.0, 0.5)
    assert [c.guard for c in run.crossings] == [1, 0]
    assert [c.t for c in run.crossings] == pytest.approx([0.002, 0.09], abs=1e-14)
    assert integrator.stats.splits == 1


def test_compiled_time_never_passes_the_end_of_the_interval():
    """On the compiled engine a guard whose crossing lies beyond t_f stays in its band at exactly t_f, and the
    next interval crosses it at its time."""
    integrator = EssIntegrator(ConstantRates(lambda side: [1.0], 1), eps=0.1, engine="compiled")
    memory = integrator.start(np.array([-0.05]))
    first = integrator.advance(np.array([-0.05]), 0.0, 0.02, memory)
    assert first.x == pytest.approx([-0.03], abs=1e-15) and [c.guard for c in first.crossings] == [TICK]
    second = integrator.advance(first.x, 0.02, 0.1, memory)
    assert [(c.guard, c.how) for c in second.crossings] == [(0, PROJECTED), (TICK, "tick")]
    assert second.crossings[0].t == pytest.approx(0.05, abs=1e-15)


def test_the_engine_is_chosen_and_checked():
    """Engine "auto" compiles a system with a compiled record under RK45, keeps scipy for another method or a Python
    system; asking for "compiled" where it cannot be is an error that says why."""
    assert EssIntegrator(Hopper(), 1e-3).engine == "compiled"
    assert EssIntegrator(Hopper(), 1e-3, method="DOP853").engine == "scipy"
    python = FunctionSystem(lambda x, side: np.ones(1), lambda x: x.copy(), lambda x: np.eye(1), 1, 1)
    assert EssIntegrator(python, 0.1).engine == "scipy"
    with pytest.raises(ConfigError, match="compiled record"):
        EssIntegrator(python, 0.1, engine="compiled")
    with pytest.raises(ConfigError, match="engine must be one of"):
        EssIntegrator(Hopper(), 1e-3, engine="fast")
