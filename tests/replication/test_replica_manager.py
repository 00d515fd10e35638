"""The replica manager in-process, over a real directory store and real logs: what it
does when passes over the store overlap, and which followers its ISR takes back."""

from __future__ import annotations

import asyncio
import contextlib
import gc
import threading
import time
from collections.abc import Callable, Mapping
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import grpc
import pytest

from tests.partition_state.conftest import Clock
from tests.storage.conftest import make_batch
from tests.support.state_stores import count_reads
from tierlog.api.errors import LeaderNotAvailableError
from tierlog.api.v1 import replication_service_pb2 as pb
from tierlog.broker.topics import TopicStore
from tierlog.broker.watch import AppendWatch
from tierlog.controller.controller import Controller
from tierlog.partition_state.local_store import LocalStateStore
from tierlog.partition_state.model import PartitionState
from tierlog.replication.config import DirectoryStore, ReplicationConfig
from tierlog.replication.replica_manager import (
    TICKS_PER_POLL,
    TRANSITIONS_IN_FLIGHT,
    ReplicaManager,
)
from tierlog.storage.config import LogConfig
from tierlog.storage.manager import LogManager, LogManagerConfig
from tierlog.storage.topic_partition import TopicPartition


def _no_channel(address: str) -> grpc.aio.Channel:
    raise AssertionError(f"a broker leading every partition dialled {address}")


def _replica_manager(
    tmp_path: Path,
    store: LocalStateStore,
    logs: LogManager,
    broker_epoch: Callable[[], int] = lambda: 1,
    addresses: Callable[[], Mapping[int, str]] = dict,
    channel: Callable[[str], grpc.aio.Channel] = _no_channel,
    settings: ReplicationConfig | None = None,
) -> ReplicaManager:
    """Broker 0's replica manager over ``store`` and ``logs`` (data in ``tmp_path/data``)."""
    return ReplicaManager(
        0,
        broker_epoch,
        store,
        logs,
        TopicStore([tmp_path / "data"], LogConfig()),
        AppendWatch(),
        addresses,
        channel,
        [],
        settings or ReplicationConfig(store=DirectoryStore(tmp_path / "state")),
    )


def _over_a_local_store(tmp_path: Path) -> tuple[LocalStateStore, LogManager, ReplicaManager]:
    """Broker 0's replica manager over a store and logs of its own in ``tmp_path``."""
    store = LocalStateStore(tmp_path / "state")
    data = tmp_path / "data"
    data.mkdir()
    logs = LogManager(LogManagerConfig(log_dirs=(data,)))
    return store, logs, _replica_manager(tmp_path, store, logs)


def test_passes_over_the_store_that_overlap_delete_a_topic_once(tmp_path: Path) -> None:
    store, logs, replicas = _over_a_local_store(tmp_path)
    data = tmp_path / "data"  # the log dir of ``_over_a_local_store``

    async def create_then_delete() -> None:
        store.create_topic("orders", {p: PartitionState.new((0,)) for p in range(3)})
        await replicas.poll_once()
        assert {tp.topic for tp in logs.partitions} == {"orders"}
        store.delete_topic("orders")
        # The admin service's pass after a DeleteTopics, beside the periodic one: both
        # see the topic gone.
        await asyncio.gather(replicas.poll_once(), replicas.poll_once())

    try:
        asyncio.run(create_then_delete())
        assert not list(logs.partitions)
        assert not [path for path in data.iterdir() if path.name.startswith("orders-")]
    finally:
        logs.shutdown()


def test_a_leader_whose_address_changes_is_fetched_from_at_the_new_one(tmp_path: Path) -> None:
    """As when the operator's plan first names a pod by a DNS name the follower cannot
    resolve yet, then by its address: the follower must move its fetches over, not keep
    asking the old address (seen: an acks=all produce waited 20 s for such a follower)."""
    store = LocalStateStore(tmp_path / "state")
    data = tmp_path / "data"
    data.mkdir()
    logs = LogManager(LogManagerConfig(log_dirs=(data,)))
    addresses = {1: "shrink-1.shrink-brokers.ns.svc:9092"}
    dialled: list[str] = []

    def channel(address: str) -> grpc.aio.Channel:
        dialled.append(address)
        return grpc.aio.insecure_channel(address)

    replicas = _replica_manager(tmp_path, store, logs, addresses=lambda: addresses, channel=channel)
    orders = TopicPartition("orders", 0)

    async def follow_then_move() -> None:
        store.create_topic("orders", {0: PartitionState.new((1, 0))})
        await replicas.poll_once()
        assert dialled == ["shrink-1.shrink-brokers.ns.svc:9092"]
        addresses[1] = "127.0.0.1:1"  # the plan resolved: same broker, same partitions
        await replicas.poll_once()
        assert dialled == ["shrink-1.shrink-brokers.ns.svc:9092", "127.0.0.1:1"]
        assert replicas.fetchers[1].epochs == {orders: 0}
        await replicas.poll_once()  # nothing changed: no new channel
        assert len(dialled) == 2
        await replicas.stop()

    try:
        asyncio.run(follow_then_move())
    finally:
        logs.shutdown()


def test_an_isr_change_of_a_followed_partition_waits_for_no_thread(tmp_path: Path) -> None:
    """A failover changes the ISR of every partition followed here (a broker leaving
    every ISR: all 2,000 of them), while the threads are busy with the leaderships'
    checkpoints. Each change held the partition's lock across a trip to a thread, and
    the fetcher's appends to it waited behind the whole queue. Here the only thread is
    taken: the change must be applied all the same."""
    store = LocalStateStore(tmp_path / "state")
    data = tmp_path / "data"
    data.mkdir()
    logs = LogManager(LogManagerConfig(log_dirs=(data,)))
    replicas = _replica_manager(
        tmp_path,
        store,
        logs,
        addresses=lambda: {1: "127.0.0.1:1"},
        channel=grpc.aio.insecure_channel,
    )
    orders = TopicPartition("orders", 0)
    followed = PartitionState.new((1, 0, 2))

    async def change_the_isr_with_every_thread_busy() -> None:
        await replicas.apply(orders, followed)  # the log made here, in a thread
        loop = asyncio.get_running_loop()
        loop.set_default_executor(ThreadPoolExecutor(1))
        release = threading.Event()
        busy = loop.run_in_executor(None, release.wait)
        try:
            shrunk = followed.with_isr((1, 0))
            await asyncio.wait_for(replicas.apply(orders, shrunk), timeout=10)
            assert replicas.leadership(orders).isr == [1, 0]
        finally:
            release.set()
            await busy
        await replicas.stop()

    try:
        asyncio.run(change_the_isr_with_every_thread_busy())
    finally:
        logs.shutdown()


def test_an_idle_partitions_isr_keeps_a_dead_follower_out_until_it_fetches_again(
    tmp_path: Path,
) -> None:
    """Seen in a 3-broker cluster: broker 1 killed, the idle partition's leader put it
    back in the ISR on each fetch of broker 2 (its last fetch had reached the high
    watermark, and nothing was written since), and the controller fenced it again: 38
    ISR changes in 6 s. A follower rejoins on a fetch it made, from an incarnation whose
    lease is current (Kafka's isReplicaIsrEligible)."""
    clock = Clock()
    store = LocalStateStore(tmp_path / "state", clock)
    epochs = {b: store.acquire_lease(b, f"broker-{b}", 10.0).broker_epoch for b in (0, 1, 2)}
    data = tmp_path / "data"
    data.mkdir()
    logs = LogManager(LogManagerConfig(log_dirs=(data,)))
    replicas = _replica_manager(tmp_path, store, logs, broker_epoch=lambda: epochs[0])
    controller_clock = Clock()
    controller = Controller(store, clock=controller_clock, preferred_leaders=False)
    orders = TopicPartition("orders", 0)

    async def fetch_and_settle(replica: int) -> None:
        """``replica`` fetches from the leader's end; the ISR change it starts (if any)
        lands and the controller makes its pass over what it left."""
        leader = replicas.leaders[orders]
        asked = pb.ReplicaFetchPartition(
            topic="orders", partition=0, fetch_offset=leader.log.log_end_offset
        )
        replicas.record_fetch(leader, replica, asked, int(clock.now * 1000), epochs[replica])
        await asyncio.gather(*replicas._tasks)
        controller.step()
        await replicas.poll_once()

    def lease_time_passes(alive: tuple[int, ...]) -> None:
        clock.now += 11
        controller_clock.now += 11
        for broker in alive:
            store.renew_lease(broker, f"broker-{broker}")

    async def kill_then_revive() -> None:
        store.create_topic("orders", {0: PartitionState.new((0, 1, 2))})
        controller.step()
        await replicas.poll_once()
        replicas.leaders[orders].log.append(make_batch(3))
        for follower in (1, 2):
            await fetch_and_settle(follower)
        assert replicas.leaders[orders].high_watermark == 3

        lease_time_passes(alive=(0, 2))  # broker 1 killed: its lease runs out
        controller.step()
        await replicas.poll_once()
        assert store.read_topic("orders")[0].isr == (0, 2)
        for _ in range(3):  # the idle partition's live follower keeps fetching
            await fetch_and_settle(2)
        assert store.read_topic("orders")[0].isr == (0, 2)
        assert (replicas.isr_shrinks, replicas.isr_expands) == (1, 0)

        # A fetch of broker 1's fenced incarnation (paused, not killed) brings it no closer.
        await fetch_and_settle(1)
        assert store.read_topic("orders")[0].isr == (0, 2)

        epochs[1] = store.acquire_lease(1, "broker-1-again", 10.0).broker_epoch
        await replicas.poll_once()  # the new incarnation's lease is read
        await fetch_and_settle(1)
        assert store.read_topic("orders")[0].isr == (0, 1, 2)
        assert (replicas.isr_shrinks, replicas.isr_expands) == (1, 1)
        await replicas.stop()

    try:
        asyncio.run(kill_then_revive())
    finally:
        logs.shutdown()


def test_a_caught_up_follower_in_controlled_shutdown_is_not_asked_back_into_the_isr(
    tmp_path: Path,
) -> None:
    """KIP-841: a broker in controlled shutdown fetches on, caught up, and its leader asks
    nothing (the store would refuse the whole batch, and the batch is every partition of
    the topic the leader changes then); its next incarnation rejoins."""
    store = LocalStateStore(tmp_path / "state")
    epochs = {b: store.acquire_lease(b, f"broker-{b}", 10.0).broker_epoch for b in (0, 1, 2)}
    data = tmp_path / "data"
    data.mkdir()
    logs = LogManager(LogManagerConfig(log_dirs=(data,)))
    replicas = _replica_manager(tmp_path, store, logs, broker_epoch=lambda: epochs[0])
    orders = TopicPartition("orders", 0)

    async def fetch_from_the_end(replica: int) -> bool:
        """Whether the fetch started an ISR change (which then lands or fails)."""
        leader = replicas.leaders[orders]
        asked = pb.ReplicaFetchPartition(
            topic="orders", partition=0, fetch_offset=leader.log.log_end_offset
        )
        replicas.record_fetch(leader, replica, asked, int(time.time() * 1000), epochs[replica])
        started = bool(replicas._tasks)
        await asyncio.gather(*replicas._tasks)
        return started

    async def stopping_then_restarted() -> None:
        store.create_topic("orders", {0: PartitionState.new((0, 1, 2)).with_isr((0, 1))})
        store.enter_controlled_shutdown(2, "broker-2")
        await replicas.poll_once()
        assert not await fetch_from_the_end(2)
        assert store.read_topic("orders")[0].isr == (0, 1)

        epochs[2] = store.acquire_lease(2, "broker-2-again", 10.0).broker_epoch
        await replicas.poll_once()
        assert await fetch_from_the_end(2)
        assert store.read_topic("orders")[0].isr == (0, 1, 2)
        await replicas.stop()

    try:
        asyncio.run(stopping_then_restarted())
    finally:
        logs.shutdown()


def test_followers_that_catch_up_together_rejoin_the_isrs_in_one_write_per_part(
    tmp_path: Path,
) -> None:
    """Seen in the scale simulation (docs/SCALE.md): a broker back after a failure, caught
    up on its partitions, rejoined each ISR in a write of its own, the part holding 1,000
    partitions rewritten once per partition (600 writes, 7 MiB, for 1,000 partitions on
    5 brokers). The ISR changes a leader decides together go to the store together, as
    Kafka's AlterPartitionManager batches them into one AlterPartition request."""
    clock = Clock()
    store = LocalStateStore(tmp_path / "state", clock)
    epochs = {b: store.acquire_lease(b, f"broker-{b}", 10.0).broker_epoch for b in (0, 1)}
    data = tmp_path / "data"
    data.mkdir()
    logs = LogManager(LogManagerConfig(log_dirs=(data,)))
    replicas = _replica_manager(tmp_path, store, logs, broker_epoch=lambda: epochs[0])
    count = 100

    async def catch_up_together() -> None:
        behind = PartitionState((0, 1), 0, 0, (0,))  # broker 1 out of the ISR
        store.create_topic("orders", dict.fromkeys(range(count), behind))
        await replicas.poll_once()
        writes_before = store.part_writes
        for partition in range(count):  # one fetch of broker 1 answered for each
            leader = replicas.leaders[TopicPartition("orders", partition)]
            asked = pb.ReplicaFetchPartition(
                topic="orders", partition=partition, fetch_offset=leader.log.log_end_offset
            )
            replicas.record_fetch(leader, 1, asked, int(clock.now * 1000), epochs[1])
        while replicas._tasks:
            await asyncio.gather(*replicas._tasks)
        assert store.part_writes - writes_before == 1
        assert {state.isr for state in store.read_topic("orders").values()} == {(0, 1)}
        assert replicas.isr_expands == count
        await replicas.stop()

    try:
        asyncio.run(catch_up_together())
    finally:
        logs.shutdown()


def test_a_busy_partition_holds_up_no_other_partitions_new_role(tmp_path: Path) -> None:
    """A poll that hands this broker many leaderships (a failover: 667 at once at 2,000
    partitions, docs/SCALE.md) takes them side by side, as Kafka's broker applies a
    metadata delta's leaderships together: one partition whose lock is held (a produce,
    a follower's append in progress) holds up none of the others. One at a time, each
    waited for the previous one's leader-epoch checkpoint to reach the disk."""
    store, logs, replicas = _over_a_local_store(tmp_path)
    count = 8
    busy = TopicPartition("orders", 0)
    others = {TopicPartition("orders", p) for p in range(1, count)}

    async def others_led() -> None:
        while not others <= set(replicas.leaders):
            await asyncio.sleep(0.01)

    async def lead_beside_a_busy_one() -> None:
        store.create_topic("orders", {p: PartitionState.new((0,)) for p in range(count)})
        async with replicas.lock(busy):
            poll = asyncio.create_task(replicas.poll_once())
            await asyncio.wait_for(others_led(), timeout=10)
            assert busy not in replicas.leaders
        await poll
        assert set(replicas.leaders) == others | {busy}
        await replicas.stop()

    try:
        asyncio.run(lead_beside_a_busy_one())
    finally:
        logs.shutdown()


def test_an_isr_change_is_applied_while_new_leaderships_hold_every_slot(
    tmp_path: Path,
) -> None:
    """A controlled shutdown's hand-over brings a survivor hundreds of leaderships and,
    for the partitions it already leads, thousands of ISR changes (the leaving broker
    dropped from each). An ISR change waits for nothing: it is applied at once, not
    queued for a slot behind the leaderships' log openings. Here every slot is held by
    a leadership whose partition's lock is taken."""
    store, logs, replicas = _over_a_local_store(tmp_path)
    led = TopicPartition("orders", 0)
    new = [TopicPartition("clicks", p) for p in range(TRANSITIONS_IN_FLIGHT)]

    async def isr_shrunk() -> None:
        while replicas.leaders[led].state.isr != (0,):
            await asyncio.sleep(0.01)

    async def shrink_beside_held_leaderships() -> None:
        store.create_topic("orders", {0: PartitionState.new((0, 1))})
        await replicas.poll_once()
        state = store.read_topic("orders")[0]
        store.alter_partition("orders", 0, state.partition_epoch, state.with_isr((0,)))
        store.create_topic("clicks", {tp.partition: PartitionState.new((0,)) for tp in new})
        async with contextlib.AsyncExitStack() as held:
            for tp in new:
                await held.enter_async_context(replicas.lock(tp))
            poll = asyncio.create_task(replicas.poll_once())
            await asyncio.wait_for(isr_shrunk(), timeout=10)
            assert not set(new) & set(replicas.leaders)
        await poll
        assert set(new) <= set(replicas.leaders)
        await replicas.stop()

    try:
        asyncio.run(shrink_beside_held_leaderships())
    finally:
        logs.shutdown()


def test_an_isr_change_of_a_partition_whose_lock_is_held_waits_for_the_lock(
    tmp_path: Path,
) -> None:
    """Applied in place only while nothing holds the partition: a produce or a
    follower's append in progress keeps its state, and the change waits for its lock."""
    store, logs, replicas = _over_a_local_store(tmp_path)
    led = TopicPartition("orders", 0)

    async def shrink_while_held() -> None:
        store.create_topic("orders", {0: PartitionState.new((0, 1))})
        await replicas.poll_once()
        state = store.read_topic("orders")[0]
        store.alter_partition("orders", 0, state.partition_epoch, state.with_isr((0,)))
        async with replicas.lock(led):
            poll = asyncio.create_task(replicas.poll_once())
            while replicas.leadership(led).isr != [0]:  # read and named
                await asyncio.sleep(0.01)
            assert replicas.leaders[led].state.isr == (0, 1)
        await poll
        assert replicas.leaders[led].state.isr == (0,)
        await replicas.stop()

    try:
        asyncio.run(shrink_while_held())
    finally:
        logs.shutdown()


def test_metadata_names_a_new_leader_before_its_change_of_role_is_done(tmp_path: Path) -> None:
    """Kafka's broker sets its metadata cache's image before its replica manager applies
    the delta: a client learns of a hand-over's new leaders as soon as the broker read
    them, not once its hundreds of changes of role (each a leader-epoch checkpoint) are
    all done. Here the partition's lock is held, so its change of role cannot finish:
    Metadata names broker 0 all the same, and a produce is refused until it leads."""
    store, logs, replicas = _over_a_local_store(tmp_path)
    orders = TopicPartition("orders", 0)

    async def named() -> None:
        while replicas.leadership(orders).leader_id != 0:
            await asyncio.sleep(0.01)

    async def read_while_changing_role() -> None:
        store.create_topic("orders", {0: PartitionState.new((0,))})
        async with replicas.lock(orders):
            poll = asyncio.create_task(replicas.poll_once())
            await asyncio.wait_for(named(), timeout=10)
            assert replicas.leadership(orders).leader_epoch == 0
            with pytest.raises(LeaderNotAvailableError):
                replicas.leader(orders)
        await poll
        assert replicas.leader(orders).leader_epoch == 0
        await replicas.stop()

    try:
        asyncio.run(read_while_changing_role())
    finally:
        logs.shutdown()


def test_a_change_written_between_two_polls_is_read_at_once_not_at_the_next_poll(
    tmp_path: Path,
) -> None:
    """Told by the store that it changed (``watch_changes``), a broker reads another
    broker's write (a stopping broker's hand-over) within moments, not at its next poll:
    here well inside a poll of 10 s."""
    store = LocalStateStore(tmp_path / "state")
    writer = LocalStateStore(tmp_path / "state")  # another broker's store object
    (tmp_path / "data").mkdir()
    logs = LogManager(LogManagerConfig(log_dirs=(tmp_path / "data",)))
    settings = ReplicationConfig(store=DirectoryStore(tmp_path / "state"), state_poll_ms=10_000)
    replicas = _replica_manager(tmp_path, store, logs, settings=settings)
    tp = TopicPartition("orders", 0)

    async def named_after_written() -> float:
        store.create_topic("orders", {0: PartitionState.new((0,))})
        await replicas.start()  # its first pass reads the topic
        assert replicas.leadership(tp).leader_epoch == 0
        await asyncio.sleep(0.2)  # the first poll's wait under way
        state = writer.read_topic("orders")[0]
        written = time.monotonic()
        writer.alter_partition("orders", 0, state.partition_epoch, state.with_leader(0))
        while replicas.leadership(tp).leader_epoch != 1:
            await asyncio.sleep(0.005)
        named = time.monotonic() - written
        await replicas.stop()
        return named

    try:
        assert asyncio.run(asyncio.wait_for(named_after_written(), timeout=8)) < 2.0
    finally:
        logs.shutdown()
    assert not any(thread.name == "state-dir-watch" for thread in threading.enumerate())


def test_a_burst_of_writes_wakes_a_broker_a_few_times_a_poll_not_once_a_write(
    tmp_path: Path,
) -> None:
    """Each write moves the journal and wakes the broker (``watch_changes``), but it
    reads at most ``TICKS_PER_POLL`` times a poll: a failover's burst of part writes
    costs the store a few reads per broker, not one per write."""
    store = LocalStateStore(tmp_path / "state")
    writer = LocalStateStore(tmp_path / "state")
    (tmp_path / "data").mkdir()
    logs = LogManager(LogManagerConfig(log_dirs=(tmp_path / "data",)))
    settings = ReplicationConfig(store=DirectoryStore(tmp_path / "state"), state_poll_ms=1_000)
    replicas = _replica_manager(tmp_path, store, logs, settings=settings)

    async def ticks_during_a_burst() -> tuple[int, int, float]:
        store.create_topic("orders", {0: PartitionState.new((0,))})
        await replicas.start()
        reads = count_reads(store)
        started = time.monotonic()
        writes = 0
        while time.monotonic() - started < 2.0:  # two polls' time of writes
            await asyncio.to_thread(
                writer.write_topic_configs, "orders", {"retention.ms": str(60_000 + writes)}
            )
            writes += 1
        elapsed = time.monotonic() - started
        await replicas.stop()
        return reads.by_method.get("topic_changes", 0), writes, elapsed

    try:
        ticks, writes, elapsed = asyncio.run(asyncio.wait_for(ticks_during_a_burst(), 20))
    finally:
        logs.shutdown()
    assert writes > 4 * TICKS_PER_POLL * elapsed  # a burst: more writes than ticks allowed
    assert 2 <= ticks <= TICKS_PER_POLL * elapsed + 2  # woken, but a few times a poll


def test_a_state_written_while_a_pass_applies_is_named_by_metadata_at_once(
    tmp_path: Path,
) -> None:
    """A controlled shutdown hands a topic over in one write per part: a pass that read
    the first part and is applying its leaderships (here held up by a partition's lock)
    keeps the store followed, so the next part's leaders are named as soon as they are
    written, not once that apply is done (2 s at 4,000 partitions, docs/BENCHMARKS.md);
    the next pass applies them."""
    store, logs, replicas = _over_a_local_store(tmp_path)
    held, other = TopicPartition("orders", 0), TopicPartition("orders", 1)

    def new_epoch(tp: TopicPartition) -> None:
        state = store.read_topic("orders")[tp.partition]
        store.alter_partition("orders", tp.partition, state.partition_epoch, state.with_leader(0))

    async def named(tp: TopicPartition, epoch: int) -> None:
        while replicas.leadership(tp).leader_epoch != epoch:
            await asyncio.sleep(0.01)

    async def write_while_a_pass_applies() -> None:
        store.create_topic("orders", {p: PartitionState.new((0,)) for p in range(2)})
        await replicas.start()
        async with replicas.lock(held):
            new_epoch(held)  # the next pass applies it, and waits for the lock
            await asyncio.wait_for(named(held, 1), timeout=10)
            new_epoch(other)
            await asyncio.wait_for(named(other, 1), timeout=10)
            assert replicas.leader(other).leader_epoch == 0  # read, not applied yet
        await asyncio.wait_for(named_and_led(other, 1), timeout=10)
        await replicas.stop()

    async def named_and_led(tp: TopicPartition, epoch: int) -> None:
        while replicas.leaders.get(tp) is None or replicas.leader(tp).leader_epoch != epoch:
            await asyncio.sleep(0.01)

    try:
        asyncio.run(write_while_a_pass_applies())
    finally:
        logs.shutdown()


def test_the_published_version_moves_with_a_new_state_and_not_with_one_read_again(
    tmp_path: Path,
) -> None:
    """Metadata keeps its answer while ``published_version`` holds (``kafka/kept_answers``):
    it moves when a partition's published state changes, and a topic's states read again
    unchanged (every partition of a topic is published at each change of it) leave it."""
    store, logs, replicas = _over_a_local_store(tmp_path)
    orders = TopicPartition("orders", 0)

    async def publish_and_change() -> tuple[int, int, int, int]:
        empty = replicas.published_version
        store.create_topic("orders", {p: PartitionState.new((0,)) for p in range(2)})
        await replicas.poll_once()
        created = replicas.published_version
        unchanged = store.read_topic("orders")
        await replicas.apply_all([(TopicPartition("orders", p), s) for p, s in unchanged.items()])
        read_again = replicas.published_version
        state = unchanged[0]
        store.alter_partition("orders", 0, state.partition_epoch, state.with_leader(0))
        await replicas.poll_once()
        await replicas.stop()
        return empty, created, read_again, replicas.published_version

    try:
        empty, created, read_again, changed = asyncio.run(publish_and_change())
    finally:
        logs.shutdown()
    assert empty < created
    assert read_again == created
    assert changed > read_again
    assert replicas.leadership(orders).leader_epoch == 1


@pytest.mark.parametrize("topics", [1, 5], ids=["1-part", "10-parts"])
def test_an_idle_poll_reads_what_changed_not_every_part(tmp_path: Path, topics: int) -> None:
    """A broker's poll of an idle store reads the journal and the leases, however many
    parts the store holds (topics of 1,001 partitions are two parts each); a change is
    then read, and applied, from its topic alone."""
    store = LocalStateStore(tmp_path / "state")
    data = tmp_path / "data"
    data.mkdir()
    logs = LogManager(LogManagerConfig(log_dirs=(data,)))
    partitions = 1 if topics == 1 else 1001
    for number in range(topics):  # led elsewhere: broker 0 keeps no log of these
        store.create_topic(
            f"topic-{number}", {p: PartitionState.new((1,)) for p in range(partitions)}
        )
    store.create_topic("orders", {0: PartitionState.new((0,))})
    replicas = _replica_manager(tmp_path, store, logs)

    async def poll_twice_then_change() -> tuple[int, int]:
        await replicas.poll_once()
        reads = count_reads(store)
        await replicas.poll_once()
        idle = reads.total
        store.add_partitions("orders", {1: PartitionState.new((0,))})
        reads.reset()
        await replicas.poll_once()
        return idle, reads.total

    try:
        idle, changed = asyncio.run(poll_twice_then_change())
        assert idle <= 2
        assert changed == idle + 2  # and the changed topic's one part and its configs
        assert TopicPartition("orders", 1) in logs.partitions
    finally:
        logs.shutdown()


def test_a_new_topics_logs_are_kept_out_of_full_collections_in_a_tuned_process(
    tmp_path: Path,
) -> None:
    """A broker froze its start-up objects (``tierlog.process_tuning``); a topic created
    later adds its partitions' logs and replica states, and the pass that made them
    freezes them too: a full collection then no longer scans every partition's objects
    (0.3-0.4 s at 2,000 partitions, one of them in a survivor's read of a hand-over).
    A deleted topic's logs are thawed, so that their cycles can still be collected."""
    store, logs, replicas = _over_a_local_store(tmp_path)
    orders = TopicPartition("orders", 0)

    def tracked(thing: object) -> bool:  # tracked and not frozen: a full collection scans it
        return any(candidate is thing for candidate in gc.get_objects())

    async def create_then_delete() -> None:
        store.create_topic("orders", {0: PartitionState.new((0,))})
        await replicas.poll_once()
        created = logs.get_log(orders)
        assert not tracked(created)
        frozen = gc.get_freeze_count()
        store.delete_topic("orders")
        await replicas.poll_once()
        assert gc.get_freeze_count() < frozen  # thawed, collected, and frozen again
        await replicas.stop()

    gc.collect()
    gc.freeze()  # what ``tune_process`` does once a broker is started
    try:
        asyncio.run(create_then_delete())
    finally:
        gc.unfreeze()  # this test process keeps no frozen objects
        logs.shutdown()
