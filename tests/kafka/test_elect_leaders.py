"""ElectLeaders on a 3-broker ``tierlog cluster up`` whose controller does not hand
preferred replicas their leadership back by itself (``auto.leader.rebalance.enable``
off), so a partition stays led where a test moved it: Kafka's own
``kafka-leader-election`` gives it back, for every partition or one named; raw requests
meet Kafka's per-partition errors; a stopped preferred replica cannot lead until it is
in sync again; an offline partition is led again only by an unclean election.

One cluster for the module; the tests that stop brokers run last and start them again.
"""

from __future__ import annotations

import json
import subprocess
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import grpc
import pytest
from kafka.admin import KafkaAdminClient, NewTopic
from kio.schema.errors import ErrorCode

from tests.kafka.conftest import run_java
from tests.kafka.test_cluster import (
    _NO_AUTHORIZED_OPERATIONS,
    BROKERS,
    METADATA_V,
    PARTITIONS,
    SESSION_TIMEOUT_MS,
    _addresses,
    _call,
    _metadata_broker_ids,
    create_topic,
)
from tests.kafka.wire import KafkaWire
from tests.replication.conftest import wait_for
from tests.support.applied_states import has_applied
from tests.support.local_cluster import kafka_bootstrap, running_cluster, tierlog_cluster
from tests.support.sidecars import console_script
from tierlog.api.v1.log_service_pb2_grpc import LogServiceStub
from tierlog.cli.local_cluster import STATE_DIR, read_cluster
from tierlog.kafka.versions import ELECT_LEADERS, METADATA
from tierlog.partition_state.local_store import LocalStateStore
from tierlog.partition_state.model import NO_LEADER

LEADER_ELECTION = "org.apache.kafka.tools.LeaderElectionCommand"
NO_ID = uuid.UUID(int=0)  # a topic asked by name
PREFERRED, UNCLEAN = 0, 1
# A stopped broker's lease expires this long after its last renewal (then its partitions
# with no other in-sync replica go offline), with room for a loaded machine.
OFFLINE_TIMEOUT_S = 6 * SESSION_TIMEOUT_MS / 1000


@pytest.fixture(scope="module")
def cluster_dir(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    directory = tmp_path_factory.mktemp("elect-leaders") / "cluster"
    with running_cluster(
        directory,
        BROKERS,
        "auto.leader.rebalance.enable=false",
        f"broker.session.timeout.ms={SESSION_TIMEOUT_MS}",
    ):
        yield directory


@pytest.fixture(scope="module")
def bootstrap(cluster_dir: Path) -> str:
    return kafka_bootstrap(cluster_dir)


def partitions(bootstrap: str, topic: str, broker: int = 0) -> dict[int, Any]:
    """Partition -> its Metadata (leader, replicas in order, ISR), from ``broker``."""
    request = {"topics": [{"topic_id": NO_ID, "name": topic}], **_NO_AUTHORIZED_OPERATIONS}
    answer = _call(_addresses(bootstrap)[broker][1], METADATA, METADATA_V, request)
    (described,) = answer.topics
    return {partition.partition_index: partition for partition in described.partitions}


def led_by_preferred(bootstrap: str, topic: str) -> bool:
    """Every broker's Metadata has each partition led by its first replica."""
    return all(
        seen.leader_id == seen.replica_nodes[0]
        for broker in range(BROKERS)
        for seen in partitions(bootstrap, topic, broker).values()
    )


def reorder_replicas(
    cluster_dir: Path, tmp_path: Path, bootstrap: str, topic: str, indexes: list[int]
) -> None:
    """Rotate each partition's replicas (``tierlog partitions reassign``: the same
    brokers, so it completes at once): its leader, the first, is not preferred any more."""
    now = partitions(bootstrap, topic)
    targets = {p: [*now[p].replica_nodes[1:], now[p].replica_nodes[0]] for p in indexes}
    plan = tmp_path / f"{topic}-reorder.json"
    plan.write_text(
        json.dumps(
            {
                "version": 1,
                "partitions": [
                    {"topic": topic, "partition": p, "replicas": r} for p, r in targets.items()
                ],
            }
        )
    )
    moved = subprocess.run(
        [console_script("tierlog"), "partitions", "reassign", "--plan", str(plan), "--execute",
         "--state-dir", str(cluster_dir / STATE_DIR)],
        capture_output=True, text=True, timeout=60, check=False,
    )  # fmt: skip
    assert moved.returncode == 0, moved.stderr

    def reordered() -> bool:
        seen = partitions(bootstrap, topic)
        return all(
            list(seen[p].replica_nodes) == targets[p] and seen[p].leader_id == now[p].leader_id
            for p in indexes
        )

    wait_for(reordered, f"{topic}'s replicas reordered, its leaders unmoved")


def elect(bootstrap: str, broker: int, version: int, election: int, asked: Any) -> Any:
    request = {"election_type": election, "topic_partitions": asked, "timeout": 30_000}
    return _call(_addresses(bootstrap)[broker][1], ELECT_LEADERS, version, request)


def codes(answer: Any) -> dict[tuple[str, int], ErrorCode]:
    return {
        (result.topic, partition.partition_id): partition.error_code
        for result in answer.replica_election_results
        for partition in result.partition_result
    }


def test_kafka_leader_election_gives_every_partition_back_to_its_preferred_replica(
    cluster_dir: Path, bootstrap: str, tmp_path: Path
) -> None:
    create_topic(read_cluster(cluster_dir), "rebalanced")
    reorder_replicas(cluster_dir, tmp_path, bootstrap, "rebalanced", list(range(PARTITIONS)))
    assert not any(
        p.leader_id == p.replica_nodes[0] for p in partitions(bootstrap, "rebalanced").values()
    )

    printed = run_java(
        LEADER_ELECTION, "--bootstrap-server", bootstrap,
        "--election-type", "PREFERRED", "--all-topic-partitions",
    )  # fmt: skip

    (elected,) = [line for line in printed.splitlines() if line.startswith("Successfully")]
    assert elected.startswith("Successfully completed leader election (PREFERRED) for partitions ")
    assert {f"rebalanced-{p}" for p in range(PARTITIONS)} <= set(
        elected.split(" for partitions ", 1)[1].split(", ")
    )
    wait_for(lambda: led_by_preferred(bootstrap, "rebalanced"), "preferred leaders everywhere")


def test_kafka_leader_election_of_one_partition_named(
    cluster_dir: Path, bootstrap: str, tmp_path: Path
) -> None:
    create_topic(read_cluster(cluster_dir), "named")
    reorder_replicas(cluster_dir, tmp_path, bootstrap, "named", [1])
    election = (LEADER_ELECTION, "--bootstrap-server", bootstrap, "--election-type", "PREFERRED")

    elected = run_java(*election, "--topic", "named", "--partition", "1")
    not_needed = run_java(*election, "--topic", "named", "--partition", "0")

    assert "Successfully completed leader election (PREFERRED) for partitions named-1" in elected
    assert "Valid replica already elected for partitions named-0" in not_needed
    wait_for(lambda: led_by_preferred(bootstrap, "named"), "named-1 led by its preferred replica")


def test_a_kept_metadata_answer_names_a_leader_and_a_topic_changed_between_two_requests(
    cluster_dir: Path, bootstrap: str, tmp_path: Path
) -> None:
    """A broker keeps its Metadata answer while the topics and the partition states hold
    (``kafka/kept_answers``): the same question asked again on the same connection names
    a leader elected and a topic created in between, once the broker has applied them."""
    cluster = read_cluster(cluster_dir)
    create_topic(cluster, "kept")
    reorder_replicas(cluster_dir, tmp_path, bootstrap, "kept", [0])
    every_topic = {"topics": None, **_NO_AUTHORIZED_OPERATIONS}
    wire = KafkaWire(_addresses(bootstrap)[0][1])
    try:
        wire.call(METADATA, METADATA_V, every_topic)
        before = wire.call(METADATA, METADATA_V, every_topic)  # the kept answer, if any
        elect(bootstrap, 0, 2, PREFERRED, [{"topic": "kept", "partitions": [0]}])
        elected = LocalStateStore(cluster_dir / STATE_DIR).read_topic("kept")[0]
        with grpc.insecure_channel(cluster.brokers[0].address) as channel:
            applied = (LogServiceStub(channel), 0, "kept", 0, elected.leader, elected.leader_epoch)
            wait_for(lambda: has_applied(*applied), "broker 0 to apply kept-0's election")
        after_election = wire.call(METADATA, METADATA_V, every_topic)
        create_topic(cluster, "kept-new")  # back once every broker applied its leaders
        after_creation = wire.call(METADATA, METADATA_V, every_topic)
    finally:
        wire.close()

    def named(answer: Any) -> dict[str, dict[int, tuple[int, int, tuple[int, ...]]]]:
        return {
            topic.name: {
                p.partition_index: (p.leader_id, p.leader_epoch, tuple(p.replica_nodes))
                for p in topic.partitions
            }
            for topic in answer.topics
        }

    elected_now = (elected.leader, elected.leader_epoch, tuple(elected.replicas))
    assert named(before)["kept"][0] != elected_now
    assert named(after_election)["kept"][0] == elected_now
    assert "kept-new" not in named(after_election)
    assert set(named(after_creation)["kept-new"]) == set(range(PARTITIONS))


def test_a_stopped_preferred_replica_leads_again_only_once_back_in_sync(
    cluster_dir: Path, bootstrap: str
) -> None:
    create_topic(read_cluster(cluster_dir), "restarted")
    victim = BROKERS - 1  # not the deciding controller (the lowest live id)
    (preferred,) = [
        p
        for p, seen in partitions(bootstrap, "restarted").items()
        if seen.replica_nodes[0] == victim
    ]
    asked = [
        {"topic": "restarted", "partitions": [preferred, 99]},
        {"topic": "nowhere", "partitions": [0]},
    ]
    stopped = tierlog_cluster("stop", "--dir", str(cluster_dir), "--broker", str(victim))
    assert stopped.returncode == 0, stopped.stderr  # a controlled shutdown: leaderships go
    try:
        # Fenced: it gave its lease up as it stopped, and it left the ISR at its hand-over.
        wait_for(
            lambda: (
                victim not in _metadata_broker_ids(_addresses(bootstrap)[1][1])
                and victim not in partitions(bootstrap, "restarted", broker=1)[preferred].isr_nodes
            ),
            f"broker {victim} fenced",
            timeout_s=OFFLINE_TIMEOUT_S,
        )
        refused = [elect(bootstrap, 1, version, PREFERRED, asked) for version in (0, 1, 2)]
        unclean = elect(bootstrap, 0, 2, UNCLEAN, asked[:1])
        unknown_type = elect(bootstrap, 0, 2, 9, asked[:1])
    finally:
        started = tierlog_cluster("start", "--dir", str(cluster_dir), "--broker", str(victim))
        assert started.returncode == 0, started.stderr

    for answer in refused:
        assert codes(answer) == {
            ("restarted", preferred): ErrorCode.preferred_leader_not_available,
            ("restarted", 99): ErrorCode.unknown_topic_or_partition,
            ("nowhere", 0): ErrorCode.unknown_topic_or_partition,
        }
    assert codes(unclean) == {
        ("restarted", preferred): ErrorCode.election_not_needed,  # it has a leader
        ("restarted", 99): ErrorCode.unknown_topic_or_partition,
    }
    assert unknown_type.error_code == ErrorCode.invalid_request
    assert set(codes(unknown_type).values()) == {ErrorCode.invalid_request}

    # Back and in sync again (its restart took it out of every ISR): now it can lead.
    wait_for(
        lambda: victim in partitions(bootstrap, "restarted")[preferred].isr_nodes,
        f"broker {victim} back in sync",
        timeout_s=60,
    )
    elected = elect(bootstrap, 1, 1, PREFERRED, asked[:1])
    assert elected.error_code == ErrorCode.none
    assert codes(elected)[("restarted", preferred)] == ErrorCode.none
    # The broker that answered applied it before answering; the others follow.
    assert partitions(bootstrap, "restarted", broker=1)[preferred].leader_id == victim
    wait_for(lambda: led_by_preferred(bootstrap, "restarted"), "preferred leaders everywhere")


def test_an_offline_partition_is_led_again_by_an_unclean_election(
    cluster_dir: Path, bootstrap: str
) -> None:
    """Replicas [2, 1]: broker 1 dies (it leaves the ISR once its lease expires), then
    broker 2, the only one in sync: the partition is offline. Broker 1 back is alive but
    out of sync, so only an unclean election makes it lead (what 2 alone had is lost)."""
    admin = KafkaAdminClient(bootstrap_servers=bootstrap)
    try:
        admin.create_topics([NewTopic("offline", replica_assignments={0: [2, 1]})])
    finally:
        admin.close()
    wait_for(lambda: 0 in partitions(bootstrap, "offline"), "the topic in Metadata")
    directory = str(cluster_dir)
    host, port = _addresses(bootstrap)[0]  # the one broker that stays up
    election = (LEADER_ELECTION, "--bootstrap-server", f"{host}:{port}", "--topic", "offline")
    stopped: list[int] = []
    store = LocalStateStore(cluster_dir / STATE_DIR)
    # Killed, not stopped: a broker stopping on SIGTERM leaves the ISR at once, but its
    # fetches until it exits may put it back (seen once in four runs).
    gone = {
        1: lambda: store.read_topic("offline")[0].isr == (2,),
        2: lambda: store.read_topic("offline")[0].leader == NO_LEADER,
    }
    try:
        for broker, fenced in gone.items():
            done = tierlog_cluster(
                "stop", "--dir", directory, "--broker", str(broker), "--signal", "KILL"
            )
            assert done.returncode == 0, done.stderr
            stopped.append(broker)
            wait_for(fenced, f"broker {broker} fenced", timeout_s=OFFLINE_TIMEOUT_S)
        done = tierlog_cluster("start", "--dir", directory, "--broker", "1")
        assert done.returncode == 0, done.stderr
        stopped.remove(1)
        preferred = elect(bootstrap, 0, 2, PREFERRED, [{"topic": "offline", "partitions": [0]}])
        unclean = run_java(*election, "--partition", "0", "--election-type", "UNCLEAN")
    finally:
        for broker in stopped:
            tierlog_cluster("start", "--dir", directory, "--broker", str(broker))

    # Broker 2, its preferred replica, is down.
    assert codes(preferred) == {("offline", 0): ErrorCode.preferred_leader_not_available}
    assert "Successfully completed leader election (UNCLEAN) for partitions offline-0" in unclean
    # Broker 2, back, follows broker 1 (and truncates to its log).
    wait_for(lambda: partitions(bootstrap, "offline")[0].leader_id == 1, "broker 1 leading")
