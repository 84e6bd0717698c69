"""The compiled per-tick kernels against the library calls they replace, and the safety of kept results."""

from __future__ import annotations

import numpy as np
import pinocchio as pin
import pytest

from idcontrol.control.controller import InverseDynamicsController
from idcontrol.control.state import RobotState
from idcontrol.formulations import REGISTRY
from idcontrol.formulations.reduced import ReducedDynamics
from idcontrol.reference.base import Tracking
from idcontrol.robot.model import RobotModel


@pytest.mark.parametrize("name", ["quadruped", "arm", "talos"])
def test_frame_jacobians_and_placements_match_pinocchio(name: str) -> None:
    """RobotModel.update's frame Jacobians equal getFrameJacobian(LOCAL_WORLD_ALIGNED), its origins oMf (1e-12)."""
    robot = RobotModel(name)
    data = robot.model.createData()
    rng = np.random.default_rng(0)
    for _ in range(5):
        q = pin.randomConfiguration(robot.model, -np.ones(robot.nq), np.ones(robot.nq))
        v = rng.standard_normal(robot.nv)
        robot.update(q, v)
        pin.computeJointJacobians(robot.model, data, q)
        pin.updateFramePlacements(robot.model, data)
        for slot, fid in enumerate(robot._frame_ids):
            expected = pin.getFrameJacobian(robot.model, data, fid, pin.LOCAL_WORLD_ALIGNED)
            np.testing.assert_allclose(robot.frame_jacobians[slot], expected, rtol=0, atol=1e-12)
            np.testing.assert_allclose(robot.frame_origins_in_world[slot], data.oMf[fid].translation, atol=1e-12)
        np.testing.assert_allclose(robot.M, pin.crba(robot.model, data, q), atol=1e-12)
        np.testing.assert_allclose(robot.bias, pin.nonLinearEffects(robot.model, data, q, v), atol=1e-12)


def test_reduced_dynamics_matches_its_definition() -> None:
    """L⁻¹, x₀ and R̃ of ReducedDynamics equal their numpy definitions on a standing quadruped (1e-10 relative)."""
    robot = RobotModel("quadruped")
    controller = InverseDynamicsController(robot)
    state = RobotState(q=robot.standing_configuration(), v=0.1 * np.random.default_rng(1).standard_normal(robot.nv))
    p, _ = controller.build_problem(state, np.ones(robot.nu))
    red = ReducedDynamics(p)
    a, u = red.a, red.u
    L_inv = np.linalg.inv(np.linalg.cholesky(p.M[np.ix_(u, u)]))
    kappa = -p.dt * p.f_ext - p.M @ p.v
    x0 = -L_inv @ (p.M[np.ix_(u, a)] @ p.qd_des + kappa[u])
    np.testing.assert_allclose(red.L_inv, L_inv, rtol=1e-10, atol=1e-12)
    np.testing.assert_allclose(red.kappa, kappa, rtol=1e-12, atol=1e-12)
    np.testing.assert_allclose(red.x0, x0, rtol=1e-10, atol=1e-10 * np.abs(x0).max())
    np.testing.assert_allclose(red.N_w, L_inv @ p.N[:, u].T, rtol=1e-10, atol=1e-12)
    np.testing.assert_allclose(red.T_w, L_inv @ p.T[:, u].T, rtol=1e-10, atol=1e-12)


@pytest.mark.parametrize("name", [name for name, cls in REGISTRY.items() if not cls.uses_sensed_forces])
def test_a_kept_result_is_not_changed_by_later_ticks(name: str) -> None:
    """Results (and the problem they keep) stay as they were when the next ticks reuse the controller's buffers."""
    robot = RobotModel("quadruped")
    controller = InverseDynamicsController(robot, formulation=name)
    zeros = np.zeros(robot.nu)
    q = robot.standing_configuration()
    first = controller.solve(RobotState(q=q, v=np.zeros(robot.nv)), zeros, Tracking(zeros, zeros))
    kept = {k: np.copy(getattr(first, k)) for k in ("tau", "v_next", "f_normal", "f_s", "f_t")}
    fields = ("M", "N", "S", "T", "phi", "v") if first.problem is not None else ()
    kept_problem = {k: np.copy(getattr(first.problem, k)) for k in fields}
    for i in range(3):
        q2 = q.copy()
        q2[7:] += 0.01 * (i + 1)
        controller.solve(RobotState(q=q2, v=np.full(robot.nv, 0.1)), zeros + 1.0, Tracking(zeros + 0.1, zeros))
    for k, value in kept.items():
        np.testing.assert_array_equal(getattr(first, k), value, err_msg=k)
    for k, value in kept_problem.items():
        np.testing.assert_array_equal(getattr(first.problem, k), value, err_msg=k)


def test_rest_correction_is_numpys_least_norm_least_squares() -> None:
    """The compiled rest correction equals numpy.linalg.lstsq(J, −drift, rcond=1e-9) on full-rank,
    rank-deficient, zero and empty systems (the quadruped's 12 × 6 and 12 × 12 shapes among them)."""
    from idcontrol.formulations.consistency import rest_correction

    rng = np.random.default_rng(3)
    systems = [
        rng.standard_normal((12, 6)),
        rng.standard_normal((12, 12)),
        rng.standard_normal((3, 12)),
        rng.standard_normal((12, 2)) @ rng.standard_normal((2, 6)),
        np.zeros((12, 6)),
        rng.standard_normal((18, 12))[:, ::2],
    ]
    for J in systems:
        drift = rng.standard_normal(J.shape[0])
        expected, *_ = np.linalg.lstsq(J, -drift, rcond=1e-9)
        np.testing.assert_allclose(rest_correction(J, drift), expected, rtol=1e-12, atol=1e-12)
    assert rest_correction(np.zeros((0, 6)), np.zeros(0)).tolist() == [0.0] * 6
    assert rest_correction(np.zeros((4, 0)), np.ones(4)).shape == (0,)
