"""The follower's replica fetch stream between real brokers: a partition its leader
refuses waits out the back-off while the stream goes on for the others."""

from __future__ import annotations

import time

from tests.sidecar.conftest import Sidecar
from tierlog.api.v1 import admin_service_pb2
from tierlog.partition_state.model import PartitionState

from .conftest import ClusterFactory, wait_for


def _refusals(follower: Sidecar, tp: str) -> int:
    return follower.output.count(f"replica fetch of {tp} from broker 1")


def test_a_partition_the_leader_refuses_is_asked_again_only_after_the_back_off(
    replicated_brokers: ClusterFactory,
) -> None:
    # Broker 1 reads the store only when it starts and after an admin change made
    # through it: told to lead "b", it will not know it, as a leader a moment behind.
    cluster = replicated_brokers(
        2,
        node_configs={
            0: ("replica.fetch.backoff.ms=1000",),
            1: ("tierlog.replication.state.poll.ms=600000",),
        },
    )
    leader, follower = cluster.broker(1), cluster.broker(0)
    cluster.store.create_topic("a", {0: PartitionState.new((1, 0))})
    leader.admin.CreateTopics(  # any change through broker 1 makes it read the store
        admin_service_pb2.CreateTopicsRequest(
            topics=[admin_service_pb2.NewTopic(name="x", num_partitions=1)]
        ),
        timeout=30,
    )
    cluster.store.create_topic("b", {0: PartitionState.new((1, 0))})
    wait_for(lambda: _refusals(follower, "b-0") > 0, "the follower to ask for b-0")
    first = _refusals(follower, "b-0")
    time.sleep(3)  # the span the refusals are counted over, not a wait for a state
    # One refusal per second of back-off, give or take the long polls of "a" between
    # them; without the back-off each of "a"'s answers came back at once with b-0's
    # refusal beside it, hundreds a second.
    assert _refusals(follower, "b-0") - first <= 5
    follower.assert_alive()
