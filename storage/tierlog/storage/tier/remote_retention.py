"""Which remote segments total retention deletes from the tier (pure, over a view whose
chunks are read on demand).

With a tier, ``retention.ms`` and ``retention.bytes`` (and the log start offset) apply
to the whole log: the tier's segments followed by the local segments not yet in it.
Kafka's three rules from ``retention.py`` run over that sequence; of the segments
they let go, the leading remote ones are deleted from the tier (local segments not
yet uploaded wait for their upload; local copies of tiered segments follow the local
budgets). The log start offset then moves to the end of the last deleted segment.

The rules first see each chunk as one span (its bytes, its largest timestamp): a chunk
a rule lets go whole is gone segment by segment too, as the rules only ever take a
run from the front. Only a chunk where some rule stops is read and its entries put in
its place, and so on down, so a pass reads a few chunks, not the tier's whole metadata.
The first chunk is always opened while it may hold dead entries, which no rule may count.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from tierlog.storage.config import LogConfig
from tierlog.storage.retention import RetentionBudget, rule_counts
from tierlog.storage.segment import LogSegment
from tierlog.storage.tier.manifest import ChunkRef, ManifestEntry, RemoteLogView, RemoteSegment

__all__ = ["RemoteDeletion", "remote_segments_to_delete"]


@dataclass(frozen=True)
class _Span:
    """A segment, or a chunk of them, as the retention rules see it."""

    base_offset: int
    size: int
    largest_timestamp: int


@dataclass(frozen=True)
class RemoteDeletion:
    segments: int  # how many remote segments go
    log_start_offset: int  # where the log starts once they are gone
    reason: str


def remote_segments_to_delete(
    view: RemoteLogView,
    local: Sequence[LogSegment],
    config: LogConfig,
    *,
    log_start_offset: int,
    now_ms: int,
) -> RemoteDeletion | None:
    """The leading live segments of ``view`` retention lets go, or None.

    ``local`` are the log's segments; those the tier already holds are skipped."""
    entries = list(view.top)
    while entries and isinstance(entries[0], ChunkRef) and entries[0].base_offset < view.floor:
        entries[:1] = _live_entries(view, entries[0])
    local_spans = [
        _Span(s.base_offset, s.size, s.largest_timestamp)
        for s in local
        if s.base_offset >= view.end_offset
    ]
    while True:
        spans = [_span(entry) for entry in entries] + local_spans
        counts = list(
            rule_counts(
                spans,
                RetentionBudget.total(config),
                now_ms=now_ms,
                log_start_offset=log_start_offset,
                delete_policy="delete" in config.cleanup_policy,
            )
        )
        stops = [entries[count] for _, count in counts if count < len(entries)]
        chunk = next((entry for entry in stops if isinstance(entry, ChunkRef)), None)
        if chunk is None:
            break
        at = entries.index(chunk)
        entries[at : at + 1] = _live_entries(view, chunk)
    reason, count = next(((reason, count) for reason, count in counts if count), ("", 0))
    doomed = entries[:count]
    if not doomed:
        return None
    return RemoteDeletion(
        sum(1 if isinstance(entry, RemoteSegment) else entry.segment_count for entry in doomed),
        max(log_start_offset, doomed[-1].end_offset),
        reason,
    )


def _live_entries(view: RemoteLogView, chunk: ChunkRef) -> list[ManifestEntry]:
    return [entry for entry in view.load_chunk(chunk) if entry.end_offset > view.floor]


def _span(entry: ManifestEntry) -> _Span:
    return _Span(entry.base_offset, entry.log_size_bytes, entry.retention_timestamp)
