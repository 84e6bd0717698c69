"""Compiled limb kinematics (idcontrol.reference.chain) against Pinocchio, and the limb IK the trot runs each tick."""

from __future__ import annotations

import numpy as np
import pinocchio as pin
import pytest

from idcontrol.reference import make_reference
from idcontrol.reference.chain import build_chains, chain_drift, chain_point, chain_pose, pack, solve_limbs
from idcontrol.robot.limbs import joint_chain
from idcontrol.robot.model import RobotModel

ROBOTS = ["quadruped", "hyq", "talos", "anymal_b", "arm", "kinova"]


def limbs_of(robot: RobotModel) -> list[tuple[list[str], str]]:
    if robot.limbs:
        return [(list(limb.joints), limb.end) for limb in robot.limbs]
    return [(list(robot.actuated_joints), str(robot.model.frames[len(robot.model.frames) - 1].name))]


@pytest.mark.parametrize("name", ROBOTS)
def test_chain_kinematics_equal_pinocchios(name: str):
    """End point and rotation, Jacobian (linear and angular) and J̇q̇ of every limb equal Pinocchio's frame placement,
    LOCAL_WORLD_ALIGNED frame Jacobian and classical acceleration (1e-12) on 20 random configurations and velocities
    (base at the origin, at rest)."""
    worst = _worst_chain_errors(RobotModel(name))
    assert np.all(worst < 1e-12), worst


def test_unaligned_joint_axes_give_pinocchios_kinematics_and_the_same_trot(tmp_path):
    """Joint axes that are not +x, +y or +z (Pinocchio's RevoluteUnaligned joints, as in ANYmal C's published URDF;
    here the quadruped's hip abduction axes negated) give the same limb kinematics as Pinocchio (1e-12), and the
    trot reference, which solves the legs with them, gives the shipped quadruped's targets with those joints'
    signs flipped (1e-9) over a second of walking."""
    shipped = RobotModel("quadruped")
    urdf = shipped.config.urdf_path.read_text()
    assert urdf.count('<axis xyz="1 0 0"/>') == 4  # the four HAA joints
    (tmp_path / "flipped.urdf").write_text(urdf.replace('<axis xyz="1 0 0"/>', '<axis xyz="-1 0 0"/>'))
    text = shipped.config.path.read_text()
    (tmp_path / "robot.toml").write_text(text.replace('urdf = "quadruped.urdf"', 'urdf = "flipped.urdf"'))
    flipped = RobotModel(str(tmp_path / "robot.toml"))
    kinds = {flipped.model.joints[j].shortname() for j in range(2, flipped.model.njoints)}
    assert "JointModelRevoluteUnaligned" in kinds
    worst = _worst_chain_errors(flipped)
    assert np.all(worst < 1e-12), worst
    sign = np.array([-1.0 if name.endswith("HAA") else 1.0 for name in flipped.actuated_joints])
    references = [make_reference("trot", robot) for robot in (shipped, flipped)]
    q, v = shipped.standing_configuration(), np.zeros(shipped.nv)
    for t in np.arange(0.0, 1.0, 0.01):
        mine, theirs = (r.sample(float(t), q, v) for r in references)
        for a, b in zip(mine, theirs, strict=True):
            assert np.all(np.isfinite(b)) and np.allclose(b, sign * a, rtol=0.0, atol=1e-9)


def _worst_chain_errors(robot: RobotModel) -> np.ndarray:
    """The largest errors (position/rotation, Jacobians, drift) of every limb's chain against Pinocchio."""
    rng = np.random.default_rng(7)
    m, d = robot.model, robot.model.createData()
    limbs = limbs_of(robot)
    q0 = robot.standing_configuration()
    chains = build_chains(m, limbs, robot.actuated_joints, q0)
    worst = np.zeros(3)
    for _ in range(20):
        q, v = q0.copy(), np.zeros(m.nv)
        for j in range(1, m.njoints):
            if m.joints[j].nq == 1 and m.joints[j].shortname() != "JointModelFreeFlyer":
                q[m.joints[j].idx_q] += rng.uniform(-0.5, 0.5)
                v[m.joints[j].idx_v] = rng.uniform(-2.0, 2.0)
        if robot.floating_base:
            q[:7] = [0, 0, 0, 0, 0, 0, 1]
        pin.forwardKinematics(m, d, q, v, np.zeros(m.nv))
        pin.updateFramePlacements(m, d)
        pin.computeJointJacobians(m, d, q)
        for i, (_, end) in enumerate(limbs):
            fid = m.getFrameId(end)
            ids = joint_chain(m, m.frames[fid].parentJoint)
            qc = np.array([q[m.joints[j].idx_q] for j in ids])
            vc = np.array([v[m.joints[j].idx_v] for j in ids])
            point, jac = chain_point(chains, i, qc)
            J = pin.getFrameJacobian(m, d, fid, pin.LOCAL_WORLD_ALIGNED)[:3, [m.joints[j].idx_v for j in ids]]
            J6 = pin.getFrameJacobian(m, d, fid, pin.LOCAL_WORLD_ALIGNED)[:, [m.joints[j].idx_v for j in ids]]
            acc = pin.getFrameClassicalAcceleration(m, d, fid, pin.LOCAL_WORLD_ALIGNED)
            _, rot, jac6 = chain_pose(chains, i, qc)
            worst = np.maximum(
                worst,
                [
                    max(np.max(np.abs(point - d.oMf[fid].translation)), np.max(np.abs(rot - d.oMf[fid].rotation))),
                    max(np.max(np.abs(jac - J)), np.max(np.abs(jac6 - J6))),
                    np.max(np.abs(chain_drift(chains, i, qc, vc) - acc.vector)),
                ],
            )
    return worst


@pytest.mark.parametrize("name", ["quadruped", "hyq", "arm"])
def test_limb_ik_reaches_targets_with_consistent_velocities_and_accelerations(name: str):
    """From the standing posture, Newton steps put each limb's end on a reachable target (1e-10 m, the targets being
    forward kinematics of perturbed joints); the returned velocities give J q̇ = ṗ and accelerations
    J q̈ + J̇ q̇ = p̈ (1e-9) for velocities within the limits."""
    rng = np.random.default_rng(3)
    robot = RobotModel(name)
    m = robot.model
    limbs = limbs_of(robot)
    if len({j for joints, _ in limbs for j in joints}) < sum(len(joints) for joints, _ in limbs):
        limbs = limbs[:1]  # limbs sharing joints (the arm's fingers) are solved one at a time
    q0 = robot.standing_configuration()
    if robot.floating_base:
        q0[:7] = [0, 0, 0, 0, 0, 0, 1]
    chains = build_chains(m, limbs, robot.actuated_joints, q0)
    real, ints = pack(chains)
    for _ in range(10):
        targets = np.zeros((len(limbs), 9))
        for i in range(len(limbs)):
            n = int(chains.count[i])
            q = chains.held[i, :n] + np.where(chains.slot[i, :n] >= 0, rng.uniform(-0.2, 0.2, n), 0.0)
            q = np.clip(q, chains.lower[i, :n], chains.upper[i, :n])  # reachable
            targets[i, :3], _ = chain_point(chains, i, q)
            targets[i, 3:6] = rng.uniform(-0.05, 0.05, 3)
            targets[i, 6:9] = rng.uniform(-1.0, 1.0, 3)
        q_limbs = chains.held.copy()
        out = np.zeros((3, robot.nu))
        residual = solve_limbs(real, ints, q_limbs, targets, out, 1e6, 1e-10, 50)
        assert residual < 1e-10
        for i in range(len(limbs)):
            n = int(chains.count[i])
            qd = np.zeros(n)
            own = chains.slot[i, :n] >= 0
            qd[own] = out[1, chains.slot[i, :n][own]]
            qdd = np.zeros(n)
            qdd[own] = out[2, chains.slot[i, :n][own]]
            point, jac = chain_point(chains, i, q_limbs[i])
            np.testing.assert_allclose(point, targets[i, :3], atol=1e-10)
            if np.allclose(np.abs(qd), np.minimum(np.abs(qd), chains.speed[i, :n])):
                np.testing.assert_allclose(jac @ qd, targets[i, 3:6], atol=1e-9)
                drift = chain_drift(chains, i, q_limbs[i], np.pad(qd, (0, chains.kind.shape[1] - n)))[:3]
                np.testing.assert_allclose(jac @ qdd + drift, targets[i, 6:9], atol=1e-8)
