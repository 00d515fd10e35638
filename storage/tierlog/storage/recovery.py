"""Loading a partition's segments from disk, and recovering them after a crash.

Kafka's rules, in order:
1. Temporary files go first: ``.deleted`` (a deletion that was under way),
   ``.cleaned`` (an unfinished cleaner output) and checkpoint ``.tmp`` files are
   removed. A ``.swap`` log was written completely before it was renamed, so it is
   finished: the segments it replaces are deleted and it takes its final name
   (its indexes are rebuilt).
2. Index files without a ``.log`` are removed. A flushed segment (below the one
   holding the recovery point, or any after a clean shutdown) whose index is missing
   or fails its sanity check has its indexes rebuilt from its log, on its own: its
   data was acknowledged and synced, and so was that of every later segment. Damage
   found there is logged at ERROR and kept in place, never cut off (that would leave
   a hole in the offsets); reads of the damaged offsets answer CORRUPT_MESSAGE
   (``LogSegment.rebuild_indexes``). A damaged last segment is sealed and the log
   goes on in a new segment at its end. A missing ``.txnindex`` is an empty one (it
   is only created by the first aborted transaction).
3. Without the clean-shutdown marker, every segment from the one holding the
   recovery point onwards may hold bytes that never reached the disk whole: each
   batch's CRC is checked, the log is cut at the first invalid batch, the indexes are
   rebuilt, and every later segment (which can only hold data written after the
   damage) is deleted.
4. A log start (from ``log-start-offset-checkpoint``) past the log end means segments
   were lost or the checkpoint was edited. As Kafka's loader does, the log continues
   empty at that log start, so no offset that may have been handed out is handed out
   again and every later append is readable; the old segments are not deleted but kept
   aside as ``<name>.below-log-start`` (nothing reads them) and logged at WARNING.

A rebuilt segment's transaction index is emptied here and written again by the log
while it loads its producer state (``LoadedLog.rebuilt``): its entries depend on the
transactions open before the segment, which only a replay from a snapshot knows.
"""

from __future__ import annotations

import bisect
import logging
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

from tierlog.storage.config import LogConfig
from tierlog.storage.errors import CorruptRecordError, UnsupportedCompressionTypeError
from tierlog.storage.segment import (
    DELETED_SUFFIX,
    INDEX_SUFFIX,
    LOG_SUFFIX,
    TIME_INDEX_SUFFIX,
    LogSegment,
    SegmentDamage,
)
from tierlog.storage.transaction_index import TXN_INDEX_SUFFIX

__all__ = ["CLEANED_SUFFIX", "SWAP_SUFFIX", "LoadedLog", "RecoveryProgress", "load_segments"]

log = logging.getLogger(__name__)

CLEANED_SUFFIX = ".cleaned"
SWAP_SUFFIX = ".swap"
TEMP_SUFFIX = ".tmp"
BELOW_LOG_START_SUFFIX = ".below-log-start"
INDEX_SUFFIXES = (INDEX_SUFFIX, TIME_INDEX_SUFFIX)  # a segment needs both
SEGMENT_INDEX_SUFFIXES = (*INDEX_SUFFIXES, TXN_INDEX_SUFFIX)

# Called as (bytes scanned so far, bytes to scan in all) while recovering.
RecoveryProgress = Callable[[int, int], None]


@dataclass
class LoadedLog:
    segments: list[LogSegment]
    recovery_point: int
    truncated_bytes: int
    recovered_segments: int
    rebuilt: list[LogSegment]  # segments whose indexes were rebuilt from their logs


def load_segments(
    directory: Path,
    config: LogConfig,
    *,
    log_start_offset: int,
    recovery_point: int,
    clean_shutdown: bool,
    progress: RecoveryProgress | None = None,
) -> LoadedLog:
    """Open every segment in ``directory``, recovering as Kafka does; never empty."""
    _remove_temporary_files(directory)
    _complete_swaps(directory)
    bases = _log_base_offsets(directory)
    first_unflushed = len(bases) if clean_shutdown else _segment_holding(bases, recovery_point)
    segments, rebuilt = _open_segments(directory, config, bases, first_unflushed, recovery_point)
    truncated = recovered = 0
    if first_unflushed < len(segments):
        segments, truncated, recovered = _recover_unflushed(segments, first_unflushed, progress)
        rebuilt += segments[len(segments) - recovered :]
    if segments and segments[-1].next_offset < log_start_offset:
        _set_aside_below_log_start(segments, log_start_offset)
        segments = []
    if not segments or segments[-1].damage:  # a damaged segment takes no more appends
        start = segments[-1].next_offset if segments else log_start_offset
        segments.append(_new_segment(directory, start, config, active=True))
    else:
        segments[-1].resize_indexes(config.segment_index_bytes)
    log_end_offset = segments[-1].next_offset
    if not clean_shutdown:
        for segment in segments:
            segment.flush()
        recovery_point = log_end_offset
    kept = {id(segment) for segment in segments}
    rebuilt = [segment for segment in rebuilt if id(segment) in kept]
    return LoadedLog(segments, min(recovery_point, log_end_offset), truncated, recovered, rebuilt)


def _remove_temporary_files(directory: Path) -> None:
    for path in directory.iterdir():
        name = path.name
        if name.endswith((DELETED_SUFFIX, CLEANED_SUFFIX, TEMP_SUFFIX)):
            log.info("removing leftover %s", path)
            path.unlink(missing_ok=True)
        elif name.endswith(SWAP_SUFFIX) and not name.endswith(LOG_SUFFIX + SWAP_SUFFIX):
            path.unlink(missing_ok=True)  # swapped indexes are rebuilt from the swapped log


def _complete_swaps(directory: Path) -> None:
    for swap in sorted(directory.glob(f"*{LOG_SUFFIX}{SWAP_SUFFIX}")):
        base = int(swap.name[:20])
        end_offset = _swap_end_offset(directory, swap)
        for other in _log_base_offsets(directory):
            if base <= other < end_offset:
                _delete_segment_files(directory, other)
        log.info("completing swap %s", swap)
        swap.replace(directory / swap.name.removesuffix(SWAP_SUFFIX))


def _swap_end_offset(directory: Path, swap: Path) -> int:
    from tierlog.storage.file_records import FileRecords

    records = FileRecords(swap)
    try:
        end = int(swap.name[:20])
        for batch in records.headers():
            end = batch.header.last_offset + 1
        return end
    finally:
        records.close()


def _log_base_offsets(directory: Path) -> list[int]:
    bases = []
    for path in directory.iterdir():
        stem, suffix = path.name[:20], path.name[20:]
        if suffix in SEGMENT_INDEX_SUFFIXES and not (directory / f"{stem}{LOG_SUFFIX}").exists():
            log.info("removing orphan index %s", path)
            path.unlink(missing_ok=True)
        elif suffix == LOG_SUFFIX and stem.isdigit():
            bases.append(int(stem))
    return sorted(bases)


def _delete_segment_files(directory: Path, base_offset: int) -> None:
    for suffix in (LOG_SUFFIX, *SEGMENT_INDEX_SUFFIXES):
        (directory / f"{base_offset:020d}{suffix}").unlink(missing_ok=True)


def _new_segment(directory: Path, base: int, config: LogConfig, *, active: bool) -> LogSegment:
    return LogSegment(
        directory,
        base,
        index_interval_bytes=config.index_interval_bytes,
        max_index_bytes=config.segment_index_bytes,
        active=active,
    )


def _segment_holding(bases: list[int], offset: int) -> int:
    """Position of the segment whose range holds ``offset`` (the first when none does)."""
    return max(bisect.bisect_right(bases, offset) - 1, 0)


def _open_segments(
    directory: Path, config: LogConfig, bases: list[int], first_unflushed: int, recovery_point: int
) -> tuple[list[LogSegment], list[LogSegment]]:
    """Every segment, in order, and those whose indexes were rebuilt. Segments from
    ``first_unflushed`` on are left as they are: recovery (rule 3) rebuilds them all."""
    segments: list[LogSegment] = []
    rebuilt: list[LogSegment] = []
    for position, base in enumerate(bases):
        segment = _new_segment(directory, base, config, active=False)
        segments.append(segment)
        problem = _index_problem(directory, segment) if position < first_unflushed else None
        if problem is not None:
            log.warning("rebuilding the indexes of %s: %s", segment.log.path, problem)
            if position + 1 < len(bases):
                end_offset: int | None = bases[position + 1]
            else:  # after a clean shutdown the recovery point is the log end
                end_offset = recovery_point if recovery_point > base else None
            _report_damage(segment, segment.rebuild_indexes(end_offset))
            segment.on_become_inactive()
            rebuilt.append(segment)
        if position < len(bases) - 1:
            segment.release_indexes()  # mapped again when first searched
    return segments, rebuilt


def _index_problem(directory: Path, segment: LogSegment) -> str | None:
    """Why the segment's indexes cannot be used as they are, if they cannot."""
    base = segment.base_offset
    if not all((directory / f"{base:020d}{suffix}").exists() for suffix in INDEX_SUFFIXES):
        return "index files missing"
    try:
        segment.sanity_check()
    except (CorruptRecordError, UnsupportedCompressionTypeError) as problem:
        return str(problem)
    return None


def _report_damage(segment: LogSegment, damage: Sequence[SegmentDamage]) -> None:
    for each in damage:
        if each.first_offset == each.end_offset:  # e.g. a last segment without a recovery point
            log.error(
                "%s is damaged at bytes %d..%d, kept on disk as they are; no offset the log "
                "knows of lies there, and the log goes on at offset %d",
                segment.log.path,
                each.position,
                each.end_position - 1,
                each.end_offset,
            )
            continue
        log.error(
            "%s is damaged at bytes %d..%d: offsets %d..%d are kept on disk as they are "
            "and reads of them fail with CORRUPT_MESSAGE; the batches around them are served",
            segment.log.path,
            each.position,
            each.end_position - 1,
            each.first_offset,
            each.end_offset - 1,
        )


def _set_aside_below_log_start(segments: Sequence[LogSegment], log_start_offset: int) -> None:
    """Rule 4: every segment lies below the log start; keep its files under other names."""
    log.warning(
        "%s: log start %d is past the log end %d (segments lost, or the checkpoint edited): "
        "the log continues empty at %d, its %d segments kept aside as *%s",
        segments[0].log.path.parent,
        log_start_offset,
        segments[-1].next_offset,
        log_start_offset,
        len(segments),
        BELOW_LOG_START_SUFFIX,
    )
    for segment in segments:
        segment.rename_with_suffix(BELOW_LOG_START_SUFFIX)
        segment.close()


def _recover_unflushed(
    segments: list[LogSegment], first: int, progress: RecoveryProgress | None
) -> tuple[list[LogSegment], int, int]:
    """Scan ``segments[first:]``, cutting at the first invalid batch (rule 3); returns
    the segments kept, the bytes dropped and how many segments were scanned."""
    # Kafka scans from the segment holding the recovery point, found by base offset: even
    # when the recovery point is that segment's end, bytes of an append cut short by the
    # crash may follow it, and they must go before anything is appended after them.
    to_scan = segments[first:]
    total = sum(segment.size for segment in to_scan)
    done = truncated = 0
    for position, segment in enumerate(to_scan):
        log.info("recovering %s from byte 0", segment.log.path)
        size = segment.size
        truncated = segment.recover()
        done += size
        if progress:
            progress(done, total)
        if truncated:
            later = to_scan[position + 1 :]
            for doomed in later:
                log.warning("deleting %s: it follows invalid data", doomed.log.path)
                doomed.delete()
            kept = segments[: first + position + 1]
            return kept, truncated + sum(s.size for s in later), position + 1
        if segment is not to_scan[-1]:
            segment.on_become_inactive()
            segment.release_indexes()
    return segments, truncated, len(to_scan)
