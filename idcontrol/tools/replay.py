"""``idcontrol replay``: run a log's states through the controller core again and compare.

The core is rebuilt from the configuration recorded in the log (launch file text, formulation
and options, gains), warmed up exactly as the daemon does before its first tick, and then given
every logged state in order, with the logged admin changes (start, stop, set_formulation,
set_gains, set_reference) applied between the same ticks and the daemon's clock of each tick.
With the logged formulation, a lock-step simulation log reproduces the logged torques (to
rounding; the solvers are deterministic). With ``--formulation NAME`` every tick is solved by NAME
instead, and the differences show what that formulation would have commanded in the same states.

``--to-sim mujoco`` instead drives the simulator open-loop with the logged torques, from the
first logged state, and reports how far the simulated motion drifts from the logged one.
"""

from __future__ import annotations

import argparse
import math
import sys
import tomllib
from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path
from typing import Any

import numpy as np

from idcontrol import jsontext
from idcontrol.contacts.world import ObjectState
from idcontrol.control.core import ControlCore
from idcontrol.control.state import RobotState
from idcontrol.errors import IdControlError, LogError
from idcontrol.logs.reader import TickLog, read_log

STEPPING_MODES = ("run", "safe_stop")  # a bridge steps its simulator only on these commands
RESIDUALS = ("dynamics", "tracking", "penetration", "complementarity", "friction", "slip")


def rebuild_core(log: TickLog, formulation: str | None = None) -> ControlCore:
    """The daemon's core as the log describes it, warmed up like ``Daemon.serve`` does.

    The launch file's text is read as the daemon read it, its relative paths anchored beside the file as it was
    (which need not exist any more), and the robot is the one that ran (``launch --robot`` overrides the file's)."""
    from idcontrol.control.factory import build_core
    from idcontrol.settings import parse_launch

    cfg = log.config
    if "launch_toml" not in cfg:
        raise LogError(f"{log.path}: the log holds no launch file; it cannot be replayed")
    try:
        data = tomllib.loads(cfg["launch_toml"])
    except tomllib.TOMLDecodeError as e:
        raise LogError(f"{log.path}: the logged launch file is not valid TOML: {e}") from None
    if isinstance(cfg.get("robot"), str) and cfg["robot"]:
        data["robot"] = cfg["robot"]
    config = parse_launch(data, Path(cfg.get("launch_file", "launch.toml")).absolute())
    c = config.controller
    name = formulation or cfg["formulation"]
    options = cfg.get("formulation_options", c.options) if name == cfg["formulation"] else {}
    config = replace(config, controller=replace(c, formulation=name, options=options))
    core = build_core(config)
    gains = cfg.get("gains")
    if gains:
        core.set_gains(**gains)
    core.warm_up()
    return core


def logged_state(tick: dict[str, Any]) -> RobotState:
    """The state a tick answered, from its log record."""
    sensed = tick.get("sensed_forces")
    objects = {
        name: ObjectState(**{k: np.asarray(v, dtype=float) for k, v in pose.items()})
        for name, pose in (tick.get("objects") or {}).items()
    }
    return RobotState(
        q=np.array(tick["q"], dtype=float),  # fresh, writable arrays, as the wire decoder gives
        v=np.array(tick["qd"], dtype=float),
        t=float(tick["t"]),
        objects=objects,
        sensed_forces=None if sensed is None else np.array(sensed, dtype=float).reshape(-1, 3),
    )


def apply_event(core: ControlCore, event: dict[str, Any], keep_formulation: bool) -> None:
    """Apply one logged admin change or stop to the core, as the daemon did."""
    kind, now = event.get("kind"), float(event.get("now", 0.0))
    if kind == "start":
        core.start(now)
    elif kind == "stop":
        core.stop(str(event.get("reason", "stop requested")), now)
    elif kind == "set_formulation" and not keep_formulation:
        core.set_formulation(event["name"], event.get("options") or {})
    elif kind == "set_gains":
        core.set_gains(event.get("kp"), event.get("kd"), event.get("ki"))
    elif kind == "set_reference":
        from idcontrol.reference import make_reference

        options = event.get("options") or {}
        if core.mode in ("run", "safe_stop"):
            core.reference.update(**options)  # in place, as the daemon does while running
        else:
            core.reference = make_reference(event["name"], core.robot, **options)


def _progress(done: int, total: int, stream=sys.stderr) -> None:
    width = 30
    filled = width * done // max(total, 1)
    stream.write(f"\rreplay [{'#' * filled}{'.' * (width - filled)}] {done}/{total} ticks")
    if done >= total:
        stream.write("\n")
    stream.flush()


def replay(
    log: TickLog,
    formulation: str | None = None,
    t_from: float | None = None,
    t_to: float | None = None,
    progress: bool = False,
) -> dict[str, Any]:
    """Replay ``log`` (see the module docstring) and compare the ticks whose bridge time is in [t_from, t_to].

    Every tick from the start is replayed (so that warm starts and the reference's state match);
    only those in the window are compared. Returns plain values: ``ticks`` (compared),
    ``formulation``, ``tau_max_abs_diff``, ``tau_rms_diff`` (N·m), ``force_max_abs_diff`` (N, over
    ticks whose contacts match), per-joint maxima, mismatch counts and the replayed solves' worst
    residuals.
    """
    if not len(log):
        raise LogError(f"{log.path} holds no ticks to replay")
    core = rebuild_core(log, formulation)
    events = sorted(log.events, key=lambda e: int(e.get("tick", 0)))  # stable: same-tick events keep their order
    next_event = 0
    lo = -math.inf if t_from is None else t_from
    hi = math.inf if t_to is None else t_to
    if math.isnan(lo) or math.isnan(hi) or lo > hi:
        raise LogError(f"the replay window [{t_from}, {t_to}] s is empty or not a window of times")
    nu = core.robot.nu
    tau_sq, tau_max = 0.0, np.zeros(nu)
    force_max, force_sq, force_n = 0.0, 0.0, 0
    compared = contact_mismatch = mode_mismatch = 0
    residual_max = dict.fromkeys(RESIDUALS, 0.0)
    formulations: dict[str, int] = {}
    total = len(log)
    step = max(total // 100, 1)
    for i in range(total):
        tick = log.tick(i)
        if tick["t"] > hi:
            break
        index = i if tick["index"] is None else tick["index"]
        while next_event < len(events) and int(events[next_event].get("tick", 0)) <= index:
            e = events[next_event]
            next_event += 1
            try:
                apply_event(core, e, keep_formulation=formulation is not None)
            except IdControlError as err:
                raise LogError(f"replay: the logged {e.get('kind')} before tick {index} failed: {err}") from None
        out = core.tick(logged_state(tick), float(tick["now"]), bridge_stopped=bool(tick.get("bridge_stopped")))
        if progress and (i % step == 0 or i == total - 1):
            _progress(i + 1, total)
        if tick["t"] < lo:
            continue
        compared += 1
        mode_mismatch += out.mode != tick["mode"]
        diff = np.abs(out.tau - np.asarray(tick["tau"], dtype=float))
        tau_max = np.maximum(tau_max, diff)
        tau_sq += float(diff @ diff)
        if out.result is None:
            continue
        name = core.controller.formulation.name
        formulations[name] = formulations.get(name, 0) + 1
        for key in RESIDUALS:
            residual_max[key] = max(residual_max[key], getattr(out.result.residuals, key))
        logged_force = tick["force_world"].reshape(-1, 3)
        replayed = out.result.force_in_world
        if replayed is None:
            continue
        if logged_force.shape != replayed.shape:
            contact_mismatch += 1
            continue
        d = np.abs(replayed - logged_force)
        force_max = max(force_max, float(np.nanmax(d, initial=0.0)))
        force_sq += float(np.nansum(d * d))
        force_n += d.size
    if progress:
        _progress(total, total)
    if not compared:  # nothing compared is no match: say so rather than print zero differences
        t = log.array("t")
        raise LogError(
            f"no tick of {log.path} lies in the replay window [{t_from}, {t_to}] s (the log runs from "
            f"{float(np.nanmin(t)):.3f} to {float(np.nanmax(t)):.3f} s)"
        )
    return {
        "ticks": compared,
        "formulation": formulation or log.config.get("formulation"),
        "formulations_replayed": formulations,
        "logged_formulations": sorted(set(log.array("formulation").tolist())),
        "tau_max_abs_diff": float(tau_max.max(initial=0.0)),
        "tau_rms_diff": math.sqrt(tau_sq / max(compared * nu, 1)),
        "tau_max_abs_diff_per_joint": dict(zip(log.config.get("joint_names", []), tau_max.tolist(), strict=False)),
        "force_max_abs_diff": force_max,
        "force_rms_diff": math.sqrt(force_sq / force_n) if force_n else 0.0,
        "contact_mismatch_ticks": contact_mismatch,
        "mode_mismatch_ticks": mode_mismatch,
        "residual_max": residual_max,
        "t_from": t_from,
        "t_to": t_to,
        # replay matches the run only when it saw every state from the first one
        "from_start": log.segment == 0 and not int(np.nanmax(log.array("log_dropped"), initial=0)),
    }


def _windowed(log: TickLog, t_from: float | None, t_to: float | None) -> Iterator[dict[str, Any]]:
    for i in range(len(log)):
        tick = log.tick(i)
        if (t_from is None or tick["t"] >= t_from) and (t_to is None or tick["t"] <= t_to):
            yield tick


def replay_to_sim(log: TickLog, t_from: float | None = None, t_to: float | None = None) -> dict[str, Any]:
    """Drive MuJoCo open-loop with the logged torques from the first run-mode state of the window.

    Returns how far the simulated configuration drifts from the logged one: the largest joint
    position error (rad) and the base position error at the end (m), over ``ticks`` commands.
    """
    from idcontrol.robot.model import RobotModel
    from idcontrol.sim.mujoco import MujocoSim

    cfg = log.config
    ticks = [t for t in _windowed(log, t_from, t_to) if t["mode"] in STEPPING_MODES]
    if len(ticks) < 2:
        raise LogError(f"{log.path}: fewer than two ticks in the window; nothing to simulate")
    robot = RobotModel(cfg["robot"])
    bridge = cfg.get("bridge", {})
    substeps = int(bridge.get("substeps", 1))
    sim = MujocoSim(
        robot,
        mu=float(bridge.get("mu", 1.0)),
        timestep=log.dt / substeps,
        with_objects=bool(cfg.get("object_names")),
        object_mu=float(bridge.get("mu", 1.0)),
    )
    first = logged_state(ticks[0])
    sim.reset(first.q, first.v, first.objects or None)
    joints = slice(7, None) if robot.floating_base else slice(None)
    joint_err = base_err = 0.0
    steps = 0
    for tick, following in zip(ticks, ticks[1:], strict=False):
        if following["seq"] != tick["seq"] + 1:
            break  # the bridge held still (idle, stopped) in between: the logged motion is not one stream
        tau = np.asarray(tick["tau"], dtype=float)
        for _ in range(substeps):
            sim.step(tau)
        steps += 1
        q_sim, q_log = sim.state().q, np.asarray(following["q"], dtype=float)
        joint_err = max(joint_err, float(np.abs(q_sim[joints] - q_log[joints]).max(initial=0.0)))
        if robot.floating_base:
            base_err = float(np.linalg.norm(q_sim[:3] - q_log[:3]))
    return {
        "ticks": steps,
        "simulator": "mujoco",
        "joint_position_max_abs_err_rad": joint_err,
        "base_position_err_end_m": base_err,
        "fell": bool(robot.floating_base and sim.fell(0.5 * robot.standing_configuration()[2])),
    }


def format_report(report: dict[str, Any]) -> str:
    rows = [(k, v) for k, v in report.items() if not isinstance(v, dict)]
    for key in ("formulations_replayed", "residual_max", "tau_max_abs_diff_per_joint"):
        for k, v in report.get(key, {}).items():
            rows.append((f"{key}.{k}", v))
    fmt = [(k, f"{v:.3e}" if isinstance(v, float) else str(v)) for k, v in rows]
    return "\n".join(f"{k:<40} {v}" for k, v in fmt)


def replay_command(args: argparse.Namespace) -> int:
    log = read_log(args.log)
    if log.truncated:
        print(f"idcontrol: warning: {log.truncated}", file=sys.stderr)
    if args.to_sim:
        if args.formulation:
            raise LogError("--to-sim replays the logged torques; it takes no --formulation")
        report = replay_to_sim(log, args.t_from, args.t_to)
    else:
        progress = not args.quiet and sys.stderr.isatty()
        report = replay(log, args.formulation, args.t_from, args.t_to, progress=progress)
    print(jsontext.dumps(report) if args.json else format_report(report))
    return 0
