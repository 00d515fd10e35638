"""read_committed without a JVM: the planner finds aborted transactions in the
transaction indexes (local ``.txnindex`` files, a ``file://`` tier's parts, or both) and
decoding drops their records and every marker; a transaction still open at the end of
the data holds reading back at the last stable offset."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.pipeline.conftest import TXN_SEGMENTS, write_transactions
from tests.pipeline.read_all import read_table
from tests.pipeline.tiering import tier_closed_segments
from tests.storage.transactions import TxnWriter, txn_batch
from tierlog.pipeline.options import parse_options
from tierlog.pipeline.readers import open_segment
from tierlog.pipeline.source import discover, latest_offsets
from tierlog.pipeline.transactions import AbortedRanges, last_stable_offset
from tierlog.storage.log import Log
from tierlog.storage.records import parse_header
from tierlog.storage.tier.local_store import LocalDirectoryStore
from tierlog.storage.topic_partition import TopicPartition
from tierlog.storage.transaction_index import AbortedTxn

TP = TopicPartition("payments", 0)


def offsets(table_options: dict[str, str]) -> list[int | None]:
    return read_table(table_options).column("offset").to_pylist()


def test_aborted_records_and_markers_are_not_returned_from_a_log_dir(tmp_path: Path) -> None:
    log = Log.open(tmp_path / TP.dir_name, TXN_SEGMENTS)
    txns = write_transactions(log)
    log.close()
    assert len(txns.aborted) >= 10 and len(log.segments) >= 10
    committed = sorted(txns.committed)

    assert offsets({"path": str(tmp_path), "subscribe": TP.topic}) == committed
    for pieces in (3, 17):
        split = {"path": str(tmp_path), "subscribe": TP.topic, "minPartitions": str(pieces)}
        assert offsets(split) == committed
    start, end = committed[len(committed) // 3], committed[2 * len(committed) // 3]
    bounded = {
        "path": str(tmp_path),
        "assign": f'{{"{TP.topic}": [0]}}',
        "startingOffsets": f'{{"{TP.topic}": {{"0": {start}}}}}',
        "endingOffsets": f'{{"{TP.topic}": {{"0": {end}}}}}',
    }
    assert offsets(bounded) == [offset for offset in committed if start <= offset < end]


def test_an_undecided_transaction_holds_reading_back_at_the_last_stable_offset(
    tmp_path: Path,
) -> None:
    log = Log.open(tmp_path / TP.dir_name, TXN_SEGMENTS)
    txns = write_transactions(log, rounds=40)
    txns.send(7, 2)  # open, and stays open
    undecided_from = txns.open_txns[7]
    txns.send_plain(3)  # plain records after it wait too
    txns.send(8, 1)
    txns.end(8, commit=True)
    log.flush()
    assert log.last_stable_offset == undecided_from

    options = {"path": str(tmp_path), "subscribe": TP.topic, "endingOffsets": "latest"}
    assert offsets(options) == [
        offset for offset in sorted(txns.committed) if offset < undecided_from
    ]
    (history,) = discover([str(tmp_path)], parse_options(options).subscription)
    assert latest_offsets([history]) == {TP: undecided_from}
    assert history.end_offset == log.log_end_offset > undecided_from

    txns.end(7, commit=True)
    log.close()
    assert offsets(options) == sorted(txns.committed)


def test_the_last_stable_offset_is_the_same_with_or_without_snapshots(tmp_path: Path) -> None:
    log = Log.open(tmp_path / TP.dir_name, TXN_SEGMENTS)
    write_transactions(log, rounds=60)
    txns = TxnWriter(log)
    txns.send(9, 1)
    log.roll()
    txns.send(10, 1)
    expected = log.last_stable_offset
    log.flush()
    subscription = parse_options({"path": str(tmp_path), "subscribe": TP.topic}).subscription
    (history,) = discover([str(tmp_path)], subscription)
    assert list((tmp_path / TP.dir_name).glob("*.snapshot"))
    assert last_stable_offset(history, open_segment) == expected
    for snapshot in (tmp_path / TP.dir_name).glob("*.snapshot"):
        snapshot.unlink()
    assert last_stable_offset(history, open_segment) == expected
    log.close()


def test_a_file_tier_alone_and_with_the_local_tail(tmp_path: Path) -> None:
    log_dir = tmp_path / "logs"
    log = Log.open(log_dir / TP.dir_name, TXN_SEGMENTS)
    txns = write_transactions(log)
    store = LocalDirectoryStore(tmp_path / "tier")
    manifest = tier_closed_segments(store, TP, log)
    tier_end = manifest.end_offset
    committed = sorted(txns.committed)
    log.close()
    assert sum(txn.last_offset < tier_end for txn in txns.aborted) >= 5

    # The tier alone ends at its last segment; a transaction open there is undecided.
    open_at_tier_end = [
        txn.first_offset for txn in txns.aborted if txn.first_offset < tier_end <= txn.last_offset
    ]
    tier_stable = min(open_at_tier_end, default=tier_end)
    tiered = offsets({"path": store.url, "subscribe": TP.topic})
    assert tiered == [offset for offset in committed if offset < tier_stable]

    # Drop the first local segments, as local retention does: tier + tail is everything.
    segments = sorted((log_dir / TP.dir_name).glob("*.log"))
    for old in segments[: len(segments) // 2]:
        for suffix in (".log", ".index", ".timeindex", ".txnindex"):
            old.with_suffix(suffix).unlink(missing_ok=True)
    both = offsets({"path": f"{store.url},{log_dir}", "subscribe": TP.topic})
    assert both == committed


def test_aborted_ranges_match_a_producers_transactional_batches_only() -> None:
    ranges = AbortedRanges([AbortedTxn(1, 10, 20, 21), AbortedTxn(1, 30, 35, 36)])
    transactional = parse_header(txn_batch(1, 0, 1))

    def holds(producer_id: int, base_offset: int, *, is_transactional: bool = True) -> bool:
        return ranges.holds(
            transactional._replace(
                producer_id=producer_id,
                base_offset=base_offset,
                is_transactional=is_transactional,
            )
        )

    in_range = [holds(1, offset) for offset in (9, 10, 19, 21, 29, 30, 34, 36)]
    assert in_range == [False, True, True, False, False, True, True, False]
    assert not holds(2, 15)
    assert not holds(1, 15, is_transactional=False)
    assert not AbortedRanges([])


@pytest.mark.parametrize("seed", [1, 2, 3])
def test_every_split_of_a_random_history_reads_the_committed_records(
    tmp_path: Path, seed: int
) -> None:
    log = Log.open(tmp_path / TP.dir_name, TXN_SEGMENTS)
    txns = write_transactions(log, rounds=80, seed=seed)
    log.close()
    assert offsets({"path": str(tmp_path), "subscribe": TP.topic, "minPartitions": "7"}) == sorted(
        txns.committed
    )
