"""Per-tick timing statistics kept by the daemon (preallocated; no allocation per tick)."""

from __future__ import annotations

import math

from idcontrol.timing import Series, percentiles_us, slack_us


class TickStats:
    """Compute time, bridge round trip and slack per tick; deadline misses; dropped states.

    period : the control period, s (the deadline of a command is one period after its state).
    capacity : ticks kept for percentiles (default about 17 minutes at 1 kHz).
    """

    def __init__(self, period: float, capacity: int = 1 << 20) -> None:
        self.period_us = period * 1e6
        self.compute_us = Series(capacity)
        self.roundtrip_us = Series(capacity)
        self.overhead_us = Series(capacity)  # the daemon's own work per tick: decode, send, publish
        self.phase_sums_us: dict[str, float] = {}
        self.reset()

    def reset(self) -> None:
        self.compute_us.clear()
        self.roundtrip_us.clear()
        self.overhead_us.clear()
        self.phase_sums_us = {}
        self._transport_sum = 0.0  # µs: Σ (a round trip − the compute time of the command it timed)
        self._paired = 0  # round trips in that sum
        self._previous_compute_us: float | None = None  # the last answered state's compute time
        self.ticks = 0
        self.mode_ticks: dict[str, int] = {}  # answered states by the core's mode after the tick
        self.deadline_misses = 0
        self.long_roundtrips = 0  # lock-step round trips over the period (they hold the simulator's step)
        self.states_skipped = 0  # gaps in the bridge's sequence numbers
        self.seq_jumps = 0  # gaps too large to be states the bridge skipped (a driver's counter reset, say)
        self.states_dropped = 0  # superseded by a newer state before being answered
        self.errors = 0
        self.reference_clipped = 0  # reference-channel targets clipped to the joint limits
        self.foreign_unread = 0  # control messages of peers without a session, dropped undecoded over their budget
        self.reference_unauthorized = 0  # reference messages without the daemon's credential, dropped
        self.reference_superseded = 0  # reference messages a newer one replaced before they were read
        self.telemetry_topics_ignored = 0  # telemetry subscriptions beyond the topics tracked

    def record(
        self,
        compute_us: float,
        roundtrip_us: float | None,
        phases_s: dict[str, float] | None,
        stages_us: tuple[float, float, float] | None = None,
        previous_late: bool = False,
        *,
        mode: str = "run",
        lockstep: bool = False,
    ) -> None:
        """One answered state. ``roundtrip_us`` is the bridge's figure for the previous command, if sent;
        ``phases_s`` the controller's timings (s); ``stages_us`` the daemon's own split of ``compute_us``:
        decoding the state, the core's tick, encoding and handing the command to ZeroMQ (µs);
        ``previous_late``: the bridge says the previous command missed its deadline (a miss, whatever the
        round trips); ``mode``: the core's mode after the tick.

        A deadline miss is a command the bridge reported late, or, in real time, a round trip over the period.
        In a lock-step session the round trip also holds the simulator's step, which no deadline waits for:
        there a miss is the controller's own lateness, its compute time over the period, and a round trip over
        the period is only counted (``long_roundtrips``)."""
        self.ticks += 1
        self.mode_ticks[mode] = self.mode_ticks.get(mode, 0) + 1
        self.compute_us.add(compute_us)
        late = compute_us > self.period_us
        if roundtrip_us is not None:
            self.roundtrip_us.add(roundtrip_us)
            if self._previous_compute_us is not None:  # the round trip is the previous command's: its compute
                self._transport_sum += roundtrip_us - self._previous_compute_us
                self._paired += 1
            if lockstep:
                self.long_roundtrips += roundtrip_us > self.period_us
            else:
                late = roundtrip_us > self.period_us
        self.deadline_misses += late or previous_late
        self._previous_compute_us = compute_us
        sums = self.phase_sums_us
        if stages_us is not None:
            decode_us, tick_us, send_us = stages_us
            sums["decode"] = sums.get("decode", 0.0) + decode_us
            sums["core_tick"] = sums.get("core_tick", 0.0) + tick_us
            sums["send"] = sums.get("send", 0.0) + send_us
        if phases_s:
            for key, value in phases_s.items():
                sums[key] = sums.get(key, 0.0) + value * 1e6

    #: A gap in the sequence numbers larger than this is a jump of the peer's counter, not skipped states.
    MAX_SKIPPED_GAP = 1_000_000

    def count_skipped(self, gap: int) -> None:
        """``gap`` states between two answered ones that the daemon never saw (or a jump of the counter)."""
        if gap > self.MAX_SKIPPED_GAP:
            self.seq_jumps += 1
        elif gap > 0:
            self.states_skipped += gap

    def record_publish(self, publish_us: float, decode_us: float, send_us: float) -> None:
        """The telemetry and log record of the last answered state took ``publish_us`` (after its command
        left); with that tick's ``decode_us`` and ``send_us``, the daemon's own share of the tick."""
        sums = self.phase_sums_us
        sums["publish"] = sums.get("publish", 0.0) + publish_us
        self.overhead_us.add(decode_us + send_us + publish_us)

    def phase_means_us(self) -> dict[str, float]:
        """Mean µs per tick of each phase: the daemon's ``decode``, ``core_tick`` (which holds the controller's
        ``total``: ``model``, ``contacts``, ``build``, ``solve``), ``send`` and ``publish`` (the telemetry and log
        record, after the command left), and ``transport``, the mean round trip less the mean compute time of the
        commands it timed (a state's round trip is the previous command's): ZeroMQ both ways plus the bridge's own
        send and receive, less the part of ``send`` after the command already left (the send call queues it for
        ZeroMQ's I/O thread on the other CPU, which may deliver it before the call returns: then ``transport`` can
        be negative, never below −``send``)."""
        n = max(self.ticks, 1)
        means = {k: round(v / n, 1) for k, v in self.phase_sums_us.items()}
        if self._paired:
            means["transport"] = round(self._transport_sum / self._paired, 1)
        return means

    def summary(self) -> dict[str, object]:
        compute = self.compute_us.values()
        n = max(self.ticks, 1)
        return {
            "ticks": self.ticks,
            "mode_ticks": dict(self.mode_ticks),
            "deadline_misses": self.deadline_misses,
            "long_roundtrips": self.long_roundtrips,
            "on_deadline_fraction": 1.0 - self.deadline_misses / n if self.ticks else math.nan,
            "compute_us": percentiles_us(compute),
            "roundtrip_us": percentiles_us(self.roundtrip_us.values()),
            "overhead_us": percentiles_us(self.overhead_us.values()),
            "slack_us": slack_us(self.period_us - compute),
            "phase_mean_us": self.phase_means_us(),
            "states_skipped": self.states_skipped,
            "seq_jumps": self.seq_jumps,
            "states_dropped": self.states_dropped,
            "errors": self.errors,
            "reference_clipped": self.reference_clipped,
            "foreign_unread": self.foreign_unread,
            "reference_unauthorized": self.reference_unauthorized,
            "reference_superseded": self.reference_superseded,
            "telemetry_topics_ignored": self.telemetry_topics_ignored,
        }
