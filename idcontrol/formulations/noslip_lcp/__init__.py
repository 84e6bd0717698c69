"""ID(tᵢ)_LCP,∞, the no-slip LCP: the formulation (:mod:`.formulation`), Algorithm 1 (:mod:`.find_indices`) and
its compiled stages (:mod:`.stages`). Algorithm 2, a generic LCP solver, is :mod:`idcontrol.solvers.ppm`."""

from idcontrol.formulations.noslip_lcp.find_indices import IndependentColumns, find_indices
from idcontrol.formulations.noslip_lcp.formulation import PAPER_OPTIONS, NoSlipLCP, project_desired_velocity

__all__ = ["PAPER_OPTIONS", "IndependentColumns", "NoSlipLCP", "find_indices", "project_desired_velocity"]
