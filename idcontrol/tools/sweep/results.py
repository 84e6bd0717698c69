"""A sweep's results file (JSON or Parquet, one row per cell, rewritten after every cell) and its report.

The file is the resume point: a cell whose key already has a row with ``status = "done"`` and the cell's
signature (its values, launch table and length) is not run again; a cell that raised, or whose spec or launch
file changed since, is. Rows are written in the grid's order whatever order the cells finished in.
"""

from __future__ import annotations

import json
import math
import os
import platform
from collections.abc import Iterable
from pathlib import Path
from typing import Any

import numpy as np

from idcontrol import jsontext
from idcontrol.errors import ConfigError, LogError
from idcontrol.tools.sweep.cell import TIMING_FIELDS


def load_rows(path: Path) -> list[dict[str, Any]]:
    """The rows already in ``path`` (none if it does not exist)."""
    if not path.exists():
        return []
    if path.suffix == ".parquet":
        pq = _pyarrow_parquet()
        rows = pq.read_table(path).to_pylist()
        return [{k: _from_cell(v) for k, v in row.items() if v is not None} for row in rows]
    try:
        rows = json.loads(path.read_text())
    except json.JSONDecodeError as e:
        raise LogError(f"{path}: not a sweep results file ({e}); move it away to start afresh") from None
    if not isinstance(rows, list) or not all(isinstance(r, dict) and "key" in r for r in rows):
        raise LogError(f"{path}: not a sweep results file (a JSON array of rows with a 'key')")
    return rows


def save_rows(path: Path, rows: list[dict[str, Any]]) -> None:
    """Write ``rows`` to ``path`` atomically (a temporary file, then a rename)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(path.name + ".tmp")
    if path.suffix == ".parquet":
        pa, pq = _pyarrow()
        columns = sorted({k for row in rows for k in row})
        table = pa.Table.from_pylist([{k: _to_cell(row.get(k)) for k in columns} for row in rows])
        pq.write_table(table, tmp)
    else:
        tmp.write_text(jsontext.dumps(rows, indent=1) + "\n")
    os.replace(tmp, path)


def _to_cell(value: Any) -> Any:
    """Parquet columns hold scalars: tables and lists go in as JSON text."""
    return json.dumps(value) if isinstance(value, (dict, list)) else value


def _from_cell(value: Any) -> Any:
    if isinstance(value, str) and value[:1] in "[{":
        try:
            return json.loads(value)
        except json.JSONDecodeError:
            return value
    return value


def _pyarrow():
    try:
        import pyarrow as pa
        import pyarrow.parquet as pq
    except ImportError:
        raise ConfigError("Parquet output needs pyarrow: pip install 'idcontrol[export]'") from None
    return pa, pq


def _pyarrow_parquet():
    return _pyarrow()[1]


def comparable(row: dict[str, Any]) -> dict[str, Any]:
    """The row without its timings (:data:`~idcontrol.tools.sweep.cell.TIMING_FIELDS`) and empty values (a
    Parquet file has a column for every field): what must not depend on where or when the cell ran."""
    return {k: v for k, v in row.items() if k not in TIMING_FIELDS and v is not None}


# ---------------------------------------------------------------------------------------------------- report
def _fmt(value: Any, digits: int = 4) -> str:
    if value is None or (isinstance(value, float) and not math.isfinite(value)):
        return "−"
    if isinstance(value, bool):
        return "yes" if value else "no"
    if isinstance(value, float):
        return f"{value:.{digits}g}"
    return str(value)


def summarize(rows: Iterable[dict[str, Any]], axes: list[str]) -> list[dict[str, Any]]:
    """One line per combination of ``axes`` (the seeds pooled): counts, means and medians over its cells."""
    groups: dict[tuple, list[dict[str, Any]]] = {}
    for row in rows:
        groups.setdefault(tuple(row.get(a) for a in axes), []).append(row)
    out = []
    for values, members in groups.items():
        done = [r for r in members if r.get("status") == "done"]

        def values_of(key: str, of: list[dict[str, Any]] = done) -> np.ndarray:
            return np.array([r[key] for r in of if r.get(key) is not None], dtype=float)

        line: dict[str, Any] = dict(zip(axes, values, strict=True))
        line["cells"] = len(members)
        line["errors"] = len(members) - len(done)
        line["completed"] = sum(bool(r.get("completed")) for r in done)
        line["fell"] = sum(bool(r.get("fell")) for r in done)
        for key in ("tracking_error_rad", "tau_rate_mean", "distance_m"):
            v = values_of(key)
            line[f"{key}_mean"] = float(v.mean()) if v.size else None
            line[f"{key}_max"] = float(v.max()) if v.size else None
        loaded, violations = values_of("loaded_contacts").sum(), values_of("cone_violations").sum()
        line["cone_violation_rate"] = float(violations / loaded) if loaded else None
        ratio = values_of("cone_ratio_max")
        line["cone_ratio_max"] = float(ratio.max()) if ratio.size else None
        for key in ("failed_solves", "fallback_solves", "impact_events", "impact_unterminated", "impact_failures"):
            v = values_of(key)
            line[key] = int(v.sum()) if v.size else None
        out.append(line)
    return out


def write_report(
    path: Path,
    sweep_name: str,
    spec: Path,
    rows: list[dict[str, Any]],
    axes: list[str],
    *,
    command: str,
    where: str,
    wall_s: float,
    ran: int,
) -> None:
    """The Markdown report: what ran where, one line per combination of the non-seed axes, then every cell."""
    group_axes = [a for a in axes if a != "seed"]
    seeds = sorted({r["seed"] for r in rows if "seed" in r})
    lines = [
        f"# Sweep {sweep_name}",
        "",
        f"`{command}`: {len(rows)} cells from `{spec.name}` ({ran} run in this invocation, {where}, "
        f"{wall_s:.0f} s wall) on {platform.machine()} / Python {platform.python_version()}.",
        "",
    ]
    if seeds:
        lines += [
            f"Seeds {seeds[0]}..{seeds[-1]} ({len(seeds)}) pooled per line; means and largest values over "
            "the cells that ran to their end or stopped; cone violations over all loaded contact-ticks.",
            "",
        ]
    header = [
        *group_axes,
        "cells",
        "completed",
        "fell",
        "tracking mean (rad)",
        "tracking max (rad)",
        "E\\|Δτ\\| mean (N·m/s)",
        "cone violations",
        "\\|f_t\\|/μf_n max",
        "failed solves",
        "fallback solves",
        "impact events",
    ]
    lines += ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    for line in summarize(rows, group_axes):
        cone = line["cone_violation_rate"]
        lines.append(
            "| "
            + " | ".join(
                [
                    *(_fmt(line[a]) for a in group_axes),
                    str(line["cells"]) + (f" ({line['errors']} errors)" if line["errors"] else ""),
                    str(line["completed"]),
                    str(line["fell"]),
                    _fmt(line["tracking_error_rad_mean"]),
                    _fmt(line["tracking_error_rad_max"]),
                    _fmt(line["tau_rate_mean_mean"]),
                    "−" if cone is None else f"{100 * cone:.2f} %",
                    _fmt(line["cone_ratio_max"], 3),
                    _fmt(line["failed_solves"]),
                    _fmt(line["fallback_solves"]),
                    _fmt(line["impact_events"]),
                ]
            )
            + " |"
        )
    lines += ["", "## Cells", ""]
    cell_header = [
        "key",
        "status",
        "completed",
        "fell",
        "s",
        "tracking (rad)",
        "E\\|Δτ\\| (N·m/s)",
        "cone viol.",
        "failed",
        "fallback",
        "impacts",
        "wall s",
    ]
    lines += ["| " + " | ".join(cell_header) + " |", "|" + "---|" * len(cell_header)]
    for r in rows:
        status = r.get("status", "")
        if status == "error":
            status = f"error: {r.get('error', '')[:80]}"
        lines.append(
            "| "
            + " | ".join(
                [
                    f"`{r['key']}`",
                    status,
                    _fmt(r.get("completed")),
                    _fmt(r.get("fell")),
                    _fmt(r.get("sim_seconds"), 3),
                    _fmt(r.get("tracking_error_rad")),
                    _fmt(r.get("tau_rate_mean")),
                    _fmt(r.get("cone_violations")),
                    _fmt(r.get("failed_solves")),
                    _fmt(r.get("fallback_solves")),
                    _fmt(r.get("impact_events")),
                    _fmt(r.get("wall_s"), 3),
                ]
            )
            + " |"
        )
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("\n".join(lines) + "\n")
