"""Which remote segments total retention deletes from the tier (pure).

With a tier, ``retention.ms`` and ``retention.bytes`` (and the log start offset) apply
to the whole log: the tier's segments followed by the local segments not yet in it.
Kafka's three rules from ``retention.py`` run over that sequence; of the segments
they let go, the leading remote ones are deleted from the tier (local segments not
yet uploaded wait for their upload; local copies of tiered segments follow the local
budgets). The log start offset then moves to the end of the last deleted segment.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from tierlog.storage.config import LogConfig
from tierlog.storage.retention import RetentionBudget, deletable_segments
from tierlog.storage.segment import LogSegment
from tierlog.storage.tier.manifest import RemoteSegment

__all__ = ["RemoteDeletion", "remote_segments_to_delete"]


@dataclass(frozen=True)
class _Span:
    """A segment as the retention rules see it."""

    base_offset: int
    size: int
    largest_timestamp: int
    remote: RemoteSegment | None = None


@dataclass(frozen=True)
class RemoteDeletion:
    segments: tuple[RemoteSegment, ...]
    log_start_offset: int  # where the log starts once they are gone
    reason: str


def remote_segments_to_delete(
    remote: Sequence[RemoteSegment],
    local: Sequence[LogSegment],
    config: LogConfig,
    *,
    log_start_offset: int,
    now_ms: int,
) -> RemoteDeletion | None:
    """The leading ``remote`` (finished) segments retention lets go, or None.

    ``local`` are the log's segments; those the tier already holds are skipped."""
    tier_end = remote[-1].end_offset if remote else 0
    spans = [
        _Span(
            s.base_offset,
            s.log_size_bytes,
            s.max_timestamp if s.max_timestamp >= 0 else s.created_ms,
            s,
        )
        for s in remote
    ]
    spans += [
        _Span(s.base_offset, s.size, s.largest_timestamp)
        for s in local
        if s.base_offset >= tier_end
    ]
    count, reason = deletable_segments(
        spans,
        RetentionBudget.total(config),
        now_ms=now_ms,
        log_start_offset=log_start_offset,
        delete_policy="delete" in config.cleanup_policy,
    )
    doomed = tuple(span.remote for span in spans[:count] if span.remote is not None)
    if not doomed or reason is None:
        return None
    return RemoteDeletion(doomed, max(log_start_offset, doomed[-1].end_offset), reason)
