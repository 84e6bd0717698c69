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


class RobotFileNotFound(ConfigError):
    """A URDF or robot configuration file does not exist."""

    def __init__(self, path: str, what: str = "file") -> None:
        self.path = str(path)
        super().__init__(f"{what} not found: {self.path}")


class UnknownRobot(ConfigError):
    """A robot name that is not shipped in ``robots/``."""

    def __init__(self, name: str, available: Iterable[str]) -> None:
        self.name = name
        self.available = sorted(available)
        super().__init__(f"unknown robot {name!r}; available: {', '.join(self.available) or '(none)'}")


class NameNotFound(ConfigError):
    """A joint, frame or body name that the model does not have."""

    def __init__(self, kind: str, name: str, available: Iterable[str]) -> None:
        self.kind = kind
        self.name = name
        self.available = sorted(available)
        shown = ", ".join(self.available[:40]) + (" ..." if len(self.available) > 40 else "")
        super().__init__(f"unknown {kind} {name!r}; the model has: {shown}")


class UnknownFormulation(ConfigError):
    """A formulation name that is not registered."""

    def __init__(self, name: str, available: Iterable[str]) -> None:
        self.name = name
        self.available = sorted(available)
        super().__init__(f"unknown formulation {name!r}; available: {', '.join(self.available)}")


class InputError(IdControlError):
    """A state, request or problem given to the controller is malformed."""


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
