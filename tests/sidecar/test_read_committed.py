"""Fetch, Subscribe and ListOffsets under read_committed through a real sidecar.

The transactions are written into the sidecar's data dir while it is down
(``transaction_logs``: markers come only from a coordinator), then the sidecar serves
them: read_committed reads end at the last stable offset and list the aborted
transactions overlapping what they return, from local segments and tiered ones;
read_uncommitted reads go to the high watermark and list none.
"""

from __future__ import annotations

import threading
from pathlib import Path
from typing import TypeAlias, cast

import grpc
import pytest

from tests.support.minio import MinioServer
from tests.support.transaction_logs import TxnWriter, interleaved, transactions_in
from tierlog.api.v1 import log_service_pb2
from tierlog.storage.config import LogConfig
from tierlog.storage.records import iter_batches

from .conftest import Sidecar, SidecarFactory, reason_of
from .test_tiered_reads import BROKER, TOPIC, local_segments, wait_until

IsolationLevel: TypeAlias = log_service_pb2.IsolationLevel.ValueType
READ_COMMITTED = log_service_pb2.ISOLATION_LEVEL_READ_COMMITTED
READ_UNCOMMITTED = log_service_pb2.ISOLATION_LEVEL_READ_UNCOMMITTED
ONE_BATCH_A_SEGMENT = LogConfig(segment_bytes=100)


def stopped_with(
    sidecar: Sidecar, topic: str, config: LogConfig | None = None
) -> tuple[TxnWriter, int]:
    """``interleaved`` transactions written into ``sidecar``'s topic while it is down."""
    sidecar.stop()
    with transactions_in(sidecar.data_dir, topic, config=config) as writer:
        open_from = interleaved(writer)
    return writer, open_from


def fetch(
    sidecar: Sidecar, topic: str, offset: int, isolation: IsolationLevel, max_bytes: int = 0
) -> log_service_pb2.FetchResponse:
    request = log_service_pb2.FetchRequest(
        topic=topic, offset=offset, max_bytes=max_bytes, isolation_level=isolation
    )
    answer: log_service_pb2.FetchResponse = sidecar.log.Fetch(request)
    return answer


def aborted(answer: log_service_pb2.FetchResponse) -> set[tuple[int, int]]:
    return {(txn.producer_id, txn.first_offset) for txn in answer.aborted_transactions}


def latest(sidecar: Sidecar, topic: str, isolation: IsolationLevel) -> int:
    request = log_service_pb2.ListOffsetsRequest(
        topic=topic, timestamp_ms=-1, isolation_level=isolation
    )
    offset: int = sidecar.log.ListOffsets(request).offset
    return offset


def next_offset(data: bytes) -> int:
    return max(header.next_offset for header in iter_batches(data))


def test_read_committed_ends_at_the_last_stable_offset_with_the_aborted_transactions(
    sidecar_factory: SidecarFactory, tmp_path: Path
) -> None:
    sidecar = sidecar_factory(tmp_path / "data")
    sidecar.create_topic("txns")
    writer, open_from = stopped_with(sidecar, "txns")
    log_end = writer.log.log_end_offset
    sidecar.start()

    committed = fetch(sidecar, "txns", 0, READ_COMMITTED)
    assert next_offset(committed.record_batches) == open_from == committed.last_stable_offset
    assert committed.high_watermark == log_end
    assert aborted(committed) == {(t.producer_id, t.first_offset) for t in writer.aborted}
    assert len(committed.aborted_transactions) == 2

    everything = fetch(sidecar, "txns", 0, READ_UNCOMMITTED)
    assert next_offset(everything.record_batches) == log_end
    assert everything.last_stable_offset == open_from  # answered, as Kafka does
    assert not everything.aborted_transactions

    # One batch at a time: each answer lists exactly the aborted transactions it overlaps.
    offset = 0
    while offset < open_from:
        one = fetch(sidecar, "txns", offset, READ_COMMITTED, max_bytes=1)
        end = next_offset(one.record_batches)
        expected = {(t.producer_id, t.first_offset) for t in writer.overlapping(offset, end)}
        assert aborted(one) == expected, f"the batch at {offset}"
        offset = end
    assert not fetch(sidecar, "txns", open_from, READ_COMMITTED).record_batches

    assert latest(sidecar, "txns", READ_COMMITTED) == open_from
    assert latest(sidecar, "txns", READ_UNCOMMITTED) == log_end


def test_a_read_committed_subscription_from_latest_starts_at_the_last_stable_offset(
    sidecar_factory: SidecarFactory, tmp_path: Path
) -> None:
    sidecar = sidecar_factory(tmp_path / "data")
    sidecar.create_topic("txns")
    _writer, open_from = stopped_with(sidecar, "txns")
    sidecar.start()
    request = log_service_pb2.SubscribeRequest(
        topic="txns", offset=-1, max_wait_ms=50, isolation_level=READ_COMMITTED
    )
    stream = sidecar.log.Subscribe(request)
    try:
        quiet = next(stream)  # nothing decided past the open transaction
    finally:
        stream.cancel()
    assert not quiet.record_batches
    assert quiet.last_stable_offset == open_from


def test_an_unknown_isolation_level_is_an_invalid_request(sidecar: Sidecar) -> None:
    sidecar.create_topic("txns")
    with pytest.raises(grpc.RpcError) as refused:
        fetch(sidecar, "txns", 0, IsolationLevel(7))
    assert reason_of(refused.value) == "INVALID_REQUEST"


def tier_configs(store: str, tmp_path: Path, request: pytest.FixtureRequest) -> tuple[str, ...]:
    """The sidecar's tier: its default local directory, or a bucket of the real MinIO."""
    if store == "local":
        return ()
    minio: MinioServer = request.getfixturevalue("minio")
    bucket: str = request.getfixturevalue("s3_bucket")
    return tuple(minio.sidecar_tier_configs(bucket, tmp_path / "s3-credentials"))


def read_committed_to_the_end(sidecar: Sidecar) -> tuple[int, set[tuple[int, int]]]:
    """Fetch under read_committed from 0 until an answer is empty; where that was and
    every aborted transaction listed on the way."""
    offset, found = 0, set()
    while (answer := fetch(sidecar, "events", offset, READ_COMMITTED)).record_batches:
        found |= aborted(answer)
        offset = next_offset(answer.record_batches)
    return offset, found


@pytest.mark.parametrize(
    "store", ["local", pytest.param("minio", marks=[pytest.mark.slow, pytest.mark.go_tools])]
)
def test_aborted_transactions_in_tiered_segments_are_listed(
    sidecar_factory: SidecarFactory, tmp_path: Path, request: pytest.FixtureRequest, store: str
) -> None:
    """The transactions' segments are uploaded and deleted locally: a read_committed fetch
    from 0 lists the aborted ones from the tier's transaction indexes."""
    sidecar = sidecar_factory(tmp_path / "data", *BROKER, *tier_configs(store, tmp_path, request))
    sidecar.create_topic("events", 1, **TOPIC)
    # One batch a segment: every marker and every aborted batch in a segment of its own.
    writer, open_from = stopped_with(sidecar, "events", ONE_BATCH_A_SEGMENT)
    sidecar.start()
    wait_until(
        lambda: local_segments(sidecar.data_dir)[0] >= writer.aborted[-1].last_offset,
        "the upload and local deletion of the aborted transactions' segments",
    )
    end, found = read_committed_to_the_end(sidecar)
    assert end == open_from
    assert found == {(t.producer_id, t.first_offset) for t in writer.aborted}
    assert latest(sidecar, "events", READ_COMMITTED) == open_from


def test_an_open_transaction_in_a_tiered_segment_ends_read_committed_reads_there(
    sidecar_factory: SidecarFactory, tmp_path: Path
) -> None:
    """Segments are uploaded below the high watermark, so past an open transaction too:
    a read_committed read from the tier still stops at its first offset."""
    sidecar = sidecar_factory(tmp_path / "data", *BROKER)
    sidecar.create_topic("events", 1, **TOPIC)
    sidecar.stop()
    with transactions_in(sidecar.data_dir, "events", config=ONE_BATCH_A_SEGMENT) as writer:
        writer.send_plain()
        writer.send(9)  # open to the end
        open_from = writer.open_txns[9]
        interleaved(writer)
    sidecar.start()
    wait_until(
        lambda: local_segments(sidecar.data_dir)[0] > open_from + 2,
        "the upload and local deletion of the open transaction's segment and the next",
    )
    assert read_committed_to_the_end(sidecar)[0] == open_from
    assert not fetch(sidecar, "events", open_from, READ_COMMITTED).record_batches
    assert fetch(sidecar, "events", open_from, READ_UNCOMMITTED).record_batches


def test_a_stream_stops_at_an_open_transaction_and_reads_on_once_it_is_committed(
    sidecar_factory: SidecarFactory, tmp_path: Path
) -> None:
    """A read_committed stream sends nothing past the open transaction; once it is
    committed (by a coordinator, while the sidecar was down) the records are read."""
    sidecar = sidecar_factory(tmp_path / "data")
    sidecar.create_topic("txns")
    _writer, open_from = stopped_with(sidecar, "txns")
    sidecar.start()
    received: list[log_service_pb2.SubscribeResponse] = []
    request = log_service_pb2.SubscribeRequest(
        topic="txns", offset=0, max_wait_ms=50, isolation_level=READ_COMMITTED
    )
    stream = sidecar.log.Subscribe(request)
    ended: list[grpc.StatusCode] = []

    def read() -> None:
        try:
            received.extend(stream)
            ended.append(grpc.StatusCode.OK)
        except grpc.RpcError as error:  # the sidecar going away may cut the call
            ended.append(cast(grpc.Call, error).code())

    reader = threading.Thread(target=read)
    reader.start()
    wait_until(lambda: any(m.last_stable_offset == open_from for m in received), "the LSO")
    sidecar.stop()  # the stream ends with the sidecar
    reader.join()
    assert ended in ([grpc.StatusCode.OK], [grpc.StatusCode.UNAVAILABLE]), ended
    assert max(next_offset(m.record_batches) for m in received if m.record_batches) == open_from
    with transactions_in(sidecar.data_dir, "txns") as more:
        more.end(1, commit=True)
        log_end = more.log.log_end_offset
    sidecar.start()
    answer = fetch(sidecar, "txns", open_from, READ_COMMITTED)
    assert next_offset(answer.record_batches) == log_end == answer.last_stable_offset
    assert not answer.aborted_transactions
