"""``idcontrol sweep``: spec checks, cells as real closed-loop runs, resuming, pool and Ray giving the same rows."""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path

import pytest

from idcontrol.errors import ConfigError
from idcontrol.tools.cli import main
from idcontrol.tools.sweep.results import comparable, load_rows, save_rows
from idcontrol.tools.sweep.run import run_sweep
from idcontrol.tools.sweep.spec import load_sweep

LAUNCH = Path(__file__).resolve().parents[1] / "launch" / "quadruped_stand_rigid.toml"

SPEC = f"""
name = "tiny"
launch = "{LAUNCH}"
seconds = 0.05
output = "tiny.json"

[grid]
formulation = ["two_stage_qp", "pid"]
options = ["nominal", "sampled"]
seed = {{ start = 0, count = 2 }}

[options.nominal]
[options.sampled]
bridge = {{ impact_sampling = true }}
"""


def write_spec(folder: Path, text: str = SPEC) -> Path:
    path = folder / "tiny.toml"
    path.write_text(text)
    return path


def test_a_spec_makes_one_cell_per_combination_with_its_launch_values(tmp_path):
    """2 formulations × 2 option sets × 2 seeds = 8 cells, keyed by their values; a seed sets the terrain and
    impact seeds, an option table is merged over the launch file."""
    sweep = load_sweep(write_spec(tmp_path))
    assert len(sweep.cells) == 8 and len({c.key for c in sweep.cells}) == 8
    cell = next(c for c in sweep.cells if c.key == "formulation=pid,options=sampled,seed=1")
    config = cell.config()
    assert config.controller.formulation == "pid" and config.duration == 0.05
    assert config.bridge.impact_sampling and config.bridge.impact_seed == 1 and config.bridge.terrain_seed == 1
    assert config.bridge.kind == "rigid"  # the launch file's own value where the grid says nothing


@pytest.mark.parametrize(
    ("change", "message"),
    [
        (("formulation =", "formulations ="), "unknown grid axis"),
        (("start = 0, count = 2", "start = -1, count = 2"), "grid.seed"),
        (('options = ["nominal", "sampled"]', 'options = ["nominal", "other"]'), "no \\[options.NAME\\] table"),
        (("impact_sampling = true", "impact_sampling = 3"), "cell .*impact_sampling"),
        (('"pid"', '"qp"'), "cell .*qp"),
        (('output = "tiny.json"', 'output = "tiny.csv"'), ".json or .parquet"),
        (("seconds = 0.05", "seconds = 0"), "seconds"),
    ],
)
def test_a_bad_spec_fails_before_anything_runs_and_says_what(tmp_path, change, message):
    """Unknown axes, bad seeds, undefined option sets, invalid launch values, formats and lengths are named."""
    with pytest.raises(ConfigError, match=message):
        load_sweep(write_spec(tmp_path, SPEC.replace(*change)))


def test_cells_run_in_process_and_a_second_run_resumes(tmp_path):
    """Every cell is a real closed-loop run; rerunning skips the cells done and reruns only a failed one."""
    sweep = load_sweep(write_spec(tmp_path))
    first = run_sweep(sweep, progress=False)
    assert first.ran == 8 and all(r["status"] == "done" and r["completed"] for r in first.rows)
    assert all(r["sim_seconds"] == pytest.approx(0.05) for r in first.rows)
    assert {r["formulation"] for r in first.rows} == {"two_stage_qp", "pid"}
    assert (tmp_path / "tiny.md").read_text().count("| two_stage_qp |") == 2
    again = run_sweep(load_sweep(sweep.path), progress=False)
    assert again.ran == 0 and [comparable(r) for r in again.rows] == [comparable(r) for r in first.rows]
    rows = load_rows(sweep.output)
    rows[3]["status"] = "error"
    save_rows(sweep.output, rows)
    third = run_sweep(load_sweep(sweep.path), progress=False)
    assert third.ran == 1 and third.rows[3]["status"] == "done"
    sweep.path.write_text(SPEC.replace("seconds = 0.05", "seconds = 0.04"))  # an edited spec: every cell again
    fourth = run_sweep(load_sweep(sweep.path), progress=False)
    assert fourth.ran == 8 and all(r["sim_seconds"] == pytest.approx(0.04) for r in fourth.rows)


def test_a_process_pool_and_parquet_give_the_same_rows(tmp_path):
    """The same cells on two worker processes, written as Parquet, read back equal to the in-process JSON."""
    sweep = load_sweep(write_spec(tmp_path))
    here = run_sweep(sweep, progress=False).rows
    pooled = run_sweep(load_sweep(sweep.path, output=tmp_path / "pool.parquet"), workers=2, progress=False).rows
    assert [comparable(r) for r in pooled] == [comparable(r) for r in here]
    assert [comparable(r) for r in load_rows(tmp_path / "pool.parquet")] == [comparable(r) for r in here]


def test_ray_runs_the_same_cells_as_tasks_on_a_local_instance(tmp_path):
    """``--ray`` without an address starts Ray on this machine (loopback only) and gives the pool's rows."""
    # not imported here: Ray reads whether to stay on loopback when it is first imported (by the engine)
    if importlib.util.find_spec("ray") is None:
        pytest.skip("Ray is in the test extra; CI installs it")
    spec = write_spec(tmp_path, SPEC.replace('["two_stage_qp", "pid"]', '["pid"]'))
    code = main(["sweep", str(spec), "--ray", "--workers", "2", "--output", str(tmp_path / "ray.json"), "--quiet"])
    assert code == 0
    pooled = run_sweep(load_sweep(spec, output=tmp_path / "pool.json"), workers=2, progress=False).rows
    ray_rows = json.loads((tmp_path / "ray.json").read_text())
    assert len(ray_rows) == 4
    assert [comparable(r) for r in ray_rows] == [comparable(r) for r in pooled]


def test_a_cell_that_raises_becomes_an_error_row_and_the_exit_code_says_so(tmp_path, capsys):
    """The command prints a line per cell when not on a terminal; a cell whose run raises gives a row with the
    error, and a resumed sweep runs it again."""
    from dataclasses import replace

    from idcontrol.tools.sweep.cell import run_cell

    sweep = load_sweep(write_spec(tmp_path))
    broken = replace(sweep.cells[0], table={**sweep.cells[0].table, "robot": "no_such_robot"})
    row = run_cell(broken)
    assert row["status"] == "error" and "no_such_robot" in row["error"]
    assert main(["sweep", str(sweep.path)]) == 0
    captured = capsys.readouterr()
    assert "[8/8]" in captured.err and "8 cells (8 run now" in captured.out
    rows = load_rows(sweep.output)
    save_rows(sweep.output, [{**rows[0], "status": "error"}, *rows[1:]])
    sweep.cells[0] = broken  # the rerun of that cell raises now
    assert run_sweep(sweep, progress=False).rows[0]["status"] == "error"


def test_the_papers_runs_on_the_engine_match_a_direct_run(tmp_path):
    """``idcontrol experiment paper --jobs 2`` runs its cells on the sweep engine's pool; each result equals the
    one run_one gives in this process (timings aside)."""
    from idcontrol.tools.experiments.paper import plan, run_one

    only = "trot/rigid_low/pid,grasp/grasp_1/pid"
    out = tmp_path / "paper.json"
    assert (
        main(
            ["experiment", "paper", "--quick", "--only", only, "--jobs", "2", "--json", str(out), "--bench-ticks", "0"]
        )
        == 0
    )
    pooled = {(r["experiment"], r["terrain"], r["controller"]): r for r in json.loads(out.read_text())}
    assert len(pooled) == 2
    timing = {"wall_seconds", "compute_us_p50"}
    for spec in plan(True, only.split(",")):
        direct = json.loads(json.dumps(run_one(spec)))  # as the JSON file holds it
        mine = pooled[(spec.experiment, spec.terrain.key, spec.controller.key)]
        assert {k: v for k, v in mine.items() if k not in timing} == {
            k: v for k, v in direct.items() if k not in timing
        }
