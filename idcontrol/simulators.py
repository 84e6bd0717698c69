"""The simulator back ends by name: the one registry that builds them (:func:`idcontrol.sim.launch.simulator_for`,
:func:`idcontrol.sim.make_simulator`), checks a launch file's ``[bridge]`` (:mod:`idcontrol.settings`) and lists
them in docs/simulators.md (:func:`markdown_table`).

Each entry (:class:`SimulatorKind`) names its back end's class as ``"module:Class"``, imported on first use, so a
back end whose dependencies are missing costs nothing until it is asked for; it declares the ``[bridge]`` keys
that only its kind reads (:class:`BridgeKey`: the check of a value, the constructor parameter it sets) and the
terrains it builds. The keys every kind reads (``kind``, ``mode``, ``mu``, ``substeps``, the terrain's,
``[bridge.sensors]``, ``[bridge.actuators]``) are :class:`~idcontrol.settings.BridgeSettings`' own fields. The
entries are data, below the settings, so a launch file is checked without importing a back end.

>>> available_simulators()
['drake', 'ess', 'mock', 'mujoco', 'rigid']
>>> simulator_kind("drake").key("contact_stiffness").parameter
'stiffness'
"""

from __future__ import annotations

import importlib
import math
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from idcontrol.errors import ConfigError, UnknownName


def _finite(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)


def positive(value: Any) -> bool:
    """A finite number > 0."""
    return _finite(value) and value > 0.0


def non_negative(value: Any) -> bool:
    """A finite number >= 0."""
    return _finite(value) and value >= 0.0


def flag(value: Any) -> bool:
    """true or false."""
    return isinstance(value, bool)


def count(value: Any) -> bool:
    """An integer >= 0."""
    return isinstance(value, int) and not isinstance(value, bool) and value >= 0


@dataclass(frozen=True)
class BridgeKey:
    """A ``[bridge]`` key that only some simulator kinds read.

    name : the launch file's key.  requirement : what a value must be, as the error says it ("a finite number
    > 0 N/m").  accepts : the check of a value.  parameter : the back end's constructor keyword it sets (default:
    ``name``).  default : its value when the file leaves it out (then the back end's own default applies).
    exclusive : given (not ``default``) with another kind, the file is refused; a key that is not exclusive is
    accepted and ignored by other kinds (a sweep sets the impact seed for every kind).  doc : one line.
    """

    name: str
    requirement: str
    accepts: Callable[[Any], bool]
    parameter: str = ""
    default: Any = None
    exclusive: bool = True
    doc: str = ""

    @property
    def keyword(self) -> str:
        """The back end's constructor keyword."""
        return self.parameter or self.name

    def check(self, value: Any, where: str) -> None:
        """ConfigError naming the key unless ``value`` is its default or accepted."""
        if value != self.default and not self.accepts(value):
            raise ConfigError(f"{where}: bridge.{self.name} must be {self.requirement}, got {value!r}")


@dataclass(frozen=True)
class SimulatorKind:
    """One ``[bridge] kind``.

    name : the kind.  factory : ``"module:Class"`` (or the class itself, or any callable) building the back end
    from ``(robot, *, mu, timestep, with_objects, object_mu, **its keys)``.  summary : one line for the docs.
    keys : the ``[bridge]`` keys only this kind reads.  terrains : the ``[bridge] terrain`` values it builds.
    """

    name: str
    factory: str | Callable[..., Any]
    summary: str = ""
    keys: tuple[BridgeKey, ...] = ()
    terrains: tuple[str, ...] = ("flat",)

    def key(self, name: str) -> BridgeKey:
        """This kind's key ``name`` (UnknownName if it has none)."""
        for key in self.keys:
            if key.name == name:
                return key
        raise UnknownName(f"simulator {self.name!r} reads no [bridge] key {name!r}")

    def load(self) -> Callable[..., Any]:
        """The back end's class (its module imported now)."""
        if not isinstance(self.factory, str):
            return self.factory
        module, _, attribute = self.factory.partition(":")
        return getattr(importlib.import_module(module), attribute)

    def arguments(self, given: Mapping[str, Any]) -> dict[str, Any]:
        """The constructor keywords of this kind's keys among ``given`` (name: value, as the file gives them)."""
        return {key.keyword: given[key.name] for key in self.keys if key.name in given}


_SIMULATORS: dict[str, SimulatorKind] = {}


def register_simulator(
    kind: SimulatorKind | str,
    factory: str | Callable[..., Any] | None = None,
) -> None:
    """Make a kind buildable and valid in launch files: a :class:`SimulatorKind`, or a name and its ``factory``
    (a callable or a ``"module:attribute"`` path) for a kind without keys of its own on flat ground."""
    if isinstance(kind, str):
        if factory is None:
            raise ConfigError(f"register_simulator({kind!r}) needs its factory")
        kind = SimulatorKind(kind, factory)
    _SIMULATORS[kind.name] = kind


def available_simulators() -> list[str]:
    """The kinds, sorted."""
    return sorted(_SIMULATORS)


def simulator_kind(name: str) -> SimulatorKind:
    """The kind ``name`` (UnknownName listing the known ones)."""
    kind = _SIMULATORS.get(name)
    if kind is None:
        raise UnknownName(f"unknown simulator {name!r}; available: {', '.join(available_simulators())}")
    return kind


def bridge_key(name: str) -> BridgeKey | None:
    """The key ``name`` as some kind declares it (None: no kind reads it)."""
    for kind in _SIMULATORS.values():
        for key in kind.keys:
            if key.name == name:
                return key
    return None


def bridge_keys() -> tuple[str, ...]:
    """The names of every kind's own keys, sorted."""
    return tuple(sorted({key.name for kind in _SIMULATORS.values() for key in kind.keys}))


def kinds_reading(name: str) -> list[str]:
    """The kinds that read the key ``name``, sorted."""
    return sorted(kind.name for kind in _SIMULATORS.values() if any(key.name == name for key in kind.keys))


def _named(kinds: list[str]) -> str:
    return " or ".join(repr(kind) for kind in kinds)


def check_bridge_keys(kind_name: str, terrain: str, given: Mapping[str, Any], where: str) -> None:
    """A ``[bridge]`` table's kind, its terrain and the keys only some kinds read (``given``: name: value) against
    the registry: ConfigError naming the kind or key that is wrong."""
    if kind_name not in _SIMULATORS:
        raise ConfigError(f"{where}: bridge.kind {kind_name!r} not one of {available_simulators()}")
    kind = _SIMULATORS[kind_name]
    if terrain not in kind.terrains:
        builders = sorted(k.name for k in _SIMULATORS.values() if terrain in k.terrains)
        raise ConfigError(f"{where}: bridge.terrain = {terrain!r} needs bridge.kind = {_named(builders)}")
    for name, value in given.items():
        key = bridge_key(name)
        if key is None:
            raise ConfigError(f"{where}: unknown [bridge] key {name!r}")
        own = any(k.name == name for k in kind.keys)
        if not own and key.exclusive and value != key.default:
            shown = " = true" if value is True else ""
            needs = f"needs bridge.kind = {_named(kinds_reading(name))} (it is {kind_name!r})"
            raise ConfigError(f"{where}: bridge.{name}{shown} {needs}")
        key.check(value, where)


def markdown_table() -> str:
    """The kinds, their back ends, terrains and own keys, as docs/simulators.md shows them."""
    lines = ["| kind | back end | terrains | its own `[bridge]` keys |", "|---|---|---|---|"]
    for name in available_simulators():
        kind = _SIMULATORS[name]
        where = kind.factory if isinstance(kind.factory, str) else getattr(kind.factory, "__qualname__", "")
        keys = "<br>".join(f"`{k.name}`: {k.doc}" for k in kind.keys) or "none"
        terrains = ", ".join(f"`{t}`" for t in kind.terrains)
        lines.append(f"| `{name}` | `{where}`: {kind.summary} | {terrains} | {keys} |")
    return "\n".join(lines) + "\n"


# -------------------------------------------------------------------------------------------------- the back ends
#: offline studies: Halm & Posa's Algorithm 1 samples each touchdown's outcome (idcontrol.sim.rigid)
RIGID_KEYS = (
    BridgeKey("impact_sampling", "true or false", flag, default=False, doc="each touchdown's outcome a seeded sample"),
    BridgeKey("impact_seed", "an integer >= 0", count, default=0, exclusive=False, doc="the samples' random seed"),
)
#: SAP's compliant point contact (idcontrol.sim.drake; None: its defaults)
DRAKE_KEYS = (
    BridgeKey("contact_stiffness", "a finite number > 0 N/m", positive, "stiffness", doc="N/m, per pair (1e6)"),
    BridgeKey(
        "contact_relaxation_time", "a finite number >= 0 s", non_negative, "relaxation_time", doc="s, SAP's τ_d (1e-3)"
    ),
)
#: the spring-damper contact and bristle friction (idcontrol.sim.ess.backend; None: its defaults)
ESS_KEYS = (
    BridgeKey("stiffness", "a finite number > 0 N/m", positive, doc="N/m per contact sphere (default 1e6)"),
    BridgeKey("damping", "a finite number >= 0 N·s/m", non_negative, doc="N·s/m per contact sphere (default 2000)"),
    BridgeKey("epsilon", "a finite number > 0 m", positive, doc="m of gap, the guards' band half-width (5e-6)"),
    BridgeKey("slip_velocity", "a finite number > 0 m/s", positive, doc="m/s, the friction's creep scale (1e-4)"),
)

MUJOCO_TERRAINS = ("flat", "bumps", "slope", "step")  # the last three unknown to the controller
RIGID_TERRAINS = ("flat", "height_map")  # the controller's own terrains

for _kind in (
    SimulatorKind("mujoco", "idcontrol.sim.mujoco:MujocoSim", "MuJoCo, soft contact", (), MUJOCO_TERRAINS),
    SimulatorKind(
        "rigid", "idcontrol.sim.rigid:RigidSim", "the controller's rigid contact", RIGID_KEYS, RIGID_TERRAINS
    ),
    SimulatorKind("drake", "idcontrol.sim.drake:DrakeSim", "Drake's SAP compliant contact, extra [drake]", DRAKE_KEYS),
    SimulatorKind("ess", "idcontrol.sim.ess.backend:EssSim", "compliant contact, ESS integrator", ESS_KEYS),
    SimulatorKind("mock", "idcontrol.sim.mock:MockSim", "no physics, deterministic: for tests"),
):
    register_simulator(_kind)
