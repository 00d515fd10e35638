"""The S3 tier under replication, on three real brokers and a real MinIO.

Only the leader uploads, each segment once; a new leader (the old one killed with
``kill -9``) continues the same tier with the next writer epoch, re-uploading nothing
and losing nothing, while the old one, back as a follower, writes no more; followers
free their local copies of tiered segments as the leader does, never past the tier's
end; a follower whose disk was wiped starts over at the leader's local log start with
the tier's producers and leader epochs, so that after it takes over an idempotent
producer's retried batch is still answered as a duplicate. Tiering turned off
(KIP-950) is the leader's to delete from the bucket, and every replica then starts
where the leader's local log does.
"""

from __future__ import annotations

import functools
import shutil
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from tests.sidecar.conftest import Sidecar
from tests.support.minio import MinioServer
from tests.support.scrape import METRICS, scrape_sidecar
from tierlog.api.v1 import admin_service_pb2, log_service_pb2
from tierlog.client import Producer
from tierlog.storage.checkpoints import (
    LEADER_EPOCH_CHECKPOINT,
    LOG_START_OFFSET_CHECKPOINT,
    read_offset_checkpoint,
)
from tierlog.storage.records import SimpleRecord, build_batch
from tierlog.storage.tier.layout import partition_prefix, segments_prefix
from tierlog.storage.tier.local_store import LocalDirectoryStore
from tierlog.storage.tier.manifest import RemoteSegment
from tierlog.storage.tier.manifest_store import load_manifest, load_view
from tierlog.storage.tier.s3_store import S3Options
from tierlog.storage.tier.store import ObjectStore
from tierlog.storage.tier.url import open_store
from tierlog.storage.topic_partition import TopicPartition

from .conftest import Cluster, ClusterFactory, wait_for
from .test_failover import FAST_FAILOVER

TOPIC = "orders"
TP = TopicPartition(TOPIC, 0)
TIERED = {
    "remote.storage.enable": "true",
    "segment.bytes": "2000",
    "local.retention.bytes": "0",  # a tiered segment's local copy goes at once
    "file.delete.delay.ms": "0",
}
BROKER = (
    METRICS,
    *FAST_FAILOVER,
    "remote.log.manager.task.interval.ms=100",
    "log.retention.check.interval.ms=100",
    # No preferred leader election: a broker coming back would lead again at once.
    "auto.leader.rebalance.enable=false",
)


@dataclass
class TieredCluster:
    cluster: Cluster
    store: ObjectStore  # the brokers' tier, as a reader sees it

    def broker(self, node_id: int) -> Sidecar:
        return self.cluster.broker(node_id)

    def segments(self) -> tuple[RemoteSegment, ...]:
        return load_view(self.store, TP).all_segments()

    def tier_end(self) -> int:
        return load_view(self.store, TP).end_offset

    def settled(self, node_id: int) -> bool:
        """Whether every closed segment of the broker's log is in the tier and gone from
        its disk: only the active segment is left, and the tier ends where it begins."""
        bases = local_bases(self.broker(node_id))
        return len(bases) == 1 and bases[0] > 0 and self.tier_end() == bases[0]

    def writer_epoch_is(self, epoch: int) -> bool:
        return load_manifest(self.store, TP).writer_epoch == epoch

    def leader(self) -> int:
        return self.cluster.state(TOPIC).leader


TieredFactory = Callable[..., TieredCluster]


@pytest.fixture
def tiered_brokers(
    replicated_brokers: ClusterFactory, minio: MinioServer, s3_bucket: str, tmp_path: Path
) -> Iterator[TieredFactory]:
    """Three brokers sharing one bucket as their tier, and the topic ``orders`` (one
    partition, tiered, small segments, and the configs given) on all three, broker 0 its
    preferred leader."""
    stores: list[ObjectStore] = []

    def start(*broker_configs: str, **topic_configs: str) -> TieredCluster:
        credentials = tmp_path / "s3-credentials"
        tier = minio.sidecar_tier_configs(s3_bucket, credentials)
        cluster = replicated_brokers(3, *BROKER, *broker_configs, *tier)
        cluster.store.write_topic_configs(TOPIC, {**TIERED, **topic_configs})
        cluster.create_topic(TOPIC, (0, 1, 2))
        options = S3Options(
            endpoint_url=minio.endpoint_url,
            region=minio.region,
            path_style=True,
            credentials_path=credentials,
        )
        stores.append(open_store(f"s3://{s3_bucket}/tier", options))
        return TieredCluster(cluster, stores[-1])

    yield start
    for store in stores:
        store.close()


def local_bases(broker: Sidecar) -> list[int]:
    """The base offsets of the broker's local segments of the partition."""
    return sorted(int(path.stem) for path in (broker.data_dir / TP.dir_name).glob("*.log"))


def value(i: int) -> bytes:
    return b"r%05d" % i + b"." * 94  # 100 bytes: a 2000-byte segment holds a dozen or so


def produce(cluster: Cluster, first: int, count: int) -> None:
    """Values ``first`` .. ``first + count - 1``, each acknowledged by the ISR, in order."""
    config = {
        "bootstrap.servers": cluster.servers,
        "linger.ms": 0,
        "batch.size": 1000,  # batches well within a 2000-byte segment
        "delivery.timeout.ms": 60_000,
    }
    with Producer(config) as producer:
        sent = [producer.send(TOPIC, value(i), partition=0) for i in range(first, first + count)]
    assert [future.result(0).offset for future in sent] == list(range(first, first + count))


def uploaded_segments(broker: Sidecar) -> float:
    return scrape_sidecar(broker).value("tierlog_remote_uploaded_segments_total", topic=TOPIC)


def contiguous(segments: tuple[RemoteSegment, ...]) -> bool:
    """Each offset in exactly one segment, from 0 on: nothing uploaded twice or missed."""
    starts = [segment.base_offset for segment in segments]
    return starts == [0, *(segment.end_offset for segment in segments[:-1])]


def test_only_the_leader_uploads_each_segment_once(tiered_brokers: TieredFactory) -> None:
    tiered = tiered_brokers()
    assert tiered.leader() == 0
    produce(tiered.cluster, 0, 200)
    wait_for(lambda: tiered.settled(0), "the leader's closed segments to be in the tier")
    segments = tiered.segments()
    assert len(segments) >= 5 and contiguous(segments)
    # The leader claimed the tier once (writer epoch 1) and nobody claimed it after.
    assert load_manifest(tiered.store, TP).writer_epoch == 1
    assert {segment.writer_epoch for segment in segments} == {1}
    # No object beside the manifest's: no follower uploaded a copy of its own.
    stored = sorted(info.key for info in tiered.store.list(segments_prefix(TP)))
    assert stored == sorted(segment.key for segment in segments)
    uploads = [uploaded_segments(tiered.broker(node)) for node in range(3)]
    assert uploads == [len(segments), 0, 0]


def test_followers_free_their_local_copies_of_tiered_segments_and_no_others(
    tiered_brokers: TieredFactory,
) -> None:
    tiered = tiered_brokers()
    produce(tiered.cluster, 0, 200)

    def followers_settled() -> bool:
        settled = True
        for node in (1, 2):
            bases = local_bases(tiered.broker(node))
            tier_end = tiered.tier_end()  # read after the listing: it only grows
            # Never a local copy freed past the tier's end (the segment holding it stays).
            assert not bases or bases[0] <= tier_end, f"broker {node} freed up to {bases[0]}"
            settled = settled and tiered.settled(node)
        return settled

    wait_for(followers_settled, "the followers to keep only their active segment")
    assert local_bases(tiered.broker(1)) == local_bases(tiered.broker(0))
    assert local_bases(tiered.broker(2)) == local_bases(tiered.broker(0))


def test_a_new_leader_continues_the_tier_and_the_old_one_writes_no_more(
    tiered_brokers: TieredFactory,
) -> None:
    tiered = tiered_brokers()
    cluster = tiered.cluster
    produce(cluster, 0, 200)
    wait_for(lambda: tiered.settled(0), "the first leader's segments to be in the tier")
    before = tiered.segments()
    assert cluster.read_values(TOPIC, 200) == [value(i) for i in range(200)]  # from the tier

    cluster.broker(0).kill()
    wait_for(lambda: tiered.leader() in (1, 2), "a new leader")
    successor = tiered.leader()
    produce(cluster, 200, 200)
    wait_for(lambda: tiered.settled(successor), "the new leader's segments to be in the tier")
    manifest = load_manifest(tiered.store, TP)
    after = tiered.segments()
    assert manifest.writer_epoch == 2  # the next writer epoch: the first leader is fenced
    assert after[: len(before)] == before  # nothing the first leader uploaded lost or redone
    assert contiguous(after) and after[-1].end_offset > before[-1].end_offset
    assert {segment.writer_epoch for segment in after[len(before) :]} == {2}
    assert uploaded_segments(tiered.broker(successor)) == len(after) - len(before)
    # Consumers read it all through the new leader, the older offsets from the tier.
    assert cluster.read_values(TOPIC, 400) == [value(i) for i in range(400)]

    # The deposed leader comes back as a follower: it never claims the tier again.
    cluster.broker(0).start()
    wait_for(lambda: 0 in cluster.state(TOPIC).isr, "broker 0 to rejoin the ISR")
    produce(cluster, 400, 100)
    wait_for(lambda: tiered.settled(successor), "the last segments to be in the tier")
    wait_for(lambda: tiered.settled(0), "broker 0 to free its tiered copies as a follower")
    latest = load_manifest(tiered.store, TP)
    assert (latest.writer_epoch, latest.writer_id) == (2, manifest.writer_id)
    assert contiguous(tiered.segments())
    assert uploaded_segments(cluster.broker(0)) == 0


def test_an_idle_partition_is_tiered_within_its_bound_and_a_new_leader_uploads_it_once(
    tiered_brokers: TieredFactory,
) -> None:
    """A few records, then nothing: the leader rolls them out within the topic's bound
    (``tierlog.remote.segment.max.upload.interval.ms``, timeouts derived from it), and
    the followers, told where the tier ends, roll there too (local copies are kept here,
    so no retention rolls for them); a new leader continues the tier from the manifest,
    uploading only what came after, each object once."""
    bound_ms = 2000
    deadline_s = 2 * bound_ms / 1000  # the bound, and as much again for the upload
    key = "tierlog.remote.segment.max.upload.interval.ms"
    tiered = tiered_brokers(**{key: str(bound_ms), "local.retention.bytes": "-2"})
    cluster = tiered.cluster
    produce(cluster, 0, 3)
    wait_for(lambda: tiered.tier_end() == 3, "the records in the bucket", deadline_s)
    rolled = {node: [0, 3] for node in range(3)}
    wait_for(
        lambda: {node: local_bases(tiered.broker(node)) for node in range(3)} == rolled,
        "every broker to roll at the tier's end",
    )
    before = tiered.segments()
    assert [(s.base_offset, s.end_offset) for s in before] == [(0, 3)]

    cluster.broker(0).kill()
    wait_for(lambda: tiered.leader() in (1, 2), "a new leader")
    successor = tiered.leader()
    wait_for(functools.partial(tiered.writer_epoch_is, 2), "the new leader's claim")
    produce(cluster, 3, 3)
    wait_for(lambda: tiered.tier_end() == 6, "the new records in the bucket", deadline_s)
    after = tiered.segments()
    assert after[:1] == before and [(s.base_offset, s.end_offset) for s in after[1:]] == [(3, 6)]
    assert after[1].writer_epoch == 2
    stored = sorted(info.key for info in tiered.store.list(segments_prefix(TP)))
    assert stored == sorted(segment.key for segment in after)  # each object once
    assert uploaded_segments(cluster.broker(successor)) == 1
    assert cluster.read_values(TOPIC, 6) == [value(i) for i in range(6)]


def test_a_paused_leader_resumed_after_its_successor_claimed_the_tier_writes_nothing(
    tiered_brokers: TieredFactory,
) -> None:
    tiered = tiered_brokers()
    cluster = tiered.cluster
    produce(cluster, 0, 100)
    wait_for(lambda: tiered.settled(0), "the first leader's segments to be in the tier")
    uploaded_before = uploaded_segments(cluster.broker(0))
    with cluster.paused(0):  # past its lease: the controller moves on
        wait_for(lambda: tiered.leader() in (1, 2), "a new leader")
        successor = tiered.leader()
        wait_for(functools.partial(tiered.writer_epoch_is, 2), "the new leader's claim")
        produce(cluster, 100, 100)
        wait_for(lambda: tiered.settled(successor), "the new leader's segments in the tier")
    claimed = load_manifest(tiered.store, TP)
    # Resumed, it still holds the tier's writer of epoch 1 until it learns it leads no
    # more: any change it tries meets epoch 2 and is fenced; then it follows.
    wait_for(lambda: 0 in cluster.state(TOPIC).isr, "broker 0 to follow and rejoin the ISR")
    produce(cluster, 200, 100)
    wait_for(lambda: tiered.settled(successor), "the last segments to be in the tier")
    latest = load_manifest(tiered.store, TP)
    assert (latest.writer_epoch, latest.writer_id) == (2, claimed.writer_id)
    assert contiguous(tiered.segments())
    assert uploaded_segments(cluster.broker(0)) == uploaded_before
    assert cluster.read_values(TOPIC, 300) == [value(i) for i in range(300)]


def test_a_leader_moved_away_and_back_claims_the_tier_each_time(
    tiered_brokers: TieredFactory,
) -> None:
    """Leadership moves between live brokers (the test plays the controller): each
    leader claims the tier as it starts (the one before is fenced from then on) and
    uploads what follows; the first one, leading again, claims anew and uploads again."""
    tiered = tiered_brokers()
    cluster = tiered.cluster
    for round_, leader in enumerate((0, 1, 0)):
        if round_:
            # The next leader has heard where the tier ends (a fetch answer says it) and
            # rolled there. One that takes over before it has rolls there only as it
            # claims the tier, and a record appended in between lands in a segment that
            # overlaps the tier: reads take the older copy, but its upload is repeated,
            # which the counts of uploads below would see.
            tier_end = tiered.tier_end()
            wait_for(
                lambda: tier_end in local_bases(tiered.broker(leader)),  # noqa: B023
                f"broker {leader} to roll where the tier ends",
            )
            state = cluster.state(TOPIC)
            cluster.store.alter_partition(
                TOPIC, 0, state.partition_epoch, state.with_leader(leader)
            )
        wait_for(
            functools.partial(tiered.writer_epoch_is, round_ + 1),
            f"broker {leader} to claim the tier",
        )
        produce(cluster, 100 * round_, 100)
        wait_for(
            functools.partial(tiered.settled, leader),
            f"broker {leader}'s segments to be in the tier",
        )
    segments = tiered.segments()
    assert contiguous(segments)
    epochs = [segment.writer_epoch for segment in segments]
    assert epochs == sorted(epochs) and set(epochs) == {1, 2, 3}
    by_broker_0 = sum(1 for epoch in epochs if epoch != 2)
    assert uploaded_segments(cluster.broker(0)) == by_broker_0
    assert uploaded_segments(cluster.broker(1)) == len(segments) - by_broker_0
    assert uploaded_segments(cluster.broker(2)) == 0
    assert cluster.read_values(TOPIC, 300) == [value(i) for i in range(300)]


def test_a_wiped_follower_starts_over_from_the_tier_and_keeps_idempotent_producers(
    tiered_brokers: TieredFactory,
) -> None:
    tiered = tiered_brokers()
    cluster = tiered.cluster
    produce(cluster, 0, 100)
    cluster.broker(0).kill()  # a second leader epoch, so the tier records two
    wait_for(lambda: tiered.leader() in (1, 2), "a new leader")
    leader = tiered.leader()
    wiped = 3 - leader  # the other of 1 and 2
    produce(cluster, 100, 50)
    # An idempotent producer's batch, then more records, so that it lies in the tier only.
    producer = cluster.broker(leader).log.InitProducerId(log_service_pb2.InitProducerIdRequest())
    records = [SimpleRecord(b"k", b"idempotent-%d" % i, 1_700_000_000_000) for i in range(5)]
    batch = build_batch(
        records,
        producer_id=producer.producer_id,
        producer_epoch=producer.producer_epoch,
        base_sequence=0,
    )
    request = log_service_pb2.ProduceRequest(
        topic=TOPIC, partition=0, acks=log_service_pb2.ACKS_ALL, record_batches=batch
    )
    first = cluster.broker(leader).log.Produce(request)
    assert (first.base_offset, first.duplicate) == (150, False)
    produce(cluster, 155, 100)
    wait_for(lambda: tiered.settled(leader), "the leader to hold only its active segment")
    local_start = local_bases(cluster.broker(leader))[0]
    assert local_start > 155  # the batch is in the tier only

    follower = cluster.broker(wiped)
    follower.kill()
    epoch_before = cluster.state(TOPIC).partition_epoch
    shutil.rmtree(follower.data_dir)
    follower.start()
    wait_for(
        lambda: (
            wiped in cluster.state(TOPIC).isr
            and cluster.state(TOPIC).partition_epoch >= epoch_before + 2
        ),
        f"broker {wiped} to leave the ISR and rejoin it",
    )
    # It starts where the leader's local segments start, with the leader's epochs.
    assert local_bases(follower) == [local_start]
    leader_dir = cluster.broker(leader).data_dir / TP.dir_name
    epochs = (leader_dir / LEADER_EPOCH_CHECKPOINT).read_text()
    assert epochs.splitlines()[1] == "2"  # epochs 0 and 1
    assert (follower.data_dir / TP.dir_name / LEADER_EPOCH_CHECKPOINT).read_text() == epochs

    # It takes over, the only broker left; the producer's retry is still a duplicate.
    cluster.broker(leader).kill()
    wait_for(lambda: tiered.leader() == wiped, f"broker {wiped} to lead")
    cluster.wait_until_applied(TOPIC, nodes=(wiped,))  # NOT_LEADER_OR_FOLLOWER until then
    retried = follower.log.Produce(request)
    assert (retried.base_offset, retried.last_offset, retried.duplicate) == (150, 154, True)
    earliest = log_service_pb2.ListOffsetsRequest(topic=TOPIC, partition=0, timestamp_ms=-2)
    assert follower.log.ListOffsets(earliest).offset == 0  # its log start is the tier's
    values = cluster.read_values(TOPIC, 255)  # the older offsets from the tier
    assert values == [
        *(value(i) for i in range(150)),
        *(record.value for record in records),
        *(value(i) for i in range(155, 255)),
    ]


def test_followers_with_tiers_of_their_own_free_nothing_for_the_leaders(
    replicated_brokers: ClusterFactory,
) -> None:
    """Without a shared tier (each broker's default directory in its log dir) the
    leader's tier is no follower's: a follower that freed its copies for it would hold
    them nowhere it can read, so it frees nothing."""
    cluster = replicated_brokers(3, *BROKER)
    cluster.store.write_topic_configs(TOPIC, TIERED)
    cluster.create_topic(TOPIC, (0, 1, 2))
    leader = LocalDirectoryStore(cluster.broker(0).data_dir / "tier")
    produce(cluster, 0, 200)

    def leader_settled() -> bool:
        bases = local_bases(cluster.broker(0))
        return len(bases) == 1 and load_view(leader, TP).end_offset == bases[0]

    wait_for(leader_settled, "the leader's closed segments to be in its tier")
    (active_base,) = local_bases(cluster.broker(0))
    # One more record: the answer carrying it tells the followers the tier's end.
    produce(cluster, 200, 1)
    for node in (1, 2):
        keeps_every_segment_after_a_retention_pass(cluster.broker(node), active_base)


def keeps_every_segment_after_a_retention_pass(follower: Sidecar, active_base: int) -> None:
    active = follower.data_dir / TP.dir_name / f"{active_base:020d}.log"
    wait_for(lambda: active.exists() and active.stat().st_size > 0, "the follower's copy")
    passes = retention_passes(follower)
    wait_for(lambda: retention_passes(follower) >= passes + 2, "two retention passes")
    assert local_bases(follower)[0] == 0  # every segment still here
    assert local_bases(follower)[-1] == active_base


def retention_passes(broker: Sidecar) -> float:
    return scrape_sidecar(broker).value("tierlog_retention_runs_total")


def test_turning_tiering_off_the_leader_deletes_the_tier_and_every_replica_starts_with_it(
    tiered_brokers: TieredFactory,
) -> None:
    tiered = tiered_brokers("log.flush.offset.checkpoint.interval.ms=100")
    assert tiered.leader() == 0
    produce(tiered.cluster, 0, 200)
    wait_for(lambda: all(tiered.settled(node) for node in range(3)), "every replica to settle")
    produce(tiered.cluster, 200, 5)  # records only the disks hold

    turned_off = {"remote.storage.enable": "false", "remote.log.delete.on.disable": "true"}
    tiered.broker(1).admin.AlterConfigs(  # any broker: the change goes to the store
        admin_service_pb2.AlterConfigsRequest(topic=TOPIC, set_configs=turned_off), timeout=10
    )

    def log_starts() -> list[int]:
        checkpoints = [
            read_offset_checkpoint(tiered.broker(node).data_dir / LOG_START_OFFSET_CHECKPOINT)
            for node in range(3)
        ]
        return [checkpoint.get(TP, -1) for checkpoint in checkpoints]

    def replicas_start_where_the_leaders_disk_does() -> bool:
        starts = log_starts()
        return starts == [local_bases(tiered.broker(0))[0]] * 3 and starts[0] > 0

    wait_for(replicas_start_where_the_leaders_disk_does, "every replica to start locally")
    wait_for(lambda: not list(tiered.store.list(partition_prefix(TP))), "the tier to go")
    deleted = [
        scrape_sidecar(tiered.broker(node)).value(
            "tierlog_remote_deleted_segments_total", topic=TOPIC
        )
        for node in range(3)
    ]
    assert deleted[0] > 0 and deleted[1:] == [0, 0]  # the leader's deletion, no follower's
    local_start = log_starts()[0]
    expected = [value(i) for i in range(local_start, 205)]
    assert tiered.cluster.read_values(TOPIC, len(expected)) == expected
