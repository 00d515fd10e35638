"""The data source's driver side without Spark: find the partitions, plan the splits.

``discover`` lists every path once (log dirs directly, ``file://`` and ``s3://``
tiers through the tier's own metadata) and merges each partition's places into one
history; ``plan_batch`` and ``plan_stream_range`` turn histories into splits. The
Spark adapter is a thin layer over these functions.

A log dir may belong to a running broker whose retention deletes segments (once
tiered, or past the retention limits) at any moment, also between listing a segment
and opening it. Each of these steps then starts again from a fresh listing, which no
longer names the deleted files.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Callable, Iterable, Mapping
from pathlib import Path
from typing import TypeVar

from tierlog.pipeline.bounds import RowBounds
from tierlog.pipeline.errors import DataLossError, InvalidOptionError
from tierlog.pipeline.history import PartitionHistory, merge_history
from tierlog.pipeline.listing import PartitionSegments, list_log_dir
from tierlog.pipeline.options import SourceOptions, Subscription
from tierlog.pipeline.planner import (
    InputSplit,
    OffsetRange,
    find_offset_by_timestamp,
    plan_partition,
    resolve_range,
    split_for_parallelism,
)
from tierlog.pipeline.readers import open_segment
from tierlog.pipeline.segments import Opener
from tierlog.pipeline.tiered import list_tier
from tierlog.pipeline.transactions import with_last_stable_offset
from tierlog.storage.tier.s3_store import S3Options
from tierlog.storage.topic_partition import TopicPartition

__all__ = [
    "discover",
    "latest_offsets",
    "list_place",
    "plan_batch",
    "plan_stream_range",
]

NO_BOUNDS = RowBounds()
# Listings that may meet a file deleted under them before one is taken as it is.
LISTING_ATTEMPTS = 5

T = TypeVar("T")


def _relisting(step: Callable[[], T]) -> T:
    """``step()``, run again when a local file it listed was deleted before it opened it."""
    for _ in range(LISTING_ATTEMPTS - 1):
        try:
            return step()
        except FileNotFoundError:
            continue
    return step()


def list_place(
    path: str, topics: Iterable[str] | None, s3: S3Options | None = None
) -> list[PartitionSegments]:
    """The partitions one path holds: a log dir, or a tier named by its URL."""
    if "://" in path:
        return list_tier(path, topics, s3)
    directory = Path(path)
    if not directory.is_dir():
        raise InvalidOptionError(f"path {path} is not a log dir (nor a file:// or s3:// tier)")
    return list_log_dir(directory, topics)


def discover(
    paths: Iterable[str],
    subscription: Subscription,
    bounds: RowBounds = NO_BOUNDS,
    *,
    s3: S3Options | None = None,
    opener: Opener = open_segment,
) -> list[PartitionHistory]:
    """Each subscribed partition's merged history over every path, in partition order,
    ending at its last stable offset (undecided transactions are not read yet)."""
    paths = list(paths)
    return _relisting(lambda: _discover(paths, subscription, bounds, s3, opener))


def _discover(
    paths: Iterable[str],
    subscription: Subscription,
    bounds: RowBounds,
    s3: S3Options | None,
    opener: Opener,
) -> list[PartitionHistory]:
    topics = None if subscription.pattern is not None else _named_topics(subscription)
    if topics is not None and bounds.topics is not None:
        topics = topics & bounds.topics
    places: dict[TopicPartition, list[PartitionSegments]] = defaultdict(list)
    for path in paths:
        for partition in list_place(path, topics, s3):
            if subscription.wants(partition.tp) and bounds.admits(partition.tp):
                places[partition.tp].append(partition)
    return [with_last_stable_offset(merge_history(tp, places[tp]), opener) for tp in sorted(places)]


def _named_topics(subscription: Subscription) -> frozenset[str]:
    if subscription.assigned:
        return frozenset(tp.topic for tp in subscription.assigned)
    return subscription.topics


def plan_batch(
    options: SourceOptions, bounds: RowBounds = NO_BOUNDS, *, opener: Opener = open_segment
) -> list[InputSplit]:
    """The splits of a batch query."""
    return _relisting(lambda: _plan_batch(options, bounds, opener))


def _plan_batch(options: SourceOptions, bounds: RowBounds, opener: Opener) -> list[InputSplit]:
    splits: list[InputSplit] = []
    for history in _discover(options.paths, options.subscription, bounds, options.s3, opener):
        selected = resolve_range(
            history,
            options.starting,
            options.ending,
            opener,
            fail_on_data_loss=options.fail_on_data_loss,
        )
        selected = _apply_bounds(history, selected, bounds, opener)
        splits.extend(plan_partition(history, selected, opener))
    return split_for_parallelism(splits, options.min_partitions, opener)


def _apply_bounds(
    history: PartitionHistory, selected: OffsetRange, bounds: RowBounds, opener: Opener
) -> OffsetRange:
    start, end = bounds.narrow_offsets(selected.start, selected.end)
    if bounds.min_timestamp_ms is not None and start < end:
        found = find_offset_by_timestamp(history, bounds.min_timestamp_ms, opener)
        start = end if found is None else max(start, found)
    return OffsetRange(selected.tp, start, max(start, end))


def latest_offsets(histories: Iterable[PartitionHistory]) -> dict[TopicPartition, int]:
    return {history.tp: history.latest for history in histories}


def plan_stream_range(
    options: SourceOptions,
    start: Mapping[TopicPartition, int],
    end: Mapping[TopicPartition, int],
    *,
    opener: Opener = open_segment,
) -> list[InputSplit]:
    """The splits of one micro-batch: each partition from ``start`` (its earliest when
    new to the query) up to ``end``."""
    return _relisting(lambda: _plan_stream_range(options, start, end, opener))


def _plan_stream_range(
    options: SourceOptions,
    start: Mapping[TopicPartition, int],
    end: Mapping[TopicPartition, int],
    opener: Opener,
) -> list[InputSplit]:
    splits: list[InputSplit] = []
    for history in _discover(options.paths, options.subscription, NO_BOUNDS, options.s3, opener):
        if history.tp not in end:
            continue
        first = start.get(history.tp, history.earliest)
        if first < history.earliest:
            if options.fail_on_data_loss:
                raise DataLossError(
                    f"{history.tp.topic}-{history.tp.partition}: offsets {first} to "
                    f"{history.earliest - 1} were deleted before this query read them"
                )
            first = history.earliest
        selected = OffsetRange(history.tp, first, max(first, end[history.tp]))
        splits.extend(plan_partition(history, selected, opener))
    return split_for_parallelism(splits, options.min_partitions, opener)
