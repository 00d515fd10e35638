from __future__ import annotations

from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tests.storage.conftest import T0, FakeClock
from tests.storage.tier.manifests import tier_view
from tests.storage.tier.test_manifest import remote_segment
from tests.storage.tier.tiering import open_log, produce, tiered_config
from tierlog.storage.config import LogConfig
from tierlog.storage.tier.manifest import RemoteSegment
from tierlog.storage.tier.remote_retention import RemoteDeletion, remote_segments_to_delete

CHUNKING = pytest.mark.parametrize("chunk_entries", [None, 2], ids=["flat", "chunks-of-2"])


def segments(
    *ranges: tuple[int, int], log_bytes: int = 100, max_timestamp: int = 1000
) -> list[RemoteSegment]:
    return [
        remote_segment(base, end, log_bytes=log_bytes, max_timestamp=max_timestamp)
        for base, end in ranges
    ]


@CHUNKING
def test_size_counts_the_tier_and_the_untiered_local_segments(
    tmp_path: Path, chunk_entries: int | None
) -> None:
    remote = segments((0, 10), (10, 20), log_bytes=100)
    log = open_log(tmp_path, FakeClock())
    log.truncate_fully_and_start_at(20)
    produce(log, 2)  # local segments above the tier, not uploaded yet
    local_bytes = sum(s.size for s in log.segments)
    deletion = remote_segments_to_delete(
        tier_view(remote, chunk_entries=chunk_entries),
        log.segments,
        tiered_config(retention_bytes=100 + local_bytes),
        log_start_offset=0,
        now_ms=T0,
    )
    assert deletion == RemoteDeletion(1, 10, "retention.bytes")
    log.close()


@CHUNKING
def test_time_takes_expired_remote_segments_only(chunk_entries: int | None) -> None:
    remote = [
        *segments((0, 10), (10, 20), (20, 30), (30, 40), (40, 50), max_timestamp=T0 - 5000),
        *segments((50, 60), (60, 70), max_timestamp=T0),
    ]
    deletion = remote_segments_to_delete(
        tier_view(remote, chunk_entries=chunk_entries),
        [],
        tiered_config(retention_ms=1000),
        log_start_offset=0,
        now_ms=T0,
    )
    assert deletion == RemoteDeletion(5, 50, "retention.ms")


@CHUNKING
def test_the_log_start_offset_takes_segments_wholly_below_it(chunk_entries: int | None) -> None:
    remote = segments(*((base, base + 10) for base in range(0, 80, 10)))
    view = tier_view(remote, chunk_entries=chunk_entries)
    deletion = remote_segments_to_delete(view, [], tiered_config(), log_start_offset=55, now_ms=T0)
    assert deletion == RemoteDeletion(5, 55, "log start offset")
    assert (
        remote_segments_to_delete(view, [], tiered_config(), log_start_offset=0, now_ms=T0) is None
    )


def test_segments_already_below_the_tiers_log_start_are_not_counted_again() -> None:
    remote = segments(*((base, base + 10) for base in range(0, 80, 10)), log_bytes=100)
    view = tier_view(remote, log_start_offset=35, chunk_entries=2)  # dead: the first three
    assert view.log_start_offset == 35
    deletion = remote_segments_to_delete(
        view, [], tiered_config(retention_bytes=300), log_start_offset=35, now_ms=T0
    )
    assert deletion == RemoteDeletion(2, 50, "retention.bytes")  # 5 live, 300 bytes kept


def test_a_compact_only_topic_answers_to_the_log_start_alone() -> None:
    view = tier_view(segments((0, 10), max_timestamp=0))
    config = LogConfig.from_properties({"retention.ms": "1", "cleanup.policy": "compact"})
    assert remote_segments_to_delete(view, [], config, log_start_offset=0, now_ms=T0) is None


@settings(max_examples=150, deadline=None)
@given(
    lengths=st.lists(st.integers(1, 5), min_size=1, max_size=40),
    sizes=st.lists(st.integers(0, 100), min_size=40, max_size=40),
    stamps=st.lists(st.integers(T0 - 100, T0), min_size=40, max_size=40),
    log_start=st.integers(0, 120),
    retention_ms=st.sampled_from([-1, 10, 50, 90]),
    retention_bytes=st.sampled_from([-1, 0, 500, 1500]),
    chunk_entries=st.integers(2, 4),
)
def test_chunks_delete_what_the_flat_list_deletes(
    lengths: list[int],
    sizes: list[int],
    stamps: list[int],
    log_start: int,
    retention_ms: int,
    retention_bytes: int,
    chunk_entries: int,
) -> None:
    remote, base = [], 0
    for length, size, stamp in zip(lengths, sizes, stamps, strict=False):
        remote.append(remote_segment(base, base + length, log_bytes=size, max_timestamp=stamp))
        base += length
    config = tiered_config(retention_ms=retention_ms, retention_bytes=retention_bytes)

    def deletion(chunks: int | None) -> RemoteDeletion | None:
        view = tier_view(remote, log_start_offset=log_start, chunk_entries=chunks)
        return remote_segments_to_delete(view, [], config, log_start_offset=log_start, now_ms=T0)

    assert deletion(chunk_entries) == deletion(None)
