"""A follower's log takes the leader's batches as they are (``Log.append_as_follower``):
the same bytes at the same offsets, the same epochs, producers and aborted transactions,
and nothing that does not continue its log."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.storage.conftest import config, make_batch, read_all_bytes
from tests.storage.transactions import TxnWriter
from tierlog.storage.errors import CorruptRecordError, UnexpectedAppendOffsetError
from tierlog.storage.log import Log
from tierlog.storage.records import SimpleRecord, build_batch

CONFIG = config(segment_bytes=2_000)


def _follow(leader: Log, follower: Log, max_bytes: int) -> int:
    """Copy the leader's batches past the follower's end in fetches of ``max_bytes``."""
    fetches = 0
    while follower.log_end_offset < leader.log_end_offset:
        fetched = leader.read(follower.log_end_offset, max_bytes)
        follower.append_as_follower(fetched.records)
        fetches += 1
    return fetches


def _idempotent(producer_id: int, sequence: int, count: int) -> bytes:
    records = [SimpleRecord(key=b"k", value=b"v%d" % i, timestamp=0) for i in range(count)]
    return build_batch(records, producer_id=producer_id, producer_epoch=3, base_sequence=sequence)


def test_a_follower_holds_the_leaders_bytes_epochs_producers_and_aborted_transactions(
    tmp_path: Path,
) -> None:
    leader = Log.open(tmp_path / "leader" / "t-0", CONFIG)
    txns = TxnWriter(leader)
    for round_ in range(6):
        leader.append(make_batch(4))
        leader.append(_idempotent(77, round_ * 2, 2))
        txns.send(500 + round_ % 2)
        txns.end(500 + round_ % 2, commit=round_ % 3 == 0)
        if round_ == 3:
            leader.become_leader(2)
    follower = Log.open(tmp_path / "follower" / "t-0", CONFIG)

    fetches = _follow(leader, follower, max_bytes=700)

    assert fetches > 3 and len(follower.segments) > 1
    assert read_all_bytes(follower) == read_all_bytes(leader)
    assert follower.leader_epoch_cache.entries == leader.leader_epoch_cache.entries
    assert follower.leader_epoch_cache.entries[-1].epoch == 2
    assert follower.producer_state.last_entry(77) is not None
    assert (
        follower.producer_state.last_entry(77).to_snapshot()  # type: ignore[union-attr]
        == leader.producer_state.last_entry(77).to_snapshot()  # type: ignore[union-attr]
    )
    end = leader.log_end_offset
    assert follower.collect_aborted_transactions(0, end) == leader.collect_aborted_transactions(
        0, end
    )
    assert len(leader.collect_aborted_transactions(0, end)) == 4  # rounds 1, 2, 4 and 5
    follower.update_high_watermark(leader.high_watermark)  # as a fetch answer tells it
    assert follower.last_stable_offset == leader.last_stable_offset == leader.log_end_offset


def test_a_batch_that_fails_its_crc_is_refused_and_the_log_is_unchanged(tmp_path: Path) -> None:
    leader = Log.open(tmp_path / "leader" / "t-0", CONFIG)
    leader.append(make_batch(3))
    leader.append(make_batch(3))
    damaged = bytearray(leader.read(0, 1 << 20).records)
    damaged[-3] ^= 0xFF  # a byte of the second batch's last record
    follower = Log.open(tmp_path / "follower" / "t-0", CONFIG)

    with pytest.raises(CorruptRecordError, match="offset 3"):
        follower.append_as_follower(bytes(damaged))
    assert follower.log_end_offset == 0 and read_all_bytes(follower) == b""


def test_batches_that_do_not_continue_the_log_are_refused(tmp_path: Path) -> None:
    leader = Log.open(tmp_path / "leader" / "t-0", CONFIG)
    for _ in range(3):
        leader.append(make_batch(2))
    follower = Log.open(tmp_path / "follower" / "t-0", CONFIG)
    follower.append_as_follower(leader.read(0, 1 << 20).records)

    with pytest.raises(UnexpectedAppendOffsetError, match="below the log end 6"):
        follower.append_as_follower(leader.read(2, 1 << 20).records)
    backwards = leader.read(2, 1 << 20).records + leader.read(0, 1 << 20).records
    with pytest.raises(UnexpectedAppendOffsetError, match="follows one ending at 5"):
        Log.open(tmp_path / "other" / "t-0", CONFIG).append_as_follower(backwards)
    assert follower.log_end_offset == 6


def test_a_compacted_leaders_gaps_are_kept(tmp_path: Path) -> None:
    """After compaction a leader's batches may skip offsets; the follower keeps the gaps."""
    leader = Log.open(tmp_path / "leader" / "t-0", CONFIG)
    for _ in range(4):
        leader.append(make_batch(2))
    batches = leader.read(0, 1 << 20).records
    second_batch = len(make_batch(2))
    kept = batches[:second_batch] + batches[3 * second_batch :]  # offsets 0-1 and 6-7
    follower = Log.open(tmp_path / "follower" / "t-0", CONFIG)

    follower.append_as_follower(kept)

    assert follower.log_end_offset == 8
    assert read_all_bytes(follower) == kept


def test_a_follower_rolls_at_the_tiers_end_only_where_its_active_segment_ends(
    tmp_path: Path,
) -> None:
    """The tier's end is where the leader rolled: a follower whose active segment began
    below it and ends there rolls; one holding records past it, or already starting
    there, does not (no empty segment)."""
    follower = Log.open(tmp_path / "t-0", CONFIG)
    follower.append(make_batch(3))
    follower.tiered_end_offset = 2  # the tier ends inside the active segment: no roll
    follower.roll_at_tier_end()
    assert [segment.base_offset for segment in follower.segments] == [0]
    follower.tiered_end_offset = 3
    follower.roll_at_tier_end()
    assert [segment.base_offset for segment in follower.segments] == [0, 3]
    follower.roll_at_tier_end()  # the active segment starts at the tier's end
    assert [segment.base_offset for segment in follower.segments] == [0, 3]
    follower.close()
