"""pytest plugin: fixtures for closed-loop controller tests (registered through the ``pytest11`` entry point).

* ``idcontrol_robot``: ``idcontrol_robot(name_or_path)`` loads a :class:`~idcontrol.robot.model.RobotModel`
  once per session.
* ``idcontrol_loop``: runs a launch configuration in closed loop; ``.run`` uses the transport chosen on
  the command line (``--idcontrol-transport in_process|protocol``, default in_process), ``.in_process`` and
  ``.over_protocol`` pick one explicitly.

A run in several processes (pytest-xdist's ``-n``) first compiles what numba's cache lacks, once and in parallel
(:func:`idcontrol.compile.ensure_compiled`), in the controlling process: each worker would otherwise compile
every kernel again in its own imports.
"""

from __future__ import annotations

from typing import Any

import pytest

TRANSPORTS = ("in_process", "protocol")


@pytest.hookimpl(tryfirst=True)
def pytest_load_initial_conftests(early_config: pytest.Config) -> None:
    """With pytest-xdist workers (``-n N`` or ``-n auto``), before they start: compile the kernels numba's cache
    lacks, with a line per module. One process compiles what it imports anyway: a serial run only has the cached
    kernels whose callees changed removed first (:func:`~idcontrol.compile.invalidate_dependents`)."""
    if hasattr(early_config, "workerinput"):
        return
    workers = getattr(early_config.known_args_namespace, "numprocesses", None)
    if not workers or workers == 1:  # one process compiles in its imports; kernels whose callees changed go first
        from idcontrol.compile import invalidate_dependents

        invalidate_dependents()
        return
    from idcontrol.compile import ensure_compiled

    capture = early_config.pluginmanager.getplugin("capturemanager")
    if capture is None:
        ensure_compiled()
        return
    with capture.global_and_fixture_disabled():  # the progress lines on the terminal, as they come
        ensure_compiled()


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.getgroup("idcontrol").addoption(
        "--idcontrol-transport",
        choices=TRANSPORTS,
        default="in_process",
        help="how idcontrol_loop.run closes the loop: in this process (default), or daemon and bridge "
        "processes over the wire protocol",
    )


class LoopRunner:
    """What the ``idcontrol_loop`` fixture returns."""

    def __init__(self, transport: str, robots: RobotCache) -> None:
        self.transport = transport
        self._robots = robots

    def run(self, config: Any, seconds: float | None = None, **options: Any) -> Any:
        """Run with the session's transport. ``options`` as for the chosen runner (``gains`` works for both)."""
        if self.transport == "protocol":
            local = sorted(set(options) - {"gains"})
            if local:
                raise ValueError(
                    f"{local} cannot cross to other processes: with --idcontrol-transport protocol, "
                    "idcontrol_loop.run takes only gains (use idcontrol_loop.in_process)"
                )
            return self.over_protocol(config, seconds, **options)
        return self.in_process(config, seconds, **options)

    def in_process(self, config: Any, seconds: float | None = None, **options: Any) -> Any:
        """:func:`idcontrol.testing.run_in_process`, reusing the session's robot model."""
        from idcontrol.testing.runners import run_in_process

        options.setdefault("robot", self._robots(config.robot))
        return run_in_process(config, seconds, **options)

    def over_protocol(self, config: Any, seconds: float | None = None, **options: Any) -> Any:
        """:func:`idcontrol.testing.run_over_protocol`."""
        from idcontrol.testing.runners import run_over_protocol

        return run_over_protocol(config, seconds, **options)


class RobotCache:
    """Robot models by name or path, loaded once."""

    def __init__(self) -> None:
        self._models: dict[str, Any] = {}

    def __call__(self, robot: str) -> Any:
        from idcontrol.robot.model import RobotModel

        if robot not in self._models:
            self._models[robot] = RobotModel(robot)
        return self._models[robot]


@pytest.fixture(scope="session")
def idcontrol_robot() -> RobotCache:
    """``idcontrol_robot("quadruped")``: a robot model, loaded once per session."""
    return RobotCache()


@pytest.fixture
def idcontrol_loop(request: pytest.FixtureRequest, idcontrol_robot: RobotCache) -> LoopRunner:
    """Closed-loop runs: ``idcontrol_loop.run(config, seconds)`` returns a ClosedLoopRun."""
    return LoopRunner(request.config.getoption("idcontrol_transport"), idcontrol_robot)
