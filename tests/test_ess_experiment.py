"""`idcontrol experiment ess --quick`: the ESS integrator paper's checks at CI size."""

from __future__ import annotations

import json

import pytest

from idcontrol.tools.cli import main


@pytest.fixture(scope="module")
def quick(tmp_path_factory) -> dict:
    """The quick run's JSON."""
    path = tmp_path_factory.mktemp("ess") / "ess.json"
    assert main(["experiment", "ess", "--quick", "--json", str(path)]) == 0
    return json.loads(path.read_text())


def test_the_order_test_is_second_order_under_both_readings(quick):
    """The Table 1 order test's final-state error falls ~100-fold from ε = 1e-2 to 1e-3 under both readings of the
    lost row labels, and the digest's reading reproduces 1.41e-4 and 1.40e-6."""
    readings = quick["order_test"]["readings"]
    assert set(readings) == {"y<0 first", "y>=0 first"}
    for r in readings.values():
        assert r["slope"] >= 1.95
    errors = [run["final_error"] for run in readings["y<0 first"]["runs"]]
    assert errors == pytest.approx([1.41e-4, 1.40e-6], rel=0.02)


def test_the_hopper_is_calibrated_against_mujoco(quick):
    """The hopper's ESS error shrinks with ε and the ε' that matches MuJoCo's RMS error is found inside
    [1e-4, 1e-1] m; each ESS run is compared with MuJoCo's trajectory too."""
    hopper = quick["hopper"]
    rows = hopper["ess"]
    assert rows[0]["eps"] > rows[-1]["eps"] and rows[0]["rms_vs_exact"] > rows[-1]["rms_vs_exact"]
    assert all(r["rms_vs_mujoco"] > 0 for r in rows)
    assert 1e-4 < hopper["calibrated_eps"] < 1e-1
    assert hopper["mujoco"]["rms_vs_exact"] > 0


def test_the_plate_cost_is_measured_for_both_simulators(quick):
    """Each plate size has a CPU time per simulated second for the ESS integrator and MuJoCo, and the ESS
    integrator's crossings grow with the number of springs."""
    rows = quick["plate"]["rows"]
    assert [r["contacts"] for r in rows] == [2, 10, 20]
    assert all(r["ess_s_per_s"] > 0 and r["mujoco_s_per_s"] > 0 for r in rows)
    assert rows[0]["ess_crossings_median"] < rows[-1]["ess_crossings_median"]
    assert quick["machine"]["cpus"] >= 1


def test_both_engines_do_the_same_plate_work():
    """The plate cost on the compiled engine and on the Python one (scipy) counts the same work: crossings,
    projections, splits, solver calls and field evaluations, for each spring count."""
    from idcontrol.tools.experiments.ess import plate_cost

    runs = [plate_cost(3e-3, (2, 10, 30), conditions=1, seconds=0.8, engine=e) for e in ("auto", "scipy")]
    keys = ("crossings", "projections", "splits", "solver_calls", "field_evaluations")
    for compiled, python in zip(runs[0]["rows"], runs[1]["rows"], strict=True):
        assert compiled["ess_crossings_median"] >= compiled["contacts"]
        assert [compiled[f"ess_{k}_median"] for k in keys] == [python[f"ess_{k}_median"] for k in keys]
