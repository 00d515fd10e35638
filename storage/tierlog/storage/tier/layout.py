"""Where a partition's objects live in the object store (pure: names only, no I/O).

Every object of a partition shares one prefix, ``<hash4>/<topic>-<partition>/``:

- ``<prefix>segments/<base offset:020d>-e<writer epoch>-<segment id>.segment``: one
  object per uploaded segment (log bytes, trimmed indexes, producer snapshot and
  leader epochs at byte ranges the manifest records);
- ``<prefix>manifest/<version:020d>.json``: the partition's manifest head, one object
  per version, each written only if absent so two writers cannot both take a version;
- ``<prefix>chunks/<base offset:020d>-<end offset:020d>-l<level>-<content hash>.json``:
  the manifest's sealed chunks, named by a hash of their bytes (so a chunk sealed again,
  e.g. by a retried change, lands on the same key with the same bytes). They live apart
  from the heads, which readers list.

The four hex digits in front are a hash of the topic partition: S3 spreads request
load by key prefix, and without them every partition of a busy topic would share
one. Keeping a partition's objects under one prefix lets a tool list, verify or
delete a partition as a unit. A segment key carries the writer epoch and the fresh
id of the attempt that wrote it, so two attempts (a retry, a deposed owner) never
write the same key and a deposed owner's objects are recognised by their epoch.
"""

from __future__ import annotations

import hashlib
import re
import uuid
from typing import NamedTuple

from tierlog.storage.names import parse_partition_dir
from tierlog.storage.topic_partition import TopicPartition

__all__ = [
    "SegmentKey",
    "chunk_key",
    "chunks_prefix",
    "manifest_key",
    "manifest_prefix",
    "new_segment_id",
    "parse_manifest_version",
    "parse_segment_key",
    "partition_prefix",
    "segment_key",
    "segments_prefix",
]

_SEGMENT_NAME = re.compile(r"^(\d{20})-e(\d+)-([0-9a-f]{32})\.segment$")
_MANIFEST_NAME = re.compile(r"^(\d{20})\.json$")


class SegmentKey(NamedTuple):
    """What a segment object's key says about it."""

    tp: TopicPartition
    base_offset: int
    writer_epoch: int
    segment_id: str


def new_segment_id() -> str:
    """A fresh id for one upload attempt: 32 hex digits, never reused."""
    return uuid.uuid4().hex


def partition_prefix(tp: TopicPartition) -> str:
    """``<hash4>/<topic>-<partition>/``: every object of the partition lies under it."""
    digest = hashlib.sha256(tp.dir_name.encode()).hexdigest()[:4]
    return f"{digest}/{tp.dir_name}/"


def segments_prefix(tp: TopicPartition) -> str:
    return f"{partition_prefix(tp)}segments/"


def manifest_prefix(tp: TopicPartition) -> str:
    return f"{partition_prefix(tp)}manifest/"


def chunks_prefix(tp: TopicPartition) -> str:
    return f"{partition_prefix(tp)}chunks/"


def chunk_key(
    tp: TopicPartition, base_offset: int, end_offset: int, level: int, body: bytes
) -> str:
    digest = hashlib.sha256(body).hexdigest()[:32]
    return f"{chunks_prefix(tp)}{base_offset:020d}-{end_offset:020d}-l{level}-{digest}.json"


def segment_key(tp: TopicPartition, base_offset: int, writer_epoch: int, segment_id: str) -> str:
    if base_offset < 0 or writer_epoch < 0:
        raise ValueError(f"negative base offset {base_offset} or writer epoch {writer_epoch}")
    if not re.fullmatch(r"[0-9a-f]{32}", segment_id):
        raise ValueError(f"segment id {segment_id!r} is not 32 hex digits")
    name = f"{base_offset:020d}-e{writer_epoch}-{segment_id}.segment"
    return f"{segments_prefix(tp)}{name}"


def manifest_key(tp: TopicPartition, version: int) -> str:
    if version < 0:
        raise ValueError(f"negative manifest version {version}")
    return f"{manifest_prefix(tp)}{version:020d}.json"


def parse_segment_key(key: str) -> SegmentKey | None:
    """The parts of a segment key, or None for any other key (even under a partition)."""
    parts = key.split("/")
    if len(parts) != 4 or parts[2] != "segments":
        return None
    tp = parse_partition_dir(parts[1])
    found = _SEGMENT_NAME.match(parts[3])
    if (
        tp is None
        or found is None
        or key != segment_key(tp, int(found[1]), int(found[2]), found[3])
    ):
        return None
    return SegmentKey(tp, int(found[1]), int(found[2]), found[3])


def parse_manifest_version(key: str) -> int | None:
    """The version a manifest key names, or None for any other key."""
    found = _MANIFEST_NAME.match(key.rsplit("/", 1)[-1])
    return int(found[1]) if found else None
