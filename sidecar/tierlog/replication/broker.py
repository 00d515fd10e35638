"""A broker's part in a replicated cluster, started and stopped with its server.

``ReplicatedBroker`` holds what replication adds to a broker: its lease in the
partition-state store (taken at start: this incarnation's broker epoch; renewed in the
background; a newer incarnation taking it fences this one, which then stops leading),
the replica manager, and on one machine a controller: every broker runs one, and the
one in the lowest broker id it sees alive decides. When that broker stops renewing its
lease (killed, paused by SIGSTOP, cut off), the next one takes over a lease later, by
its own clock; a single controller chosen by a file lock stopped every election while
its holder was paused, which the fault run showed. Two deciding at once (their views a
moment apart) stay safe, as every change is a compare-and-swap that elects only what
the ISR allows; deciding one at a time keeps them from undoing each other's elections.
``controlled_shutdown`` is Kafka's (KIP-841): before the server stops, this broker's lease
says it is in controlled shutdown, its leaderships go to other in-sync replicas and it
leaves the ISRs, still fetching, so producers move on at once rather than after its lease
expires. Once its fetchers and its controller passes have stopped (``stop``), it gives
its lease up, so the others' next controller pass counts it gone rather than a lease
later, as Kafka's controller fences a broker whose controlled shutdown completed: out
of their Metadata, and a partition whose only in-sync replica it was (which it kept
leading: nobody to hand over to) offline with its ISR kept, as for an expired lease.
A start hands over first too: a restarted broker earns its place in each ISR again.
One whose log dir was formatted at this start does not lead an ISR it cannot leave (it
is the only member) while another replica may hold the records: it elects the replica
holding the most (``unclean_recovery``). ``elect_leaders`` is Kafka's ElectLeaders,
made by whichever broker is asked.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import time
import uuid
from collections.abc import Sequence

from tierlog.api.errors import StaleBrokerEpochError
from tierlog.broker.topics import TopicStore
from tierlog.controller.controlled_shutdown import hand_over_leaderships
from tierlog.controller.controller import Controller, ControllerThread
from tierlog.controller.elections import ReplicaLogEnd
from tierlog.controller.leader_elections import (
    AskedPartitions,
    ElectionType,
    TopicOutcomes,
    elect_leaders,
)
from tierlog.partition_state.lease_keeper import LeaseKeeper
from tierlog.replication.config import DirectoryStore, ReplicationConfig
from tierlog.replication.replica_manager import ReplicaManager
from tierlog.replication.state_store import open_state_store
from tierlog.replication.unclean_recovery import (
    RETRY_INTERVAL_S,
    UncleanRecovery,
    ask_replica_log_ends,
)
from tierlog.storage.errors import TierlogError
from tierlog.storage.topic_partition import TopicPartition

__all__ = ["ReplicatedBroker"]

log = logging.getLogger(__name__)

CONTROLLER_INTERVAL_S = 0.1  # a controller pass: leases read, elections made


class ReplicatedBroker:
    def __init__(self, node_id: int, settings: ReplicationConfig, topics: TopicStore):
        self.node_id = node_id
        self.settings = settings
        self.store = open_state_store(settings.store)
        holder = f"broker-{node_id}-{os.getpid()}-{uuid.uuid4().hex[:8]}"
        self.lease = LeaseKeeper(
            self.store,
            node_id,
            holder,
            settings.broker_session_timeout_ms / 1000,
            on_fenced=self._fenced,
        )
        self.broker_epoch = -1
        self.controller = Controller(
            self.store,
            unclean_for=lambda topic: topics.log_config(topic).unclean_leader_election_enable,
            preferred_leaders=settings.auto_leader_rebalance,
            broker=node_id,
        )
        # On Kubernetes the operator runs the controller's passes, one per cluster
        # (tierlog.operator.partition_controller), not every broker ten times a second
        # against the API server.
        self._controller_passes: ControllerThread | None = (
            ControllerThread(self.controller, CONTROLLER_INTERVAL_S)
            if isinstance(settings.store, DirectoryStore)
            else None
        )
        self.replicas: ReplicaManager | None = None  # set by the server before start
        self._loop: asyncio.AbstractEventLoop | None = None
        self._fencing: asyncio.Task[None] | None = None
        self._recovering: asyncio.Task[None] | None = None

    async def take_lease(self, logs_lost: bool = False) -> int:
        """This incarnation's broker epoch (renewed from now on); ``logs_lost``: its log
        dir was formatted at this start (``LogManager.formatted_log_dirs``)."""
        self._loop = asyncio.get_running_loop()
        self.broker_epoch = await asyncio.to_thread(self.lease.start, logs_lost)
        return self.broker_epoch

    async def start(self) -> None:
        """Rejoin the cluster as a new incarnation: first out of every ISR it can leave
        (its log may have lost what the ISR promised: a crash before a flush, a wiped
        disk), leading nothing another in-sync replica can lead; then replicate, and
        rejoin each ISR once caught up (Kafka's controller does the same to a broker
        that registers after an unclean shutdown, KIP-966). With its logs lost, an ISR
        it is the only member of goes to the replica holding the most, or offline until
        one answers (``UncleanRecovery``), before it applies any state."""
        assert self.replicas is not None
        await self._hand_over("restart")
        if self.lease.logs_lost:
            await self._recover_lost_logs()
        await self.replicas.start()
        if self._controller_passes is not None:
            self._controller_passes.start()

    def live_brokers(self) -> frozenset[int] | None:
        """The brokers whose leases were current at this one's last controller pass;
        None where the operator runs the controller (this broker does not watch) and
        before a first pass (which always finds this broker's own lease)."""
        if self._controller_passes is None:
            return None
        return self.controller.live or None

    def deciding_controller(self) -> int | None:
        """The broker whose controller decides now, by this one's last view of the leases
        (the lowest live id); None where the operator runs the controller, or before a
        first pass."""
        if self._controller_passes is None:
            return None
        return min(self.controller.live, default=None)

    async def elect_leaders(
        self, election: ElectionType, asked: AskedPartitions | None
    ) -> list[TopicOutcomes]:
        """Kafka's ElectLeaders, made in the store by this broker (every election a
        compare-and-swap, so any broker may), with the brokers alive by this one's
        controller view (or, where the operator runs the controller, by the leases'
        renewal times); then applied here, so this broker's Metadata names the new
        leaders at once."""
        live = self.live_brokers() or frozenset(await asyncio.to_thread(self._live_brokers))
        outcomes = await asyncio.to_thread(elect_leaders, self.store, election, asked, live)
        elected = any(error is None for _topic, results in outcomes for _p, error in results)
        if elected and self.replicas is not None:
            await self.replicas.poll_once()
        return outcomes

    async def controlled_shutdown(self) -> None:
        """Kafka's controlled shutdown as KIP-841 has it: mark this broker's lease as in
        controlled shutdown, hand its leaderships to live in-sync replicas and leave the
        ISRs, apply that here, and go on fetching until each leader has answered once
        since the shutdown began; the server stops the fetchers after.

        The mark comes first: from it on no leader adds this broker to an ISR (the store
        refuses, ``alter_isrs``), so a follower still fetching is not caught up again and
        put back in the ISRs it just left (682 of 2,000 partitions before the mark, and
        acks=all produce there waited for it until its lease expired). Fetching on is what
        brings each follower the high watermark its last fetch committed, which its
        checkpoint keeps. A second hand-over at the end takes it out of an ISR a leader's
        change decided before the mark put it back in."""
        marks = {} if self.replicas is None else self.replicas.fetch_answers()
        try:
            await asyncio.to_thread(self.lease.enter_controlled_shutdown)
        except StaleBrokerEpochError as fenced:  # a newer incarnation is this broker now
            log.warning("controlled shutdown: nothing to hand over: %s", fenced)
            return
        await self._hand_over("controlled shutdown")
        if self.replicas is None:
            return
        await self.replicas.poll_once()
        if not await self.replicas.answered_since(marks, self._answer_timeout_s()):
            log.warning("controlled shutdown: a leader did not answer in time; stopping anyway")
        await self._hand_over("controlled shutdown, last check")
        await self.replicas.poll_once()

    def _answer_timeout_s(self) -> float:
        """Long enough for a fetch the leader holds (replica.fetch.wait.max.ms) and a
        retry after a failed stream (replica.fetch.backoff.ms)."""
        fetch = self.settings.fetch
        return (2 * fetch.max_wait_ms + fetch.backoff_ms) / 1000

    async def _recover_lost_logs(self) -> None:
        """The first pass of the unclean recovery; the partitions no other replica
        answered for are asked about again in the background, and once none is left the
        lease stops saying this broker's logs were lost (the controller may then lead an
        offline partition from its ISR by this broker again: it is in no ISR it has not
        caught up with since)."""
        assert self.replicas is not None
        replicas = self.replicas

        def recovered() -> None:
            replicas.unclean_recoveries += 1

        recovery = UncleanRecovery(
            self.store, self.node_id, self._ask_log_ends, self._live_brokers, recovered
        )
        await recovery.start()

        async def until_recovered() -> None:
            await recovery.run()
            while True:
                try:
                    await asyncio.to_thread(self.lease.logs_recovered)
                except StaleBrokerEpochError:
                    return  # a newer incarnation is this broker now
                except TierlogError as error:  # the store is away: the lease says so later
                    log.warning("unclean recovery: cannot update the lease yet: %s", error)
                    await asyncio.sleep(RETRY_INTERVAL_S)
                    continue
                log.info("unclean recovery: no partition is left that only the lost logs held")
                return

        self._recovering = asyncio.create_task(until_recovered(), name="unclean-recovery")

    async def _ask_log_ends(
        self, broker: int, partitions: Sequence[TopicPartition]
    ) -> dict[TopicPartition, ReplicaLogEnd]:
        """What ``broker`` says its logs of ``partitions`` hold (``GetReplicaLogInfo``),
        waiting as long as a follower waits for its leader's answer."""
        assert self.replicas is not None
        address = self.replicas.addresses().get(broker)
        if address is None:
            return {}
        channel = self.replicas.channel_factory(address)
        try:
            return await ask_replica_log_ends(
                channel, self.replicas.call_metadata, partitions, self._answer_timeout_s()
            )
        finally:
            await channel.close()

    async def _hand_over(self, why: str) -> None:
        """This broker's leaderships to live in-sync replicas, and it out of the ISRs,
        written whole before its replica manager reads any of it (``reads_held``)."""
        live = await asyncio.to_thread(self._live_brokers)
        held = contextlib.nullcontext() if self.replicas is None else self.replicas.reads_held()
        async with held:
            changes = await asyncio.to_thread(hand_over_leaderships, self.store, self.node_id, live)
        log.info("%s: %d partition(s) handed over or left", why, len(changes))

    async def stop(self) -> None:
        """Stop replicating, then give the lease up (``LeaseKeeper.release``): last, so
        the broker fetches, and counts as alive, until nothing of it is left running."""
        if self._recovering is not None:
            self._recovering.cancel()
            await asyncio.gather(self._recovering, return_exceptions=True)
        if self.replicas is not None:
            await self.replicas.stop()
        if self._controller_passes is not None:
            await asyncio.to_thread(self._controller_passes.stop)
        await asyncio.to_thread(self.lease.release)
        await asyncio.to_thread(self.store.close)  # its watch, on Kubernetes

    def _live_brokers(self) -> set[int]:
        """Brokers whose leases are current, by their renewal times, and not in
        controlled shutdown (two brokers stopping at once hand nothing to each other; a
        hand-over target or an elected leader that turns out dead is the controller's to
        replace one lease later)."""
        now = time.time()
        return {
            broker
            for broker, lease in self.store.read_leases().items()
            if lease.current_at(now) and not lease.in_controlled_shutdown
        }

    def _fenced(self) -> None:
        """A newer incarnation of this broker took its lease (from the keeper's thread):
        stop leading and following; the newer one is this broker now."""
        log.error(
            "broker %d was fenced by a newer incarnation: no longer replicating", self.node_id
        )
        if self._loop is not None:
            self._loop.call_soon_threadsafe(self._stop_replicating)

    def _stop_replicating(self) -> None:
        if self.replicas is not None:
            self._fencing = asyncio.create_task(self.replicas.stop())
