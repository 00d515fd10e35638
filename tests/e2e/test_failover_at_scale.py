"""Issue 32's failover at scale: a 3-broker ``tierlog cluster up`` holding 2,000
partitions of replication factor 3 (``min.insync.replicas=2``) loses a broker that leads a
third of them to ``kill -9`` while idempotent ``acks=all`` producers, each a process of
its own, write to every partition by turn and record a history. The controllers must
move every partition it led (each leader change is a write to the partition-state
store: the cost that grows with the partitions), the partitions it led must acknowledge
``acks=all`` records again, and once the survivors stop the history checker
(``tests.support.history``) finds every acknowledged record at its offset, nothing
twice, and each partition's committed log a gap-free run of offsets from 0.

Processes on loopback, no Kubernetes node; it is here, marked ``e2e``, for its length:
about 4 minutes on the shared 2-core machine (creating 6,000 replicas is most of it), too
long for the unit stage.
"""

from __future__ import annotations

import contextlib
import signal
import time
from pathlib import Path

import pytest

from tests.replication.conftest import wait_for
from tests.support.fault_workers import start_worker, wait_for_events
from tests.support.history import FinalRead, HistoryRecorder, Invoke, Ok, check, load_history
from tests.support.local_cluster import running_cluster
from tests.support.replica_dirs import record_final_reads
from tierlog.api.errors import TopicAlreadyExistsError
from tierlog.cli.local_cluster import STATE_DIR, read_cluster, stop_broker
from tierlog.client import AdminClient
from tierlog.partition_state.local_store import LocalStateStore

pytestmark = pytest.mark.e2e

TOPIC, PARTITIONS, BROKERS = "wide", 2_000, 3
PRODUCER_CONFIGS = ("request.timeout.ms=10000", "delivery.timeout.ms=300000", "linger.ms=5")
PRODUCERS = 2
# Creating 2,000 partitions, every leader elected and every broker opening its 2,000
# replicas (about 90 s at a load average of 15); then every partition moved off the dead
# broker and writable again (issue 32's bench measured 16 s and 26 s at the default 9 s
# lease under a load average of 14), on a machine that acknowledges a few records a second
# across 2,000 partitions when other jobs load it.
CLUSTER_READY_S = 300
CREATE_TIMEOUT_MS = CLUSTER_READY_S * 1000
FAILOVER_S = 300
ACKS_BEFORE_THE_KILL = 200
ACKS_ON_MOVED_PARTITIONS = 50  # sent after the kill to partitions the dead broker led
STOP_GRACE_S = 120  # 2,000 partitions' controlled shutdown on a loaded machine
POLL_S = 0.5  # a look reads 2,000 partitions' state, or the whole history


def _leaders(store: LocalStateStore) -> list[int]:
    return [state.leader for state in store.read_topic(TOPIC).values()]


def _acknowledged_after(history: Path, invoked_after_ns: int, partitions: set[int]) -> int:
    """How many produces to ``partitions`` invoked after ``invoked_after_ns`` were
    acknowledged so far."""
    events = load_history(history)
    invoked_ns = {event.value: event.time_ns for event in events if isinstance(event, Invoke)}
    return sum(
        isinstance(event, Ok)
        and event.partition in partitions
        and invoked_ns[event.value] > invoked_after_ns
        for event in events
    )


def test_kill_9_of_a_broker_leading_a_third_of_2000_partitions_loses_nothing_acknowledged(
    tmp_path: Path,
) -> None:
    directory = tmp_path / "cluster"
    history = tmp_path / "history"
    history.mkdir()
    # broker.session.timeout.ms at its default (9 s): shorter, a broker busy opening its
    # 2,000 replicas on a machine at a load average of 40 missed a renewal and was fenced.
    with running_cluster(directory, BROKERS):
        cluster = read_cluster(directory)
        store = LocalStateStore(directory / STATE_DIR)
        # One CreateTopics of 6,000 replicas takes minutes on a loaded machine. The client
        # asks one broker at a time (a topic change is not hedged), but a call that outlives
        # its deadline at one broker is retried at the next, which is told the topic is
        # there: made by this call, the only one that creates it. (A call was seen to end
        # after about 180 s at a 300 s timeout; the cause is not known yet.)
        with (
            AdminClient(cluster.servers.split(","), request_timeout_ms=CREATE_TIMEOUT_MS) as admin,
            contextlib.suppress(TopicAlreadyExistsError),
        ):
            admin.create_topic(
                TOPIC, PARTITIONS, {"min.insync.replicas": "2"}, replication_factor=BROKERS
            )
        wait_for(lambda: min(_leaders(store)) >= 0, "every partition led", CLUSTER_READY_S, POLL_S)
        workers = [
            start_worker(
                "produce",
                f"producer-{n}",
                history,
                cluster.servers,
                TOPIC,
                configs=PRODUCER_CONFIGS,
                spread_over=PARTITIONS,
            )
            for n in range(PRODUCERS)
        ]
        try:
            # Under load at the moment of the kill: every broker's partitions acknowledge.
            wait_for_events(history, workers, ACKS_BEFORE_THE_KILL, timeout_s=CLUSTER_READY_S)
            led = _leaders(store)
            victim = max(range(BROKERS), key=led.count)  # a third of them at least
            moved = {partition for partition, leader in enumerate(led) if leader == victim}
            with HistoryRecorder(history, "nemesis") as nemesis:
                stop_broker(directory, victim, signum=signal.SIGKILL)
                nemesis.fault("kill -9", f"broker-{victim}")
                killed_ns = time.monotonic_ns()
            wait_for(
                lambda: all(leader not in (victim, -1) for leader in _leaders(store)),
                f"every partition led by another broker than {victim}",
                FAILOVER_S,
                POLL_S,
            )
            led_again_s = (time.monotonic_ns() - killed_ns) / 1e9
            wait_for(
                lambda: _acknowledged_after(history, killed_ns, moved) >= ACKS_ON_MOVED_PARTITIONS,
                f"{ACKS_ON_MOVED_PARTITIONS} acknowledgements from the new leaders",
                FAILOVER_S,
                POLL_S,
            )
        finally:
            for worker in workers:
                worker.send_signal(signal.SIGTERM)
            exits = [worker.wait(timeout=120) for worker in workers]
        assert exits == [0] * PRODUCERS
        survivors = [b for b in cluster.brokers if b.node_id != victim]
        for broker in survivors:  # a clean stop writes the high watermarks down
            said: list[str] = []
            stop_broker(directory, broker.node_id, grace_s=STOP_GRACE_S, say=said.append)
            assert not any("SIGKILL" in line for line in said), said
    # Every partition that acknowledged a record is read (one that acknowledged none may
    # hold nothing committed).
    acknowledged_in = {event.partition for event in load_history(history) if isinstance(event, Ok)}
    record_final_reads(
        history, [Path(b.data_dir) for b in survivors], TOPIC, sorted(acknowledged_in)
    )

    events = load_history(history)
    violations = check(events)
    assert not violations, "\n".join(map(str, violations[:20]))
    finals = [event for event in events if isinstance(event, FinalRead)]
    assert len(finals) == len(survivors) * len(acknowledged_in)
    gapped = [
        (final.replica, final.partition)
        for final in finals
        if sorted(final.committed()) != list(range(final.high_watermark))
    ]
    assert not gapped, gapped[:20]
    acknowledged = sum(isinstance(event, Ok) for event in events)
    print(
        f"\n{acknowledged} acknowledged in {len(acknowledged_in)} partitions; "
        f"broker {victim}, leading {len(moved)}, killed; all led again within {led_again_s:.1f} s"
    )
