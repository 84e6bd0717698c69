"""Inverse-dynamics formulations, registered by the names users write in launch files.

>>> from idcontrol.formulations import available_formulations, contact_formulations
>>> available_formulations()
['coulomb_lcp', 'noslip_lcp', 'one_stage_qp', 'pid', 'sensed_id', 'two_stage_qp']
>>> contact_formulations()
['coulomb_lcp', 'noslip_lcp', 'one_stage_qp', 'two_stage_qp']
"""

from __future__ import annotations

import inspect

from idcontrol.errors import UnknownFormulation, UnknownOption
from idcontrol.formulations.base import Formulation
from idcontrol.formulations.coulomb_lcp import CoulombLCP
from idcontrol.formulations.noslip_lcp import NoSlipLCP
from idcontrol.formulations.one_stage_qp import OneStageQP
from idcontrol.formulations.pid import PID
from idcontrol.formulations.sensed_id import SensedID
from idcontrol.formulations.two_stage_qp import TwoStageQP
from idcontrol.validation import check_option_types

REGISTRY: dict[str, type[Formulation]] = {
    cls.name: cls for cls in (NoSlipLCP, CoulombLCP, TwoStageQP, OneStageQP, PID, SensedID)
}


def available_formulations() -> list[str]:
    """Names accepted by :func:`make_formulation`."""
    return sorted(REGISTRY)


def contact_formulations() -> list[str]:
    """Names of the formulations that model rigid contacts (their contact forces keep N v⁺ + φ/Δt ≥ 0), not the
    baselines that take the contact forces as measured or predict none."""
    return sorted(name for name, cls in REGISTRY.items() if cls.contact_model.rigid)


def make_formulation(name: str, **options: object) -> Formulation:
    """A new formulation instance by name; unknown names raise UnknownFormulation listing the valid ones."""
    try:
        cls = REGISTRY[name]
    except KeyError:
        raise UnknownFormulation(name, REGISTRY) from None
    named = (inspect.Parameter.POSITIONAL_OR_KEYWORD, inspect.Parameter.KEYWORD_ONLY)
    parameters = inspect.signature(cls.__init__).parameters.values()
    accepted = [q.name for q in parameters if q.kind in named and q.name != "self"]
    unknown = sorted(set(options) - set(accepted))
    if unknown:
        raise UnknownOption(f"formulation {name!r}", unknown, accepted)
    check_option_types(f"formulation {name!r}", cls.__init__, options)
    return cls(**options)


__all__ = ["Formulation", "available_formulations", "contact_formulations", "make_formulation", "REGISTRY"]
