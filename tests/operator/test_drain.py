"""Scale-down through the tier loses nothing: the operator as a process against the real
API server, three real sidecars on one ``file://`` tier, and a producer that never stops.

Before the scale-down the leaving broker holds records the tier lacks: closed segments
its uploader has not reached yet (``remote.log.manager.task.interval.ms`` is Kafka's 30 s)
and its active segment, which only a roll would send. The operator releases the leaving
broker's partitions to nobody (clients get a retriable error meanwhile), waits for that
broker to say everything is in the tier, hands the partitions to the staying brokers and
only then shrinks the StatefulSet. As elsewhere in these tests there is no kubelet:
``Brokers`` starts the sidecars, writes their Pods, projects the ConfigMap's plan into
their file, and stops broker 2's sidecar once the StatefulSet no longer wants it.
"""

from __future__ import annotations

import time
from collections import Counter
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from tests.operator.conftest import Brokers, RunningOperator, shared_file_tier, wait_for
from tests.operator.test_handlers import apply, cluster, condition, events, get, ready_cluster
from tests.operator.test_handlers import topic as topic_resource
from tests.support.kube import ControlPlane
from tests.support.producing import Acknowledged, sending_in_background
from tierlog.api.v1 import log_service_pb2, log_service_pb2_grpc
from tierlog.client import Consumer, ConsumerRecord, Producer, TopicPartition
from tierlog.client.rpc import open_channel

pytestmark = pytest.mark.slow

TOPIC = "orders"
PARTITIONS = 6
LATEST, LATEST_TIERED = -1, -5  # ListOffsets' special timestamps (KIP-1005 for the tier)


def offset(address: str, partition: int, timestamp_ms: int) -> int:
    channel = open_channel(address)
    try:
        request = log_service_pb2.ListOffsetsRequest(
            topic=TOPIC, partition=partition, timestamp_ms=timestamp_ms
        )
        return int(log_service_pb2_grpc.LogServiceStub(channel).ListOffsets(request).offset)
    finally:
        channel.close()


def read_partition(address: str, partition: int, count: int) -> list[ConsumerRecord]:
    tp = TopicPartition(TOPIC, partition)
    with Consumer({"bootstrap.servers": address, "max.poll.records": 10_000}) as consumer:
        consumer.assign([tp])
        consumer.seek(tp, 0)
        records: list[ConsumerRecord] = []
        deadline = time.monotonic() + 60
        while len(records) < count and time.monotonic() < deadline:
            records += consumer.poll(500)
        records += consumer.poll(200)  # nothing more must come
        return records


def test_a_scale_down_loses_no_acknowledged_record(
    kube: ControlPlane,
    operator: RunningOperator,
    brokers_for: Callable[[str, str], Brokers],
    tmp_path: Path,
) -> None:
    ns = operator.namespace
    brokers = brokers_for(ns, "demo")
    tier = shared_file_tier(tmp_path / "tier")
    ready_cluster(kube, ns, brokers, "demo", 3, tier=tier)
    configs = {"remote.storage.enable": True, "segment.bytes": 4096}
    apply(kube, ns, topic_resource(TOPIC, "demo", PARTITIONS, **configs))
    wait_for(
        "the topic Ready",
        lambda: condition(get(kube, ns, "tierlogtopic", TOPIC), "Ready")["status"] == "True",
    )
    before: list[int] = wait_for(
        "the plan of the topic",
        lambda: get(kube, ns, "tierlogcluster", "demo")["status"]["assignment"].get(TOPIC),
    )
    leaving = [partition for partition, owner in enumerate(before) if owner == 2]
    assert leaving, before
    brokers.project()

    acked = Acknowledged()
    producer = Producer(
        {
            "bootstrap.servers": brokers.sidecars[0].address,
            "linger.ms": 5,
            "batch.size": 1024,  # several batches a segment, so segments roll
            "request.timeout.ms": 10_000,
            "delivery.timeout.ms": 180_000,
        }
    )
    sent = 0

    def send(partition: int) -> None:
        nonlocal sent
        value = b"p%d-%06d-" % (partition, sent) + b"x" * 80
        producer.send(TOPIC, value, partition=partition).add_done_callback(acked.track(value))
        sent += 1

    for _ in range(150):  # ~15 KB a partition: a few closed segments and an active one
        for partition in range(PARTITIONS):
            send(partition)
    assert producer.flush(timeout_s=60)
    assert not acked.failures, acked.failures[:3]
    leaver = brokers.sidecars[2].address
    for partition in leaving:  # the tier lacks some of what broker 2 acknowledged
        assert offset(leaver, partition, LATEST_TIERED) < offset(leaver, partition, LATEST)

    def send_a_round() -> None:
        for partition in range(PARTITIONS):
            send(partition)
        time.sleep(0.02)

    phases: set[str] = set()
    with sending_in_background(send_a_round):
        apply(kube, ns, cluster("demo", brokers=2, tier=tier))

        def scaled_down() -> bool:
            brokers.project()  # the kubelet updates the pods' ConfigMap volume
            body = get(kube, ns, "tierlogcluster", "demo")
            phases.add(condition(body, "Progressing")["reason"])
            return bool(get(kube, ns, "statefulset", "demo")["spec"]["replicas"] == 2)

        wait_for("the drained scale-down", scaled_down, timeout_s=180)
        # The StatefulSet controller deletes the pod; killed here, so nothing it still
        # had could reach anyone on the way out.
        brokers.sidecars[2].kill()
        time.sleep(1)  # the producer goes on against two brokers
    assert producer.flush(timeout_s=120)
    producer.close()
    assert not acked.failures, acked.failures[:3]
    assert "Draining" in phases, phases  # HandingOver lasts one pass: seen in the Events

    body = get(kube, ns, "tierlogcluster", "demo")
    after = body["status"]["assignment"][TOPIC]
    assert all(owner in (0, 1) for owner in after)
    assert [after[p] for p in range(PARTITIONS) if p not in leaving] == [
        before[p] for p in range(PARTITIONS) if p not in leaving
    ]
    reasons = [reason for reason, _ in events(kube, ns)]
    for step in ("PartitionsReleased", "PartitionsHandedOver", "Scaled"):
        assert step in reasons, reasons

    by_partition = Counter(partition for partition, _ in acked.where.values())
    stored: dict[bytes, tuple[int, int]] = {}
    for partition in range(PARTITIONS):
        records = read_partition(brokers.sidecars[0].address, partition, by_partition[partition])
        offsets = [record.offset for record in records]
        assert offsets == list(range(len(offsets))), f"partition {partition}: not contiguous"
        values = Counter(record.value for record in records)
        assert not [v for v, n in values.items() if n > 1], f"partition {partition}: duplicates"
        for record in records:
            if record.value is not None:
                stored[record.value] = (partition, record.offset)
    missing = [value for value in acked.where if value not in stored]
    assert not missing, missing[:5]
    assert all(stored[value] == where for value, where in acked.where.items())
    assert sum(by_partition[p] for p in leaving) > 150 * len(leaving)  # it wrote during the drain


def test_a_scale_down_that_would_lose_an_untiered_topic_is_refused(
    kube: ControlPlane,
    operator: RunningOperator,
    brokers_for: Callable[[str, str], Brokers],
    tmp_path: Path,
) -> None:
    ns = operator.namespace
    brokers = brokers_for(ns, "demo")
    tier = shared_file_tier(tmp_path / "tier")
    ready_cluster(kube, ns, brokers, "demo", 2, tier=tier)
    apply(kube, ns, topic_resource("local", "demo", 4))  # remote.storage.enable is false
    wait_for(
        "the topic in the plan",
        lambda: 1 in get(kube, ns, "tierlogcluster", "demo")["status"]["assignment"]["local"],
    )
    apply(kube, ns, cluster("demo", brokers=1, tier=tier))

    def refused() -> dict[str, Any] | None:
        body = get(kube, ns, "tierlogcluster", "demo")
        return body if condition(body, "Degraded")["status"] == "True" else None

    body = wait_for("the refusal", refused)
    assert condition(body, "Degraded")["reason"] == "ScaleDownRefused"
    assert "topics local are not tiered" in condition(body, "Degraded")["message"]
    assert get(kube, ns, "statefulset", "demo")["spec"]["replicas"] == 2
    assert -1 not in body["status"]["assignment"]["local"]  # nothing was released
