"""Input checks shared by every layer: finiteness and shape of vectors, types of keyword options."""

from __future__ import annotations

import inspect
import math
from collections.abc import Callable, Mapping

import numpy as np
from numba import njit
from numpy.typing import NDArray

from idcontrol.arrays import ANY_VECTOR, VECTOR, boolean, intp
from idcontrol.errors import ConfigError, InputError, NonFiniteError, ShapeError

Array = NDArray[np.float64]


@njit([(VECTOR,), (ANY_VECTOR,)], cache=True)
def all_finite(x):
    """True when no entry of the 1-D array ``x`` is NaN or infinite (compiled: callable from kernels too)."""
    for value in x:
        if not math.isfinite(value):
            return False
    return True


#: how far |q[3:7]| of a floating base may be from 1 in a valid state
QUATERNION_NORM_TOLERANCE = 1e-3


@njit(boolean(ANY_VECTOR, intp), cache=True)
def unit_quaternion(x, start):
    """Whether x[start:start + 4] has norm 1 to :data:`QUATERNION_NORM_TOLERANCE` (compiled, no array made)."""
    a, b, c, d = x[start], x[start + 1], x[start + 2], x[start + 3]
    return abs(math.sqrt(a * a + b * b + c * c + d * d) - 1.0) <= QUATERNION_NORM_TOLERANCE


@njit(boolean(ANY_VECTOR, ANY_VECTOR, ANY_VECTOR, boolean), cache=True)
def valid_state(q, v, forces, floating_base):
    """True when the state's arrays are finite and, with ``floating_base``, q[3:7] is a unit quaternion to
    :data:`QUATERNION_NORM_TOLERANCE`: the checks :meth:`~idcontrol.robot.model.RobotModel.check_state` makes, in
    one call (forces: the sensed forces flattened, or empty)."""
    if not (all_finite(q) and all_finite(v) and all_finite(forces)):
        return False
    return not floating_base or unit_quaternion(q, 3)


def check_unit_quaternion(name: str, quaternion: Array) -> None:
    """InputError unless the finite (4,) ``quaternion`` has norm 1 to :data:`QUATERNION_NORM_TOLERANCE`."""
    norm = math.hypot(*quaternion.tolist())
    if abs(norm - 1.0) > QUATERNION_NORM_TOLERANCE:
        raise InputError(f"{name} must be a unit quaternion (x, y, z, w); its norm is {norm:.6f}")


def check_vector(name: str, x: object, n: int) -> Array:
    """Return ``x`` as a float vector of length ``n``; raise ShapeError/NonFiniteError otherwise."""
    arr = np.asarray(x, dtype=float)
    if arr.shape != (n,):
        raise ShapeError(name, (n,), arr.shape)
    if not all_finite(arr):
        raise NonFiniteError(name, np.flatnonzero(~np.isfinite(arr)))
    return arr


def check_option_types(owner: str, function: Callable[..., object], options: Mapping[str, object]) -> None:
    """ConfigError naming the option when a value's type differs from its keyword default's in ``function``'s
    signature (bool for a bool default, int for an int one, a number other than NaN for a float one, a string for
    a str one); options without a typed default are left to ``function``."""
    parameters = inspect.signature(function).parameters
    for name, value in options.items():
        parameter = parameters.get(name)
        if parameter is None or parameter.default is inspect.Parameter.empty:
            continue
        default = parameter.default
        if isinstance(default, bool):
            ok, expected = isinstance(value, bool), "true or false"
        elif isinstance(default, int):
            ok, expected = isinstance(value, int) and not isinstance(value, bool), "an integer"
        elif isinstance(default, float):
            ok, expected = isinstance(value, (int, float)) and not isinstance(value, bool), "a number"
            if ok and math.isnan(value):  # a NaN tolerance or gain turns every comparison false, silently
                ok, expected = False, "a number, not NaN"
        elif isinstance(default, str):
            ok, expected = isinstance(value, str), "a string"
        else:
            continue
        if not ok:
            raise ConfigError(f"option {name!r} of {owner} must be {expected}, got {value!r} ({type(value).__name__})")
