"""Franka arms (Panda, FR3) through libfranka's torque control: ``idcontrol driver franka`` (docs/franka.md).

* :mod:`~idcontrol.driver.franka.driver`: :class:`FrankaDriver`, the driver SDK's loop clocked by the arm's 1 ms
  cycle, gravity taken out of the daemon's torque once;
* :mod:`~idcontrol.driver.franka.reasons`: libfranka's errors as the daemon's stop reasons;
* :mod:`~idcontrol.driver.franka.joints`: the robot file's seven arm joints;
* :mod:`~idcontrol.driver.franka.sim`: franky-sim, libfranka's network protocol simulated, for tests;
* :mod:`~idcontrol.driver.franka.app`: the command line.

Needs the ``franka`` extra (``pip install 'idcontrol[franka]'``: pylibfranka, franky-sim); importing this package
does not import them, nothing outside it imports it.
"""
