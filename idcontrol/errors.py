"""The package's one exception hierarchy.

Every error idcontrol raises derives from :class:`IdControlError`. Subclasses
carry the data a user needs to fix the problem (the valid names, the expected
shape, the path that was looked for). A solver that merely fails to converge
does *not* raise: it returns a result with ``found=False``.
"""

from __future__ import annotations

from collections.abc import Iterable


class IdControlError(Exception):
    """Base class of every error raised by idcontrol."""


class ConfigError(IdControlError):
    """A robot, launch or controller configuration is invalid."""


class UnknownName(ConfigError):
    """A name (robot, formulation, reference, joint, frame, option) that is not among the valid ones."""


class RobotFileNotFound(ConfigError):
    """A URDF or robot configuration file does not exist."""

    def __init__(self, path: str, what: str = "file") -> None:
        self.path = str(path)
        super().__init__(f"{what} not found: {self.path}")


class UnknownRobot(UnknownName):
    """A robot name that is not shipped in ``robots/``."""

    def __init__(self, name: str, available: Iterable[str]) -> None:
        self.name = name
        self.available = sorted(available)
        super().__init__(f"unknown robot {name!r}; available: {', '.join(self.available) or '(none)'}")


class NameNotFound(UnknownName):
    """A joint, frame or body name that the model does not have."""

    def __init__(self, kind: str, name: str, available: Iterable[str]) -> None:
        self.kind = kind
        self.name = name
        self.available = sorted(available)
        shown = ", ".join(self.available[:40]) + (" ..." if len(self.available) > 40 else "")
        super().__init__(f"unknown {kind} {name!r}; the model has: {shown}")


class UnknownFormulation(UnknownName):
    """A formulation name that is not registered."""

    def __init__(self, name: str, available: Iterable[str]) -> None:
        self.name = name
        self.available = sorted(available)
        super().__init__(f"unknown formulation {name!r}; available: {', '.join(self.available)}")


class UnknownReference(UnknownName):
    """A reference name that is not registered."""

    def __init__(self, name: str, available: Iterable[str]) -> None:
        self.name = name
        self.available = sorted(available)
        super().__init__(f"unknown reference {name!r}; available: {', '.join(self.available)}")


class UnknownOption(UnknownName):
    """Options a formulation or reference does not accept."""

    def __init__(self, owner: str, unknown: Iterable[str], accepted: Iterable[str]) -> None:
        self.unknown = sorted(unknown)
        self.accepted = list(accepted)
        super().__init__(
            f"unknown option(s) {self.unknown} for {owner}; valid options: {', '.join(self.accepted) or '(none)'}"
        )


class MissingDependency(ConfigError):
    """An optional part of idcontrol was asked for but the package it needs (an extra) is not installed."""

    def __init__(self, package: str, extra: str, wanted: str) -> None:
        self.package = package
        self.extra = extra
        super().__init__(f"{wanted} needs {package}, which is not installed: pip install 'idcontrol[{extra}]'")


class InputError(IdControlError):
    """A state, request or problem given to the controller is malformed."""


class InvalidTransition(InputError):
    """A request the controller's state machine does not allow in its current mode."""


class ShapeError(InputError):
    """An array has the wrong shape."""

    def __init__(self, name: str, expected: tuple[int, ...], got: tuple[int, ...]) -> None:
        self.name = name
        self.expected = tuple(expected)
        self.got = tuple(got)
        super().__init__(f"{name} has shape {self.got}, expected {self.expected}")


class NonFiniteError(InputError):
    """An array holds NaN or infinity where finite numbers are required."""

    def __init__(self, name: str, indices: Iterable[int]) -> None:
        self.name = name
        self.indices = list(indices)
        super().__init__(f"{name} is not finite at indices {self.indices[:10]}")


class ProtocolError(InputError):
    """A message that breaks the wire protocol; ``code`` is the error reply's code (see docs/protocol.md)."""

    def __init__(self, code: str, message: str, seq: int | None = None) -> None:
        self.code = code
        self.seq = seq
        super().__init__(message)


class LogError(IdControlError):
    """A log file that cannot be written or read (exists already, truncated, not a log, unknown version)."""


class SimulationError(IdControlError):
    """A simulator back end could not advance; its state is unchanged."""


class SimulationDiverged(SimulationError):
    """MuJoCo found a non-finite or huge position, velocity or acceleration; reset the simulation to go on."""


class ContactSolveFailed(SimulationError):
    """The rigid simulator's contact LCP had no solution Lemke (with regularization) could find."""


class NativeSolverUnavailable(IdControlError):
    """A C solver's compiled path was asked for, but its self-check turned it off; ``reason`` says why."""

    def __init__(self, solver: str, reason: str) -> None:
        self.solver = solver
        self.reason = reason
        super().__init__(f"the compiled {solver} path is off: {reason}")
