"""The running pods themselves: brokers and operator run as non-root on a read-only root
filesystem, and a real Prometheus scraping them (as the ServiceMonitors would) answers
every dashboard query with data.

The cluster tiers to MinIO through a fault proxy on the bridge that answers the first
PUTs ``SlowDown``, so the S3 error series exist from real retried uploads; a Job gives
the brokers traffic (an error, produce, fetch, records deleted after their upload), and
a cluster whose StatefulSet the API server refuses gives the operator failing passes.
"""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.deploy.monitoring import DASHBOARDS
from tests.e2e.conftest import OPERATOR_NAMESPACE, Node
from tests.e2e.workloads import (
    Brokers,
    apply,
    count_records,
    make_topic,
    produce_records,
    run_job,
    tiered_cluster,
)
from tests.support.cluster.layout import GATEWAY
from tests.support.cluster.node import kubectl
from tests.support.dashboards import (
    assert_every_dashboard_query_has_data,
    without_replication_or_kafka,
)
from tests.support.fault_proxy import FaultProxy
from tests.support.minio import MinioServer
from tests.support.prometheus import PrometheusServer, ScrapeTarget, start_prometheus

pytestmark = pytest.mark.e2e

TOPIC, RECORDS = "observed", 2000
# Small segments (and batches under them) that close and go to the tier at the next pass.
TIERED: dict[str, object] = {"remote.storage.enable": True, "segment.bytes": 16384}
OPERATOR_PODS = "app.kubernetes.io/component=operator"
OPERATOR_DASHBOARD = [path for path in DASHBOARDS if path.stem == "tierlog-operator"]
BROKER_DASHBOARDS = [path for path in DASHBOARDS if path not in OPERATOR_DASHBOARD]
# Passes that fail: a pod label Kubernetes refuses on the StatefulSet (the CRD lets it by).
REFUSED = {
    "apiVersion": "tierlog.io/v1alpha1",
    "kind": "TierlogCluster",
    "metadata": {"name": "refused"},
    "spec": {"brokers": 1, "template": {"pod": {"labels": {"team": "not a label value!"}}}},
}


@pytest.fixture(scope="module")
def brokers(one_node: Node, operator: str, tier: MinioServer) -> Iterator[Brokers]:
    proxy = FaultProxy(f"{GATEWAY}:{tier.port}", host=GATEWAY)
    proxy.slow_down(3, method="PUT")
    try:
        with tiered_cluster(one_node, tier, "observed", endpoint=proxy.url) as cluster:
            yield cluster
    finally:
        proxy.close()


def _pods(node: Node, namespace: str, selector: str) -> list[dict[str, Any]]:
    listed = json.loads(node.kubectl("get", "pods", "-n", namespace, "-l", selector, "-o", "json"))
    pods: list[dict[str, Any]] = listed["items"]
    assert pods, f"no pod {selector} in {namespace}"
    return pods


def _containers(node: Node, brokers: Brokers) -> list[tuple[str, str, str]]:
    """(namespace, pod, container) of each broker and of the operator."""
    found = [(brokers.namespace, f"{brokers.name}-{i}", "tierlog") for i in range(brokers.count)]
    for pod in _pods(node, OPERATOR_NAMESPACE, OPERATOR_PODS):
        found.append((OPERATOR_NAMESPACE, pod["metadata"]["name"], "operator"))
    return found


def test_brokers_and_operator_run_as_non_root_on_a_read_only_root_filesystem(
    one_node: Node, brokers: Brokers
) -> None:
    for namespace, pod, container in _containers(one_node, brokers):
        where = ["exec", "-n", namespace, pod, "-c", container, "--"]
        uid = one_node.kubectl(*where, "id", "-u").strip()
        assert uid == "10001", f"{pod}/{container} runs as uid {uid}"
        written = kubectl(one_node.layout, *where, "sh", "-c", "echo probe > /probe")
        assert written.returncode != 0, f"{pod}/{container} wrote to /"
        assert "Read-only file system" in written.stderr, written.stderr


def _traffic(node: Node, brokers: Brokers) -> None:
    """An error (the topic exists already), records produced and read back by a consumer
    group that commits them (the consumer-group row's series)."""
    make_topic(node, brokers, TOPIC, TIERED)
    script = (
        f"! tierlog topics create {TOPIC} --partitions 3"  # TOPIC_ALREADY_EXISTS
        f" && {produce_records(TOPIC, RECORDS)} --producer-props batch.size=2048"
        f" && {count_records(TOPIC, RECORDS, group='dashboards')}"
    )
    output = run_job(node, brokers, "traffic", script)
    assert output.strip().splitlines()[-1] == str(RECORDS), node.story(brokers.namespace)


DELETE_RECORDS = f"""
import os
from tierlog.client import TopicPartition
from tierlog.client.admin import AdminClient
with AdminClient(os.environ["TIERLOG_SERVER"].split(",")) as admin:
    for partition in range(3):
        admin.delete_records(TopicPartition("{TOPIC}", partition), -1)
"""


def _delete_records(node: Node, brokers: Brokers) -> None:
    """Every partition's records deleted, in the tier too (at the brokers' next pass)."""
    run_job(node, brokers, "delete-records", f"python3 - <<'EOF'{DELETE_RECORDS}EOF")


def _targets(node: Node, brokers: Brokers) -> list[ScrapeTarget]:
    """Each pod's metrics endpoint, labelled as the ServiceMonitors' targets are: the
    Prometheus Operator sets ``namespace``, ``pod``, ``service`` and ``endpoint`` on each;
    the brokers' ServiceMonitor (the operator's) adds ``tierlog_cluster``, and the
    operator's (the chart's) honours the operator's own labels."""
    broker_pods = _pods(node, brokers.namespace, brokers.selector)
    operator_pods = _pods(node, OPERATOR_NAMESPACE, OPERATOR_PODS)
    return [
        *(
            _target(pod, f"{brokers.name}-brokers", 9404, {"tierlog_cluster": brokers.name})
            for pod in broker_pods
        ),
        *(
            _target(pod, "tierlog-operator-metrics", 9100, {}, honor_labels=True)
            for pod in operator_pods
        ),
    ]


def _target(
    pod: dict[str, Any],
    service: str,
    port: int,
    extra: dict[str, str],
    *,
    honor_labels: bool = False,
) -> ScrapeTarget:
    labels = {
        "namespace": pod["metadata"]["namespace"],
        "pod": pod["metadata"]["name"],
        "service": service,
        "endpoint": "metrics",
        **extra,
    }
    address = f"{pod['status']['podIP']}:{port}"
    return ScrapeTarget(service, address, labels, honor_labels=honor_labels)


def _until_uploaded(node: Node, prometheus: PrometheusServer, brokers: Brokers) -> None:
    """Until a closed segment of the topic is in the tier (an upload pass every 30 s)."""
    uploaded = (
        f'tierlog_remote_uploaded_segments_total{{namespace="{brokers.namespace}",'
        f' topic="{TOPIC}"}} > 0'
    )
    deadline = time.monotonic() + 120
    while not prometheus.query(uploaded):
        assert time.monotonic() < deadline, f"nothing uploaded:\n{node.story(brokers.namespace)}"
        time.sleep(2)  # the brokers' next upload pass, and its scrape


def _until_every_query_has_data(prometheus: PrometheusServer, brokers: Brokers) -> None:
    """The tier's series come with the brokers' upload and deletion passes (every 30 s):
    ask again until they are there, then once more with the answer as the verdict."""
    deadline = time.monotonic() + 150
    while True:
        try:
            assert_every_dashboard_query_has_data(
                prometheus.url,
                {"namespace": brokers.namespace},
                BROKER_DASHBOARDS,
                without_replication_or_kafka,  # no replication, no Kafka client here
            )
            assert_every_dashboard_query_has_data(
                prometheus.url, {"namespace": OPERATOR_NAMESPACE}, OPERATOR_DASHBOARD
            )
            return
        except AssertionError:
            if time.monotonic() > deadline:
                raise
            time.sleep(5)  # the next scrape and the brokers' next pass


def test_prometheus_scraping_the_pods_answers_every_dashboard_query(
    one_node: Node, brokers: Brokers, tmp_path: Path
) -> None:
    apply(one_node, brokers.namespace, REFUSED)
    _traffic(one_node, brokers)
    with start_prometheus(tmp_path / "prometheus", _targets(one_node, brokers)) as prometheus:
        prometheus.wait_for_samples()
        _until_uploaded(one_node, prometheus, brokers)  # deleted before: never in the tier
        _delete_records(one_node, brokers)
        _until_every_query_has_data(prometheus, brokers)
