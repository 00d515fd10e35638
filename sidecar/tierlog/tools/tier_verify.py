"""A partition's remote segments checked: ``tierlog tier verify`` and the Spark audit.

Each finished segment's object is downloaded (ranged GETs, progress in bytes) into a
scratch directory as Kafka-named ``.log``, ``.index`` and ``.timeindex`` files, and
``dump-log``'s own checks run on them: every batch's CRC and framing, every index entry
against the batch it points at, and the broker's start-up sanity rules for both indexes.
On top, what only the tier knows: the object there and its size as the manifest says,
the batches' offsets continuous and exactly covering the segment's ``[base, end)``, its
largest timestamp as recorded, and the segments continuous from one to the next and
from the log start.
"""

from __future__ import annotations

import itertools
import tempfile
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

from tierlog.storage.errors import TierlogError
from tierlog.storage.records import parse_header
from tierlog.storage.segment import INDEX_SUFFIX, LOG_SUFFIX, TIME_INDEX_SUFFIX, segment_path
from tierlog.storage.tier.manifest import (
    PartitionManifest,
    RemoteSegment,
    SegmentPart,
)
from tierlog.storage.tier.manifest_store import ChunkReader, load_manifest
from tierlog.storage.tier.store import ObjectNotFoundError, ObjectStore, ObjectStoreError
from tierlog.storage.topic_partition import TopicPartition
from tierlog.tools.dump_log import DumpOptions, DumpReport, dump_files
from tierlog.tools.progress import Advance, Track, no_progress
from tierlog.tools.segment_files import open_log

__all__ = ["DOWNLOAD_CHUNK_BYTES", "VerifyReport", "verify_partition"]

DOWNLOAD_CHUNK_BYTES = 8 << 20

_FILES = (
    (SegmentPart.LOG, LOG_SUFFIX),
    (SegmentPart.OFFSET_INDEX, INDEX_SUFFIX),
    (SegmentPart.TIME_INDEX, TIME_INDEX_SUFFIX),
)


# -- verify -----------------------------------------------------------------------------


@dataclass
class VerifyReport:
    """What verification found, per segment key, plus what could not be checked."""

    segments: int = 0
    batches: int = 0
    problems: dict[str, list[str]] = field(default_factory=dict)
    errors: list[str] = field(default_factory=list)

    def add(self, key: str, problem: str) -> None:
        self.problems.setdefault(key, []).append(problem)

    @property
    def exit_code(self) -> int:
        if self.problems:
            return 1
        return 2 if self.errors else 0

    def summary_lines(self) -> Iterator[str]:
        for key, problems in self.problems.items():
            yield f"Problems in {key}"
            yield from (f"  {problem}" for problem in problems)
        yield from self.errors
        found = sum(map(len, self.problems.values()))
        if found:
            yield f"tier verify found {found} problem(s) in {len(self.problems)} segment(s)"
        elif self.errors:
            yield f"tier verify could not check everything: {len(self.errors)} error(s)"


def verify_partition(
    store: ObjectStore,
    tp: TopicPartition,
    report: VerifyReport,
    track: Track = no_progress,
) -> Iterator[str]:
    """Check every finished remote segment of ``tp``; yields one line per segment."""
    try:
        manifest = load_manifest(store, tp)
        segments = manifest.view(ChunkReader(store)).all_segments()
    except TierlogError as error:
        report.errors.append(f"{tp.dir_name}: cannot load the manifest: {error}")
        return
    _check_continuity(manifest, segments, report)
    total = sum(segment.object_size_bytes for segment in segments)
    with (
        track(f"verify {tp.dir_name}", total, "B") as advance,
        tempfile.TemporaryDirectory(prefix="tierlog-verify-") as scratch,
    ):
        for segment in segments:
            yield _verify_segment(store, segment, Path(scratch), report, advance)


def _check_continuity(
    manifest: PartitionManifest, segments: tuple[RemoteSegment, ...], report: VerifyReport
) -> None:
    if segments and segments[0].base_offset > manifest.log_start_offset:
        report.add(
            segments[0].key,
            f"the tier's log start {manifest.log_start_offset} lies before its first segment "
            f"at {segments[0].base_offset}",
        )
    for before, after in itertools.pairwise(segments):
        if before.end_offset != after.base_offset:
            report.add(
                after.key,
                f"starts at {after.base_offset} but the segment before ends at {before.end_offset}",
            )


def _verify_segment(
    store: ObjectStore,
    segment: RemoteSegment,
    scratch: Path,
    report: VerifyReport,
    advance: Advance,
) -> str:
    report.segments += 1
    paths = [segment_path(scratch, segment.base_offset, suffix) for _part, suffix in _FILES]
    try:
        size = store.size(segment.key)
        if size != segment.object_size_bytes:
            report.add(
                segment.key,
                f"the object holds {size} bytes, the manifest says {segment.object_size_bytes}",
            )
            return f"{segment.key}: wrong size"
        _download(store, segment, paths, advance)
    except ObjectNotFoundError:
        # A definite finding, not a failure to check: the manifest names an object the
        # store does not hold (deleted by hand, or the bucket was replaced).
        report.add(segment.key, "the object is missing from the store")
        return f"{segment.key}: missing"
    except ObjectStoreError as error:
        report.errors.append(f"{segment.key}: cannot read: {error}")
        return f"{segment.key}: not checked"
    try:
        problems_before = len(report.problems.get(segment.key, []))
        _check_batches(segment, paths[0], report)
        _check_files(segment, paths, scratch, report)
        found = len(report.problems.get(segment.key, [])) - problems_before
    finally:
        for path in paths:
            path.unlink(missing_ok=True)
    status = "OK" if not found else f"{found} problem(s)"
    return f"{segment.key} [{segment.base_offset}, {segment.end_offset}): {status}"


def _download(
    store: ObjectStore, segment: RemoteSegment, paths: list[Path], advance: Advance
) -> None:
    """Each part of the object into its Kafka-named file, in ranged GETs."""
    for (part, _suffix), path in zip(_FILES, paths, strict=True):
        where = segment.range_of(part)
        with path.open("wb") as out:
            for start in range(where.start, where.end, DOWNLOAD_CHUNK_BYTES):
                end = min(start + DOWNLOAD_CHUNK_BYTES, where.end)
                out.write(store.get(segment.key, start, end))
                advance(end - start)
    advance(segment.object_size_bytes - segment.range_of(SegmentPart.TIME_INDEX).end)


def _check_batches(segment: RemoteSegment, log_path: Path, report: VerifyReport) -> None:
    """Offsets continuous inside the segment and covering exactly ``[base, end)``; the
    largest timestamp as the manifest records it. (CRCs: ``dump-log``'s walk.)"""
    expected = segment.base_offset
    max_timestamp = -1
    with open_log(log_path) as log:
        position = 0
        while position < len(log):
            try:
                header = parse_header(log, position)
            except TierlogError:
                return  # dump-log's walk reports the bytes
            if header.end_position > len(log):
                return
            report.batches += 1
            if header.base_offset != expected:
                report.add(
                    segment.key,
                    f"the batch at position {position} starts at offset {header.base_offset}, "
                    f"{expected} expected",
                )
            expected = header.last_offset + 1
            max_timestamp = max(max_timestamp, header.max_timestamp)
            position = header.end_position
    if expected != segment.end_offset:
        report.add(
            segment.key, f"the batches end at {expected}, the manifest says {segment.end_offset}"
        )
    if max_timestamp != segment.max_timestamp:
        report.add(
            segment.key,
            f"the largest timestamp is {max_timestamp}, the manifest says {segment.max_timestamp}",
        )


def _check_files(
    segment: RemoteSegment, paths: list[Path], scratch: Path, report: VerifyReport
) -> None:
    """``dump-log``'s checks: batches and CRCs, index entries, index sanity."""
    dump = DumpReport()
    for options in (DumpOptions(verify_index_only=True), DumpOptions(index_sanity_only=True)):
        files = paths if not options.index_sanity_only else paths[1:]
        for _line in dump_files(files, options, dump):
            pass
    for line in dump.stderr_lines():
        report.add(segment.key, line.replace(str(scratch) + "/", ""))
    if dump.errors and not dump.problems():
        report.errors.extend(f"{segment.key}: {error}" for error in dump.errors)
