"""The log against an in-memory model, over random appends, rolls, truncations and crashes.

A crash drops the Log without closing it (the kernel would close its files; nothing is
flushed or trimmed) and may cut the last segment at a random byte past what was
flushed, as a torn tail of unflushed data. After every reopen the log must hold exactly
the model's batches that were wholly on disk -- every flushed batch among them -- and
reads and timestamp lookups must agree with the model.

The same machine runs on a ``message.timestamp.type=LogAppendTime`` topic, where the
model expects the log's clock at each append as the timestamp of every record in it,
whatever the producer stamped (even hours ahead, which CreateTime would refuse).
"""

from __future__ import annotations

import mmap
import os
import shutil
import tempfile
from dataclasses import dataclass
from pathlib import Path

import pytest
from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from hypothesis.stateful import (
    RuleBasedStateMachine,
    initialize,
    invariant,
    rule,
)

from tests.storage.conftest import T0, FakeClock, headers_of, read_all_records
from tierlog.storage.config import LogConfig, TimestampType
from tierlog.storage.errors import OffsetOutOfRangeError, RecordBatchTooLargeError
from tierlog.storage.log import EARLIEST_TIMESTAMP, LATEST_TIMESTAMP, MAX_TIMESTAMP, Log
from tierlog.storage.records import CompressionType, Record, SimpleRecord, build_batch


@dataclass(frozen=True)
class ModelBatch:
    base_offset: int
    records: tuple[Record, ...]
    size: int

    @property
    def next_offset(self) -> int:
        return self.base_offset + len(self.records)


def abandon(log: Log) -> None:
    """What a killed process leaves: files closed by the kernel, nothing flushed or trimmed."""
    for segment in log.segments:
        for index in segment._indexes or ():
            if isinstance(index._buffer, mmap.mmap):
                index._buffer.close()  # unmapping keeps the dirty pages in the page cache
        os.close(segment.log._fd)


RECORDS = st.lists(
    st.tuples(
        st.binary(max_size=12) | st.none(),  # key
        st.integers(0, 300),  # value size
        st.integers(0, 5_000),  # how far the timestamp lies before now
    ),
    min_size=1,
    max_size=8,
)


class LogMachine(RuleBasedStateMachine):
    timestamp_type = TimestampType.CREATE_TIME

    def __init__(self) -> None:
        super().__init__()
        self.root = Path(tempfile.mkdtemp(prefix="tierlog-prop-"))
        self.directory = self.root / "t-0"
        self.clock = FakeClock(T0 + 10_000)
        self.batches: list[ModelBatch] = []
        self.log: Log | None = None
        self.config = LogConfig()

    @initialize(
        segment_bytes=st.sampled_from([700, 2_500, 1_000_000]),
        index_interval_bytes=st.sampled_from([0, 150, 4096]),
        segment_index_bytes=st.sampled_from([8, 16, 64, 4096]),
    )
    def open_log(
        self, segment_bytes: int, index_interval_bytes: int, segment_index_bytes: int
    ) -> None:
        self.config = LogConfig(
            segment_bytes=segment_bytes,
            index_interval_bytes=index_interval_bytes,
            segment_index_bytes=segment_index_bytes,
            message_timestamp_type=self.timestamp_type.value,
        )
        self.log = Log.open(self.directory, self.config, clock_ms=self.clock)

    @property
    def live(self) -> Log:
        assert self.log is not None
        return self.log

    @property
    def model_end(self) -> int:
        return self.batches[-1].next_offset if self.batches else 0

    @property
    def model_records(self) -> list[Record]:
        return [record for batch in self.batches for record in batch.records]

    # -- operations ---------------------------------------------------------------------

    @rule(
        records=RECORDS,
        codec=st.sampled_from(list(CompressionType)),
    )
    def append(self, records: list[tuple[bytes | None, int, int]], codec: CompressionType) -> None:
        produced = [
            SimpleRecord(key=key, value=bytes([size % 251]) * size, timestamp=self.produced_at(ago))
            for key, size, ago in records
        ]
        batch = build_batch(produced, compression=codec)
        if len(batch) > self.config.segment_bytes:
            with pytest.raises(RecordBatchTooLargeError):
                self.live.append(batch)
            return
        now_ms = self.clock()
        info = self.live.append(batch)
        assert info.first_offset == self.model_end
        stored = tuple(
            Record(info.first_offset + i, self.stored_timestamp(r, now_ms), r.key, r.value, ())
            for i, r in enumerate(produced)
        )
        if self.timestamp_type is TimestampType.LOG_APPEND_TIME:
            assert (info.log_append_time_ms, info.max_timestamp) == (now_ms, now_ms)
        self.batches.append(ModelBatch(info.first_offset, stored, len(batch)))
        self.clock.advance(1)

    @rule()
    def roll(self) -> None:
        self.live.roll()

    @rule()
    def flush(self) -> None:
        self.live.flush()
        assert self.live.recovery_point == self.model_end

    @rule(data=st.data())
    def truncate(self, data: st.DataObject) -> None:
        target = data.draw(st.integers(0, self.model_end), label="truncate_to")
        self.live.truncate_to(target)
        self.batches = [batch for batch in self.batches if batch.next_offset <= target]
        assert self.live.log_end_offset == self.model_end
        assert self.live.recovery_point <= self.model_end

    @rule()
    def reopen(self) -> None:
        recovery_point = self.live.recovery_point
        self.live.close()
        self.log = Log.open(
            self.directory,
            self.config,
            recovery_point=recovery_point,
            clean_shutdown=True,
            clock_ms=self.clock,
        )
        self.check_against_model()

    @rule(tear=st.booleans(), data=st.data())
    def crash(self, tear: bool, data: st.DataObject) -> None:
        log = self.live
        recovery_point = log.recovery_point
        last = log.active_segment
        # Where the flushed bytes end in the last segment: a torn tail starts after it.
        flushed_bytes = sum(
            batch.size
            for batch in self.batches
            if last.base_offset <= batch.base_offset and batch.next_offset <= recovery_point
        )
        size = last.size
        abandon(log)
        self.log = None
        cut = size
        if tear and size > flushed_bytes:
            cut = data.draw(st.integers(flushed_bytes, size - 1), label="cut_at")
            os.truncate(last.log.path, cut)
        # The model keeps the batches wholly below the cut.
        kept, position = [], 0
        for batch in self.batches:
            if batch.base_offset >= last.base_offset:
                if position + batch.size > cut:
                    break
                position += batch.size
            kept.append(batch)
        assert all(batch in kept for batch in self.batches if batch.next_offset <= recovery_point)
        self.batches = kept
        self.log = Log.open(
            self.directory,
            self.config,
            recovery_point=recovery_point,
            clean_shutdown=False,
            clock_ms=self.clock,
        )
        assert self.live.log_end_offset >= recovery_point  # nothing flushed was lost
        assert self.live.recovery_point == self.model_end
        self.check_against_model()

    def produced_at(self, ago_ms: int) -> int:
        return self.clock() - ago_ms

    def stored_timestamp(self, produced: SimpleRecord, now_ms: int) -> int:
        return produced.timestamp

    # -- checks -------------------------------------------------------------------------

    def check_against_model(self) -> None:
        log = self.live
        assert log.log_end_offset == self.model_end
        records = read_all_records(log)
        assert records == self.model_records
        for batch in self.batches:
            for offset in {batch.base_offset, batch.next_offset - 1}:
                first = headers_of(log.read(offset, 1).records)[0]
                assert (first.base_offset, first.last_offset) == (offset_range(batch))
        with pytest.raises(OffsetOutOfRangeError):
            log.read(self.model_end + 1, 100)
        self.check_timestamps(records)

    def check_timestamps(self, records: list[Record]) -> None:
        log = self.live
        assert log.offset_for_timestamp(EARLIEST_TIMESTAMP) == (-1, 0)
        assert log.offset_for_timestamp(LATEST_TIMESTAMP) == (-1, self.model_end)
        if not records:
            assert log.offset_for_timestamp(MAX_TIMESTAMP) is None
            return
        largest = max(record.timestamp for record in records)
        first_largest = next(r.offset for r in records if r.timestamp == largest)
        assert log.offset_for_timestamp(MAX_TIMESTAMP) == (largest, first_largest)
        stamps = sorted({record.timestamp for record in records})
        for target in {stamps[0] - 1, *stamps[:: max(1, len(stamps) // 6)], largest, largest + 1}:
            expected = next(
                ((r.timestamp, r.offset) for r in records if r.timestamp >= target), None
            )
            assert log.offset_for_timestamp(target) == expected, target

    @invariant()
    def end_offset_matches(self) -> None:
        if self.log is not None:
            assert self.log.log_end_offset == self.model_end

    def teardown(self) -> None:
        if self.log is not None:
            self.log.close()
        shutil.rmtree(self.root, ignore_errors=True)


def offset_range(batch: ModelBatch) -> tuple[int, int]:
    return batch.base_offset, batch.next_offset - 1


LogMachine.TestCase.settings = settings(
    max_examples=250,
    stateful_step_count=30,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow],
)
test_log_against_the_model = pytest.mark.slow(LogMachine.TestCase)


class LogAppendTimeMachine(LogMachine):
    """The model on a LogAppendTime topic: the log's clock stamps every record."""

    timestamp_type = TimestampType.LOG_APPEND_TIME

    def produced_at(self, ago_ms: int) -> int:
        # Far from now either way: a LogAppendTime topic neither checks nor keeps it.
        return self.clock() + (ago_ms - 2_500) * 10_000

    def stored_timestamp(self, produced: SimpleRecord, now_ms: int) -> int:
        return now_ms


LogAppendTimeMachine.TestCase.settings = settings(
    max_examples=100,
    stateful_step_count=30,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow],
)
test_log_append_time_against_the_model = pytest.mark.slow(LogAppendTimeMachine.TestCase)
