"""Helpers for the compaction tests: compacted logs, keyed batches, what a reader sees."""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from pathlib import Path

from tests.storage.conftest import T0, FakeClock, config, headers_of, read_all_bytes
from tierlog.storage.cleaner import Cleaner, CleanResult
from tierlog.storage.config import LogConfig
from tierlog.storage.log import Log
from tierlog.storage.records import BatchHeader, CompressionType, Record, SimpleRecord, build_batch
from tierlog.storage.records import decode_records as decode

DAY_MS = 24 * 3600 * 1000


def compacted(**props: object) -> LogConfig:
    """A compacted topic's config; timestamps far from the fake clock are accepted."""
    defaults: dict[str, object] = {
        "cleanup_policy": "compact",
        "segment_bytes": 4096,
        "file_delete_delay_ms": 0,
        "message_timestamp_after_max_ms": 2**62,
        "delete_retention_ms": DAY_MS,
    }
    return config(**(defaults | props))


def open_compacted(directory: Path, clock: FakeClock, **props: object) -> Log:
    return Log.open(directory, compacted(**props), clock_ms=clock)


def keyed_batch(
    pairs: Sequence[tuple[bytes, bytes | None]],
    *,
    timestamp: int = T0,
    compression: CompressionType = CompressionType.NONE,
    producer_id: int = -1,
    base_sequence: int = -1,
) -> bytes:
    records = [SimpleRecord(key=key, value=value, timestamp=timestamp) for key, value in pairs]
    return build_batch(
        records,
        compression=compression,
        producer_id=producer_id,
        producer_epoch=0 if producer_id >= 0 else -1,
        base_sequence=base_sequence,
    )


def batches_of(log: Log) -> list[tuple[BatchHeader, list[Record]]]:
    """Every batch a reader from the log start sees, with its records."""
    buf = read_all_bytes(log)
    return [(header, decode(buf, header)) for header in headers_of(buf)]


def records(log: Log) -> list[Record]:
    return [record for _header, batch in batches_of(log) for record in batch]


def latest_values(seen: Iterable[Record]) -> dict[bytes, bytes | None]:
    """Key -> the value a consumer reading in order ends with (None: a tombstone)."""
    latest: dict[bytes, bytes | None] = {}
    for record in seen:
        assert record.key is not None
        latest[record.key] = record.value
    return latest


def live_values(seen: Iterable[Record]) -> dict[bytes, bytes]:
    """Key -> latest value, keys whose latest record is a tombstone left out."""
    return {key: value for key, value in latest_values(seen).items() if value is not None}


def clean(log: Log, *, budget_bytes: int = 1 << 20, first_dirty: int = 0) -> CleanResult:
    """One round over everything below the active segment."""
    return Cleaner(budget_bytes).clean(log, first_dirty, log.active_segment.base_offset)


def clean_fully(log: Log, *, budget_bytes: int = 1 << 20) -> list[CleanResult]:
    """Rounds until the whole dirty range is clean (small budgets need several)."""
    results = [clean(log, budget_bytes=budget_bytes)]
    while results[-1].end_offset < log.active_segment.base_offset:
        results.append(clean(log, budget_bytes=budget_bytes, first_dirty=results[-1].end_offset))
    return results
