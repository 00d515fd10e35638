"""``segment.jitter.ms``: each segment gets its own jitter in [0, min(jitter, segment.ms))
and rolls once it has waited more than ``segment.ms - jitter``, so partitions created
together do not all roll (and later all expire) at the same moment. With no jitter the
rule is Kafka's exact one: roll when the wait exceeds ``segment.ms``.

The wait is measured on record timestamps (the incoming batch's max timestamp minus the
segment's first), or on the log's clock when the records carry none.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.storage.conftest import T0, FakeClock, config
from tierlog.storage.config import LogConfig
from tierlog.storage.log import Log
from tierlog.storage.records import SimpleRecord, build_batch

SEGMENT_MS = 60_000
JITTER_MS = 30_000
JITTERED = config(segment_ms=SEGMENT_MS, segment_jitter_ms=JITTER_MS, segment_index_bytes=4096)


def stamped(timestamp: int) -> bytes:
    return build_batch([SimpleRecord(key=b"k", value=b"v", timestamp=timestamp)])


UNSTAMPED = build_batch([SimpleRecord(key=b"k", value=b"v", timestamp=-1)])


@pytest.fixture
def logs(tmp_path: Path) -> Iterator[list[Log]]:
    """Logs the test opens (see ``open_log``), closed at the end."""
    opened: list[Log] = []
    yield opened
    for log in opened:
        log.close()


def open_log(
    logs: list[Log], directory: Path, log_config: LogConfig, clock: FakeClock | None = None
) -> Log:
    log = Log.open(directory, log_config, clock_ms=clock or FakeClock())
    logs.append(log)
    return log


def append_at(log: Log, clock: FakeClock, timestamp: int) -> int:
    """Append one record stamped ``timestamp`` with the clock there too; the segment count."""
    clock.now_ms = timestamp
    log.append(stamped(timestamp))
    return len(log.segments)


def test_each_segment_draws_a_jitter_below_min_of_jitter_and_segment_ms(
    tmp_path: Path, logs: list[Log]
) -> None:
    small = [
        open_log(logs, tmp_path / f"small-{i}", JITTERED).active_segment.roll_jitter_ms
        for i in range(40)
    ]
    assert all(0 <= jitter < JITTER_MS for jitter in small)
    assert len(set(small)) > 30, "jitters should spread over the range"

    # A jitter above segment.ms is bounded by segment.ms (a segment never rolls "before").
    wide = config(segment_ms=SEGMENT_MS, segment_jitter_ms=10 * SEGMENT_MS)
    large = [
        open_log(logs, tmp_path / f"large-{i}", wide).active_segment.roll_jitter_ms
        for i in range(40)
    ]
    assert all(0 <= jitter < SEGMENT_MS for jitter in large)
    assert max(large) >= JITTER_MS, "the bound is segment.ms, not a smaller one"


def test_a_segment_rolls_when_it_has_waited_more_than_segment_ms_minus_its_jitter(
    tmp_path: Path, logs: list[Log]
) -> None:
    clock = FakeClock()
    log = open_log(logs, tmp_path / "events-0", JITTERED, clock)
    first = T0
    append_at(log, clock, first)
    for _ in range(4):  # each new segment waits by its own jitter
        segment = log.active_segment
        jitter = segment.roll_jitter_ms
        assert 0 < jitter < JITTER_MS
        count = len(log.segments)
        assert append_at(log, clock, first + SEGMENT_MS - jitter) == count
        first += SEGMENT_MS - jitter + 1  # the batch that rolls opens the next segment
        assert append_at(log, clock, first) == count + 1
        assert log.segments[-2] is segment
    jitters = [segment.roll_jitter_ms for segment in log.segments]
    assert len(set(jitters)) == len(jitters), jitters


def test_the_clock_rule_is_jittered_too_when_records_have_no_timestamp(
    tmp_path: Path, logs: list[Log]
) -> None:
    clock = FakeClock()
    log = open_log(logs, tmp_path / "events-0", JITTERED, clock)
    jitter = log.active_segment.roll_jitter_ms
    log.append(UNSTAMPED)
    clock.advance(SEGMENT_MS - jitter)
    log.append(UNSTAMPED)
    assert len(log.segments) == 1
    clock.advance(1)
    log.append(UNSTAMPED)
    assert [segment.base_offset for segment in log.segments] == [0, 2]


def first_roll_ms(log: Log, clock: FakeClock, step_ms: int) -> int:
    """Append a record every ``step_ms`` from T0 until the log rolls; when it did."""
    timestamp = T0
    append_at(log, clock, timestamp)
    while len(log.segments) == 1:
        timestamp += step_ms
        append_at(log, clock, timestamp)
    return timestamp


def test_partitions_with_the_same_settings_roll_at_different_times(
    tmp_path: Path, logs: list[Log]
) -> None:
    step_ms = 500
    rolled_at = {}
    for name in ("events-0", "events-1", "events-2", "events-3"):
        clock = FakeClock()
        log = open_log(logs, tmp_path / name, JITTERED, clock)
        jitter = log.active_segment.roll_jitter_ms
        rolled_at[name] = first_roll_ms(log, clock, step_ms)
        # The first step past segment.ms - jitter, exactly.
        threshold = SEGMENT_MS - jitter
        assert rolled_at[name] == T0 + (threshold // step_ms + 1) * step_ms
    assert len(set(rolled_at.values())) == len(rolled_at), rolled_at


def test_without_jitter_every_partition_keeps_kafkas_exact_rule(
    tmp_path: Path, logs: list[Log]
) -> None:
    plain = config(segment_ms=SEGMENT_MS, segment_index_bytes=4096)
    for name in ("events-0", "events-1", "events-2"):
        clock = FakeClock()
        log = open_log(logs, tmp_path / name, plain, clock)
        assert log.active_segment.roll_jitter_ms == 0
        assert append_at(log, clock, T0) == 1
        assert append_at(log, clock, T0 + SEGMENT_MS) == 1  # waited == segment.ms: stays
        assert append_at(log, clock, T0 + SEGMENT_MS + 1) == 2
        assert log.active_segment.roll_jitter_ms == 0

        untimed = open_log(logs, tmp_path / f"{name}-untimed", plain, clock)
        untimed.append(UNSTAMPED)
        clock.advance(SEGMENT_MS)
        untimed.append(UNSTAMPED)
        assert len(untimed.segments) == 1
        clock.advance(1)
        untimed.append(UNSTAMPED)
        assert len(untimed.segments) == 2


def test_a_segments_jitter_survives_reopening(tmp_path: Path) -> None:
    clock = FakeClock()
    log = Log.open(tmp_path / "events-0", JITTERED, clock_ms=clock)
    append_at(log, clock, T0)
    append_at(log, clock, T0 + SEGMENT_MS)  # past any jitter: a second segment
    jitters = [segment.roll_jitter_ms for segment in log.segments]
    assert len(jitters) == 2
    log.close()
    reopened = Log.open(tmp_path / "events-0", JITTERED, clean_shutdown=True, clock_ms=clock)
    assert [segment.roll_jitter_ms for segment in reopened.segments] == jitters
    reopened.close()
