"""The leader-epoch cache: Kafka's answers to OffsetsForLeaderEpoch, and a checkpoint
that always holds one of the cache's states."""

from __future__ import annotations

import tempfile
from pathlib import Path

from hypothesis import given, settings
from hypothesis import strategies as st

from tierlog.storage.leader_epoch_cache import (
    UNDEFINED_EPOCH,
    UNDEFINED_OFFSET,
    EpochEnd,
    EpochEntry,
    LeaderEpochCache,
)


def _cache(tmp_path: Path, *entries: tuple[int, int]) -> LeaderEpochCache:
    cache = LeaderEpochCache(tmp_path / "leader-epoch-checkpoint")
    for epoch, start in entries:
        cache.assign(epoch, start)
    return cache


def test_assigned_epochs_are_written_in_kafkas_checkpoint_format(tmp_path: Path) -> None:
    cache = _cache(tmp_path, (0, 0), (0, 7), (3, 10), (5, 42))
    assert cache.path.read_text() == "0\n3\n0 0\n3 10\n5 42\n"
    assert LeaderEpochCache(cache.path).entries == cache.entries


def test_an_epoch_before_leader_epochs_changes_nothing(tmp_path: Path) -> None:
    cache = _cache(tmp_path, (-1, 0))
    assert cache.entries == [] and not cache.path.exists()
    assert cache.latest_epoch == UNDEFINED_EPOCH


def test_a_new_epoch_below_known_start_offsets_replaces_the_entries_it_contradicts(
    tmp_path: Path,
) -> None:
    """A follower whose log diverged appends its leader's batches over the cut: epoch 4
    from offset 15 overwrites the follower's own epoch 3 from 20."""
    cache = _cache(tmp_path, (0, 0), (2, 10), (3, 20), (4, 15))
    assert cache.entries == [EpochEntry(0, 0), EpochEntry(2, 10), EpochEntry(4, 15)]


def test_end_offset_for_answers_as_kafka_does(tmp_path: Path) -> None:
    cache = _cache(tmp_path, (2, 10), (4, 20), (7, 35))
    log_end = 50
    assert cache.end_offset_for(7, log_end) == EpochEnd(7, 50)  # the latest: the log end
    assert cache.end_offset_for(4, log_end) == EpochEnd(4, 35)  # where the next one starts
    assert cache.end_offset_for(5, log_end) == EpochEnd(4, 35)  # unknown: the one below (KIP-279)
    assert cache.end_offset_for(1, log_end) == EpochEnd(1, 10)  # older than all: first start
    assert cache.end_offset_for(8, log_end) == EpochEnd(UNDEFINED_EPOCH, UNDEFINED_OFFSET)
    assert cache.end_offset_for(-1, log_end) == EpochEnd(UNDEFINED_EPOCH, UNDEFINED_OFFSET)
    assert _cache(tmp_path / "x").end_offset_for(0, 0) == EpochEnd(UNDEFINED_EPOCH, -1)


def test_truncating_the_end_forgets_the_epochs_that_started_past_it(tmp_path: Path) -> None:
    cache = _cache(tmp_path, (2, 10), (4, 20), (7, 35))
    cache.truncate_from_end(35)
    assert cache.entries == [EpochEntry(2, 10), EpochEntry(4, 20)]
    cache.truncate_from_end(21)
    assert cache.entries == [EpochEntry(2, 10), EpochEntry(4, 20)]
    assert LeaderEpochCache(cache.path).entries == cache.entries


def test_truncating_the_start_moves_the_epoch_holding_the_new_start(tmp_path: Path) -> None:
    cache = _cache(tmp_path, (2, 10), (4, 20), (7, 35))
    cache.truncate_from_start(5)  # before every epoch: nothing to move
    assert cache.entries[0] == EpochEntry(2, 10)
    cache.truncate_from_start(25)
    assert cache.entries == [EpochEntry(4, 25), EpochEntry(7, 35)]
    cache.truncate_from_start(35)
    assert cache.entries == [EpochEntry(7, 35)]
    assert LeaderEpochCache(cache.path).entries == cache.entries


_operations = st.lists(
    st.one_of(
        st.tuples(st.just("assign"), st.integers(-1, 12), st.integers(0, 200)),
        st.tuples(st.just("end"), st.integers(0, 200), st.just(0)),
        st.tuples(st.just("start"), st.integers(0, 200), st.just(0)),
    ),
    max_size=30,
)


# Each step writes the checkpoint through (an fsync): a busy disk takes longer than
# hypothesis' 200 ms deadline now and then, which says nothing about the cache.
@settings(deadline=None)
@given(_operations)
def test_entries_always_rise_in_both_fields_and_the_file_holds_them(
    operations: list[tuple[str, int, int]],
) -> None:
    with tempfile.TemporaryDirectory() as directory:
        cache = _cache(Path(directory))
        for name, first, second in operations:
            if name == "assign":
                cache.assign(first, second)
            elif name == "end":
                cache.truncate_from_end(first)
            else:
                cache.truncate_from_start(first)
            pairs = list(zip(cache.entries, cache.entries[1:], strict=False))
            assert all(a.epoch < b.epoch and a.start_offset < b.start_offset for a, b in pairs)
            assert LeaderEpochCache(cache.path).entries == cache.entries
