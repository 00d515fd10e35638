"""Kafka clients against a 3-broker ``tierlog cluster up`` (replication factor 3), the way
a user meets it: ``cluster status --kafka-bootstrap`` gives the bootstrap list, Metadata
from any broker names every broker and each partition's leader, so produce (acks=all)
goes to each leader and a leader's ``kill -9`` is followed to the new one.

One cluster for the module; the test that kills a leader runs last and starts it again.
"""

from __future__ import annotations

import os
import select
import signal
import time
from collections.abc import Iterator
from functools import partial
from pathlib import Path
from typing import Any

import grpc
import pytest
from kafka import KafkaConsumer, KafkaProducer
from kafka import TopicPartition as KafkaTopicPartition
from kio.schema.errors import ErrorCode

from tests.kafka.conftest import run_java
from tests.kafka.wire import KafkaWire
from tests.replication.conftest import wait_for
from tests.support.applied_states import has_applied
from tests.support.local_cluster import kafka_bootstrap, running_cluster, tierlog_cluster
from tierlog.api.v1.log_service_pb2_grpc import LogServiceStub
from tierlog.cli.local_cluster import ClusterRecord, read_cluster
from tierlog.client.admin import AdminClient
from tierlog.kafka.versions import (
    ADD_PARTITIONS_TO_TXN,
    END_TXN,
    FETCH,
    FIND_COORDINATOR,
    INIT_PRODUCER_ID,
    METADATA,
    OFFSET_FOR_LEADER_EPOCH,
    PRODUCE,
    WRITE_TXN_MARKERS,
)
from tierlog.storage.records import SimpleRecord, build_batch

BROKERS = 3
PARTITIONS = 3  # one led by each broker
# A killed leader's lease expires this long after its last renewal; the controller then
# elects another in-sync replica. Short, for a quick failover, but not so short that a
# renewal delayed on a loaded machine fences a live broker.
SESSION_TIMEOUT_MS = 4000
FAILOVER_TIMEOUT_S = 60  # the producer's delivery.timeout.ms, far above the session timeout
# The newest served: Produce v10+ has KIP-951's fields, Fetch v12 the leader and epoch.
PRODUCE_V, FETCH_V, METADATA_V = 11, 12, 12
_NO_AUTHORIZED_OPERATIONS = {
    "allow_auto_topic_creation": False,
    "include_topic_authorized_operations": False,
}


@pytest.fixture(scope="module")
def cluster_dir(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    directory = tmp_path_factory.mktemp("kafka-cluster") / "cluster"
    with running_cluster(directory, BROKERS, f"broker.session.timeout.ms={SESSION_TIMEOUT_MS}"):
        yield directory


@pytest.fixture(scope="module")
def bootstrap(cluster_dir: Path) -> str:
    return kafka_bootstrap(cluster_dir)


def create_topic(cluster: ClusterRecord, name: str) -> None:
    """Create ``name`` over gRPC and wait until every broker has applied its partitions'
    states (``has_applied``), so every broker's Metadata names their leaders too. Its
    Metadata naming them is not enough: a broker names a state as soon as it has read
    it, and until it has applied it answers LEADER_NOT_AVAILABLE to the raw requests
    these tests send, which no client retries."""
    with AdminClient(cluster.brokers[0].address, broker_only=True) as admin:
        admin.create_topic(name, PARTITIONS)
        # The creating broker answers once it has applied the states: it names them.
        (described,) = admin.describe_topics([name])
    for broker in cluster.brokers:
        with grpc.insecure_channel(broker.address) as channel:
            log = LogServiceStub(channel)
            for p in described.partitions:
                state = (name, p.partition, p.leader_id, p.leader_epoch)
                wait_for(
                    partial(has_applied, log, broker.node_id, *state),
                    f"broker {broker.node_id} to apply {name}-{p.partition}'s leader",
                )


def leaders(bootstrap: str, topic: str) -> dict[int, int]:
    """Partition -> leader id, as a Kafka client learns it from Metadata."""
    consumer = KafkaConsumer(bootstrap_servers=bootstrap)
    try:
        consumer.partitions_for_topic(topic)
        cluster = consumer._client.cluster
        return {
            p: cluster.leader_for_partition(KafkaTopicPartition(topic, p))
            for p in range(PARTITIONS)
        }
    finally:
        consumer.close()


def read_all(bootstrap: str, topic: str) -> list[tuple[int, bytes, bytes]]:
    """(partition, key, value) of every record, each partition read to its end."""
    consumer = KafkaConsumer(bootstrap_servers=bootstrap, consumer_timeout_ms=20_000)
    try:
        assigned = [KafkaTopicPartition(topic, p) for p in range(PARTITIONS)]
        consumer.assign(assigned)
        consumer.seek_to_beginning()
        ends = consumer.end_offsets(assigned)
        read = []
        for message in consumer:
            read.append((message.partition, message.key, message.value))
            if all(consumer.position(tp) >= end for tp, end in ends.items()):
                break
        return read
    finally:
        consumer.close()


def _addresses(bootstrap: str) -> list[tuple[str, int]]:
    return [(host, int(port)) for host, port in (a.rsplit(":", 1) for a in bootstrap.split(","))]


def _call(port: int, api_key: int, version: int, fields: dict[str, Any]) -> Any:
    wire = KafkaWire(port)
    try:
        return wire.call(api_key, version, fields)
    finally:
        wire.close()


def _metadata_broker_ids(port: int) -> list[int]:
    answer = _call(port, METADATA, METADATA_V, {"topics": [], **_NO_AUTHORIZED_OPERATIONS})
    return [broker.node_id for broker in answer.brokers]


def test_status_prints_the_kafka_bootstrap_list_alone(cluster_dir: Path, bootstrap: str) -> None:
    recorded = read_cluster(cluster_dir)
    assert bootstrap == ",".join(str(broker.kafka_address) for broker in recorded.brokers)
    assert len(bootstrap.split(",")) == BROKERS
    assert len({broker.kafka_address for broker in recorded.brokers}) == BROKERS


def test_metadata_from_any_broker_names_every_broker_and_the_controller(
    bootstrap: str,
) -> None:
    expected = [(n, host, int(port)) for n, (host, port) in enumerate(_addresses(bootstrap))]
    for _host, port in _addresses(bootstrap):
        answer = _call(port, METADATA, METADATA_V, {"topics": [], **_NO_AUTHORIZED_OPERATIONS})
        assert [(b.node_id, b.host, b.port) for b in answer.brokers] == expected, port
        # The deciding controller: the lowest live broker id (replication/broker.py).
        assert answer.controller_id == 0


def test_produce_to_a_follower_names_the_leader_and_its_endpoint(
    cluster_dir: Path, bootstrap: str
) -> None:
    create_topic(read_cluster(cluster_dir), "misdirected")
    leader = leaders(bootstrap, "misdirected")[0]
    follower = (leader + 1) % BROKERS
    batch = build_batch([SimpleRecord(b"k", b"v", 1_700_000_000_000, ())])
    request = {
        "transactional_id": None,
        "acks": -1,
        "timeout": 30_000,
        "topic_data": [{"name": "misdirected", "partition_data": [{"index": 0, "records": batch}]}],
    }

    answer = _call(_addresses(bootstrap)[follower][1], PRODUCE, PRODUCE_V, request)

    ((partition,),) = [topic.partition_responses for topic in answer.responses]
    assert partition.error_code == ErrorCode.not_leader_or_follower
    assert partition.current_leader.leader_id == leader
    assert partition.current_leader.leader_epoch >= 0
    leader_host, leader_port = _addresses(bootstrap)[leader]
    assert [(n.node_id, n.host, n.port) for n in answer.node_endpoints] == [
        (leader, leader_host, int(leader_port))
    ]


def test_fetch_from_a_follower_names_the_leader(cluster_dir: Path, bootstrap: str) -> None:
    """Fetch v12 has the leader and epoch; v16 (topics by id) the leader's endpoint too."""
    create_topic(read_cluster(cluster_dir), "misfetched")
    leader = leaders(bootstrap, "misfetched")[0]
    request = {
        "replica_id": -1,
        "max_wait": 0,
        "min_bytes": 0,
        "max_bytes": 1 << 20,
        "isolation_level": 0,
        "session_id": 0,
        "session_epoch": -1,
        "topics": [
            {
                "topic": "misfetched",
                "partitions": [{"partition": 0, "fetch_offset": 0, "partition_max_bytes": 1024}],
            }
        ],
        "forgotten_topics_data": [],
        "rack_id": "",
    }

    follower = _addresses(bootstrap)[(leader + 1) % BROKERS][1]
    answer = _call(follower, FETCH, FETCH_V, request)
    asked = {"topics": [{"name": "misfetched", "topic_id": None}], **_NO_AUTHORIZED_OPERATIONS}
    topic_id = _call(follower, METADATA, METADATA_V, asked).topics[0].topic_id
    request["topics"][0]["topic_id"] = topic_id  # type: ignore[index]
    by_id = _call(follower, FETCH, 16, request)

    ((partition,),) = [topic.partitions for topic in answer.responses]
    assert partition.error_code == ErrorCode.not_leader_or_follower
    assert partition.current_leader.leader_id == leader
    assert partition.current_leader.leader_epoch >= 0
    ((named,),) = [topic.partitions for topic in by_id.responses]
    assert by_id.responses[0].topic_id == topic_id
    assert named.error_code == ErrorCode.not_leader_or_follower
    assert named.current_leader.leader_id == leader
    assert [(n.node_id, n.host, n.port) for n in by_id.node_endpoints] == [
        (leader, *_addresses(bootstrap)[leader])
    ]


_RETRIED_TXN_ERRORS = {
    ErrorCode.coordinator_not_available,
    ErrorCode.coordinator_load_in_progress,
    ErrorCode.not_coordinator,
    ErrorCode.concurrent_transactions,
}


def _once_served(port: int, api_key: int, version: int, fields: dict[str, Any]) -> Any:
    """The answer once the coordinator is up: the retriable errors a client retries."""
    deadline = time.monotonic() + 60
    while True:
        answer = _call(port, api_key, version, fields)
        codes = {getattr(answer, "error_code", None)} | {
            p.partition_error_code
            for t in getattr(answer, "results_by_topic_v3_and_below", ())
            for p in t.results_by_partition
        }
        if not codes & _RETRIED_TXN_ERRORS:
            return answer
        assert time.monotonic() < deadline, f"never served: {answer}"
        time.sleep(0.1)


def _produce_transactional(
    port: int, tid: str, pid: int, topic: str, partition: int, value: bytes
) -> ErrorCode:
    batch = build_batch(
        [SimpleRecord(b"k", value, int(time.time() * 1000))],
        producer_id=pid,
        producer_epoch=0,
        base_sequence=0,
        is_transactional=True,
    )
    request = {
        "transactional_id": tid,
        "acks": -1,
        "timeout": 30_000,
        "topic_data": [{"name": topic, "partition_data": [{"index": partition, "records": batch}]}],
    }
    answer = _call(port, PRODUCE, PRODUCE_V, request)
    ((partition_answer,),) = [t.partition_responses for t in answer.responses]
    return ErrorCode(partition_answer.error_code)


def test_a_leader_verifies_a_transactional_batch_with_a_coordinator_on_another_broker(
    cluster_dir: Path, bootstrap: str
) -> None:
    """KIP-890 part 1 across brokers: the leader of a partition asks the transactional
    id's coordinator, another broker, before a batch opens a transaction there."""
    create_topic(read_cluster(cluster_dir), "verified")
    ports = [port for _host, port in _addresses(bootstrap)]
    tid = "verified-app"
    found = _once_served(ports[0], FIND_COORDINATOR, 3, {"key": tid, "key_type": 1})
    coordinator = found.node_id
    added, not_added = [
        p for p, leader in leaders(bootstrap, "verified").items() if leader != coordinator
    ]
    init = {
        "transactional_id": tid,
        "transaction_timeout": 60_000,
        "producer_id": -1,
        "producer_epoch": -1,
    }
    pid = _once_served(ports[coordinator], INIT_PRODUCER_ID, 4, init).producer_id
    add = {
        "v3_and_below_transactional_id": tid,
        "v3_and_below_producer_id": pid,
        "v3_and_below_producer_epoch": 0,
        "v3_and_below_topics": [{"name": "verified", "partitions": [added]}],
    }
    _once_served(ports[coordinator], ADD_PARTITIONS_TO_TXN, 3, add)
    leader_of = leaders(bootstrap, "verified")

    refused = _produce_transactional(
        ports[leader_of[not_added]], tid, pid, "verified", not_added, b"no"
    )
    taken = _produce_transactional(ports[leader_of[added]], tid, pid, "verified", added, b"yes")
    end = {"transactional_id": tid, "producer_id": pid, "producer_epoch": 0, "committed": True}
    ended = _once_served(ports[coordinator], END_TXN, 3, end)

    assert refused == ErrorCode.invalid_txn_state
    assert taken == ErrorCode.none
    assert ErrorCode(ended.error_code) == ErrorCode.none


def test_a_produce_is_appended_while_the_one_before_it_waits_for_its_replicas(
    cluster_dir: Path, bootstrap: str
) -> None:
    """Two acks=all produces on one connection with a follower stopped (SIGSTOP): both are
    in the leader's log before either is answered, so one replication round carries both,
    and the answers (and a Metadata asked after them) come back in the requests' order."""
    cluster = read_cluster(cluster_dir)
    create_topic(cluster, "pipelined")
    leader = leaders(bootstrap, "pipelined")[0]
    follower_pid = cluster.brokers[(leader + 1) % BROKERS].pid
    assert follower_pid is not None
    port = _addresses(bootstrap)[leader][1]
    asked = {"topics": [{"name": "pipelined", "topic_id": None}], **_NO_AUTHORIZED_OPERATIONS}
    (partition,) = [
        p
        for p in _call(port, METADATA, METADATA_V, asked).topics[0].partitions
        if p.partition_index == 0
    ]
    producer, observer = KafkaWire(port), KafkaWire(port)

    def log_end() -> int:
        where = {"partition": 0, "current_leader_epoch": -1, "leader_epoch": partition.leader_epoch}
        answer = observer.call(
            OFFSET_FOR_LEADER_EPOCH,
            4,
            {"replica_id": -1, "topics": [{"topic": "pipelined", "partitions": [where]}]},
        )
        return int(answer.topics[0].partitions[0].end_offset)

    def produce(value: bytes) -> int:
        batch = build_batch([SimpleRecord(b"k", value, 1_700_000_000_000, ())])
        data = {"name": "pipelined", "partition_data": [{"index": 0, "records": batch}]}
        request = {"transactional_id": None, "acks": -1, "timeout": 30_000, "topic_data": [data]}
        return producer.send(PRODUCE, PRODUCE_V, request)

    try:
        os.kill(follower_pid, signal.SIGSTOP)
        try:
            sent = [produce(b"first"), produce(b"second")]
            sent.append(producer.send(METADATA, METADATA_V, asked))
            deadline = time.monotonic() + 30
            while log_end() < 2:
                assert time.monotonic() < deadline, "the second produce was never appended"
            # The first can be answered only once the stopped follower has it, or once the
            # follower's session (SESSION_TIMEOUT_MS) has expired and the ISR shrunk.
            answered_early = select.select([producer.sock], [], [], 0)[0]
        finally:
            os.kill(follower_pid, signal.SIGCONT)
        assert not answered_early
        produced = [producer.receive(PRODUCE, PRODUCE_V) for _ in range(2)]
        metadata_id, _metadata = producer.receive(METADATA, METADATA_V)
    finally:
        producer.close()
        observer.close()

    assert [correlation_id for correlation_id, _body in produced] + [metadata_id] == sent
    answers = [body.responses[0].partition_responses[0] for _id, body in produced]
    assert [(a.error_code, a.base_offset) for a in answers] == [
        (ErrorCode.none, 0),
        (ErrorCode.none, 1),
    ]


def test_a_transaction_marker_is_written_by_the_leader_alone_once_replicated(
    cluster_dir: Path, bootstrap: str
) -> None:
    """WriteTxnMarkers (``kafka-transactions abort``) at a follower is NOT_LEADER_OR_FOLLOWER,
    which the admin retries at the leader; the leader answers once the in-sync replicas
    hold the marker (acks=all), so its high watermark is past the marker at once."""
    create_topic(read_cluster(cluster_dir), "marked")
    leader = leaders(bootstrap, "marked")[0]
    ports = [port for _host, port in _addresses(bootstrap)]
    topics = [{"name": "marked", "partition_indexes": [0]}]
    abort = {"producer_id": 4242, "producer_epoch": 0, "transaction_result": False}
    request = {"markers": [{**abort, "topics": topics, "coordinator_epoch": 0}]}
    fetch = {
        "replica_id": -1,
        "max_wait": 0,
        "min_bytes": 0,
        "max_bytes": 1 << 20,
        "isolation_level": 0,
        "session_id": 0,
        "session_epoch": -1,
        "topics": [
            {
                "topic": "marked",
                "partitions": [{"partition": 0, "fetch_offset": 0, "partition_max_bytes": 1024}],
            }
        ],
        "forgotten_topics_data": [],
        "rack_id": "",
    }

    misdirected = _call(ports[(leader + 1) % BROKERS], WRITE_TXN_MARKERS, 1, request)
    written = _call(ports[leader], WRITE_TXN_MARKERS, 1, request)
    ((read,),) = [t.partitions for t in _call(ports[leader], FETCH, FETCH_V, fetch).responses]

    def codes(answer: Any) -> list[ErrorCode]:
        return [p.error_code for m in answer.markers for t in m.topics for p in t.partitions]

    assert codes(misdirected) == [ErrorCode.not_leader_or_follower]
    assert codes(written) == [ErrorCode.none]
    assert read.high_watermark == 1  # the marker, at offset 0


def test_acks_all_to_every_leader_and_every_record_read_back(
    cluster_dir: Path, bootstrap: str
) -> None:
    create_topic(read_cluster(cluster_dir), "spread")
    assert set(leaders(bootstrap, "spread").values()) == set(range(BROKERS))
    producer = KafkaProducer(bootstrap_servers=bootstrap, acks="all", linger_ms=5)
    sent = [(p, b"k%d" % n, b"v%d" % n) for n in range(60) for p in [n % PARTITIONS]]
    futures = [producer.send("spread", key=k, value=v, partition=p) for p, k, v in sent]
    acked = [future.get(timeout=30) for future in futures]
    producer.close()

    assert {ack.partition for ack in acked} == set(range(PARTITIONS))
    assert sorted(read_all(bootstrap, "spread")) == sorted(sent)


def test_java_console_producer_and_consumer_from_the_status_bootstrap(
    cluster_dir: Path, bootstrap: str
) -> None:
    create_topic(read_cluster(cluster_dir), "console")
    lines = [f"key-{i}\tvalue {i}" for i in range(30)]
    run_java(
        "org.apache.kafka.tools.ConsoleProducer",
        "--bootstrap-server", bootstrap,
        "--topic", "console",
        "--property", "parse.key=true",
        "--producer-property", "acks=all",
        stdin="\n".join(lines) + "\n",
    )  # fmt: skip
    # Keys hash over the partitions, led by every broker. The console consumer reads one
    # partition without a group (groups are not served yet): each partition in turn.
    consumer = KafkaConsumer(bootstrap_servers=bootstrap)
    ends = consumer.end_offsets([KafkaTopicPartition("console", p) for p in range(PARTITIONS)])
    consumer.close()
    printed = []
    for tp, end in sorted(ends.items()):
        if end:
            printed += run_java(
                "org.apache.kafka.tools.consumer.ConsoleConsumer",
                "--bootstrap-server", bootstrap,
                "--topic", "console",
                "--partition", str(tp.partition),
                "--offset", "earliest",
                "--max-messages", str(end),
                "--property", "print.key=true",
            ).splitlines()  # fmt: skip
    assert sorted(printed) == sorted(lines)
    assert len([end for end in ends.values() if end]) > 1  # more than one leader was asked


def test_a_producer_follows_a_killed_leader_and_loses_nothing_acknowledged(
    cluster_dir: Path, bootstrap: str
) -> None:
    create_topic(read_cluster(cluster_dir), "failover")
    victim = leaders(bootstrap, "failover")[0]
    producer = KafkaProducer(
        bootstrap_servers=bootstrap,
        acks="all",
        retries=1_000_000,
        retry_backoff_ms=100,
        request_timeout_ms=5_000,
        delivery_timeout_ms=FAILOVER_TIMEOUT_S * 1000,
        linger_ms=0,
    )
    before = [producer.send("failover", value=b"before-%d" % n, partition=0) for n in range(50)]
    acked = [future.get(timeout=30) for future in before]

    killed = tierlog_cluster(
        "stop", "--dir", str(cluster_dir), "--broker", str(victim), "--signal", "KILL"
    )
    assert killed.returncode == 0, killed.stderr
    after = [producer.send("failover", value=b"after-%d" % n, partition=0) for n in range(50)]
    acked += [future.get(timeout=FAILOVER_TIMEOUT_S) for future in after]
    producer.close()

    # kafka-python's first connection gives up on a dead bootstrap server: the live ones.
    live = ",".join(a for n, a in enumerate(bootstrap.split(",")) if n != victim)
    assert leaders(live, "failover")[0] != victim
    # Metadata lists only brokers whose leases are current, as Kafka lists unfenced ones.
    survivor = _addresses(bootstrap)[(victim + 1) % BROKERS][1]
    deadline = time.monotonic() + FAILOVER_TIMEOUT_S
    while victim in _metadata_broker_ids(survivor):
        assert time.monotonic() < deadline, f"broker {victim} is still listed"
    values = {value for _p, _k, value in read_all(live, "failover")}
    assert values >= {b"before-%d" % n for n in range(50)} | {b"after-%d" % n for n in range(50)}
    started = tierlog_cluster("start", "--dir", str(cluster_dir), "--broker", str(victim))
    assert started.returncode == 0, started.stderr
