"""The clients' ``metrics()``: Kafka's metric names, measured as Kafka's client measures them.

Kafka samples each rate, average and maximum over ``metrics.num.samples`` (2) windows of
``metrics.sample.window.ms`` (30 s): a window older than all of them no longer counts,
and a rate divides by the time the windows cover, never less than all but one full
window (so a rate just started reads low rather than wild, as Kafka's does). Totals
count from the client's start. ``records-lag-max`` is the largest of the assigned
partitions' lags as the consumer last saw them (the high watermark of a partition's
last message less its position; the last stable offset under read_committed), where
Kafka's takes the largest seen in the windows.
``ProducerMetrics`` and ``ConsumerMetrics`` hold the
figures their client records as it works and answer ``snapshot()`` with a plain
``{name: value}`` dict, the names of Kafka's ``producer-metrics`` and
``consumer-fetch-manager-metrics`` groups.

Not thread-safe on their own: the producer records under its lock, the consumer on the
thread that polls.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable
from dataclasses import dataclass, field

__all__ = ["ConsumerMetrics", "ProducerMetrics", "Sampled"]

SAMPLE_WINDOW_S = 30.0
SAMPLES = 2


@dataclass
class _Sample:
    start: float
    count: int = 0
    total: float = 0.0
    most: float = -math.inf


@dataclass
class Sampled:
    """One measured quantity: its rate, average and maximum over the recent windows,
    and its total since the start."""

    clock: Callable[[], float] = time.monotonic
    total: float = 0.0  # of the values, since the start
    count: int = 0  # of the events, since the start
    _samples: list[_Sample] = field(default_factory=list)

    def record(self, value: float = 1.0) -> None:
        now = self.clock()
        self.total += value
        self.count += 1
        current = self._current(now)
        current.count += 1
        current.total += value
        current.most = max(current.most, value)

    def rate(self) -> float:
        """The values' sum per second over the windows (Kafka's ``Rate``)."""
        return self._per_second(lambda sample: sample.total)

    def event_rate(self) -> float:
        """Events per second over the windows (Kafka's ``Rate`` of a ``WindowedCount``)."""
        return self._per_second(lambda sample: sample.count)

    def _per_second(self, measure: Callable[[_Sample], float]) -> float:
        now = self.clock()
        live = self._live(now)
        if not live:
            return 0.0
        elapsed = now - live[0].start
        full_windows = elapsed // SAMPLE_WINDOW_S
        if full_windows < SAMPLES - 1:
            elapsed += (SAMPLES - 1 - full_windows) * SAMPLE_WINDOW_S
        return sum(measure(sample) for sample in live) / elapsed

    def avg(self) -> float:
        """Mean of the values recorded in the windows (NaN with none, as Kafka's)."""
        live = self._live(self.clock())
        count = sum(sample.count for sample in live)
        return sum(sample.total for sample in live) / count if count else math.nan

    def max(self) -> float:
        """Largest value recorded in the windows (NaN with none, as Kafka's)."""
        live = self._live(self.clock())
        return max((s.most for s in live if s.count), default=math.nan)

    def _current(self, now: float) -> _Sample:
        if not self._samples or now - self._samples[-1].start >= SAMPLE_WINDOW_S:
            self._samples.append(_Sample(now))
            del self._samples[:-SAMPLES]
        return self._samples[-1]

    def _live(self, now: float) -> list[_Sample]:
        return [s for s in self._samples if now - s.start < SAMPLE_WINDOW_S * SAMPLES]


@dataclass
class ProducerMetrics:
    """What the producer's sender records (under the producer's lock)."""

    clock: Callable[[], float] = time.monotonic
    records_sent: Sampled = field(init=False)
    records_retried: Sampled = field(init=False)
    records_failed: Sampled = field(init=False)
    requests: Sampled = field(init=False)  # values: each request's latency in ms
    request_bytes: Sampled = field(init=False)
    records_per_request: Sampled = field(init=False)
    batch_bytes: Sampled = field(init=False)

    def __post_init__(self) -> None:
        for name in (
            "records_sent",
            "records_retried",
            "records_failed",
            "requests",
            "request_bytes",
            "records_per_request",
            "batch_bytes",
        ):
            setattr(self, name, Sampled(self.clock))

    def request_sent(self, request_bytes: int, batch_sizes: list[int], records: int) -> None:
        self.request_bytes.record(request_bytes)
        self.records_per_request.record(records)
        self.records_sent.record(records)
        for size in batch_sizes:
            self.batch_bytes.record(size)

    def snapshot(self, buffer_total_bytes: int, buffer_available_bytes: int) -> dict[str, float]:
        requests = self.requests
        return {
            "record-send-rate": self.records_sent.rate(),
            "record-send-total": self.records_sent.total,
            "record-retry-rate": self.records_retried.rate(),
            "record-retry-total": self.records_retried.total,
            "record-error-rate": self.records_failed.rate(),
            "record-error-total": self.records_failed.total,
            "request-rate": requests.event_rate(),
            "request-total": float(requests.count),
            "request-latency-avg": requests.avg(),
            "request-latency-max": requests.max(),
            "outgoing-byte-rate": self.request_bytes.rate(),
            "outgoing-byte-total": self.request_bytes.total,
            "records-per-request-avg": self.records_per_request.avg(),
            "batch-size-avg": self.batch_bytes.avg(),
            "batch-size-max": self.batch_bytes.max(),
            "buffer-total-bytes": float(buffer_total_bytes),
            "buffer-available-bytes": float(buffer_available_bytes),
        }


@dataclass
class ConsumerMetrics:
    """What the consumer records as it polls."""

    clock: Callable[[], float] = time.monotonic
    records: Sampled = field(init=False)  # values: the records each poll returned
    fetches: Sampled = field(init=False)  # values: each message's bytes of batches
    lags: dict[tuple[str, int], int] = field(default_factory=dict)  # by topic, partition

    def __post_init__(self) -> None:
        self.records = Sampled(self.clock)
        self.fetches = Sampled(self.clock)

    def snapshot(self) -> dict[str, float]:
        return {
            "records-consumed-rate": self.records.rate(),
            "records-consumed-total": self.records.total,
            "bytes-consumed-rate": self.fetches.rate(),
            "bytes-consumed-total": self.fetches.total,
            "fetch-rate": self.fetches.event_rate(),
            "fetch-total": float(self.fetches.count),
            "fetch-size-avg": self.fetches.avg(),
            "fetch-size-max": self.fetches.max(),
            "records-lag-max": float(max(self.lags.values(), default=0)),
        }
