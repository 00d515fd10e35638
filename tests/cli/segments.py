"""Partitions written by tierlog's own storage code, for the CLI tests.

``write_log`` makes a closed partition directory that ``Log`` wrote with small
segments, so it rolled several times, holding batches of every codec with keys,
headers and increasing timestamps; it comes with what was appended, so tests can
check the dump against the truth rather than against the dump's own reading.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from pathlib import Path

from tierlog.storage.config import LogConfig
from tierlog.storage.log import Log
from tierlog.storage.records import CompressionType, SimpleRecord, build_batch

RECORDS_PER_BATCH = 20
BATCHES = 30


@dataclass(frozen=True)
class AppendedBatch:
    base_offset: int
    last_offset: int
    codec: CompressionType
    records: tuple[SimpleRecord, ...]


@dataclass(frozen=True)
class WrittenLog:
    directory: Path
    batches: tuple[AppendedBatch, ...]

    @property
    def log_files(self) -> list[Path]:
        return sorted(self.directory.glob("*.log"))

    @property
    def record_count(self) -> int:
        return sum(len(batch.records) for batch in self.batches)


def _records(first: int, count: int, first_timestamp_ms: int) -> list[SimpleRecord]:
    return [
        SimpleRecord(
            key=None if i % 7 == 0 else f"key-{i}".encode(),
            value=None if i % 11 == 0 else f"value-{i}-".encode() * (1 + i % 5),
            timestamp=first_timestamp_ms + i,
            headers=(("h1", f"v{i}".encode()), ("h2", None)) if i % 3 == 0 else (),
        )
        for i in range(first, first + count)
    ]


def write_log(directory: Path, batches: int = BATCHES) -> WrittenLog:
    config = LogConfig.from_properties({"segment.bytes": 4096, "index.interval.bytes": 256})
    partition_log = Log.open(directory, config)
    first_timestamp = int(time.time() * 1000) - 60_000
    appended = []
    codecs = tuple(CompressionType)
    for number in range(batches):
        codec = codecs[number % len(codecs)]
        records = _records(number * RECORDS_PER_BATCH, RECORDS_PER_BATCH, first_timestamp)
        info = partition_log.append(build_batch(records, compression=codec))
        appended.append(AppendedBatch(info.first_offset, info.last_offset, codec, tuple(records)))
    partition_log.close()
    return WrittenLog(directory, tuple(appended))
