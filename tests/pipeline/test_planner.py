"""Planning returns exactly the offsets the bounds select, and reads only the bytes the
indexes point at (no JVM: the planner and decoder run as the data source runs them)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.pipeline.conftest import write_log
from tests.pipeline.read_all import read_splits, read_table
from tests.storage.conftest import T0
from tierlog.pipeline.bounds import RowBounds
from tierlog.pipeline.errors import DataLossError
from tierlog.pipeline.options import parse_options
from tierlog.pipeline.source import plan_batch
from tierlog.storage.checkpoints import LOG_START_OFFSET_CHECKPOINT, write_offset_checkpoint
from tierlog.storage.topic_partition import TopicPartition

TOPIC = "orders"
COUNT = 400  # timestamps T0 + 10 * offset


@pytest.fixture
def log_dir(tmp_path: Path) -> Path:
    for partition in range(3):
        write_log(tmp_path, TopicPartition(TOPIC, partition), COUNT)
    write_log(tmp_path, TopicPartition("other", 0), 20)
    return tmp_path


def offsets_by_partition(
    options: dict[str, str], bounds: RowBounds | None = None
) -> dict[int, list[int]]:
    table = read_table(options, bounds)
    found: dict[int, list[int]] = {}
    for partition, offset in zip(
        table.column("partition").to_pylist(), table.column("offset").to_pylist(), strict=True
    ):
        assert partition is not None and offset is not None
        found.setdefault(partition, []).append(offset)
    return found


def test_offsets_json_selects_exactly_the_range_per_partition(log_dir: Path) -> None:
    starting = {TOPIC: {"0": 37, "1": -2, "2": 399}}
    ending = {TOPIC: {"0": 251, "1": 12, "2": -1}}
    found = offsets_by_partition(
        {
            "path": str(log_dir),
            "subscribe": TOPIC,
            "startingOffsets": json.dumps(starting),
            "endingOffsets": json.dumps(ending),
        }
    )
    assert found == {0: list(range(37, 251)), 1: list(range(12)), 2: [399]}


def test_a_mid_segment_range_reads_only_the_indexed_bytes(log_dir: Path) -> None:
    options = parse_options(
        {
            "path": str(log_dir),
            "assign": json.dumps({TOPIC: [0]}),
            "startingOffsets": json.dumps({TOPIC: {"0": 205}}),
            "endingOffsets": json.dumps({TOPIC: {"0": 215}}),
        }
    )
    splits = plan_batch(options)
    assert len(splits) == 1
    split = splits[0]
    segment_bytes = Path(split.segment.path).stat().st_size
    # One index entry per batch of 10: the range starts at the batch holding 205 (or the
    # one before) and ends one batch past 214, not at the segment's ends.
    assert split.start_position > 0 and split.end_position < segment_bytes
    assert read_splits(splits).column("offset").to_pylist() == list(range(205, 215))


def test_timestamps_resolve_to_the_first_offset_at_or_after_them(log_dir: Path) -> None:
    found = offsets_by_partition(
        {
            "path": str(log_dir),
            "subscribe": TOPIC,
            "startingTimestamp": str(T0 + 1005),  # offset 101 is the first at or after
            "endingTimestamp": str(T0 + 2000),  # offset 200 is the first not read
        }
    )
    assert found == {p: list(range(101, 200)) for p in range(3)}


def test_a_timestamp_past_the_end_selects_nothing(log_dir: Path) -> None:
    found = offsets_by_partition(
        {"path": str(log_dir), "subscribe": TOPIC, "startingTimestamp": str(T0 + 10**9)}
    )
    assert found == {}


def test_min_partitions_cuts_segments_at_index_positions_without_changing_rows(
    log_dir: Path,
) -> None:
    base = {"path": str(log_dir), "assign": json.dumps({TOPIC: [1]})}
    plain = plan_batch(parse_options(base))
    many = plan_batch(parse_options(base | {"minPartitions": "16"}))

    assert len(many) >= 16 > len(plain)
    assert {split.segment for split in many} == {split.segment for split in plain}
    assert read_splits(many).column("offset").to_pylist() == list(range(COUNT))


def test_subscribe_pattern_and_assign_pick_the_partitions(log_dir: Path) -> None:
    by_pattern = read_table({"path": str(log_dir), "subscribePattern": "oth.*"})
    assert set(by_pattern.column("topic").to_pylist()) == {"other"}
    assigned = offsets_by_partition(
        {"path": str(log_dir), "assign": json.dumps({TOPIC: [2], "other": []})}
    )
    assert list(assigned) == [2]


def test_pushed_bounds_narrow_partitions_and_offsets_exactly(log_dir: Path) -> None:
    bounds = RowBounds().with_partitions(frozenset({0, 2})).with_min_offset(390)
    found = offsets_by_partition({"path": str(log_dir), "subscribe": TOPIC}, bounds)
    assert found == {0: list(range(390, 400)), 2: list(range(390, 400))}


def test_a_start_below_the_log_start_is_data_loss_unless_allowed(log_dir: Path) -> None:
    write_offset_checkpoint(log_dir / LOG_START_OFFSET_CHECKPOINT, {TopicPartition(TOPIC, 0): 150})
    options = {
        "path": str(log_dir),
        "assign": json.dumps({TOPIC: [0]}),
        "startingOffsets": json.dumps({TOPIC: {"0": 100}}),
    }
    with pytest.raises(DataLossError, match="earliest stored is 150"):
        read_table(options)
    found = offsets_by_partition(options | {"failOnDataLoss": "false"})
    assert found == {0: list(range(150, COUNT))}
