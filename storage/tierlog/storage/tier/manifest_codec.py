"""The JSON forms of manifest heads and chunks (pure).

Format 2 (written now): a head lists its entries, its chunk references and how far
deletion got; a chunk lists segment entries (level 1) or chunk references (level 2 and
up). Format 1 (written before chunks existed, a flat list of every live entry, some
``deleting``) is still read: a ``deleting`` entry is a finished one below the log
start, which is where format 1 put it. Compact, key-sorted JSON, so equal values
encode to equal bytes: an ambiguous put is recognised by its bytes, and a chunk is
named by a hash of them.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any

from tierlog.storage.tier.manifest import (
    ByteRange,
    ChunkRef,
    CorruptManifestError,
    ManifestEntry,
    ManifestStateError,
    PartitionManifest,
    RemoteSegment,
    SegmentPart,
    SegmentState,
)
from tierlog.storage.topic_partition import TopicPartition

__all__ = ["FORMAT_VERSION", "decode_chunk", "decode_manifest", "encode_chunk", "encode_manifest"]

FORMAT_VERSION = 2
_FLAT_FORMAT = 1  # read only
_DECODE_ERRORS = (ValueError, KeyError, TypeError, AttributeError, ManifestStateError)


def encode_manifest(manifest: PartitionManifest) -> bytes:
    """The head as compact, key-sorted JSON (one byte string per value). The tier
    cleaner's offset is written once it is set (heads of uncompacted tiers keep the
    bytes they always had)."""
    cleaned = {"cleaner_offset": manifest.cleaner_offset} if manifest.cleaner_offset else {}
    return _dump(
        {
            **cleaned,
            "format": FORMAT_VERSION,
            "topic": manifest.tp.topic,
            "partition": manifest.tp.partition,
            "version": manifest.version,
            "writer_epoch": manifest.writer_epoch,
            "writer_id": manifest.writer_id,
            "log_start_offset": manifest.log_start_offset,
            "deleted_end_offset": manifest.deleted_end_offset,
            "chunks": [_encode_ref(chunk) for chunk in manifest.chunks],
            "segments": [_encode_segment(segment) for segment in manifest.segments],
        }
    )


def decode_manifest(data: bytes) -> PartitionManifest:
    """Parse a head of format 2 or 1; anything else raises CorruptManifestError.

    Its entries are put in ``PartitionManifest.with_segments`` order: heads written
    before it was the end offset order may list them in base offset order."""
    try:
        document = json.loads(data)
        if document["format"] == _FLAT_FORMAT:
            return _decode_flat(document)
        _check_format(document)
        return PartitionManifest(
            tp=_tp(document),
            version=_int(document["version"]),
            writer_epoch=_int(document["writer_epoch"]),
            writer_id=_str(document["writer_id"]),
            log_start_offset=_int(document["log_start_offset"]),
            deleted_end_offset=_int(document["deleted_end_offset"]),
            cleaner_offset=_int(document.get("cleaner_offset", 0)),
            chunks=tuple(_decode_ref(entry) for entry in document["chunks"]),
        ).with_segments([_decode_segment(entry) for entry in document["segments"]])
    except CorruptManifestError:
        raise
    except _DECODE_ERRORS as error:
        raise CorruptManifestError(f"not a tier manifest: {error!r}") from error


def encode_chunk(tp: TopicPartition, level: int, entries: Sequence[ManifestEntry]) -> bytes:
    encoded = [
        _encode_segment(entry) if isinstance(entry, RemoteSegment) else _encode_ref(entry)
        for entry in entries
    ]
    return _dump(
        {
            "format": FORMAT_VERSION,
            "topic": tp.topic,
            "partition": tp.partition,
            "level": level,
            "entries": encoded,
        }
    )


def decode_chunk(data: bytes, ref: ChunkRef) -> tuple[ManifestEntry, ...]:
    """The entries of the chunk ``ref`` names; CorruptManifestError unless the chunk is
    what the reference says (its level, first and last offsets, segment count)."""
    try:
        document = json.loads(data)
        _check_format(document)
        if _int(document["level"]) != ref.level:
            raise ValueError(f"level {document['level']}, the reference says {ref.level}")
        decode = _decode_segment if ref.level == 1 else _decode_ref
        entries: tuple[ManifestEntry, ...] = tuple(decode(e) for e in document["entries"])
        if any(
            isinstance(e, RemoteSegment) and e.state is not SegmentState.FINISHED for e in entries
        ):
            raise ValueError("a chunk holds finished segments only")
        count = sum(1 if isinstance(e, RemoteSegment) else e.segment_count for e in entries)
        covered = (entries[0].base_offset, entries[-1].end_offset, count) if entries else None
        if covered != (ref.base_offset, ref.end_offset, ref.segment_count):
            raise ValueError(f"it covers {covered}, its reference {ref}")
        return entries
    except _DECODE_ERRORS as error:
        raise CorruptManifestError(f"{ref.key} is not the chunk named: {error!r}") from error


def _decode_flat(document: dict[str, Any]) -> PartitionManifest:
    """A format 1 head: every live entry inline; ``deleting`` ones lie below the log start."""
    entries = document["segments"]
    deleting = [_int(entry["end_offset"]) for entry in entries if entry["state"] == "deleting"]
    segments = [
        _decode_segment({**entry, "state": "finished"} if entry["state"] == "deleting" else entry)
        for entry in entries
    ]
    return PartitionManifest(
        tp=_tp(document),
        version=_int(document["version"]),
        writer_epoch=_int(document["writer_epoch"]),
        writer_id=_str(document["writer_id"]),
        log_start_offset=max(_int(document["log_start_offset"]), *deleting, 0),
    ).with_segments(segments)


def _check_format(document: dict[str, Any]) -> None:
    if document["format"] != FORMAT_VERSION:
        raise CorruptManifestError(f"manifest format {document['format']} is not supported")


def _dump(document: dict[str, Any]) -> bytes:
    return json.dumps(document, sort_keys=True, separators=(",", ":")).encode()


def _tp(document: dict[str, Any]) -> TopicPartition:
    return TopicPartition(_str(document["topic"]), _int(document["partition"]))


def _encode_ref(chunk: ChunkRef) -> dict[str, Any]:
    return {
        "key": chunk.key,
        "level": chunk.level,
        "base_offset": chunk.base_offset,
        "end_offset": chunk.end_offset,
        "segments": chunk.segment_count,
        "log_bytes": chunk.log_size_bytes,
        "max_timestamp": chunk.max_timestamp,
        "retention_timestamp": chunk.retention_timestamp,
    }


def _decode_ref(entry: dict[str, Any]) -> ChunkRef:
    ref = ChunkRef(
        key=_str(entry["key"]),
        level=_int(entry["level"]),
        base_offset=_int(entry["base_offset"]),
        end_offset=_int(entry["end_offset"]),
        segment_count=_int(entry["segments"]),
        log_size_bytes=_int(entry["log_bytes"]),
        max_timestamp=_int(entry["max_timestamp"]),
        retention_timestamp=_int(entry["retention_timestamp"]),
    )
    if ref.level < 1 or ref.segment_count < 1 or not 0 <= ref.base_offset < ref.end_offset:
        raise ValueError(f"a chunk reference that covers nothing: {ref}")
    return ref


def _encode_segment(segment: RemoteSegment) -> dict[str, Any]:
    return {
        "id": segment.segment_id,
        "writer_epoch": segment.writer_epoch,
        "state": segment.state.value,
        "base_offset": segment.base_offset,
        "end_offset": segment.end_offset,
        "base_timestamp": segment.base_timestamp,
        "max_timestamp": segment.max_timestamp,
        "offset_of_max_timestamp": segment.offset_of_max_timestamp,
        "key": segment.key,
        "parts": {part.value: list(r) for part, r in zip(SegmentPart, segment.parts, strict=True)},
        "created_ms": segment.created_ms,
    }


def _decode_segment(entry: dict[str, Any]) -> RemoteSegment:
    parts = entry["parts"]
    return RemoteSegment(
        segment_id=_str(entry["id"]),
        writer_epoch=_int(entry["writer_epoch"]),
        state=SegmentState(entry["state"]),
        base_offset=_int(entry["base_offset"]),
        end_offset=_int(entry["end_offset"]),
        base_timestamp=_int(entry["base_timestamp"]),
        max_timestamp=_int(entry["max_timestamp"]),
        offset_of_max_timestamp=_int(entry["offset_of_max_timestamp"]),
        key=_str(entry["key"]),
        parts=_decode_parts(parts),
        created_ms=_int(entry["created_ms"]),
    )


def _decode_parts(parts: dict[str, Any]) -> tuple[ByteRange, ...]:
    """The parts' ranges; a missing transaction index (an entry written before it was
    uploaded) is an empty range at the end."""
    ranges: list[ByteRange] = []
    for part in SegmentPart:
        if part is SegmentPart.TXN_INDEX and part.value not in parts:
            ranges.append(ByteRange(ranges[-1].end, ranges[-1].end))
        else:
            ranges.append(ByteRange(*map(_int, parts[part.value])))
    return tuple(ranges)


def _int(value: object) -> int:
    if type(value) is not int:
        raise TypeError(f"expected an integer, got {value!r}")
    return value


def _str(value: object) -> str:
    if not isinstance(value, str):
        raise TypeError(f"expected a string, got {value!r}")
    return value
