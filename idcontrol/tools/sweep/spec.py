"""A sweep's spec file and the cells of its grid.

A spec is TOML::

    name = "trot-robustness"             # optional (default: the file's stem)
    launch = "../launch/quadruped_trot.toml"   # the launch file every cell starts from (relative to this file)
    seconds = 3.0                        # simulated seconds per cell (default: the launch file's duration)
    output = "trot.json"                 # results, .json or .parquet (default: <stem>.json beside the spec)
    report = "trot.md"                   # Markdown report (default: beside the output, its name with .md)

    [grid]                               # every combination of these is a cell; each axis is optional
    robot = ["quadruped"]                # robot (default: the launch file's)
    formulation = ["two_stage_qp", "coulomb_lcp", "noslip_lcp"]   # with each one's [formulations.NAME] options
    simulator = ["rigid", "mujoco"]      # [bridge] kind
    terrain = ["flat", "height_map"]     # [bridge] terrain (rigid only)
    seed = { start = 0, count = 50 }     # or a list: [bridge] terrain_seed and impact_seed
    options = ["nominal", "sampled"]     # names of the [options.NAME] tables below

    [options.nominal]                    # launch-file tables merged over the launch file's, key by key
    [options.sampled]
    bridge = { impact_sampling = true }
    controller = { gains = { kp = 800.0, kd = 50.0 } }

Every cell's launch configuration is validated when the spec is read (:func:`load_sweep`), so a typo fails
before any run starts, with the message of the launch-file check naming the cell.
"""

from __future__ import annotations

import copy
import hashlib
import itertools
import json
import tomllib
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from idcontrol.errors import ConfigError, RobotFileNotFound
from idcontrol.settings import LaunchConfig, parse_launch

#: The grid's axes, in the order they appear in a cell's key.
AXES = ("robot", "formulation", "simulator", "terrain", "options", "seed")
TOP_KEYS = {"name", "launch", "seconds", "output", "report", "grid", "options"}


@dataclass(frozen=True)
class Cell:
    """One run of the grid: its axes' values and the launch table that realizes them.

    key : ``"axis=value,..."`` over the grid's axes, unique in the sweep (resuming matches it).
    params : axis -> value (only the grid's axes).
    table : the launch file's tables with the cell's values merged in (plain TOML data, picklable).
    launch_path : the launch file (names it in errors, anchors its relative paths).
    seconds : simulated seconds.
    """

    index: int
    key: str
    params: dict[str, Any]
    table: dict[str, Any]
    launch_path: str
    seconds: float

    @property
    def signature(self) -> str:
        """A digest of what the cell runs (its values, launch table and length): a saved row counts as this
        cell's only if it carries the same signature, so editing the spec or the launch file reruns it."""
        text = json.dumps(
            {"params": self.params, "table": self.table, "seconds": self.seconds}, sort_keys=True, default=repr
        )
        return hashlib.sha1(text.encode()).hexdigest()[:16]

    def config(self) -> LaunchConfig:
        """The cell's validated launch configuration."""
        config = parse_launch(copy.deepcopy(self.table), Path(self.launch_path))
        formulation = self.params.get("formulation")
        return config.with_overrides(duration=self.seconds, formulation=formulation)


@dataclass
class Sweep:
    """A spec file, read: where its results go and its cells in grid order."""

    name: str
    path: Path
    launch: Path
    seconds: float
    output: Path
    report: Path
    axes: dict[str, list[Any]]
    options: dict[str, dict[str, Any]] = field(default_factory=dict)
    cells: list[Cell] = field(default_factory=list)


def _merge(base: dict[str, Any], over: dict[str, Any]) -> dict[str, Any]:
    """``over`` merged into a copy of ``base``, tables key by key."""
    out = copy.deepcopy(base)
    for key, value in over.items():
        if isinstance(value, dict) and isinstance(out.get(key), dict):
            out[key] = _merge(out[key], value)
        else:
            out[key] = copy.deepcopy(value)
    return out


def _seeds(value: Any, where: str) -> list[int]:
    if isinstance(value, dict):
        unknown = set(value) - {"start", "count"}
        start, count = value.get("start", 0), value.get("count")
        if unknown or not isinstance(start, int) or not isinstance(count, int) or start < 0 or count < 1:
            raise ConfigError(
                f"{where}: grid.seed must be a list of integers >= 0 or {{ start = S, count = N }} "
                f"with S >= 0, N >= 1, got {value!r}"
            )
        return list(range(start, start + count))
    if not isinstance(value, list) or not value or not all(isinstance(s, int) and s >= 0 for s in value):
        raise ConfigError(f"{where}: grid.seed must be a non-empty list of integers >= 0, got {value!r}")
    return value


def _cell_table(base: dict[str, Any], params: dict[str, Any], options: dict[str, dict[str, Any]]) -> dict:
    table = copy.deepcopy(base)
    if "options" in params:
        table = _merge(table, options[params["options"]])
    if "robot" in params:
        table["robot"] = params["robot"]
    bridge = table.setdefault("bridge", {})
    if "simulator" in params:
        bridge["kind"] = params["simulator"]
    if "terrain" in params:
        bridge["terrain"] = params["terrain"]
    if "seed" in params:
        bridge["terrain_seed"] = params["seed"]
        bridge["impact_seed"] = params["seed"]
    return table


def load_sweep(path: str | Path, *, output: str | Path | None = None, report: str | Path | None = None) -> Sweep:
    """Read and check a spec file; ``output`` and ``report`` replace the spec's."""
    path = Path(path)
    if not path.is_file():
        raise RobotFileNotFound(str(path), "sweep spec")
    try:
        data = tomllib.loads(path.read_text())
    except tomllib.TOMLDecodeError as e:
        raise ConfigError(f"{path}: not valid TOML: {e}") from None
    unknown = sorted(set(data) - TOP_KEYS)
    if unknown:
        raise ConfigError(f"{path}: unknown key(s) {unknown}; known: {sorted(TOP_KEYS)}")
    if not isinstance(data.get("launch"), str):
        raise ConfigError(f"{path}: 'launch' must name the launch file the cells start from")
    launch = (path.parent / data["launch"]).resolve()
    if not launch.is_file():
        raise RobotFileNotFound(str(launch), "launch file")
    try:
        base = tomllib.loads(launch.read_text())
    except tomllib.TOMLDecodeError as e:
        raise ConfigError(f"{launch}: not valid TOML: {e}") from None
    seconds = data.get("seconds", base.get("duration", 0.0))
    if not isinstance(seconds, (int, float)) or isinstance(seconds, bool) or not 0 < seconds < 3600:
        raise ConfigError(f"{path}: seconds (per cell) must be in (0, 3600) s, got {seconds!r}")
    grid = data.get("grid", {})
    if not isinstance(grid, dict):
        raise ConfigError(f"{path}: [grid] must be a table")
    unknown = sorted(set(grid) - set(AXES))
    if unknown:
        raise ConfigError(f"{path}: unknown grid axis {unknown}; axes: {list(AXES)}")
    options = data.get("options", {})
    if not isinstance(options, dict) or not all(isinstance(v, dict) for v in options.values()):
        raise ConfigError(f"{path}: [options.NAME] must be tables of launch-file tables")
    axes: dict[str, list[Any]] = {}
    for axis in AXES:
        if axis not in grid:
            continue
        if axis == "seed":
            values = _seeds(grid[axis], str(path))
        else:
            values = grid[axis]
            if not isinstance(values, list) or not values or not all(isinstance(v, str) for v in values):
                raise ConfigError(f"{path}: grid.{axis} must be a non-empty list of names, got {values!r}")
        if len(set(values)) != len(values):
            raise ConfigError(f"{path}: grid.{axis} repeats a value: {values!r}")
        if axis == "options":
            missing = [v for v in values if v not in options]
            if missing:
                raise ConfigError(
                    f"{path}: grid.options names {missing}, which have no [options.NAME] table "
                    f"(defined: {sorted(options)})"
                )
        axes[axis] = values
    out_path = Path(output) if output is not None else path.parent / data.get("output", f"{path.stem}.json")
    if out_path.suffix not in (".json", ".parquet"):
        raise ConfigError(f"{path}: output must end in .json or .parquet, got {out_path.name}")
    if report is not None:
        report_path = Path(report)
    else:
        report_path = path.parent / data["report"] if "report" in data else out_path.with_suffix(".md")
    name = data.get("name", path.stem)
    sweep = Sweep(str(name), path, launch, float(seconds), out_path, report_path, axes, options)
    names = list(axes)
    checked: set[tuple] = set()
    for index, values in enumerate(itertools.product(*(axes[a] for a in names))):
        params = dict(zip(names, values, strict=True))
        key = ",".join(f"{a}={params[a]}" for a in names) or "base"
        cell = Cell(index, key, params, _cell_table(base, params, options), str(launch), float(seconds))
        shape = tuple((a, v) for a, v in params.items() if a != "seed")  # seeds change integers only
        if shape not in checked:
            try:
                cell.config()
            except ConfigError as e:
                raise ConfigError(f"{path}: cell {key}: {e}") from None
            checked.add(shape)
        sweep.cells.append(cell)
    return sweep
