"""The ESS simulator's compiled robot: kinematics and the articulated-body algorithm against Pinocchio, the
compiled contact field against the Pinocchio one, and the compiled engine's steps against the scipy engine's."""

from __future__ import annotations

import math

import numpy as np
import pinocchio as pin
import pytest

from idcontrol.robot.model import RobotModel
from idcontrol.sim.ess import dynamics
from idcontrol.sim.ess.backend import EssSim
from idcontrol.sim.ess.integrator import _advance_kernel
from idcontrol.sim.ess.robot import RobotContactSystem, robot_field, robot_guards, robot_rates
from tests.test_ess_sim import block, pitched  # noqa: F401 - the block fixture

ROBOTS = ("quadruped", "anymal_b", "talos", "arm")  # revolute X/Y/Z, sphere offsets, 38 DoF, fixed base + prismatic


def random_state(robot: RobotModel, rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray]:
    """A configuration (unit quaternion, joints in ±1 rad or m, base anywhere near the origin) and a velocity."""
    model = robot.model
    q = pin.neutral(model)
    first = 0
    if robot.floating_base:
        q[:3] = rng.normal(size=3)
        quat = rng.normal(size=4)
        q[3:7] = quat / np.linalg.norm(quat)
        first = 7
    q[first:] = rng.uniform(-1.0, 1.0, size=model.nq - first)
    return q, rng.normal(size=model.nv)


@pytest.mark.parametrize("name, armature", [(name, False) for name in ROBOTS] + [("quadruped", True), ("arm", True)])
def test_kinematics_and_aba_match_pinocchio(name, armature):
    """On random states with random torques and random external forces on every body, the compiled forward
    kinematics give Pinocchio's body placements (1e-13) and the compiled ABA gives ``pin.aba``'s q̈ (relative
    1e-11), free-flyer and fixed base alike, with and without armature (the free-flyer's two paths)."""
    robot = RobotModel(name)
    model = pin.Model(robot.model)
    if armature:
        model.armature = np.random.default_rng(11).uniform(0.01, 0.1, size=model.nv)
    data = model.createData()
    tree = dynamics.tree_of(model)
    assert tree is not None
    work = dynamics.work_for(tree)
    rng = np.random.default_rng(7)
    for _ in range(5):
        q, v = random_state(robot, rng)
        tau = 5.0 * rng.normal(size=model.nv)
        f_world = rng.normal(size=(model.njoints, 6))
        f_world[0] = 0.0
        dynamics.forward_kinematics(tree, work, q)
        pin.forwardKinematics(model, data, q)
        for j in range(model.njoints):
            assert work.R[j] == pytest.approx(data.oMi[j].rotation, abs=1e-13)
            assert work.p[j] == pytest.approx(data.oMi[j].translation, abs=1e-13)
        dynamics.velocities(tree, work, v)
        work.fext[:] = f_world
        ddq = np.empty(model.nv)
        dynamics.aba(tree, work, tau, ddq)
        f_local = [pin.Force.Zero()] + [
            data.oMi[j].actInv(pin.Force(f_world[j, :3], f_world[j, 3:])) for j in range(1, model.njoints)
        ]
        expected = pin.aba(model, data, q, v, tau, f_local)
        assert np.max(np.abs(ddq - expected)) <= 1e-11 * max(1.0, np.max(np.abs(expected)))


def test_unsupported_joints_leave_the_robot_to_the_python_engine():
    """A tree with a joint the compiled dynamics do not model (a 3-DoF translation) has no compiled tree."""
    model = pin.Model()
    model.addJoint(0, pin.JointModelTranslation(), pin.SE3.Identity(), "slide")
    assert dynamics.tree_of(model) is None


@pytest.mark.parametrize("name", ("quadruped", "anymal_b", "talos"))
def test_the_compiled_contact_field_is_the_pinocchio_one(name):
    """Feet pressed into the ground and moving, bristles deflected, in both modes: the compiled field, guards and
    rates equal RobotContactSystem's Pinocchio ones (relative 1e-12)."""
    robot = RobotModel(name)
    system = RobotContactSystem(robot, stiffness=1e6, damping=2000.0, mu=0.8, slip_velocity=1e-4, min_cone=5.0)
    assert system.record is not None
    rng = np.random.default_rng(3)
    q = robot.standing_configuration()
    x = np.concatenate([q, np.zeros(system.nv + 5 * system.k)])
    x[2] -= system.gaps(x).min() + 2e-4  # the lowest sphere 0.2 mm deep
    x[system.nq : system.nq + system.nv] = 0.3 * rng.normal(size=system.nv)
    x[system.nq + system.nv + 3 * system.k :] = 1e-5 * rng.normal(size=2 * system.k)
    system.tau[:] = rng.normal(size=system.nv)
    system.tau[:6] = 0.0
    for touching in (True, False):
        side = np.zeros(system.m, dtype=np.bool_)
        side[: system.k] = touching
        side[system.k :] = not touching
        out, h, r = np.empty(system.n), np.empty(system.m), np.empty(system.m)
        robot_field(system.record, x, side, out)
        robot_guards(system.record, x, h)
        robot_rates(system.record, x, side, r)
        expected = system.field(x, side)
        assert np.max(np.abs(out - expected)) <= 1e-12 * np.max(np.abs(expected))
        assert h == pytest.approx(system.guards(x), abs=1e-15)
        assert r == pytest.approx(system.rates(x, side), abs=1e-13)


def test_the_compiled_block_drop_repeats_the_python_engine(block):  # noqa: F811 - the fixture
    """The pitched block dropped corner by corner (the crossing-order test's drop), 60 steps: the compiled engine
    crosses the same guards in the same order as the scipy engine, at the same times (1e-12 s), and ends in the
    same state (1e-10 relative; 1e-8 absolute for the components symmetry keeps at zero: the roll rate is round-off in
    both engines, whose free-flyer dynamics are computed differently, and after 60 steps on the 1e6 N/m contacts the
    two round-offs differ by 1e-9 rad/s), with the same work to 2 % (the round-off moves one of RK45's step
    decisions: 1502 against 1489 field evaluations)."""
    sims = [EssSim(block, mu=1.0, timestep=1e-3, initial=pitched(0.05, 0.002), engine=e) for e in ("scipy", "auto")]
    assert [s.integrator.engine for s in sims] == ["scipy", "compiled"]
    events = [[], []]
    for _ in range(60):
        for sim, out in zip(sims, events, strict=True):
            sim.step(np.zeros(0))
            out.extend(sim.last_crossings)
    assert len(events[0]) >= 4
    assert [(c.sphere, c.event, c.how) for c in events[1]] == [(c.sphere, c.event, c.how) for c in events[0]]
    assert [c.t for c in events[1]] == pytest.approx([c.t for c in events[0]], abs=1e-12)
    assert sims[1]._x == pytest.approx(sims[0]._x, rel=1e-10, abs=1e-8)
    assert sims[1].stats.rhs_evaluations == pytest.approx(sims[0].stats.rhs_evaluations, rel=0.02)


def test_the_quadruped_steps_alike_on_both_engines_and_loads_nothing_new(quadruped):
    """The quadruped dropped 2 mm onto its feet under constant joint torques, 40 steps: both engines give the same
    states (1e-9) and crossings; the compiled simulator, built, compiles nothing in its steps."""
    rng = np.random.default_rng(5)
    q = quadruped.standing_configuration()
    q[2] += 0.002
    tau = 0.5 * rng.normal(size=quadruped.nu)
    sims = {e: EssSim(quadruped, initial=q, engine=e) for e in ("scipy", "auto")}
    signatures = len(_advance_kernel.signatures)
    events = {e: [] for e in sims}
    for _ in range(40):
        for e, sim in sims.items():
            sim.step(tau)
            events[e].extend(sim.last_crossings)
    assert len(_advance_kernel.signatures) == signatures
    assert len(events["auto"]) >= 4 and all(c.event == "touchdown" for c in events["auto"][:4])
    assert [(c.label, c.how) for c in events["auto"]] == [(c.label, c.how) for c in events["scipy"]]
    assert [c.t for c in events["auto"]] == pytest.approx([c.t for c in events["scipy"]], abs=1e-9)
    a, b = sims["auto"].state(), sims["scipy"].state()
    assert a.q == pytest.approx(b.q, abs=1e-9) and a.v == pytest.approx(b.v, abs=1e-7)
    assert a.contact_forces == pytest.approx(b.contact_forces, rel=1e-6, abs=1e-6)
    assert math.isclose(a.contact_forces[:, 2].sum(), b.contact_forces[:, 2].sum(), rel_tol=1e-6)
