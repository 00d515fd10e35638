"""The sidecar's Prometheus metrics: what it serves, how fast, what it holds.

Names follow Prometheus' conventions (``_total`` counters, ``_seconds`` and ``_bytes``
in base units); docs/METRICS.md lists each with what a dashboard does with it. They
come from these places:

- ``MetricsInterceptor``, around every gRPC call: calls by gRPC service, method and status
  code, their latency, each streamed message's latency (a stream's life says nothing
  of how long its produce or fetch took), request and response bytes, record bytes in
  and out per topic
  (Kafka's BytesInPerSec/BytesOutPerSec: the batches appended and fetched), and errors
  by Kafka's reason. Errors answered in-band (a ProduceStream item, an admin result
  per topic) are counted too: ``status`` reports every error it maps through a
  context variable the interceptor sets for the call.
- the storage's hooks: each fsync of a group-commit round (``on_flush``), the
  recovery's progress callback, and every S3 request attempt of the tier's store
  (``s3_request``, the ``S3Observer`` hook);
- ``LogManagerCollector``, read at scrape time (no bookkeeping on the hot path):
  per-partition log start and end offsets, size and segment count, and the
  cleaner's and retention's counters;
- the remote reader: each ranged GET it makes (``observe_remote_fetch``: latency,
  bytes, errors), and ``RemoteReadCollector`` at scrape time for its chunk cache
  (hits, misses, evictions, size) and the record bytes it served;
- with replication on, ``tierlog.replication.metrics.ReplicationCollector`` at scrape
  time (the server registers it here): partitions led, under-replicated and under
  min.insync.replicas, ISR changes, followers' lag, and the controller's counts;
- the group coordinator's ``tierlog.coordinator.group_metrics.GroupMetrics`` at scrape
  time (the server registers it here): committed offsets per group and partition,
  groups by state, members, commits and rebalances;
- the Kafka listener (``kafka_metrics.KafkaMetrics``, its observer): requests, errors,
  latency and bytes per Kafka API, and its connections;
- the process itself (resident memory, CPU, open files, GC) from prometheus-client.

A registry per ``SidecarMetrics``, not the library's global one, so tests and
several servers in one process do not share series.
"""

from __future__ import annotations

import asyncio
import inspect
import os
import threading
import time
from collections import deque
from collections.abc import AsyncIterable, AsyncIterator, Callable, Iterable, Iterator
from types import TracebackType
from typing import Any

import grpc
import prometheus_client
from google.protobuf.descriptor import ServiceDescriptor
from prometheus_client import (
    GC_COLLECTOR,
    CollectorRegistry,
    Counter,
    Gauge,
    Histogram,
    ProcessCollector,
)
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric

from tierlog.broker.partition_series import PartitionSeries
from tierlog.sidecar.interceptors import CallName, Context, call_name, inner_behavior, with_behavior
from tierlog.sidecar.kafka_metrics import KafkaMetrics
from tierlog.sidecar.service import RECORD_BYTES_LISTENER
from tierlog.sidecar.status import ERROR_LISTENER
from tierlog.storage.errors import TierlogError, UnknownTopicOrPartitionError
from tierlog.storage.log import Log
from tierlog.storage.manager import LogManager
from tierlog.storage.tier.remote_reader import RemoteLogReader
from tierlog.storage.topic_partition import TopicPartition

__all__ = [
    "LogManagerCollector",
    "MetricsInterceptor",
    "RecoveryMetrics",
    "RemoteReadCollector",
    "SidecarMetrics",
]

prometheus_client.disable_created_metrics()  # type: ignore[no-untyped-call]  # no `_created` twin of every counter

_LATENCY_BUCKETS_S = (
    0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60,
)  # fmt: skip
_FSYNC_BUCKETS_S = (
    0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5,
)  # fmt: skip


class SidecarMetrics:
    """Every series the sidecar exports, in one registry."""

    def __init__(self) -> None:
        self.registry = registry = CollectorRegistry()
        ProcessCollector(registry=registry)
        registry.register(GC_COLLECTOR)
        # Not ``service``: a ServiceMonitor's targets carry the Kubernetes Service's name
        # under it, which would rename ours ``exported_service``.
        call = ["grpc_service", "method"]
        self.requests = Counter(
            "tierlog_requests_total", "gRPC calls handled, by status code", [*call, "code"],
            registry=registry,
        )  # fmt: skip
        self.request_duration = Histogram(
            "tierlog_request_duration_seconds", "gRPC call latency, arrival to status", call,
            buckets=_LATENCY_BUCKETS_S, registry=registry,
        )  # fmt: skip
        self.stream_message_duration = Histogram(
            "tierlog_stream_message_duration_seconds",
            "Streaming calls, per response: its request's arrival (or the previous response) "
            "to its hand-off to gRPC", call, buckets=_LATENCY_BUCKETS_S, registry=registry,
        )  # fmt: skip
        self.requests_in_flight = Gauge(
            "tierlog_requests_in_flight", "gRPC calls being handled", call, registry=registry
        )
        self.request_bytes = Counter(
            "tierlog_request_bytes_total", "Serialized request bytes received", call,
            registry=registry,
        )  # fmt: skip
        self.response_bytes = Counter(
            "tierlog_response_bytes_total", "Serialized response bytes sent", call,
            registry=registry,
        )  # fmt: skip
        self.errors = Counter(
            "tierlog_errors_total", "Errors answered, by Kafka error name", [*call, "reason"],
            registry=registry,
        )  # fmt: skip
        self.topic_bytes_in = Counter(
            "tierlog_topic_bytes_in_total", "Record bytes appended (acknowledged produce)",
            ["topic"], registry=registry,
        )  # fmt: skip
        self.topic_bytes_out = Counter(
            "tierlog_topic_bytes_out_total", "Record bytes returned by Fetch and Subscribe",
            ["topic"], registry=registry,
        )  # fmt: skip
        self.flush_duration = Histogram(
            "tierlog_log_flush_duration_seconds", "fsync of one log in a group-commit round",
            buckets=_FSYNC_BUCKETS_S, registry=registry,
        )  # fmt: skip
        self.produce_bytes_in_flight = Gauge(
            "tierlog_produce_bytes_in_flight",
            "Produce bytes admitted and not yet appended (queued.max.request.bytes bounds it)",
            registry=registry,
        )
        self.produce_bytes_waiting = Gauge(
            "tierlog_produce_bytes_waiting",
            "Produce bytes waiting for room in queued.max.request.bytes",
            registry=registry,
        )
        self.ready = Gauge(
            "tierlog_ready", "1 once recovered and serving gRPC; 0 while starting or stopping",
            registry=registry,
        )  # fmt: skip
        self.recovery = RecoveryMetrics(registry)
        self.remote_fetch_duration = Histogram(
            "tierlog_remote_fetch_duration_seconds",
            "Ranged GETs of remote segment chunks (cache misses and prefetches), to the last byte",
            buckets=_LATENCY_BUCKETS_S, registry=registry,
        )  # fmt: skip
        self.remote_fetch_bytes = Counter(
            "tierlog_remote_fetch_bytes_total", "Bytes the remote reader fetched from the store",
            registry=registry,
        )  # fmt: skip
        self.remote_fetch_errors = Counter(
            "tierlog_remote_fetch_errors_total",
            "Ranged GETs of remote chunks that failed, by Kafka error name", ["reason"],
            registry=registry,
        )  # fmt: skip
        self.s3_requests = Counter(
            "tierlog_tier_s3_requests_total", "S3 request attempts (retries count), by operation",
            ["operation"], registry=registry,
        )  # fmt: skip
        self.s3_errors = Counter(
            "tierlog_tier_s3_errors_total", "S3 request attempts that failed, by S3 error code",
            ["operation", "error"], registry=registry,
        )  # fmt: skip
        self.kafka = KafkaMetrics(registry, _LATENCY_BUCKETS_S)

    def expect_calls(self, services: Iterable[ServiceDescriptor]) -> None:
        """Latency series of every method of ``services`` from the start, at zero (as
        go-grpc-prometheus' ``InitializeMetrics``): a dashboard's produce latency has its
        series whether clients produce over the stream or the unary call, or not yet."""
        for service in services:
            for method in service.methods:
                labels = (service.name, method.name)
                self.request_duration.labels(*labels)
                if method.server_streaming:
                    self.stream_message_duration.labels(*labels)

    def observe_remote_fetch(self, seconds: float, size: int, error: BaseException | None) -> None:
        """The remote reader's ``on_fetch`` hook (called from its threads)."""
        if error is not None:
            reason = error.reason if isinstance(error, TierlogError) else "UNKNOWN_SERVER_ERROR"
            self.remote_fetch_errors.labels(reason).inc()
            return
        self.remote_fetch_duration.observe(seconds)
        self.remote_fetch_bytes.inc(size)

    def watch_remote_reads(self, reader: RemoteLogReader) -> None:
        self.registry.register(RemoteReadCollector(reader))

    def s3_request(self, operation: str, error: str | None) -> None:
        """The S3 store's observer hook (``S3Observer``), called from its threads."""
        self.s3_requests.labels(operation).inc()
        if error is not None:
            self.s3_errors.labels(operation, error).inc()

    def observe_flush(self, _log: Log, seconds: float) -> None:
        """The log manager's ``on_flush`` hook (called from the flusher thread)."""
        self.flush_duration.observe(seconds)

    def observe_produce_bytes(self, in_flight: int, waiting: int) -> None:
        """The produce byte budget's ``on_change`` hook."""
        self.produce_bytes_in_flight.set(in_flight)
        self.produce_bytes_waiting.set(waiting)

    def watch(self, manager: LogManager, series: PartitionSeries) -> None:
        self.registry.register(LogManagerCollector(manager, series))


class RecoveryMetrics:
    """The recovery's progress as bytes scanned of bytes to scan, over every partition.

    The storage reports ``(done, total)`` per partition as each segment is scanned;
    partitions load in parallel, one at a time per recovery thread, so a call from
    a thread either continues that thread's scan or starts the next partition's.
    ``tierlog_recovery_target_bytes`` grows as scans start, and ``finished`` makes the
    two equal (a scan cut short by truncation stops before its total).
    """

    def __init__(self, registry: CollectorRegistry):
        self.scanned_bytes = Gauge(
            "tierlog_recovery_scanned_bytes", "Log bytes the recovery has checked",
            registry=registry,
        )  # fmt: skip
        self.target_bytes = Gauge(
            "tierlog_recovery_target_bytes", "Log bytes the recovery has to check (so far)",
            registry=registry,
        )  # fmt: skip
        self.in_progress = Gauge(
            "tierlog_recovery_in_progress", "1 while the logs are being loaded",
            registry=registry,
        )  # fmt: skip
        self.duration = Gauge(
            "tierlog_recovery_duration_seconds", "How long loading the logs took",
            registry=registry,
        )  # fmt: skip
        self._lock = threading.Lock()
        self._scans: dict[int, tuple[int, int]] = {}  # thread -> (done, total) of its scan
        self._started = 0.0

    def started(self) -> None:
        self._started = time.monotonic()
        self.in_progress.set(1)

    def __call__(self, done: int, total: int) -> None:
        """The storage's ``RecoveryProgress`` callback."""
        with self._lock:
            thread = threading.get_ident()
            previous_done, previous_total = self._scans.get(thread, (-1, -1))
            if previous_total == total and previous_done <= done:
                self.scanned_bytes.inc(done - previous_done)
            else:
                self.target_bytes.inc(total)
                self.scanned_bytes.inc(done)
            self._scans[thread] = (done, total)
            if done >= total:
                del self._scans[thread]

    def finished(self) -> None:
        with self._lock:
            self._scans.clear()
            self.scanned_bytes.set(_value(self.target_bytes))
        self.duration.set(time.monotonic() - self._started)
        self.in_progress.set(0)


def _value(gauge: Gauge) -> float:
    (metric,) = gauge.collect()
    return float(metric.samples[0].value)


class LogManagerCollector:
    """Per-partition and background-job series, read from the log manager at scrape time."""

    def __init__(self, manager: LogManager, series: PartitionSeries):
        self.manager = manager
        self.series = series

    def collect(self) -> Iterator[Metric]:
        logs: list[tuple[TopicPartition, Log]] = []
        for tp in self.manager.partitions:
            try:
                logs.append((tp, self.manager.get_log(tp)))
            except UnknownTopicOrPartitionError:  # deleted since the listing
                continue
        yield self.series.gauge(
            "tierlog_log_start_offset", "First offset of the log (Kafka's LogStartOffset)", [],
            (((), tp, log.log_start_offset) for tp, log in logs),
        )  # fmt: skip
        yield self.series.gauge(
            "tierlog_log_end_offset", "Next offset to be written (Kafka's LogEndOffset)", [],
            (((), tp, log.log_end_offset) for tp, log in logs),
        )  # fmt: skip
        yield self.series.gauge(
            "tierlog_log_size_bytes", "Bytes of the log's segments on disk", [],
            (((), tp, log.size_bytes) for tp, log in logs),
        )  # fmt: skip
        yield self.series.gauge(
            "tierlog_log_segments", "Segments of the log (Kafka's NumLogSegments)", [],
            (((), tp, len(log.segments)) for tp, log in logs),
        )  # fmt: skip
        count = len(logs)
        yield GaugeMetricFamily("tierlog_partitions", "Partitions this broker holds", count)
        budget = self.manager.decompression_budget
        yield GaugeMetricFamily(
            "tierlog_validation_decompressed_bytes_in_flight",
            "Decompressed record bytes held by produce validations now",
            budget.used_bytes,
        )  # fmt: skip
        yield GaugeMetricFamily(
            "tierlog_validation_decompressed_bytes_limit",
            "tierlog.validation.max.inflight.decompressed.bytes", budget.capacity_bytes,
        )  # fmt: skip
        yield CounterMetricFamily(
            "tierlog_validation_throttled_total",
            "Produce validations refused after waiting for decompressed-bytes room",
            budget.refused,
        )  # fmt: skip
        yield from self._log_dir_space()
        cleaner = self.manager.cleaner
        yield CounterMetricFamily(
            "tierlog_cleaner_runs_total", "Log cleaner rounds completed", cleaner.rounds
        )
        stats = cleaner.last_stats
        yield GaugeMetricFamily(
            "tierlog_cleaner_last_run_read_bytes", "Bytes the last cleaner round read",
            stats.bytes_read if stats else 0,
        )  # fmt: skip
        yield GaugeMetricFamily(
            "tierlog_cleaner_last_run_written_bytes", "Bytes the last cleaner round wrote",
            stats.bytes_written if stats else 0,
        )  # fmt: skip
        yield CounterMetricFamily(
            "tierlog_retention_runs_total", "Retention passes completed",
            self.manager.retention_passes,
        )  # fmt: skip
        yield CounterMetricFamily(
            "tierlog_retention_deleted_segments_total", "Segments retention retired",
            self.manager.retention_retired_segments,
        )  # fmt: skip

    def _log_dir_space(self) -> Iterator[Metric]:
        """Each log dir's filesystem: what a disk-filling alert divides by."""
        available = GaugeMetricFamily(
            "tierlog_log_dir_available_bytes", "Bytes the broker may still write on the log "
            "dir's filesystem", None, ["log_dir"],
        )  # fmt: skip
        capacity = GaugeMetricFamily(
            "tierlog_log_dir_capacity_bytes", "Size of the log dir's filesystem", None,
            ["log_dir"],
        )  # fmt: skip
        for log_dir in self.manager.config.log_dirs:
            space = os.statvfs(log_dir)
            available.add_metric([str(log_dir)], space.f_bavail * space.f_frsize)
            capacity.add_metric([str(log_dir)], space.f_blocks * space.f_frsize)
        yield from (available, capacity)


class RemoteReadCollector:
    """The remote reader's chunk cache and served bytes, read at scrape time."""

    def __init__(self, reader: RemoteLogReader):
        self.reader = reader

    def collect(self) -> Iterator[Metric]:
        stats = self.reader.ranges.cache.stats()
        yield CounterMetricFamily(
            "tierlog_remote_cache_hits_total", "Remote chunks found in the disk cache", stats.hits
        )
        yield CounterMetricFamily(
            "tierlog_remote_cache_misses_total", "Remote chunks not in the disk cache (fetched)",
            stats.misses,
        )  # fmt: skip
        yield CounterMetricFamily(
            "tierlog_remote_cache_evictions_total", "Chunks evicted to keep the cache's bounds",
            stats.evictions,
        )  # fmt: skip
        yield CounterMetricFamily(
            "tierlog_remote_cache_discarded_total", "Torn or corrupt cache files thrown away",
            stats.discarded,
        )  # fmt: skip
        yield GaugeMetricFamily(
            "tierlog_remote_cache_size_bytes", "Bytes of chunks in the disk cache", stats.size_bytes
        )
        yield GaugeMetricFamily(
            "tierlog_remote_cache_entries", "Chunks in the disk cache", stats.entries
        )
        yield GaugeMetricFamily(
            "tierlog_remote_cache_max_bytes", "The disk cache's byte limit",
            self.reader.ranges.cache.max_bytes,
        )  # fmt: skip
        yield GaugeMetricFamily(
            "tierlog_remote_cache_read_ahead_bytes",
            "Bytes of chunks read ahead and not read yet (part of the cache's size)",
            stats.read_ahead_bytes,
        )
        yield GaugeMetricFamily(
            "tierlog_remote_read_ahead_memory_bytes",
            "Memory read-ahead holds: chunks not read yet, and room for its GETs in flight",
            self.reader.ranges.read_ahead_memory_held_bytes,
        )
        yield GaugeMetricFamily(
            "tierlog_remote_read_ahead_memory_max_bytes",
            "The limit of read-ahead's memory over all readers",
            self.reader.ranges.read_ahead_memory_bytes,
        )
        yield CounterMetricFamily(
            "tierlog_remote_cache_read_ahead_hits_total", "Chunks read ahead, then read",
            stats.read_ahead_hits,
        )  # fmt: skip
        yield CounterMetricFamily(
            "tierlog_remote_cache_read_ahead_evicted_unread_total",
            "Chunks read ahead and evicted before anyone read them (wasted GETs)",
            stats.read_ahead_evicted_unread,
        )
        yield CounterMetricFamily(
            "tierlog_remote_read_bytes_total",
            "Record bytes served from the remote tier (Fetch and Subscribe below the local start)",
            self.reader.bytes_read,
        )


class MetricsInterceptor(grpc.aio.ServerInterceptor):
    """Counts, times and sizes every call; the outermost interceptor, so it sees refusals.

    Request and response bytes are counted where gRPC (de)serializes the messages, from
    the bytes at hand, and record bytes where the service has them (its
    ``RECORD_BYTES_LISTENER``): never by asking a message its size or reading its bytes
    field back, which for a 1 MiB fetch cost a serialization and a copy each.
    """

    def __init__(self, metrics: SidecarMetrics):
        self.metrics = metrics

    async def intercept_service(
        self,
        continuation: Callable[[grpc.HandlerCallDetails], Any],
        handler_call_details: grpc.HandlerCallDetails,
    ) -> Any:
        handler = await continuation(handler_call_details)
        if handler is None:
            return None
        name = call_name(handler_call_details)
        labels = (name.service, name.method)
        inner = inner_behavior(handler)
        metrics = self.metrics

        if not handler.response_streaming or not inspect.isasyncgenfunction(inner):
            # unary, a stream_unary coroutine, or a streaming one that uses context.write

            async def plain(request: Any, context: Context) -> Any:
                with _ObservedCall(metrics, name, context):
                    return await inner(request, context)

            behavior: Callable[..., Any] = plain
        else:
            request_streaming = handler.request_streaming

            async def streaming(request: Any, context: Context) -> AsyncIterator[Any]:
                with _ObservedCall(metrics, name, context):
                    messages = _MessageTimer(metrics.stream_message_duration.labels(*labels))
                    if request_streaming:
                        request = messages.requests(request)
                    else:
                        messages.arrived()
                    async for response in inner(request, context):
                        messages.answered()
                        yield response
                        messages.sent()

            behavior = streaming
        return with_behavior(
            handler,
            behavior,
            request_deserializer=_counting_deserializer(
                handler.request_deserializer, metrics.request_bytes.labels(*labels)
            ),
            response_serializer=_counting_serializer(
                handler.response_serializer, metrics.response_bytes.labels(*labels)
            ),
        )


def _counting_deserializer(
    deserialize: Callable[[bytes], Any] | None, counter: Counter
) -> Callable[[bytes], Any]:
    def counted(data: bytes) -> Any:
        counter.inc(len(data))
        return data if deserialize is None else deserialize(data)

    return counted


def _counting_serializer(
    serialize: Callable[[Any], bytes] | None, counter: Counter
) -> Callable[[Any], bytes]:
    def counted(message: Any) -> bytes:
        data: bytes = message if serialize is None else serialize(message)
        counter.inc(len(data))
        return data

    return counted


class _MessageTimer:
    """One stream's per-message latency, what its client sees of each produce or fetch.

    A response answers the oldest request not yet answered (ProduceStream answers each
    request, in order), timed from that request's arrival: the one request of a
    server-streaming call arrives with the call. A response with no request left to
    answer (Subscribe's second and later) is timed from the previous one's send, as a
    Fetch that long-polls again: the wait for records counts, as it does in a Fetch.
    """

    def __init__(self, histogram: Histogram):
        self.histogram = histogram
        self._unanswered: deque[float] = deque()  # arrival times, oldest first
        self._last_sent = time.perf_counter()

    def arrived(self) -> None:
        self._unanswered.append(time.perf_counter())

    def requests(self, requests: AsyncIterable[Any]) -> AsyncIterator[Any]:
        """``requests``, each noted as it arrives."""
        return _ArrivingRequests(requests, self)

    def answered(self) -> None:
        started = self._unanswered.popleft() if self._unanswered else self._last_sent
        self.histogram.observe(time.perf_counter() - started)

    def sent(self) -> None:
        self._last_sent = time.perf_counter()


class _ArrivingRequests:
    """A stream's request iterator that tells its ``_MessageTimer`` of each arrival.

    An iterator object, not an async generator: one the handler leaves unfinished is
    not finalized later in another task."""

    def __init__(self, requests: AsyncIterable[Any], timer: _MessageTimer):
        self._requests = aiter(requests)
        self._timer = timer

    def __aiter__(self) -> _ArrivingRequests:
        return self

    async def __anext__(self) -> Any:
        request = await anext(self._requests)
        self._timer.arrived()
        return request


class _ObservedCall:
    """One call's bookkeeping: timing, status code, and the error and record-bytes listeners."""

    def __init__(self, metrics: SidecarMetrics, name: CallName, context: Context):
        self.metrics = metrics
        self.labels = (name.service, name.method)
        self.context = context
        appends = name.service == "LogService" and name.method in ("Produce", "ProduceStream")
        self._topic_bytes = metrics.topic_bytes_in if appends else metrics.topic_bytes_out
        self._started = 0.0

    def __enter__(self) -> _ObservedCall:
        self._started = time.perf_counter()
        # Set, never reset: each call runs in a task of its own, so in a context of its
        # own.  A reset must happen in the context its token came from, and a streaming
        # call's generator is not always closed there (asyncio closes an abandoned one in
        # a task of its own): the reset raised ValueError, and the gauge stayed up.
        ERROR_LISTENER.set(self._error)
        RECORD_BYTES_LISTENER.set(self._record_bytes)
        self.metrics.requests_in_flight.labels(*self.labels).inc()  # last: nothing can fail after
        return self

    def __exit__(
        self,
        kind: type[BaseException] | None,
        error: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        metrics = self.metrics
        try:
            duration_s = time.perf_counter() - self._started
            metrics.request_duration.labels(*self.labels).observe(duration_s)
            metrics.requests.labels(*self.labels, self._code(error).name).inc()
        finally:
            metrics.requests_in_flight.labels(*self.labels).dec()

    def _code(self, error: BaseException | None) -> grpc.StatusCode:
        # GeneratorExit: a streaming call's generator closed before its end, which only
        # happens when the call ended first (the client cancelled or went away).
        if isinstance(error, asyncio.CancelledError | GeneratorExit):
            expired = self.context.time_remaining() is not None and (
                self.context.time_remaining() <= 0
            )
            return grpc.StatusCode.DEADLINE_EXCEEDED if expired else grpc.StatusCode.CANCELLED
        if error is not None and not isinstance(error, grpc.aio.AbortError):
            return grpc.StatusCode.UNKNOWN
        code = self.context.code()
        return code if isinstance(code, grpc.StatusCode) else grpc.StatusCode.OK

    def _error(self, reason: str) -> None:
        self.metrics.errors.labels(*self.labels, reason).inc()

    def _record_bytes(self, topic: str, size: int) -> None:
        self._topic_bytes.labels(topic).inc(size)
