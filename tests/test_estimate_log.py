"""The floating-base estimate against the simulator's truth in the tick log (issue 45, item 3): the daemon logs the
estimate it controlled from, its covariance, its status and the stance it used; a simulator bridge's sensor model
sends its truth beside the sensors, for the log only; the log writer adds the error and the standard deviations;
``idcontrol plot --figure estimate`` draws them and prints the errors. Real daemons, real MuJoCo, real MCAP files."""

from __future__ import annotations

import math
import re
import subprocess
import sys
import tempfile
from dataclasses import replace
from pathlib import Path

import msgpack
import numpy as np
import pytest
from scipy.spatial.transform import Rotation

from idcontrol import protocol as wire
from idcontrol.control.factory import build_core
from idcontrol.control.modes import MODE_RUN
from idcontrol.errors import ProtocolError
from idcontrol.logs import schema
from idcontrol.logs.reader import read_log
from idcontrol.logs.recorder import describe_run
from idcontrol.logs.snapshot import pack_snapshot, record_from_snapshot
from idcontrol.robot.model import RobotModel
from idcontrol.settings import Endpoints, load_launch
from idcontrol.sim.launch import simulator_for
from idcontrol.testing.runners import launch_file_text
from idcontrol.tools.cli import main
from tests.conftest import REPO

STAND = REPO / "launch" / "stand_estimated.toml"
STAND_SECONDS = 1.5


def _logged_run(launch: Path, seconds: float, log: Path) -> None:
    """``idcontrol launch`` of ``launch`` for ``seconds`` with ``--log log``, on private ipc:// endpoints."""
    with tempfile.TemporaryDirectory(prefix="idc-") as folder:  # short: ipc paths are limited to ~100 bytes
        endpoints = Endpoints(
            control=f"ipc://{folder}/control", admin=f"ipc://{folder}/admin", telemetry=f"ipc://{folder}/telemetry"
        )
        path = Path(folder) / "launch.toml"
        config = replace(load_launch(launch), duration=seconds, endpoints=endpoints)
        path.write_text(launch_file_text(config))
        command = [sys.executable, "-m", "idcontrol", "launch", str(path), "--log", str(log), "--quiet"]
        done = subprocess.run(command, capture_output=True, text=True, timeout=600)
        assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:]


@pytest.fixture(scope="module")
def stand_log(tmp_path_factory) -> Path:
    """A log of launch/stand_estimated.toml (typical sensors, the IMU's sensor form, the invariant EKF in the tick)."""
    log = tmp_path_factory.mktemp("estimated") / "stand.mcap"
    _logged_run(STAND, STAND_SECONDS, log)
    return log


@pytest.fixture(scope="module")
def plain_log(tmp_path_factory) -> Path:
    """A log of launch/stand.toml: the truth as the state, no estimator."""
    log = tmp_path_factory.mktemp("plain") / "stand.mcap"
    _logged_run(REPO / "launch" / "stand.toml", 0.3, log)
    return log


def _run_ticks(log) -> np.ndarray:
    return log.array("mode") == MODE_RUN


# ---------------------------------------------------------------------------------------------------- the log
def test_every_run_tick_of_an_estimated_stand_holds_the_estimate_its_covariance_and_the_truth(stand_log):
    """Each run-mode tick logs the estimate (finite, a unit quaternion), the 9×9 covariance block (symmetric, positive
    diagonal), the stance the filter used, a trustworthy status; each tick the bridge answered carries the truth; the
    configuration names the filter and its covariance layout."""
    log = read_log(stand_log)
    run = _run_ticks(log)
    assert run.sum() >= 0.98 * STAND_SECONDS / log.dt, f"{run.sum()} run ticks"
    q, qd = log.array("estimate_q")[run], log.array("estimate_qd")[run]
    assert q.shape[1] == 7 and qd.shape[1] == 6 and np.isfinite(q).all() and np.isfinite(qd).all()
    assert np.allclose(np.linalg.norm(q[:, 3:7], axis=1), 1.0, atol=1e-9)
    block = log.array("estimate_covariance")[run].reshape(-1, 9, 9)
    assert np.isfinite(block).all() and np.allclose(block, block.transpose(0, 2, 1))
    assert (np.diagonal(block, axis1=1, axis2=2) > 0).all()
    stance = log.array("estimate_contact")[run]
    assert stance.shape[1] == 4 and set(np.unique(stance)) <= {0.0, 1.0} and stance[-1].sum() == 4
    assert set(log.array("estimate_status")[run]) == {"trustworthy"}
    assert not np.isfinite(log.array("estimate_q")[~run]).any()  # the estimator runs in run mode only
    truth = log.array("truth_q")
    assert np.isfinite(truth).all() and np.isfinite(log.array("truth_qd")).all()
    assert log.array("truth_contact_forces").shape == (len(log), 4, 3)
    assert np.array_equal(log.array("q")[:, :7], np.tile([0, 0, 0, 0, 0, 0, 1.0], (len(log), 1)))  # sensors only
    estimator = log.config["estimator"]
    assert estimator["kind"] == "inekf"
    assert [estimator["covariance_layout"][k] for k in ("rotation", "velocity", "position")] == [[0, 3], [3, 6], [6, 9]]


def test_the_logged_error_is_the_estimate_minus_the_truth(stand_log):
    """estimate_error and tilt_error, which the log writer adds, equal a recomputation with scipy's rotations from the
    logged estimate and truth: rotation vector of R̂ Rᵀ, world velocity difference, position difference, the angle
    between the verticals."""
    log = read_log(stand_log)
    run = _run_ticks(log)
    q, qd = log.array("estimate_q")[run], log.array("estimate_qd")[run]
    truth_q, truth_qd = log.array("truth_q")[run], log.array("truth_qd")[run]
    r_estimate, r_truth = Rotation.from_quat(q[:, 3:7]), Rotation.from_quat(truth_q[:, 3:7])
    expected = np.hstack(
        [
            (r_estimate * r_truth.inv()).as_rotvec(),
            r_estimate.apply(qd[:, :3]) - r_truth.apply(truth_qd[:, :3]),
            q[:, :3] - truth_q[:, :3],
        ]
    )
    error = log.array("estimate_error")[run]
    assert np.abs(error - expected).max() < 1e-12
    up_estimate, up_truth = r_estimate.inv().apply([0, 0, 1]), r_truth.inv().apply([0, 0, 1])
    tilt = np.arccos(np.clip(np.sum(up_estimate * up_truth, axis=1), -1, 1))
    assert np.abs(log.array("tilt_error")[run] - tilt).max() < 1e-7
    assert np.abs(error).max() > 0  # typical sensors: the estimate is not the truth


def test_the_standard_deviations_are_finite_positive_and_first_order_in_the_invariant_error(stand_log):
    """estimate_std is finite and positive on every run tick and is the diagonal of J P Jᵀ, J mapping the invariant
    EKF's right-invariant error (ξ_R, ξ_v, ξ_p) to the base's (rotation, world velocity, position) at the estimate."""
    log = read_log(stand_log)
    run = _run_ticks(log)
    std = log.array("estimate_std")[run]
    assert std.shape[1] == 9 and np.isfinite(std).all() and (std > 0).all()
    q, qd = log.array("estimate_q")[run], log.array("estimate_qd")[run]
    block = log.array("estimate_covariance")[run].reshape(-1, 9, 9)
    velocity = Rotation.from_quat(q[:, 3:7]).apply(qd[:, :3])
    for i in np.linspace(0, len(q) - 1, 25).astype(int):
        jacobian = np.eye(9)
        jacobian[3:6, 0:3] = -_skew(velocity[i])
        jacobian[6:9, 0:3] = -_skew(q[i, :3])
        assert np.allclose(std[i], np.sqrt(np.diag(jacobian @ block[i] @ jacobian.T)), rtol=1e-9, atol=0)


def _skew(w: np.ndarray) -> np.ndarray:
    return np.array([[0.0, -w[2], w[1]], [w[2], 0.0, -w[0]], [-w[1], w[0], 0.0]])


def test_a_standing_robot_s_estimate_stays_near_the_truth(stand_log):
    """Standing on typical sensors, the estimate the controller used stays within 1 cm of the true height and 1° of
    the true tilt, and the stance the filter used agrees with the true contacts on almost every foot-tick."""
    log = read_log(stand_log)
    run = _run_ticks(log)
    assert np.abs(log.array("estimate_error")[run][:, 8]).max() < 0.01
    assert math.degrees(log.array("tilt_error")[run].max()) < 1.0
    true_contact = log.array("truth_contact_forces")[run][:, :, 2] > 1.0
    assert np.mean((log.array("estimate_contact")[run] > 0.5) == true_contact) > 0.99


# ---------------------------------------------------------------------------------------------------- the plot
def _number(pattern: str, text: str) -> float:
    found = re.search(pattern, text)
    assert found, f"{pattern!r} not in:\n{text}"
    return float(found.group(1))


def test_the_estimate_figure_is_written_and_its_summary_is_the_logs(stand_log, tmp_path, capsys):
    """``idcontrol plot LOG --figure estimate`` writes estimate.png (a real PNG, not empty) and prints the errors; the
    printed height, tilt, velocity and contact numbers equal a recomputation from the logged estimate and truth."""
    assert main(["plot", str(stand_log), "-o", str(tmp_path), "--figure", "estimate"]) == 0
    text = capsys.readouterr().out
    png = tmp_path / "estimate.png"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["estimate.png"]
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and png.stat().st_size > 30_000
    log = read_log(stand_log)
    run = _run_ticks(log)
    height = np.abs(log.array("estimate_q")[run][:, 2] - log.array("truth_q")[run][:, 2]) * 1e3
    assert _number(r"height error\s+RMS ([\d.]+) mm", text) == pytest.approx(np.sqrt(np.mean(height**2)), abs=0.051)
    assert _number(r"height error.*max ([\d.]+) mm", text) == pytest.approx(height.max(), abs=0.051)
    tilt = np.degrees(log.array("tilt_error")[run])
    assert _number(r"tilt error.*max ([\d.]+)°", text) == pytest.approx(tilt.max(), abs=0.0051)
    r_estimate = Rotation.from_quat(log.array("estimate_q")[run][:, 3:7])
    r_truth = Rotation.from_quat(log.array("truth_q")[run][:, 3:7])
    velocity = r_estimate.apply(log.array("estimate_qd")[run][:, :3]) - r_truth.apply(log.array("truth_qd")[run][:, :3])
    rms = np.sqrt(np.mean(np.sum(velocity**2, axis=1))) * 1e3
    assert _number(r"velocity error\s+RMS ([\d.]+) mm/s", text) == pytest.approx(rms, abs=0.051)
    agree = (log.array("estimate_contact")[run] > 0.5) == (log.array("truth_contact_forces")[run][:, :, 2] > 1.0)
    assert _number(r"contact agreement\s+([\d.]+) %", text) == pytest.approx(100 * agree.mean(), abs=0.051)
    assert f"{run.sum()} ticks" in text


def test_a_log_without_an_estimator_reads_and_plots_and_says_it_has_no_estimate(plain_log, tmp_path, capsys):
    """A run without [estimator] logs no estimate and no truth (the bridge's ideal sensors send the truth as the
    state); it reads, plots its usual five figures, and asked for the estimate figure says the log has none."""
    log = read_log(plain_log)
    assert len(log) and not np.isfinite(log.array("estimate_q")).any() and not log.array("truth_q").size
    assert log.config["estimator"] is None
    assert main(["plot", str(plain_log), "-o", str(tmp_path / "all")]) == 0
    pngs = sorted(p.name for p in (tmp_path / "all").glob("*.png"))
    assert pngs == ["contact_forces.png", "coupling.png", "timing.png", "torques.png", "tracking.png"]
    capsys.readouterr()
    assert main(["plot", str(plain_log), "-o", str(tmp_path / "estimate"), "--figure", "estimate"]) == 2
    err = capsys.readouterr().err
    assert err.startswith("idcontrol: error: ") and "this log has no estimate" in err and "Traceback" not in err


# ---------------------------------------------------------------------------------------------------- the wire
def _shape(robot: RobotModel) -> wire.RobotShape:
    return wire.RobotShape(robot.name, robot.nq, robot.nv, tuple(robot.actuated_joints), tuple(robot.sphere_names), ())


def test_the_writer_rebuilds_the_record_the_daemon_would_publish_with_an_estimate_and_the_truth(quadruped):
    """With the estimator in the tick and the bridge's truth in the state, the tick snapshot the daemon logs rebuilds
    (in the writer) into the very record, byte for byte, that the daemon publishes to its subscribers; a malformed
    truth is left out of both and said."""
    config = load_launch(STAND)
    core = build_core(config, quadruped)
    sim = simulator_for(config, quadruped)
    shape, k = _shape(quadruped), len(quadruped.sphere_names)
    said: list[str] = []
    core.start(0.0)
    estimated = 0
    for seq in range(200):
        s = sim.state()
        raw = wire.encode_state(seq, s.t, s.q, s.v, imu=s.imu, truth=s.truth)
        if seq == 150:  # a bridge's malformed truth: the daemon's tick does not look at it
            sent = msgpack.unpackb(raw, raw=False)
            sent["truth"]["q"] = sent["truth"]["q"][:16]
            raw = wire.pack(sent)
        message = wire.decode_control(raw, shape)
        out = core.tick(message.state, now=s.t)
        assert out.mode == MODE_RUN
        snapshot = pack_snapshot(raw, out, compute_us=1.0, now=s.t, contact_labels=None, coupling=None, log_dropped=0)
        rebuilt = record_from_snapshot(msgpack.unpackb(snapshot, raw=False), k, said.append)
        try:
            truth = wire.decode_truth(message.truth, k)
        except ProtocolError:
            truth = None
        record = schema.tick_record(
            seq=seq, state=message.state, command=out, compute_us=1.0, now=s.t, contact_labels=None, truth=truth
        )
        record["v"], record["type"], record["log_dropped"] = wire.PROTOCOL_VERSION, "telemetry", 0
        assert wire.pack(rebuilt) == wire.pack(schema.encode_tick_record(record)), f"tick {seq}"
        assert ("truth_q" in rebuilt) == (seq != 150)
        estimated += "estimate_q" in rebuilt
        for _ in range(config.bridge.substeps):
            sim.step(out.tau)
    assert estimated == 200
    assert len(said) == 1 and "truth.q holds 16 bytes, expected 56" in said[0]
    assert describe_run(config, core)["estimator"]["kind"] == "inekf"


def test_the_sensor_model_s_truth_is_the_simulator_s_at_the_reading_s_instant(quadruped):
    """A bridge's sensor model reports readings with the simulator's own state of the same instant, also when the
    readings are late (latency_ticks): the truth a log compares with is the one the sensors measured."""
    config = load_launch(STAND)
    config = replace(config, bridge=replace(config.bridge, sensors=replace(config.bridge.sensors, latency_ticks=3)))
    sim = simulator_for(config, quadruped)
    truths = []
    for _ in range(10):
        truths.append(sim.truth())
        reading = sim.state()
        assert reading.truth is not None and reading.truth.t == reading.t
        assert np.array_equal(reading.q[:7], [0, 0, 0, 0, 0, 0, 1]) and reading.truth.q[2] > 0.1
        sim.step(np.zeros(quadruped.nu))
    assert reading.t == truths[-4].t and reading.truth is truths[-4]


def test_the_daemon_does_not_check_the_truth_in_its_tick_but_the_log_does():
    """A state's truth is decoded by nobody in the tick (a malformed one does not refuse the state); decode_truth,
    which the log's recorders use, checks it and names the field."""
    shape = wire.RobotShape("quadruped", 19, 18, tuple(f"j{i}" for i in range(12)), ("a", "b", "c", "d"), ())
    raw = msgpack.unpackb(
        wire.encode_state(1, 0.0, np.r_[0, 0, 0.3, 0, 0, 0, 1, np.zeros(12)], np.zeros(18)), raw=False
    )
    raw["truth"] = {"q": b"\x00" * 56, "qd": [0.0] * 5}
    message = wire.decode_control(wire.pack(raw), shape)
    assert message.truth is raw["truth"] or message.truth == raw["truth"]
    with pytest.raises(ProtocolError, match="truth.qd has 5 values, expected 6"):
        wire.decode_truth(message.truth, 4)
    raw["truth"]["qd"] = [0.0] * 6
    raw["truth"]["contact_forces"] = [0.0] * 12
    truth = wire.decode_truth(raw["truth"], 4)
    assert truth.q.shape == (7,) and truth.v.shape == (6,) and truth.contact_forces.shape == (4, 3)
