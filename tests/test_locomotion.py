"""The quadruped trots in MuJoCo with the settings of launch/quadruped_trot.toml (in process, 1 kHz, μ = 1).

What makes the trot work (measured; each is a controller or planner setting, not a change of the paper's
formulations): a candidate contact enters the problem only when its predicted gap at the end of the period is
at most ``activation_distance`` (a foot hovering 1 mm above the floor otherwise carries a predicted share of
the weight, and the torques that assume it drive the unloaded leg into the floor); q̇_des starts from joint
velocities that hold the active contacts still (``consistent_contact_velocity``: a landing foot's approach
is taken up by its own joints instead of an impulse on the whole robot); a planned-stance foot that has not
found the ground keeps descending (``touchdown_search_speed``); and PD gains stiff enough for 0.3 s gait
cycles (kp = 1000, kd = 60). The two-stage QP also needs its opt-in ``dissipation = "contacts"``: the paper's
Stage I brakes the base instead of propelling it (see the in-place test below).
"""

from __future__ import annotations

from dataclasses import replace

import numpy as np

from idcontrol.reference import make_reference
from idcontrol.settings import LaunchConfig, ReferenceSettings, load_launch
from idcontrol.testing import assert_no_fall, assert_tracking
from tests.conftest import REPO

TROT = REPO / "launch" / "quadruped_trot.toml"


def trot_config(formulation: str, **options) -> LaunchConfig:
    """launch/quadruped_trot.toml with another formulation; ``options``, if any, replace the file's
    ``[formulations.NAME]`` table for it."""
    config = load_launch(TROT).with_overrides(formulation=formulation)
    if options:
        config = replace(config, formulations={**config.formulations, formulation: options})
    return config


def assert_trots_forward(run) -> None:
    """5 s in run mode, no fall, about the commanded 0.2 m/s straight ahead at standing height, joints tracked."""
    assert run.ticks_in_run == 5000, run.end_reason
    assert_no_fall(run)
    # 0.5 s standing, a 0.4 s ramp to 0.2 m/s, then 4.1 s at 0.2 m/s: ~0.86 m if the feet never slip
    assert 0.7 < run.q_end[0] < 1.0, run.q_end[0]
    assert abs(run.q_end[1]) < 0.1
    assert abs(run.q_end[2] - run.robot.standing_configuration()[2]) < 0.01
    assert_tracking(run, mean_rad=0.03)


def test_trot_launch_file_walks_forward_with_two_stage_qp(idcontrol_loop):
    """The launch file as shipped (two_stage_qp, Stage I dissipating relative to the stance feet) trots forward.

    Measured over 20 s through `idcontrol launch`: 3.66 m, 0.0119 rad, E|Δτ| 81 N·m/s (coulomb_lcp: 134).
    """
    config = load_launch(TROT)
    assert config.controller.formulation == "two_stage_qp"
    assert config.formulation_options("two_stage_qp") == {"dissipation": "contacts"}
    assert_trots_forward(idcontrol_loop.run(config, 5.0))


def test_trot_launch_file_walks_forward_with_coulomb_lcp(idcontrol_loop):
    """coulomb_lcp (``--formulation coulomb_lcp``) trots forward with the paper's model unchanged."""
    assert_trots_forward(idcontrol_loop.run(trot_config("coulomb_lcp"), 5.0))


def test_two_stage_qp_trot_stays_up_but_its_model_does_not_propel_the_base(idcontrol_loop, quadruped):
    """two_stage_qp with the paper's Stage I (``dissipation = "world"``) trots 5 s in place without falling; it
    does not advance (measured |x| < 0.1 m).

    Stage I minimizes the kinetic energy with τ free and P v⁺ = q̇_des: for stance legs that sweep their feet
    backward, the minimum is a base that hardly moves and feet that slide, so the torques carry no propulsion.
    MuJoCo's friction holds the feet, and the legs do not follow: the robot trots on the spot. (With the
    trot's body feedback on, the growing joint errors tip it over after about 2.5 s; planned in the base
    frame alone it stays up: 20 s measured.)
    """
    trot = make_reference("trot", quadruped, forward_speed=0.2, body_feedback=False)
    run = idcontrol_loop.in_process(trot_config("two_stage_qp", dissipation="world"), 5.0, reference=trot)
    assert run.ticks_in_run == 5000, run.end_reason
    assert_no_fall(run)
    assert abs(run.q_end[0]) < 0.1


def test_noslip_lcp_stands_with_spread_normal_impulses(idcontrol_loop):
    """noslip_lcp holds the standing pose 2 s in MuJoCo once its LCP picks the least-norm force split.

    Without ``spread`` Algorithm 2 returns a vertex of the solution set (two diagonal feet carry the robot),
    which MuJoCo's compliant floor does not reproduce; a looser ``rank_tol`` keeps Find-Indices from taking
    nearly dependent tangential rows after µm of unequal foot penetration.
    """
    config = replace(trot_config("noslip_lcp", spread=1e-2, rank_tol=1e-3), reference=ReferenceSettings("hold"))
    run = idcontrol_loop.run(config, 2.0)
    assert run.ticks_in_run == 2000, run.end_reason
    assert_no_fall(run)
    assert_tracking(run, mean_rad=0.01)
    standing = run.robot.standing_configuration()
    assert np.abs(run.q_end[:3] - standing[:3]).max() < 0.005


NOSLIP_TROT_OPTIONS = {"spread": 3e-2, "project": True, "release_unloaded": True, "share_friction": True}


def test_noslip_lcp_trots_forward_with_consistent_and_shared_friction(idcontrol_loop):
    """noslip_lcp (``--formulation noslip_lcp``) trots 5 s without falling, at about the commanded speed, with
    three opt-in options that the launch file sets.

    With the paper's method alone it falls within about 1 s (measured with spread = 1e-2, rank_tol = 1e-3):
    Algorithm 1 puts the whole tangential force on the rows it keeps first, so at a touchdown the landing foot
    takes the weight and no friction while the others carry friction near zero load (|f_T| ≈ 2 f_N) and slide;
    contacts the LCP leaves without normal force keep holding tangential forces no floor provides; and the
    Section 4.5 repair changes q̇_des after the solve. ``share_friction`` splits the tangential forces like the
    normal ones, ``release_unloaded`` drops the tangential rows of unloaded contacts, and ``project`` makes
    q̇_des no-slip-consistent before the solve (20 s measured: 3.6 m, no fall).
    """
    config = trot_config("noslip_lcp")  # the launch file's [formulations.noslip_lcp] table
    assert config.formulation_options("noslip_lcp") == NOSLIP_TROT_OPTIONS
    assert_trots_forward(idcontrol_loop.run(config, 5.0))
