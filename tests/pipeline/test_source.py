"""Planning over a log dir whose broker deletes segments meanwhile: local retention may
remove a segment between its listing and its opening, and planning lists again."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from tests.pipeline.conftest import (
    SMALL_SEGMENTS,
    expected_rows,
    file_tier,
    produce,
    records_for,
    rows_of_table,
)
from tests.pipeline.read_all import read_splits
from tests.pipeline.tiering import delete_local_copies, tier_closed_segments
from tests.storage.conftest import read_all_records
from tierlog.pipeline.options import parse_options
from tierlog.pipeline.readers import open_segment
from tierlog.pipeline.segments import SegmentReader, SegmentRef
from tierlog.pipeline.source import plan_batch, plan_stream_range
from tierlog.storage.log import Log
from tierlog.storage.records import Record
from tierlog.storage.segment import LogSegment
from tierlog.storage.topic_partition import TopicPartition

TP = TopicPartition("orders", 0)


class RetentionStrikesOnce:
    """Opens segments as the data source does, but the first time it is asked for a
    local one, local retention deletes ``doomed`` first (the real files, gone)."""

    def __init__(self, doomed: list[LogSegment]):
        self.doomed = doomed
        self.struck = False

    def __call__(self, ref: SegmentRef) -> SegmentReader:
        if not self.struck and not ref.is_remote:
            self.struck = True
            delete_local_copies(self.doomed)
        return open_segment(ref)


@dataclass(frozen=True)
class Retiring:
    """A closed log whose closed segments are tiered, and an opener with which local
    retention deletes the older half of them while a plan is made."""

    options: dict[str, str]
    records: list[Record]  # all of them, as storage read them before the deletion
    local_start: int  # the first offset left on disk after the deletion
    opener: RetentionStrikesOnce


def tiered_then_retiring(tmp_path: Path) -> Retiring:
    log_dir = tmp_path / "logs"
    log = Log.open(log_dir / TP.dir_name, SMALL_SEGMENTS)
    produce(log, records_for(600))
    tier = file_tier(tmp_path / "tier")
    tier_closed_segments(tier.open(), TP, log)
    records = read_all_records(log)
    segments = log.segments
    log.close()
    half = len(segments) // 2
    return Retiring(
        {"path": f"{tier.url},{log_dir}", "subscribe": TP.topic},
        records,
        segments[half].base_offset,
        RetentionStrikesOnce(segments[:half]),
    )


def test_a_batch_plan_lists_again_when_retention_deletes_a_listed_segment(
    tmp_path: Path,
) -> None:
    retiring = tiered_then_retiring(tmp_path)

    splits = plan_batch(parse_options(retiring.options), opener=retiring.opener)

    assert retiring.opener.struck
    below = [split for split in splits if split.start_offset < retiring.local_start]
    assert below and all(split.segment.is_remote for split in below)
    assert rows_of_table(read_splits(splits)) == expected_rows(TP, retiring.records)


def test_a_micro_batch_plan_lists_again_when_retention_deletes_a_listed_segment(
    tmp_path: Path,
) -> None:
    retiring = tiered_then_retiring(tmp_path)
    options = parse_options(retiring.options, streaming=True)

    splits = plan_stream_range(options, {TP: 0}, {TP: 500}, opener=retiring.opener)

    assert retiring.opener.struck
    assert rows_of_table(read_splits(splits)) == expected_rows(TP, retiring.records[:500])
