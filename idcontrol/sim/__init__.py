"""Simulators behind one protocol: MuJoCo (soft contact) and the rigid-contact time stepper.

>>> from idcontrol.sim import available_simulators
>>> available_simulators()
['mujoco', 'rigid']
"""

from idcontrol.sim.base import SimState, Simulator, available_simulators, make_simulator, register_simulator

__all__ = ["SimState", "Simulator", "available_simulators", "make_simulator", "register_simulator"]
