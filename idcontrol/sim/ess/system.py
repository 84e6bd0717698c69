"""The compiled side of an event-selected system: the three functions the compiled integrator calls.

A system that can be integrated by compiled code describes itself by one record (a ``NamedTuple`` of arrays and
nested records: its parameters and its workspace) and registers three ``@njit`` functions for that record type
with :func:`register`:

* ``field(system, x, side, out)``: ẋ (n,) into ``out`` at x (n,) in the mode ``side`` (m,) bool;
* ``guards(system, x, out)``: h(x) (m,) into ``out``;
* ``rates(system, x, side, out)``: Dh(x)·f(x, side) (m,) into ``out``.

The functions of this module of the same names are what compiled kernels call; numba resolves each call by the
record's type to the registered function, so one kernel serves every system without Python in between. Called
from Python they refuse: a Python caller uses the system object's own methods.

A kernel compiled for a record type is cached with the kernel (``cache=True``); numba does not see edits of the
registered functions' source in another file, so clear the ``__pycache__`` of the kernel's module after editing a
system's compiled field.
"""

from __future__ import annotations

from numba.core import types
from numba.extending import overload


def field(system, x, side, out):  # pragma: no cover - resolved by numba in compiled code
    """ẋ (n,) into ``out``; compiled callers only."""
    raise TypeError("system.field is called from compiled code; from Python call the system's own field()")


def guards(system, x, out):  # pragma: no cover - resolved by numba in compiled code
    """h(x) (m,) into ``out``; compiled callers only."""
    raise TypeError("system.guards is called from compiled code; from Python call the system's own guards()")


def rates(system, x, side, out):  # pragma: no cover - resolved by numba in compiled code
    """Dh(x)·f(x, side) (m,) into ``out``; compiled callers only."""
    raise TypeError("system.rates is called from compiled code; from Python call the system's own rates()")


_REGISTERED: set[type] = set()


def register(record_type: type, field_impl, guards_impl, rates_impl) -> None:
    """Make :func:`field`, :func:`guards` and :func:`rates` dispatch to these ``@njit`` functions for records of
    ``record_type`` (a ``NamedTuple`` class). Registering a type twice is a no-op."""
    if record_type in _REGISTERED:
        return
    _REGISTERED.add(record_type)

    def ours(system) -> bool:
        return isinstance(system, types.BaseNamedTuple) and system.instance_class is record_type

    @overload(field)
    def _field(system, x, side, out):
        if ours(system):
            return lambda system, x, side, out: field_impl(system, x, side, out)
        return None

    @overload(guards)
    def _guards(system, x, out):
        if ours(system):
            return lambda system, x, out: guards_impl(system, x, out)
        return None

    @overload(rates)
    def _rates(system, x, side, out):
        if ours(system):
            return lambda system, x, side, out: rates_impl(system, x, side, out)
        return None
