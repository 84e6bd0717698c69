"""After ControlCore.warm_up, a run loads no compiled kernel: loading one (from numba's cache) takes
milliseconds, which in real-time mode is a run of late commands (20 stop the robot)."""

from __future__ import annotations

import sys

import numpy as np
import pytest
from numba.core.registry import CPUDispatcher

from idcontrol import protocol as wire
from idcontrol.control.factory import build_core
from idcontrol.control.state import RobotState
from idcontrol.errors import ConfigError
from idcontrol.formulations import contact_formulations
from idcontrol.reference import REFERENCES, Reference, available_references
from idcontrol.settings import load_launch
from idcontrol.sim.mujoco import MujocoSim
from tests.conftest import REPO

TROT = REPO / "launch" / "quadruped_trot.toml"


def compiled_specializations() -> dict[str, int]:
    """Specializations loaded so far of every compiled kernel in the package, by qualified name."""
    counts = {}
    for module_name, module in list(sys.modules.items()):
        if module_name.split(".")[0] != "idcontrol":
            continue
        for value in list(vars(module).values()):
            if isinstance(value, CPUDispatcher):
                counts[f"{value.py_func.__module__}.{value.py_func.__qualname__}"] = len(value.signatures)
    return counts


@pytest.mark.timing  # its 20 ms bound on a solve needs a core of its own (48 ms beside a second pytest worker)
@pytest.mark.parametrize("formulation", contact_formulations())
def test_a_warmed_up_core_trots_without_loading_a_kernel(formulation):
    """The launch file's trot in MuJoCo, 1.2 s (standing, then the gait's four, three and two feet down): no
    tick adds a specialization to any kernel, and no solve takes over 20 ms."""
    config = load_launch(TROT).with_overrides(formulation=formulation)
    core = build_core(config)
    robot = core.robot
    shape = wire.RobotShape(robot.name, robot.nq, robot.nv, tuple(robot.actuated_joints), tuple(robot.sphere_names), ())
    core.warm_up()
    sim = MujocoSim(robot, mu=config.bridge.mu)
    core.start(0.0)
    loaded = compiled_specializations()
    contact_counts = set()
    slowest = 0.0
    for seq in range(1, 1201):
        s = sim.state()
        message = wire.decode_control(wire.encode_state(seq, s.t, s.q, s.v, s.contact_forces), shape)
        out = core.tick(message.state, now=s.t)
        slowest = max(slowest, out.result.timings["total"])
        contact_counts.add(len(out.result.f_normal))
        sim.step(out.tau)
    now = compiled_specializations()
    assert core.mode == "run" and not core.metrics.fell, core.reason
    assert {2, 3, 4} <= contact_counts  # the gait went through its stances
    assert {k: n for k, n in now.items() if n != loaded.get(k, 0)} == {}
    assert slowest < 0.02, f"slowest solve {slowest * 1e3:.1f} ms"
    assert np.isfinite(core.metrics.tau_abs_sum)


def test_a_warmed_up_core_switches_to_any_reference_its_robot_can_run_without_loading_a_kernel():
    """Warm-up primes every kind of reference that builds for the robot, not only the launch file's: after a
    switch (admin ``set_reference`` while idle) the first run ticks load no kernel either (a cold cache compiled
    the trot's planner inside the first tick, for seconds)."""
    config = load_launch(REPO / "launch" / "quadruped_stand.toml")
    core = build_core(config)
    robot = core.robot
    core.warm_up()
    loaded = compiled_specializations()
    q, v = robot.standing_configuration(), np.zeros(robot.nv)
    switched = []
    for name in available_references():
        if name == core.reference.name:
            continue
        try:
            core.set_reference(name, {})
        except ConfigError:  # a kind this robot cannot run (the arm's references on a quadruped)
            continue
        switched.append(name)
        core.start(0.0)
        for k in range(5):
            core.tick(RobotState(q, v, t=k * core.dt), now=k * core.dt)
        assert core.mode == "run", (name, core.reason)
        core.stop("next reference", 0.0)
        core.expire(1e9)  # the safe stop's timeout: stopped, where another reference may be set
    assert {"trot", "sway"} <= set(switched)
    now = compiled_specializations()
    assert {k: n for k, n in now.items() if n != loaded.get(k, 0)} == {}


def test_a_kind_of_reference_that_cannot_run_on_the_robot_does_not_stop_the_warm_up(monkeypatch):
    """Priming the other kinds of reference is best effort: one that raises anything while it is built or sampled
    for this robot is left unprimed, and the core warms up and runs its own reference."""

    class Broken(Reference):
        name = "broken"

        def __init__(self, robot):  # noqa: ANN001 - the registry's signature
            raise RuntimeError("a planner with a bug")

    monkeypatch.setitem(REFERENCES, "broken", Broken)
    core = build_core(load_launch(REPO / "launch" / "quadruped_stand.toml"))
    core.warm_up()
    core.start(0.0)
    robot = core.robot
    out = core.tick(RobotState(robot.standing_configuration(), np.zeros(robot.nv), t=0.0), now=0.0)
    assert core.mode == "run" and out.result.found
