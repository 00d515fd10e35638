"""Which broker owns which partition: a plan from the operator, or a hash of the broker list.

Every broker of a cluster is listed in ``tierlog.cluster.brokers`` as
``id@host:port,...`` (by default only this broker, which then owns everything).
Partition ``p`` of topic ``t`` belongs to the broker at position
``(crc32(t) + p) mod n`` of the list sorted by id: every broker computes the same
answer with no coordination, and a topic's partitions spread from a per-topic start,
as Kafka's replica assignment does. A broker asked about a partition it does not own
answers NOT_LEADER_OR_FOLLOWER with the owner's id and address.

Each broker's Kafka listener is listed beside it in ``tierlog.cluster.kafka.brokers``
(the same ``id@host:port,...`` form, each broker's advertised Kafka address), so any
broker can tell Kafka clients where every other one is (Metadata, NOT_LEADER answers).

In Kubernetes the operator decides instead (``tierlog.cluster.assignment.file``, a JSON
file in the cluster's ConfigMap, re-read while running): the brokers' addresses, their
Kafka addresses (``kafka_brokers``), (with replication) their racks, the zones of
their nodes, and the owner of each
partition it placed. Partitions it does not list fall back to the
hash, which is also where the operator places new partitions, so the two agree. A
partition placed on ``NO_OWNER`` (-1, Kafka's leader id for "no leader") is moving
between brokers: nobody serves it, Metadata reports leader -1 with no address, and
produce and fetch get NOT_LEADER_OR_FOLLOWER with no owner, a retriable error (the
client asks for metadata again and waits until an owner is named). The plan also says
which broker released it: that one still uploads what the tier lacks.

Each plan carries a ``generation`` that only grows (0 in a file from before there was
one): the operator also pushes every new plan to the brokers over gRPC, so a broker
may follow a newer plan than its file for a while, and must never step back to the
file's older one (``assignment_updates``).

Which partitions a broker *holds* (owns, or released and not yet handed over) bounds
the tier it writes: a broker that comes back with a stale volume must not claim the
tier of partitions others own now, which would fence their uploads.
"""

from __future__ import annotations

import json
import zlib
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path

from tierlog.api.errors import NotLeaderOrFollowerError
from tierlog.storage.topic_partition import TopicPartition

__all__ = [
    "ASSIGNMENT_VERSION",
    "NO_OWNER",
    "Broker",
    "Ownership",
    "parse_assignment",
    "read_assignment_file",
]

ASSIGNMENT_VERSION = 1
NO_OWNER = -1  # a placed partition nobody serves while it moves (Kafka's leader -1)


@dataclass(frozen=True, order=True)
class Broker:
    node_id: int
    address: str  # host:port clients dial
    rack: str | None = None  # Kafka's broker.rack (on Kubernetes its node's zone)
    # host:port Kafka clients dial (its ``advertised.listeners``' Kafka entry), if known
    kafka_address: str | None = None


@dataclass(frozen=True)
class Ownership:
    node_id: int
    brokers: tuple[Broker, ...]  # sorted by node id, this broker among them
    # topic -> owner id (or NO_OWNER) of each partition, as the operator placed them;
    # the rest hash
    placed: Mapping[str, tuple[int, ...]] = field(default_factory=dict)
    # topic -> partition -> the broker that released it (placed on NO_OWNER meanwhile)
    released: Mapping[str, Mapping[int, int]] = field(default_factory=dict)
    generation: int = 0  # the plan's, growing with each new plan the operator makes

    def __post_init__(self) -> None:
        if not any(broker.node_id == self.node_id for broker in self.brokers):
            raise ValueError(f"broker {self.node_id} is not in the cluster's broker list")
        known = {broker.node_id for broker in self.brokers}
        for topic, owners in self.placed.items():
            strangers = set(owners) - known - {NO_OWNER}
            if strangers:
                raise ValueError(f"{topic} is placed on unknown brokers {sorted(strangers)}")

    @property
    def me(self) -> Broker:
        return next(broker for broker in self.brokers if broker.node_id == self.node_id)

    def owner(self, tp: TopicPartition) -> Broker | None:
        """The broker that serves ``tp``; None while it moves (placed on NO_OWNER)."""
        owners = self.placed.get(tp.topic, ())
        if tp.partition < len(owners):
            placed = owners[tp.partition]
            return next((broker for broker in self.brokers if broker.node_id == placed), None)
        start = zlib.crc32(tp.topic.encode())
        return self.brokers[(start + tp.partition) % len(self.brokers)]

    def owns(self, tp: TopicPartition) -> bool:
        owner = self.owner(tp)
        return owner is not None and owner.node_id == self.node_id

    def holds(self, tp: TopicPartition) -> bool:
        """Whether this broker keeps ``tp``'s tier: it owns it, or released it and nobody
        owns it yet (a released partition of unknown origin counts, so nothing stalls)."""
        owner = self.owner(tp)
        if owner is not None:
            return owner.node_id == self.node_id
        releaser = self.released.get(tp.topic, {}).get(tp.partition)
        return releaser is None or releaser == self.node_id

    def check(self, tp: TopicPartition) -> None:
        """Raise NOT_LEADER_OR_FOLLOWER (with the owner, if any) unless this broker owns
        ``tp``."""
        owner = self.owner(tp)
        if owner is None:
            raise NotLeaderOrFollowerError(
                f"{tp} has no owner while it moves between brokers; retry",
                leader_id=NO_OWNER,
                leader_address="",
            )
        if owner.node_id != self.node_id:
            raise NotLeaderOrFollowerError(
                f"{tp} is owned by broker {owner.node_id} at {owner.address}",
                leader_id=owner.node_id,
                leader_address=owner.address,
            )


def read_assignment_file(path: Path, node_id: int) -> Ownership:
    """This broker's view of the operator's plan in ``path`` (see ``parse_assignment``).

    Raises ValueError (or OSError) for a file that is missing, unreadable or names a
    broker it does not list; a caller re-reading a changed file keeps its old view then.
    """
    try:
        return parse_assignment(path.read_text(), node_id)
    except (KeyError, TypeError, ValueError) as error:
        raise ValueError(f"{path}: {error}") from None


def parse_assignment(document_text: str, node_id: int) -> Ownership:
    """Broker ``node_id``'s view of a plan (``{"version", "generation", "brokers",
    "topics", "released", "racks", "kafka_brokers"}``); ValueError if it is not one this
    broker can follow."""
    try:
        document = json.loads(document_text)
        if not isinstance(document, dict):
            raise ValueError("not a JSON object")
        if document.get("version") != ASSIGNMENT_VERSION:
            raise ValueError(f"unknown assignment version {document.get('version')!r}")
        racks = document.get("racks") or {}
        kafka = document.get("kafka_brokers") or {}
        brokers = tuple(
            sorted(
                Broker(
                    int(node),
                    str(address),
                    None if node not in racks else str(racks[node]),
                    None if node not in kafka else str(kafka[node]),
                )
                for node, address in document["brokers"].items()
            )
        )
        placed = {
            str(topic): tuple(int(owner) for owner in owners)
            for topic, owners in document["topics"].items()
        }
        released = {
            str(topic): {int(partition): int(node) for partition, node in by_partition.items()}
            for topic, by_partition in (document.get("released") or {}).items()
        }
        generation = int(document.get("generation", 0))
    except (KeyError, TypeError, AttributeError) as error:
        raise ValueError(f"not an assignment: {type(error).__name__}: {error}") from None
    return Ownership(node_id, brokers, placed, released, generation)
