"""ID(tᵢ)_QP,μ, the two-stage QP: the formulation (:mod:`.formulation`), its compiled stages (:mod:`.stages`),
Stage II's null-space basis (:mod:`.null_space`) and, with many contacts, its dual method (:mod:`.pyramid_dual`)."""

from idcontrol.formulations.two_stage_qp.formulation import (
    DISSIPATION_REFERENCES,
    STRUCTURED_MAX_ITER,
    STRUCTURED_TOL,
    StageOne,
    TwoStageQP,
    check_dissipation,
    finish,
    no_contact,
    pyramid_rows,
    remap_active_set,
    solve_stage_one,
)

__all__ = [
    "DISSIPATION_REFERENCES",
    "STRUCTURED_MAX_ITER",
    "STRUCTURED_TOL",
    "StageOne",
    "TwoStageQP",
    "check_dissipation",
    "finish",
    "no_contact",
    "pyramid_rows",
    "remap_active_set",
    "solve_stage_one",
]
