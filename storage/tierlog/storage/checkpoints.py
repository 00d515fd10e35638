"""Kafka's small state files, each written atomically.

A checkpoint is never updated in place: the new text goes to ``<name>.tmp``, is
fsynced, renamed over the old file, and the directory is fsynced so the rename
itself survives a crash. A reader therefore finds either the old or the new file,
never a mix; a leftover ``.tmp`` is garbage that recovery deletes.

Formats (as Kafka writes them):
- offset checkpoints (``recovery-point-offset-checkpoint``, ``log-start-offset-checkpoint``,
  ``cleaner-offset-checkpoint``): ``0`` (version), the entry count, then one
  ``<topic> <partition> <offset>`` line per partition;
- ``leader-epoch-checkpoint`` in a partition dir: ``0``, the count, ``<epoch> <start offset>``;
- ``partition.metadata``: ``version: 0`` and ``topic_id: <base64 uuid>``;
- ``meta.properties`` in a log dir: Java properties (``version=1``, ``node.id``,
  ``cluster.id``, ``directory.id``).
"""

from __future__ import annotations

import base64
import logging
import os
import uuid
from collections.abc import Mapping
from pathlib import Path

from tierlog.storage.errors import InvalidConfigError, KafkaStorageError
from tierlog.storage.properties import format_properties, read_properties
from tierlog.storage.topic_partition import TopicPartition

__all__ = [
    "CLEANER_OFFSET_CHECKPOINT",
    "CLEAN_SHUTDOWN_MARKER",
    "LOG_START_OFFSET_CHECKPOINT",
    "RECOVERY_POINT_CHECKPOINT",
    "REPLICATION_OFFSET_CHECKPOINT",
    "atomic_write",
    "base64_uuid",
    "fsync_directory",
    "fsync_file",
    "read_epoch_checkpoint",
    "read_meta_properties",
    "read_offset_checkpoint",
    "read_offset_checkpoint_or_warn",
    "write_epoch_checkpoint",
    "write_meta_properties",
    "write_offset_checkpoint",
    "write_partition_metadata",
]

RECOVERY_POINT_CHECKPOINT = "recovery-point-offset-checkpoint"
LOG_START_OFFSET_CHECKPOINT = "log-start-offset-checkpoint"
REPLICATION_OFFSET_CHECKPOINT = "replication-offset-checkpoint"  # high watermarks
CLEANER_OFFSET_CHECKPOINT = "cleaner-offset-checkpoint"
LEADER_EPOCH_CHECKPOINT = "leader-epoch-checkpoint"
PARTITION_METADATA = "partition.metadata"
META_PROPERTIES = "meta.properties"
CLEAN_SHUTDOWN_MARKER = ".kafka_cleanshutdown"
TEMP_SUFFIX = ".tmp"

log = logging.getLogger(__name__)


def fsync_directory(directory: Path) -> None:
    _fsync(directory)


def fsync_file(path: Path) -> None:
    """Make a file written by someone else (who did not sync it) durable."""
    _fsync(path)


def _fsync(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def atomic_write(path: Path, text: str) -> None:
    """Replace ``path`` with ``text`` so that a crash leaves the old or the new file."""
    temp = path.with_name(path.name + TEMP_SUFFIX)
    try:
        fd = os.open(temp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
        try:
            os.write(fd, text.encode())
            os.fsync(fd)
        finally:
            os.close(fd)
        temp.replace(path)
        fsync_directory(path.parent)
    except OSError as error:
        raise KafkaStorageError(f"cannot write {path}: {error.strerror or error}") from error


def _parse_lines(path: Path, fields: int) -> list[list[str]]:
    try:
        lines = path.read_text(encoding="utf-8").splitlines()
    except UnicodeDecodeError as error:
        raise KafkaStorageError(f"{path}: not a text file ({error})") from error
    except OSError as error:
        raise KafkaStorageError(f"cannot read {path}: {error.strerror or error}") from error
    if len(lines) < 2 or lines[0].strip() != "0":
        raise KafkaStorageError(f"{path}: unknown checkpoint version or header")
    count = int(lines[1])
    rows = [line.split() for line in lines[2 : 2 + count]]
    if len(rows) != count or any(len(row) != fields for row in rows):
        raise KafkaStorageError(f"{path}: expected {count} entries of {fields} fields")
    return rows


def write_offset_checkpoint(path: Path, offsets: Mapping[TopicPartition, int]) -> None:
    lines = ["0", str(len(offsets))]
    lines += [f"{tp.topic} {tp.partition} {offset}" for tp, offset in sorted(offsets.items())]
    atomic_write(path, "\n".join(lines) + "\n")


def read_offset_checkpoint(path: Path) -> dict[TopicPartition, int]:
    """The checkpoint's offsets; empty when the file does not exist."""
    if not path.exists():
        return {}
    try:
        rows = _parse_lines(path, 3)
        return {TopicPartition(topic, int(part)): int(offset) for topic, part, offset in rows}
    except ValueError as error:
        raise KafkaStorageError(f"{path}: malformed entry ({error})") from error


def read_offset_checkpoint_or_warn(path: Path, instead: str) -> dict[TopicPartition, int]:
    """The checkpoint's offsets, or none when it cannot be read (garbled, cut short): a
    warning names the file, what is wrong with it and what is done ``instead``, and
    the caller goes on as if it were absent, as Kafka's log manager does. Such a
    checkpoint only saves work (a recovery scan, a cleaning pass); the segments still
    hold everything it summarises, and the next checkpoint replaces it."""
    try:
        return read_offset_checkpoint(path)
    except KafkaStorageError as error:
        log.warning("ignoring %s (%s): %s", path, instead, error)
        return {}


def write_epoch_checkpoint(path: Path, epochs: list[tuple[int, int]]) -> None:
    lines = ["0", str(len(epochs)), *(f"{epoch} {start}" for epoch, start in epochs)]
    atomic_write(path, "\n".join(lines) + "\n")


def read_epoch_checkpoint(path: Path) -> list[tuple[int, int]]:
    if not path.exists():
        return []
    try:
        return [(int(epoch), int(start)) for epoch, start in _parse_lines(path, 2)]
    except ValueError as error:
        raise KafkaStorageError(f"{path}: malformed entry ({error})") from error


def base64_uuid(value: uuid.UUID) -> str:
    """Kafka's text form of a UUID: URL-safe base64 without padding."""
    return base64.urlsafe_b64encode(value.bytes).decode().rstrip("=")


def write_partition_metadata(path: Path, topic_id: uuid.UUID) -> None:
    atomic_write(path, f"version: 0\ntopic_id: {base64_uuid(topic_id)}\n")


def read_meta_properties(path: Path) -> dict[str, str]:
    """A log dir's ``meta.properties``, with the ``version=1`` and ``cluster.id`` that
    Kafka's KRaft brokers require; KafkaStorageError naming the file when it is not one."""
    try:
        properties = read_properties(path)
    except IsADirectoryError:
        raise KafkaStorageError(f"{path} is a directory, not a file") from None
    except OSError as error:
        raise KafkaStorageError(f"cannot read {path}: {error.strerror}") from error
    except InvalidConfigError as error:
        raise KafkaStorageError(str(error)) from error
    if properties.get("version") != "1":
        raise KafkaStorageError(f"{path} is not a meta.properties: it has no version=1")
    if not properties.get("cluster.id"):
        raise KafkaStorageError(f"{path} is not a meta.properties: it has no cluster.id")
    return properties


def write_meta_properties(path: Path, properties: Mapping[str, str]) -> None:
    atomic_write(path, "#\n" + format_properties(properties))
