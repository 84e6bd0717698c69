"""``idcontrol experiment impact-order``: the trot with sampled touchdowns per formulation, on the sweep engine."""

from __future__ import annotations

import json

from idcontrol.tools.cli import main
from idcontrol.tools.experiments.impact_order import study_sweep


def test_the_study_runs_nominal_once_and_sampled_per_seed():
    """The nominal runs do not depend on the seed, so the study keeps them at seed 0 only: 3 + 3 × 50 runs."""
    sweep = study_sweep()
    nominal = [c for c in sweep.cells if c.params["options"] == "nominal"]
    sampled = [c for c in sweep.cells if c.params["options"] == "sampled"]
    assert len(nominal) == 3 and {c.params["seed"] for c in nominal} == {0}
    assert len(sampled) == 150 and len({c.params["seed"] for c in sampled}) == 50
    assert all(c.config().bridge.impact_sampling for c in sampled)
    assert not any(c.config().bridge.impact_sampling for c in nominal)


def test_a_short_study_samples_touchdowns_and_writes_its_table_and_plot(tmp_path):
    """One seed of 0.7 s (0.2 s of trot): every formulation trots, touchdowns are sampled, the table is written."""
    report, out, pooled = tmp_path / "order.md", tmp_path / "order.json", tmp_path / "pooled.json"
    code = main(
        [
            "experiment",
            "impact-order",
            "--seeds",
            "1",
            "--seconds",
            "0.7",
            "--output",
            str(out),
            "--report",
            str(report),
            "--json",
            str(pooled),
            "--quiet",
        ]
    )
    assert code == 0
    rows = json.loads(out.read_text())
    assert len(rows) == 3 * 2 and all(r["status"] == "done" for r in rows)
    sampled = [r for r in rows if r["options"] == "sampled"]
    assert all(r["impact_events"] > 0 and r["impact_failures"] == 0 for r in sampled)
    summary = json.loads(pooled.read_text())
    assert [s["formulation"] for s in summary] == ["two_stage_qp", "coulomb_lcp", "noslip_lcp"]
    assert all(s["runs"] == 1 and s["nominal"]["status"] == "done" for s in summary)
    text = report.read_text()
    assert "| `noslip_lcp` | 1 |" in text and (tmp_path / "order.png").stat().st_size > 10_000
