"""Bad input gets its Kafka error name, never takes the server down, never damages data."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import cast

import grpc
import pytest

from tests.support.lying_batches import LIES, framed_batch
from tierlog.api.errors import LEADER_KEY, InvalidRequiredAcksError
from tierlog.api.v1 import admin_service_pb2, log_service_pb2
from tierlog.client.rpc import error_from_rpc
from tierlog.storage.errors import RecordTooLargeError
from tierlog.storage.records import (
    CompressionType,
    SimpleRecord,
    build_batch,
    build_legacy_message_set,
    compress,
    decode_records,
    iter_batches,
)

from .conftest import Sidecar, SidecarFactory, reason_of

GOOD = build_batch([SimpleRecord(b"k", b"stored", 1_000, ())] * 3)


def _produce(topic: str, data: bytes, partition: int = 0) -> log_service_pb2.ProduceRequest:
    return log_service_pb2.ProduceRequest(topic=topic, partition=partition, record_batches=data)


def _corrupt(batch: bytes) -> bytes:
    flipped = bytearray(batch)
    flipped[-1] ^= 0xFF
    return bytes(flipped)


def _assert_fails(call: Callable[[], object], code: grpc.StatusCode, reason: str) -> None:
    with pytest.raises(grpc.RpcError) as caught:
        call()
    assert (caught.value.code(), reason_of(caught.value)) == (code, reason)


@pytest.fixture
def loaded(sidecar: Sidecar) -> Sidecar:
    sidecar.create_topic("data", partitions=2)
    sidecar.log.Produce(_produce("data", GOOD))
    return sidecar


def _assert_intact(sidecar: Sidecar) -> None:
    sidecar.assert_alive()
    fetched = sidecar.log.Fetch(log_service_pb2.FetchRequest(topic="data", offset=0))
    assert fetched.high_watermark >= 3
    (header,) = iter_batches(fetched.record_batches)
    assert [r.value for r in decode_records(fetched.record_batches, header)] == [b"stored"] * 3


INVALID = grpc.StatusCode.INVALID_ARGUMENT


def _zstd_bomb() -> bytes:
    """A few KiB of zstd that decode to 65 MiB, past 64 x the topic's max.message.bytes."""
    return framed_batch(
        compress(CompressionType.ZSTD, bytes(65 * 1024 * 1024)), codec=CompressionType.ZSTD
    )


def _undecompressable() -> bytes:
    """A zstd batch whose section is no zstd stream, under a right CRC."""
    return framed_batch(b"not a zstd frame" * 4, codec=CompressionType.ZSTD)


PRODUCE_CASES = [
    ("corrupt CRC", _produce("data", _corrupt(GOOD)), INVALID, "CORRUPT_MESSAGE"),
    ("truncated batch", _produce("data", GOOD[:-5]), INVALID, "CORRUPT_MESSAGE"),
    ("garbage", _produce("data", b"\x00\x01garbage" * 10), INVALID, "CORRUPT_MESSAGE"),
    ("good then corrupt", _produce("data", GOOD + _corrupt(GOOD)), INVALID, "CORRUPT_MESSAGE"),
    ("no records", _produce("data", b""), INVALID, "INVALID_REQUEST"),
    (
        "undefined acks",
        log_service_pb2.ProduceRequest(
            topic="data", acks=log_service_pb2.Acks.ValueType(7), record_batches=GOOD
        ),
        INVALID,
        "INVALID_REQUIRED_ACKS",
    ),
    (
        "Kafka's acks=-1 as a number",  # the enum's ACKS_ALL is 3
        log_service_pb2.ProduceRequest(
            topic="data", acks=log_service_pb2.Acks.ValueType(-1), record_batches=GOOD
        ),
        INVALID,
        "INVALID_REQUIRED_ACKS",
    ),
    ("no data", log_service_pb2.ProduceRequest(topic="data"), INVALID, "INVALID_REQUEST"),
    (
        "magic 1",
        _produce("data", build_legacy_message_set([SimpleRecord(b"k", b"v", 1, ())], magic=1)),
        INVALID,
        "UNSUPPORTED_FOR_MESSAGE_FORMAT",
    ),
    (
        "over max.message.bytes",
        _produce("data", build_batch([SimpleRecord(None, b"x" * 1_100_000, 1, ())])),
        grpc.StatusCode.RESOURCE_EXHAUSTED,
        "MESSAGE_TOO_LARGE",
    ),
    (
        "unknown topic",
        _produce("nope", GOOD),
        grpc.StatusCode.NOT_FOUND,
        "UNKNOWN_TOPIC_OR_PARTITION",
    ),
    (
        "unknown partition",
        _produce("data", GOOD, 2),
        grpc.StatusCode.NOT_FOUND,
        "UNKNOWN_TOPIC_OR_PARTITION",
    ),
    (
        "negative partition",
        _produce("data", GOOD, -1),
        grpc.StatusCode.NOT_FOUND,
        "UNKNOWN_TOPIC_OR_PARTITION",
    ),
    # Batches whose CRC is right but whose records lie (tests.support.lying_batches).
    *[
        (f"{lie}, {codec.name}", _produce("data", LIES[lie](codec)), INVALID, "INVALID_RECORD")
        for lie, codec in [
            ("count above the records", CompressionType.NONE),
            ("record length lies", CompressionType.NONE),
            ("varint truncated", CompressionType.NONE),
            ("trailing garbage", CompressionType.NONE),
            ("offset deltas out of order", CompressionType.LZ4),
            ("count below the records", CompressionType.ZSTD),
        ]
    ],
    (
        "good then lying",
        _produce("data", GOOD + LIES["record length lies"](CompressionType.NONE)),
        INVALID,
        "INVALID_RECORD",
    ),
    ("does not decompress", _produce("data", _undecompressable()), INVALID, "CORRUPT_MESSAGE"),
    (
        "decompresses past the bound",
        _produce("data", _zstd_bomb()),
        grpc.StatusCode.RESOURCE_EXHAUSTED,
        "MESSAGE_TOO_LARGE",
    ),
    ("path as topic", _produce("../data-0", GOOD), INVALID, "INVALID_TOPIC_EXCEPTION"),
    ("dot topic", _produce("..", GOOD), INVALID, "INVALID_TOPIC_EXCEPTION"),
    ("long topic", _produce("t" * 250, GOOD), INVALID, "INVALID_TOPIC_EXCEPTION"),
    ("empty topic", _produce("", GOOD), INVALID, "INVALID_TOPIC_EXCEPTION"),
]


@pytest.mark.parametrize(
    ("request_", "code", "reason"),
    [case[1:] for case in PRODUCE_CASES],
    ids=[case[0] for case in PRODUCE_CASES],
)
def test_bad_produce_requests(
    loaded: Sidecar, request_: log_service_pb2.ProduceRequest, code: grpc.StatusCode, reason: str
) -> None:
    _assert_fails(lambda: loaded.log.Produce(request_), code, reason)
    _assert_intact(loaded)
    assert loaded.log.Produce(_produce("data", GOOD)).base_offset == 3  # still appends


def test_a_refused_lying_batch_leaves_nothing_for_recovery_to_trip_on(
    tmp_path: Path, sidecar_factory: SidecarFactory
) -> None:
    broker = sidecar_factory(tmp_path / "data")
    broker.create_topic("data", partitions=2)
    broker.log.Produce(_produce("data", GOOD))
    lie = LIES["count above the records"](CompressionType.LZ4)
    _assert_fails(lambda: broker.log.Produce(_produce("data", lie)), INVALID, "INVALID_RECORD")
    broker.kill()  # no clean shutdown: the restart recovers the partition's segment
    restarted = sidecar_factory(tmp_path / "data")
    _assert_intact(restarted)
    assert restarted.log.Produce(_produce("data", GOOD)).base_offset == 3


def test_undefined_acks_reach_the_client_as_their_type(loaded: Sidecar) -> None:
    request = log_service_pb2.ProduceRequest(
        topic="data", acks=log_service_pb2.Acks.ValueType(7), record_batches=GOOD
    )
    with pytest.raises(grpc.RpcError) as caught:
        loaded.log.Produce(request)
    error = error_from_rpc(caught.value)
    assert isinstance(error, InvalidRequiredAcksError)
    assert "acks 7 is none of ACKS_UNSPECIFIED, ACKS_NONE, ACKS_LEADER, ACKS_ALL" in str(error)
    _assert_intact(loaded)


FETCH_CASES = [
    ("negative offset", {"offset": -1}, grpc.StatusCode.OUT_OF_RANGE, "OFFSET_OUT_OF_RANGE"),
    ("past the end", {"offset": 4}, grpc.StatusCode.OUT_OF_RANGE, "OFFSET_OUT_OF_RANGE"),
    ("huge offset", {"offset": 2**63 - 1}, grpc.StatusCode.OUT_OF_RANGE, "OFFSET_OUT_OF_RANGE"),
    ("smallest offset", {"offset": -(2**63)}, grpc.StatusCode.OUT_OF_RANGE, "OFFSET_OUT_OF_RANGE"),
    ("negative max bytes", {"max_bytes": -1}, INVALID, "INVALID_REQUEST"),
    ("negative max wait", {"max_wait_ms": -5}, INVALID, "INVALID_REQUEST"),
    ("negative min bytes", {"min_bytes": -5}, INVALID, "INVALID_REQUEST"),
    (
        "unknown partition",
        {"partition": 7},
        grpc.StatusCode.NOT_FOUND,
        "UNKNOWN_TOPIC_OR_PARTITION",
    ),
    ("illegal topic", {"topic": "a/b"}, INVALID, "INVALID_TOPIC_EXCEPTION"),
]


@pytest.mark.parametrize(
    ("fields", "code", "reason"),
    [case[1:] for case in FETCH_CASES],
    ids=[case[0] for case in FETCH_CASES],
)
def test_bad_fetch_requests(
    loaded: Sidecar, fields: dict[str, object], code: grpc.StatusCode, reason: str
) -> None:
    request = log_service_pb2.FetchRequest(topic="data", offset=0)
    for name, value in fields.items():
        setattr(request, name, value)
    _assert_fails(lambda: loaded.log.Fetch(request), code, reason)
    subscribe = log_service_pb2.SubscribeRequest(
        topic=request.topic, partition=request.partition, offset=request.offset
    )
    if "offset" in fields and request.offset not in (-1, -2):
        _assert_fails(lambda: next(loaded.log.Subscribe(subscribe)), code, reason)
    _assert_intact(loaded)


# -- sizes: a topic's max.message.bytes, and socket.request.max.bytes over all requests --

MIB = 1024 * 1024


def _batch_of_bytes(size: int) -> bytes:
    """One uncompressed batch of about ``size`` bytes."""
    return build_batch([SimpleRecord(None, b"x" * (size - 100), 1_000, ())])


def test_a_topic_may_take_batches_larger_than_the_broker_default(loaded: Sidecar) -> None:
    loaded.create_topic("big", max_message_bytes="2000000")  # the broker's: 1 MB
    batch = _batch_of_bytes(1_500_000)
    assert loaded.log.Produce(_produce("big", batch)).base_offset == 0
    fetched = loaded.log.Fetch(log_service_pb2.FetchRequest(topic="big", offset=0))
    (header,) = iter_batches(fetched.record_batches)  # one batch, over the fetch's 1 MB
    assert header.size == len(batch)
    with pytest.raises(grpc.RpcError) as caught:
        loaded.log.Produce(_produce("big", _batch_of_bytes(2_100_000)))
    assert caught.value.code() == grpc.StatusCode.RESOURCE_EXHAUSTED
    assert reason_of(caught.value) == "MESSAGE_TOO_LARGE"
    assert "exceed max.message.bytes=2000000" in (caught.value.details() or "")
    assert loaded.log.Produce(_produce("big", batch)).base_offset == 1
    _assert_intact(loaded)


def test_a_request_over_socket_request_max_bytes_is_refused_before_it_is_read(
    tmp_path: Path, sidecar_factory: SidecarFactory
) -> None:
    broker = sidecar_factory(tmp_path / "data", f"socket.request.max.bytes={2 * MIB}")
    broker.create_topic("data", max_message_bytes=str(8 * MIB))  # the topic would take it
    broker.log.Produce(_produce("data", GOOD))
    with pytest.raises(grpc.RpcError) as caught:
        broker.log.Produce(_produce("data", _batch_of_bytes(3 * MIB)))
    assert caught.value.code() == grpc.StatusCode.RESOURCE_EXHAUSTED
    error = error_from_rpc(caught.value)  # what the client raises
    assert isinstance(error, RecordTooLargeError) and error.reason == "MESSAGE_TOO_LARGE"
    assert "socket.request.max.bytes" in str(error)
    _assert_intact(broker)
    assert broker.log.Produce(_produce("data", _batch_of_bytes(MIB))).base_offset == 3


def test_partitions_of_another_broker_answer_with_their_owner(
    tmp_path: Path, sidecar_factory: SidecarFactory
) -> None:
    broker = sidecar_factory(
        tmp_path / "data",
        "node.id=1",
        "tierlog.cluster.brokers=0@127.0.0.1:1,1@127.0.0.1:2",
    )
    broker.create_topic("split", partitions=6)
    metadata = broker.admin.Metadata(admin_service_pb2.MetadataRequest())
    owners = {p.partition: (p.leader_id, p.leader_address) for p in metadata.topics[0].partitions}
    assert set(owners.values()) == {(0, "127.0.0.1:1"), (1, "127.0.0.1:2")}
    on_disk = sorted(int(path.name.rpartition("-")[2]) for path in broker.data_dir.glob("split-*"))
    assert on_disk == sorted(p for p, (leader, _) in owners.items() if leader == 1)
    for partition, (leader, address) in owners.items():
        if leader == 1:
            assert broker.log.Produce(_produce("split", GOOD, partition)).base_offset == 0
            continue
        with pytest.raises(grpc.RpcError) as caught:
            broker.log.Produce(_produce("split", GOOD, partition))
        assert caught.value.code() == grpc.StatusCode.FAILED_PRECONDITION
        assert reason_of(caught.value) == "NOT_LEADER_OR_FOLLOWER"
        trailing = cast(grpc.Call, caught.value).trailing_metadata() or ()
        assert (LEADER_KEY, f"{leader}@{address}") in trailing
