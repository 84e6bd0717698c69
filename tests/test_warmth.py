"""The tick warmer: a shadow core ticked in the daemon's wait changes nothing the served core sends."""

from __future__ import annotations

import logging
import time
from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest
import zmq

from idcontrol import protocol as wire
from idcontrol.control.factory import build_core
from idcontrol.control.modes import MODE_RUN
from idcontrol.control.state import RobotState
from idcontrol.daemon.warmth import TickWarmer
from idcontrol.errors import ConfigError
from idcontrol.settings import RealtimeSettings, load_launch
from idcontrol.sim.launch import simulator_for

LAUNCH = Path(__file__).resolve().parents[1] / "launch"


@pytest.fixture(scope="module")
def trot():
    """The trot's launch settings and 120 states of its lock-step MuJoCo run, 0.48-0.6 s: a pair of feet
    lifts off and lands."""
    config = load_launch(LAUNCH / "quadruped_trot.toml")
    core = build_core(config)
    sim = simulator_for(config, core.robot)
    core.start(0.0)
    states = []
    for _ in range(600):
        s = sim.state()
        state = s.robot_state()
        out = core.tick(state, now=s.t)
        states.append(state)
        sim.step(out.tau)
    return config, states[480:]


@pytest.fixture
def idle_socket():
    """A real socket with nothing to read, and one to write into it."""
    ctx = zmq.Context()
    reader, writer = ctx.socket(zmq.PAIR), ctx.socket(zmq.PAIR)
    reader.bind("inproc://warmth")
    writer.connect("inproc://warmth")
    yield reader, writer
    reader.close(linger=0)
    writer.close(linger=0)
    ctx.term()


def test_shadow_ticks_leave_the_served_commands_bit_for_bit_unchanged(trot, idle_socket):
    """The same states through two cores built alike, one with a warmer ticking its shadow between every two
    ticks (on the last state and its message, once or more): every torque, mode and contact force is identical."""
    config, states = trot
    socket, _ = idle_socket
    plain, served = build_core(config), build_core(config)
    r = served.robot
    shape = wire.RobotShape(r.name, r.nq, r.nv, tuple(r.actuated_joints), tuple(r.sphere_names), ())
    warmer = TickWarmer(build_core(config), shape)
    warmer.warm_up()
    for core in (plain, served):
        core.start(0.0)
    for state in states:
        a = plain.tick(state, now=state.t)
        b = served.tick(state, now=state.t)
        assert np.array_equal(a.tau, b.tau) and a.mode == b.mode == MODE_RUN
        assert np.array_equal(a.result.f_normal, b.result.f_normal)
        warmer.observe(state, wire.encode_state(1, state.t, state.q, state.v))
        warmer.cost_s = 0.0  # a tick however long (a loaded machine): the property checked here is not timing
        warmer.warm(socket, served, time.perf_counter() + 0.01)
    assert warmer.enabled and warmer.ticks >= len(states) // 2  # a window lost to preemption only skips its ticks


def test_the_shadow_follows_the_served_formulation(trot, idle_socket):
    config, states = trot
    socket, _ = idle_socket
    served = build_core(config)
    served.warm_up()
    warmer = TickWarmer(build_core(config))
    warmer.warm_up()
    served.set_formulation("noslip_lcp")
    warmer.observe(states[0])
    warmer.warm(socket, served, time.perf_counter() + 0.02)
    assert warmer.shadow.formulation_name == "noslip_lcp" and warmer.ticks > 0


def test_no_shadow_tick_while_a_message_waits_or_past_the_deadline(trot, idle_socket):
    """A state that waits, or a tick that would end after ``until``, keeps the shadow still."""
    config, states = trot
    socket, writer = idle_socket
    warmer = TickWarmer(build_core(config))
    warmer.warm_up()
    warmer.observe(states[0])
    warmer.warm(socket, warmer.shadow, time.perf_counter() + 0.02)  # learns what a tick costs
    ticks = warmer.ticks
    assert ticks > 0 and warmer.cost_s > 0.0
    warmer.warm(socket, warmer.shadow, time.perf_counter() + 0.5 * warmer.cost_s)
    assert warmer.ticks == ticks
    writer.send(b"state")
    assert socket.poll(1000)
    warmer.warm(socket, warmer.shadow, time.perf_counter() + 5e-3)
    assert warmer.ticks == ticks


def test_a_slow_shadow_tick_is_forgotten_even_when_no_tick_fits(trot, idle_socket):
    """An outlier (here 1 s) keeps the shadow still for a while, then decays at each wait until a tick fits: a
    single preempted shadow tick must not turn warming off for good."""
    config, states = trot
    socket, _ = idle_socket
    warmer = TickWarmer(build_core(config))
    warmer.warm_up()
    warmer.observe(states[0])
    warmer.cost_s = 1.0
    waits = 0
    while warmer.ticks == 0 and waits < 5000:
        warmer.warm(socket, warmer.shadow, time.perf_counter() + 5e-3)
        waits += 1
    assert warmer.ticks > 0 and 100 < waits < 5000, waits  # 1 s decays below 5 ms in 263 waits


def test_a_shadow_tick_that_raises_turns_the_warmer_off_and_says_why(trot, idle_socket, caplog):
    config, _ = trot
    socket, _ = idle_socket
    warmer = TickWarmer(build_core(config))
    warmer.warm_up()
    nq = warmer.shadow.robot.nq
    warmer.observe(RobotState(q=np.zeros(nq - 1), v=np.zeros(nq - 1)))  # wrong shapes: the shadow's check raises
    with caplog.at_level(logging.WARNING, logger="idcontrol.daemon"):
        warmer.warm(socket, warmer.shadow, time.perf_counter() + 5e-3)
    assert not warmer.enabled and warmer.ticks == 0
    assert "tick warmer off" in caplog.text and "off" in warmer.describe()


def test_warm_needs_a_spin_and_a_boolean():
    assert RealtimeSettings(spin_us=500.0, warm=True).check("test").warm
    with pytest.raises(ConfigError, match="needs spin_us"):
        RealtimeSettings(warm=True).check("test")
    with pytest.raises(ConfigError, match="true or false"):
        RealtimeSettings(spin_us=500.0, warm=1).check("test")


def test_a_shadow_does_not_repeat_what_building_the_served_core_said(caplog):
    """The joint sinusoid on the UR5 at 1 rad says which amplitudes it reduced when a core is built; building the
    warmer's shadow from the same settings says nothing more, and leaves the logger as it found it."""
    config = load_launch(LAUNCH / "joint_sinusoid.toml")
    config = replace(config, reference=replace(config.reference, options={"amplitude": 1.0, "frequency": 1.0}))
    core_log = logging.getLogger("idcontrol.control.core")
    with caplog.at_level(logging.WARNING, logger="idcontrol.control.core"):
        build_core(config)
        said = len(caplog.records)
        level = core_log.level
        build_core(config, quiet=True)
        assert core_log.level == level
    assert said > 0 and len(caplog.records) == said
