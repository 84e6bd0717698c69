"""The ``idcontrol`` command line."""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path

from idcontrol.errors import IdControlError  # (no numpy import behind it)

# The tick works on matrices of at most a few hundred entries: BLAS threads only add jitter on a
# 2-core machine shared with the bridge. Set before numpy is first imported.
for _var in ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS", "MKL_NUM_THREADS"):
    os.environ.setdefault(_var, "1")


def _csv(text: str) -> list[str]:
    return [t for t in text.split(",") if t]


def _compile(args: argparse.Namespace) -> int:
    from idcontrol.compile import main as compile_main

    return compile_main(args.jobs)


def _bench(args: argparse.Namespace) -> int:
    from idcontrol.formulations import available_formulations
    from idcontrol.tools.bench import DEFAULT_FORMULATIONS, FIG19_CONTACTS, run

    formulations = _csv(args.formulations) if args.formulations else list(DEFAULT_FORMULATIONS)
    unknown = [f for f in formulations if f not in available_formulations()]
    if unknown:
        print(f"unknown formulation(s) {unknown}; available: {available_formulations()}", file=sys.stderr)
        return 2
    try:
        contacts = [_positive_int(c) for c in _csv(args.contacts)] if args.contacts else list(FIG19_CONTACTS)
    except argparse.ArgumentTypeError as e:
        print(f"--contacts: {e} (a comma list of total contact counts > 0)", file=sys.stderr)
        return 2
    from idcontrol.robot.config import available_robots
    from idcontrol.tools.bench import CONTACT_MODES, SPECIAL_SCENARIOS, robot_scenario

    scenarios = _csv(args.scenarios)

    def known(scenario: str) -> bool:
        if scenario in SPECIAL_SCENARIOS:
            return True
        robot, contacts = robot_scenario(scenario)
        mode_known = "+" not in scenario or contacts in CONTACT_MODES
        return mode_known and (robot in available_robots() or Path(robot).exists())

    unknown = [x for x in scenarios if not known(x)]
    if unknown:
        print(
            f"unknown scenario(s) {unknown}; available: {', '.join(SPECIAL_SCENARIOS)}, or a robot: "
            f"{', '.join(available_robots())} (or a robot.toml path), a robot with +estimated for the controller's "
            "estimated contacts (solo12+estimated)",
            file=sys.stderr,
        )
        return 2
    if bool(args.tsid_python) != bool(args.tsid_script):
        print(
            "--tsid-python and --tsid-script go together: a TSID venv's python and the TSID reference script "
            "it runs (it prints one JSON line of p50/p99 µs for Solo12 standing)",
            file=sys.stderr,
        )
        return 2
    tsid = (args.tsid_python, args.tsid_script) if args.tsid_python else None
    run(scenarios, formulations, args.ticks, contacts, args.json, tsid)
    return 0


def _experiment(args: argparse.Namespace) -> int:
    from idcontrol.tools.experiments.cli import run_paper

    return run_paper(args)


def _experiment_impacts(args: argparse.Namespace) -> int:
    from idcontrol.tools.experiments.impacts import run

    return run(args.samples, args.seed, args.json, args.plot)


def _experiment_estimator(args: argparse.Namespace) -> int:
    if args.closed_loop:
        from idcontrol.tools.estimator_eval import run_closed_loop

        return run_closed_loop(args.closed_loop, args.robot, args.formulation, args.seconds, args.json)
    from idcontrol.tools.estimator_eval import run

    return run(args.robot or "quadruped", args.formulation or "two_stage_qp", args.seconds, args.seed, args.json)


def _experiment_differentiability(args: argparse.Namespace) -> int:
    from idcontrol.tools.experiments.differentiability import run

    return run(args.json, args.plot, args.quick)


def _experiment_impact_order(args: argparse.Namespace) -> int:
    from idcontrol.tools.experiments.impact_order import run

    return run(args.seeds, args.workers, args.ray, args.output, args.report, args.json, not args.quiet, args.seconds)


def _sweep(args: argparse.Namespace) -> int:
    from idcontrol.tools.sweep.run import run_sweep
    from idcontrol.tools.sweep.spec import load_sweep

    sweep = load_sweep(args.spec, output=args.output, report=args.report)
    command = " ".join(
        ["idcontrol sweep", args.spec]
        + (["--workers", str(args.workers)] if args.workers > 1 else [])
        + (["--ray"] + ([] if args.ray == "local" else [args.ray]) if args.ray else [])
    )
    print(
        f"sweep {sweep.name}: {len(sweep.cells)} cells of {sweep.seconds:g} s, "
        + (f"Ray ({args.ray})" if args.ray else f"{args.workers} worker(s)"),
        file=sys.stderr,
        flush=True,
    )
    outcome = run_sweep(sweep, workers=args.workers, ray=args.ray, progress=not args.quiet, command=command)
    errors = sum(r.get("status") != "done" for r in outcome.rows)
    print(
        f"{len(outcome.rows)} cells ({outcome.ran} run now in {outcome.wall_s:.1f} s wall), {errors} with an "
        f"error; wrote {sweep.output} and {sweep.report}"
    )
    return 0 if errors == 0 else 1


def _add_sweep_parser(sub: argparse._SubParsersAction) -> None:
    sweep = sub.add_parser(
        "sweep",
        help="a grid of closed-loop runs (robot, formulation, simulator or terrain, seed, "
        "options) on a process pool or Ray; resumable",
    )
    sweep.add_argument("spec", help="the sweep's spec file (TOML; see docs/sweeps.md)")
    sweep.add_argument(
        "--workers",
        type=_positive_int,
        default=1,
        help="cells at a time, a process each (default 1); with --ray, the local instance's CPUs",
    )
    sweep.add_argument(
        "--ray",
        nargs="?",
        const="local",
        default=None,
        metavar="ADDRESS",
        help="run the cells as Ray tasks: alone, a Ray instance started here; ADDRESS: a cluster's "
        "(auto, HOST:6379, ray://HOST:10001)",
    )
    sweep.add_argument(
        "--output", default=None, metavar="PATH", help="results (.json or .parquet; default: the spec's)"
    )
    sweep.add_argument("--report", default=None, metavar="PATH", help="Markdown report (default: the spec's)")
    sweep.add_argument("--quiet", action="store_true", help="no progress bar")
    sweep.set_defaults(func=_sweep)


def _experiment_command(function: str) -> Callable[[argparse.Namespace], int]:
    """The command ``function`` of :mod:`idcontrol.tools.experiments.cli`, imported only when it runs."""

    def run(args: argparse.Namespace) -> int:
        from idcontrol.tools.experiments import cli

        return getattr(cli, function)(args)

    return run


def _add_experiment_parser(sub: argparse._SubParsersAction) -> None:
    experiment = sub.add_parser("experiment", help="reproduce a paper's experiments; run every robot (tables, JSON)")
    which = experiment.add_subparsers(dest="experiment", required=True)
    paper = which.add_parser("paper", help="Zapolsky & Drumwright, Sections 7-8: trot, grasp, Fig. 19 timing")
    paper.add_argument("--quick", action="store_true", help="short runs on the rigid terrains and one grasp (CI)")
    paper.add_argument("--json", default=None, metavar="PATH", help="write one object per run as a JSON array")
    paper.add_argument("--report", default=None, metavar="PATH", help="write the markdown report and its plots")
    paper.add_argument(
        "--only",
        default=None,
        metavar="SUBSTRING",
        help="runs whose name (experiment/terrain/controller) contains it; comma list: any of them",
    )
    paper.add_argument("--jobs", type=int, default=1, help="runs at a time, each in its own process (default 1)")
    paper.add_argument(
        "--ray",
        nargs="?",
        const="local",
        default=None,
        metavar="ADDRESS",
        help="run on Ray (the sweep engine): alone, a local instance with --jobs CPUs; or a cluster",
    )
    paper.add_argument(
        "--bench-ticks",
        type=int,
        default=None,
        help="ticks per Fig. 19 timing cell (default: 300, quick 0; 0 skips the timing)",
    )
    paper.set_defaults(func=_experiment)
    sap = which.add_parser(
        "sap",
        help="Castro, Permenter and Han: SAP's resting penetration and stiction slip, "
        "with Drake (needs idcontrol[drake])",
    )
    sap.add_argument("--json", default=None, metavar="PATH", help="write the checks as JSON")
    sap.add_argument("--seconds", type=float, default=1.0, help="simulated time of each check, s (default 1)")
    sap.set_defaults(func=_experiment_command("run_sap"))
    mismatch = which.add_parser(
        "mismatch",
        help="predicted against applied contact forces on the rigid, MuJoCo and "
        "Drake simulators (needs idcontrol[drake])",
    )
    mismatch.add_argument("--quick", action="store_true", help="short runs (CI)")
    mismatch.add_argument("--json", default=None, metavar="PATH", help="write one object per cell as a JSON array")
    mismatch.add_argument("--report", default=None, metavar="PATH", help="write the markdown report and its figures")
    mismatch.add_argument(
        "--only",
        default=None,
        metavar="SUBSTRING",
        help="cells whose name (task/simulator/formulation) contains it; a comma list: any",
    )
    mismatch.add_argument("--jobs", type=int, default=1, help="cells at a time, each in its own process (default 1)")
    mismatch.set_defaults(func=_experiment_command("run_mismatch"))
    robots = which.add_parser("robots", help="every robot x formulation: stand, trot, joint sinusoid (docs/robots.md)")
    robots.add_argument("--quick", action="store_true", help="2 s runs instead of 10 s (5 s for the arms)")
    robots.add_argument(
        "--only",
        default=None,
        metavar="SUBSTRING",
        help="runs whose name (task/robot/formulation) contains it; comma list: any",
    )
    robots.add_argument("--jobs", type=int, default=1, help="runs at a time, each in its own process (default 1)")
    robots.add_argument("--json", default=None, metavar="PATH", help="write every run's metrics as JSON")
    robots.add_argument(
        "--readme",
        default=None,
        metavar="PATH",
        help="rewrite the tables between the robots-table markers of this file",
    )
    robots.set_defaults(func=_experiment_command("run_robots"))
    hardware = which.add_parser(
        "hardware",
        help="the quadrupeds on typical sensors and actuators, flat and unknown "
        "ground; or the robustness margins of a sweep (docs/robustness.md)",
    )
    hardware.add_argument("--quick", action="store_true", help="3 s runs instead of 60 s standing, 20 s trotting")
    hardware.add_argument(
        "--only",
        default=None,
        metavar="SUBSTRING",
        help="runs whose name (task/robot/formulation) contains it; comma list: any",
    )
    hardware.add_argument("--jobs", type=int, default=1, help="runs at a time, each in its own process (default 1)")
    hardware.add_argument("--json", default=None, metavar="PATH", help="write every run's metrics as JSON")
    hardware.add_argument(
        "--margins",
        default=None,
        metavar="PATH",
        help="print the margins of a finished `idcontrol sweep sweeps/robustness.toml` instead",
    )
    hardware.set_defaults(func=_experiment_command("run_hardware"))
    ess = which.add_parser("ess", help="Anderson & Revzen, the ESS integrator: order test, hopper, cost per contact")
    ess.add_argument("--json", default=None, metavar="PATH", help="write the results as one JSON object")
    ess.add_argument("--quick", action="store_true", help="two eps, short hopper, three plate sizes (CI)")
    ess.add_argument("--conditions", type=int, default=None, help="plate initial conditions per size (default 30)")
    ess.add_argument(
        "--closed-loop",
        type=float,
        default=0.0,
        metavar="SECONDS",
        help="also stand and trot the quadruped this long on the ess back end (default 0: skip)",
    )
    ess.add_argument(
        "--engine",
        choices=("auto", "scipy"),
        default="auto",
        help="the ESS integrator's engine: compiled where it can be (auto), or the Python one on scipy "
        "and Pinocchio (to measure against)",
    )
    ess.set_defaults(func=_experiment_command("run_ess"))
    certificates = which.add_parser(
        "certificates",
        help="every formulation on perturbed stance states, each found answer checked independently with Pinocchio",
    )
    certificates.add_argument(
        "--robots",
        default="quadruped,solo12,a1",
        help="comma list of robot names or robot.toml paths (default quadruped,solo12,a1)",
    )
    certificates.add_argument("--states", type=_positive_int, default=200, help="states per robot (default 200)")
    certificates.add_argument("--seed", type=int, default=0, help="random seed of the states (default 0)")
    certificates.add_argument("--json", default=None, metavar="PATH", help="write the tallies as JSON")
    certificates.set_defaults(func=_experiment_command("run_certificates"))
    impacts = which.add_parser("impacts", help="Halm & Posa: the rocking block's set of post-impact velocities")
    impacts.add_argument("--samples", type=_positive_int, default=2**14, help="Algorithm 2's M (default 2^14)")
    impacts.add_argument("--seed", type=int, default=0, help="random seed of the impulse draws (default 0)")
    impacts.add_argument("--json", default=None, metavar="PATH", help="write the figures as JSON")
    impacts.add_argument("--plot", default=None, metavar="PNG", help="draw the set of outcomes")
    impacts.set_defaults(func=_experiment_impacts)
    estimator = which.add_parser(
        "estimator",
        help="the base estimator on a MuJoCo trot's truth: each filter with "
        "ideal and typical sensors, errors and cost per tick",
    )
    estimator.add_argument("--robot", default=None, help="a quadruped (default: the shipped one, or the launch file's)")
    estimator.add_argument(
        "--formulation", default=None, help="the trot's controller (default two_stage_qp, or the launch file's)"
    )
    estimator.add_argument(
        "--closed-loop",
        default=None,
        metavar="LAUNCH",
        help="instead: run LAUNCH (e.g. launch/trot_estimated.toml) with the estimator in the tick "
        "and judge it on the simulator's truth",
    )
    estimator.add_argument("--seconds", type=_positive_float, default=20.0, help="simulated s (default 20)")
    estimator.add_argument("--seed", type=int, default=7, help="the sensor errors' seed (default 7)")
    estimator.add_argument("--json", default=None, metavar="PATH", help="write the table as JSON")
    estimator.set_defaults(func=_experiment_estimator)
    diff = which.add_parser(
        "differentiability", help="Pace & Burden: left vs right derivatives through a simultaneous touchdown"
    )
    diff.add_argument("--json", default=None, metavar="PATH", help="write the gaps (and sweeps) as JSON")
    diff.add_argument("--plot", default=None, metavar="PNG", help="draw the gaps and the quadruped's sweeps")
    diff.add_argument("--quick", action="store_true", help="the quadruped with two_stage_qp and pid only, no sweep")
    diff.set_defaults(func=_experiment_differentiability)
    order = which.add_parser(
        "impact-order",
        help="the trot with sampled touchdown outcomes (Algorithm 1), per "
        "formulation over many seeds, on the sweep engine",
    )
    order.add_argument("--seeds", type=_positive_int, default=None, help="seeds per formulation (default: the spec's)")
    order.add_argument("--seconds", type=_positive_float, default=None, help="simulated s per run (default 3)")
    order.add_argument("--workers", type=_positive_int, default=1, help="runs at a time, a process each (default 1)")
    order.add_argument(
        "--ray",
        nargs="?",
        const="local",
        default=None,
        metavar="ADDRESS",
        help="run on Ray: alone, a local instance with --workers CPUs; or a cluster's address",
    )
    order.add_argument("--output", default=None, metavar="PATH", help="the sweep's results (default: the spec's)")
    order.add_argument(
        "--report",
        default="docs/impact_order.md",
        metavar="PATH",
        help="Markdown table (the plot beside it, .png; default docs/impact_order.md)",
    )
    order.add_argument("--json", default=None, metavar="PATH", help="also write the pooled table as JSON")
    order.add_argument("--quiet", action="store_true", help="no progress bar")
    order.set_defaults(func=_experiment_impact_order)


def _load(args: argparse.Namespace):
    from idcontrol.settings import load_launch

    return load_launch(args.launch_file).with_overrides(args.duration, args.formulation, args.bridge, args.robot)


def _overrides(args: argparse.Namespace) -> list[str]:
    out = []
    if args.duration is not None:
        out += ["--duration", str(args.duration)]
    if args.formulation is not None:
        out += ["--formulation", args.formulation]
    if args.bridge is not None:
        out += ["--bridge", args.bridge]
    if args.robot is not None:
        out += ["--robot", args.robot]
    return out


def _launch(args: argparse.Namespace) -> int:
    from idcontrol.compile import ensure_compiled
    from idcontrol.launcher import LiveView, launch
    from idcontrol.tools.live import connect_live, spawn_live

    summary = Path(args.summary_json).resolve() if args.summary_json else None
    if summary is not None and (not summary.parent.is_dir() or summary.is_dir()):  # said now, not after the run
        raise IdControlError(
            f"--summary-json {args.summary_json}: "
            + ("is a folder" if summary.is_dir() else f"no folder {summary.parent} to write it in")
        )
    ensure_compiled()  # before loading the launch file, whose formulation check imports the kernels
    config = _load(args)
    daemon_args = _log_args(args, config.robot)
    return launch(
        config,
        _overrides(args),
        args.summary_json,
        live=not args.quiet,
        daemon_args=daemon_args,
        driver=args.driver or None,
        foxglove=args.foxglove,
        viewer=LiveView(spawn_live, connect_live),
    )


def _log_args(args: argparse.Namespace, robot: str) -> list[str]:
    """``--log`` for the daemon: the given path, or a timestamped one under logs/ for a bare ``--log``."""
    if args.log is None:
        return []
    from idcontrol.errors import LogError
    from idcontrol.logs.recorder import default_log_path

    if not args.log:
        from idcontrol.robot.config import load_robot_config

        robot = load_robot_config(robot).name  # a path given with --robot names its robot file
    path = args.log or str(default_log_path(robot))
    if os.path.exists(path):
        raise LogError(f"log file {path} already exists; logs are never overwritten")
    return ["--log", path, "--log-max-mb", str(args.log_max_mb)]


def _daemon(args: argparse.Namespace) -> int:
    from idcontrol.compile import ensure_compiled

    ensure_compiled()  # a first start (a new container): in parallel, with progress, not silently in the import
    from idcontrol.daemon.app import run_daemon

    config = _load(args)
    log_path = _log_args(args, config.robot)[1] if args.log is not None else None
    return run_daemon(config, log_path, int(args.log_max_mb * (1 << 20)))


def _add_log_args(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "--log",
        nargs="?",
        const="",
        default=None,
        metavar="PATH",
        help="record every tick to an MCAP file (default name: logs/<robot>-<date>-<time>.mcap)",
    )
    p.add_argument(
        "--log-max-mb",
        type=_positive_float,
        default=1024.0,
        help="size of one log file before the next segment starts, MB (default 1024)",
    )


def _log_info(args: argparse.Namespace) -> int:
    from idcontrol.logs.reader import format_info, read_log

    print(format_info(read_log(args.log)))
    return 0


def _log_export(args: argparse.Namespace) -> int:
    if args.ros2:
        from idcontrol.ros2.bag import export_ros2  # the ros2 edge: needs mcap-ros2-support only

        print(export_ros2(args.log, args.output))
        return 0
    from idcontrol.logs.export import export

    out = export(args.log, args.format, args.output)
    print(f"wrote {out}")
    return 0


def _replay(args: argparse.Namespace) -> int:
    from idcontrol.tools.replay import replay_command

    return replay_command(args)


def _plot(args: argparse.Namespace) -> int:
    from idcontrol.tools.plot import plot_command

    return plot_command(args)


def _add_log_commands(sub: argparse._SubParsersAction) -> None:
    log = sub.add_parser("log", help="inspect or export a tick log")
    log_sub = log.add_subparsers(dest="log_command", required=True)
    info = log_sub.add_parser("info", help="duration, ticks, robot, formulations, deadline misses, fallbacks")
    info.add_argument("log", help="an MCAP log written by --log")
    info.set_defaults(func=_log_info)
    export = log_sub.add_parser("export", help="write the ticks as a table (csv, parquet) or arrays (npz)")
    export.add_argument("log", help="an MCAP log written by --log")
    export.add_argument("--format", choices=("csv", "parquet", "npz"), default="csv")
    export.add_argument("-o", "--output", default=None, help="output file (default: the log's name, new suffix)")
    export.add_argument(
        "--ros2", action="store_true", help="MCAP with ROS 2 message encodings (ros2 bag, Foxglove): the ros2 extra"
    )
    export.set_defaults(func=_log_export)
    replay = sub.add_parser("replay", help="run a log's states through the controller again and compare")
    replay.add_argument("log", help="an MCAP log written by --log")
    replay.add_argument("--formulation", default=None, help="replay with this formulation (default: as logged)")
    replay.add_argument("--from", dest="t_from", type=float, default=None, metavar="T", help="first bridge time, s")
    replay.add_argument("--to", dest="t_to", type=float, default=None, metavar="T", help="last bridge time, s")
    replay.add_argument("--json", action="store_true", help="print one JSON object instead of a table")
    replay.add_argument(
        "--to-sim",
        choices=("mujoco",),
        default=None,
        help="drive the simulator open-loop with the logged torques instead",
    )
    replay.add_argument("--quiet", action="store_true", help="no progress bar")
    replay.set_defaults(func=_replay)
    plot = sub.add_parser("plot", help="write PNG figures of a log (torques, forces, tracking, timing, estimate)")
    plot.add_argument("log", help="an MCAP log written by --log")
    plot.add_argument("-o", "--output", default=None, help="output directory (default: <log stem>_plots)")
    plot.add_argument(
        "--figure",
        action="append",
        choices=("torques", "contact_forces", "tracking", "timing", "coupling", "estimate"),
        default=None,
        help="only this figure (repeatable; default: every one the log has data for). estimate: the estimated base "
        "against the simulator's truth, with the errors printed",
    )
    plot.set_defaults(func=_plot)


def _bridge(args: argparse.Namespace) -> int:
    from idcontrol.bridges.app import run_bridge_process

    return run_bridge_process(_load(args), args.hello_timeout)


def _driver(args: argparse.Namespace) -> int:
    if args.action in ("unitree", "unitree-sim"):  # the Unitree SDK's extra, imported only when asked for
        from idcontrol.driver.unitree import app

        return app.run_driver(args) if args.action == "unitree" else app.run_simulator(args)
    from idcontrol.driver import files

    if args.mujoco_model:
        print(files.write_mujoco_model(*args.mujoco_model))
    for flag, where in (
        ("include", files.include_dir),
        ("cmake_dir", files.cmake_dir),
        ("example_dir", files.example_dir),
        ("mujoco_dir", files.mujoco_dir),
    ):
        if getattr(args, flag):
            print(where())
    return 0


def _live(args: argparse.Namespace) -> int:
    from idcontrol.tools.live import measure_tick_overhead, serve_live
    from idcontrol.tools.live_server import ViewerPolicy

    if args.measure:
        _print_overhead("live view", measure_tick_overhead(args.launch_file, args.segments, args.seconds))
        return 0
    config = _load(args)
    telemetry = config.telemetry
    if args.origin is not None or args.viewers is not None or args.no_programs:
        telemetry = replace(
            telemetry,
            foxglove_origins=tuple(args.origin) if args.origin is not None else telemetry.foxglove_origins,
            foxglove_viewers=args.viewers if args.viewers is not None else telemetry.foxglove_viewers,
            foxglove_programs=telemetry.foxglove_programs and not args.no_programs,
        )
    return serve_live(config, args.port, policy=ViewerPolicy.of(telemetry))


def _print_overhead(observer: str, result: dict) -> None:
    print(
        f"tick p99: {observer} off {result['p99_off_us']:.1f} µs, on {result['p99_on_us']:.1f} µs "
        f"(moved {result['p99_moved_us']:+.1f} µs; medians over the segments)"
    )
    interval = result["p99_shift_interval_us"]
    if interval is not None:
        print(
            f"paired with the off segments beside each on segment ({result['pairs']} pairs): moved "
            f"{result['p99_shift_us']:+.1f} µs, 95 % interval [{interval[0]:+.1f}, {interval[1]:+.1f}] µs"
        )


def _add_live_parser(sub: argparse._SubParsersAction) -> None:
    live = sub.add_parser("live", help="the live view: a Foxglove WebSocket server fed by a daemon's telemetry")
    _add_launch_args(live)
    live.add_argument("--port", type=int, default=8765, help="WebSocket port on 127.0.0.1 (default 8765)")
    live.add_argument(
        "--origin",
        action="append",
        metavar="ORIGIN",
        help="a browser origin the view serves, e.g. https://app.foxglove.dev (repeat for more; '*': any web page); "
        "replaces [telemetry] foxglove_origins",
    )
    live.add_argument("--viewers", type=_positive_int, help="viewers at once (default [telemetry] foxglove_viewers, 8)")
    live.add_argument(
        "--no-programs", action="store_true", help="refuse clients that send no Origin (programs, not browser pages)"
    )
    live.add_argument(
        "--measure",
        action="store_true",
        help="run the launch file and measure the daemon's tick p99 with the live view off and on",
    )
    live.add_argument("--segments", type=_positive_int, default=6, help="--measure: segments, alternating off/on")
    live.add_argument("--seconds", type=_positive_float, default=5.0, help="--measure: seconds per segment")
    live.set_defaults(func=_live)


def _ros2(args: argparse.Namespace) -> int:
    from idcontrol.ros2 import require_rclpy

    require_rclpy()  # ConfigError naming the extra, before anything else is loaded
    if args.measure:
        from idcontrol.tools.live import ProcessObserver, measure_tick_overhead

        node = ProcessObserver("ROS 2 node", [sys.executable, "-m", "idcontrol", "ros2", args.launch_file])
        result = measure_tick_overhead(args.launch_file, args.segments, args.seconds, observer=node)
        _print_overhead("ROS 2 node", result)
        return 0
    ros_args = [] if args.ros_args is None else ["--ros-args", *args.ros_args]
    if args.role == "node":
        from idcontrol.ros2.node import main as node_main

        return node_main(_load(args), ros_args)
    if args.role == "driver":
        from idcontrol.ros2.robot import main as driver_main

        return driver_main(_load(args), ros_args, args.endpoint, args.odometry)
    if args.role == "sim-robot":
        from idcontrol.ros2.sim_robot import main as sim_main

        return sim_main(_load(args), ros_args, args.rate)
    from idcontrol.robot.model import RobotModel
    from idcontrol.ros2.latency import main as latency_main

    return latency_main(args.rates, args.seconds, RobotModel(_load(args).robot).nu)


def _add_ros2_parser(sub: argparse._SubParsersAction) -> None:
    ros2 = sub.add_parser(
        "ros2",
        help="ROS 2: the daemon as a node, a ROS 2 robot as its driver (docs/ros2.md)",
        epilog="ROS arguments (remapping, parameters) follow --ros-args, as for any node; needs "
        "the ros2 extra: pip install 'idcontrol[ros2]'",
    )
    _add_launch_args(ros2)
    ros2.add_argument(
        "--role",
        choices=("node", "driver", "sim-robot", "latency"),
        default="node",
        help="node (default): the daemon's topics, services, parameters; driver: a ROS 2 robot's "
        "topics as the daemon's driver; sim-robot: a MuJoCo robot speaking those topics; latency: "
        "measure a ROS 2 round trip (LAUNCH_FILE names the robot's sizes)",
    )
    ros2.add_argument(
        "--measure",
        action="store_true",
        help="run the launch file and measure the daemon's tick p99 with the node off and on (alternating segments)",
    )
    ros2.add_argument("--segments", type=_positive_int, default=6, help="--measure: segments, alternating off/on")
    ros2.add_argument("--endpoint", default=None, help="driver: the daemon's control endpoint (default: the file's)")
    ros2.add_argument(
        "--odometry", action="store_true", help="driver: the robot publishes its base on odom (nav_msgs/Odometry)"
    )
    ros2.add_argument("--rate", type=_positive_float, default=None, help="sim-robot: Hz (default: the daemon's)")
    ros2.add_argument("--rates", default="1000,500,250", help="latency: comma list of rates, Hz")
    ros2.add_argument(
        "--seconds", type=_positive_float, default=5.0, help="latency: seconds per rate; --measure: per segment"
    )
    ros2.add_argument(
        "--ros-args",
        dest="ros_args",
        nargs=argparse.REMAINDER,
        default=None,
        help="the rest of the line goes to ROS, as for any node (-r FROM:=TO, -p NAME:=V)",
    )
    ros2.set_defaults(func=_ros2)


def _conformance(args: argparse.Namespace) -> int:
    from idcontrol.tools.conformance import run_conformance

    command = args.command[1:] if args.command[:1] == ["--"] else args.command
    return run_conformance(
        command, args.bridge_kind, args.json, args.priority, args.rate, args.state_form, workdir=args.workdir
    )


def _add_driver_parser(sub: argparse._SubParsersAction) -> None:
    conformance = sub.add_parser("conformance", help="check a robot driver against the protocol's obligations")
    conformance.add_argument(
        "--bridge-kind",
        choices=("mujoco", "rigid"),
        default="mujoco",
        help="[bridge] kind of the launch file {launch} names (for idcontrol bridge)",
    )
    conformance.add_argument("--json", default=None, metavar="PATH", help="also write the checks as JSON")
    conformance.add_argument(
        "--priority",
        type=int,
        default=0,
        help="SCHED_FIFO priority of the daemon and the driver (default 0: normal scheduling)",
    )
    conformance.add_argument(
        "--rate",
        type=_positive_float,
        default=1000.0,
        help="the daemon's control rate, Hz (default 1000; the driver takes it from welcome)",
    )
    conformance.add_argument(
        "--state-form",
        choices=("full", "sensors"),
        default="full",
        help="what the daemon expects in each state: full (the base pose and twist) or sensors (the joints and the "
        "IMU; the daemon estimates the base, and the IMU's obligations are checked too)",
    )
    conformance.add_argument(
        "--workdir",
        type=Path,
        default=None,
        metavar="DIR",
        help="keep the run's launch files and the daemon's and driver's output in DIR (default: a temporary folder, "
        "removed after the run); its sockets go in a private folder inside it",
    )
    conformance.add_argument(
        "command", nargs=argparse.REMAINDER, help="-- the driver's command; {endpoint} and {launch} are filled in"
    )
    conformance.set_defaults(func=_conformance)
    driver = sub.add_parser(
        "driver",
        help="the C++ driver client: include and CMake directories, the example; "
        "a vendor's robot (franka, unitree) and the Unitree simulator",
    )
    driver.add_argument("--include", action="store_true", help="print the include directory of idcontrol/driver.hpp")
    driver.add_argument("--cmake-dir", action="store_true", help="print the folder of idcontrol_driverConfig.cmake")
    driver.add_argument("--example-dir", action="store_true", help="print the C++ example driver's CMake project")
    driver.add_argument("--mujoco-dir", action="store_true", help="print the mujoco wheel's folder (headers, library)")
    driver.add_argument(
        "--mujoco-model",
        nargs=2,
        metavar=("LAUNCH_FILE", "OUT"),
        help="write the launch file's MuJoCo model (.mjb) for the C++ example",
    )
    driver.set_defaults(func=_driver, action=None)
    # argparse only: each vendor's SDK (its extra) is imported when its command runs
    from idcontrol.driver.franka import app as franka
    from idcontrol.driver.unitree import app as unitree

    actions = driver.add_subparsers(
        dest="action", required=False, metavar="{franka,unitree,unitree-sim}", help="a vendor's robot"
    )
    franka.add_parser(actions)
    unitree.add_driver_arguments(
        actions.add_parser(
            "unitree",
            help="drive a Unitree robot (Go2, B2; the humanoids' messages) over its low-level DDS topics "
            "(the [unitree] extra; docs/unitree.md)",
        )
    )
    unitree.add_simulator_arguments(
        actions.add_parser(
            "unitree-sim", help="a simulated Unitree robot on the same DDS topics, MuJoCo behind it (docs/unitree.md)"
        )
    )


def _keys(args: argparse.Namespace) -> int:
    from idcontrol.security import generate_keys

    keys = generate_keys(args.directory, tuple(_csv(args.clients)))
    print(f"wrote CURVE keys to {keys.path} (server, {args.clients}); authorized clients in {keys.authorized}")
    print(f'use them with: [security] curve_keys = "{keys.path}" in a launch file')
    return 0


def _positive_int(text: str) -> int:
    """An argparse type: an integer > 0 (argparse then exits with code 2 and says why)."""
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not an integer") from None
    if value <= 0:
        raise argparse.ArgumentTypeError(f"must be > 0, got {value}")
    return value


def _port(text: str) -> int:
    """An argparse type: a TCP port, 1 .. 65535."""
    value = _positive_int(text)
    if value > 65535:
        raise argparse.ArgumentTypeError(f"a TCP port is 1 .. 65535, got {value}")
    return value


def _finite_float(text: str, zero: bool) -> float:
    """``text`` as a finite number > 0 (>= 0 with ``zero``), else argparse's error saying so."""
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a number") from None
    if not (0.0 <= value if zero else 0.0 < value) or not value < float("inf"):
        raise argparse.ArgumentTypeError(f"must be a finite number {'>=' if zero else '>'} 0, got {text}")
    return value


def _duration(text: str) -> float:
    """An argparse type: a finite number of seconds >= 0 (0: no end)."""
    try:
        return _finite_float(text, zero=True)
    except argparse.ArgumentTypeError:
        raise argparse.ArgumentTypeError(
            f"a duration is a finite number of s >= 0 (0: until Ctrl-C), got {text}"
        ) from None


def _positive_float(text: str) -> float:
    """An argparse type: a finite number > 0."""
    return _finite_float(text, zero=False)


def _fuzz(args: argparse.Namespace) -> int:
    from idcontrol.tools.fuzz import main as fuzz_main

    return fuzz_main(args.messages, args.seed, args.robot, args.json)


def _flood(args: argparse.Namespace) -> int:
    from idcontrol.tools.flood import main as flood_main

    return flood_main(args.launch_file, args.kind, args.seconds, args.topics, args.connections)


def _soak(args: argparse.Namespace) -> int:
    from idcontrol.tools.soak import main as soak_main

    return soak_main(args.minutes, args.formulation, args.sample_s, args.json, args.priority)


def _add_reliability_commands(sub: argparse._SubParsersAction) -> None:
    """keys, fuzz, flood and soak: security and reliability tools."""
    keys = sub.add_parser("keys", help="ZeroMQ CURVE keys for endpoints beyond loopback")
    keys_sub = keys.add_subparsers(dest="keys_command", required=True)
    generate = keys_sub.add_parser("generate", help="write a new key directory (daemon and client key pairs)")
    generate.add_argument("directory", help="the directory to create (refuses to overwrite keys)")
    generate.add_argument("--clients", default="client", help="comma list of client key names (default: client)")
    generate.set_defaults(func=_keys)
    fuzz = sub.add_parser("fuzz", help="send malformed control messages to a real daemon; count crashes")
    fuzz.add_argument("--messages", type=_positive_int, default=100_000, help="messages to send (default 100000)")
    fuzz.add_argument("--seed", type=int, default=0, help="random seed (default 0)")
    fuzz.add_argument("--robot", default="quadruped", help="robot of the daemon (default quadruped)")
    fuzz.add_argument("--json", default=None, metavar="PATH", help="also write the report as JSON")
    fuzz.set_defaults(func=_fuzz)
    flood = sub.add_parser("flood", help="a stranger's traffic (no credential) at a launch file's running daemon")
    flood.add_argument("launch_file", help="the launch file of the running daemon (its endpoints)")
    flood.add_argument(
        "--kind",
        choices=("control", "reference", "subscriptions", "viewers"),
        required=True,
        help="states without a hello, references with a wrong credential, telemetry subscriptions, or live-view "
        "connections that never read",
    )
    flood.add_argument("--seconds", type=_positive_float, default=10.0, help="how long (default 10)")
    flood.add_argument(
        "--topics",
        type=_positive_int,
        default=200_000,
        help="distinct subscriptions per connection of a subscriptions flood (default 200000)",
    )
    flood.add_argument(
        "--connections",
        type=_positive_int,
        default=1000,
        help="live-view connections held open by a viewers flood (default 1000)",
    )
    flood.set_defaults(func=_flood)
    soak = sub.add_parser("soak", help="run the closed loop at 1 kHz in real time; RSS and deadlines over time")
    soak.add_argument("--minutes", type=_positive_float, default=10.0, help="how long (default 10)")
    soak.add_argument("--formulation", default="two_stage_qp", help="the daemon's formulation")
    soak.add_argument("--sample-s", type=_positive_float, default=10.0, help="seconds between samples (default 10)")
    soak.add_argument("--json", default=None, metavar="PATH", help="also write every sample as JSON")
    soak.add_argument(
        "--priority",
        type=int,
        default=50,
        help="SCHED_FIFO priority of daemon and bridge (default 50; 0: normal scheduling)",
    )
    soak.set_defaults(func=_soak)


def _robot_check(args: argparse.Namespace) -> int:
    from idcontrol.robot.init import infer_base
    from idcontrol.robot.preflight import check_path

    report = check_path(args.path, infer_base)  # a bare URDF's base judged as robot init judges it
    print(report.format())
    return 0 if report.ok else 1


def _robot_init(args: argparse.Namespace) -> int:
    from idcontrol.robot.init import init_robot

    result = init_robot(
        args.urdf,
        args.srdf,
        args.out,
        base=args.base,
        state=args.state,
        name=args.name,
        force=args.force,
        torque_limit=args.torque_limit,
    )
    print(f"wrote {result.path}")
    print("inferred:")
    for line in result.inferred:
        print(f"  {line}")
    print("could not infer (check these):" if result.not_inferred else "could not infer: nothing")
    for line in result.not_inferred:
        print(f"  {line}")
    for finding in result.report.warnings:
        print(f"preflight warning: {finding.where} {finding.field}: {finding.message}")
    if result.blockers:
        print("cannot hold its posture as written (edit the robot file, or give a posture with --srdf/--state):")
        for line in result.blockers:
            print(f"  {line}")
        print(f"not ready: fix {result.path}, then: idcontrol launch launch/stand.toml --robot {result.path.parent}")
        return 1
    print(f"next: idcontrol launch launch/stand.toml --robot {result.path.parent}")
    return 0


def _add_robot_commands(sub: argparse._SubParsersAction) -> None:
    """robot init and robot check: a robot file from a URDF; the preflight of a robot file or URDF."""
    robot = sub.add_parser("robot", help="write a robot file from a URDF; check a robot's URDF and robot file")
    robot_sub = robot.add_subparsers(dest="robot_command", required=True)
    init = robot_sub.add_parser("init", help="infer DIR/robot.toml from a URDF (and an SRDF) and say what it inferred")
    init.add_argument("urdf", help="the URDF: a path or share:<package>/<path> (a file an installed package ships)")
    init.add_argument("--srdf", default=None, help="an SRDF whose group state gives the standing posture")
    init.add_argument(
        "--state",
        default=None,
        help="the SRDF group state to stand in (default: standing, else one that sets the root joint)",
    )
    init.add_argument(
        "--out",
        default=None,
        metavar="DIR",
        help="the folder to write robot.toml to (default: ./<the URDF's robot name>)",
    )
    init.add_argument("--base", choices=("floating", "fixed"), default=None, help="override the inferred base")
    init.add_argument("--name", default=None, help="the robot's name (default: the URDF's)")
    init.add_argument(
        "--torque-limit",
        type=float,
        default=None,
        metavar="NM",
        help="N·m (N for a prismatic joint) for each actuated joint whose URDF gives no effort limit, "
        "written to [limits.torque] (default: such a joint is an error)",
    )
    init.add_argument("--force", action="store_true", help="overwrite an existing robot.toml")
    init.set_defaults(func=_robot_init)
    check = robot_sub.add_parser(
        "check",
        help="the preflight: bad numbers, impossible inertias, missing limits, unknown names; exit 1 on an error",
    )
    check.add_argument("path", help="a URDF (a path or share:<package>/...), a robot.toml, its folder or a robot name")
    check.set_defaults(func=_robot_check)


def _add_launch_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("launch_file", help="a launch file, e.g. launch/quadruped_trot.toml")
    p.add_argument("--duration", type=_duration, default=None, help="override the run's duration, s (0: until Ctrl-C)")
    p.add_argument("--formulation", default=None, help="override the launch file's formulation")
    p.add_argument(
        "--bridge",
        default=None,
        metavar="KIND",
        help="override the launch file's simulator (bridge.kind): mujoco, rigid, drake or ess",
    )
    p.add_argument(
        "--robot",
        default=None,
        metavar="NAME_OR_PATH",
        help="override the launch file's robot: a shipped name, a folder with robot.toml or a robot.toml "
        "(the reference sizes itself to it)",
    )


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="idcontrol", description="Inverse dynamics with predicted contact forces.")
    sub = parser.add_subparsers(dest="command", required=True)
    bench = sub.add_parser("bench", help="time each formulation's whole tick on standing scenarios")
    bench.add_argument("--ticks", type=_positive_int, default=3000, help="timed ticks per row (default 3000)")
    bench.add_argument(
        "--scenarios",
        default="trot,grasp,quadruped,solo12,fig19",
        help="comma list: trot,grasp,trot_hw (recorded closed-loop workloads),quadruped,solo12,fig19,arm,transport,"
        "rigid_sim,drake_sim,ess_sim,coupling,gap; a robot with +estimated (solo12+estimated) stands with the "
        "controller's estimated contacts",
    )
    bench.add_argument("--formulations", default=None, help="comma list (default: all but sensed_id)")
    bench.add_argument("--contacts", default=None, help="Fig. 19 total contact counts (default 4,8,16,32,64,128)")
    bench.add_argument("--json", default=None, metavar="PATH", help="also write the rows as a JSON array ('-': stdout)")
    bench.add_argument("--tsid-python", default=None, help="python of a TSID venv: also run the TSID reference")
    bench.add_argument(
        "--tsid-script",
        default=None,
        metavar="PATH",
        help="the TSID reference script --tsid-python runs (Solo12 standing, in that venv)",
    )
    bench.set_defaults(func=_bench)
    compile_ = sub.add_parser(
        "compile",
        help="build the compiled kernels into numba's cache in parallel (before a first start: an image, a CI machine)",
    )
    compile_.add_argument("--jobs", type=_positive_int, default=None, help="worker processes (default: the CPUs)")
    compile_.set_defaults(func=_compile)
    launch = sub.add_parser(
        "launch",
        help="run a launch file: daemon and bridge as separate processes",
        epilog="exit status: 0 the run ended as asked (its duration, or Ctrl-C); 2 an error; "
        "3 the robot fell; 4 the run ended before its duration (a safe stop, the "
        "bridge's late-command rule, a process that exited)",
    )
    _add_launch_args(launch)
    launch.add_argument("--summary-json", default=None, metavar="PATH", help="also write the run summary as JSON")
    launch.add_argument("--quiet", action="store_true", help="no live status line")
    _add_log_args(launch)
    launch.add_argument(
        "--foxglove",
        type=_port,
        nargs="?",
        const=8765,
        default=None,
        metavar="PORT",
        help="watch it live in Foxglove: a WebSocket server on 127.0.0.1:PORT (default 8765)",
    )
    launch.add_argument(
        "--driver",
        nargs=argparse.REMAINDER,
        default=None,
        metavar="COMMAND",
        help="run this robot driver instead of the bridge ({endpoint}: the control endpoint, "
        "{launch}: the launch file); the rest of the line is its command",
    )
    launch.set_defaults(func=_launch)
    daemon = sub.add_parser("daemon", help="run only the control daemon of a launch file")
    _add_launch_args(daemon)
    _add_log_args(daemon)
    daemon.set_defaults(func=_daemon)
    bridge = sub.add_parser("bridge", help="run only the simulator bridge of a launch file")
    _add_launch_args(bridge)
    bridge.add_argument(
        "--hello-timeout",
        type=float,
        default=10.0,
        metavar="S",
        help="how long to wait for the daemon to answer, s (default 10)",
    )
    bridge.set_defaults(func=_bridge)
    _add_reliability_commands(sub)
    _add_robot_commands(sub)
    _add_driver_parser(sub)
    _add_live_parser(sub)
    _add_ros2_parser(sub)
    _add_log_commands(sub)
    _add_experiment_parser(sub)
    _add_sweep_parser(sub)
    args = parser.parse_args(argv)
    try:
        return int(args.func(args))
    except IdControlError as e:
        print(f"idcontrol: error: {e}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print("interrupted", file=sys.stderr)
        return 130
    except BrokenPipeError:  # the reader of our output left (`| head`): no traceback, and none at exit's flush
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 1
    except OSError as e:  # a path the command cannot read or write (a missing folder, /proc, a file for a folder)
        print(f"idcontrol: error: {e.strerror or e}" + (f": {e.filename}" if e.filename else ""), file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
