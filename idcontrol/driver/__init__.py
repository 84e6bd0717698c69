"""The driver SDK: the loop that connects a robot (or a simulator) to an idcontrol daemon.

>>> from idcontrol.driver import Driver, DriverState, RobotSizes
>>> driver = Driver(RobotSizes("quadruped", 19, 18, 12), "tcp://127.0.0.1:5555",
...                 read_state=my_read_state, apply=my_apply)
>>> driver.main()       # hello, serve at the daemon's rate until SIGINT/SIGTERM, print the report

docs/driver.md ("Connect your robot") explains it with a complete example; :mod:`idcontrol.driver.loop` holds
the loop; ``idcontrol conformance`` (:mod:`idcontrol.tools.conformance`) checks a driver in any language.
"""

from idcontrol.driver.loop import Driver, DriverReport, DriverState, RobotSizes

__all__ = ["Driver", "DriverReport", "DriverState", "RobotSizes"]
