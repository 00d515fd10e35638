"""The Kafka listener's series: Kafka's RequestMetrics and SocketServer meters, named
as the sidecar's other series are (docs/METRICS.md, "Kafka listener").

Per API (Kafka's name, ``Produce``, ``Fetch``...: the ``request`` tag of Kafka's
``RequestsPerSec``): requests by the answer's first error code (``NONE`` when all went
well), every error code answered (per partition, as Kafka's ``ErrorsPerSec``), latency,
request and response bytes. Per listener: connections open, closed by why, refused at
accept by which limit, and how long accepting waited at ``max.connections``. Once the
listener serves (``serving``), every API and every reason has its series, at zero, so a
dashboard panel and an alert ratio have their series before the first Kafka client; a
sidecar without a Kafka listener has none. The fetch session cache (Kafka's
``NumIncrementalFetchSessions``, ``NumIncrementalFetchPartitionsCached`` and
``IncrementalFetchSessionEvictionsPerSec``) is read when scraped.
"""

from __future__ import annotations

from collections.abc import Iterator

from kio.schema.errors import ErrorCode
from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

from tierlog.kafka.fetch_sessions import FetchSessionCache
from tierlog.kafka.listener import api_name
from tierlog.kafka.observer import Closed, Refused, RequestDone
from tierlog.kafka.versions import API_VERSIONS

__all__ = ["KafkaMetrics"]


class KafkaMetrics:
    """A ``KafkaObserver`` over Prometheus series in the sidecar's registry."""

    def __init__(self, registry: CollectorRegistry, latency_buckets_s: tuple[float, ...]):
        self._registry = registry
        api = ["api"]
        self.requests = Counter(
            "tierlog_kafka_requests_total",
            "Kafka requests answered, by API and the answer's first error code (NONE: no error)",
            [*api, "code"], registry=registry,
        )  # fmt: skip
        self.errors = Counter(
            "tierlog_kafka_errors_total",
            "Error codes in Kafka answers, each partition's counted, by Kafka error name",
            [*api, "reason"], registry=registry,
        )  # fmt: skip
        self.request_duration = Histogram(
            "tierlog_kafka_request_duration_seconds",
            "Kafka requests, whole frame read to answer written", api,
            buckets=latency_buckets_s, registry=registry,
        )  # fmt: skip
        self.request_bytes = Counter(
            "tierlog_kafka_request_bytes_total",
            "Kafka request frames received, size prefix included", api, registry=registry,
        )  # fmt: skip
        self.response_bytes = Counter(
            "tierlog_kafka_response_bytes_total", "Kafka response frames sent", api,
            registry=registry,
        )  # fmt: skip
        self.connections = Gauge(
            "tierlog_kafka_connections", "Kafka client connections open", registry=registry
        )
        self.connections_closed = Counter(
            "tierlog_kafka_connections_closed_total", "Kafka client connections ended, by why",
            ["reason"], registry=registry,
        )  # fmt: skip
        self.connections_refused = Counter(
            "tierlog_kafka_connections_refused_total",
            "Kafka client connections closed at accept, by the limit they were over",
            ["reason"], registry=registry,
        )  # fmt: skip
        self.accept_blocked = Counter(
            "tierlog_kafka_accept_blocked_seconds_total",
            "Time the Kafka listener did not accept, max.connections being open",
            registry=registry,
        )  # fmt: skip

    def serving(self, fetch_sessions: FetchSessionCache) -> None:
        """The listener is up: every API's and every reason's series, at zero, and the
        fetch session cache's."""
        self._registry.register(_FetchSessionCollector(fetch_sessions))
        for key in API_VERSIONS:
            name = api_name(key)
            self.requests.labels(name, ErrorCode.none.name.upper())
            for series in (self.request_duration, self.request_bytes, self.response_bytes):
                series.labels(name)
        for closed in Closed:
            self.connections_closed.labels(closed.value)
        for refused in Refused:
            self.connections_refused.labels(refused.value)

    def kafka_request(self, done: RequestDone) -> None:
        self.requests.labels(done.api, done.outcome.name.upper()).inc()
        for code in done.errors:
            self.errors.labels(done.api, code.name.upper()).inc()
        self.request_duration.labels(done.api).observe(done.seconds)
        self.request_bytes.labels(done.api).inc(done.bytes_in)
        self.response_bytes.labels(done.api).inc(done.bytes_out)

    def kafka_connection_opened(self) -> None:
        self.connections.inc()

    def kafka_connection_closed(self, why: Closed) -> None:
        self.connections.dec()
        self.connections_closed.labels(why.value).inc()

    def kafka_connection_refused(self, why: Refused) -> None:
        self.connections_refused.labels(why.value).inc()

    def kafka_accept_blocked(self, seconds: float) -> None:
        self.accept_blocked.inc(seconds)


class _FetchSessionCollector(Collector):
    def __init__(self, cache: FetchSessionCache):
        self.cache = cache

    def collect(self) -> Iterator[Metric]:
        yield GaugeMetricFamily(
            "tierlog_kafka_fetch_sessions",
            "Incremental fetch sessions (KIP-227) the Kafka listener holds",
            value=self.cache.session_count,
        )
        yield GaugeMetricFamily(
            "tierlog_kafka_fetch_session_partitions",
            "Partitions held in the Kafka listener's incremental fetch sessions",
            value=self.cache.partition_count,
        )
        yield CounterMetricFamily(
            "tierlog_kafka_fetch_session_evictions",
            "Fetch sessions removed for being stale or to make room for a bigger one",
            value=self.cache.evictions,
        )
