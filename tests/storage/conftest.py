"""Shared helpers for the storage tests: batches to produce, a fake clock, log readers.

Test modules import the helpers (``from tests.storage.conftest import make_batch``);
pytest loads this file first under that name.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from pathlib import Path

import pytest

from tierlog.storage.config import LogConfig
from tierlog.storage.log import Log
from tierlog.storage.manager import LogManager
from tierlog.storage.records import (
    BatchHeader,
    CompressionType,
    Record,
    SimpleRecord,
    build_batch,
    decode_records,
    iter_batches,
)

# A fixed "now" for every test that cares about time: 2023-11-14T22:13:20Z.
T0 = 1_700_000_000_000


class FakeClock:
    """A clock for ``Log(clock_ms=...)`` that only moves when a test says so."""

    def __init__(self, now_ms: int = T0):
        self.now_ms = now_ms

    def __call__(self) -> int:
        return self.now_ms

    def advance(self, ms: int) -> None:
        self.now_ms += ms


def make_records(
    count: int, *, start_ts: int = T0, value_size: int = 10, tag: str = "r"
) -> list[SimpleRecord]:
    """``count`` records with keys ``<tag>-i``, values of ``value_size`` bytes, ts + i."""
    return [
        SimpleRecord(
            key=f"{tag}-{i}".encode(),
            value=(f"{tag}{i}:".encode() * value_size)[:value_size],
            timestamp=start_ts + i,
        )
        for i in range(count)
    ]


def make_batch(
    count: int = 1,
    *,
    start_ts: int = T0,
    value_size: int = 10,
    compression: CompressionType = CompressionType.NONE,
    tag: str = "r",
) -> bytes:
    """One produced v2 batch (base offset 0, as a producer sends it)."""
    return build_batch(
        make_records(count, start_ts=start_ts, value_size=value_size, tag=tag),
        compression=compression,
    )


def batch_with_timestamps(
    timestamps: Sequence[int], compression: CompressionType = CompressionType.NONE
) -> bytes:
    records = [
        SimpleRecord(key=f"k{i}".encode(), value=f"v{ts}".encode(), timestamp=ts)
        for i, ts in enumerate(timestamps)
    ]
    return build_batch(records, compression=compression)


def headers_of(buf: bytes) -> list[BatchHeader]:
    return list(iter_batches(buf))


def records_of(buf: bytes) -> list[Record]:
    """Every record of every (whole) batch in ``buf``."""
    return [record for header in iter_batches(buf) for record in decode_records(buf, header)]


def read_all_bytes(log: Log, start: int | None = None) -> bytes:
    """All batches from ``start`` (default: the log start) to the log end, in order."""
    offset = log.log_start_offset if start is None else start
    out = bytearray()
    while offset < log.log_end_offset:
        chunk = log.read(offset, 1 << 20).records
        assert chunk, f"read at {offset} returned nothing below the log end"
        out += chunk
        offset = headers_of(chunk)[-1].last_offset + 1
    return bytes(out)


def read_all_records(log: Log, start: int | None = None) -> list[Record]:
    return records_of(read_all_bytes(log, start))


def config(**props: object) -> LogConfig:
    """A LogConfig from Kafka-named keys written with underscores for dots."""
    return LogConfig.from_properties({key.replace("_", "."): value for key, value in props.items()})


def segment_files(directory: Path) -> list[str]:
    return sorted(path.name for path in directory.iterdir())


@pytest.fixture
def clock() -> FakeClock:
    return FakeClock()


@pytest.fixture
def log_dir(tmp_path: Path) -> Path:
    return tmp_path / "topic-0"


# Four 3-record batches to a segment: small segments that roll often.
SMALL_BATCH = make_batch(3, tag="00")
SMALL_SEGMENTS = config(segment_bytes=4 * len(SMALL_BATCH), index_interval_bytes=0)


def segment_name(base: int, suffix: str) -> str:
    return f"{base:020d}{suffix}"


def write_closed_log(directory: Path, batches: int = 10) -> bytes:
    """Offsets 0-29, 3 per batch, segments at 0, 12 and 24; closed cleanly. Returns its bytes."""
    log = Log.open(directory, SMALL_SEGMENTS)
    for i in range(batches):
        log.append(make_batch(3, start_ts=T0 + 10 * i, tag=f"{i:02d}"))
    content = read_all_bytes(log)
    log.close()
    return content


def crash(manager: LogManager) -> None:
    """What a killed broker leaves: no close, no checkpoints, no clean-shutdown marker;
    its background threads stop and the kernel drops its log-dir locks."""
    manager.cleaner.shutdown()
    manager.retention.stop()
    manager.committer.stop()
    for fd in manager._dir_locks:
        os.close(fd)
    manager._dir_locks.clear()
