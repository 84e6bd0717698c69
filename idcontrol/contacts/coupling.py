"""How strongly contacts on different limbs are coupled through the robot's inertia, a per-tick diagnostic.

Pace & Burden show that a touchdown's outcome depends smoothly on its timing only when the limbs that can touch
down are decoupled; the weaker condition (their eq. 6), continuity of the outcome, asks that the constraints
of two contacts that can be active together be orthogonal in the inverse inertia:

    D_ij = n̂ᵢᵀ J_i M⁻¹ J_jᵀ n̂_j = 0,      D = N M⁻¹ Nᵀ (the Delassus matrix of the normal rows).

:func:`delassus_coupling` returns the largest normalized off-diagonal entry |D_ij| / √(D_ii D_jj) ∈ [0, 1]
over pairs of active contacts on *different* limbs (0: condition (6) holds), and whether such a coupled pair
has just touched down nearly together, the case where the contact forces and the controller's torques may jump
with sub-millisecond changes of timing. Two inertias answer two questions:

* the whole M (:func:`delassus_coupling`): the impact itself, during which no finite torque acts, so every
  joint is free. The quadruped's light legs make its feet nearly decoupled so (normalized coupling about 0.001
  standing and trotting): condition (6) almost holds for the mechanism;
* the unactuated block (:func:`delassus_coupling_held`): the controller's contact model, whose joints follow
  q̇_des, so the feet interact through the floating base alone (0.2 to 0.9 for the quadruped): that is where
  the predicted contact set and forces can flip with touchdown timing.

:func:`coupling_diagnostic` computes both and the flag in one compiled call, keeping the touchdown times
itself (``idcontrol bench --scenarios coupling`` times it on a recorded trot).

Limbs come from the kinematic tree (:func:`sphere_limbs`): two contact spheres are on different limbs when
the joints that move them, the floating base excluded, are disjoint.
"""

from __future__ import annotations

import numpy as np
from numba import njit, types
from numpy.typing import NDArray

from idcontrol.arrays import IN_INDICES, IN_MATRIX, VECTOR, boolean, float64
from idcontrol.errors import ShapeError
from idcontrol.robot.model import RobotModel

Array = NDArray[np.float64]
IntArray = NDArray[np.intp]

#: A pair's normalized coupling at or above this makes its near-simultaneous touchdown worth flagging.
COUPLING_THRESHOLD = 0.1
#: s: touchdowns of two contacts at most this far apart are near-simultaneous (two 1 kHz ticks).
TOUCHDOWN_WINDOW = 0.002


def sphere_limbs(robot: RobotModel) -> IntArray:
    """(k,) a limb label per contact sphere, in ``robot.sphere_names`` order.

    Each sphere is moved by the joints supporting its frame (Pinocchio's ``model.supports``), without the
    universe and the floating base. Spheres whose joint sets overlap, directly or through other spheres, share a
    label (0, 1, ... in order of first appearance); a sphere on the base itself is moved by no joint and is a
    limb of its own.
    """
    m = robot.model
    joint_sets = []
    for frame in robot.sphere_frame_ids:
        parent = m.frames[int(frame)].parentJoint
        joints = {int(j) for j in m.supports[parent] if j > 0 and m.joints[int(j)].shortname() != "JointModelFreeFlyer"}
        joint_sets.append(joints)
    k = len(joint_sets)
    parent_of = list(range(k))  # union-find over spheres that share a joint

    def root(i: int) -> int:
        while parent_of[i] != i:
            parent_of[i] = parent_of[parent_of[i]]
            i = parent_of[i]
        return i

    for i in range(k):
        for j in range(i + 1, k):
            if joint_sets[i] & joint_sets[j]:
                parent_of[root(j)] = root(i)
    labels: dict[int, int] = {}
    return np.array([labels.setdefault(root(i), len(labels)) for i in range(k)], dtype=np.intp)


@njit(cache=True)
def delassus_coupling_whitened(W, limb, age, window, threshold):  # pragma: no cover - compiled
    """:func:`delassus_coupling` from whitened columns W = L⁻¹ Nᵀ (m, n), M = L Lᵀ, so that D = Wᵀ W.

    A formulation's reduced dynamics holds them for the held model: ``ReducedDynamics.N_w`` (Ñ = L⁻¹ N_uᵀ with
    M_uu = L Lᵀ), which makes this call the cheapest way to the value of :func:`delassus_coupling_held`.
    """
    n = W.shape[1]
    m = W.shape[0]
    diag = np.empty(n)
    for i in range(n):
        s = 0.0
        for r in range(m):
            s += W[r, i] * W[r, i]
        diag[i] = s
    worst = 0.0
    flagged = False
    for i in range(n):
        for j in range(i + 1, n):
            if limb[i] == limb[j]:
                continue
            scale = np.sqrt(diag[i] * diag[j])
            if scale <= 0.0:
                continue
            s = 0.0
            for r in range(m):
                s += W[r, i] * W[r, j]
            c = abs(s) / scale
            if c > worst:
                worst = c
            if c >= threshold and abs(age[i] - age[j]) <= window and min(age[i], age[j]) <= 0.0:
                flagged = True
    return worst, flagged


@njit(cache=True)
def _whiten(N, L):  # pragma: no cover - compiled
    """W = L⁻¹ Nᵀ (m, n) by forward substitution, L lower triangular (m, m)."""
    n, m = N.shape
    W = np.empty((m, n))
    for c in range(n):
        for r in range(m):
            s = N[c, r]
            for p in range(r):
                s -= L[r, p] * W[p, c]
            W[r, c] = s / L[r, r]
    return W


@njit(cache=True)
def _held_block(N, M, dofs):  # pragma: no cover - compiled
    """(N_u (n, u), M_uu (u, u)): the columns of N and the block of M at the DoFs ``dofs`` (u,) int."""
    n, u = N.shape[0], dofs.shape[0]
    Nu = np.empty((n, u))
    Mu = np.empty((u, u))
    for a in range(u):
        for i in range(n):
            Nu[i, a] = N[i, dofs[a]]
        for b in range(u):
            Mu[a, b] = M[dofs[a], dofs[b]]
    return Nu, Mu


@njit(cache=True)
def _cholesky(M):  # pragma: no cover - compiled
    """Lower Cholesky factor of M (m, m) (NaN on the diagonal where M is not positive definite).

    Hand-written on purpose: in :func:`coupling_diagnostic` on the quadruped's 18 x 18 M it measured 13-15 %
    faster than ``np.linalg.cholesky`` (LAPACK behind a Fortran-order copy and checks), three rounds of 20000
    calls on the loaded 2-core development machine.
    """
    m = M.shape[0]
    L = np.zeros((m, m))
    for j in range(m):
        s = M[j, j]
        for p in range(j):
            s -= L[j, p] * L[j, p]
        d = np.sqrt(s) if s > 0.0 else np.nan
        L[j, j] = d
        for i in range(j + 1, m):
            s = M[i, j]
            for p in range(j):
                s -= L[i, p] * L[j, p]
            L[i, j] = s / d
    return L


@njit(cache=True)
def delassus_coupling(N, M, limb, age, window, threshold):  # pragma: no cover - compiled
    """Coupling of the active contacts through the inverse inertia, and the coupled-touchdown flag.

    Parameters
    ----------
    N : (n, m) the active contacts' normal rows (n̂ᵢᵀ J_i), C-contiguous float64.
    M : (m, m) generalized inertia, symmetric positive definite (kg, kg·m²).
    limb : (n,) int, each contact's limb (:func:`sphere_limbs` of its sphere).
    age : (n,) s since each contact became active (0 on its first tick; :func:`touchdown_ages`).
    window : s, touchdowns at most this far apart are near-simultaneous.
    threshold : normalized coupling from which a near-simultaneous touchdown is flagged.

    Returns
    -------
    (coupling, coupled_touchdown) : the largest |D_ij| / √(D_ii D_jj) over pairs on different limbs, in
    [0, 1] (0 without such a pair); True when such a pair with coupling ≥ ``threshold`` touched down within
    ``window`` of each other, the later one on this tick.
    """
    if N.shape[0] < 2:
        return 0.0, False
    return delassus_coupling_whitened(_whiten(N, np.linalg.cholesky(M)), limb, age, window, threshold)


@njit(cache=True)
def delassus_coupling_held(N, M, dofs, limb, age, window, threshold):  # pragma: no cover - compiled
    """:func:`delassus_coupling` with every DoF but ``dofs`` held still: D = N_u M_uu⁻¹ N_uᵀ over the columns and
    the block of M at ``dofs`` (n_u,) int.

    With ``dofs`` the unactuated DoFs (``robot.unactuated_dofs``: a floating base's six) this is the coupling the
    controller's contact model sees: its joints follow q̇_des whatever the contact impulses (P v⁺ = q̇_des), so
    contacts interact through the base's inertia only.
    """
    if N.shape[0] < 2:
        return 0.0, False
    Nu, Mu = _held_block(N, M, dofs)
    return delassus_coupling_whitened(_whiten(Nu, np.linalg.cholesky(Mu)), limb, age, window, threshold)


@njit(cache=True)
def delassus_coupling_factored(N, L, limb, age, window, threshold):  # pragma: no cover - compiled
    """:func:`delassus_coupling` given the lower Cholesky factor L (m, m) of M (M = L Lᵀ) instead of M."""
    if N.shape[0] < 2:
        return 0.0, False
    return delassus_coupling_whitened(_whiten(N, L), limb, age, window, threshold)


@njit(cache=True)
def touchdown_ages(sphere, since, now):  # pragma: no cover - compiled
    """(n,) s since each active contact's sphere touched down, keeping the touchdown times in ``since``.

    sphere : (n,) int, the contact sphere of each active contact (``ContactSet.sphere``).
    since : (k,) float, one entry per contact sphere of the robot, updated in place: the time its sphere became
        active, NaN while it is not (start from ``np.full(k, np.nan)``). A sphere absent from ``sphere`` is
        reset to NaN, so its next touchdown starts again at age 0. A time after ``now`` (the bridge's clock went
        back: a simulator restarted) becomes −inf: that sphere was already active, its touchdown long past.
    now : the state's time, s.
    """
    k = since.shape[0]
    active = np.zeros(k, dtype=np.bool_)
    for s in sphere:
        active[s] = True
    for s in range(k):
        if not active[s]:
            since[s] = np.nan
        elif np.isnan(since[s]):
            since[s] = now
        elif since[s] > now:
            since[s] = -np.inf
    n = sphere.shape[0]
    age = np.empty(n)
    for i in range(n):
        age[i] = now - since[sphere[i]]
    return age


@njit(
    types.Tuple((float64, float64, boolean))(
        IN_MATRIX, IN_MATRIX, IN_INDICES, IN_INDICES, IN_INDICES, VECTOR, float64, float64, float64
    ),
    cache=True,
)
def coupling_diagnostic(N, M, unactuated, sphere, limb_of_sphere, since, now, window, threshold):  # pragma: no cover
    """The per-tick diagnostic in one compiled call: (coupling, coupling_held, coupled_touchdown).

    N : (n, m) the active contacts' normal rows.  M : (m, m) generalized inertia.
    unactuated : (n_u,) int, the DoFs free when the joints are held (the problem's unactuated DoFs as an index
        array: ``index_array(problem.unactuated, problem.m)``, floating base and movable bodies).
    sphere : (n,) int, each contact's sphere (``ContactSet.sphere``).  limb_of_sphere : (k,) int,
    :func:`sphere_limbs`.  since : (k,) float, the spheres' touchdown times, updated in place
    (:func:`touchdown_ages`).  now : s.  window, threshold : as in :func:`delassus_coupling`.

    Returns ``coupling`` (:func:`delassus_coupling`, every joint free), ``coupling_held``
    (:func:`delassus_coupling_held` on ``unactuated``) and ``coupled_touchdown``, the held model's flag: the
    pair the controller's prediction couples through the base touched down together.
    """
    age = touchdown_ages(sphere, since, now)
    n = sphere.shape[0]
    if n < 2:
        return 0.0, 0.0, False
    limb = np.empty(n, dtype=np.int64)
    for i in range(n):
        limb[i] = limb_of_sphere[sphere[i]]
    free, _ = delassus_coupling_whitened(_whiten(N, _cholesky(M)), limb, age, window, threshold)
    Nu, Mu = _held_block(N, M, unactuated)
    held, flag = delassus_coupling_whitened(_whiten(Nu, _cholesky(Mu)), limb, age, window, threshold)
    return free, held, flag


def coupling_check_shapes(N: Array, M: Array, limb: IntArray, age: Array) -> None:
    """Shape checks for a caller outside the tick (the kernel itself trusts its inputs)."""
    n, m = N.shape
    if M.shape != (m, m):
        raise ShapeError("M", (m, m), M.shape)
    for name, a in (("limb", limb), ("age", age)):
        if a.shape != (n,):
            raise ShapeError(name, (n,), a.shape)
