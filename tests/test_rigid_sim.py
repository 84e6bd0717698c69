"""The rigid-contact simulator: resting contact, the LCP conditions, stick/slip, ballistics, impacts, and the
controller's force predictions against it (the paper's Table 5 comparison on the model-matched simulator)."""

from __future__ import annotations

import math
from dataclasses import replace

import numpy as np
import pinocchio as pin
import pytest

from idcontrol.contacts.geometry import HalfSpace, HeightMap
from idcontrol.contacts.world import Environment, MovableBody, ObjectState, Surface
from idcontrol.control.controller import InverseDynamicsController
from idcontrol.control.core import ControlCore
from idcontrol.control.factory import build_core, world_for
from idcontrol.errors import ConfigError
from idcontrol.reference import make_reference
from idcontrol.robot.model import RobotModel
from idcontrol.settings import load_launch
from idcontrol.sim.rigid import RigidSim
from idcontrol.solvers.lcp import lcp_residuals
from tests.test_launch import LAUNCH, launch_file, run_launch

G = 9.81
BLOCK_MASS = 2.0  # kg
BLOCK_HALF = (0.1, 0.06, 0.03)  # m, half edges
SPHERE_R = 0.005  # m

BLOCK_URDF = """<?xml version="1.0"?>
<robot name="block">
  <link name="block">
    <inertial>
      <origin xyz="0 0 0"/>
      <mass value="{m}"/>
      <inertia ixx="{ixx}" iyy="{iyy}" izz="{izz}" ixy="0" ixz="0" iyz="0"/>
    </inertial>
  </link>
</robot>
"""


@pytest.fixture(scope="module")
def block(tmp_path_factory) -> RobotModel:
    """An unactuated floating box (2 kg) touching the world with four spheres at its bottom corners."""
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


def slope(angle: float, mu: float) -> Environment:
    """A plane through the origin tilted by ``angle`` (rad) about the world y axis: downhill is +x."""
    normal = np.array([math.sin(angle), 0.0, math.cos(angle)])
    return Environment([Surface(HalfSpace(normal=normal, offset=0.0, name="slope"), mu)])


def on_slope(angle: float) -> np.ndarray:
    """(7,) block configuration resting on :func:`slope`: rotated by ``angle`` about y, bottom on the plane."""
    q = np.zeros(7)
    q[:3] = BLOCK_HALF[2] * np.array([math.sin(angle), 0.0, math.cos(angle)])
    q[3:7] = [0.0, math.sin(angle / 2), 0.0, math.cos(angle / 2)]
    return q


def energy(robot: RobotModel, q: np.ndarray, v: np.ndarray) -> float:
    """Kinetic plus gravitational potential energy, J (Pinocchio's, independent of the simulator)."""
    m, d = robot.model, robot.data
    return float(pin.computeKineticEnergy(m, d, q, v) + pin.computePotentialEnergy(m, d, q))


def check_step(sim: RigidSim, v_next: np.ndarray) -> None:
    """The step's LCP solution is non-negative, complementary, inside the pyramid, and describes v⁺."""
    step = sim.last_step
    Q, q, z, w = step.Q, step.q, step.z, step.w
    z_scale = max(1.0, float(z.max()))
    w_scale = max(1.0, float(np.abs(q).max()), float(np.abs(Q).max()) * z_scale)  # the size of Q z + q's terms
    res = lcp_residuals(Q, q, z, w)
    assert res.z_negativity == 0.0 and max(res.w_negativity, res.equation) <= 1e-9 * w_scale, res
    assert res.complementarity <= 1e-9 * w_scale * z_scale, res
    contacts = step.contacts
    n = contacts.n
    mu = contacts.mu
    finite = np.isfinite(mu)
    tangential = np.abs(step.f_s[finite]) + np.abs(step.f_t[finite])
    assert np.all(tangential <= mu[finite] * step.f_normal[finite] + 1e-9 * w_scale)
    # the robot's data still holds the start of the step: its rows times v⁺ are the LCP's velocities
    N, S, T = sim.detector.rows(contacts, step.objects)
    dt = sim.dt
    assert np.allclose(w[:n] * dt, N @ v_next + contacts.phi / dt, atol=1e-9)
    assert np.all(N @ v_next + contacts.phi / dt >= -1e-9)  # no penetration at the end of the step
    slide = S @ v_next
    if step.finite.size:  # w_F = F v⁺ + E λ: a sliding contact's friction opposes its slip
        lam = z[5 * n :]
        sliding = step.finite[lam > 1e-9]
        assert np.all(step.f_s[sliding] * slide[sliding] <= 1e-9)


def test_block_rests_on_flat_ground(block):
    """An unactuated block resting on flat ground: Σ normal forces = m g to 1e-6 every step, and it does not move."""
    sim = RigidSim(block, mu=0.5)
    q0 = sim.state().q
    for _ in range(500):
        sim.step(np.zeros(0))
        s = sim.state()
        assert abs(s.contact_forces[:, 2].sum() - BLOCK_MASS * G) <= 1e-6 * BLOCK_MASS * G
        assert np.allclose(s.contact_forces[:, :2], 0.0, atol=1e-9)
        check_step(sim, s.v)
    assert np.abs(s.q - q0).max() < 1e-12 and np.abs(s.v).max() < 1e-12


@pytest.mark.parametrize("ratio", [0.8, 1.2])
def test_block_on_slope_sticks_below_and_slides_above_mu(block, ratio):
    """On a slope with tan θ = ratio · μ the block sticks (ratio < 1) or slides with a = g (sin θ − μ cos θ)."""
    mu = 0.4
    angle = math.atan(ratio * mu)
    sim = RigidSim(block, environment=slope(angle, mu), initial=on_slope(angle))
    seconds = 0.5
    for _ in range(int(seconds / sim.dt)):
        sim.step(np.zeros(0))
        check_step(sim, sim.state().v)
    s = sim.state()
    downhill = np.array([math.cos(angle), 0.0, -math.sin(angle)])  # along the plane, in world
    moved = float((s.q[:3] - on_slope(angle)[:3]) @ downhill)
    normal = np.array([math.sin(angle), 0.0, math.cos(angle)])
    assert abs(float((s.q[:3] - on_slope(angle)[:3]) @ normal)) < 1e-9  # stays on the plane
    if ratio < 1:
        assert abs(moved) < 1e-9
    else:
        a = G * (math.sin(angle) - mu * math.cos(angle))
        steps = round(seconds / sim.dt)  # semi-implicit Euler: x_n = a Δt² n (n + 1) / 2
        assert moved == pytest.approx(a * sim.dt**2 * steps * (steps + 1) / 2, rel=1e-6)
        speed = float(sim.state().v[:3] @ (pin.Quaternion(s.q[6], *s.q[3:6]).matrix().T @ downhill))
        assert speed == pytest.approx(a * seconds, rel=1e-6)


def test_quadruped_free_fall_is_ballistic(quadruped):
    """Thrown up without torques, clear of the ground, the quadruped's base follows the parabola, its joints still."""
    q0 = quadruped.standing_configuration()
    q0[2] += 0.5
    v0 = np.zeros(quadruped.nv)
    v0[:3] = [0.3, -0.2, 1.0]  # m/s (base frame = world: level base)
    sim = RigidSim(quadruped, mu=1.0, initial=q0)
    sim.reset(q0, v0)
    steps = 300
    for _ in range(steps):
        sim.step(np.zeros(quadruped.nu))
        assert sim.last_step is None  # no candidate contact
    s = sim.state()
    t, dt = steps * sim.dt, sim.dt
    assert s.v[:3] == pytest.approx(v0[:3] + np.array([0.0, 0.0, -G * t]), abs=1e-9)
    assert s.q[:2] == pytest.approx(q0[:2] + v0[:2] * t, abs=1e-9)
    exact = q0[2] + v0[2] * t - 0.5 * G * t * t
    assert s.q[2] == pytest.approx(exact - 0.5 * G * t * dt, abs=1e-9)  # semi-implicit Euler's O(Δt) offset
    assert abs(s.q[2] - exact) <= 0.5 * G * t * dt + 1e-9
    assert np.abs(s.q[7:] - q0[7:]).max() < 1e-9 and np.abs(s.v[3:]).max() < 1e-9


def test_impact_does_not_add_energy(block):
    """A tilted block thrown down onto the ground (μ = 0.6): energy never exceeds its initial value, and the impact
    dissipates most of the kinetic energy (inelastic: no bounce).

    Per step the energy may still rise by O(Δt²): pin.integrate moves a spinning free flyer along a screw, not a
    straight line, and the φ/Δt term pushes a linearization's µm penetration back out (measured: +1.9e-4 J once,
    6e-5 of the initial energy, with the block spinning after its first corner hit the ground).
    """
    q0 = np.zeros(7)
    q0[2] = 0.1
    axis = np.array([1.0, 0.5, 0.0]) / math.hypot(1.0, 0.5)
    q0[3:7] = [*(math.sin(0.15) * axis), math.cos(0.15)]
    v0 = np.zeros(6)
    v0[:3] = pin.Quaternion(q0[6], *q0[3:6]).matrix().T @ np.array([0.4, 0.0, -1.0])  # base frame
    sim = RigidSim(block, mu=0.6, initial=q0)
    sim.reset(q0, v0)
    e0 = previous = energy(block, q0, v0)
    touched = False
    for _ in range(400):
        sim.step(np.zeros(0))
        s = sim.state()
        e = energy(block, s.q, s.v)
        assert e <= e0 and e - previous <= 1e-4 * e0
        previous = e
        if sim.last_step is not None:
            check_step(sim, s.v)
            touched |= bool(sim.last_step.f_normal.sum() > 0)
    assert touched and np.abs(s.v).max() < 1e-9  # at rest on the ground
    kinetic_before = 0.5 * BLOCK_MASS * (0.4**2 + 1.0**2)
    assert e0 - previous > 0.5 * kinetic_before


def run_loop(core: ControlCore, sim: RigidSim, seconds: float) -> tuple[np.ndarray, np.ndarray]:
    """Drive ``sim`` with ``core`` at 1 kHz (checking every step's LCP) until ``seconds`` or a stop.

    Returns the predicted and the simulated Σ f_N per tick, N.
    """
    core.start(0.0)
    predicted, simulated = [], []
    for _i in range(int(round(seconds / sim.dt))):
        s = sim.state()
        out = core.tick(s.robot_state(), now=s.t)
        if out.mode != "run":
            break
        sim.step(out.tau)
        predicted.append(float(out.result.f_normal.sum()))
        if sim.last_step is None:  # no candidate contact
            simulated.append(0.0)
        else:
            simulated.append(float(sim.last_step.f_normal.sum()))
            check_step(sim, sim.state().v)
    return np.array(predicted), np.array(simulated)


def closed_loop(robot, formulation, sim_mu, controller_mu, seconds, environment=None, gains=None):
    """The hold reference (the robot file's gains, or ``gains`` = (kp, kd) in 1/s², 1/s) under ``formulation`` in
    a RigidSim: (core, sim, sums)."""
    sim = RigidSim(robot, environment=environment or Environment.flat_ground(sim_mu))
    controller = InverseDynamicsController(
        robot, environment or Environment.flat_ground(controller_mu), formulation, dt=sim.dt
    )
    core = ControlCore(controller, make_reference("hold", robot))
    if gains is not None:
        kp, kd = gains
        core.gains = replace(core.gains, kp=np.full(robot.nu, kp), kd=np.full(robot.nu, kd))
    return core, sim, *run_loop(core, sim, seconds)


def relative_error(predicted: np.ndarray, simulated: np.ndarray) -> float:
    """The paper's relative force-prediction error on summed normal forces: Σ|predicted − simulated| / Σ simulated."""
    return float(np.abs(predicted - simulated).sum() / simulated.sum())


# Measured over 1 s (relative error = Σ|predicted − simulated| / Σ simulated): two_stage_qp 1e-15, coulomb_lcp
# 2e-11, noslip_lcp (against a no-slip simulator, as its model assumes) 0. The paper reports 1.16-1.94 % for the
# LCPs against Moby, whose pyramid axes differed from the controller's; here the axes are the same.
@pytest.mark.parametrize(
    ("formulation", "sim_mu", "controller_mu"),
    [("two_stage_qp", 1.0, 1.0), ("coulomb_lcp", 1.0, 1.0), ("noslip_lcp", math.inf, math.inf)],
)
def test_predicted_normal_force_matches_the_rigid_simulator(quadruped, formulation, sim_mu, controller_mu):
    """Standing 1 s in the model-matched simulator, the predicted Σ f_N is the simulated one within 2 % (mean)."""
    core, sim, predicted, simulated = closed_loop(quadruped, formulation, sim_mu, controller_mu, 1.0)
    assert len(predicted) == 1000 and not core.metrics.fell, core.reason
    assert relative_error(predicted, simulated) < 0.02
    weight = quadruped.total_mass() * G
    assert abs(simulated.mean() - weight) < 1e-3 * weight
    standing = quadruped.standing_configuration()
    assert np.abs(sim.state().q[:3] - standing[:3]).max() < 1e-3  # m


def test_quadruped_standing_still_carries_exactly_its_weight(quadruped):
    """Under the two-stage QP the standing quadruped does not drift and the ground carries m g to 1e-6 each tick."""
    _, sim, _, simulated = closed_loop(quadruped, "two_stage_qp", 1.0, 1.0, 0.3)
    weight = quadruped.total_mass() * G
    assert np.abs(simulated - weight).max() < 1e-6 * weight
    assert np.abs(sim.state().q - quadruped.standing_configuration()).max() < 1e-9


@pytest.mark.parametrize(
    "gains",
    [
        (150.0, 8.0),
        pytest.param(
            None,
            marks=pytest.mark.xfail(
                strict=True,
                reason=(
                    "with the shipped gains (kp 1000, kd 60) the hold settles by 0.2 s, then chatters on the bumps' "
                    "slopes from 0.5 to 2.0 s (summed normal force 0.77-1.27 m g in 0.1 s windows, spread 1-2.9 m g) "
                    "before it settles again"
                ),
            ),
        ),
    ],
)
def test_quadruped_stands_on_a_height_map(quadruped, gains):
    """Dropped onto 3 cm bumps (μ = 0.8), the quadruped under the two-stage QP settles within 1 s without falling
    or sinking."""
    terrain = HeightMap.bumps(2.0, 0.02, 0.03, 30, seed=5)
    environment = Environment([Surface(terrain, 0.8)])
    core, sim, predicted, simulated = closed_loop(quadruped, "two_stage_qp", 0.8, 0.8, 1.0, environment, gains)
    assert len(predicted) == 1000 and not core.metrics.fell, core.reason
    assert sim.last_step is not None and sim.last_step.contacts.n >= 3
    assert sim.last_step.contacts.phi.min() > -1e-4  # m
    weight = quadruped.total_mass() * G
    assert simulated[-100:].mean() == pytest.approx(weight, rel=0.02)


def test_trotting_coulomb_lcp_predicts_the_rigid_simulators_normal_force(quadruped):
    """The trot of launch/quadruped_trot.toml (coulomb_lcp, its gains and contact settings) in the rigid simulator
    (μ = 1): 2 s without a fall, moving forward, the predicted Σ f_N within 2 % of the simulated one (paper 1.55 %;
    measured 0.16 %, 0.08 N mean absolute)."""
    config = load_launch(LAUNCH / "quadruped_trot.toml").with_overrides(formulation="coulomb_lcp")
    core = build_core(config, quadruped)
    sim = RigidSim(quadruped, environment=Environment.ground(config.bridge.mu))
    predicted, simulated = run_loop(core, sim, 2.0)
    assert len(predicted) == 2000 and not core.metrics.fell, core.reason
    assert sim.state().q[0] > 0.15  # m
    assert relative_error(predicted, simulated) < 0.02


def test_arm_holds_the_box_in_a_no_slip_world(arm):
    """The arm's four fingertips hold the 0.75 kg box through 1 s of its 3 Hz sinusoid (world μ = ∞, controller
    μ = 1, as launch/arm_grasp.toml); the predicted Σ f_N is the simulated one within 2 % (measured 0.2 % in 3 s)."""
    sim = RigidSim(arm, with_objects=True, object_mu=math.inf)
    objects = tuple(MovableBody(replace(o, mu=1.0)) for o in arm.config.objects)
    controller = InverseDynamicsController(arm, Environment.flat_ground(1.0, objects), "two_stage_qp", dt=sim.dt)
    core = ControlCore(controller, make_reference("arm_sinusoid", arm))
    core.start(0.0)
    predicted, simulated = [], []
    for _i in range(1000):
        s = sim.state()
        out = core.tick(s.robot_state(), now=s.t)
        assert out.mode == "run", core.reason
        sim.step(out.tau)
        assert sim.last_step is not None and sim.last_step.contacts.n == 4  # every fingertip on the box
        check_step(
            sim,
            np.concatenate(
                [sim.state().v, *(np.r_[o.linear_velocity, o.angular_velocity] for o in sim.state().objects.values())]
            ),
        )
        predicted.append(float(out.result.f_normal.sum()))
        simulated.append(float(sim.last_step.f_normal.sum()))
    assert core.metrics.summary()["object_dropped_at_s"] is None
    box = sim.state().objects["box"]
    assert np.linalg.norm(box.position - arm.config.objects[0].initial_position) < 0.03  # m
    assert relative_error(np.array(predicted), np.array(simulated)) < 0.02


def test_a_box_thrown_out_of_the_fingers_is_reported_dropped_once(arm):
    """The box leaves the fingertips at 3 m/s upward (world μ = 1): the run keeps going, the summary and the last
    error say when it was last within reach (ticks 10-20 here; the rule: drop_ticks ticks with no sphere near it),
    and the time stays the first one recorded."""
    sim = RigidSim(arm, with_objects=True, object_mu=1.0)
    box = arm.config.objects[0]
    at_rest = MovableBody(box).initial_state()
    sim.reset(objects={box.name: ObjectState(at_rest.position, at_rest.orientation_xyzw, np.array([0.0, 0.0, 3.0]))})
    controller = InverseDynamicsController(
        arm, Environment.flat_ground(1.0, (MovableBody(replace(box, mu=1.0)),)), "two_stage_qp", dt=sim.dt
    )
    core = ControlCore(controller, make_reference("arm_sinusoid", arm))
    core.start(0.0)
    for _i in range(400):
        s = sim.state()
        out = core.tick(s.robot_state(), now=s.t)
        assert out.mode == "run", core.reason
        sim.step(out.tau)
    dropped = core.metrics.summary()["object_dropped_at_s"]
    assert dropped is not None and 0.005 <= dropped <= 0.03, dropped
    assert core.last_error == f"object dropped at t = {dropped:.3f} s"
    assert np.linalg.norm(sim.state().objects[box.name].position - at_rest.position) > 0.1  # m: it is gone


def test_rigid_launch_file_loads_and_terrain_settings_are_checked(tmp_path):
    """launch/quadruped_stand_rigid.toml loads as a rigid bridge; a bad terrain, seed or height is refused at load."""
    config = load_launch(LAUNCH / "quadruped_stand_rigid.toml")
    assert config.bridge.kind == "rigid" and config.bridge.terrain == "flat" and config.duration > 0
    text = (LAUNCH / "quadruped_stand_rigid.toml").read_text()
    for old, new, words in [
        ('terrain = "flat"', 'terrain = "moon"', "moon"),
        ('kind = "rigid"\n', 'kind = "mujoco"\n', "needs bridge.kind = 'rigid'"),
        ("terrain_seed = 0", "terrain_seed = -3", "terrain_seed"),
        ("terrain_height = 0.03", "terrain_height = 0.5", "terrain_height"),
        ('kind = "rigid"', 'kind = "bullet"', "bullet"),
    ]:
        changed = text.replace('terrain = "flat"', 'terrain = "height_map"') if "kind" in old else text
        assert old in changed
        path = tmp_path / "bad.toml"
        path.write_text(changed.replace(old, new, 1))
        with pytest.raises(ConfigError, match=words):
            load_launch(path)


def test_the_daemon_and_the_rigid_bridge_see_the_same_height_map(tmp_path):
    """With bridge.terrain = "height_map" the controller's world is the bridge's terrain (same heights, own μ)."""
    path, _ = launch_file(
        tmp_path,
        "quadruped_stand_rigid",
        **{'terrain = "flat"': 'terrain = "height_map"', "terrain_seed = 0": "terrain_seed = 7"},
    )
    config = load_launch(path)
    world = world_for(RobotModel("quadruped"), config, config.controller.mu)
    expected = Environment.rough_ground(config.bridge.mu, 0.03, 7)
    (surface,) = world.surfaces
    assert isinstance(surface.shape, HeightMap) and surface.mu == config.controller.mu
    assert np.array_equal(surface.shape.heights, expected.surfaces[0].shape.heights)
    assert 0.0 < surface.shape.heights.max() <= 0.03


def test_the_controller_has_ground_where_the_simulators_have_it_under_a_floating_base_only():
    """A fixed base's URDF z = 0 is its mount, not a floor: neither its controller's world nor the rigid, MuJoCo
    and launch-built simulators have ground there (a ground in the controller alone would predict contacts for an
    arm reaching below its mount, which no simulator has). A floating base has it in all of them."""
    from idcontrol.sim.launch import simulator_for
    from idcontrol.sim.mujoco import MujocoSim

    config = load_launch(LAUNCH / "joint_sinusoid.toml")
    for name, grounded in (("arm", False), ("ur5", False), ("quadruped", True)):
        robot = RobotModel(name)
        world = world_for(robot, config.with_overrides(robot=name), 1.0)
        assert len(world.surfaces) == grounded, name
        assert len(RigidSim(robot).environment.surfaces) == grounded, name
        rigid = simulator_for(replace(config, bridge=replace(config.bridge, kind="rigid")), robot)
        assert len(rigid.environment.surfaces) == grounded, name
        assert MujocoSim(robot).has_floor == grounded, name


def test_launch_runs_the_quadruped_on_the_rigid_height_map(tmp_path):
    """`idcontrol launch` runs daemon + rigid bridge lock-step over loopback on the height map: no fall, 0.5 s."""
    path, _ = launch_file(tmp_path, "quadruped_stand_rigid", **{'terrain = "flat"': 'terrain = "height_map"'})
    summary = run_launch(path, tmp_path, "--duration", "0.5")
    assert summary["fell"] is False and summary["ticks"] >= 500 and summary["solve_failures"] == 0
    assert summary["bridge"]["errors"] == 0 and summary["bridge"]["sim_time"] >= 0.5
