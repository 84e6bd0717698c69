"""Offline analyses of contact timing: set-valued simultaneous impacts (:mod:`~idcontrol.analysis.impacts`) and the
differentiability of outcomes through touchdown (:mod:`~idcontrol.analysis.decoupled`).

Nothing here runs in the 1 kHz loop. The rigid simulator may call :mod:`~idcontrol.analysis.impacts` at
touchdowns when asked to (``[bridge] impact_sampling``), so this layer sits below the simulators and uses only
the solvers beneath it.
"""
