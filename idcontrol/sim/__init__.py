"""Simulators behind one protocol: MuJoCo (soft contact), the rigid-contact time stepper, the ESS integrator
(compliant contact with a known crossing order).

>>> from idcontrol.sim import available_simulators
>>> available_simulators()
['ess', 'mujoco', 'rigid']
"""

from idcontrol.sim.base import SimState, Simulator, available_simulators, make_simulator, register_simulator

__all__ = ["SimState", "Simulator", "available_simulators", "make_simulator", "register_simulator"]
