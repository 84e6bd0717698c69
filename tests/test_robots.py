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
