"""Kafka's producer-state snapshot file, ``<20-digit offset>.snapshot``.

A snapshot named N holds the producer state of the log *below* offset N: replaying
the batches from N onwards on top of it gives the state at the log end. The layout
is ProducerStateManager's ``PID_SNAPSHOT_MAP_SCHEMA`` (version 1), big-endian:

    version: int16 (= 1)
    crc: uint32, CRC-32C of every byte after it (the entry count included)
    entries: int32 count, then per producer
        producer_id int64, epoch int16, last_sequence int32, last_offset int64,
        offset_delta int32, timestamp int64, coordinator_epoch int32,
        current_txn_first_offset int64 (-1: no open transaction)

Only a producer's *last* batch is in the file (``last_offset`` -1 when it has none,
e.g. its only entry is a transaction marker); the batches before it come back by
replaying the log. A file that is short, long, of another version or fails its CRC
is corrupt: the loader ignores it and rebuilds from an older snapshot or the log.

Snapshots are published by rename, so a reader sees a whole file or none. The data
is fsynced when the caller asks (at close) or later, when the log is flushed past
the snapshot's offset; a crash before that can leave a torn file behind, which the
CRC catches.
"""

from __future__ import annotations

import os
import struct
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

from tierlog.storage.checkpoints import fsync_directory
from tierlog.storage.errors import CorruptSnapshotError, KafkaStorageError
from tierlog.storage.records import crc32c

__all__ = [
    "SNAPSHOT_SUFFIX",
    "SNAPSHOT_VERSION",
    "SnapshotEntry",
    "decode_snapshot",
    "encode_snapshot",
    "list_snapshot_offsets",
    "read_snapshot",
    "snapshot_path",
    "sync_snapshot",
    "write_snapshot",
]

SNAPSHOT_SUFFIX = ".snapshot"
SNAPSHOT_VERSION = 1
_TEMP_SUFFIX = ".tmp"

_VERSION = struct.Struct(">h")
_CRC = struct.Struct(">I")
_COUNT = struct.Struct(">i")
_ENTRY = struct.Struct(">qhiqiqiq")
_ENTRIES_OFFSET = _VERSION.size + _CRC.size  # where the CRC starts covering


@dataclass(frozen=True, slots=True)
class SnapshotEntry:
    """One producer as a snapshot stores it (Kafka's field names, in file order)."""

    producer_id: int
    producer_epoch: int
    last_sequence: int
    last_offset: int  # -1: no data batch
    offset_delta: int  # last offset - first offset of the last batch
    timestamp: int
    coordinator_epoch: int
    current_txn_first_offset: int  # -1: no open transaction


def snapshot_path(directory: Path, offset: int) -> Path:
    return directory / f"{offset:020d}{SNAPSHOT_SUFFIX}"


def list_snapshot_offsets(directory: Path) -> list[int]:
    """The offsets of the snapshot files in ``directory``, ascending."""
    offsets = []
    for path in directory.iterdir():
        stem = path.name.removesuffix(SNAPSHOT_SUFFIX)
        if stem != path.name and stem.isdigit() and path.is_file():
            offsets.append(int(stem))
    return sorted(offsets)


def encode_snapshot(entries: Iterable[SnapshotEntry]) -> bytes:
    rows = sorted(entries, key=lambda entry: entry.producer_id)
    body = bytearray(_COUNT.pack(len(rows)))
    for entry in rows:
        body += _ENTRY.pack(
            entry.producer_id,
            entry.producer_epoch,
            entry.last_sequence,
            entry.last_offset,
            entry.offset_delta,
            entry.timestamp,
            entry.coordinator_epoch,
            entry.current_txn_first_offset,
        )
    return _VERSION.pack(SNAPSHOT_VERSION) + _CRC.pack(crc32c(body)) + bytes(body)


def decode_snapshot(data: bytes) -> list[SnapshotEntry]:
    """The entries of a snapshot file's bytes; CorruptSnapshotError if they are not one."""
    header_size = _ENTRIES_OFFSET + _COUNT.size
    if len(data) < header_size:
        raise CorruptSnapshotError(f"snapshot of {len(data)} bytes is truncated")
    (version,) = _VERSION.unpack_from(data, 0)
    if version != SNAPSHOT_VERSION:
        raise CorruptSnapshotError(f"snapshot contained an unknown file version {version}")
    (stored_crc,) = _CRC.unpack_from(data, _VERSION.size)
    computed_crc = crc32c(memoryview(data)[_ENTRIES_OFFSET:])
    if stored_crc != computed_crc:
        raise CorruptSnapshotError(
            f"snapshot is corrupt: stored crc {stored_crc}, computed {computed_crc}"
        )
    (count,) = _COUNT.unpack_from(data, _ENTRIES_OFFSET)
    if count < 0 or len(data) != header_size + count * _ENTRY.size:
        raise CorruptSnapshotError(f"{count} entries do not fill a snapshot of {len(data)} bytes")
    return [SnapshotEntry(*fields) for fields in _ENTRY.iter_unpack(memoryview(data)[header_size:])]


def read_snapshot(path: Path) -> list[SnapshotEntry]:
    try:
        data = path.read_bytes()
    except OSError as error:
        raise CorruptSnapshotError(f"cannot read {path}: {error}") from error
    try:
        return decode_snapshot(data)
    except CorruptSnapshotError as error:
        raise CorruptSnapshotError(f"{path.name}: {error}") from None


def write_snapshot(path: Path, entries: Iterable[SnapshotEntry], *, sync: bool) -> None:
    """Publish a snapshot by rename; ``sync`` makes it durable before returning."""
    temp = path.with_name(path.name + _TEMP_SUFFIX)
    try:
        fd = os.open(temp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
        try:
            data = memoryview(encode_snapshot(entries))
            while data:
                data = data[os.write(fd, data) :]
            if sync:
                os.fsync(fd)
        finally:
            os.close(fd)
        temp.replace(path)
        if sync:
            fsync_directory(path.parent)
    except OSError as error:
        temp.unlink(missing_ok=True)
        raise KafkaStorageError(f"cannot write {path}: {error.strerror or error}") from error


def sync_snapshot(path: Path) -> None:
    """Make a published snapshot durable (a file deleted meanwhile is no error)."""
    try:
        fd = os.open(path, os.O_RDONLY)
    except FileNotFoundError:
        return
    try:
        os.fsync(fd)
    finally:
        os.close(fd)
