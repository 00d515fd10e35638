"""The consumer's ``isolation.level`` through a real sidecar.

Transactions are written into the sidecar's data dir while it is down
(``transaction_logs``: only a coordinator writes markers), three producers interleaved
with plain records and one transaction left open. A read_committed consumer returns
exactly the committed records below the last stable offset, its position past the
markers and aborted batches, and its end offsets, lag and ``auto.offset.reset=latest``
at the last stable offset; once the open transaction is committed (the sidecar
restarted on the same port) it reads on. A read_uncommitted consumer returns every data
record, and never a marker.
"""

from __future__ import annotations

from tests.support.sidecars import SidecarProcess
from tests.support.transaction_logs import TxnWriter, interleaved, transactions_in
from tierlog.client import Consumer, TopicPartition
from tierlog.storage.records import decode_records, iter_batches

from .conftest import SidecarStarter, create_topic, poll_until

TP = TopicPartition("txns", 0)


def with_transactions(sidecar: SidecarProcess) -> tuple[TxnWriter, int, list[int]]:
    """``interleaved`` transactions in ``sidecar``'s topic; the writer, the offset of the
    open transaction and the offsets of every data record (markers left out)."""
    create_topic(sidecar.address, TP.topic)
    sidecar.stop()
    with transactions_in(sidecar.data_dir, TP.topic) as writer:
        open_from = interleaved(writer, aborted_before_open=True)
        stored = writer.log.read(0, 1 << 20).records
    sidecar.start()
    data = [
        record.offset
        for header in iter_batches(stored)
        if not header.is_control
        for record in decode_records(stored, header)
    ]
    return writer, open_from, data


def consumer(sidecar: SidecarProcess, isolation_level: str, reset: str = "earliest") -> Consumer:
    found = Consumer(
        {
            "bootstrap.servers": sidecar.address,
            "isolation.level": isolation_level,
            "auto.offset.reset": reset,
            "fetch.max.wait.ms": 100,
            "retry.backoff.ms": 50,
        }
    )
    found.assign([TP])
    return found


def test_read_committed_returns_exactly_the_committed_records_and_reads_on_after_a_commit(
    sidecars: SidecarStarter,
) -> None:
    sidecar = sidecars()
    writer, open_from, _data = with_transactions(sidecar)
    committed = sorted(offset for offset in writer.committed if offset < open_from)
    reader = consumer(sidecar, "read_committed")
    try:
        records = poll_until(reader, len(committed))
        assert [record.offset for record in records] == committed
        assert reader.poll(300) == []  # nothing past the open transaction
        assert reader.position(TP) == open_from  # past the last markers
        assert reader.end_offsets([TP]) == {TP: open_from}
        assert reader.metrics()["records-lag-max"] == 0

        sidecar.stop()  # the coordinator commits producer 1's open transaction
        with transactions_in(sidecar.data_dir, TP.topic) as more:
            more.end(1, commit=True)
            log_end = more.log.log_end_offset
        sidecar.start()
        rest = poll_until(reader, len(writer.pending[1]) + 1, timeout_s=20)
        assert [record.offset for record in rest] == [*writer.pending[1], writer.committed[-1]]
        assert reader.end_offsets([TP]) == {TP: log_end}
    finally:
        reader.close()


def test_read_uncommitted_returns_every_data_record_and_no_marker(
    sidecars: SidecarStarter,
) -> None:
    sidecar = sidecars()
    writer, _open_from, data = with_transactions(sidecar)
    assert len(data) > len(writer.committed)  # aborted and undecided records too
    reader = consumer(sidecar, "read_uncommitted")
    try:
        records = poll_until(reader, len(data))
        assert [record.offset for record in records] == data
        assert reader.end_offsets([TP]) == {TP: writer.log.log_end_offset}
    finally:
        reader.close()


def test_auto_offset_reset_latest_under_read_committed_is_the_last_stable_offset(
    sidecars: SidecarStarter,
) -> None:
    sidecar = sidecars()
    _writer, open_from, _data = with_transactions(sidecar)
    reader = consumer(sidecar, "read_committed", reset="latest")
    try:
        assert reader.position(TP) == open_from
    finally:
        reader.close()
