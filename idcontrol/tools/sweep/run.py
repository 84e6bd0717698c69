"""Run a sweep: skip the cells already done, run the rest where asked, save after each, report at the end."""

from __future__ import annotations

import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, TextIO

from idcontrol.tools.sweep.cell import run_cell
from idcontrol.tools.sweep.engine import run_tasks
from idcontrol.tools.sweep.results import load_rows, save_rows, write_report
from idcontrol.tools.sweep.spec import Sweep


class Progress:
    """A progress bar on a terminal (one line, redrawn), one line per finished cell elsewhere (logs, CI)."""

    def __init__(self, total: int, skipped: int, stream: TextIO | None = None, enabled: bool = True) -> None:
        stream = sys.stderr if stream is None else stream
        self.total, self.done, self.errors = total, skipped, 0
        self.started = time.perf_counter()
        self.ran = 0
        self.stream = stream
        self.enabled = enabled
        self.tty = enabled and stream.isatty()
        if enabled and skipped:
            stream.write(f"{skipped} of {total} cells already done: skipped\n")
        self._draw()

    def update(self, row: dict[str, Any]) -> None:
        self.done += 1
        self.ran += 1
        self.errors += row.get("status") != "done"
        if not self.enabled:
            return
        if self.tty:
            self._draw()
        else:
            outcome = (
                row.get("error")
                if row.get("status") != "done"
                else ("completed" if row.get("completed") else f"stopped: {row.get('end_reason')}")
            )
            self.stream.write(f"[{self.done}/{self.total}] {row['key']}: {outcome} ({row['wall_s']:.1f} s)\n")
            self.stream.flush()

    def _draw(self) -> None:
        if not self.tty:
            return
        width = 30
        filled = int(width * self.done / max(1, self.total))
        elapsed = time.perf_counter() - self.started
        remaining = self.total - self.done
        eta = f", about {elapsed / self.ran * remaining:.0f} s left" if self.ran and remaining else ""
        errors = f", {self.errors} errors" if self.errors else ""
        self.stream.write(
            f"\rsweep [{'#' * filled}{'.' * (width - filled)}] {self.done}/{self.total} cells"
            f"{errors}, {elapsed:.0f} s{eta}   "
        )
        self.stream.flush()

    def close(self) -> None:
        if self.tty:
            self.stream.write("\n")
            self.stream.flush()


@dataclass
class SweepOutcome:
    """The rows in grid order, how many cells ran now, and the wall time they took."""

    rows: list[dict[str, Any]]
    ran: int
    wall_s: float


def run_sweep(
    sweep: Sweep,
    *,
    workers: int = 1,
    ray: str | None = None,
    progress: bool = True,
    command: str = "",
    cell_function: Callable[[Any], dict[str, Any]] = run_cell,
) -> SweepOutcome:
    """Run every cell of ``sweep`` not already done in its output file; write the file after each cell and the
    report at the end."""
    previous = {row["key"]: row for row in load_rows(sweep.output)}
    rows = {
        cell.key: previous[cell.key]
        for cell in sweep.cells
        if previous.get(cell.key, {}).get("status") == "done" and previous[cell.key].get("signature") == cell.signature
    }
    todo = [cell for cell in sweep.cells if cell.key not in rows]
    bar = Progress(len(sweep.cells), len(rows), enabled=progress)
    started = time.perf_counter()
    order = {cell.key: cell.index for cell in sweep.cells}
    try:
        for i, row in run_tasks(cell_function, todo, workers=workers, ray=ray):
            rows[todo[i].key] = row
            save_rows(sweep.output, sorted(rows.values(), key=lambda r: order[r["key"]]))
            bar.update(row)
    finally:
        bar.close()
    wall = time.perf_counter() - started
    ordered = sorted(rows.values(), key=lambda r: order[r["key"]])
    where = f"Ray ({ray})" if ray else (f"{workers} worker processes" if workers > 1 else "in this process")
    write_report(
        sweep.report,
        sweep.name,
        sweep.path,
        ordered,
        list(sweep.axes),
        command=command or "idcontrol sweep",
        where=where,
        wall_s=wall,
        ran=len(todo),
    )
    return SweepOutcome(ordered, len(todo), wall)
