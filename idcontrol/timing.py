"""Timing statistics shared by the daemon, the bridges and the tools: percentile summaries and a ring of
samples preallocated (and touched) up front, so that filling it allocates nothing and grows no memory."""

from __future__ import annotations

import math

import numpy as np


def percentiles_us(samples: np.ndarray) -> dict[str, float]:
    """p50 / p99 / max of a sample array in µs (NaN when empty)."""
    if samples.size == 0:
        return {"p50": math.nan, "p99": math.nan, "max": math.nan}
    p50, p99 = np.percentile(samples, (50, 99))
    return {"p50": round(float(p50), 1), "p99": round(float(p99), 1), "max": round(float(samples.max()), 1)}


def slack_us(slack: np.ndarray) -> dict[str, float]:
    """Slack (period minus compute time), µs: the median and the worst cases."""
    if slack.size == 0:
        return {"p50": math.nan, "p1": math.nan, "min": math.nan}
    p1, p50 = np.percentile(slack, (1, 50))
    return {"p50": round(float(p50), 1), "p1": round(float(p1), 1), "min": round(float(slack.min()), 1)}


class Series:
    """A ring of float samples: the statistics cover the most recent ``capacity`` ticks.

    Every page of the ring is written at construction: a ring left to the kernel's lazy allocation grows the
    process's resident memory by 8 bytes a sample as it fills (0.5 MB a minute for two rings at 1 kHz).
    """

    def __init__(self, capacity: int) -> None:
        self._data = np.empty(capacity)
        self._data.fill(0.0)
        self.count = 0

    def add(self, value: float) -> None:
        self._data[self.count % self._data.size] = value
        self.count += 1

    def values(self) -> np.ndarray:
        return self._data[: min(self.count, self._data.size)]

    def clear(self) -> None:
        self.count = 0
