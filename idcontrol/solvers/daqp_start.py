"""How a DAQP solve starts and when it is tried again: one policy for both ways of calling DAQP.

A solve starts from nothing (COLD), from the active set of the workspace's last found solve (WARM) or from flags
the caller gives (GIVEN, e.g. the previous tick's active set carried to new contacts by identity). When DAQP does
not report an optimum, the solve is tried again: first cold, if it had started from any active constraint (the
start was stale); then, if still not optimal, once at :data:`LOOSE_FACTOR` × the primal tolerance (DAQP can declare
a degenerate but feasible problem, many constraints active at the solution, infeasible at a tight tolerance).

Both :mod:`idcontrol.solvers.daqp_native` (DAQP's C API from compiled code) and
:mod:`idcontrol.solvers.daqp_model` (its Python extension) apply this policy through :func:`start_flags` and
:func:`retry_after`, so that both give the same answers, exit flags and iteration counts.
"""

from __future__ import annotations

from numba import njit, types

from idcontrol.arrays import IN_VECTOR, boolean, intp
from idcontrol.solvers import daqp_abi as abi

#: how a solve starts: from nothing, from the workspace's last found solve's active set, from the caller's flags
COLD, WARM, GIVEN = 0, 1, 2
#: what to do after a solve: nothing more, try again cold, try again at LOOSE_FACTOR × the primal tolerance
RETRY_NONE, RETRY_COLD, RETRY_LOOSE = 0, 1, 2
LOOSE_FACTOR = 100.0

FLAGS = types.Array(types.int32, 1, "C")


@njit(boolean(intp), cache=True)
def optimal(exitflag):
    """Whether DAQP's exit flag reports an optimum (1, or 2: optimal with soft constraints untouched)."""
    return exitflag == abi.EXIT_OPTIMAL or exitflag == abi.EXIT_SOFT_OPTIMAL


@njit(types.void(FLAGS, IN_VECTOR, boolean, intp, intp), cache=True)
def start_flags(sense, lam, warm_ok, start, first_equality):
    """Write DAQP's constraint flags ``sense`` (m,) for a solve that starts as ``start``.

    WARM (and ``warm_ok``: ``lam`` (m,) holds the multipliers of the workspace's last found solve): the constraints
    with a nonzero multiplier active; GIVEN: the flags already in ``sense``, kept to active and lower-bound flags
    (DAQP sized its workspace without soft or binary ones); otherwise, and WARM without a found solve, none. The
    rows from ``first_equality`` on are always equalities.
    """
    if start == WARM and warm_ok:
        for i in range(first_equality):
            sense[i] = abi.ACTIVE if lam[i] != 0.0 else 0
    elif start == GIVEN:
        for i in range(first_equality):
            sense[i] &= abi.ACTIVE | abi.LOWER
    else:
        sense[:first_equality] = 0
    sense[first_equality:] = abi.EQUALITY


@njit(intp(intp, intp, FLAGS, intp), cache=True)
def retry_after(exitflag, previous, sense, first_equality):
    """The retry after a solve that ended with ``exitflag`` (``previous``: the retry that solve was, RETRY_NONE for
    the first). RETRY_COLD clears the start flags in ``sense`` (the caller passes them on to DAQP); RETRY_LOOSE
    asks the caller to solve once at LOOSE_FACTOR × its primal tolerance (and to restore it after)."""
    if optimal(exitflag) or previous == RETRY_LOOSE:
        return RETRY_NONE
    if previous == RETRY_NONE:
        for i in range(first_equality):
            if sense[i] != 0:
                sense[:first_equality] = 0
                return RETRY_COLD
    return RETRY_LOOSE
