"""Impact sampling in the rigid simulator: touchdown events take a seeded Algorithm-1 outcome (offline studies)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from idcontrol.errors import ConfigError
from idcontrol.robot.model import RobotModel
from idcontrol.settings import load_launch
from idcontrol.sim.rigid import RigidSim

ROBOT = RobotModel("quadruped")


def drop(seed: int | None, pitch: float = 0.02, steps: int = 80) -> RigidSim:
    """The quadruped released 1 cm above its standing height, pitched, at rest, under zero torques."""
    sim = RigidSim(ROBOT, impact_sampling=seed is not None, impact_seed=seed or 0)
    q = sim.initial.copy()
    q[2] += 0.01
    q[3:7] = [0.0, np.sin(pitch / 2), 0.0, np.cos(pitch / 2)]
    sim.reset(q, np.zeros(ROBOT.nv))
    for _ in range(steps):
        sim.step(np.zeros(ROBOT.nu))
    return sim


def test_touchdowns_are_sampled_reproducibly_and_differ_between_seeds():
    """Each foot's touchdown is an event; all samples terminate and none adds energy; the same seed gives the
    same motion, another seed another one, and without sampling no event is counted."""
    a, b, c = drop(1), drop(1), drop(2)
    assert a.impacts.events >= 2 and a.impacts.unterminated == 0 and a.impacts.failures == 0
    assert a.impacts.lcps >= a.impacts.events
    assert a.impacts.energy_ratio_max <= 1.0 + 1e-9
    np.testing.assert_array_equal(a.state().q, b.state().q)
    assert not np.array_equal(a.state().v, c.state().v)
    plain = drop(None)
    assert plain.impacts.events == 0


def test_after_sampled_touchdowns_the_feet_rest_on_the_ground():
    """Once the sampled impacts are over, every foot is on the ground without penetrating it (0.1 mm)."""
    sim = drop(3, steps=60)
    contacts = sim.detector.detect(None)
    assert sim.impacts.events >= 2
    assert contacts.n == 4 and contacts.phi.min() > -1e-4 and contacts.phi.max() < 1e-3


def test_impact_sampling_settings_are_checked(tmp_path):
    """impact_sampling needs the rigid bridge; the seed must be a non-negative integer."""
    base = (Path(__file__).resolve().parents[1] / "launch" / "quadruped_trot.toml").read_text()
    bad = tmp_path / "bad.toml"
    bridge = 'kind = "mujoco"\nmode = "lockstep"\nmu = 1.0\n'
    assert bridge in base
    bad.write_text(base.replace(bridge, bridge + "impact_sampling = true\n"))
    with pytest.raises(ConfigError, match="impact_sampling = true needs bridge.kind = 'rigid'"):
        load_launch(bad)
    bad.write_text(
        base.replace(bridge, bridge.replace("mujoco", "rigid") + "impact_sampling = true\nimpact_seed = -1\n")
    )
    with pytest.raises(ConfigError, match="impact_seed"):
        load_launch(bad)
    with pytest.raises(ConfigError, match="impact_step"):
        RigidSim(ROBOT, impact_sampling=True, impact_step=0.0)
