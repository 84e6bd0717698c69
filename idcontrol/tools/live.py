"""The live view: a Foxglove WebSocket server fed from the daemon's telemetry, off the tick path.

``idcontrol live FILE [--port 8765]`` (or ``idcontrol launch FILE --foxglove [PORT]``, or ``[telemetry] foxglove =
PORT`` in the launch file) runs it as its own process, at idle CPU priority (``SCHED_IDLE``: it only gets CPU time
the daemon, the bridge and their I/O do not want): it subscribes to the daemon's telemetry socket, wakes every
1/50 s, takes every record that arrived meanwhile (each one counts in the deadline statistics), and publishes the
messages of :class:`~idcontrol.logs.foxglove.FoxgloveView` (50 Hz) on 127.0.0.1 through
:class:`~idcontrol.tools.live_server.LiveServer`, which admits browser pages only from the allowed origins and
bounds the viewers and their queues. The daemon only publishes its records as it always does; a slow viewer loses
records, it never slows the tick. ``docs/foxglove-layout.json`` is a Foxglove layout for these topics.

:class:`FoxgloveClient` is a minimal client of the Foxglove WebSocket protocol (v1), for
tests and for :func:`measure_tick_overhead`, which measures the daemon's tick with an observer on and off (the
live view, :class:`LiveViewObserver`; any telemetry client such as the ROS 2 node, :class:`ProcessObserver`).
"""

from __future__ import annotations

import json
import signal
import struct
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

import msgpack
import numpy as np
import zmq

from idcontrol.errors import ConfigError, IdControlError
from idcontrol.logs.foxglove import LIVE_RATE_HZ, FoxgloveView
from idcontrol.logs.schema import to_json
from idcontrol.settings import LaunchConfig
from idcontrol.tools.live_server import LiveServer, ViewerPolicy
from idcontrol.tools.ports import free_ports
from idcontrol.tools.processes import terminate

DEFAULT_PORT = 8765
#: Messages queued per viewer (every topic's, at the view's rate: a fraction of a second): a viewer that does not
#: read loses its oldest messages, and one whose control messages overflow the same bound is disconnected, so a
#: connection that never reads holds at most this many in the server's memory.
LIVE_BACKLOG = 128


def serve_live(
    config: LaunchConfig,
    port: int = DEFAULT_PORT,
    rate_hz: float = LIVE_RATE_HZ,
    stop: threading.Event | None = None,
    policy: ViewerPolicy | None = None,
) -> int:
    """Serve the live view of ``config``'s daemon until SIGINT/SIGTERM (or ``stop`` is set) to the viewers
    ``policy`` admits (None: the launch file's ``[telemetry]``); returns 0."""
    from idcontrol.realtime import enter_background
    from idcontrol.robot.model import RobotModel

    priority = "normal"
    if threading.current_thread() is threading.main_thread():  # a process of its own (not a test's thread)
        priority = enter_background("live view")  # before its threads start (ZeroMQ's, the server's): they inherit it

    if not config.endpoints.telemetry:
        raise ConfigError(f"{config.path}: the live view needs the daemon's telemetry endpoint ([endpoints] telemetry)")
    policy = policy or ViewerPolicy.of(config.telemetry)
    view = FoxgloveView(RobotModel(config.robot), rate_hz, clock_offset_s=time.time() - time.monotonic())
    context = zmq.Context()
    sub = context.socket(zmq.SUB)
    sub.setsockopt(zmq.LINGER, 0)
    sub.setsockopt(zmq.RCVHWM, 10_000)
    sub.setsockopt(zmq.SUBSCRIBE, b"")
    if config.curve_keys:
        from idcontrol.security import KeyDirectory

        KeyDirectory(config.curve_keys).make_client(sub)
    sub.connect(config.endpoints.telemetry)
    server = LiveServer(f"idcontrol {config.robot}", port=port, policy=policy, backlog=LIVE_BACKLOG)
    channels = {topic: server.add_channel(topic, name, data) for topic, (name, data) in view.schemas().items()}
    stop = stop or threading.Event()
    if threading.current_thread() is threading.main_thread():
        for sig in (signal.SIGINT, signal.SIGTERM):
            signal.signal(sig, lambda *_: stop.set())
    origins = ", ".join(policy.origins) + (" and programs (no Origin)" if policy.programs else "")
    print(
        f"idcontrol live view: ws://127.0.0.1:{server.port} (Foxglove: Open connection, Foxglove WebSocket); "
        f"{priority} CPU priority; at most {policy.max_viewers} viewers, from {origins}",
        file=sys.stderr,
        flush=True,
    )
    interval = 1.0 / rate_hz
    try:
        while not stop.wait(interval):  # one wake-up per message instant, however many records came
            while True:
                try:
                    raw = sub.recv(zmq.NOBLOCK)
                except zmq.Again:
                    break
                try:
                    messages = view.feed(msgpack.unpackb(raw, raw=False))
                except Exception as e:  # a record the view cannot draw: skip it, keep serving
                    print(f"idcontrol live view: record skipped ({type(e).__name__}: {e})", file=sys.stderr)
                    continue
                for topic, message, log_time in messages:
                    server.log(channels[topic], to_json(message), log_time)  # orjson: a sixth of json's time
    finally:
        server.stop()
        sub.close(linger=0)
        context.term()
        print(f"idcontrol live view: stopped; viewers {server.stats.as_dict()}", file=sys.stderr, flush=True)
    return 0


def spawn_live(launch_file: str | Path, port: int) -> subprocess.Popen:
    """Run the live view of a launch file as its own process (``python -m idcontrol live FILE --port PORT``)."""
    return subprocess.Popen(
        [sys.executable, "-m", "idcontrol", "live", str(launch_file), "--port", str(port)], start_new_session=True
    )


# ------------------------------------------------------------------------------------------------ a client
class FoxgloveClient:
    """A client of the Foxglove WebSocket protocol (v1): it subscribes to every channel the server advertises and
    counts (and keeps the last of) the messages on each topic. Runs in its own thread."""

    #: The protocol's names: foxglove-sdk's servers speak it as foxglove.sdk.v1, older servers as foxglove.websocket.v1.
    SUBPROTOCOLS = ("foxglove.sdk.v1", "foxglove.websocket.v1")

    def __init__(self, url: str, timeout: float = 10.0, background: bool = False) -> None:
        self.url = url
        self.background = background  # its thread runs at idle CPU priority, as the view does
        self.connection: Any = None
        self.channels: dict[int, dict[str, Any]] = {}
        self.subscriptions: dict[int, str] = {}  # subscription id -> topic
        self.counts: dict[str, int] = {}
        self.last: dict[str, bytes] = {}
        self.server_info: dict[str, Any] | None = None
        self.lock = threading.Lock()
        self.opened = threading.Event()
        self.closed = threading.Event()
        self.error: BaseException | None = None
        self.thread = threading.Thread(target=self._run, args=(timeout,), name="foxglove-client", daemon=True)
        self.thread.start()
        self.opened.wait(timeout + 1.0)
        if self.error is not None:
            raise self.error
        if self.connection is None:
            raise TimeoutError(f"no Foxglove WebSocket server answered at {url}")

    def _run(self, timeout: float) -> None:
        from websockets.sync.client import connect

        if self.background:
            from idcontrol.realtime import enter_background

            enter_background("Foxglove client")  # this thread only (Linux schedules threads)

        try:
            with connect(
                self.url, subprotocols=list(self.SUBPROTOCOLS), open_timeout=timeout, max_size=None
            ) as connection:
                self.connection = connection
                self.opened.set()
                for frame in connection:
                    if isinstance(frame, str):
                        self._text(json.loads(frame))
                    elif frame and frame[0] == 1:  # Message Data: subscription u32, log time u64, payload
                        subscription, _ = struct.unpack_from("<IQ", frame, 1)
                        topic = self.subscriptions.get(subscription)
                        if topic is not None:
                            with self.lock:
                                self.counts[topic] = self.counts.get(topic, 0) + 1
                                self.last[topic] = bytes(frame[13:])
        except Exception as e:  # refused, or the server went away
            if not self.opened.is_set():
                self.error = e
        finally:
            self.opened.set()
            self.closed.set()

    def _text(self, message: dict[str, Any]) -> None:
        op = message.get("op")
        if op == "serverInfo":
            self.server_info = message
        elif op == "advertise":
            new = []
            for channel in message.get("channels", []):
                self.channels[channel["id"]] = channel
                sub_id = len(self.subscriptions) + 1
                self.subscriptions[sub_id] = channel["topic"]
                new.append({"id": sub_id, "channelId": channel["id"]})
            if new:
                self.connection.send(json.dumps({"op": "subscribe", "subscriptions": new}))

    def receives_all(self) -> bool:
        """Whether a message has come on every advertised channel."""
        with self.lock:
            return bool(self.channels) and set(self.counts) >= {c["topic"] for c in self.channels.values()}

    def topics(self) -> dict[str, str]:
        """topic -> schema name of every advertised channel."""
        return {c["topic"]: c.get("schemaName", "") for c in self.channels.values()}

    def message(self, topic: str) -> Any:
        """The last message on ``topic``, decoded from JSON (None before the first)."""
        with self.lock:
            raw = self.last.get(topic)
        return None if raw is None else json.loads(raw)

    def close(self) -> None:
        if self.connection is not None:
            self.connection.close()
        self.thread.join(timeout=5)


# ------------------------------------------------------------------------------------------------ overhead
class LiveViewObserver:
    """The live view as the observer of :func:`measure_tick_overhead`: its process, and a client subscribed to every
    channel (at idle priority, as the view)."""

    name = "live view"

    def __init__(self, port: int = 0) -> None:
        self.port = port or free_ports(1)[0]
        self.process: subprocess.Popen | None = None
        self.client: FoxgloveClient | None = None

    def start(self, config: LaunchConfig, admin: Any) -> None:
        self.process = spawn_live(config.path, self.port)
        self.client = connect_live(self.port, 30.0, background=True)
        _wait(self.client.receives_all, 30.0, "messages on every channel")

    def messages(self) -> int:
        return sum(self.client.counts.values()) if self.client else 0

    def stop(self) -> bool:
        """Whether the process exited within 10 s of SIGTERM (else it was killed)."""
        if self.client is not None:
            self.client.close()
            self.client = None
        exited = terminate(self.process)
        self.process = None
        return exited


class ProcessObserver:
    """Any process that subscribes to the daemon's telemetry (``command``, e.g. ``idcontrol ros2 FILE``) as the
    observer of :func:`measure_tick_overhead`: started, then waited for until the daemon reports a telemetry
    listener."""

    def __init__(self, name: str, command: list[str], env: dict[str, str] | None = None) -> None:
        self.name, self.command, self.env = name, command, env
        self.process: subprocess.Popen | None = None

    def start(self, config: LaunchConfig, admin: Any) -> None:
        self.process = subprocess.Popen(
            self.command, start_new_session=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, env=self.env
        )
        _wait(lambda: (_status(admin) or {}).get("telemetry_listened"), 120.0, f"the {self.name} to subscribe")

    def messages(self) -> int:
        return 0  # not counted: the observer's own topics are outside this process

    def stop(self) -> bool:
        exited = terminate(self.process)
        self.process = None
        return exited


def measure_tick_overhead(
    launch_file: str | Path, segments: int = 6, seconds: float = 5.0, port: int = 0, log=print, observer: Any = None
) -> dict[str, Any]:
    """The daemon's tick (state received → command sent, ``compute_us``) with an observer off and on, in one run:
    the launch file's daemon and bridge run throughout; ``segments`` segments of ``seconds`` s alternate off, on,
    off, ... (on: ``observer`` running, by default :class:`LiveViewObserver`: the live view process with a client
    subscribed to every channel). Returns each segment's p50 / p99 and the medians of the p99s off and on."""
    from idcontrol.client import AdminClient
    from idcontrol.daemon.endpoints import bind
    from idcontrol.settings import load_launch

    config = load_launch(launch_file)
    probe = zmq.Context.instance().socket(zmq.PUB)  # an endpoint taken (another daemon) fails now, by name
    try:
        for name, endpoint in config.endpoints.items():
            bind(probe, endpoint, name)
    finally:
        probe.close(linger=0)
    observer = observer or LiveViewObserver(port)
    cmd = [sys.executable, "-m", "idcontrol"]
    daemon = subprocess.Popen([*cmd, "daemon", str(config.path)], start_new_session=True, stderr=subprocess.DEVNULL)
    bridge = None
    observing = False
    admin = AdminClient.for_launch(config, timeout=5.0)
    rows: list[dict[str, Any]] = []
    try:
        _wait(lambda: _status(admin) is not None, 120.0, "the daemon")
        bridge = subprocess.Popen(
            [*cmd, "bridge", str(config.path)],
            start_new_session=True,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        _wait(lambda: (_status(admin) or {}).get("bridge_connected"), 60.0, "the bridge")
        admin.start()
        time.sleep(1.0)
        i = retries = 0
        while i < segments:
            on = i % 2 == 1
            if on and not observing:
                observer.start(config, admin)
                observing = True
            time.sleep(0.5)
            admin.request("reset_stats")
            time.sleep(seconds)
            stats = admin.request("stats")
            status = admin.request("status")
            if status["mode"] != "run":  # (a real-time bridge stopped the robot: late commands) start again, redo
                retries += 1
                log(
                    f"segment {i + 1}: the robot left run mode ({status['reason']}); the simulator is restarted "
                    "from its initial state and the segment redone"
                )
                if retries > 3 * segments:
                    raise IdControlError(f"the robot keeps leaving run mode: {status['reason']}")
                _wait(lambda: (_status(admin) or {}).get("mode") in ("stopped", "idle"), 10.0, "the safe stop")
                terminate(bridge)  # a robot that fell cannot stand up again: a new simulator
                _wait(lambda: not (_status(admin) or {}).get("bridge_connected"), 10.0, "the bridge to leave")
                bridge = subprocess.Popen(
                    [*cmd, "bridge", str(config.path)],
                    start_new_session=True,
                    stdout=subprocess.DEVNULL,
                    stderr=subprocess.DEVNULL,
                )
                _wait(lambda: (_status(admin) or {}).get("bridge_connected"), 60.0, "the new bridge")
                admin.start()
                time.sleep(1.0)
                continue
            row = {
                "observed": on,
                "ticks": stats["ticks"],
                "compute_p50_us": stats["compute_us"]["p50"],
                "compute_p99_us": stats["compute_us"]["p99"],
                "deadline_misses": stats["deadline_misses"],
                "messages": observer.messages() if on else 0,
            }
            rows.append(row)
            log(
                f"segment {i + 1}: {observer.name} {'on ' if on else 'off'}  ticks {row['ticks']:>6}  tick p50 "
                f"{row['compute_p50_us']:7.1f}  p99 {row['compute_p99_us']:7.1f} µs  misses {row['deadline_misses']}"
                + (f"  viewer got {row['messages']} messages" if on and row["messages"] else "")
            )
            if on:
                observing = False
                if not observer.stop():
                    log(f"segment {i + 1}: the {observer.name} did not exit within 10 s of SIGTERM; killed")
            i += 1
    finally:
        if observing:
            observer.stop()
        terminate(bridge)
        try:
            admin.request("shutdown")
        except (TimeoutError, IdControlError):
            pass
        try:
            daemon.wait(timeout=10)
        except subprocess.TimeoutExpired:
            daemon.kill()
        admin.close()
    off = [r["compute_p99_us"] for r in rows if not r["observed"]]
    on = [r["compute_p99_us"] for r in rows if r["observed"]]
    result = {"segments": rows, "p99_off_us": float(np.median(off)), "p99_on_us": float(np.median(on))}
    result["p99_moved_us"] = result["p99_on_us"] - result["p99_off_us"]
    result.update(paired_shift([r["compute_p99_us"] for r in rows]))
    return result


def paired_shift(p99_us: list[float], confidence: float = 0.95) -> dict[str, Any]:
    """How much the tick's p99 moves with the live view on, with the machine's drift taken out.

    ``p99_us``: the segments' p99s in run order, alternating off, on, off, ... Each on segment is compared with
    the mean of the off segments beside it (one, at the end of an even count), so a machine that slows or speeds
    up over the run moves both sides of each pair alike. Returns the pairs' mean shift (µs), the ``confidence``
    Student-t interval of that mean (None with fewer than two pairs) and the number of pairs. Neighbouring pairs
    share an off segment, so the interval is approximate (200 simulated drifting runs: 95 % coverage held).
    """
    from scipy import stats

    shifts = []
    for j in range(1, len(p99_us), 2):
        beside = [p99_us[j - 1]] + ([p99_us[j + 1]] if j + 1 < len(p99_us) else [])
        shifts.append(p99_us[j] - float(np.mean(beside)))
    pairs = len(shifts)
    if pairs == 0:
        return {"p99_shift_us": None, "p99_shift_interval_us": None, "pairs": 0}
    mean = float(np.mean(shifts))
    interval = None
    if pairs >= 2:
        half = float(stats.t.ppf(0.5 + confidence / 2, pairs - 1) * np.std(shifts, ddof=1) / np.sqrt(pairs))
        interval = (mean - half, mean + half)
    return {"p99_shift_us": mean, "p99_shift_interval_us": interval, "pairs": pairs}


def _status(admin) -> dict[str, Any] | None:
    try:
        return admin.request("status", timeout=0.5)
    except TimeoutError:
        return None


def _wait(predicate, timeout: float, what: str) -> None:
    deadline = time.monotonic() + timeout
    while not predicate():
        if time.monotonic() > deadline:
            raise IdControlError(f"timed out after {timeout:.0f} s waiting for {what}")
        time.sleep(0.05)


def connect_live(port: int, timeout: float, background: bool = False) -> FoxgloveClient:
    """A client of the live view on ``port``, once its server accepts connections (IdControlError after
    ``timeout`` s); ``background``: its thread at idle CPU priority."""
    deadline = time.monotonic() + timeout
    while True:
        try:
            return FoxgloveClient(f"ws://127.0.0.1:{port}", background=background)
        except OSError:
            if time.monotonic() > deadline:
                raise IdControlError(f"the live view did not accept a connection on port {port}") from None
            time.sleep(0.1)


# ------------------------------------------------------------------------------------------------ the layout
def layout_json(nu: int = 12) -> str:
    """The Foxglove layout of ``docs/foxglove-layout.json`` (built with foxglove-sdk's layout types): the 3D panel
    (robot, transforms, contact force arrows, following ``world``), joint positions and torques, the deadline
    statistics, and the status (mode, formulation, guards' note)."""
    import foxglove.layouts as fl

    from idcontrol.logs import foxglove as topics

    def plot(title: str, paths: list[tuple[str, str]]) -> fl.PlotPanel:
        return fl.PlotPanel(
            title=title,
            config=fl.PlotConfig(
                paths=[fl.PlotSeries(value=value, label=label) for value, label in paths], show_legend=True
            ),
        )

    scene = fl.ThreeDeePanel(
        title="robot and contact forces",
        config=fl.ThreeDeeConfig(
            follow_tf=topics.WORLD,
            topics={
                topics.ROBOT_TOPIC: fl.BaseRendererSceneUpdateTopicSettings(visible=True),
                topics.FORCES_TOPIC: fl.BaseRendererSceneUpdateTopicSettings(visible=True),
            },
        ),
    )
    joints = plot("joint positions, rad", [(f"{topics.JOINTS_TOPIC}.position[{i}]", f"q{i}") for i in range(nu)])
    torques = plot("joint torques, N·m", [(f"{topics.JOINTS_TOPIC}.effort[{i}]", f"tau{i}") for i in range(nu)])
    deadlines = plot(
        "deadlines",
        [
            (f"{topics.DEADLINES_TOPIC}.on_deadline_fraction", "on deadline"),
            (f"{topics.DEADLINES_TOPIC}.compute_us_max", "tick max, µs"),
            (f"{topics.DEADLINES_TOPIC}.roundtrip_us_max", "round trip max, µs"),
        ],
    )
    status = fl.RawMessagesPanel(
        title="mode and formulation", config=fl.RawMessagesConfig(topic_path=topics.STATUS_TOPIC, default_expanded=True)
    )
    right = fl.SplitContainer(
        direction="column",
        items=[
            fl.SplitItem(content=joints),
            fl.SplitItem(content=torques),
            fl.SplitItem(content=deadlines),
            fl.SplitItem(content=status),
        ],
    )
    layout = fl.Layout(
        content=fl.SplitContainer(
            direction="row",
            items=[fl.SplitItem(proportion=3, content=scene), fl.SplitItem(proportion=2, content=right)],
        )
    )
    return json.dumps(json.loads(layout.to_json()), indent=1) + "\n"
