"""How a running broker takes a new partition assignment: pushed by the operator, or
re-read from its file; one at a time, and never back to an older one.

The operator writes each plan into the cluster's ConfigMap, the source of truth (a
broker that starts reads it from its mounted file, ``ownership.read_assignment_file``),
then pushes the same document to every ready broker over ``AdminService.UpdateAssignment``.
The push is what makes a change quick: a kubelet refreshes a mounted ConfigMap only
every sync period plus its cache's TTL, a minute or more, and for that long a broker
would follow the old plan (a scale-up's new broker unknown to it, a new topic hashed
over the old broker list, a released partition still served). A push that fails (a
broker down or restarting) costs nothing: the operator pushes again on its next pass,
and the file arrives anyway. The sidecar does not watch the ConfigMap itself: that
would take a Kubernetes client and RBAC for the brokers' service account in a process
that otherwise knows nothing of Kubernetes, while the operator already talks to every
broker.

Plans are ordered by their ``generation``, which the operator raises with each new plan:

- a pushed plan is taken only if it is newer than the one followed: a push that comes
  late, or repeats the current plan (every pass of the operator does), changes nothing;
- the file is taken when it is not older, so after a push the broker ignores the file
  until the kubelet catches up, and never steps back to an older plan. At the same
  generation the file wins (in a cluster the two are the same document), so a broker
  follows what it would read after a restart.

Plans are taken one at a time, under one lock: two pushes racing cannot leave the older
one in place.
"""

from __future__ import annotations

import asyncio
import logging
from pathlib import Path

from tierlog.api.errors import InvalidRequestError
from tierlog.broker.ownership import Ownership, parse_assignment, read_assignment_file
from tierlog.broker.partitions import Partitions
from tierlog.replication.replica_manager import ReplicaManager

__all__ = ["FILE_REREAD_S", "AssignmentUpdates"]

log = logging.getLogger(__name__)

# How often the assignment file is re-read. The kubelet brings a changed ConfigMap to
# the pod's volume within a minute or so; this adds little to that.
FILE_REREAD_S = 2.0


class AssignmentUpdates:
    """The one way a new plan reaches ``partitions``: ``push`` or ``reread_file``."""

    def __init__(self, partitions: Partitions[ReplicaManager], path: Path | None):
        self.partitions = partitions
        self.path = path  # tierlog.cluster.assignment.file, if the operator plans
        self._lock = asyncio.Lock()
        self._older_file_seen = -1  # the generation of an older file already logged

    @property
    def generation(self) -> int:
        return self.partitions.ownership.generation

    async def push(self, document_text: str) -> bool:
        """Follow a pushed plan if it is newer than the current one; whether it was taken.

        Raises INVALID_REQUEST for a document that is not a plan this broker can follow,
        and what creating the logs it gives this broker raised (nothing changes then)."""
        try:
            ownership = parse_assignment(document_text, self.partitions.ownership.node_id)
        except ValueError as error:
            raise InvalidRequestError(f"not a plan this broker can follow: {error}") from None
        async with self._lock:
            if ownership.generation <= self.generation:
                return False
            await self._follow(ownership, "pushed by the operator")
        return True

    async def reread_file(self) -> bool:
        """Follow the file's plan if it changed and is not older than the current one;
        whether it was taken. A file that is unusable, or a plan that cannot be
        followed yet, is logged and left for the next round."""
        assert self.path is not None
        try:
            ownership = await asyncio.to_thread(
                read_assignment_file, self.path, self.partitions.ownership.node_id
            )
        except (OSError, ValueError) as error:
            log.warning("keeping the partition assignment: %s", error)
            return False
        async with self._lock:
            if ownership == self.partitions.ownership:
                return False
            if ownership.generation < self.generation:
                self._log_older_file(ownership.generation)
                return False
            try:
                await self._follow(ownership, f"read from {self.path}")
            except Exception as error:  # the store down, a full disk: the next round retries
                log.warning("cannot follow the partition assignment yet: %s", error)
                return False
        return True

    async def follow_file(self, interval_s: float = FILE_REREAD_S) -> None:
        """Re-read the file every ``interval_s`` until cancelled."""
        while True:
            await asyncio.sleep(interval_s)
            await self.reread_file()

    async def _follow(self, ownership: Ownership, source: str) -> None:
        before = self.generation
        await asyncio.to_thread(self.partitions.follow, ownership)
        log.info(
            "partition assignment changed (generation %d -> %d), %s",
            before,
            ownership.generation,
            source,
        )

    def _log_older_file(self, generation: int) -> None:
        """Once per older file: the kubelet has not brought the pushed plan yet."""
        if generation == self._older_file_seen:
            return
        self._older_file_seen = generation
        log.info(
            "keeping the partition assignment of generation %d: %s still holds %d",
            self.generation,
            self.path,
            generation,
        )
