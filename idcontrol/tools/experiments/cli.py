"""``idcontrol experiment ...`` (paper, sap, mismatch, robots, ess, certificates): run them, print each result,
write the JSON and the reports."""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

from idcontrol import jsontext
from idcontrol.errors import ConfigError


def _planned(args: argparse.Namespace, plan, noun: str, example: str) -> tuple[list, list[str]]:
    """(``plan(quick, only)``, only) for a matrix command's ``--quick``, ``--only`` (a comma list) and ``--jobs``;
    ConfigError for ``--jobs`` < 1 or an ``--only`` that selects no ``noun`` (``example``: what names look like)."""
    if args.jobs < 1:
        raise ConfigError(f"--jobs must be >= 1, got {args.jobs}")
    only = [part for part in (args.only or "").split(",") if part]
    selected = plan(args.quick, only)
    if not selected:
        raise ConfigError(f"--only {args.only!r} matches no {noun} (names look like {example})")
    return selected, only


def run_paper(args: argparse.Namespace) -> int:
    """Run the paper's experiments as the command line asks; 0 when every run produced a result."""
    from idcontrol.tools.experiments.paper import plan, rest_penetration, run_matrix

    specs, only = _planned(args, plan, "run", "trot/rigid_low/qp_mu")
    bench_ticks = args.bench_ticks if args.bench_ticks is not None else (0 if args.quick else 300)
    if bench_ticks < 0:
        raise ConfigError(f"--bench-ticks must be >= 0, got {bench_ticks}")
    started = time.perf_counter()
    where = f"as Ray tasks ({args.ray})" if args.ray else f"{args.jobs} at a time"
    print(f"idcontrol experiment paper: {len(specs)} runs, {where}", flush=True)
    calibration = {}
    if any(s.terrain.compliant for s in specs):
        calibration = {
            "compliant_rest_penetration_m": rest_penetration(True),
            "stiff_rest_penetration_m": rest_penetration(False),
        }
        print(
            f"compliant terrain: the standing quadruped's feet sink "
            f"{1e3 * calibration['compliant_rest_penetration_m']:.2f} mm into MuJoCo's soft floor "
            f"({1e3 * calibration['stiff_rest_penetration_m']:.3f} mm into the stiff one)",
            flush=True,
        )
    results = run_matrix(specs, jobs=args.jobs, progress=lambda line: print(line, flush=True), ray=args.ray)
    bench_rows = []
    if bench_ticks and not only:
        from idcontrol.tools.bench import DEFAULT_FORMULATIONS, FIG19_CONTACTS, run

        print("Fig. 19 timing (idcontrol bench --scenarios fig19):", flush=True)
        bench_rows = run(["fig19"], list(DEFAULT_FORMULATIONS), bench_ticks, list(FIG19_CONTACTS), None, None)
    if args.json:
        Path(args.json).write_text(jsontext.dumps(results, indent=1) + "\n")
        print(f"wrote {args.json}", flush=True)
    if args.report:
        from idcontrol.tools.experiments.report import write_report

        command = _command(args)
        for path in write_report(
            results,
            Path(args.report),
            command=command,
            quick=args.quick,
            calibration=calibration,
            bench_rows=bench_rows,
        ):
            print(f"wrote {path}", flush=True)
    errors = [r for r in results if str(r["end_reason"]).startswith("error")]
    print(f"done in {time.perf_counter() - started:.0f} s; {len(errors)} run(s) raised an error", file=sys.stderr)
    return 0


def _command(args: argparse.Namespace) -> str:
    """The command line that reproduces this run."""
    parts = ["idcontrol experiment paper"]
    if args.quick:
        parts.append("--quick")
    if args.only:
        parts.append(f"--only {args.only}")
    if args.jobs != 1:
        parts.append(f"--jobs {args.jobs}")
    if args.ray:
        parts.append("--ray" if args.ray == "local" else f"--ray {args.ray}")
    if args.bench_ticks is not None:
        parts.append(f"--bench-ticks {args.bench_ticks}")
    if args.json:
        parts.append(f"--json {args.json}")
    parts.append(f"--report {args.report}")
    return " ".join(parts)


def run_sap(args: argparse.Namespace) -> int:
    """SAP's checks with Drake, printed measured against expected; 0 when every check is within tolerance."""
    from idcontrol.tools.experiments.sap import format_checks, report, run_checks

    if not args.seconds > 0:
        raise ConfigError(f"--seconds must be > 0, got {args.seconds}")
    dt = 1e-3
    checks = run_checks(args.seconds, dt)
    print(format_checks(checks, dt), flush=True)
    if args.json:
        Path(args.json).write_text(jsontext.dumps(report(checks, dt, args.seconds), indent=1) + "\n")
        print(f"wrote {args.json}", flush=True)
    return 0 if all(c.ok for c in checks) else 1


def run_mismatch(args: argparse.Namespace) -> int:
    """The model-mismatch matrix as the command line asks; 0 when every cell produced a result."""
    from idcontrol.tools.experiments.mismatch import plan, run_matrix

    cells, _ = _planned(args, plan, "cell", "trot/drake/coulomb_lcp")
    started = time.perf_counter()
    print(f"idcontrol experiment mismatch: {len(cells)} cells, {args.jobs} at a time", flush=True)
    results = run_matrix(cells, jobs=args.jobs, progress=lambda line: print(line, flush=True))
    if args.json:
        Path(args.json).write_text(jsontext.dumps(results, indent=1) + "\n")
        print(f"wrote {args.json}", flush=True)
    if args.report:
        from idcontrol.tools.experiments.mismatch_report import write_report

        parts = [
            "idcontrol experiment mismatch",
            *(["--quick"] if args.quick else []),
            *([f"--only {args.only}"] if args.only else []),
            *([f"--jobs {args.jobs}"] if args.jobs != 1 else []),
            *([f"--json {args.json}"] if args.json else []),
            f"--report {args.report}",
        ]
        for path in write_report(results, Path(args.report), command=" ".join(parts)):
            print(f"wrote {path}", flush=True)
    errors = [r for r in results if str(r["end_reason"]).startswith("error")]
    print(f"done in {time.perf_counter() - started:.0f} s; {len(errors)} cell(s) raised an error", file=sys.stderr)
    return 0


def run_robots(args: argparse.Namespace) -> int:
    """``idcontrol experiment robots``: the robots x formulations x tasks matrix; 0 when no run raised."""
    from idcontrol.tools.experiments.robots import plan, run_matrix, sample_costs, tables, write_readme_tables

    specs, _ = _planned(args, plan, "run", "trot/a1/coulomb_lcp")
    started = time.perf_counter()
    print(f"idcontrol experiment robots: {len(specs)} runs, {args.jobs} at a time", flush=True)
    results = run_matrix(specs, jobs=args.jobs, progress=lambda line: print(line, flush=True))
    trot_robots = sorted({s.robot for s in specs if s.task == "trot"})
    costs = sample_costs(trot_robots) if trot_robots else {}
    for robot, (p50, p99) in costs.items():
        print(f"trot sample cost {robot}: p50 {p50:.1f} µs, p99 {p99:.1f} µs", flush=True)
    parts = ["idcontrol experiment robots"] + (["--quick"] if args.quick else [])
    parts += ([f"--only {args.only}"] if args.only else []) + ([f"--jobs {args.jobs}"] if args.jobs != 1 else [])
    text = tables(results, costs, " ".join(parts))
    print(text, flush=True)
    if args.json:
        Path(args.json).write_text(jsontext.dumps({"runs": results, "trot_sample_us": costs}, indent=1) + "\n")
        print(f"wrote {args.json}", flush=True)
    if args.readme:
        write_readme_tables(Path(args.readme), text)
        print(f"wrote the tables into {args.readme}", flush=True)
    errors = [r for r in results if "error" in r]
    print(f"done in {time.perf_counter() - started:.0f} s; {len(errors)} run(s) raised an error", file=sys.stderr)
    return 1 if errors else 0


def run_hardware(args: argparse.Namespace) -> int:
    """``idcontrol experiment hardware``: the quadrupeds on typical sensors and actuators, on flat and unknown
    ground; with ``--margins PATH``, the robustness margins of a finished sweep. 0 when no run raised."""
    from idcontrol.tools.experiments.hardware import margins, plan, read_rows, run_matrix, table

    if args.margins:
        print(margins(read_rows(Path(args.margins))), flush=True)
        return 0
    specs, _ = _planned(args, plan, "run", "trot/a1/coulomb_lcp")
    started = time.perf_counter()
    print(f"idcontrol experiment hardware: {len(specs)} runs, {args.jobs} at a time", flush=True)
    results = run_matrix(specs, jobs=args.jobs, progress=lambda line: print(line, flush=True))
    parts = ["idcontrol experiment hardware"] + (["--quick"] if args.quick else [])
    parts += ([f"--only {args.only}"] if args.only else []) + ([f"--jobs {args.jobs}"] if args.jobs != 1 else [])
    print(table(results, " ".join(parts)), flush=True)
    if args.json:
        Path(args.json).write_text(jsontext.dumps({"runs": results}, indent=1) + "\n")
        print(f"wrote {args.json}", flush=True)
    errors = [r for r in results if "error" in r]
    print(f"done in {time.perf_counter() - started:.0f} s; {len(errors)} run(s) raised an error", file=sys.stderr)
    return 1 if errors else 0


def run_ess(args: argparse.Namespace) -> int:
    """``idcontrol experiment ess``: the ESS integrator paper's checks; 0 when they ran."""
    from idcontrol.tools.experiments.ess import run

    if args.conditions is not None and args.conditions < 1:
        raise ConfigError(f"--conditions must be >= 1, got {args.conditions}")
    if not 0 <= args.closed_loop < float("inf"):
        raise ConfigError(f"--closed-loop must be a finite number >= 0 s, got {args.closed_loop}")
    print("idcontrol experiment ess", flush=True)
    result = run(
        quick=args.quick,
        conditions=args.conditions,
        closed_loop_seconds=args.closed_loop,
        engine=args.engine,
        progress=lambda line: print(line, flush=True),
    )
    if args.json:
        Path(args.json).write_text(jsontext.dumps(result, indent=1) + "\n")
        print(f"wrote {args.json}", flush=True)
    print(f"done in {result['wall_s']:.0f} s", file=sys.stderr)
    return 0


def run_certificates(args: argparse.Namespace) -> int:
    """``idcontrol experiment certificates``: 1 when any found answer fails the independent check."""
    from idcontrol.tools.experiments.certificates import main

    robots = [name for name in args.robots.split(",") if name]
    if not robots:
        raise ConfigError("--robots names no robot")
    return main(robots, args.states, args.seed, args.json)
