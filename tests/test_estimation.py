"""The floating-base estimator: its leg kinematics against Pinocchio, its compiled filters against plain numpy
references written here from the papers, the robot file's IMU frame, and its health verdicts on bad data."""

from __future__ import annotations

import dataclasses
import math
from pathlib import Path

import numpy as np
import pinocchio as pin
import pytest
from scipy.linalg import expm
from scipy.spatial.transform import Rotation

from idcontrol.errors import ConfigError, NameNotFound, ShapeError
from idcontrol.estimation import BaseEstimator, EstimatorSettings, ExternalPose, NoiseModel, SensorReading
from idcontrol.estimation.kinematics import LegKinematics
from idcontrol.robot.config import load_robot_config
from idcontrol.robot.model import RobotModel

ROBOTS = Path(__file__).resolve().parents[1] / "robots"
GRAVITY = np.array([0.0, 0.0, -9.81])


def skew(u: np.ndarray) -> np.ndarray:
    return np.array([[0.0, -u[2], u[1]], [u[2], 0.0, -u[0]], [-u[1], u[0], 0.0]])


def with_imu(tmp_path: Path, robot: str, imu_frame: str) -> Path:
    """A copy of a shipped robot file with ``[sensors] imu_frame`` set (its URDF found where the original points)."""
    source = ROBOTS / robot / "robot.toml"
    text = source.read_text()
    urdf = load_robot_config(str(source)).urdf_path
    lines = [f'urdf = "{urdf}"' if line.startswith("urdf =") else line for line in text.splitlines()]
    assert "[sensors]" not in lines
    lines += ["[sensors]", f'imu_frame = "{imu_frame}"']
    path = tmp_path / robot / "robot.toml"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("\n".join(lines) + "\n")
    return path


@pytest.fixture(scope="module")
def quadruped() -> RobotModel:
    return RobotModel("quadruped")


# ---------------------------------------------------------------------------------------------------- robot file
def test_the_imu_frame_defaults_to_the_base_and_is_read_from_the_robot_file(tmp_path):
    """Without ``[sensors] imu_frame`` the IMU is the base link; with it, the named frame's placement on the base."""
    assert load_robot_config("anymal_b").sensors.imu_frame is None
    robot = RobotModel(str(with_imu(tmp_path, "anymal_b", "imu_link")))
    geometry = LegKinematics(robot).geometry
    placement = robot.model.frames[robot.model.getFrameId("imu_link")].placement
    assert np.allclose(geometry.imu_rotation, placement.rotation)
    assert np.allclose(geometry.imu_translation, placement.translation)
    assert np.linalg.norm(geometry.imu_translation) > 0.1  # anymal's IMU is off the base origin, turned over


def test_an_imu_frame_the_urdf_lacks_or_that_a_joint_moves_is_refused(tmp_path):
    """An unknown frame is a NameNotFound listing the frames; a frame on a leg is refused with the joint named."""
    with pytest.raises(NameNotFound, match="no_such_imu"):
        RobotModel(str(with_imu(tmp_path, "anymal_b", "no_such_imu")))
    with pytest.raises(ConfigError, match="LF_KFE.*fixed to the floating base"):
        RobotModel(str(with_imu(tmp_path / "leg", "anymal_b", "LF_FOOT")))


# ---------------------------------------------------------------------------------------------------- kinematics
@pytest.mark.parametrize(("robot", "imu"), [("quadruped", None), ("solo12", None), ("anymal_b", "imu_link")])
def test_leg_kinematics_match_pinocchio(tmp_path, robot, imu):
    """Each contact sphere's position and Jacobian relative to the IMU equal Pinocchio's, on random postures."""
    model = RobotModel(str(with_imu(tmp_path, robot, imu)) if imu else robot)
    kin = LegKinematics(model)
    m, data = model.model, model.model.createData()
    imu_placement = pin.SE3.Identity() if imu is None else m.frames[m.getFrameId(imu)].placement
    rng = np.random.default_rng(3)
    for _ in range(5):
        q = pin.neutral(m)
        q[7:] = model.standing_configuration()[7:] + rng.normal(0.0, 0.5, m.nq - 7)
        kin.update(q[7:].copy())
        pin.computeJointJacobians(m, data, q)
        pin.updateFramePlacements(m, data)
        for f, (fid, offset) in enumerate(zip(model.sphere_frame_ids, model.sphere_offsets, strict=True)):
            frame = data.oMf[int(fid)]
            centre = frame.act(offset)
            jacobian = pin.getFrameJacobian(m, data, int(fid), pin.LOCAL_WORLD_ALIGNED)
            jacobian_centre = jacobian[:3] - skew(frame.rotation @ offset) @ jacobian[3:]
            expected = imu_placement.rotation.T @ (centre - imu_placement.translation)
            assert np.allclose(kin.feet[f], expected, atol=1e-12)
            assert np.allclose(kin.jacobian[f], imu_placement.rotation.T @ jacobian_centre[:, 6:], atol=1e-12)
            body = data.oMi[m.frames[int(fid)].parentJoint].rotation
            assert np.allclose(kin.foot_rotation[f], imu_placement.rotation.T @ body, atol=1e-12)


# ---------------------------------------------------------------------------------------------------- reference
class ReferenceInekf:
    """The contact-aided right-invariant EKF written plainly from Hartley et al. 2020: a state whose size changes
    as contacts begin and end, dense Φ, Ad_X and H, scipy's matrix exponential for the IMU's integrals and for
    Exp on SE_K(3), the Joseph form. The same model choices as the compiled filter (docstring of
    idcontrol.estimation.inekf): Φ = I + AΔt + (AΔt)²/2, Q = Ad Q_c Adᵀ Δt, feet as rolling spheres."""

    def __init__(self, noise: NoiseModel, radii: np.ndarray, rotation, position, k: int) -> None:
        self.n, self.radii, self.k = noise, radii, k
        self.R, self.v, self.p = rotation.copy(), np.zeros(3), position.copy()
        self.bias = np.zeros(6)
        self.order: list[int] = []  # feet in the state, in the order they came
        self.d: dict[int, np.ndarray] = {}
        self.touchdown: dict[int, np.ndarray] = {}
        P = np.zeros((15, 15))
        P[0, 0] = P[1, 1] = noise.initial_tilt_std**2
        P[2, 2] = noise.initial_yaw_std**2
        P[3:6, 3:6] = np.eye(3) * noise.initial_velocity_std**2
        P[6:9, 6:9] = np.eye(3) * noise.initial_position_std**2
        P[9:12, 9:12] = np.eye(3) * noise.initial_gyro_bias_std**2
        P[12:15, 12:15] = np.eye(3) * noise.initial_accel_bias_std**2
        self.P = P

    def dim(self) -> int:
        return 9 + 3 * len(self.order)

    def propagate(self, dt, gyro, accel) -> None:
        n = self.n
        w, a = gyro - self.bias[:3], accel - self.bias[3:]
        N = self.dim() + 6
        g, b = self.dim(), self.dim() + 3
        A = np.zeros((N, N))
        A[0:3, g : g + 3] = -self.R
        A[3:6, 0:3] = skew(GRAVITY)
        A[3:6, g : g + 3] = -skew(self.v) @ self.R
        A[3:6, b : b + 3] = -self.R
        A[6:9, 3:6] = np.eye(3)
        A[6:9, g : g + 3] = -skew(self.p) @ self.R
        for i, f in enumerate(self.order):
            A[9 + 3 * i : 12 + 3 * i, g : g + 3] = -skew(self.d[f]) @ self.R
        Phi = np.eye(N) + A * dt + 0.5 * (A * dt) @ (A * dt)
        G = np.eye(N)
        G[: self.dim(), : self.dim()] = self.adjoint()
        Qc = np.zeros((N, N))
        Qc[0:3, 0:3] = np.eye(3) * n.gyro_noise**2
        Qc[3:6, 3:6] = np.eye(3) * n.accel_noise**2
        for i in range(len(self.order)):
            Qc[9 + 3 * i : 12 + 3 * i, 9 + 3 * i : 12 + 3 * i] = np.eye(3) * n.foot_slip**2
        Qc[g : g + 3, g : g + 3] = np.eye(3) * n.gyro_bias_walk**2
        Qc[b : b + 3, b : b + 3] = np.eye(3) * n.accel_bias_walk**2
        self.P = Phi @ self.P @ Phi.T + G @ Qc @ G.T * dt
        E = np.zeros((5, 5))
        E[:3, :3] = skew(w)
        E[:3, 3] = a
        E[3, 4] = 1.0
        M = expm(E * dt)  # [Γ0, Γ1 a Δt, Γ2 a Δt²]
        self.p = self.p + self.v * dt + self.R @ M[:3, 4] + 0.5 * GRAVITY * dt * dt
        self.v = self.v + self.R @ M[:3, 3] + GRAVITY * dt
        self.R = self.R @ M[:3, :3]

    def adjoint(self) -> np.ndarray:
        D = self.dim()
        Ad = np.zeros((D, D))
        columns = [self.v, self.p] + [self.d[f] for f in self.order]
        for i in range(D // 3):
            Ad[3 * i : 3 * i + 3, 3 * i : 3 * i + 3] = self.R
            if i:
                Ad[3 * i : 3 * i + 3, 0:3] = skew(columns[i - 1]) @ self.R
        return Ad

    def foot_noise(self, jacobian_f) -> np.ndarray:
        n = self.n
        return self.R @ (n.encoder_noise**2 * jacobian_f @ jacobian_f.T + n.kinematics_noise**2 * np.eye(3)) @ self.R.T

    def update(self, feet, jacobian, foot_rotation, stance, imu_xyzw, external=None) -> None:
        n, N = self.n, self.dim() + 6
        rows, zs, noises = [], [], []
        for i, f in enumerate(self.order):
            if stance[f]:
                H = np.zeros((3, N))
                H[:, 6:9] = -np.eye(3)
                H[:, 9 + 3 * i : 12 + 3 * i] = np.eye(3)
                roll = Rotation.from_matrix(self.R @ foot_rotation[f] @ self.touchdown[f].T).as_rotvec()
                centre_offset = self.radii[f] * np.array([roll[1], -roll[0], 1.0])
                rows.append(H)
                zs.append(self.R @ feet[f] - centre_offset - (self.d[f] - self.p))
                noises.append(self.foot_noise(jacobian[f]))
        if n.imu_tilt_noise > 0:
            H = np.zeros((3, N))
            H[:, 0:3] = np.eye(3)
            rows.append(H)
            zs.append(Rotation.from_matrix(Rotation.from_quat(imu_xyzw).as_matrix() @ self.R.T).as_rotvec())
            noises.append(np.diag([n.imu_tilt_noise**2, n.imu_tilt_noise**2, n.imu_yaw_noise**2]))
        if external is not None:
            position, rotation, std_p, std_r = external
            H = np.zeros((3, N))
            H[:, 0:3] = -skew(self.p)
            H[:, 6:9] = np.eye(3)
            rows.append(H)
            zs.append(position - self.p)
            noises.append(np.eye(3) * std_p**2)
            H = np.zeros((3, N))
            H[:, 0:3] = np.eye(3)
            rows.append(H)
            zs.append(Rotation.from_matrix(rotation @ self.R.T).as_rotvec())
            noises.append(np.eye(3) * std_r**2)
        if rows:
            H, z = np.vstack(rows), np.concatenate(zs)
            Nm = np.zeros((len(z), len(z)))
            for i, block in enumerate(noises):
                Nm[3 * i : 3 * i + 3, 3 * i : 3 * i + 3] = block
            S = H @ self.P @ H.T + Nm
            K = self.P @ H.T @ np.linalg.inv(S)
            delta = K @ z
            D = self.dim()
            algebra = np.zeros((3 + D // 3 - 1 + 1, 3 + D // 3 - 1 + 1))
            algebra[:3, :3] = skew(delta[:3])
            for i in range(1, D // 3):
                algebra[:3, 2 + i] = delta[3 * i : 3 * i + 3]
            dX = expm(algebra)
            X = np.eye(len(algebra))
            X[:3, :3] = self.R
            X[:3, 3], X[:3, 4] = self.v, self.p
            for i, f in enumerate(self.order):
                X[:3, 5 + i] = self.d[f]
            X = dX @ X
            self.R, self.v, self.p = X[:3, :3], X[:3, 3], X[:3, 4]
            for i, f in enumerate(self.order):
                self.d[f] = X[:3, 5 + i]
            self.bias = self.bias + delta[D:]
            IKH = np.eye(N) - K @ H
            self.P = IKH @ self.P @ IKH.T + K @ Nm @ K.T
        for f in [f for f in self.order if not stance[f]]:  # contacts that ended leave the state
            i = self.order.index(f)
            keep = [j for j in range(self.P.shape[0]) if not 9 + 3 * i <= j < 12 + 3 * i]
            self.P = self.P[np.ix_(keep, keep)]
            self.order.remove(f)
            del self.d[f], self.touchdown[f]
        for f in range(self.k):  # contacts that began enter it
            if stance[f] and f not in self.order:
                D = self.dim()
                F = np.zeros((D + 9, D + 6))
                F[:D, :D] = np.eye(D)
                F[D : D + 3, 6:9] = np.eye(3)
                F[D + 3 :, D:] = np.eye(6)
                G = np.zeros((D + 9, 3))
                G[D : D + 3] = self.R
                Sigma = self.R.T @ self.foot_noise(jacobian[f]) @ self.R
                self.P = F @ self.P @ F.T + G @ Sigma @ G.T
                self.d[f] = self.p + self.R @ feet[f] - self.radii[f] * np.array([0.0, 0.0, 1.0])
                self.touchdown[f] = self.R @ foot_rotation[f]
                self.order.append(f)

    def full_covariance(self) -> np.ndarray:
        """P in the compiled filter's fixed layout (every foot's slot, zero when out of the state)."""
        n = 15 + 3 * self.k
        index = [0, 1, 2, 3, 4, 5, 6, 7, 8] + [9 + 3 * f + j for f in self.order for j in range(3)]
        index += list(range(9 + 3 * self.k, n))
        out = np.zeros((n, n))
        out[np.ix_(index, index)] = self.P
        return out


def trot_like_readings(robot: RobotModel, ticks: int, seed: int) -> list[SensorReading]:
    """Readings that exercise every branch: changing contacts, fast and slow rotation, an external pose."""
    rng = np.random.default_rng(seed)
    stand = robot.standing_configuration()
    out, t = [], 0.0
    rotation = Rotation.from_euler("xyz", [0.02, -0.03, 0.4])
    for i in range(ticks):
        dt = 1e-3 if i % 7 else 2e-3
        t += dt
        omega = np.array([0.3 * math.sin(0.01 * i), 0.2, 1.5 * math.cos(0.02 * i)]) if i > 50 else np.zeros(3)
        rotation = rotation * Rotation.from_rotvec(omega * dt)
        phase = (i // 60) % 3
        contact = (
            np.array([1, 1, 1, 1.0])
            if phase == 0 or i < 30
            else np.array([1, 0, 0, 1.0])
            if phase == 1
            else np.array([0, 1, 1, 0.0])
        )
        joint_q = stand[7:] + 0.1 * np.sin(0.01 * i + np.arange(robot.nq - 7))
        accel = rotation.inv().apply(-GRAVITY) + rng.normal(0.0, 0.3, 3)
        pose = None
        if 200 <= i < 230:
            pose = ExternalPose(np.array([0.01, -0.02, 0.17]), Rotation.from_euler("z", 0.38).as_quat(), 0.003, 0.01)
        gyro = omega + rng.normal(0.0, 0.01, 3)
        joint_v = rng.normal(0.0, 0.1, robot.nv - 6)
        out.append(
            SensorReading(t, joint_q, joint_v, rotation.as_quat(), gyro, accel, contact=contact, external_pose=pose)
        )
    return out


def test_the_compiled_invariant_ekf_equals_a_numpy_reference(quadruped):
    """Same readings, same numbers: the compiled filter's state, biases, stance feet and covariance equal the
    plain reference's to round-off, tick after tick, through contacts that begin and end and an external pose."""
    noise = NoiseModel()
    est = BaseEstimator(quadruped, EstimatorSettings(noise=noise))
    readings = trot_like_readings(quadruped, 400, seed=5)
    est.reset(readings[0])
    kin = LegKinematics(quadruped)
    kin.update(readings[0].joint_q)
    R0 = Rotation.from_quat(readings[0].imu_orientation_xyzw).as_matrix()
    position0 = est.state.position.copy()  # the start the estimator chose (its lowest foot on z = 0)
    ref = ReferenceInekf(noise, quadruped.sphere_radii, R0, position0, 4)
    ref.update(kin.feet, kin.jacobian, kin.foot_rotation, readings[0].contact > 0.5, readings[0].imu_orientation_xyzw)
    for previous, reading in zip(readings, readings[1:], strict=False):
        estimate = est.update(reading)
        kin.update(reading.joint_q)
        ref.propagate(reading.t - previous.t, reading.imu_angular_velocity, reading.imu_linear_acceleration)
        external = None
        if reading.external_pose is not None:
            pose = reading.external_pose
            rotation_base = Rotation.from_quat(pose.orientation_xyzw).as_matrix()
            external = (pose.position, rotation_base, pose.position_std, pose.orientation_std)  # IMU = base here
        ref.update(
            kin.feet, kin.jacobian, kin.foot_rotation, reading.contact > 0.5, reading.imu_orientation_xyzw, external
        )
        s = est.state
        assert np.allclose(s.rotation, ref.R, atol=1e-11)
        assert np.allclose(s.velocity, ref.v, atol=1e-10)
        assert np.allclose(s.position, ref.p, atol=1e-10)
        assert np.allclose(s.bias, ref.bias, atol=1e-10)
        assert sorted(np.flatnonzero(s.in_state > 0.5)) == sorted(ref.order)
        for f in ref.order:
            assert np.allclose(s.feet[f], ref.d[f], atol=1e-10)
        assert np.allclose(s.covariance, ref.full_covariance(), rtol=1e-8, atol=1e-13)
        assert estimate.healthy, estimate.reason
    assert len(ref.order) in (2, 4)


# ---------------------------------------------------------------------------------------------------- health
def resting(robot: RobotModel, t: float, rng: np.random.Generator) -> SensorReading:
    """A noisy reading of the robot standing still, level, on its four feet."""
    return SensorReading(
        t,
        robot.standing_configuration()[7:],
        np.zeros(robot.nv - 6),
        np.array([0, 0, 0, 1.0]),
        rng.normal(0.0, 1e-3, 3),
        np.array([0.0, 0.0, 9.81]) + rng.normal(0.0, 1e-2, 3),
        contact=np.ones(len(robot.sphere_names)),
    )


@pytest.mark.parametrize("kind", ["inekf", "lkf"])
def test_a_non_finite_imu_is_not_trustworthy_and_loses_nothing(quadruped, kind):
    """A NaN in the IMU makes the estimate untrustworthy with the reason; the filter's state is kept and the
    next finite reading is trustworthy again."""
    rng = np.random.default_rng(0)
    est = BaseEstimator(quadruped, EstimatorSettings(filter=kind))
    est.reset(resting(quadruped, 0.0, rng))
    for i in range(1, 50):
        assert est.update(resting(quadruped, i * 1e-3, rng)).healthy
    before = est._state.copy()
    bad = resting(quadruped, 0.05, rng)
    bad.imu_linear_acceleration = np.array([0.0, math.nan, 9.81])
    estimate = est.update(bad)
    assert not estimate.healthy and "IMU reading is not finite" in estimate.reason
    assert np.array_equal(est._state, before)
    assert np.all(np.isfinite(estimate.q)) and np.all(np.isfinite(estimate.v))
    assert est.update(resting(quadruped, 0.051, rng)).healthy


def test_a_stale_or_frozen_imu_is_not_trustworthy(quadruped):
    """An IMU sample older than the bound, or the same reading repeated tick after tick, is stale."""
    rng = np.random.default_rng(1)
    est = BaseEstimator(quadruped)
    est.reset(resting(quadruped, 0.0, rng))
    old = resting(quadruped, 0.001, rng)
    old.imu_t = 0.001 - 0.02
    estimate = est.update(old)
    assert not estimate.healthy and "stale" in estimate.reason and "20.0 ms ago" in estimate.reason
    frozen = resting(quadruped, 0.002, rng)
    verdicts = []
    for i in range(10):
        frozen.t = 0.002 + i * 1e-3
        verdicts.append(est.update(frozen).healthy)
    assert verdicts[:4] == [True] * 4 and not any(verdicts[6:])


def test_without_feet_the_velocity_grows_uncertain_and_the_estimate_says_so(quadruped):
    """With no foot in contact the invariant EKF's velocity is dead reckoning: its covariance grows past the bound
    and the estimate says which bound, with the numbers. (The linear filter keeps weighing swing feet, down-
    weighted, as Cheetah 3's does: its velocity stays bounded.)"""
    rng = np.random.default_rng(2)
    est = BaseEstimator(quadruped)
    est.reset(resting(quadruped, 0.0, rng))
    verdicts = []
    for i in range(1, 3001):
        reading = resting(quadruped, i * 1e-3, rng)
        reading.contact = None
        estimate = est.update(reading)
        verdicts.append(estimate.healthy)
    assert verdicts[0] and not verdicts[-1]
    assert "velocity's standard deviation" in estimate.reason and "> 0.100 m/s" in estimate.reason


def test_a_wrongly_sized_reading_is_refused_and_changes_nothing(quadruped):
    """A joint vector of the wrong length raises ShapeError before the filter moves."""
    rng = np.random.default_rng(3)
    est = BaseEstimator(quadruped)
    est.reset(resting(quadruped, 0.0, rng))
    before = est._state.copy()
    bad = resting(quadruped, 0.001, rng)
    bad.joint_q = bad.joint_q[:-1]
    with pytest.raises(ShapeError, match="joint_q"):
        est.update(bad)
    assert np.array_equal(est._state, before)


def test_settings_are_checked():
    """A negative noise or an unknown filter is a configuration error that names it."""
    with pytest.raises(ConfigError, match="gyro_noise"):
        EstimatorSettings(noise=dataclasses.replace(NoiseModel(), gyro_noise=-1.0))
    with pytest.raises(ConfigError, match="unknown estimator filter 'ukf'"):
        BaseEstimator(RobotModel("quadruped"), EstimatorSettings(filter="ukf"))
