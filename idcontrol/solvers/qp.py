"""Persistent, warm-started dense QP workspaces (ProxQP back end).

qpsolvers sets a solver up anew on every call; at 1 kHz we keep one ProxQP
workspace per problem size instead, update its matrices in place and start
from the previous tick's primal-dual solution when the contact set is the same.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import proxsuite
from numpy.typing import NDArray

Array = NDArray[np.float64]
_INF = 1e20
_OUTPUT = proxsuite.proxqp.QPSolverOutput


@dataclass
class QPSolution:
    """Primal solution and status of :meth:`DenseQP.solve`."""

    x: Array
    found: bool
    iterations: int
    status: str


class DenseQP:
    """min ½ xᵀHx + gᵀx  s.t.  l ≤ C x ≤ u,  lb ≤ x ≤ ub (box optional).

    Parameters
    ----------
    eps_abs : absolute primal/dual residual tolerance (problem units).
    max_iter : iteration cap; hitting it is reported as ``found=False``.
    """

    def __init__(self, *, eps_abs: float = 1e-9, max_iter: int = 300) -> None:
        self.eps_abs = eps_abs
        self.max_iter = max_iter
        self._workspaces: dict[tuple[int, int, bool], proxsuite.proxqp.dense.QP] = {}
        self._last_key: tuple[int, int, bool] | None = None

    def solve(
        self,
        H: Array,
        g: Array,
        C: Array | None,
        l: Array | None,
        u: Array | None,
        lb: Array | None = None,
        ub: Array | None = None,
        *,
        warm: bool = False,
    ) -> QPSolution:
        """Solve; ``warm=True`` starts from this workspace's previous solution (same sizes)."""
        n = g.shape[0]
        n_in = 0 if C is None else C.shape[0]
        box = lb is not None
        key = (n, n_in, box)
        qp = self._workspaces.get(key)
        if qp is None:
            qp = proxsuite.proxqp.dense.QP(n, 0, n_in, box)
            qp.settings.eps_abs = self.eps_abs
            qp.settings.eps_rel = 0.0
            qp.settings.max_iter = self.max_iter
            qp.settings.verbose = False
            # Our QPs are bounded below (Stage I: ½‖R̃z + e‖² − const; Stage II: positive definite), and the
            # default dual-infeasibility test misfires on their rank-deficient Hessians.
            qp.settings.eps_dual_inf = 1e-14
            qp.init(H, g, None, None, C, l, u, lb, ub) if box else qp.init(H, g, None, None, C, l, u)
            self._workspaces[key] = qp
        else:
            start = (
                proxsuite.proxqp.InitialGuess.WARM_START_WITH_PREVIOUS_RESULT
                if warm and self._last_key == key
                else proxsuite.proxqp.InitialGuess.NO_INITIAL_GUESS
            )
            qp.settings.initial_guess = start
            # Re-equilibrating costs ~4x the solve itself; tick-to-tick data change little, so the
            # preconditioner computed at set-up is kept.
            if box:
                qp.update(H=H, g=g, C=C, l=l, u=u, l_box=lb, u_box=ub, update_preconditioner=False)
            else:
                qp.update(H=H, g=g, C=C, l=l, u=u, update_preconditioner=False)
        qp.solve()
        self._last_key = key
        status = qp.results.info.status
        return QPSolution(
            x=np.array(qp.results.x),
            found=status == _OUTPUT.PROXQP_SOLVED,
            iterations=int(qp.results.info.iter),
            status=str(status).rsplit(".", 1)[-1],
        )

    def forget(self) -> None:
        """Drop the warm start (the next solve starts cold)."""
        self._last_key = None


INFINITY = _INF
