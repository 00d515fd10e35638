"""Transactions through the Log: a coordinator's ABORT marker becomes an entry of its
segment's ``.txnindex`` with Kafka's last stable offset; the index follows the segment
through truncation, recovery, retention and the cleaner; ``collect_aborted_transactions``
and ``last_stable_offset`` give a read_committed reader what it needs."""

from __future__ import annotations

import logging
import re
import shutil
import tempfile
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tests.storage.compaction import clean_fully, compacted, keyed_batch, open_compacted
from tests.storage.conftest import FakeClock, config
from tests.storage.test_log_properties import abandon
from tests.storage.transactions import TxnWriter, marker_batch, txn_batch
from tierlog.storage.errors import (
    InvalidProducerEpochError,
    InvalidRecordError,
    InvalidTxnStateError,
    TransactionCoordinatorFencedError,
)
from tierlog.storage.log import AppendOrigin, Log
from tierlog.storage.segment import LogSegment
from tierlog.storage.transaction_index import AbortedTxn

# A few batches to a segment: transactions span segments and markers land in later ones.
SMALL = config(segment_bytes=400, index_interval_bytes=0, file_delete_delay_ms=0)


def txn_index_bytes(directory: Path) -> dict[str, bytes]:
    return {path.name: path.read_bytes() for path in sorted(directory.glob("*.txnindex"))}


def segment_holding(log: Log, offset: int) -> LogSegment:
    return next(s for s in reversed(log.segments) if s.base_offset <= offset)


def all_entries(log: Log) -> list[AbortedTxn]:
    return [entry for segment in log.segments for entry in segment.txn_index.entries()]


@pytest.fixture
def log(log_dir: Path) -> Log:
    return Log.open(log_dir, SMALL, clock_ms=FakeClock())


def test_an_abort_is_indexed_in_its_markers_segment_and_a_commit_is_not(log: Log) -> None:
    txns = TxnWriter(log)
    txns.send(1, 3)  # 0-2
    txns.send(2, 2)  # 3-4: producer 2's transaction stays open over 1's abort
    txns.send(1, 3)  # 5-7
    log.roll()
    txns.end(1, commit=False)  # 8
    txns.send(3, 2)  # 9-10
    txns.end(3, commit=True)  # 11
    txns.end(2, commit=False)  # 12
    assert txns.aborted == [AbortedTxn(1, 0, 8, 3), AbortedTxn(2, 3, 12, 13)]
    assert all_entries(log) == txns.aborted
    marker_segment = segment_holding(log, 8)
    assert marker_segment.base_offset == 8, "the transactions began in the segment before"
    assert marker_segment.txn_index.entries() == txns.aborted
    assert [path.name for path in log.directory.glob("*.txnindex")] == [f"{8:020d}.txnindex"]
    assert marker_segment.txn_index.path.stat().st_size == 2 * 34  # not preallocated


def test_the_last_stable_offset_waits_for_the_earliest_open_transaction(log: Log) -> None:
    txns = TxnWriter(log)
    txns.send_plain(2)  # 0-1
    assert log.last_stable_offset == 2
    txns.send(5, 2)  # 2-3
    txns.send(6, 1)  # 4
    assert log.last_stable_offset == 2
    txns.end(5, commit=True)
    assert log.last_stable_offset == 4
    txns.end(6, commit=False)
    assert log.last_stable_offset == log.log_end_offset == txns.last_stable_offset


def test_the_last_stable_offset_never_passes_the_high_watermark(log: Log) -> None:
    """A transaction whose marker not every in-sync replica holds yet is not stable: a new
    leader may lack the marker, and decide otherwise. read_committed readers stop at the
    high watermark too (Kafka's LSO is bounded by it)."""
    log.append(txn_batch(5, 0, 2))  # 0-1, open
    log.update_high_watermark(2)
    assert log.last_stable_offset == 0
    log.append(marker_batch(5, commit=True), origin=AppendOrigin.COORDINATOR)  # 2
    log.append(txn_batch(6, 0, 1))  # 3, open
    assert (log.high_watermark, log.log_end_offset) == (2, 4)
    assert log.last_stable_offset == 2  # committed here alone: not yet stable
    log.update_high_watermark(3)  # the marker is on every in-sync replica
    assert log.last_stable_offset == 3  # producer 6's transaction holds it there
    log.append(marker_batch(6, commit=False), origin=AppendOrigin.COORDINATOR)  # 4
    assert log.last_stable_offset == 3  # decided, on this replica alone
    log.update_high_watermark(log.log_end_offset)
    assert log.last_stable_offset == log.log_end_offset == 5


def test_only_a_coordinator_writes_markers_and_a_stale_coordinator_is_fenced(log: Log) -> None:
    log.append(txn_batch(1, 0, 2))
    with pytest.raises(InvalidRecordError, match="control batches"):
        log.append(marker_batch(1, commit=False))
    log.append(marker_batch(1, commit=False, coordinator_epoch=3), origin=AppendOrigin.COORDINATOR)
    log.append(txn_batch(1, 2, 1))
    with pytest.raises(TransactionCoordinatorFencedError):
        log.append(
            marker_batch(1, commit=False, coordinator_epoch=2), origin=AppendOrigin.COORDINATOR
        )
    log.append(txn_batch(1, 0, 1, epoch=1))  # a new epoch fences the old one's markers
    with pytest.raises(InvalidProducerEpochError):
        log.append(
            marker_batch(1, commit=False, epoch=0, coordinator_epoch=3),
            origin=AppendOrigin.COORDINATOR,
        )
    assert all_entries(log) == [AbortedTxn(1, 0, 2, 3)]


def test_a_coordinators_transactional_batches_carry_no_sequence_but_are_fenced(log: Log) -> None:
    """The group coordinator's transactional offset commits (Kafka's NO_SEQUENCE): each
    one is new (never a duplicate, never out of order), a client's is still refused
    without a sequence, and an older epoch than the partition's is still fenced."""
    offsets_commit = txn_batch(1, -1, 1)
    with pytest.raises(InvalidRecordError, match="sequence"):
        log.append(offsets_commit)
    first = log.append(offsets_commit, origin=AppendOrigin.COORDINATOR)
    log.append(marker_batch(1, commit=True), origin=AppendOrigin.COORDINATOR)
    second = log.append(offsets_commit, origin=AppendOrigin.COORDINATOR)  # the next transaction
    assert second.first_offset > first.first_offset
    log.append(marker_batch(1, commit=False, epoch=1), origin=AppendOrigin.COORDINATOR)
    with pytest.raises(InvalidProducerEpochError):
        log.append(offsets_commit, origin=AppendOrigin.COORDINATOR)  # epoch 0: fenced


def test_a_marker_with_no_open_transaction_indexes_nothing(log: Log) -> None:
    log.append(marker_batch(4, commit=False), origin=AppendOrigin.COORDINATOR)
    assert all_entries(log) == [] and not list(log.directory.glob("*.txnindex"))


def test_collect_finds_transactions_whose_markers_are_in_later_segments(log: Log) -> None:
    txns = TxnWriter(log)
    for _ in range(4):
        txns.send(1, 3)
        txns.send_plain(2)
    txns.end(1, commit=False)
    first_segment = log.segments[0]
    assert first_segment.txn_index.entries() == []
    assert log.collect_aborted_transactions(0, 3) == txns.aborted
    assert log.collect_aborted_transactions(txns.aborted[0].last_offset + 1, 100) == []


def test_truncation_drops_entries_at_or_after_the_truncation_offset(log: Log) -> None:
    txns = TxnWriter(log)
    for producer in (1, 2, 3):
        txns.send(producer, 2)
        txns.end(producer, commit=False)
    assert len(all_entries(log)) == 3
    log.truncate_to(txns.aborted[2].last_offset)
    assert all_entries(log) == txns.aborted[:2]
    log.truncate_to(txns.aborted[1].last_offset + 1)
    assert all_entries(log) == txns.aborted[:2]
    log.truncate_to(txns.aborted[0].last_offset)
    assert all_entries(log) == []
    log.truncate_fully_and_start_at(100)
    assert not list(log.directory.glob("*.txnindex"))


def test_recovery_after_a_crash_rebuilds_the_index(log_dir: Path) -> None:
    log = Log.open(log_dir, SMALL, clock_ms=FakeClock())
    txns = TxnWriter(log)
    txns.send(1, 2)
    txns.send(2, 2)
    txns.end(1, commit=False)
    log.roll()
    txns.send(3, 4)
    txns.end(2, commit=False)
    txns.end(3, commit=False)
    expected = txn_index_bytes(log_dir)
    assert len(expected) == 2
    log.flush()
    abandon(log)
    for path in log_dir.glob("*.txnindex"):
        path.write_bytes(b"\x00" * 7)  # lost, or torn by the crash
    recovered = Log.open(log_dir, SMALL, recovery_point=0, clock_ms=FakeClock())
    assert txn_index_bytes(log_dir) == expected
    assert all_entries(recovered) == txns.aborted
    recovered.close()


def test_recovery_from_the_recovery_point_rewrites_only_the_entries_past_it(
    log_dir: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """The check after a crash starts at the last index entry below the recovery point:
    the transaction index keeps the (synced) entries before it and gets the later ones
    again from a replay, even when the crash lost them."""
    one_segment = config(segment_bytes=10**6, index_interval_bytes=0)
    log = Log.open(log_dir, one_segment, clock_ms=FakeClock())
    txns = TxnWriter(log)
    txns.send(1, 2)
    txns.send(2, 2)
    txns.end(1, commit=False)
    log.flush()
    recovery_point, flushed_bytes = log.log_end_offset, log.active_segment.size
    txns.send(3, 2)  # producer 2's transaction is still open across the recovery point
    txns.end(2, commit=False)
    txns.end(3, commit=False)
    assert len(txns.aborted) == 3
    expected = txn_index_bytes(log_dir)
    abandon(log)
    (holder,) = log_dir.glob("*.txnindex")
    holder.write_bytes(expected[holder.name][: len(expected[holder.name]) // 3])  # 1 of 3 synced

    caplog.set_level(logging.INFO, "tierlog.storage.recovery")
    recovered = Log.open(log_dir, one_segment, recovery_point=recovery_point, clock_ms=FakeClock())
    (start,) = [int(m) for m in re.findall(r"from byte (\d+)", caplog.text)]
    assert 0 < start < flushed_bytes
    assert txn_index_bytes(log_dir) == expected
    assert all_entries(recovered) == txns.aborted
    recovered.close()


def test_a_segment_whose_index_is_missing_gets_its_txn_index_rebuilt(log_dir: Path) -> None:
    log = Log.open(log_dir, SMALL, clock_ms=FakeClock())
    txns = TxnWriter(log)
    txns.send(1, 2)
    txns.send(2, 3)
    txns.send(2, 3)
    txns.end(1, commit=False)
    txns.end(2, commit=False)
    log.close()
    expected = txn_index_bytes(log_dir)
    holder = log_dir / next(iter(expected))
    holder.unlink()
    holder.with_suffix(".index").unlink()
    reopened = Log.open(log_dir, SMALL, clean_shutdown=True, clock_ms=FakeClock())
    assert txn_index_bytes(log_dir) == expected
    reopened.close()


def test_retention_renames_the_index_with_its_segment(log_dir: Path) -> None:
    clock = FakeClock()
    log = Log.open(log_dir, config(segment_bytes=400, retention_ms=10), clock_ms=clock)
    txns = TxnWriter(log)
    txns.send(1, 2)
    txns.end(1, commit=False)
    log.roll()
    clock.advance(3_600_000)
    log.delete_old_segments(now_ms=clock() + 10**12)
    deleted = [path.name for path in log_dir.glob("*.txnindex.deleted")]
    assert deleted == [f"{0:020d}.txnindex.deleted"]
    log.delete_retired_files(now_ms=clock() + 10**13)
    assert not list(log_dir.glob("*.txnindex*"))


def test_the_cleaner_keeps_aborted_data_and_carries_the_index(log_dir: Path) -> None:
    clock = FakeClock()
    log = open_compacted(log_dir, clock, segment_bytes=400)
    txns = TxnWriter(log)
    for round_ in range(6):
        log.append(keyed_batch([(b"k", f"{round_}".encode()), (b"j", b"x")]))
        txns.send(round_ % 2 + 1, 2)
        txns.end(round_ % 2 + 1, commit=round_ % 3 == 0)
    log.roll()
    before = all_entries(log)
    assert len(before) == 4
    results = clean_fully(log)
    assert any(result.stats.segments_written for result in results)
    assert all_entries(log) == before
    assert log.collect_aborted_transactions(0, log.log_end_offset) == before
    log.close()
    reopened = open_compacted(log_dir, clock, segment_bytes=400)
    assert all_entries(reopened) == before
    reopened.close()


OPS = st.lists(
    st.tuples(
        st.sampled_from(["send", "commit", "abort", "plain", "roll", "clean"]), st.integers(1, 3)
    ),
    max_size=40,
)
# Compacted, so the cleaner can rewrite the closed segments between appends.
SMALL_COMPACTED = compacted(segment_bytes=400, index_interval_bytes=0)


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(OPS, st.data())
def test_collect_finds_every_overlapping_abort_through_cleaning_and_recovery(
    ops: list[tuple[str, int]], data: st.DataObject
) -> None:
    directory = Path(tempfile.mkdtemp()) / "t-0"
    try:
        log = Log.open(directory, SMALL_COMPACTED, clock_ms=FakeClock())
        txns = TxnWriter(log)
        for op, producer in ops:
            if op == "send":
                txns.send(producer, 2)
            elif op == "plain":
                txns.send_plain()
            elif op == "roll":
                log.roll()
            elif op == "clean":
                log.roll()
                clean_fully(log)
            else:
                txns.end(producer, commit=op == "commit")
        assert all_entries(log) == txns.aborted
        assert log.last_stable_offset == txns.last_stable_offset
        end = log.log_end_offset
        start = data.draw(st.integers(0, end))
        upper = data.draw(st.integers(start, end + 1))
        assert set(log.collect_aborted_transactions(start, upper)) == txns.overlapping(start, upper)
        written = txn_index_bytes(directory)
        log.flush()
        abandon(log)
        reopened = Log.open(directory, SMALL_COMPACTED, recovery_point=0, clock_ms=FakeClock())
        assert txn_index_bytes(directory) == written
        reopened.close()
    finally:
        shutil.rmtree(directory.parent)


def test_a_batch_verified_before_its_transaction_ended_is_refused(log: Log) -> None:
    """KIP-890's guard: the leader takes it before asking the coordinator; the producer's
    marker landing before the verified batch voids it, and the batch would otherwise open
    a transaction nobody ends. A guard still held lets the batch open its transaction."""
    log.append(txn_batch(1, 0, 2))
    guard = log.verification_guard(1)  # the next transaction's first batch is verified...
    log.append(marker_batch(1, commit=True), origin=AppendOrigin.COORDINATOR)  # ...too late

    with pytest.raises(InvalidTxnStateError):
        log.append(txn_batch(1, 2, 2), verification_guard=guard)
    assert not log.has_open_transaction(1)

    fresh = log.verification_guard(1)
    opened = log.append(txn_batch(1, 2, 2), verification_guard=fresh)
    assert log.has_open_transaction(1)
    log.update_high_watermark(log.log_end_offset)
    assert log.last_stable_offset == opened.first_offset


def test_a_verification_made_in_an_earlier_leader_epoch_is_void(log: Log) -> None:
    guard = log.verification_guard(1)
    log.become_leader(1)
    with pytest.raises(InvalidTxnStateError):
        log.append(txn_batch(1, 0, 2), verification_guard=guard)
