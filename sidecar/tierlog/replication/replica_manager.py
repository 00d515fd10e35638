"""Which partitions this broker leads and follows, as the partition-state store says.

Kafka's ``ReplicaManager``: the store is the truth (who leads in which epoch, who is in
sync), followed every ``poll_ms``, or at once when the store says it moved, by reading
the topics that changed (``StoreFollower``);
each change of a partition this broker replicates is
applied while nothing else holds the partition's lock (in place if it needs no thread:
an ISR change, a follow of a log kept here): becoming leader starts the epoch in the log
(``Log.become_leader``) and a ``LeaderPartition``; becoming follower hands the
partition to the fetcher of its leader (one per leader broker), which truncates by
leader epoch and copies. A leader answers its producers and consumers, drops followers
that fall behind from the ISR and adds them back once caught up, each change a
compare-and-swap in the store (Kafka's AlterPartition): a lost race means the state
moved on, which is re-read and applied.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import logging
import time
from collections.abc import AsyncIterator, Callable, Iterable, Iterator, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import TypeVar

import grpc

from tierlog.api.errors import (
    LeaderNotAvailableError,
    NotLeaderOrFollowerError,
    StaleBrokerEpochError,
)
from tierlog.api.v1 import replication_service_pb2 as pb
from tierlog.broker.leader_epoch_check import check_leader_epoch
from tierlog.broker.topics import Topic, TopicStore
from tierlog.broker.watch import AppendWatch
from tierlog.partition_state.change_journal import not_watching
from tierlog.partition_state.model import (
    NO_LEADER,
    BrokerLease,
    PartitionState,
    replica_assignment,
    replication_factor,
)
from tierlog.partition_state.store import PartitionStateStore
from tierlog.partition_state.store_follower import StoreFollower, StoreView
from tierlog.process_tuning import freeze_new_objects
from tierlog.replication.config import ReplicationConfig
from tierlog.replication.fetcher import APPLIES_IN_FLIGHT, ReplicaFetcher
from tierlog.replication.follower import FetchOutcome
from tierlog.replication.leader import LeaderPartition, SessionClock
from tierlog.storage.errors import TierlogError
from tierlog.storage.log import Log
from tierlog.storage.manager import LogManager
from tierlog.storage.records import NO_PARTITION_LEADER_EPOCH
from tierlog.storage.tier.store import ObjectStore
from tierlog.storage.topic_partition import TopicPartition

__all__ = ["ReplicaManager"]

_T = TypeVar("_T")

log = logging.getLogger(__name__)

ChannelFactory = Callable[[str], grpc.aio.Channel]
# Role changes applied at once (``apply_all``), each one's blocking part (a new leader
# epoch's checkpoint, two fsyncs; a log created) in a thread of the replica manager's own
# pool: the more side by side, the more fsyncs share each of the journal's commits (on
# this machine's ext4, 8 side by side cost a tenth of 8 in turn). At 8 in the default
# executor (6 threads on 2 cores, shared with the requests), a survivor took 0.9-2.2 s to
# lead 667 partitions of a hand-over; at 32 in a pool of their own, 0.4-0.6 s (scratch
# runs in-process, load 13-17, 2026-11-29). Since ISR changes and follows are applied in
# place, only new leaderships and first logs come here, and fewer side by side hand the
# GIL about less: each syscall of a checkpoint gives it up and takes it back, and the
# event loop waits its turn among them, so requests wait too. In a quiet run at 8 the
# survivor's loop was held 63 ms in all over its apply against 391 ms at 32, the apply
# taking 0.81 s against 0.67 s (handover_apply_bench), and Metadata named the new
# leaders after SIGTERM in 0.27 s against 0.34 s (medians of 8, 2026-12-01).
TRANSITIONS_IN_FLIGHT = 8
# Woken by the store, a broker reads at once, but at most this many times a poll
# interval: a burst of writes (a failover's parts, a watch event each) costs the store
# a few reads per broker a poll, not one per write.
TICKS_PER_POLL = 5
# Role changes that wait for nothing applied in place (``apply_all``), this many between
# two turns of the loop: a failover's thousands of ISR changes leave room for requests.
APPLIED_PER_TURN = 64


@dataclass(frozen=True)
class Leadership:
    """A partition as Metadata reports it (Kafka's fields)."""

    leader_id: int  # NO_LEADER: offline, or not known here yet
    leader_address: str
    leader_epoch: int
    replicas: list[int]
    isr: list[int]


class ReplicaManager:
    def __init__(
        self,
        node_id: int,
        broker_epoch: Callable[[], int],
        store: PartitionStateStore,
        logs: LogManager,
        topics: TopicStore,
        watch: AppendWatch,
        addresses: Callable[[], Mapping[int, str]],
        channel_factory: ChannelFactory,
        call_metadata: Sequence[tuple[str, str]],
        settings: ReplicationConfig,
        racks: Callable[[], Mapping[int, str | None]] = dict,
        shared_tier: ObjectStore | None = None,
    ):
        self.node_id = node_id
        self.broker_epoch = broker_epoch
        self.store = store
        self.logs = logs
        self.topics = topics
        self.watch = watch
        self.addresses = addresses  # broker id -> host:port
        self.channel_factory = channel_factory
        self.call_metadata = call_metadata  # what a follower's calls carry (the token)
        self.settings = settings
        self.known_racks = racks  # broker id -> rack, where the plan names one
        # The tier when every broker reads the same one (S3, a shared directory): only
        # then can a follower go by its leader's tier (its end, the state a restart
        # takes). A tier of its own is none of the leader's: nothing is freed for it.
        self.shared_tier = shared_tier
        self.states: dict[TopicPartition, PartitionState] = {}  # as last applied
        # Each partition's newest state read, published before it is applied: what
        # Metadata names (``leadership``), as Kafka's broker sets its metadata cache's
        # image before its replica manager applies the delta. A client learns of a new
        # leader as soon as this broker read it, not once this broker's role changes
        # (a hand-over's hundreds, each a leader-epoch checkpoint) are all done; until
        # the leader's own is, it answers NOT_LEADER_OR_FOLLOWER and the client retries.
        self._published: dict[TopicPartition, PartitionState] = {}
        # Moves with every change of ``_published``: an answer built from the published
        # states holds while this has not moved (``published_version``).
        self._published_version = 0
        self.leaders: dict[TopicPartition, LeaderPartition] = {}
        self.fetchers: dict[int, ReplicaFetcher] = {}  # by leader id
        self._following: dict[TopicPartition, int] = {}  # -> leader id
        self._locks: dict[TopicPartition, asyncio.Lock] = {}
        self._leases: dict[int, BrokerLease] = {}  # as the last poll read them
        self._altering: set[TopicPartition] = set()  # an ISR change pending or in the store
        # ISR changes waiting for their topic's batch, and the topics whose batches are sent.
        self._isr_pending: dict[str, dict[int, tuple[LeaderPartition, tuple[int, ...]]]] = {}
        self._isr_senders: set[str] = set()
        self._topics_seen: set[str] = set()  # in the store at the last poll
        self._follower = StoreFollower(store)
        # Changed topics read and not applied yet: left by a failed pass, or read while
        # a pass applied others (``_follow_store``).
        self._unapplied: set[str] = set()
        self._polling = asyncio.Lock()  # one pass over the store at a time
        self._reading = asyncio.Lock()  # one read of the store at a time
        self._tasks: list[asyncio.Task[None]] = []
        # Its threads start as role changes need them (``TRANSITIONS_IN_FLIGHT``).
        self._role_changes = ThreadPoolExecutor(TRANSITIONS_IN_FLIGHT, "tierlog-role-change")
        # The fetchers' answers that wait on the disk (a new leader epoch's checkpoint, a
        # roll, a truncation), side by side: a pool apart, so that a failover's role
        # changes never queue behind its followers' appends.
        self._follower_applies = ThreadPoolExecutor(APPLIES_IN_FLIGHT, "tierlog-follower-apply")
        self._stopping = False  # stop() began: no ISR change starts any more
        # ISR changes of partitions led here (Kafka's IsrShrinksPerSec, IsrExpandsPerSec).
        self.isr_shrinks = 0
        self.isr_expands = 0
        # Partitions this broker gave to another replica when its logs were lost
        # (``unclean_recovery``).
        self.unclean_recoveries = 0

    # -- running ----------------------------------------------------------------------

    async def start(self) -> None:
        """Apply the store's state once, then follow it in the background."""
        await self.poll_once()
        self._tasks = [
            asyncio.create_task(self._follow_store(), name="replica-manager-poll"),
            asyncio.create_task(self._maintain_isr(), name="replica-manager-isr"),
        ]

    async def stop(self) -> None:
        """Stop following the store; a pass an admin call asked for ends first, and
        none starts after (``poll_once``), so nothing is taken on while the logs close."""
        self._stopping = True
        for task in self._tasks:
            task.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)
        async with self._polling:
            for fetcher in self.fetchers.values():
                await fetcher.close()
            self.fetchers.clear()
            for leader in self.leaders.values():
                leader.resign()
            self.leaders.clear()
            self._following.clear()
        self._role_changes.shutdown(wait=False)  # none is running: the passes have ended
        self._follower_applies.shutdown(wait=False)  # nor here: the fetchers are closed

    def fetch_answers(self) -> dict[int, int]:
        """How many answers each fetcher (by leader id) has applied so far: a mark to
        wait from (``answered_since``)."""
        return {leader_id: fetcher.answers for leader_id, fetcher in self.fetchers.items()}

    async def answered_since(self, marks: Mapping[int, int], timeout_s: float) -> bool:
        """Wait until each fetcher of ``marks`` that still runs has applied an answer read
        after its mark; whether they all did within ``timeout_s``.

        A broker in controlled shutdown waits so before it stops fetching: an answer read
        after a produce was acknowledged carries the high watermark that produce reached
        (the follower's fetch that let the leader count it committed was the last one
        asked, so its answer is the next one read, and the leader answers a partition
        whose high watermark moved), and the checkpoint written at the stop keeps it."""
        waits = [
            fetcher.answered(mark + 1)
            for leader_id, mark in marks.items()
            if (fetcher := self.fetchers.get(leader_id)) is not None and fetcher.epochs
        ]
        try:
            await asyncio.wait_for(asyncio.gather(*waits), timeout_s)
        except TimeoutError:
            return False
        return True

    @contextlib.asynccontextmanager
    async def reads_held(self) -> AsyncIterator[None]:
        """No read of the store while held: the passes and the reads between them wait
        for its end. A broker handing its leaderships over holds it while it writes, so
        that it applies the hand-over once every part of it is written, not part by part
        while its last parts wait: its own pass over the first part (333 resignations,
        each logged, at 4,000 partitions) took the GIL from the thread writing the others,
        and the survivors read the last part 0.85-1.37 s after the signal, not 0.32-0.51 s
        (docs/BENCHMARKS.md)."""
        async with self._reading:
            yield

    async def poll_once(self) -> None:
        """Read the store and apply what changed: topics (their partition counts and
        configs, or their deletion), then each partition's state. One pass at a time:
        the admin service asks for one after each change beside the periodic ones, and
        two passes both seeing a topic gone both deleted its logs (the second failed
        with UNKNOWN_TOPIC_OR_PARTITION, which the caller's DeleteTopics then answered)."""
        async with self._polling:
            if not self._stopping:
                await self._poll()

    async def _poll(self) -> None:
        view = await self._read()
        # Taken at once: what a read made while this pass runs stays for the next one.
        applying, self._unapplied = self._unapplied, set()
        logs_before = self.logs.partition_count
        try:
            await self._apply_view(view, applying)
        except BaseException:
            self._unapplied |= applying  # applied again by the next pass
            raise
        finally:
            logs_after = self.logs.partition_count
            if logs_after != logs_before:
                # The logs made (or let go of) live as long as their partitions here: out
                # of the cyclic GC's full collections (tierlog.process_tuning).
                freeze_new_objects(thaw=logs_after < logs_before)
        await self._repoint_fetchers()

    async def _apply_view(self, view: StoreView, topics: set[str]) -> None:
        """Topics gone from ``view`` forgotten; ``topics`` (those changed) followed, and
        their partitions' states applied."""
        for gone in self._topics_seen - set(view.topics):
            await self._forget_topic(gone)
        self._topics_seen = set(view.topics)
        changed = []
        for name in sorted(topics & self._topics_seen):
            partitions, configs = view.topics[name]
            wanted = Topic(
                name,
                len(partitions),
                configs,
                replication_factor(partitions),
                replica_assignment(partitions),
            )
            if self._local_topic(name) != wanted:
                await asyncio.to_thread(self._follow_topic, wanted)
            for partition, state in partitions.items():
                tp = TopicPartition(name, partition)
                if self.states.get(tp) != state:
                    changed.append((tp, state))
        await self.apply_all(changed)

    async def _read(self) -> StoreView:
        """The store read once: what changed is added to ``_unapplied``, and each
        partition's new state is published at once (Metadata names it)."""
        async with self._reading:
            view = await asyncio.to_thread(self._follower.refresh)
            self._leases = view.leases
            changed = view.topics.keys() if view.changed is None else view.changed
            for name in changed:
                if name in view.topics:
                    self._unapplied.add(name)
                    for partition, state in view.topics[name][0].items():
                        self._publish(TopicPartition(name, partition), state)
            return view

    def _local_topic(self, name: str) -> Topic | None:
        try:
            return self.topics.get(name)
        except TierlogError:
            return None

    def _follow_topic(self, topic: Topic) -> None:
        """Keep ``topic`` as the store has it; its logs here take its new config."""
        self.topics.put(topic)
        config = self.topics.log_config(topic.name)
        for partition in range(topic.partition_count):
            tp = TopicPartition(topic.name, partition)
            if self.logs.has_log(tp):
                self.logs.get_log(tp).update_config(config)

    async def _forget_topic(self, name: str) -> None:
        """The topic was deleted: stop replicating it and delete its logs here."""
        for tp in [tp for tp in self.states if tp.topic == name]:
            async with self.lock(tp):
                self._stop_replica(tp)
                del self.states[tp]
        for tp in [tp for tp in self._published if tp.topic == name]:
            del self._published[tp]
            self._published_version += 1
        await asyncio.to_thread(self._delete_topic_here, name)
        self.watch.deleted(name)
        log.info("topic %s deleted: its replicas here are gone", name)

    def _delete_topic_here(self, name: str) -> None:
        for tp in [tp for tp in self.logs.partitions if tp.topic == name]:
            self.logs.delete_log(tp)
        with contextlib.suppress(TierlogError):  # never known here
            self.topics.delete(name)
        self.logs.write_checkpoints()

    async def _follow_store(self) -> None:
        """A pass over the store every ``state.poll.ms``, or as soon as the store says it
        changed (``watch_changes``), each a task of its own: while one applies what it
        read (a failover's leaderships, seconds at thousands of partitions), each tick
        reads the store and publishes what changed, and the next pass applies it.  A
        controlled shutdown hands a topic over in one write per part, and a survivor that
        waited for its apply of the first part named the next part's leaders only after
        it (2 s at 4,000 partitions, where Kafka's named them all in 0.85 s). Told of a
        change, a survivor reads the hand-over as it lands, not up to a poll later."""
        loop = asyncio.get_running_loop()
        changed = asyncio.Event()

        def wake() -> None:  # in the store's thread
            with contextlib.suppress(RuntimeError):  # the loop is closed: nobody to wake
                loop.call_soon_threadsafe(changed.set)

        stop_watching = (
            await asyncio.to_thread(self.store.watch_changes, wake)
            if self.settings.state_watch
            else not_watching
        )
        poll_s = self.settings.state_poll_ms / 1000
        passing: asyncio.Task[None] | None = None
        last_tick = loop.time()
        try:
            while True:
                # A timer rather than ``wait_for``: no task made per tick (an idle
                # broker's CPU, as cheap as the ``sleep`` it replaced).
                poll = loop.call_later(poll_s, changed.set)
                await changed.wait()
                poll.cancel()
                await asyncio.sleep(last_tick + poll_s / TICKS_PER_POLL - loop.time())
                changed.clear()  # the wakes of a burst of writes: one tick
                last_tick = loop.time()
                try:
                    if passing is None or passing.done():
                        done, passing = passing, asyncio.create_task(self.poll_once())
                        if done is not None:
                            done.result()  # its error, if any, logged below
                    else:
                        await self._read()
                except TierlogError as error:  # the store is unreachable: keep the last view
                    log.warning("reading the partition-state store failed: %s", error)
        finally:
            stop_watching()
            if passing is not None:
                passing.cancel()
                await asyncio.gather(passing, return_exceptions=True)

    # -- changes of role --------------------------------------------------------------

    def lock(self, tp: TopicPartition) -> asyncio.Lock:
        lock = self._locks.get(tp)
        if lock is None:
            lock = self._locks[tp] = asyncio.Lock()
        return lock

    async def apply_all(self, states: Sequence[tuple[TopicPartition, PartitionState]]) -> None:
        """``apply`` each state. Those that wait for nothing (``_waits_for_nothing``: an
        ISR change, a follower's new leader, a stale state) are applied in place,
        ``APPLIED_PER_TURN`` a turn of the loop; the rest side by side,
        ``TRANSITIONS_IN_FLIGHT`` at a time: a failover's leaderships wait on the disk
        together, their leader-epoch checkpoints' fsyncs sharing the file system's
        journal commits, and a partition whose lock is held (a produce, a follower's
        append) holds up no other. Every state is applied that can be; the first error
        is raised once all are done."""
        for tp, state in states:
            self._publish(tp, state)  # those waiting for a slot are named at once too
        at_once = [
            (tp, state)
            for tp, state in states
            if self._waits_for_nothing(tp, state) and not self.lock(tp).locked()
        ]
        slots = asyncio.Semaphore(TRANSITIONS_IN_FLIGHT)

        async def apply_one(tp: TopicPartition, state: PartitionState) -> None:
            async with slots:
                await self.apply(tp, state)

        in_place = {tp for tp, _ in at_once}
        outcomes = asyncio.gather(
            *(apply_one(tp, state) for tp, state in states if tp not in in_place),
            return_exceptions=True,
        )
        try:
            for count, (tp, state) in enumerate(at_once, 1):
                if self.lock(tp).locked() or not self._waits_for_nothing(tp, state):
                    await self.apply(tp, state)  # it changed while the loop turned
                else:
                    self._take_role(tp, state)
                if count % APPLIED_PER_TURN == 0:
                    await asyncio.sleep(0)  # requests in between
        except BaseException:
            outcomes.cancel()
            raise
        for outcome in await outcomes:
            if isinstance(outcome, BaseException):
                raise outcome

    def _publish(self, tp: TopicPartition, state: PartitionState) -> None:
        """``state`` is what Metadata names for ``tp`` from now on, unless a newer one is
        (as ``apply`` takes it)."""
        published = self._published.get(tp)
        if published == state:  # a topic's every partition is published at each change
            return
        if published is None or published.partition_epoch <= state.partition_epoch:
            self._published[tp] = state
            self._published_version += 1

    async def apply(self, tp: TopicPartition, state: PartitionState) -> None:
        """Take the role ``state`` gives this broker for ``tp`` (if it is newer than the
        one applied: a state never goes back in partition epoch), published first."""
        self._publish(tp, state)
        async with self.lock(tp):
            if not self._waits_for_nothing(tp, state):
                await self._prepare_role(tp, state)
            self._take_role(tp, state)

    def _waits_for_nothing(self, tp: TopicPartition, state: PartitionState) -> bool:
        """Whether ``state``'s role is taken without a trip to a thread: it is stale,
        leaves this broker out, changes the ISR of an epoch led here, or names a leader
        for a log this broker has. A failover's hand-over brings the surviving leaders
        thousands of ISR changes: each waited for a slot behind the new leaderships' log
        openings, and the survivors' loops were busy with them (0.24 s to be led again
        after SIGTERM at 2,000 partitions against 0.175 s applied in place, Kafka 0.185-
        0.225 s, two runs each, 2026-12-01)."""
        if self._is_stale(tp, state) or self.node_id not in state.replicas:
            return True
        if state.leader == self.node_id:
            leader = self.leaders.get(tp)
            return leader is not None and leader.leader_epoch == state.leader_epoch
        return self.logs.has_log(tp)

    def _is_stale(self, tp: TopicPartition, state: PartitionState) -> bool:
        """Older than the state applied: a state never goes back in partition epoch."""
        applied = self.states.get(tp)
        return applied is not None and applied.partition_epoch > state.partition_epoch

    async def _prepare_role(self, tp: TopicPartition, state: PartitionState) -> None:
        """The blocking part of taking ``state``'s role, in the role changes' pool: a new
        leader epoch begun in the log, or the log of a partition first followed made."""
        if state.leader == self.node_id:
            self._unfollow(tp)
            self._resign(tp)
            await self._changing_role(functools.partial(self._open_to_lead, tp, state.leader_epoch))
        else:
            await self._changing_role(functools.partial(self._log, tp))

    def _take_role(self, tp: TopicPartition, state: PartitionState) -> None:
        """Apply ``state`` once its blocking part is done (``_prepare_role``), the
        partition's lock held or free: nothing here waits."""
        if self._is_stale(tp, state):
            return
        if self.node_id not in state.replicas:
            self._stop_replica(tp)
        elif state.leader == self.node_id:
            self._lead(tp, state)
        else:
            self._resign(tp)
            self._follow(tp, state)
        self.states[tp] = state
        self.watch.appended(tp)  # long polls look again: at the leadership too

    def _lead(self, tp: TopicPartition, state: PartitionState) -> None:
        leader = self.leaders.get(tp)
        if leader is not None and leader.leader_epoch == state.leader_epoch:
            self._count_isr_change(leader.state.isr, state.isr)
            leader.update_state(state)
            return
        partition_log = self.logs.get_log(tp)  # begun in this epoch by _prepare_role
        leader = LeaderPartition(tp, partition_log, state, self.node_id, _now_ms())
        self.leaders[tp] = leader
        leader.advance_high_watermark()
        log.info(
            "%s: leading in epoch %d from offset %d (ISR %s, high watermark %d)",
            tp,
            state.leader_epoch,
            partition_log.log_end_offset,
            list(state.isr),
            partition_log.high_watermark,
        )

    def _open_to_lead(self, tp: TopicPartition, leader_epoch: int) -> Log:
        """The partition's log, its tier claimed, leading in ``leader_epoch``: the blocking
        part of becoming leader, in one trip to a thread."""
        partition_log = self._log(tp)
        self._claim_tier(tp, partition_log)
        partition_log.become_leader(leader_epoch)
        return partition_log

    def _claim_tier(self, tp: TopicPartition, partition_log: Log) -> None:
        """Take over a tiered partition's tier as it starts leading here: the claim fences
        the previous leader's writer.

        An empty log claims before its first append: it may be a lost volume, which
        must start over at the tier's end, not take appends at offsets the tier holds.
        Any other log was elected from the ISR, so it holds everything the tier holds
        (only committed segments are uploaded): its claim runs in the background, and
        taking leadership waits for no request to the store. With the store away the
        leader leads all the same and the remote log manager's passes claim later."""
        tier = self.logs.tier
        if tier is None or not partition_log.config.remote_storage_enable:
            return
        if partition_log.log_end_offset > 0:
            tier.adopt(tp, partition_log)
            tier.run_soon(tp)
            return
        try:
            tier.attach(tp, partition_log)
        except (TierlogError, OSError) as error:
            log.warning("%s: cannot claim the tier yet (%s): the next pass will", tp, error)

    def _follow(self, tp: TopicPartition, state: PartitionState) -> None:
        previous = self._following.get(tp)
        if previous is not None and previous != state.leader:
            self._unfollow(tp)
        if state.leader == NO_LEADER:
            self._unfollow(tp)
            return
        fetcher = self.fetchers.get(state.leader)
        if fetcher is None:
            address = self.addresses().get(state.leader)
            if address is None:
                log.warning("%s: leader %d has no known address", tp, state.leader)
                return
            fetcher = self._new_fetcher(state.leader, address)
        fetcher.follow(tp, state.leader_epoch)
        self._following[tp] = state.leader

    def _new_fetcher(self, leader_id: int, address: str) -> ReplicaFetcher:
        fetcher = self.fetchers[leader_id] = ReplicaFetcher(
            self.node_id,
            self.broker_epoch,
            leader_id,
            address,
            self.channel_factory(address),
            self.call_metadata,
            self._access,
            self._fetched,
            self.settings.fetch,
            self.shared_tier,
            self._follower_applies,
        )
        return fetcher

    async def _repoint_fetchers(self) -> None:
        """A leader whose address changed (a new plan naming it, as when the operator's
        plan first resolves a pod) is fetched from at the new one: its fetcher is
        replaced and the partitions it followed move over, as Kafka's fetcher manager
        replaces a fetcher whose leader's endpoint changed. Without this, a follower
        that met a leader before its address was known kept asking the old one."""
        addresses = self.addresses()
        for leader_id, fetcher in list(self.fetchers.items()):
            address = addresses.get(leader_id)
            if address is None or address == fetcher.address:
                continue
            log.info("broker %d is now at %s: fetching from it there", leader_id, address)
            moved = self._new_fetcher(leader_id, address)  # in place before any await
            for tp, leader_epoch in fetcher.epochs.items():
                moved.follow(tp, leader_epoch)
            await fetcher.close()

    def _unfollow(self, tp: TopicPartition) -> None:
        leader_id = self._following.pop(tp, None)
        if leader_id is not None and leader_id in self.fetchers:
            self.fetchers[leader_id].unfollow(tp)

    def _resign(self, tp: TopicPartition) -> None:
        leader = self.leaders.pop(tp, None)
        if leader is not None:
            leader.resign()
            if self.logs.tier is not None:
                self.logs.tier.release(tp)  # its next leader keeps the tier
            log.info("%s: no longer leading (epoch %d)", tp, leader.leader_epoch)

    def _stop_replica(self, tp: TopicPartition) -> None:
        self._unfollow(tp)
        self._resign(tp)

    async def _changing_role(self, work: Callable[[], _T]) -> _T:
        """``work``, the blocking part of a change of role, in the role changes' pool."""
        return await asyncio.get_running_loop().run_in_executor(self._role_changes, work)

    def _log(self, tp: TopicPartition) -> Log:
        return self.logs.get_or_create_log(tp, self.topics.log_config(tp.topic))

    def _access(self, tp: TopicPartition) -> tuple[asyncio.Lock, Log]:
        return self.lock(tp), self.logs.get_log(tp)

    async def _fetched(self, tp: TopicPartition, outcome: FetchOutcome) -> None:
        """A follower's partition changed: long polls on it look again."""
        if outcome.appended_bytes or outcome.truncated_to is not None:
            self.watch.appended(tp)

    # -- the leader's answers ---------------------------------------------------------

    def leader(
        self, tp: TopicPartition, current_leader_epoch: int = NO_PARTITION_LEADER_EPOCH
    ) -> LeaderPartition:
        """``tp``'s leadership here; NOT_LEADER_OR_FOLLOWER (naming the leader) if another
        broker leads it, LEADER_NOT_AVAILABLE while nobody does. A request's
        ``current_leader_epoch`` is checked first, against the epoch known here
        (``leader_epoch_check``)."""
        leader = self.leaders.get(tp)
        if leader is not None:
            check_leader_epoch(tp, current_leader_epoch, leader.leader_epoch)
            return leader
        state = self.states.get(tp)
        if state is not None:
            check_leader_epoch(tp, current_leader_epoch, state.leader_epoch)
        if state is None or state.leader == NO_LEADER:
            raise LeaderNotAvailableError(f"{tp} has no leader right now; retry")
        address = self.addresses().get(state.leader, "")
        raise NotLeaderOrFollowerError(
            f"{tp} is led by broker {state.leader} at {address} (epoch {state.leader_epoch})",
            leader_id=state.leader,
            leader_address=address,
        )

    @property
    def published_version(self) -> int:
        """A number that moves whenever a partition's published state changes: what
        ``leadership`` says of every partition holds while it has not moved."""
        return self._published_version

    def leadership(self, tp: TopicPartition) -> Leadership:
        """``tp`` as Metadata names it: its newest state read (``_published``)."""
        return self._leadership(tp, self.addresses())

    def leaderships(self, tps: Iterable[TopicPartition]) -> Iterator[Leadership]:
        """Each of ``tps`` as ``leadership`` names it, the brokers' addresses read once (a
        Metadata answer of thousands of partitions read them once per partition)."""
        addresses = self.addresses()
        return (self._leadership(tp, addresses) for tp in tps)

    def _leadership(self, tp: TopicPartition, addresses: Mapping[int, str]) -> Leadership:
        state = self._published.get(tp)
        if state is None:
            return Leadership(NO_LEADER, "", -1, [], [])
        address = "" if state.leader == NO_LEADER else addresses.get(state.leader, "")
        return Leadership(
            state.leader, address, state.leader_epoch, list(state.replicas), list(state.isr)
        )

    def racks(self) -> dict[int, str | None]:
        """Each broker's rack, for placing replicas (None where the plan names none:
        Kafka's placement for brokers without racks)."""
        known = self.known_racks()
        return {node: known.get(node) for node in self.addresses()}

    def leader_for_follower(
        self, tp: TopicPartition, replica: int, current_leader_epoch: int
    ) -> LeaderPartition:
        leader = self.leader(tp, current_leader_epoch)
        if replica not in leader.followers:
            raise NotLeaderOrFollowerError(
                f"broker {replica} is not a replica of {tp}", leader_id=-1, leader_address=""
            )
        return leader

    def check_broker_epoch(self, replica: int, broker_epoch: int) -> None:
        """Refuse a follower's request from an incarnation older than its lease's."""
        lease = self._leases.get(replica)
        known = -1 if lease is None else lease.broker_epoch
        if broker_epoch < known:
            raise StaleBrokerEpochError(
                f"broker {replica}'s epoch is {known}, the request carries {broker_epoch}"
            )

    def record_fetch(
        self,
        leader: LeaderPartition,
        replica: int,
        asked: pb.ReplicaFetchPartition,
        now_ms: int,
        broker_epoch: int,
        clock: SessionClock | None = None,
    ) -> None:
        """``replica``'s fetch, made in ``broker_epoch`` (in the session ``clock`` keeps
        current), was answered: the high watermark may move, and the replica may rejoin
        the ISR."""
        before = leader.high_watermark
        leader.record_fetch(replica, asked.fetch_offset, now_ms, clock)
        if leader.high_watermark != before:
            self.watch.appended(leader.tp)  # consumers may read further now
        if leader.caught_up(replica) and self._isr_eligible(replica, broker_epoch, now_ms):
            isr = {*leader.state.isr, replica}
            self._alter_isr_soon(leader, tuple(r for r in leader.state.replicas if r in isr))

    def _isr_eligible(self, replica: int, broker_epoch: int, now_ms: int) -> bool:
        """Kafka's isReplicaIsrEligible: the fetch came from the incarnation holding the
        broker's lease, that lease is current (a fenced broker that still fetches, cut
        off from the store, stays out) and not in controlled shutdown (a stopping broker
        fetches until it stops, KIP-841). The store would refuse it anyway: this spares
        the batch it would fail."""
        lease = self._leases.get(replica)
        return (
            lease is not None
            and lease.broker_epoch == broker_epoch
            and lease.current_at(now_ms / 1000)
            and not lease.in_controlled_shutdown
        )

    # -- the ISR ----------------------------------------------------------------------

    async def _maintain_isr(self) -> None:
        lag_ms = self.settings.replica_lag_time_max_ms
        while True:
            await asyncio.sleep(lag_ms / 2000)
            now_ms = _now_ms()
            for leader in list(self.leaders.values()):
                lagging = leader.out_of_sync(now_ms, lag_ms)
                if lagging:
                    isr = tuple(r for r in leader.state.isr if r not in lagging)
                    log.info(
                        "%s: shrinking the ISR from %s to %s: %s not caught up for %d ms",
                        leader.tp,
                        list(leader.state.isr),
                        list(isr),
                        list(lagging),
                        lag_ms,
                    )
                    self._alter_isr_soon(leader, isr)

    def _alter_isr_soon(self, leader: LeaderPartition, isr: tuple[int, ...]) -> None:
        """Queue the ISR change for its topic's next batch (``_send_isr_changes``)."""
        # Once stopping, a follower's fetch still answered must not start a change that
        # would outlive stop() and apply its state to logs already shut down (a stopping
        # broker's ISRs are the controller's to change: it leaves them).
        if self._stopping or leader.tp in self._altering:
            return
        self._altering.add(leader.tp)
        topic = leader.tp.topic
        self._isr_pending.setdefault(topic, {})[leader.tp.partition] = (leader, isr)
        if topic in self._isr_senders:
            return
        self._isr_senders.add(topic)
        task = asyncio.create_task(self._send_isr_changes(topic))
        self._tasks.append(task)
        task.add_done_callback(self._tasks.remove)

    async def _send_isr_changes(self, topic: str) -> None:
        """Write the topic's queued ISR changes a batch at a time, one write per part of
        the topic (``alter_isrs``): those queued while a batch is in the store go in the
        next one, as Kafka's AlterPartitionManager keeps one request in flight. A
        returning follower caught up on a thousand partitions costs a write, not a
        thousand (docs/SCALE.md)."""
        try:
            await asyncio.sleep(0)  # the changes decided in this turn of the loop join in
            while batch := self._isr_pending.pop(topic, None):
                await self._alter_isrs(topic, batch)
        finally:
            self._isr_senders.discard(topic)

    async def _alter_isrs(
        self, topic: str, batch: dict[int, tuple[LeaderPartition, tuple[int, ...]]]
    ) -> None:
        changes = {p: (leader.state, isr) for p, (leader, isr) in batch.items()}
        try:
            altered = await asyncio.to_thread(self.store.alter_isrs, topic, changes)
            stored = dict(altered.stored)
            if altered.lost:
                log.info(
                    "%s: the ISR changes of partitions %s lost a race: reading them again",
                    topic, sorted(altered.lost),
                )  # fmt: skip
                fresh = await asyncio.to_thread(self.store.read_topic, topic)
                stored.update({p: fresh[p] for p in altered.lost if p in fresh})
        except TierlogError as error:
            isrs = {p: list(isr) for p, (_leader, isr) in sorted(batch.items())}
            log.warning("%s: changing the ISRs to %s failed: %s", topic, isrs, error)
            return
        finally:
            for leader, _isr in batch.values():
                self._altering.discard(leader.tp)
        await self.apply_all([(batch[p][0].tp, state) for p, state in sorted(stored.items())])

    def _count_isr_change(self, before: Sequence[int], after: Sequence[int]) -> None:
        """An ISR change of a partition led here, whoever made it: this leader (a follower
        lagging for replica.lag.time.max.ms, or caught up) or the controller fencing a
        broker whose lease expired, which with the default timeouts (9 s against 30 s)
        is how a dead follower usually leaves."""
        if set(before) - set(after):
            self.isr_shrinks += 1
        if set(after) - set(before):
            self.isr_expands += 1


def _now_ms() -> int:
    return int(time.time() * 1000)
