from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from tierlog.storage.tier.layout import (
    SegmentKey,
    chunk_key,
    manifest_key,
    new_segment_id,
    parse_manifest_version,
    parse_segment_key,
    partition_prefix,
    segment_key,
)
from tierlog.storage.topic_partition import TopicPartition

topics = st.text("abcxyzABC019._-", min_size=1, max_size=40).filter(lambda t: t not in (".", ".."))
partitions = st.builds(TopicPartition, topics, st.integers(0, 10_000))
offsets = st.integers(0, 2**63 - 1)


def test_a_segment_key_reads_as_a_kafka_name_with_epoch_and_attempt_id() -> None:
    tp = TopicPartition("orders", 3)
    key = segment_key(tp, 1234, 7, "0" * 32)
    prefix = partition_prefix(tp)
    assert key == f"{prefix}segments/00000000000000001234-e7-{'0' * 32}.segment"
    assert prefix.endswith("/orders-3/") and len(prefix.split("/")[0]) == 4


def test_the_hash_prefix_spreads_partitions_of_one_topic() -> None:
    prefixes = {partition_prefix(TopicPartition("busy", p)).split("/")[0] for p in range(64)}
    assert len(prefixes) > 48  # 64 partitions over 65536 prefixes: few collisions


def test_attempt_ids_are_fresh() -> None:
    assert len({new_segment_id() for _ in range(1000)}) == 1000


@given(partitions, offsets, st.integers(0, 2**31 - 1))
def test_segment_keys_parse_back(tp: TopicPartition, base: int, epoch: int) -> None:
    segment_id = new_segment_id()
    key = segment_key(tp, base, epoch, segment_id)
    assert parse_segment_key(key) == SegmentKey(tp, base, epoch, segment_id)


@given(partitions, st.integers(0, 10**19))
def test_manifest_keys_parse_back(tp: TopicPartition, version: int) -> None:
    assert parse_manifest_version(manifest_key(tp, version)) == version


def test_other_keys_are_not_segments_or_manifests() -> None:
    tp = TopicPartition("t", 0)
    good = segment_key(tp, 5, 1, "a" * 32)
    assert parse_segment_key(good.replace("t-0", "u-0")) is None  # wrong hash for u-0
    assert parse_segment_key(good + ".tmp") is None
    assert parse_segment_key("abcd/t-0/manifest/00000000000000000001.json") is None
    assert parse_manifest_version(good) is None


def test_a_chunk_key_names_its_range_level_and_bytes() -> None:
    tp = TopicPartition("orders", 3)
    key = chunk_key(tp, 10, 20, 2, b"body")
    assert key.startswith(f"{partition_prefix(tp)}chunks/00000000000000000010-")
    assert key.endswith("-l2-230d8358dc8e8890b4c58deeb62912ee.json")
    assert chunk_key(tp, 10, 20, 2, b"body") == key != chunk_key(tp, 10, 20, 2, b"other")
    assert parse_segment_key(key) is None and parse_manifest_version(key) is None
