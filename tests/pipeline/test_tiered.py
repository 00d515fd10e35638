"""Tiered segments (a ``file://`` tier: the local-directory store) read like local ones,
and a partition's full history is the tier plus the local tail, each offset once."""

from __future__ import annotations

from pathlib import Path

from tests.pipeline.conftest import (
    SMALL_SEGMENTS,
    Tier,
    expected_rows,
    produce,
    records_for,
    rows_of_table,
)
from tests.pipeline.read_all import read_table, split_records
from tests.pipeline.tiering import (
    tier_closed_segments,
    tier_segments,
    tier_then_delete_older_half,
)
from tests.storage.conftest import read_all_records
from tierlog.pipeline.options import parse_options
from tierlog.pipeline.readers import opened
from tierlog.pipeline.source import plan_batch
from tierlog.pipeline.tiered import RemoteSegmentReader
from tierlog.storage.log import Log
from tierlog.storage.tier.local_store import LocalDirectoryStore
from tierlog.storage.topic_partition import TopicPartition

TP = TopicPartition("orders", 0)


def tiered_log(tmp_path: Path, count: int = 600) -> tuple[Path, str, Log]:
    """A log dir whose closed segments are all tiered to a ``file://`` tier."""
    log_dir = tmp_path / "logs"
    log = Log.open(log_dir / TP.dir_name, SMALL_SEGMENTS)
    produce(log, records_for(count))
    store = LocalDirectoryStore(tmp_path / "tier")
    tier_closed_segments(store, TP, log)
    return log_dir, store.url, log


def test_a_tier_alone_reads_what_storage_reads(tmp_path: Path) -> None:
    _, tier_url, log = tiered_log(tmp_path)
    tiered = read_all_records(log)[: log.active_segment.base_offset]
    log.close()

    table = read_table({"path": tier_url, "subscribe": "orders", "startingOffsets": "earliest"})

    assert rows_of_table(table) == expected_rows(TP, tiered)


def test_tier_and_local_copies_of_a_segment_are_read_once(tmp_path: Path) -> None:
    log_dir, tier_url, log = tiered_log(tmp_path)
    everything = read_all_records(log)
    log.close()

    table = read_table({"paths": f'["{tier_url}", "{log_dir}"]', "subscribe": "orders"})

    assert rows_of_table(table) == expected_rows(TP, everything)


def test_history_is_the_tier_below_the_local_log_start_plus_the_local_tail(
    tmp_path: Path,
) -> None:
    log_dir = tmp_path / "logs"
    log = Log.open(log_dir / TP.dir_name, SMALL_SEGMENTS)
    produce(log, records_for(600))
    store = LocalDirectoryStore(tmp_path / "tier")
    history = tier_then_delete_older_half(store, TP, log)

    local_only = read_table({"path": str(log_dir), "subscribe": "orders"})
    both = read_table({"path": f"{log_dir},{store.url}", "subscribe": "orders"})

    assert local_only.column("offset").to_pylist()[0] == history.local_start
    assert rows_of_table(both) == expected_rows(TP, history.records)


def test_a_segment_tiered_twice_is_read_once(tmp_path: Path) -> None:
    log_dir = tmp_path / "logs"
    log = Log.open(log_dir / TP.dir_name, SMALL_SEGMENTS)
    produce(log, records_for(300))
    log.flush()
    closed = log.segments[:-1]
    first = LocalDirectoryStore(tmp_path / "tier-a")
    second = LocalDirectoryStore(tmp_path / "tier-b")
    tier_segments(first, TP, closed)
    tier_segments(second, TP, closed[1:])
    tiered = read_all_records(log)[: log.active_segment.base_offset]
    log.close()

    table = read_table({"path": f"{first.url},{second.url}", "subscribe": "orders"})

    assert rows_of_table(table) == expected_rows(TP, tiered)


def test_an_s3_tier_in_minio_plus_the_local_tail(tmp_path: Path, s3_tier: Tier) -> None:
    log_dir = tmp_path / "logs"
    log = Log.open(log_dir / TP.dir_name, SMALL_SEGMENTS)
    produce(log, records_for(600))
    store = s3_tier.open()
    try:
        history = tier_then_delete_older_half(store, TP, log)
    finally:
        store.close()

    table = read_table(
        {"path": f"{s3_tier.url},{log_dir}", "subscribe": "orders"} | s3_tier.options
    )

    assert rows_of_table(table) == expected_rows(TP, history.records)


def test_the_splits_of_an_s3_tier_read_through_one_store_per_process(
    tmp_path: Path, s3_tier: Tier
) -> None:
    """A worker reads split after split of a tier: one boto3 client for them all (making
    one costs more than decoding a segment), still open after each reader is closed."""
    log = Log.open(tmp_path / "logs" / TP.dir_name, SMALL_SEGMENTS)
    produce(log, records_for(600))
    store = s3_tier.open()
    try:
        tier_closed_segments(store, TP, log)
    finally:
        store.close()
    tiered = read_all_records(log)[: log.active_segment.base_offset]
    log.close()
    splits = plan_batch(
        parse_options({"path": s3_tier.url, "subscribe": "orders"} | s3_tier.options)
    )
    assert len(splits) > 1

    stores = []
    rows = 0
    for split in splits:
        with opened(split.segment) as reader:
            assert isinstance(reader, RemoteSegmentReader)
            stores.append(reader.store)
            rows += sum(1 for _ in split_records(split))

    assert all(store is stores[0] for store in stores)
    assert rows == len(tiered)
