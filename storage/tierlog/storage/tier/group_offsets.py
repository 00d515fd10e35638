"""Consumer groups' committed offsets of tiered topics, kept in the bucket for a restore.

``__consumer_offsets`` is never tiered (its coordinator loads it from the local log), so
a cluster lost with its volumes loses its groups' positions, and a group resuming on a
cluster restored from the bucket would start over (``auto.offset.reset``). So each
group with committed offsets on tiered topics has one small object,
``groups/<sha-256 of the group id>.json`` (a group id is any string: the hash makes it a
key; the document names the group), holding those offsets, rewritten whole by the
group's coordinator when they changed (at most once a ``remote.log.manager.task.interval.ms``)
and deleted when the group has none left (deleted, expired). A restore commits them
again, each clamped to what the restored partition holds (``clamp_offset``).

Last writer wins, with no fence, as for topic records: the authority is the group's
``__consumer_offsets`` partition, this is a copy at most one interval behind it, and a
coordinator that lost the partition stops writing the group. A put is whole or absent,
so a reader never sees half a document. ``groups/`` never collides with a partition's
prefix (four hex digits) nor with ``topics/``.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from tierlog.storage.errors import KafkaStorageError, TierlogError
from tierlog.storage.tier.json_fields import whole_number
from tierlog.storage.tier.store import ObjectStore
from tierlog.storage.topic_partition import TopicPartition

__all__ = [
    "GROUPS_PREFIX",
    "CorruptGroupOffsetsError",
    "GroupOffsets",
    "TieredOffset",
    "clamp_offset",
    "decode_group_offsets",
    "delete_group_offsets",
    "encode_group_offsets",
    "group_offsets_key",
    "load_group_offsets",
    "put_group_offsets",
]

GROUPS_PREFIX = "groups/"
_FORMAT = 1


class CorruptGroupOffsetsError(KafkaStorageError):
    """A ``groups/`` object that is not a group's offsets in this format."""


@dataclass(frozen=True)
class TieredOffset:
    """A committed offset as OffsetCommit takes it again."""

    offset: int
    leader_epoch: int = -1
    metadata: str = ""


@dataclass(frozen=True)
class GroupOffsets:
    group_id: str
    offsets: Mapping[TopicPartition, TieredOffset] = field(default_factory=dict)


def group_offsets_key(group_id: str) -> str:
    return f"{GROUPS_PREFIX}{hashlib.sha256(group_id.encode()).hexdigest()}.json"


def put_group_offsets(store: ObjectStore, group: GroupOffsets) -> None:
    body = (json.dumps(encode_group_offsets(group), indent=2) + "\n").encode()
    store.put(group_offsets_key(group.group_id), body)


def encode_group_offsets(group: GroupOffsets) -> dict[str, Any]:
    """The group's JSON document (also kept by a restoring broker: ``restored_groups``)."""
    return {
        "version": _FORMAT,
        "group": group.group_id,
        "offsets": [
            {
                "topic": tp.topic,
                "partition": tp.partition,
                "offset": committed.offset,
                "leader_epoch": committed.leader_epoch,
                "metadata": committed.metadata,
            }
            for tp, committed in sorted(group.offsets.items())
        ],
    }


def delete_group_offsets(store: ObjectStore, group_ids: Iterable[str]) -> None:
    keys = [group_offsets_key(group_id) for group_id in group_ids]
    if keys:
        store.delete(keys)


def load_group_offsets(store: ObjectStore) -> list[GroupOffsets]:
    """Every group's offsets in the store, by key; ``CorruptGroupOffsetsError`` for one
    that does not decode (a restore must not commit guessed offsets)."""
    return [_decode(info.key, store.get(info.key)) for info in store.list(GROUPS_PREFIX)]


def clamp_offset(offset: int, log_start: int, log_end: int) -> int:
    """A committed offset the restored partition can serve: one below its log start
    (retention moved past it) reads from the start, as a consumer reset to earliest
    would; one past its end (records that never reached the tier) goes on at the end,
    where the next record produced will be, rather than skip it as a reset to latest
    done later would."""
    return min(max(offset, log_start), log_end)


def _decode(key: str, body: bytes) -> GroupOffsets:
    try:
        group = decode_group_offsets(json.loads(body))
    except (ValueError, CorruptGroupOffsetsError) as error:
        raise CorruptGroupOffsetsError(f"{key} is not a group's offsets: {error}") from None
    if group_offsets_key(group.group_id) != key:
        raise CorruptGroupOffsetsError(f"{key} names group {group.group_id!r}, not its own")
    return group


def decode_group_offsets(document: Any) -> GroupOffsets:
    """The group a document ``encode_group_offsets`` made names;
    ``CorruptGroupOffsetsError`` for anything else."""
    try:
        if document["version"] != _FORMAT:
            raise ValueError(f"unknown version {document['version']!r}")
        group_id = document["group"]
        if not isinstance(group_id, str):
            raise TypeError(f"group {group_id!r}")
        offsets = {}
        for entry in document["offsets"]:
            tp = TopicPartition(str(entry["topic"]), whole_number(entry["partition"]))
            offsets[tp] = TieredOffset(
                whole_number(entry["offset"]),
                whole_number(entry["leader_epoch"]),
                str(entry["metadata"]),
            )
    except (ValueError, KeyError, TypeError, AttributeError, TierlogError) as error:
        raise CorruptGroupOffsetsError(repr(error)) from None
    return GroupOffsets(group_id, offsets)
