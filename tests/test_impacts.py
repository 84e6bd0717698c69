"""Set-valued simultaneous impacts (Halm & Posa): the increment LCP, Algorithm 1, Algorithm 2, the rocking block."""

from __future__ import annotations

import numpy as np
import pytest

from idcontrol.analysis.impacts import (
    ImpactModel,
    RockingBlock,
    approximate_set,
    forced_termination_step,
    sample_outcome,
)
from idcontrol.errors import InputError, NonFiniteError, ShapeError
from idcontrol.solvers.lcp import lcp_residuals


def sliding_point_mass(mu: float) -> ImpactModel:
    """A 1 kg point in the plane, v = (ẋ, ż), touching the ground z = 0 with friction directions ±x̂."""
    return ImpactModel(np.eye(2), [[0.0, 1.0]], [[1.0, 0.0], [-1.0, 0.0]], [mu], 2)


def test_a_sliding_point_loses_mu_times_the_normal_impulse_as_routh_predicts():
    """A point hitting the ground at (1, −1) m/s with μ = 0.5 ends at (0.5, 0): Routh's single impact."""
    model = sliding_point_mass(0.5)
    s = sample_outcome(model, [1.0, -1.0], step=0.3, max_steps=50, rng=np.random.default_rng(0))
    assert s.terminated
    np.testing.assert_allclose(s.v, [0.5, 0.0], atol=1e-9)


def test_a_point_that_sticks_stops():
    """With μ = 2 the same point stops (friction impulse needed 1 ≤ μ · 1): v⁺ = 0."""
    s = sample_outcome(sliding_point_mass(2.0), [1.0, -1.0], 0.3, 50, np.random.default_rng(1))
    np.testing.assert_allclose(s.v, [0.0, 0.0], atol=1e-9)


def test_every_increment_solves_its_lcp_and_dissipates_energy():
    """Each increment of the rocking block is a solution of LCP(W, q) (eq. 75) and never adds kinetic energy."""
    block = RockingBlock()
    model = block.model()
    rng = np.random.default_rng(3)
    v = block.pre_impact_velocity()
    for _ in range(6):
        lam_max = 0.3 * rng.random(2)
        k, kd = model.k, model.k * model.d
        q = np.concatenate([lam_max, model.N @ v, model.D @ v, np.zeros(k)])
        v_next, lam, _ = model.increment(v, lam_max)
        assert np.all(lam[:k] <= lam_max + 1e-12)  # each contact takes at most its cap
        # rebuild z from the increment: β is the part of the cap the contact did not need
        n_next = model.N @ v_next
        beta = np.where(lam[:k] >= lam_max - 1e-12, np.maximum(0.0, -n_next), 0.0)
        gamma = np.zeros(k)
        if kd:
            slide = model.D @ v_next
            gamma = np.array([max(0.0, -slide[i * model.d : (i + 1) * model.d].min()) for i in range(k)])
        z = np.concatenate([beta, lam, gamma])
        assert lcp_residuals(model.W, q, z).worst < 1e-8
        assert model.kinetic_energy(v_next) <= model.kinetic_energy(v) + 1e-12
        v = v_next


def test_the_rocking_block_has_the_three_classical_outcomes():
    """Simultaneous (Anitescu-Potra) impact leaves the block at rest; A then B pivots it on B at 0.093 m/s."""
    block = RockingBlock()
    model = block.model()
    v0 = block.pre_impact_velocity()
    np.testing.assert_allclose(model.simultaneous(v0), 0.0, atol=1e-9)
    np.testing.assert_allclose(model.sequential(v0, [0, 1]), [0.0930, 0.0465, -0.0930], atol=1e-4)
    np.testing.assert_allclose(model.sequential(v0, [1, 0]), [-0.0930, 0.0465, 0.0930], atol=1e-4)


def test_algorithm_two_on_the_rocking_block_spans_rest_to_the_sequential_pivot():
    """512 samples: every one terminates within N = 10, a third end at rest, none separates faster than the
    sequential impact, and about 2.5 LCPs are solved per sample (the digest's 2.465, the paper's 2.67)."""
    block = RockingBlock()
    model = block.model()
    v0 = block.pre_impact_velocity()
    result = approximate_set(model, v0, step=0.3, eps=1e-3, max_steps=10, samples=512, rng=np.random.default_rng(0))
    assert result.terminated.all() and result.kept.all()
    assert 2.35 <= result.steps.mean() <= 2.67
    ratio = np.array([model.kinetic_energy(v) for v in result.outcomes]) / model.kinetic_energy(v0)
    assert ratio.max() <= 0.0735 + 1e-9  # the sequential outcome's ratio bounds the set
    assert 0.25 <= np.mean(ratio < 1e-6) <= 0.42
    separation = (result.outcomes @ model.N.T).max()
    assert 0.08 < separation <= 0.0930 + 1e-6


def test_a_fixed_seed_gives_a_fixed_sample_and_another_seed_another():
    """Algorithm 1 is reproducible from its random source, and the set really is sampled."""
    block = RockingBlock()
    model, v0 = block.model(), block.pre_impact_velocity()
    a = sample_outcome(model, v0, 0.3, 10, np.random.default_rng(7)).v
    b = sample_outcome(model, v0, 0.3, 10, np.random.default_rng(7)).v
    outcomes = {tuple(np.round(sample_outcome(model, v0, 0.3, 10, np.random.default_rng(s)).v, 6)) for s in range(20)}
    assert np.array_equal(a, b)
    assert len(outcomes) > 5


def test_forced_termination_step_is_eps_over_three_psi():
    """Algorithm 2's ψ = σ_max(M⁻¹J̄ᵀ)·k·(1 + max μ) + 1, checked on the point mass (σ_max = √2 for rows
    (0, 1), (±1, 0) of a unit mass)."""
    assert forced_termination_step(sliding_point_mass(0.5), 0.03) == pytest.approx(0.03 / (3 * (np.sqrt(2) * 1.5 + 1)))


def test_bad_impact_data_is_named():
    """Shapes, non-finite values, a non-positive-definite M, negative μ and a bad step are clear errors."""
    with pytest.raises(ShapeError, match="N"):
        ImpactModel(np.eye(2), [[0.0, 1.0, 0.0]], np.zeros((2, 2)), [1.0], 2)
    with pytest.raises(ShapeError, match="D"):
        ImpactModel(np.eye(2), [[0.0, 1.0]], np.zeros((3, 2)), [1.0], 2)
    with pytest.raises(NonFiniteError, match="mu"):
        ImpactModel(np.eye(2), [[0.0, 1.0]], np.zeros((2, 2)), [np.inf], 2)
    with pytest.raises(InputError, match="positive definite"):
        ImpactModel(-np.eye(2), [[0.0, 1.0]], np.zeros((2, 2)), [1.0], 2)
    with pytest.raises(InputError, match="mu must be >= 0"):
        ImpactModel(np.eye(2), [[0.0, 1.0]], np.zeros((2, 2)), [-1.0], 2)
    with pytest.raises(InputError, match="step h"):
        sample_outcome(sliding_point_mass(1.0), [0.0, -1.0], 0.0, 10, np.random.default_rng(0))
    with pytest.raises(InputError, match="eps"):
        approximate_set(sliding_point_mass(1.0), [0.0, -1.0], 0.3, 0.5, 10, 4, np.random.default_rng(0))


def test_the_impacts_experiment_writes_its_figures_and_drawing(tmp_path, capsys):
    """``idcontrol experiment impacts`` prints each figure against the digest, writes the JSON and a PNG."""
    import json

    from idcontrol.tools.cli import main

    out, png = tmp_path / "impacts.json", tmp_path / "impacts.png"
    assert main(["experiment", "impacts", "--samples", "128", "--json", str(out), "--plot", str(png)]) == 0
    figures = json.loads(out.read_text())
    assert figures["samples"] == 128 and figures["terminated_fraction"] == 1.0
    assert {c["figure"] for c in figures["checks"]} >= {"mean LCPs per sample", "largest separation speed, m/s"}
    assert png.stat().st_size > 10_000
    assert "mean LCPs per sample" in capsys.readouterr().out
