"""Simulators behind one protocol: MuJoCo (soft contact), the rigid-contact time stepper, Drake (SAP compliant
contact), the ESS integrator (compliant contact with a known crossing order) and a mock without physics for tests,
named in one registry (:mod:`idcontrol.simulators`).

>>> from idcontrol.sim import available_simulators
>>> available_simulators()
['drake', 'ess', 'mock', 'mujoco', 'rigid']
"""

from idcontrol.sim.base import (
    SimState,
    Simulator,
    SimulatorBase,
    available_simulators,
    make_simulator,
    register_simulator,
)

__all__ = ["SimState", "Simulator", "SimulatorBase", "available_simulators", "make_simulator", "register_simulator"]
