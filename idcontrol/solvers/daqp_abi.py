"""DAQP's C structs as the 0.11 series lays them out, and the probe that checks them in a child process.

:mod:`idcontrol.solvers.daqp_native` calls DAQP's C functions with structs it lays out itself. The layout
written here (field order and types of ``types.h`` and ``api.h``, padded as the C compiler pads them, which is
what ``ctypes`` computes) is only trusted after :func:`probe` ran against the installed shared object in a
*separate process*: a wrong offset can make the C code write out of bounds, and a crash there must not take
the controller down. The probe:

* fills a settings struct with DAQP's defaults and reports every field as read through this layout, plus
  whether any byte past the struct's end was written (the caller compares the fields with what the
  extension module itself reports for a fresh ``daqp.Model``);
* sets up, solves, updates and solves again a small QP (bounds, inequality and equality rows) in a zeroed
  workspace followed by zeroed spare bytes, and reports the workspace fields it reads back (the problem
  pointer, sizes, the settings pointer, the iteration count), the answers, and whether the spare bytes after
  the workspace, the result and the problem stayed untouched;
* frees what DAQP allocated (``free_daqp_workspace``, ``free_daqp_ldp``) and reports the pointers it cleared.

This module imports nothing but the standard library and numpy so that the child starts fast; run as a
script, ``python daqp_abi.py LIBRARY LAYOUT_JSON`` prints the probe's observations as one JSON object.
"""

from __future__ import annotations

import ctypes
import json
import struct
import sys
from typing import Any

import numpy as np

#: the DAQP release series whose headers this layout was written from
SUPPORTED_SERIES = ("0.11.",)

_int, _double, _ptr = ctypes.c_int, ctypes.c_double, ctypes.c_void_p


class DAQPProblem(ctypes.Structure):
    """min ½xᵀHx + fᵀx, blower ≤ [x_1..x_ms; A x] ≤ bupper (row-major H (n, n), A (m − ms, n))."""

    _fields_ = [
        ("n", _int),
        ("m", _int),
        ("ms", _int),
        ("H", _ptr),
        ("f", _ptr),
        ("A", _ptr),
        ("bupper", _ptr),
        ("blower", _ptr),
        ("sense", _ptr),
        ("break_points", _ptr),
        ("nh", _int),
        ("problem_type", _int),
    ]


class DAQPSettings(ctypes.Structure):
    """The solver's tolerances and limits."""

    _fields_ = [
        ("primal_tol", _double),
        ("dual_tol", _double),
        ("zero_tol", _double),
        ("pivot_tol", _double),
        ("progress_tol", _double),
        ("cycle_tol", _int),
        ("iter_limit", _int),
        ("fval_bound", _double),
        ("eps_prox", _double),
        ("eta_prox", _double),
        ("rho_soft", _double),
        ("rel_subopt", _double),
        ("abs_subopt", _double),
        ("sing_tol", _double),
        ("refactor_tol", _double),
        ("time_limit", _double),
        ("w_soft", _double),
        ("eq_reduction", _int),
        ("presolve", _int),
    ]


class DAQPResult(ctypes.Structure):
    """Where a solve writes x (n,) and λ (m,) (caller-owned), and its status."""

    _fields_ = [
        ("x", _ptr),
        ("lam", _ptr),
        ("fval", _double),
        ("soft_slack", _double),
        ("exitflag", _int),
        ("iter", _int),
        ("nodes", _int),
        ("solve_time", _double),
        ("setup_time", _double),
    ]


class DAQPWorkspace(ctypes.Structure):
    """The solver's state; every pointer in it is DAQP's (malloc) except ``qp`` and ``settings``."""

    _fields_ = [
        ("qp", _ptr),
        ("n", _int),
        ("m", _int),
        ("ms", _int),
        ("M", _ptr),
        ("dupper", _ptr),
        ("dlower", _ptr),
        ("Rinv", _ptr),
        ("v", _ptr),
        ("sense", _ptr),
        ("scaling", _ptr),
        ("RinvD", _ptr),
        ("x", _ptr),
        ("xold", _ptr),
        ("lam", _ptr),
        ("lam_star", _ptr),
        ("u", _ptr),
        ("fval", _double),
        ("L", _ptr),
        ("D", _ptr),
        ("xldl", _ptr),
        ("zldl", _ptr),
        ("reuse_ind", _int),
        ("WS", _ptr),
        ("n_active", _int),
        ("iterations", _int),
        ("sing_ind", _int),
        ("prox_mask", _ptr),
        ("n_prox", _int),
        ("soft_slack", _double),
        ("settings", _ptr),
        ("bnb", _ptr),
        ("outer_iter", _int),
        ("hierarchy", _ptr),
        ("avi", _ptr),
        ("eq", _ptr),
        ("timer", _ptr),
        ("Mu", _ptr),
        ("rho_ls", _ptr),
        ("rho_us", _ptr),
        ("w_ls", _ptr),
        ("w_us", _ptr),
        ("state", _int),
    ]


STRUCTS: dict[str, type[ctypes.Structure]] = {
    "problem": DAQPProblem,
    "settings": DAQPSettings,
    "result": DAQPResult,
    "workspace": DAQPWorkspace,
}
_CODE = {_int: "i", _double: "d", _ptr: "P"}  # struct-module codes (native sizes)

#: DAQP's update masks (constants.h) and constraint flags
UPDATE_RINV, UPDATE_M, UPDATE_V, UPDATE_D, UPDATE_SENSE = 1, 2, 4, 8, 16
ACTIVE, LOWER, IMMUTABLE = 1, 2, 4
EQUALITY = ACTIVE | IMMUTABLE
EXIT_OPTIMAL, EXIT_SOFT_OPTIMAL = 1, 2
#: DAQP's "no bound" (its DAQP_INF)
INFINITY = 1e30

#: the C functions the compiled path calls, and those the owner of a workspace frees it with
FUNCTIONS = (
    "daqp_default_settings",
    "setup_daqp_main",
    "daqp_update_ldp",
    "daqp_solve",
    "free_daqp_workspace",
    "free_daqp_ldp",
)

Layout = dict[str, dict[str, Any]]  # struct -> {"size": bytes, "fields": {name: [offset, code]}}


def layout() -> Layout:
    """The layout of the four structs as this module declares them (offsets and sizes in bytes)."""
    out: Layout = {}
    for key, cls in STRUCTS.items():
        fields = {name: [getattr(cls, name).offset, _CODE[typ]] for name, typ in cls._fields_}
        out[key] = {"size": ctypes.sizeof(cls), "fields": fields}
    return out


def numpy_dtype(entry: dict[str, Any], only: tuple[str, ...] | None = None) -> np.dtype:
    """A numpy structured dtype of one struct of :func:`layout` (only the named fields; the full size)."""
    formats = {"i": np.intc, "d": np.float64, "P": np.uintp}
    names = [name for name in entry["fields"] if only is None or name in only]
    return np.dtype(
        {
            "names": names,
            "formats": [formats[entry["fields"][k][1]] for k in names],
            "offsets": [entry["fields"][k][0] for k in names],
            "itemsize": entry["size"],
        }
    )


def probe_problem() -> dict[str, np.ndarray]:
    """The probe's QP: 3 variables, bounds on the first 2, an inequality row and an equality row, then a new f.

    Its sizes (3 variables, 4 constraints, 2 bounds) differ from one another, so swapped size fields show.
    """
    return {
        "H": np.array([[4.0, 1.0, 0.0], [1.0, 3.0, 0.5], [0.0, 0.5, 2.0]]),
        "f": np.array([-1.0, 2.0, -0.5]),
        "A": np.array([[1.0, 1.0, 1.0], [1.0, -1.0, 0.0]]),
        "upper": np.array([1.0, 0.2, 0.5, 0.1]),
        "lower": np.array([-0.1, -1.0, -1e30, 0.1]),
        "sense": np.array([0, 0, 0, EQUALITY], dtype=np.intc),
        "f_updated": np.array([-3.0, 1.0, 2.0]),
    }


class _Struct:
    """One struct of a layout in a zeroed ctypes buffer followed by ``spare`` bytes set to ``fill``."""

    def __init__(self, entry: dict[str, Any], spare: int, fill: int) -> None:
        self.entry = entry
        self.buffer = ctypes.create_string_buffer(entry["size"] + spare)
        ctypes.memset(ctypes.addressof(self.buffer) + entry["size"], fill, spare)
        self.fill = fill

    @property
    def address(self) -> int:
        return ctypes.addressof(self.buffer)

    def __getitem__(self, name: str) -> Any:
        offset, code = self.entry["fields"][name]
        return struct.unpack_from("@" + code, self.buffer, offset)[0]

    def __setitem__(self, name: str, value: Any) -> None:
        offset, code = self.entry["fields"][name]
        struct.pack_into("@" + code, self.buffer, offset, value)

    def spare_untouched(self) -> bool:
        tail = self.buffer.raw[self.entry["size"] :]
        return tail == bytes([self.fill]) * len(tail)


def probe(library: str, lay: Layout) -> dict[str, Any]:
    """Run the probe against the shared object ``library`` with the layout ``lay`` (meant for a child process)."""
    lib = ctypes.CDLL(library)
    for name in FUNCTIONS:
        getattr(lib, name).restype = _int if name in ("setup_daqp_main", "daqp_update_ldp") else None
    data = {k: np.ascontiguousarray(v) for k, v in probe_problem().items()}
    n, m = data["H"].shape[0], data["upper"].shape[0]
    ms = m - data["A"].shape[0]
    obs: dict[str, Any] = {}

    settings = _Struct(lay["settings"], 256, 0xA5)
    lib.daqp_default_settings(_ptr(settings.address))
    obs["settings"] = {name: settings[name] for name in lay["settings"]["fields"]}
    obs["settings_spare_untouched"] = settings.spare_untouched()

    problem = _Struct(lay["problem"], 256, 0xA5)
    for name, value in (("n", n), ("m", m), ("ms", ms), ("nh", 0), ("problem_type", 0), ("break_points", 0)):
        problem[name] = value
    for name, key in (("H", "H"), ("f", "f"), ("A", "A"), ("bupper", "upper"), ("blower", "lower"), ("sense", "sense")):
        problem[name] = data[key].ctypes.data
    work = _Struct(lay["workspace"], 4096, 0xA5)
    work["settings"] = settings.address
    setup_time = _double(0.0)
    obs["setup_flag"] = lib.setup_daqp_main(_ptr(problem.address), _ptr(work.address), ctypes.byref(setup_time), 0)
    obs["work_qp_is_problem"] = work["qp"] == problem.address
    obs["work_sizes"] = [work["n"], work["m"], work["ms"]]
    obs["work_settings_kept"] = work["settings"] == settings.address
    obs["work_sense_allocated"] = bool(work["sense"])
    obs["solves"] = []
    x, lam = np.zeros(n), np.zeros(m)
    result = _Struct(lay["result"], 256, 0xA5)
    if obs["setup_flag"] >= 0:
        for update in (False, True):
            if update:
                data["f"][:] = data["f_updated"]
                obs["update_flag"] = lib.daqp_update_ldp(UPDATE_V, _ptr(work.address), _ptr(problem.address))
            result["x"], result["lam"] = x.ctypes.data, lam.ctypes.data
            lib.daqp_solve(_ptr(result.address), _ptr(work.address))
            obs["solves"].append(
                {
                    "x": x.tolist(),
                    "lam": lam.tolist(),
                    "exitflag": result["exitflag"],
                    "iterations": result["iter"],
                    "fval": result["fval"],
                    "work_iterations": work["iterations"],
                }
            )
    obs["work_spare_untouched"] = work.spare_untouched()
    obs["result_spare_untouched"] = result.spare_untouched()
    obs["problem_spare_untouched"] = problem.spare_untouched()
    work["settings"] = 0  # ours, not DAQP's to free
    lib.free_daqp_workspace(_ptr(work.address))
    lib.free_daqp_ldp(_ptr(work.address))
    obs["freed"] = {"lam": work["lam"], "sense": work["sense"], "settings": work["settings"]}
    return obs


if __name__ == "__main__":
    print(json.dumps(probe(sys.argv[1], json.loads(sys.argv[2]))))
