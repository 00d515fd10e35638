"""The group coordinator in a replicated cluster: ``__consumer_offsets`` is created with
three replicas, a commit is acknowledged once every in-sync replica holds it, and when
the coordinator's broker is killed the group's offsets are served by the new leader of
its partition, which the client finds by itself, and whose metrics report them."""

from __future__ import annotations

from tests.support.scrape import METRICS, scrape_sidecar
from tierlog.client import Cluster, TopicPartition
from tierlog.client.groups import GroupClient, OffsetAndMetadata
from tierlog.coordinator.offsets_topic import OFFSETS_TOPIC, partition_for_group

from .conftest import ClusterFactory, wait_for
from .test_failover import FAST_FAILOVER

GROUP = "billing"
PARTITIONS = 3
TP = TopicPartition("orders", 0)


def test_a_killed_coordinators_commits_are_served_by_the_new_leader(
    replicated_brokers: ClusterFactory,
) -> None:
    cluster = replicated_brokers(
        3, *FAST_FAILOVER, f"offsets.topic.num.partitions={PARTITIONS}", METRICS
    )
    cluster.create_topic("orders", (0, 1, 2))
    view = Cluster(cluster.servers.split(","))
    group = GroupClient(view, GROUP)
    for offset in range(1, 6):
        group.commit({TP: OffsetAndMetadata(offset, f"m{offset}")})
    partition = partition_for_group(GROUP, PARTITIONS)
    state = cluster.state(OFFSETS_TOPIC, partition)
    assert sorted(state.replicas) == [0, 1, 2]  # offsets.topic.replication.factor 3
    coordinator = state.leader
    assert group.coordinator() == cluster.broker(coordinator).address
    wait_for(lambda: len(cluster.state(OFFSETS_TOPIC, partition).isr) == 3, "a full ISR")
    cluster.broker(coordinator).kill()
    wait_for(
        lambda: cluster.state(OFFSETS_TOPIC, partition).leader not in (coordinator, -1),
        "a new leader of the group's partition",
    )
    committed = group.committed([TP])[TP]  # NOT_COORDINATOR / lost connection: found again
    assert committed is not None and (committed.offset, committed.metadata) == (5, "m5")
    assert group.coordinator() != cluster.broker(coordinator).address
    group.commit({TP: OffsetAndMetadata(6)})
    # The new coordinator reports the group's offsets, read back from its replica.
    new_leader = cluster.broker(cluster.state(OFFSETS_TOPIC, partition).leader)
    committed_series = scrape_sidecar(new_leader).value(
        "tierlog_consumergroup_committed_offset", consumergroup=GROUP, topic="orders", partition="0"
    )
    assert committed_series == 6
    cluster.broker(coordinator).start()  # back as a follower: it copies the new commit
    again = GroupClient(Cluster([cluster.broker(coordinator).address]), GROUP)
    found = again.committed([TP])[TP]
    assert found is not None and found.offset == 6
    view.close()
