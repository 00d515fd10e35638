"""Reads across the local/remote boundary: a reader cannot tell where the bytes came from."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.storage.conftest import T0, headers_of, read_all_bytes
from tests.storage.tier.test_remote_reader import TP, fill, make_reader
from tests.storage.tier.uploads import tier_closed_segments
from tierlog.storage.config import LogConfig
from tierlog.storage.errors import OffsetMovedToTieredStorageError
from tierlog.storage.log import (
    EARLIEST_LOCAL_TIMESTAMP,
    EARLIEST_TIMESTAMP,
    LATEST_TIERED_TIMESTAMP,
    LATEST_TIMESTAMP,
    MAX_TIMESTAMP,
    Log,
)
from tierlog.storage.segment import TimestampAndOffset
from tierlog.storage.tier import tiered_reads
from tierlog.storage.tier.local_store import LocalDirectoryStore

TIERED = LogConfig.from_properties(
    {
        "segment.bytes": "6000",
        "index.interval.bytes": "300",
        "remote.storage.enable": "true",
        "local.retention.bytes": "0",
        "file.delete.delay.ms": "0",
    }
)


class Tiered:
    """A log whose older segments were tiered and then deleted locally."""

    def __init__(self, tmp_path: Path):
        self.log = Log.open(tmp_path / "events-0", TIERED)
        fill(self.log, 200)
        self.log.roll()
        fill(self.log, 30, seed=9)  # the local tail, in the active segment
        self.everything = read_all_bytes(self.log)
        self.answers = {
            timestamp: self.log.offset_for_timestamp(timestamp)
            for timestamp in [*range(T0 - 3, T0 + 4000, 11), MAX_TIMESTAMP, EARLIEST_TIMESTAMP]
        }
        self.store = LocalDirectoryStore(tmp_path / "tier")
        self.tier_end = tier_closed_segments(self.store, TP, self.log).end_offset
        self.log.delete_old_segments(is_tiered=lambda s: s.next_offset <= self.tier_end)
        self.log.delete_retired_files()
        self.remote = make_reader(tmp_path, self.store)

    def read(self, offset: int, max_bytes: int) -> bytes:
        return tiered_reads.read(TP, self.log, self.remote, offset, max_bytes).records


@pytest.fixture
def tiered(tmp_path: Path) -> Iterator[Tiered]:
    tiered = Tiered(tmp_path)
    yield tiered
    tiered.remote.ranges.close()
    tiered.log.close()


def test_the_local_log_now_starts_where_the_tier_ends(tiered: Tiered) -> None:
    log = tiered.log
    assert log.log_start_offset == 0
    assert log.local_log_start_offset == tiered.tier_end > 0
    with pytest.raises(OffsetMovedToTieredStorageError):
        log.read(0, 1000)


def test_reading_from_the_start_crosses_into_the_local_log_byte_identical(
    tiered: Tiered,
) -> None:
    collected = bytearray()
    offset = 0
    crossed = False
    while offset < tiered.log.log_end_offset:
        records = tiered.read(offset, 3000)
        assert records, f"nothing at {offset}"
        crossed |= offset >= tiered.tier_end
        collected += records
        offset = headers_of(records)[-1].next_offset
    assert crossed
    assert bytes(collected) == tiered.everything


def test_every_offset_reads_the_batch_holding_it(tiered: Tiered) -> None:
    for offset in range(0, tiered.log.log_end_offset, 5):
        first = headers_of(tiered.read(offset, 1))[0]
        assert first.base_offset <= offset <= first.last_offset


def test_list_offsets_by_time_answers_from_the_tier_as_before_the_deletion(
    tiered: Tiered,
) -> None:
    for timestamp, expected in tiered.answers.items():
        found = tiered_reads.offset_for_timestamp(TP, tiered.log, tiered.remote, timestamp)
        assert found == expected, timestamp
    in_the_tier = [a for a in tiered.answers.values() if a and 0 < a.offset < tiered.tier_end]
    assert len(in_the_tier) > 10
    latest = tiered_reads.offset_for_timestamp(TP, tiered.log, tiered.remote, LATEST_TIMESTAMP)
    assert latest is not None and latest.offset == tiered.log.log_end_offset


def test_earliest_local_and_latest_tiered_offsets_kip_1005(tiered: Tiered) -> None:
    def answer(timestamp: int, remote: bool = True) -> TimestampAndOffset | None:
        reader = tiered.remote if remote else None
        return tiered_reads.offset_for_timestamp(TP, tiered.log, reader, timestamp)

    assert answer(EARLIEST_LOCAL_TIMESTAMP) == (-1, tiered.tier_end)
    assert answer(EARLIEST_TIMESTAMP) == (-1, 0)
    assert answer(LATEST_TIERED_TIMESTAMP) == (-1, tiered.tier_end - 1)
    assert answer(LATEST_TIERED_TIMESTAMP, remote=False) is None


def test_without_a_tier_reader_the_log_says_where_the_offset_went(tiered: Tiered) -> None:
    with pytest.raises(OffsetMovedToTieredStorageError):
        tiered_reads.read(TP, tiered.log, None, 0, 1000)
