"""The values the partition-state store keeps, and their JSON documents.

``PartitionState`` mirrors what Kafka's controller records for a partition: the replica
list (the first is the preferred leader), the leader (``NO_LEADER`` while offline), the
leader epoch (bumped by every election, carried by produce and fetch to fence stale
leaders), the in-sync replicas and the partition epoch (bumped by every change: the
version a compare-and-swap is made against, Kafka's ``partitionEpoch``). While the
partition is being reassigned (KIP-455), ``replicas`` is the full set, the target's
replicas first, and ``adding_replicas`` / ``removing_replicas`` say which of them are
joining and leaving (``tierlog.controller.reassignment``). The invariants hold for every
value that exists, so a document that breaks them is refused on read.

``BrokerLease`` is one broker's liveness: who holds it (one incarnation of the broker
process), when it was renewed, for how long that counts, and its broker epoch (bumped
each time a new incarnation takes it, Kafka's broker epoch). An incarnation that
stopped cleanly gives its lease up (``released``) rather than let it run out: the
broker counts as gone from that write on, as Kafka's controller fences a broker whose
controlled shutdown completed, and only a new incarnation, in the next broker epoch,
makes the lease current again.

A topic's partitions are stored in parts of ``PARTITIONS_PER_PART`` (``TopicLayout``),
so no object grows with the cluster, nor even with one topic.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from tierlog.storage.errors import KafkaStorageError

__all__ = [
    "LEGACY_TOPIC_ID",
    "NO_LEADER",
    "PARTITIONS_PER_PART",
    "BrokerLease",
    "PartitionState",
    "StatePart",
    "TopicLayout",
    "configs_from_json",
    "configs_to_json",
    "lease_from_document",
    "lease_to_document",
    "part_from_json",
    "part_to_json",
    "replica_assignment",
    "replication_factor",
    "split_into_parts",
]

NO_LEADER = -1
DOCUMENT_VERSION = 2
LEGACY_DOCUMENT_VERSION = 1  # a topic's partitions in one document, however many
CONFIGS_DOCUMENT_VERSION = 1
# A part's size: some 150 bytes a partition with three replicas, so a part stays far
# below a ConfigMap's 1 MiB up to some 30 replicas a partition while reassigning.
PARTITIONS_PER_PART = 1000
LEGACY_TOPIC_ID = "0" * 32  # Kafka's zero topic id: a topic from before topic ids
_TOPIC_ID = re.compile("[0-9a-f]{32}")  # a file name and a ConfigMap name may carry it


@dataclass(frozen=True)
class PartitionState:
    replicas: tuple[int, ...]
    leader: int
    leader_epoch: int
    isr: tuple[int, ...]
    partition_epoch: int = 0
    adding_replicas: tuple[int, ...] = ()  # target - original, while reassigning
    removing_replicas: tuple[int, ...] = ()  # original - target, while reassigning

    def __post_init__(self) -> None:
        problems = _problems(self)
        if problems:
            raise ValueError(f"invalid partition state {self}: {'; '.join(problems)}")

    @classmethod
    def new(cls, replicas: tuple[int, ...], leader_epoch: int = 0) -> PartitionState:
        """A new partition: every replica in sync, the first one leading in epoch 0 (or
        ``leader_epoch``: a partition restored from the tier goes on past its epochs)."""
        return cls(replicas, replicas[0], leader_epoch, replicas)

    @property
    def reassigning(self) -> bool:
        return bool(self.adding_replicas or self.removing_replicas)

    @property
    def target_replicas(self) -> tuple[int, ...]:
        """The replicas once a reassignment under way completes (``replicas`` if none)."""
        return tuple(r for r in self.replicas if r not in self.removing_replicas)

    def with_isr(self, isr: tuple[int, ...]) -> PartitionState:
        """The leader shrank or expanded its ISR (Kafka's AlterPartition): same leader epoch."""
        return self._with(self.leader, self.leader_epoch, isr, self.partition_epoch)

    def with_leader(self, leader: int, isr: tuple[int, ...] | None = None) -> PartitionState:
        """A new leader (or ``NO_LEADER``) in the next leader epoch."""
        return self._with(
            leader, self.leader_epoch + 1, self.isr if isr is None else isr, self.partition_epoch
        )

    def with_partition_epoch(self, partition_epoch: int) -> PartitionState:
        """The state as stored at ``partition_epoch`` (the store's compare-and-swap)."""
        return self._with(self.leader, self.leader_epoch, self.isr, partition_epoch)

    def _with(
        self, leader: int, leader_epoch: int, isr: tuple[int, ...], partition_epoch: int
    ) -> PartitionState:
        # The constructor, not ``dataclasses.replace``: a failover builds a state per
        # partition, and ``replace``'s generic field walk cost as much as the state's checks.
        return PartitionState(
            self.replicas,
            leader,
            leader_epoch,
            isr,
            partition_epoch,
            self.adding_replicas,
            self.removing_replicas,
        )


def replication_factor(partitions: Mapping[int, PartitionState]) -> int | None:
    """A topic's replication factor: the most replicas a partition will have once the
    reassignments under way are done (Kafka's tools show the first partition's count;
    the most is what a new placement must give every partition). None for no partition."""
    return max((len(state.target_replicas) for state in partitions.values()), default=None)


def replica_assignment(partitions: Mapping[int, PartitionState]) -> tuple[tuple[int, ...], ...]:
    """Each partition's replicas once the reassignments under way are done, by partition:
    where a new placement of the topic puts them again (a restore from the tier)."""
    return tuple(partitions[p].target_replicas for p in sorted(partitions))


def _problems(state: PartitionState) -> list[str]:
    # Each set built once: every state read or decided is checked here (a failover
    # checks one per partition), so this stays a handful of set operations.
    replicas, isr = set(state.replicas), set(state.isr)
    problems = []
    if not replicas:
        problems.append("no replicas")
    if len(replicas) != len(state.replicas):
        problems.append("a replica listed twice")
    if len(isr) != len(state.isr):
        problems.append("an in-sync replica listed twice")
    if not isr <= replicas:
        problems.append("an in-sync replica that is not a replica")
    if state.leader != NO_LEADER and state.leader not in isr:
        problems.append("a leader outside the ISR")
    if state.leader_epoch < 0 or state.partition_epoch < 0:
        problems.append("a negative epoch")
    if replicas and min(replicas) < 0:
        problems.append("a negative broker id")
    if state.adding_replicas or state.removing_replicas:
        moving = (*state.adding_replicas, *state.removing_replicas)
        if len(set(moving)) != len(moving) or not set(moving) <= replicas:
            problems.append("adding or removing replicas that are not distinct replicas")
        if state.removing_replicas and set(state.removing_replicas) >= replicas:
            problems.append("every replica removed")
    return problems


@dataclass(frozen=True)
class BrokerLease:
    broker: int
    holder: str  # one incarnation of the broker process
    renewed_at: float  # seconds since the epoch, the holder's clock
    duration_s: float
    broker_epoch: int
    # The incarnation said it is stopping (Kafka's InControlledShutdown, KIP-841): no
    # leader may add it to an ISR from then on, while it still fetches as a follower.
    in_controlled_shutdown: bool = False
    # The incarnation started on a log dir formatted at its start (a wiped disk, a new
    # volume: Kafka sees a new directory.id, KIP-858): an ISR it was left in promises
    # records its logs no longer hold, so no offline partition is led by it from there.
    logs_lost: bool = False
    # The incarnation finished its controlled shutdown and gave the lease up (Kafka's
    # controller fences a broker then: SHUTDOWN_NOW): it counts as gone at once, not
    # once the lease runs out. The record stays, so the next incarnation takes the next
    # broker epoch; no holder renews a lease given up.
    released: bool = False

    def current_at(self, now: float) -> bool:
        """Whether the lease still counts at ``now`` (seconds since the epoch) by its
        renewal time: a clock that is not the holder's, so a judgement to refuse by (an
        ISR addition, a hand-over target), not to fence by (the controller's ``Liveness``).
        A lease given up never counts."""
        return not self.released and now < self.renewed_at + self.duration_s


@dataclass(frozen=True)
class TopicLayout:
    """How a topic's partitions are split into stored objects ("parts"): part ``k`` holds
    partitions ``[k * partitions_per_part, (k + 1) * partitions_per_part)``; part 0, the
    head, also holds this layout. ``topic_id`` names one incarnation of the topic (Kafka's
    topic id): the parts after the head are stored under it, so a topic deleted and
    created again never reads its predecessor's parts."""

    topic_id: str
    partition_count: int
    partitions_per_part: int

    def part_of(self, partition: int) -> int:
        return partition // self.partitions_per_part

    @property
    def part_count(self) -> int:
        return max(1, -(-self.partition_count // self.partitions_per_part))


@dataclass(frozen=True)
class StatePart:
    """One stored object of a topic's partition state; the head's carries the layout."""

    topic_id: str
    index: int
    partitions: dict[int, PartitionState]
    layout: TopicLayout | None = None


def split_into_parts(
    partitions: Mapping[int, PartitionState], layout: TopicLayout
) -> dict[int, dict[int, PartitionState]]:
    """``partitions`` grouped by the part that holds each."""
    parts: dict[int, dict[int, PartitionState]] = {}
    for partition, state in sorted(partitions.items()):
        parts.setdefault(layout.part_of(partition), {})[partition] = state
    return parts


def part_to_json(part: StatePart) -> str:
    document: dict[str, Any] = {
        "version": DOCUMENT_VERSION,
        "topicId": part.topic_id,
        "part": part.index,
    }
    if part.layout is not None:
        document["partitionCount"] = part.layout.partition_count
        document["partitionsPerPart"] = part.layout.partitions_per_part
    document["partitions"] = {
        str(partition): {
            "replicas": list(state.replicas),
            "leader": state.leader,
            "leaderEpoch": state.leader_epoch,
            "isr": list(state.isr),
            "partitionEpoch": state.partition_epoch,
            "addingReplicas": list(state.adding_replicas),
            "removingReplicas": list(state.removing_replicas),
        }
        for partition, state in sorted(part.partitions.items())
    }
    return json.dumps(document, separators=(",", ":"))


def part_from_json(text: str, where: str) -> StatePart:
    """A part from its document; ``where`` names it in the error. A version 1 document
    (one object held all of a topic's partitions) reads as the head of a topic with
    ``LEGACY_TOPIC_ID`` whose head range covers every partition it has."""
    try:
        document = json.loads(text)
        partitions = _partitions(document["partitions"])
        if document.get("version") == LEGACY_DOCUMENT_VERSION:
            count = len(partitions)
            whole = TopicLayout(LEGACY_TOPIC_ID, count, max(PARTITIONS_PER_PART, count))
            return StatePart(LEGACY_TOPIC_ID, 0, partitions, whole)
        if document.get("version") != DOCUMENT_VERSION:
            raise ValueError(f"unknown version {document.get('version')!r}")
        topic_id, index = str(document["topicId"]), int(document["part"])
        if not _TOPIC_ID.fullmatch(topic_id) or index < 0:
            raise ValueError(f"part {index} of topic id {topic_id!r}")
        layout: TopicLayout | None = None
        if index == 0:
            per_part = int(document["partitionsPerPart"])
            if per_part < 1:
                raise ValueError(f"{per_part} partitions per part")
            layout = TopicLayout(topic_id, int(document["partitionCount"]), per_part)
        return StatePart(topic_id, index, partitions, layout)
    except (ValueError, KeyError, TypeError, AttributeError) as error:
        raise KafkaStorageError(f"{where}: not a partition-state document ({error})") from None


def _partitions(document: Any) -> dict[int, PartitionState]:
    return {
        int(partition): PartitionState(
            tuple(_ints(fields["replicas"])),
            int(fields["leader"]),
            int(fields["leaderEpoch"]),
            tuple(_ints(fields["isr"])),
            int(fields["partitionEpoch"]),
            # Absent from the documents written before reassignment existed.
            tuple(_ints(fields.get("addingReplicas", []))),
            tuple(_ints(fields.get("removingReplicas", []))),
        )
        for partition, fields in document.items()
    }


def configs_to_json(configs: Mapping[str, str]) -> str:
    return json.dumps(
        {"version": CONFIGS_DOCUMENT_VERSION, "configs": dict(sorted(configs.items()))}
    )


def configs_from_json(text: str, where: str) -> dict[str, str]:
    """A topic's config overrides from their document; ``where`` names it in the error."""
    try:
        document = json.loads(text)
        if document.get("version") != CONFIGS_DOCUMENT_VERSION:
            raise ValueError(f"unknown version {document.get('version')!r}")
        configs = document["configs"]
        if not all(isinstance(k, str) and isinstance(v, str) for k, v in configs.items()):
            raise ValueError("configs are not strings")
        return dict(configs)
    except (ValueError, KeyError, TypeError, AttributeError) as error:
        raise KafkaStorageError(f"{where}: not a topic-configs document ({error})") from None


def _ints(values: Any) -> list[int]:
    if not isinstance(values, list) or not all(isinstance(v, int) for v in values):
        raise ValueError(f"expected a list of broker ids, got {values!r}")
    return values


def lease_to_document(lease: BrokerLease) -> dict[str, Any]:
    return {
        "broker": lease.broker,
        "holder": lease.holder,
        "renewedAt": lease.renewed_at,
        "durationSeconds": lease.duration_s,
        "brokerEpoch": lease.broker_epoch,
        "inControlledShutdown": lease.in_controlled_shutdown,
        "logsLost": lease.logs_lost,
        "released": lease.released,
    }


def lease_from_document(document: Mapping[str, Any], where: str) -> BrokerLease:
    try:
        return BrokerLease(
            int(document["broker"]),
            str(document["holder"]),
            float(document["renewedAt"]),
            float(document["durationSeconds"]),
            int(document["brokerEpoch"]),
            bool(document.get("inControlledShutdown", False)),  # absent before KIP-841
            bool(document.get("logsLost", False)),  # absent before unclean recovery
            bool(document.get("released", False)),  # absent before leases were given up
        )
    except (ValueError, KeyError, TypeError) as error:
        raise KafkaStorageError(f"{where}: not a broker lease ({error})") from None
