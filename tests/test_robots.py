"""Robots beyond the shipped ones: published URDFs from example-robot-data through the whole controller."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from idcontrol.control.controller import InverseDynamicsController
from idcontrol.control.state import RobotState
from idcontrol.formulations import contact_formulations
from idcontrol.robot.model import RobotModel

UR5 = 'name = "ur5"\nurdf = "share:example-robot-data/robots/ur_description/urdf/ur5_robot.urdf"\nbase = "fixed"\n'


@pytest.mark.parametrize("formulation", contact_formulations())
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
    text = (
        (SHIPPED_ROBOTS_DIR / "anymal_b" / "robot.toml")
        .read_text()
        .replace("repair_inertia = true", "repair_inertia = false")
    )
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


# ---------------------------------------------------------------------------------------------------- closed loop
def launch_run(launch: str, robot: str, seconds: float, formulation: str | None = None):
    """A generic launch file with ``--robot``, in process (the daemon's core, lock-step MuJoCo)."""
    from idcontrol.settings import load_launch
    from idcontrol.testing.runners import run_in_process
    from tests.conftest import REPO

    config = load_launch(REPO / "launch" / launch).with_overrides(formulation=formulation, robot=robot)
    return run_in_process(config, seconds)


@pytest.mark.parametrize("robot", ["quadruped", "solo12", "a1", "anymal_b", "hyq", "talos"])
def test_every_legged_robot_stands_with_the_generic_launch_file(robot: str):
    """launch/stand.toml --robot NAME, 1.5 s: no fall, every foot loaded, joint error below 0.01 rad."""
    run = launch_run("stand.toml", robot, 1.5)
    assert run.ticks_in_run == 1500 and not run.summary["fell"], run.end_reason
    assert run.summary["tracking_error_rad"] < 0.01
    legs = run.robot.legs
    per_leg = np.zeros((run.n, len(legs)))
    m = run.robot.model
    for k, frame in enumerate(run.robot.sphere_frame_ids):
        joint = m.frames[int(frame)].parentJoint
        leg = [i for i, limb in enumerate(legs) if m.getJointId(limb.joints[-1]) == joint][0]
        per_leg[:, leg] += run.force_sensed[:, k, 2]
    assert np.all(per_leg[run.n // 2 :].min(axis=0) > 1.0)  # N: no foot unloaded


@pytest.mark.parametrize("robot", ["go2", "b1"])
def test_the_no_slip_lcp_stands_a_quadruped_from_robot_init_without_torque_chatter(tmp_path: Path, robot: str):
    """Robots this project ships no file for (Unitree Go2 and B1, written by `robot init`), launch/stand.toml under
    the no-slip LCP's defaults, 1.5 s: no fall and no torque chatter. With the spread at 1e-2 the Go2's load
    flipped between its diagonal foot pairs every tick from 27 ms on, growing ×1.26 a tick to ±10 N·m (E|Δτ|
    6300 N·m/s); at 3e-2 the B1's answer alternated between the exact solution on its face and the ε-near one
    with a repair, in bursts (E|Δτ| 135 N·m/s), until a face met only in the least-squares sense kept its point."""
    from idcontrol.robot.init import init_robot
    from idcontrol.testing.asserts import assert_torque_smooth

    erd = f"share:example-robot-data/robots/{robot}_description"
    robot_dir = init_robot(f"{erd}/urdf/{robot}.urdf", f"{erd}/srdf/{robot}.srdf", tmp_path / robot).path.parent
    run = launch_run("stand.toml", str(robot_dir), 1.5, "noslip_lcp")
    assert run.ticks_in_run == 1500 and not run.summary["fell"], run.end_reason
    assert_torque_smooth(run, rate_mean=20.0)  # N·m/s: 0.0 for both with the defaults


@pytest.mark.parametrize("robot", ["arm", "ur5", "kinova"])
def test_every_arm_tracks_a_one_hertz_joint_sinusoid(robot: str):
    """launch/joint_sinusoid.toml --robot NAME, 1.5 s of a 1 Hz, 0.1 rad swing: mean joint error below 0.005 rad."""
    run = launch_run("joint_sinusoid.toml", robot, 1.5)
    assert run.ticks_in_run == 1500, run.end_reason
    assert run.summary["tracking_error_rad"] < 0.005
    assert np.ptp(run.q_ref, axis=0).max() > 0.15  # it does swing


@pytest.mark.parametrize("robot", ["anymal_b", "a1"])
def test_a_published_quadruped_trots_forward_with_the_generic_launch_file(robot: str):
    """launch/trot.toml --robot NAME, two_stage_qp, 3 s: no fall, at least 0.15 m/s once trotting. The A1's centre
    of mass stands 34 mm behind its feet's centroid: it fell at 1.3 s before the trot centred its feet under it."""
    run = launch_run("trot.toml", robot, 3.0)
    assert run.ticks_in_run == 3000 and not run.summary["fell"], run.end_reason
    speed = (run.q[-1, 0] - run.q[1000, 0]) / (run.t[-1] - run.t[1000])
    assert speed >= 0.15, speed


def test_a_fall_names_its_cause_and_a_guard_stopping_a_collapse_counts_as_a_fall():
    """The Coulomb LCP with soft gains (kp 50, kd 5) drops the A1 onto a knee: fell, naming the joint; the limit
    guard that stops hyq's collapsing Coulomb-LCP trot (the controller assuming the floor's μ = 1, not the launch
    file's 0.4: its stance feet squeeze the body until the knees saturate) is a fall too ('fell no' was reported
    before)."""
    from dataclasses import replace

    from idcontrol.settings import load_launch
    from idcontrol.testing.runners import loop_config, run_in_process
    from tests.conftest import REPO

    run = run_in_process(
        loop_config("a1", formulation="coulomb_lcp", penetration_tolerance=0.001), 2.0, gains=(50.0, 5.0)
    )
    assert run.summary["fell"] and "touches the ground" in run.summary["fall_cause"], run.summary["fall_cause"]
    config = load_launch(REPO / "launch" / "trot.toml").with_overrides(formulation="coulomb_lcp", robot="hyq")
    config = replace(config, controller=replace(config.controller, mu=1.0))
    run = run_in_process(config, 2.0)
    # the guard: the joint-limit guard, or the certificate's safe stop (the collapsing trot's answers need more than
    # 30 times hyq's torque limits)
    assert run.end_reason.startswith(("limit guard", "solve failed: certificate")), run.end_reason
    assert run.summary["fell"] and "guard" in run.summary["fall_cause"], run.summary
    calm = run_in_process(replace(config, reference=replace(config.reference, name="hold", options={})), 0.3)
    assert not calm.summary["fell"] and calm.summary["fall_cause"] is None


def test_experiment_robots_runs_the_matrix_and_writes_the_readme_tables(tmp_path: Path, capsys):
    """`idcontrol experiment robots --quick --only ...`: one object per run in --json (metrics of the generic
    launch files), the trot's sample cost, and the tables written between the README's markers (which it refuses
    to write without)."""
    import json

    from idcontrol.errors import ConfigError
    from idcontrol.tools.cli import main
    from idcontrol.tools.experiments.robots import plan, write_readme_tables

    assert len(plan()) == 60 and {s.task for s in plan()} == {"stand", "stand_trot_options", "trot", "sinusoid"}
    readme = tmp_path / "README.md"
    readme.write_text("intro\n<!-- robots-table:start -->\nold\n<!-- robots-table:end -->\nrest\n")
    code = main(
        [
            "experiment",
            "robots",
            "--quick",
            "--only",
            "sinusoid/ur5/two_stage,trot/anymal_b/coulomb",
            "--json",
            str(tmp_path / "r.json"),
            "--readme",
            str(readme),
        ]
    )
    assert code == 0
    data = json.loads((tmp_path / "r.json").read_text())
    runs = {(r["task"], r["robot"], r["formulation"]): r for r in data["runs"]}
    assert set(runs) == {("sinusoid", "ur5", "two_stage_qp"), ("trot", "anymal_b", "coulomb_lcp")}
    trot = runs["trot", "anymal_b", "coulomb_lcp"]
    assert not trot["fell"] and trot["distance_m"] > 0.1 and runs["sinusoid", "ur5", "two_stage_qp"]["completed"]
    assert data["trot_sample_us"]["anymal_b"][0] > 0
    text = readme.read_text()
    assert text.startswith("intro\n<!-- robots-table:start -->\nMeasured with `idcontrol experiment robots --quick")
    assert "| anymal_b | — |" in text and "| ur5 |" in text and "old" not in text and text.endswith("rest\n")
    readme.write_text("no markers")
    with pytest.raises(ConfigError, match="markers"):
        write_readme_tables(readme, "table")


def test_a_run_stopped_before_its_first_run_tick_reports_no_metrics():
    """A run whose guard stopped it at its first tick (a posture outside the joint limits, say) prints no
    tracking error and no unloaded feet, which would read as a perfect stand, in the launch summary and the
    matrix's lines."""
    from idcontrol.launcher import format_summary
    from idcontrol.tools.experiments.robots import describe

    stopped = {
        "task": "stand",
        "robot": "r",
        "formulation": "two_stage_qp",
        "seconds": 10.0,
        "sim_seconds": 0.001,
        "wall_seconds": 1.0,
        "ticks": 0,
        "completed": False,
        "tracking_error_rad": 0.0,
        "fell": False,
        "fall_cause": None,
        "end_reason": "limit guard: joint j4 at +0.0000 outside [-3.07, -0.07]",
        "clipped": 0,
    }
    line = describe(stopped)
    assert "no tick in run mode" in line and "0.0000 rad" not in line and "stopped: limit guard" in line
    summary = {
        "robot": "r",
        "formulation": "two_stage_qp",
        "bridge_mode": "lockstep",
        "end": "limit guard",
        "sim_time_s": 0.0,
        "wall_time_s": 1.0,
        "ticks": 3,
        "mode_ticks": {"stopped": 3},
        "deadline_misses": 0,
        "long_roundtrips": 0,
        "on_deadline_fraction": 1.0,
        "compute_us": {"p50": 100.0, "p99": 100.0, "max": 100.0},
        "roundtrip_us": {"p50": 300.0, "p99": 300.0, "max": 300.0},
        "phase_mean_us": {},
        "tracking_error_rad": 0.0,
        "velocity_error_rad_s": 0.0,
        "tau_rate_mean": 0.0,
        "tau_mean": 0.0,
        "fell": False,
        "interventions": {},
        "base_travel_m": None,
    }
    text = format_summary(summary)
    assert "n/a (no tick in run mode)" in text and "0.0000 rad" not in text
    summary["mode_ticks"] = {"run": 2, "stopped": 1}
    assert "0.0000 rad" in format_summary(summary)


def test_mujocos_warnings_on_reading_a_urdf_go_to_the_log_not_to_a_file_in_the_working_folder(
    tmp_path: Path, monkeypatch, caplog
):
    """The double pendulum's joints have the range [0, 0] (no limits, as both models read it): MuJoCo warns while it
    reads the URDF. The warning is logged; no MUJOCO_LOG.TXT appears in the working folder."""
    import logging

    from idcontrol.robot.init import init_robot
    from idcontrol.sim.mujoco import MujocoSim

    result = init_robot(
        "share:example-robot-data/robots/double_pendulum_description/urdf/double_pendulum.urdf",
        None,
        tmp_path / "dp",
        torque_limit=5.0,
    )
    monkeypatch.chdir(tmp_path)
    with caplog.at_level(logging.WARNING, logger="idcontrol.sim.mujoco"):
        MujocoSim(RobotModel(str(result.path)))
    assert "MuJoCo: joint 'joint1' has equal lower and upper limits" in caplog.text
    assert not (tmp_path / "MUJOCO_LOG.TXT").exists()


def test_a_wheels_axle_is_not_taken_for_a_body_on_the_ground(tmp_path: Path):
    """The fall check watches the joints standing above a quarter of the base's height (a knee on the ground is a
    fall), but not a joint at the centre of its own contact sphere: a wheel's axle stands only its radius high
    (Go2-W's were taken for bodies on the ground on the first tick). The quadruped with its LF sphere made a
    wheel about the knee: the LF knee is not watched, the other knees are."""
    from idcontrol.control.core import ControlCore
    from idcontrol.reference import make_reference
    from idcontrol.robot.config import SHIPPED_ROBOTS_DIR

    shipped = SHIPPED_ROBOTS_DIR / "quadruped"
    text = (shipped / "robot.toml").read_text()
    wheel = 'name = "LF_foot"\nframe = "LF_foot"\nradius = 0.01\n'
    assert wheel in text
    text = text.replace(wheel, 'name = "LF_foot"\nframe = "LF_shank"\nradius = 0.03\n')
    text = text.replace('urdf = "quadruped.urdf"', f'urdf = "{shipped / "quadruped.urdf"}"')
    (tmp_path / "robot.toml").write_text(text)
    robot = RobotModel(str(tmp_path / "robot.toml"))
    core = ControlCore(InverseDynamicsController(robot), make_reference("hold", robot))
    watched = {str(robot.model.names[j]) for j in core._watched}
    assert "LF_KFE" not in watched and {"RF_KFE", "LH_KFE", "RH_KFE"} <= watched


@pytest.mark.parametrize("robot", ["solo12", "a1", "anymal_b", "hyq", "talos"])
def test_two_stage_compiled_path_matches_its_python_path_on_published_robots(robot: str):
    """The two-stage QP's single compiled call (DAQP's C API; Stage II's unconstrained minimizer where every row
    holds) and its Python path (DAQP through ``daqp.Model``) agree on whether a tick is found and on τ to 1e-7
    relative, on states near each robot's stance (joints ±2 mrad, v ~ 5 mm/s, q̈_des ~ 0.5)."""
    from idcontrol.reference.base import Tracking

    compiled = InverseDynamicsController(robot, formulation="two_stage_qp")
    python = InverseDynamicsController(robot, formulation="two_stage_qp")
    python.formulation._native = False
    r = compiled.robot
    rng = np.random.default_rng(11)
    q0, nu, stage_two = r.standing_configuration(), r.nu, 0
    for _ in range(40):
        q = q0.copy()
        q[r.actuated_idx_q] += rng.normal(0.0, 0.002, nu)
        state = RobotState(q=q, v=rng.normal(0.0, 0.005, r.nv), objects={})
        qdd, tracking = rng.normal(0.0, 0.5, nu), Tracking(np.zeros(nu), np.zeros(nu))
        a, b = compiled.solve(state, qdd, tracking), python.solve(state, qdd, tracking)
        assert a.found == b.found, (a.message, b.message)
        if a.found:
            np.testing.assert_allclose(a.tau, b.tau, rtol=0.0, atol=1e-7 * max(1.0, float(np.abs(b.tau).max())))
            stage_two += "optimal set" in a.message
    assert stage_two > 0  # Stage II ran on some of them
