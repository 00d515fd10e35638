"""A broker lost with its volume comes back from the bucket it filled (a real MinIO).

A sidecar with a tiered topic (two partitions, an override) is produced to until the
bucket holds every record (the topic's upload bound rolls the active segments), then
killed and its data dir deleted. A new sidecar on an empty data dir with
``tierlog.tier.restore=true`` and the same bucket has the topic, with its partition
count and override, serves every record at its original offset, takes the next
produce at the tier's end, and restarts with the flag still on as any broker does. The
same start on a data dir that holds anything else is refused with DATA_DIR_NOT_EMPTY,
and the bucket's copy of a topic follows its changes and goes with it.

The same with replication: a ``tierlog cluster up`` of three brokers (each partition on
two of them, not the cluster's default of three, one partition's replicas reordered) is
lost with its data dirs and partition-state store; a new cluster with the flag on every
broker puts each partition's replicas where they were (a cluster without those brokers
places the topic anew), has each replica start at the tier's end, in a leader epoch
past every epoch the tier recorded, serves every record from the tier, takes the next
produce at the tier's end with both replicas in sync, and only the leader uploads
after it: the objects the lost cluster wrote stay as they were, nothing is written twice.
Groups' committed offsets of the tiered topic come back on both (clamped to what the
tier holds).
"""

from __future__ import annotations

import dataclasses
import shutil
import subprocess
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import grpc
import pytest

from tests.replication.conftest import wait_for
from tests.support.applied_states import has_applied
from tests.support.local_cluster import running_cluster
from tests.support.minio import MinioServer
from tests.support.sidecars import console_script
from tierlog.api.v1 import (
    admin_service_pb2,
    group_service_pb2,
    group_service_pb2_grpc,
    log_service_pb2,
    log_service_pb2_grpc,
)
from tierlog.broker.topics import TopicStore
from tierlog.cli.local_cluster import read_cluster
from tierlog.client import AdminClient, Producer
from tierlog.controller.changes import write_all_decided
from tierlog.controller.reassignments import start_reassignments
from tierlog.partition_state.local_store import LocalStateStore
from tierlog.partition_state.model import PartitionState
from tierlog.sidecar.restore import (
    begin_restore,
    restore_locally,
    restore_replicated,
    restore_topics,
    restored_replication_factor,
)
from tierlog.storage.config import LogConfig
from tierlog.storage.records import SimpleRecord, build_batch, iter_batches
from tierlog.storage.tier.group_offsets import load_group_offsets
from tierlog.storage.tier.layout import parse_segment_key, segments_prefix
from tierlog.storage.tier.local_store import LocalDirectoryStore
from tierlog.storage.tier.manifest_store import load_view
from tierlog.storage.tier.s3_store import S3Options
from tierlog.storage.tier.store import ObjectStore
from tierlog.storage.tier.tier_state import tier_state_at
from tierlog.storage.tier.topic_records import TopicRecord, load_topic_records, put_topic_record
from tierlog.storage.tier.url import open_store
from tierlog.storage.topic_partition import TopicPartition

from .conftest import Sidecar, SidecarFactory, reason_of

TOPIC = "orders"
PARTITIONS = 2
BATCHES_PER_PARTITION = 6
RECORDS_PER_BATCH = 5
BOUND_MS = 1000
TIERED = {
    "remote_storage_enable": "true",
    "tierlog_remote_segment_max_upload_interval_ms": str(BOUND_MS),
    "retention_ms": "604800001",
}
BROKER = ("remote.log.manager.task.interval.ms=100",)
TIERED_CONFIGS = {key.replace("_", "."): value for key, value in TIERED.items()}
RESTORE = "tierlog.tier.restore=true"
LOST_EPOCHS = 10  # above any epoch the restored cluster's own elections reach here
GROUP = "resumer"
REPLICAS = 2  # below the 3 brokers' default.replication.factor, which a restore once gave


class Bucket:
    """The MinIO bucket's sidecar configs, and the bucket as a reader sees it."""

    def __init__(self, minio: MinioServer, bucket: str, credentials: Path) -> None:
        self.configs = tuple(minio.sidecar_tier_configs(bucket, credentials))
        options = S3Options(
            endpoint_url=minio.endpoint_url,
            region=minio.region,
            path_style=True,
            credentials_path=credentials,
        )
        self.store: ObjectStore = open_store(f"s3://{bucket}/tier", options)


@pytest.fixture
def bucket(minio: MinioServer, s3_bucket: str, tmp_path: Path) -> Iterator[Bucket]:
    found = Bucket(minio, s3_bucket, tmp_path / "s3-credentials")
    yield found
    found.store.close()


def produce(
    sidecar: Sidecar | log_service_pb2_grpc.LogServiceStub,
    partition: int,
    seq: int,
    leader_epoch: int | None = None,
) -> tuple[int, bytes]:
    """One batch of new records, acknowledged by every in-sync replica (by the leader
    in ``leader_epoch``, when given)."""
    now_ms = int(time.time() * 1000)  # within retention.ms
    records = [
        SimpleRecord(b"k%d" % i, b"p%d-%d-%d" % (partition, seq, i), now_ms)
        for i in range(RECORDS_PER_BATCH)
    ]
    batch = build_batch(records)
    stub = sidecar.log if isinstance(sidecar, Sidecar) else sidecar
    request = log_service_pb2.ProduceRequest(
        topic=TOPIC,
        partition=partition,
        record_batches=batch,
        acks=log_service_pb2.ACKS_ALL,
        current_leader_epoch=leader_epoch,
    )
    return stub.Produce(request, timeout=30).base_offset, batch


def fetch_all(
    sidecar: Sidecar | log_service_pb2_grpc.LogServiceStub, partition: int
) -> dict[int, bytes]:
    """Every batch of the partition from offset 0, by base offset."""
    stub = sidecar.log if isinstance(sidecar, Sidecar) else sidecar
    batches: dict[int, bytes] = {}
    offset = 0
    while True:
        answer = stub.Fetch(
            log_service_pb2.FetchRequest(topic=TOPIC, partition=partition, offset=offset)
        )
        if offset >= answer.high_watermark:
            return batches
        fetched = answer.record_batches
        for header in iter_batches(fetched):
            batches[header.base_offset] = fetched[header.position : header.end_position]
            offset = header.next_offset


def describe(sidecar: Sidecar) -> admin_service_pb2.DescribeTopicsResponse:
    return sidecar.admin.DescribeTopics(admin_service_pb2.DescribeTopicsRequest(names=[TOPIC]))


def wait_tiered(store: ObjectStore, ends: dict[int, int]) -> None:
    deadline = time.monotonic() + 30 * BOUND_MS / 1000
    for partition, end in ends.items():
        while load_view(store, TopicPartition(TOPIC, partition)).end_offset < end:
            assert time.monotonic() < deadline, f"partition {partition} not in the bucket"
            time.sleep(0.1)


def same_batch(fetched: bytes, produced: bytes) -> bool:
    """The bytes the client chose (outside offset and leader epoch) are the same."""
    return fetched[8:12] == produced[8:12] and fetched[16:] == produced[16:]


def test_a_new_broker_on_an_empty_dir_restores_the_topics_the_bucket_holds(
    sidecar_factory: SidecarFactory, tmp_path: Path, bucket: Bucket
) -> None:
    lost = sidecar_factory(tmp_path / "lost", *BROKER, *bucket.configs)
    lost.create_topic(TOPIC, PARTITIONS, **TIERED)
    topic_id = describe(lost).topics[0].topic_id
    produced: dict[int, dict[int, bytes]] = {p: {} for p in range(PARTITIONS)}
    for seq in range(BATCHES_PER_PARTITION):
        for partition in range(PARTITIONS):
            base, batch = produce(lost, partition, seq)
            produced[partition][base] = batch
    ends = dict.fromkeys(range(PARTITIONS), BATCHES_PER_PARTITION * RECORDS_PER_BATCH)
    wait_tiered(bucket.store, ends)
    lost.kill()
    shutil.rmtree(lost.data_dir)

    restored = sidecar_factory(tmp_path / "restored", *BROKER, *bucket.configs, RESTORE)
    described = restored.admin.DescribeConfigs(
        admin_service_pb2.DescribeConfigsRequest(topic=TOPIC)
    )
    overrides = {
        entry.name: entry.value
        for entry in described.entries
        if entry.source == admin_service_pb2.CONFIG_SOURCE_TOPIC
    }
    assert overrides == {key.replace("_", "."): value for key, value in TIERED.items()}
    for partition in range(PARTITIONS):
        fetched = fetch_all(restored, partition)
        assert sorted(fetched) == sorted(produced[partition])
        for base, batch in produced[partition].items():
            assert same_batch(fetched[base], batch)
        base, _batch = produce(restored, partition, BATCHES_PER_PARTITION)
        assert base == ends[partition]
    [after] = describe(restored).topics
    assert len(after.partitions) == PARTITIONS
    assert after.topic_id == topic_id  # derived from cluster.id and the name, as before

    restored.stop()  # a restart with the flag still on: the restore was done
    restored.start()
    assert "restored from the tier before" in restored.output
    for partition in range(PARTITIONS):
        assert sorted(fetch_all(restored, partition))[-1] == ends[partition]


def test_a_restored_broker_gives_new_producers_ids_the_tier_does_not_hold(
    sidecar_factory: SidecarFactory, tmp_path: Path, bucket: Bucket
) -> None:
    """The lost broker's idempotent producer is in the tier's producer snapshot, so in
    the restored partition's producer state; the restored broker's producer-id file went
    with its volume, and the same id given to a new producer had its first batch
    (sequence 0, after the old one's 4) refused as OUT_OF_ORDER_SEQUENCE_NUMBER until
    its delivery timeout (seen on the node)."""
    lost = sidecar_factory(tmp_path / "lost", *BROKER, *bucket.configs)
    lost.create_topic(TOPIC, 1, **TIERED)
    assert send_idempotently(lost, [b"before-%d" % n for n in range(5)]) == list(range(5))
    wait_tiered(bucket.store, {0: 5})
    lost.kill()
    shutil.rmtree(lost.data_dir)

    restored = sidecar_factory(tmp_path / "restored", *BROKER, *bucket.configs, RESTORE)
    after = send_idempotently(restored, [b"after-%d" % n for n in range(5)])

    assert after == list(range(5, 10))


def send_idempotently(sidecar: Sidecar, values: list[bytes]) -> list[int]:
    """Each value to partition 0 by one idempotent producer; the offsets acknowledged."""
    config = {
        "bootstrap.servers": sidecar.address,
        "linger.ms": 0,
        "request.timeout.ms": 10_000,
        "delivery.timeout.ms": 20_000,
    }
    producer = Producer(config)
    try:
        sent = [producer.send(TOPIC, value, partition=0) for value in values]
        producer.flush(30)
    finally:
        producer.close()
    return [future.result(0).offset for future in sent]


def test_a_restored_broker_gives_groups_their_committed_offsets_back(
    sidecar_factory: SidecarFactory, tmp_path: Path, bucket: Bucket
) -> None:
    """A group's committed offset comes back with the topic; one past what the tier held
    (records lost with the volume) comes back at the tier's end, where the next record
    goes; before, every group started over (``auto.offset.reset``)."""
    lost = sidecar_factory(tmp_path / "lost", *BROKER, *bucket.configs)
    lost.create_topic(TOPIC, 1, **TIERED)
    for seq in range(BATCHES_PER_PARTITION):
        produce(lost, 0, seq)
    end = BATCHES_PER_PARTITION * RECORDS_PER_BATCH
    committed = {"resumer": 12, "ahead": end + 1000}
    for group, offset in committed.items():
        commit_offset(lost.address, group, 0, offset)
    wait_tiered(bucket.store, {0: end})
    wait_for(
        lambda: {g.group_id for g in load_group_offsets(bucket.store)} == set(committed),
        "the groups' offsets in the bucket",
        poll_s=0.1,
    )
    lost.kill()
    shutil.rmtree(lost.data_dir)

    restored = sidecar_factory(tmp_path / "restored", *BROKER, *bucket.configs, RESTORE)
    assert fetch_offsets(restored.address, "resumer") == {0: 12}
    assert fetch_offsets(restored.address, "ahead") == {0: end}  # clamped to the tier's end
    assert fetch_offsets(restored.address, "never-committed") == {}
    restored.stop()  # the kept offsets were committed: a restart serves them from the log
    restored.start()
    assert fetch_offsets(restored.address, "resumer") == {0: 12}


_COORDINATOR_NOT_YET = (
    "COORDINATOR_LOAD_IN_PROGRESS",
    "COORDINATOR_NOT_AVAILABLE",
    "NOT_COORDINATOR",
    "LEADER_NOT_AVAILABLE",
    "UNKNOWN_TOPIC_OR_PARTITION",
)


def _group_call(address: str, group: str, call: Callable[[Any], Any], request: object) -> Any:
    """``call`` at the group's coordinator, found through the broker at ``address``;
    again while the coordinator is still to be made, elected or loaded."""
    answers: list[Any] = []

    def answered() -> bool:
        try:
            with grpc.insecure_channel(address) as channel:
                found = group_service_pb2_grpc.GroupServiceStub(channel).FindCoordinator(
                    group_service_pb2.FindCoordinatorRequest(key=group), timeout=30
                )
            with grpc.insecure_channel(found.address) as channel:
                stub = group_service_pb2_grpc.GroupServiceStub(channel)
                answers.append(call(stub)(request, timeout=30))
        except grpc.RpcError as error:
            if reason_of(error) not in _COORDINATOR_NOT_YET:
                raise
            return False
        return True

    wait_for(answered, f"the coordinator of group {group}", poll_s=0.05)
    return answers[0]


def commit_offset(address: str, group: str, partition: int, offset: int) -> None:
    committed = group_service_pb2.OffsetCommitPartition(
        topic=TOPIC, partition=partition, offset=offset
    )
    request = group_service_pb2.OffsetCommitRequest(
        group_id=group, generation_id=-1, partitions=[committed]
    )
    _group_call(address, group, lambda stub: stub.OffsetCommit, request)


def fetch_offsets(address: str, group: str) -> dict[int, int]:
    """The group's committed offsets of ``TOPIC``, by partition."""
    request = group_service_pb2.OffsetFetchRequest(group_id=group)
    answer = _group_call(address, group, lambda stub: stub.OffsetFetch, request)
    return {o.partition: o.offset for o in answer.offsets if o.topic == TOPIC}


def test_a_restore_on_a_data_dir_holding_anything_is_refused(
    sidecar_factory: SidecarFactory, tmp_path: Path, bucket: Bucket
) -> None:
    first = sidecar_factory(tmp_path / "data", *BROKER, *bucket.configs)
    first.create_topic(TOPIC, 1, **TIERED)
    first.stop()
    before = sorted(p.name for p in first.data_dir.rglob("*"))
    command = [console_script("tierlog-sidecar"), "--data-dir", str(first.data_dir)]
    command += ["--listen", "127.0.0.1:0", "--restore-from-tier"]
    for config in (*BROKER, *bucket.configs):
        command += ["--config", config]
    refused = subprocess.run(command, capture_output=True, text=True, timeout=60)
    assert refused.returncode == 2, refused.stderr
    assert "DATA_DIR_NOT_EMPTY" in refused.stderr
    assert str(first.data_dir) in refused.stderr
    assert "Traceback" not in refused.stderr
    assert sorted(p.name for p in first.data_dir.rglob("*")) == before  # nothing touched


def test_the_bucket_keeps_a_tiered_topic_through_its_changes_and_drops_it_with_the_topic(
    sidecar_factory: SidecarFactory, tmp_path: Path, bucket: Bucket
) -> None:
    sidecar = sidecar_factory(tmp_path / "data", *BROKER, *bucket.configs)
    sidecar.create_topic("local-only", 1)
    sidecar.create_topic(TOPIC, 1, **TIERED)
    [record] = load_topic_records(bucket.store)
    assert (record.name, record.partition_count) == (TOPIC, 1)
    assert record.configs == {key.replace("_", "."): v for key, v in TIERED.items()}
    assert record.topic_id  # as the broker derives it

    sidecar.admin.CreatePartitions(
        admin_service_pb2.CreatePartitionsRequest(topic=TOPIC, total_count=3)
    )
    sidecar.admin.AlterConfigs(
        admin_service_pb2.AlterConfigsRequest(topic=TOPIC, set_configs={"retention.ms": "5"})
    )
    [record] = load_topic_records(bucket.store)
    assert (record.partition_count, record.configs["retention.ms"]) == (3, "5")

    sidecar.admin.DeleteTopics(admin_service_pb2.DeleteTopicsRequest(names=[TOPIC]))
    assert load_topic_records(bucket.store) == []


def test_a_record_without_a_replication_factor_is_restored_with_the_default(
    caplog: pytest.LogCaptureFixture,
) -> None:
    older = TopicRecord(TOPIC, PARTITIONS, TIERED_CONFIGS)  # as an older version wrote it
    assert restored_replication_factor(older, 3) == 3
    assert "keeps no replication factor" in caplog.text
    assert "default.replication.factor=3" in caplog.text
    recorded = dataclasses.replace(older, replication_factor=2)
    assert restored_replication_factor(recorded, 3) == 2


def test_a_record_of_a_topic_whose_tiering_was_turned_off_is_not_restored(
    tmp_path: Path,
) -> None:
    """An older version kept the record of a topic turned off (KIP-950), whose tier was
    deleted: a restore makes only the topics the tier has data for."""
    store = LocalDirectoryStore(tmp_path / "bucket")
    turned_off = {"remote.storage.enable": "false", "remote.log.delete.on.disable": "true"}
    put_topic_record(store, TopicRecord("turned-off", 1, turned_off))
    put_topic_record(store, TopicRecord(TOPIC, PARTITIONS, TIERED_CONFIGS))
    log_dirs = [tmp_path / "data"]
    topics = TopicStore(log_dirs, LogConfig())
    assert begin_restore(log_dirs)
    assert restore_topics(log_dirs, store, restore_locally(topics)) == [TOPIC]
    assert [topic.name for topic in topics.topics()] == [TOPIC]


def restore_into_brokers(
    tmp_path: Path, store: ObjectStore, brokers: range
) -> dict[int, tuple[int, ...]]:
    """Each partition's replicas once a replicated broker of a cluster of ``brokers``
    restored the bucket's topics (its state store and data dir empty before)."""
    state = LocalStateStore(tmp_path / "state")
    log_dirs = [tmp_path / "data"]
    topics = TopicStore(log_dirs, LogConfig())
    racks = dict.fromkeys(brokers)
    assert begin_restore(log_dirs)
    restore_topics(log_dirs, store, restore_replicated(state, racks, topics, store, 3))
    return {partition: s.replicas for partition, s in state.read_topic(TOPIC).items()}


def test_a_restore_puts_each_partitions_replicas_where_the_lost_cluster_had_them(
    tmp_path: Path,
) -> None:
    """As reassigned there, not as a new topic's striped placement would put them."""
    store = LocalDirectoryStore(tmp_path / "bucket")
    placed = ((1, 2), (2, 0))  # no start of the striped placement gives this one
    put_topic_record(store, TopicRecord(TOPIC, PARTITIONS, TIERED_CONFIGS, "", 2, placed))
    assert restore_into_brokers(tmp_path, store, range(3)) == {0: (1, 2), 1: (2, 0)}


def test_a_restore_into_a_cluster_without_the_lost_brokers_places_the_topic_anew(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    store = LocalDirectoryStore(tmp_path / "bucket")
    placed = ((2, 3), (3, 4))  # brokers 3 and 4 are gone
    put_topic_record(store, TopicRecord(TOPIC, PARTITIONS, TIERED_CONFIGS, "", 2, placed))
    restored = restore_into_brokers(tmp_path, store, range(3))
    assert sorted(restored) == [0, 1]
    assert all(len(replicas) == 2 and set(replicas) <= {0, 1, 2} for replicas in restored.values())
    assert "does not fit this one's brokers [0, 1, 2]" in caplog.text
    assert "placing its replicas as for a new topic" in caplog.text


def last_epoch(store: ObjectStore, tp: TopicPartition) -> int:
    """The latest leader epoch the tier recorded for ``tp``."""
    view = load_view(store, tp)
    return max(epoch for epoch, _start in tier_state_at(store, view, view.end_offset).leader_epochs)


def stored_keys(store: ObjectStore, tp: TopicPartition) -> list[str]:
    """The segment objects the bucket holds for ``tp``."""
    return sorted(info.key for info in store.list(segments_prefix(tp)))


# What a produce meets when the leadership moved after ``LocalCluster.leader`` found the
# leader (a lease lapsed on a loaded machine): a client refreshes its metadata and retries.
_MOVED = (
    "LEADER_NOT_AVAILABLE",
    "NOT_LEADER_OR_FOLLOWER",
    "UNKNOWN_LEADER_EPOCH",
    "FENCED_LEADER_EPOCH",
)


class LocalCluster:
    """A ``tierlog cluster up`` directory: its state store, and gRPC stubs to whoever leads."""

    def __init__(self, directory: Path) -> None:
        self.directory = directory
        self.servers = read_cluster(directory).servers.split(",")
        self.store = LocalStateStore(directory / "state")
        self._channels: dict[str, grpc.Channel] = {}

    def leader(self, partition: int) -> log_service_pb2_grpc.LogServiceStub:
        """The partition's leader as the store names it, once it has applied that state
        (``has_applied``): Metadata names a leader as soon as a broker has read it, and
        until its replica manager has applied it the leader refuses a raw fetch as
        LEADER_NOT_AVAILABLE or NOT_LEADER_OR_FOLLOWER."""
        found: list[log_service_pb2_grpc.LogServiceStub] = []

        def applied() -> bool:
            state = self.store.read_topic(TOPIC)[partition]
            if state.leader < 0:
                return False
            found[:] = [self._log(self.servers[state.leader])]
            return has_applied(
                found[0], state.leader, TOPIC, partition, state.leader, state.leader_epoch
            )

        wait_for(applied, f"a leader of {TOPIC}-{partition} to take up its leadership")
        return found[0]

    def _log(self, address: str) -> log_service_pb2_grpc.LogServiceStub:
        if address not in self._channels:
            self._channels[address] = grpc.insecure_channel(address)
        return log_service_pb2_grpc.LogServiceStub(self._channels[address])

    def produce(self, partition: int, seq: int) -> tuple[int, bytes]:
        """``produce`` at the leader in the epoch the store names, once it has applied
        that state (``leader``), and again, as a client retries, if the leadership moved
        in between: a refused batch is not appended, so none is appended twice."""
        answers: list[tuple[int, bytes]] = []

        def answered() -> bool:
            leader = self.leader(partition)
            epoch = self.store.read_topic(TOPIC)[partition].leader_epoch
            try:
                answers.append(produce(leader, partition, seq, epoch))
            except grpc.RpcError as error:
                if reason_of(error) not in _MOVED:
                    raise
                return False
            return True

        wait_for(answered, f"a leader of {TOPIC}-{partition} to take a produce")
        return answers[0]

    def raise_leader_epochs(self, by: int) -> None:
        """Each partition's leader leads on in an epoch ``by`` higher, as the controller
        would have it after that many elections of the same leader. The brokers'
        controller writes too (a preferred leader's election after a reassignment, an
        ISR change), so a write that loses that race is decided again on a fresh read."""

        def raised(_partition: int, state: PartitionState) -> PartitionState:
            return dataclasses.replace(state, leader_epoch=state.leader_epoch + by)

        write_all_decided(
            self.store, TOPIC, self.store.read_topic(TOPIC), raised, "leader epochs raised"
        )

    def in_sync(self, partition: int) -> int:
        return len(self.store.read_topic(TOPIC)[partition].isr)

    def close(self) -> None:
        for channel in self._channels.values():
            channel.close()


def test_a_replicated_cluster_lost_with_its_volumes_is_restored_from_its_bucket(
    tmp_path: Path, bucket: Bucket
) -> None:
    configs = (*BROKER, *bucket.configs)
    lost_dir = tmp_path / "lost"
    produced: dict[int, dict[int, bytes]] = {p: {} for p in range(PARTITIONS)}
    with running_cluster(lost_dir, 3, *configs):
        lost = LocalCluster(lost_dir)
        with AdminClient(lost.servers) as admin:
            admin.create_topic(
                TOPIC,
                PARTITIONS,
                {k.replace("_", "."): v for k, v in TIERED.items()},
                replication_factor=REPLICAS,
            )
        # Partition 0's preferred leader moved (the striped placement gives it (2, 0)):
        # the restore puts it back where the lost cluster had it, not where a new topic's is.
        moved = TopicPartition(TOPIC, 0)
        reordered = tuple(reversed(lost.store.read_topic(TOPIC)[0].replicas))
        start_reassignments(lost.store, {moved: reordered}, brokers=range(3))
        lost_assignment = tuple(
            s.replicas for _p, s in sorted(lost.store.read_topic(TOPIC).items())
        )
        assert lost_assignment[0] == reordered
        wait_for(
            lambda: [r.assignment for r in load_topic_records(bucket.store)] == [lost_assignment],
            "the reassignment in the bucket's topic record",
            poll_s=0.1,
        )
        lost.raise_leader_epochs(LOST_EPOCHS)  # as many failovers would
        for seq in range(BATCHES_PER_PARTITION):
            for partition in range(PARTITIONS):
                base, batch = lost.produce(partition, seq)
                produced[partition][base] = batch
        lost_states = lost.store.read_topic(TOPIC).values()
        assert all(len(state.replicas) == REPLICAS for state in lost_states)
        ends = dict.fromkeys(range(PARTITIONS), BATCHES_PER_PARTITION * RECORDS_PER_BATCH)
        for partition in range(PARTITIONS):
            commit_offset(lost.servers[0], GROUP, partition, 7 + partition)
        wait_tiered(bucket.store, ends)
        wait_for(
            lambda: bool(load_group_offsets(bucket.store)),
            "the group's offsets in the bucket",
            poll_s=0.1,
        )
        lost.close()
    shutil.rmtree(lost_dir)  # every broker's data dir and the partition-state store
    tps = [TopicPartition(TOPIC, p) for p in range(PARTITIONS)]
    objects_before = {
        tp: sorted(i.key for i in bucket.store.list(segments_prefix(tp))) for tp in tps
    }
    epochs_before = {tp: last_epoch(bucket.store, tp) for tp in tps}

    restored_dir = tmp_path / "restored"
    with running_cluster(restored_dir, 3, *configs, RESTORE):
        restored = LocalCluster(restored_dir)
        assert fetch_offsets(restored.servers[1], GROUP) == {0: 7, 1: 8}
        states = restored.store.read_topic(TOPIC)
        for tp in tps:
            state = states[tp.partition]
            assert state.replicas == lost_assignment[tp.partition]
            assert state.leader_epoch > epochs_before[tp]  # epochs only grow
            leader = restored.leader(tp.partition)
            fetched = fetch_all(leader, tp.partition)
            assert sorted(fetched) == sorted(produced[tp.partition])
            for base, batch in produced[tp.partition].items():
                assert same_batch(fetched[base], batch)
            base, _batch = restored.produce(tp.partition, BATCHES_PER_PARTITION)
            assert base == ends[tp.partition]
        wait_for(
            lambda: all(restored.in_sync(p) == REPLICAS for p in range(PARTITIONS)),
            "every replica in sync at the new produce",
        )
        after = {tp: ends[tp.partition] + RECORDS_PER_BATCH for tp in tps}
        wait_tiered(bucket.store, {tp.partition: end for tp, end in after.items()})
        states_after = restored.store.read_topic(TOPIC)
        for tp in tps:
            # The lost cluster's objects are kept as they were; the new leaders wrote
            # only what came after them, each offset once, under later writer epochs;
            # no other object: no follower uploaded a copy of its own. One exception,
            # seen at a load average of 30: a leader deposed meanwhile (its lease lapsed)
            # may leave an upload its successor's claim fenced, from an older writer
            # epoch, which the sweep of abandoned uploads removes later.
            segments = load_view(bucket.store, tp).all_segments()
            assert [s.base_offset for s in segments] == [0, *(s.end_offset for s in segments[:-1])]
            strays = set(stored_keys(bucket.store, tp)) - {s.key for s in segments}
            if states_after[tp.partition].leader_epoch == states[tp.partition].leader_epoch:
                assert not strays
            newest = max(s.writer_epoch for s in segments)
            for stray in strays:
                parsed = parse_segment_key(stray)
                assert parsed is not None and parsed.writer_epoch < newest, stray
            kept = [s for s in segments if s.key in objects_before[tp]]
            assert len(kept) == len(objects_before[tp])
            new = segments[len(kept) :]
            assert new and new[0].base_offset == ends[tp.partition]
            assert min(s.writer_epoch for s in new) > max(s.writer_epoch for s in kept)
        restored.close()
