"""The ``idcontrol`` command line."""

from __future__ import annotations

import argparse
import os
import sys

from idcontrol.errors import IdControlError  # (no numpy import behind it)

# The tick works on matrices of at most a few hundred entries: BLAS threads only add jitter on a
# 2-core machine shared with the bridge. Set before numpy is first imported.
for _var in ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS", "MKL_NUM_THREADS"):
    os.environ.setdefault(_var, "1")


def _csv(text: str) -> list[str]:
    return [t for t in text.split(",") if t]


def _bench(args: argparse.Namespace) -> int:
    from idcontrol.bench import DEFAULT_FORMULATIONS, FIG19_CONTACTS, run
    from idcontrol.formulations import available_formulations

    formulations = _csv(args.formulations) if args.formulations else list(DEFAULT_FORMULATIONS)
    unknown = [f for f in formulations if f not in available_formulations()]
    if unknown:
        print(f"unknown formulation(s) {unknown}; available: {available_formulations()}", file=sys.stderr)
        return 2
    contacts = [int(c) for c in _csv(args.contacts)] if args.contacts else list(FIG19_CONTACTS)
    tsid = (args.tsid_python, args.tsid_script) if args.tsid_python else None
    run(_csv(args.scenarios), formulations, args.ticks, contacts, args.json, tsid)
    return 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="idcontrol", description="Inverse dynamics with predicted contact forces.")
    sub = parser.add_subparsers(dest="command", required=True)
    bench = sub.add_parser("bench", help="time each formulation's whole tick on standing scenarios")
    bench.add_argument("--ticks", type=int, default=3000, help="timed ticks per row (default 3000)")
    bench.add_argument("--scenarios", default="quadruped,solo12,fig19", help="comma list: quadruped,solo12,fig19,arm")
    bench.add_argument("--formulations", default=None, help="comma list (default: all but sensed_id)")
    bench.add_argument("--contacts", default=None, help="Fig. 19 total contact counts (default 4,8,16,32,64,128)")
    bench.add_argument("--json", default=None, metavar="PATH", help="also write the rows as a JSON array ('-': stdout)")
    bench.add_argument("--tsid-python", default=None, help="python of a TSID venv: also run the TSID reference")
    bench.add_argument("--tsid-script", default="../shared/bench/tsid_reference.py", help="TSID reference script")
    bench.set_defaults(func=_bench)
    args = parser.parse_args(argv)
    try:
        return int(args.func(args))
    except IdControlError as e:
        print(f"idcontrol: error: {e}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print("interrupted", file=sys.stderr)
        return 130


if __name__ == "__main__":
    sys.exit(main())
