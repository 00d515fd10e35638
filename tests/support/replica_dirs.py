"""Replicas' partition directories read back after a fault run, with the storage engine's
own reader: are the in-sync replicas byte-for-byte the same, and what do they hold?

Followers copy the leader's batches unchanged and roll where it rolled (issue 18), so
below the high watermark every replica must hold the same batches, with the same bytes,
in segments with the same base offsets. ``compare_replica_dirs`` walks all replicas'
segments side by side and names the first batch where they part;
``read_values`` gives a directory's records as ``(offset, value)`` pairs, what a
``FinalRead`` event holds (``tests.support.history``), and
``checkpointed_high_watermark`` the high watermark its broker wrote down.

The files are opened read-only and nothing is recovered: read them once the brokers are
stopped, or below a high watermark they no longer write under.
"""

from __future__ import annotations

import itertools
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path

from tests.support.history import NULL_VALUE, HistoryRecorder
from tierlog.storage.checkpoints import REPLICATION_OFFSET_CHECKPOINT, read_offset_checkpoint
from tierlog.storage.file_records import FileRecords
from tierlog.storage.records import BatchHeader, decode_records, parse_header
from tierlog.storage.segment import LOG_SUFFIX
from tierlog.storage.topic_partition import TopicPartition

__all__ = [
    "ReplicaBatch",
    "ReplicaDifference",
    "checkpointed_high_watermark",
    "compare_replica_dirs",
    "read_values",
    "record_final_reads",
    "replica_batches",
]


@dataclass(frozen=True)
class ReplicaBatch:
    """A batch as one replica stores it: which segment file, where in it, its bytes."""

    segment: Path
    position: int
    data: bytes

    @property
    def header(self) -> BatchHeader:
        return parse_header(self.data, 0)

    def __str__(self) -> str:
        header = self.header
        return (
            f"{self.segment} @{self.position}: offsets {header.base_offset}-"
            f"{header.last_offset}, {len(self.data)} bytes, crc {header.crc:#010x}"
        )


@dataclass(frozen=True)
class ReplicaDifference:
    """Where replicas part: the lowest offset at which their batches differ, why, and
    each replica's batch there (None: it holds no batch there)."""

    offset: int
    reason: str
    batches: tuple[ReplicaBatch | None, ...]

    def __str__(self) -> str:
        shown = "\n".join(f"    {batch}" for batch in self.batches)
        return f"replicas differ at offset {self.offset}: {self.reason}\n{shown}"


def replica_batches(directory: Path, upto_offset: int) -> Iterator[ReplicaBatch]:
    """The batches of a partition directory that start below ``upto_offset``, in order."""
    # 20-digit base offsets: the names sort as the offsets do.
    for segment in sorted(directory.glob(f"*{LOG_SUFFIX}")):
        records = FileRecords(segment, read_only=True)
        try:
            for batch in records.batches():
                if batch.header.base_offset >= upto_offset:
                    return
                yield ReplicaBatch(segment, batch.position, bytes(batch.data))
        finally:
            records.close()


def compare_replica_dirs(dirs: Sequence[Path], upto_offset: int) -> ReplicaDifference | None:
    """The first batch below ``upto_offset`` where the replicas in ``dirs`` differ (in
    bytes, in presence, or in the base offset of the segment holding it); None if they
    are the same."""
    walks = [replica_batches(directory, upto_offset) for directory in dirs]
    for batches in itertools.zip_longest(*walks):
        present = [batch for batch in batches if batch is not None]
        offset = min(batch.header.base_offset for batch in present)
        if len(present) < len(batches):
            return ReplicaDifference(offset, "a replica has no batch here", batches)
        if len({batch.data for batch in present}) > 1:
            return ReplicaDifference(offset, "the batches' bytes differ", batches)
        if len({batch.segment.name for batch in present}) > 1:
            return ReplicaDifference(offset, "the batches are in different segments", batches)
    return None


def read_values(directory: Path, upto_offset: int) -> list[tuple[int, str]]:
    """Every data record below ``upto_offset`` as ``(offset, value as text)``; control
    records (transaction markers) are not data and are left out."""
    values = []
    for batch in replica_batches(directory, upto_offset):
        header = batch.header
        if header.is_control:
            continue
        for record in decode_records(batch.data, header):
            if record.offset < upto_offset:
                value = NULL_VALUE if record.value is None else record.value.decode()
                values.append((record.offset, value))
    return values


def checkpointed_high_watermark(log_dir: Path, topic: str, partition: int) -> int:
    """The high watermark a broker last wrote for a partition in its log dir's
    ``replication-offset-checkpoint`` (0 when it wrote none): read it once the broker
    has stopped, which writes it on the way out."""
    offsets = read_offset_checkpoint(log_dir / REPLICATION_OFFSET_CHECKPOINT)
    return offsets.get(TopicPartition(topic, partition), 0)


def record_final_reads(
    history: Path, log_dirs: Sequence[Path], topic: str, partitions: Iterable[int]
) -> None:
    """Once the brokers (one log dir each) have stopped: each of ``partitions`` has
    records committed on some replica, the replicas hold the same batches below their
    lowest checkpointed high watermark, and each replica's whole log goes into
    ``history`` as a ``FinalRead`` of ``broker-N`` (N: its place in ``log_dirs``) for the
    checker, which reads acknowledged records from the replica furthest on.

    A follower's high watermark lags its leader's by a fetch (as Kafka's does): one that
    stopped right after a record was committed may have written 0 for it, and one that
    left the ISR (a controlled shutdown) is not waited for by later acknowledgements."""
    with HistoryRecorder(history, "final") as final:
        for partition in partitions:
            dirs = [log_dir / f"{topic}-{partition}" for log_dir in log_dirs]
            high_watermarks = [
                checkpointed_high_watermark(log_dir, topic, partition) for log_dir in log_dirs
            ]
            assert max(high_watermarks) > 0, (partition, high_watermarks)
            difference = compare_replica_dirs(dirs, min(high_watermarks))
            assert difference is None, str(difference)
            for node, (directory, high_watermark) in enumerate(
                zip(dirs, high_watermarks, strict=True)
            ):
                records = read_values(directory, upto_offset=2**63)
                final.final_read(f"broker-{node}", partition, high_watermark, records)
