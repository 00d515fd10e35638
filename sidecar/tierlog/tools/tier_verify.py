"""A partition's remote segments checked: ``tierlog tier verify`` and the Spark audit.

Each finished segment's object is downloaded (ranged GETs, progress in bytes) into a
scratch directory as Kafka-named ``.log``, ``.index`` and ``.timeindex`` files, and
``dump-log``'s own checks run on them: every batch's CRC and framing, every index entry
against the batch it points at, and the broker's start-up sanity rules for both indexes.
On top, what only the tier knows: the object there and its size as the manifest says,
the batches' offsets rising inside the segment's ``[base, end)`` and its last batch
ending at its end (a compacted segment has gaps: the cleaner drops records and batches,
but keeps a run's last batch, empty if need be), its largest timestamp as recorded (an
empty batch's does not count: a segment indexes only timestamps records carry), and the
segments continuous from one to the next and from the log start. Below the manifest's
cleaner offset (what the tier's cleaner has compacted) each key appears once, as the
cleaner's rules leave it: a repeat is a ``DuplicateKey`` finding. Only the records the
cleaner compacts count (magic 2, neither transactional nor control: it copies the others
as they are), each offset once (where an upload overlapped the segment before, the older
copy is the one read).
"""

from __future__ import annotations

import itertools
import tempfile
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

from tierlog.storage.cleaner import is_compactable, scan_records
from tierlog.storage.errors import TierlogError
from tierlog.storage.file_records import FileBatch
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

__all__ = ["DOWNLOAD_CHUNK_BYTES", "DuplicateKey", "VerifyReport", "verify_partition"]

DOWNLOAD_CHUNK_BYTES = 8 << 20

_FILES = (
    (SegmentPart.LOG, LOG_SUFFIX),
    (SegmentPart.OFFSET_INDEX, INDEX_SUFFIX),
    (SegmentPart.TIME_INDEX, TIME_INDEX_SUFFIX),
)


# -- verify -----------------------------------------------------------------------------


@dataclass(frozen=True)
class DuplicateKey:
    """A record key found twice below the cleaner offset: at ``first_offset`` (in the
    object ``first_segment``), and again at ``offset`` (in ``segment``)."""

    key: bytes
    first_offset: int
    first_segment: str
    offset: int
    segment: str


@dataclass
class VerifyReport:
    """What verification found, per segment key, plus what could not be checked."""

    segments: int = 0
    batches: int = 0
    problems: dict[str, list[str]] = field(default_factory=dict)
    errors: list[str] = field(default_factory=list)
    duplicate_keys: list[DuplicateKey] = field(default_factory=list)  # also in problems

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
    cleaned_keys = _CleanedKeys(manifest.cleaner_offset, report)
    with (
        track(f"verify {tp.dir_name}", total, "B") as advance,
        tempfile.TemporaryDirectory(prefix="tierlog-verify-") as scratch,
    ):
        for segment in segments:
            yield _verify_segment(store, segment, Path(scratch), report, advance, cleaned_keys)


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
    cleaned_keys: _CleanedKeys,
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
        _check_batches(segment, paths[0], report, cleaned_keys)
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


def _check_batches(
    segment: RemoteSegment, log_path: Path, report: VerifyReport, cleaned_keys: _CleanedKeys
) -> None:
    """Offsets rising inside the segment from its base, the last batch ending at its end;
    the largest timestamp as the manifest records it; keys once in the cleaned range.
    (CRCs: ``dump-log``'s walk.)"""
    expected = segment.base_offset
    max_timestamp = -1
    cleaned_keys.start(segment)
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
            if header.base_offset < expected:
                report.add(
                    segment.key,
                    f"the batch at position {position} starts at offset {header.base_offset}, "
                    f"below {expected}",
                )
            cleaned_keys.check(FileBatch(position, header, memoryview(log)))
            expected = header.last_offset + 1
            if header.record_count:
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


class _CleanedKeys:
    """The keys met below the cleaner offset so far, with where each was first met."""

    def __init__(self, cleaner_offset: int, report: VerifyReport):
        self.cleaner_offset = cleaner_offset
        self.report = report
        self._first: dict[bytes, tuple[int, str]] = {}
        self._segment: RemoteSegment | None = None
        self._read_end = 0  # offsets below it were read in an earlier segment
        self._from_offset = 0

    def start(self, segment: RemoteSegment) -> None:
        if self._segment is not None:
            self._read_end = max(self._read_end, self._segment.end_offset)
        self._segment, self._from_offset = segment, self._read_end

    def check(self, batch: FileBatch) -> None:
        header, segment = batch.header, self._segment
        assert segment is not None
        if header.base_offset >= self.cleaner_offset or not is_compactable(header):
            return
        try:
            spans = scan_records(batch, header)
        except TierlogError:
            return  # damaged records: dump-log's walk reports them
        for span in spans:
            if span.key is None or not self._from_offset <= span.offset < self.cleaner_offset:
                continue
            first = self._first.setdefault(span.key, (span.offset, segment.key))
            if first[0] != span.offset:
                self._found(DuplicateKey(span.key, *first, span.offset, segment.key))

    def _found(self, duplicate: DuplicateKey) -> None:
        self.report.duplicate_keys.append(duplicate)
        self.report.add(
            duplicate.segment,
            f"key {duplicate.key!r} at offset {duplicate.offset} is in the cleaned range "
            f"(below {self.cleaner_offset}) already at {duplicate.first_offset} in "
            f"{duplicate.first_segment}",
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
