"""Metrics of the remote tier's uploader: lag, throughput, latency, deletions, progress,
the partitions whose uploads stopped, and the tier cleaner's passes.

The storage reports through its ``TierObserver`` hooks (called from the remote log
manager's threads); the lag is read from the remote log manager at scrape time. A
long upload shows as an attempt in flight: ``tierlog_remote_uploads_in_flight``,
its bytes and the age of the oldest one, until it succeeds or fails.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator

from prometheus_client import CollectorRegistry, Counter, Histogram
from prometheus_client.core import GaugeMetricFamily, Metric

from tierlog.broker.partition_series import PartitionSeries
from tierlog.storage.tier.observer import TierObserver
from tierlog.storage.tier.remote_log_manager import RemoteLogManager, StopReason
from tierlog.storage.topic_partition import TopicPartition

__all__ = ["UploadMetrics"]

_UPLOAD_BUCKETS_S = (0.01, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120, 300, 600)


class UploadMetrics(TierObserver):
    def __init__(self, registry: CollectorRegistry):
        topic = ["topic"]
        self.uploaded_bytes = Counter(
            "tierlog_remote_uploaded_bytes_total",
            "Bytes of segment objects uploaded to the tier (log, indexes, snapshot, epochs)",
            topic, registry=registry,
        )  # fmt: skip
        self.uploaded_segments = Counter(
            "tierlog_remote_uploaded_segments_total", "Segments uploaded to the tier", topic,
            registry=registry,
        )  # fmt: skip
        self.upload_duration = Histogram(
            "tierlog_remote_upload_duration_seconds",
            "One segment's upload, from its PUT to the manifest saying finished",
            buckets=_UPLOAD_BUCKETS_S, registry=registry,
        )  # fmt: skip
        self.upload_failures = Counter(
            "tierlog_remote_upload_failures_total",
            "Upload attempts that failed (retried later), by Kafka error name", ["reason"],
            registry=registry,
        )  # fmt: skip
        self.deleted_bytes = Counter(
            "tierlog_remote_deleted_bytes_total",
            "Log bytes of remote segments deleted (retention, DeleteRecords, abandoned uploads)",
            topic, registry=registry,
        )  # fmt: skip
        self.deleted_segments = Counter(
            "tierlog_remote_deleted_segments_total", "Remote segments deleted", topic,
            registry=registry,
        )  # fmt: skip
        self.cleaner_passes = Counter(
            "tierlog_remote_cleaner_passes_total",
            "Tier cleaning passes whose swap committed", topic, registry=registry,
        )  # fmt: skip
        self.cleaner_read_bytes = Counter(
            "tierlog_remote_cleaner_read_bytes_total",
            "Log bytes tier cleaning passes read from the tier", topic, registry=registry,
        )  # fmt: skip
        self.cleaner_written_bytes = Counter(
            "tierlog_remote_cleaner_written_bytes_total",
            "Log bytes of cleaned segments written to the tier", topic, registry=registry,
        )  # fmt: skip
        self.cleaner_removed_bytes = Counter(
            "tierlog_remote_cleaner_removed_bytes_total",
            "Log bytes tier cleaning removed (replaced less written)", topic, registry=registry,
        )  # fmt: skip
        self._lock = threading.Lock()
        self._in_flight: dict[TopicPartition, tuple[int, float]] = {}  # bytes, started
        self._registry = registry
        registry.register(_InFlightCollector(self))

    def watch(self, manager: RemoteLogManager, series: PartitionSeries) -> None:
        """Report ``manager``'s upload lag and stopped partitions at each scrape."""
        self._registry.register(_LagCollector(manager, series))
        self._registry.register(_StoppedCollector(manager))

    # -- the storage's hooks ----------------------------------------------------------

    def upload_started(self, tp: TopicPartition, size_bytes: int) -> None:
        with self._lock:
            self._in_flight[tp] = (size_bytes, time.monotonic())

    def segment_uploaded(self, tp: TopicPartition, size_bytes: int, seconds: float) -> None:
        with self._lock:
            self._in_flight.pop(tp, None)
        self.uploaded_bytes.labels(tp.topic).inc(size_bytes)
        self.uploaded_segments.labels(tp.topic).inc()
        self.upload_duration.observe(seconds)

    def upload_failed(self, tp: TopicPartition, reason: str) -> None:
        with self._lock:
            self._in_flight.pop(tp, None)
        self.upload_failures.labels(reason).inc()

    def segments_deleted(self, tp: TopicPartition, segments: int, size_bytes: int) -> None:
        self.deleted_segments.labels(tp.topic).inc(segments)
        self.deleted_bytes.labels(tp.topic).inc(size_bytes)

    def tier_cleaned(
        self, tp: TopicPartition, bytes_read: int, bytes_written: int, bytes_removed: int
    ) -> None:
        self.cleaner_passes.labels(tp.topic).inc()
        self.cleaner_read_bytes.labels(tp.topic).inc(bytes_read)
        self.cleaner_written_bytes.labels(tp.topic).inc(bytes_written)
        self.cleaner_removed_bytes.labels(tp.topic).inc(max(bytes_removed, 0))

    def in_flight(self) -> tuple[int, int, float]:
        """Attempts in flight, their bytes, and the oldest one's age in seconds."""
        with self._lock:
            attempts = list(self._in_flight.values())
        now = time.monotonic()
        oldest = max((now - started for _size, started in attempts), default=0.0)
        return len(attempts), sum(size for size, _started in attempts), oldest


class _InFlightCollector:
    def __init__(self, metrics: UploadMetrics):
        self.metrics = metrics

    def collect(self) -> Iterator[Metric]:
        count, size, oldest = self.metrics.in_flight()
        yield GaugeMetricFamily(
            "tierlog_remote_uploads_in_flight", "Segment uploads under way", count
        )
        yield GaugeMetricFamily(
            "tierlog_remote_upload_in_flight_bytes", "Bytes of the segment uploads under way", size
        )
        yield GaugeMetricFamily(
            "tierlog_remote_upload_oldest_in_flight_seconds",
            "How long the oldest upload under way has been running", oldest,
        )  # fmt: skip


class _LagCollector:
    """Kafka's RemoteCopyLagBytes/Segments (closed local segments not yet in the tier),
    and how far the tier is behind the log end: records, the oldest one's wait, and the
    bound the topic sets on that wait (``tierlog.remote.segment.max.upload.interval.ms``,
    or one pass if longer; no series without one), which an alert compares it with."""

    def __init__(self, manager: RemoteLogManager, series: PartitionSeries):
        self.manager = manager
        self.series = series

    def collect(self) -> Iterator[Metric]:
        lags = [(tp, self.manager.upload_lag(tp)) for tp in self.manager.partitions]
        yield self.series.gauge(
            "tierlog_remote_upload_lag_bytes",
            "Bytes of closed local segments not yet in the tier", [],
            (((), tp, lag.size_bytes) for tp, lag in lags),
        )  # fmt: skip
        yield self.series.gauge(
            "tierlog_remote_upload_lag_segments", "Closed local segments not yet in the tier", [],
            (((), tp, lag.segments) for tp, lag in lags),
        )  # fmt: skip
        yield self.series.gauge(
            "tierlog_remote_upload_lag_offsets",
            "Offsets of the log above the tier's end, to the log end", [],
            (((), tp, lag.offsets) for tp, lag in lags),
        )  # fmt: skip
        yield self.series.gauge(
            "tierlog_remote_upload_lag_seconds",
            "How long the oldest record not yet in the tier has waited", [],
            (((), tp, lag.age_ms / 1000) for tp, lag in lags), largest=True,
        )  # fmt: skip
        cleaner = self.manager.cleaner
        if cleaner is not None:
            dirty = [(tp, cleaner.dirty_bytes(tp)) for tp in self.manager.partitions]
            yield self.series.gauge(
                "tierlog_remote_cleaner_dirty_bytes",
                "Log bytes of a compacted topic's tier not cleaned yet (the tier "
                "cleaner's lag), as its last pass measured them", [],
                (((), tp, size) for tp, size in dirty if size is not None),
            )  # fmt: skip
        yield self.series.gauge(
            "tierlog_remote_upload_lag_bound_seconds",
            "The most the oldest record not yet in the tier should wait (the topic's "
            "tierlog.remote.segment.max.upload.interval.ms, or one pass if longer)", [],
            (((), tp, lag.bound_ms / 1000) for tp, lag in lags if lag.bound_ms >= 0),
            largest=True,
        )  # fmt: skip


class _StoppedCollector:
    """Partitions whose uploads stopped until an operator acts (a vanished manifest: see
    ``tierlog tier rebase``) or for good in this process (fenced by a newer owner). One
    series per reason, 0 when none, so an alert on it watches a series that exists; which
    partitions is in /readyz's detail and the ERROR log line."""

    def __init__(self, manager: RemoteLogManager):
        self.manager = manager

    def collect(self) -> Iterator[Metric]:
        stopped = GaugeMetricFamily(
            "tierlog_remote_upload_stopped_partitions",
            "Partitions whose uploads to the tier stopped, by reason", None, ["reason"],
        )  # fmt: skip
        counts = dict.fromkeys((reason.value for reason in StopReason), 0)
        for problem in self.manager.problems():
            if problem.state in counts:
                counts[problem.state] += 1
        for reason, count in counts.items():
            stopped.add_metric([reason], count)
        yield stopped
