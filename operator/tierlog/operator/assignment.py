"""Which broker owns which partition: the operator's plan, kept in the cluster's ConfigMap.

Brokers learn ownership from this plan (``tierlog.cluster.assignment.file``), so the
operator decides where data lives instead of a hash of the broker count: adding
brokers moves nothing (new brokers take new partitions), and removing brokers moves
exactly the leaving brokers' partitions, once the tier holds their data.

Rules, in order: a partition stays with its owner while that broker stays; a new
partition goes where the sidecar's own fallback would put it (``crc32(topic) + p``
over the sorted broker list, see ``tierlog.sidecar.ownership``), so a broker that has
not re-read the plan yet agrees with it; a partition whose owner leaves goes to the
staying broker owning fewest partitions (lowest id on ties). Deterministic throughout.
"""

from __future__ import annotations

import json
import zlib
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass

__all__ = ["Assignment", "plan"]

_VERSION = 1


@dataclass(frozen=True)
class Assignment:
    brokers: Mapping[int, str]  # broker id -> address clients dial
    topics: Mapping[str, tuple[int, ...]]  # topic -> owner id of each partition

    def owned_by(self, broker_id: int) -> list[tuple[str, int]]:
        return [
            (topic, partition)
            for topic, owners in sorted(self.topics.items())
            for partition, owner in enumerate(owners)
            if owner == broker_id
        ]

    def to_json(self) -> str:
        document = {
            "version": _VERSION,
            "brokers": {str(node): address for node, address in sorted(self.brokers.items())},
            "topics": {topic: list(owners) for topic, owners in sorted(self.topics.items())},
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
        )


def plan(
    brokers: Mapping[int, str],
    topics: Mapping[str, int],
    previous: Assignment | None = None,
    leaving: Iterable[int] = (),
) -> Assignment:
    """The assignment of ``topics`` (name -> partition count) over ``brokers``, keeping what
    ``previous`` placed on brokers that stay; ``leaving`` brokers keep nothing."""
    gone = set(leaving)
    staying = sorted(node for node in brokers if node not in gone)
    if not staying:
        raise ValueError("no broker to assign partitions to")
    earlier: Mapping[str, Sequence[int]] = previous.topics if previous else {}
    load = dict.fromkeys(staying, 0)
    kept: dict[str, list[int | None]] = {}
    for topic, count in sorted(topics.items()):
        owners: list[int | None] = []
        for partition in range(count):
            before = earlier.get(topic, ())
            owner = before[partition] if partition < len(before) else None
            if owner in load:
                load[owner] += 1
                owners.append(owner)
            else:
                owners.append(None)
        kept[topic] = owners
    placed: dict[str, tuple[int, ...]] = {}
    for topic, owners in kept.items():
        known = len(earlier.get(topic, ()))
        for partition, owner in enumerate(owners):
            if owner is not None:
                continue
            if partition >= known and not gone:  # new: where the sidecar's hash puts it
                chosen = staying[(zlib.crc32(topic.encode()) + partition) % len(staying)]
            else:  # its owner leaves
                chosen = min(staying, key=lambda node: (load[node], node))
            load[chosen] += 1
            owners[partition] = chosen
        placed[topic] = tuple(owner for owner in owners if owner is not None)
    return Assignment(brokers=dict(brokers), topics=placed)
