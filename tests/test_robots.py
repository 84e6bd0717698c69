"""Robots beyond the shipped ones: published URDFs from example-robot-data through the whole controller."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from idcontrol.control.controller import InverseDynamicsController
from idcontrol.control.state import RobotState
from idcontrol.robot.model import RobotModel

UR5 = 'name = "ur5"\nurdf = "share:example-robot-data/robots/ur_description/urdf/ur5_robot.urdf"\nbase = "fixed"\n'


@pytest.mark.parametrize("formulation", ["two_stage_qp", "coulomb_lcp", "noslip_lcp"])
def test_a_robot_without_contact_spheres_has_no_contacts(tmp_path: Path, formulation: str):
    """An arm with no contact spheres solves with zero contacts (no IndexError): τ = M q̈_des + h."""
    (tmp_path / "robot.toml").write_text(UR5)
    robot = RobotModel(str(tmp_path / "robot.toml"))
    controller = InverseDynamicsController(robot, formulation=formulation)
    q = robot.standing_configuration()
    qdd = np.linspace(-1.0, 1.0, robot.nu)
    result = controller.solve(RobotState(q, np.zeros(robot.nv)), qdd)
    assert result.found and controller.last_contacts.n == 0
    robot.update(q, np.zeros(robot.nv))
    np.testing.assert_allclose(result.tau, robot.M @ qdd + robot.bias, atol=1e-9)


def test_published_urdfs_build_in_mujoco_and_each_change_is_reported(tmp_path: Path):
    """COLLADA meshes MuJoCo cannot decode are dropped (kinova, hyq), placeholder inertias are repaired only with
    [sim] repair_inertia (anymal_b: without it a ConfigError names the link and the option), and every change or
    difference from the controller's model is listed (hyq's URDF joint damping)."""
    from idcontrol.errors import ConfigError
    from idcontrol.robot.config import SHIPPED_ROBOTS_DIR
    from idcontrol.sim.mujoco import MujocoSim

    kinova = MujocoSim("kinova")
    assert any("dropped" in line and ".dae" in line for line in kinova.model_differences)
    hyq = MujocoSim("hyq")
    repaired = [line for line in hyq.model_differences if "inertia repaired" in line]
    assert len(repaired) == 5 and any("'lf_foot'" in line for line in repaired)
    assert any("damping" in line and "lf_haa_joint 0.1" in line for line in hyq.model_differences)
    text = (SHIPPED_ROBOTS_DIR / "anymal_b" / "robot.toml").read_text().replace("repair_inertia = true",
                                                                                "repair_inertia = false")  # fmt: skip
    (tmp_path / "robot.toml").write_text(text)
    with pytest.raises(ConfigError, match=r"\['base'\].*repair_inertia = true"):
        MujocoSim(str(tmp_path / "robot.toml"))
    anymal = MujocoSim("anymal_b")
    assert anymal.model.body("base").inertia.min() > 0
    q = anymal.robot.standing_configuration()
    anymal.reset(q)
    np.testing.assert_allclose(anymal.state().q, q, atol=1e-12)


def test_continuous_joints_map_one_to_one_between_pinocchio_and_mujoco():
    """kinova's continuous joints are one coordinate in both models: a configuration set in MuJoCo reads back."""
    from idcontrol.sim.mujoco import MujocoSim

    sim = MujocoSim("kinova")
    q = sim.robot.standing_configuration() + 0.1
    sim.reset(q)
    np.testing.assert_allclose(sim.state().q, q, atol=1e-12)
