"""Consume-transform-produce (KIP-98/447) against real sidecars: a consumer's offsets sent
with a transactional producer's outputs move the group's committed offsets exactly when
the transaction commits, through aborts, stale group metadata and a ``kill -9`` of the
sidecar between the offsets being sent and the transaction's end."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import closing, contextmanager

import pytest

from tierlog.api.errors import (
    FencedMemberEpochError,
    IllegalGenerationError,
    UnknownMemberIdError,
)
from tierlog.api.v1 import group_service_pb2 as pb
from tierlog.client import (
    Cluster,
    Consumer,
    ConsumerGroupMetadata,
    GroupClient,
    OffsetAndMetadata,
    Producer,
    TopicPartition,
)
from tierlog.client.errors import IllegalProducerStateError

from .conftest import SidecarStarter, create_topic, poll_until
from .sidecars import LiveSidecar

INPUT = TopicPartition("input", 0)
OUTPUT = TopicPartition("output", 0)
GROUP = "etl"
CONFIGS = ("transaction.state.log.num.partitions=3", "offsets.topic.num.partitions=2")


@pytest.fixture
def sidecar(sidecars: SidecarStarter) -> LiveSidecar:
    sidecar = sidecars("data", *CONFIGS)
    create_topic(sidecar.address, INPUT.topic)
    create_topic(sidecar.address, OUTPUT.topic)
    with Producer({"bootstrap.servers": sidecar.address}) as plain:
        for index in range(6):
            plain.send(INPUT.topic, b"in-%d" % index, partition=0)
    return sidecar


@contextmanager
def transactional(sidecar: LiveSidecar) -> Iterator[Producer]:
    with Producer(
        {"bootstrap.servers": sidecar.address, "transactional.id": "etl-app", "linger.ms": 0}
    ) as producer:
        producer.init_transactions()
        yield producer


def group_consumer(sidecar: LiveSidecar, **props: object) -> Consumer:
    config: dict[str, object] = {
        "bootstrap.servers": sidecar.address,
        "group.id": GROUP,
        "enable.auto.commit": "false",
        "auto.offset.reset": "earliest",
        "fetch.max.wait.ms": 100,
    }
    config.update({key.replace("_", "."): value for key, value in props.items()})
    return Consumer(config)


def committed(sidecar: LiveSidecar) -> int | None:
    """The group's committed offset of the input, once no commit of it is pending."""
    with closing(group_consumer(sidecar)) as reader:
        found = reader.committed([INPUT])[INPUT]
    return None if found is None else found.offset


def fetch_error(sidecar: LiveSidecar) -> str | None:
    """The reason OffsetFetch with require_stable gives for the input, if any."""
    with closing(Cluster([sidecar.address])) as cluster:
        request = pb.OffsetFetchRequest(
            group_id=GROUP,
            partitions=[pb.TopicPartitionRef(topic=INPUT.topic, partition=INPUT.partition)],
            require_stable=True,
        )
        answer = GroupClient(cluster, GROUP).call(lambda stub: stub.OffsetFetch(request))
    (entry,) = answer.offsets
    return entry.error.reason if entry.HasField("error") else None


def outputs_read_committed(sidecar: LiveSidecar, expected: int) -> list[bytes]:
    """Every output a read_committed consumer gets, reading to the log end."""
    reader = Consumer(
        {
            "bootstrap.servers": sidecar.address,
            "isolation.level": "read_committed",
            "auto.offset.reset": "earliest",
            "fetch.max.wait.ms": 100,
        }
    )
    with closing(reader):
        reader.assign([OUTPUT])
        records = poll_until(reader, expected, timeout_s=5 if expected else 1)
        end = reader.end_offsets([OUTPUT])[OUTPUT]
        while reader.position(OUTPUT) < end:  # past the markers too
            records += reader.poll(200)
    return [record.value for record in records if record.value is not None]


def transform(producer: Producer, values: list[bytes]) -> None:
    for value in values:
        producer.send(OUTPUT.topic, value.upper(), partition=0)


def test_the_groups_offsets_move_only_when_the_transaction_commits(sidecar: LiveSidecar) -> None:
    with closing(group_consumer(sidecar)) as consumer, transactional(sidecar) as producer:
        consumer.subscribe([INPUT.topic])
        values = [record.value or b"" for record in poll_until(consumer, 6)]
        assert len(values) == 6
        consumer.commit({INPUT: OffsetAndMetadata(2)})  # where the group was
        rest = values[2:]
        metadata = consumer.group_metadata()
        assert metadata.member_id and metadata.generation_id > 0  # a KIP-848 member

        producer.begin_transaction()
        transform(producer, rest)
        producer.send_offsets_to_transaction({INPUT: OffsetAndMetadata(6)}, metadata)
        assert fetch_error(sidecar) == "UNSTABLE_OFFSET_COMMIT"
        producer.abort_transaction()
        assert committed(sidecar) == 2
        assert fetch_error(sidecar) is None
        assert outputs_read_committed(sidecar, 0) == []

        producer.begin_transaction()
        transform(producer, rest)
        producer.send_offsets_to_transaction({INPUT: OffsetAndMetadata(6)}, metadata)
        producer.commit_transaction()
        assert committed(sidecar) == 6
        assert outputs_read_committed(sidecar, 4) == [value.upper() for value in rest]


@pytest.mark.parametrize(
    ("member", "epoch_delta", "refusal"),
    [
        ("stranger", 0, UnknownMemberIdError),
        (None, +1, FencedMemberEpochError),
        (None, -1, IllegalGenerationError),
    ],
)
def test_stale_group_metadata_is_refused_and_the_transaction_aborts(
    sidecar: LiveSidecar,
    member: str | None,
    epoch_delta: int,
    refusal: type[Exception],
) -> None:
    with closing(group_consumer(sidecar)) as consumer, transactional(sidecar) as producer:
        consumer.subscribe([INPUT.topic])
        assert poll_until(consumer, 1)
        current = consumer.group_metadata()
        stale = ConsumerGroupMetadata(
            GROUP, member or current.member_id, current.generation_id + epoch_delta
        )
        producer.begin_transaction()
        producer.send(OUTPUT.topic, b"out", partition=0)
        with pytest.raises(refusal):
            producer.send_offsets_to_transaction({INPUT: OffsetAndMetadata(6)}, stale)
        with pytest.raises(refusal):  # the transaction cannot commit
            producer.commit_transaction()
        producer.abort_transaction()
        producer.begin_transaction()  # and the next one goes through with fresh metadata
        producer.send_offsets_to_transaction(
            {INPUT: OffsetAndMetadata(6)}, consumer.group_metadata()
        )
        producer.commit_transaction()
    assert committed(sidecar) == 6


def test_offsets_are_sent_only_inside_a_transaction(sidecar: LiveSidecar) -> None:
    offsets = {INPUT: OffsetAndMetadata(1)}
    with transactional(sidecar) as producer, pytest.raises(IllegalProducerStateError):
        producer.send_offsets_to_transaction(offsets, ConsumerGroupMetadata(GROUP))
    plain = Producer({"bootstrap.servers": sidecar.address})
    with closing(plain), pytest.raises(IllegalProducerStateError):
        plain.send_offsets_to_transaction(offsets, ConsumerGroupMetadata(GROUP))
    assert committed(sidecar) is None


@pytest.mark.parametrize("commit", [True, False])
def test_offsets_follow_the_transaction_across_kill_9_of_the_sidecar(
    sidecar: LiveSidecar, commit: bool
) -> None:
    with closing(group_consumer(sidecar)) as consumer:
        consumer.assign([INPUT])
        consumer.commit({INPUT: OffsetAndMetadata(2)})
        metadata = consumer.group_metadata()  # outside the membership: "" and -1
    with transactional(sidecar) as producer:
        producer.begin_transaction()
        transform(producer, [b"a", b"b"])
        producer.send_offsets_to_transaction({INPUT: OffsetAndMetadata(6)}, metadata)
        sidecar.kill()  # kill -9: the offsets are in the log, their transaction open
        sidecar.start()
        assert fetch_error(sidecar) == "UNSTABLE_OFFSET_COMMIT"  # reloaded as pending
        if commit:
            producer.commit_transaction()
        else:
            producer.abort_transaction()
    expected = 6 if commit else 2
    assert committed(sidecar) == expected
    sidecar.kill()  # and a reload replays the marker the same way
    sidecar.start()
    assert committed(sidecar) == expected
    assert fetch_error(sidecar) is None
    assert outputs_read_committed(sidecar, 2 if commit else 0) == ([b"A", b"B"] if commit else [])


def test_the_first_call_to_name_a_group_may_be_the_transactions(sidecar: LiveSidecar) -> None:
    """No group call came before: AddOffsetsToTxn creates __consumer_offsets itself."""
    with transactional(sidecar) as producer:
        producer.begin_transaction()
        producer.send_offsets_to_transaction(
            {INPUT: OffsetAndMetadata(3)}, ConsumerGroupMetadata(GROUP)
        )
        producer.commit_transaction()
    assert committed(sidecar) == 3


def test_a_transaction_its_producer_never_ends_is_aborted_with_its_offsets_after_kill_9(
    sidecars: SidecarStarter,
) -> None:
    """The sidecar ``kill -9``ed with offsets sent, and the producer gone for good: the
    restarted coordinator aborts the transaction at its timeout, and the group's offsets
    stay where they were."""
    sidecar = sidecars(
        "data", *CONFIGS, "transaction.abort.timed.out.transaction.cleanup.interval.ms=100"
    )
    create_topic(sidecar.address, INPUT.topic)
    with closing(group_consumer(sidecar)) as consumer:
        consumer.assign([INPUT])
        consumer.commit({INPUT: OffsetAndMetadata(2)})
    producer = Producer(
        {
            "bootstrap.servers": sidecar.address,
            "transactional.id": "abandoned",
            "transaction.timeout.ms": 1000,
        }
    )
    producer.init_transactions()
    producer.begin_transaction()
    producer.send_offsets_to_transaction(
        {INPUT: OffsetAndMetadata(6)}, ConsumerGroupMetadata(GROUP)
    )
    sidecar.kill()
    sidecar.start()
    assert committed(sidecar) == 2  # waits out UNSTABLE_OFFSET_COMMIT: the timeout's abort
    assert fetch_error(sidecar) is None
    producer.close(0)


def test_a_group_deleted_under_an_open_transaction_stays_deleted_when_it_commits(
    sidecar: LiveSidecar,
) -> None:
    """As Kafka's coordinator, deleting a group tombstones its pending transactional
    offsets too: the transaction's later COMMIT does not bring the group back."""
    with transactional(sidecar) as producer:
        producer.begin_transaction()
        producer.send_offsets_to_transaction(
            {INPUT: OffsetAndMetadata(4)}, ConsumerGroupMetadata(GROUP)
        )
        with closing(Cluster([sidecar.address])) as cluster:
            GroupClient(cluster, GROUP).delete()
        producer.commit_transaction()
    assert committed(sidecar) is None
    sidecar.kill()  # and the log says the same
    sidecar.start()
    assert committed(sidecar) is None
