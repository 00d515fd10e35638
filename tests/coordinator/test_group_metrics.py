"""Consumer groups' series: a real sidecar's /metrics after commits, a DeleteGroups and a
``kill -9``; and the hooks the membership code calls, over real offsets states."""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.parser import text_string_to_metric_families

from tests.support.scrape import METRICS, Scrape, scrape_sidecar
from tests.support.sidecars import SidecarProcess, start_sidecar
from tierlog.broker.partition_series import PartitionSeries
from tierlog.client import Consumer, TopicPartition
from tierlog.client.admin import AdminClient
from tierlog.client.cluster import Cluster
from tierlog.client.groups import GroupClient, OffsetAndMetadata
from tierlog.coordinator.group_metrics import GROUP_STATES, GroupMetrics
from tierlog.coordinator.group_records import CoordinatorRecord
from tierlog.coordinator.offset_records import OffsetCommitKey, OffsetCommitValue
from tierlog.coordinator.offsets_state import OffsetsState

ORDERS_0, ORDERS_1 = TopicPartition("orders", 0), TopicPartition("orders", 1)
COMMITTED = "tierlog_consumergroup_committed_offset"
COMMITS = "tierlog_consumergroup_offset_commits_total"
MEMBERS = "tierlog_consumergroup_members"
REBALANCES = "tierlog_consumergroup_rebalances_total"
GROUPS = "tierlog_consumergroups"


def _committed(scraped: Scrape) -> dict[tuple[str, str, str], float]:
    return {
        (labels["consumergroup"], labels["topic"], labels["partition"]): value
        for labels, value in (
            (dict(each), value) for each, value in scraped.labelled(COMMITTED).items()
        )
    }


def _by_group(scraped: Scrape, name: str) -> dict[str, float]:
    return {
        dict(labels)["consumergroup"]: value for labels, value in scraped.labelled(name).items()
    }


def _by_state(scraped: Scrape) -> dict[str, float]:
    return {dict(labels)["state"]: value for labels, value in scraped.labelled(GROUPS).items()}


@pytest.fixture
def sidecar(tmp_path: Path) -> Iterator[SidecarProcess]:
    sidecar = start_sidecar(tmp_path / "data", METRICS, "offsets.topic.num.partitions=2")
    try:
        with AdminClient(sidecar.address) as admin:
            admin.create_topic("orders", 2)
        yield sidecar
    finally:
        sidecar.stop()


def test_commits_are_series_and_a_deleted_group_takes_its_series_away(
    sidecar: SidecarProcess,
) -> None:
    cluster = Cluster([sidecar.address])
    try:
        billing, audit = GroupClient(cluster, "billing"), GroupClient(cluster, "audit")
        billing.commit({ORDERS_0: OffsetAndMetadata(5), ORDERS_1: OffsetAndMetadata(7)})
        billing.commit({ORDERS_0: OffsetAndMetadata(6)})
        audit.commit({ORDERS_1: OffsetAndMetadata(2)})

        scraped = scrape_sidecar(sidecar)
        assert _committed(scraped) == {
            ("billing", "orders", "0"): 6,
            ("billing", "orders", "1"): 7,
            ("audit", "orders", "1"): 2,
        }
        assert _by_group(scraped, COMMITS) == {"billing": 3, "audit": 1}
        assert _by_group(scraped, MEMBERS) == {"billing": 0, "audit": 0}  # no membership yet
        assert _by_state(scraped) == {"Empty": 2, "Assigning": 0, "Reconciling": 0, "Stable": 0}

        billing.delete()  # DeleteGroups
        scraped = scrape_sidecar(sidecar)
        assert _committed(scraped) == {("audit", "orders", "1"): 2}
        assert _by_group(scraped, COMMITS) == {"audit": 1}
        assert _by_group(scraped, MEMBERS) == {"audit": 0}
        assert _by_state(scraped)["Empty"] == 1
    finally:
        cluster.close()


def test_committed_offsets_are_read_back_from_the_log_after_kill_9(
    sidecar: SidecarProcess,
) -> None:
    cluster = Cluster([sidecar.address])
    try:
        GroupClient(cluster, "billing").commit({ORDERS_1: OffsetAndMetadata(9)})
    finally:
        cluster.close()
    sidecar.kill()
    sidecar.start()
    cluster = Cluster([sidecar.address])
    try:
        # Answered once the group's partition is loaded again (the load is lazy).
        assert GroupClient(cluster, "billing").committed([ORDERS_1])[ORDERS_1] is not None
    finally:
        cluster.close()
    scraped = scrape_sidecar(sidecar)
    assert _committed(scraped) == {("billing", "orders", "1"): 9}
    assert _by_group(scraped, COMMITS) == {"billing": 0}  # a counter of this process


def test_a_live_groups_members_and_rebalances_are_series(tmp_path: Path) -> None:
    """Two real consumers join a group by heartbeats; the coordinator reports them."""
    sidecar = start_sidecar(
        tmp_path / "live",
        METRICS,
        "offsets.topic.num.partitions=1",
        "group.consumer.heartbeat.interval.ms=100",
    )
    try:
        with AdminClient(sidecar.address) as admin:
            admin.create_topic("orders", 2)
        config = {"bootstrap.servers": sidecar.address, "group.id": "billing"}
        with Consumer(config) as first, Consumer(config) as second:
            for consumer in (first, second):
                consumer.subscribe("orders")
            deadline = time.monotonic() + 30
            while len(first.assignment()) + len(second.assignment()) < 2 or not (
                first.assignment() and second.assignment()
            ):
                assert time.monotonic() < deadline, "the two never split the partitions"
                first.poll(50)
                second.poll(50)
            scraped = scrape_sidecar(sidecar)
            assert _by_group(scraped, MEMBERS) == {"billing": 2}
            # One rebalance for the first member's join and one for the second's.
            assert _by_group(scraped, REBALANCES)["billing"] >= 2
        # Both left on close: the group is empty, and so reported.
        scraped = scrape_sidecar(sidecar)
        assert _by_group(scraped, MEMBERS) == {"billing": 0}
        assert _by_state(scraped)["Empty"] == 1
    finally:
        sidecar.stop()


# -- the hooks, over real states of a coordinator's partitions -----------------------------


class Coordinated:
    """What GroupMetrics reads of a coordinator: partition 0 holds every group here."""

    def __init__(self) -> None:
        self.states: dict[int, OffsetsState | None] = {0: OffsetsState()}
        self.log_offset = 0

    def partition_of(self, group: str) -> int:
        return 0

    def coordinated_partitions(self) -> dict[int, OffsetsState | None]:
        return dict(self.states)

    def commit(self, group: str, offset: int | None) -> None:
        value = None if offset is None else OffsetCommitValue(offset, 0, "", -1)
        record = CoordinatorRecord(OffsetCommitKey(group, "orders", 0), value)
        state = self.states[0]
        assert state is not None
        state.replay(record, self.log_offset)
        self.log_offset += 1


def _collect(metrics: GroupMetrics) -> Scrape:
    registry = CollectorRegistry()
    registry.register(metrics)
    text = generate_latest(registry).decode()
    return Scrape(
        {
            (sample.name, frozenset(sample.labels.items())): sample.value
            for family in text_string_to_metric_families(text)
            for sample in family.samples
        }
    )


def test_membership_and_rebalances_reported_by_hooks() -> None:
    coordinated = Coordinated()
    metrics = GroupMetrics(coordinated, PartitionSeries())
    coordinated.commit("billing", 4)
    metrics.membership_changed("orders-app", "Assigning", 2)  # members, no offsets yet
    metrics.rebalance_completed("orders-app")
    metrics.membership_changed("orders-app", "Stable", 3)
    metrics.rebalance_completed("orders-app")

    scraped = _collect(metrics)
    assert _by_group(scraped, MEMBERS) == {"billing": 0, "orders-app": 3}
    rebalances = _by_group(scraped, "tierlog_consumergroup_rebalances_total")
    assert rebalances == {"billing": 0, "orders-app": 2}
    assert _by_state(scraped) == {"Empty": 1, "Assigning": 0, "Reconciling": 0, "Stable": 1}

    metrics.group_removed("orders-app")
    scraped = _collect(metrics)
    assert _by_group(scraped, MEMBERS) == {"billing": 0}
    assert _by_group(scraped, "tierlog_consumergroup_rebalances_total") == {"billing": 0}


def test_series_of_groups_gone_from_the_log_or_the_broker_are_dropped() -> None:
    coordinated = Coordinated()
    metrics = GroupMetrics(coordinated, PartitionSeries())
    coordinated.commit("billing", 4)
    metrics.offsets_committed("billing", 1)
    metrics.membership_changed("orders-app", "Stable", 1)
    assert _by_group(_collect(metrics), COMMITS) == {"billing": 1, "orders-app": 0}

    coordinated.commit("billing", None)  # its last offset expired (a tombstone)
    scraped = _collect(metrics)
    assert _by_group(scraped, COMMITS) == {"orders-app": 0}
    assert _committed(scraped) == {}

    coordinated.states[0] = None  # led again, loading: the groups it reported stay
    assert _by_group(_collect(metrics), MEMBERS) == {"orders-app": 1}

    coordinated.states.clear()  # the partition is led elsewhere now
    scraped = _collect(metrics)
    assert _by_group(scraped, MEMBERS) == _by_group(scraped, COMMITS) == {}
    assert _by_state(scraped) == dict.fromkeys(GROUP_STATES, 0)
