"""Outcomes through a simultaneous touchdown (Pace & Burden): the decoupled fixture is C¹, the checks can fail."""

from __future__ import annotations

import math

import numpy as np
import pytest

from idcontrol.analysis.decoupled import SpringLeggedBody, derivative_gaps, outcome
from idcontrol.errors import InputError
from idcontrol.tools.experiments.differentiability import verdict


@pytest.mark.parametrize("stance", ["pinned", "sliding"])
def test_the_decoupled_fixtures_left_and_right_derivatives_converge(stance):
    """Through the simultaneous touchdown at θ₀ = 0 the one-sided derivatives agree to O(δ): the gap falls
    tenfold per decade of step (Theorem 1), and the outcome itself is continuous."""
    system = SpringLeggedBody(stance=stance)
    gaps = derivative_gaps(lambda th: outcome(system, th, 0.42), 0.0, (1e-3, 1e-4, 1e-5))
    assert gaps[1].gap / gaps[0].gap == pytest.approx(0.1, rel=0.02)
    assert gaps[2].gap / gaps[1].gap == pytest.approx(0.1, rel=0.02)
    assert gaps[2].jump < 1e-3


def test_the_touchdown_order_changes_sign_with_the_initial_pitch():
    """At θ₀ = 0 both feet land at √(2·0.6/g); a positive pitch lands the front (+0.5 m) hip's foot later."""
    system = SpringLeggedBody()
    t_land = math.sqrt(2 * 0.6 / system.gravity)
    x = outcome(system, 0.0, t_land + 1e-6)
    assert x[4] == 0.0 and x[6] == 0.0  # both feet down
    x = outcome(system, 0.01, t_land)
    assert x[4] > 0.0 and x[6] == 0.0  # the hind foot first


def test_a_jump_is_not_mistaken_for_a_derivative():
    """The check tells a C¹ outcome from a kink and from a discontinuity (it can fail)."""
    smooth = [g.gap for g in derivative_gaps(lambda x: np.array([x**2]), 0.0, (1e-3, 1e-4))]
    kink = [g.gap for g in derivative_gaps(lambda x: np.array([abs(x)]), 0.0, (1e-3, 1e-4))]
    jump = [g.gap for g in derivative_gaps(lambda x: np.array([float(x > 0)]), 0.0, (1e-3, 1e-4))]
    assert verdict(smooth).startswith("converges")
    assert verdict(kink).startswith("kink")
    assert verdict(jump).startswith("jump")


def test_fixture_options_are_checked():
    """An unknown leg axis or stance is a clear error."""
    with pytest.raises(InputError, match="leg_axis"):
        SpringLeggedBody(leg_axis="sideways")
    with pytest.raises(InputError, match="stance"):
        SpringLeggedBody(stance="glued")


def test_the_quadrupeds_touchdown_check_runs_in_closed_loop(tmp_path):
    """``idcontrol experiment differentiability --quick``: the fixture's table and the quadruped's gaps with the
    two-stage QP and the PID baseline; under the PID (no contact model) the gap converges like the fixture's."""
    import json

    from idcontrol.tools.cli import main

    out = tmp_path / "diff.json"
    assert main(["experiment", "differentiability", "--quick", "--json", str(out)]) == 0
    result = json.loads(out.read_text())
    assert len(result["fixture"]) == 4 and all(r["verdict"].startswith("converges") for r in result["fixture"])
    pid = next(r for r in result["quadruped"] if r["formulation"] == "pid")
    assert pid["base_verdict"].startswith("converges")
    assert len(pid["base_gaps"]) == len(result["quadruped_steps"])
