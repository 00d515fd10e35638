"""Which segments retention may delete: Kafka's three rules, as pure functions.

A segment goes when, walking from the oldest, every segment up to it breaks one rule:
- **time**: ``now - largest timestamp > retention.ms`` (the largest record timestamp;
  the file's modification time only when the segment has no timestamps at all);
- **size**: the log is larger than ``retention.bytes`` even without this segment;
- **log start offset**: the *next* segment starts at or below the log start offset,
  so every offset in this one is gone (DeleteRecords moved the start past it).

The walk stops at the first segment that must stay: retention never makes holes.
The active segment counts too, but only when it holds data (the log rolls a new,
empty one before deleting it, so the log end survives). With tiered storage on, the
local copy of a segment may only go once it is safely in the tier (``is_tiered``),
under the local budgets ``local.retention.ms`` / ``local.retention.bytes``, where
``-2`` means "the same as the total budget".
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass
from typing import Protocol, TypeVar

from tierlog.storage.config import LogConfig

__all__ = [
    "RetentionBudget",
    "RetentionReason",
    "RetentionSegment",
    "deletable_segments",
    "rule_counts",
]


class RetentionSegment(Protocol):
    """What retention needs to know of a segment."""

    @property
    def base_offset(self) -> int: ...

    @property
    def size(self) -> int: ...

    @property
    def largest_timestamp(self) -> int: ...


Segment = TypeVar("Segment", bound=RetentionSegment)


class RetentionReason:
    """The rule that let segments go, by the config that set it (for the log line)."""

    TIME = "retention.ms"
    SIZE = "retention.bytes"
    LOCAL_TIME = "local.retention.ms"
    LOCAL_SIZE = "local.retention.bytes"
    LOG_START_OFFSET = "log start offset"


@dataclass(frozen=True)
class RetentionBudget:
    """How long and how much to keep; negative means unlimited. The rules are named by
    the configs they come from, so a log line says which budget deleted a segment."""

    retention_ms: int
    retention_bytes: int
    time_rule: str = RetentionReason.TIME
    size_rule: str = RetentionReason.SIZE

    @classmethod
    def total(cls, config: LogConfig) -> RetentionBudget:
        return cls(config.retention_ms, config.retention_bytes)

    @classmethod
    def local(cls, config: LogConfig) -> RetentionBudget:
        """Kafka's local.retention.*: -2 borrows the total budget."""
        ms = config.retention_ms if config.local_retention_ms == -2 else config.local_retention_ms
        size = (
            config.retention_bytes
            if config.local_retention_bytes == -2
            else config.local_retention_bytes
        )
        return cls(ms, size, RetentionReason.LOCAL_TIME, RetentionReason.LOCAL_SIZE)


def deletable_segments(
    segments: Sequence[Segment],
    budget: RetentionBudget,
    *,
    now_ms: int,
    log_start_offset: int,
    delete_policy: bool,
    is_tiered: Callable[[Segment], bool] | None = None,
) -> tuple[int, str | None]:
    """How many of the oldest ``segments`` may go, and the first rule that let them.

    ``delete_policy`` is false for compact-only topics: then only the log start
    offset rule applies, as in Kafka. ``is_tiered`` (tiered storage on) must confirm
    each segment is safely in the tier before its local copy may go.
    """
    for reason, count in rule_counts(
        segments,
        budget,
        now_ms=now_ms,
        log_start_offset=log_start_offset,
        delete_policy=delete_policy,
        is_tiered=is_tiered,
    ):
        if count:
            return count, reason
    return 0, None


def rule_counts(
    segments: Sequence[Segment],
    budget: RetentionBudget,
    *,
    now_ms: int,
    log_start_offset: int,
    delete_policy: bool,
    is_tiered: Callable[[Segment], bool] | None = None,
) -> Iterator[tuple[str, int]]:
    """Each rule in order, with how many of the oldest ``segments`` it alone lets go
    (``deletable_segments`` takes the first that lets any go)."""
    rules: list[tuple[str, Iterable[bool]]] = [
        (RetentionReason.LOG_START_OFFSET, _below_log_start(segments, log_start_offset))
    ]
    if delete_policy:
        rules.append((budget.time_rule, _expired(segments, budget.retention_ms, now_ms)))
        rules.append((budget.size_rule, _over_size(segments, budget.retention_bytes)))
    for reason, breached in rules:
        # Below the log start the data is gone everywhere: no need to ask the tier.
        tier_check = None if reason == RetentionReason.LOG_START_OFFSET else is_tiered
        yield reason, _leading_count(segments, breached, tier_check)


def _leading_count(
    segments: Sequence[Segment],
    breached: Iterable[bool],
    is_tiered: Callable[[Segment], bool] | None,
) -> int:
    count = 0
    for position, (segment, rule_breached) in enumerate(zip(segments, breached, strict=False)):
        is_last = position == len(segments) - 1
        if is_last and segment.size == 0:
            break  # an empty active segment is where the log continues
        if not rule_breached:
            break
        if is_tiered is not None and not is_tiered(segment):
            break
        count += 1
    return count


# Each rule says, segment by segment from the oldest, whether that segment breaks it.


def _below_log_start(segments: Sequence[RetentionSegment], log_start: int) -> Iterator[bool]:
    for following in segments[1:]:
        yield following.base_offset <= log_start
    yield False  # the last segment holds the log end


def _expired(
    segments: Sequence[RetentionSegment], retention_ms: int, now_ms: int
) -> Iterator[bool]:
    for segment in segments:
        yield retention_ms >= 0 and now_ms - segment.largest_timestamp > retention_ms


def _over_size(segments: Sequence[RetentionSegment], retention_bytes: int) -> Iterator[bool]:
    if retention_bytes < 0:
        return
    excess = sum(segment.size for segment in segments) - retention_bytes
    for segment in segments:
        if excess - segment.size < 0:
            return
        excess -= segment.size
        yield True
