"""A partition's leader, epoch, replicas and ISR as Metadata reports them, through
either front door: the replica manager's view with replication, else the owner alone."""

from __future__ import annotations

from collections.abc import Iterable, Iterator

from tierlog.broker.ownership import NO_OWNER, Broker
from tierlog.broker.partitions import UNREPLICATED_LEADER_EPOCH, Partitions
from tierlog.replication.replica_manager import Leadership, ReplicaManager
from tierlog.storage.topic_partition import TopicPartition

__all__ = ["leaderships_state", "partition_leadership", "partition_leaderships"]


def partition_leadership(partitions: Partitions[ReplicaManager], tp: TopicPartition) -> Leadership:
    replicas = partitions.replicas
    if replicas is None:
        return _owner_as_replicas(partitions.ownership.owner(tp))
    return replicas.leadership(tp)


def partition_leaderships(
    partitions: Partitions[ReplicaManager], tps: Iterable[TopicPartition]
) -> Iterator[Leadership]:
    """``partition_leadership`` of each of ``tps``, what they share read once."""
    replicas = partitions.replicas
    if replicas is None:
        return (_owner_as_replicas(partitions.ownership.owner(tp)) for tp in tps)
    return replicas.leaderships(tps)


def leaderships_state(partitions: Partitions[ReplicaManager]) -> object:
    """A value that is equal from one call to the next while ``partition_leaderships``
    names every partition as before: the replica manager's ``published_version``, else
    the ownership plan (replaced whole when it changes)."""
    replicas = partitions.replicas
    if replicas is None:
        return partitions.ownership
    return replicas.published_version


def _owner_as_replicas(owner: Broker | None) -> Leadership:
    """Kafka's leader epoch, replicas and ISR of a partition with one owner: the owner is
    all of them, at epoch 0; a partition nobody serves (moving) has none, at epoch -1."""
    if owner is None:
        return Leadership(NO_OWNER, "", -1, [], [])
    return Leadership(
        owner.node_id, owner.address, UNREPLICATED_LEADER_EPOCH, [owner.node_id], [owner.node_id]
    )
