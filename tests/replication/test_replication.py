"""Replication between real brokers: followers copy the leader's bytes, acks=all waits for
the ISR, consumers read below the high watermark, and a follower whose log diverged is
cut back by leader epoch (KIP-101) before it copies again."""

from __future__ import annotations

import os
import signal
import time
from typing import cast

import grpc
import pytest

from tests.sidecar.conftest import Sidecar, reason_of
from tests.storage.transactions import txn_batch
from tests.support.scrape import METRICS, metrics_address, scrape
from tierlog.api.v1 import log_service_pb2
from tierlog.storage.records import SimpleRecord, build_batch, decode_records, iter_batches

from .conftest import Cluster, ClusterFactory, wait_for

TOPIC = "orders"


def _batch(*values: bytes) -> bytes:
    now = int(time.time() * 1000)
    return build_batch([SimpleRecord(None, value, now, ()) for value in values])


def _produce(
    broker: Sidecar,
    data: bytes,
    acks: log_service_pb2.Acks.ValueType = log_service_pb2.ACKS_ALL,
    timeout_s: float = 20,
) -> log_service_pb2.ProduceResponse:
    response: log_service_pb2.ProduceResponse = broker.log.Produce(
        log_service_pb2.ProduceRequest(topic=TOPIC, partition=0, acks=acks, record_batches=data),
        timeout=timeout_s,
    )
    return response


def _values(broker: Sidecar, offset: int = 0) -> list[bytes]:
    fetched = broker.log.Fetch(
        log_service_pb2.FetchRequest(topic=TOPIC, partition=0, offset=offset), timeout=10
    )
    data = fetched.record_batches
    return [r.value or b"" for h in iter_batches(data) for r in decode_records(data, h)]


def _segments(broker: Sidecar) -> dict[str, bytes]:
    directory = broker.data_dir / f"{TOPIC}-0"
    return {path.name: path.read_bytes() for path in sorted(directory.glob("*.log"))}


def _end(broker: Sidecar) -> int:
    return sum(
        header.last_offset + 1 - header.base_offset
        for data in _segments(broker).values()
        for header in iter_batches(data)
    )


def _caught_up(follower: Sidecar, end: int) -> None:
    wait_for(lambda: _end(follower) == end, f"{follower.data_dir.name} to reach offset {end}")


@pytest.fixture
def cluster(replicated_brokers: ClusterFactory) -> Cluster:
    cluster = replicated_brokers(3, "replica.lag.time.max.ms=2000", "log.segment.bytes=2000")
    cluster.create_topic(TOPIC, (0, 1, 2))
    return cluster


def test_followers_hold_the_leaders_segment_files_byte_for_byte(cluster: Cluster) -> None:
    leader = cluster.broker(0)
    offsets = [_produce(leader, _batch(b"v%03d" % i, b"w%03d" % i)).base_offset for i in range(100)]
    assert offsets == list(range(0, 200, 2))
    assert len(_segments(leader)) > 3  # rolled at 2000 bytes: several segments to compare
    for follower in (cluster.broker(1), cluster.broker(2)):
        _caught_up(follower, 200)
        assert _segments(follower) == _segments(leader)
    assert _values(leader)[:2] == [b"v000", b"w000"]


def test_only_the_leader_serves_and_a_follower_names_it(cluster: Cluster) -> None:
    with pytest.raises(grpc.RpcError) as refused:
        _produce(cluster.broker(1), _batch(b"x"))
    assert reason_of(refused.value) == "NOT_LEADER_OR_FOLLOWER"
    trailing = dict(cast(grpc.Call, refused.value).trailing_metadata() or ())
    assert trailing["tierlog-leader"] == f"0@{cluster.broker(0).address}"


def test_acks_all_waits_for_the_isr_and_consumers_read_only_below_the_high_watermark(
    cluster: Cluster,
) -> None:
    leader = cluster.broker(0)
    _produce(leader, _batch(b"a"))
    stopped = [cluster.broker(1).process.pid, cluster.broker(2).process.pid]
    for pid in stopped:
        os.kill(pid, signal.SIGSTOP)
    try:
        # acks=1 lands on the leader alone: not committed, so not readable yet.
        written = _produce(leader, _batch(b"b"), acks=log_service_pb2.ACKS_LEADER)
        assert written.base_offset == 1
        assert _values(leader) == [b"a"]
        # acks=all waits until the stopped followers leave the ISR (2 s of lag), then
        # the leader alone is the ISR and both records are committed.
        started = time.monotonic()
        _produce(leader, _batch(b"c"))
        assert time.monotonic() - started > 1.0
        assert cluster.state(TOPIC).isr == (0,)
        assert _values(leader) == [b"a", b"b", b"c"]
    finally:
        for pid in stopped:
            os.kill(pid, signal.SIGCONT)
    # Back, they catch up and rejoin the ISR.
    wait_for(lambda: cluster.state(TOPIC).isr == (0, 1, 2), "the ISR to grow back")
    assert _segments(cluster.broker(1)) == _segments(leader)


def test_a_produce_stream_appends_while_an_earlier_request_waits_for_the_isr(
    replicated_brokers: ClusterFactory,
) -> None:
    # Followers that neither lag out of the ISR nor lose their lease while stopped: the
    # first request's answer waits for them for as long as they are stopped.
    cluster = replicated_brokers(
        3, "replica.lag.time.max.ms=60000", "broker.session.timeout.ms=60000"
    )
    cluster.create_topic(TOPIC, (0, 1, 2))
    leader = cluster.broker(0)
    _produce(leader, _batch(b"a"))
    _caught_up(cluster.broker(1), 1)
    _caught_up(cluster.broker(2), 1)
    stopped = [cluster.broker(1).process.pid, cluster.broker(2).process.pid]
    for pid in stopped:
        os.kill(pid, signal.SIGSTOP)
    requests = [
        log_service_pb2.ProduceStreamRequest(
            produce=log_service_pb2.ProduceRequest(
                topic=TOPIC, partition=0, acks=log_service_pb2.ACKS_ALL, record_batches=data
            )
        )
        for data in (_batch(b"b"), _batch(b"c", b"d"))
    ]
    try:
        answers = leader.log.ProduceStream(iter(requests), timeout=60)
        # The second request is in the leader's log while the first still waits.
        wait_for(lambda: _end(leader) == 4, "the second request to be appended")
    finally:
        for pid in stopped:
            os.kill(pid, signal.SIGCONT)
    produced = [answer.produced for answer in answers]
    assert [(p.base_offset, p.last_offset) for p in produced] == [(1, 1), (2, 3)]
    assert _values(leader) == [b"a", b"b", b"c", b"d"]


def test_acks_all_is_refused_below_min_insync_replicas(
    replicated_brokers: ClusterFactory,
) -> None:
    cluster = replicated_brokers(
        3, "replica.lag.time.max.ms=1000", "min.insync.replicas=2", METRICS
    )
    cluster.create_topic(TOPIC, (0, 1, 2))
    leader = cluster.broker(0)
    _produce(leader, _batch(b"a"))
    cluster.broker(1).kill()
    cluster.broker(2).kill()
    # Followers that hold the leader's whole log stay in sync however long they are
    # silent (as in Kafka: the controller fences dead brokers); one more record and
    # they lag.
    assert _produce(leader, _batch(b"b"), acks=log_service_pb2.ACKS_LEADER).base_offset == 1
    wait_for(lambda: cluster.state(TOPIC).isr == (0,), "the ISR to shrink to the leader")
    # The leader applies the shrink once its write to the store returns (as Kafka's does
    # once the controller answers): wait for its own view, which the check reads.
    wait_for(lambda: _under_min_isr(leader) == 1, "the leader to see its ISR shrink")
    with pytest.raises(grpc.RpcError) as refused:
        _produce(leader, _batch(b"c"))
    assert reason_of(refused.value) == "NOT_ENOUGH_REPLICAS"
    cluster.broker(1).start()
    wait_for(lambda: cluster.state(TOPIC).isr == (0, 1), "broker 1 to rejoin the ISR")
    wait_for(lambda: _under_min_isr(leader) == 0, "the leader to see broker 1 rejoin")
    assert _produce(leader, _batch(b"d")).base_offset == 2
    assert _values(leader) == [b"a", b"b", b"d"]


def test_a_deposed_leaders_divergent_tail_is_cut_by_leader_epoch(
    replicated_brokers: ClusterFactory,
) -> None:
    """KIP-101: broker 0 leads epoch 0 and appends records only it has (acks=1, its
    followers down); it dies; broker 1 leads epoch 1 and takes other records at the
    same offsets; broker 0 comes back as a follower: its tail is cut where epoch 0 ended
    in broker 1's log, and it then holds broker 1's bytes (and its epochs: no preferred
    leader election moves the leadership back to broker 0 meanwhile)."""
    cluster = replicated_brokers(3, "auto.leader.rebalance.enable=false")
    cluster.create_topic(TOPIC, (0, 1, 2))
    old, new = cluster.broker(0), cluster.broker(1)
    _produce(old, _batch(b"a"))
    wait_for(lambda: _end(new) == 1 and _end(cluster.broker(2)) == 1, "followers to copy a")
    # Killed, not stopped: a stopped follower may still read what the leader had sent it.
    for follower in (new, cluster.broker(2)):
        follower.kill()
    _produce(old, _batch(b"lost-1"), acks=log_service_pb2.ACKS_LEADER)
    _produce(old, _batch(b"lost-2"), acks=log_service_pb2.ACKS_LEADER)
    old.kill()
    state = cluster.state(TOPIC)
    # Broker 1 alone in the ISR: as a restarted broker it then keeps the leadership (it
    # has nobody in sync to hand it to).
    cluster.store.alter_partition(TOPIC, 0, state.partition_epoch, state.with_leader(1, (1,)))
    for follower in (new, cluster.broker(2)):
        follower.start()
    cluster.wait_until_applied(TOPIC)  # until then broker 1 names broker 0, or nobody
    assert _produce(new, _batch(b"b")).base_offset == 1
    assert _produce(new, _batch(b"c")).base_offset == 2
    old.start()
    wait_for(lambda: _end(old) == 3 and _segments(old) == _segments(new), "broker 0 to converge")
    assert cluster.read_values(TOPIC, 3) == [b"a", b"b", b"c"]
    epochs = (old.data_dir / f"{TOPIC}-0" / "leader-epoch-checkpoint").read_text()
    assert epochs == (new.data_dir / f"{TOPIC}-0" / "leader-epoch-checkpoint").read_text()
    assert epochs.splitlines()[2:] == ["0 0", "1 1"]


def test_the_high_watermark_survives_a_restart_in_its_checkpoint(cluster: Cluster) -> None:
    leader = cluster.broker(0)
    for value in (b"a", b"b", b"c"):
        _produce(leader, _batch(value))
    assert leader.stop() == 0
    checkpoint = leader.data_dir / "replication-offset-checkpoint"
    assert f"{TOPIC} 0 3" in checkpoint.read_text().splitlines()


def test_read_committed_stops_at_a_replicated_open_transaction(cluster: Cluster) -> None:
    """The last stable offset on a leader: the first offset of the open transaction, which
    every in-sync replica holds; read_uncommitted reads on to the high watermark."""
    leader = cluster.broker(0)
    _produce(leader, _batch(b"a"))
    opened = _produce(leader, txn_batch(producer_id=5, sequence=0, count=2))
    _produce(leader, _batch(b"b"))
    committed = leader.log.Fetch(
        log_service_pb2.FetchRequest(
            topic=TOPIC, isolation_level=log_service_pb2.ISOLATION_LEVEL_READ_COMMITTED
        ),
        timeout=10,
    )
    data = committed.record_batches
    assert [r.value for h in iter_batches(data) for r in decode_records(data, h)] == [b"a"]
    assert committed.last_stable_offset == opened.base_offset == 1
    assert committed.high_watermark == 4
    assert len(_values(leader)) == 4
    latest = leader.log.ListOffsets(
        log_service_pb2.ListOffsetsRequest(
            topic=TOPIC,
            timestamp_ms=-1,
            isolation_level=log_service_pb2.ISOLATION_LEVEL_READ_COMMITTED,
        )
    )
    assert latest.offset == 1


def _under_min_isr(broker: Sidecar) -> float:
    """How many partitions ``broker`` leads below ``min.insync.replicas`` by its
    leaderships' own ISRs, which its acks=all check reads (Metadata and DescribeTopics
    name the newest state it read, which can be ahead of what its leadership applied)."""
    return scrape(metrics_address(broker.output)).value("tierlog_under_min_isr_partitions")
