"""A replicated cluster of real brokers through its users' eyes: topics created through
any broker reach every one with their configs, a killed leader is replaced by the
controller (one lease later) while an idempotent acks=all producer loses and duplicates
nothing, and a broker stopped with SIGTERM hands its leaderships over first."""

from __future__ import annotations

import shutil
import signal
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from tests.support.process_faults import paused
from tests.support.replica_dirs import checkpointed_high_watermark, read_values
from tests.support.scrape import METRICS, metrics_address, scrape
from tierlog.api.v1 import admin_service_pb2
from tierlog.client import AdminClient, Consumer, Producer, TopicPartition
from tierlog.file_lock import exclusive_lock
from tierlog.storage.errors import UnknownTopicOrPartitionError

from .conftest import Cluster, ClusterFactory, wait_for

FAST_FAILOVER = ("broker.session.timeout.ms=1500", "replica.lag.time.max.ms=1500")
# Followers paused past replica.lag.time.max.ms leave the leader alone in the ISR, while
# their leases (and the leader's) last; broker 0 does not take leadership back by itself.
LEADER_LEFT_ALONE = (
    "broker.session.timeout.ms=60000",
    "replica.lag.time.max.ms=1500",
    "auto.leader.rebalance.enable=false",
)


def test_a_topic_created_through_any_broker_reaches_every_broker_with_its_configs(
    replicated_brokers: ClusterFactory,
) -> None:
    cluster = replicated_brokers(3)
    with AdminClient(cluster.broker(1).address) as admin:
        admin.create_topic("events", 3, {"min.insync.replicas": "2"}, replication_factor=3)
    placed = cluster.store.read_topic("events")
    assert sorted(state.leader for state in placed.values()) == [0, 1, 2]  # leaders spread
    for state in placed.values():
        assert sorted(state.replicas) == [0, 1, 2] and state.isr == state.replicas
    for broker in cluster.brokers:
        with AdminClient(broker.address) as admin:

            def knows(admin: AdminClient = admin) -> bool:
                # A broker learns the topic from the store's watch, a moment after the
                # creating broker answered; until then it rightly calls the topic unknown.
                try:
                    leaders = admin.metadata(["events"]).leaders.get("events")
                except UnknownTopicOrPartitionError:
                    return False
                return leaders == tuple(placed[p].leader for p in range(3))

            wait_for(knows, f"{broker.data_dir.name} to learn the topic's leaders")
            configs = admin.describe_configs("events")
            assert configs["min.insync.replicas"].value == "2"


def test_a_killed_leader_is_replaced_and_an_idempotent_producer_loses_nothing(
    replicated_brokers: ClusterFactory,
) -> None:
    cluster = replicated_brokers(3, *FAST_FAILOVER)
    cluster.create_topic("orders", (0, 1, 2))
    producer = Producer(
        {"bootstrap.servers": cluster.servers, "linger.ms": 0, "delivery.timeout.ms": 60_000}
    )
    sent: list[bytes] = []
    futures = []
    stop = threading.Event()

    def produce() -> None:
        i = 0
        while not stop.is_set():
            value = b"r%06d" % i
            futures.append(producer.send("orders", value, partition=0))
            sent.append(value)
            i += 1
            time.sleep(0.002)

    worker = threading.Thread(target=produce)
    worker.start()
    try:
        wait_for(lambda: len(sent) > 200, "records before the kill")
        cluster.broker(0).kill()
        killed_at = time.monotonic()
        wait_for(lambda: cluster.state("orders").leader in (1, 2), "a new leader")
        elected_after = time.monotonic() - killed_at
        wait_for(lambda: len(sent) > 600, "records after the kill")
    finally:
        stop.set()
        worker.join()
    assert producer.flush(60)
    producer.close()
    offsets = [future.result(0).offset for future in futures]
    assert offsets == list(range(len(sent)))  # each acknowledged once, in order, no gap
    assert elected_after < 10  # one lease (1.5 s) and a controller pass, on a busy machine
    assert cluster.read_values("orders", len(sent)) == sent
    # The old leader comes back as a follower, catches up and rejoins the ISR.
    cluster.broker(0).start()
    wait_for(lambda: 0 in cluster.state("orders").isr, "broker 0 to rejoin the ISR")


def test_a_broker_stopped_with_sigterm_hands_its_leaderships_over_first(
    replicated_brokers: ClusterFactory,
) -> None:
    # A long session timeout: only the hand-over can move leadership in time.
    # No preferred leader election: broker 0, once caught up, would lead again at once.
    cluster = replicated_brokers(
        3, "broker.session.timeout.ms=60000", "auto.leader.rebalance.enable=false"
    )
    cluster.create_topic("orders", (0, 1, 2))
    wait_for(lambda: cluster.state("orders").leader == 0, "broker 0 to lead")
    assert cluster.broker(0).stop() == 0
    state = cluster.state("orders")
    assert state.leader in (1, 2)
    assert 0 not in state.isr
    assert state.leader_epoch == 1


def test_a_broker_stopped_with_sigterm_rejoins_no_isr_so_acks_all_waits_for_no_lease(
    replicated_brokers: ClusterFactory,
) -> None:
    """Kafka keeps a broker in controlled shutdown out of every ISR (KIP-841). A stopping
    broker that went on fetching after its hand-over was caught up at once and added back
    by the leaders, and acks=all then waited for it until its lease expired or it lagged
    for replica.lag.time.max.ms (682 of 2,000 partitions, docs/BENCHMARKS.md). Here its
    hand-over is held at its second topic (the store's lock on it, as a broker changing
    that topic would hold it) while the first topic, handed over, takes acks=all: the
    broker still fetches (it copies what is produced) and has all the time it needs to be
    put back, but its lease says it is in controlled shutdown. Session and lag are a
    minute, and every produce must be acknowledged within a third of it."""
    session_ms = 60_000
    cluster = replicated_brokers(
        3,
        f"broker.session.timeout.ms={session_ms}",
        f"replica.lag.time.max.ms={session_ms}",
        "auto.leader.rebalance.enable=false",
        # Answers at once: a follower still fetching is seen caught up within milliseconds.
        "replica.fetch.wait.max.ms=10",
    )
    partitions = 10
    cluster.create_topic("a-handed-over", (0, 1, 2), partitions)  # broker 2 follows all
    cluster.create_topic("b-held", (0, 1, 2))
    timeout_ms = session_ms // 3
    config = {
        "bootstrap.servers": cluster.broker(0).address,
        "acks": "all",
        "linger.ms": 0,
        "request.timeout.ms": timeout_ms,
        "delivery.timeout.ms": timeout_ms,
    }

    def isrs_at_the_leader() -> set[tuple[int, ...]]:
        request = admin_service_pb2.MetadataRequest(topics=["a-handed-over"])
        (topic,) = cluster.broker(0).admin.Metadata(request, timeout=10).topics
        return {tuple(partition.isr) for partition in topic.partitions}

    def produce_everywhere() -> None:
        with Producer(config) as producer:
            sent = [producer.send("a-handed-over", b"r", partition=p) for p in range(partitions)]
        for future in sent:
            future.result()  # REQUEST_TIMED_OUT with broker 2 in the ISR again

    def copied_by_broker_2() -> bool:
        return all(
            read_values(cluster.broker(2).data_dir / f"a-handed-over-{p}", 10) == [(0, "r")]
            for p in range(partitions)
        )

    with exclusive_lock(cluster.state_dir / "topics" / "b-held.json.lock"):
        cluster.broker(2).process.send_signal(signal.SIGTERM)
        wait_for(lambda: isrs_at_the_leader() == {(0, 1)}, "broker 2 out of the ISRs")
        produce_everywhere()
        wait_for(copied_by_broker_2, "broker 2 to copy what was produced, still fetching")
        assert isrs_at_the_leader() == {(0, 1)}
    assert cluster.broker(2).stop() == 0
    produce_everywhere()
    assert isrs_at_the_leader() == {(0, 1)}


def test_a_follower_stopped_with_sigterm_right_after_a_commit_checkpoints_that_high_watermark(
    replicated_brokers: ClusterFactory,
) -> None:
    """A follower learns the high watermark its fetch committed from the leader's next
    answer, which for a fetch with no new records comes after replica.fetch.wait.max.ms.
    Kafka's broker goes on fetching through its controlled shutdown; one that stopped
    fetching first never applied that answer and checkpointed the high watermark from
    before the commit. Broker 2 is stopped as soon as the record is acknowledged (the
    answer is 3 s away) and checkpoints its offset."""
    cluster = replicated_brokers(
        3,
        "broker.session.timeout.ms=60000",
        "auto.leader.rebalance.enable=false",
        "replica.fetch.wait.max.ms=3000",
    )
    cluster.create_topic("orders", (0, 1, 2))
    config = {"bootstrap.servers": cluster.broker(0).address, "acks": "all", "linger.ms": 0}
    with Producer(config) as producer:
        producer.send("orders", b"committed", partition=0).result()
        cluster.broker(2).process.send_signal(signal.SIGTERM)
    assert cluster.broker(2).stop() == 0
    assert checkpointed_high_watermark(cluster.broker(2).data_dir, "orders", 0) == 1


def test_a_consumer_follows_its_partitions_leadership_through_a_hand_over(
    replicated_brokers: ClusterFactory,
) -> None:
    """The consumer's fetch session with the old leader ends (the partition answers
    NOT_LEADER_OR_FOLLOWER, or the broker's stop ends the stream); the partition is added
    to the new leader's session from its position: nothing skipped, nothing twice."""
    cluster = replicated_brokers(
        3, "broker.session.timeout.ms=60000", "auto.leader.rebalance.enable=false"
    )
    cluster.create_topic("orders", (0, 1, 2))
    wait_for(lambda: cluster.state("orders").leader == 0, "broker 0 to lead")
    config = {"bootstrap.servers": cluster.servers, "linger.ms": 0}
    consumer = Consumer({"bootstrap.servers": cluster.servers, "auto.offset.reset": "earliest"})
    try:
        consumer.assign([TopicPartition("orders", 0)])
        with Producer(config) as producer:
            for i in range(100):
                producer.send("orders", b"r%04d" % i, partition=0)
        values = _read(consumer, 100)
        assert cluster.broker(0).stop() == 0
        assert cluster.state("orders").leader in (1, 2)
        with Producer(config) as producer:
            for i in range(100, 200):
                producer.send("orders", b"r%04d" % i, partition=0)
        values += _read(consumer, 100)
    finally:
        consumer.close()
    assert values == [b"r%04d" % i for i in range(200)]


def _read(consumer: Consumer, count: int) -> list[bytes]:
    values: list[bytes] = []
    deadline = time.monotonic() + 30
    while len(values) < count and time.monotonic() < deadline:
        values += [record.value or b"" for record in consumer.poll(500)]
    return values


def test_a_follower_whose_disk_was_wiped_copies_everything_again_and_rejoins_the_isr(
    replicated_brokers: ClusterFactory,
) -> None:
    cluster = replicated_brokers(3, "log.segment.bytes=2000")
    cluster.create_topic("orders", (0, 1, 2))
    config = {"bootstrap.servers": cluster.servers, "linger.ms": 0, "batch.size": 500}
    with Producer(config) as producer:
        sent = [producer.send("orders", b"r%04d" % i, partition=0) for i in range(300)]
    assert [future.result(0).offset for future in sent] == list(range(300))
    wiped = cluster.broker(2)
    wiped.kill()
    before = cluster.state("orders").partition_epoch
    shutil.rmtree(wiped.data_dir)
    wiped.start()
    # A new incarnation leaves the ISRs first (an empty log may never be elected), then
    # rejoins once it holds what the ISR holds: two changes of the partition's state.
    wait_for(
        lambda: (
            2 in cluster.state("orders").isr
            and cluster.state("orders").partition_epoch >= before + 2
        ),
        "broker 2 to leave the ISR and rejoin it",
    )
    leader_dir = cluster.broker(cluster.state("orders").leader).data_dir / "orders-0"
    assert len(_files(leader_dir)) >= 3  # several segments, each copied whole
    wait_for(
        lambda: _files(wiped.data_dir / "orders-0") == _files(leader_dir),
        "broker 2 to hold the leader's files",
    )
    assert cluster.read_values("orders", 300) == [b"r%04d" % i for i in range(300)]


def test_a_leader_whose_disk_was_wiped_leads_no_more_and_nothing_acknowledged_is_lost(
    replicated_brokers: ClusterFactory,
) -> None:
    # No preferred leader election: broker 0, once caught up, would lead again at once.
    cluster = replicated_brokers(
        3, "broker.session.timeout.ms=60000", "auto.leader.rebalance.enable=false"
    )
    cluster.create_topic("orders", (0, 1, 2))
    with Producer({"bootstrap.servers": cluster.servers, "linger.ms": 0}) as producer:
        sent = [producer.send("orders", b"r%04d" % i, partition=0) for i in range(100)]
    assert [future.result(0).offset for future in sent] == list(range(100))
    wiped = cluster.broker(0)
    wiped.kill()
    shutil.rmtree(wiped.data_dir)
    wiped.start()  # well within its old lease: no controller has fenced it
    wait_for(lambda: cluster.state("orders").leader in (1, 2), "leadership to move")
    assert cluster.read_values("orders", 100) == [b"r%04d" % i for i in range(100)]
    wait_for(lambda: 0 in cluster.state("orders").isr, "broker 0 to catch up and rejoin")


def test_a_wiped_leader_that_was_the_last_in_sync_replica_truncates_no_follower(
    replicated_brokers: ClusterFactory,
) -> None:
    """Ten records acknowledged by all three replicas; both followers paused, so the
    leader shrinks the ISR to itself (a record it alone holds); while they are paused the
    leader's disk is wiped and it restarts, the only ISR member, which it cannot leave.
    The followers hold every acknowledged record, and must keep them once they resume:
    the restarted broker, its log dir formatted, gives the partition to the replica
    holding the most (offline until one answers), and follows it. A partition with no
    other replica leads its empty log: there is nothing else to read.
    (How the fault run's wiped follower can lose records: the broker it wipes follows
    partition 0 but may lead partition 1, whose followers a loaded machine lets lag.)"""
    cluster = replicated_brokers(3, *LEADER_LEFT_ALONE, METRICS)
    cluster.create_topic("alone", (0,))
    config = _ten_acknowledged_by_all(cluster)
    wiped = cluster.broker(0)
    with paused(cluster.broker(1).process.pid), paused(cluster.broker(2).process.pid):
        _left_alone_in_sync(cluster, config, b"the leader's alone")
        wiped.kill()
        shutil.rmtree(wiped.data_dir)
        wiped.start()
        alone = cluster.state("alone")
        assert (alone.leader, alone.isr) == (0, (0,))
        with Producer({**config, "acks": "1"}) as producer:
            assert producer.send("alone", b"again", partition=0).result().offset == 0
    wait_for(lambda: len(cluster.state("orders").isr) == 3, "the ISR to be whole again", 60)
    assert cluster.state("orders").leader in (1, 2)
    recoveries = scrape(metrics_address(wiped.output)).value("tierlog_unclean_recoveries_total")
    assert recoveries == 1
    for broker in cluster.brokers:
        assert broker.stop() == 0
    acknowledged = [(i, f"r{i}") for i in range(10)]
    for broker in cluster.brokers:
        assert read_values(broker.data_dir / "orders-0", 10) == acknowledged, broker.data_dir


def test_a_last_in_sync_leader_killed_without_losing_its_disk_still_leads_after_restart(
    replicated_brokers: ClusterFactory,
) -> None:
    """As above, but kill -9 alone: its log dir keeps meta.properties, so its logs are
    not lost. It cannot leave the ISR and leads on in the same leader epoch, as in Kafka:
    no offline partition, no recovery, and the followers catch up from it."""
    cluster = replicated_brokers(3, *LEADER_LEFT_ALONE)
    config = _ten_acknowledged_by_all(cluster)
    restarted = cluster.broker(0)
    with paused(cluster.broker(1).process.pid), paused(cluster.broker(2).process.pid):
        _left_alone_in_sync(cluster, config, b"r10")
        before = cluster.state("orders")
        restarted.kill()
        restarted.start()
        with Producer({**config, "acks": "1"}) as producer:
            assert producer.send("orders", b"r11", partition=0).result().offset == 11
        after = cluster.state("orders")
        assert (after.leader, after.leader_epoch, after.isr) == (0, before.leader_epoch, (0,))
    wait_for(lambda: len(cluster.state("orders").isr) == 3, "the ISR to be whole again", 60)
    assert "unclean recovery" not in restarted.output
    for broker in cluster.brokers:
        assert broker.stop() == 0
    kept = [(i, f"r{i}") for i in range(12)]
    for broker in cluster.brokers:
        assert read_values(broker.data_dir / "orders-0", 12) == kept, broker.data_dir


def _ten_acknowledged_by_all(cluster: Cluster) -> dict[str, object]:
    """Records r0..r9 acknowledged (acks=all) by the three replicas of orders-0, led by
    broker 0; the producer's config."""
    cluster.create_topic("orders", (0, 1, 2))
    config = {"bootstrap.servers": cluster.broker(0).address, "acks": "all", "linger.ms": 0}
    with Producer(config) as producer:
        sent = [producer.send("orders", b"r%d" % i, partition=0) for i in range(10)]
    assert [future.result().offset for future in sent] == list(range(10))
    return config


def _left_alone_in_sync(cluster: Cluster, config: dict[str, object], value: bytes) -> None:
    """With its followers paused, broker 0 takes ``value`` at offset 10 (acks=1) and
    shrinks the ISR of orders-0 to itself."""
    with Producer({**config, "acks": "1"}) as producer:
        assert producer.send("orders", value, partition=0).result().offset == 10
    wait_for(lambda: cluster.state("orders").isr == (0,), "the ISR to shrink to the leader")


def _files(directory: Path) -> dict[str, bytes]:
    return {path.name: path.read_bytes() for path in sorted(directory.glob("*.log"))}


def test_a_slow_topic_change_is_not_asked_of_a_second_broker(
    replicated_brokers: ClusterFactory,
) -> None:
    """Brokers that share one store take a topic change at any one of them: one held up
    (here by the store's lock on the new topic, as another broker changing it would
    hold it) is waited for, not doubled at the next broker after the client's hedge,
    which would find the topic the first just made and answer TOPIC_ALREADY_EXISTS
    to the very client that made it (seen creating 2,000 partitions)."""
    cluster = replicated_brokers(2, METRICS)
    first, second = (metrics_address(broker.output) for broker in cluster.brokers)
    creating = {"grpc_service": "AdminService", "method": "CreateTopics"}

    def asked(address: str) -> float:
        """CreateTopics calls the broker is handling or has answered, with any code."""
        metrics = scrape(address)
        answered = sum(
            count
            for labels, count in metrics.labelled("tierlog_requests_total").items()
            if set(creating.items()) <= labels
        )
        return metrics.value("tierlog_requests_in_flight", **creating) + answered

    servers = {"bootstrap.servers": cluster.servers}
    with AdminClient(servers) as admin, ThreadPoolExecutor(1) as pool:
        with exclusive_lock(cluster.state_dir / "topics" / "held.json.lock"):
            created = pool.submit(admin.create_topic, "held", 1, replication_factor=2)
            wait_for(lambda: asked(first) == 1, "the CreateTopics at the first broker")
            # The client would have asked the second broker after its hedge.
            time.sleep(3 * admin.cluster.hedge_after_s)
            assert asked(second) == 0
        created.result(timeout=60)
    assert (asked(first), asked(second)) == (1, 0)
    assert sorted(cluster.store.read_topic("held")[0].replicas) == [0, 1]
