"""The Kafka listener's answers, read off the wire with kio (tests/kafka/wire.py): Kafka's
error code for each refused produce, a decompression bomb refused off the event loop,
acks=0 answered with silence, a fetch that
long-polls until a record lands and returns the stored batch byte for byte, and
Metadata's topic ids, leaders and epochs (fetch sessions: test_fetch_sessions.py)."""

from __future__ import annotations

import select
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
from kio.schema.errors import ErrorCode

from tests.kafka.conftest import KafkaSidecar, start_kafka_sidecar
from tests.kafka.wire import KafkaWire
from tests.support.bombs import MiB, bomb
from tests.support.scrape import METRICS, scrape_sidecar
from tests.support.sidecars import Sidecars
from tierlog.storage.checkpoints import base64_uuid
from tierlog.storage.records import CompressionType, SimpleRecord, build_batch

PRODUCE, FETCH, METADATA, OFFSET_FOR_LEADER_EPOCH = 0, 1, 3, 23
PRODUCE_V, FETCH_V, METADATA_V = 11, 12, 12
METADATA_NEWEST_V = 13  # adds a top-level error code
NO_ID = uuid.UUID(int=0)  # a topic asked by name
IN_FLIGHT = "tierlog_validation_decompressed_bytes_in_flight"


@pytest.fixture
def wire(kafka_sidecar: KafkaSidecar) -> Iterator[KafkaWire]:
    connection = KafkaWire(kafka_sidecar.kafka_port)
    yield connection
    connection.close()


def _batch(value: bytes) -> bytes:
    return build_batch([SimpleRecord(b"key", value, 1_700_000_000_000, (("h", b"v"),))])


def _produce(topic: str, records: bytes, acks: int = -1) -> dict[str, object]:
    return {
        "transactional_id": None,
        "acks": acks,
        "timeout": 30_000,
        "topic_data": [{"name": topic, "partition_data": [{"index": 0, "records": records}]}],
    }


def _fetch(topic: str, offset: int) -> dict[str, object]:
    return {
        "replica_id": -1,
        "max_wait": 30_000,
        "min_bytes": 1,
        "max_bytes": 1 << 20,
        "isolation_level": 0,
        "session_id": 0,
        "session_epoch": -1,
        "topics": [
            {
                "topic": topic,
                "partitions": [
                    {"partition": 0, "fetch_offset": offset, "partition_max_bytes": 1 << 20}
                ],
            }
        ],
        "forgotten_topics_data": [],
        "rack_id": "",
    }


def _metadata(topics: list[dict[str, object]] | None) -> dict[str, object]:
    return {
        "topics": topics,
        "allow_auto_topic_creation": True,
        "include_topic_authorized_operations": False,
    }


def _partition_answer(body: object) -> object:
    (topic,) = body.responses  # type: ignore[attr-defined]
    (partition,) = topic.partition_responses
    return partition


def _without_offset_and_epoch(batch: bytes) -> bytes:
    """A batch with its base offset and partition leader epoch (patched by the broker,
    outside the CRC) zeroed."""
    return bytes(8) + batch[8:12] + bytes(4) + batch[16:]


@pytest.mark.parametrize(
    ("topic", "records", "acks", "code"),
    [
        ("missing", _batch(b"x"), -1, ErrorCode.unknown_topic_or_partition),
        ("__consumer_offsets", _batch(b"x"), -1, ErrorCode.invalid_topic_exception),
        ("events", _batch(b"x")[:-1] + b"!", -1, ErrorCode.corrupt_message),
        ("events", _batch(b"x"), 2, ErrorCode.invalid_required_acks),
    ],
    ids=["unknown-topic", "internal-topic", "bad-crc", "acks-2"],
)
def test_a_refused_produce_answers_kafkas_error_code(
    kafka_sidecar: KafkaSidecar,
    wire: KafkaWire,
    topic: str,
    records: bytes,
    acks: int,
    code: ErrorCode,
) -> None:
    kafka_sidecar.create_topic("events")

    answer = _partition_answer(wire.call(PRODUCE, PRODUCE_V, _produce(topic, records, acks)))

    assert answer.error_code == code  # type: ignore[attr-defined]
    assert answer.base_offset == -1  # type: ignore[attr-defined]
    stored = wire.call(PRODUCE, PRODUCE_V, _produce("events", _batch(b"good")))
    assert _partition_answer(stored).base_offset == 0  # type: ignore[attr-defined]


def test_a_bomb_is_refused_in_a_thread_within_its_memory_while_others_are_served(
    sidecars: Sidecars, tmp_path: Path
) -> None:
    # The gRPC path's guard (broker.produce), at the Kafka door: 8 GiB of records that may
    # decode to 6.4 GB (64 x max.message.bytes) are walked a window at a time, in a thread.
    sidecar = start_kafka_sidecar(sidecars, tmp_path / "data", METRICS)
    sidecar.create_topic("huge", max_message_bytes="100000000")
    sidecar.create_topic("events")
    eight_gib = bomb(CompressionType.ZSTD, 1024, 8 * MiB)
    baseline_rss = sidecar.rss_bytes()
    bomber, other = KafkaWire(sidecar.kafka_port), KafkaWire(sidecar.kafka_port)
    try:
        bomber.send(PRODUCE, PRODUCE_V, _produce("huge", eight_gib))
        deadline = time.monotonic() + 60
        while not scrape_sidecar(sidecar).value(IN_FLIGHT):  # the walk has begun
            assert time.monotonic() < deadline, "the bomb's validation never started"

        # Another connection's produce is answered while the bomb is still walked: its
        # validation left the event loop once it decoded past a couple of MiB.
        stored = other.call(PRODUCE, PRODUCE_V, _produce("events", _batch(b"served")))
        assert _partition_answer(stored).base_offset == 0  # type: ignore[attr-defined]
        readable, _, _ = select.select([bomber.sock], [], [], 0)
        assert not readable, "the bomb was answered first: it held the event loop"

        _correlation_id, refused = bomber.receive(PRODUCE, PRODUCE_V)
    finally:
        bomber.close()
        other.close()
    answer = _partition_answer(refused)
    assert answer.error_code == ErrorCode.message_too_large  # type: ignore[attr-defined]
    # A window of an 8 MiB record (twice, as it is gathered and joined) and chunks.
    assert sidecar.peak_rss_bytes() - baseline_rss < 4 * 8 * MiB + 64 * MiB
    sidecar.assert_alive()


def test_acks_0_is_answered_with_silence_and_stored(
    kafka_sidecar: KafkaSidecar, wire: KafkaWire
) -> None:
    kafka_sidecar.create_topic("quiet")
    batch = _batch(b"unacknowledged")

    wire.send(PRODUCE, PRODUCE_V, _produce("quiet", batch, acks=0))
    sent = wire.send(METADATA, METADATA_V, _metadata(None))
    answered, _brokers = wire.receive(METADATA, METADATA_V)

    assert answered == sent  # the produce got no answer of its own
    fetched = wire.call(FETCH, FETCH_V, _fetch("quiet", 0))
    (partition,) = fetched.responses[0].partitions
    assert _without_offset_and_epoch(partition.records) == _without_offset_and_epoch(batch)


def test_a_fetch_long_polls_until_a_record_lands_and_returns_the_stored_batch(
    kafka_sidecar: KafkaSidecar, wire: KafkaWire
) -> None:
    kafka_sidecar.create_topic("polled")
    first, second = _batch(b"first"), _batch(b"second")
    wire.call(PRODUCE, PRODUCE_V, _produce("polled", first))
    waiting = wire.send(FETCH, FETCH_V, _fetch("polled", 1))  # past the end: it waits

    producer = KafkaWire(kafka_sidecar.kafka_port)
    try:
        produced = producer.call(PRODUCE, PRODUCE_V, _produce("polled", second))
    finally:
        producer.close()
    answered, fetched = wire.receive(FETCH, FETCH_V)

    assert answered == waiting
    assert fetched.error_code == ErrorCode.none
    assert fetched.session_id == 0  # epoch -1: a fetch without a session
    (partition,) = fetched.responses[0].partitions
    assert _partition_answer(produced).base_offset == 1  # type: ignore[attr-defined]
    assert (partition.high_watermark, partition.last_stable_offset) == (2, 2)
    assert partition.log_start_offset == 0
    assert partition.records[:8] == (1).to_bytes(8, "big")
    assert _without_offset_and_epoch(partition.records) == _without_offset_and_epoch(second)


def test_metadata_reports_the_address_topic_ids_leaders_and_epochs(
    kafka_sidecar: KafkaSidecar, wire: KafkaWire
) -> None:
    kafka_sidecar.create_topic("described", partitions=3)

    answer = wire.call(
        METADATA,
        METADATA_NEWEST_V,
        _metadata(
            [{"topic_id": NO_ID, "name": "described"}, {"topic_id": NO_ID, "name": "nothing"}]
        ),
    )

    assert answer.error_code == ErrorCode.none  # v13's top-level code
    assert [(b.node_id, b.host, b.port) for b in answer.brokers] == [
        (0, "127.0.0.1", kafka_sidecar.kafka_port)
    ]
    described, nothing = answer.topics
    on_disk = (kafka_sidecar.data_dir / "described-0" / "partition.metadata").read_text()
    assert f"topic_id: {base64_uuid(described.topic_id)}" in on_disk
    assert [(p.partition_index, p.leader_id, p.leader_epoch) for p in described.partitions] == [
        (0, 0, 0),
        (1, 0, 0),
        (2, 0, 0),
    ]
    assert all(p.error_code == ErrorCode.none for p in described.partitions)
    assert nothing.error_code == ErrorCode.unknown_topic_or_partition  # never auto-created


@pytest.mark.parametrize("version", [0, 1, 2, 3])
def test_metadata_before_v4_is_served_as_kafka_4_serves_it(
    kafka_sidecar: KafkaSidecar, wire: KafkaWire, version: int
) -> None:
    """Kafka 4 still serves Metadata from v0 (KIP-896 kept it): a client pinned to an
    old release (franz-go's ``MaxVersions(V0_10_2)``: Metadata v2) learns the leaders,
    then meets the Produce versions it cannot speak. v0's empty list is every topic."""
    kafka_sidecar.create_topic("old-clients", partitions=2)
    topics = [] if version == 0 else [{"name": "old-clients"}]

    answer = wire.call(METADATA, version, {"topics": topics})

    (topic,) = answer.topics
    assert (topic.error_code, topic.name) == (ErrorCode.none, "old-clients")
    assert [(p.partition_index, p.leader_id) for p in topic.partitions] == [(0, 0), (1, 0)]
    assert [(b.node_id, b.port) for b in answer.brokers] == [(0, kafka_sidecar.kafka_port)]


def test_offset_for_leader_epoch_answers_where_an_epoch_ended(
    kafka_sidecar: KafkaSidecar, wire: KafkaWire
) -> None:
    kafka_sidecar.create_topic("epochs")
    for value in (b"a", b"b", b"c"):
        wire.call(PRODUCE, PRODUCE_V, _produce("epochs", _batch(value)))

    def ask(leader_epoch: int, current_leader_epoch: int = 0) -> tuple[int, int, int]:
        answer = wire.call(
            OFFSET_FOR_LEADER_EPOCH,
            4,
            {
                "replica_id": -1,
                "topics": [
                    {
                        "topic": "epochs",
                        "partitions": [
                            {
                                "partition": 0,
                                "current_leader_epoch": current_leader_epoch,
                                "leader_epoch": leader_epoch,
                            }
                        ],
                    }
                ],
            },
        )
        (partition,) = answer.topics[0].partitions
        return partition.error_code, partition.leader_epoch, partition.end_offset

    assert ask(0) == (ErrorCode.none, 0, 3)  # the only epoch: it ends at the log end
    assert ask(5) == (ErrorCode.none, -1, -1)  # newer than any the log knows
    assert ask(0, current_leader_epoch=7)[0] == ErrorCode.unknown_leader_epoch
