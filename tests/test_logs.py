"""Tick logs on real files: writer round trip, crash safety, replay determinism, export, plots, bad logs."""

from __future__ import annotations

import contextlib
import json
import os
import re
import signal
import time
from pathlib import Path

import msgpack
import numpy as np
import pytest
from mcap.reader import make_reader
from mcap.writer import Writer

from idcontrol import protocol as wire
from idcontrol.errors import LogError
from idcontrol.logs import schema
from idcontrol.logs.reader import read_log
from idcontrol.logs.recorder import LogRecorder
from idcontrol.logs.writer import SegmentedLog, json_record, segment_path
from idcontrol.robot.model import RobotModel
from idcontrol.tools.cli import main
from tests.test_launch import daemon_and_bridge, launch_file, wait_for


@contextlib.contextmanager
def logged_run(folder: Path, log_path: Path):
    """A daemon logging to ``log_path`` (in its own process group) and a lock-step MuJoCo bridge, started;
    yields (daemon, admin)."""
    launch, endpoints = launch_file(folder)
    with daemon_and_bridge(launch, endpoints, "--log", str(log_path), new_session=True) as running:
        yield running


def synthetic_record(rng: np.random.Generator, seq: int, n_contacts: int) -> dict:
    """A daemon tick record with every field of the schema, random values (one NaN force)."""
    f = lambda *shape: rng.standard_normal(shape)  # noqa: E731
    force_normal = f(n_contacts)
    if n_contacts:
        force_normal[0] = np.nan
    return {
        "v": 1,
        "type": "telemetry",
        "seq": seq,
        "t": seq * 1e-3,
        "now": 100.0 + seq * 1e-3,
        "mode": "run",
        "formulation": "two_stage_qp",
        "q": wire.f64(f(19)),
        "qd": wire.f64(f(18)),
        "tau": wire.f64(f(12)),
        "compute_us": float(rng.uniform(100, 900)),
        "clipped": int(rng.integers(3)),
        "note": f"note {seq}",
        "bridge_stopped": bool(seq % 2),
        "last_late": bool(seq % 4 == 1),
        "last_rtt_us": float(rng.uniform(100, 900)),
        "objects": {
            "box": {
                "position": wire.f64(f(3)),
                "orientation_xyzw": wire.f64(f(4)),
                "linear_velocity": wire.f64(f(3)),
                "angular_velocity": wire.f64(f(3)),
            }
        },
        "q_ref": wire.f64(f(12)),
        "qd_ref": wire.f64(f(12)),
        "qdd_des": wire.f64(f(12)),
        "reference": {"phase": float(rng.uniform())},
        "found": bool(seq % 3),
        "certificate": "" if seq % 3 else "friction",
        "iterations": int(rng.integers(50)),
        "fallback": "qp" if seq % 5 == 0 else "",
        "repaired": bool(seq % 7 == 0),
        "message": "ok",
        "timings_us": {"model": 40.0, "solve": float(rng.uniform(100, 200))},
        "contact_ids": [f"s{i}/ground" for i in range(n_contacts)],
        "contact_points": wire.f64(f(n_contacts, 3)),
        "contact_normals": wire.f64(f(n_contacts, 3)),
        "contact_phi": wire.f64(f(n_contacts)),
        "force_normal": wire.f64(force_normal),
        "force_world": wire.f64(f(n_contacts, 3)),
        "sensed_forces": wire.f64(f(4, 3)),
        "log_dropped": 0,
        "coupling": float(rng.uniform()),
        "coupling_held": float(rng.uniform()),
        "coupled_touchdown": bool(seq % 2),
        "estimate_q": wire.f64(f(7)),
        "estimate_qd": wire.f64(f(6)),
        "estimate_covariance": wire.f64(f(81)),
        "estimate_contact": wire.f64(rng.integers(0, 2, 4).astype(float)),
        "estimate_status": "trustworthy" if seq % 2 else "the IMU is stale",
        "truth_q": wire.f64(f(7)),
        "truth_qd": wire.f64(f(6)),
        "truth_contact_forces": wire.f64(f(4, 3)),
    }


def decoded(record: dict, key: str):
    value = record[key]
    return np.frombuffer(value, dtype="<f8") if isinstance(value, bytes) else value


def test_every_field_round_trips_through_a_real_file(tmp_path: Path) -> None:
    """Every tick field written by the writer reads back bit-identical (NaN as NaN), padded per contact count; the
    fields the writer derives (the estimate's error against the truth) are there."""
    rng = np.random.default_rng(4)
    counts = [4, 0, 2, 3]
    records = [synthetic_record(rng, seq, n) for seq, n in enumerate(counts, start=1)]
    log_file = SegmentedLog(tmp_path / "a.mcap", {"robot": "quadruped", "dt": 1e-3}, 1 << 30)
    for r in records:
        log_file.add(msgpack.unpackb(msgpack.packb(r, use_bin_type=True), raw=False))
    log_file.close()
    log = read_log(tmp_path / "a.mcap")
    assert len(log) == len(records) and not log.truncated and log.config["robot"] == "quadruped"
    assert log.array("n_contacts").tolist() == counts
    assert log.array("index").tolist() == list(range(len(records)))
    for i, (r, n) in enumerate(zip(records, counts, strict=True)):
        for key in schema.SCALAR_INT[1:] + schema.SCALAR_FLOAT + schema.SCALAR_BOOL + schema.SCALAR_STR:
            if key not in schema.LOG_ONLY:
                assert log.array(key)[i] == r[key], key
        for key in schema.VECTORS:
            if key not in schema.LOG_ONLY:
                np.testing.assert_array_equal(log.array(key)[i], decoded(r, key))
        for key in ("sensed_forces", "truth_contact_forces"):
            np.testing.assert_array_equal(log.array(key)[i], decoded(r, key).reshape(4, 3))
        assert np.isfinite(log.array("estimate_error")[i]).all() and np.isfinite(log.array("tilt_error")[i])
        for key in schema.CONTACT_VECTORS + schema.CONTACT_ROWS3:
            got = log.array(key)[i, :n]
            np.testing.assert_array_equal(got.reshape(-1), decoded(r, key))  # NaN == NaN here
            assert np.isnan(log.array(key)[i, n:]).all()
        assert log.array("contact_ids")[i, :n].tolist() == r["contact_ids"]
        for key in ("timings_us", "reference"):
            assert log.tick(i)[key] == r[key]
        for k, v in r["objects"]["box"].items():
            np.testing.assert_array_equal(log.tick(i)["objects"]["box"][k], np.frombuffer(v, dtype="<f8"))


def test_a_tick_message_is_the_json_of_its_values_with_non_finite_numbers_as_null() -> None:
    """The writer's JSON of a tick record parses to the record's values (arrays as lists, (n, 3) fields as rows of 3,
    the envelope left out) with NaN and ±inf, which JSON lacks, as null, in arrays and in plain floats alike."""
    rng = np.random.default_rng(11)
    record = synthetic_record(rng, 7, 3)
    forces = rng.standard_normal((3, 3))
    forces[1, 2], forces[2, 0] = np.inf, -np.inf
    record.update(force_world=wire.f64(forces), compute_us=float("nan"), last_rtt_us=float("inf"))
    got = json.loads(schema.to_json(json_record(msgpack.unpackb(msgpack.packb(record, use_bin_type=True), raw=False))))

    def plain(value, key=""):
        if isinstance(value, bytes):
            array = np.frombuffer(value, dtype="<f8")
            array = array.reshape(-1, 3) if key in schema.ROWS3 else array
            return np.where(np.isfinite(array), array, None).tolist()
        if isinstance(value, float):
            return value if np.isfinite(value) else None
        if isinstance(value, dict):
            return {k: plain(v, k) for k, v in value.items()}
        return value

    expected = {k: plain(v, k) for k, v in record.items() if k not in ("v", "type")}
    assert got == expected
    assert got["force_world"][1][2] is None and got["force_world"][2][0] is None and got["force_normal"][0] is None
    assert got["compute_us"] is None and got["last_rtt_us"] is None


def test_segments_rotate_by_size_and_no_file_is_overwritten(tmp_path: Path) -> None:
    """Past max_bytes a new segment starts (each readable, with the config); an existing name is refused."""
    rng = np.random.default_rng(5)
    path = tmp_path / "run.mcap"
    log_file = SegmentedLog(path, {"robot": "quadruped"}, max_bytes=200_000)
    log_file.add({"v": 1, "type": "event", "kind": "start", "now": 1.0, "tick": 0})
    for seq in range(1, 601):
        log_file.add(msgpack.unpackb(msgpack.packb(synthetic_record(rng, seq, 4)), raw=False))
    log_file.close()
    segments = [segment_path(path, i) for i in range(log_file.segment + 1)]
    assert len(segments) >= 3 and all(p.is_file() for p in segments)
    logs = [read_log(p) for p in segments]
    assert sum(len(lg) for lg in logs) == 600
    assert [lg.array("seq")[0] for lg in logs] == sorted(lg.array("seq")[0] for lg in logs)
    assert all(lg.config["robot"] == "quadruped" and lg.events[0]["kind"] == "start" for lg in logs)
    with pytest.raises(LogError, match="already exists"):
        SegmentedLog(path, {}, 1 << 30)
    with pytest.raises(LogError, match="already exists"):
        LogRecorder(path, {})


@pytest.mark.timing
def test_full_queue_drops_and_counts_records_without_blocking(tmp_path: Path) -> None:
    """With the writer stalled the tick's enqueue never waits; dropped records are counted, the rest written."""
    recorder = LogRecorder(tmp_path / "q.mcap", {"robot": "quadruped"}, ring_bytes=1 << 20)
    rng = np.random.default_rng(6)
    record = synthetic_record(rng, 1, 4) | {"q": wire.f64(np.zeros(200))}  # about 4.5 kB
    raw = wire.pack(record)
    os.kill(recorder.process.pid, signal.SIGSTOP)
    try:
        seconds = np.empty(4000)
        for i in range(seconds.size):
            t0 = time.perf_counter()
            recorder.tick(raw)
            seconds[i] = time.perf_counter() - t0
    finally:
        os.kill(recorder.process.pid, signal.SIGCONT)
    assert recorder.dropped > 0
    assert np.percentile(seconds, 99) < 1e-3  # a blocking hand-off would wait for the stalled writer (seconds)
    time.sleep(1.0)  # the writer catches up
    for _ in range(10):
        recorder.tick(wire.pack(record | {"log_dropped": recorder.dropped}))  # as the daemon does
    recorder.close({"ticks": 4010})
    log = read_log(tmp_path / "q.mcap")
    assert len(log) + recorder.dropped == 4010
    index = log.array("index")  # each written tick keeps its place among all, dropped ones counted
    assert np.all(np.diff(index) > 0) and index[-1] == 4009 and np.diff(index).max() == recorder.dropped + 1
    assert log.end["log_dropped"] == recorder.dropped and log.end["stats"] == {"ticks": 4010}


@pytest.fixture(scope="module")
def run_log(tmp_path_factory) -> Path:
    """A real lock-step run (daemon + MuJoCo bridge processes) logged with --log, with a formulation
    switch and a gain change in the middle."""
    tmp = tmp_path_factory.mktemp("run")
    path = tmp / "run.mcap"
    with logged_run(tmp, path) as (daemon, admin):
        t0 = admin.request("status")["t"]  # bridge time: it advances only while running
        wait_for(admin, lambda s: s["t"] > t0 + 0.15)
        admin.request("set_formulation", name="one_stage_qp")
        wait_for(admin, lambda s: s["t"] > t0 + 0.3)
        admin.request("set_gains", kp=(1.1 * RobotModel("quadruped").gains.kp).tolist())
        wait_for(admin, lambda s: s["t"] > t0 + 0.45)
        admin.request("stop", reason="test done")
        wait_for(admin, lambda s: s["mode"] == "stopped", 10.0)
        admin.request("shutdown")
        daemon.wait(timeout=20)
    return path


def test_real_run_log_is_complete_and_replays_bit_for_bit(run_log: Path, capsys) -> None:
    """A lock-step log with a formulation switch and a gain change replays to the same torques (1e-9)."""
    log = read_log(run_log)
    assert log.end is not None and not log.truncated
    with open(run_log, "rb") as f:  # a plain MCAP reader (index and summary, schemas in the file) reads it too
        reader = make_reader(f)
        summary = reader.get_summary()
        topics = {c.topic: c.message_encoding for c in summary.channels.values()}
        assert topics[schema.TICK_TOPIC] == "json" and summary.schemas[1].encoding == "jsonschema"
        ticks = [json.loads(m.data) for _, _, m in reader.iter_messages(topics=[schema.TICK_TOPIC])]
    assert len(ticks) == len(log) and ticks[-1]["tau"] == log.array("tau")[-1].tolist()
    assert [e["kind"] for e in log.events][:4] == ["start", "set_formulation", "set_gains", "stop"]
    assert set(log.array("formulation")) == {"two_stage_qp", "one_stage_qp"}
    assert np.all(np.diff(log.array("seq")) > 0)
    run = log.array("mode") == "run"
    assert run.sum() > 400 and not log.end["stats"]["fell"] and np.isfinite(log.array("force_world")[run][:, 0]).all()
    assert main(["replay", str(run_log), "--json"]) == 0
    report = json.loads(capsys.readouterr().out)
    assert report["ticks"] == len(log) and report["formulation"] == "two_stage_qp"
    assert report["tau_max_abs_diff"] <= 1e-9 and report["tau_rms_diff"] <= 1e-9
    assert report["force_max_abs_diff"] <= 1e-9 and report["mode_mismatch_ticks"] == 0
    assert report["formulations_replayed"].keys() == {"two_stage_qp", "one_stage_qp"}


def test_log_info_counts_deadline_misses_by_the_daemons_rule(run_log: Path, capsys) -> None:
    """`log info` and the daemon's stats count the same misses (a lock-step run: compute over the period, or a
    command reported late), and the line says which rule; it had counted round trips over the period, which in
    lock-step hold the simulator's step (32 against the summary's 3 in one run). Compared with the daemon's final
    counts, which the log's end record holds: the stopped robot's ticks go on after a mid-run ``stats`` request."""
    log = read_log(run_log)
    stats = log.end["stats"]
    assert log.lockstep and int(log.deadline_misses().sum()) == stats["deadline_misses"]
    assert main(["log", "info", str(run_log)]) == 0
    assert re.search(
        rf"deadline misses +{stats['deadline_misses']} \(compute over the period: lock-step\)", capsys.readouterr().out
    )


def test_replay_with_another_formulation_reports_differences(run_log: Path, capsys) -> None:
    """--formulation solves every tick of a time window with another formulation and reports the torque gap."""
    assert (
        main(["replay", str(run_log), "--formulation", "coulomb_lcp", "--from", "0.05", "--to", "0.3", "--json"]) == 0
    )
    report = json.loads(capsys.readouterr().out)
    t = read_log(run_log).array("t")
    assert report["ticks"] == int(((t >= 0.05) & (t <= 0.3)).sum()) > 0
    assert report["formulation"] == "coulomb_lcp" and report["formulations_replayed"].keys() == {"coulomb_lcp"}
    assert report["tau_max_abs_diff"] > 1e-6 and np.isfinite(report["force_max_abs_diff"])


@pytest.mark.parametrize("window", [("0.3", "0.05"), ("50", "60"), ("nan", "0.3")])
def test_a_replay_window_without_ticks_is_an_error_not_a_perfect_match(run_log: Path, capsys, window) -> None:
    """An inverted window, one beyond the log or a NaN bound compares nothing: an error saying so, exit 2 (it had
    printed zero differences, which read as a perfect match)."""
    assert main(["replay", str(run_log), "--from", window[0], "--to", window[1], "--json"]) == 2
    err = capsys.readouterr().err
    assert "replay window" in err and "idcontrol: error" in err


def test_replay_rebuilds_the_robot_that_ran_not_the_launch_files(tmp_path: Path) -> None:
    """A run started with `launch --robot` logs the file's text and the robot that ran: the replay rebuilds that
    robot (it had rebuilt the file's quadruped and refused the UR5's six gains), and a relative path in the
    file is read beside the file as it was, wherever the replay runs."""
    from idcontrol.tools.replay import rebuild_core

    launch = Path(__file__).resolve().parents[1] / "launch" / "stand.toml"
    ur5 = RobotModel("ur5")
    config = {
        "launch_toml": launch.read_text(),
        "launch_file": str(launch),
        "robot": "ur5",
        "formulation": "two_stage_qp",
        "gains": {"kp": (2 * ur5.gains.kp).tolist()},
    }
    log_file = SegmentedLog(tmp_path / "ur5.mcap", config, 1 << 20)
    log_file.close()
    core = rebuild_core(read_log(tmp_path / "ur5.mcap"))
    assert core.robot.nu == ur5.nu == 6 and core.robot.actuated_joints == ur5.actuated_joints
    np.testing.assert_allclose(core.gains.kp, 2 * ur5.gains.kp)


def test_replay_to_sim_follows_the_logged_motion(run_log: Path, capsys) -> None:
    """The logged torques drive MuJoCo open-loop along the logged trajectory of a lock-step run."""
    assert main(["replay", str(run_log), "--to-sim", "mujoco", "--json"]) == 0
    report = json.loads(capsys.readouterr().out)
    assert report["ticks"] > 400 and not report["fell"]
    assert report["joint_position_max_abs_err_rad"] < 1e-6


def test_exports_read_back_with_their_own_readers(run_log: Path, tmp_path: Path) -> None:
    """CSV (pandas), Parquet (pyarrow) and npz (numpy) exports hold the log's values."""
    pd = pytest.importorskip("pandas")
    pq = pytest.importorskip("pyarrow.parquet")
    log = read_log(run_log)
    tau, force = log.array("tau"), log.array("force_world")
    for fmt in ("csv", "parquet", "npz"):
        assert main(["log", "export", str(run_log), "--format", fmt, "-o", str(tmp_path / f"x.{fmt}")]) == 0
    frame = pd.read_csv(tmp_path / "x.csv")
    table = pq.read_table(tmp_path / "x.parquet")
    arrays = np.load(tmp_path / "x.npz")
    assert len(frame) == table.num_rows == len(log)
    np.testing.assert_array_equal(frame["tau[3]"].to_numpy(), tau[:, 3])
    np.testing.assert_array_equal(table.column("force_world[1].z").to_numpy(), force[:, 1, 2])
    assert (frame["mode"] == log.array("mode")).all()
    np.testing.assert_array_equal(arrays["tau"], tau)
    assert arrays["contact_ids"].dtype.kind == "U" and arrays["q"].shape == (len(log), 19)


def test_log_info_and_plots(run_log: Path, tmp_path: Path, capsys) -> None:
    """log info names the robot, both formulations and the deadline misses; plot writes five PNG figures."""
    assert main(["log", "info", str(run_log)]) == 0
    out = capsys.readouterr().out
    assert "quadruped" in out and "two_stage_qp" in out and "one_stage_qp" in out and "deadline misses" in out
    assert main(["plot", str(run_log), "-o", str(tmp_path / "plots")]) == 0
    pngs = sorted((tmp_path / "plots").glob("*.png"))
    assert [p.name for p in pngs] == ["contact_forces.png", "coupling.png", "timing.png", "torques.png", "tracking.png"]
    assert all(p.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and p.stat().st_size > 10_000 for p in pngs)


@pytest.mark.timing
def test_sigkill_of_daemon_and_writer_keeps_every_flushed_tick(tmp_path: Path) -> None:
    """After kill -9 of the daemon's whole process group, every tick older than the last flush reads back."""
    path = tmp_path / "killed.mcap"
    with logged_run(tmp_path, path) as (daemon, admin):
        wait_for(admin, lambda s: s["ticks"] > 300)
        old = admin.request("status")  # every tick answered by now is older than 200 ms at the kill
        time.sleep(0.2)
        last = admin.request("status")
        os.killpg(daemon.pid, signal.SIGKILL)  # the daemon and its log writer, no chance to finish
        daemon.wait(timeout=5)
    log = read_log(path)
    assert log.end is None and log.truncated
    print(f"{last['ticks'] - len(log)} of the ticks answered before the kill are not in the log")
    assert len(log) >= old["ticks"]  # 50 ms flush interval and 10 ms polls; 200 ms leaves room for a loaded machine
    assert np.all(np.diff(log.array("seq")) == 1)
    assert main(["log", "info", str(path)]) == 0


def _cli_error(args: list[str], capsys) -> str:
    assert main(args) == 2
    err = capsys.readouterr().err
    assert err.startswith("idcontrol: error: ") and "Traceback" not in err
    return err


def test_bad_logs_give_clear_errors(run_log: Path, tmp_path: Path, capsys) -> None:
    """Truncated, wrong, foreign-MCAP and unknown-version files give one error line, never a traceback."""
    data = run_log.read_bytes()
    (tmp_path / "head.mcap").write_bytes(data[:40])
    assert "not a readable idcontrol log" in _cli_error(["log", "info", str(tmp_path / "head.mcap")], capsys)
    (tmp_path / "cut.mcap").write_bytes(data[: len(data) // 2])
    assert main(["log", "info", str(tmp_path / "cut.mcap")]) == 0
    assert "ends early" in capsys.readouterr().out
    (tmp_path / "x.toml").write_text("robot = 'quadruped'\n")
    assert "not an MCAP file" in _cli_error(["replay", str(tmp_path / "x.toml")], capsys)
    assert "not found" in _cli_error(["plot", str(tmp_path / "missing.mcap")], capsys)
    with open(tmp_path / "foreign.mcap", "wb") as f:
        w = Writer(f)
        w.start()
        w.register_channel("/chatter", "json", w.register_schema("x", "jsonschema", b"{}"))
        w.add_message(1, 0, b"{}", 0)
        w.finish()
    assert "not an idcontrol log" in _cli_error(["log", "info", str(tmp_path / "foreign.mcap")], capsys)
    with open(tmp_path / "v99.mcap", "wb") as f:
        w = Writer(f)
        w.start(profile=schema.PROFILE)
        w.add_metadata(schema.METADATA_NAME, {"schema_version": "99"})
        w.finish()
    assert "schema version 99" in _cli_error(["log", "export", str(tmp_path / "v99.mcap")], capsys)
    assert "already exists" in _cli_error(["log", "export", str(run_log), "-o", str(run_log)], capsys)


def test_the_tick_record_round_trips_through_the_wire_encoding(quadruped):
    """A real core tick's record, encoded for the wire (float64 bytes, in place), packed and decoded, gives back
    every array bit for bit and holds only fields the schema defines."""
    from idcontrol.control.controller import InverseDynamicsController
    from idcontrol.control.core import ControlCore
    from idcontrol.control.state import RobotState
    from idcontrol.reference import make_reference

    core = ControlCore(InverseDynamicsController(quadruped), make_reference("hold", quadruped))
    core.start(0.0)
    state = RobotState(quadruped.standing_configuration(), np.zeros(quadruped.nv), 0.001, {}, np.ones((4, 3)))
    out = core.tick(state, now=0.001)
    labels = ["/".join(map(str, c)) for c in out.contacts.ids]
    record = schema.tick_record(seq=7, state=state, command=out, compute_us=1.0, now=2.0, contact_labels=labels)
    assert not schema.unknown_fields(record) and len(labels) == 4
    arrays = {k: np.array(v, copy=True) for k, v in record.items() if isinstance(v, np.ndarray)}
    back = schema.decode_tick_record(msgpack.unpackb(wire.pack(schema.encode_tick_record(record)), raw=False))
    for key, value in arrays.items():
        np.testing.assert_array_equal(np.reshape(back[key], value.shape), value, err_msg=key)


def test_a_folder_given_as_a_log_is_said_to_be_a_folder(tmp_path, capsys) -> None:
    """`log info DIR` says it is a folder (it said 'not found', which sends one looking for a missing path)."""
    assert main(["log", "info", str(tmp_path)]) == 2
    assert "is a folder, not a log file" in capsys.readouterr().err


@pytest.mark.parametrize("workload", ["trot", "grasp"])
def test_the_writer_rebuilds_from_a_tick_snapshot_the_very_record_the_daemon_would_publish(workload, monkeypatch):
    """While no telemetry subscriber listens the daemon logs each tick as a snapshot (the state's bytes as received
    and what the tick computed); the log writer's record rebuilt from it packs to the same bytes, and writes the
    same JSON, as the record the daemon builds for its subscribers: on recorded closed-loop states (touchdowns and
    lift-offs, the box between the fingers), with the bridge's optional fields and crossings on some ticks, and on
    ticks outside run mode."""
    from idcontrol.control.factory import build_core
    from idcontrol.logs.snapshot import pack_snapshot, record_from_snapshot
    from idcontrol.tools import workloads

    launch, _ = workloads.WORKLOADS[workload]
    monkeypatch.setitem(workloads.WORKLOADS, workload, (launch, 0.25))
    monkeypatch.setattr(workloads, "_RECORDINGS", {})
    recording = workloads.record(workload)
    core = build_core(recording.config, recording.robot)
    robot = recording.robot
    shape = wire.RobotShape(
        robot.name, robot.nq, robot.nv, tuple(robot.actuated_joints), tuple(robot.sphere_names), core.object_names
    )  # the daemon's
    sphere = shape.contact_names[0]
    kinds = set()
    for seq, state in enumerate(recording.states):
        if seq == 5:
            core.start(state.t)
        if seq == len(recording.states) - 20:
            core.stop("end of the test", state.t)
        crossings = (
            ((f"{sphere}/touchdown", state.t - 2e-4, "event"), (f"{sphere}/liftoff", state.t, "event"))
            if seq % 7 == 3
            else ()
        )
        raw = wire.encode_state(
            seq,
            state.t,
            state.q,
            state.v,
            state.sensed_forces,
            state.objects,
            last_rtt_us=None if seq % 5 == 0 else 400.0 + seq,
            last_late=seq % 11 == 0,
            crossings=crossings,
        )
        if seq % 3 == 1:  # a bridge may send its arrays as numbers instead of float64 bytes
            sent = msgpack.unpackb(raw, raw=False)
            sent["q"] = np.frombuffer(sent["q"], dtype="<f8").tolist()
            if "objects" in sent:
                pose = next(iter(sent["objects"].values()))
                pose["position"] = np.frombuffer(pose["position"], dtype="<f8").tolist()
            raw = wire.pack(sent)
        message = wire.decode_control(raw, shape)
        out = core.tick(message.state, now=state.t)
        labels = ["/".join(map(str, c)) for c in out.contacts.ids] if out.contacts is not None else None
        coupling, compute_us, now, dropped = core.coupling(out), 100.0 + seq, 1000.0 + state.t, seq // 50
        snapshot = pack_snapshot(
            raw, out, compute_us=compute_us, now=now, contact_labels=labels, coupling=coupling, log_dropped=dropped
        )
        rebuilt = record_from_snapshot(msgpack.unpackb(snapshot, raw=False))
        record = schema.tick_record(
            seq=message.seq,
            state=message.state,
            command=out,
            compute_us=compute_us,
            now=now,
            contact_labels=labels,
            last_rtt_us=message.last_rtt_us,
            bridge_stopped=message.bridge_stopped,
            last_late=message.last_late,
            crossings=message.crossings,
            coupling=coupling,
        )
        record["v"], record["type"], record["log_dropped"] = wire.PROTOCOL_VERSION, "telemetry", dropped
        published = wire.pack(schema.encode_tick_record(record))
        assert wire.pack(rebuilt) == published, f"tick {seq}"
        logged = schema.to_json(json_record(msgpack.unpackb(published, raw=False)))
        assert schema.to_json(json_record(rebuilt)) == logged, f"tick {seq}"
        kinds.add((out.mode, "coupling" in rebuilt, "crossings" in rebuilt, "objects" in rebuilt))
    modes = {k[0] for k in kinds}
    assert {"idle", "run"} <= modes and len(modes) >= 3, kinds
    assert any(k[1] for k in kinds) and any(k[2] for k in kinds)
    assert any(k[3] for k in kinds) == (workload == "grasp")


def test_a_snapshot_that_does_not_rebuild_is_counted_and_said_and_the_log_goes_on(tmp_path: Path, capsys) -> None:
    """A tick snapshot the writer cannot rebuild (too short, a state that is not msgpack, a hello for a state) loses
    that tick only: it is counted, said on stderr, and the records after it are written in their places."""
    config = {"robot": "quadruped", "nq": 19, "nv": 18}
    log = SegmentedLog(tmp_path / "run.mcap", config, 1 << 30)
    tail = [1.0, 10.0, "idle", "two_stage_qp", wire.f64(np.zeros(12)), 0, "", 0, None, None, None]
    assert log.add([1, 2, 3]) is False
    assert log.add([b"\xc1", *tail]) is False
    assert log.add([wire.encode_hello("quadruped", 19, 18, 12), *tail]) is False
    record = synthetic_record(np.random.default_rng(0), 1, 2)
    assert log.add(record) is False
    log.close()
    assert log.lost == 3 and log.ticks == 1
    err = capsys.readouterr().err
    assert "a tick record is lost (1 so far): a tick snapshot has 12 items, this one 3" in err
    assert "(2 so far)" not in err  # the first is said, then every thousandth
    logged = read_log(tmp_path / "run.mcap")
    assert len(logged) == 1 and logged.tick(0)["seq"] == 1
    assert logged.tick(0)["index"] == 3  # its place among the ticks: the lost ones came before it


def _drain_ring(name: str) -> None:
    """Pop a ring as fast as possible until a record ``b"stop"`` (each pop rewrites the consumer's total)."""
    from idcontrol.logs.ring import Ring

    ring = Ring.attach(name)
    try:
        while b"stop" not in ring.pop(ring.committed()):
            pass
    finally:
        ring.close()


def test_the_ring_never_refuses_a_record_it_has_room_for_while_the_other_side_updates_its_total() -> None:
    """The producer and the consumer each read the other's running total while it is being rewritten: every push
    into a ring the consumer has emptied succeeds, over 20 000 laps of a small ring. (With the totals written
    by ``struct.pack_into``, which zeroes its target first, the producer read the consumer's total as 0 and
    refused 13 records in 100 000 once it had written more than the ring holds.)"""
    import multiprocessing

    from idcontrol.logs.ring import Ring

    ring = Ring.create(4096)
    consumer = multiprocessing.get_context("fork").Process(target=_drain_ring, args=(ring.name,))
    consumer.start()
    try:
        record = bytes(range(200))
        refused = 0
        # the deadline finds a consumer that stopped; it is no speed bound: where both CPUs are busy, a hand-over
        # may wait for a time slice (the whole loop took 2.4 s on an idle 2-CPU machine, 9-10 s beside one or two
        # busy processes, and once beyond 30 s beside two)
        deadline = time.monotonic() + 180.0
        for _ in range(400_000):  # 82 MB: 20 000 laps
            while ring._totals[1] < ring._written:  # noqa: SLF001 (wait until the consumer has taken everything)
                assert time.monotonic() < deadline, "the consumer stopped taking records"
            refused += not ring.push(record)
        assert refused == 0
        assert ring.push(b"stop")
    finally:
        consumer.join(timeout=10)
        if consumer.is_alive():
            consumer.kill()
        ring.forget_name()
        ring.close()
    assert consumer.exitcode == 0
