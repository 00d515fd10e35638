"""The controller's pass on both stores: leases that stop changing lead to elections,
races with other writers are lost cleanly and decided again, and the thread that runs
passes survives a bad store and stops when told."""

from __future__ import annotations

import logging
import time
from pathlib import Path

import pytest

from tests.controller.conftest import Clock, OpenStore, RivalFirst
from tests.support.state_stores import count_reads
from tierlog.controller.controller import ELECTION_CAUSES, Controller, ControllerThread
from tierlog.partition_state.lease_keeper import LeaseKeeper
from tierlog.partition_state.local_store import LocalStateStore
from tierlog.partition_state.model import NO_LEADER, PartitionState
from tierlog.partition_state.store import PartitionStateStore

DURATION_S = 10.0


class Brokers:
    """Brokers renewing their leases on the store's hand-moved clock."""

    def __init__(self, store: PartitionStateStore, clock: Clock, *brokers: int) -> None:
        self.store, self.clock = store, clock
        for broker in brokers:
            store.acquire_lease(broker, f"broker-{broker}-a", DURATION_S)

    def renew(self, *brokers: int) -> None:
        self.clock.now += 1.0  # a renewal the controller can see: renewed_at changes
        for broker in brokers:
            self.store.renew_lease(broker, f"broker-{broker}-a")


def test_a_lease_that_stops_being_renewed_leads_to_a_new_leader_after_its_duration(
    store_at: OpenStore, caplog: pytest.LogCaptureFixture
) -> None:
    store_clock, controller_clock = Clock(), Clock()
    store, _, _ = store_at(store_clock)
    store.create_topic(
        "orders", {0: PartitionState.new((1, 2, 3)), 1: PartitionState.new((2, 3, 1))}
    )
    brokers = Brokers(store, store_clock, 1, 2, 3)
    controller = Controller(store, clock=controller_clock)
    assert controller.step() == []  # everyone alive: nothing to do

    controller_clock.now += 6.0
    brokers.renew(2, 3)  # broker 1 stopped renewing at the controller's 0
    assert controller.step() == []
    controller_clock.now += 3.9
    assert controller.step() == []  # 9.9 s unchanged: still alive

    controller_clock.now += 0.1
    with caplog.at_level(logging.INFO, logger="tierlog.controller"):
        changes = controller.step()

    again, _, _ = store_at()
    stored = again.read_topic("orders")
    assert stored[0] == PartitionState((1, 2, 3), 2, 1, (2, 3), partition_epoch=1)
    assert stored[1] == PartitionState((2, 3, 1), 2, 0, (2, 3), partition_epoch=1)
    assert [(c.topic, c.partition, c.after) for c in changes] == [
        ("orders", 0, stored[0]),
        ("orders", 1, stored[1]),
    ]
    assert controller.live == {2, 3}
    assert "Fenced broker(s) [1]: lease unchanged for its duration" in caplog.text
    assert "Elected leader 2 for partition orders-0 in leader epoch 1 (was leader 1" in caplog.text
    assert "Changed the ISR of partition orders-1: ISR [2, 3, 1] -> [2, 3]" in caplog.text
    assert controller.step() == []  # decided: the next pass has nothing to do


def test_an_offline_partition_comes_back_when_its_last_isr_member_restarts(
    store_at: OpenStore,
) -> None:
    store_clock, controller_clock = Clock(), Clock()
    store, _, _ = store_at(store_clock)
    store.create_topic("orders", {0: PartitionState((1, 2), 1, 3, (1,))})
    brokers = Brokers(store, store_clock, 1, 2)
    controller = Controller(store, clock=controller_clock)
    controller.step()

    controller_clock.now += DURATION_S
    brokers.renew(2)
    [offline] = controller.step()
    assert (offline.after.leader, offline.after.leader_epoch, offline.after.isr) == (
        NO_LEADER, 4, (1,),
    )  # fmt: skip

    controller_clock.now += 1.0
    store.acquire_lease(1, "broker-1-b", DURATION_S)  # a new incarnation: broker epoch 2
    [back] = controller.step()
    assert store.read_topic("orders")[0] == back.after
    assert (back.after.leader, back.after.leader_epoch, back.after.isr) == (1, 5, (1,))


def test_unclean_election_follows_each_topics_setting(store_at: OpenStore) -> None:
    store_clock, controller_clock = Clock(), Clock()
    store, _, _ = store_at(store_clock)
    for topic in ("risky", "safe"):
        store.create_topic(topic, {0: PartitionState((1, 2), 1, 0, (1,))})
    brokers = Brokers(store, store_clock, 1, 2)
    controller = Controller(store, lambda topic: topic == "risky", controller_clock)
    controller.step()

    controller_clock.now += DURATION_S
    brokers.renew(2)
    controller.step()

    assert store.read_topic("risky")[0] == PartitionState((1, 2), 2, 1, (2,), 1)
    assert store.read_topic("safe")[0] == PartitionState((1, 2), NO_LEADER, 1, (1,), 1)


def test_unclean_election_switched_on_outside_the_store_elects_at_the_next_pass(
    tmp_path: Path,
) -> None:
    """The operator reads ``unclean.leader.election.enable`` from the cluster's spec too:
    switched on there, with nothing changed in the store, an offline partition is led at
    the next pass (idle passes read only what changed, but decide offline topics again)."""
    store_clock, controller_clock = Clock(), Clock()
    store = LocalStateStore(tmp_path, store_clock)
    store.create_topic("orders", {0: PartitionState((1, 2), 1, 0, (1,))})
    brokers = Brokers(store, store_clock, 1, 2)
    unclean = {"orders": False}
    controller = Controller(store, unclean.__getitem__, controller_clock)
    controller.step()
    controller_clock.now += DURATION_S
    brokers.renew(2)
    controller.step()
    assert store.read_topic("orders")[0].leader == NO_LEADER
    controller.step()

    unclean["orders"] = True
    [change] = controller.step()

    assert change.after == PartitionState((1, 2), 2, 2, (2,), 2)


def test_the_preferred_leader_is_restored_unless_switched_off(store_at: OpenStore) -> None:
    store_clock = Clock()
    store, _, _ = store_at(store_clock)
    store.create_topic("orders", {0: PartitionState((1, 2), 2, 7, (2, 1))})
    Brokers(store, store_clock, 1, 2)

    assert Controller(store, clock=Clock(), preferred_leaders=False).step() == []
    controller = Controller(store, clock=Clock())
    [change] = controller.step()
    assert change.after == PartitionState((1, 2), 1, 8, (2, 1), 1)
    assert "preferred leader election" in change.describe()
    assert controller.elections == {**NO_ELECTIONS, "preferred": 1}


NO_ELECTIONS = dict.fromkeys(ELECTION_CAUSES, 0)


def test_elections_are_counted_by_cause_and_offline_partitions_as_the_last_pass_left_them(
    store_at: OpenStore,
) -> None:
    """What the metrics report (Kafka's leader election rates, OfflinePartitionsCount):
    an ISR change alone is no election, and going offline is none either."""
    store_clock, controller_clock = Clock(), Clock()
    store, _, _ = store_at(store_clock)
    store.create_topic(
        "orders",
        {0: PartitionState.new((1, 2)), 1: PartitionState((1, 2), 1, 0, (1,))},
    )
    store.create_topic("risky", {0: PartitionState((1, 2), 1, 0, (1,))})
    store.create_topic("followers", {0: PartitionState.new((2, 1))})
    brokers = Brokers(store, store_clock, 1, 2)
    controller = Controller(store, lambda topic: topic == "risky", controller_clock)
    controller.step()
    assert (controller.elections, controller.offline_partitions) == (NO_ELECTIONS, 0)

    controller_clock.now += DURATION_S
    brokers.renew(2)  # broker 1 is fenced
    assert len(controller.step()) == 4
    # orders-0: broker 2 leads instead; orders-1: offline (its only in-sync replica is
    # gone); risky-0: broker 2 leads, uncleanly; followers-0: broker 1 leaves the ISR.
    assert controller.elections == {**NO_ELECTIONS, "leader_fenced": 1, "unclean": 1}
    assert controller.offline_partitions == 1

    controller_clock.now += 1.0
    store.acquire_lease(1, "broker-1-b", DURATION_S)  # back: orders-1 is led by it again
    controller.step()
    assert controller.elections == {
        **NO_ELECTIONS, "leader_fenced": 1, "unclean": 1, "offline_recovered": 1,
    }  # fmt: skip
    assert controller.offline_partitions == 0


def test_a_pass_that_loses_a_race_changes_nothing_and_the_next_decides_on_the_winner(
    store_at: OpenStore,
) -> None:
    """The leader shrinks its ISR (an AlterPartition) between the controller's read and
    its write: the controller's change is refused, and the next pass elects from the
    ISR that won."""
    store_clock, controller_clock = Clock(), Clock()
    store, _, _ = store_at(store_clock)
    rival, _, _ = store_at(store_clock)
    store.create_topic("orders", {0: PartitionState.new((1, 2, 3))})
    brokers = Brokers(store, store_clock, 1, 2, 3)
    racing = RivalFirst(store, rival, "orders", 0, lambda seen: seen.with_isr((1, 3)))
    controller = Controller(racing, clock=controller_clock)
    controller_clock.now += DURATION_S
    brokers.renew(2, 3)  # broker 1 looks alive at the first sighting, then expires
    controller.step()
    controller_clock.now += DURATION_S
    brokers.renew(2, 3)
    store.write_topic_configs("orders", {})  # a change of the topic: this pass reads it
    racing.armed = True

    assert controller.step() == []  # decided "leader 2, ISR [2, 3]" on a stale read
    [shrunk] = racing.rival_changes
    assert store.read_topic("orders")[0] == shrunk

    [change] = controller.step()
    assert change.before == shrunk
    assert change.after == PartitionState((1, 2, 3), 3, 1, (3,), partition_epoch=2)


def test_an_unreadable_topic_stalls_no_other(tmp_path: Path) -> None:
    store_clock, controller_clock = Clock(), Clock()
    store = LocalStateStore(tmp_path, store_clock)
    store.create_topic("orders", {0: PartitionState.new((1, 2))})
    (tmp_path / "topics" / "aaa.json").write_text("{not json")  # sorted first
    brokers = Brokers(store, store_clock, 1, 2)
    controller = Controller(store, clock=controller_clock)
    controller.step()
    controller_clock.now += DURATION_S
    brokers.renew(2)

    [change] = controller.step()
    assert (change.topic, change.after.leader) == ("orders", 2)


def test_the_controller_thread_elects_in_real_time_survives_a_bad_store_and_stops(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """Real time, real threads: broker 2 keeps its lease with a LeaseKeeper, broker 1
    never renews; a damaged lease file first fails whole passes, which the thread
    survives; once it is repaired the controller elects broker 2."""
    store = LocalStateStore(tmp_path)
    store.create_topic("orders", {0: PartitionState.new((1, 2))})
    store.acquire_lease(1, "broker-1-a", 1.0)
    damaged = tmp_path / "leases" / "9.json"
    damaged.write_text("{not json")
    keeper = LeaseKeeper(store, 2, "broker-2-a", 1.0)
    keeper.start()
    thread = ControllerThread(Controller(store), interval_s=0.05)
    thread.start()
    try:
        deadline = time.monotonic() + 60
        while "Controller pass failed" not in caplog.text:
            assert time.monotonic() < deadline
            time.sleep(0.05)
        damaged.unlink()  # from here on, passes succeed
        while store.read_topic("orders")[0].leader != 2:
            assert time.monotonic() < deadline, store.read_topic("orders")
            time.sleep(0.05)  # polling the outcome, not waiting out a race
        assert store.read_topic("orders")[0].isr == (2,)
    finally:
        thread.stop()
        keeper.stop()
    assert not thread.is_alive()


def test_a_brokers_failure_moves_its_leaderships_in_a_write_per_part_it_touched(
    store_at: OpenStore,
) -> None:
    """Three topics of 1,500 partitions (two parts each), broker 1 leading a third of
    them and following the rest. Once its lease expires one pass leads every partition
    again and takes broker 1 out of every ISR: 4,500 changes in 6 writes, one per part,
    as Kafka's controller batches a fenced broker's partitions into few records."""
    store_clock, controller_clock = Clock(), Clock()
    store, _, _ = store_at(store_clock)
    rotations = ((1, 2, 3), (2, 3, 1), (3, 1, 2))
    topics = ("clicks", "orders", "views")
    for topic in topics:
        store.create_topic(topic, {p: PartitionState.new(rotations[p % 3]) for p in range(1500)})
    brokers = Brokers(store, store_clock, 1, 2, 3)
    controller = Controller(store, clock=controller_clock)
    assert controller.step() == []

    controller_clock.now += DURATION_S
    brokers.renew(2, 3)
    writes = store.part_writes
    changes = controller.step()

    assert store.part_writes - writes == 6
    assert len(changes) == 4500
    assert controller.elections["leader_fenced"] == 1500
    again, _, _ = store_at()
    for topic in topics:
        states = again.read_topic(topic).values()
        assert all(state.leader in (2, 3) and 1 not in state.isr for state in states)


@pytest.mark.parametrize("topics", [1, 5], ids=["1-part", "10-parts"])
def test_an_idle_pass_reads_what_changed_not_every_part(store_at: OpenStore, topics: int) -> None:
    """An idle pass reads the store's journal and the leases, whatever the partitions:
    topics of 1,001 partitions are two parts each."""
    store_clock, controller_clock = Clock(), Clock()
    store, _, _ = store_at(store_clock)
    partitions = 1 if topics == 1 else 1001
    for number in range(topics):
        states = {p: PartitionState.new((1, 2)) for p in range(partitions)}
        store.create_topic(f"topic-{number}", states)
    brokers = Brokers(store, store_clock, 1, 2)
    controller = Controller(store, clock=controller_clock)
    controller.step()
    reads = count_reads(store)

    brokers.renew(1, 2)
    assert controller.step() == []

    assert reads.total <= 2, reads.by_method


def test_a_pass_decodes_only_the_parts_another_writer_changed(store_at: OpenStore) -> None:
    """A failover pass over a topic of 1,500 partitions (two parts) decodes no part: it
    decided on the parts its view had decoded, and its writes' reads of the head (the
    layout) and of each part find those same documents. A pass after another writer
    changed one part decodes that part only, not the head its own write left."""
    store_clock, controller_clock = Clock(), Clock()
    store, _, _ = store_at(store_clock)
    rotations = ((1, 2, 3), (2, 3, 1), (3, 1, 2))
    store.create_topic("orders", {p: PartitionState.new(rotations[p % 3]) for p in range(1500)})
    brokers = Brokers(store, store_clock, 1, 2, 3)
    controllers_store, _, _ = store_at(store_clock)
    controller = Controller(controllers_store, clock=controller_clock)
    assert controller.step() == []
    assert controllers_store.part_decodes == 2  # its view's first read

    controller_clock.now += DURATION_S
    brokers.renew(2, 3)
    assert len(controller.step()) == 1500
    assert controllers_store.part_decodes == 2

    state = store.read_topic("orders")[1001]
    store.alter_isrs("orders", {1001: (state, (state.leader,))})  # a leader's ISR shrink
    brokers.renew(2, 3)
    assert controller.step() == []
    assert controllers_store.part_decodes == 3


def test_a_fenced_broker_costs_decisions_only_for_the_partitions_it_holds(
    store_at: OpenStore,
) -> None:
    """Six brokers, "orders" on brokers 1-3 and "clicks" on 4-6: once broker 1 is fenced
    the pass decides the 3 partitions of "orders" (those with a replica on it), not the
    3 of "clicks", whose inputs did not move; its return decides "orders" again."""
    store_clock, controller_clock = Clock(), Clock()
    store, _, _ = store_at(store_clock)
    rotations = ((1, 2, 3), (2, 3, 1), (3, 1, 2))
    store.create_topic("orders", {p: PartitionState.new(rotations[p]) for p in range(3)})
    store.create_topic(
        "clicks", {p: PartitionState.new(tuple(b + 3 for b in rotations[p])) for p in range(3)}
    )
    brokers = Brokers(store, store_clock, 1, 2, 3, 4, 5, 6)
    controller = Controller(store, clock=controller_clock)
    assert controller.step() == [] and controller.decided_partitions == 6

    controller_clock.now += DURATION_S
    brokers.renew(2, 3, 4, 5, 6)
    changes = controller.step()

    assert {(c.topic, c.after.leader) for c in changes} == {("orders", 2), ("orders", 3)}
    assert controller.decided_partitions == 3
    brokers.renew(2, 3, 4, 5, 6)
    assert controller.step() == [] and controller.decided_partitions == 3  # its own writes

    brokers.renew(2, 3, 4, 5, 6)
    assert controller.step() == [] and controller.decided_partitions == 0  # idle
    store.acquire_lease(1, "broker-1-b", DURATION_S)  # a new incarnation
    brokers.renew(2, 3, 4, 5, 6)
    assert controller.step() == [] and controller.decided_partitions == 3  # not in sync
    assert 1 in controller.live
