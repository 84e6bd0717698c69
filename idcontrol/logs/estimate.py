"""The floating-base estimate against the simulator's truth, from the tick records of a log.

The daemon logs, each tick its estimator ran, the estimate the controller used (``estimate_q``, ``estimate_qd``),
the base block of the filter's covariance (``estimate_covariance``), the stance feet the filter used and its
status; a simulator bridge sends its truth beside the sensors (``truth_q``, ``truth_qd``,
``truth_contact_forces``). The log writer adds, off the daemon's tick, what follows from them
(:func:`derived_fields`):

* ``estimate_std`` (9,): the standard deviations of the base's error in :data:`BASE_ERROR_LAYOUT`;
* ``estimate_error`` (9,): the estimate minus the truth in the same layout, when the truth is there;
* ``tilt_error``: the angle between the estimated and the true vertical, rad.

:func:`estimate_summary` reduces a log to the numbers a user asks for (height, tilt, velocity, drift, contact
agreement); ``idcontrol plot LOG --figure estimate`` prints them beside its figure.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, fields
from typing import TYPE_CHECKING, Any

import numpy as np
from numpy.typing import NDArray

from idcontrol.errors import LogError
from idcontrol.logs.schema import COVARIANCE_BLOCK

if TYPE_CHECKING:
    from idcontrol.logs.reader import TickLog

Array = NDArray[np.float64]

#: The layout of ``estimate_std`` and ``estimate_error``: the base's orientation error (a rotation vector, world
#: frame, rad: estimate ∘ truth⁻¹), its linear velocity error (world frame, m/s), its position error (world frame, m).
BASE_ERROR_LAYOUT = {"rotation": slice(0, 3), "velocity": slice(3, 6), "position": slice(6, 9)}
#: A contact sphere stands in the truth when the simulator's normal (world z) force on it exceeds this, N.
TRUTH_CONTACT_FORCE = 1.0


# ------------------------------------------------------------------------------------------ rotations (xyzw)
def rotation_xyzw(quat: Array) -> Array:
    """(..., 3, 3) rotation matrices (world ← body) of unit quaternions (..., 4) x y z w."""
    x, y, z, w = np.moveaxis(np.asarray(quat, dtype=float), -1, 0)
    return np.stack(
        [
            np.stack([1 - 2 * (y * y + z * z), 2 * (x * y - z * w), 2 * (x * z + y * w)], -1),
            np.stack([2 * (x * y + z * w), 1 - 2 * (x * x + z * z), 2 * (y * z - x * w)], -1),
            np.stack([2 * (x * z - y * w), 2 * (y * z + x * w), 1 - 2 * (x * x + y * y)], -1),
        ],
        -2,
    )


# The writer's part, one record at a time, in plain floats: numpy's calls on 3-vectors cost a few µs each, which the
# writer would pay a thousand times a second.
def _world_velocity(q: list[float], qd: list[float]) -> tuple[list[float], list[float]]:
    """The base's linear velocity in the world frame, and the world's vertical in the base frame (the rotation's
    last row), from its (7,) q and (6,) qd (Pinocchio's: quaternion x y z w, linear velocity in the base frame)."""
    x, y, z, w = q[3:7]
    u, v, s = qd[0:3]
    rows = (
        (1 - 2 * (y * y + z * z), 2 * (x * y - z * w), 2 * (x * z + y * w)),
        (2 * (x * y + z * w), 1 - 2 * (x * x + z * z), 2 * (y * z - x * w)),
        (2 * (x * z - y * w), 2 * (y * z + x * w), 1 - 2 * (x * x + y * y)),
    )
    return [r[0] * u + r[1] * v + r[2] * s for r in rows], list(rows[2])


def _invariant_variances(P: list[list[float]], r: int, b: int, point: list[float]) -> list[float]:
    """The diagonal of J P Jᵀ for the rows b..b+2 of J = [−[point]× on the rotation rows r..r+2, I on b..b+2]:
    P_bb + 2 aᵀ P_rb + aᵀ P_rr a for each row a of −[point]× ((0, z, −y), (−z, 0, x), (y, −x, 0)), written out."""
    x, y, z = point
    (m00, m01, m02), (m10, m11, m12), (m20, m21, m22) = P[r][r : r + 3], P[r + 1][r : r + 3], P[r + 2][r : r + 3]
    return [
        P[b][b] + 2.0 * (P[r + 1][b] * z - P[r + 2][b] * y) + m11 * z * z + m22 * y * y - (m12 + m21) * y * z,
        P[b + 1][b + 1]
        + 2.0 * (P[r + 2][b + 1] * x - P[r][b + 1] * z)
        + m00 * z * z
        + m22 * x * x
        - (m02 + m20) * x * z,
        P[b + 2][b + 2]
        + 2.0 * (P[r][b + 2] * y - P[r + 1][b + 2] * x)
        + m00 * y * y
        + m11 * x * x
        - (m01 + m10) * x * y,
    ]


def base_error_std(block: Array, estimate_q: Array, estimate_qd: Array, layout: dict[str, list[int]]) -> list[float]:
    """(9,) the standard deviations of the base's error in :data:`BASE_ERROR_LAYOUT` from the filter's covariance
    ``block`` (9, 9) (its rows and columns 0..8, named by ``layout``: name → [start, stop]) at the estimate.

    The invariant EKF's error is right-invariant (X = Exp(ξ) X̂): to first order the base's position error is
    ξ_p − [p̂]× ξ_R and its velocity error ξ_v − [v̂]× ξ_R (v̂ the base's world velocity, taken for the IMU's), so
    those rows are the diagonal of J P Jᵀ, not P's own, away from the origin. The linear filter's position and
    velocity are its state's; it has no orientation covariance (NaN)."""
    rows = {name: layout[name][0] for name in BASE_ERROR_LAYOUT if name in layout}
    if any(start + 3 > COVARIANCE_BLOCK for start in rows.values()) or not {"position", "velocity"} <= rows.keys():
        return [math.nan] * 9
    P = block.tolist()
    v0, p0 = rows["velocity"], rows["position"]
    if "rotation" in rows:  # the invariant EKF
        r0 = rows["rotation"]
        q = estimate_q.tolist()
        velocity, _ = _world_velocity(q, estimate_qd.tolist())
        variances = [P[r0 + i][r0 + i] for i in range(3)]
        variances += _invariant_variances(P, r0, v0, velocity) + _invariant_variances(P, r0, p0, q[0:3])
    else:  # the linear filter
        variances = [math.nan] * 3 + [P[v0 + i][v0 + i] for i in range(3)] + [P[p0 + i][p0 + i] for i in range(3)]
    return [math.sqrt(x) if x >= 0.0 else math.nan for x in variances]


def base_error(estimate_q: Array, estimate_qd: Array, truth_q: Array, truth_qd: Array) -> tuple[list[float], float]:
    """The estimate minus the truth, (9,) in :data:`BASE_ERROR_LAYOUT`, and the tilt error (rad: the angle between
    the world's vertical as the estimate and as the truth see it from the base; yaw plays no part), from the
    bases' (7,) q and (6,) qd (Pinocchio's: position and quaternion xyzw in the world, linear velocity in the base
    frame). The rotation is the rotation vector of R̂ Rᵀ, the shorter way round."""
    q, t = estimate_q.tolist(), truth_q.tolist()
    ax, ay, az, aw = q[3:7]
    bx, by, bz, bw = -t[3], -t[4], -t[5], t[6]  # the truth's inverse
    x = aw * bx + bw * ax + ay * bz - az * by
    y = aw * by + bw * ay + az * bx - ax * bz
    z = aw * bz + bw * az + ax * by - ay * bx
    w = aw * bw - ax * bx - ay * by - az * bz
    if w < 0.0:
        x, y, z, w = -x, -y, -z, -w
    norm = math.sqrt(x * x + y * y + z * z)
    scale = 2.0 * math.atan2(norm, w) / norm if norm > 1e-12 else 2.0
    v_estimate, up_estimate = _world_velocity(q, estimate_qd.tolist())
    v_truth, up_truth = _world_velocity(t, truth_qd.tolist())
    error = [x * scale, y * scale, z * scale]
    error += [v_estimate[i] - v_truth[i] for i in range(3)]
    error += [q[i] - t[i] for i in range(3)]
    cosine = up_estimate[0] * up_truth[0] + up_estimate[1] * up_truth[1] + up_estimate[2] * up_truth[2]
    return error, math.acos(max(-1.0, min(1.0, cosine)))


def derived_fields(record: dict[str, Any], layout: dict[str, list[int]] | None) -> None:
    """Add to a tick record (arrays as numpy arrays) ``estimate_std``, and with the truth ``estimate_error`` and
    ``tilt_error``, when it holds an estimate; in place (lists of floats: the writer only writes them as JSON).
    ``layout``: the run's ``estimator.covariance_layout``."""
    estimate_q = record.get("estimate_q")
    if estimate_q is None:
        return
    estimate_qd = record["estimate_qd"]
    block = record.get("estimate_covariance")
    if layout and block is not None and block.size == COVARIANCE_BLOCK * COVARIANCE_BLOCK:
        record["estimate_std"] = base_error_std(block.reshape(9, 9), estimate_q, estimate_qd, layout)
    truth_q = record.get("truth_q")
    if truth_q is not None:
        record["estimate_error"], record["tilt_error"] = base_error(
            estimate_q, estimate_qd, truth_q, record["truth_qd"]
        )


# ------------------------------------------------------------------------------------------ a user's numbers
@dataclass(frozen=True)
class EstimateSummary:
    """The estimate against the truth over a log's estimated ticks that carry the truth (SI units).

    ticks : compared.  seconds : their span of bridge time.  healthy : fraction of the estimated ticks whose
    estimate was trustworthy.  height_rms, height_max : |ẑ − z|, m.  drift : the horizontal displacement's error
    since the first compared tick, m; distance : the truth's horizontal path, m; drift_percent : drift / distance.
    tilt_rms, tilt_max : rad.  velocity_rms, velocity_max : the norm of the world velocity error, m/s.
    height_within_2std, velocity_within_2std : fraction of ticks whose height (each velocity axis) error is within
    two standard deviations (about 0.95 for a consistent filter; NaN without σ).
    contact_agreement : fraction of foot-ticks whose stance (the filter's) is the truth's contact (a normal force
    above :data:`TRUTH_CONTACT_FORCE`); longest_disagreement : s, the longest run of one foot's disagreeing ticks
    (NaN: no contact forces in the truth).
    """

    ticks: int
    seconds: float
    healthy: float
    height_rms: float
    height_max: float
    drift: float
    distance: float
    drift_percent: float
    tilt_rms: float
    tilt_max: float
    velocity_rms: float
    velocity_max: float
    height_within_2std: float
    velocity_within_2std: float
    contact_agreement: float
    longest_disagreement: float

    def as_dict(self) -> dict[str, float]:
        return {f.name: getattr(self, f.name) for f in fields(self)}

    def text(self) -> str:
        """The summary in a few lines, in mm, degrees, mm/s, % and ms."""

        def pct(x: float) -> str:
            return "-" if math.isnan(x) else f"{100 * x:.1f} %"

        return "\n".join(
            [
                f"estimate vs truth  {self.ticks} ticks, {self.seconds:.2f} s; trustworthy {pct(self.healthy)}",
                f"height error       RMS {1e3 * self.height_rms:.1f} mm, max {1e3 * self.height_max:.1f} mm; "
                f"within 2σ {pct(self.height_within_2std)}",
                f"horizontal drift   {1e3 * self.drift:.1f} mm over {self.distance:.2f} m travelled"
                + ("" if math.isnan(self.drift_percent) else f" ({self.drift_percent:.2f} %)"),
                f"tilt error         RMS {math.degrees(self.tilt_rms):.2f}°, max {math.degrees(self.tilt_max):.2f}°",
                f"velocity error     RMS {1e3 * self.velocity_rms:.1f} mm/s, max {1e3 * self.velocity_max:.1f} mm/s; "
                f"within 2σ {pct(self.velocity_within_2std)}",
                f"contact agreement  {pct(self.contact_agreement)} of foot-ticks"
                + (
                    ""
                    if math.isnan(self.longest_disagreement)
                    else f", longest disagreement {1e3 * self.longest_disagreement:.0f} ms"
                ),
            ]
        )


def has_estimate(log: TickLog) -> bool:
    """Whether any tick of ``log`` holds an estimate."""
    return "estimate_q" in log.fields() and bool(np.isfinite(log.array("estimate_q")).any())


def true_contacts(log: TickLog) -> Array:
    """(T, k) bool, the truth's contact per sphere (normal force above :data:`TRUTH_CONTACT_FORCE`); (T, 0) when the
    bridge sent no contact forces."""
    forces = log.array("truth_contact_forces")
    if not forces.size:
        return np.zeros((len(log), 0), dtype=bool)
    return np.nan_to_num(forces[..., 2]) > TRUTH_CONTACT_FORCE


def compared_ticks(log: TickLog) -> NDArray[np.bool_]:
    """(T,) the ticks with both an estimate and the truth."""
    if not has_estimate(log):
        return np.zeros(len(log), dtype=bool)
    truth = log.array("truth_q")
    if not truth.size:
        return np.zeros(len(log), dtype=bool)
    return np.isfinite(log.array("estimate_q")).all(axis=1) & np.isfinite(truth).all(axis=1)


def _longest_run(disagree: NDArray[np.bool_]) -> int:
    """The longest run of True down the rows of (T, k), over the columns."""
    longest = 0
    for column in disagree.T:
        padded = np.concatenate([[False], column, [False]]).astype(np.int8)
        edges = np.flatnonzero(np.diff(padded))
        if edges.size:
            longest = max(longest, int(np.max(edges[1::2] - edges[0::2])))
    return longest


def estimate_summary(log: TickLog) -> EstimateSummary:
    """The numbers of :class:`EstimateSummary` over ``log``. Raises :class:`LogError` when it holds no estimate or
    no truth to compare it with."""
    if not has_estimate(log):
        raise LogError(
            f"{log.path}: this log has no estimate (its launch file has no [estimator]: see docs/estimation.md)"
        )
    used = compared_ticks(log)
    if not used.any():
        raise LogError(
            f"{log.path}: this log has an estimate but no truth to compare it with (the bridge sent none: only a "
            "simulator bridge with [bridge.sensors] knows it)"
        )
    estimated = np.isfinite(log.array("estimate_q")).all(axis=1)
    status = log.array("estimate_status")[estimated]
    t = log.array("t")[used]
    error = log.array("estimate_error")[used]
    std = log.array("estimate_std")[used] if "estimate_std" in log.fields() else np.full_like(error, math.nan)
    if not std.size:
        std = np.full_like(error, math.nan)
    truth_xy = log.array("truth_q")[used][:, :2]
    height = np.abs(error[:, 8])
    velocity = np.linalg.norm(error[:, 3:6], axis=1)
    tilt = log.array("tilt_error")[used]
    drift = float(np.linalg.norm(error[-1, 6:8] - error[0, 6:8]))
    distance = float(np.sum(np.linalg.norm(np.diff(truth_xy, axis=0), axis=1)))
    with np.errstate(invalid="ignore"):
        height_in = np.abs(error[:, 8]) <= 2.0 * std[:, 8]
        velocity_in = np.abs(error[:, 3:6]) <= 2.0 * std[:, 3:6]
    has_std = np.isfinite(std[:, 8])
    contact = true_contacts(log)[used]
    stance = log.array("estimate_contact")[used] > 0.5 if contact.shape[1] else np.zeros((0, 0), dtype=bool)
    agreement = float(np.mean(stance == contact)) if contact.size else math.nan
    longest = _longest_run(stance != contact) * log.dt if contact.size else math.nan
    return EstimateSummary(
        ticks=int(used.sum()),
        seconds=float(t[-1] - t[0]),
        healthy=float(np.mean(status == "trustworthy")) if status.size else math.nan,
        height_rms=float(np.sqrt(np.mean(height**2))),
        height_max=float(np.max(height)),
        drift=drift,
        distance=distance,
        drift_percent=100.0 * drift / distance if distance > 0.01 else math.nan,
        tilt_rms=float(np.sqrt(np.mean(tilt**2))),
        tilt_max=float(np.max(tilt)),
        velocity_rms=float(np.sqrt(np.mean(velocity**2))),
        velocity_max=float(np.max(velocity)),
        height_within_2std=float(np.mean(height_in[has_std])) if has_std.any() else math.nan,
        velocity_within_2std=float(np.mean(velocity_in[has_std])) if has_std.any() else math.nan,
        contact_agreement=agreement,
        longest_disagreement=longest,
    )
