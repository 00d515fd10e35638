"""Lock-free readers against a live writer: ``Log.read`` and ``offset_for_timestamp`` run
in threads while one writer appends and rolls, or appends and truncates.

The writer stamps every record with ``T0 + offset`` and a value naming its offset, so
whatever batch boundaries a truncation and re-append produce, offset k always holds the
same record. A reader must get whole, CRC-valid batches with consecutive offsets that
start at the batch holding the requested offset, and records that say their own offset;
or a clean ``OffsetOutOfRangeError`` once a truncation took the offset away. Anything
else -- another exception, a torn batch, a wrong record -- is a failure.
"""

from __future__ import annotations

import random
import threading
import traceback
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from tests.storage.conftest import T0, FakeClock, config, read_all_records
from tierlog.storage.errors import OffsetOutOfRangeError
from tierlog.storage.log import Log
from tierlog.storage.records import (
    CompressionType,
    SimpleRecord,
    build_batch,
    crc_is_valid,
    decode_records,
    iter_batches,
)

# The writer goes on until it made MIN_WRITES and the readers checked enough answers
# (work, not time: a loaded machine only makes the run longer), at most MAX_WRITES.
MIN_WRITES = 1_000
MIN_CHECKS = 150
MAX_WRITES = 20_000
READERS = 4
# Small segments and dense indexes: many rolls (index trims) and index lookups.
CONFIG = config(segment_bytes=6_000, index_interval_bytes=200, segment_index_bytes=2_048)


def value_of(offset: int) -> bytes:
    return f"value-{offset}".encode()


def batch_at(first_offset: int, count: int, codec: CompressionType) -> bytes:
    """``count`` records that will land at ``first_offset``.. (timestamp T0 + offset)."""
    records = [
        SimpleRecord(key=b"k%d" % (offset % 7), value=value_of(offset), timestamp=T0 + offset)
        for offset in range(first_offset, first_offset + count)
    ]
    return build_batch(records, compression=codec)


@dataclass
class Outcome:
    reads: int = 0
    whole_reads: int = 0
    out_of_range: int = 0
    timestamp_lookups: int = 0
    failures: list[str] = field(default_factory=list)
    lock: threading.Lock = field(default_factory=threading.Lock)

    def fail(self, what: str) -> None:
        with self.lock:
            self.failures.append(what)


def check_read(log: Log, offset: int, max_bytes: int, outcome: Outcome) -> None:
    try:
        found = log.read(offset, max_bytes)
    except OffsetOutOfRangeError:
        outcome.out_of_range += 1
        return
    outcome.reads += 1
    data = found.records
    if not data:
        return  # the offset was the log end when the read looked
    expected = offset
    for index, header in enumerate(iter_batches(data)):
        if not crc_is_valid(data, header):
            raise AssertionError(f"read at {offset}: batch {index} fails its CRC")
        if index == 0:
            if not header.base_offset <= offset <= header.last_offset:
                raise AssertionError(f"read at {offset} starts with {header}")
            expected = header.base_offset
        records = decode_records(data, header)
        offsets = [record.offset for record in records]
        if offsets != list(range(expected, expected + len(records))):
            raise AssertionError(f"read at {offset}: offsets {offsets}, expected from {expected}")
        for record in records:
            if record.timestamp != T0 + record.offset or record.value != value_of(record.offset):
                raise AssertionError(f"read at {offset}: wrong record {record}")
        expected = offsets[-1] + 1
    outcome.whole_reads += 1


def check_timestamp_lookup(log: Log, target: int, outcome: Outcome, *, shrinks: bool) -> None:
    """Timestamps grow with offsets, so the answer for T0 + k is offset k while it exists
    (with truncations, k may be gone for a while: then there may be no answer)."""
    found = log.offset_for_timestamp(T0 + target)
    outcome.timestamp_lookups += 1
    if found is not None and tuple(found) != (T0 + target, target):
        raise AssertionError(f"offset_for_timestamp({T0 + target}) gave {found}")
    if found is None and not shrinks:
        raise AssertionError(f"offset_for_timestamp({T0 + target}) found nothing below the end")


def reader(log: Log, stop: threading.Event, outcome: Outcome, seed: int, shrinks: bool) -> None:
    rng = random.Random(seed)
    while not stop.is_set():
        end = log.log_end_offset
        offset = rng.randint(max(0, end - 300), end) if rng.random() < 0.7 else rng.randint(0, end)
        try:
            check_read(log, offset, rng.choice([1, 500, 4_000, 1 << 20]), outcome)
            if end:
                check_timestamp_lookup(log, rng.randrange(end), outcome, shrinks=shrinks)
        except Exception:
            outcome.fail(traceback.format_exc())
            return


def run_with_readers(
    log: Log, write: Callable[[random.Random], None], *, shrinks: bool = False
) -> Outcome:
    """Run ``write`` over and over in this thread while readers check every answer;
    ``shrinks``: the writer also truncates, so the log end may move back."""
    outcome = Outcome()
    stop = threading.Event()
    threads = [
        threading.Thread(target=reader, args=(log, stop, outcome, seed, shrinks), daemon=True)
        for seed in range(READERS)
    ]
    for thread in threads:
        thread.start()
    rng = random.Random(42)
    try:
        for done in range(MAX_WRITES):
            checked = min(outcome.whole_reads, outcome.timestamp_lookups)
            if outcome.failures or (done >= MIN_WRITES and checked >= MIN_CHECKS):
                break
            write(rng)
    finally:
        stop.set()
        for thread in threads:
            thread.join(timeout=10)
    assert not any(thread.is_alive() for thread in threads), "a reader hung"
    return outcome


def append_one(log: Log, rng: random.Random) -> None:
    codec = rng.choice(list(CompressionType))
    log.append(batch_at(log.log_end_offset, rng.randint(1, 6), codec))


def test_readers_see_whole_batches_while_the_writer_appends_and_rolls(tmp_path: Path) -> None:
    log = Log.open(tmp_path / "t-0", CONFIG, clock_ms=FakeClock(T0 + 10**9))
    log.append(batch_at(0, 3, CompressionType.NONE))

    outcome = run_with_readers(log, lambda rng: append_one(log, rng))

    assert outcome.failures == [], outcome.failures[0]
    assert outcome.out_of_range == 0  # nothing ever leaves this log
    assert outcome.whole_reads > 100 and outcome.timestamp_lookups > 100
    assert len(log.segments) > 10, "the writer should have rolled many segments"
    records = read_all_records(log)
    assert [r.offset for r in records] == list(range(log.log_end_offset))
    log.close()


def test_readers_see_whole_batches_or_out_of_range_while_the_log_is_truncated(
    tmp_path: Path,
) -> None:
    log = Log.open(tmp_path / "t-0", CONFIG, clock_ms=FakeClock(T0 + 10**9))
    truncations = 0

    def write(rng: random.Random) -> None:
        nonlocal truncations
        if log.log_end_offset > 200 and rng.random() < 0.05:
            # Back a little (inside the active segment) or a lot (dropping segments).
            back = rng.choice([rng.randint(1, 20), rng.randint(20, 400)])
            log.truncate_to(max(1, log.log_end_offset - back))
            truncations += 1
        else:
            append_one(log, rng)

    outcome = run_with_readers(log, write, shrinks=True)

    assert outcome.failures == [], outcome.failures[0]
    assert truncations > 10 and outcome.whole_reads > 100
    records = read_all_records(log)
    assert [r.offset for r in records] == list(range(log.log_end_offset))
    assert all(r.value == value_of(r.offset) for r in records)
    log.close()
