"""In-process closed loop with real MuJoCo: ControlCore (reference → PD → formulation → clipped τ) → MujocoSim.

No sockets: each tick the simulator's state goes into :meth:`ControlCore.tick` and the command back into
:meth:`MujocoSim.step`, 1 kHz, μ = 1. Gains kp = 1000 1/s², kd = 60 1/s in q̈_des for every formulation.

Measured (this file's loop, 2 s of ``hold``): mean joint error 0.0184 rad with two_stage_qp and 0.0188 rad
with coulomb_lcp. Almost all of it is a steady offset, not noise: both formulations ask the feet to leave
the ground at |φ|/Δt to undo MuJoCo's ~2–5 µm soft-contact penetration. The base rises until the PD's pull,
Δt·kp·e, balances that rate, so the offset is e ≈ |φ| / (kp Δt²) (2.3 mm of base height for two_stage_qp
and 4.7 mm for coulomb_lcp at kp = 1000). Lower kp gives a proportionally larger error (0.16 rad at kp = 150).
"""

from __future__ import annotations

import numpy as np
import pytest

from idcontrol.bridges.mujoco_sim import MujocoSim
from idcontrol.controller import InverseDynamicsController
from idcontrol.daemon.core import ControlCore
from idcontrol.protocol import StateMessage
from idcontrol.reference import make_reference
from idcontrol.robot.model import RobotModel

KP, KD = 1000.0, 60.0
STANDING_ERROR_BOUND = 0.03  # rad; measured 0.0184 (two_stage_qp), 0.0188 (coulomb_lcp)


@pytest.fixture(scope="module")
def quadruped() -> RobotModel:
    return RobotModel("quadruped")


def closed_loop(robot: RobotModel, formulation: str, reference: str, seconds: float, **options):
    """Run the loop for ``seconds`` of simulated time or until the core leaves run mode.

    Returns (core, final SimState, ticks run in run mode, torque clips).
    """
    sim = MujocoSim(robot, mu=1.0)
    controller = InverseDynamicsController(robot, formulation=formulation)
    core = ControlCore(controller, make_reference(reference, robot, **options))
    core.set_gains(kp=KP, kd=KD)
    core.start(0.0)
    ticks = clips = 0
    for i in range(int(round(seconds / sim.model.opt.timestep))):
        s = sim.state()
        out = core.tick(StateMessage(i, s.t, s.q, s.v, s.contact_forces, s.objects), now=s.t)
        if out.mode != "run":
            break
        ticks += 1
        clips += out.clipped
        sim.step(out.tau)
    return core, sim.state(), ticks, clips


@pytest.mark.parametrize("formulation", ["two_stage_qp", "coulomb_lcp"])
def test_quadruped_stands_two_seconds(quadruped, formulation):
    """Holding the standing pose for 2 s: no fall, no torque clip, small joint error, base where it started."""
    core, state, ticks, clips = closed_loop(quadruped, formulation, "hold", 2.0)
    summary = core.metrics.summary()
    assert ticks == 2000 and core.mode == "run" and not summary["fell"], core.reason
    assert clips == 0
    assert summary["tracking_error_rad"] < STANDING_ERROR_BOUND
    standing = quadruped.standing_configuration()
    assert abs(state.q[2] - standing[2]) < 0.01  # m (2.3–4.7 mm above: the |φ|/Δt offset)
    assert np.hypot(state.q[0] - standing[0], state.q[1] - standing[1]) < 0.005  # m, no drift


@pytest.mark.xfail(
    strict=True,
    reason=(
        "noslip_lcp falls within 0.05 s. At tick 1, 1 µm of unequal foot penetration lifts the whitened "
        "tangential block from rank 3 to a numerical rank 5 (singular values 7e-7 > rank_tol 1e-8). "
        "Find-Indices keeps 5 rows, the normal LCP block collapses to rank 1, PPM reports a singular "
        "active block, and the fallback gives 323 N on one foot and τ ~ 1e7 N·m."
    ),
)
def test_quadruped_stands_with_noslip_lcp(quadruped):
    core, _, ticks, _ = closed_loop(quadruped, "noslip_lcp", "hold", 0.5)
    assert ticks == 500 and not core.metrics.fell, core.reason


@pytest.mark.xfail(
    strict=True,
    reason=(
        "two_stage_qp cannot lift a loaded swing foot. Its complementarity-free Stage II puts a normal force "
        "on any contact within the 5 mm margin, including a separating one, whenever that lowers ‖τ‖². "
        "A folding swing leg gets a fictitious upward foot force instead of motor torque, so the foot stays "
        "planted; the PD error grows until the robot is thrown (falls at about 1.1 s)."
    ),
)
def test_quadruped_trots_three_seconds_with_two_stage_qp(quadruped):
    core, state, ticks, _ = closed_loop(quadruped, "two_stage_qp", "trot", 3.0)
    assert ticks == 3000 and not core.metrics.fell, core.reason
    assert state.q[0] > 0.2  # m: 2.5 s of trotting at up to 0.2 m/s after the 0.5 s stand
