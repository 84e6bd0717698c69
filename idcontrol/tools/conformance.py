"""``idcontrol conformance -- DRIVER_COMMAND...``: check that a robot driver keeps the protocol's obligations.

This suite is the definition of a compliant driver (docs/protocol.md links here; docs/driver.md explains it).
It starts a real daemon (the standing quadruped, a 1 kHz real-time session, the 20 ms watchdog) and runs the
driver against it through a recording proxy: the driver connects to the proxy's control endpoint, which holds
its own credential, forwards the session to the daemon, time-stamps every state, and injects the faults the
obligations are about (a late command, an error reply, a new credential, 20 missing commands, a silent daemon).
The driver's command line gets ``{endpoint}`` (the proxy's control endpoint) and ``{launch}`` (a launch file
naming it) filled in; the same two are in the environment as ``IDCONTROL_ENDPOINT`` and ``IDCONTROL_LAUNCH``.
The daemon's channels and the proxy's are ``ipc://`` sockets in a private folder of the run (0700), which no other
user's process reaches; only a work directory whose path is too long for a socket path makes them loopback TCP ports,
and the run says so.

Each obligation prints PASS or FAIL with its evidence:

hello and version, credentials, ZeroMQ's routing id, seq monotonic, field shapes, units and frames (quaternion
order x y z w, SI units, world-frame contact forces), period and jitter, late command (reuse once), error
replies, reconnect with a new credential, stop after 20 late, watchdog (a silent daemon), safe stop on
``stop``, safe stop on daemon shutdown, exit on SIGTERM.

With ``state_form = "sensors"`` the daemon estimates the base (``[estimator]``, its ``welcome.state_form`` is
``sensors``) and the driver must send the sensor form (docs/protocol.md, "The sensor form"); the checks above then
read the joints and the IMU in place of the base, and three more apply: imu fields (every state: ``imu`` with
``orientation_xyzw`` f64[4], ``angular_velocity`` f64[3], ``linear_acceleration`` f64[3], finite, ``t`` a number
when sent; ``q`` and ``qd`` the joints alone or in full), imu time (never after the state's ``t``, at most the
daemon's 5 ms before it, never going back) and imu not frozen (no gyro and accelerometer reading repeated exactly 5
times while the driver's clock advances and its joints move; the daemon's estimator's own verdict on the IMU is
evidence).

The driver must serve the quadruped robot file (nq 19, nv 18, nu 12) with a real-time clock; the MuJoCo and rigid
bridges do (``idcontrol conformance --bridge-kind rigid -- idcontrol bridge {launch}``; with ``--state-form sensors``
the launch file ``{launch}`` also says ``[bridge.sensors] base = "imu"``).
"""

from __future__ import annotations

import bisect
import json
import math
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import msgpack
import numpy as np
import zmq

from idcontrol import jsontext
from idcontrol import protocol as wire
from idcontrol.client import AdminClient
from idcontrol.errors import IdControlError, ProtocolError
from idcontrol.robot.model import RobotModel
from idcontrol.security import Credential
from idcontrol.tools.ports import free_ports
from idcontrol.tools.processes import terminate

ROBOT = "quadruped"
LATE_LIMIT = 20
GRAVITY = 9.81
#: What the daemon may expect in ``state`` (its ``welcome.state_form``).
STATE_FORMS = ("full", "sensors")
#: Every obligation, in the order of the report; the sensor form's three more.
OBLIGATIONS = (
    "hello and version",
    "credentials",
    "zeromq's routing id",
    "field shapes",
    "quaternion order x y z w",
    "units and frames",
    "period and jitter",
    "late command (reuse once)",
    "error replies",
    "reconnect with a new credential",
    "stop after 20 late",
    "watchdog (a silent daemon)",
    "safe stop on stop",
    "safe stop on daemon shutdown",
    "exit on SIGTERM",
    "seq monotonic",
)
SENSOR_OBLIGATIONS = ("imu fields", "imu time", "imu not frozen")
#: The daemon's default bounds on the IMU (idcontrol.estimation.HealthBounds): how old a sample may be, s, and how
#: many exact repeats of one gyro and accelerometer reading make a frozen sensor.
MAX_IMU_AGE = 0.005
MAX_IMU_REPEATS = 5

LAUNCH_TEMPLATE = """# idcontrol conformance: the standing quadruped, a real-time session
robot = "quadruped"
duration = 0.0

[controller]
formulation = "two_stage_qp"
rate_hz = {rate_hz}
mu = 1.0
watchdog_ms = {watchdog_ms}
penetration_tolerance = 0.001
{estimated_contacts}
[reference]
name = "hold"

[bridge]
kind = "{kind}"
mode = "realtime"
mu = 1.0
substeps = {substeps}                  # physics steps per period (for idcontrol bridge)

[realtime]
priority = {priority}                 # SCHED_FIFO for the daemon (0: normal scheduling; refused: a warning)

[safety]
{safe_controller}
safe_stop_timeout = 0.3

[endpoints]
control = "{control}"
admin = "{admin}"
telemetry = "{telemetry}"
{sensor_form}"""

#: The channels of a run: the daemon's three and the proxy's control endpoint, which the driver connects to.
CHANNELS = ("control", "admin", "telemetry", "proxy")
#: The longest path a unix socket takes (``sockaddr_un.sun_path`` less its NUL): 107 bytes on Linux, 103 elsewhere.
IPC_PATH_MAX = 107 if sys.platform.startswith("linux") else 103

#: The daemon's own stops hold the posture, so that later checks start from a standing robot. In the sensor form they
#: damp the joints to rest instead: a PD hold that times out leaves the robot moving, and the estimator, which starts
#: again at each start, takes the robot to be at rest then.
HOLD = 'safe_controller = "pd_hold"'
DAMP = 'safe_controller = "damping"'

#: The launch file's additions for the sensor form: the daemon estimates the base, the bridge sends the IMU.
SENSOR_FORM_CONTACTS = """contacts = "estimated"   # the estimator's stance feet: the controller's stance decision
consistent_contact_velocity = true

[formulations.two_stage_qp]
dissipation = "contacts"         # Stage I relative to the stance feet: an estimated base velocity is not braked
"""
SENSOR_FORM = """
[estimator]
kind = "inekf"                   # the daemon estimates the base: welcome.state_form is "sensors"
noise = { imu_tilt_noise = 0.0 }

[bridge.sensors]
base = "imu"                     # idcontrol bridge sends the sensor form
"""


@dataclass
class Check:
    """One obligation: its name, whether the driver kept it, and what was seen."""

    name: str
    passed: bool
    evidence: str

    def line(self) -> str:
        return f"{'PASS' if self.passed else 'FAIL'}  {self.name}: {self.evidence}"


@dataclass
class Seen:
    """One message from the driver as the proxy received it."""

    at: float  # perf_counter s
    message: dict[str, Any]
    session: int  # sessions opened before it (a new hello starts a new one)


@dataclass
class Proxy:
    """The driver's daemon, as far as the driver can tell: a ROUTER with its own credential in front of the real
    daemon's control channel. Records every message and applies the fault scheduled by the suite."""

    front_endpoint: str
    daemon_endpoint: str
    context: zmq.Context
    seen: list[Seen] = field(default_factory=list)
    credential: Credential | None = None
    session_peer: bytes | None = None
    sessions: int = 0
    hellos: list[Seen] = field(default_factory=list)
    hello_peers: list[bytes] = field(default_factory=list)  # the routing id of each accepted hello
    refused_hellos: int = 0
    # the fault in force: "" (none), "drop" (forward states, drop their commands), "error" (answer the next
    # state with an error in place of its command), "error_noseq", "silence" (forward nothing either way),
    # "unauthorized" (the next state gets unauthorized: a restarted daemon)
    fault: str = ""
    fault_count: int = 0  # states the fault still applies to ("drop", "error"); -1: until cleared
    affected: list[int] = field(default_factory=list)  # seqs of the states the faults applied to
    welcomes: list[dict[str, Any]] = field(default_factory=list)  # the daemon's welcomes, as forwarded
    daemon_errors: dict[str, int] = field(default_factory=dict)  # the daemon's own error replies, by code
    last_daemon_error: str = ""

    def __post_init__(self) -> None:
        self.lock = threading.Lock()
        self._states: list[Seen] = []  # the states among seen, and their arrival times (for bisect)
        self._state_at: list[float] = []
        self.front = self.context.socket(zmq.ROUTER)
        self.front.setsockopt(zmq.LINGER, 0)
        self.front.bind(self.front_endpoint)
        self.back = self.context.socket(zmq.DEALER)
        self.back.setsockopt(zmq.LINGER, 0)
        self.back.connect(self.daemon_endpoint)
        self.credential = Credential.create(self.front_endpoint)
        self._drop: set[int] = set()
        self._error: dict[int, bool] = {}  # seq -> the error carries the seq
        self.running = True
        self.thread = threading.Thread(target=self._serve, name="conformance-proxy", daemon=True)
        self.thread.start()

    def set_fault(self, fault: str, count: int = 1) -> None:
        with self.lock:
            self.fault, self.fault_count = fault, count

    def rotate_credential(self) -> None:
        """A restarted daemon: a new credential, and the next state is refused with ``unauthorized``."""
        with self.lock:
            old = self.credential
            self.credential = Credential.create(self.front_endpoint)
            if old is not None and old.path is not None and old.path != self.credential.path:
                old.remove()
            self.fault, self.fault_count = "unauthorized", 1

    def close(self) -> None:
        self.running = False
        self.thread.join(timeout=2)
        self.front.close(linger=0)
        self.back.close(linger=0)
        if self.credential is not None:
            self.credential.remove()

    def states(self, since: float = 0.0) -> list[Seen]:
        """The states received at or after ``since`` (perf_counter s), in order."""
        with self.lock:
            return self._states[bisect.bisect_left(self._state_at, since) :]

    def _error_to(self, peer: bytes, code: str, text: str, seq: int | None) -> None:
        self.front.send_multipart([peer, wire.encode_error(code, text, seq)])

    def _serve(self) -> None:
        poller = zmq.Poller()
        poller.register(self.front, zmq.POLLIN)
        poller.register(self.back, zmq.POLLIN)
        while self.running:
            events = dict(poller.poll(5))
            if self.front in events:
                while True:
                    try:
                        frames = self.front.recv_multipart(zmq.NOBLOCK)
                    except zmq.Again:
                        break
                    self._from_driver(frames)
            if self.back in events:
                while True:
                    try:
                        raw = self.back.recv(zmq.NOBLOCK)
                    except zmq.Again:
                        break
                    self._from_daemon(raw)

    def _from_driver(self, frames: list[bytes]) -> None:
        at = time.perf_counter()
        if len(frames) != 2:
            return
        peer, raw = frames
        try:
            message = msgpack.unpackb(raw, raw=False)
        except Exception:
            message = {"type": "<not msgpack>"}
        if not isinstance(message, dict):
            message = {"type": "<not a map>"}
        with self.lock:
            seen = Seen(at, message, self.sessions)
            self.seen.append(seen)
            kind = message.get("type")
            if kind == "hello":
                if self.credential is None or not self.credential.accepts(message.get("token")):
                    self.refused_hellos += 1
                    self._error_to(peer, "unauthorized", "hello needs the daemon's credential", None)
                    return
                self.hellos.append(seen)
                self.hello_peers.append(peer)
                self.sessions += 1
                seen.session = self.sessions
                self.session_peer = peer
                forwarded = {**message, "token": Credential.of_daemon(self.daemon_endpoint).token}
                self.back.send(wire.pack(forwarded))
                return
            if kind != "state":
                self._error_to(peer, "unknown_type", f"{kind!r} is not a control message", None)
                return
            self._states.append(seen)
            self._state_at.append(at)
            seq = message.get("seq")
            if peer != self.session_peer:
                self._error_to(peer, "unauthorized", "send hello (with the daemon's credential) before states", seq)
                return
            fault = self.fault
            if fault == "unauthorized":
                self.fault = ""
                self.session_peer = None
                self.affected.append(seq)
                self._error_to(peer, "unauthorized", "the daemon restarted: hello again with its new credential", seq)
                return
            if fault == "silence":
                self.affected.append(seq)
                return
            if fault in ("drop", "error", "error_noseq") and self.fault_count != 0:
                self.affected.append(seq)
                if fault == "drop":
                    self._drop.add(seq)
                else:
                    self._error[seq] = fault == "error"
                if self.fault_count > 0:
                    self.fault_count -= 1
                    if self.fault_count == 0:
                        self.fault = ""
            self.back.send(raw)

    def _from_daemon(self, raw: bytes) -> None:
        try:
            message = msgpack.unpackb(raw, raw=False)
        except Exception:
            return
        if not isinstance(message, dict):
            return
        with self.lock:
            if message.get("type") == "welcome":
                self.welcomes.append(message)
            elif message.get("type") == "error":
                code = str(message.get("code"))
                self.daemon_errors[code] = self.daemon_errors.get(code, 0) + 1
                self.last_daemon_error = f"{code}: {message.get('message')}"
            peer = self.session_peer
            if peer is None or self.fault == "silence":
                return
            seq = message.get("seq")
            if message.get("type") == "command" and seq in self._drop:
                self._drop.discard(seq)
                return
            if message.get("type") == "command" and seq in self._error:
                with_seq = self._error.pop(seq)
                self._error_to(
                    peer, "bad_state", "conformance: an error in place of this command", seq if with_seq else None
                )
                return
            self.front.send_multipart([peer, raw])


def _realtime(priority: int) -> Callable[[], None]:
    """A function that puts the calling process under SCHED_FIFO ``priority`` (a refusal leaves it as it is)."""

    def enter() -> None:
        try:
            os.sched_setscheduler(0, os.SCHED_FIFO | os.SCHED_RESET_ON_FORK, os.sched_param(priority))
        except (OSError, AttributeError):
            pass

    return enter


def _array(message: dict[str, Any], key: str) -> np.ndarray | None:
    value = message.get(key)
    if isinstance(value, (bytes, bytearray)) and len(value) % 8 == 0:
        return np.frombuffer(value, dtype="<f8")
    if isinstance(value, list) and all(isinstance(x, (int, float)) and not isinstance(x, bool) for x in value):
        return np.asarray(value, dtype=float)
    return None


#: The sensor form's IMU arrays and their lengths.
IMU_ARRAYS = (("orientation_xyzw", 4), ("angular_velocity", 3), ("linear_acceleration", 3))


def _size_of(value: Any) -> str:
    """What an array field holds, in words."""
    if isinstance(value, (bytes, bytearray)):
        return f"{len(value)} bytes ({len(value) / 8:g} float64)"
    return f"an array of {len(value)}" if isinstance(value, list) else f"a {type(value).__name__}"


def _imu_array(message: dict[str, Any], key: str, n: int) -> np.ndarray:
    """``imu.KEY`` of a state, (n,); NaN where it is missing or of another length."""
    imu = message.get("imu")
    value = _array(imu, key) if isinstance(imu, dict) else None
    return value if value is not None and value.size == n else np.full(n, math.nan)


class Suite:
    """One conformance run (see the module docstring)."""

    def __init__(
        self,
        command: list[str],
        bridge_kind: str = "mujoco",
        workdir: Path | None = None,
        log: Callable[[str], None] = print,
        priority: int = 0,
        rate_hz: float = 1000.0,
        state_form: str = "full",
    ) -> None:
        if not 10.0 <= rate_hz <= 2000.0:
            raise IdControlError(f"the conformance rate must be in 10 .. 2000 Hz, got {rate_hz}")
        if state_form not in STATE_FORMS:
            raise IdControlError(f"the conformance state form must be one of {list(STATE_FORMS)}, got {state_form!r}")
        self.command = command
        self.state_form = state_form
        self.sensor_form = False  # the daemon's welcome asked for the sensor form (set at the driver's hello)
        self._daemon_imu_reasons: list[str] = []  # why the daemon's estimator stopped the robot on the IMU
        self._imu_units_evidence = ""
        self.priority = priority
        self.log = log
        self.robot = RobotModel(ROBOT)
        self.dt = 1.0 / rate_hz
        self.checks: list[Check] = []
        # short: the socket paths in it must fit IPC_PATH_MAX; private (0700, as mkdtemp makes it)
        self._tmp = None if workdir else tempfile.TemporaryDirectory(prefix="idc-conf-")
        self.dir = Path(workdir or self._tmp.name)
        self.dir.mkdir(parents=True, exist_ok=True)
        self.endpoints = self._endpoints(given=workdir is not None)
        e = self.endpoints
        sensors = state_form == "sensors"
        form = {
            "estimated_contacts": SENSOR_FORM_CONTACTS if sensors else "",
            "sensor_form": SENSOR_FORM if sensors else "",
            "safe_controller": DAMP if sensors else HOLD,
        }
        self.daemon_launch = self.dir / "daemon.toml"
        self.daemon_launch.write_text(
            LAUNCH_TEMPLATE.format(
                **form,
                kind="mujoco",
                control=e["control"],
                admin=e["admin"],
                telemetry=e["telemetry"],
                priority=priority,
                rate_hz=rate_hz,
                watchdog_ms=max(20.0, 5e3 / rate_hz),
                substeps=max(1, round(1000.0 / rate_hz)),
            )
        )
        self.driver_launch = self.dir / "driver.toml"
        # MuJoCo in 1 ms physics steps, as at 1 kHz (its stiff contact wants them); the rigid time stepper in one
        # step per period, the controller's own model of it (in 1 ms steps it reported no contact force)
        substeps = max(1, round(1000.0 / rate_hz)) if bridge_kind == "mujoco" else 1
        self.driver_launch.write_text(
            LAUNCH_TEMPLATE.format(
                **form,
                kind=bridge_kind,
                control=e["proxy"],
                admin=e["admin"],
                telemetry=e["telemetry"],
                priority=priority,
                rate_hz=rate_hz,
                watchdog_ms=max(20.0, 5e3 / rate_hz),
                substeps=substeps,
            )
        )
        self.daemon: subprocess.Popen | None = None
        self.driver: subprocess.Popen | None = None
        self.driver_output: dict[str, Any] | None = None  # the driver's last JSON line at exit
        self.proxy: Proxy | None = None
        self._scheduler = (os.sched_getscheduler(0), os.sched_getparam(0))  # restored by close()
        if priority:  # the proxy stands for the daemon's side of every round trip: above the driver and the daemon,
            _realtime(min(priority + 1, 98))()  # its ZeroMQ I/O thread above it (started by the first socket)
        self.context = zmq.Context()
        if priority:
            self.context.set(zmq.THREAD_SCHED_POLICY, os.SCHED_FIFO)
            self.context.set(zmq.THREAD_PRIORITY, min(priority + 2, 99))
        self.admin = AdminClient(e["admin"], timeout=5.0, context=self.context, credential_for=e["control"])

    # ------------------------------------------------------------------ plumbing
    def _endpoints(self, given: bool) -> dict[str, str]:
        """The run's endpoints (:data:`CHANNELS`): ``ipc://`` sockets in a private folder, which only this user's
        processes can open; the suite's own temporary folder, or one made 0700 inside a work directory the user
        gave (whatever its mode). Loopback TCP ports, which every local user reaches, only when that folder's path
        is too long for a unix socket's, said in the log."""
        self._sockets: Path | None = Path(tempfile.mkdtemp(prefix="ipc-", dir=self.dir)) if given else self.dir
        longest = max(len(os.fsencode(self._sockets / name)) for name in CHANNELS)
        if longest <= IPC_PATH_MAX:
            return {name: f"ipc://{self._sockets / name}" for name in CHANNELS}
        if given:
            os.rmdir(self._sockets)
            self._sockets = None
        self.log(
            f"note: the work directory {self.dir} is too long a path for a unix socket ({longest} > {IPC_PATH_MAX} "
            "bytes): the daemon and the proxy bind loopback TCP ports, which every user of this machine reaches "
            "for the run; give a shorter --workdir to keep them private"
        )
        return {name: f"tcp://127.0.0.1:{port}" for name, port in zip(CHANNELS, free_ports(len(CHANNELS)), strict=True)}

    def check(self, name: str, passed: bool, evidence: str) -> bool:
        c = Check(name, bool(passed), evidence)
        self.checks.append(c)
        self.log(c.line())
        return c.passed

    def _spawn_daemon(self) -> None:
        env = {**os.environ, "OPENBLAS_NUM_THREADS": "1", "OMP_NUM_THREADS": "1"}
        self.daemon = subprocess.Popen(
            [sys.executable, "-m", "idcontrol", "daemon", str(self.daemon_launch)],
            stdout=subprocess.DEVNULL,
            stderr=open(self.dir / "daemon.log", "wb"),
            env=env,
            start_new_session=True,
        )

    def _spawn_driver(self) -> None:
        e = self.endpoints
        argv = [a.replace("{endpoint}", e["proxy"]).replace("{launch}", str(self.driver_launch)) for a in self.command]
        env = {**os.environ, "IDCONTROL_ENDPOINT": e["proxy"], "IDCONTROL_LAUNCH": str(self.driver_launch)}
        self.driver_out = open(self.dir / "driver.out", "wb")
        self.driver = subprocess.Popen(
            argv,
            stdout=self.driver_out,
            stderr=open(self.dir / "driver.log", "wb"),
            env=env,
            start_new_session=True,
            preexec_fn=_realtime(self.priority) if self.priority else None,
        )

    def status(self) -> dict[str, Any]:
        return self.admin.request("status")

    def wait(self, predicate: Callable[[], bool], timeout: float, step: float = 0.002) -> bool:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if predicate():
                return True
            time.sleep(step)
        return predicate()

    def wait_mode(self, modes: tuple[str, ...], timeout: float = 5.0) -> bool:
        return self.wait(lambda: self.status()["mode"] in modes, timeout, 0.02)

    def driver_alive(self) -> bool:
        return self.driver is not None and self.driver.poll() is None

    def close(self) -> None:
        for proc in (self.driver, self.daemon):
            terminate(proc, group=True)
        if self.proxy is not None:
            self.proxy.close()
        self.admin.close()
        self.context.term()
        if self.priority:
            try:
                os.sched_setscheduler(0, *self._scheduler)
            except OSError:
                pass
        if self._tmp is not None:
            self._tmp.cleanup()
        elif self._sockets is not None:
            shutil.rmtree(self._sockets, ignore_errors=True)

    # ------------------------------------------------------------------ the run
    def run(self) -> list[Check]:
        try:
            self._spawn_daemon()
            if not self.wait(self._daemon_answers, 120.0, 0.2):
                raise IdControlError(f"the conformance daemon did not start (see {self.dir / 'daemon.log'})")
            self.proxy = Proxy(self.endpoints["proxy"], self.endpoints["control"], self.context)
            self._spawn_driver()
            if self._hello():
                try:
                    self._run_phases()
                except ProtocolError as e:  # the daemon refused a start: it answered none of the driver's states
                    self._refused(e)
        finally:
            self.close()
        return self.checks

    def _refused(self, error: ProtocolError) -> None:
        """The daemon would not start the robot: check what the driver's states show by themselves, and fail the
        obligations that need a running robot, saying why."""
        p = self.proxy
        checked = {c.name for c in self.checks}
        why = f"the daemon refused to start ({error})"
        if p.daemon_errors:
            why += f"; it refused {sum(p.daemon_errors.values())} states (last: {p.last_daemon_error})"
        if "field shapes" not in checked:
            self._check_fields(p.states(), [])
        if self.sensor_form and "imu fields" not in checked:
            self._check_imu_fields(p.states())
        self._sigterm()
        self._check_seq()
        if self.sensor_form:
            self._check_imu_time()
            self._check_imu_frozen()
        checked = {c.name for c in self.checks}
        for name in OBLIGATIONS + (SENSOR_OBLIGATIONS if self.sensor_form else ()):
            if name not in checked:
                self.check(name, False, f"not checked: {why}")

    def _daemon_answers(self) -> bool:
        if self.daemon.poll() is not None:
            raise IdControlError(f"the conformance daemon exited with code {self.daemon.returncode}")
        try:
            self.admin.request("status", timeout=0.5)
            return True
        except TimeoutError:
            return False

    def _hello(self) -> bool:
        p = self.proxy
        got = self.wait(lambda: bool(p.hellos) or p.refused_hellos > 0 or not self.driver_alive(), 120.0, 0.01)
        if not got or not p.hellos:
            why = (
                ("the driver exited with code " + str(self.driver.returncode))
                if not self.driver_alive()
                else (
                    f"{p.refused_hellos} hello(s) without the daemon's credential"
                    if p.refused_hellos
                    else "no hello within 120 s"
                )
            )
            self.check("hello and version", False, why)
            return False
        m = p.hellos[0].message
        r = self.robot
        fields = (m.get("v"), m.get("robot"), m.get("nq"), m.get("nv"), m.get("nu"), m.get("clock"))
        self.check(
            "hello and version",
            fields == (1, ROBOT, r.nq, r.nv, r.nu, "realtime"),
            f"v={m.get('v')} robot={m.get('robot')} nq={m.get('nq')} nv={m.get('nv')} nu={m.get('nu')} "
            f"clock={m.get('clock')} (want v=1 {ROBOT} {r.nq}/{r.nv}/{r.nu} realtime)",
        )
        self.check(
            "credentials",
            p.refused_hellos == 0 and bool(p.hellos),
            f"hello showed the credential of the daemon it connects to ({p.refused_hellos} refused)",
        )
        own = [peer for peer in p.hello_peers if not (len(peer) == 5 and peer[:1] == b"\x00")]
        self.check(
            "zeromq's routing id",
            not own,
            "the driver's connection has the routing id ZeroMQ chose (a driver that sets ZMQ_ROUTING_ID "
            "lets a peer that connects later with the same id reach its session's routing)"
            if not own
            else f"the driver set its own routing id {own[0]!r}: leave ZMQ_ROUTING_ID unset",
        )
        if self.wait(lambda: bool(p.welcomes), 10.0, 0.01):
            self.sensor_form = p.welcomes[0].get("state_form") == "sensors"
        return self.wait(lambda: len(p.states()) > 50, 30.0, 0.01)

    def _run_phases(self) -> None:
        p = self.proxy
        if self.sensor_form:
            self._warm_estimator()
        idle_from = time.perf_counter()
        time.sleep(0.3)
        idle = p.states(idle_from)
        self.admin.start()
        run_from = time.perf_counter()
        time.sleep(2.0)
        self._check_fields(p.states(run_from), idle)
        if self.sensor_form:
            self._note_daemon_reason()
            self._check_imu_fields(idle + p.states(run_from))
        self._check_period(p.states(run_from))
        for phase in (
            self._late_once,
            self._error_replies,
            self._reconnect,
            self._stop_after_20,
            self._watchdog,
            self._safe_stop_on_stop,
        ):
            phase()
            if self.sensor_form:
                self._note_daemon_reason()
        self._safe_stop_on_shutdown()
        self._sigterm()
        self._check_seq()
        if self.sensor_form:
            self._check_imu_time()
            self._check_imu_frozen()

    def _warm_estimator(self) -> None:
        """Start and stop the daemon once before the checks: its estimator's first tick loads the compiled filter
        (tens of ms), which would otherwise trip the watchdog in the run the checks measure."""
        self.admin.start()
        self.wait(lambda: self.status()["ticks"] > 0 and self.status()["mode"] != "idle", 2.0, 0.02)
        time.sleep(0.2)
        self.admin.request("stop", reason="conformance: the estimator warmed up")
        self.wait_mode(("stopped",), 5.0)
        self.admin.request("reset_stats")

    # ------------------------------------------------------------------ obligations
    def _joints(self, message: dict[str, Any]) -> np.ndarray | None:
        """A state's joint positions (nq - 7,): ``q[7:]`` of a full ``q``, or the sensor form's ``q`` of the joints
        alone; None when ``q`` is neither."""
        q, nq = _array(message, "q"), self.robot.nq
        if q is None:
            return None
        if q.size == nq:
            return q[7:]
        return q if self.sensor_form and q.size == nq - 7 else None

    def _check_fields(self, states: list[Seen], idle: list[Seen]) -> None:
        r = self.robot
        k = len(r.sphere_names)
        # the sizes q, qd may have: the full state's, or in the sensor form also the joints alone
        sizes = {(r.nq, r.nv), (r.nq - 7, r.nv - 6)} if self.sensor_form else {(r.nq, r.nv)}
        want = " or ".join(f"{a}/{b}" for a, b in sorted(sizes))
        bad: list[str] = []
        versions = {s.message.get("v") for s in self.proxy.seen}
        if versions != {1}:
            bad.append(f"v values {sorted(map(str, versions))}")
        forces_seen = joints_only = 0
        for s in states:
            m = s.message
            q, v = _array(m, "q"), _array(m, "qd")
            if q is None or v is None or (q.size, v.size) not in sizes:
                bad.append(
                    f"seq {m.get('seq')}: q/qd sizes {None if q is None else q.size}/"
                    f"{None if v is None else v.size}, want {want}"
                )
                break
            joints_only += q.size == r.nq - 7
            t = m.get("t")
            if not (np.isfinite(q).all() and np.isfinite(v).all()):
                bad.append(f"seq {m.get('seq')}: non-finite q or qd")
                break
            if not isinstance(t, (int, float)) or isinstance(t, bool) or not math.isfinite(t):
                bad.append(f"seq {m.get('seq')}: t is {t!r}, not a finite number")
                break
            if m.get("contact_forces") is not None:
                f = _array(m, "contact_forces")
                if f is None or f.size != 3 * k:
                    bad.append(f"seq {m.get('seq')}: contact_forces of {None if f is None else f.size}, want {3 * k}")
                    break
                forces_seen += 1
        shapes = (
            f"q f64[{r.nq}], qd f64[{r.nv}]"
            if not self.sensor_form
            else f"q, qd the joints alone (f64[{r.nq - 7}], f64[{r.nv - 6}]) in {joints_only}, in full in the others"
        )
        self.check(
            "field shapes",
            not bad and bool(states),
            "; ".join(bad)
            or f"{len(states)} states: {shapes}, t float, contact_forces f64[{3 * k}] in {forces_seen}, "
            "every message v=1",
        )
        if not states or bad:
            if self.sensor_form:  # the quaternion and the units are the IMU's: checked with it
                self.check("quaternion order x y z w", False, "not checked: the states' fields are wrong")
                self.check("units and frames", False, "not checked: the states' fields are wrong")
            return
        # positions from the states before the start (the robot at rest in its standing posture, whatever the
        # control loop will make of it on a loaded machine), the clock and the forces from the first 0.4 s of run
        at_rest = [s for s in idle if self._joints(s.message) is not None] or states
        joint_q = np.array([self._joints(s.message) for s in at_rest])
        full_q = np.array([q for s in at_rest if (q := _array(s.message, "q")) is not None and q.size == r.nq])
        early = [s for s, after in zip(states, states[1:], strict=False) if after.message["t"] != s.message["t"]]
        early = early[: max(10, int(0.4 / self.dt))]  # the first 0.4 s during which the robot was driven
        if self.sensor_form:  # the quaternion the driver sends is the IMU's (its frame: the quadruped's base link)
            quat = np.array([_imu_array(s.message, "orientation_xyzw", 4) for s in at_rest])
            where = "standing robot's IMU at rest"
        else:
            quat, where = full_q[:, 3:7], "standing robot at rest"
        if quat.ndim != 2 or quat.shape[1] != 4 or not np.isfinite(quat).all():
            self.check("quaternion order x y z w", False, f"{where}: no finite quaternion to check")
            order_ok = False
        else:
            norm_err = float(np.abs(np.linalg.norm(quat, axis=1) - 1.0).max())
            upright_w = float(np.abs(quat[:, 3]).min())
            upright_first = float(np.abs(quat[:, 0]).max())
            order_ok = norm_err < 1e-3 and upright_w > 0.99
            w, x = ("orientation_xyzw[3]", "[0]") if self.sensor_form else ("q[6]", "q[3]")
            self.check(
                "quaternion order x y z w",
                order_ok,
                f"{where}: |{w}| (w) >= {upright_w:.4f}, |{x}| (x) <= {upright_first:.4f}, "
                f"| |quat| - 1 | <= {norm_err:.1e}"
                + ("" if order_ok or upright_first < 0.99 else " — looks like w x y z"),
            )
        stand = r.standing_configuration()
        joints = float(np.median(np.abs(joint_q - stand[7:]).max(axis=1)))
        t = np.array([float(s.message["t"]) for s in states])
        seq = np.array([s.message["seq"] for s in states], dtype=float)
        moving = np.diff(t) > 0  # (a robot stopped by a loaded machine's late commands holds still)
        steps = np.diff(t)[moving] / np.maximum(np.diff(seq)[moving], 1)
        dt_per_seq = float(np.median(steps)) if steps.size else 0.0
        units_ok = joints < 0.2 and 0.5 * self.dt < dt_per_seq < 2 * self.dt
        evidence = f"joints within {joints:.4f} rad of the standing posture (at rest, median)"
        if full_q.size:
            height = float(np.median(full_q[:, 2]))
            units_ok = units_ok and 0.5 * stand[2] < height < 1.5 * stand[2]
            evidence = f"base height {height:.4f} m (standing {stand[2]:.4f}), " + evidence
        if self.sensor_form:
            units_ok = self._imu_units(at_rest) and units_ok
        evidence += f", t advances {dt_per_seq * 1e3:.3f} ms per seq (period {self.dt * 1e3:g} ms)"
        if idle:
            qi = np.array([j for s in idle if (j := self._joints(s.message)) is not None])
            moved = float(np.abs(qi - qi[0]).max()) if qi.size else math.nan
            evidence += f"; idle: joints moved {moved:.1e} rad"
        if forces_seen and early:
            fz = np.array(
                [
                    _array(s.message, "contact_forces").reshape(-1, 3)[:, 2].sum()
                    for s in early
                    if s.message.get("contact_forces") is not None
                ]
            )
            weight = self.robot.total_mass() * GRAVITY
            ratio = float(np.median(fz) / weight)
            units_ok = units_ok and 0.8 < ratio < 1.2
            evidence += (
                f"; contact forces: total z {np.median(fz):.1f} N = {ratio:.3f} m g, upward on the robot "
                "(world frame, N; first 0.4 s of run)"
            )
        else:
            evidence += "; contact forces not sent (optional)"
        if self.sensor_form:
            evidence += "; " + self._imu_units_evidence
        self.check("units and frames", units_ok, evidence)

    def _imu_units(self, at_rest: list[Seen]) -> bool:
        """The IMU's units and frame at rest: its specific force is g (m/s², not in g) and points up the IMU's z
        (the quadruped's IMU frame is its base link, level when standing); the gyro reads about nothing."""
        accel = np.array([_imu_array(s.message, "linear_acceleration", 3) for s in at_rest])
        gyro = np.array([_imu_array(s.message, "angular_velocity", 3) for s in at_rest])
        if accel.ndim != 2 or gyro.ndim != 2 or not (np.isfinite(accel).all() and np.isfinite(gyro).all()):
            self._imu_units_evidence = "IMU at rest: no finite reading to check"
            return False
        norm = float(np.median(np.linalg.norm(accel, axis=1)))
        up = float(np.median(accel[:, 2]))
        spin = float(np.median(np.linalg.norm(gyro, axis=1)))
        self._imu_units_evidence = (
            f"IMU at rest: specific force |a| {norm:.3f} m/s², {up:.3f} along its z (want +{GRAVITY} up, m/s²), "
            f"gyro |w| {spin:.1e} rad/s (medians)"
        )
        return abs(norm - GRAVITY) < 0.1 * GRAVITY and up > 0.9 * GRAVITY and spin < 0.1

    def _check_imu_fields(self, states: list[Seen]) -> None:
        """Every state of the sensor form carries ``imu``: its three arrays of the right lengths, finite (a non-finite
        reading is a failed sensor's, on which the daemon stops), and ``t`` a finite number when sent."""
        bad: list[str] = []
        timed = 0
        for s in states:
            m, imu = s.message, s.message.get("imu")
            if not isinstance(imu, dict):
                bad.append(f"seq {m.get('seq')}: no imu map" if imu is None else f"seq {m.get('seq')}: imu not a map")
                break
            for key, n in IMU_ARRAYS:
                got = _array(imu, key)
                if got is None or got.size != n:
                    bad.append(f"seq {m.get('seq')}: imu.{key} is {_size_of(imu.get(key))}, want f64[{n}]")
                elif not np.isfinite(got).all():
                    bad.append(f"seq {m.get('seq')}: imu.{key} not finite {got.tolist()} (a failed sensor)")
            if "t" in imu:
                it = imu["t"]
                if not isinstance(it, (int, float)) or isinstance(it, bool) or not math.isfinite(it):
                    bad.append(f"seq {m.get('seq')}: imu.t is {it!r}, not a finite number")
                timed += 1
            if bad:
                break
        p = self.proxy
        refused = sum(p.daemon_errors.values())
        evidence = "; ".join(bad) or (
            f"{len(states)} states: imu with orientation_xyzw f64[4], angular_velocity f64[3], linear_acceleration "
            f"f64[3], finite; imu.t in {timed}"
        )
        if refused:
            evidence += f"; the daemon refused {refused} states (last: {p.last_daemon_error})"
        self.check("imu fields", not bad and bool(states), evidence)

    def _check_imu_time(self) -> None:
        """The IMU's time (``imu.t``, else the state's ``t``) never after the state's, at most the daemon's
        :data:`MAX_IMU_AGE` before it, and never going back."""
        bad: list[str] = []
        ages: list[float] = []
        previous = -math.inf
        for s in self.proxy.states():
            m, imu = s.message, s.message.get("imu")
            t = m.get("t")
            if not isinstance(imu, dict) or not isinstance(t, (int, float)):
                continue
            it = imu.get("t", t)
            if not isinstance(it, (int, float)) or isinstance(it, bool) or not math.isfinite(it):
                bad.append(f"seq {m.get('seq')}: imu.t is {it!r}")
                break
            age = float(t) - float(it)
            ages.append(age)
            if age < -1e-9:
                bad.append(f"seq {m.get('seq')}: the IMU sampled {-age * 1e3:.3f} ms after the state's t")
            elif age > MAX_IMU_AGE:
                bad.append(f"seq {m.get('seq')}: the IMU sampled {age * 1e3:.3f} ms before the state's t")
            elif it < previous:
                bad.append(f"seq {m.get('seq')}: imu.t went back by {(previous - it) * 1e3:.3f} ms")
            previous = max(previous, float(it))
            if bad:
                break
        self.check(
            "imu time",
            not bad and bool(ages),
            "; ".join(bad)
            or f"{len(ages)} readings: sampled {np.median(ages) * 1e3:.3f} ms (median), at most "
            f"{max(ages) * 1e3:.3f} ms before the state's t (bound {MAX_IMU_AGE * 1e3:g} ms), never going back",
        )

    def _check_imu_frozen(self) -> None:
        """No gyro and accelerometer reading repeated exactly :data:`MAX_IMU_REPEATS` times in a row while the driver's
        clock advanced and its joints moved. A simulated robot repeats its reading legitimately when it is held still
        with its clock stopped, or when its joints' q and qd repeat exactly too (a noise-free simulation at rest):
        those count apart (the daemon's estimator, which counts them too, may then stop the robot: its verdict is
        evidence)."""
        longest = stopped = run = held = 0
        at = None
        previous: tuple[float, bytes, bytes] | None = None
        for s in self.proxy.states():
            m, imu = s.message, s.message.get("imu")
            t = m.get("t")
            if not isinstance(imu, dict) or not isinstance(t, (int, float)):
                continue
            gyro, accel = _array(imu, "angular_velocity"), _array(imu, "linear_acceleration")
            if gyro is None or accel is None:
                continue
            reading = gyro.tobytes() + accel.tobytes()
            q, qd = _array(m, "q"), _array(m, "qd")
            joints = b"" if q is None or qd is None else q.tobytes() + qd.tobytes()
            if previous is not None and t > previous[0] and not (joints and joints == previous[2]):
                run = run + 1 if reading == previous[1] else 0
                if run > longest:
                    longest, at = run, m.get("seq")
            elif previous is not None:
                held = held + 1 if reading == previous[1] else 0
                stopped = max(stopped, held)
            previous = (float(t), reading, joints)
        reasons = self._daemon_imu_reasons
        self.check(
            "imu not frozen",
            longest < MAX_IMU_REPEATS,
            f"the longest exact repeat of one reading while the clock advanced: {longest} (bound "
            f"{MAX_IMU_REPEATS - 1}{f', ending at seq {at}' if longest else ''}), with the clock stopped or the "
            f"joints at rest {stopped}; "
            "the daemon " + (f"stopped: {reasons[0]}" if reasons else "never stopped on the IMU"),
        )

    def _note_daemon_reason(self) -> None:
        """Keep the daemon's reason when its estimator stopped the robot on the IMU (stale or not finite)."""
        try:
            reason = str(self.status().get("reason", ""))
        except (TimeoutError, IdControlError):
            return
        if reason.startswith("estimate not trustworthy") and "IMU" in reason and reason not in self._daemon_imu_reasons:
            self._daemon_imu_reasons.append(reason)

    def _check_period(self, states: list[Seen]) -> None:
        at = np.array([s.at for s in states])
        if at.size < 100:
            self.check("period and jitter", False, f"only {at.size} states in 2 s of run")
            return
        intervals = np.diff(at)
        mean, p50 = float(intervals.mean()), float(np.median(intervals))
        jitter = np.abs(intervals - self.dt) * 1e6
        late = sum(1 for s in states if s.message.get("last_late"))
        rtts = [s.message["last_rtt_us"] for s in states if isinstance(s.message.get("last_rtt_us"), (int, float))]
        # the period itself (p50), and few skipped boundaries (mean); the jitter and misses are evidence: a loaded
        # machine makes them worse without the driver being wrong
        ok = abs(p50 - self.dt) < 0.05 * self.dt and abs(mean - self.dt) < 0.1 * self.dt
        self.check(
            "period and jitter",
            ok,
            f"{at.size} states in {at[-1] - at[0]:.2f} s: interval mean {mean * 1e6:.1f} µs, p50 "
            f"{p50 * 1e6:.1f} µs (period {self.dt * 1e6:.0f}); |jitter| p50 {np.percentile(jitter, 50):.0f} "
            f"p99 {np.percentile(jitter, 99):.0f} max {jitter.max():.0f} µs; driver-reported late "
            f"{late} ({100 * (1 - late / at.size):.2f} % on deadline), round trip p50 "
            f"{np.median(rtts) if rtts else math.nan:.0f} µs (through the proxy)",
        )

    def _after(self, seq: int, n: int = 2, timeout: float = 1.0) -> list[dict[str, Any]]:
        """The driver's next ``n`` states after the state ``seq`` (in the same session)."""

        def later() -> list[dict[str, Any]]:
            return [
                s.message
                for s in self.proxy.states()
                if isinstance(s.message.get("seq"), int) and s.message["seq"] > seq
            ][:n]

        self.wait(lambda: len(later()) >= n, timeout)
        return later()

    def _inject(self, fault: str, count: int = 1) -> list[int]:
        p = self.proxy
        before = len(p.affected)
        p.set_fault(fault, count)
        self.wait(lambda: len(p.affected) >= before + max(count, 1), 2.0, 0.0005)
        return p.affected[before:]

    def _late_once(self) -> None:
        rows = []
        for _ in range(5):
            time.sleep(0.1)
            seqs = self._inject("drop")
            if not seqs:
                rows.append((None, None, None))
                continue
            nxt = self._after(seqs[0], 2)
            first = nxt[0] if nxt else {}
            second = nxt[1] if len(nxt) > 1 else {}
            rows.append(
                (
                    bool(first.get("last_late")) and "last_rtt_us" not in first,
                    bool(second.get("last_late")),
                    bool(first.get("bridge_stopped")),
                )
            )
        flagged = sum(1 for r in rows if r[0])
        again = sum(1 for r in rows if r[1])
        stopped = any(r[2] for r in rows)
        self.check(
            "late command (reuse once)",
            flagged == 5 and again <= 3 and not stopped,
            f"5 commands withheld: the next state said last_late (without last_rtt_us) {flagged}/5, the one "
            f"after it {again}/5 (a second late period), bridge_stopped {'seen' if stopped else 'never'}",
        )

    def _error_replies(self) -> None:
        flagged, alive = 0, True
        for fault in ("error", "error", "error", "error_noseq"):
            time.sleep(0.1)
            seqs = self._inject(fault)
            nxt = self._after(seqs[0], 3) if seqs else []
            if fault == "error" and nxt and nxt[0].get("last_late"):
                flagged += 1
            alive = alive and len(nxt) == 3 and not any(m.get("bridge_stopped") for m in nxt)
        alive = alive and self.driver_alive()
        self.check(
            "error replies",
            flagged == 3 and alive,
            f"an error with the state's seq in place of its command: next state last_late {flagged}/3; an "
            f"error without seq: ignored; the driver {'kept its period' if alive else 'stopped or died'}",
        )

    def _reconnect(self) -> None:
        p = self.proxy
        time.sleep(0.1)
        hellos = len(p.hellos)
        refused = p.refused_hellos
        t0 = time.perf_counter()
        p.rotate_credential()
        ok = self.wait(lambda: len(p.hellos) > hellos, 2.0, 0.0005)
        took = (time.perf_counter() - t0) * 1e3
        resumed = ok and self.wait(lambda: len(p.states(p.hellos[-1].at)) > 20, 2.0)
        self.check(
            "reconnect with a new credential",
            ok and resumed,
            f"after unauthorized (a restarted daemon's new credential) a hello with the new one "
            f"{f'came in {took:.1f} ms' if ok else 'never came'} ({p.refused_hellos - refused} with the old "
            f"one refused), states {'resumed' if resumed else 'did not resume'}",
        )

    def _late_run(self, since: float) -> tuple[int | None, int]:
        """(seq of the first bridge_stopped state sent after ``since``, the consecutive last_late states ending
        there, counted over every state before it: late periods may have begun before ``since``)."""
        states = self.proxy.states()
        for i, s in enumerate(states):
            if s.at >= since and s.message.get("bridge_stopped"):
                run = 0
                for j in range(i, -1, -1):
                    if not states[j].message.get("last_late"):
                        break
                    run += 1
                return s.message.get("seq"), run
        return None, 0

    def _stop_after_20(self) -> None:
        p = self.proxy
        time.sleep(0.2)
        since = time.perf_counter()
        p.set_fault("drop", -1)
        self.wait(lambda: any(s.message.get("bridge_stopped") for s in p.states(since)), 1.0, 0.0005)
        p.set_fault("")
        messages = [s.message for s in p.states(since)]
        first, run = self._late_run(since)
        left = self.wait_mode(("stopped",), 5.0)
        self.admin.start()
        restarted = time.perf_counter()
        time.sleep(max(0.2, 40 * self.dt))
        after = [s.message for s in p.states(restarted)][20:]  # (the first answers may still be to the old stop)
        cleared = bool(after) and not any(m.get("bridge_stopped") for m in after)
        self.check(
            "stop after 20 late",
            first is not None and run == LATE_LIMIT and left and cleared,
            (
                f"commands withheld: bridge_stopped came with the {run}th late command in a row"
                if first is not None
                else f"commands withheld for {len(messages)} periods: no bridge_stopped"
            )
            + f"; the daemon {'stopped' if left else 'did not stop'}; after a new start bridge_stopped "
            f"{'cleared' if cleared else 'still set or no states'}",
        )

    def _watchdog(self) -> None:
        p = self.proxy
        time.sleep(0.2)
        trips = self.status()["watchdog_trips"]
        since = time.perf_counter()
        p.set_fault("silence")
        self.wait(lambda: any(s.message.get("bridge_stopped") for s in p.states(since)), 1.0, 0.0005)
        time.sleep(0.01)
        p.set_fault("")
        silent = p.states(since)
        first, run = self._late_run(since)
        gaps = np.diff([s.at for s in silent]) * 1e3 if len(silent) > 1 else np.array([math.inf])
        self.wait_mode(("stopped",), 5.0)
        tripped = self.status()["watchdog_trips"] > trips
        self.admin.start()
        time.sleep(0.2)
        ok = first is not None and run == LATE_LIMIT and float(np.median(gaps)) < 1.5e3 * self.dt
        self.check(
            "watchdog (a silent daemon)",
            ok,
            f"daemon silent: the driver kept sending (interval median {np.median(gaps):.2f} ms, max "
            f"{gaps.max():.2f} ms) and stopped on its own with the {run}th late command in a row; the "
            f"daemon's own watchdog {'tripped' if tripped else 'did not trip'}",
        )

    def _safe_stop_on_stop(self) -> None:
        p = self.proxy
        time.sleep(0.2)
        since = time.perf_counter()
        self.admin.request("stop", reason="conformance")
        stopped = self.wait_mode(("stopped",), 5.0)
        held_from = time.perf_counter()
        time.sleep(0.3)
        during = p.states(since)
        held = [j for s in p.states(held_from) if (j := self._joints(s.message)) is not None]
        gaps = np.diff([s.at for s in during]) * 1e3 if len(during) > 1 else np.array([math.inf])
        moved = float(np.abs(np.array(held) - held[0]).max()) if len(held) > 1 else math.inf
        ok = stopped and float(gaps.max()) < max(20.0, 25e3 * self.dt) and moved < 1e-3
        self.check(
            "safe stop on stop",
            ok,
            f"through safe_stop to stopped the driver kept sending (largest gap {gaps.max():.1f} ms); "
            f"stopped: joints moved {moved:.1e} rad in 0.3 s (held still)",
        )
        self.admin.start()
        time.sleep(0.3)

    def _safe_stop_on_shutdown(self) -> None:
        p = self.proxy
        since = time.perf_counter()
        self.admin.request("shutdown")
        try:
            code = self.daemon.wait(timeout=10)
        except subprocess.TimeoutExpired:
            code = None
        gone = time.perf_counter()
        self.wait(lambda: any(s.message.get("bridge_stopped") for s in p.states(gone)), 2.0, 0.001)
        time.sleep(0.05)
        first, run = self._late_run(since)
        during = p.states(since)
        alive = self.driver_alive()
        ok = code == 0 and first is not None and run == LATE_LIMIT and alive and len(during) > 0
        self.check(
            "safe stop on daemon shutdown",
            ok,
            f"the daemon safe-stopped and exited ({code}); the driver kept its period, stopped on its own "
            f"with the {run}th late command in a row once the daemon was gone, and "
            f"{'is still running' if alive else 'exited'}",
        )

    def _sigterm(self) -> None:
        if not self.driver_alive():
            self.check("exit on SIGTERM", False, f"the driver had already exited ({self.driver.returncode})")
            return
        os.killpg(self.driver.pid, signal.SIGTERM)
        try:
            code = self.driver.wait(timeout=5)
        except subprocess.TimeoutExpired:
            code = None
        report = self.driver_report()
        self.check(
            "exit on SIGTERM",
            code == 0,
            f"exit code {code} within 5 s"
            + (f"; its report: {report['states_sent']} states, {report['late_commands']} late" if report else ""),
        )

    def driver_report(self) -> dict[str, Any] | None:
        """The driver's own report, if it printed one (a line ``{"bridge": {...}}``); the whole line is kept in
        :attr:`driver_output`."""
        self.driver_out.flush()
        for line in reversed((self.dir / "driver.out").read_text(errors="replace").splitlines()):
            if line.startswith("{"):
                try:
                    self.driver_output = json.loads(line)
                except json.JSONDecodeError:
                    return None
                return self.driver_output.get("bridge")
        return None

    def _check_seq(self) -> None:
        bad = []
        last: dict[int, int] = {}
        count = 0
        for s in self.proxy.states():
            seq = s.message.get("seq")
            if not isinstance(seq, int) or isinstance(seq, bool) or not 0 <= seq < 2**64:
                bad.append(f"seq {seq!r} not a uint64")
                continue
            count += 1
            if s.session in last and seq <= last[s.session]:
                bad.append(f"seq {seq} after {last[s.session]}")
            last[s.session] = seq
        self.check(
            "seq monotonic",
            not bad and count > 0,
            "; ".join(bad[:5]) or f"{count} states in {len(last)} session(s), each strictly increasing",
        )


def run_conformance(
    command: list[str],
    bridge_kind: str = "mujoco",
    json_path: str | None = None,
    priority: int = 0,
    rate_hz: float = 1000.0,
    state_form: str = "full",
    workdir: Path | None = None,
) -> int:
    """Run the suite on ``command``; print each obligation; 0 when all pass, 1 otherwise.

    priority : SCHED_FIFO priority for the daemon and the driver (the proxy one above), 0: normal scheduling.
    On a loaded machine the period, late-command and units checks need it (a driver at normal priority there
    misses its deadlines for want of a CPU, and the suite says so).
    rate_hz : the daemon's control rate; the driver must take its period from the daemon's ``welcome`` (or from
    the launch file ``{launch}``). The obligations do not depend on the rate; a slower one tests them on a
    machine too loaded to keep 1 kHz.
    state_form : what the daemon expects: ``"full"`` (the base in ``q``, ``qd``) or ``"sensors"`` (it estimates the
    base; the driver must send the sensor form, and the IMU's obligations are checked too).
    workdir : where the run's files stay (launch files, the daemon's and the driver's output); default: a temporary
    folder, removed after the run."""
    if not command:
        raise IdControlError("give the driver's command after --: idcontrol conformance -- COMMAND {endpoint}")
    print(f"idcontrol conformance: {' '.join(command)}", flush=True)
    suite = Suite(
        command,
        bridge_kind,
        log=lambda line: print(line, flush=True),
        priority=priority,
        rate_hz=rate_hz,
        state_form=state_form,
        workdir=workdir,
    )
    checks = suite.run()
    failed = [c for c in checks if not c.passed]
    print(f"{len(checks) - len(failed)} passed, {len(failed)} failed")
    if json_path:
        Path(json_path).write_text(jsontext.dumps([c.__dict__ for c in checks], indent=1) + "\n")
    return 0 if checks and not failed else 1
