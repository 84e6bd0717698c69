"""The daemon: ZeroMQ I/O around :class:`~idcontrol.control.core.ControlCore`.

Sockets (docs/protocol.md):

* control — ROUTER, bound; each bridge connects a DEALER and sends ``state``
  (and once ``hello``); every state is answered with a ``command`` carrying
  the same ``seq``, or with an ``error``;
* admin — REP, bound: ``status``, ``stats``, ``start``, ``stop``,
  ``set_formulation``, ``set_gains``, ``set_reference``, ``reset_stats``,
  ``shutdown``;
* telemetry — XPUB, bound: one ``telemetry`` record per answered state while a subscriber listens (the
  record is built only for a subscriber or the log);
* reference (optional) — SUB, bound: ``reference`` messages from the user's
  own planner, used by the ``stream`` reference.

The bridge is the clock master: the daemon never sleeps to keep time, it
answers states as they come. Control messages are served before admin
requests, and admin requests are served between ticks, so a formulation
switch never costs a tick. SIGINT/SIGTERM start a safe stop; the daemon
answers with damping commands until the robot is at rest (or the safe-stop
timeout passes) and then exits.
"""

from __future__ import annotations

import contextlib
import gc
import logging
import math
import os
import signal
import time
from typing import Any

import zmq
from zmq.utils.monitor import recv_monitor_message

from idcontrol import protocol as wire
from idcontrol.control.core import Command, ControlCore
from idcontrol.control.modes import MODE_IDLE, MODE_RUN, MODE_STOPPED
from idcontrol.daemon.endpoints import bind, ready_line
from idcontrol.daemon.stats import TickStats
from idcontrol.daemon.warmth import TickWarmer
from idcontrol.errors import ConfigError, IdControlError, InputError, InvalidTransition, ProtocolError, UnknownName
from idcontrol.logs import schema
from idcontrol.logs.recorder import LogRecorder
from idcontrol.logs.snapshot import pack_snapshot
from idcontrol.protocol import RobotShape, StateMessage
from idcontrol.realtime import rt_rest_fraction, spin_until_readable, wait_readable
from idcontrol.security import READ_ONLY_REQUESTS, Credential, KeyDirectory
from idcontrol.settings import Endpoints

log = logging.getLogger("idcontrol.daemon")
#: admin requests that change what the core computes; logged so that replay applies them at the same tick
LOGGED_REQUESTS = ("start", "stop", "set_formulation", "set_gains", "set_reference")
#: while a telemetry subscriber listens, its socket's subscriptions are read every this many ticks
TELEMETRY_CHECK_TICKS = 50
#: ... and while none listens, every this many ticks (a new subscriber's first record waits at most that long)
TELEMETRY_IDLE_CHECK_TICKS = 10
#: subscription changes read from the telemetry socket at one check at most (200 000 read at once stalled 2 s)
MAX_SUBSCRIPTION_CHANGES = 256
#: distinct telemetry topics tracked at most besides "" (records go to every subscriber while one is tracked)
MAX_TELEMETRY_TOPICS = 64
#: subscription messages a telemetry subscriber may have queued at the daemon: ZeroMQ adds the queued ones to its
#: subscription table in the daemon's thread whenever the socket is used, so a flood costs each use this many at most
TELEMETRY_RCVHWM = 64


class RateLimitedLog:
    """At most one line per key per ``interval`` seconds, with the count of suppressed ones."""

    def __init__(self, interval: float = 1.0) -> None:
        self.interval = interval
        self._last: dict[str, float] = {}
        self._suppressed: dict[str, int] = {}

    def warning(self, key: str, text: str) -> None:
        now = time.monotonic()
        if now - self._last.get(key, -1e9) >= self.interval:
            extra = self._suppressed.pop(key, 0)
            log.warning("%s%s", text, f" ({extra} similar suppressed)" if extra else "")
            self._last[key] = now
        else:
            self._suppressed[key] = self._suppressed.get(key, 0) + 1


class TokenBucket:
    """At most ``rate`` takes a second on average, ``burst`` at once: the work granted to peers without a
    session (a stranger's flood costs the control loop a bounded share of its time)."""

    def __init__(self, rate: float, burst: float) -> None:
        self.rate, self.burst = rate, burst
        self._tokens, self._at = burst, time.monotonic()

    def take(self, now: float) -> bool:
        """Whether one unit of work may be done now (and take it)."""
        self._tokens = min(self.burst, self._tokens + (now - self._at) * self.rate)
        self._at = now
        if self._tokens >= 1.0:
            self._tokens -= 1.0
            return True
        return False


class Daemon:
    """Serve one :class:`ControlCore` on ZeroMQ sockets until shut down.

    watchdog : run mode safe-stops when no state arrives for this long, s (default 20 ms).
    lockstep_watchdog : the same for a bridge that announced a lock-step clock in its ``hello``
        (a simulator that steps only on commands may run slower than real time), s.
    shutdown_timeout : on shutdown, the longest wait for the safe stop to finish, s.
    curve : a CURVE key directory: every socket authenticates its peers (required beyond loopback).
    """

    #: Control messages read per loop iteration at most: a flood cannot starve the admin channel.
    MAX_BATCH = 256
    #: Control messages of peers without a session decoded and answered per second at most (and at once): the
    #: rest are dropped undecoded (``stats.foreign_unread``), so a stranger's flood costs the loop a bounded time.
    FOREIGN_RATE, FOREIGN_BURST = 1000.0, 100.0
    #: Reference messages read per loop iteration at most; of those, the newest authorized one is used.
    MAX_REFERENCE_BATCH = 16

    def __init__(
        self,
        core: ControlCore,
        endpoints: Endpoints | None = None,
        *,
        watchdog: float = 0.020,
        lockstep_watchdog: float = 1.0,
        shutdown_timeout: float = 1.0,
        context: zmq.Context | None = None,
        curve: KeyDirectory | None = None,
        logger: LogRecorder | None = None,
        spin_us: float = 0.0,
        credential: Credential | None = None,
        shadow: ControlCore | None = None,
    ) -> None:
        self.core = core
        self.spin_s = spin_us * 1e-6  # poll without sleeping this long before the next state of a live run is due
        self._rest_s = rt_rest_fraction() * core.dt if spin_us else 0.0  # ... but block this long every period
        self.logger = logger  # tick log (idcontrol.logs): records queued, never waited on
        self.endpoints = endpoints or Endpoints()
        self.endpoints.check(curve=curve is not None)
        if not watchdog > 0:
            raise ConfigError(f"watchdog must be > 0 s, got {watchdog}")
        self.realtime_watchdog = watchdog
        self.lockstep_watchdog = max(watchdog, lockstep_watchdog)
        self.watchdog = watchdog  # the active peer's
        self._lockstep_peers: set[bytes] = set()
        self.shutdown_timeout = shutdown_timeout
        robot = core.robot
        self.shape = RobotShape(
            robot=robot.name,
            nq=robot.nq,
            nv=robot.nv,
            joint_names=tuple(robot.actuated_joints),
            contact_names=tuple(robot.sphere_names),
            object_names=core.object_names,
        )
        # ticks a core built like ``core`` in the spin before the next state, codec included (needs spin_us)
        self.warmer = TickWarmer(shadow, self.shape) if shadow is not None else None
        self.stats = TickStats(core.dt)
        self.rate_log = RateLimitedLog()
        self._foreign_budget = TokenBucket(self.FOREIGN_RATE, self.FOREIGN_BURST)
        self._ctx = context or zmq.Context.instance()
        self._sockets: list[zmq.Socket] = []
        self.curve = curve
        self._auth = curve.start_authenticator(self._ctx) if curve is not None else None
        self.credential: Credential | None = None  # written once the endpoints are bound (below)
        self.watchdog_trips = 0
        self.last_watchdog_gap_ms = float("nan")  # no state for this long when the watchdog last tripped
        self.bound: dict[str, str] = {}
        self._connections: zmq.Socket | None = None
        self.control = self._socket(zmq.ROUTER, self.endpoints.control, "control")
        self.control.setsockopt(zmq.ROUTER_MANDATORY, 0)
        # the control socket's connections opening and closing, by file descriptor: a session is bound to its
        # routing id and to the connection that opened it, and ends when that connection closes
        self._connections = self.control.get_monitor_socket(zmq.EVENT_ACCEPTED | zmq.EVENT_DISCONNECTED)
        self.admin = self._socket(zmq.REP, self.endpoints.admin, "admin")
        self.telemetry = None
        if self.endpoints.telemetry:
            # XPUB: a PUB that also hands up its subscriptions, so that no record is built for nobody
            # a slow subscriber loses records, never stalls the tick; a subscription flood queues a bounded number
            self.telemetry = self._socket(
                zmq.XPUB, self.endpoints.telemetry, "telemetry", {zmq.SNDHWM: 1000, zmq.RCVHWM: TELEMETRY_RCVHWM}
            )
        self._telemetry_topics: set[bytes] = set()  # what the telemetry subscribers subscribed to
        self._telemetry_check_in = 0  # ticks until the subscriptions are read again
        self.reference = None
        if self.endpoints.reference:
            # a flood queues at most this many messages per publisher (the rest wait in, or are dropped by, its PUB)
            self.reference = self._socket(
                zmq.SUB, self.endpoints.reference, "reference", {zmq.RCVHWM: self.MAX_REFERENCE_BATCH}
            )
            self.reference.setsockopt(zmq.SUBSCRIBE, b"")
        # without CURVE keys, a client commands only with this daemon's credential (docs/protocol.md); written
        # only now, so a daemon that cannot bind never replaces the credential of the one serving its endpoint
        # (keyed by the configured endpoint, which clients read from the same launch file; by the bound one when
        # the port was a wildcard)
        if curve is None:
            control = self.endpoints.control
            self.credential = credential or Credential.create(self.bound["control"] if "*" in control else control)
        self.poller = zmq.Poller()
        for s in (self.control, self.admin, self.reference, self._connections):
            if s is not None:
                self.poller.register(s, zmq.POLLIN)
        self._peer: bytes | None = None  # the one client that commands (it said hello with the credential)
        self._peer_fd = -1  # the file descriptor of its connection (ZeroMQ's SRCFD of its hello)
        self._peer_chose_id = False  # it set its own routing id (ZeroMQ's are 5 bytes, the first 0, never reused)
        self._peer_heard = -1e9  # monotonic s of its last hello or state
        self._lockstep = False  # the session's clock: a lock-step simulator, or real time
        self._last_seq = -1
        self._last_state_time = -1e9  # monotonic s
        self._state_received_at = -1e9  # perf_counter s
        self._state_answered_at = -1e9  # monotonic s of the last answered state (not reset by a start)
        self._rejected, self._rejected_code = 0, ""  # the session's states refused since the last one answered
        self._last_t = float("nan")
        self._labelled_ids: tuple | None = None
        self._labels: list[str] = []
        self._shutdown_requested = False
        self._shutdown_deadline = float("inf")
        self.running = False

    def _socket(self, kind: int, endpoint: str, name: str, options: dict[int, int] | None = None) -> zmq.Socket:
        """A socket of ``kind`` bound at ``endpoint``; ``options`` are set before the bind (ZeroMQ gives the
        connections it accepts the options the socket had when bound)."""
        s = self._ctx.socket(kind)
        s.setsockopt(zmq.LINGER, 0)
        for option, value in (options or {}).items():
            s.setsockopt(option, value)
        # a message over the size limit is answered too_large unread; ZeroMQ drops the connection of a far larger one
        s.setsockopt(zmq.MAXMSGSIZE, wire.MAX_RECEIVED_BYTES)
        if self.curve is not None:
            self.curve.make_server(s)
        try:
            bind(s, endpoint, name)
        except ConfigError:
            s.close()
            self.close()
            raise
        self._sockets.append(s)
        self.bound[name] = s.getsockopt_string(zmq.LAST_ENDPOINT)  # the real port when bound to ":*"
        return s

    # ------------------------------------------------------------------ lifecycle
    def request_shutdown(self, reason: str = "shutdown requested") -> None:
        """Safe-stop (if running), then exit :meth:`serve` once stopped or after ``shutdown_timeout``."""
        if not self._shutdown_requested:
            log.info("shutting down: %s", reason)
        self._shutdown_requested = True
        now = time.monotonic()
        self._shutdown_deadline = min(self._shutdown_deadline, now + self.shutdown_timeout)
        self.core.stop(reason, now)
        self._log_event("stop", now, reason=reason)

    def serve(self, install_signal_handlers: bool = True) -> None:
        """Run the loop until shutdown. Signal handlers are installed when called from the main thread."""
        if install_signal_handlers:
            for sig in (signal.SIGINT, signal.SIGTERM):
                signal.signal(sig, lambda signum, _frame: self.request_shutdown(signal.Signals(signum).name))
        self.core.warm_up()
        if self.warmer is not None:
            self.warmer.warm_up()
        gc.collect()
        gc.freeze()  # start-up objects never get scanned again: shorter collector pauses in the loop
        self.running = True
        log.info("%s", ready_line(self.shape.robot, self.core.formulation_name, self.bound))
        try:
            while True:
                if self.spin_s and time.monotonic() - self._last_state_time < 2.0 * self.core.dt:
                    self._wait_for_next_state()  # a live bridge
                events = dict(self.poller.poll(self._poll_timeout_ms()))
                if self.control in events:
                    self._serve_control()
                if self.reference is not None and self.reference in events:
                    self._serve_reference()
                if self.admin in events:
                    self._serve_admin()
                if self._connections in events:
                    self._follow_connections()
                self._check_watchdog()
                if self._shutdown_requested and (
                    self.core.mode in (MODE_STOPPED, MODE_IDLE) or time.monotonic() > self._shutdown_deadline
                ):
                    break
        finally:
            self.running = False
            if self.logger is not None:
                self.logger.close(self.summary())
            self.close()
            if self.warmer is not None:
                log.info("%s", self.warmer.describe())
            log.info("daemon stopped (%s)", self.core.reason)

    def _wait_for_next_state(self) -> None:
        """Sleep on the control socket until ``spin_s`` before the next state is due, then poll it without
        sleeping until the state comes or ``spin_s`` past its due time (admin requests wait that long). With a
        warmer, its shadow ticks first, while they end before the state is due."""
        due = self._state_received_at + self.core.dt
        now = time.perf_counter()
        rest = max(due - self.spin_s - now, self._rest_s)
        if not wait_readable(self.control, rest):
            if self.warmer is not None:
                self.warmer.warm(self.control, self.core, due)
            spin_until_readable(self.control, due + self.spin_s)

    #: The watchdog trips this much before its period ends, counted from the last state's arrival, so that the safe
    #: stop is not late for the loop's reaction (s); less than a state's way from the bridge's send to the daemon,
    #: so that it never comes before the watchdog time counted from the send.
    WATCHDOG_GUARD_S = 0.00005

    def _watchdog_expiry(self) -> float:
        """Monotonic s at which run mode stops for want of a state."""
        return self._last_state_time + self.watchdog - self.WATCHDOG_GUARD_S

    def _poll_timeout_ms(self) -> int:
        """Wait at most a quarter of the watchdog, and in run mode not past the watchdog's expiry (the last
        millisecond before it is polled without waiting)."""
        timeout_ms = max(1, int(self.realtime_watchdog * 1000 / 4))
        if self.core.mode == MODE_RUN:
            remaining_ms = (self._watchdog_expiry() - time.monotonic()) * 1e3
            timeout_ms = min(timeout_ms, max(0, math.floor(remaining_ms)))
        return timeout_ms

    def close(self) -> None:
        """Close every socket; the admin socket lingers briefly so the reply to ``shutdown`` still leaves."""
        if self._connections is not None:
            with contextlib.suppress(zmq.ZMQError):
                self.control.disable_monitor()
            self._connections.close(linger=0)
            self._connections = None
        for s in self._sockets:
            s.close(linger=200 if s is self.admin else 0)
        self._sockets.clear()
        for endpoint in self.bound.values():  # ZeroMQ leaves an ipc:// socket's file behind
            if endpoint.startswith("ipc://"):
                with contextlib.suppress(OSError):
                    os.unlink(endpoint[len("ipc://") :])
        if self._auth is not None:
            self._auth.stop()
            self._auth = None
        if self.credential is not None:
            self.credential.remove()

    # ------------------------------------------------------------------ control channel
    def _serve_control(self) -> None:
        """Answer the session's newest pending state (older ones are stale: the bridge has moved on). A state
        of a peer without the session never displaces the session's: such peers' messages are decoded and
        answered within :attr:`FOREIGN_RATE`, the rest dropped unread."""
        arrived = time.monotonic()  # the watchdog counts from here: the newest state had arrived by now or soon
        newest_state = None
        session = self._peer
        control = self.control
        fd = -1  # the connection of a message from a peer without the session
        for _ in range(self.MAX_BATCH):
            try:
                peer = control.recv(zmq.NOBLOCK)
            except zmq.Again:
                break
            frames = [peer]
            if peer == session:
                while control.get(zmq.RCVMORE):
                    frames.append(control.recv())
            elif self._foreign_budget.take(arrived):
                while control.get(zmq.RCVMORE):
                    frame = control.recv(copy=False)
                    fd = frame.get(zmq.SRCFD)
                    frames.append(frame.bytes)
            else:
                while control.get(zmq.RCVMORE):
                    control.recv()
                self.stats.foreign_unread += 1
                continue
            if len(frames) != 2:
                self._reply_frames(frames)
                continue
            raw = frames[1]
            received = time.perf_counter()
            try:
                message = wire.decode_control(raw, self.shape, estimates=self.core.estimator is not None)
                decoded = time.perf_counter()
            except ProtocolError as e:
                self._reply_error(peer, e.code, str(e), e.seq)
                continue
            if isinstance(message, dict):  # hello
                self._hello(peer, message, fd if peer != session else self._peer_fd)
                session = self._peer
                continue
            if peer != session:
                self._refuse(peer, message.seq)
                continue
            if newest_state is not None:
                self.stats.states_dropped += 1
            newest_state = (peer, message, received, decoded, raw)
        if newest_state is None:
            return
        if self._peer_chose_id:  # a routing id a stranger may reuse: has its connection closed meanwhile?
            self._follow_connections()
        if newest_state[0] == self._peer:
            self._answer(*newest_state, arrived)
        else:  # a hello later in the batch opened another session
            self._refuse(newest_state[0], newest_state[1].seq)

    def _follow_connections(self) -> None:
        """End the session when the connection that opened it has closed, or its descriptor serves a new one: a
        peer that connects later with the same routing id must say hello with the credential again. Read as the
        loop polls, and before each state of a session whose client chose its own routing id."""
        connections = self._connections
        while connections.get(zmq.EVENTS) & zmq.POLLIN:
            event = recv_monitor_message(connections)
            if self._peer is not None and event["value"] == self._peer_fd:
                log.info("the session's connection closed; a new hello opens the next")
                self._peer, self._peer_fd = None, -1

    def _refuse(self, peer: bytes, seq: int) -> None:
        """Answer the state of a peer without the session: ``busy`` while the session's client is alive, else
        ``unauthorized``."""
        if self._peer_alive(time.monotonic()):
            self._reply_error(peer, "busy", "another client commands this daemon", seq)
        else:
            self._reply_error(peer, "unauthorized", "send hello (with the daemon's credential) before states", seq)

    def _peer_alive(self, now: float, window: float | None = None) -> bool:
        """The session's client sent a hello or a state within ``window`` s (default the watchdog time: another
        client is then ``busy``)."""
        return self._peer is not None and now - self._peer_heard < (self.watchdog if window is None else window)

    @property
    def _presence_window(self) -> float:
        """s within which a driver that spoke counts as connected: the watchdog time, at least 0.1 s."""
        return max(self.watchdog, 0.1)

    def _hello(self, peer: bytes, message: dict[str, Any], fd: int) -> None:
        """Open a session for ``peer`` on its connection ``fd``: the robot must match, the credential must be
        right (without CURVE), and no other client may be commanding. The session's sequence numbers start
        afresh."""
        s = self.shape
        theirs = (message.get("robot"), message.get("nq"), message.get("nv"), message.get("nu"))
        if theirs != (s.robot, s.nq, s.nv, s.nu):
            self._reply_error(
                peer, "robot_mismatch", f"bridge has robot/nq/nv/nu {theirs}, daemon has {(s.robot, s.nq, s.nv, s.nu)}"
            )
            return
        if self.credential is not None and not self.credential.accepts(message.get("token")):
            self._reply_error(
                peer,
                "unauthorized",
                "hello needs the daemon's credential (field 'token'; see docs/protocol.md, Authorization)",
            )
            return
        now = time.monotonic()
        if peer != self._peer and self._peer_alive(now):
            self._reply_error(peer, "busy", "another client commands this daemon")
            return
        if self._peer not in (None, peer):
            log.info("a new client took over the control channel; mode %s (%s)", self.core.mode, self.core.reason)
        self._follow_connections()  # a connection that closed before this hello ends its session first
        self._peer, self._peer_fd, self._peer_heard, self._last_seq = peer, fd, now, -1
        self._peer_chose_id = not (len(peer) == 5 and peer[0] == 0)
        self._lockstep = message.get("clock") == "lockstep"
        self.watchdog = self.lockstep_watchdog if self._lockstep else self.realtime_watchdog
        self.control.send_multipart(
            [peer, wire.encode_welcome(s, self.core.dt, self.core.mode, self.core.state_form, self.core.estimator_kind)]
        )

    def _answer(
        self, peer: bytes, message: StateMessage, received: float, decoded: float, raw: bytes, arrived: float
    ) -> None:
        """Run the core on the session's ``message`` (decoded from ``raw``) and send its command;
        ``received``/``decoded``: perf_counter s when the raw state was taken from the socket and when it had been
        decoded; ``arrived``: monotonic s by which it had arrived (the watchdog counts from there)."""
        now = time.monotonic()
        self._peer_heard = now
        if message.seq <= self._last_seq:
            self._reply_error(peer, "stale_seq", f"seq {message.seq} not greater than {self._last_seq}", message.seq)
            return
        try:
            tick_started = time.perf_counter()
            out = self.core.tick(message.state, now, bridge_stopped=message.bridge_stopped)
            ticked = time.perf_counter()
        except InputError as e:  # a rejected state changes nothing: not the seq, not the watchdog
            self._reply_error(peer, "bad_state", str(e), message.seq)
            return
        except Exception as e:  # never let a bug in the tick kill the loop: stop safely and say why
            log.exception("tick failed")
            self.core.stop(f"internal error: {type(e).__name__}", now)
            self._accept(message, now, received, arrived)
            self._reply_error(peer, "internal", f"{type(e).__name__}: {e}"[: wire.MAX_STRING], message.seq)
            return
        self._accept(message, now, received, arrived)
        self.control.send_multipart([peer, wire.encode_command(message.seq, out.t, out.tau, out.mode)])
        sent = time.perf_counter()
        if self.warmer is not None:
            self.warmer.observe(message.state, raw, received)
        compute_us = (sent - received) * 1e6
        timings = out.result.timings if out.result is not None else None
        stages_us = ((decoded - received) * 1e6, (ticked - tick_started) * 1e6, (sent - ticked) * 1e6)
        self.stats.record(
            compute_us,
            message.last_rtt_us,
            timings,
            stages_us,
            message.last_late,
            mode=out.mode,
            lockstep=self._lockstep,
        )
        if out.note:
            self.rate_log.warning(out.event or "note", out.note)
        listened = self._telemetry_listened()
        if listened or self.logger is not None:
            try:
                self._publish(out, message, raw, compute_us, now, listened)
            except Exception as e:  # telemetry is for observers: a bug there must not stop the robot
                self.rate_log.warning("telemetry", f"telemetry record failed: {type(e).__name__}: {e}")
        self.stats.record_publish((time.perf_counter() - sent) * 1e6, stages_us[0], stages_us[2])

    def _accept(self, message: StateMessage, now: float, received: float, arrived: float) -> None:
        """Book an answered state: its seq (and the states the bridge skipped before it), the watchdog's clock
        (from the state's arrival: the documented 20 ms hold from the robot's point of view)."""
        if self._last_seq >= 0:
            self.stats.count_skipped(message.seq - self._last_seq - 1)
        self._last_seq = message.seq
        self._last_state_time, self._state_answered_at = arrived, now
        self._rejected = 0
        self._state_received_at = received
        self._last_t = message.state.t

    def _reply_frames(self, frames: list[bytes]) -> None:
        """Answer a control message of several frames with ``malformed``: to a REQ socket (an empty delimiter frame
        first) behind its delimiter, so that it receives the error instead of waiting for ever."""
        peer, parts = frames[0], frames[1:]
        req = parts[0] == b""
        self.stats.errors += 1
        text = f"a control message is one frame, this one had {len(parts)}" + (
            " behind an empty delimiter (a REQ socket): connect a DEALER socket" if req else ""
        )
        self.rate_log.warning("frames", f"control error malformed: {text}")
        error = wire.encode_error("malformed", text)
        self.control.send_multipart([peer, b"", error] if req else [peer, error])

    def _reply_error(self, peer: bytes, code: str, text: str, seq: int | None = None) -> None:
        self.stats.errors += 1
        if peer == self._peer:  # the session's own states, refused: the watchdog's reason says so
            self._rejected += 1
            self._rejected_code = code
        self.rate_log.warning(code, f"control error {code}: {text}")
        self.control.send_multipart([peer, wire.encode_error(code, text, seq)])

    def _check_watchdog(self) -> None:
        now = time.monotonic()
        if self.core.mode == MODE_RUN and now >= self._watchdog_expiry():
            gap_ms = (now - self._last_state_time) * 1e3
            rejected = f" ({self._rejected} rejected, the last {self._rejected_code})" if self._rejected else ""
            self.core.stop(f"watchdog: no state answered for {gap_ms:.0f} ms{rejected}", now)
            self.watchdog_trips += 1
            self.last_watchdog_gap_ms = gap_ms
            self._log_event("stop", now, reason=self.core.reason)
            log.warning("watchdog: no state answered for %.1f ms%s; safe stop", gap_ms, rejected)
        self.core.expire(now)

    # ------------------------------------------------------------------ telemetry
    def _telemetry_listened(self) -> bool:
        """Whether a telemetry subscriber listens, as of the last read of the subscriptions the socket handed
        up: read every :data:`TELEMETRY_CHECK_TICKS` ticks while one listens (for a subscriber that left, records
        go nowhere until then), every :data:`TELEMETRY_IDLE_CHECK_TICKS` while none does (a subscriber that comes
        gets its first record within that many ticks), and after each admin request, so that a tick rarely pays
        for the read (5 µs in the spinning daemon)."""
        if self.telemetry is None:
            return False
        self._telemetry_check_in -= 1
        if self._telemetry_check_in <= 0:
            self._read_subscriptions()
        return bool(self._telemetry_topics)

    def _read_subscriptions(self) -> None:
        """Take the subscription changes the telemetry socket handed up, at most
        :data:`MAX_SUBSCRIPTION_CHANGES` a call (a flood of distinct subscriptions is read over several calls, never
        in one stall), and track at most :data:`MAX_TELEMETRY_TOPICS` topics besides the empty one (which every
        telemetry reader subscribes to). XPUB hands up a topic's first subscription and its last unsubscription, a
        subscriber's also when it goes."""
        socket = self.telemetry
        if socket is None:
            return
        topics = self._telemetry_topics
        for _ in range(MAX_SUBSCRIPTION_CHANGES):
            if not socket.get(zmq.EVENTS) & zmq.POLLIN:
                break
            change = socket.recv()
            if change[:1] == b"\x01":
                if len(topics) < MAX_TELEMETRY_TOPICS or change == b"\x01":
                    topics.add(change[1:])
                else:
                    self.stats.telemetry_topics_ignored += 1
            elif change[:1] == b"\x00":
                topics.discard(change[1:])
        self._telemetry_check_in = TELEMETRY_CHECK_TICKS if self._telemetry_topics else TELEMETRY_IDLE_CHECK_TICKS

    def _publish(
        self, out: Command, message: StateMessage, raw: bytes, compute_us: float, now: float, listened: bool
    ) -> None:
        """Publish (when ``listened``) and log the tick record (:data:`idcontrol.logs.schema.TICK_FIELDS`) of the
        state ``message`` (decoded from ``raw``), after the command left. While no subscriber listens, the log gets
        the tick's snapshot (:mod:`idcontrol.logs.snapshot`), from which its writer process builds the record. The
        contact-coupling diagnostic in it follows touchdowns only on the ticks recorded: a subscriber that comes in
        the middle of a run may miss a coupled touchdown in its first two ticks."""
        labels = self._contact_labels(out.contacts.ids) if out.contacts is not None else None
        if not listened:
            snapshot = pack_snapshot(
                raw,
                out,
                compute_us=compute_us,
                now=now,
                contact_labels=labels,
                coupling=self.core.coupling(out),
                log_dropped=self.logger.dropped,
            )
            self.logger.tick(snapshot)
            return
        record = schema.tick_record(
            seq=message.seq,
            state=message.state,
            command=out,
            compute_us=compute_us,
            now=now,
            contact_labels=labels,
            last_rtt_us=message.last_rtt_us,
            bridge_stopped=message.bridge_stopped,
            last_late=message.last_late,
            crossings=message.crossings,
            coupling=self.core.coupling(out),
            truth=self._truth(message),
        )
        record["v"], record["type"] = wire.PROTOCOL_VERSION, "telemetry"
        if self.logger is not None:
            record["log_dropped"] = self.logger.dropped
        packed = wire.pack(schema.encode_tick_record(record))
        if self.logger is not None:
            self.logger.tick(packed)
        try:
            self.telemetry.send(packed, zmq.NOBLOCK)
        except zmq.Again:
            pass

    def _truth(self, message: StateMessage) -> wire.Truth | None:
        """The simulator's truth the state carried, checked (after the command left); None when it carried none or
        a malformed one (said, rate-limited: it is for the log only)."""
        if message.truth is None:
            return None
        try:
            return wire.decode_truth(message.truth, len(self.shape.contact_names))
        except ProtocolError as e:
            self.rate_log.warning("truth", f"the state's truth is left out of the record: {e}")
            return None

    def _log_event(self, kind: str, now: float, **fields: Any) -> None:
        """Record an admin change or stop among the ticks, so that replay can apply it at the same place."""
        if self.logger is not None:
            try:
                self.logger.event(kind, now, **fields)
            except Exception as e:  # the log is for observers: a failure there must not fail the request
                self.rate_log.warning("log", f"log event failed: {type(e).__name__}: {e}")

    def _contact_labels(self, ids: tuple) -> list[str]:
        """Contact labels "sphere/surface", rebuilt only when the pattern changes (the detector reuses its ids)."""
        if ids is not self._labelled_ids:
            self._labelled_ids, self._labels = ids, ["/".join(map(str, c)) for c in ids]
        return self._labels

    # ------------------------------------------------------------------ reference stream
    def _serve_reference(self) -> None:
        """Use the newest reference message that shows the daemon's credential (with CURVE keys, every one: its
        sender was authenticated), of at most :attr:`MAX_REFERENCE_BATCH` read now; the ones before it are
        superseded, and one without the credential is dropped (``stats.reference_unauthorized``)."""
        pending: list[bytes] = []
        for _ in range(self.MAX_REFERENCE_BATCH):
            try:
                pending.append(self.reference.recv(zmq.NOBLOCK))
            except zmq.Again:
                break
        for used, raw in enumerate(reversed(pending)):
            try:
                target = wire.decode_reference(raw, self.core.robot.nu)
            except ProtocolError as e:
                self.stats.errors += 1
                self.rate_log.warning("reference", f"reference message dropped: {e.code}: {e}")
                continue
            if not self._authorized(target.token):
                self.stats.reference_unauthorized += 1
                self.rate_log.warning(
                    "reference-unauthorized",
                    "reference message dropped: unauthorized (it needs "
                    "the daemon's credential, field 'token'; docs/protocol.md)",
                )
                continue
            self.stats.reference_superseded += len(pending) - used - 1
            self._use_target(target)
            return

    def _use_target(self, target: wire.ReferenceMessage) -> None:
        """Hand an authorized planner's target to the reference (clipped to the joint limits)."""
        reference = self.core.reference
        if reference.accepts_targets:
            clipped = reference.set_target(target.q_ref, target.qd_ref, target.qdd_ref)
            if clipped:
                self.stats.reference_clipped += 1
                self.rate_log.warning("reference-clipped", f"reference target clipped to the joint limits: {clipped}")
        else:
            self.rate_log.warning(
                "reference-unused",
                f"reference messages arrive but the reference is {type(reference).__name__}, not 'stream'; ignored",
            )

    # ------------------------------------------------------------------ admin channel
    def _serve_admin(self) -> None:
        raw = self.admin.recv()
        # the telemetry subscriptions as of this request, which the ticks read only every few: a subscriber that
        # came before a start gets the run's first record, and status says telemetry_listened as of now
        with contextlib.suppress(zmq.ZMQError):  # telemetry is for observers: never a reason to refuse a request
            self._read_subscriptions()
        try:
            request = wire.decode_request(raw)
            if request.kind not in READ_ONLY_REQUESTS and not self._authorized(request.token):
                raise ProtocolError(
                    "unauthorized",
                    f"{request.kind} needs the daemon's credential (field 'token'); status and stats do not",
                )
            reply = self._handle(request)
            if request.kind in LOGGED_REQUESTS:
                self._log_event(request.kind, time.monotonic(), **request.logged())
        except ProtocolError as e:
            reply = wire.encode_error(e.code, str(e))
        except UnknownName as e:
            reply = wire.encode_error("unknown_name", str(e))
        except InvalidTransition as e:
            reply = wire.encode_error("invalid_transition", str(e))
        except IdControlError as e:
            reply = wire.encode_error("bad_field", str(e))
        except Exception as e:  # a bug of ours: say so, and stop the robot as for any internal error
            log.exception("admin request failed")
            now = time.monotonic()
            self.core.stop(f"internal error in an admin request: {type(e).__name__}", now)
            self._log_event("stop", now, reason=self.core.reason)
            reply = wire.encode_error("internal", f"{type(e).__name__}: {e}"[: wire.MAX_STRING])
        self.admin.send(reply)

    def _authorized(self, token: str | None) -> bool:
        """Whether a commanding request may proceed: CURVE peers are authenticated by ZeroMQ already."""
        return self.credential is None or self.credential.accepts(token)

    def _handle(self, request: wire.AdminRequest) -> bytes:
        kind = request.kind
        core = self.core
        now = time.monotonic()
        if kind == "status":
            return wire.encode_reply(kind, **self.status())
        if kind == "stats":
            return wire.encode_reply(kind, **self.summary())
        if kind == "start":
            if not self._peer_alive(now, self._presence_window):  # a run nobody answers: a driver connecting
                # later would get torques without a start after it connected
                raise InvalidTransition(
                    f"{wire.NO_DRIVER} (none said hello or sent a state within "
                    f"{self._presence_window * 1e3:.0f} ms): start once it is"
                )
            core.start(now)
            self._last_state_time = now  # the watchdog counts from the start
            return wire.encode_reply(kind, mode=core.mode)
        if kind == "stop":
            core.stop(request.reason or "stop requested", now)
            return wire.encode_reply(kind, mode=core.mode)
        if kind == "set_formulation":
            core.set_formulation(request.name, request.options)
            return wire.encode_reply(kind, formulation=core.formulation_name)
        if kind == "set_gains":
            core.set_gains(**request.gains)
            return wire.encode_reply(kind, kp=core.gains.kp.tolist(), kd=core.gains.kd.tolist())
        if kind == "set_reference":
            updated = core.set_reference(request.name, request.options)
            if updated is None:
                return wire.encode_reply(kind, reference=request.name)
            return wire.encode_reply(kind, reference=request.name, updated=updated)
        if kind == "reset_stats":
            self.stats.reset()
            return wire.encode_reply(kind)
        if kind == "shutdown":
            self.request_shutdown("shutdown requested over admin")
            return wire.encode_reply(kind, mode=core.mode)
        raise ProtocolError("unknown_type", f"unknown request {kind!r}")  # unreachable: decode_request checks

    def status(self) -> dict[str, Any]:
        core = self.core
        now = time.monotonic()
        return {
            "robot": self.shape.robot,
            "mode": core.mode,
            "reason": core.reason,
            "formulation": core.formulation_name,
            "reference": core.reference.name,
            "t": self._last_t,
            "seq": self._last_seq,
            "ticks": self.stats.ticks,
            "deadline_misses": self.stats.deadline_misses,
            "bridge_connected": bool(now - self._state_answered_at < self._presence_window),
            "last_error": core.last_error,
            "fell": core.metrics.fell,
            "interventions": dict(core.filter.counts),
            "watchdog_trips": self.watchdog_trips,
            "last_watchdog_gap_ms": self.last_watchdog_gap_ms,
            "telemetry_listened": bool(self._telemetry_topics),
            "state_form": core.state_form,
            "estimator": core.estimator_kind,
            **(self.logger.status() if self.logger is not None else {}),
        }

    def summary(self) -> dict[str, Any]:
        core = self.core
        return {
            **self.stats.summary(),
            **core.metrics.summary(),
            "formulation": core.formulation_name,
            "torque_clips": core.clip_count,
            "solve_failures": core.fail_count,
            "mode": core.mode,
            "reason": core.reason,
            "interventions": dict(core.filter.counts),
            **(self.logger.status() if self.logger is not None else {}),
        }
