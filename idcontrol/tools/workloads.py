"""The benchmark's real workloads: closed-loop states recorded in lock-step MuJoCo, replayed through the core.

A standing robot asks little of a formulation: the same contacts every tick, warm starts that are always
right. The workloads here are what the robot really runs:

* ``trot``: ``launch/quadruped_trot.toml`` for 3 s: touchdowns, lift-offs, two and four feet, 0.2 m/s;
* ``grasp``: ``launch/arm_grasp.toml`` for 3 s: the arm's 3 Hz sinusoid with the box between its fingers;
* ``trot_hw``: ``launch/trot_hw.toml`` for 3 s: the trot on what a robot measures (typical sensors, recorded as the
  bridge reported them), answered with estimated contacts.

Each workload is recorded once per process, deterministically (lock-step MuJoCo, the launch file's own
formulation), as the states the bridge sent. Each formulation then answers the same states in order, through
the whole control core (reference and PD, model, contacts, problem, solve, fallback policy, safety filter,
run metrics: what the daemon's ``core_tick`` times), its warm starts carried from tick to tick as in the
daemon: with the options its launch file gives it (``launch``) and with the paper's (``paper``: the
formulations' defaults, the LCPs' ``PAPER_OPTIONS``).
"""

from __future__ import annotations

import gc
import time
from dataclasses import dataclass, replace
from pathlib import Path

import numpy as np

from idcontrol.control.factory import build_core
from idcontrol.control.state import RobotState
from idcontrol.formulations.coulomb_lcp import PAPER_OPTIONS as COULOMB_PAPER
from idcontrol.formulations.noslip_lcp import PAPER_OPTIONS as NOSLIP_PAPER
from idcontrol.robot.model import RobotModel
from idcontrol.settings import LaunchConfig, load_launch
from idcontrol.sim.launch import simulator_for

LAUNCH_DIR = Path(__file__).resolve().parents[2] / "launch"
#: workload name -> (launch file, seconds recorded)
WORKLOADS: dict[str, tuple[str, float]] = {
    "trot": ("quadruped_trot.toml", 3.0),
    "grasp": ("arm_grasp.toml", 3.0),
    "trot_hw": ("trot_hw.toml", 3.0),
}
FORMULATIONS = ("two_stage_qp", "coulomb_lcp", "noslip_lcp")
#: the paper's exact methods: each formulation's options that turn this project's adaptations off
PAPER = {"coulomb_lcp": COULOMB_PAPER, "noslip_lcp": NOSLIP_PAPER}


@dataclass
class Recording:
    """The states a lock-step run sent, in order (t, q, v, sensed forces, movable bodies)."""

    name: str
    config: LaunchConfig
    robot: RobotModel
    states: list[RobotState]
    recorded_with: str  # the formulation that drove the recorded run
    contact_counts: tuple[int, int]  # the fewest and most contacts its ticks had


_RECORDINGS: dict[str, Recording] = {}


def record(name: str) -> Recording:
    """Run the workload's launch file in process, lock-step, and keep every state it answered (cached)."""
    if name in _RECORDINGS:
        return _RECORDINGS[name]
    launch, seconds = WORKLOADS[name]
    config = load_launch(LAUNCH_DIR / launch)
    robot = RobotModel(config.robot)
    core = build_core(config, robot)
    sim = simulator_for(config, robot)
    core.warm_up()
    core.start(0.0)
    states: list[RobotState] = []
    counts: list[int] = []
    for _ in range(int(round(seconds / core.dt))):
        state = sim.state().robot_state()
        out = core.tick(state, now=state.t)
        if out.mode != "run":
            break
        states.append(state)
        counts.append(0 if out.contacts is None else out.contacts.n)
        for _ in range(config.bridge.substeps):
            sim.step(out.tau)
    recording = Recording(
        name, config, robot, states, config.controller.formulation, (min(counts, default=0), max(counts, default=0))
    )
    _RECORDINGS[name] = recording
    return recording


@dataclass
class ReplayRow:
    """One formulation answering one workload's states: wall and CPU time of the core's tick, µs."""

    workload: str
    formulation: str
    variant: str  # "launch": the launch file's options; "paper": the formulation's defaults
    ticks: int
    p50_us: float
    p99_us: float
    max_us: float
    cpu_p50_us: float
    cpu_p99_us: float
    found_fraction: float
    model_us: float  # means per tick of the controller's phases ...
    contacts_us: float
    build_us: float
    solve_us: float
    other_us: float  # ... and of the rest of the core's tick: reference, PD, fallback policy, safety, metrics
    stops: int  # times a guard or the fallback policy ended run mode (the replay then starts again)


def replay(recording: Recording, formulation: str, variant: str, repeats: int = 1) -> ReplayRow:
    """Time the core's tick on every recorded state (``repeats`` passes; the first pass is not timed when
    ``repeats`` > 1), the formulation built as ``variant`` says."""
    config = recording.config
    if variant == "launch":
        options = dict(config.formulations.get(formulation, {}))
    else:  # the paper's method: the formulations' defaults, but the no-slip LCP's adaptations off
        options = dict(PAPER.get(formulation, {}))
    controller = replace(config.controller, formulation=formulation, options={})
    config = replace(config, controller=controller, formulations={**config.formulations, formulation: options})
    core = build_core(config, recording.robot)
    core.warm_up()
    states = recording.states
    n = len(states)
    passes = max(1, repeats)
    wall = np.empty(n * passes)
    cpu = np.empty(n * passes)
    phases = np.zeros(5)
    found = 0
    timed = 0
    stops = 0
    gc.collect()
    gc.freeze()
    try:
        for p in range(passes):
            core.reset()
            core.start(states[0].t)
            for state in states:
                cpu_start = time.process_time_ns()
                started = time.perf_counter()
                out = core.tick(state, now=state.t)
                elapsed = time.perf_counter() - started
                cpu_elapsed = time.process_time_ns() - cpu_start
                if core.mode != "run":  # a guard stopped it: the rest of the workload is timed in run mode too
                    core.reset()
                    core.start(state.t)
                    stops += 1
                if passes > 1 and p == 0:
                    continue
                wall[timed], cpu[timed] = elapsed, cpu_elapsed
                timed += 1
                result = out.result
                if result is not None:
                    found += bool(result.found)
                    t = result.timings
                    total = t.get("total", 0.0)
                    phases += (
                        t.get("model", 0.0),
                        t.get("contacts", 0.0),
                        t.get("build", 0.0),
                        t.get("solve", 0.0),
                        elapsed - total,
                    )
    finally:
        gc.unfreeze()
    us = wall[:timed] * 1e6
    cpu_us = cpu[:timed] / 1e3
    means = phases * 1e6 / max(timed, 1)
    return ReplayRow(
        workload=recording.name,
        formulation=formulation,
        variant=variant,
        ticks=timed,
        p50_us=round(float(np.percentile(us, 50)), 1),
        p99_us=round(float(np.percentile(us, 99)), 1),
        max_us=round(float(us.max()), 1),
        cpu_p50_us=round(float(np.percentile(cpu_us, 50)), 1),
        cpu_p99_us=round(float(np.percentile(cpu_us, 99)), 1),
        found_fraction=found / max(timed, 1),
        model_us=round(float(means[0]), 1),
        contacts_us=round(float(means[1]), 1),
        build_us=round(float(means[2]), 1),
        solve_us=round(float(means[3]), 1),
        other_us=round(float(means[4]), 1),
        stops=stops,
    )
