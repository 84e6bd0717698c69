"""DAQP called from numba nopython code, so that a formulation's kernel sets up, updates and solves its QPs itself.

Binds: ``daqp_default_settings``, ``setup_daqp_main``, ``daqp_update_ldp`` and ``daqp_solve`` of the installed
``daqp`` extension's shared object, registered with LLVM as ``idcontrol_<name>`` (kernels that call them are
cached on disk like the others). The structs that cross (problem, settings, result, workspace) are numpy records
laid out by :mod:`idcontrol.solvers.daqp_abi`; the problem points at the record's own arrays.

Why: a formulation no longer has to leave compiled code to solve, and a solve costs a fraction of one through
``daqp.Model`` with the same x (bitwise), exit flags and iteration counts (docs/benchmarks.md, "DAQP from
compiled code").

Safety: callers test ``NATIVE_AVAILABLE`` (:func:`native_available`), which runs a self-check once: (1) the daqp
release is one the layout was written for (:data:`~idcontrol.solvers.daqp_abi.SUPPORTED_SERIES`) and exports
every function; (2) :func:`~idcontrol.solvers.daqp_abi.probe` runs in a child process (a wrong layout that makes
the C code write out of bounds crashes the child, not this process) and what it reads back must equal what the
extension itself reports (default settings, answers, iterations); (3) known QPs (:func:`known_problems`) solved
here and by ``DenseQP`` give the same x (to 1e-12), exit flags and iterations. A failure turns the path off with
one logged warning (:class:`NativeQP` then raises :class:`~idcontrol.errors.NativeSolverUnavailable`). In the
kernels, arrays that no longer have the record's sizes never reach C (``EXIT_SHAPE_MISMATCH``).

Use: make a :class:`NativeQP` per problem size from Python, write the data into its arrays in the kernel,
:func:`solve` (``RECORD`` is its numba type, for explicit signatures)::

    if NATIVE_AVAILABLE:
        qp = NativeQP(12, 20, bounds=True)        # 12 variables with box bounds, 20 rows: once, from Python

    @njit(cache=True)
    def stage_one(qp, H, g, C, l, u):
        qp.H[:, :] = H; qp.f[:] = g; qp.A[:, :] = C
        qp.lower[12:] = l; qp.upper[12:] = u      # the box bounds are qp.lower[:12], qp.upper[:12]
        solve(qp, WARM, CHANGED_ALL)              # set up on first use; then update the LDP and solve
        return qp.found                           # qp.x, qp.lam, qp.exitflag, qp.iterations

:func:`solve` starts and retries as :mod:`idcontrol.solvers.daqp_start` says (as ``daqp.Model`` is driven in
:mod:`idcontrol.solvers.daqp_model`). It allocates nothing; what DAQP allocates at set-up is freed when the record
goes.
"""

from __future__ import annotations

import ctypes
import importlib.metadata
import json
import logging
import subprocess
import sys

import daqp
import numpy as np
from llvmlite import binding as llvm
from numba import cfunc, njit, typeof, types
from numba.experimental import structref
from numpy.typing import NDArray

from idcontrol.arrays import IN_MATRIX, IN_VECTOR, MATRIX, VECTOR, boolean, float64, intp
from idcontrol.errors import NativeSolverUnavailable
from idcontrol.solvers import daqp_abi as abi
from idcontrol.solvers.daqp_abi import INFINITY
from idcontrol.solvers.daqp_model import ModelQP
from idcontrol.solvers.daqp_start import (
    COLD,
    FLAGS,
    GIVEN,
    LOOSE_FACTOR,
    RETRY_COLD,
    RETRY_NONE,
    WARM,
    optimal,
    retry_after,
    start_flags,
)

_LOG = logging.getLogger(__name__)

#: what changed since the last solve (DAQP's update bits): the Hessian, A, f, the bounds
CHANGED_H, CHANGED_A, CHANGED_F, CHANGED_BOUNDS = abi.UPDATE_RINV, abi.UPDATE_M, abi.UPDATE_V, abi.UPDATE_D
CHANGED_ALL = CHANGED_H | CHANGED_A | CHANGED_F | CHANGED_BOUNDS
#: exit flag when the record's arrays no longer have its sizes (nothing was passed to C)
EXIT_SHAPE_MISMATCH = -100
#: exit flag of a function the installed DAQP does not export (its stand-in; the path is off then)
EXIT_MISSING_FUNCTION = -101

LIBRARY = daqp.__file__
LAYOUT = abi.layout()
PROBLEM = abi.numpy_dtype(LAYOUT["problem"])
SETTINGS = abi.numpy_dtype(LAYOUT["settings"])
RESULT = abi.numpy_dtype(LAYOUT["result"])
#: the workspace fields the compiled path touches (the record is the struct's full size)
WORKSPACE = abi.numpy_dtype(LAYOUT["workspace"], only=("qp", "n", "m", "ms", "sense", "settings", "iterations"))

# ---------------------------------------------------------------------------------------------- the C functions

_SIGNATURES = {
    "daqp_default_settings": types.void(types.uintp),
    "setup_daqp_main": types.int32(types.uintp, types.uintp, types.uintp, types.int32),
    "daqp_update_ldp": types.int32(types.int32, types.uintp, types.uintp),
    "daqp_solve": types.void(types.uintp, types.uintp),
}


def _stand_in(name: str):
    """A C function with ``name``'s signature that solves nothing: it links a kernel where DAQP lacks ``name``."""
    if name == "daqp_default_settings":
        return cfunc(_SIGNATURES[name])(lambda settings: None)
    if name == "setup_daqp_main":
        return cfunc(_SIGNATURES[name])(lambda problem, work, time, mask: np.int32(EXIT_MISSING_FUNCTION))
    if name == "daqp_update_ldp":
        return cfunc(_SIGNATURES[name])(lambda mask, work, problem: np.int32(EXIT_MISSING_FUNCTION))
    return cfunc(_SIGNATURES[name])(lambda result, work: None)


def _bind() -> tuple[ctypes.CDLL, tuple[str, ...], list]:
    """Register the C functions with LLVM (stand-ins for those the library lacks); (library, missing, stand-ins)."""
    lib = ctypes.CDLL(LIBRARY)  # the extension module's shared object, already loaded: the same handle
    missing, stand_ins = [], []
    for name in abi.FUNCTIONS:
        address = getattr(lib, name, None)
        if name in _SIGNATURES:
            if address is None:
                missing.append(name)
                stand_ins.append(_stand_in(name))
                llvm.add_symbol("idcontrol_" + name, stand_ins[-1].address)
            else:
                llvm.add_symbol("idcontrol_" + name, ctypes.cast(address, ctypes.c_void_p).value)
        elif address is None:
            missing.append(name)
        else:
            address.argtypes, address.restype = [ctypes.c_void_p], None
    return lib, tuple(missing), stand_ins


_LIB, _MISSING, _STAND_INS = _bind()
_default_settings = types.ExternalFunction("idcontrol_daqp_default_settings", _SIGNATURES["daqp_default_settings"])
_setup = types.ExternalFunction("idcontrol_setup_daqp_main", _SIGNATURES["setup_daqp_main"])
_update_ldp = types.ExternalFunction("idcontrol_daqp_update_ldp", _SIGNATURES["daqp_update_ldp"])
_daqp_solve = types.ExternalFunction("idcontrol_daqp_solve", _SIGNATURES["daqp_solve"])


class _WorkspaceMemory(abi.DAQPWorkspace):
    """The C workspace; when the last array viewing it goes, DAQP's allocations behind its pointers go too."""

    def __del__(self) -> None:
        try:
            self.settings = None  # the record's own array, not DAQP's to free
            _LIB.free_daqp_workspace(ctypes.addressof(self))
            _LIB.free_daqp_ldp(ctypes.addressof(self))
        except Exception:  # at interpreter shutdown ctypes may be gone already, and the memory with the process
            pass


# ------------------------------------------------------------------------------------------------- the record


@structref.register
class NativeQPType(types.StructRef):
    """The numba type of :class:`NativeQP`."""

    def preprocess_fields(self, fields):
        return tuple((name, types.unliteral(typ)) for name, typ in fields)


#: numba types of the one-element record arrays that hold the C structs
C_PROBLEM, C_SETTINGS = typeof(np.zeros(1, PROBLEM)), typeof(np.zeros(1, SETTINGS))
C_RESULT, C_WORKSPACE = typeof(np.zeros(1, RESULT)), typeof(np.zeros(1, WORKSPACE))
RECORD = NativeQPType(
    [
        ("n", intp),  # variables
        ("m", intp),  # constraints: ms bounds, then rows
        ("ms", intp),  # bounded variables (n or 0)
        ("rows", intp),  # rows of A
        ("equalities", intp),  # the last rows of A are equalities A x = upper
        ("primal_tol", float64),  # primal feasibility tolerance, problem units
        ("iter_limit", intp),
        ("H", MATRIX),  # (n, n) Hessian (positive semidefinite)
        ("f", VECTOR),  # (n,) linear term
        ("A", MATRIX),  # (rows, n)
        ("lower", VECTOR),  # (m,) bounds of x (when ms = n), then of A x; ±INFINITY for none
        ("upper", VECTOR),  # (m,)
        ("sense", FLAGS),  # (m,) DAQP's constraint flags of the next solve (GIVEN: written by the caller)
        ("x", VECTOR),  # (n,) solution of the last solve
        ("lam", VECTOR),  # (m,) its multipliers (those of the last found solve)
        ("exitflag", intp),  # DAQP's exit flag of the last solve (1, 2: found)
        ("iterations", intp),  # iterations of the last call into daqp_solve
        ("found", boolean),
        ("ready", boolean),  # DAQP's workspace is set up
        ("warm_ok", boolean),  # lam holds a found solve's multipliers (a WARM start is possible)
        ("c_problem", C_PROBLEM),
        ("c_settings", C_SETTINGS),
        ("c_result", C_RESULT),
        ("c_work", C_WORKSPACE),
        ("c_time", VECTOR),  # setup_daqp_main's set-up time
    ]
)


class NativeQP(structref.StructRefProxy):
    """One DAQP workspace for QPs of one size, usable from compiled code (a numba structref).

    min ½ xᵀHx + fᵀx  s.t.  lower ≤ [x; A x] ≤ upper (``bounds``) or lower ≤ A x ≤ upper, where the last
    ``equalities`` rows of A are equalities A x = upper.

    Parameters
    ----------
    n : variables.
    rows : rows of A.
    bounds : box bounds on x (the first n entries of ``lower``/``upper``).
    equalities : how many of A's last rows are equalities.
    primal_tol, iter_limit : as :class:`~idcontrol.solvers.qp.DenseQP`'s.

    Raises :class:`~idcontrol.errors.NativeSolverUnavailable` when the self-check turned the path off.
    From Python the fields are properties (a compiled call each: for tests and diagnostics).
    """

    def __new__(
        cls,
        n: int,
        rows: int,
        *,
        bounds: bool = True,
        equalities: int = 0,
        primal_tol: float = 1e-8,
        iter_limit: int = 1000,
    ) -> NativeQP:
        if not native_available():
            raise NativeSolverUnavailable("DAQP", native_status())
        return _new(n, rows, bounds, equalities, primal_tol, iter_limit)

    @property
    def n(self) -> int:
        return _status(self)[3]

    @property
    def rows(self) -> int:
        return _status(self)[4]

    @property
    def c_structs(self) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
        """The records DAQP reads and writes: (problem, settings, result, workspace), one element each."""
        return _c_structs(self)

    @property
    def H(self) -> NDArray[np.float64]:
        return _arrays(self)[0]

    @property
    def f(self) -> NDArray[np.float64]:
        return _arrays(self)[1]

    @property
    def A(self) -> NDArray[np.float64]:
        return _arrays(self)[2]

    @property
    def lower(self) -> NDArray[np.float64]:
        return _arrays(self)[3]

    @property
    def upper(self) -> NDArray[np.float64]:
        return _arrays(self)[4]

    @property
    def sense(self) -> NDArray[np.int32]:
        return _arrays(self)[5]

    @property
    def x(self) -> NDArray[np.float64]:
        return _arrays(self)[6]

    @property
    def lam(self) -> NDArray[np.float64]:
        return _arrays(self)[7]

    @property
    def exitflag(self) -> int:
        return _status(self)[0]

    @property
    def iterations(self) -> int:
        return _status(self)[1]

    @property
    def found(self) -> bool:
        return _status(self)[2]


structref.define_boxing(NativeQPType, NativeQP)


def _new(n: int, rows: int, bounds: bool, equalities: int, primal_tol: float, iter_limit: int) -> NativeQP:
    """A record and its arrays (allocated here, in Python, so that the workspace's memory frees DAQP's with it)."""
    if n < 1 or rows < 0 or not 0 <= equalities <= rows:
        raise ValueError(
            f"NativeQP needs n ≥ 1 and 0 ≤ equalities ≤ rows (n={n}, rows={rows}, equalities={equalities})"
        )
    m = rows + (n if bounds else 0)
    work = np.frombuffer(_WorkspaceMemory(), dtype=WORKSPACE, count=1)
    return _assemble(
        n,
        m,
        n if bounds else 0,
        equalities,
        float(primal_tol),
        int(iter_limit),
        np.zeros((n, n)),
        np.zeros(n),
        np.zeros((rows, n)),
        np.full(m, -INFINITY),
        np.full(m, INFINITY),
        np.zeros(m, dtype=np.int32),
        np.zeros(n),
        np.zeros(m),
        np.zeros(1, PROBLEM),
        np.zeros(1, SETTINGS),
        np.zeros(1, RESULT),
        work,
        np.zeros(1),
    )


@njit(
    RECORD(
        intp,
        intp,
        intp,
        intp,
        float64,
        intp,
        MATRIX,
        VECTOR,
        MATRIX,
        VECTOR,
        VECTOR,
        FLAGS,
        VECTOR,
        VECTOR,
        C_PROBLEM,
        C_SETTINGS,
        C_RESULT,
        C_WORKSPACE,
        VECTOR,
    ),
    cache=True,
)
def _assemble(
    n,
    m,
    ms,
    equalities,
    primal_tol,
    iter_limit,
    H,
    f,
    A,
    lower,
    upper,
    sense,
    x,
    lam,
    c_problem,
    c_settings,
    c_result,
    c_work,
    c_time,
):
    qp = structref.new(RECORD)
    qp.n, qp.m, qp.ms, qp.rows, qp.equalities = n, m, ms, m - ms, equalities
    qp.primal_tol, qp.iter_limit = primal_tol, iter_limit
    qp.H, qp.f, qp.A, qp.lower, qp.upper, qp.sense, qp.x, qp.lam = H, f, A, lower, upper, sense, x, lam
    qp.exitflag, qp.iterations, qp.found, qp.ready, qp.warm_ok = 0, 0, False, False, False
    qp.c_problem, qp.c_settings, qp.c_result, qp.c_work, qp.c_time = c_problem, c_settings, c_result, c_work, c_time
    p = c_problem[0]
    p.n, p.m, p.ms, p.nh, p.problem_type, p.break_points = n, m, ms, 0, 0, 0
    c_work[0].settings = c_settings.ctypes.data  # ours: DAQP neither allocates nor frees it
    return qp


@njit(types.Tuple((MATRIX, VECTOR, MATRIX, VECTOR, VECTOR, FLAGS, VECTOR, VECTOR))(RECORD), cache=True)
def _arrays(qp):
    return qp.H, qp.f, qp.A, qp.lower, qp.upper, qp.sense, qp.x, qp.lam


@njit(types.Tuple((C_PROBLEM, C_SETTINGS, C_RESULT, C_WORKSPACE))(RECORD), cache=True)
def _c_structs(qp):
    return qp.c_problem, qp.c_settings, qp.c_result, qp.c_work


@njit(types.Tuple((intp, intp, boolean, intp, intp))(RECORD), cache=True)
def _status(qp):
    return qp.exitflag, qp.iterations, qp.found, qp.n, qp.rows


# ------------------------------------------------------------------------------------------------- the solve


@njit(boolean(RECORD), cache=True)
def _shapes_hold(qp):
    """The arrays still have the record's sizes (a kernel may have replaced one): checked before C sees them."""
    n, m = qp.n, qp.m
    return (
        qp.H.shape[0] == n
        and qp.H.shape[1] == n
        and qp.f.shape[0] == n
        and qp.A.shape[0] == qp.rows
        and qp.A.shape[1] == n
        and qp.lower.shape[0] == m
        and qp.upper.shape[0] == m
        and qp.sense.shape[0] == m
        and qp.x.shape[0] == n
        and qp.lam.shape[0] == m
    )


@njit(types.void(RECORD), cache=True)
def _point_problem_at_arrays(qp):
    p = qp.c_problem[0]
    p.H, p.f = qp.H.ctypes.data, qp.f.ctypes.data
    p.A = qp.A.ctypes.data if qp.rows > 0 else 0
    has_constraints = qp.m > 0
    p.bupper = qp.upper.ctypes.data if has_constraints else 0
    p.blower = qp.lower.ctypes.data if has_constraints else 0
    p.sense = qp.sense.ctypes.data if has_constraints else 0


@njit(intp(RECORD), cache=True)
def _solve_once(qp):
    """One daqp_solve into the record's x and λ; its exit flag."""
    r = qp.c_result[0]
    r.x = qp.x.ctypes.data
    r.lam = qp.lam.ctypes.data if qp.m > 0 else 0
    r.fval, r.soft_slack, r.exitflag, r.iter, r.nodes, r.solve_time, r.setup_time = 0.0, 0.0, 0, 0, 0, 0.0, 0.0
    _daqp_solve(qp.c_result.ctypes.data, qp.c_work.ctypes.data)
    qp.iterations = r.iter
    return r.exitflag


@njit(intp(RECORD, intp, intp), cache=True)
def solve(qp, start, changed):
    """Solve the QP in ``qp``'s arrays; its exit flag (``qp.found``: 1 or 2). ``qp.x``, ``qp.lam``, ``qp.iterations``.

    ``start``: COLD, WARM (the previous found solve's active set, as ``DenseQP``'s ``warm``) or GIVEN (the
    flags the caller wrote into ``qp.sense``: 1 active at the upper bound, 3 at the lower bound, 0 inactive).
    ``changed``: the CHANGED_* bits of the data written since the last solve (CHANGED_ALL when unsure; the
    first solve sets everything up). The equality rows are always equalities.
    """
    first_equality = qp.m - qp.equalities
    if not _shapes_hold(qp):
        qp.exitflag, qp.found, qp.warm_ok = EXIT_SHAPE_MISMATCH, False, False
        return EXIT_SHAPE_MISMATCH
    sense = qp.sense
    start_flags(sense, qp.lam, qp.warm_ok, start, first_equality)
    _point_problem_at_arrays(qp)
    problem, work, settings = qp.c_problem.ctypes.data, qp.c_work.ctypes.data, qp.c_settings[0]
    if not qp.ready:
        _default_settings(qp.c_settings.ctypes.data)  # set up as daqp.Model does: defaults, then ours
        flag = _setup(problem, work, qp.c_time.ctypes.data, 0)
        if flag < 0:  # DAQP freed what it allocated and cleared the settings pointer
            qp.c_work[0].settings = qp.c_settings.ctypes.data
            qp.exitflag, qp.iterations, qp.found, qp.warm_ok = flag, 0, False, False
            return flag
        settings.primal_tol, settings.iter_limit = qp.primal_tol, qp.iter_limit
        qp.ready = True
    else:
        mask = (changed & CHANGED_ALL) | abi.UPDATE_SENSE
        if qp.rows == 0:
            mask &= ~CHANGED_A
        flag = _update_ldp(mask, work, problem)
        if flag < 0:  # the new data could not be formed into an LDP (e.g. a Hessian DAQP cannot factor)
            qp.exitflag, qp.iterations, qp.found, qp.warm_ok = flag, 0, False, False
            return flag
    exitflag = _solve_once(qp)
    retry = retry_after(exitflag, RETRY_NONE, sense, first_equality)
    while retry != RETRY_NONE:
        if retry == RETRY_COLD:
            _update_ldp(abi.UPDATE_SENSE, work, problem)
            exitflag = _solve_once(qp)
        else:
            settings.primal_tol = LOOSE_FACTOR * qp.primal_tol
            exitflag = _solve_once(qp)
            settings.primal_tol = qp.primal_tol
        retry = retry_after(exitflag, retry, sense, first_equality)
    qp.exitflag, qp.found = exitflag, optimal(exitflag)
    qp.warm_ok = qp.found
    return exitflag


@njit(intp(RECORD, IN_MATRIX, IN_VECTOR, IN_MATRIX, IN_VECTOR, IN_VECTOR, intp), cache=True)
def solve_stacked(qp, H, g, A, lower, upper, start):
    """Copy a problem in ``DenseQP.solve_stacked``'s layout into ``qp`` and :func:`solve` it (everything changed)."""
    if (
        H.shape != qp.H.shape
        or g.shape != qp.f.shape
        or A.shape != qp.A.shape
        or lower.shape != qp.lower.shape
        or upper.shape != qp.upper.shape
    ):
        qp.exitflag, qp.found, qp.warm_ok = EXIT_SHAPE_MISMATCH, False, False
        return EXIT_SHAPE_MISMATCH
    qp.H[:, :] = H
    qp.f[:] = g
    qp.A[:, :] = A
    qp.lower[:] = lower
    qp.upper[:] = upper
    return solve(qp, start, CHANGED_ALL)


FLAGS_IN = types.Array(types.int32, 1, "C", readonly=True)


@njit(
    types.Tuple((intp, VECTOR, VECTOR, intp))(
        RECORD, IN_MATRIX, IN_VECTOR, IN_MATRIX, IN_VECTOR, IN_VECTOR, intp, FLAGS_IN
    ),
    cache=True,
)
def solve_copied(qp, H, g, A, lower, upper, start, given):
    """:func:`solve_stacked`, with ``given`` (the first m − equalities flags) written into ``qp.sense`` first when
    ``start`` is GIVEN; (exit flag, a copy of x, a copy of λ, iterations): one call for ``DenseQP``."""
    if start == GIVEN:
        for i in range(min(given.shape[0], qp.m)):
            qp.sense[i] = given[i]
    exitflag = solve_stacked(qp, H, g, A, lower, upper, start)
    return exitflag, qp.x.copy(), qp.lam.copy(), qp.iterations


@njit(types.void(RECORD), cache=True)
def forget(qp):
    """Drop the warm start (the next WARM solve starts cold)."""
    qp.warm_ok = False


# -------------------------------------------------------------------------------------------- the self-check

_STATUS: tuple[bool, str] | None = None


def native_available() -> bool:
    """Whether the compiled path passed its self-check (run once per process, on the first question)."""
    global _STATUS
    if _STATUS is None:
        _STATUS = self_check()
    return _STATUS[0]


def native_status() -> str:
    """Why the compiled path is on or off (runs the self-check if it has not run)."""
    native_available()
    return _STATUS[1]


def __getattr__(name: str):
    if name == "NATIVE_AVAILABLE":  # the self-check runs on first access, not at import
        return native_available()
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def self_check(*, version: str | None = None, layout: abi.Layout | None = None, warn: bool = True) -> tuple[bool, str]:
    """Run the checks of the module docstring; (passed, reason). A failure is logged once when ``warn``.

    ``version`` and ``layout`` replace the installed version and the declared layout (tests simulate a mismatch).
    """
    try:
        reason = _first_failure(version or importlib.metadata.version("daqp"), layout or LAYOUT)
    except Exception as e:  # any surprise turns the path off; it never stops the controller
        reason = f"the self-check raised {type(e).__name__}: {e}"
    if reason is None:
        return True, f"DAQP {daqp_version()} at {LIBRARY}: layout probed, known QPs agree with daqp.Model"
    if warn:
        _LOG.warning("DAQP's compiled path is off, QPs are solved through daqp.Model: %s", reason)
    return False, reason


def daqp_version() -> str:
    return importlib.metadata.version("daqp")


def _first_failure(version: str, layout: abi.Layout) -> str | None:
    if not version.startswith(abi.SUPPORTED_SERIES):
        return f"daqp {version} is not a release the struct layout was written for ({', '.join(abi.SUPPORTED_SERIES)}x)"
    if _MISSING:
        return f"the DAQP library does not export {', '.join(_MISSING)}"
    failure = _probe_in_child(layout)
    if failure is None and layout is LAYOUT:
        failure = _compare_known_problems()
    return failure


def _probe_in_child(layout: abi.Layout) -> str | None:
    """Run :func:`daqp_abi.probe` in a child process and compare its observations with ``daqp.Model``."""
    try:
        run = subprocess.run(
            [sys.executable, abi.__file__, LIBRARY, json.dumps(layout)], capture_output=True, text=True, timeout=120
        )
    except (OSError, subprocess.SubprocessError) as e:
        return f"the layout probe could not run ({e})"
    if run.returncode != 0:
        how = f"signal {-run.returncode}" if run.returncode < 0 else f"exit {run.returncode}"
        return f"the layout probe failed ({how}): {run.stderr.strip()[-300:]}"
    obs = json.loads(run.stdout)
    expected = daqp.Model().settings
    wrong = sorted(k for k, v in expected.items() if obs["settings"].get(k) != v)
    if wrong:
        return f"the settings struct reads back wrong fields: {', '.join(wrong)}"
    for key in (
        "settings_spare_untouched",
        "work_spare_untouched",
        "result_spare_untouched",
        "problem_spare_untouched",
        "work_qp_is_problem",
        "work_settings_kept",
        "work_sense_allocated",
    ):
        if not obs[key]:
            return f"the layout probe found {key} false"
    data = abi.probe_problem()
    m, n = data["upper"].shape[0], data["H"].shape[0]
    if obs["setup_flag"] != 1 or obs["work_sizes"] != [n, m, m - data["A"].shape[0]] or obs.get("update_flag", -1) < 0:
        return (
            f"the probe's set-up reads back wrong: flag {obs['setup_flag']}, sizes {obs['work_sizes']}, "
            f"update {obs.get('update_flag')}"
        )
    if any(obs["freed"].values()):
        return f"free_daqp_workspace/free_daqp_ldp left pointers set: {obs['freed']}"
    model = daqp.Model()
    model.setup(data["H"], data["f"].copy(), data["A"], data["upper"], data["lower"], data["sense"])
    for k, seen in enumerate(obs["solves"]):
        if k:
            model.update(f=data["f_updated"])
        x, fval, exitflag, info = model.solve()
        same = (
            exitflag == seen["exitflag"]
            and info["iterations"] == seen["iterations"] == seen["work_iterations"]
            and np.allclose(x, seen["x"], rtol=0, atol=1e-12)
            and np.allclose(info["lam"], seen["lam"], rtol=0, atol=1e-12)
            and abs(fval - seen["fval"]) <= 1e-12 * (1 + abs(fval))
        )
        if not same:
            return f"the probe's solve {k} differs from daqp.Model's: {seen} against x={x.tolist()}, exit {exitflag}"
    if len(obs["solves"]) != 2:
        return "the probe solved nothing"
    return None


def known_problems() -> list[tuple[str, dict]]:
    """The self-check's QPs: (name, DenseQP.solve_stacked arguments, with ``warm`` for sequences)."""
    rng = np.random.default_rng(20240611)
    out = []

    def spd(n):
        Q = rng.standard_normal((n, n))
        return Q @ Q.T + n * np.eye(n)

    def add(name, H, g, A, lower, upper, bounds, equalities=0, warm=False):
        out.append(
            (
                name,
                {
                    "H": H,
                    "g": g,
                    "A": np.ascontiguousarray(A).reshape(-1, g.shape[0]),
                    "lower": lower,
                    "upper": upper,
                    "bounds": bounds,
                    "equalities": equalities,
                    "warm": warm,
                },
            )
        )

    n = 6
    A = rng.standard_normal((4, n))
    add(
        "bounds and inequality rows",
        spd(n),
        rng.standard_normal(n) * 5,
        A,
        np.r_[-np.ones(n), np.full(4, -INFINITY)],
        np.r_[np.ones(n), 0.1 * np.ones(4)],
        True,
    )
    A = rng.standard_normal((5, n))
    b = A[3:] @ (0.2 * rng.standard_normal(n))
    add(
        "equality rows",
        spd(n),
        rng.standard_normal(n) * 5,
        A,
        np.r_[-np.ones(n), np.full(5, -INFINITY)],
        np.r_[np.ones(n), 0.5 * np.ones(3), b],
        True,
        equalities=2,
    )
    n = 12
    B = rng.standard_normal((6, n))
    pyramid = np.zeros((16, n))
    for c in range(4):  # f_t ≤ μ f_n as 4 facets per contact, in [f_n; f_s; f_t] blocks
        for k, (ss, st) in enumerate(((1, 1), (1, -1), (-1, 1), (-1, -1))):
            pyramid[4 * c + k, [c, 4 + c, 8 + c]] = (-0.7, ss, st)
    add(
        "positive semidefinite Hessian (rank 6 of 12)",
        B.T @ B,
        B.T @ rng.standard_normal(6),
        pyramid,
        np.r_[np.zeros(4), np.full(8, -INFINITY), np.full(16, -INFINITY)],
        np.r_[np.full(4, 50.0), np.full(8, INFINITY), np.zeros(16)],
        True,
    )
    n = 4
    A = np.vstack([np.eye(n), np.eye(n), np.ones((2, n))])
    add(
        "degenerate optimum (duplicated active rows)",
        np.eye(n),
        np.full(n, 3.0),
        A,
        np.r_[np.ones(2 * n), np.full(2, n)],
        np.full(2 * n + 2, INFINITY),
        False,
    )
    add(
        "infeasible",
        np.eye(2),
        np.zeros(2),
        np.array([[1.0, 0.0]]),
        np.r_[1.0, -1.0, -INFINITY],
        np.r_[2.0, 1.0, 0.0],
        True,
    )
    n = 6
    A = rng.standard_normal((10, n))
    add("rows only", spd(n), rng.standard_normal(n), A, np.full(10, -1.0), np.full(10, 1.0), False)
    g = rng.standard_normal(n) * 3
    for k in range(3):
        add(
            f"warm-started sequence {k}",
            spd(n) if k == 0 else out[-1][1]["H"],
            g + 0.1 * k,
            A,
            np.full(10, -0.2),
            np.full(10, 0.2),
            False,
            warm=True,
        )
    return out


def _compare_known_problems() -> str | None:
    """Solve :func:`known_problems` through NativeQP and through daqp.Model (:class:`ModelQP`, ``DenseQP``'s other
    path), a workspace of each per problem size; the first difference, or None."""
    workspaces: dict[tuple, tuple[NativeQP, ModelQP]] = {}
    no_flags = np.zeros(0, dtype=np.int32)
    for name, p in known_problems():
        n, rows = p["g"].shape[0], p["A"].shape[0]
        key = (n, rows, p["bounds"], p["equalities"])
        if key not in workspaces:
            native = _new(n, rows, p["bounds"], p["equalities"], 1e-8, 1000)
            workspaces[key] = (native, ModelQP(n, rows, bounds=p["bounds"], equalities=p["equalities"]))
        qp, reference = workspaces[key]
        start = WARM if p["warm"] else COLD
        data = (p["H"], p["g"], p["A"], p["lower"], p["upper"], start)
        expected, expected_x, _, expected_iterations = reference.solve_stacked(*data, no_flags)
        exitflag = solve_stacked(qp, *data)
        x, iterations = qp.x, qp.iterations
        same_x = np.allclose(x, expected_x, rtol=0, atol=1e-12)
        if exitflag != expected or iterations != expected_iterations or not same_x:
            return (
                f"{name!r}: the compiled path gives exit {exitflag}, {iterations} iterations, x={x.tolist()}; "
                f"daqp.Model gives exit {expected}, {expected_iterations} iterations, x={expected_x.tolist()}"
            )
    return None
