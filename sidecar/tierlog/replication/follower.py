"""What a follower does with its leader's answer for one partition (blocking: disk work).

The follower's log only ever changes in three ways here: it is cut back where the
leader says it diverged (by leader epoch, KIP-101 / KIP-279: never by high watermark
alone, which would keep records the new leader never had or drop ones it has); it
starts over at the leader's log start when it has fallen out of the leader's range;
and it takes the leader's batches as they are (``Log.append_as_follower``), rolling
where the leader rolled. Its high watermark is the leader's, capped at its own end.

Below the leader's *local* log start of a tiered partition (OFFSET_MOVED_TO_TIERED_STORAGE)
the follower starts over there as Kafka's does (KIP-405): the producers and leader
epochs of the log below come from the tier's segment ending there (``tier_state``), the
log start from the leader, so the follower could lead at once and still know its
idempotent producers, and serve from the tier all the leader's log holds. A follower
even below the leader's log start (OFFSET_OUT_OF_RANGE: it was away while retention
moved the start) does the same when the leader's log reaches into the tier: Kafka's
follower starts over at the leader's log start, is then told
OFFSET_MOVED_TO_TIERED_STORAGE and builds the same state; starting at the leader's
local log start with a log start of its own there, it would lack the producers and
epochs below, and, leading, refuse the offsets only the tier holds. The tier is read
from the store every broker shares.

How far the tier reaches comes with every answer (``tiered_end_offset``, the leader's
as it last confirmed it in the manifest): local retention here frees a segment only
below it, as on the leader, and the local cleaner rewrites nothing below it. The leader
is the one writer of the manifest, so its word is as current as the manifest and costs
no request to the store; it is taken as it comes, even lower. A new leader that has not
claimed the tier yet (after its start) answers ``UNKNOWN_TIERED_END_OFFSET``, and the
follower keeps what it knew: what an earlier leader confirmed in the manifest stays in
it for the next one's claim to find (a manifest's end never moves back), so nothing is
freed here that is not in the tier, and the local cleaner here, which waits after a
start until the end is known, rewrites no copy of a tiered segment meanwhile.

The tier's end is where the leader rolled: a follower whose active segment ends there
but began below it (the leader rolled an idle partition for the tier's bound, and no
record since says so) rolls there too, as it would on the leader's next records; then
that segment can be freed here, and were this broker to lead, it would not upload the
tier's offsets again.

Both need the leader's tier to be this broker's too (``tier``: S3, or a directory every
broker shares). A broker with a tier of its own (the default directory in its log dir)
frees nothing for the leader's tier, cleans its whole local log (nothing of it is in a
tier it shares), and starts over below the leader's local log start as for any log
start, without the tier's state.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass

from tierlog.api.errors import FencedLeaderEpochError, NotLeaderOrFollowerError
from tierlog.api.v1 import replication_service_pb2 as pb
from tierlog.storage.leader_epoch_cache import UNDEFINED_OFFSET, EpochEnd
from tierlog.storage.log import Log
from tierlog.storage.tier.manifest_store import load_view
from tierlog.storage.tier.store import ObjectStore
from tierlog.storage.tier.tier_state import tier_state_at
from tierlog.storage.topic_partition import TopicPartition

__all__ = [
    "STALE_LEADER_REASONS",
    "FetchOutcome",
    "applies_without_waiting",
    "apply_fetched",
    "truncation_offset",
]

log = logging.getLogger(__name__)

# Answers after which the follower waits for the replica manager to learn more
# (a new leader or epoch) rather than asking the same leader again at once.
STALE_LEADER_REASONS = frozenset(
    {
        NotLeaderOrFollowerError.reason,
        FencedLeaderEpochError.reason,
        "UNKNOWN_LEADER_EPOCH",
        "UNKNOWN_TOPIC_OR_PARTITION",
    }
)


@dataclass(frozen=True)
class FetchOutcome:
    appended_bytes: int = 0
    truncated_to: int | None = None
    error: str | None = None  # the leader's reason, when it refused


def truncation_offset(log_: Log, diverging: EpochEnd) -> int:
    """Where the follower cuts its log when the leader says it diverged after
    ``diverging`` (the largest epoch the leader knows at or below the follower's last one,
    and where that epoch ends in the leader's log).

    If the follower knows that epoch too, the logs agree up to the earlier of the two
    ends; if it knows only a smaller one, it cuts to that one's end and asks again (the
    leader then answers for the smaller epoch). A leader that knows no epochs at all
    leaves only the high watermark to go by (Kafka does the same)."""
    log_end = log_.log_end_offset
    if diverging.end_offset == UNDEFINED_OFFSET:
        return min(log_.high_watermark, log_end)
    mine = log_.leader_epoch_cache.end_offset_for(diverging.epoch, log_end)
    if mine.end_offset == UNDEFINED_OFFSET:
        return min(diverging.end_offset, log_end)
    if mine.epoch != diverging.epoch:
        return min(mine.end_offset, log_end)
    return min(mine.end_offset, diverging.end_offset, log_end)


# The largest answer applied on the event loop (``applies_without_waiting``): one
# partition's answer at replica.fetch.max.bytes' default, a producer's largest usual
# batch. Its CRC check and page-cache write take about 1.3 ms of CPU (a scratch timing of
# 1 MiB batches of 1 KiB records, 2026-11-29), as the leader's inline validation and
# append of the same batch do; the hop to a thread and back cost a loaded machine more.
APPLIED_ON_LOOP_BYTES = 1024 * 1024


def applies_without_waiting(
    log_: Log, data: pb.ReplicaFetchPartitionData, leader_epoch: int
) -> bool:
    """Whether applying ``data`` is a small append to the active segment and nothing else:
    no error or divergence to act on, no roll where the leader rolled, no new leader epoch
    to checkpoint (this log already holds ``leader_epoch``, the one it follows), no log
    start to move, and no fsync due (``flush.messages``). The fetcher then applies it on
    the event loop, as the leader appends a producer's batches, rather than after a hop
    to a thread and back (0.3 to 2 ms on a busy machine, on every acks=all round trip)."""
    size_bytes = len(data.record_batches)
    return (
        not data.HasField("error")
        and not data.HasField("diverging_epoch")
        and size_bytes <= APPLIED_ON_LOOP_BYTES
        and (not size_bytes or data.segment_base_offset == log_.active_segment.base_offset)
        and log_.leader_epoch_cache.latest_epoch == leader_epoch
        and data.log_start_offset <= log_.log_start_offset
        and not log_.append_waits_for_sync(size_bytes)
    )


def apply_fetched(
    log_: Log,
    fetch_offset: int,
    data: pb.ReplicaFetchPartitionData,
    tier: ObjectStore | None = None,
) -> FetchOutcome:
    """Apply the leader's answer for a fetch from ``fetch_offset`` (``tier``: the tier
    this broker shares with the leader, if it does); raises a typed error when its
    batches cannot be appended or the tier cannot be read (the fetcher logs it and asks
    again)."""
    if data.HasField("error"):
        return _recover_from(log_, fetch_offset, data, tier)
    if data.HasField("diverging_epoch"):
        diverging = EpochEnd(data.diverging_epoch.epoch, data.diverging_epoch.end_offset)
        offset = truncation_offset(log_, diverging)
        log.info(
            "%s: log diverged from the leader's after epoch %d (ends at %d there): "
            "truncating from %d to %d",
            log_.directory.name,
            diverging.epoch,
            diverging.end_offset,
            log_.log_end_offset,
            offset,
        )
        log_.truncate_to(offset)
        return FetchOutcome(truncated_to=offset)
    appended = 0
    if data.record_batches and log_.log_end_offset == fetch_offset:
        base = data.segment_base_offset if data.segment_base_offset >= 0 else None
        log_.append_as_follower(data.record_batches, leader_segment_base=base)
        appended = len(data.record_batches)
    _follow_offsets(log_, data)
    if tier is None:
        log_.tier_end_known = True  # nothing of it is in a tier it shares: it is 0 here
    else:
        log_.learn_tiered_end_offset(data.tiered_end_offset)
        log_.roll_at_tier_end()
    return FetchOutcome(appended_bytes=appended)


def _follow_offsets(log_: Log, data: pb.ReplicaFetchPartitionData) -> None:
    """The leader's log start (DeleteRecords, retention) and high watermark, as far as
    this log reaches. The high watermark only moves up here (a truncation lowers it):
    a new leader's may lag until its followers fetch, and a broker that led the
    partition a moment ago (a controlled shutdown's hand-over) knows a later committed
    offset, which its checkpoint should keep."""
    if data.log_start_offset > log_.log_start_offset:
        log_.increment_log_start_offset(min(data.log_start_offset, log_.log_end_offset))
    if data.high_watermark > log_.high_watermark:
        log_.update_high_watermark(min(data.high_watermark, log_.log_end_offset))


def _recover_from(
    log_: Log, fetch_offset: int, data: pb.ReplicaFetchPartitionData, tier: ObjectStore | None
) -> FetchOutcome:
    reason = data.error.reason
    if reason == "OFFSET_OUT_OF_RANGE" and fetch_offset > data.log_end_offset >= 0:
        # The leader's log is shorter (an unclean election, or it lost its tail): this
        # log's extra records were never acknowledged by the ISR.
        log_.truncate_to(data.log_end_offset)
        return FetchOutcome(truncated_to=data.log_end_offset, error=reason)
    if reason not in ("OFFSET_OUT_OF_RANGE", "OFFSET_MOVED_TO_TIERED_STORAGE"):
        return FetchOutcome(error=reason)
    if tier is not None and data.local_log_start_offset > data.log_start_offset:
        return _start_over_from_tier(log_, fetch_offset, data, tier)
    # Behind the leader's (local) log start: what this log holds is gone from the
    # leader; start over where the leader's local segments start (what lies below
    # them is in a tier this broker does not share, or nowhere).
    start = max(data.local_log_start_offset, data.log_start_offset)
    log.info(
        "%s: offset %d is below the leader's log start %d: starting over at %d",
        log_.directory.name,
        fetch_offset,
        data.log_start_offset,
        start,
    )
    log_.truncate_fully_and_start_at(start)
    return FetchOutcome(truncated_to=start, error=reason)


def _start_over_from_tier(
    log_: Log, fetch_offset: int, data: pb.ReplicaFetchPartitionData, tier: ObjectStore
) -> FetchOutcome:
    """Continue at the leader's local log start with the tier's state below it."""
    tp = TopicPartition(data.topic, data.partition)
    start = data.local_log_start_offset
    state = tier_state_at(tier, load_view(tier, tp), start)
    log.info(
        "%s: offset %d is below the leader's local log start %d: starting over there from "
        "the tier (%d producers, %d leader epochs), log start %d",
        log_.directory.name,
        fetch_offset,
        start,
        len(state.producers),
        len(state.leader_epochs),
        data.log_start_offset,
    )
    log_.continue_tier(data.log_start_offset, start, state.producers, state.leader_epochs)
    return FetchOutcome(truncated_to=start, error=data.error.reason)
