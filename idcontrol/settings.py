"""Launch files: which robot, bridge, formulation, reference, rates, endpoints and duration.

A launch file is TOML (see ``launch/*.toml``)::

    robot = "quadruped"          # a robot of robots/, or a robot.toml or its folder (relative: beside this file;
                                 # `launch --robot` overrides it)
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
    contacts = "estimated"       # "world" (the default: the paper's contacts, with the state taken as exact) or
                                 # "estimated": stance from the gait, kinematics and foot sensors, the ground
                                 # from the stance feet, v kept consistent with them (idcontrol.contacts.stance)
    stance = { liftoff_height = 0.04 }  # the estimated contacts' settings (StanceSettings), optional
    gains = { kp = 1000.0, kd = 60.0 }   # PD(I) gains of q̈_des (default: the robot file's [gains])
    options = {}                 # options of this formulation (overrides its [formulations.NAME] table)

    [formulations.two_stage_qp]  # options of any formulation, used at start-up, after --formulation and
    dissipation = "contacts"     # on an admin switch to it (see each formulation's docstring)
    [formulations.noslip_lcp]
    spread = 3e-2

    [reference]
    name = "trot"                # hold, trot, arm_sinusoid, stream
    options = { speed = 0.2 }

    [bridge]
    kind = "mujoco"              # or "rigid": the rigid-contact simulator matched to the controller's model,
                                 # or "drake": Drake's SAP compliant contact (pip install 'idcontrol[drake]'),
                                 # or "ess": compliant contact integrated by the ESS integrator (idcontrol.sim.ess),
                                 # or "mock": no physics, for tests (idcontrol.sim.mock); the kinds and their own
                                 # keys below: idcontrol.simulators
    mode = "lockstep"            # or "realtime"
    mu = 1.0                     # the simulator's friction
    substeps = 1                 # physics steps per control period
    terrain = "flat"             # or "height_map" (rigid only): random bumps, seen by the controller too;
                                 # or (mujoco only, unknown to the controller, which assumes flat ground)
                                 # "bumps" (random bumps of ± terrain_height), "slope" (terrain_slope degrees
                                 # up along +x from x = 0.3 m), "step" (terrain_height up at x = 0.3 m)
    terrain_seed = 0             # the height map's or the bumps' random seed
    terrain_height = 0.03        # m, the height map's highest bump; the bumps' amplitude; the step's height
    terrain_slope = 10.0         # degrees, terrain = "slope"
    contact_stiffness = 1e6      # N/m (drake only): stiffness of every contact pair (default 1e6)
    contact_relaxation_time = 1e-3  # s (drake only): SAP's dissipation time constant τ_d (default 1e-3)
    stiffness = 1e6              # ess only: N/m per contact sphere (default 1e6)
    damping = 2000.0             # ess only: N·s/m per contact sphere (default 2000)
    epsilon = 5e-6               # ess only: the guards' band half-width, m of gap (default 5e-6)
    slip_velocity = 1e-4         # ess only: the bristle friction's creep scale, m/s (default 1e-4)
    impact_sampling = false      # rigid only, offline studies: each touchdown's outcome is a seeded sample of
    impact_seed = 0              # Halm & Posa's Algorithm 1 instead of the simulator's single one

    [bridge.sensors]             # what the bridge reports in place of the simulator's truth (every kind;
    preset = "typical"           # idcontrol.sim.sensing): "ideal" (the default: the truth) or "typical", then
    seed = 0                     # any key of SensorSettings over the preset's, e.g. base_height_bias = 0.02
    [bridge.actuators]           # how torques reach the joints: "ideal" (the default: at once) or "typical",
    preset = "typical"           # then any key of ActuatorSettings, e.g. delay_ticks = 2

    [estimator]                  # optional: the floating base estimated in the tick from the IMU and the encoders
    kind = "inekf"               # "none" (the default: the state carries the base), "inekf" (the contact-aided
                                 # invariant EKF) or "lkf" (MIT Cheetah 3's linear KF); needs the sensor form
                                 # (bridge.sensors.base = "imu") and contacts = "estimated" (docs/estimation.md)
    contact_threshold = 0.5      # a sphere stands for the estimator at this stance value
    noise = { accel_noise = 0.05 }   # any NoiseModel key (idcontrol.estimation.types)
    bounds = { max_tilt_std = 0.035 }  # any HealthBounds key: beyond them the core stops safely

    [realtime]                   # optional: SCHED_FIFO for the daemon and bridge processes
    priority = 50                # 1 .. 99 (0, the default: normal scheduling)
    daemon_cpu = 1               # optional CPU pinning
    bridge_cpu = 0
    io_cpu = 0                   # optional: where both processes' ZeroMQ I/O threads run
    spin_us = 1000.0             # optional: the daemon polls for the next state without sleeping (0: block)
    bridge_spin_us = 0.0         # optional: the bridge polls for its command without sleeping (0, the default: block)
    cpu_latency_us = 0           # optional: PM QoS wake-up latency request while running (0: no deep idle)
    warm = true                  # optional: tick a shadow core while spinning, keeping caches warm (default false)

    [endpoints]                  # loopback unless [security] names CURVE keys; a channel not named here is an
                                 # ipc:// socket in the user's private runtime directory (only this user's
                                 # processes open it): name TCP ports for a driver outside this machine's user
    control = "tcp://127.0.0.1:5555"
    admin = "tcp://127.0.0.1:5556"
    telemetry = "tcp://127.0.0.1:5557"

    [safety]                     # the safety filter and fallback policy (idcontrol.control.safety)
    torque_limits = { default = 6.0, LF_KFE = 5.0 }  # N·m, may only lower the robot's limits
    torque_rate_limit = 2000.0   # N·m/s per joint (number or table; default inf)
    position_margin = 0.05       # rad or m beyond the URDF limits: damping stop (default inf: off)
    velocity_factor = 1.5        # × the URDF velocity limit: damping stop (default inf: off)
    time_budget_ms = 0.8         # a longer solve counts as failed (default inf)
    hold_ticks = 5               # failed or late solves that reuse the previous torque
    safe_controller = "damping"  # or "pd_hold" (hold_kp, hold_kd; N·m/rad, N·m·s/rad)
    damping = 0.5                # N·m·s/rad of the damping stop
    safe_stop_timeout = 1.0      # s; a damping stop also ends when every |q̇| < rest_velocity

    [telemetry]                  # optional: the live view (idcontrol.tools.live), off the tick path
    foxglove = 8765              # `idcontrol launch` starts a Foxglove WebSocket server on 127.0.0.1:8765
    foxglove_origins = ["https://app.foxglove.dev"]  # browser pages it serves (by Origin); ["*"]: any page
    foxglove_programs = true     # and clients that send no Origin (programs)
    foxglove_viewers = 8         # viewers at once; the next is refused (HTTP 503)

    [security]
    curve_keys = "keys"          # a directory made by `idcontrol keys generate DIR` (relative to this
                                 # file); turns on CURVE on every socket and allows non-loopback endpoints

Everything is validated when the file is loaded, so a bad file fails before
any process starts.
"""

from __future__ import annotations

import contextlib
import math
import os
import tomllib
from collections.abc import Iterator
from dataclasses import dataclass, field, fields, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np
from numpy.typing import NDArray

from idcontrol.errors import ConfigError, NameNotFound, RobotFileNotFound
from idcontrol.simulators import bridge_key, bridge_keys, check_bridge_keys

if TYPE_CHECKING:
    from idcontrol.robot.model import RobotModel

Array = NDArray[np.float64]

TERRAINS = ("flat", "height_map", "bumps", "slope", "step")
#: terrains only the MuJoCo simulator builds, and the controller is not told of (it assumes flat ground)
UNKNOWN_TERRAINS = ("bumps", "slope", "step")
BRIDGE_MODES = ("lockstep", "realtime")


#: Safe controllers a safe stop may use.
SAFE_CONTROLLERS = ("damping", "pd_hold")

PerJoint = float | dict[str, float]


@dataclass
class SafetySettings:
    """Guards applied to every command (the launch file's ``[safety]`` table).

    hold_ticks : consecutive failed or over-budget solves that reuse the previous torque before the
        safe controller takes over.
    safe_controller : what a safe stop commands: "damping" (τ = −D q̇ until at rest) or "pd_hold"
        (τ = Kp (q_hold − q) − Kd q̇ around the posture where the stop began, until ``safe_stop_timeout``).
    damping : joint damping D of the damping stop, N·m·s/rad (a number or a per-joint table).
    hold_kp, hold_kd : gains of the PD hold, N·m/rad and N·m·s/rad (a number or a per-joint table).
    rest_velocity : a damping stop ends when every |q̇| is below this, rad/s.
    safe_stop_timeout : a safe stop ends after this long regardless, s.
    torque_limits : per-joint torque limits, N·m, over the robot's (a number or a table with an
        optional ``default``); they may only lower the robot's limits.
    torque_rate_limit : the largest change of a joint's torque between two commands, N·m/s
        (a number or a per-joint table; inf: none).
    position_margin : a joint more than this beyond its URDF position limits stops the robot, rad or m
        (default inf: no guard).
    velocity_factor : a joint faster than this times its URDF velocity limit stops the robot (default inf:
        no guard).

    The limit guards are off by default: a simulated robot crosses conservative URDF limits in
    experiments that are meant to go wrong (a grasp lost on purpose flings the arm's fingers at 35 times
    their 0.5 m/s limit). Launch files for hardware should set them (the quadruped launch files do).
    time_budget_ms : a solve that takes longer than this counts as failed, ms (inf: no budget).
    fall_height_fraction : a floating base below this fraction of its standing height has fallen; so has one
        whose body (a joint origin that stands above a quarter of the base's height: a knee, a hip) is on the
        ground (below the smallest contact sphere's radius).
    fall_tilt : a floating base tilted more than this from upright has fallen, rad.
    collapse_height_fraction : a guard (limit, failed solve, bridge) that ends the run while the floating base
        is below this fraction of its standing height, or tilted beyond half of ``fall_tilt``, ended a fall:
        the run counts as fallen.
    drop_ticks : a movable body out of reach of every contact sphere (beyond the detection
        margin) for this many ticks has been dropped.
    max_kp, max_kd, max_ki : the largest PD(I) gains of q̈_des a launch file or an admin ``set_gains`` may set,
        1/s², 1/s, 1/s³ (defaults 1e5, 1e3, 1e6: at 1 kHz, kp Δt² = 0.1 and kd Δt = 1 stay well inside the
        discrete loop's stability; the shipped robots use kp ≤ 1000, kd ≤ 60).
    """

    hold_ticks: int = 5
    safe_controller: str = "damping"
    damping: PerJoint = 0.5
    hold_kp: PerJoint = 50.0
    hold_kd: PerJoint = 2.0
    rest_velocity: float = 0.05
    safe_stop_timeout: float = 1.0
    torque_limits: PerJoint = field(default_factory=dict)
    torque_rate_limit: PerJoint = math.inf
    position_margin: float = math.inf
    velocity_factor: float = math.inf
    time_budget_ms: float = math.inf
    fall_height_fraction: float = 0.5
    fall_tilt: float = 1.0
    collapse_height_fraction: float = 0.9
    drop_ticks: int = 50
    max_kp: float = 1.0e5
    max_kd: float = 1.0e3
    max_ki: float = 1.0e6

    @classmethod
    def from_table(cls, table: dict[str, Any], where: str) -> SafetySettings:
        """Settings from a launch file's ``[safety]`` table; ConfigError naming the bad key."""
        known = {f.name for f in fields(cls)}
        unknown = sorted(set(table) - known)
        if unknown:
            raise ConfigError(f"{where}: unknown key(s) {unknown}; known: {sorted(known)}")
        settings = cls(**table)
        settings.validate(where)
        return settings

    def validate(self, where: str = "safety") -> None:
        """Types and ranges of every field (joint names are checked against a robot by :meth:`for_robot`)."""
        for name in ("hold_ticks", "drop_ticks"):
            value = getattr(self, name)
            if not isinstance(value, int) or isinstance(value, bool) or value < 0:
                raise ConfigError(f"{where}: {name} must be an integer >= 0, got {value!r}")
        if self.safe_controller not in SAFE_CONTROLLERS:
            raise ConfigError(f"{where}: safe_controller {self.safe_controller!r} not one of {list(SAFE_CONTROLLERS)}")
        for name in (
            "rest_velocity",
            "safe_stop_timeout",
            "position_margin",
            "velocity_factor",
            "time_budget_ms",
            "fall_height_fraction",
            "fall_tilt",
            "collapse_height_fraction",
            "max_kp",
            "max_kd",
            "max_ki",
        ):
            value = getattr(self, name)
            if not _is_number(value) or math.isnan(value) or value < 0:
                raise ConfigError(f"{where}: {name} must be a number >= 0 (inf allowed), got {value!r}")
        for name in ("damping", "hold_kp", "hold_kd", "torque_limits", "torque_rate_limit"):
            value = getattr(self, name)
            values = value.values() if isinstance(value, dict) else [value]
            if not all(_is_number(x) and not math.isnan(x) and x >= 0 for x in values):
                raise ConfigError(f"{where}: {name} must be a number >= 0 or a table of them, got {value!r}")
        limits = self.torque_limits.values() if isinstance(self.torque_limits, dict) else [self.torque_limits]
        if any(x <= 0 for x in limits):
            raise ConfigError(
                f"{where}: torque_limits must be > 0 N·m (a joint limited to 0 cannot hold the robot), "
                f"got {self.torque_limits!r}"
            )
        for name in ("velocity_factor", "time_budget_ms", "fall_height_fraction", "collapse_height_fraction"):
            if getattr(self, name) <= 0:  # a limit of 0 trips on every tick
                raise ConfigError(f"{where}: {name} must be > 0 (inf: off), got {getattr(self, name)!r}")
        for name in ("fall_height_fraction", "collapse_height_fraction"):
            if getattr(self, name) > 1:  # a standing robot would have fallen before its first tick
                raise ConfigError(
                    f"{where}: {name} is a fraction of the standing height, at most 1, got {getattr(self, name)!r}"
                )

    def for_robot(self, robot: RobotModel) -> JointSafety:
        """The per-joint tables resolved against ``robot``'s actuated joints (NameNotFound for an unknown
        joint; ConfigError for a torque limit above the robot's own)."""
        tau_limit = per_joint(self.torque_limits, robot, "torque_limits", robot.torque_limits)
        raised = np.flatnonzero(tau_limit > robot.torque_limits)
        if raised.size:
            names = [robot.actuated_joints[i] for i in raised]
            raise ConfigError(f"safety.torque_limits may only lower the robot's limits; raised for {names}")
        defaults = SafetySettings()
        return JointSafety(
            tau_limit=tau_limit,
            tau_rate=per_joint(self.torque_rate_limit, robot, "torque_rate_limit", math.inf),
            damping=per_joint(self.damping, robot, "damping", defaults.damping),
            hold_kp=per_joint(self.hold_kp, robot, "hold_kp", defaults.hold_kp),
            hold_kd=per_joint(self.hold_kd, robot, "hold_kd", defaults.hold_kd),
        )


@dataclass(frozen=True)
class JointSafety:
    """:class:`SafetySettings`' per-joint values for one robot, each (nu,) in ``robot.actuated_joints`` order.

    tau_limit : N·m; tau_rate : N·m/s; damping : N·m·s/rad; hold_kp : N·m/rad; hold_kd : N·m·s/rad.
    """

    tau_limit: Array
    tau_rate: Array
    damping: Array
    hold_kp: Array
    hold_kd: Array


def _is_number(x: object) -> bool:
    return isinstance(x, (int, float)) and not isinstance(x, bool)


def per_joint(value: PerJoint, robot: RobotModel, name: str, base: Array | float) -> Array:
    """(nu,) values: ``base``, replaced by a number or by a table's ``default`` and named joints."""
    out = np.broadcast_to(np.asarray(base, dtype=float), (robot.nu,)).copy()
    if not isinstance(value, dict):
        out[:] = float(value)
        return out
    for joint, x in value.items():
        if joint == "default":
            out[:] = float(x)
    for joint, x in value.items():
        if joint == "default":
            continue
        if joint not in robot.actuated_joints:
            raise NameNotFound(f"actuated joint (safety.{name})", joint, robot.actuated_joints)
        out[robot.actuated_joints.index(joint)] = float(x)
    return out


@dataclass(frozen=True)
class RealtimeSettings:
    """priority : SCHED_FIFO priority 1-99 (0: the normal scheduler).
    daemon_cpu, bridge_cpu : pin the process to this CPU (None: any).
    spin_us : while a run is live, the daemon polls for the next state without sleeping from this long
        (µs) before it is due until it comes (at most this long after), before it blocks. 0 (the default):
        always block.
    bridge_spin_us : the bridge polls for its command for up to this long (µs) after sending the state,
        before it blocks. 0 (the default): block; spinning made the daemon's hand-over of each command to ZeroMQ
        slower (docs/benchmarks.md, "Measured choices in the code"), and the bridge sleeps until the next period
        anyway once its command came.
    io_cpu : run the process's ZeroMQ I/O threads, which move every message between the sockets and the
        kernel, on this CPU (None: wherever the process runs): away from the daemon's CPU, the loopback TCP
        work no longer runs there (docs/benchmarks.md, "Measured choices in the code").
    cpu_latency_us : while the process runs, ask the kernel (PM QoS, ``/dev/cpu_dma_latency``) to wake
        any CPU within this many µs: 0 keeps idle CPUs polling instead of halting (more power, less
        jitter; the usual setting of real-time Linux). None (the default): no request.
    warm : while the daemon spins for the next state, tick a shadow copy of its control core on the last
        state (:mod:`idcontrol.daemon.warmth`), so that the next real tick finds its code and data in the
        caches. Needs ``spin_us`` > 0; costs the CPU the spin holds anyway and a second robot model's memory.
        False (the default): spin idle.
    """

    priority: int = 0
    daemon_cpu: int | None = None
    bridge_cpu: int | None = None
    spin_us: float = 0.0
    bridge_spin_us: float = 0.0
    io_cpu: int | None = None
    cpu_latency_us: int | None = None
    warm: bool = False

    def check(self, where: str) -> RealtimeSettings:
        if not isinstance(self.priority, int) or isinstance(self.priority, bool) or not 0 <= self.priority <= 99:
            raise ConfigError(f"{where}: realtime.priority must be an integer in 0 .. 99, got {self.priority!r}")
        cpus = os.cpu_count() or 1
        for key in ("daemon_cpu", "bridge_cpu", "io_cpu"):
            cpu = getattr(self, key)
            if cpu is not None and (not isinstance(cpu, int) or isinstance(cpu, bool) or not 0 <= cpu < cpus):
                raise ConfigError(f"{where}: realtime.{key} must be a CPU index in 0 .. {cpus - 1}, got {cpu!r}")
        for key in ("spin_us", "bridge_spin_us"):
            spin = getattr(self, key)
            if not isinstance(spin, (int, float)) or isinstance(spin, bool) or not 0.0 <= spin <= 10_000.0:
                raise ConfigError(f"{where}: realtime.{key} must be in 0 .. 10000 µs, got {spin!r}")
        latency = self.cpu_latency_us
        if latency is not None and (
            not isinstance(latency, int) or isinstance(latency, bool) or not 0 <= latency <= 1_000_000
        ):
            raise ConfigError(f"{where}: realtime.cpu_latency_us must be an integer in 0 .. 1000000, got {latency!r}")
        if not isinstance(self.warm, bool):
            raise ConfigError(f"{where}: realtime.warm must be true or false, got {self.warm!r}")
        if self.warm and not self.spin_us > 0.0:
            raise ConfigError(f"{where}: realtime.warm = true needs spin_us > 0 (the shadow ticks in the spin)")
        return self


LOOPBACK_HOSTS = ("127.0.0.1", "localhost", "::1", "[::1]")


def private_endpoint(channel: str) -> str:
    """``ipc://`` path of ``channel`` in this user's private runtime directory (0700: only this user's processes
    reach it; :func:`idcontrol.security.runtime_dir`)."""
    from idcontrol.security import runtime_dir

    return f"ipc://{runtime_dir() / channel}"


@dataclass(frozen=True)
class Endpoints:
    """ZeroMQ endpoints the daemon binds (loopback TCP or ipc://). A channel the launch file does not name is an
    ``ipc://`` socket file in the user's private runtime directory, which only this user's processes can open
    (:func:`private_endpoint`); a driver in another container or on another machine needs TCP (with CURVE keys
    beyond loopback), named in ``[endpoints]``."""

    control: str = field(default_factory=lambda: private_endpoint("control"))
    admin: str = field(default_factory=lambda: private_endpoint("admin"))
    telemetry: str | None = field(default_factory=lambda: private_endpoint("telemetry"))
    reference: str | None = None

    def items(self) -> list[tuple[str, str]]:
        """(channel, endpoint) of every configured channel."""
        pairs = (
            ("control", self.control),
            ("admin", self.admin),
            ("telemetry", self.telemetry),
            ("reference", self.reference),
        )
        return [(name, endpoint) for name, endpoint in pairs if endpoint]

    def check(self, curve: bool = False) -> None:
        """Refuse malformed endpoints, and endpoints beyond loopback unless ``curve`` (CURVE keys configured)."""
        for name, endpoint in self.items():
            scheme, _, rest = endpoint.partition("://")
            if scheme in ("ipc", "inproc") and rest:
                continue
            host, _, port = rest.rpartition(":")
            if scheme != "tcp" or not host or not (port.isdigit() or port == "*"):
                raise ConfigError(f"{name} endpoint {endpoint!r} must look like tcp://127.0.0.1:PORT or ipc://PATH")
            if port != "*" and not 1 <= int(port) <= 65535:  # (ZeroMQ takes 99999 modulo 65536, and 0 as any port)
                raise ConfigError(f"{name} endpoint {endpoint!r}: a TCP port is 1 .. 65535 ('*': any free one)")
            if host not in LOOPBACK_HOSTS and not curve:
                raise ConfigError(
                    f"{name} endpoint {endpoint!r} is not loopback; non-loopback endpoints need CURVE "
                    "keys: `idcontrol keys generate DIR`, then [security] curve_keys = DIR"
                )


@dataclass(frozen=True)
class ControllerSettings:
    formulation: str = "two_stage_qp"
    rate_hz: float = 1000.0
    mu: float = 1.0
    watchdog_ms: float = 20.0
    penetration_tolerance: float = 0.0
    activation_distance: float | None = None
    consistent_contact_velocity: bool = False
    contacts: str = "world"  # or "estimated": contacts from what a robot knows (idcontrol.contacts.stance)
    stance: dict[str, Any] = field(default_factory=dict)  # the estimated contacts' settings (StanceSettings)
    gains: dict[str, Any] = field(default_factory=dict)
    options: dict[str, Any] = field(default_factory=dict)

    @property
    def dt(self) -> float:
        return 1.0 / self.rate_hz


@dataclass(frozen=True)
class ReferenceSettings:
    name: str = "hold"
    options: dict[str, Any] = field(default_factory=dict)


# ---------------------------------------------------------------------------------------------------- [bridge.sensors]
# What a bridge reports in place of its simulator's truth, and how torques reach its joints: the models themselves
# are idcontrol.sim.sensing's (its docstring gives every key's meaning and unit).
JOINT_VELOCITY_SOURCES = ("measured", "differentiated")
FOOT_SENSORS = ("robot", "none", "force")
#: What a bridge reports of the floating base: ``"estimated"`` an estimator's output, modelled as the truth plus its
#: errors (the base pose and twist in the state); ``"imu"`` only what a robot measures (the IMU's reading; the daemon
#: estimates the base itself, ``[estimator]``).
BASE_SOURCES = ("estimated", "imu")


@dataclass(frozen=True)
class SensorSettings:
    """``[bridge.sensors]``: what the bridge reports in place of the simulator's truth (units in the module doc)."""

    preset: str = "ideal"
    seed: int = 0
    encoder_resolution: float = 0.0
    encoder_noise: float = 0.0
    joint_velocity: str = "measured"
    joint_velocity_noise: float = 0.0
    imu_tilt: float = 0.0
    imu_yaw_drift: float = 0.0
    imu_orientation_noise: float = 0.0
    gyro_noise: float = 0.0
    gyro_bias: float = 0.0
    base_height_bias: float = 0.0
    base_position_walk: float = 0.0
    base_velocity_bias: float = 0.0
    base_velocity_error: float = 0.0
    base_velocity_correlation: float = 1.0
    foot_sensors: str = "robot"
    foot_force_noise: float = 0.0
    latency_ticks: int = 0
    base: str = "estimated"
    accel_noise: float = 0.0
    accel_bias: float = 0.0

    @property
    def ideal(self) -> bool:
        """Whether the bridge reports the simulator's truth as it is."""
        return (
            _is_off(self, {"preset", "seed", "joint_velocity", "foot_sensors", "base_velocity_correlation", "base"})
            and self.joint_velocity == "measured"
            and self.foot_sensors in ("robot", "force")
            and self.base == "estimated"
        )

    def check(self, where: str) -> SensorSettings:
        """This table validated (ConfigError naming the key)."""
        _check_numbers(self, where, "sensors", {"seed", "latency_ticks"}, signed={"base_height_bias"})
        if self.joint_velocity not in JOINT_VELOCITY_SOURCES:
            raise ConfigError(
                f"{where}: bridge.sensors.joint_velocity must be one of {list(JOINT_VELOCITY_SOURCES)}, "
                f"got {self.joint_velocity!r}"
            )
        if self.foot_sensors not in FOOT_SENSORS:
            raise ConfigError(
                f"{where}: bridge.sensors.foot_sensors must be one of {list(FOOT_SENSORS)}, got {self.foot_sensors!r}"
            )
        if self.base not in BASE_SOURCES:
            raise ConfigError(f"{where}: bridge.sensors.base must be one of {list(BASE_SOURCES)}, got {self.base!r}")
        if not self.base_velocity_correlation > 0.0:
            raise ConfigError(f"{where}: bridge.sensors.base_velocity_correlation must be > 0 s")
        if not 0 <= self.latency_ticks <= 100:
            raise ConfigError(f"{where}: bridge.sensors.latency_ticks must be in 0 .. 100, got {self.latency_ticks}")
        return self


@dataclass(frozen=True)
class ActuatorSettings:
    """``[bridge.actuators]``: how a commanded torque reaches the joints (units in the module doc)."""

    preset: str = "ideal"
    delay_ticks: int = 0
    bandwidth_hz: float = 0.0
    coulomb_friction: float = 0.0
    viscous_friction: float = 0.0
    speed_knee: float = 1.0

    @property
    def ideal(self) -> bool:
        return _is_off(self, {"preset", "speed_knee"}) and self.speed_knee >= 1.0

    def check(self, where: str) -> ActuatorSettings:
        _check_numbers(self, where, "actuators", {"delay_ticks"})
        if not 0 <= self.delay_ticks <= 100:
            raise ConfigError(f"{where}: bridge.actuators.delay_ticks must be in 0 .. 100, got {self.delay_ticks}")
        if not 0.0 < self.speed_knee <= 1.0:
            raise ConfigError(f"{where}: bridge.actuators.speed_knee must be in (0, 1], got {self.speed_knee}")
        if not self.coulomb_friction < 1.0:
            raise ConfigError(f"{where}: bridge.actuators.coulomb_friction is a fraction of the effort limit, < 1")
        return self


#: The ``typical`` sensors of a legged robot (sources: docs/robustness.md, "Presets").
SENSOR_PRESETS: dict[str, dict[str, Any]] = {
    "ideal": {},
    "typical": {
        "encoder_resolution": 2.0 * math.pi / (2**14 * 6.0),  # 14-bit magnetic encoder behind a 6:1 gearbox
        "encoder_noise": 0.0,
        "joint_velocity": "differentiated",
        "joint_velocity_noise": 0.02,
        "imu_tilt": math.radians(0.5),  # static roll/pitch accuracy of a small MEMS AHRS
        "imu_yaw_drift": math.radians(1.0) / 60.0,
        "imu_orientation_noise": math.radians(0.02),
        "gyro_noise": 0.002,  # rad/s: a 0.007 °/s/√Hz noise density over a 255 Hz bandwidth
        "gyro_bias": 0.002,
        "base_height_bias": 0.01,  # a leg-odometry estimator's centimetres
        "base_position_walk": 0.005,
        "base_velocity_bias": 0.0,
        "base_velocity_error": 0.03,  # a good estimator's velocity error
        "base_velocity_correlation": 0.5,
        "foot_force_noise": 2.0,
        "latency_ticks": 0,
        "accel_noise": 0.054,  # m/s² per sample: 175 µg/√Hz (Bosch BMI088) at 1 kHz
        "accel_bias": 0.03,  # m/s² per axis, left after a start-up calibration
    },
}

#: The ``typical`` actuators of an electric legged robot (sources: docs/robustness.md, "Presets").
ACTUATOR_PRESETS: dict[str, dict[str, Any]] = {
    "ideal": {},
    "typical": {
        "delay_ticks": 1,
        "bandwidth_hz": 300.0,
        "coulomb_friction": 0.01,
        "viscous_friction": 0.01,
        "speed_knee": 0.5,
    },
}


def _is_off(settings: object, skip: set[str]) -> bool:
    return all(getattr(settings, f.name) == 0 for f in fields(settings) if f.name not in skip)  # type: ignore[arg-type]


def _check_numbers(
    settings: object, where: str, table: str, integers: set[str], signed: frozenset[str] | set[str] = frozenset()
) -> None:
    """Every numeric key finite and >= 0 (``signed``: any sign), ``integers`` integers."""
    for f in fields(settings):  # type: ignore[arg-type]
        value = getattr(settings, f.name)
        if f.name == "preset" or isinstance(value, str):
            continue
        if f.name in integers:
            if not isinstance(value, int) or isinstance(value, bool) or value < 0:
                raise ConfigError(f"{where}: bridge.{table}.{f.name} must be an integer >= 0, got {value!r}")
            continue
        if not isinstance(value, (int, float)) or isinstance(value, bool) or not math.isfinite(value):
            raise ConfigError(f"{where}: bridge.{table}.{f.name} must be a finite number, got {value!r}")
        if value < 0 and f.name not in signed:
            raise ConfigError(f"{where}: bridge.{table}.{f.name} must be >= 0, got {value!r}")


def sensor_settings(table: dict[str, Any] | None, where: str) -> SensorSettings:
    """``[bridge.sensors]`` read: its ``preset``'s values (default ``ideal``), then the table's own keys."""
    return _settings(SensorSettings, SENSOR_PRESETS, table, where, "sensors").check(where)


def actuator_settings(table: dict[str, Any] | None, where: str) -> ActuatorSettings:
    """``[bridge.actuators]`` read: its ``preset``'s values (default ``ideal``), then the table's own keys."""
    return _settings(ActuatorSettings, ACTUATOR_PRESETS, table, where, "actuators").check(where)


def _settings(kind: type, presets: dict[str, dict[str, Any]], table: dict[str, Any] | None, where: str, name: str):
    table = dict(table or {})
    if not isinstance(table, dict):
        raise ConfigError(f"{where}: bridge.{name} must be a table")
    preset = table.get("preset", "ideal")
    if preset not in presets:
        raise ConfigError(f"{where}: bridge.{name}.preset must be one of {sorted(presets)}, got {preset!r}")
    known = {f.name for f in fields(kind)}
    unknown = sorted(set(table) - known)
    if unknown:
        raise ConfigError(f"{where}: unknown key(s) {unknown} in [bridge.{name}]; known: {sorted(known)}")
    return kind(**{**presets[preset], **table, "preset": preset})


@dataclass(frozen=True)
class BridgeSettings:
    """``[bridge]``: the keys every simulator kind reads are fields; a kind's own keys (Drake's contact, the ess
    contact, rigid impact sampling: :mod:`idcontrol.simulators`) are read as attributes too
    (``bridge.contact_stiffness``), their default when the file leaves them out."""

    kind: str = "mujoco"
    mode: str = "lockstep"
    mu: float = 1.0
    substeps: int = 1
    late_limit: int = 20  # consecutive late commands before the bridge's own safe stop
    terrain: str = "flat"  # or "height_map" (rigid bridge only)
    terrain_seed: int = 0
    terrain_height: float = 0.03  # m, highest bump of the height map
    terrain_slope: float = 10.0  # degrees, terrain = "slope" (mujoco: unknown to the controller)
    sensors: SensorSettings = field(default_factory=SensorSettings)  # [bridge.sensors], every kind
    actuators: ActuatorSettings = field(default_factory=ActuatorSettings)  # [bridge.actuators], every kind
    back_end: dict[str, Any] = field(default_factory=dict)  # the kinds' own keys the file gives, by name

    def __getattr__(self, name: str) -> Any:
        """A kind's own key: its value, or its default when the file leaves it out (AttributeError for a name
        no kind reads)."""
        key = bridge_key(name)
        if key is None:
            raise AttributeError(f"{type(self).__name__!r} object has no attribute {name!r}")
        return self.__dict__.get("back_end", {}).get(name, key.default)


ESTIMATOR_KINDS = ("none", "inekf", "lkf")


@dataclass(frozen=True)
class EstimatorConfig:
    """``[estimator]``: the floating-base estimator the core runs each tick before the controller
    (:mod:`idcontrol.estimation`). kind : ``"none"``, ``"inekf"`` or ``"lkf"``. contact_threshold : the stance
    value at which a sphere stands for it. noise, bounds : keys of its NoiseModel and HealthBounds."""

    kind: str = "none"
    contact_threshold: float = 0.5
    noise: dict[str, Any] = field(default_factory=dict)
    bounds: dict[str, Any] = field(default_factory=dict)

    def settings(self) -> Any:
        """The estimator's :class:`~idcontrol.estimation.EstimatorSettings` (None for ``kind = "none"``);
        ConfigError naming a bad key or value."""
        if self.kind == "none":
            return None
        from idcontrol.estimation.types import EstimatorSettings, HealthBounds, NoiseModel

        parts = {}
        for name, table, cls in (("noise", self.noise, NoiseModel), ("bounds", self.bounds, HealthBounds)):
            if not isinstance(table, dict):
                raise ConfigError(f"estimator.{name} must be a table")
            _fields(table, cls, f"estimator.{name}")
            for key, value in table.items():
                if not _is_number(value) or not math.isfinite(value) or value < 0:
                    raise ConfigError(f"estimator.{name}.{key} must be a finite number >= 0, got {value!r}")
            parts[name] = cls(**table)
        if not _is_number(self.contact_threshold):
            raise ConfigError(f"estimator.contact_threshold must be a number, got {self.contact_threshold!r}")
        return EstimatorSettings(filter=self.kind, contact_threshold=float(self.contact_threshold), **parts)

    def check(self, where: str, contacts: str) -> EstimatorConfig:
        """This table validated (ConfigError naming the key)."""
        if self.kind not in ESTIMATOR_KINDS:
            raise ConfigError(f"{where}: estimator.kind must be one of {list(ESTIMATOR_KINDS)}, got {self.kind!r}")
        with _said_where(where):
            self.settings()
        if self.kind != "none" and contacts != "estimated":
            raise ConfigError(
                f'{where}: estimator.kind = {self.kind!r} needs controller.contacts = "estimated" '
                "(the estimator's stance feet are the controller's stance decision)"
            )
        return self


#: Origins of Foxglove's web app: the browser pages the live view serves unless ``foxglove_origins`` says otherwise.
FOXGLOVE_ORIGINS = ("https://app.foxglove.dev",)


def check_origin(origin: str, where: str) -> None:
    """ConfigError unless ``origin`` is a web origin as browsers send it (``https://host[:port]``, no path) or
    ``"*"``."""
    scheme, _, host = origin.partition("://")
    if origin != "*" and not (scheme in ("http", "https") and host and "/" not in host and origin.strip() == origin):
        raise ConfigError(
            f"{where}: an origin is a scheme and a host, like 'https://app.foxglove.dev', or '*'; got {origin!r}"
        )


@dataclass(frozen=True)
class TelemetrySettings:
    """The live view (:mod:`idcontrol.tools.live`).

    foxglove : port of its Foxglove WebSocket server on 127.0.0.1, which ``idcontrol launch`` starts beside the
        daemon (None: no live view).
    foxglove_origins : browser pages it serves, by their ``Origin`` (scheme and host); ``["*"]``: any page.
    foxglove_programs : whether it serves clients that send no ``Origin`` (programs, not browser pages).
    foxglove_viewers : viewers connected at once.
    """

    foxglove: int | None = None
    foxglove_origins: tuple[str, ...] = FOXGLOVE_ORIGINS
    foxglove_programs: bool = True
    foxglove_viewers: int = 8

    def check(self, where: str, endpoints: Endpoints) -> TelemetrySettings:
        port = self.foxglove
        if port is not None and (not isinstance(port, int) or isinstance(port, bool) or not 1 <= port <= 65535):
            raise ConfigError(f"{where}: telemetry.foxglove must be a TCP port in 1 .. 65535, got {port!r}")
        if port is not None and not endpoints.telemetry:
            raise ConfigError(f"{where}: telemetry.foxglove needs the daemon's telemetry endpoint ([endpoints])")
        origins = self.foxglove_origins
        if not isinstance(origins, (list, tuple)) or not all(isinstance(o, str) for o in origins):
            raise ConfigError(f"{where}: telemetry.foxglove_origins must be a list of origins, got {origins!r}")
        for origin in origins:
            check_origin(origin, f"{where}: telemetry.foxglove_origins")
        if not isinstance(self.foxglove_programs, bool):
            raise ConfigError(f"{where}: telemetry.foxglove_programs must be true or false")
        viewers = self.foxglove_viewers
        if not isinstance(viewers, int) or isinstance(viewers, bool) or not 1 <= viewers <= 1024:
            raise ConfigError(f"{where}: telemetry.foxglove_viewers must be an integer in 1 .. 1024, got {viewers!r}")
        return replace(self, foxglove_origins=tuple(origins))


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
    telemetry: TelemetrySettings = field(default_factory=TelemetrySettings)  # [telemetry]: the live view
    estimator: EstimatorConfig = field(default_factory=EstimatorConfig)  # [estimator]: the base from the IMU

    def formulation_options(self, name: str) -> dict[str, Any]:
        """Options for formulation ``name``: its ``[formulations.NAME]`` table, then, for the launch
        formulation, ``controller.options`` over it."""
        options = dict(self.formulations.get(name, {}))
        if name == self.controller.formulation:
            options.update(self.controller.options)
        return options

    def with_overrides(
        self,
        duration: float | None = None,
        formulation: str | None = None,
        bridge: str | None = None,
        robot: str | None = None,
    ) -> LaunchConfig:
        """The command line's ``--duration``, ``--formulation``, ``--bridge`` and ``--robot`` over the file's
        values.

        Another formulation moves ``controller.options`` into the file formulation's ``[formulations.NAME]``
        table (they are its options) and takes its own table's. ``robot`` is a shipped robot's name, a folder
        holding a ``robot.toml`` or a ``robot.toml`` path; the file's per-joint safety tables are checked
        against it (the references size themselves to it when the core is built).
        """
        out = self
        if robot is not None:
            from idcontrol.robot.config import load_robot_config

            load_robot_config(robot)  # UnknownRobot / RobotFileNotFound now, naming what was given
            out = replace(out, robot=str(robot))
            _check_safety_tables(out.safety, out.robot)
        if duration is not None:
            if not duration >= 0:
                raise ConfigError(f"--duration must be >= 0 s, got {duration}")
            out = replace(out, duration=float(duration))
        if bridge is not None:
            out = replace(out, bridge=replace(out.bridge, kind=bridge))
            _check_bridge(out.bridge, f"--bridge {bridge}")
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


def _fields(
    table: dict[str, Any], cls: type, where: str, skip: tuple[str, ...] = (), more: tuple[str, ...] = ()
) -> dict[str, Any]:
    """``table`` if each of its keys is a field of ``cls`` (less ``skip``); ConfigError listing the known ones (and
    ``more``) otherwise."""
    known = set(cls.__dataclass_fields__) - set(skip)
    unknown = sorted(set(table) - known)
    if unknown:
        raise ConfigError(f"{where}: unknown key(s) {unknown}; known: {sorted(known | set(more))}")
    return table


@contextlib.contextmanager
def _said_where(where: str, hint: str = "") -> Iterator[None]:
    """A ConfigError (or NameNotFound) raised inside says ``where`` first (and ``hint`` last); its type is kept for
    the callers that tell them apart."""
    try:
        yield
    except (ConfigError, NameNotFound) as e:
        e.args = (f"{where}: {e}" + (f" ({hint})" if hint else ""),)
        raise


def _check_formulation(name: str) -> None:
    from idcontrol.errors import UnknownFormulation
    from idcontrol.formulations import available_formulations

    if name not in available_formulations():
        raise UnknownFormulation(name, available_formulations())


def _as_number(value: Any, where: str) -> float:
    """``value`` as a float; a ConfigError that says a number was expected (not a range error) otherwise."""
    if not isinstance(value, (int, float)) or isinstance(value, bool):
        raise ConfigError(f"{where} must be a number, got {value!r} ({type(value).__name__})")
    return float(value)


def _positive(value: Any, where: str) -> float:
    number = _as_number(value, where)
    if not math.isfinite(number) or number <= 0:
        raise ConfigError(f"{where} must be a positive number, got {value!r}")
    return number


def _friction(value: Any, where: str) -> float:
    number = _as_number(value, where)
    if math.isnan(number) or number < 0:
        raise ConfigError(f"{where} must be >= 0 (inf allowed), got {value!r}")
    return number


def load_launch(path: str | Path, *, check_formulations: bool = True) -> LaunchConfig:
    """Read and validate a launch file (robot existence, names, rates, endpoints). ``check_formulations=False``
    skips checking the formulations' names and options, which loads every formulation's compiled kernels (about
    2 s): for a client that only needs the endpoints and credentials (``python -m idcontrol.client``)."""
    path = Path(path)
    if not path.is_file():
        raise RobotFileNotFound(str(path), "launch file")
    try:
        data = tomllib.loads(path.read_text())
    except tomllib.TOMLDecodeError as e:
        raise ConfigError(f"{path}: not valid TOML: {e}") from None
    return parse_launch(data, path, check_formulations=check_formulations)


def parse_launch(data: dict[str, Any], path: Path, *, check_formulations: bool = True) -> LaunchConfig:
    """Validate a launch file's tables (as ``tomllib`` reads them); ``path`` names it in errors and anchors
    its relative paths (``check_formulations``: see :func:`load_launch`)."""
    top_known = {
        "robot",
        "duration",
        "objects",
        "controller",
        "reference",
        "bridge",
        "endpoints",
        "safety",
        "security",
        "realtime",
        "formulations",
        "telemetry",
        "estimator",
    }
    unknown = sorted(set(data) - top_known)
    if unknown:
        raise ConfigError(f"{path}: unknown key(s) {unknown}; known: {sorted(top_known)}")
    robot = data.get("robot")
    if not isinstance(robot, str) or not robot:
        raise ConfigError(f"{path}: 'robot' must name a robot")
    from idcontrol.robot.config import load_robot_config

    beside = path.parent / robot  # a robot folder or file written relative to the launch file, as its reader expects
    if not Path(robot).is_absolute() and beside.exists():
        robot = str(beside.resolve())
    with _said_where(
        f"{path}: robot = {data.get('robot')!r}",
        "a relative path is taken beside the launch file, else from the working folder",
    ):
        load_robot_config(robot)  # UnknownRobot / RobotFileNotFound now rather than in a child process
    duration = _as_number(data.get("duration", 0.0), f"{path}: duration")
    if not 0 <= duration < math.inf:
        raise ConfigError(f"{path}: duration must be a finite number of s >= 0 (0: until Ctrl-C), got {duration!r}")

    objects = data.get("objects", False)
    if not isinstance(objects, bool):
        raise ConfigError(f"{path}: objects must be true or false")
    controller = ControllerSettings(
        **_fields(_section(data, "controller", path), ControllerSettings, f"{path} [controller]")
    )
    if check_formulations:
        with _said_where(f"{path} [controller] formulation"):
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
    if controller.contacts not in ("world", "estimated"):
        raise ConfigError(f"{path}: controller.contacts must be 'world' or 'estimated', got {controller.contacts!r}")
    from idcontrol.contacts.stance import StanceSettings

    StanceSettings.from_table(controller.stance, str(path))
    gains = controller.gains
    if not isinstance(gains, dict) or set(gains) - {"kp", "kd", "ki"}:
        raise ConfigError(f"{path}: controller.gains must be a table with keys among kp, kd, ki, got {gains!r}")

    reference = ReferenceSettings(
        **_fields(_section(data, "reference", path), ReferenceSettings, f"{path} [reference]")
    )
    if not isinstance(reference.options, dict):
        raise ConfigError(f"{path}: reference.options must be a table")
    from idcontrol.reference import available_references  # (its options are checked with the robot, by the daemon)

    if reference.name not in available_references():
        raise ConfigError(
            f"{path} [reference] name: unknown reference {reference.name!r}; available: "
            f"{', '.join(available_references())}"
        )

    bridge_table = dict(_section(data, "bridge", path))
    sensors = sensor_settings(bridge_table.pop("sensors", None), str(path))
    actuators = actuator_settings(bridge_table.pop("actuators", None), str(path))
    own = {name: bridge_table.pop(name) for name in list(bridge_table) if bridge_key(name) is not None}
    common = _fields(bridge_table, BridgeSettings, f"{path} [bridge]", skip=("back_end",), more=bridge_keys())
    bridge = BridgeSettings(**common, sensors=sensors, actuators=actuators, back_end=own)
    _check_bridge(bridge, str(path))
    if bridge.mode not in BRIDGE_MODES:
        raise ConfigError(f"{path}: bridge.mode {bridge.mode!r} not one of {list(BRIDGE_MODES)}")
    _friction(bridge.mu, f"{path}: bridge.mu")
    if not isinstance(bridge.substeps, int) or bridge.substeps < 1:
        raise ConfigError(f"{path}: bridge.substeps must be a positive integer, got {bridge.substeps!r}")
    if not isinstance(bridge.late_limit, int) or bridge.late_limit < 1:
        raise ConfigError(f"{path}: bridge.late_limit must be a positive integer")
    if not isinstance(bridge.terrain_seed, int) or isinstance(bridge.terrain_seed, bool) or bridge.terrain_seed < 0:
        raise ConfigError(f"{path}: bridge.terrain_seed must be an integer >= 0, got {bridge.terrain_seed!r}")
    height = bridge.terrain_height
    if not isinstance(height, (int, float)) or isinstance(height, bool) or not 0.0 <= height <= 0.1:
        raise ConfigError(f"{path}: bridge.terrain_height must be in [0, 0.1] m, got {height!r}")

    safety = SafetySettings.from_table(_section(data, "safety", path), f"{path} [safety]")
    _check_safety_tables(safety, robot)
    curve_keys = _curve_keys(_section(data, "security", path), path)

    endpoints = Endpoints(**_fields(_section(data, "endpoints", path), Endpoints, f"{path} [endpoints]"))
    endpoints.check(curve=curve_keys is not None)
    used = [endpoint for _, endpoint in endpoints.items() if not endpoint.endswith(":*")]  # ":*": a port each
    if len(set(used)) != len(used):
        raise ConfigError(f"{path}: endpoints must differ, got {used}")
    realtime = RealtimeSettings(**_fields(_section(data, "realtime", path), RealtimeSettings, f"{path} [realtime]"))
    realtime.check(f"{path}")
    formulations = _formulation_tables(_section(data, "formulations", path), path, check_formulations)
    telemetry = TelemetrySettings(
        **_fields(_section(data, "telemetry", path), TelemetrySettings, f"{path} [telemetry]")
    ).check(f"{path}", endpoints)
    estimator = EstimatorConfig(
        **_fields(_section(data, "estimator", path), EstimatorConfig, f"{path} [estimator]")
    ).check(f"{path}", controller.contacts)
    config = LaunchConfig(
        path,
        robot,
        float(duration),
        objects,
        controller,
        reference,
        bridge,
        endpoints,
        safety,
        curve_keys,
        realtime,
        formulations,
        telemetry,
        estimator,
    )
    if check_formulations:
        _check_options(config, controller.formulation)
    return config


def _check_bridge(bridge: BridgeSettings, where: str) -> None:
    """The simulator kind, its terrain and the keys that only some kinds read (ConfigError naming the key), as the
    simulator registry declares them (:mod:`idcontrol.simulators`)."""
    if bridge.terrain not in TERRAINS:
        raise ConfigError(f"{where}: bridge.terrain {bridge.terrain!r} not one of {list(TERRAINS)}")
    check_bridge_keys(bridge.kind, bridge.terrain, bridge.back_end, where)
    slope = bridge.terrain_slope
    if not isinstance(slope, (int, float)) or isinstance(slope, bool) or not 0.0 <= slope <= 30.0:
        raise ConfigError(f"{where}: bridge.terrain_slope must be in [0, 30] degrees, got {slope!r}")


def _check_safety_tables(safety: SafetySettings, robot: str) -> None:
    """Per-joint safety tables against the robot's joints and limits, now rather than in the daemon."""
    if any(
        isinstance(getattr(safety, k), dict)
        for k in ("torque_limits", "torque_rate_limit", "damping", "hold_kp", "hold_kd")
    ):
        from idcontrol.robot.model import RobotModel

        safety.for_robot(RobotModel(robot))


def _formulation_tables(table: dict[str, Any], path: Path, check_names: bool = True) -> dict[str, dict[str, Any]]:
    """The ``[formulations.NAME]`` tables (their names checked unless ``check_names``; :func:`_check_options`
    checks their options by building each formulation)."""
    for name, options in table.items():
        if check_names:
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
