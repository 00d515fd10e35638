"""The new leader a NOT_LEADER_OR_FOLLOWER answer names (KIP-951): its id and epoch per
partition, and its Kafka endpoint once per answer, so a client sends the retry straight
to it instead of first asking for metadata. Produce carries both from v10, Fetch from
v16; a version without the fields drops them (``codec.build``)."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from tierlog.kafka.broker import KafkaBroker
from tierlog.replication.leadership import partition_leadership
from tierlog.storage.topic_partition import TopicPartition

__all__ = ["current_leader", "node_endpoints"]


def current_leader(broker: KafkaBroker, tp: TopicPartition) -> dict[str, int]:
    """``tp``'s leader and epoch as Metadata would report them (-1, -1: none now)."""
    leadership = partition_leadership(broker.partitions, tp)
    return {"leader_id": leadership.leader_id, "leader_epoch": leadership.leader_epoch}


def node_endpoints(broker: KafkaBroker, leaders: Iterable[int]) -> list[dict[str, Any]]:
    """The Kafka endpoints of ``leaders`` this broker knows (unknown ones are left out:
    the client asks for metadata then, as before KIP-951)."""
    endpoints = []
    for node_id in sorted(set(leaders)):
        address = broker.address_of(node_id)
        if address is not None:
            endpoints.append({"node_id": node_id, "host": address[0], "port": address[1]})
    return endpoints
