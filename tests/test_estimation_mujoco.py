"""The base estimator on MuJoCo's truth: the shipped quadruped trots in closed loop on the simulator's state,
its IMU and encoders are synthesized from the truth with seeded errors, and the estimator, run open-loop over
them, stays within issue 45's targets."""

from __future__ import annotations

import math

import numpy as np
import pinocchio as pin
import pytest

from idcontrol.estimation import EstimatorSettings
from idcontrol.tools.estimator_eval import SensorErrors, evaluate, record_truth, synthesize, trot_config

SECONDS = 10.0


@pytest.fixture(scope="module")
def trot():
    """10 s of the shipped trot at 0.2 m/s (two_stage_qp), its truth recorded."""
    return record_truth(trot_config(), SECONDS)


def test_the_recorded_imu_is_the_motion_mujoco_integrated(trot):
    """MuJoCo's accelerometer and gyro quantities, rotated to the world, are the velocity changes of the truth
    (the specific force plus gravity; the reading that comes with a state is the step that led to it)."""
    assert trot.end_reason == "duration reached" and len(trot.t) == int(SECONDS * 1000)
    rotation = np.array([pin.Quaternion(q[6], q[3], q[4], q[5]).toRotationMatrix() for q in trot.q])
    velocity = np.einsum("nij,nj->ni", rotation, trot.v[:, :3])
    acceleration = np.diff(velocity, axis=0) / 1e-3
    predicted = np.einsum("nij,nj->ni", rotation[:-1], trot.accel[1:]) + np.array([0.0, 0.0, -9.81])
    assert np.median(np.abs(acceleration - predicted)) < 1e-3  # m/s², of accelerations up to ~10
    assert np.allclose(trot.gyro[1:], trot.v[:-1, 3:6], atol=1e-12)


def test_the_invariant_ekf_meets_the_targets_on_a_trot_with_typical_sensors(trot):
    """Typical IMU noise and biases, a drifting IMU yaw, 14-bit encoders: height error ≤ 1 cm, tilt ≤ 0.5°,
    velocity RMS ≤ 0.05 m/s, horizontal drift ≤ 2 % of the distance, and every tick judged trustworthy."""
    readings = synthesize(trot, SensorErrors(), seed=7)
    errors = evaluate(trot, readings, EstimatorSettings())
    assert errors.distance > 1.5  # m: it did trot
    assert errors.height_max <= 0.01
    assert errors.tilt_max <= math.radians(0.5)
    assert errors.velocity_rms <= 0.05
    assert errors.drift_percent <= 2.0
    assert errors.healthy_fraction == 1.0, errors.first_unhealthy


def test_the_invariant_ekf_drifts_less_than_the_linear_baseline(trot):
    """On the same readings the Cheetah 3 filter (point feet, no rolling) drifts several times more."""
    readings = synthesize(trot, SensorErrors(), seed=7)
    inekf = evaluate(trot, readings, EstimatorSettings())
    lkf = evaluate(trot, readings, EstimatorSettings(filter="lkf"))
    assert lkf.healthy_fraction == 1.0, lkf.first_unhealthy
    assert inekf.drift_percent * 3.0 < lkf.drift_percent


def test_an_accelerometer_that_fails_mid_trot_stops_the_estimate_from_being_trusted(trot):
    """An accelerometer that starts reading NaN at 5 s: every tick from then on is untrustworthy and says why."""
    readings = synthesize(trot, SensorErrors(), seed=7)
    for reading in readings[5000:]:
        reading.imu_linear_acceleration = np.full(3, np.nan)
    errors = evaluate(trot, readings, EstimatorSettings())
    assert errors.healthy_fraction == pytest.approx(0.5, abs=1e-3)
    assert errors.first_unhealthy.startswith("t = 5.0") and "not finite" in errors.first_unhealthy


def test_the_experiment_command_writes_each_filter_with_each_sensor_set(tmp_path):
    """``idcontrol experiment estimator`` records a trot and writes a row per filter and sensor set."""
    import json

    from idcontrol.tools.cli import main

    path = tmp_path / "estimator.json"
    assert main(["experiment", "estimator", "--seconds", "0.5", "--json", str(path)]) == 0
    rows = json.loads(path.read_text())["rows"]
    assert sorted((r["filter"], r["sensors"]) for r in rows) == [
        ("inekf", "ideal"),
        ("inekf", "typical"),
        ("lkf", "ideal"),
        ("lkf", "typical"),
    ]
    assert all(r["healthy_fraction"] == 1.0 and r["tick_us_p50"] > 0 for r in rows)
