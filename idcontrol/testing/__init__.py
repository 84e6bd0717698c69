"""Test your controller in closed loop: run it against a simulator, get the run as arrays, assert on it.

A pytest plugin (:mod:`idcontrol.testing.plugin`, registered when idcontrol is installed) adds the
fixtures; see docs/testing.md for a complete example::

    from idcontrol.testing import assert_no_fall, assert_tracking, loop_config

    def test_my_robot_stands(idcontrol_loop):
        run = idcontrol_loop.run(loop_config("robots/mine/robot.toml", reference="hold"), seconds=1.0)
        assert_no_fall(run)
        assert_tracking(run, mean_rad=0.01)

Names are imported on first use, so loading the plugin does not import Pinocchio or MuJoCo.
"""

from __future__ import annotations

import importlib

_EXPORTS = {
    "ClosedLoopRun": "run",
    "loop_config": "runners",
    "run_in_process": "runners",
    "run_over_protocol": "runners",
    "assert_friction_cone": "asserts",
    "assert_no_fall": "asserts",
    "assert_stays_in_run": "asserts",
    "assert_torque_smooth": "asserts",
    "assert_tracking": "asserts",
    "assert_within_limits": "asserts",
}
__all__ = sorted(_EXPORTS)


def __getattr__(name: str) -> object:
    if name not in _EXPORTS:
        raise AttributeError(f"module 'idcontrol.testing' has no attribute {name!r}")
    return getattr(importlib.import_module(f"idcontrol.testing.{_EXPORTS[name]}"), name)
