"""The simulator registry (one list of kinds that the launch files, the factories and the docs read) and the mock
back end, which closes the loop through the daemon and the bridge without a physics engine."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest

from idcontrol import simulators
from idcontrol.errors import ConfigError, ShapeError, UnknownName
from idcontrol.settings import load_launch
from idcontrol.sim import available_simulators, make_simulator
from idcontrol.sim.launch import simulator_for
from idcontrol.sim.mock import MockSim, replay
from idcontrol.simulators import BridgeKey, SimulatorKind, positive
from idcontrol.testing import assert_stays_in_run, loop_config, run_in_process, run_over_protocol

REPO = Path(__file__).resolve().parents[1]
STAND = (REPO / "launch" / "quadruped_stand.toml").read_text()


def launch_file(tmp_path: Path, bridge_lines: str) -> Path:
    """The shipped standing launch file with ``kind = "mujoco"`` replaced by ``bridge_lines``."""
    assert 'kind = "mujoco"' in STAND
    path = tmp_path / "launch.toml"
    path.write_text(STAND.replace('kind = "mujoco"', bridge_lines))
    return path


def test_every_kind_is_buildable_valid_in_launch_files_and_in_the_docs():
    """Each registered kind names an importable back end class, loads as a launch file's [bridge] kind, and has
    its row in docs/simulators.md, which is the table the registry generates."""
    doc = (REPO / "docs" / "simulators.md").read_text()
    start = "<!-- simulator-kinds: generated from idcontrol.simulators.markdown_table() -->\n"
    end = "<!-- /simulator-kinds -->"
    assert doc[doc.index(start) + len(start) : doc.index(end)] == simulators.markdown_table()
    assert {"mujoco", "rigid", "drake", "ess", "mock"} <= set(available_simulators())
    for name in available_simulators():
        kind = simulators.simulator_kind(name)
        assert callable(kind.load()) and kind.load().kind == name
    with pytest.raises(UnknownName, match="unknown simulator 'bullet'; available: drake, ess, mock"):
        simulators.simulator_kind("bullet")


def test_a_new_back_end_is_one_registry_entry(tmp_path, quadruped, monkeypatch):
    """A kind registered with a key of its own is valid in a launch file, built from it with that key, and the
    key is refused (named) for another kind or with a bad value."""

    class Heavy(MockSim):
        """The mock with another joint inertia, from the launch file."""

        kind = "heavy"

    inertia = BridgeKey("inertia", "a finite number > 0 kg·m²", positive, doc="kg·m² per joint")
    monkeypatch.setitem(simulators._SIMULATORS, "heavy", SimulatorKind("heavy", Heavy, keys=(inertia,)))
    sim = simulator_for(load_launch(launch_file(tmp_path, 'kind = "heavy"\ninertia = 4.0')), quadruped)
    assert isinstance(sim, Heavy) and sim.inertia == 4.0
    with pytest.raises(ConfigError, match="bridge.inertia needs bridge.kind = 'heavy' \\(it is 'mujoco'\\)"):
        load_launch(launch_file(tmp_path, 'kind = "mujoco"\ninertia = 4.0'))
    with pytest.raises(ConfigError, match="bridge.inertia must be a finite number > 0 kg·m², got -1.0"):
        load_launch(launch_file(tmp_path, 'kind = "heavy"\ninertia = -1.0'))
    with pytest.raises(ConfigError, match="unknown key\\(s\\) \\['inertial'\\]"):
        load_launch(launch_file(tmp_path, 'kind = "heavy"\ninertial = 4.0'))


def test_the_kinds_own_keys_read_back_as_attributes(tmp_path):
    """A kind's own keys are the bridge settings' attributes: the file's value, else the key's default."""
    b = load_launch(launch_file(tmp_path, 'kind = "ess"\nstiffness = 2e5')).bridge
    assert (b.kind, b.stiffness, b.damping, b.contact_stiffness, b.impact_sampling) == ("ess", 2e5, None, None, False)
    with pytest.raises(AttributeError, match="stifness"):
        _ = b.stifness
    assert replace(b, kind="mujoco").stiffness == 2e5  # kept: the --bridge override checks it (and refuses it)


def test_the_mock_steps_by_its_rule(quadruped):
    """The mock's joints are unit double integrators of the clamped torque (semi-implicit Euler), the base and
    the contact forces stay still, a malformed torque changes nothing, and the same torques replay the same run."""
    sim = make_simulator("mock", quadruped, timestep=2e-3)
    q0 = sim.state().q
    tau = np.linspace(-1.0, 1.0, quadruped.nu)
    tau[0] = 10 * quadruped.torque_limits[0]  # clamped to the limit
    states = replay(sim, [tau] * 5)
    applied = np.clip(tau, -quadruped.torque_limits, quadruped.torque_limits)
    act_q = np.asarray(quadruped.actuated_dofs) + 1  # a free flyer's q has one more coordinate (the quaternion)
    dt, n = 2e-3, 5
    np.testing.assert_allclose(states[-1].v[quadruped.actuated_dofs], n * dt * applied, rtol=1e-12)
    np.testing.assert_allclose(states[-1].q[act_q] - q0[act_q], dt * dt * applied * n * (n + 1) / 2, rtol=1e-9)
    np.testing.assert_array_equal(states[-1].q[:7], q0[:7])
    assert states[-1].t == pytest.approx(n * dt) and not states[-1].contact_forces.any()
    np.testing.assert_array_equal(sim.applied, applied)
    with pytest.raises(ShapeError):
        sim.step(tau[:-1])
    assert sim.time == pytest.approx(n * dt)
    again = replay(make_simulator("mock", quadruped, timestep=2e-3), [tau] * 5)
    np.testing.assert_array_equal(again[-1].q, states[-1].q)
    with pytest.raises(ConfigError, match="mock: timestep must be > 0 s"):
        MockSim(quadruped, timestep=0.0)


def test_a_closed_loop_runs_on_the_mock_in_process(quadruped):
    """The test harness closes the loop on the mock: the core stays in run mode, and every command the core sent
    is the torque that moved the mock to the next state it answered."""
    run = run_in_process(loop_config("quadruped", simulator="mock"), 0.05, robot=quadruped)
    assert_stays_in_run(run, ticks=50)
    replayed = replay(MockSim(quadruped, initial=run.q[0]), run.tau[:-1])
    np.testing.assert_allclose(np.array([s.q for s in replayed]), run.q[1:], rtol=0, atol=1e-12)


def test_the_daemon_and_bridge_processes_run_on_the_mock(quadruped):
    """Over the protocol, daemon and bridge processes on the mock (no physics engine): each state the daemon
    answered is the mock's rule applied to the torque of the state before, as the telemetry records both."""
    run = run_over_protocol(loop_config("quadruped", simulator="mock"), 0.1)
    assert_stays_in_run(run, ticks=100)
    replayed = replay(MockSim(quadruped, initial=run.q[0]), run.tau[:-1])
    np.testing.assert_allclose(np.array([s.q for s in replayed]), run.q[1:], rtol=0, atol=1e-12)
