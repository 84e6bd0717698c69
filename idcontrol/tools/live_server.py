"""The live view's WebSocket server: the Foxglove WebSocket protocol (v1), server side, for one-way data, with the
gate a service on a robot's computer needs in front of it.

A browser applies no same-origin rule to WebSockets, and loopback does not keep a web page out: any page open in
the user's browser may connect to ``ws://127.0.0.1:PORT``. Each browser connection carries the page's ``Origin``
header, so the server accepts a browser only from an origin on :attr:`ViewerPolicy.origins` (HTTP 403 otherwise).
A client that sends no ``Origin`` (a program, not a page) is accepted unless the policy says otherwise.

It also bounds what viewers cost: at most :attr:`ViewerPolicy.max_viewers` at once (the next one is refused with
HTTP 503 before its WebSocket opens), each viewer's outgoing queue holds at most ``backlog`` messages (the oldest
is dropped, and counted), a viewer whose socket takes no data for :attr:`ViewerPolicy.send_timeout_s` is
disconnected, and a viewer's own messages are bounded in size and rate. foxglove-sdk's server has none of these
(no ``Origin`` check, no connection limit), which is why this module exists; the protocol's messages are the
specification's (``foxglove.websocket.v1``): ``serverInfo``, ``advertise``, ``subscribe``, ``unsubscribe`` and
the binary Message Data frame. It speaks only the part a one-way view needs: no client publishing, parameters or
services.
"""

from __future__ import annotations

import collections
import itertools
import json
import socket
import struct
import threading
import time
from dataclasses import dataclass, field
from typing import Any

from idcontrol.errors import ConfigError
from idcontrol.settings import FOXGLOVE_ORIGINS, TelemetrySettings, check_origin

#: The subprotocols served, in the server's order of preference: the first that the client also offers is chosen
#: (their messages are the same for a one-way view).
SUBPROTOCOLS = ("foxglove.websocket.v1", "foxglove.sdk.v1")
MESSAGE_DATA = 0x01  # the binary opcode of Message Data: u8 opcode, u32 subscription id, u64 log time ns, payload
#: A viewer's own messages (subscribe, unsubscribe): the largest frame taken, bytes, and how many a second.
CLIENT_FRAME_BYTES = 65_536
CLIENT_MESSAGES_PER_S = 50.0


@dataclass(frozen=True)
class ViewerPolicy:
    """Who may watch, and what watching may cost.

    origins : browser origins accepted (``Origin`` header, exact, e.g. ``"https://app.foxglove.dev"``); ``"*"``
        accepts every origin and every program (any web page in the user's browser can then read the robot's
        state).
    programs : whether a client that sends no ``Origin`` (a program, not a browser page) is accepted.
    max_viewers : connections open at once; the next is refused with HTTP 503.
    send_timeout_s : s, a viewer whose socket accepts no data for this long is disconnected.
    """

    origins: tuple[str, ...] = FOXGLOVE_ORIGINS
    programs: bool = True
    max_viewers: int = 8
    send_timeout_s: float = 2.0

    def __post_init__(self) -> None:
        if not 1 <= self.max_viewers <= 1024:
            raise ConfigError(f"the live view's viewer limit must be in 1 .. 1024, got {self.max_viewers}")
        if not 0.05 <= self.send_timeout_s <= 60.0:
            raise ConfigError(f"the live view's send timeout must be in 0.05 .. 60 s, got {self.send_timeout_s}")
        for origin in self.origins:
            check_origin(origin, "the live view's allowed origins")

    @classmethod
    def of(cls, telemetry: TelemetrySettings) -> ViewerPolicy:
        """The launch file's ``[telemetry]`` policy."""
        return cls(
            origins=tuple(telemetry.foxglove_origins),
            programs=telemetry.foxglove_programs,
            max_viewers=telemetry.foxglove_viewers,
        )

    def websockets_origins(self) -> list[str | None] | None:
        """The allow-list in the form of ``websockets``' ``origins`` argument (None: every origin)."""
        if "*" in self.origins:
            return None
        return [*self.origins, *([None] if self.programs else [])]


@dataclass
class ServerStats:
    """What viewers did: accepted, refused for the limit, refused for their origin (counted by the HTTP
    response), disconnected as slow; messages sent and dropped from full queues."""

    accepted: int = 0
    refused_full: int = 0
    refused_origin: int = 0
    disconnected_slow: int = 0
    sent: int = 0
    dropped: int = 0

    def as_dict(self) -> dict[str, int]:
        return dict(vars(self))


@dataclass
class _Viewer:
    """One connection: its subscriptions (channel id -> subscription id) and its bounded queue of frames."""

    connection: Any
    backlog: int
    subscriptions: dict[int, int] = field(default_factory=dict)
    queue: collections.deque = field(init=False)
    wake: threading.Event = field(default_factory=threading.Event)

    def __post_init__(self) -> None:
        self.queue = collections.deque(maxlen=self.backlog)


class LiveServer:
    """A Foxglove WebSocket server on ``host``:``port`` (0: a free port, :attr:`port`) serving the channels
    added with :meth:`add_channel` to the viewers ``policy`` admits; :meth:`log` hands each message to every
    subscribed viewer's queue and returns at once (one thread per viewer sends)."""

    def __init__(
        self, name: str, *, host: str = "127.0.0.1", port: int = 0, policy: ViewerPolicy | None = None, backlog: int
    ) -> None:
        try:
            from websockets.sync.server import serve
        except ImportError:
            raise ConfigError("the live view needs websockets: pip install 'idcontrol[foxglove]'") from None

        self.name, self.policy, self.backlog = name, policy or ViewerPolicy(), backlog
        self.stats = ServerStats()
        self._channels: dict[int, dict[str, Any]] = {}
        self._ids = itertools.count(1)
        self._viewers: list[_Viewer] = []
        self._lock = threading.Lock()
        self._session = str(time.time_ns())
        self._server = serve(
            self._serve,
            host,
            port,
            origins=self.policy.websockets_origins(),
            subprotocols=list(SUBPROTOCOLS),
            process_request=self._admit,
            process_response=self._count_refusal,
            compression=None,
            max_size=CLIENT_FRAME_BYTES,
            max_queue=4,
            open_timeout=5.0,
            ping_interval=None,
            close_timeout=1.0,
        )
        self.port = self._server.socket.getsockname()[1]
        self._thread = threading.Thread(target=self._server.serve_forever, name="live-view-server", daemon=True)
        self._thread.start()

    # ------------------------------------------------------------------ channels and data
    def add_channel(self, topic: str, schema_name: str, schema: bytes, encoding: str = "json") -> int:
        """Advertise a channel (JSON-schema ``schema``; messages in ``encoding``); returns its id."""
        channel_id = next(self._ids)
        self._channels[channel_id] = {
            "id": channel_id,
            "topic": topic,
            "encoding": encoding,
            "schemaName": schema_name,
            "schema": schema.decode(),
            "schemaEncoding": "jsonschema",
        }
        return channel_id

    def log(self, channel_id: int, payload: bytes, log_time_ns: int) -> None:
        """Queue one message of channel ``channel_id`` for every viewer subscribed to it (a full queue drops its
        oldest message)."""
        with self._lock:
            viewers = list(self._viewers)
        for viewer in viewers:
            subscription = viewer.subscriptions.get(channel_id)
            if subscription is None:
                continue
            if len(viewer.queue) == viewer.queue.maxlen:
                self.stats.dropped += 1
            viewer.queue.append(struct.pack("<BIQ", MESSAGE_DATA, subscription, log_time_ns) + payload)
            viewer.wake.set()

    def viewers(self) -> int:
        with self._lock:
            return len(self._viewers)

    def stop(self) -> None:
        self._server.shutdown()
        with self._lock:
            viewers = list(self._viewers)
        for viewer in viewers:
            viewer.connection.close()
        self._thread.join(timeout=5.0)

    # ------------------------------------------------------------------ the handshake's gate
    def _admit(self, connection: Any, request: Any) -> Any:
        """Before the WebSocket opens: refuse beyond the viewer limit (HTTP 503)."""
        with self._lock:
            full = len(self._viewers) >= self.policy.max_viewers
        if full:
            self.stats.refused_full += 1
            return connection.respond(503, f"the live view serves at most {self.policy.max_viewers} viewers\n")
        return None

    def _count_refusal(self, connection: Any, request: Any, response: Any) -> Any:
        if response.status_code == 403:
            self.stats.refused_origin += 1
        return None

    # ------------------------------------------------------------------ one viewer
    def _serve(self, connection: Any) -> None:
        viewer = _Viewer(connection, self.backlog)
        with self._lock:
            if len(self._viewers) >= self.policy.max_viewers:  # two handshakes raced for the last place
                self.stats.refused_full += 1
                connection.close(1013, "the live view is full")
                return
            self._viewers.append(viewer)
            self.stats.accepted += 1
        raw = connection.socket
        timeout_s = self.policy.send_timeout_s
        raw.setsockopt(
            socket.SOL_SOCKET, socket.SO_SNDTIMEO, struct.pack("ll", int(timeout_s), int(timeout_s % 1 * 1e6))
        )
        sending_since: float | None = None
        reader = threading.Thread(target=self._read, args=(viewer,), name="live-view-viewer-in", daemon=True)
        try:
            connection.send(
                json.dumps({"op": "serverInfo", "name": self.name, "capabilities": [], "sessionId": self._session})
            )
            connection.send(json.dumps({"op": "advertise", "channels": list(self._channels.values())}))
            reader.start()
            while reader.is_alive():
                viewer.wake.wait(0.1)
                viewer.wake.clear()
                while viewer.queue:
                    sending_since = time.monotonic()
                    connection.send(viewer.queue.popleft())
                    sending_since = None
                    self.stats.sent += 1
        except Exception:  # the viewer went away, sent what it may not, or took no data for send_timeout_s
            if sending_since is not None and time.monotonic() - sending_since >= 0.9 * timeout_s:
                self.stats.disconnected_slow += 1
        finally:
            with self._lock:
                self._viewers.remove(viewer)
            connection.close()

    def _read(self, viewer: _Viewer) -> None:
        """A viewer's messages: subscribe and unsubscribe; more than CLIENT_MESSAGES_PER_S a second, or anything
        else than a JSON text frame, closes it."""
        connection = viewer.connection
        budget, refilled = CLIENT_MESSAGES_PER_S, time.monotonic()
        try:
            for frame in connection:
                now = time.monotonic()
                budget = min(CLIENT_MESSAGES_PER_S, budget + (now - refilled) * CLIENT_MESSAGES_PER_S)
                refilled = now
                budget -= 1.0
                if budget < 0.0 or not isinstance(frame, str):
                    connection.close(1008, "the live view takes subscribe and unsubscribe, at most 50 a second")
                    return
                self._handle(viewer, json.loads(frame))
        except Exception:
            connection.close(1003, "not a message of the Foxglove WebSocket protocol")

    def _handle(self, viewer: _Viewer, message: dict[str, Any]) -> None:
        op = message.get("op")
        if op == "subscribe":
            for s in message.get("subscriptions", [])[: len(self._channels)]:
                channel, subscription = int(s["channelId"]), int(s["id"])
                if channel in self._channels and 0 <= subscription < 2**32:
                    viewer.subscriptions[channel] = subscription
        elif op == "unsubscribe":
            gone = {int(i) for i in message.get("subscriptionIds", [])[:1024]}
            for channel, subscription in list(viewer.subscriptions.items()):
                if subscription in gone:
                    del viewer.subscriptions[channel]
