"""The groups this broker coordinates, their offsets of tiered topics copied into the
bucket for a restore (``group_offsets``).

Once a ``remote.log.manager.task.interval.ms`` (the uploader's pace: the bucket's copy of
a group is then about as far behind as its records are), each group of a
``__consumer_offsets`` partition loaded here whose committed offsets of tiered topics
changed since it was last written gets its object written again, and a group that has
none left (deleted, expired, its topics no longer tiered) gets it deleted. The cost is
bounded by what changed: one PUT per such group and interval, no LIST, no GET; a group
committing the same offsets writes nothing. Pending transactional commits are not
offsets yet, so they wait for their marker as OffsetFetch does.

What was written is remembered per group while its partition is coordinated here; a
partition that moves away is forgotten (its new coordinator writes all its groups once,
as its first pass finds them unwritten), and one still loading is left as it was. The
object of a group may also have been written by another broker (the partition's
previous coordinator) or by this one before a restart: so the coordinator tells the
mirror of every group whose offsets it deleted (``offsets_deleted``: DeleteGroups,
OffsetDelete, expiry) and, as it loads a partition, of every group whose offsets the
log's tombstones removed, and the next pass deletes the object of such a group that has
no offsets of tiered topics left, whether this mirror wrote it or not (else a restore
would bring a deleted group back). A deletion is kept until its object is gone, or the
group has such offsets again (then it is written as any changed group), or its
partition moved away before the pass: the new coordinator finds the tombstones as it
loads the partition (compaction keeps them ``delete.retention.ms``, a day by default),
so the deletion moves with the partition, as it does across a restart. A store that is
down is logged; what was not written or deleted is at the next pass.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable

from tierlog.coordinator.coordinator import GroupCoordinator
from tierlog.storage.errors import TierlogError
from tierlog.storage.tier.group_offsets import (
    GroupOffsets,
    TieredOffset,
    delete_group_offsets,
    put_group_offsets,
)
from tierlog.storage.tier.store import ObjectStore

__all__ = ["GroupOffsetsMirror"]

log = logging.getLogger(__name__)


class GroupOffsetsMirror:
    def __init__(
        self,
        store: ObjectStore,
        groups: GroupCoordinator,
        tiered: Callable[[str], bool],
        interval_ms: int,
    ) -> None:
        self.store = store
        self.groups = groups
        self.tiered = tiered  # whether a topic is tiered (``remote.storage.enable``)
        self.interval_ms = interval_ms
        self._written: dict[str, GroupOffsets] = {}  # as the bucket has each group
        self._deleted: set[str] = set()  # groups whose offsets were deleted, objects owed
        self._task: asyncio.Task[None] | None = None

    def start(self) -> None:
        self._task = asyncio.create_task(self._run(), name="group-offsets-mirror")

    async def stop(self) -> None:
        if self._task is not None:
            self._task.cancel()
            await asyncio.gather(self._task, return_exceptions=True)

    async def _run(self) -> None:
        while True:
            await asyncio.sleep(self.interval_ms / 1000)
            await self.write_once()

    def offsets_deleted(self, group: str) -> None:
        """The coordinator deleted offsets of ``group`` (``GroupCoordinator.on_offsets_deleted``,
        on the loop): the next pass deletes its object if it has no tiered offsets left."""
        self._deleted.add(group)

    async def write_once(self) -> tuple[list[str], list[str]]:
        """One pass; the groups written and those deleted."""
        wanted, loading = self._wanted()
        for group in list(self._written):
            partition = self.groups.partition_of(group)
            if partition not in wanted and partition not in loading:
                del self._written[group]  # coordinated elsewhere now
        changed = [
            offsets
            for by_group in wanted.values()
            for group, offsets in by_group.items()
            if self._written.get(group) != offsets
        ]
        gone = [
            group
            for group in self._written
            if (partition := self.groups.partition_of(group)) in wanted
            and group not in wanted[partition]
        ]
        gone += self._deletions_owed(wanted, loading)
        written, deleted = await asyncio.to_thread(self._write, changed, gone)
        self._deleted.difference_update(deleted)
        return written, deleted

    def _deletions_owed(
        self, wanted: dict[int, dict[str, GroupOffsets]], loading: set[int]
    ) -> list[str]:
        """The groups deleted here whose objects this mirror does not know it wrote; the
        deletions no longer owed are dropped (see the module doc)."""
        owed = []
        for group in sorted(self._deleted):
            partition = self.groups.partition_of(group)
            if partition in loading:
                continue  # looked at once loaded
            none_left = partition in wanted and group not in wanted[partition]
            if none_left and group not in self._written:  # else deleted as any gone group
                owed.append(group)
            else:
                self._deleted.discard(group)
        return owed

    def _wanted(self) -> tuple[dict[int, dict[str, GroupOffsets]], set[int]]:
        """Per loaded partition, its groups' offsets of tiered topics; the partitions
        still loading."""
        wanted: dict[int, dict[str, GroupOffsets]] = {}
        loading = set()
        for partition, state in self.groups.coordinated_partitions().items():
            if state is None:
                loading.add(partition)
                continue
            by_group = wanted[partition] = {}
            for group, committed in state.committed().items():
                offsets = {
                    tp: TieredOffset(c.offset, c.leader_epoch, c.metadata)
                    for tp, c in committed.items()
                    if self.tiered(tp.topic)
                }
                if offsets:
                    by_group[group] = GroupOffsets(group, offsets)
        return wanted, loading

    def _write(self, changed: list[GroupOffsets], gone: list[str]) -> tuple[list[str], list[str]]:
        written: list[str] = []
        try:
            for offsets in changed:
                put_group_offsets(self.store, offsets)
                self._written[offsets.group_id] = offsets
                written.append(offsets.group_id)
            delete_group_offsets(self.store, gone)
            for group in gone:
                self._written.pop(group, None)
        except TierlogError as error:
            log.warning(
                "group offsets in %s stay behind until the next pass: %s", self.store.url, error
            )
            return written, []
        return written, gone
