"""The pure, synchronous control core: ``ControlCore.tick(RobotState, now) -> Command``.

It owns no socket, file or clock. ``state`` (the input), ``controller`` (model, contacts, problem, formulation),
``core`` (state machine, reference, fallback policy, safety filter), ``safety``, ``metrics``, ``modes`` and
``factory`` (a core from launch settings). The daemon, replay, the benchmark and the test harness drive it.
"""
