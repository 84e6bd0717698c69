"""The ess simulator back end: a rigid block and the quadruped on compliant ground, integrated by the ESS
integrator (real Pinocchio), against answers worked out by hand, and the quadruped standing under the controller."""

from __future__ import annotations

import math

import numpy as np
import pinocchio as pin
import pytest

from idcontrol.errors import ConfigError, ShapeError
from idcontrol.robot.model import RobotModel
from idcontrol.settings import load_launch
from idcontrol.sim import make_simulator
from idcontrol.sim.ess.backend import DEFAULT_STIFFNESS, EssSim
from idcontrol.sim.launch import simulator_for
from idcontrol.testing import loop_config, run_in_process, run_over_protocol
from tests.test_launch import LAUNCH
from tests.test_rigid_sim import BLOCK_HALF, BLOCK_MASS, BLOCK_URDF, SPHERE_R

G = 9.81


@pytest.fixture(scope="module")
def block(tmp_path_factory) -> RobotModel:
    """The rigid simulator tests' block: an unactuated floating box (2 kg) on four spheres at its bottom corners
    (c0, c1 at +x; c0, c2 at +y)."""
    folder = tmp_path_factory.mktemp("block")
    a, b, c = (2 * h for h in BLOCK_HALF)
    m = BLOCK_MASS
    (folder / "block.urdf").write_text(
        BLOCK_URDF.format(m=m, ixx=m * (b * b + c * c) / 12, iyy=m * (a * a + c * c) / 12, izz=m * (a * a + b * b) / 12)
    )
    spheres = "".join(
        f'[[contact_spheres]]\nname = "c{i}"\nframe = "block"\nradius = {SPHERE_R}\n'
        f"offset = [{sx * BLOCK_HALF[0]}, {sy * BLOCK_HALF[1]}, {-BLOCK_HALF[2] + SPHERE_R}]\n\n"
        for i, (sx, sy) in enumerate([(1, 1), (1, -1), (-1, 1), (-1, -1)])
    )
    (folder / "robot.toml").write_text(
        f'name = "block"\nurdf = "block.urdf"\nbase = "floating"\n\n{spheres}'
        f"[standing]\nbase_position = [0.0, 0.0, {BLOCK_HALF[2]}]\n"
    )
    return RobotModel(str(folder / "robot.toml"))


def pitched(angle: float, lowest: float) -> np.ndarray:
    """(7,) block configuration pitched by ``angle`` rad about y (the +x corners lower), its lowest sphere
    ``lowest`` m above the ground."""
    q = np.zeros(7)
    q[3:7] = [0.0, math.sin(angle / 2), 0.0, math.cos(angle / 2)]
    R = pin.Quaternion(q[6], q[3], q[4], q[5]).toRotationMatrix()
    corner = np.array([BLOCK_HALF[0], 0.0, -BLOCK_HALF[2] + SPHERE_R])
    q[2] = lowest + SPHERE_R - (R @ corner)[2]
    return q


def test_a_pitched_block_touches_down_one_guard_at_a_time_in_height_order(block):
    """Dropped from rest with its +x edge 2 mm lower: the two +x corners touch down first, at the free-fall time
    sqrt(2 h / g), one after the other at the same instant (in index order), then the two −x corners; each
    crossing is a projection, and each step's crossings are listed after it in order."""
    sim = EssSim(block, mu=1.0, timestep=1e-3, initial=pitched(0.05, 0.002))
    crossings = []
    for _ in range(60):
        sim.step(np.zeros(0))
        crossings.extend(sim.last_crossings)
    touchdowns = [c for c in crossings if c.event == "touchdown"]
    assert [c.sphere for c in touchdowns[:4]] == ["c0", "c1", "c2", "c3"]  # +x corners are c0, c1
    assert all(c.how == "projected" for c in touchdowns[:4])
    t_fall = math.sqrt(2 * 0.002 / G)
    assert touchdowns[0].t == pytest.approx(t_fall, abs=1e-7)
    assert touchdowns[1].t == pytest.approx(touchdowns[0].t, abs=1e-12)
    assert touchdowns[2].t > touchdowns[1].t + 1e-3
    times = [c.t for c in crossings]
    assert times == sorted(times)


def test_a_block_at_rest_carries_its_weight_away_from_its_guards(block):
    """At its resting posture the block's four springs carry m g (the sensed mean forces), it stays put, and no
    guard is crossed: resting contact is not in any band."""
    sim = EssSim(block, mu=1.0, timestep=1e-3)
    z0 = sim.state().q[2]
    for _ in range(100):
        sim.step(np.zeros(0))
    s = sim.state()
    assert s.contact_forces[:, 2].sum() == pytest.approx(BLOCK_MASS * G, rel=1e-3)
    assert np.allclose(s.contact_forces[:, :2], 0.0, atol=1e-9)
    assert s.q[2] == pytest.approx(z0, abs=1e-7)
    assert z0 == pytest.approx(BLOCK_HALF[2] - BLOCK_MASS * G / (4 * DEFAULT_STIFFNESS), abs=1e-12)
    assert sim.stats.crossings["projected"] == 0 and sim.stats.liveness_failures == 0
    assert sim.contact_modes().all()


def test_a_sliding_block_decelerates_at_mu_g(block):
    """Pushed at 1 m/s on μ = 0.5, the block loses μ g · 0.1 s of speed in 0.1 s (regularized friction: within
    (v_s / v)² of Coulomb's) and its sensed tangential force is μ times its normal force."""
    sim = EssSim(block, mu=0.5, timestep=1e-3)
    v = np.zeros(6)
    v[0] = 1.0
    sim.reset(v=v)
    for _ in range(100):
        sim.step(np.zeros(0))
    s = sim.state()
    assert s.v[0] == pytest.approx(1.0 - 0.5 * G * 0.1, rel=2e-3)
    forces = s.contact_forces
    assert -forces[:, 0].sum() == pytest.approx(0.5 * forces[:, 2].sum(), rel=1e-3)


def test_the_quadruped_stands_under_the_controller_on_ess(quadruped):
    """Closed loop, two_stage_qp holding the standing posture for 0.3 s on the ess back end: no fall, small joint
    error, and the sensed normal forces carry the robot's weight."""
    config = loop_config("quadruped", formulation="two_stage_qp", simulator="ess", penetration_tolerance=0.001)
    run = run_in_process(config, 0.3, robot=quadruped)
    assert run.ticks_in_run == 300 and run.end_mode == "run" and not run.summary["fell"], run.end_reason
    assert run.summary["tracking_error_rad"] < 0.01
    weight = quadruped.total_mass() * G
    assert run.force_sensed[-50:, :, 2].sum(axis=1).mean() == pytest.approx(weight, rel=0.02)


def ess_launch_file(tmp_path, kind: str, keys: str):
    """launch/quadruped_stand.toml with ``[bridge] kind`` and extra bridge keys."""
    text = (LAUNCH / "quadruped_stand.toml").read_text().replace('kind = "mujoco"', f'kind = "{kind}"\n{keys}')
    path = tmp_path / f"{kind}.toml"
    path.write_text(text)
    return path


def test_the_launch_file_configures_the_ess_contact(tmp_path, quadruped):
    """``[bridge] kind = "ess"`` with its contact keys builds the ess simulator with them; the keys are refused
    for another kind, and bad values are named."""
    path = ess_launch_file(tmp_path, "ess", "stiffness = 1.5e5\ndamping = 800.0\nepsilon = 2e-5")
    sim = simulator_for(load_launch(path), quadruped)
    assert isinstance(sim, EssSim)
    assert sim.system.stiffness == 1.5e5 and sim.system.damping == 800.0 and sim.epsilon == 2e-5
    with pytest.raises(ConfigError, match="bridge.stiffness needs bridge.kind = 'ess'"):
        load_launch(ess_launch_file(tmp_path, "mujoco", "stiffness = 1e5"))
    with pytest.raises(ConfigError, match="bridge.epsilon must be a finite number > 0"):
        load_launch(ess_launch_file(tmp_path, "ess", "epsilon = 0.0"))


def test_bad_ess_settings_are_named(quadruped):
    """Movable bodies, infinite friction, non-positive stiffness and a malformed torque fail with errors that say
    what is wrong."""
    with pytest.raises(ConfigError, match="movable bodies"):
        make_simulator("ess", RobotModel("arm"), with_objects=True)
    with pytest.raises(ConfigError, match="mu must be finite"):
        EssSim(quadruped, mu=math.inf)
    with pytest.raises(ConfigError, match="stiffness"):
        EssSim(quadruped, stiffness=0.0)
    with pytest.raises(ShapeError):
        EssSim(quadruped).step(np.zeros(3))


def test_state_crossings_round_trip_on_the_wire():
    """The state message's optional crossings (label, t, how) decode as they were encoded, in order; a malformed
    one is refused with bad_field."""
    from idcontrol import protocol as wire
    from idcontrol.errors import ProtocolError

    shape = wire.RobotShape("quadruped", 19, 18, tuple(f"j{i}" for i in range(12)), ("a", "b", "c", "d"), ())
    q = np.zeros(19)
    q[6] = 1.0
    events = [("a/touchdown", 0.0101, "projected"), ("b/liftoff", 0.0104, "located")]
    message = wire.decode_control(wire.encode_state(7, 0.011, q, np.zeros(18), crossings=events), shape)
    assert message.crossings == tuple(events)
    assert wire.decode_control(wire.encode_state(8, 0.012, q, np.zeros(18)), shape).crossings == ()
    raw = wire.unpack(wire.encode_state(9, 0.013, q, np.zeros(18), crossings=events), ("state",))
    raw["crossings"]["how"] = ["projected"]
    with pytest.raises(ProtocolError, match="as long as each other") as error:
        wire.decode_control(wire.pack(raw), shape)
    assert error.value.code == "bad_field"
    for label in ("nosuch/touchdown", "a/landed", "a", "touchdown"):  # a sphere the robot has, and its event
        bad = [(label, 0.0101, "projected")]
        with pytest.raises(ProtocolError, match="sphere/touchdown or sphere/liftoff") as error:
            wire.decode_control(wire.encode_state(10, 0.014, q, np.zeros(18), crossings=bad), shape)
        assert error.value.code == "bad_field"


TROT_SOON = {"stand_time": 0.05}  # the trot's feet leave the ground 50 ms in


def test_the_crossing_order_reaches_telemetry_over_the_protocol(quadruped):
    """Daemon and ess bridge as processes over real sockets, a trot starting at 50 ms: the contact events the
    bridge sends arrive in the telemetry in crossing order (per sphere, lift-offs and touchdowns alternate), and
    the first ones are the events of the same run in process (lock-step: the same to round-off)."""
    config = loop_config(
        "quadruped",
        formulation="two_stage_qp",
        reference="trot",
        reference_options=TROT_SOON,
        simulator="ess",
        penetration_tolerance=0.001,
    )
    over = run_over_protocol(config, 0.25)
    inside = run_in_process(config, 0.25, robot=quadruped)
    assert over.end_mode == "run" and inside.end_mode == "run"
    assert len(over.crossings) >= 6
    # the first gait events agree to round-off; later ones may not (a touchdown is sensitive: 1e-14 differences of
    # the two runs' states grew to 1.8 ms at the 14th crossing)
    first_over, first_inside = over.crossings[:6], inside.crossings[:6]
    assert [(label, how) for _, label, how in first_over] == [(label, how) for _, label, how in first_inside]
    assert [t for t, _, _ in first_over] == pytest.approx([t for t, _, _ in first_inside], abs=1e-9)
    times = [t for t, _, _ in over.crossings]
    assert times == sorted(times) and 0.05 < times[0] and times[-1] <= 0.25
    last: dict[str, str] = {}
    for _, label, how in over.crossings:
        sphere, event = label.split("/")
        assert sphere in quadruped.sphere_names and event in ("touchdown", "liftoff") and how
        assert last.get(sphere) != event  # alternate
        last[sphere] = event


def test_bench_times_the_ess_step_beside_mujoco():
    """`idcontrol bench --scenarios ess_sim` times a step of the ess simulator (wall and CPU) under the two-stage
    QP's trot, in run mode."""
    from idcontrol.tools.bench import ESS_BENCH_KINDS, bench_sim_step

    assert ESS_BENCH_KINDS == ("ess", "mujoco")
    t = bench_sim_step("ess", "trot", 60)
    assert t["ticks"] == 60 and t["mode"] == "run"
    assert 0 < t["p50_us"] <= t["p99_us"] <= t["max_us"] and t["cpu_p50_us"] > 0 and t["state_p50_us"] > 0
