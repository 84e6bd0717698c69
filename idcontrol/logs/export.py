"""``idcontrol log export``: a log's ticks as CSV, Parquet (needs pyarrow) or numpy ``.npz``.

CSV and Parquet hold one row per tick and one column per scalar: vectors become ``tau[0]``,
``tau[1]`` ...; contact fields are padded to the log's largest contact count
(``force_world[2].z``, NaN where a tick had fewer contacts). The ``.npz`` file holds
:meth:`TickLog.arrays` as they are (no pickled objects: ``np.load`` reads it as is).
"""

from __future__ import annotations

import csv
from pathlib import Path

import numpy as np

from idcontrol.errors import LogError
from idcontrol.logs.reader import TickLog, read_log

FORMATS = ("csv", "parquet", "npz")


def flat_columns(log: TickLog) -> dict[str, np.ndarray]:
    """One 1-D column per scalar of each tick (see the module docstring for the names)."""
    out: dict[str, np.ndarray] = {}
    for name, array in log.arrays().items():
        if array.ndim == 1:
            out[name] = array
        elif array.ndim == 2:
            for j in range(array.shape[1]):
                out[f"{name}[{j}]"] = array[:, j]
        else:
            for j in range(array.shape[1]):
                for k, axis in enumerate("xyz"):
                    out[f"{name}[{j}].{axis}"] = array[:, j, k]
    return out


def export(path: str | Path, fmt: str, output: str | Path | None = None) -> Path:
    """Write the log at ``path`` as ``fmt`` to ``output`` (default: the log's path with the format's suffix)."""
    if fmt not in FORMATS:
        raise LogError(f"unknown export format {fmt!r}; formats: {', '.join(FORMATS)}")
    log = read_log(path)
    out = Path(output) if output else Path(path).with_suffix(f".{fmt}")
    if out.exists():
        raise LogError(f"{out} already exists; choose another name with -o")
    if fmt == "npz":
        np.savez_compressed(out, **log.arrays())
        return out
    columns = flat_columns(log)
    if fmt == "csv":
        with open(out, "w", newline="") as f:
            w = csv.writer(f)
            w.writerow(columns)
            w.writerows(zip(*(c.tolist() for c in columns.values()), strict=True))
        return out
    try:
        import pyarrow as pa
        import pyarrow.parquet as pq
    except ImportError:
        raise LogError("Parquet export needs pyarrow: pip install 'idcontrol[export]'") from None
    pq.write_table(pa.table(columns), out)
    return out
