"""``idcontrol bench``: per-tick cost of every formulation, on recorded workloads and standing scenarios.

Each tick is timed whole, as the daemon would run it: the state's validation, model update, contact
detection, problem assembly, the solve and its certificate (the desired accelerations and tracking
errors are the daemon's own, so they are not validated again). Scenarios:

* a robot's name (``quadruped``, ``solo12``, ...; ``solo12+estimated`` with the controller's estimated contacts,
  :mod:`idcontrol.contacts.stance`): the robot standing on its feet, in two rows per formulation:
  ``still``, the same state every tick, as the TSID reference times Solo12 (base 0.24 m, legs ±0.8/∓1.6 rad), and
  ``sway``, the joint angles swayed from tick to tick by up to :data:`SWAY_RAD` at rest, so that warm starts see
  problems that differ (the feet then move by micrometres with v = 0, and the formulations correct the gaps this
  opens or closes);
* ``fig19``: the paper's Fig. 19, the quadruped (swayed) with the contacts at each foot
  multiplied (4, 8, 16, 32, 64, 128 contacts in all);
* ``transport``: the floor under any round trip on this machine: a quadruped
  state sent over loopback ZeroMQ to a second process that decodes it and
  answers with a command (the daemon's codec, no controller), at 1 kHz;
* ``trot``, ``grasp``, ``trot_hw``: recorded closed-loop workloads (the quadruped's trot, the arm holding its box,
  the quadruped's trot on typical sensors with estimated contacts, ``launch/trot_hw.toml``),
  replayed through the whole control core of each formulation (:mod:`idcontrol.tools.workloads`);
* ``gap``: the trot workload through the two-stage QP's core, back to back, with 0.5 ms between ticks
  (sleeping, spinning on the clock, or ticking a shadow core as a daemon with ``[realtime] warm`` does), as a
  daemon waits for its next state, and with 1 MB written between
  ticks (other work polluting the caches): what the wait and the work between ticks cost the tick;
* ``coupling``: the contact-coupling diagnostic (:mod:`idcontrol.contacts.coupling`) alone, on the states of a
  recorded quadruped trot (MuJoCo, the trot launch file);
* ``rigid_sim``: one step of the rigid-contact simulator (the bridge's side), the quadruped standing
  under the two-stage QP's torques on flat ground and on the 3 cm height map; only the step is timed.
* ``drake_sim``: one step of each simulator back end, Drake (SAP), MuJoCo and the rigid simulator, in the
  same run, the quadruped standing and trotting under the two-stage QP (``launch/quadruped_trot.toml``'s
  settings); the step and the state read-out (``state()``, sensed forces included) are timed apart.
* ``ess_sim``: the same for the ESS simulator (``bridge.kind = "ess"``) beside MuJoCo.
"""

from __future__ import annotations

import gc
import json
import platform
import subprocess
import sys
import time
from dataclasses import asdict, dataclass
from pathlib import Path

import numpy as np

from idcontrol import jsontext
from idcontrol.control.controller import InverseDynamicsController
from idcontrol.control.state import RobotState
from idcontrol.errors import IdControlError
from idcontrol.reference.base import Tracking
from idcontrol.robot.model import RobotModel

DEFAULT_FORMULATIONS = ("noslip_lcp", "coulomb_lcp", "two_stage_qp", "one_stage_qp", "pid")
#: the recorded closed-loop workloads (:mod:`idcontrol.tools.workloads`) and the formulations they time
WORKLOADS = ("trot", "grasp", "trot_hw")
WORKLOAD_FORMULATIONS = ("two_stage_qp", "coulomb_lcp", "noslip_lcp")
FIG19_CONTACTS = (4, 8, 16, 32, 64, 128)
#: the scenarios that are not a robot's name (a robot's name times it standing)
SPECIAL_SCENARIOS = (*WORKLOADS, "fig19", "gap", "transport", "coupling", "daemon", "rigid_sim", "drake_sim", "ess_sim")
#: a robot scenario's contact modes after its name and "+" (none: the paper's world contacts)
CONTACT_MODES = ("estimated",)


def robot_scenario(scenario: str) -> tuple[str, str]:
    """A robot scenario's robot (a name or a robot.toml path) and contacts (``"world"``, or a mode of
    :data:`CONTACT_MODES` after a "+": ``solo12+estimated``)."""
    robot, _, mode = scenario.partition("+")
    return robot, mode or "world"


#: Lemke's cost grows fast with contacts; beyond this the Coulomb LCP is skipped in Fig. 19.
COULOMB_MAX_CONTACTS = 8
#: rad: the largest change of a joint angle from the standing posture in a swayed row
SWAY_RAD = 1e-4


@dataclass
class BenchRow:
    robot: str
    formulation: str
    contacts: int
    ticks: int
    p50_us: float
    p99_us: float
    max_us: float
    cpu_p50_us: float  # the process's CPU time per tick: less sensitive than wall time to a loaded machine
    cpu_p99_us: float
    found_fraction: float
    model_us: float
    contacts_us: float
    build_us: float
    solve_us: float
    state: str = "sway"  # "still": the same state every tick; "sway": joint angles swayed by up to SWAY_RAD


def cpu_name() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def bench_scenario(
    robot: RobotModel,
    formulation: str,
    ticks: int,
    samples_per_contact: int = 1,
    row_budget_s: float = 30.0,
    sway_rad: float = SWAY_RAD,
    contacts: str = "world",
) -> BenchRow:
    """Time ``ticks`` whole controller ticks on the robot's standing posture, its joint angles swayed by up to
    ``sway_rad`` (rad, at rest; 0: the same state every tick).

    Rows whose ticks are slow (many contacts) run fewer ticks, so that one row
    takes about ``row_budget_s``; the row reports how many it ran.
    """
    controller = InverseDynamicsController(
        robot, formulation=formulation, samples_per_contact=samples_per_contact, contacts=contacts
    )
    q0 = robot.standing_configuration()
    q = q0.copy()
    v = np.zeros(robot.nv)
    joints_q = robot.actuated_idx_q
    nu = robot.nu
    qdd = np.zeros(nu)
    tracking = Tracking(np.zeros(nu), np.zeros(nu))
    objects = controller.initial_object_states()
    probe_start = time.perf_counter()
    for _ in range(5):
        controller.solve(RobotState(q=q, v=v, objects=objects), qdd, tracking)
    per_tick = (time.perf_counter() - probe_start) / 5
    ticks = int(max(50, min(ticks, row_budget_s / per_tick)))
    warmup = min(200, ticks // 5)
    total = np.empty(ticks)
    cpu = np.empty(ticks)
    phases = np.zeros(4)
    found = 0
    contacts = 0
    gc.collect()
    gc.freeze()
    for i in range(warmup + ticks):
        if sway_rad:
            q[joints_q] = q0[joints_q] + sway_rad * np.sin(0.05 * i + np.arange(nu))
        state = RobotState(q=q, v=v, objects=objects)
        cpu_start = time.process_time_ns()
        start = time.perf_counter()
        # as the daemon's core runs it: the state validated once; qdd and the tracking errors are its own
        result = controller.solve(controller.check_state(state), qdd, tracking, checked=True)
        elapsed = time.perf_counter() - start
        cpu_elapsed = time.process_time_ns() - cpu_start
        if i >= warmup:
            k = i - warmup
            total[k] = elapsed
            cpu[k] = cpu_elapsed
            t = result.timings
            phases += (t.get("model", 0.0), t.get("contacts", 0.0), t.get("build", 0.0), t.get("solve", 0.0))
            found += bool(result.found)
            contacts = result.contact_count
    gc.unfreeze()
    us = total * 1e6
    phases *= 1e6 / ticks
    return BenchRow(
        robot=robot.name,
        formulation=formulation,
        contacts=contacts,
        ticks=ticks,
        p50_us=round(float(np.percentile(us, 50)), 1),
        p99_us=round(float(np.percentile(us, 99)), 1),
        max_us=round(float(us.max()), 1),
        cpu_p50_us=round(float(np.percentile(cpu, 50)) / 1e3, 1),
        cpu_p99_us=round(float(np.percentile(cpu, 99)) / 1e3, 1),
        found_fraction=found / ticks,
        model_us=round(float(phases[0]), 1),
        contacts_us=round(float(phases[1]), 1),
        build_us=round(float(phases[2]), 1),
        solve_us=round(float(phases[3]), 1),
        state="sway" if sway_rad else "still",
    )


TRANSPORT_ECHO = """
import sys, zmq
from idcontrol import protocol as wire
shape = wire.RobotShape("quadruped", 19, 18, tuple(f"j{i}" for i in range(12)), ("LF", "RF", "LH", "RH"), ())
ctx = zmq.Context(); s = ctx.socket(zmq.ROUTER); s.bind(sys.argv[1]); print("ready", flush=True)
while True:
    peer, raw = s.recv_multipart()
    if raw == b"quit":
        break
    m = wire.decode_control(raw, shape)
    s.send_multipart([peer, wire.encode_command(m.seq, m.state.t, m.state.v[6:], "run")])
"""


def bench_transport(ticks: int, period: float = 1e-3) -> dict[str, float]:
    """Round trip state -> command through a second process over loopback TCP, µs, one per period."""
    import zmq

    from idcontrol import protocol as wire

    ctx = zmq.Context()
    client = ctx.socket(zmq.DEALER)
    client.setsockopt(zmq.LINGER, 0)
    port = client.bind_to_random_port("tcp://127.0.0.1")  # learn a free port, then hand it to the echo side
    client.unbind(f"tcp://127.0.0.1:{port}")
    endpoint = f"tcp://127.0.0.1:{port}"
    echo = subprocess.Popen([sys.executable, "-c", TRANSPORT_ECHO, endpoint], stdout=subprocess.PIPE, text=True)
    try:
        echo.stdout.readline()
        client.connect(endpoint)
        q, v, forces = np.zeros(19), np.zeros(18), np.zeros((4, 3))
        q[6] = 1.0
        rtt = np.empty(ticks)
        next_tick = time.perf_counter()
        for i in range(ticks + 100):
            started = time.perf_counter()
            client.send(wire.encode_state(i + 1, i * period, q, v, forces))
            if not client.poll(2000):
                raise IdControlError(f"the transport echo process did not answer (exit code {echo.poll()})")
            wire.decode_command(client.recv(), 12)
            if i >= 100:
                rtt[i - 100] = (time.perf_counter() - started) * 1e6
            next_tick += period
            time.sleep(max(0.0, next_tick - time.perf_counter()))
        client.send(b"quit")
    finally:
        echo.wait(timeout=10)
        client.close(linger=0)
        ctx.term()
    p50, p99, p999 = np.percentile(rtt, (50, 99, 99.9))
    return {
        "ticks": ticks,
        "p50_us": round(float(p50), 1),
        "p99_us": round(float(p99), 1),
        "p99_9_us": round(float(p999), 1),
        "max_us": round(float(rtt.max()), 1),
        "over_1ms": int(np.count_nonzero(rtt > 1000.0)),
    }


def bench_rigid_sim(ticks: int, terrain: str) -> dict[str, float]:
    """Time :meth:`RigidSim.step` (µs) over ``ticks`` steps of the quadruped standing under the two-stage QP."""
    from idcontrol.contacts.world import Environment
    from idcontrol.control.core import ControlCore
    from idcontrol.reference import make_reference
    from idcontrol.sim.rigid import RigidSim

    robot = RobotModel("quadruped")
    world = Environment.ground(1.0, terrain)
    sim = RigidSim(robot, environment=world)
    core = ControlCore(InverseDynamicsController(robot, world, "two_stage_qp"), make_reference("hold", robot))
    core.start(0.0)
    step_us = np.empty(ticks)
    warm = 0
    gc.collect()
    gc.freeze()
    for i in range(ticks + 100):
        s = sim.state()
        tau = core.tick(s.robot_state(), now=s.t).tau
        started = time.perf_counter()
        sim.step(tau)
        if i >= 100:
            step_us[i - 100] = (time.perf_counter() - started) * 1e6
            warm += sim.last_step is not None and sim.last_step.pivots == 0
    gc.unfreeze()
    p50, p99 = np.percentile(step_us, (50, 99))
    return {
        "ticks": ticks,
        "p50_us": round(float(p50), 1),
        "p99_us": round(float(p99), 1),
        "max_us": round(float(step_us.max()), 1),
        "warm_fraction": warm / ticks,
    }


SIM_BENCH_KINDS = ("drake", "mujoco", "rigid")
#: the simulators of ``--scenarios ess_sim``
ESS_BENCH_KINDS = ("ess", "mujoco")


def bench_sim_step(kind: str, task: str, ticks: int) -> dict[str, float]:
    """Time ``kind``'s :meth:`step` and :meth:`state` (µs) over ``ticks`` steps of the quadruped standing (``task``
    "stand") or trotting ("trot") under the two-stage QP with the trot launch file's settings."""
    from dataclasses import replace

    from idcontrol.control.factory import build_core
    from idcontrol.settings import ReferenceSettings, load_launch
    from idcontrol.sim.launch import simulator_for

    config = load_launch(Path(__file__).resolve().parents[2] / "launch" / "quadruped_trot.toml")
    config = config.with_overrides(formulation="two_stage_qp", bridge=kind)
    if task == "stand":
        config = replace(config, reference=ReferenceSettings("hold"))
    robot = RobotModel(config.robot)
    sim = simulator_for(config, robot)
    core = build_core(config, robot)
    core.start(0.0)
    step_us, state_us, cpu_us = np.empty(ticks), np.empty(ticks), np.empty(ticks)
    warm = 100
    gc.collect()
    gc.freeze()
    for i in range(ticks + warm):
        started = time.perf_counter()
        s = sim.state()
        read = time.perf_counter() - started
        tau = core.tick(s.robot_state(), now=s.t).tau
        cpu = time.process_time_ns()
        started = time.perf_counter()
        sim.step(tau)
        if i >= warm:
            step_us[i - warm] = (time.perf_counter() - started) * 1e6
            cpu_us[i - warm] = (time.process_time_ns() - cpu) * 1e-3
            state_us[i - warm] = read * 1e6
    gc.unfreeze()
    p50, p99 = np.percentile(step_us, (50, 99))
    return {
        "ticks": ticks,
        "p50_us": round(float(p50), 1),
        "p99_us": round(float(p99), 1),
        "max_us": round(float(step_us.max()), 1),
        "cpu_p50_us": round(float(np.median(cpu_us)), 1),
        "cpu_mean_us": round(float(cpu_us.mean()), 1),
        "state_p50_us": round(float(np.median(state_us)), 1),
        "state_p99_us": round(float(np.percentile(state_us, 99)), 1),
        "mode": core.mode,
    }


def bench_daemon(ticks: int, workload: str = "trot") -> dict[str, object]:
    """The daemon's own share of a tick (decode, send, telemetry and log record) around a real core: a daemon in
    a thread with telemetry (drained by a subscriber) and a log writer process, answering the recorded
    workload's states sent by a lock-step client in this process, ``ticks`` of them."""
    import tempfile
    import threading

    import zmq

    from idcontrol import protocol as wire
    from idcontrol.client import AdminClient
    from idcontrol.control.factory import build_core
    from idcontrol.daemon.server import Daemon
    from idcontrol.logs.recorder import LogRecorder, describe_run
    from idcontrol.settings import Endpoints
    from idcontrol.tools.workloads import record

    recording = record(workload)
    core = build_core(recording.config, recording.robot)
    with tempfile.TemporaryDirectory(prefix="idc-") as folder:
        ctx = zmq.Context()
        endpoints = Endpoints(f"ipc://{folder}/c", f"ipc://{folder}/a", f"ipc://{folder}/t")
        logger = LogRecorder(Path(folder) / "bench.mcap", describe_run(recording.config, core))
        daemon = Daemon(core, endpoints, context=ctx, logger=logger, lockstep_watchdog=5.0)
        server = threading.Thread(target=daemon.serve, kwargs={"install_signal_handlers": False})
        server.start()
        admin = AdminClient(daemon.bound["admin"], context=ctx, token=daemon.credential.token)
        subscriber = ctx.socket(zmq.SUB)
        subscriber.setsockopt(zmq.SUBSCRIBE, b"")
        subscriber.connect(daemon.bound["telemetry"])
        draining = threading.Event()

        def drain() -> None:
            while not draining.is_set():
                if subscriber.poll(20):
                    subscriber.recv()

        drainer = threading.Thread(target=drain)
        drainer.start()
        bridge = ctx.socket(zmq.DEALER)
        bridge.connect(daemon.bound["control"])
        try:
            admin.request("status", timeout=300.0)
            r = recording.robot
            bridge.send(wire.encode_hello(r.name, r.nq, r.nv, r.nu, "lockstep", daemon.credential.token))
            bridge.recv()
            admin.start()
            states = recording.states
            seq = 0
            for i in range(ticks):
                s = states[i % len(states)]
                seq += 1
                bridge.send(wire.encode_state(seq, s.t, s.q, s.v, s.sensed_forces, s.objects))
                bridge.recv()
                if i % len(states) == len(states) - 1 and i + 1 < ticks:  # the recording starts again: so does
                    admin.request("stop")  # the reference
                    while admin.request("status")["mode"] == "safe_stop":
                        seq += 1
                        bridge.send(wire.encode_state(seq, s.t, s.q, s.v, s.sensed_forces, s.objects))
                        bridge.recv()
                    admin.start()
            stats = admin.request("stats")
        finally:
            admin.request("shutdown")
            server.join(timeout=10)
            draining.set()
            drainer.join()
            for sock in (bridge, subscriber):
                sock.close(linger=0)
            admin.close()
            ctx.term()
    return {
        "ticks": stats["ticks"],
        "overhead_us": stats["overhead_us"],
        "phase_mean_us": stats["phase_mean_us"],
        "compute_us": stats["compute_us"],
    }


def bench_workload(name: str, formulations: list[str]) -> list:
    """Replay a recorded closed-loop workload (:mod:`idcontrol.tools.workloads`) through each formulation, with
    its launch file's options and with the paper's, and print one row each."""
    from idcontrol.tools.workloads import record, replay

    started = time.perf_counter()
    recording = record(name)
    low, high = recording.contact_counts
    print(
        f"{name}: {len(recording.states)} states recorded in lock-step MuJoCo with {recording.recorded_with} "
        f"({low}-{high} contacts) in {time.perf_counter() - started:.1f} s; each row replays them through the "
        "whole core tick (reference, PD, model, contacts, build, solve, fallback, safety, metrics)",
        flush=True,
    )
    print(
        f"{'workload':<8} {'formulation':<13} {'options':<7} {'p50 µs':>8} {'p99 µs':>8} {'max µs':>8} "
        f"{'cpu p50':>8} {'cpu p99':>8} {'found':>7} {'stops':>5}  {'model':>6} {'contact':>7} {'build':>6} "
        f"{'solve':>6} {'other':>6}"
    )
    rows = []
    for formulation in formulations:
        for variant in ("launch", "paper"):
            r = replay(recording, formulation, variant, repeats=2)
            rows.append(r)
            print(
                f"{r.workload:<8} {r.formulation:<13} {r.variant:<7} {r.p50_us:>8.1f} {r.p99_us:>8.1f} "
                f"{r.max_us:>8.1f} {r.cpu_p50_us:>8.1f} {r.cpu_p99_us:>8.1f} {r.found_fraction:>7.1%} {r.stops:>5}"
                f"  {r.model_us:>6.1f} {r.contacts_us:>7.1f} {r.build_us:>6.1f} {r.solve_us:>6.1f} "
                f"{r.other_us:>6.1f}",
                flush=True,
            )
    return rows


#: bytes the ``evict`` passes of :func:`bench_gap` write between ticks: twice an L2 cache of 512 KB
EVICT_BYTES = 1 << 20
_GAP_NOTES = {
    "sleep": " (0.5 ms asleep between ticks)",
    "spin": " (0.5 ms spinning between ticks)",
    "warm": " (0.5 ms ticking a shadow core between ticks, as the daemon's [realtime] warm)",
    "evict 1 MB": " (1 MB written between ticks, no wait)",
}


def bench_gap(gap_s: float = 5e-4) -> list[tuple[str, float, float]]:
    """The recorded trot through the two-stage QP's core tick: back to back, after ``gap_s`` s of sleep, after
    ``gap_s`` s of spinning on the clock, after ``gap_s`` s of ticking a shadow core on the last state
    (:class:`~idcontrol.daemon.warmth.TickWarmer`, then spinning to the end of the gap), and back to back with
    1 MB written between ticks (what other work between two ticks does to the caches, without waiting); the
    tick alone is timed: (label, p50 µs, p99 µs) each, the first 200 ticks of each pass left out, the passes
    interleaved twice."""
    from idcontrol.control.factory import build_core
    from idcontrol.daemon.warmth import TickWarmer
    from idcontrol.tools.workloads import record

    recording = record("trot")
    core = build_core(recording.config, recording.robot)
    core.warm_up()
    warmer = TickWarmer(build_core(recording.config, quiet=True))
    warmer.warm_up()
    states = recording.states

    def one_pass(wait: str) -> np.ndarray:
        core.reset()
        core.start(states[0].t)
        times = np.empty(len(states))
        for i, state in enumerate(states):
            if wait == "sleep":
                time.sleep(gap_s)
            elif wait in ("spin", "warm"):
                end = time.perf_counter() + gap_s
                if wait == "warm" and i:
                    warmer.observe(states[i - 1])
                    warmer.warm(None, core, end)
                while time.perf_counter() < end:
                    pass
            elif wait == "evict":
                np.add(scratch, 1.0, out=scratch)
            started = time.perf_counter()
            core.tick(state, now=state.t)
            times[i] = time.perf_counter() - started
            if core.mode != "run":
                core.reset()
                core.start(state.t)
        return times[200:] * 1e6

    gc.collect()
    gc.freeze()
    scratch = np.zeros(EVICT_BYTES // 8)
    passes = (("back to back", ""), ("sleep", "sleep"), ("spin", "spin"), ("warm", "warm"), ("evict 1 MB", "evict"))
    samples: dict[str, list[np.ndarray]] = {label: [] for label, _ in passes}
    for _ in range(2):
        for label, wait in passes:
            samples[label].append(one_pass(wait))
    gc.unfreeze()
    out = []
    for label, passes in samples.items():
        values = np.concatenate(passes)
        out.append((label, float(np.percentile(values, 50)), float(np.percentile(values, 99))))
    return out


def bench_coupling(ticks: int) -> dict[str, float]:
    """Time the contact-coupling diagnostic (:func:`~idcontrol.contacts.coupling.coupling_diagnostic`: both
    couplings, the touchdown times and the flag), µs a tick, on the states of ``ticks`` ticks of the quadruped's
    trot (``launch/quadruped_trot.toml`` in MuJoCo, recorded first, in process)."""
    from idcontrol.contacts.coupling import COUPLING_THRESHOLD, TOUCHDOWN_WINDOW, coupling_diagnostic, sphere_limbs
    from idcontrol.formulations.problem import index_array
    from idcontrol.settings import load_launch
    from idcontrol.testing.runners import run_in_process

    config = load_launch(Path(__file__).resolve().parents[2] / "launch" / "quadruped_trot.toml")
    robot = RobotModel(config.robot)
    states: list = []
    run_in_process(
        config,
        (ticks + 100) * config.controller.dt,
        robot=robot,
        until=lambda s: states.append((s.t, s.q, s.v)) and False,
    )
    controller = InverseDynamicsController(
        robot, formulation="two_stage_qp", activation_distance=config.controller.activation_distance
    )
    limbs = sphere_limbs(robot)
    since = np.full(len(robot.sphere_names), np.nan)
    wall = np.empty(len(states))
    free, held, flags, contacts = [], [], 0, []
    nu = robot.nu
    gc.collect()
    gc.freeze()
    for i, (t, q, v) in enumerate(states):
        problem, _ = controller.build_problem(RobotState(q=q, v=v), np.zeros(nu))
        sphere, N, M = controller.last_contacts.sphere, problem.N, problem.M
        u = index_array(problem.unactuated, problem.m)
        started = time.perf_counter()
        coupling, coupling_held, flag = coupling_diagnostic(
            N, M, u, sphere, limbs, since, t, TOUCHDOWN_WINDOW, COUPLING_THRESHOLD
        )
        wall[i] = time.perf_counter() - started
        if len(sphere) >= 2:
            free.append(coupling)
            held.append(coupling_held)
        flags += flag
        contacts.append(len(sphere))
    gc.unfreeze()
    wall = wall[100:] * 1e6
    p50, p99 = np.percentile(wall, (50, 99))
    return {
        "ticks": len(wall),
        "contacts_max": int(max(contacts)),
        "p50_us": round(float(p50), 2),
        "p99_us": round(float(p99), 2),
        "max_us": round(float(wall.max()), 1),
        "coupling_max": round(float(max(free, default=0.0)), 4),
        "coupling_held_median": round(float(np.median(held)) if held else 0.0, 4),
        "coupling_held_max": round(float(max(held, default=0.0)), 4),
        "coupled_touchdowns": int(flags),
    }


def run_tsid(python: str, script: str, ticks: int) -> dict | None:
    """Run the TSID reference benchmark (a separate interpreter) and return its JSON line."""
    try:
        out = subprocess.run([python, script, "--ticks", str(ticks)], capture_output=True, text=True, timeout=600)
    except (OSError, subprocess.TimeoutExpired) as e:
        print(f"TSID reference did not run: {e}", file=sys.stderr)
        return None
    if out.returncode != 0:
        print(f"TSID reference failed:\n{out.stderr[-2000:]}", file=sys.stderr)
        return None
    return json.loads(out.stdout.strip().splitlines()[-1])


#: The robot the TSID reference times (``../shared/bench/tsid_reference.py``).
TSID_ROBOT = "solo12"
#: TSID's p50 before and after the Solo12 rows differing by more than this fraction: the machine changed speed.
TSID_DRIFT = 0.15


def _print_tsid_ratios(refs: list[dict], rows: list[BenchRow]) -> None:
    """TSID's p50 / p99 (each run), and each formulation's Solo12 p50 over TSID's mean p50, with a warning when the
    runs disagree by more than :data:`TSID_DRIFT`."""
    if not refs:
        return
    p50s = [float(r["p50_us"]) for r in refs]
    where = " (before / after the Solo12 rows)" if len(refs) == 2 else ""
    print(
        f"TSID reference (same machine, same run; the same state every tick): p50 "
        f"{' / '.join(f'{p:.1f}' for p in p50s)} µs, p99 {' / '.join(str(r['p99_us']) for r in refs)} µs"
        f"{where}"
    )
    if max(p50s) > (1.0 + TSID_DRIFT) * min(p50s):
        print(
            f"  the machine's speed changed during the rows (TSID's p50 moved by more than {TSID_DRIFT:.0%}): "
            "the ratios below are not to be trusted; run again"
        )
    reference = float(np.mean(p50s))
    ratios: dict[str, dict[str, float]] = {}
    for row in rows:
        if row.robot == TSID_ROBOT:
            ratios.setdefault(row.formulation, {})[row.state] = row.p50_us / reference
    for formulation, ratio in ratios.items():
        swayed = f" (swayed: {ratio['sway']:.2f})" if "sway" in ratio else ""
        print(f"  {TSID_ROBOT} {formulation}: p50 ratio to TSID = {ratio.get('still', float('nan')):.2f}{swayed}")


def run(
    scenarios: list[str],
    formulations: list[str],
    ticks: int,
    fig19_contacts: list[int],
    json_path: str | None,
    tsid: tuple[str, str] | None,
) -> list[BenchRow]:
    rows: list[BenchRow] = []
    header = (
        f"{'robot':<16} {'formulation':<13} {'contacts':>8} {'p50 µs':>8} {'p99 µs':>8} {'max µs':>8} "
        f"{'cpu p50':>8} {'cpu p99':>8} {'found':>6}  {'model':>6} {'contact':>7} {'build':>6} "
        f"{'solve':>6}"
    )
    print(
        f"idcontrol bench on {cpu_name()} ({platform.python_implementation()} {platform.python_version()}), "
        f"{ticks} ticks per row, whole-tick wall times (cpu: the process's CPU time); phases are means in µs",
        file=sys.stderr,
    )
    print(header)

    def emit(row: BenchRow) -> None:
        rows.append(row)
        where = f"{row.robot} {row.state}"
        print(
            f"{where:<16} {row.formulation:<13} {row.contacts:>8} {row.p50_us:>8.1f} {row.p99_us:>8.1f} "
            f"{row.max_us:>8.1f} {row.cpu_p50_us:>8.1f} {row.cpu_p99_us:>8.1f} {row.found_fraction:>6.1%}  "
            f"{row.model_us:>6.1f} {row.contacts_us:>7.1f} {row.build_us:>6.1f} {row.solve_us:>6.1f}",
            flush=True,
        )

    workload_rows: list = []
    tsid_runs: list[dict | None] = []
    for scenario in scenarios:
        if scenario in WORKLOADS:
            workload_rows += bench_workload(scenario, [f for f in formulations if f in WORKLOAD_FORMULATIONS])
            continue
        if scenario == "daemon":
            t = bench_daemon(ticks)
            o, m = t["overhead_us"], t["phase_mean_us"]
            print(
                f"daemon     the daemon's own share of a trot tick (decode + send + telemetry and log record), "
                f"{t['ticks']} ticks: p50 {o['p50']} p99 {o['p99']} max {o['max']} µs; means: decode "
                f"{m.get('decode')}, core tick {m.get('core_tick')}, send {m.get('send')}, publish "
                f"{m.get('publish')} µs",
                flush=True,
            )
            continue
        if scenario == "gap":
            for label, p50, p99 in bench_gap():
                print(
                    f"gap        trot core tick (two_stage_qp), {label:<12}: p50 {p50:.1f} p99 {p99:.1f} µs"
                    + _GAP_NOTES.get(label, ""),
                    flush=True,
                )
            continue
        if scenario == "transport":
            t = bench_transport(ticks)
            print(
                f"transport  state->command round trip over loopback ZeroMQ, {t['ticks']} at 1 kHz: "
                f"p50 {t['p50_us']} p99 {t['p99_us']} p99.9 {t['p99_9_us']} max {t['max_us']} µs; "
                f"{t['over_1ms']} over 1 ms",
                flush=True,
            )
            continue
        if scenario == "coupling":
            t = bench_coupling(ticks)
            print(
                f"coupling   coupling_diagnostic on {t['ticks']} quadruped trot ticks (MuJoCo, up to "
                f"{t['contacts_max']} contacts): p50 {t['p50_us']} p99 {t['p99_us']} max {t['max_us']} µs; "
                f"coupling (joints free) max {t['coupling_max']}, held median {t['coupling_held_median']} max "
                f"{t['coupling_held_max']}; {t['coupled_touchdowns']} coupled touchdowns flagged",
                flush=True,
            )
            continue
        if scenario == "rigid_sim":
            for terrain in ("flat", "height_map"):
                t = bench_rigid_sim(ticks, terrain)
                print(
                    f"rigid_sim  quadruped standing ({terrain}), one simulator step, {t['ticks']} steps: "
                    f"p50 {t['p50_us']} p99 {t['p99_us']} max {t['max_us']} µs; "
                    f"{t['warm_fraction']:.1%} solved from the previous active set",
                    flush=True,
                )
            continue
        if scenario in ("drake_sim", "ess_sim"):
            for task in ("stand", "trot"):
                for kind in SIM_BENCH_KINDS if scenario == "drake_sim" else ESS_BENCH_KINDS:
                    t = bench_sim_step(kind, task, ticks)
                    print(
                        f"{kind + '_sim':<11}quadruped {task:<5} (two_stage_qp), one step, {t['ticks']} steps: "
                        f"p50 {t['p50_us']} p99 {t['p99_us']} max {t['max_us']} µs (CPU p50 {t['cpu_p50_us']}, "
                        f"mean {t['cpu_mean_us']} µs); state() p50 "
                        f"{t['state_p50_us']} p99 {t['state_p99_us']} µs; ended in {t['mode']}",
                        flush=True,
                    )
            continue
        if scenario == "fig19":
            robot = RobotModel("quadruped")
            for total in fig19_contacts:
                per_foot = max(1, total // len(robot.sphere_names))
                for f in formulations:
                    if f in ("pid", "sensed_id"):
                        continue
                    if f == "coulomb_lcp" and total > COULOMB_MAX_CONTACTS:
                        continue
                    emit(bench_scenario(robot, f, ticks, samples_per_contact=per_foot))
            continue
        name, contacts = robot_scenario(scenario)
        try:
            robot = RobotModel(name)
        except IdControlError as e:
            print(f"skipping {scenario}: {e}", file=sys.stderr)
            continue
        # TSID times Solo12 right before and right after Solo12's rows: the machine's speed drifts within minutes
        beside_tsid = tsid is not None and robot.name == TSID_ROBOT
        if beside_tsid:
            tsid_runs.append(run_tsid(tsid[0], tsid[1], ticks))
        for f in formulations:
            for sway_rad in (0.0, SWAY_RAD):
                emit(bench_scenario(robot, f, ticks, sway_rad=sway_rad, contacts=contacts))
        if beside_tsid:
            tsid_runs.append(run_tsid(tsid[0], tsid[1], ticks))
    if tsid is not None:
        if not tsid_runs:
            tsid_runs.append(run_tsid(tsid[0], tsid[1], ticks))
        _print_tsid_ratios([r for r in tsid_runs if r is not None], rows)
    if json_path:
        payload = [{**asdict(r), "cpu": cpu_name()} for r in rows + workload_rows]
        text = jsontext.dumps(payload, indent=1)
        if json_path == "-":
            print(text)
        else:
            Path(json_path).write_text(text + "\n")
            print(f"wrote {json_path}", file=sys.stderr)
    return rows
