"""Which broker owns which partition: a static assignment from the broker config.

Every broker of a cluster is listed in ``tierlog.cluster.brokers`` as
``id@host:port,...`` (by default only this broker, which then owns everything).
Partition ``p`` of topic ``t`` belongs to the broker at position
``(crc32(t) + p) mod n`` of the list sorted by id: every broker computes the same
answer with no coordination, and a topic's partitions spread from a per-topic start,
as Kafka's replica assignment does. A broker asked about a partition it does not own
answers NOT_LEADER_OR_FOLLOWER with the owner's id and address.
"""

from __future__ import annotations

import zlib
from dataclasses import dataclass

from tierlog.api.errors import NotLeaderOrFollowerError
from tierlog.storage.checkpoints import TopicPartition

__all__ = ["Broker", "Ownership"]


@dataclass(frozen=True, order=True)
class Broker:
    node_id: int
    address: str  # host:port clients dial


@dataclass(frozen=True)
class Ownership:
    node_id: int
    brokers: tuple[Broker, ...]  # sorted by node id, this broker among them

    def __post_init__(self) -> None:
        if not any(broker.node_id == self.node_id for broker in self.brokers):
            raise ValueError(f"broker {self.node_id} is not in the cluster's broker list")

    @property
    def me(self) -> Broker:
        return next(broker for broker in self.brokers if broker.node_id == self.node_id)

    def owner(self, tp: TopicPartition) -> Broker:
        start = zlib.crc32(tp.topic.encode())
        return self.brokers[(start + tp.partition) % len(self.brokers)]

    def owns(self, tp: TopicPartition) -> bool:
        return self.owner(tp).node_id == self.node_id

    def check(self, tp: TopicPartition) -> None:
        """Raise NOT_LEADER_OR_FOLLOWER (with the owner) unless this broker owns ``tp``."""
        owner = self.owner(tp)
        if owner.node_id != self.node_id:
            raise NotLeaderOrFollowerError(
                f"{tp} is owned by broker {owner.node_id} at {owner.address}",
                leader_id=owner.node_id,
                leader_address=owner.address,
            )
