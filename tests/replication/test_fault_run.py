"""The fault run (issue 18), in the spirit of Jepsen: three real brokers replicating a
topic (RF 3, ``min.insync.replicas=2``) while idempotent acks=all producers and a
consumer, each a process of its own, record a history, and a nemesis hits the leader of
partition 0 with ``kill -9``, a SIGSTOP longer than its lease, a network cut (through
the TCP fault proxy every broker is reached by, clients and replicas alike), and wipes
a follower's data dir. After the brokers stop, Kafka's ``DumpLogSegments`` checks every
replica's segments and indexes, the replicas' files are compared below the lowest
checkpointed high watermark, and the whole history is checked: every
acknowledged record readable exactly once at its offset, no read record vanished, no
duplicates, and writes acknowledged again within a bound after each fault.

One round of each fault runs in ``make test``; ``TIERLOG_FAULT_ROUNDS=50 pytest
tests/replication/test_fault_run.py -s`` is the soak (results in docs/BENCHMARKS.md).
"""

from __future__ import annotations

import contextlib
import os
import re
import shutil
import signal
import time
from collections.abc import Callable, Iterator
from datetime import datetime
from pathlib import Path

import pytest

from tests.interop.kafka import dump_log_segments, segment_files
from tests.support.fault_workers import start_worker, wait_for_events
from tests.support.history import Fault as FaultEvent
from tests.support.history import (
    HistoryRecorder,
    Ok,
    Read,
    availability,
    check,
    load_history,
)
from tests.support.process_faults import kill_9
from tests.support.replica_dirs import record_final_reads
from tierlog.client import AdminClient

from .conftest import Cluster, ClusterFactory, wait_for

TOPIC, PARTITIONS = "history", 2
SESSION_MS = 2000  # broker.session.timeout.ms: a silent leader is replaced after this
LAG_MS = 1500  # replica.lag.time.max.ms
# From a fault to the next acknowledged produce: a lease, an election, the clients'
# back-off and metadata refresh, on a shared 2-core machine; or the cut itself (3 s).
AVAILABILITY_BOUND_S = 30.0
PRODUCER_CONFIGS = ("request.timeout.ms=5000", "delivery.timeout.ms=120000", "linger.ms=5")
Fault = Callable[[Cluster, HistoryRecorder], None]


def _leader(cluster: Cluster) -> int:
    wait_for(lambda: cluster.state(TOPIC).leader >= 0, "partition 0 to have a leader", 60)
    return cluster.state(TOPIC).leader


def _whole_again(cluster: Cluster, partitions: int = PARTITIONS) -> None:
    for partition in range(partitions):
        wait_for(
            lambda p=partition: len(cluster.state(TOPIC, p).isr) == 3,  # type: ignore[misc]
            f"partition {partition}'s ISR to be whole again",
            120,
        )


def kill_the_leader(cluster: Cluster, nemesis: HistoryRecorder) -> None:
    victim = _leader(cluster)
    kill_9(cluster.broker(victim).process.pid)
    nemesis.fault("kill -9 leader", f"broker-{victim}")
    cluster.broker(victim).process.wait()
    wait_for(lambda: cluster.state(TOPIC).leader not in (victim, -1), "a new leader", 60)
    cluster.broker(victim).start()


def pause_the_leader(cluster: Cluster, nemesis: HistoryRecorder) -> None:
    """Stopped past its lease: it is replaced while it still believes it leads, and
    must learn that before it acknowledges anything again."""
    victim = _leader(cluster)
    with cluster.paused(victim):
        nemesis.fault("SIGSTOP leader", f"broker-{victim}")
        wait_for(
            lambda: cluster.state(TOPIC).leader != victim, "the paused leader's replacement", 60
        )


def cut_off_the_leader(cluster: Cluster, nemesis: HistoryRecorder) -> None:
    """Nobody reaches it for 3 s (it still reaches the store: its lease holds, and it
    shrinks its ISR to itself, where min.insync.replicas=2 refuses acks=all)."""
    assert cluster.proxy is not None
    victim = _leader(cluster)
    cluster.proxy.cut(f"broker-{victim}")
    nemesis.fault("cut leader", f"broker-{victim}")
    time.sleep(3)  # the fault's length, not a wait for anything
    cluster.proxy.heal(f"broker-{victim}")


def wipe_a_follower(cluster: Cluster, nemesis: HistoryRecorder) -> None:
    state = cluster.state(TOPIC)
    victim = next(replica for replica in state.replicas if replica != state.leader)
    broker = cluster.broker(victim)
    kill_9(broker.process.pid)
    broker.process.wait()
    shutil.rmtree(broker.data_dir)
    nemesis.fault("wiped follower", f"broker-{victim}")
    broker.start()


FAULTS: tuple[Fault, ...] = (kill_the_leader, pause_the_leader, cut_off_the_leader, wipe_a_follower)


def test_every_acknowledged_record_survives_leader_faults_and_a_wiped_follower(
    tmp_path: Path, replicated_brokers: ClusterFactory
) -> None:
    rounds = int(os.environ.get("TIERLOG_FAULT_ROUNDS", len(FAULTS)))
    cluster = replicated_brokers(
        3,
        f"broker.session.timeout.ms={SESSION_MS}",
        f"replica.lag.time.max.ms={LAG_MS}",
        proxied=True,
    )
    with AdminClient(cluster.servers.split(",")) as admin:
        admin.create_topic(TOPIC, PARTITIONS, {"min.insync.replicas": "2"}, replication_factor=3)
    servers = cluster.servers
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
            for round_ in range(rounds):
                FAULTS[round_ % len(FAULTS)](cluster, nemesis)
                _whole_again(cluster)
                wait_for_events(history, workers, 100)
    finally:
        for worker in workers:
            worker.send_signal(signal.SIGTERM)
        exits = [worker.wait(timeout=120) for worker in workers]
    assert exits == [0, 0, 0]
    for broker in cluster.brokers:
        assert broker.stop() == 0

    # Kafka's own tool finds every replica's segments and indexes valid.
    every = [b.data_dir / f"{TOPIC}-{p}" for b in cluster.brokers for p in range(PARTITIONS)]
    files = [path for directory in every for path in segment_files(directory)]
    kafka = dump_log_segments(files, "--print-data-log", "--verify-index-only")
    kafka.extend(
        dump_log_segments([f for f in files if f.suffix != ".log"], "--index-sanity-check")
    )
    assert kafka.errors == [], kafka.errors[:20]

    record_final_reads(history, [b.data_dir for b in cluster.brokers], TOPIC, range(PARTITIONS))

    events = load_history(history)
    violations = check(events)
    assert not violations, "\n".join(map(str, violations))
    assert any(isinstance(event, Read) for event in events)
    outages = availability(events)
    seconds = [outage.seconds for outage in outages]
    assert len(outages) == rounds
    assert all(s is not None and s < AVAILABILITY_BOUND_S for s in seconds), seconds
    acknowledged = sum(isinstance(event, Ok) for event in events)
    back = [(outage.fault.kind, outage.seconds) for outage in outages]
    print(f"\n{rounds} faults, {acknowledged} acknowledged; back after {back}")


# From the controller's change to the first acknowledgement after it (issue 29): the
# producer's metadata check while a request waits, the move and the new leader's append.
ACKS_AFTER_ELECTION_S = 1.5
_CONTROLLER_LINE = re.compile(
    r"^(\S+ \S+) INFO tierlog\.controller\.changes "
    r"(?:Elected leader \d+ for|Changed the ISR of) partition (\S+)-(\d+)",
    re.MULTILINE,
)


def _controller_changes_ns(cluster: Cluster, since_ns: int) -> dict[int, int]:
    """Each partition of TOPIC's first change by a controller after ``since_ns`` (on the
    monotonic clock the history uses), read off the controllers' own log lines."""
    wall_minus_monotonic_ns = time.time_ns() - time.monotonic_ns()
    changes: dict[int, int] = {}
    for broker in cluster.brokers:
        for stamp, topic, partition in _CONTROLLER_LINE.findall(broker.output):
            wall = datetime.strptime(stamp, "%Y-%m-%d %H:%M:%S,%f").timestamp()
            at_ns = int(wall * 1e9) - wall_minus_monotonic_ns
            if topic == TOPIC and at_ns > since_ns:
                changes[int(partition)] = min(changes.get(int(partition), at_ns), at_ns)
    return changes


def _paused_for_the_block(
    cluster: Cluster, node_id: int
) -> contextlib.AbstractContextManager[None]:
    return cluster.paused(node_id)


@contextlib.contextmanager
def _killed_for_the_block(cluster: Cluster, node_id: int) -> Iterator[None]:
    broker = cluster.broker(node_id)
    kill_9(broker.process.pid)
    broker.process.wait()
    try:
        yield
    finally:
        broker.start()


@pytest.mark.parametrize(
    ("fault_kind", "while_down"),
    [("SIGSTOP leader", _paused_for_the_block), ("kill -9 leader", _killed_for_the_block)],
    ids=["SIGSTOP", "kill-9"],
)
def test_acks_resume_within_1_5_s_of_the_election_when_the_first_bootstrap_server_leading_fails(
    tmp_path: Path,
    replicated_brokers: ClusterFactory,
    fault_kind: str,
    while_down: Callable[[Cluster, int], contextlib.AbstractContextManager[None]],
) -> None:
    """At the default settings (``broker.session.timeout.ms`` 9 s, ``request.timeout.ms``
    30 s): broker 0, the first bootstrap server and a partition's leader, is stopped
    with SIGSTOP (or killed); the controller elects a new leader one lease later and
    drops broker 0 from the other ISRs. Every partition is acknowledged again within
    1.5 s of that change: the producer does not wait out its requests to the silent
    broker, nor ask it for metadata first; and nothing acknowledged is lost or stored
    twice (issue 29)."""
    partitions = 3
    cluster = replicated_brokers(3)
    with AdminClient(cluster.servers.split(",")) as admin:
        admin.create_topic(TOPIC, partitions, {"min.insync.replicas": "2"}, replication_factor=3)
    victim = 0
    assert cluster.servers.split(",")[0] == cluster.broker(victim).address
    led = [p for p in range(partitions) if cluster.state(TOPIC, p).leader == victim]
    assert led, "broker 0 leads a partition"
    history = tmp_path / "history"
    history.mkdir()
    workers = [start_worker("produce", "producer-1", history, cluster.servers, TOPIC)]
    try:
        with HistoryRecorder(history, "nemesis") as nemesis:
            wait_for_events(history, workers, 200)
            with while_down(cluster, victim):
                nemesis.fault(fault_kind, f"broker-{victim}")
                for partition in led:
                    wait_for(
                        lambda p=partition: cluster.state(TOPIC, p).leader != victim,  # type: ignore[misc]
                        "the paused leader's replacement",
                        60,
                    )
                wait_for_events(history, workers, 200)
            _whole_again(cluster, partitions)
            wait_for_events(history, workers, 100)
    finally:
        for worker in workers:
            worker.send_signal(signal.SIGTERM)
        exits = [worker.wait(timeout=120) for worker in workers]
    assert exits == [0]
    for broker in cluster.brokers:
        assert broker.stop() == 0
    record_final_reads(history, [b.data_dir for b in cluster.brokers], TOPIC, range(partitions))

    events = load_history(history)
    violations = check(events)
    assert not violations, "\n".join(map(str, violations))
    (fault,) = [event for event in events if isinstance(event, FaultEvent)]
    changes_ns = _controller_changes_ns(cluster, fault.time_ns)
    assert sorted(changes_ns) == list(range(partitions))  # elections and ISR shrinks
    waits = {}
    for partition, change_ns in changes_ns.items():
        next_ok = min(
            event.time_ns
            for event in events
            if isinstance(event, Ok) and event.partition == partition and event.time_ns > change_ns
        )
        waits[partition] = (next_ok - change_ns) / 1e9
    elected_after = {p: (changes_ns[p] - fault.time_ns) / 1e9 for p in led}
    print(f"\nelected after {elected_after} s; acknowledged again after {waits} s")
    assert all(wait <= ACKS_AFTER_ELECTION_S for wait in waits.values()), waits
