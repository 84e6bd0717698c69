"""`idcontrol experiment mismatch --quick`: a few cells of the model-mismatch matrix, with their report."""

from __future__ import annotations

import json
import os

import pytest

if os.environ.get("CI"):  # CI installs the drake extra: these tests must run there
    import pydrake  # noqa: F401
else:
    pytest.importorskip("pydrake", reason="the drake extra is not installed: pip install 'idcontrol[drake]'")

from idcontrol.tools.cli import main  # noqa: E402
from idcontrol.tools.experiments.mismatch import FORMULATIONS, SIMULATORS, outcome, plan, succeeded  # noqa: E402

CELLS = ("stand/drake/two_stage_qp", "stand/rigid/two_stage_qp", "grasp/drake/noslip_lcp", "grasp/drake/sensed_id")


@pytest.fixture(scope="module")
def quick(tmp_path_factory):
    folder = tmp_path_factory.mktemp("mismatch")
    code = main(
        [
            "experiment",
            "mismatch",
            "--quick",
            "--only",
            ",".join(CELLS),
            "--json",
            str(folder / "m.json"),
            "--report",
            str(folder / "mismatch.md"),
        ]
    )
    assert code == 0
    results = json.loads((folder / "m.json").read_text())
    return folder, {r["name"]: r for r in results}


def test_the_matrix_covers_every_task_simulator_and_formulation():
    """The full plan has stand and trot on rigid, MuJoCo, Drake and ESS and the grasp on MuJoCo and Drake, each ×4."""
    cells = plan()
    assert len(cells) == (4 + 4 + 2) * len(FORMULATIONS)
    assert {(c.task, c.sim) for c in cells} == {(t, s) for t, sims in SIMULATORS.items() for s in sims}


def test_standing_predictions_match_both_simulators(quick):
    """Standing, the two-stage QP's summed normal force is within 1 % of what the rigid simulator and Drake apply."""
    _, by = quick
    for name in ("stand/drake/two_stage_qp", "stand/rigid/two_stage_qp"):
        r = by[name]
        assert r["completed"] and not r["fell"], r["end_reason"]
        assert r["force_err_rel"] < 0.01, (name, r["force_err_rel"])
        assert r["mean_normal_force_N"] == pytest.approx(4.8 * 9.81, rel=0.01)
    assert by["stand/drake/two_stage_qp"]["rest_penetration_m"] == pytest.approx(4.8 * 9.81 / 4 / 1e6, rel=0.1)


def test_a_failed_cell_says_why_and_the_report_shows_every_cell(quick):
    """The no-slip LCP fails the grasp in Drake (it drops the box, or the certificate stops it first: which one
    turns on rounding in its projection and repair); the JSON and the report say how and when; sensed_id predicts
    no force."""
    folder, by = quick
    failed = by["grasp/drake/noslip_lcp"]
    assert not succeeded(failed) and (failed["end_reason"] or failed["object_dropped_at_s"] is not None)
    sensed = by["grasp/drake/sensed_id"]
    assert sensed["force_err_rel"] is None and sensed["tracking_error_rad"] is not None
    report = (folder / "mismatch.md").read_text()
    for name in CELLS:
        assert f"| {name} |" in report
    assert f"| grasp/drake/noslip_lcp | {failed['sim_seconds']:.2f} s of " in report and outcome(failed) in report
    assert "predicts none" in report
    assert (folder / "mismatch" / "grasp_drake.png").stat().st_size > 10_000
