"""The partitions of a coordinator's internal topic this broker leads, each loaded once.

Both coordinators (groups over ``__consumer_offsets``, transactions over
``__transaction_state``) coordinate a key while this broker leads the partition it hashes
to: with replication, as the replica manager leads it (in a leader epoch); without, as
this broker owns it (in the plan's generation). Each partition led here is loaded (its log
replayed by the coordinator's ``Load``) when its leadership begins, keyed by that epoch: a
leadership lost and won back is a new epoch and a fresh load, since another leader may
have written meanwhile. Until its load is done a key's calls get
COORDINATOR_LOAD_IN_PROGRESS; a key whose partition is not led here gets NOT_COORDINATOR,
and the state of a partition no longer led is dropped. Leadership is looked at on every
call and every ``follow_interval_s`` (loading ahead of the calls).
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable, Iterator
from typing import Generic, TypeVar

from tierlog.api.errors import CoordinatorLoadInProgressError, NotCoordinatorError
from tierlog.broker.partitions import Leader, Leaders, Partitions
from tierlog.storage.errors import TierlogError
from tierlog.storage.log import Log
from tierlog.storage.topic_partition import TopicPartition

__all__ = ["Load", "Loaded", "LoadedPartitions"]

log = logging.getLogger(__name__)

S = TypeVar("S")
# Replays a partition's log below an end offset into the coordinator's state (blocking).
Load = Callable[[Log, int], S]


class Loaded(Generic[S]):
    """A partition led here in ``epoch``: its state once loaded (None meanwhile)."""

    def __init__(self, partition: int, epoch: int) -> None:
        self.partition = partition
        self.epoch = epoch
        self.state: S | None = None
        self.task: asyncio.Task[None] | None = None


class LoadedPartitions(Generic[S]):
    """The partitions of ``topic`` led here and their states; see the module docstring.
    ``on_loaded`` runs once a partition's state is in (a coordinator's recovery work),
    ``on_unloaded`` when a loaded state is dropped (its long polls answered)."""

    def __init__(
        self,
        partitions: Partitions[Leaders[Leader]],
        topic: str,
        default_partition_count: int,
        load: Load[S],
        *,
        on_loaded: Callable[[Loaded[S]], None] = lambda _loaded: None,
        on_unloaded: Callable[[Loaded[S]], None] = lambda _loaded: None,
    ) -> None:
        self.partitions = partitions
        self.topic = topic
        self.default_partition_count = default_partition_count
        self.load = load
        self.on_loaded = on_loaded
        self.on_unloaded = on_unloaded
        self._loaded: dict[int, Loaded[S]] = {}

    def partition_count(self) -> int:
        """The topic's partitions once it exists (every broker must hash with the same
        count), the configured default before."""
        try:
            return self.partitions.topics.get(self.topic).partition_count
        except TierlogError:
            return self.default_partition_count

    async def follow(self, interval_s: float) -> None:
        """Load and unload partitions as their leadership goes, until cancelled."""
        while True:
            for partition in range(self.partition_count()):
                self.refresh(partition)
            await asyncio.sleep(interval_s)

    def stop(self) -> None:
        for partition in list(self._loaded):
            self._unload(partition)

    def __iter__(self) -> Iterator[Loaded[S]]:
        """The partitions led here whose state is loaded."""
        return iter([loaded for loaded in self._loaded.values() if loaded.state is not None])

    def led(self) -> dict[int, S | None]:
        """Every partition led here and its state (None: loading); safe from another
        thread (a metrics scrape): one step over the dict the loop changes."""
        led = list(self._loaded.items())
        return {partition: entry.state for partition, entry in led}

    def leader_epoch(self, partition: int) -> int | None:
        """The epoch of this broker's leadership of the partition (None: not led here)."""
        return self.partitions.leader_epoch(TopicPartition(self.topic, partition))

    def refresh(self, partition: int) -> Loaded[S] | None:
        """Load or unload the partition as its leadership here says; its entry."""
        epoch = self.leader_epoch(partition)
        loaded = self._loaded.get(partition)
        if loaded is not None and loaded.epoch == epoch:
            return loaded
        if loaded is not None:
            self._unload(partition)
        if epoch is None:
            return None
        loaded = self._loaded[partition] = Loaded(partition, epoch)
        loaded.task = asyncio.create_task(self._load(loaded))
        return loaded

    def is_current(self, loaded: Loaded[S]) -> bool:
        """Whether ``loaded`` is still this broker's leadership of its partition."""
        return self._loaded.get(loaded.partition) is loaded

    def loaded(self, partition: int, what: str) -> Loaded[S]:
        """The partition's loaded entry; NOT_COORDINATOR or COORDINATOR_LOAD_IN_PROGRESS
        (``what`` names the key asked about in the error)."""
        loaded = self.refresh(partition)
        if loaded is None:
            raise NotCoordinatorError(
                f"broker {self.partitions.ownership.node_id} does not coordinate {what} "
                f"({self.topic}-{partition} is not led here)"
            )
        if loaded.state is None:
            raise CoordinatorLoadInProgressError(
                f"{self.topic}-{partition} is loading; retry shortly"
            )
        return loaded

    async def _load(self, loaded: Loaded[S]) -> None:
        tp = TopicPartition(self.topic, loaded.partition)
        started = time.monotonic()
        try:
            partition_log = self.partitions.manager.get_log(tp)
            end_offset = partition_log.log_end_offset
            state = await asyncio.to_thread(self.load, partition_log, end_offset)
        except Exception:
            # Unreadable: not coordinating beats serving a state rebuilt wrongly; the
            # next look at the leadership tries again.
            log.exception("%s: loading the coordinator's state failed", tp)
            if self.is_current(loaded):
                del self._loaded[loaded.partition]
            return
        if self.is_current(loaded):
            loaded.state = state
            log.info(
                "%s: coordinating (epoch %d, up to offset %d, loaded in %.3f s)",
                tp,
                loaded.epoch,
                end_offset,
                time.monotonic() - started,
            )
            self.on_loaded(loaded)

    def _unload(self, partition: int) -> None:
        loaded = self._loaded.pop(partition)
        if loaded.task is not None:
            loaded.task.cancel()
        if loaded.state is not None:
            self.on_unloaded(loaded)
        log.info("%s-%d: no longer coordinating", self.topic, partition)
