"""Which leader epoch wrote which offsets: a partition's ``leader-epoch-checkpoint``.

Each entry ``(epoch, start offset)`` says the leader of ``epoch`` wrote its first batch
at ``start offset``; the epoch's offsets run to the next entry's start (or the log end
for the latest). Entries rise in both fields. A follower asks its new leader where its
own latest epoch ended (Kafka's OffsetsForLeaderEpoch, ``end_offset_for``) and cuts its
log there: truncation by epoch, never by high watermark alone (KIP-101), and when the
leader does not know the follower's epoch the answer is the largest epoch it knows
below it (KIP-279), so two divergent logs converge in a few round trips.

Every change is written through to the checkpoint (``checkpoints.atomic_write``), so
the file is always one of the cache's past states. Recovery rebuilds what the batches
past the recovery point say (``assign`` of each batch's partition leader epoch).
"""

from __future__ import annotations

import logging
from pathlib import Path
from typing import NamedTuple

from tierlog.storage.checkpoints import read_epoch_checkpoint, write_epoch_checkpoint

__all__ = ["UNDEFINED_EPOCH", "UNDEFINED_OFFSET", "EpochEnd", "EpochEntry", "LeaderEpochCache"]

UNDEFINED_EPOCH = -1
UNDEFINED_OFFSET = -1
log = logging.getLogger(__name__)


class EpochEntry(NamedTuple):
    epoch: int
    start_offset: int


class EpochEnd(NamedTuple):
    """The answer to "where did my epoch end?": the largest known epoch at or below the
    one asked about, and the first offset after it (``UNDEFINED_*`` when unknown)."""

    epoch: int
    end_offset: int


class LeaderEpochCache:
    def __init__(self, path: Path) -> None:
        self.path = path
        self._entries = [EpochEntry(*entry) for entry in read_epoch_checkpoint(path)]

    @property
    def entries(self) -> list[EpochEntry]:
        return list(self._entries)

    @property
    def latest_epoch(self) -> int:
        return self._entries[-1].epoch if self._entries else UNDEFINED_EPOCH

    def assign(self, epoch: int, start_offset: int) -> None:
        """Record that ``epoch`` starts at ``start_offset``. Entries it contradicts (a
        later or equal epoch, or one starting at or after it: a log that diverged and was
        overwritten) are dropped first; an epoch already latest is left alone."""
        if epoch < 0:
            return  # a batch from before leader epochs (magic 0/1, or never stamped)
        latest = self._entries[-1] if self._entries else None
        if latest is not None and latest.epoch == epoch and latest.start_offset <= start_offset:
            return
        kept = [e for e in self._entries if e.epoch < epoch and e.start_offset < start_offset]
        if len(kept) != len(self._entries):
            dropped = self._entries[len(kept) :]
            log.warning("%s: epoch %d at %d replaces %s", self.path, epoch, start_offset, dropped)
        self._write([*kept, EpochEntry(epoch, start_offset)])

    def end_offset_for(self, requested_epoch: int, log_end_offset: int) -> EpochEnd:
        """Where ``requested_epoch`` ended in this log (KIP-101, KIP-279)."""
        if requested_epoch == UNDEFINED_EPOCH or not self._entries:
            return EpochEnd(UNDEFINED_EPOCH, UNDEFINED_OFFSET)
        if requested_epoch == self.latest_epoch:
            return EpochEnd(requested_epoch, log_end_offset)
        higher = next((e for e in self._entries if e.epoch > requested_epoch), None)
        if higher is None:  # newer than anything this log knows
            return EpochEnd(UNDEFINED_EPOCH, UNDEFINED_OFFSET)
        floor = [e for e in self._entries if e.epoch <= requested_epoch]
        epoch = floor[-1].epoch if floor else requested_epoch
        return EpochEnd(epoch, higher.start_offset)

    def truncate_from_end(self, end_offset: int) -> None:
        """The log was cut to end before ``end_offset``: forget epochs starting there or later."""
        kept = [e for e in self._entries if e.start_offset < end_offset]
        if len(kept) != len(self._entries):
            self._write(kept)

    def truncate_from_start(self, start_offset: int) -> None:
        """The log now starts at ``start_offset``: the epoch holding it starts there, and
        epochs wholly before it are forgotten."""
        before = [e for e in self._entries if e.start_offset <= start_offset]
        if not before or (len(before) == 1 and before[0].start_offset == start_offset):
            return
        after = self._entries[len(before) :]
        self._write([EpochEntry(before[-1].epoch, start_offset), *after])

    def clear(self) -> None:
        """The log was emptied and starts again: no epoch wrote anything in it."""
        if self._entries:
            self._write([])

    def _write(self, entries: list[EpochEntry]) -> None:
        write_epoch_checkpoint(self.path, [(e.epoch, e.start_offset) for e in entries])
        self._entries = entries
