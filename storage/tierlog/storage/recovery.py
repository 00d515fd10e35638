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
3. Without the clean-shutdown marker, what lies past the recovery point may hold
   bytes that never reached the disk whole: each batch's CRC is checked, the log is
   cut at the first invalid batch, the indexes are rebuilt, and every later segment
   (which can only hold data written after the damage) is deleted. The check starts
   at the last offset-index entry below the recovery point, in the segment holding it:
   that entry and the batches before the recovery point were synced together (Kafka
   checks that segment from byte 0, so a partition restarted after a crash with
   nothing unflushed rescans its whole active segment).
4. A log start (from ``log-start-offset-checkpoint``) past the log end means segments
   were lost or the checkpoint was edited. As Kafka's loader does, the log continues
   empty at that log start, so no offset that may have been handed out is handed out
   again and every later append is readable; the old segments are not deleted but kept
   aside as ``<name>.below-log-start`` (nothing reads them) and logged at WARNING.

A rebuilt segment's transaction index loses its entries from where the check started;
the log writes them again while it loads its producer state (``LoadedLog.rebuilt``):
they depend on the transactions open before them, which only a replay from a snapshot
knows.

A full disk stops the recovery with a KafkaStorageError naming the partition, what the
rebuilt indexes need and what is free; nothing was cut yet, so the next start, with
space freed, recovers the same bytes.
"""

from __future__ import annotations

import bisect
import contextlib
import errno
import logging
import mmap
import os
import threading
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from tierlog.storage.config import LogConfig
from tierlog.storage.errors import (
    CorruptRecordError,
    KafkaStorageError,
    UnsupportedCompressionTypeError,
)
from tierlog.storage.index import OffsetIndex, TimeIndex
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
    # Segments whose indexes were rebuilt from their logs, each with the first offset
    # from which its transaction index was emptied (the producer state writes it again).
    rebuilt: dict[LogSegment, int]
    scanned_bytes: int = 0  # of log checked batch by batch after an unclean shutdown


def load_segments(
    directory: Path,
    config: LogConfig,
    *,
    log_start_offset: int,
    recovery_point: int,
    clean_shutdown: bool,
    progress: RecoveryProgress | None = None,
    sync: bool = True,
) -> LoadedLog:
    """Open every segment in ``directory``, recovering as Kafka does; never empty.

    After an unclean shutdown the recovery point is the log end once what recovery
    wrote is synced: here, or with ``sync=False`` by the caller, which syncs the whole
    filesystem once for all its partitions (the log manager) before recording it."""
    _remove_temporary_files(directory)
    _complete_swaps(directory)
    bases = _log_base_offsets(directory)
    first_unflushed = len(bases) if clean_shutdown else _segment_holding(bases, recovery_point)
    segments, rebuilt = _open_segments(directory, config, bases, first_unflushed, recovery_point)
    scan = _Scan()
    if first_unflushed < len(segments):
        segments, scan = _recover_unflushed(segments, first_unflushed, recovery_point, progress)
        rebuilt.update(scan.rebuilt)
    if segments and segments[-1].next_offset < log_start_offset:
        _set_aside_below_log_start(segments, log_start_offset)
        segments = []
    if not segments or segments[-1].damage:  # a damaged segment takes no more appends
        start = segments[-1].next_offset if segments else log_start_offset
        segments.append(_new_segment(directory, start, config, active=True))
    else:
        segments[-1].resize_indexes(config.segment_index_bytes)
    log_end_offset = segments[-1].next_offset
    kept = set(segments)  # not those cut off or set aside
    rebuilt = {segment: offset for segment, offset in rebuilt.items() if segment in kept}
    if not clean_shutdown and sync:
        for segment in rebuilt:  # what the recovery wrote; the rest was synced
            segment.flush()
    if not clean_shutdown:
        recovery_point = log_end_offset
    return LoadedLog(
        segments,
        min(recovery_point, log_end_offset),
        scan.truncated_bytes,
        len(scan.rebuilt),
        rebuilt,
        scan.scanned_bytes,
    )


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
) -> tuple[list[LogSegment], dict[LogSegment, int]]:
    """Every segment, in order, and those whose indexes were rebuilt. Segments from
    ``first_unflushed`` on are left as they are: recovery (rule 3) checks them."""
    segments: list[LogSegment] = []
    rebuilt: dict[LogSegment, int] = {}
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
            with _full_disk_explained(segment, segment.size):
                damage = segment.rebuild_indexes(end_offset)
            _report_damage(segment, damage)
            segment.on_become_inactive()
            rebuilt[segment] = segment.base_offset
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


@dataclass
class _Scan:
    """What the check of the unflushed segments did."""

    rebuilt: dict[LogSegment, int] = field(default_factory=dict)  # as LoadedLog.rebuilt
    scanned_bytes: int = 0
    truncated_bytes: int = 0


def _recover_unflushed(
    segments: list[LogSegment],
    first: int,
    recovery_point: int,
    progress: RecoveryProgress | None,
) -> tuple[list[LogSegment], _Scan]:
    """Check ``segments[first:]`` from the last index entry below the recovery point,
    cutting at the first invalid batch (rule 3); returns the segments kept and what
    the check did."""
    # Kafka scans from the segment holding the recovery point, found by base offset: even
    # when the recovery point is that segment's end, bytes of an append cut short by the
    # crash may follow it, and they must go before anything is appended after them.
    to_scan = segments[first:]
    starts = [segment.keep_synced_index_prefix(recovery_point) for segment in to_scan]
    positions = [0 if start is None else start.value for start in starts]
    total = sum(s.size - position for s, position in zip(to_scan, positions, strict=True))
    scan = _Scan()
    for number, (segment, start, position) in enumerate(
        zip(to_scan, starts, positions, strict=True)
    ):
        log.info(
            "recovering %s from byte %d (%s)",
            segment.log.path,
            position,
            threading.current_thread().name,
        )
        scan.scanned_bytes += segment.size - position
        with _full_disk_explained(segment, total - scan.scanned_bytes + segment.size - position):
            truncated = segment.recover(position)
        scan.rebuilt[segment] = segment.base_offset if start is None else start.key
        if progress:
            progress(scan.scanned_bytes, total)
        if truncated:
            later = to_scan[number + 1 :]
            for doomed in later:
                log.warning("deleting %s: it follows invalid data", doomed.log.path)
                doomed.delete()
            scan.truncated_bytes = truncated + sum(s.size for s in later)
            return segments[: first + number + 1], scan
        if segment is not to_scan[-1]:
            segment.on_become_inactive()
            segment.release_indexes()
    return segments, scan


@contextlib.contextmanager
def _full_disk_explained(segment: LogSegment, log_bytes: int) -> Iterator[None]:
    """A full disk while rebuilding indexes is explained: which partition, how many bytes
    the indexes of the ``log_bytes`` left to check may take, how many are free."""
    try:
        yield
    except KafkaStorageError as error:
        cause = error.__cause__
        if not (isinstance(cause, OSError) and cause.errno == errno.ENOSPC):
            raise
        stats = os.statvfs(segment.directory)
        raise KafkaStorageError(
            f"no space left to recover {segment.directory}: rebuilding its indexes may take "
            f"up to {_index_bytes_for(log_bytes, segment)} bytes and "
            f"{stats.f_bavail * stats.f_frsize} are free on that filesystem; nothing was "
            "cut, free space and start again"
        ) from error


def _index_bytes_for(log_bytes: int, segment: LogSegment) -> int:
    """The most the offset and time indexes of ``log_bytes`` of log can take, in pages:
    at most one entry each per ``index.interval.bytes``, and one more for sealing."""
    entries = log_bytes // max(segment.index_interval_bytes, 1) + 2
    sizes = (OffsetIndex.entry_size, TimeIndex.entry_size)
    return sum(-(-entries * size // mmap.PAGESIZE) for size in sizes) * mmap.PAGESIZE
