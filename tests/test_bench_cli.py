"""The benchmark command runs end to end and writes the promised JSON (a smoke test, not a timing test)."""

from __future__ import annotations

import json

from idcontrol.tools.cli import main


def test_bench_writes_one_json_object_per_row(tmp_path, capsys) -> None:
    """``idcontrol bench --json`` prints a table and writes rows: robot, formulation, contacts, p50/p99/max, ticks;
    a robot standing in two rows per formulation (the same state every tick, and swayed), Fig. 19 swayed."""
    out = tmp_path / "bench.json"
    code = main(["bench", "--ticks", "100", "--scenarios", "quadruped,fig19", "--contacts", "8",
                 "--formulations", "noslip_lcp,two_stage_qp", "--json", str(out)])  # fmt: skip
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
