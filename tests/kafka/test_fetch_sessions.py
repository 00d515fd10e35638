"""Incremental fetch sessions (KIP-227) read off the wire (tests/kafka/wire.py): a session
made at epoch 0, incremental fetches that answer only what is new, partitions added and
forgotten, a wrong epoch, an id not held, a session closed at epoch -1, topics named by
id from v13, the cache's limit and its eviction, and the cache's metrics. Then real
clients that fetch in sessions, reading every record once while others are produced:
kafka-python (Fetch v12) and Kafka's Java console consumer (v17)."""

from __future__ import annotations

import subprocess
import threading
import time
import uuid
from collections import OrderedDict
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

import pytest
from kafka import KafkaConsumer, KafkaProducer
from kafka import TopicPartition as KafkaTopicPartition
from kio.schema.errors import ErrorCode

from tests.interop.kafka import kafka_tools
from tests.kafka.conftest import KafkaSidecar, start_kafka_sidecar
from tests.kafka.wire import KafkaWire
from tests.support.scrape import METRICS, scrape_sidecar
from tests.support.sidecars import Sidecars
from tierlog.client.admin import AdminClient
from tierlog.kafka.fetch_sessions import (
    CachedPartition,
    FetchSessionCache,
    FetchSessionConfig,
    SessionKey,
    next_epoch,
)
from tierlog.storage.records import SimpleRecord, build_batch

PRODUCE, FETCH = 0, 1
PRODUCE_V, NAMES_V, IDS_V = 11, 12, 17  # Fetch v12 names topics, v13+ by id
EVICTION_MS = 2_000


@pytest.fixture(scope="module")
def broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[KafkaSidecar]:
    with Sidecars() as started:
        sidecar = start_kafka_sidecar(
            started,
            tmp_path_factory.mktemp("sessions") / "data",
            METRICS,
            "offsets.topic.num.partitions=1",  # the Java consumer's group
        )
        sidecar.load_offsets_topic(1)
        yield sidecar


def _produce(wire: KafkaWire, topic: str, partition: int, value: bytes) -> None:
    batch = build_batch([SimpleRecord(b"k", value, 1_700_000_000_000, ())])
    answer = wire.call(
        PRODUCE,
        PRODUCE_V,
        {
            "transactional_id": None,
            "acks": -1,
            "timeout": 30_000,
            "topic_data": [
                {"name": topic, "partition_data": [{"index": partition, "records": batch}]}
            ],
        },
    )
    assert answer.responses[0].partition_responses[0].error_code == ErrorCode.none


def _fetch(
    session: tuple[int, int],
    partitions: Mapping[Any, dict[int, int]],  # by topic name or id
    forgotten: Mapping[Any, list[int]] | None = None,
) -> dict[str, Any]:
    """A fetch in ``session`` (id, epoch) of ``partitions`` (topic -> partition -> offset),
    answered at once (min_bytes 0)."""
    session_id, epoch = session
    return {
        "replica_id": -1,
        "max_wait": 0,
        "min_bytes": 0,
        "max_bytes": 1 << 20,
        "isolation_level": 0,
        "session_id": session_id,
        "session_epoch": epoch,
        "topics": [
            {
                "topic": topic,
                "topic_id": topic,
                "partitions": [
                    {"partition": index, "fetch_offset": offset, "partition_max_bytes": 1 << 20}
                    for index, offset in offsets.items()
                ],
            }
            for topic, offsets in partitions.items()
        ],
        "forgotten_topics_data": [
            {"topic": topic, "topic_id": topic, "partitions": indexes}
            for topic, indexes in (forgotten or {}).items()
        ],
        "rack_id": "",
    }


def _answered(body: Any) -> dict[int, tuple[int, int]]:
    """Partition -> (high watermark, record bytes) of a one-topic answer."""
    return {
        p.partition_index: (p.high_watermark, len(p.records or b""))
        for topic in body.responses
        for p in topic.partitions
    }


def test_an_incremental_fetch_answers_only_news_adds_and_forgets_partitions(
    broker: KafkaSidecar, wire: KafkaWire
) -> None:
    broker.create_topic("incremental", partitions=3)
    _produce(wire, "incremental", 0, b"first")

    full = wire.call(FETCH, NAMES_V, _fetch((0, 0), {"incremental": {0: 0, 1: 0}}))
    assert full.error_code == ErrorCode.none and full.session_id != 0
    assert _answered(full).keys() == {0, 1} and _answered(full)[0][0] == 1
    session = full.session_id

    # Partition 0 read up to its end and nothing new anywhere: nothing answered.
    quiet = wire.call(FETCH, NAMES_V, _fetch((session, 1), {"incremental": {0: 1}}))
    assert (quiet.error_code, quiet.session_id, quiet.responses) == (ErrorCode.none, session, ())

    # A record lands on 1 and partition 2 is added: both answered, 0 left out.
    _produce(wire, "incremental", 1, b"second")
    grown = wire.call(FETCH, NAMES_V, _fetch((session, 2), {"incremental": {2: 0}}))
    answered = _answered(grown)
    assert answered.keys() == {1, 2}
    assert answered[1][0] == 1 and answered[1][1] > 0  # its record
    assert answered[2] == (0, 0)  # new to the session: where its log stands

    # Partition 1 forgotten: its next record is not answered; 2's is.
    wire.call(FETCH, NAMES_V, _fetch((session, 3), {"incremental": {1: 1}}))
    forget = wire.call(FETCH, NAMES_V, _fetch((session, 4), {}, {"incremental": [1]}))
    assert forget.responses == ()
    _produce(wire, "incremental", 1, b"unseen")
    _produce(wire, "incremental", 2, b"seen")
    after = wire.call(FETCH, NAMES_V, _fetch((session, 5), {}))
    assert _answered(after).keys() == {2}

    # Epoch -1 closes the session (and fetches in full without one).
    closing = wire.call(FETCH, NAMES_V, _fetch((session, -1), {"incremental": {0: 0}}))
    assert closing.session_id == 0 and _answered(closing).keys() == {0}
    gone = wire.call(FETCH, NAMES_V, _fetch((session, 6), {}))
    assert gone.error_code == ErrorCode.fetch_session_id_not_found


def test_a_wrong_epoch_or_an_unknown_id_is_refused_and_the_session_goes_on(
    broker: KafkaSidecar, wire: KafkaWire
) -> None:
    broker.create_topic("epochs")
    session = wire.call(FETCH, NAMES_V, _fetch((0, 0), {"epochs": {0: 0}})).session_id

    stale = wire.call(FETCH, NAMES_V, _fetch((session, 3), {}))
    unknown = wire.call(FETCH, NAMES_V, _fetch((session ^ 1, 1), {}))
    going_on = wire.call(FETCH, NAMES_V, _fetch((session, 1), {}))

    assert (stale.error_code, stale.session_id, stale.responses) == (
        ErrorCode.invalid_fetch_session_epoch, 0, ()
    )  # fmt: skip
    assert (unknown.error_code, unknown.responses) == (ErrorCode.fetch_session_id_not_found, ())
    assert (going_on.error_code, going_on.session_id) == (ErrorCode.none, session)


def test_topics_named_by_id_from_v13(broker: KafkaSidecar, wire: KafkaWire) -> None:
    broker.create_topic("by-id")
    topic_id = _topic_id(wire, "by-id")
    _produce(wire, "by-id", 0, b"named by id")
    nobody = uuid.uuid4()

    full = wire.call(FETCH, IDS_V, _fetch((0, 0), {topic_id: {0: 0}, nobody: {0: 0}}))
    by_topic = {topic.topic_id: topic.partitions[0] for topic in full.responses}

    assert full.session_id != 0
    assert by_topic[topic_id].error_code == ErrorCode.none
    assert by_topic[topic_id].records  # the record produced by name
    assert by_topic[nobody].error_code == ErrorCode.unknown_topic_id
    # A session made by ids is not continued by names.
    mixed = wire.call(FETCH, NAMES_V, _fetch((full.session_id, 1), {}))
    assert mixed.error_code == ErrorCode.fetch_session_topic_id_error


def test_a_topic_made_or_deleted_between_fetches_is_found_or_not_by_its_id(
    broker: KafkaSidecar, wire: KafkaWire
) -> None:
    """The id map is cached between requests: a change of the topics must reach it."""
    broker.create_topic("ids-before")
    before = _topic_id(wire, "ids-before")
    assert wire.call(FETCH, IDS_V, _fetch((0, -1), {before: {0: 0}})).responses
    broker.create_topic("ids-after")
    after = _topic_id(wire, "ids-after")
    with AdminClient({"bootstrap.servers": broker.address}) as admin:
        admin.delete_topic("ids-before")

    fetched = wire.call(FETCH, IDS_V, _fetch((0, -1), {before: {0: 0}, after: {0: 0}}))
    codes = {topic.topic_id: topic.partitions[0].error_code for topic in fetched.responses}

    assert codes == {before: ErrorCode.unknown_topic_id, after: ErrorCode.none}


def test_a_follower_fetch_is_refused_at_v15(broker: KafkaSidecar, wire: KafkaWire) -> None:
    request = _fetch((0, -1), {})
    request["replica_state"] = {"replica_id": 1, "replica_epoch": 5}

    refused = wire.call(FETCH, IDS_V, request)

    assert refused.error_code == ErrorCode.not_leader_or_follower


def test_every_version_before_sessions_and_after_fetches_in_full(
    broker: KafkaSidecar, wire: KafkaWire
) -> None:
    broker.create_topic("versions")
    _produce(wire, "versions", 0, b"any version")
    topic_id = _topic_id(wire, "versions")

    for version in range(4, IDS_V + 1):
        topic = topic_id if version >= 13 else "versions"
        fetched = wire.call(FETCH, version, _fetch((0, -1), {topic: {0: 0}}))
        (answered,) = fetched.responses
        assert answered.partitions[0].records, f"v{version}"
        if version >= 7:  # KIP-227's fields
            assert (fetched.error_code, fetched.session_id) == (ErrorCode.none, 0)


def _topic_id(wire: KafkaWire, topic: str) -> uuid.UUID:
    metadata = wire.call(
        3,
        12,
        {
            "topics": [{"name": topic, "topic_id": None}],
            "allow_auto_topic_creation": False,
            "include_topic_authorized_operations": False,
        },
    )
    return metadata.topics[0].topic_id  # type: ignore[no-any-return]


def test_a_full_cache_keeps_young_sessions_evicts_small_old_ones_and_stale_ones_die(
    sidecars: Sidecars, tmp_path: Path
) -> None:
    broker = start_kafka_sidecar(
        sidecars,
        tmp_path / "data",
        "max.incremental.fetch.session.cache.slots=2",
        f"tierlog.kafka.fetch.session.eviction.ms={EVICTION_MS}",
        METRICS,
    )
    broker.create_topic("evict", partitions=3)
    wire = KafkaWire(broker.kafka_port)
    try:
        small = wire.call(FETCH, NAMES_V, _fetch((0, 0), {"evict": {0: 0}})).session_id
        medium = wire.call(FETCH, NAMES_V, _fetch((0, 0), {"evict": {0: 0, 1: 0}})).session_id
        made_at = time.monotonic()
        cache = scrape_sidecar(broker)
        assert cache.value("tierlog_kafka_fetch_sessions") == 2
        assert cache.value("tierlog_kafka_fetch_session_partitions") == 3
        everything = {"evict": {0: 0, 1: 0, 2: 0}}
        # Both young: a bigger client gets no session and fetches in full.
        assert wire.call(FETCH, NAMES_V, _fetch((0, 0), everything)).session_id == 0

        # Once both are older than the eviction time (kept in use, so not stale), the
        # bigger client takes the smaller one's slot.
        epochs = {small: 1, medium: 1}
        big = 0
        while big == 0:
            for session in (small, medium):
                used = wire.call(FETCH, NAMES_V, _fetch((session, epochs[session]), {}))
                assert used.error_code == ErrorCode.none
                epochs[session] += 1
            big = wire.call(FETCH, NAMES_V, _fetch((0, 0), everything)).session_id
            assert time.monotonic() - made_at < EVICTION_MS / 1000 + 30
            time.sleep(0.2)  # polling: uses of both sessions, a few per second
        evicted = wire.call(FETCH, NAMES_V, _fetch((small, epochs[small]), {}))
        assert evicted.error_code == ErrorCode.fetch_session_id_not_found
        kept = wire.call(FETCH, NAMES_V, _fetch((medium, epochs[medium]), {}))
        assert kept.error_code == ErrorCode.none
        # A smaller client does not take a bigger one's slot.
        assert wire.call(FETCH, NAMES_V, _fetch((0, 0), {"evict": {0: 0}})).session_id == 0

        # Unused past the eviction time, a session is gone.
        time.sleep(EVICTION_MS / 1000 + 0.5)
        stale = wire.call(FETCH, NAMES_V, _fetch((big, 1), {}))
        assert stale.error_code == ErrorCode.fetch_session_id_not_found
        assert scrape_sidecar(broker).value("tierlog_kafka_fetch_session_evictions_total") >= 2
    finally:
        wire.close()


def _produce_while(bootstrap: str, topic: str, partitions: int, values: range) -> threading.Thread:
    """A kafka-python producer writing ``values`` ("0", "1"...) round the partitions in
    small flushed bursts, in a thread (started)."""

    def produce() -> None:
        producer = KafkaProducer(bootstrap_servers=bootstrap, acks="all", linger_ms=5)
        try:
            for i in values:
                producer.send(topic, value=str(i).encode(), partition=i % partitions)
                if i % 50 == 49:
                    producer.flush()
        finally:
            producer.close()

    thread = threading.Thread(target=produce, daemon=True)
    thread.start()
    return thread


def _session_errors(broker: KafkaSidecar) -> float:
    errors = scrape_sidecar(broker)
    return sum(
        errors.value("tierlog_kafka_errors_total", api="Fetch", reason=reason)
        for reason in ("FETCH_SESSION_ID_NOT_FOUND", "INVALID_FETCH_SESSION_EPOCH")
    )


def test_kafka_python_reads_every_record_once_through_a_session_while_producing(
    broker: KafkaSidecar,
) -> None:
    topic, partitions, count = "kafka-python-sessions", 4, 2_000
    broker.create_topic(topic, partitions=partitions)
    errors_before = _session_errors(broker)
    consumer = KafkaConsumer(bootstrap_servers=broker.kafka_address, enable_auto_commit=False)
    try:
        consumer.assign([KafkaTopicPartition(topic, p) for p in range(partitions)])
        consumer.seek_to_beginning()
        producing = _produce_while(broker.kafka_address, topic, partitions, range(count))
        read: list[bytes] = []
        deadline = time.monotonic() + 60
        while len(read) < count and time.monotonic() < deadline:
            for records in consumer.poll(timeout_ms=500).values():
                read.extend(record.value for record in records)
        held = scrape_sidecar(broker)
        producing.join(timeout=30)
    finally:
        consumer.close()

    assert sorted(read, key=int) == [str(i).encode() for i in range(count)]
    assert held.value("tierlog_kafka_fetch_sessions") >= 1
    assert held.value("tierlog_kafka_fetch_session_partitions") >= partitions
    assert _session_errors(broker) == errors_before


def _partitions(count: int) -> OrderedDict[SessionKey, CachedPartition]:
    return OrderedDict((SessionKey("t", p), CachedPartition(0, 1024, -1)) for p in range(count))


def test_the_cache_evicts_by_kafkas_rules_on_its_own_clock() -> None:
    now = [0.0]
    cache = FetchSessionCache(FetchSessionConfig(cache_slots=2, eviction_ms=1_000), lambda: now[0])
    small = cache.create("User:a", False, _partitions(1))
    medium = cache.create("User:a", False, _partitions(2))
    assert small is not None and medium is not None
    assert cache.create("User:a", False, _partitions(3)) is None  # both too young

    for now[0] in (0.9, 1.5):  # in use, so never stale, and now past their youth
        for session in (small, medium):
            assert cache.get(session.session_id, "User:a") is session
    big = cache.create("User:b", False, _partitions(3))
    assert big is not None and cache.get(small.session_id, "User:a") is None
    assert cache.create("User:a", False, _partitions(2)) is None  # a tie keeps the old one
    assert (cache.session_count, cache.partition_count, cache.evictions) == (2, 5, 1)

    now[0] = 2.6  # medium and big unused for over a second
    assert cache.get(medium.session_id, "User:a") is None
    assert (cache.session_count, cache.evictions) == (0, 3)
    assert next_epoch(2**31 - 1) == 1  # past int32's end a session's epoch wraps to 1


def test_no_slots_no_sessions() -> None:
    cache = FetchSessionCache(FetchSessionConfig(cache_slots=0))
    assert cache.create("User:ANONYMOUS", True, _partitions(100)) is None


def test_the_java_console_consumer_reads_every_record_once_in_a_session(
    broker: KafkaSidecar,
) -> None:
    """Kafka's Java consumer 4.1.1 (Fetch v17, topic ids, sessions) in a classic group
    over three partitions while records are produced: it holds a session once it waits
    for the last record, and prints every record once."""
    topic, partitions, count = "java-sessions", 3, 600
    broker.create_topic(topic, partitions=partitions)
    held_before = scrape_sidecar(broker).value("tierlog_kafka_fetch_session_partitions")
    errors_before = _session_errors(broker)
    command = kafka_tools().command(
        "org.apache.kafka.tools.consumer.ConsoleConsumer",
        "--bootstrap-server", broker.kafka_address,
        "--topic", topic,
        "--from-beginning",
        "--max-messages", str(count),
        "--timeout-ms", "120000",
    )  # fmt: skip
    consumer = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        _produce_while(broker.kafka_address, topic, partitions, range(count - 1)).join(60)
        deadline = time.monotonic() + 120
        while scrape_sidecar(broker).value("tierlog_kafka_fetch_session_partitions") < (
            held_before + partitions
        ):
            assert consumer.poll() is None and time.monotonic() < deadline
            time.sleep(0.2)  # polling for the consumer's session
        _produce_while(broker.kafka_address, topic, partitions, range(count - 1, count)).join(60)
        printed, stderr = consumer.communicate(timeout=120)
    finally:
        consumer.kill()

    assert consumer.returncode == 0, stderr
    assert sorted(printed.splitlines(), key=int) == [str(i) for i in range(count)]
    assert _session_errors(broker) == errors_before
