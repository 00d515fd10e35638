"""Loading a partition's segments from disk, and recovering them after a crash.

Kafka's rules, in order:
1. Temporary files go first: ``.deleted`` (a deletion that was under way),
   ``.cleaned`` (an unfinished cleaner output) and checkpoint ``.tmp`` files are
   removed. A ``.swap`` log was written completely before it was renamed, so it is
   finished: the segments it replaces are deleted and it takes its final name
   (its indexes are rebuilt).
2. Index files without a ``.log`` are removed; a segment whose index is missing or
   fails its sanity check has its indexes rebuilt from its log. A missing
   ``.txnindex`` is an empty one (it is only created by the first aborted transaction).
3. Without the clean-shutdown marker, every segment from the one holding the
   recovery point onwards is scanned: each batch's CRC is checked, the log is cut
   at the first invalid batch, the indexes are rebuilt, and every later segment
   (which can only hold data written after the damage) is deleted.

A rebuilt segment's transaction index is emptied here and written again by the log
while it loads its producer state (``LoadedLog.rebuilt``): its entries depend on the
transactions open before the segment, which only a replay from a snapshot knows.
"""

from __future__ import annotations

import bisect
import logging
from collections.abc import Callable
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
)
from tierlog.storage.transaction_index import TXN_INDEX_SUFFIX

__all__ = ["CLEANED_SUFFIX", "SWAP_SUFFIX", "LoadedLog", "RecoveryProgress", "load_segments"]

log = logging.getLogger(__name__)

CLEANED_SUFFIX = ".cleaned"
SWAP_SUFFIX = ".swap"
TEMP_SUFFIX = ".tmp"
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
    segments, truncated, rebuilt = _open_segments(directory, config)
    recovered = 0
    if not clean_shutdown and segments:
        segments, cut, recovered = _recover_unflushed(segments, recovery_point, progress)
        truncated += cut
        rebuilt += segments[len(segments) - recovered :]
    if not segments:
        segments = [_new_segment(directory, log_start_offset, config, active=True)]
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


def _open_segments(
    directory: Path, config: LogConfig
) -> tuple[list[LogSegment], int, list[LogSegment]]:
    """Every segment, in order; a log cut while its indexes were rebuilt ends the list
    (the later segments follow invalid data, as in rule 3). Returns the bytes dropped
    and the segments whose indexes were rebuilt."""
    segments: list[LogSegment] = []
    rebuilt: list[LogSegment] = []
    bases = _log_base_offsets(directory)
    for position, base in enumerate(bases):
        segment, truncated = _open_segment(directory, base, config)
        if truncated is not None:
            rebuilt.append(segment)
        if position < len(bases) - 1:
            segment.release_indexes()  # mapped again when first searched
        segments.append(segment)
        if truncated:
            later = bases[position + 1 :]
            for doomed in later:
                log.warning("deleting segment %d: it follows invalid data", doomed)
                _delete_segment_files(directory, doomed)
            return segments, truncated, rebuilt
    return segments, 0, rebuilt


def _open_segment(
    directory: Path, base_offset: int, config: LogConfig
) -> tuple[LogSegment, int | None]:
    """The segment, and the bytes cut from it if its indexes had to be rebuilt (None
    when they were sound)."""
    indexes_exist = all(
        (directory / f"{base_offset:020d}{suffix}").exists() for suffix in INDEX_SUFFIXES
    )
    segment = _new_segment(directory, base_offset, config, active=False)
    try:
        if not indexes_exist:
            raise CorruptRecordError("index files missing")
        segment.sanity_check()
    except (CorruptRecordError, UnsupportedCompressionTypeError) as problem:
        log.warning("rebuilding the indexes of %s: %s", segment.log.path, problem)
        truncated = segment.recover()
        segment.on_become_inactive()
        return segment, truncated
    return segment, None


def _recover_unflushed(
    segments: list[LogSegment], recovery_point: int, progress: RecoveryProgress | None
) -> tuple[list[LogSegment], int, int]:
    # Kafka scans from the segment holding the recovery point, found by base offset: even
    # when the recovery point is that segment's end, bytes of an append cut short by the
    # crash may follow it, and they must go before anything is appended after them.
    first = max(bisect.bisect_right([s.base_offset for s in segments], recovery_point) - 1, 0)
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
