"""``idcontrol experiment certificates``: every formulation on perturbed stance states, each answer that says
``found`` checked independently of the project's own matrices.

The states are a legged robot near its stance, as a controller meets it between touchdowns: joints and base
orientation within ±0.01 rad of standing, base velocity within ±0.1 m/s, joint velocities within ±0.5 rad/s,
desired joint accelerations within ±5 rad/s², and the base height set so that the lowest contact sphere is
within 0.2 mm of the floor (above or below). Each formulation answers every state from a fresh warm start.

For every ``found`` answer, the independent check recomputes, with Pinocchio's recursive Newton-Euler
(``rnea``) and its own frame Jacobians at the contact points (not the controller's rows),

    r = rnea(q, v, (v⁺ − v)/Δt) − Pᵀ(τ − τ_joint) − Σᵢ Jᵢ(pᵢ)ᵀ fᵢ,

where τ_joint is what the motors spend against the URDF's joint damping D and dry friction F (Pinocchio's
``model.damping``, ``model.friction``; zero on most robots), the controller's documented feed-forward at the
states' velocities: D q̇ + clip(M_jj q̇ / (r Δt), −F, F), M_jj from Pinocchio's ``crba``, r the controller's
``FRICTION_RAMP``. Left out, Talos' joint friction of 1 N·m reads as a residual of 1.5 N·m on every answer.

and requires max |r| ≤ 1e-6 N·m (N), f_N ≥ 0, the torques within 30 times the limits and the summed contact
force magnitudes within m (10 g + (v_c + 1 m/s)/Δt), v_c the fastest contact point (Pinocchio's frame
velocities), the physical bound of :mod:`idcontrol.formulations.certificate`. An answer that
the certificate rejected (``found=False`` with a certificate message) is counted as rejected.

Of the certified answers it also counts those with a torque beyond the URDF's limits (the safety filter clips
them, and the predicted forces then no longer hold), and those in which a contact carrying more than 1 mN slides
faster than 1 mm/s after the step: the tangential velocity of the contact point from the answer's own v⁺, with
Pinocchio's Jacobians at that point (a column for every formulation; only a no-slip formulation promises none).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import pinocchio as pin

from idcontrol import jsontext
from idcontrol.control.controller import InverseDynamicsController, joint_loss_torque
from idcontrol.control.state import RobotState
from idcontrol.formulations import certificate
from idcontrol.reference.base import Tracking
from idcontrol.robot.model import RobotModel

FORMULATIONS = ("two_stage_qp", "coulomb_lcp", "noslip_lcp", "one_stage_qp", "sensed_id", "pid")
RESIDUAL_TOL = 1e-6  # N·m (N): the independent dynamics check
LOADED_N = 1e-3  # N: a contact carrying more is loaded (the slip columns)
SLIP_TOL = 1e-3  # m/s: a loaded contact sliding faster slips


@dataclass
class Tally:
    """One formulation on one robot's states."""

    robot: str
    formulation: str
    states: int = 0
    certified: int = 0  # found, and the independent check agrees
    rejected: dict[str, int] = field(default_factory=dict)  # not found, by the certificate's failed check
    failed: int = 0  # not found for another reason (the solver's own)
    unsound: int = 0  # found, but the independent check disagrees: never acceptable
    worst_residual: float = 0.0  # N·m, over the found answers
    worst_force: float = 0.0  # N, the largest contact force of a found answer
    worst_torque_ratio: float = 0.0  # max |τ| / limit of a found answer
    over_limit: int = 0  # certified answers with a torque beyond the URDF limit (the safety filter clips them)
    loaded: int = 0  # certified answers with a loaded contact (f_N > LOADED_N)
    slipping: int = 0  # ... of which a loaded contact slides faster than SLIP_TOL after the step
    slips: list[float] = field(default_factory=list)  # m/s, each loaded answer's fastest loaded contact
    examples: list[str] = field(default_factory=list)

    @property
    def slip_median(self) -> float:
        return float(np.median(self.slips)) if self.slips else 0.0

    @property
    def slip_max(self) -> float:
        return max(self.slips, default=0.0)


def perturbed_states(robot: RobotModel, count: int, rng: np.random.Generator) -> list[tuple[RobotState, np.ndarray]]:
    """``count`` (state, q̈_des) pairs near the robot's stance (see the module docstring)."""
    model, data = robot.model, robot.model.createData()
    q0 = robot.standing_configuration()
    idx_q = robot.actuated_idx_q
    out = []
    for _ in range(count):
        q = q0.copy()
        q[idx_q] += rng.uniform(-0.01, 0.01, robot.nu)
        rotation = pin.Quaternion(q0[6], *q0[3:6]).toRotationMatrix() @ pin.exp3(rng.uniform(-0.01, 0.01, 3))
        quat = pin.Quaternion(rotation)
        q[3:7] = (quat.x, quat.y, quat.z, quat.w)
        pin.framesForwardKinematics(model, data, q)
        lowest = min(
            float((data.oMf[int(f)].act(np.asarray(offset)))[2]) - radius
            for f, offset, radius in zip(robot.sphere_frame_ids, robot.sphere_offsets, robot.sphere_radii, strict=True)
        )
        q[2] += -lowest + rng.uniform(-2e-4, 2e-4)
        v = np.zeros(robot.nv)
        v[:3] = rng.uniform(-0.1, 0.1, 3)
        v[robot.actuated_dofs] = rng.uniform(-0.5, 0.5, robot.nu)
        out.append((RobotState(q, v), rng.uniform(-5.0, 5.0, robot.nu)))
    return out


def joint_losses(robot: RobotModel, q: np.ndarray, v: np.ndarray, dt: float) -> np.ndarray:
    """(nu,) N·m the motors add against the URDF's joint damping and dry friction at velocity v (see module)."""
    model = robot.model
    dofs = robot.actuated_dofs
    damping, friction = np.asarray(model.damping)[dofs], np.asarray(model.friction)[dofs]
    inertia = np.diagonal(pin.crba(model, model.createData(), q))[dofs]
    out = np.empty(len(dofs))
    joint_loss_torque(damping, friction, inertia, v[dofs], dt, out)
    return out


def independent_residual(robot: RobotModel, state: RobotState, result, contacts, dt: float) -> float:
    """max |rnea(q, v, (v⁺ − v)/Δt) − Pᵀ(τ − τ_joint) − Σ Jᵢᵀ fᵢ|, N·m, with Pinocchio's own kinematics (see
    module)."""
    model, data = robot.model, robot.model.createData()
    q, v = state.q, state.v
    nv = robot.nv
    accel = (result.v_next[:nv] - v) / dt
    generalized = pin.rnea(model, data, q, v, accel).copy()
    generalized[robot.actuated_dofs] -= result.tau - joint_losses(robot, q, v, dt)
    pin.computeJointJacobians(model, data, q)
    pin.updateFramePlacements(model, data)

    def point_jacobian(sphere: int, point: np.ndarray) -> np.ndarray:
        frame = int(robot.sphere_frame_ids[sphere])
        J = pin.getFrameJacobian(model, data, frame, pin.ReferenceFrame.LOCAL_WORLD_ALIGNED)
        return J[:3] - pin.skew(point - data.oMf[frame].translation) @ J[3:]

    if result.sensed:  # the measured forces, at the sphere centres
        for k, offset in enumerate(robot.sphere_offsets):
            centre = data.oMf[int(robot.sphere_frame_ids[k])].act(np.asarray(offset))
            generalized -= point_jacobian(k, centre).T @ state.sensed_forces[k]
    elif result.force_in_world is not None:
        for i in range(contacts.n):
            generalized -= point_jacobian(int(contacts.sphere[i]), contacts.points[i]).T @ result.force_in_world[i]
    return float(np.abs(generalized).max())


def loaded_slip(robot: RobotModel, state: RobotState, result, contacts) -> float | None:
    """m/s: the fastest tangential velocity, after the step (the answer's own v⁺), of a contact point carrying more
    than ``LOADED_N``, from Pinocchio's frame Jacobians at the contact points and the contacts' normals; None
    when no contact is loaded."""
    model, data = robot.model, robot.model.createData()
    pin.computeJointJacobians(model, data, state.q)
    pin.updateFramePlacements(model, data)
    v_next = result.v_next[: robot.nv]
    fastest = None
    for i in range(contacts.n):
        if not result.f_normal[i] > LOADED_N:
            continue
        frame = int(robot.sphere_frame_ids[int(contacts.sphere[i])])
        J = pin.getFrameJacobian(model, data, frame, pin.ReferenceFrame.LOCAL_WORLD_ALIGNED)
        arm = contacts.points[i] - data.oMf[frame].translation
        velocity = J[:3] @ v_next + np.cross(J[3:] @ v_next, arm)
        normal = contacts.normals[i]
        tangential = float(np.linalg.norm(velocity - normal * (normal @ velocity)))
        fastest = tangential if fastest is None else max(fastest, tangential)
    return fastest


def force_bound(robot: RobotModel, state: RobotState, contacts, dt: float) -> float:
    """m (10 g + (v_c + 1 m/s)/Δt), N: v_c the fastest contact point, from Pinocchio's frame Jacobians."""
    model, data = robot.model, robot.model.createData()
    pin.computeJointJacobians(model, data, state.q)
    pin.updateFramePlacements(model, data)
    fastest = 0.0
    for i in range(contacts.n):
        frame = int(robot.sphere_frame_ids[int(contacts.sphere[i])])
        J = pin.getFrameJacobian(model, data, frame, pin.ReferenceFrame.LOCAL_WORLD_ALIGNED)
        arm = contacts.points[i] - data.oMf[frame].translation
        velocity = J[:3] @ state.v + np.cross(J[3:] @ state.v, arm)  # of the contact point, world
        fastest = max(fastest, float(np.linalg.norm(velocity)))
    return robot.total_mass() * (certificate.WEIGHTS * 9.81 + (fastest + certificate.SPEED_MARGIN) / dt)


def run(robots: list[str], states: int, seed: int = 0) -> list[Tally]:
    """Each formulation on ``states`` perturbed stance states of each robot; the tallies."""
    tallies = []
    for name in robots:
        robot = RobotModel(name)
        samples = perturbed_states(robot, states, np.random.default_rng(seed))
        mass = robot.total_mass()
        for formulation in FORMULATIONS:
            controller = InverseDynamicsController(robot, formulation=formulation)
            tally = Tally(robot.name, formulation)
            for state, qdd_des in samples:
                controller.formulation.reset()
                sensed = np.zeros((len(robot.sphere_names), 3))
                sensed[:, 2] = 9.81 * mass / max(len(robot.sphere_names), 1)
                state = RobotState(state.q, state.v, 0.0, {}, sensed)
                tracking = Tracking(np.zeros(robot.nu), np.zeros(robot.nu))
                result = controller.solve(state, qdd_des, tracking)
                tally.states += 1
                if not result.found:
                    check = result.message.removeprefix("certificate: ").split(" ")[0]
                    if result.message.startswith("certificate:"):
                        tally.rejected[check] = tally.rejected.get(check, 0) + 1
                    else:
                        tally.failed += 1
                    continue
                contacts = controller.last_contacts
                force = (
                    np.linalg.norm(result.force_in_world, axis=1).max(initial=0.0)
                    if result.force_in_world is not None
                    else 0.0
                )
                ratio = float(np.max(np.abs(result.tau) / robot.torque_limits))
                tally.worst_force = max(tally.worst_force, float(force))
                tally.worst_torque_ratio = max(tally.worst_torque_ratio, ratio)
                sound = ratio <= certificate.TORQUE_FACTOR and bool(np.all(result.f_normal >= -certificate.FORCE_TOL))
                if result.force_in_world is not None and contacts.n:
                    total = float(np.linalg.norm(result.force_in_world, axis=1).sum())
                    sound = sound and total <= force_bound(robot, state, contacts, controller.dt)
                if formulation != "pid":
                    residual = independent_residual(robot, state, result, contacts, controller.dt)
                    tally.worst_residual = max(tally.worst_residual, residual)
                    sound = sound and residual <= RESIDUAL_TOL
                if sound:
                    tally.certified += 1
                    tally.over_limit += ratio > 1.0
                    slip = loaded_slip(robot, state, result, contacts) if not result.sensed else None
                    if slip is not None:
                        tally.loaded += 1
                        tally.slipping += slip > SLIP_TOL
                        tally.slips.append(slip)
                else:
                    tally.unsound += 1
                    if len(tally.examples) < 3:
                        tally.examples.append(f"max|tau|/limit {ratio:.3g}, max|f| {force:.3g} N")
            tallies.append(tally)
            print(_line(tally), flush=True)
    return tallies


def _line(t: Tally) -> str:
    rejected = ", ".join(f"{k} {v}" for k, v in sorted(t.rejected.items())) or "none"
    return (
        f"{t.robot:<10} {t.formulation:<13} states {t.states}: certified {t.certified}, rejected "
        f"{sum(t.rejected.values())} ({rejected}), solver failed {t.failed}, UNSOUND {t.unsound}; worst residual "
        f"{t.worst_residual:.2e} N·m, "
        f"max |f| {t.worst_force:.1f} N, max |τ|/limit {t.worst_torque_ratio:.2f}; over the limits "
        f"{t.over_limit} of {t.certified} certified; a loaded contact slips > {SLIP_TOL * 1e3:.0f} mm/s in "
        f"{t.slipping} of {t.loaded} (slip median {t.slip_median * 1e3:.2g}, max {t.slip_max * 1e3:.2g} mm/s)"
    )


def main(robots: list[str], states: int, seed: int, json_path: str | None) -> int:
    """Print a line per robot and formulation; 1 when any found answer fails the independent check."""
    print(f"idcontrol experiment certificates: {states} perturbed stance states per robot, seed {seed}", flush=True)
    tallies = run(robots, states, seed)
    if json_path:
        Path(json_path).write_text(jsontext.dumps([t.__dict__ for t in tallies], indent=1) + "\n")
        print(f"wrote {json_path}")
    return 1 if any(t.unsound for t in tallies) else 0
