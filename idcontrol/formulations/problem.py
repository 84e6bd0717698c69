"""Typed data of one inverse-dynamics solve: the problem every formulation takes and the result it returns.

Conventions (paper, corrected; spec section 9):

* discretized dynamics over one control period Δt, with every quantity at t₀::

      M (v⁺ − v⁻) = Nᵀ f_N + Sᵀ f_S + Tᵀ f_T + Pᵀ τ + Δt f_ext

  where the contact terms and ``Pᵀ τ`` are *impulses*. :class:`SolveResult`
  reports forces (impulse / Δt) and torques in N·m (τ / Δt);
* ``P`` selects the actuated entries of ``v`` (``problem.actuated``);
* row ``i`` of N gives contact ``i``'s normal velocity, N v > 0 separating;
  S and T its two tangential velocities;
* ``f_ext = −h(q, v)`` plus known external forces (``h``: Pinocchio's bias).
"""

from __future__ import annotations

from collections.abc import Hashable
from dataclasses import dataclass, field

import numpy as np
from numpy.typing import NDArray

from idcontrol.contacts.rows import forces_in_world
from idcontrol.errors import NonFiniteError, ShapeError
from idcontrol.formulations.record import ProblemRecord, record_of

Array = NDArray[np.float64]
IntArray = NDArray[np.intp]
Index = IntArray | slice  # a contiguous index set may be given as a slice (cheaper to apply)


def block(A: Array, rows: Index, cols: Index) -> Array:
    """``A[rows][:, cols]`` for index arrays or slices (a view when both are slices)."""
    if isinstance(rows, slice) and isinstance(cols, slice):
        return A[rows, cols]
    return A[np.ix_(np.arange(A.shape[0])[rows], np.arange(A.shape[1])[cols])]


_SLICE_INDICES: dict[tuple[int, int | None, int | None, int | None], IntArray] = {}
#: the same arrays by the slice object's identity, with the slice kept (its id cannot be reused while kept): a
#: controller passes the same slices every tick, found without building the key (docs/benchmarks.md)
_BY_SLICE: dict[int, tuple[slice, int, IntArray]] = {}


def index_array(index: Index, size: int) -> IntArray:
    """``index`` (an index array or slice into ``range(size)``) as a read-only, C-contiguous intp array (slices
    memoized; an array already so is returned as it is)."""
    if isinstance(index, slice):
        known = _BY_SLICE.get(id(index))  # one tuple, read at once: safe beside another thread's update
        if known is not None and known[0] is index and known[1] == size:
            return known[2]
        key = (size, index.start, index.stop, index.step)
        out = _SLICE_INDICES.get(key)
        if out is None:
            out = np.arange(size, dtype=np.intp)[index]
            out.setflags(write=False)
            if len(_SLICE_INDICES) > 256:
                _SLICE_INDICES.clear()
            _SLICE_INDICES[key] = out
        if len(_BY_SLICE) > 256:
            _BY_SLICE.clear()
        _BY_SLICE[id(index)] = (index, size, out)
        return out
    out = np.ascontiguousarray(index, dtype=np.intp)
    if out.flags.writeable:  # a read-only view: the caller's own array keeps its flag
        out = out.view()
        out.setflags(write=False)
    return out


def as_index(indices: IntArray) -> Index:
    """A slice when ``indices`` are contiguous and increasing, else the array itself."""
    indices = np.asarray(indices, dtype=np.intp)
    if indices.size and np.all(np.diff(indices) == 1):
        return slice(int(indices[0]), int(indices[-1]) + 1)
    if indices.size == 0:
        return slice(0, 0)
    return indices


#: the fields the problem record holds: assigning one of them drops the record (built again when next asked for)
_RECORD_FIELDS = frozenset(("dt", "M", "f_ext", "v", "actuated", "unactuated", "qd_des", "N", "S", "T", "phi", "mu"))


@dataclass(init=False)
class ContactProblem:
    """One tick's inverse-dynamics problem with n candidate contacts on m DoFs, built by keyword.

    Attributes
    ----------
    dt : control period Δt, s.
    M : (m, m) generalized inertia (robot, then any movable bodies), SPD.
    f_ext : (m,) non-contact, non-actuated generalized force, N / N·m.
    v : (m,) generalized velocity now (v⁻).
    actuated, unactuated : index arrays (or slices) partitioning ``range(m)``.
    qd_des : (nu,) desired actuated velocity at t₀ + Δt, q̇ + Δt q̈_des.
    N, S, T : (n, m) normal and tangential contact rows.
    phi : (n,) signed distances, m.
    mu : (n,) Coulomb friction coefficients (``inf`` allowed).
    contact_ids : n stable identities, used to carry warm starts across ticks.
    normals, tangents_s, tangents_t : (n, 3) contact frames in world, for reporting forces.
    sensed_force : (m,) generalized force of *measured* contact forces (sensed_id only).
    record : the problem as compiled code takes it (:class:`~idcontrol.formulations.record.ProblemRecord`): the
        one given (the controller's, built by its compiled assembly from these very arrays), else built from the
        fields when first asked for; assigning a field it holds drops it.
    """

    dt: float
    M: Array
    f_ext: Array
    v: Array
    actuated: Index
    unactuated: Index
    qd_des: Array
    N: Array
    S: Array
    T: Array
    phi: Array
    mu: Array
    contact_ids: tuple[Hashable, ...] = ()
    normals: Array | None = None
    tangents_s: Array | None = None
    tangents_t: Array | None = None
    sensed_force: Array | None = None

    def __init__(
        self,
        *,
        dt: float,
        M: Array,
        f_ext: Array,
        v: Array,
        actuated: Index,
        unactuated: Index,
        qd_des: Array,
        N: Array,
        S: Array,
        T: Array,
        phi: Array,
        mu: Array,
        contact_ids: tuple[Hashable, ...] = (),
        normals: Array | None = None,
        tangents_s: Array | None = None,
        tangents_t: Array | None = None,
        sensed_force: Array | None = None,
        record: ProblemRecord | None = None,
    ) -> None:
        self.__dict__.update(
            dt=dt,
            M=M,
            f_ext=f_ext,
            v=v,
            actuated=actuated,
            unactuated=unactuated,
            qd_des=qd_des,
            N=N,
            S=S,
            T=T,
            phi=phi,
            mu=mu,
            contact_ids=contact_ids,
            normals=normals,
            tangents_s=tangents_s,
            tangents_t=tangents_t,
            sensed_force=sensed_force,
            _record=record,
        )

    def __setattr__(self, name: str, value: object) -> None:
        self.__dict__[name] = value
        if name in _RECORD_FIELDS:
            self.__dict__["_record"] = None

    @property
    def record(self) -> ProblemRecord:
        """The problem as compiled code takes it (built from the fields when none was given)."""
        record = self._record
        if record is None:
            m = self.M.shape[0]
            record = self.__dict__["_record"] = record_of(
                self.M,
                self.f_ext,
                self.v,
                self.qd_des,
                self.N,
                self.S,
                self.T,
                self.phi,
                self.mu,
                index_array(self.actuated, m),
                index_array(self.unactuated, m),
                self.dt,
            )
        return record

    @property
    def m(self) -> int:
        return self.M.shape[0]

    @property
    def n(self) -> int:
        return self.N.shape[0]

    @property
    def nu(self) -> int:
        return len(range(self.m)[self.actuated]) if isinstance(self.actuated, slice) else len(self.actuated)

    @property
    def nb(self) -> int:
        """Number of unactuated DoFs."""
        return self.m - self.nu

    def validate(self) -> ContactProblem:
        """Check shapes and finiteness; raise ShapeError / NonFiniteError naming the field."""
        m, n, nu = self.m, self.n, self.nu
        expected = {
            "M": (m, m),
            "f_ext": (m,),
            "v": (m,),
            "qd_des": (nu,),
            "N": (n, m),
            "S": (n, m),
            "T": (n, m),
            "phi": (n,),
            "mu": (n,),
        }
        for name, shape in expected.items():
            value = np.asarray(getattr(self, name))
            if value.shape != shape:
                raise ShapeError(name, shape, value.shape)
            if name != "mu" and not np.all(np.isfinite(value)):
                raise NonFiniteError(name, np.flatnonzero(~np.isfinite(value.ravel())))
        if np.any(np.isnan(self.mu)) or np.any(self.mu < 0):
            raise NonFiniteError("mu (must be >= 0, inf allowed)", np.flatnonzero(~(self.mu >= 0)))
        if not self.dt > 0:
            raise ShapeError("dt (must be > 0)", (), ())
        if len(self.contact_ids) not in (0, n):
            raise ShapeError("contact_ids", (n,), (len(self.contact_ids),))
        everything = np.arange(m)
        parts = np.sort(np.concatenate([everything[self.actuated], everything[self.unactuated]]))
        if not np.array_equal(parts, np.arange(m)):
            raise ShapeError("actuated + unactuated (a partition of range(m))", (m,), parts.shape)
        return self

    def ids(self) -> tuple[Hashable, ...]:
        """Contact identities (indices when none were given)."""
        return self.contact_ids if self.contact_ids else tuple(range(self.n))

    def with_rows(self, S: Array, T: Array, qd_des: Array) -> ContactProblem:
        """A shallow copy with other tangential rows S, T (n, m) and q̇_des (nu,): the problem a formulation
        solved after changing them (its fields copied at once, cheaper than ``copy.copy``: docs/benchmarks.md)."""
        out = object.__new__(ContactProblem)
        out.__dict__.update(self.__dict__)
        out.__dict__.update(S=S, T=T, qd_des=qd_des, _record=None)
        return out


@dataclass
class Residuals:
    """Independent checks of a solution, in force units (N, N·m) or m/s for velocities."""

    dynamics: float = 0.0  # max |M(v⁺−v⁻) − (contact + Pᵀτ + Δt f_ext)| / Δt
    tracking: float = 0.0  # max |P v⁺ − q̇_des|, m/s or rad/s
    penetration: float = 0.0  # max(0, −(N v⁺ + φ/Δt)), m/s
    complementarity: float = 0.0  # max |f_N,i (N v⁺ + φ/Δt)_i|, N·m/s
    friction: float = 0.0  # max(0, |f_S| + |f_T| − μ f_N) over finite μ (not for no-slip models), N
    slip: float = 0.0  # max |S v⁺|, |T v⁺| (no-slip models only), m/s


#: the answer's fields: assigning one drops the result's verdict (it was made of the answer before)
_ANSWER_FIELDS = frozenset(("tau", "v_next", "f_normal", "f_s", "f_t"))


@dataclass(init=False)
class SolveResult:
    """The torques and predicted contact forces of one solve.

    Attributes
    ----------
    found : False when the formulation failed; ``tau`` then holds no usable command.
    tau : (nu,) commanded actuator torques, N·m (impulse / Δt).
    v_next : (m,) predicted v⁺.
    f_normal, f_s, f_t : (n,) predicted contact forces along n̂, ŝ, t̂, N.
    force_in_world : (n, 3) predicted force on the robot at each contact, world frame, N (from the forces and the
        problem's contact frames, computed on first access; None without them).
    active : identities of the contacts carrying a normal force (computed on first access).
    """

    formulation: str
    found: bool
    tau: Array
    v_next: Array
    f_normal: Array
    f_s: Array
    f_t: Array
    contact_ids: tuple[Hashable, ...] = ()
    iterations: int = 0
    consistency_repaired: bool = False
    fallback: str | None = None
    message: str = ""
    timings: dict[str, float] = field(default_factory=dict)  # seconds, by phase
    #: the problem solved, kept so that :attr:`residuals` can be computed on demand (off the hot path)
    problem: ContactProblem | None = field(default=None, repr=False)
    no_slip: bool = False
    sensed: bool = False  # the contact force is problem.sensed_force (sensed_id)
    #: the certificate check this result failed ("" when it passed or was not checked; see
    #: :mod:`idcontrol.formulations.certificate`): then ``found`` is False
    certificate: str = ""
    #: no-slip formulations: the contacts the answer loads (f_N > the certificate's 1e-6 N), and how many of them it
    #: holds without their tangential rows (released), so with no claim of no slip (0: no-slip held at every one)
    loaded_contacts: int = 0
    loaded_released: int = 0
    _residuals: Residuals | None = field(default=None, repr=False)
    _force_in_world: Array | None = field(default=None, repr=False)
    #: the certificate the formulation's compiled solve made of this answer (a
    #: :class:`~idcontrol.formulations.certificate.Verdict`), which the controller's certifier may accept instead of
    #: checking again; None: not made, or the answer was assigned (or replaced) since
    verdict: object = field(default=None, repr=False, init=False)

    def __init__(
        self,
        formulation: str,
        found: bool,
        tau: Array,
        v_next: Array,
        f_normal: Array,
        f_s: Array,
        f_t: Array,
        contact_ids: tuple[Hashable, ...] = (),
        iterations: int = 0,
        consistency_repaired: bool = False,
        fallback: str | None = None,
        message: str = "",
        timings: dict[str, float] | None = None,
        problem: ContactProblem | None = None,
        no_slip: bool = False,
        sensed: bool = False,
        certificate: str = "",
        _residuals: Residuals | None = None,
        _force_in_world: Array | None = None,
        loaded_contacts: int = 0,
        loaded_released: int = 0,
    ) -> None:
        self.__dict__.update(
            formulation=formulation,
            found=found,
            tau=tau,
            v_next=v_next,
            f_normal=f_normal,
            f_s=f_s,
            f_t=f_t,
            contact_ids=contact_ids,
            iterations=iterations,
            consistency_repaired=consistency_repaired,
            fallback=fallback,
            message=message,
            timings={} if timings is None else timings,
            problem=problem,
            no_slip=no_slip,
            sensed=sensed,
            certificate=certificate,
            _residuals=_residuals,
            _force_in_world=_force_in_world,
            verdict=None,
            loaded_contacts=loaded_contacts,
            loaded_released=loaded_released,
        )

    def __setattr__(self, name: str, value: object) -> None:
        self.__dict__[name] = value
        if name in _ANSWER_FIELDS:
            self.__dict__["verdict"] = None

    @property
    def contact_count(self) -> int:
        return len(self.f_normal)

    @property
    def active(self) -> tuple[Hashable, ...]:
        """Identities of the contacts carrying a normal force."""
        return tuple(cid for cid, f in zip(self.contact_ids, self.f_normal.tolist(), strict=False) if f > 0.0)

    @property
    def force_in_world(self) -> Array | None:
        """(n, 3) predicted force on the robot at each contact, world frame, N: f_N n̂ + f_S ŝ + f_T t̂ with the
        problem's contact frames (None without a problem or frames; computed on first access)."""
        if self._force_in_world is None:
            p = self.problem
            if p is None or p.normals is None or not p.n or len(self.f_normal) != p.n:
                return None
            self._force_in_world = forces_in_world(
                np.ascontiguousarray(self.f_normal),
                np.ascontiguousarray(self.f_s),
                np.ascontiguousarray(self.f_t),
                p.normals,
                p.tangents_s,
                p.tangents_t,
            )
        return self._force_in_world

    @property
    def residuals(self) -> Residuals:
        """Independent checks of this solution against the discretized model (computed on first access)."""
        if self._residuals is None:
            if self.problem is None or not self.found or not np.all(np.isfinite(self.v_next)):
                self._residuals = Residuals()
            else:
                self._residuals = compute_residuals(
                    self.problem,
                    self.v_next,
                    self.tau,
                    self.f_normal,
                    self.f_s,
                    self.f_t,
                    no_slip=self.no_slip,
                    sensed=self.sensed,
                )
        return self._residuals


def failed_result(problem: ContactProblem, formulation: str, message: str, iterations: int = 0) -> SolveResult:
    """A result saying the formulation failed: ``found=False``, NaN torques (never a command)."""
    n = problem.n
    return SolveResult(
        formulation=formulation,
        found=False,
        tau=np.full(problem.nu, np.nan),
        v_next=np.full(problem.m, np.nan),
        f_normal=np.full(n, np.nan),
        f_s=np.full(n, np.nan),
        f_t=np.full(n, np.nan),
        contact_ids=problem.ids(),
        iterations=iterations,
        message=message,
    )


def compute_residuals(
    problem: ContactProblem,
    v_next: Array,
    tau: Array,
    f_normal: Array,
    f_s: Array,
    f_t: Array,
    *,
    no_slip: bool = False,
    sensed: bool = False,
) -> Residuals:
    """Check a candidate solution against the discretized model; all inputs are forces (N, N·m).

    ``sensed``: the contact force is ``problem.sensed_force`` rather than the per-contact forces.
    """
    p = problem
    dt = p.dt
    generalized = p.N.T @ f_normal + p.S.T @ f_s + p.T.T @ f_t + p.f_ext
    if sensed:
        generalized = generalized + p.sensed_force
    generalized[p.actuated] += tau
    dyn = p.M @ (v_next - p.v) / dt - generalized
    out = Residuals(
        dynamics=float(np.abs(dyn).max(initial=0.0)),
        tracking=float(np.abs(v_next[p.actuated] - p.qd_des).max(initial=0.0)),
    )
    if p.n:
        gap_rate = p.N @ v_next + p.phi / dt
        out.penetration = float(max(0.0, -gap_rate.min()))
        out.complementarity = float(np.abs(f_normal * gap_rate).max())
        finite = np.isfinite(p.mu) & (not no_slip)  # the no-slip model has unbounded friction by design
        if np.any(finite):
            excess = np.abs(f_s[finite]) + np.abs(f_t[finite]) - p.mu[finite] * f_normal[finite]
            out.friction = float(max(0.0, excess.max()))
        if no_slip:
            out.slip = float(max(np.abs(p.S @ v_next).max(), np.abs(p.T @ v_next).max()))
    return out
