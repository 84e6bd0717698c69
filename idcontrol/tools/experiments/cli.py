"""``idcontrol experiment paper``: run the matrix, print each run, write the JSON and the report."""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

from idcontrol.errors import ConfigError


def run_paper(args: argparse.Namespace) -> int:
    """Run the paper's experiments as the command line asks; 0 when every run produced a result."""
    from idcontrol.tools.experiments.paper import plan, rest_penetration, run_matrix

    if args.jobs < 1:
        raise ConfigError(f"--jobs must be >= 1, got {args.jobs}")
    only = [part for part in (args.only or "").split(",") if part]
    specs = plan(args.quick, only)
    if not specs:
        raise ConfigError(f"--only {args.only!r} matches no run (names look like trot/rigid_low/qp_mu)")
    bench_ticks = args.bench_ticks if args.bench_ticks is not None else (0 if args.quick else 300)
    if bench_ticks < 0:
        raise ConfigError(f"--bench-ticks must be >= 0, got {bench_ticks}")
    started = time.perf_counter()
    where = f"as Ray tasks ({args.ray})" if args.ray else f"{args.jobs} at a time"
    print(f"idcontrol experiment paper: {len(specs)} runs, {where}", flush=True)
    calibration = {}
    if any(s.terrain.compliant for s in specs):
        calibration = {"compliant_rest_penetration_m": rest_penetration(True),
                       "stiff_rest_penetration_m": rest_penetration(False)}  # fmt: skip
        print(f"compliant terrain: the standing quadruped's feet sink "
              f"{1e3 * calibration['compliant_rest_penetration_m']:.2f} mm into MuJoCo's soft floor "
              f"({1e3 * calibration['stiff_rest_penetration_m']:.3f} mm into the stiff one)", flush=True)  # fmt: skip
    results = run_matrix(specs, jobs=args.jobs, progress=lambda line: print(line, flush=True), ray=args.ray)
    bench_rows = []
    if bench_ticks and not only:
        from idcontrol.tools.bench import DEFAULT_FORMULATIONS, FIG19_CONTACTS, run

        print("Fig. 19 timing (idcontrol bench --scenarios fig19):", flush=True)
        bench_rows = run(["fig19"], list(DEFAULT_FORMULATIONS), bench_ticks, list(FIG19_CONTACTS), None, None)
    if args.json:
        Path(args.json).write_text(json.dumps(results, indent=1) + "\n")
        print(f"wrote {args.json}", flush=True)
    if args.report:
        from idcontrol.tools.experiments.report import write_report

        command = _command(args)
        for path in write_report(results, Path(args.report), command=command, quick=args.quick,
                                 calibration=calibration, bench_rows=bench_rows):  # fmt: skip
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
