"""Which broker owns which partition: the operator's plan, kept in the cluster's ConfigMap.

Brokers learn ownership from this plan (``tierlog.cluster.assignment.file``), so the
operator decides where data lives instead of a hash of the broker count: adding
brokers moves nothing (new brokers take new partitions), and removing brokers moves
exactly the leaving brokers' partitions, once the tier holds their data.

Rules, in order: a partition stays with its owner while that broker stays; a new
partition goes where the sidecar's own fallback would put it (``crc32(topic) + p``
over the sorted broker list, see ``tierlog.broker.ownership``), so a broker that has
not re-read the plan yet agrees with it. A leaving broker's partition is first
*released*: placed on ``NO_OWNER``, so nobody serves it, and remembered as released by
that broker, whose volume holds the data the tier may still lack. Only ``hand_over``
gives it an owner again: back to the broker that released it if that one stays (a
scale-down called off), or to the staying broker owning fewest partitions (lowest id on
ties) once the releasing broker is drained. A new owner claims the partition's tier and
fences the old one, so handing over before the drain would lose the data not yet
uploaded. Deterministic throughout.

Each plan has a ``generation`` (``stamped``): the operator pushes every plan to the
brokers as well as writing it into the ConfigMap, and a broker follows a plan only if
it is not older than its own, so the generation must grow with every change, across
operator restarts and even if the ConfigMap is deleted and made again. It is the
previous plan's plus one, raised to the clock's milliseconds: a counter kept in the
ConfigMap, with the clock as a floor for when the ConfigMap is gone.
"""

from __future__ import annotations

import json
import zlib
from collections.abc import Collection, Iterable, Mapping, Sequence
from dataclasses import dataclass, field, replace

from tierlog.broker.ownership import NO_OWNER

__all__ = ["NO_OWNER", "Assignment", "hand_over", "plan", "stamped"]

_VERSION = 1


@dataclass(frozen=True)
class Assignment:
    brokers: Mapping[int, str]  # broker id -> address clients dial
    topics: Mapping[str, tuple[int, ...]]  # topic -> owner id of each partition, or NO_OWNER
    # topic -> partition -> the broker that released it (and holds its data meanwhile)
    released: Mapping[str, Mapping[int, int]] = field(default_factory=dict)
    generation: int = 0  # grows with every change of the plan (see ``stamped``)
    # broker id -> its rack (its node's zone), where known: replicas are placed across them
    racks: Mapping[int, str] = field(default_factory=dict)
    # broker id -> the address Kafka clients dial (where the brokers serve Kafka's protocol)
    kafka_brokers: Mapping[int, str] = field(default_factory=dict)

    def owned_by(self, broker_id: int) -> list[tuple[str, int]]:
        return [
            (topic, partition)
            for topic, owners in sorted(self.topics.items())
            for partition, owner in enumerate(owners)
            if owner == broker_id
        ]

    def unowned(self) -> list[tuple[str, int]]:
        return self.owned_by(NO_OWNER)

    def holder(self, topic: str, partition: int) -> int:
        """The broker whose volume has the partition's data: its owner, or while it moves,
        the broker that released it (NO_OWNER if unknown)."""
        owner = self.topics[topic][partition]
        if owner != NO_OWNER:
            return owner
        return self.released.get(topic, {}).get(partition, NO_OWNER)

    def to_json(self) -> str:
        document = {
            "version": _VERSION,
            "generation": self.generation,
            "brokers": {str(node): address for node, address in sorted(self.brokers.items())},
            "topics": {topic: list(owners) for topic, owners in sorted(self.topics.items())},
            "released": {
                topic: {str(partition): node for partition, node in sorted(by_partition.items())}
                for topic, by_partition in sorted(self.released.items())
                if by_partition
            },
        }
        if self.racks:
            document["racks"] = {str(node): rack for node, rack in sorted(self.racks.items())}
        if self.kafka_brokers:
            document["kafka_brokers"] = {
                str(node): address for node, address in sorted(self.kafka_brokers.items())
            }
        return json.dumps(document, indent=2, sort_keys=True) + "\n"

    @classmethod
    def from_json(cls, text: str) -> Assignment:
        document = json.loads(text)
        if document.get("version") != _VERSION:
            raise ValueError(f"unknown assignment version {document.get('version')!r}")
        return cls(
            brokers={int(node): str(address) for node, address in document["brokers"].items()},
            topics={
                str(topic): tuple(int(owner) for owner in owners)
                for topic, owners in document["topics"].items()
            },
            released={
                str(topic): {int(partition): int(node) for partition, node in by_partition.items()}
                for topic, by_partition in (document.get("released") or {}).items()
            },
            generation=int(document.get("generation", 0)),
            racks={int(node): str(rack) for node, rack in (document.get("racks") or {}).items()},
            kafka_brokers={
                int(node): str(address)
                for node, address in (document.get("kafka_brokers") or {}).items()
            },
        )


def plan(
    brokers: Mapping[int, str],
    topics: Mapping[str, int],
    previous: Assignment | None = None,
    leaving: Iterable[int] = (),
) -> Assignment:
    """The assignment of ``topics`` (name -> partition count) over ``brokers``, keeping what
    ``previous`` placed on brokers that stay; ``leaving`` brokers release theirs, and
    partitions released earlier stay unowned (see ``hand_over``)."""
    gone = set(leaving)
    staying = sorted(node for node in brokers if node not in gone)
    if not staying:
        raise ValueError("no broker to assign partitions to")
    earlier = previous or Assignment({}, {})
    load = dict.fromkeys(staying, 0)
    kept: dict[str, list[int | None]] = {}
    released: dict[str, dict[int, int]] = {}
    for topic, count in sorted(topics.items()):
        before: Sequence[int] = earlier.topics.get(topic, ())
        owners: list[int | None] = []
        for partition in range(min(count, len(before))):
            holder = earlier.holder(topic, partition)
            if holder in load and before[partition] == holder:  # it stays where it is
                load[holder] += 1
                owners.append(holder)
            elif holder in load or holder in gone:  # released, or to be released now
                owners.append(NO_OWNER)
                released.setdefault(topic, {})[partition] = holder
            else:
                owners.append(None)  # nobody known holds it: placed below
        kept[topic] = owners + [None] * (count - len(owners))
    placed: dict[str, tuple[int, ...]] = {}
    for topic, owners in kept.items():
        known = len(earlier.topics.get(topic, ()))
        for partition, owner in enumerate(owners):
            if owner is not None:
                continue
            if partition >= known and not gone:  # new: where the sidecar's hash puts it
                chosen = staying[(zlib.crc32(topic.encode()) + partition) % len(staying)]
            else:
                chosen = _least_loaded(load)
            load[chosen] += 1
            owners[partition] = chosen
        placed[topic] = tuple(owner for owner in owners if owner is not None)
    return Assignment(dict(brokers), placed, released)


def hand_over(
    assignment: Assignment, staying: Collection[int], drained: Collection[int] = ()
) -> Assignment:
    """Owners for released partitions: the broker that released one takes it back if it
    stays; a ``drained`` broker's (all its data in the tier) go to the least-loaded of
    ``staying``; the rest stay unowned."""
    load = {node: len(assignment.owned_by(node)) for node in sorted(staying)}
    topics = {topic: list(owners) for topic, owners in assignment.topics.items()}
    released = {topic: dict(by) for topic, by in assignment.released.items()}
    for topic, partition in assignment.unowned():
        holder = assignment.holder(topic, partition)
        if holder in load:
            chosen = holder
        elif holder in drained and load:
            chosen = _least_loaded(load)
        else:
            continue
        load[chosen] += 1
        topics[topic][partition] = chosen
        del released[topic][partition]
    return Assignment(
        assignment.brokers,
        {topic: tuple(owners) for topic, owners in topics.items()},
        {topic: by for topic, by in released.items() if by},
    )


def stamped(assignment: Assignment, previous: Assignment | None, now_ms: int) -> Assignment:
    """``assignment`` with its generation: the previous plan's if nothing changed, else
    the previous one's plus one or ``now_ms`` (the clock), whichever is larger."""
    if previous is None:
        return replace(assignment, generation=now_ms)
    unchanged = replace(assignment, generation=previous.generation)
    if unchanged.to_json() == previous.to_json():  # the same document as written
        return unchanged
    return replace(assignment, generation=max(previous.generation + 1, now_ms))


def _least_loaded(load: Mapping[int, int]) -> int:
    return min(load, key=lambda node: (load[node], node))
