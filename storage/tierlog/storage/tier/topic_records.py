"""What a restore needs of a topic, kept in the bucket beside its partitions' objects.

A partition's manifest says which offsets the tier holds, but not the topic it
belongs to: how many partitions, which config overrides (``cleanup.policy``,
``retention.ms``...), which id. A cluster lost with its volumes would come back from
the bucket with its data but not its topics. So every tiered topic has one small
object, ``topics/<name>.json``, rewritten whole at each change of the topic (a
create, a config change, more partitions, a new replication factor or assignment) and
deleted with the topic's manifests. Fields added since the first format
(``replication_factor``, ``assignment``: each partition's replicas, the preferred leader
first) are optional: a record without one is read as an older version wrote it, and a
reader of that older version ignores them, so the format's version stays 1.

Last writer wins, with no fence: the authority on a topic is the broker's topic store
(or a replicated cluster's partition-state store, which changes by compare-and-swap);
this object is a copy of it. Every broker writes the state it has applied, in the
order it applied it, so a broker that lags may write an older state, but its next
write (once it has caught up) is the newest one: the last write of each broker is
the current state. A put is whole or absent (``ObjectStore.put``), so a reader never
sees half a record. The topic name is a legal object key segment (Kafka's rules:
``[a-zA-Z0-9._-]``, never ``.`` or ``..``), and ``topics/`` never collides with a
partition's prefix (four hex digits).
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from tierlog.storage.errors import KafkaStorageError, TierlogError
from tierlog.storage.names import validate_topic_name
from tierlog.storage.tier.json_fields import optional_whole_number, whole_number
from tierlog.storage.tier.store import ObjectStore

__all__ = [
    "TOPICS_PREFIX",
    "CorruptTopicRecordError",
    "TopicRecord",
    "delete_topic_record",
    "load_topic_records",
    "put_topic_record",
    "topic_record_key",
    "topic_record_names",
]

TOPICS_PREFIX = "topics/"
_FORMAT = 1


class CorruptTopicRecordError(KafkaStorageError):
    """A ``topics/`` object that is not a topic record of this format."""


@dataclass(frozen=True)
class TopicRecord:
    name: str
    partition_count: int
    configs: Mapping[str, str] = field(default_factory=dict)  # overrides, Kafka names
    topic_id: str = ""  # as the writing cluster derived it (``LogManager.topic_id``)
    # Replicas a partition had on the writing cluster; None when it had no replication
    # or when an older version wrote the record (a restore takes its own default then).
    replication_factor: int | None = None
    # Each partition's replicas (broker ids, the preferred leader first), by partition;
    # None as for ``replication_factor``. A restore places the topic so when it can.
    assignment: tuple[tuple[int, ...], ...] | None = None


def topic_record_key(name: str) -> str:
    validate_topic_name(name)
    return f"{TOPICS_PREFIX}{name}.json"


def put_topic_record(store: ObjectStore, record: TopicRecord) -> None:
    document = {
        "version": _FORMAT,
        "name": record.name,
        "partitions": record.partition_count,
        "configs": dict(sorted(record.configs.items())),
        "topic_id": record.topic_id,
        "replication_factor": record.replication_factor,
        "assignment": None if record.assignment is None else [list(r) for r in record.assignment],
    }
    body = (json.dumps(document, indent=2) + "\n").encode()
    store.put(topic_record_key(record.name), body)


def delete_topic_record(store: ObjectStore, name: str) -> None:
    store.delete([topic_record_key(name)])


def topic_record_names(store: ObjectStore) -> set[str]:
    """The names of the topics the store has a record of (one listing, no reads)."""
    return {
        info.key.removeprefix(TOPICS_PREFIX).removesuffix(".json")
        for info in store.list(TOPICS_PREFIX)
    }


def load_topic_records(store: ObjectStore) -> list[TopicRecord]:
    """Every topic record in the store, by name; ``CorruptTopicRecordError`` for one that
    does not decode (a restore must not create a topic with guessed configs)."""
    return [_decode(info.key, store.get(info.key)) for info in store.list(TOPICS_PREFIX)]


def _decode(key: str, body: bytes) -> TopicRecord:
    try:
        document: Any = json.loads(body)
        if document["version"] != _FORMAT:
            raise ValueError(f"unknown version {document['version']!r}")
        record = TopicRecord(
            name=str(document["name"]),
            partition_count=int(document["partitions"]),
            configs={str(k): str(v) for k, v in document["configs"].items()},
            topic_id=str(document.get("topic_id", "")),
            replication_factor=optional_whole_number(document.get("replication_factor")),
            assignment=_assignment(document.get("assignment")),
        )
        if topic_record_key(record.name) != key or record.partition_count < 1:
            raise ValueError(f"names topic {record.name!r} with {record.partition_count}")
        if record.replication_factor is not None and record.replication_factor < 1:
            raise ValueError(f"replication factor {record.replication_factor}")
        if record.assignment is not None and len(record.assignment) != record.partition_count:
            raise ValueError(f"{len(record.assignment)} partitions assigned")
    except (ValueError, KeyError, TypeError, AttributeError, TierlogError) as error:
        raise CorruptTopicRecordError(f"{key} is not a topic record: {error!r}") from None
    return record


def _assignment(value: object) -> tuple[tuple[int, ...], ...] | None:
    """Each partition's replicas: distinct broker ids, at least one (None: not kept)."""
    if value is None:
        return None
    if not isinstance(value, list):
        raise TypeError(f"assignment {value!r}")
    assignment = []
    for replicas in value:
        if not isinstance(replicas, list):
            raise TypeError(f"replicas {replicas!r}")
        brokers = tuple(whole_number(broker) for broker in replicas)
        if not brokers or len(set(brokers)) != len(brokers) or min(brokers) < 0:
            raise ValueError(f"replicas {list(brokers)}")
        assignment.append(brokers)
    return tuple(assignment)
