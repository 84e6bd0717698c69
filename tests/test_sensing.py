"""The bridge's sensor and actuator models (idcontrol.sim.sensing) around a real MuJoCo simulation, and the unknown
terrains MuJoCo builds."""

from __future__ import annotations

import math

import mujoco
import numpy as np
import pytest

from idcontrol.errors import ConfigError
from idcontrol.robot.model import RobotModel
from idcontrol.settings import ActuatorSettings, SensorSettings, actuator_settings, sensor_settings
from idcontrol.sim.mujoco import MujocoSim, Terrain
from idcontrol.sim.sensing import SensedSimulator, sensed


def _sensed(robot, sensors: dict, actuators: dict | None = None, **options) -> SensedSimulator:
    sim = MujocoSim(robot, **options)
    return SensedSimulator(sim, robot, sensor_settings(sensors, "test"), actuator_settings(actuators or {}, "test"))


def test_ideal_models_leave_the_simulator_itself(quadruped):
    """With both models ideal (the default), the bridge serves the simulator as it is: the truth, at once."""
    sim = MujocoSim(quadruped)
    assert sensed(sim, quadruped, SensorSettings(), ActuatorSettings(), period=1e-3) is sim
    assert SensorSettings().ideal and ActuatorSettings().ideal
    assert not sensor_settings({"preset": "typical"}, "x").ideal
    assert not actuator_settings({"preset": "typical"}, "x").ideal


def test_typical_readings_are_reproducible_from_the_seed(quadruped):
    """The same seed gives the same readings, tick by tick; another seed gives others."""

    def readings(seed: int) -> np.ndarray:
        sim = _sensed(quadruped, {"preset": "typical", "seed": seed})
        out = []
        for _ in range(20):
            s = sim.state()
            out.append(np.concatenate([s.q, s.v]))
            sim.step(np.zeros(quadruped.nu))
        return np.array(out)

    a, b, c = readings(3), readings(3), readings(4)
    assert np.array_equal(a, b)
    assert not np.allclose(a, c)


def test_encoders_are_quantized_and_the_base_height_biased(quadruped):
    """Joint positions come in steps of the encoder resolution; the base height carries exactly its bias; the
    truth stays the simulator's."""
    resolution, bias = 1e-3, -0.02
    sim = _sensed(quadruped, {"encoder_resolution": resolution, "base_height_bias": bias})
    s, truth = sim.state(), sim.truth()
    joints = s.q[7:]
    assert np.allclose(joints / resolution, np.round(joints / resolution), atol=1e-9)
    assert np.all(np.abs(joints - truth.q[7:]) <= 0.5 * resolution + 1e-12)
    assert s.q[2] == pytest.approx(truth.q[2] + bias, abs=1e-12)
    assert np.array_equal(s.q[3:7], truth.q[3:7])


def test_imu_tilt_rotates_the_base_by_its_angle(quadruped):
    """A tilt error of θ turns the reported base orientation by θ about a horizontal axis."""
    tilt = math.radians(2.0)
    sim = _sensed(quadruped, {"imu_tilt": tilt})
    s, truth = sim.state(), sim.truth()
    x, y, z, w = s.q[3:7]
    tx, ty, tz, tw = truth.q[3:7]
    dot = abs(x * tx + y * ty + z * tz + w * tw)
    assert 2.0 * math.acos(min(1.0, dot)) == pytest.approx(tilt, rel=1e-6)


def test_foot_forces_only_where_the_robot_file_says_the_robot_has_sensors(quadruped, tmp_path):
    """A robot without foot sensors reports no contact forces; one whose robot file declares force sensors (the
    A1's, with ``[sensors] feet = "force"`` added, as Unitree's quadrupeds have them) reports the simulator's
    forces."""
    assert _sensed(quadruped, {"base_height_bias": 0.001}).state().contact_forces is None
    shipped = RobotModel("a1").config.path
    text = shipped.read_text() + '\n[sensors]\nfeet = "force"\n'
    (tmp_path / "robot.toml").write_text(text)
    a1 = RobotModel(str(tmp_path / "robot.toml"))
    assert a1.config.sensors.feet == "force"
    sim = _sensed(a1, {"base_height_bias": 0.001})
    forces = sim.state().contact_forces
    assert forces is not None and np.array_equal(forces, sim.truth().contact_forces)
    assert _sensed(a1, {"foot_sensors": "none"}).state().contact_forces is None


def test_actuation_delay_holds_a_torque_back_by_whole_ticks():
    """With a delay of d ticks, a torque step first moves the joints d ticks later."""
    arm = RobotModel("arm")
    for delay in (0, 2):
        sim = _sensed(arm, {}, {"delay_ticks": delay})
        sim.sim.model.opt.gravity[:] = 0.0  # only the command moves the arm
        tau = np.zeros(arm.nu)
        tau[0] = 1.0
        moved = []
        for _ in range(5):
            sim.step(tau)
            moved.append(abs(sim.truth().v[0]) > 1e-9)
        assert moved.index(True) == delay


def test_speed_limit_caps_the_driving_torque_at_the_velocity_limit():
    """Past the knee of the torque–speed curve the drive delivers less torque in the direction of motion, and none
    at the velocity limit; braking is not limited."""
    arm = RobotModel("arm")
    sim = _sensed(arm, {}, {"speed_knee": 0.5})
    limit = float(np.asarray(arm.model.velocityLimit)[0])
    q = arm.standing_configuration()
    v = np.zeros(arm.nv)
    v[0] = limit
    sim.sim.reset(q, v)
    sim.sim.model.opt.gravity[:] = 0.0
    tau = np.zeros(arm.nu)
    tau[0] = float(arm.torque_limits[0])
    sim.step(tau)  # driving at the limit: no torque, the joint keeps its speed (up to its own damping)
    driven = sim.truth().v[0]
    sim.sim.reset(q, v)
    sim.step(-tau)  # braking: the whole torque
    braked = sim.truth().v[0]
    assert driven <= limit + 1e-9 and braked < driven - 1e-6


@pytest.mark.parametrize(
    ("table", "message"),
    [
        ({"preset": "perfect"}, "preset"),
        ({"gyro_nois": 0.1}, "unknown key"),
        ({"encoder_noise": -1.0}, ">= 0"),
        ({"latency_ticks": 1.5}, "integer"),
        ({"joint_velocity": "guessed"}, "joint_velocity"),
        ({"imu_tilt": math.inf}, "finite"),
    ],
)
def test_bad_sensor_tables_are_refused_with_the_key(table, message):
    """Every key of [bridge.sensors] is checked when the launch file is read, and the error names it."""
    with pytest.raises(ConfigError, match=message):
        sensor_settings(table, "launch.toml")


def test_a_preset_takes_overrides():
    """A table names a preset and overrides some of its keys; the others keep the preset's values."""
    s = sensor_settings({"preset": "typical", "base_height_bias": 0.02}, "x")
    assert s.base_height_bias == 0.02 and s.gyro_noise > 0.0 and s.preset == "typical"


@pytest.mark.parametrize(("kind", "x", "z"), [("step", 0.6, 0.04), ("slope", 0.5, None)])
def test_unknown_terrain_stands_where_it_was_built(quadruped, kind, x, z):
    """The step rises by its height ahead of the standing feet, the slope at its angle from there; the floor under
    the standing feet is untouched."""
    terrain = Terrain(kind, height=0.04, slope_deg=10.0)
    sim = MujocoSim(quadruped, terrain=terrain)
    front = sim._standing_footprint()[0, 1] + Terrain.CLEARANCE
    expected = z if z is not None else (x - front) * math.tan(math.radians(10.0))

    def ground(px: float, py: float) -> float:
        geom = np.array([-1], dtype=np.int32)
        return 1.0 - mujoco.mj_ray(
            sim.model, sim.data, np.array([px, py, 1.0]), np.array([0.0, 0.0, -1.0]), None, 1, -1, geom
        )

    assert ground(x, 0.3) == pytest.approx(expected, abs=1e-6)
    assert ground(-0.5, 0.3) == pytest.approx(0.0, abs=1e-9)


def test_bumps_are_the_drawn_heights_and_flat_under_the_feet(quadruped):
    """The height field reproduces the drawn bumps (within ± their amplitude) and is flat under the standing feet."""
    terrain = Terrain("bumps", height=0.02, seed=5)
    sim = MujocoSim(quadruped, terrain=terrain)
    heights = terrain.bump_heights(sim._standing_footprint())
    assert np.abs(heights).max() <= 0.02 + 1e-12 and np.abs(heights).max() > 0.01
    axis = np.arange(-Terrain.FIELD_HALF_EXTENT, Terrain.FIELD_HALF_EXTENT + 0.01, Terrain.FIELD_SPACING)
    for px, py in [(1.0, -0.3), (-2.0, 0.7), (0.5, 1.5)]:
        geom = np.array([-1], dtype=np.int32)
        z = 1.0 - mujoco.mj_ray(
            sim.model, sim.data, np.array([px, py, 1.0]), np.array([0.0, 0.0, -1.0]), None, 1, -1, geom
        )
        i, j = np.argmin(np.abs(axis - py)), np.argmin(np.abs(axis - px))
        assert z == pytest.approx(heights[i, j], abs=1e-4)
    quadruped.update(quadruped.standing_configuration(), np.zeros(quadruped.nv))
    for px, py, _ in quadruped.sphere_centers_in_world:  # the standing feet stand on the flat pad: every grid node
        i, j = np.argmin(np.abs(axis - py)), np.argmin(np.abs(axis - px))  # of the cells around them is at 0
        assert np.all(heights[i - 1 : i + 2, j - 1 : j + 2] == 0.0)
