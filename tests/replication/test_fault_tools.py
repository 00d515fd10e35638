"""The fault run's tools on three real replicas (issue 18, step 5): workers in their own
processes record a history while a follower is paused with SIGSTOP and killed with
``kill -9`` (each until the ISR has dropped it) and started again; once the brokers
stop, every replica's files are read back with their checkpointed high watermarks. The
replicas hold the same batches below the lowest of them, and the history checks clean.

Only a broker that leads nothing is hit: no controller runs in these brokers yet, so a
leader's fault would stop its partitions for good. Leader faults belong to the fault run
proper, once the controller elects (step 3). And clients find partitions by the
brokers' Metadata, which names each partition's hashed owner until topics are wired to
the partition-state store (step 4): the test makes that owner the leader, as the
controller would."""

from __future__ import annotations

import signal
from collections.abc import Callable
from pathlib import Path

import pytest

from tests.support.fault_workers import start_worker, wait_for_events
from tests.support.history import HistoryRecorder, Ok, Read, availability, check, load_history
from tests.support.process_faults import kill_9, paused
from tests.support.replica_dirs import (
    checkpointed_high_watermark,
    compare_replica_dirs,
    read_values,
)
from tierlog.client import AdminClient
from tierlog.storage.errors import UnknownTopicOrPartitionError

from .conftest import Cluster, ClusterFactory, wait_for

pytestmark = pytest.mark.slow

TOPIC, PARTITIONS = "history", 2
LAG_MS = 1000  # replica.lag.time.max.ms: a follower silent this long leaves the ISR
AVAILABILITY_BOUND_S = 20.0
PRODUCER_CONFIGS = ("request.timeout.ms=5000", "delivery.timeout.ms=120000", "linger.ms=5")


def _lead_where_metadata_points(cluster: Cluster, servers: str) -> list[int]:
    """Each partition led by the broker Metadata names for it (a new leader epoch where
    that is not the first replica); returns the leaders."""
    admin = AdminClient({"bootstrap.servers": servers})

    def known() -> bool:
        try:
            return len(admin.metadata([TOPIC]).leaders[TOPIC]) == PARTITIONS
        except UnknownTopicOrPartitionError:  # not picked up from the store yet
            return False

    try:
        wait_for(known, "brokers to learn the topic")
        leaders = list(admin.metadata([TOPIC]).leaders[TOPIC])
    finally:
        admin.close()
    for partition, leader in enumerate(leaders):
        state = cluster.state(TOPIC, partition)
        if state.leader != leader:
            cluster.store.alter_partition(
                TOPIC, partition, state.partition_epoch, state.with_leader(leader)
            )
    return leaders


def _wait_for_isr(cluster: Cluster, holds: Callable[[tuple[int, ...]], bool], what: str) -> None:
    for partition in range(PARTITIONS):
        wait_for(
            lambda p=partition: holds(cluster.state(TOPIC, p).isr),  # type: ignore[misc]
            f"partition {partition}'s ISR {what}",
        )


def test_replicas_agree_and_the_history_checks_after_follower_faults(
    tmp_path: Path, replicated_brokers: ClusterFactory
) -> None:
    cluster = replicated_brokers(3, f"replica.lag.time.max.ms={LAG_MS}")
    cluster.create_topic(TOPIC, (0, 1, 2), PARTITIONS)
    servers = cluster.broker(0).address
    leaders = _lead_where_metadata_points(cluster, servers)
    victim = min(set(range(3)) - set(leaders))
    history = tmp_path / "history"
    history.mkdir()
    workers = [
        start_worker("produce", "producer-1", history, servers, TOPIC, configs=PRODUCER_CONFIGS),
        start_worker("produce", "producer-2", history, servers, TOPIC, configs=PRODUCER_CONFIGS),
        start_worker("consume", "consumer-1", history, servers, TOPIC, PARTITIONS),
    ]
    try:
        with HistoryRecorder(history, "nemesis") as nemesis:
            wait_for_events(history, workers, 200)
            with paused(cluster.broker(victim).process.pid):
                nemesis.fault("SIGSTOP", f"broker-{victim}")
                _wait_for_isr(cluster, lambda isr: victim not in isr, "to shrink")
            wait_for_events(history, workers, 200)
            kill_9(cluster.broker(victim).process.pid)
            nemesis.fault("kill -9", f"broker-{victim}")
            cluster.broker(victim).process.wait()
            _wait_for_isr(cluster, lambda isr: victim not in isr, "to shrink")
            wait_for_events(history, workers, 200)
            cluster.broker(victim).start()
            _wait_for_isr(cluster, lambda isr: set(isr) == {0, 1, 2}, "to be whole again")
            wait_for_events(history, workers, 200)
    finally:
        for worker in workers:
            worker.send_signal(signal.SIGTERM)
        exits = [worker.wait(timeout=60) for worker in workers]
    assert exits == [0, 0, 0]
    for broker in cluster.brokers:
        assert broker.stop() == 0

    with HistoryRecorder(history, "final") as final:
        for partition in range(PARTITIONS):
            dirs = [broker.data_dir / f"{TOPIC}-{partition}" for broker in cluster.brokers]
            high_watermarks = [
                checkpointed_high_watermark(broker.data_dir, TOPIC, partition)
                for broker in cluster.brokers
            ]
            assert min(high_watermarks) > 0
            difference = compare_replica_dirs(dirs, min(high_watermarks))
            assert difference is None, str(difference)
            for node, (directory, high_watermark) in enumerate(
                zip(dirs, high_watermarks, strict=True)
            ):
                records = read_values(directory, upto_offset=2**63)
                final.final_read(f"broker-{node}", partition, high_watermark, records)

    events = load_history(history)
    violations = check(events)
    assert not violations, "\n".join(map(str, violations))
    assert any(isinstance(event, Read) for event in events)
    seconds = [outage.seconds for outage in availability(events)]
    assert all(s is not None and s < AVAILABILITY_BOUND_S for s in seconds), seconds
    acknowledged = sum(isinstance(event, Ok) for event in events)
    print(f"\n{acknowledged} acknowledged; back after each fault in {seconds} s")
