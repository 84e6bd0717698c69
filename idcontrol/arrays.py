"""The numba types of the arrays that cross into compiled code, for the entry points' explicit signatures.

Every compiled entry point is declared with its argument types, so it is compiled (or loaded from numba's
disk cache) when its module is imported and can never specialize again at run time: a call with other
types is a ``TypeError``, not a millisecond compile in the control loop. Arrays are float64 or intp and
C-contiguous; an argument the kernel only reads is declared read-only, which accepts writable arrays too
(read-only ones, like the contact set's μ, are another numba type). Arrays coming back stack their vectors
in one (:func:`split` takes views of it).
"""

from __future__ import annotations

import numpy as np
from numba import types

float64 = types.float64
intp = types.intp
boolean = types.boolean

VECTOR = types.Array(float64, 1, "C")
MATRIX = types.Array(float64, 2, "C")
TENSOR = types.Array(float64, 3, "C")
INDICES = types.Array(intp, 1, "C")
#: arguments only read
IN_VECTOR = types.Array(float64, 1, "C", readonly=True)
IN_MATRIX = types.Array(float64, 2, "C", readonly=True)
IN_INDICES = types.Array(intp, 1, "C", readonly=True)
IN_TENSOR = types.Array(float64, 3, "C", readonly=True)
IN_FLAGS = types.Array(boolean, 2, "C", readonly=True)
IN_MASK = types.Array(boolean, 1, "C", readonly=True)
#: any 1-D float64 array (a strided view too), only read
ANY_VECTOR = types.Array(float64, 1, "A", readonly=True)
#: any 2-D float64 array (a strided view too), only read
ANY_MATRIX = types.Array(float64, 2, "A", readonly=True)


def unchecked_entry(kernel):  # noqa: ANN001, ANN201 - a numba dispatcher and its compiled function
    """The compiled function of ``kernel``'s one declared signature, called without the dispatcher.

    The dispatcher finds each argument's numba type before the call; the compiled function reads each argument
    as its declared type unchecked: numba's array unboxing does not compare the dtype or layout, and an array of
    another one would be read as the declared one. Only for arguments whose types are known by construction: arrays this
    package's compiled code made, or checked when they were made.
    """
    (signature,) = kernel.signatures
    return kernel.overloads[signature].entry_point


def split(stacked: np.ndarray, *sizes: int) -> list[np.ndarray]:
    """Views of ``stacked`` (k,) in consecutive parts of ``sizes``, the rest last. A compiled call returns its
    vectors stacked in one array: boxing each array it returns costs more than a view of one in Python."""
    parts, start = [], 0
    for size in sizes:
        parts.append(stacked[start : start + size])
        start += size
    parts.append(stacked[start:])
    return parts
