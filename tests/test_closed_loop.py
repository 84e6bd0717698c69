"""In-process closed loop with real MuJoCo: ControlCore (reference → PD → formulation → clipped τ) → MujocoSim.

No sockets: each tick the simulator's state goes into :meth:`ControlCore.tick` and the command back into
:meth:`MujocoSim.step`, 1 kHz, μ = 1, with the launch files' settings: the robot file's gains and a 1 mm
penetration tolerance. Without the tolerance (the paper's N v⁺ ≥ −φ/Δt) the formulations ask the feet to
leave the ground at |φ|/Δt to undo MuJoCo's µm soft-contact penetration, and the base climbs until the PD's
pull balances that rate: 0.158 rad of mean joint error after 2 s of standing at kp = 150, against 0.001 rad
with the tolerance.
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

PENETRATION_TOLERANCE = 0.001  # m, as in launch/quadruped_*.toml
STANDING_ERROR_BOUND = 0.01  # rad


def closed_loop(
    robot: RobotModel,
    formulation: str,
    reference: str,
    seconds: float,
    gains: tuple[float, float] | None = None,
    **options,
):
    """Run the loop for ``seconds`` of simulated time or until the core leaves run mode.

    Returns (core, final SimState, ticks run in run mode, torque clips).
    """
    sim = MujocoSim(robot, mu=1.0)
    controller = InverseDynamicsController(robot, formulation=formulation, penetration_tolerance=PENETRATION_TOLERANCE)
    core = ControlCore(controller, make_reference(reference, robot, **options))
    if gains is not None:
        core.set_gains(kp=gains[0], kd=gains[1])
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


# coulomb_lcp needs stiffer feedback: Lemke puts the weight on one diagonal pair of feet (measured: it falls
# at 0.69 s with the robot file's kp = 150, kd = 8 and at 2.2 s with 400/40; it stands with 1000/60, and its
# torques chatter into the limits now and then (42 clipped joint-ticks in 2 s), as the paper reports).
@pytest.mark.parametrize(
    ("formulation", "gains", "max_clips"), [("two_stage_qp", None, 0), ("coulomb_lcp", (1000.0, 60.0), 100)]
)
def test_quadruped_stands_two_seconds(quadruped, formulation, gains, max_clips):
    """Holding the standing pose for 2 s: no fall, small joint error, base where it started, few clips."""
    core, state, ticks, clips = closed_loop(quadruped, formulation, "hold", 2.0, gains)
    summary = core.metrics.summary()
    assert ticks == 2000 and core.mode == "run" and not summary["fell"], core.reason
    assert clips <= max_clips
    assert summary["tracking_error_rad"] < STANDING_ERROR_BOUND
    standing = quadruped.standing_configuration()
    assert abs(state.q[2] - standing[2]) < 0.005  # m
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
        "The trot falls at about 1.1-1.5 s. Swing works (only planned stance feet are contacts), but at the "
        "first touchdown a landing foot still 0.6 mm up is a candidate contact and gets ~11 N of predicted "
        "force; the torques drive it down and the rigid model then stops it within one tick (~370 N on every "
        "foot, torques clipped at 8 N·m), which launches the robot. With two point feet on a diagonal nothing "
        "balances the base about the support line; the paper's planner adds VIIP balance, which ours lacks."
    ),
)
def test_quadruped_trots_three_seconds_with_two_stage_qp(quadruped):
    core, state, ticks, _ = closed_loop(quadruped, "two_stage_qp", "trot", 3.0)
    assert ticks == 3000 and not core.metrics.fell, core.reason
    assert state.q[0] > 0.2  # m: 2.5 s of trotting at up to 0.2 m/s after the 0.5 s stand
