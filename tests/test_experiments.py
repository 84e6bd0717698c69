"""`idcontrol experiment paper --quick`: the paper's experiments at CI length, and the targets reachable there."""

from __future__ import annotations

import json
from dataclasses import dataclass, field

import numpy as np
import pytest

from idcontrol.tools.cli import main
from idcontrol.tools.experiments.paper import DelayedForces, plan

REQUIRED = (
    "experiment",
    "terrain",
    "controller",
    "pos_err_rad",
    "vel_err_rad_s",
    "tau_rate_mean",
    "tau_mean",
    "force_err_abs_N",
    "force_err_rel",
    "fell",
)
RIGID = ("rigid_low", "rigid_high")
QUICK_CONTROLLERS = ("qp_mu", "lcp_mu", "pid", "sensed_1")


@pytest.fixture(scope="module")
def quick_run(tmp_path_factory):
    """The quick matrix on the rigid planar terrains (four controllers) and one grasp, with its report."""
    folder = tmp_path_factory.mktemp("paper")
    only = ",".join([f"trot/{t}/{c}" for t in RIGID for c in QUICK_CONTROLLERS] + ["grasp/grasp_1/qp_mu"])
    code = main(
        [
            "experiment",
            "paper",
            "--quick",
            "--only",
            only,
            "--json",
            str(folder / "results.json"),
            "--report",
            str(folder / "results.md"),
        ]
    )
    assert code == 0
    results = json.loads((folder / "results.json").read_text())
    return folder, {(r["experiment"], r["terrain"], r["controller"]): r for r in results}


def test_quick_mode_writes_one_object_per_run_with_the_issues_fields(quick_run):
    """--json holds one object per (experiment, terrain, controller) with every required field."""
    _, by = quick_run
    assert len(by) == 2 * len(QUICK_CONTROLLERS) + 1
    for r in by.values():
        assert set(REQUIRED) <= set(r), sorted(set(REQUIRED) - set(r))
        assert r["ticks"] > 0 and r["wall_seconds"] > 0


def test_coulomb_lcp_predicts_the_rigid_simulators_normal_force_within_two_percent(quick_run):
    """Target: the Coulomb LCP's summed normal force is within 2 % of the model-matched rigid simulator's."""
    _, by = quick_run
    for terrain in RIGID:
        r = by["trot", terrain, "lcp_mu"]
        assert r["completed"], (terrain, r["end_reason"])
        assert r["force_err_rel"] <= 0.02, (terrain, r["force_err_rel"])


def test_predictive_id_tracks_at_least_as_well_as_pid_and_sensed_id_on_rigid_planar_terrain(quick_run):
    """Target: ID(tᵢ) (Coulomb LCP) tracks the joints at least as well as PID and ID(tᵢ₋₁) on rigid planar terrain."""
    _, by = quick_run
    for terrain in RIGID:
        mine = by["trot", terrain, "lcp_mu"]["pos_err_rad"]
        assert mine <= by["trot", terrain, "pid"]["pos_err_rad"], terrain
        assert mine <= by["trot", terrain, "sensed_1"]["pos_err_rad"], terrain


def test_every_quick_run_but_the_known_falls_completes(quick_run):
    """The two-stage QP, the Coulomb LCP, PID and ID(tᵢ₋₁) finish the quick trot on both rigid terrains."""
    _, by = quick_run
    for terrain in RIGID:
        for controller in QUICK_CONTROLLERS:
            r = by["trot", terrain, controller]
            assert r["completed"] and not r["fell"], (terrain, controller, r["end_reason"])


def test_report_has_the_tables_targets_and_plots(quick_run):
    """--report writes the markdown with the paper's tables, the targets, the command and its PNG plots."""
    folder, _ = quick_run
    text = (folder / "results.md").read_text()
    for heading in ("Table 3", "Table 4", "Table 5", "Manipulator", "targets", "idcontrol experiment paper --quick"):
        assert heading in text, heading
    for png in ("fig14_tracking_error.png", "fig17_com_paths.png"):
        assert (folder / "results" / png).stat().st_size > 1000


def test_only_that_matches_nothing_is_a_clear_error(capsys):
    """An --only that selects no run exits 2 with idcontrol's error line, not a traceback."""
    assert main(["experiment", "paper", "--quick", "--only", "no_such_run"]) == 2
    assert "idcontrol: error: --only 'no_such_run' matches no run" in capsys.readouterr().err


def test_plan_covers_the_papers_matrix():
    """Full mode: five trot terrains and two grasps with the paper's seven controllers, and the project's two
    trot variants on the five terrains; 30 s trots, 3 s grasps."""
    runs = plan()
    assert len(runs) == (5 + 2) * 7 + 5 * 2
    assert {r.controller.key for r in runs if not r.controller.paper} == {"cqp_mu", "slcp_inf"}
    assert all(r.experiment == "trot" for r in runs if not r.controller.paper)
    assert {r.seconds for r in runs if r.experiment == "trot"} == {30.0}
    assert {r.seconds for r in runs if r.experiment == "grasp"} == {3.0}


@dataclass
class _State:
    t: float
    contact_forces: np.ndarray


@dataclass
class _CountingSim:
    """Applies force (step number) on every sphere during each step; a state's forces are its last step's."""

    time: float = 0.0
    steps: list = field(default_factory=list)

    def state(self) -> _State:
        return _State(self.time, np.full((4, 3), float(len(self.steps))))

    def step(self, tau) -> None:
        self.steps.append(tau)
        self.time += 1e-3


def test_delayed_forces_hand_on_the_forces_one_step_later():
    """DelayedForces(sim, 1) gives each state the forces of the state before it (zeros at first), once per step."""
    sim = DelayedForces(_CountingSim(), 1)
    seen = []
    for _ in range(4):
        seen.append(sim.state().contact_forces[0, 0])
        assert sim.state().contact_forces[0, 0] == seen[-1]  # asking twice does not advance the delay line
        sim.step(np.zeros(12))
    assert seen == [0.0, 0.0, 1.0, 2.0]
