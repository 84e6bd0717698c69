"""Input checks shared by every layer: finiteness and shape of the vectors a caller hands in."""

from __future__ import annotations

import math

import numpy as np
from numba import njit
from numpy.typing import NDArray

from idcontrol.arrays import ANY_VECTOR, VECTOR
from idcontrol.errors import NonFiniteError, ShapeError

Array = NDArray[np.float64]


@njit([(VECTOR,), (ANY_VECTOR,)], cache=True)
def all_finite(x):
    """True when no entry of the 1-D array ``x`` is NaN or infinite (compiled: callable from kernels too)."""
    for value in x:
        if not math.isfinite(value):
            return False
    return True


def check_vector(name: str, x: object, n: int) -> Array:
    """Return ``x`` as a float vector of length ``n``; raise ShapeError/NonFiniteError otherwise."""
    arr = np.asarray(x, dtype=float)
    if arr.shape != (n,):
        raise ShapeError(name, (n,), arr.shape)
    if not all_finite(arr):
        raise NonFiniteError(name, np.flatnonzero(~np.isfinite(arr)))
    return arr
