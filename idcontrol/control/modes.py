"""The control core's modes, in the order of its state machine (docs/protocol.md, "Modes").

idle ──start──▶ run ──stop / fault / watchdog / fall──▶ safe_stop ──at rest or timeout──▶ stopped
                 ▲                                                                           │
                 └───────────────────────────────────start──────────────────────────────────┘
"""

MODE_IDLE = "idle"  # not controlling: tau = 0; a simulator holds still, a robot keeps its brakes
MODE_RUN = "run"  # tau from the controller
MODE_SAFE_STOP = "safe_stop"  # damping (or PD hold) torques while the robot comes to rest
MODE_STOPPED = "stopped"  # tau = 0 after a safe stop; only an explicit start resumes
MODES = (MODE_IDLE, MODE_RUN, MODE_SAFE_STOP, MODE_STOPPED)
