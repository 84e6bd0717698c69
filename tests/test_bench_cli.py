"""The benchmark command runs end to end and writes the promised JSON (a smoke test, not a timing test)."""

from __future__ import annotations

import json

from idcontrol.tools.cli import main


def test_bench_writes_one_json_object_per_row(tmp_path, capsys) -> None:
    """``idcontrol bench --json`` prints a table and writes rows: robot, formulation, contacts, p50/p99/max, ticks;
    a robot standing in two rows per formulation (the same state every tick, and swayed), Fig. 19 swayed."""
    out = tmp_path / "bench.json"
    code = main(
        [
            "bench",
            "--ticks",
            "100",
            "--scenarios",
            "quadruped,fig19",
            "--contacts",
            "8",
            "--formulations",
            "noslip_lcp,two_stage_qp",
            "--json",
            str(out),
        ]
    )
    assert code == 0
    rows = json.loads(out.read_text())
    assert [(r["robot"], r["formulation"], r["contacts"], r["state"]) for r in rows] == [
        ("quadruped", "noslip_lcp", 4, "still"),
        ("quadruped", "noslip_lcp", 4, "sway"),
        ("quadruped", "two_stage_qp", 4, "still"),
        ("quadruped", "two_stage_qp", 4, "sway"),
        ("quadruped", "noslip_lcp", 8, "sway"),
        ("quadruped", "two_stage_qp", 8, "sway"),
    ]
    for row in rows:
        assert row["ticks"] >= 50 and row["found_fraction"] == 1.0
        assert 0 < row["p50_us"] <= row["p99_us"] <= row["max_us"]
    assert "p50 µs" in capsys.readouterr().out


def test_bench_rejects_an_unknown_formulation(capsys) -> None:
    """An unknown formulation name fails fast with the list of valid names."""
    assert main(["bench", "--formulations", "qp"]) == 2
    assert "two_stage_qp" in capsys.readouterr().err


def test_bench_takes_a_robot_with_estimated_contacts_and_refuses_an_unknown_mode(tmp_path, capsys) -> None:
    """``solo12+estimated`` (the robot standing with the controller's estimated contacts, as bench.py times it) is a
    scenario; ``solo12+bogus`` and an unknown robot with +estimated fail fast naming the form."""
    out = tmp_path / "bench.json"
    argv = ["bench", "--ticks", "50", "--formulations", "two_stage_qp", "--json", str(out), "--scenarios"]
    assert main([*argv, "solo12+estimated"]) == 0
    assert {r["robot"] for r in json.loads(out.read_text())} == {"solo12"}
    for bad in ("solo12+bogus", "nobody+estimated"):
        assert main([*argv, bad]) == 2
        assert f"unknown scenario(s) ['{bad}']" in capsys.readouterr().err


def test_transport_floor_measures_real_round_trips_through_a_second_process() -> None:
    """The transport scenario echoes real states through another process: every round trip is timed."""
    from idcontrol.tools.bench import bench_transport

    t = bench_transport(200)
    assert t["ticks"] == 200 and 0 < t["p50_us"] <= t["p99_us"] <= t["max_us"]


def test_the_workload_benchmark_replays_recorded_trot_states_through_each_formulation(monkeypatch):
    """`bench --scenarios trot`: the trot is recorded in lock-step MuJoCo (here 0.3 s of it) and each formulation,
    with its launch options and the paper's, answers every recorded state through the whole core tick."""
    from idcontrol.tools import workloads

    monkeypatch.setitem(workloads.WORKLOADS, "trot", ("quadruped_trot.toml", 0.3))
    monkeypatch.setattr(workloads, "_RECORDINGS", {})
    recording = workloads.record("trot")
    assert len(recording.states) == 300 and recording.contact_counts[1] == 4
    assert len({s.t for s in recording.states}) == 300  # every state is a new one
    for formulation in workloads.FORMULATIONS:
        for variant in ("launch", "paper"):
            row = workloads.replay(recording, formulation, variant)
            # the no-slip LCP's paper method: the certificate rejects about half its trot answers (49 % found here)
            least = 0.3 if (formulation, variant) == ("noslip_lcp", "paper") else 0.9
            assert row.ticks == 300 and row.found_fraction > least, row
            assert 0 < row.p50_us <= row.p99_us <= row.max_us and row.solve_us > 0, row


def test_tsid_runs_right_before_and_after_solo12_and_a_speed_change_between_them_is_flagged(tmp_path, capsys):
    """With ``--tsid-python/--tsid-script``, the reference script runs just before and just after the Solo12 rows;
    the ratios are over the two runs' mean p50, and runs 50 % apart are reported as a change of the machine's speed.
    (The script here stands in for TSID: it prints the JSON line a reference prints, 40 µs, then 60 µs.)"""
    import re
    import sys

    calls = tmp_path / "calls"
    script = tmp_path / "reference.py"
    script.write_text(
        "import json, pathlib, sys\n"
        f"calls = pathlib.Path({str(calls)!r})\n"
        "n = len(calls.read_text()) if calls.exists() else 0\n"
        "calls.write_text('x' * (n + 1))\n"
        "print(json.dumps({'p50_us': 40.0 + 20.0 * n, 'p99_us': 99.0}))\n"
    )
    code = main(
        [
            "bench",
            "--ticks",
            "60",
            "--scenarios",
            "solo12",
            "--formulations",
            "two_stage_qp",
            "--tsid-python",
            sys.executable,
            "--tsid-script",
            str(script),
        ]
    )
    assert code == 0 and calls.read_text() == "xx"
    out = capsys.readouterr().out
    assert "p50 40.0 / 60.0 µs" in out and "before / after the Solo12 rows" in out
    assert "the machine's speed changed" in out
    still = re.search(r"solo12 still\s+two_stage_qp\s+\d+\s+([\d.]+)", out)
    ratio = re.search(r"solo12 two_stage_qp: p50 ratio to TSID = ([\d.]+)", out)
    assert still and ratio and float(ratio[1]) == round(float(still[1]) / 50.0, 2)
