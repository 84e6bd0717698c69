"""``idcontrol fuzz``: hammer a real daemon process with malformed and hostile control messages.

The daemon runs as its own process (``idcontrol daemon`` on a launch file whose channels are ``ipc://`` sockets in
the fuzzer's own temporary folder, which no other user's process reaches; the fuzzer waits for its ready line).
One DEALER sends bursts of messages, most of them broken in one way (random bytes,
truncated or bit-flipped msgpack, wrong types, wrong lengths, NaN/inf, unknown version or type, missing fields,
duplicate, old or far-ahead sequence numbers, garbage objects, hellos for other robots or with a wrong
credential, now and then a message over the size limit, sent from a connection of its own since ZeroMQ closes
it) and some valid states, so that the controller runs too. After each burst, admin requests in the protocol's own
encodings go to the admin channel, most of them wrong in one field (gains as float64 bytes of the wrong length, strings
where numbers belong, oversized strings, unknown fields and options, a missing or wrong credential). Every
reply is checked: an ``error`` with a documented code other than ``internal``, an ``ok``, or a ``command``
whose torque is finite and within the robot's limits. Every few bursts the admin channel must answer (and a
stopped daemon is started again). A crash is the daemon process exiting or its admin channel going silent.
"""

from __future__ import annotations

import math
import os
import subprocess
import sys
import tempfile
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import msgpack
import numpy as np
import zmq

from idcontrol import jsontext
from idcontrol import protocol as wire
from idcontrol.client import AdminClient
from idcontrol.daemon.endpoints import bound_in
from idcontrol.errors import IdControlError, ProtocolError
from idcontrol.robot.model import RobotModel
from idcontrol.security import Credential

LAUNCH_TEMPLATE = """
robot = "{robot}"
[controller]
formulation = "two_stage_qp"
[reference]
name = "hold"
[endpoints]
control = "ipc://{folder}/control"
admin = "ipc://{folder}/admin"
telemetry = "ipc://{folder}/telemetry"
"""


#: how long a send may wait for the daemon to read (ms) before the daemon counts as dead or hung
SEND_TIMEOUT_MS = 2000
#: lines of the daemon's output quoted in a problem when it died or went silent
DAEMON_OUTPUT_LINES = 8

#: A message over the size limit: ZeroMQ drops it and closes that connection, so it goes on a side socket.
OVERSIZED = b"\x00" * (wire.MAX_MESSAGE_BYTES + 1)


@dataclass
class FuzzReport:
    """What a fuzz run did and found."""

    messages: int = 0  # control messages sent
    valid_states: int = 0  # of which well-formed states with a fresh seq
    admin_requests: int = 0  # admin requests sent (most of them malformed in one field)
    admin_ok: int = 0  # of which answered "ok"
    replies: int = 0
    commands: int = 0
    errors: dict[str, int] = field(default_factory=dict)  # error replies by code
    bad_replies: int = 0  # replies that are neither a documented error nor a safe command
    internal_errors: int = 0  # "internal" replies: the daemon caught a bug of its own
    crashes: int = 0  # the daemon process died or its admin channel went silent
    restarts: int = 0  # admin starts after the daemon had stopped
    reconnects: int = 0  # new sessions (hello again) after a window without commands (see run_fuzz)
    wall_s: float = 0.0
    messages_per_s: float = 0.0
    first_problems: list[str] = field(default_factory=list)


class Mutator:
    """Random control-channel messages for one robot (numpy Generator: reproducible from the seed)."""

    def __init__(self, robot: RobotModel, rng: np.random.Generator) -> None:
        self.robot, self.rng = robot, rng
        self.q = robot.standing_configuration()
        self.v = np.zeros(robot.nv)
        self.seq = 0  # the highest seq sent so far
        self.token: str | None = None  # the daemon's credential, once known

    def valid(self) -> bytes:
        self.seq += 1
        v = self.v.copy()
        v[self.robot.actuated_dofs] = 0.01 * self.rng.standard_normal(self.robot.nu)
        return wire.encode_state(self.seq, self.seq * 1e-3, self.q, v)

    def _value(self) -> Any:
        r = self.rng
        kind = int(r.integers(11))
        return [
            None,
            True,
            int(r.integers(-(2**63), 2**63 - 1)),
            2**64 - 1,
            float(r.standard_normal()),
            math.nan,
            -math.inf,
            "x" * int(r.integers(0, 20)),
            r.bytes(int(r.integers(0, 200))),
            [float(x) for x in r.standard_normal(int(r.integers(0, 30)))],
            {"position": r.bytes(24)},
        ][kind]

    def message(self) -> tuple[bytes, bool]:
        """One message and whether it is a valid state."""
        r = self.rng
        kind = int(r.integers(12))
        if kind <= 1:
            return self.valid(), True
        self.seq += 1  # every message takes a fresh seq: one accepted by accident leaves the next valid
        base = msgpack.unpackb(wire.encode_state(self.seq, 0.0, self.q, self.v), raw=False)
        if kind == 2:  # random bytes
            return r.bytes(int(r.integers(0, 300))), False
        if kind == 3:  # a field replaced by a value of a random type
            base[
                str(
                    r.choice(
                        [
                            "v",
                            "type",
                            "t",
                            "q",
                            "qd",
                            "contact_forces",
                            "objects",
                            "last_rtt_us",
                            "bridge_stopped",
                            "extra",
                        ]
                    )
                )
            ] = self._value()
        elif kind == 4:  # NaN / inf inside an array
            key = str(r.choice(["q", "qd"]))
            values = np.frombuffer(base[key], "<f8").copy()
            values[int(r.integers(values.size))] = r.choice([np.nan, np.inf, -np.inf])
            base[key] = wire.f64(values)
        elif kind == 5:  # wrong length
            key = str(r.choice(["q", "qd", "contact_forces"]))
            base[key] = r.bytes(8 * int(r.integers(0, 40)) + int(r.integers(0, 2)))
        elif kind == 6:  # envelope: version, type, a missing field
            choice = int(r.integers(3))
            if choice == 0:
                base["v"] = int(r.integers(-5, 10))
            elif choice == 1:
                base["type"] = str(r.choice(["command", "welcome", "status", "", "STATE"]))
            else:
                del base[str(r.choice(["seq", "t", "q", "qd", "v", "type"]))]
        elif kind == 7:  # sequence games: duplicate, older, a jump far ahead (accepted: later ones follow it)
            choice = int(r.integers(3))
            if choice == 2:
                self.seq += int(r.integers(2, 10**6))
            base["seq"] = [self.seq - 1, max(self.seq - int(r.integers(2, 100)), 0), self.seq][choice]
        elif kind == 8:  # truncated
            raw = msgpack.packb(base, use_bin_type=True)
            return raw[: int(r.integers(0, len(raw)))], False
        elif kind == 9:  # bit flips
            raw = bytearray(msgpack.packb(base, use_bin_type=True))
            for _ in range(int(r.integers(1, 8))):
                raw[int(r.integers(len(raw)))] ^= 1 << int(r.integers(8))
            return bytes(raw), False
        elif kind == 10:  # hello with odd fields or a wrong credential
            hello = {
                "v": 1,
                "type": "hello",
                "robot": str(r.choice([self.robot.name, "arm", ""])),
                "nq": int(r.integers(0, 40)),
                "nv": self._value(),
                "nu": 12,
                "clock": "lockstep",
            }
            hello["token"] = [self.token, "", "f" * 64, self._value()][int(r.integers(4))]
            return msgpack.packb(hello, use_bin_type=True), False
        else:  # garbage objects, quaternion not of unit norm, or (rarely) over the size limit
            choice = int(r.integers(100))
            if choice == 0:
                return OVERSIZED, False
            if choice < 50:
                base["objects"] = {str(r.choice(["box", "ghost"])): self._value()}
            else:
                q = self.q.copy()
                q[3:7] *= 1.0 + r.uniform(0.01, 10.0)
                base["q"] = wire.f64(q)
        return msgpack.packb(base, use_bin_type=True), False


class AdminMutator:
    """Random admin requests in the protocol's own encodings, most of them wrong in one field (a gain as f64
    bytes of the wrong length, a string where a number belongs, an oversized string, unknown options or
    fields, a missing or wrong credential). ``shutdown`` is only ever sent without the credential."""

    KINDS = (
        "status",
        "stats",
        "start",
        "stop",
        "set_formulation",
        "set_gains",
        "set_reference",
        "reset_stats",
        "shutdown",
    )

    def __init__(self, robot: RobotModel, rng: np.random.Generator, token: str) -> None:
        self.robot, self.rng, self.token = robot, rng, token

    def _gain(self) -> Any:
        r, nu = self.rng, self.robot.nu
        return [
            float(r.uniform(0, 2000)),
            wire.f64(r.uniform(0, 2000, nu)),
            wire.f64(r.uniform(0, 1, int(r.integers(0, 30)))),
            [float(x) for x in r.uniform(0, 100, nu)],
            r.bytes(int(r.integers(0, 100))),
            "x",
            {"a": 1},
            math.nan,
            1e308,
            -1.0,
            [1.0] * int(r.integers(0, 20)),
            True,
            None,
        ][int(r.integers(13))]

    def _option_value(self) -> Any:
        r = self.rng
        return [
            float(r.standard_normal()),
            int(r.integers(-5, 5)),
            True,
            "fast",
            "x" * int(r.integers(0, 400)),
            [1, 2],
            {"k": 1.0},
            None,
            math.inf,
            r.bytes(8),
        ][int(r.integers(10))]

    def request(self) -> bytes:
        r = self.rng
        kind = str(r.choice(self.KINDS))
        message: dict[str, Any] = {"v": 1, "type": kind}
        token_choice = int(r.integers(10))
        if kind != "shutdown" and token_choice < 7:
            message["token"] = self.token
        elif token_choice < 9:
            near = self.token[:-1] + ("1" if self.token.endswith("0") else "0")  # wrong in its last digit only
            message["token"] = r.choice(["", "0" * 64, near, "x" * int(r.integers(0, 500))])
        if kind == "stop":
            message["reason"] = [None, "fuzz", "x" * int(r.integers(0, 100_000)), 5][int(r.integers(4))]
        elif kind == "set_gains":
            for key in ("kp", "kd", "ki"):
                if r.random() < 0.6:
                    message[key] = self._gain()
        elif kind in ("set_formulation", "set_reference"):
            names = (
                ["two_stage_qp", "noslip_lcp", "coulomb_lcp", "pid", "nope", ""]
                if kind == "set_formulation"
                else ["hold", "trot", "stream", "arm_sinusoid", "nope"]
            )
            message["name"] = str(r.choice(names)) if r.random() < 0.9 else self._option_value()
            if r.random() < 0.7:
                keys = ["spread", "share_friction", "ridge", "dissipation", "forward_speed", "speed", "pose", "bogus"]
                message["options"] = {str(r.choice(keys)): self._option_value() for _ in range(int(r.integers(0, 4)))}
            elif r.random() < 0.5:
                message["options"] = self._option_value()
        if r.random() < 0.1:
            message[str(r.choice(["extra", "seq", "kp"]))] = self._option_value()
        if r.random() < 0.05:
            raw = msgpack.packb(message, use_bin_type=True)
            return raw[: int(r.integers(0, len(raw)))]
        return msgpack.packb(message, use_bin_type=True)


class ReplyChecker:
    """Checks each reply; counts outcomes into the report."""

    def __init__(self, robot: RobotModel, report: FuzzReport) -> None:
        self.limit = robot.torque_limits
        self.nu = robot.nu
        self.report = report
        self.daemon: subprocess.Popen | None = None  # the daemon process and the file its output goes to
        self.daemon_output: Path | None = None

    def crash(self, what: str) -> None:
        """Count a crash: the daemon died or went silent; ``what`` showed it, with the daemon's fate."""
        self.report.crashes += 1
        self.problem(what + self.daemon_fate())

    def daemon_fate(self) -> str:
        """'; exit code C' or '; still running', and the last lines the daemon printed."""
        if self.daemon is None:
            return ""
        code = self.daemon.poll()
        fate = "; still running" if code is None else f"; exit code {code}"
        lines: list[str] = []
        if self.daemon_output is not None:
            try:
                lines = self.daemon_output.read_text(errors="replace").strip().splitlines()[-DAEMON_OUTPUT_LINES:]
            except OSError:
                pass
        return fate + (": " + " | ".join(lines) if lines else ", nothing printed")

    def problem(self, text: str) -> None:
        if len(self.report.first_problems) < 20:
            self.report.first_problems.append(text)

    def check(self, raw: bytes) -> None:
        r = self.report
        r.replies += 1
        try:
            message = msgpack.unpackb(raw, raw=False)
            kind = message["type"]
        except Exception as e:
            r.bad_replies += 1
            self.problem(f"undecodable reply: {type(e).__name__}: {e}")
            return
        if kind == "error":
            code = message.get("code")
            r.errors[code] = r.errors.get(code, 0) + 1
            if code == "internal":
                r.internal_errors += 1
                self.problem(f"internal error: {message.get('message')}")
            elif code not in wire.ERROR_CODES:
                r.bad_replies += 1
                self.problem(f"undocumented error code {code!r}")
            return
        if kind == "welcome":
            return
        if kind == "ok":
            r.admin_ok += 1
            return
        try:
            command = wire.decode_command(raw, self.nu)
        except Exception as e:
            r.bad_replies += 1
            self.problem(f"bad command: {type(e).__name__}: {e}")
            return
        r.commands += 1
        if not (np.all(np.isfinite(command.tau)) and np.all(np.abs(command.tau) <= self.limit)):
            r.bad_replies += 1
            self.problem(f"unsafe torque {command.tau.tolist()} in mode {command.mode}")


def run_fuzz(
    messages: int, seed: int = 0, robot_name: str = "quadruped", burst: int = 64, progress: bool = True
) -> FuzzReport:
    """Send ``messages`` fuzzed control messages to a fresh daemon process; see the module docstring."""
    robot = RobotModel(robot_name)
    report = FuzzReport()
    checker = ReplyChecker(robot, report)
    mutator = Mutator(robot, np.random.default_rng(seed))
    with tempfile.TemporaryDirectory(prefix="idc-") as tmp:  # private; short: ipc paths are limited to ~100 bytes
        path = Path(tmp) / "fuzz.toml"
        path.write_text(LAUNCH_TEMPLATE.format(robot=robot_name, folder=tmp))
        env = {**os.environ, "OPENBLAS_NUM_THREADS": "1"}
        daemon_output = Path(tmp) / "daemon.log"  # what the daemon said, quoted in the report if it dies
        with daemon_output.open("wb") as sink:
            daemon = subprocess.Popen(
                [sys.executable, "-m", "idcontrol", "daemon", str(path)], env=env, stdout=sink, stderr=subprocess.STDOUT
            )
        checker.daemon, checker.daemon_output = daemon, daemon_output
        try:
            endpoint, admin_endpoint = _bound_endpoints(daemon, daemon_output, checker)
        except BaseException:
            daemon.kill()
            raise
        ctx = zmq.Context()
        dealer = _connect(ctx, endpoint)
        admin = AdminClient(admin_endpoint, timeout=5.0, context=ctx, credential_for=endpoint)
        try:
            token = Credential.of_daemon(endpoint).token
            mutator.token = token
            admin_mutator = AdminMutator(robot, np.random.default_rng(seed + 1), token)
            hello = wire.encode_hello(robot.name, robot.nq, robot.nv, robot.nu, "lockstep", token)
            if not _send(dealer, hello):
                raise IdControlError(f"the daemon does not read its control socket{checker.daemon_fate()}")
            started = time.monotonic()
            commands_at_check = 0
            last_print = started
            while report.messages < messages:
                n = min(burst, messages - report.messages)
                sent = 0
                for _ in range(n):
                    raw, valid = mutator.message()
                    if raw is OVERSIZED:
                        _send_oversized(ctx, endpoint)
                    elif not _send(dealer, raw):
                        break
                    report.valid_states += valid
                    sent += 1
                report.messages += sent
                if sent < n:  # the daemon stopped reading: it died or hangs
                    checker.crash(
                        f"the daemon stopped reading its control socket (a send waited {SEND_TIMEOUT_MS / 1e3:g} s)"
                    )
                    break
                while dealer.poll(5 if report.messages % (16 * burst) else 50):
                    checker.check(dealer.recv())
                for _ in range(max(1, n // 8)):
                    try:
                        checker.check(admin.request_raw(admin_mutator.request()))
                    except TimeoutError as e:
                        checker.crash(f"admin request unanswered: {e}")
                        break
                    report.admin_requests += 1
                if report.messages % (16 * burst) < burst:
                    if not _alive(admin, report, checker):
                        break
                    if report.commands == commands_at_check:
                        # a bit flip may have made a huge seq acceptable: every later state is stale in this
                        # session, so open a new one (its seq numbers start afresh)
                        _send(dealer, hello)
                        report.reconnects += 1
                    commands_at_check = report.commands
                if progress and time.monotonic() - last_print > 10.0:
                    last_print = time.monotonic()
                    print(
                        f"fuzz: {report.messages} messages, {report.replies} replies, {report.crashes} crashes, "
                        f"{report.bad_replies} bad replies",
                        file=sys.stderr,
                        flush=True,
                    )
            while dealer.poll(200):
                checker.check(dealer.recv())
            _alive(admin, report, checker)
            report.wall_s = time.monotonic() - started
            report.messages_per_s = report.messages / max(report.wall_s, 1e-9)
        finally:
            try:
                if daemon.poll() is None:
                    admin.request("shutdown", timeout=2.0)
                    daemon.wait(timeout=10)
            except (TimeoutError, subprocess.TimeoutExpired, IdControlError):
                daemon.kill()
            dealer.close(linger=0)
            admin.close()
            ctx.term()
    return report


def _connect(ctx: zmq.Context, endpoint: str) -> zmq.Socket:
    dealer = ctx.socket(zmq.DEALER)
    dealer.setsockopt(zmq.LINGER, 0)
    dealer.setsockopt(zmq.RCVHWM, 0)
    dealer.setsockopt(zmq.SNDTIMEO, SEND_TIMEOUT_MS)  # a daemon that stops reading must not hang the fuzzer
    dealer.connect(endpoint)
    return dealer


def _send(dealer: zmq.Socket, raw: bytes) -> bool:
    """Send ``raw``; False when the send queue stayed full for ``SEND_TIMEOUT_MS`` (nobody reads it)."""
    try:
        dealer.send(raw)
        return True
    except zmq.Again:
        return False


def _send_oversized(ctx: zmq.Context, endpoint: str) -> None:
    """One message over the size limit from a throwaway connection (ZeroMQ closes it on the daemon's side)."""
    side = ctx.socket(zmq.DEALER)
    side.setsockopt(zmq.LINGER, 200)
    side.connect(endpoint)
    side.send(OVERSIZED)
    side.close()


def _bound_endpoints(
    daemon: subprocess.Popen, output: Path, checker: ReplyChecker, timeout: float = 300.0
) -> tuple[str, str]:
    """(control, admin) endpoints from the daemon's ready line, once it has bound its sockets and warmed up.
    ``timeout`` s allows for compiling the kernels on a first start."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        found = bound_in(output.read_text(errors="replace"))
        if found:
            return found
        if daemon.poll() is not None:
            raise IdControlError(f"the daemon exited before it was ready{checker.daemon_fate()}")
        time.sleep(0.05)
    raise IdControlError(f"the daemon was not ready within {timeout:.0f} s{checker.daemon_fate()}")


def _alive(admin: AdminClient, report: FuzzReport, checker: ReplyChecker) -> bool:
    """The daemon answers status (and is started again when it has stopped); a crash is counted otherwise."""
    try:
        status = admin.request("status")
        if status["mode"] in ("idle", "stopped"):
            try:
                admin.request("start")
                report.restarts += 1
            except ProtocolError as e:  # no session alive just now (the fuzzed hellos): the next check starts it
                if e.code != "invalid_transition":
                    raise
        return True
    except (TimeoutError, IdControlError) as e:
        checker.crash(f"daemon unresponsive: {type(e).__name__}: {e}")
        return False


def main(messages: int, seed: int, robot: str, json_path: str | None) -> int:
    report = run_fuzz(messages, seed, robot)
    text = jsontext.dumps(asdict(report), indent=1)
    print(text)
    if json_path:
        Path(json_path).write_text(text + "\n")
    return 0 if report.crashes == 0 and report.bad_replies == 0 and report.internal_errors == 0 else 1
