"""The consumer's read_committed filter over batches a log holds: of many producers'
interleaved transactions, exactly the committed records are kept, whatever slice of
the log one message carries."""

from __future__ import annotations

import random
from pathlib import Path

import pytest

from tests.storage.transactions import TxnWriter
from tierlog.client.aborted_transactions import AbortedTransactionFilter
from tierlog.storage.log import Log
from tierlog.storage.records import decode_records, iter_batches


def random_transactions(log: Log, seed: int) -> TxnWriter:
    """Three producers' transactions interleaved with plain records, every one decided."""
    rng = random.Random(seed)
    writer = TxnWriter(log)
    for _ in range(40):
        producer_id = rng.choice((11, 12, 13))
        roll = rng.random()
        if roll < 0.15:
            writer.send_plain(rng.randint(1, 3))
        elif roll < 0.4 and producer_id in writer.open_txns:
            writer.end(producer_id, commit=rng.random() < 0.4)
        else:
            writer.send(producer_id, rng.randint(1, 3))
    for producer_id in sorted(writer.open_txns):
        writer.end(producer_id, commit=False)
    return writer


def kept_offsets(log: Log, start: int, end: int) -> list[int]:
    """The records at or after ``start`` a read_committed consumer keeps from one
    message holding the batches from ``start`` up to ``end``."""
    data = log.read(start, 1 << 20, upper_bound_offset=end).records
    aborted = AbortedTransactionFilter(
        (txn.producer_id, txn.first_offset) for txn in log.collect_aborted_transactions(start, end)
    )
    kept = []
    for header in iter_batches(data):
        if aborted.drops(data, header) or header.is_control:
            continue
        kept += [record.offset for record in decode_records(data, header)]
    return [offset for offset in kept if offset >= start]


@pytest.mark.parametrize("seed", range(8))
def test_exactly_the_committed_records_are_kept_from_any_slice(tmp_path: Path, seed: int) -> None:
    log = Log.open(tmp_path / "t-0")
    writer = random_transactions(log, seed)
    end = log.log_end_offset
    assert writer.aborted, "the plan aborts some"
    assert kept_offsets(log, 0, end) == sorted(writer.committed)
    rng = random.Random(seed)
    for _ in range(20):  # a message starting anywhere, even inside an aborted transaction
        start = rng.randrange(end)
        expected = [offset for offset in sorted(writer.committed) if offset >= start]
        assert kept_offsets(log, start, end) == expected, f"from {start}"
    log.close()


def test_without_aborted_transactions_nothing_is_dropped(tmp_path: Path) -> None:
    log = Log.open(tmp_path / "t-0")
    writer = TxnWriter(log)
    writer.send(5)
    writer.end(5, commit=True)
    data = log.read(0, 1 << 20).records
    nothing = AbortedTransactionFilter(())
    assert not nothing
    assert not any(nothing.drops(data, header) for header in iter_batches(data))
    log.close()
