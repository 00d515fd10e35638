"""A real Prometheus scrapes a real sidecar; every dashboard query and alert returns series.

The sidecar gets traffic through the client first so its per-topic, per-error and
tier series exist: calls that fail (gRPC, and Kafka on its Kafka listener), a
tiered topic with two partitions produced, uploaded to a real MinIO bucket (its first
PUTs answered SlowDown by a fault proxy and retried), read back from the start out of
the tier, records deleted, and read again by a consumer group that commits (the
consumer-group row and the lag alert). A real
``tierlog-operator`` against the test API server reconciles a cluster and a topic whose
passes fail (no sidecar answers without a kubelet), so its series exist too.
Prometheus gives the targets the labels the ServiceMonitors would (``namespace``, ``pod``,
``service``, ``endpoint``, the brokers' ``tierlog_cluster``; the operator's own labels
honoured, so the brokers it expects keep their cluster's namespace), and Grafana's
variables are replaced by those values (``$__rate_interval`` by ``1m``). The broker is
"watched-0" of the operator's cluster "watched"; a second sidecar is "other-0" of a
cluster "other" in the same namespace, which the dashboards must tell apart.

Alert expressions are checked selector by selector: a healthy broker must not fire
them, but every series they watch must exist. The rule file is loaded into the
Prometheus too, and every rule must evaluate without error.

These brokers do not replicate: the replication row and alerts have their own check on
three replicating brokers (tests/replication/test_observability.py).
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import grpc
import pytest
from kafka import KafkaProducer

from tests.deploy.monitoring import (
    DASHBOARDS,
    REPLICATION_GROUP,
    RULES,
    Alert,
    alerts,
    dashboard_queries,
    metric_selectors,
    substitute,
)
from tests.kafka.test_protocol import METADATA, METADATA_V, NO_ID, _metadata
from tests.kafka.wire import KafkaWire
from tests.operator.conftest import start_operator
from tests.support.dashboards import assert_every_dashboard_query_has_data, without_replication
from tests.support.fault_proxy import FaultProxy
from tests.support.kube import ControlPlane
from tests.support.minio import MinioServer
from tests.support.prometheus import PrometheusServer, ScrapeTarget, start_prometheus
from tests.support.scrape import METRICS, metrics_address, scrape, wait_for_calls_in_flight
from tests.support.sidecars import SidecarProcess, free_port, start_sidecar
from tierlog.api.v1 import log_service_pb2, log_service_pb2_grpc
from tierlog.client import Consumer, Producer, TopicPartition
from tierlog.client.admin import AdminClient
from tierlog.client.errors import TierlogError

pytestmark = pytest.mark.slow

OPERATOR = {"namespace": "tierlog-system", "pod": "tierlog-operator-0"}
CRD_DIR = Path(__file__).resolve().parents[2] / "deploy" / "base" / "crds"
TOPIC = "orders"
OPERATOR_DASHBOARD = [path for path in DASHBOARDS if path.stem == "tierlog-operator"]
BROKER_DASHBOARDS = [path for path in DASHBOARDS if path not in OPERATOR_DASHBOARD]


PARTITIONS = [TopicPartition(TOPIC, 0), TopicPartition(TOPIC, 1)]
# The streams cancelled by their clients, one before Prometheus starts, one after.
CANCELLED_SUBSCRIBES = 'tierlog_requests_total{method="Subscribe",code="CANCELLED"}'
# Small segments that go to the tier as soon as they close and then leave the disk, so
# reading from the start reads the tier.
TIERED = {
    "segment.bytes": "4096",
    "remote.storage.enable": "true",
    "local.retention.bytes": "0",
    "file.delete.delay.ms": "0",
    # A bound far off: the bound's series exist (TierlogTierBehindBound watches them).
    "tierlog.remote.segment.max.upload.interval.ms": "3600000",
}
SIDECAR_CONFIGS = (
    METRICS,
    "log.flush.interval.messages=1",  # fsyncs to time
    "remote.log.manager.task.interval.ms=100",
    "log.retention.check.interval.ms=200",
)


def _s3_configs(minio: MinioServer, proxy: FaultProxy, work: Path) -> list[str]:
    """The sidecar's tier: a MinIO bucket, reached through a proxy that can inject faults."""
    credentials = minio.write_credentials(work / "s3-credentials")
    return [
        f"tierlog.tier.url=s3://{minio.create_bucket('observability')}/tier",
        f"tierlog.tier.s3.endpoint.url={proxy.url}",
        f"tierlog.tier.s3.region={minio.region}",
        "tierlog.tier.s3.path.style.access.enabled=true",
        f"tierlog.tier.s3.credentials.path={credentials}",
    ]


def _produce(address: str) -> None:
    with AdminClient(address) as admin:
        admin.create_topic(TOPIC, len(PARTITIONS), TIERED)
        with pytest.raises(TierlogError):  # TOPIC_ALREADY_EXISTS: an error series
            admin.create_topic(TOPIC, len(PARTITIONS), {})
    # Batches under segment.bytes (a bigger one would be refused as too large).
    with Producer({"bootstrap.servers": address, "linger.ms": 5, "batch.size": 2048}) as producer:
        sent = [producer.send(TOPIC, b"order %-100d" % i, key=b"%d" % (i % 17)) for i in range(400)]
        producer.flush()
        assert all(future.result(timeout=10) for future in sent)


def _grpc_call_that_fails(address: str) -> None:
    """A Fetch of a topic nobody made: a call ending NOT_FOUND, which the error ratio counts."""
    with grpc.insecure_channel(address) as channel:
        stub = log_service_pb2_grpc.LogServiceStub(channel)
        with pytest.raises(grpc.RpcError) as refused:
            stub.Fetch(log_service_pb2.FetchRequest(topic="nobody", offset=0), timeout=10)
        assert refused.value.code() == grpc.StatusCode.NOT_FOUND


def _kafka_request_that_fails(kafka_port: int) -> None:
    """A Metadata request for a topic nobody made: an error series of the Kafka listener."""
    wire = KafkaWire(kafka_port)
    try:
        answer = wire.call(METADATA, METADATA_V, _metadata([{"name": "nobody", "topic_id": NO_ID}]))
        assert answer.topics[0].error_code.name == "unknown_topic_or_partition"
    finally:
        wire.close()


def _produce_through_kafka(kafka_port: int, count: int) -> None:
    producer = KafkaProducer(bootstrap_servers=f"127.0.0.1:{kafka_port}", acks="all")
    try:
        sent = [producer.send(TOPIC, b"kafka %d" % i, key=b"%d" % i) for i in range(count)]
        assert all(future.get(timeout=10) for future in sent)
    finally:
        producer.close()


def _consume_from_the_start(address: str, expected: int = 400, group: str = "") -> None:
    """Read ``expected`` records from the start; as ``group``'s consumer, commit them."""
    config = {"bootstrap.servers": address}
    if group:
        config |= {"group.id": group, "enable.auto.commit": "false"}
    with Consumer(config) as consumer:
        consumer.assign(PARTITIONS)
        consumer.seek_to_beginning()
        read, deadline = 0, time.monotonic() + 30
        while read < expected and time.monotonic() < deadline:
            read += len(consumer.poll(200))
        assert read == expected
        if group:
            consumer.commit()  # the consumer-group series, and a lag of 0


def _a_stream_its_client_cancels(sidecar: SidecarProcess, cancelled: int) -> None:
    """A Subscribe waiting at the log end, cancelled by its client once the sidecar has
    it: the sidecar's ``cancelled``-th CANCELLED Subscribe. (A consumer's close may end its
    FetchSession ``OK`` instead: the sidecar can see the end of the consumer's requests
    before the cancel. A Subscribe sends no requests, so only the cancel ends it.)"""
    with grpc.insecure_channel(sidecar.address) as channel:
        stub = log_service_pb2_grpc.LogServiceStub(channel)
        request = log_service_pb2.SubscribeRequest(topic=TOPIC, offset=-1, max_wait_ms=0)
        waiting = stub.Subscribe(request)
        wait_for_calls_in_flight(sidecar, "Subscribe", 1)
        waiting.cancel()
    _wait_for(
        metrics_address(sidecar.output),
        "tierlog_requests_total",
        cancelled,
        grpc_service="LogService",
        method="Subscribe",
        code="CANCELLED",
    )


def _wait_for(
    metrics: str, name: str, at_least: float, timeout_s: float = 60, **labels: str
) -> None:
    deadline = time.monotonic() + timeout_s
    while scrape(metrics).value(name, **labels) < at_least:
        assert time.monotonic() < deadline, f"{name}{labels} stayed under {at_least}"
        time.sleep(0.2)


def _tier_traffic(address: str, metrics: str) -> None:
    """Uploads (the first PUTs answered SlowDown and retried), reads of the start from the
    tier once the disk let it go, then DeleteRecords, which deletes in the tier too."""
    _wait_for(metrics, "tierlog_remote_uploaded_segments_total", 4, topic=TOPIC)
    _wait_for(metrics, "tierlog_retention_deleted_segments_total", 2)
    _consume_from_the_start(address)
    _wait_for(metrics, "tierlog_remote_read_bytes_total", 1)
    with AdminClient(address) as admin:
        for tp in PARTITIONS:
            admin.delete_records(tp, 50)
    _wait_for(metrics, "tierlog_remote_deleted_segments_total", 1, topic=TOPIC)


# Two clusters and a topic for a real operator to reconcile (no pods: no kubelet here).
# "refused" carries a pod label the CRD lets through but Kubernetes refuses on the
# StatefulSet, so its passes fail and retry: the failure series exist.
OPERATOR_WORK = """
apiVersion: tierlog.io/v1alpha1
kind: TierlogCluster
metadata: {name: watched}
spec: {brokers: 1}
---
apiVersion: tierlog.io/v1alpha1
kind: TierlogCluster
metadata: {name: refused}
spec:
  brokers: 1
  template: {pod: {labels: {team: "not a label value!"}}}
---
apiVersion: tierlog.io/v1alpha1
kind: TierlogTopic
metadata: {name: orders}
spec: {cluster: watched, partitions: 1}
"""


@contextmanager
def _operator_at_work(plane: ControlPlane, namespace: str, work: Path) -> Iterator[str]:
    """A real ``tierlog-operator`` reconciling two clusters and a topic in ``namespace``;
    its metrics address."""
    plane.kubectl("apply", "--server-side", "-k", str(CRD_DIR))
    for crd in ("tierlogclusters.tierlog.io", "tierlogtopics.tierlog.io"):
        plane.kubectl("wait", "--for=condition=Established", "--timeout=60s", f"crd/{crd}")
    running = start_operator(plane, namespace, work / "operator.log", "--standalone")
    try:
        plane.kubectl("apply", "-n", namespace, "-f", "-", input=OPERATOR_WORK)
        address = running.metrics_url.removeprefix("http://").removesuffix("/metrics")
        deadline = time.monotonic() + 90
        while True:
            found = scrape(address)
            passes = found.labelled("tierlog_operator_reconciliations_total")
            failures = found.labelled("tierlog_operator_reconcile_failures_total")
            if len(passes) == 2 and failures:  # both kinds reconciled, and a pass failed
                break
            assert time.monotonic() < deadline, f"{passes} {failures}\n{running.output}"
            time.sleep(0.5)
        yield address
    finally:
        running.stop()


@pytest.fixture(scope="module")
def namespace(control_plane: ControlPlane) -> str:
    """Of the operator's clusters, and of the brokers Prometheus scrapes."""
    return control_plane.create_namespace("observed")


@pytest.fixture(scope="module")
def values(namespace: str) -> dict[str, str]:
    """What Grafana's variables select on the brokers' dashboards."""
    return {"namespace": namespace, "cluster": "watched", "pod": "watched-0", "topic": TOPIC}


@pytest.fixture(scope="module")
def prometheus(
    tmp_path_factory: pytest.TempPathFactory,
    minio: MinioServer,
    control_plane: ControlPlane,
    namespace: str,
) -> Iterator[PrometheusServer]:
    work = tmp_path_factory.mktemp("observability")
    with _operator_at_work(control_plane, namespace, work) as operator_metrics:
        yield from _brokers_and_prometheus(work, minio, namespace, operator_metrics)


def _brokers_and_prometheus(
    work: Path, minio: MinioServer, namespace: str, operator_metrics: str
) -> Iterator[PrometheusServer]:
    proxy = FaultProxy(f"127.0.0.1:{minio.port}")
    proxy.slow_down(3, method="PUT")  # S3 error series, from real retried requests
    kafka_port = free_port()
    sidecar = start_sidecar(
        work / "broker",
        *SIDECAR_CONFIGS,
        f"listeners=PLAINTEXT://127.0.0.1:{kafka_port}",
        *_s3_configs(minio, proxy, work),
    )
    other = start_sidecar(work / "other", METRICS)  # the only broker of cluster "other"
    try:
        _produce(sidecar.address)
        _grpc_call_that_fails(sidecar.address)
        _kafka_request_that_fails(kafka_port)
        metrics = metrics_address(sidecar.output)
        _tier_traffic(sidecar.address, metrics)
        _a_stream_its_client_cancels(sidecar, 1)  # its series is there from the first scrape
        assert proxy.injected["slow_down"] == 3
        brokers = [("watched", metrics), ("other", metrics_address(other.output))]
        targets = [
            *(
                ScrapeTarget(
                    "tierlog-brokers",
                    address,
                    {
                        "namespace": namespace,
                        "pod": f"{cluster}-0",
                        "service": f"{cluster}-brokers",
                        "endpoint": "metrics",
                        "tierlog_cluster": cluster,
                    },
                )
                for cluster, address in brokers
            ),
            ScrapeTarget(
                "tierlog-operator",
                operator_metrics,
                {**OPERATOR, "service": "tierlog-operator-metrics", "endpoint": "metrics"},
                honor_labels=True,
            ),
        ]
        with start_prometheus(work / "prometheus", targets, [RULES]) as server:
            server.wait_for_samples()
            # So rates over the scrapes are not all zero.
            _traffic_again(sidecar, kafka_port)
            server.wait_for_samples(samples=6)
            _wait_for_two_samples(server, "tierlog_consumergroup_offset_commits_total")
            _wait_for_series(server, f"{CANCELLED_SUBSCRIBES} >= 2")
            yield server
    finally:
        sidecar.stop()
        other.stop()
        proxy.close()


def _wait_for_two_samples(server: PrometheusServer, name: str) -> None:
    """Until ``name``, whose series the last traffic made, has two samples: a rate over
    it has a value. (``wait_for_samples`` counts ``up``'s samples over the last minute,
    which traffic longer than six scrapes has already given.)"""
    _wait_for_series(server, f"count_over_time({name}[1m]) >= 2")


def _wait_for_series(server: PrometheusServer, expr: str, timeout_s: float = 60) -> None:
    deadline = time.monotonic() + timeout_s
    while not server.query(expr):
        assert time.monotonic() < deadline, f"no series for {expr} in {timeout_s} s"
        time.sleep(0.5)


def _traffic_again(sidecar: SidecarProcess, kafka_port: int) -> None:
    """The clients' way: the producer's ProduceStream and the consumer's FetchSession, both
    closed by their clients at the end (OK or CANCELLED, the normal ends of a stream); a
    Kafka client's produce; and a stream that ends CANCELLED."""
    address = sidecar.address
    _produce_through_kafka(kafka_port, 20)
    with Producer({"bootstrap.servers": address, "batch.size": 2048}) as producer:
        sent = [producer.send(TOPIC, b"more %d" % i, key=b"%d" % i) for i in range(100)]
        producer.flush()
        assert all(future.result(timeout=10) for future in sent)
    # The first 400, less the 50 DeleteRecords took from each partition, and these 120.
    _consume_from_the_start(address, 400 - 50 * len(PARTITIONS) + 120, group="billing")
    _a_stream_its_client_cancels(sidecar, 2)


def test_every_dashboard_query_returns_series(
    prometheus: PrometheusServer, values: dict[str, str]
) -> None:
    assert_every_dashboard_query_has_data(
        prometheus.url, values, BROKER_DASHBOARDS, without_replication
    )
    operator_values = {"namespace": OPERATOR["namespace"]}
    assert_every_dashboard_query_has_data(prometheus.url, operator_values, OPERATOR_DASHBOARD)


# Prometheus started after the first traffic: a window this long holds all it saw, the
# clients' last traffic (``_traffic_again``) however long the tests before took.
SINCE_START = "10m"


def _panel_query(dashboard: str, title: str, values: dict[str, str], ref: int = 0) -> str:
    """The panel's ``ref``-th query, its rates over all Prometheus saw."""
    path = next(path for path in DASHBOARDS if path.stem == dashboard)
    exprs = [query.expr for query in dashboard_queries(path) if query.where == title]
    return substitute(exprs[ref], {**values, "__rate_interval": SINCE_START})


def _one_value(prometheus: PrometheusServer, expr: str) -> float:
    [series] = prometheus.query(expr)
    return series.value


def test_produce_and_fetch_latency_show_the_streams_clients_use(
    prometheus: PrometheusServer, values: dict[str, str]
) -> None:
    """All the produce and fetch Prometheus saw came from the real producer and consumer,
    which stream: the latency panels have a value, per message, not a stream's life."""
    # Calls finished, by method, from a series every method has from the start (at 0): not
    # tierlog_requests_total, whose series are per status code. The producer half-closes
    # its stream then cancels it, so the call ends OK or CANCELLED as the two race, and a
    # code's series first seen in Prometheus' window shows no increase.
    used = prometheus.query(
        f'increase(tierlog_request_duration_seconds_count{{grpc_service="LogService"}}'
        f"[{SINCE_START}]) > 0"
    )
    assert {"ProduceStream", "FetchSession"} <= {series.labels["method"] for series in used}
    assert not {"Produce", "Fetch"} & {series.labels["method"] for series in used}
    for title in ("Produce latency", "Fetch latency"):
        for p50_p99 in (0, 1):
            latency_s = _one_value(
                prometheus, _panel_query("tierlog-cluster-overview", title, values, p50_p99)
            )
            assert 0 < latency_s < 10, f"{title}: {latency_s}"  # NaN fails too


def test_the_error_ratio_leaves_out_streams_their_clients_closed(
    prometheus: PrometheusServer, values: dict[str, str]
) -> None:
    closed = prometheus.query(f"increase({CANCELLED_SUBSCRIBES}[{SINCE_START}]) > 0")
    assert [series.labels["pod"] for series in closed] == [values["pod"]]
    for door, ref in (("gRPC", 0), ("Kafka", 1)):
        ratio = _one_value(
            prometheus, _panel_query("tierlog-cluster-overview", "Error ratio", values, ref)
        )
        assert abs(ratio) < 1e-9, f"a quiet run's {door} error ratio is {ratio}"


def test_two_clusters_in_one_namespace_are_told_apart(
    prometheus: PrometheusServer, values: dict[str, str]
) -> None:
    for cluster, brokers in (("watched", 1), ("other", 1), (".*", 2)):
        chosen = {**values, "cluster": cluster}
        for title in ("Brokers ready", "Brokers scraped"):
            found = _one_value(prometheus, _panel_query("tierlog-cluster-overview", title, chosen))
            assert found == brokers, f"{title} of cluster {cluster}: {found}"


@pytest.mark.parametrize(
    "alert",
    [alert for alert in alerts() if alert.group != REPLICATION_GROUP],
    ids=lambda alert: alert.name,
)
def test_every_alert_watches_series_that_exist(prometheus: PrometheusServer, alert: Alert) -> None:
    prometheus.query(alert.expr)  # valid PromQL on real data (empty: nothing is wrong)
    for selector in metric_selectors(alert.expr):
        assert prometheus.query(selector), f"{alert.name}: no series for {selector}"


def test_the_loaded_rules_evaluate_without_errors(prometheus: PrometheusServer) -> None:
    deadline = time.monotonic() + 20
    while time.monotonic() < deadline:
        rules = prometheus.rules()
        if rules and all(rule["health"] != "unknown" for rule in rules):
            break
        time.sleep(0.5)
    assert {rule["name"] for rule in rules} == {alert.name for alert in alerts()}
    assert [(r["name"], r.get("lastError")) for r in rules if r["health"] != "ok"] == []
    # The "refused" cluster's failing passes make TierlogReconciliationFailing pending (its
    # `for` is longer than this test); a healthy broker fires nothing. The log-dir alerts
    # watch this machine's real disk, which may well be under 20 % free: theirs to decide.
    states = {rule["name"]: rule["state"] for rule in rules}
    assert states.pop("TierlogReconciliationFailing") == "pending"
    # "refused" asks for a broker that never starts (no target, no `up`): it is missed.
    assert states.pop("TierlogBrokerDown") == "pending"
    [down] = [rule for rule in rules if rule["name"] == "TierlogBrokerDown"]
    assert [alert["labels"]["tierlog_cluster"] for alert in down["alerts"]] == ["refused"]
    for machine_disk in ("TierlogLogDirFilling", "TierlogLogDirAlmostFull"):
        states.pop(machine_disk)
    assert {name: state for name, state in states.items() if state != "inactive"} == {}
