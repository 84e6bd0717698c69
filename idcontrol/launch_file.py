"""Launch files: which robot, bridge, formulation, reference, rates, endpoints and duration.

A launch file is TOML (see ``launch/*.toml``)::

    robot = "quadruped"          # a robot of robots/ (or a path to a robot.toml)
    duration = 20.0              # s of bridge time; 0 = until Ctrl-C
    objects = false              # the world holds the robot file's movable bodies (the arm's box)

    [controller]
    formulation = "two_stage_qp" # noslip_lcp, coulomb_lcp, two_stage_qp, one_stage_qp, pid, sensed_id
    rate_hz = 1000.0             # control rate; the bridge sends state at this rate
    mu = 1.0                     # friction the controller assumes (inf = no slip)
    watchdog_ms = 20.0           # safe stop when no state arrives for this long
    penetration_tolerance = 0.0  # m of penetration left uncorrected (see InverseDynamicsController)
    activation_distance = 1e-4   # m: a candidate contact enters the problem only if its predicted gap at the
                                 # end of the period is at most this (omit: every candidate in the margin)
    consistent_contact_velocity = false  # q̇_des starts from joint velocities that hold the active contacts still
    gains = { kp = 1000.0, kd = 60.0 }   # PD(I) gains of q̈_des (default: the robot file's [gains])
    options = {}                 # options of this formulation (overrides its [formulations.NAME] table)

    [formulations.two_stage_qp]  # options of any formulation, used at start-up, after --formulation and
    dissipation = "contacts"     # on an admin switch to it (see each formulation's docstring)
    [formulations.noslip_lcp]
    spread = 1e-2

    [reference]
    name = "trot"                # hold, trot, arm_sinusoid, stream
    options = { speed = 0.2 }

    [bridge]
    kind = "mujoco"              # or "rigid": the rigid-contact simulator matched to the controller's model
    mode = "lockstep"            # or "realtime"
    mu = 1.0                     # the simulator's friction
    substeps = 1                 # physics steps per control period
    terrain = "flat"             # or "height_map" (rigid only): random bumps, seen by the controller too
    terrain_seed = 0             # the height map's random seed
    terrain_height = 0.03        # m, the height map's highest bump

    [realtime]                   # optional: SCHED_FIFO for the daemon and bridge processes
    priority = 50                # 1 .. 99 (0, the default: normal scheduling)
    daemon_cpu = 1               # optional CPU pinning
    bridge_cpu = 0
    io_cpu = 0                   # optional: where both processes' ZeroMQ I/O threads run
    spin_us = 1000.0             # optional: poll for the next message without sleeping (0: block)
    cpu_latency_us = 0           # optional: PM QoS wake-up latency request while running (0: no deep idle)

    [endpoints]                  # loopback unless [security] names CURVE keys
    control = "tcp://127.0.0.1:5555"
    admin = "tcp://127.0.0.1:5556"
    telemetry = "tcp://127.0.0.1:5557"

    [safety]                     # the safety filter and fallback policy (idcontrol.daemon.safety)
    torque_limits = { default = 6.0, LF_KFE = 5.0 }  # N·m, may only lower the robot's limits
    torque_rate_limit = 2000.0   # N·m/s per joint (number or table; default inf)
    position_margin = 0.05       # rad or m beyond the URDF limits: damping stop (default inf: off)
    velocity_factor = 1.5        # × the URDF velocity limit: damping stop (default inf: off)
    time_budget_ms = 0.8         # a longer solve counts as failed (default inf)
    hold_ticks = 5               # failed or late solves that reuse the previous torque
    safe_controller = "damping"  # or "pd_hold" (hold_kp, hold_kd; N·m/rad, N·m·s/rad)
    damping = 0.5                # N·m·s/rad of the damping stop
    safe_stop_timeout = 1.0      # s; a damping stop also ends when every |q̇| < rest_velocity

    [security]
    curve_keys = "keys"          # a directory made by `idcontrol keys generate DIR` (relative to this
                                 # file); turns on CURVE on every socket and allows non-loopback endpoints

Everything is validated when the file is loaded, so a bad file fails before
any process starts.
"""

from __future__ import annotations

import math
import tomllib
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from idcontrol.daemon.endpoints import Endpoints
from idcontrol.daemon.safety import SafetySettings
from idcontrol.errors import ConfigError, RobotFileNotFound
from idcontrol.realtime import RealtimeSettings

BRIDGE_KINDS = ("mujoco", "rigid")
TERRAINS = ("flat", "height_map")
BRIDGE_MODES = ("lockstep", "realtime")


@dataclass(frozen=True)
class ControllerSettings:
    formulation: str = "two_stage_qp"
    rate_hz: float = 1000.0
    mu: float = 1.0
    watchdog_ms: float = 20.0
    penetration_tolerance: float = 0.0
    activation_distance: float | None = None
    consistent_contact_velocity: bool = False
    gains: dict[str, Any] = field(default_factory=dict)
    options: dict[str, Any] = field(default_factory=dict)

    @property
    def dt(self) -> float:
        return 1.0 / self.rate_hz


@dataclass(frozen=True)
class ReferenceSettings:
    name: str = "hold"
    options: dict[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class BridgeSettings:
    kind: str = "mujoco"
    mode: str = "lockstep"
    mu: float = 1.0
    substeps: int = 1
    late_limit: int = 20  # consecutive late commands before the bridge's own safe stop
    terrain: str = "flat"  # or "height_map" (rigid bridge only)
    terrain_seed: int = 0
    terrain_height: float = 0.03  # m, highest bump of the height map


@dataclass(frozen=True)
class LaunchConfig:
    path: Path
    robot: str
    duration: float
    objects: bool
    controller: ControllerSettings
    reference: ReferenceSettings
    bridge: BridgeSettings
    endpoints: Endpoints
    safety: SafetySettings = field(default_factory=SafetySettings)
    curve_keys: Path | None = None  # [security] curve_keys: a key directory (``idcontrol keys generate``)
    realtime: RealtimeSettings = field(default_factory=RealtimeSettings)
    formulations: dict[str, dict[str, Any]] = field(default_factory=dict)  # [formulations.NAME] option tables

    def formulation_options(self, name: str) -> dict[str, Any]:
        """Options for formulation ``name``: its ``[formulations.NAME]`` table, then, for the launch
        formulation, ``controller.options`` over it."""
        options = dict(self.formulations.get(name, {}))
        if name == self.controller.formulation:
            options.update(self.controller.options)
        return options

    def with_overrides(self, duration: float | None = None, formulation: str | None = None) -> LaunchConfig:
        """The command line's ``--duration`` / ``--formulation`` over the file's values.

        Another formulation moves ``controller.options`` into the file formulation's ``[formulations.NAME]``
        table (they are its options) and takes its own table's.
        """
        out = self
        if duration is not None:
            if not duration >= 0:
                raise ConfigError(f"--duration must be >= 0 s, got {duration}")
            out = replace(out, duration=float(duration))
        if formulation is not None:
            _check_formulation(formulation)
            c = out.controller
            if formulation != c.formulation and c.options:  # they are the file formulation's: keep them there
                tables = {**out.formulations, c.formulation: {**out.formulations.get(c.formulation, {}), **c.options}}
                out = replace(out, formulations=tables)
            out = replace(out, controller=replace(c, formulation=formulation, options={}))
            _check_options(out, formulation)
        return out


def _section(data: dict[str, Any], key: str, path: Path) -> dict[str, Any]:
    value = data.get(key, {})
    if not isinstance(value, dict):
        raise ConfigError(f"{path}: [{key}] must be a table")
    return value


def _fields(table: dict[str, Any], cls: type, where: str) -> dict[str, Any]:
    known = set(cls.__dataclass_fields__)
    unknown = sorted(set(table) - known)
    if unknown:
        raise ConfigError(f"{where}: unknown key(s) {unknown}; known: {sorted(known)}")
    return table


def _check_formulation(name: str) -> None:
    from idcontrol.errors import UnknownFormulation
    from idcontrol.formulations import available_formulations

    if name not in available_formulations():
        raise UnknownFormulation(name, available_formulations())


def _positive(value: Any, where: str) -> float:
    if not isinstance(value, (int, float)) or isinstance(value, bool) or not math.isfinite(value) or value <= 0:
        raise ConfigError(f"{where} must be a positive number, got {value!r}")
    return float(value)


def _friction(value: Any, where: str) -> float:
    if not isinstance(value, (int, float)) or isinstance(value, bool) or math.isnan(value) or value < 0:
        raise ConfigError(f"{where} must be >= 0 (inf allowed), got {value!r}")
    return float(value)


def load_launch(path: str | Path) -> LaunchConfig:
    """Read and validate a launch file (robot existence, names, rates, endpoints)."""
    path = Path(path)
    if not path.is_file():
        raise RobotFileNotFound(str(path), "launch file")
    try:
        data = tomllib.loads(path.read_text())
    except tomllib.TOMLDecodeError as e:
        raise ConfigError(f"{path}: not valid TOML: {e}") from None
    top_known = {"robot", "duration", "objects", "controller", "reference", "bridge", "endpoints", "safety", "security",
                 "realtime", "formulations"}  # fmt: skip
    unknown = sorted(set(data) - top_known)
    if unknown:
        raise ConfigError(f"{path}: unknown key(s) {unknown}; known: {sorted(top_known)}")
    robot = data.get("robot")
    if not isinstance(robot, str) or not robot:
        raise ConfigError(f"{path}: 'robot' must name a robot")
    from idcontrol.robot.config import load_robot_config

    load_robot_config(robot)  # UnknownRobot / RobotFileNotFound now rather than in a child process
    duration = data.get("duration", 0.0)
    if not isinstance(duration, (int, float)) or isinstance(duration, bool) or not duration >= 0:
        raise ConfigError(f"{path}: duration must be >= 0 s, got {duration!r}")

    objects = data.get("objects", False)
    if not isinstance(objects, bool):
        raise ConfigError(f"{path}: objects must be true or false")
    controller = ControllerSettings(**_fields(_section(data, "controller", path), ControllerSettings,
                                              f"{path} [controller]"))  # fmt: skip
    _check_formulation(controller.formulation)
    rate = _positive(controller.rate_hz, f"{path}: controller.rate_hz")
    if not 10.0 <= rate <= 10000.0:
        raise ConfigError(f"{path}: controller.rate_hz = {rate} outside 10 .. 10000 Hz")
    _positive(controller.watchdog_ms, f"{path}: controller.watchdog_ms")
    if controller.watchdog_ms * 1e-3 < 2.0 / rate:
        raise ConfigError(f"{path}: watchdog_ms = {controller.watchdog_ms} is shorter than two control periods")
    _friction(controller.mu, f"{path}: controller.mu")
    tol = controller.penetration_tolerance
    if not isinstance(tol, (int, float)) or isinstance(tol, bool) or not 0.0 <= tol < 0.05:
        raise ConfigError(f"{path}: controller.penetration_tolerance must be in [0, 0.05) m, got {tol!r}")
    if not isinstance(controller.options, dict):
        raise ConfigError(f"{path}: controller.options must be a table")
    act = controller.activation_distance
    if act is not None and (not isinstance(act, (int, float)) or isinstance(act, bool) or not 0.0 <= act < 0.05):
        raise ConfigError(f"{path}: controller.activation_distance must be in [0, 0.05) m, got {act!r}")
    if not isinstance(controller.consistent_contact_velocity, bool):
        raise ConfigError(f"{path}: controller.consistent_contact_velocity must be true or false")
    gains = controller.gains
    if not isinstance(gains, dict) or set(gains) - {"kp", "kd", "ki"}:
        raise ConfigError(f"{path}: controller.gains must be a table with keys among kp, kd, ki, got {gains!r}")

    reference = ReferenceSettings(**_fields(_section(data, "reference", path), ReferenceSettings,
                                            f"{path} [reference]"))  # fmt: skip
    if not isinstance(reference.options, dict):
        raise ConfigError(f"{path}: reference.options must be a table")

    bridge = BridgeSettings(**_fields(_section(data, "bridge", path), BridgeSettings, f"{path} [bridge]"))
    if bridge.kind not in BRIDGE_KINDS:
        raise ConfigError(f"{path}: bridge.kind {bridge.kind!r} not one of {list(BRIDGE_KINDS)}")
    if bridge.mode not in BRIDGE_MODES:
        raise ConfigError(f"{path}: bridge.mode {bridge.mode!r} not one of {list(BRIDGE_MODES)}")
    _friction(bridge.mu, f"{path}: bridge.mu")
    if not isinstance(bridge.substeps, int) or bridge.substeps < 1:
        raise ConfigError(f"{path}: bridge.substeps must be a positive integer, got {bridge.substeps!r}")
    if not isinstance(bridge.late_limit, int) or bridge.late_limit < 1:
        raise ConfigError(f"{path}: bridge.late_limit must be a positive integer")
    if bridge.terrain not in TERRAINS:
        raise ConfigError(f"{path}: bridge.terrain {bridge.terrain!r} not one of {list(TERRAINS)}")
    if bridge.terrain != "flat" and bridge.kind != "rigid":
        raise ConfigError(f"{path}: bridge.terrain = {bridge.terrain!r} needs bridge.kind = 'rigid'")
    if not isinstance(bridge.terrain_seed, int) or isinstance(bridge.terrain_seed, bool) or bridge.terrain_seed < 0:
        raise ConfigError(f"{path}: bridge.terrain_seed must be an integer >= 0, got {bridge.terrain_seed!r}")
    height = bridge.terrain_height
    if not isinstance(height, (int, float)) or isinstance(height, bool) or not 0.0 <= height <= 0.1:
        raise ConfigError(f"{path}: bridge.terrain_height must be in [0, 0.1] m, got {height!r}")

    safety = SafetySettings.from_table(_section(data, "safety", path), f"{path} [safety]")
    if any(isinstance(getattr(safety, k), dict) for k in ("torque_limits", "torque_rate_limit", "damping",
                                                          "hold_kp", "hold_kd")):  # fmt: skip
        from idcontrol.daemon.safety import SafetyFilter
        from idcontrol.robot.model import RobotModel

        SafetyFilter(RobotModel(robot), safety, 1.0 / rate)  # joint names and limits now, not in the daemon
    curve_keys = _curve_keys(_section(data, "security", path), path)

    endpoints = Endpoints(**_fields(_section(data, "endpoints", path), Endpoints, f"{path} [endpoints]"))
    endpoints.check(curve=curve_keys is not None)
    used = [endpoint for _, endpoint in endpoints.items()]
    if len(set(used)) != len(used):
        raise ConfigError(f"{path}: endpoints must differ, got {used}")
    realtime = RealtimeSettings(**_fields(_section(data, "realtime", path), RealtimeSettings, f"{path} [realtime]"))
    realtime.check(f"{path}")
    formulations = _formulation_tables(_section(data, "formulations", path), path)
    config = LaunchConfig(path, robot, float(duration), objects, controller, reference, bridge, endpoints, safety,
                          curve_keys, realtime, formulations)  # fmt: skip
    _check_options(config, controller.formulation)
    return config


def _formulation_tables(table: dict[str, Any], path: Path) -> dict[str, dict[str, Any]]:
    """The ``[formulations.NAME]`` tables, each checked by building that formulation with it."""
    for name, options in table.items():
        _check_formulation(name)
        if not isinstance(options, dict):
            raise ConfigError(f"{path}: [formulations.{name}] must be a table of options")
    return {name: dict(options) for name, options in table.items()}


def _check_options(config: LaunchConfig, active: str) -> None:
    """Build every formulation that has options, so an unknown or invalid option fails now (ConfigError)."""
    from idcontrol.formulations import make_formulation

    for name in {*config.formulations, active}:
        try:
            make_formulation(name, **config.formulation_options(name))
        except ConfigError as e:
            raise ConfigError(f"{config.path}: options of {name}: {e}") from None


def _curve_keys(table: dict[str, Any], path: Path) -> Path | None:
    """The ``[security]`` key directory (relative paths from the launch file's folder), checked now."""
    unknown = sorted(set(table) - {"curve_keys"})
    if unknown:
        raise ConfigError(f"{path} [security]: unknown key(s) {unknown}; known: ['curve_keys']")
    if "curve_keys" not in table:
        return None
    value = table["curve_keys"]
    if not isinstance(value, str) or not value:
        raise ConfigError(f"{path}: security.curve_keys must name a key directory")
    from idcontrol.security import KeyDirectory

    keys = (path.parent / value).resolve()
    KeyDirectory(keys).check()
    return keys
