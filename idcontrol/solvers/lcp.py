"""Linear complementarity problems: the result type and an independent checker.

An LCP(q, M) asks for z, w in R^n with ``w = M z + q``, ``z >= 0``, ``w >= 0``
and ``z^T w = 0``. Every LCP solver in :mod:`idcontrol.solvers` returns an
:class:`LCPSolution`; :func:`lcp_residuals` measures how far any candidate is
from being a solution, without trusting the solver that produced it.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
from numpy.typing import NDArray

Array = NDArray[np.float64]


@dataclass
class LCPSolution:
    """Outcome of an LCP solve.

    Attributes
    ----------
    z, w : (n,) arrays
        Complementary pair, ``w = M z + q``.
    found : bool
        True when the solver terminated with a solution within its tolerance.
    pivots : int
        Number of pivots (or iterations) used.
    active : list[int]
        Indices with ``z > 0`` (the non-basic set of the paper's Alg. 2), in
        the order the solver holds them; the next solve is warm-started with it.
    regularization : float
        Tikhonov term ``eps`` added to ``M`` to obtain this solution (0 if none).
    message : str
        Human-readable termination reason.
    """

    z: Array
    w: Array
    found: bool
    pivots: int = 0
    active: list[int] = field(default_factory=list)
    regularization: float = 0.0
    message: str = ""


@dataclass(frozen=True)
class LCPResiduals:
    """Violations of the LCP conditions, each >= 0 (0 means exactly satisfied)."""

    z_negativity: float  # max(-min(z), 0)
    w_negativity: float  # max(-min(w), 0)
    complementarity: float  # max_i |z_i w_i|
    equation: float  # max |M z + q - w|

    @property
    def worst(self) -> float:
        return max(self.z_negativity, self.w_negativity, self.complementarity, self.equation)


def lcp_residuals(M: Array, q: Array, z: Array, w: Array | None = None) -> LCPResiduals:
    """Measure how far (z, w) is from solving LCP(q, M).

    If ``w`` is None it is computed as ``M z + q``.
    """
    M = np.asarray(M, dtype=float)
    q = np.asarray(q, dtype=float)
    z = np.asarray(z, dtype=float)
    w_true = M @ z + q
    if w is None:
        w = w_true
    w = np.asarray(w, dtype=float)
    if z.size == 0:
        return LCPResiduals(0.0, 0.0, 0.0, 0.0)
    return LCPResiduals(
        z_negativity=float(max(-z.min(), 0.0)),
        w_negativity=float(max(-w.min(), 0.0)),
        complementarity=float(np.abs(z * w).max()),
        equation=float(np.abs(w_true - w).max()),
    )
