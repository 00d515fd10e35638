"""``tierlog tier ls|verify|rebase TOPIC-PARTITION``: a partition's remote segments, listed,
checked, or started afresh.

``ls`` prints the partition's manifest: its version, writer epoch, log start and
chunk count, then one line per remote segment, live finished ones (from the head and
every chunk) and started ones (base and end offsets, log and object sizes, first and
largest timestamps, state, writer epoch, object key).

``verify`` downloads each finished segment's object (ranged GETs, a progress bar in
bytes) into a scratch directory as Kafka-named ``.log``, ``.index`` and ``.timeindex``
files, and runs ``dump-log``'s own checks on them: every batch's CRC and framing, every
index entry against the batch it points at, and the broker's start-up sanity rules
for both indexes. On top, what only the tier knows: the object there (a missing one
is a problem found) and its size as the manifest says, the batches' offsets
continuous and exactly covering the segment's ``[base, end)``, its largest
timestamp as recorded, and the segments continuous from one to the next and from the
log start. Exit status as ``dump-log``'s: 0 all good, 1 problems found, 2 something
could not be checked (the store failed).

``rebase`` is the operator's answer to a manifest that vanished (the bucket was
deleted and recreated, or emptied: the sidecar stopped the partition's uploads and
said so): it writes a fresh manifest of what the bucket really holds for the
partition, which is no readable segment (the objects' metadata went with the old
manifest; any segment objects still there are named in its output and swept later as
orphans). The sidecar notices it, claims the partition again and re-uploads its local
segments; offsets only the lost objects held are gone, and the log start moves past
them. It refuses a partition that has a manifest.

A fresh volume pointed at an old bucket needs no rebase: the bucket's manifests are
intact, and creating the topics again (with ``remote.storage.enable=true``) makes the
sidecar continue each partition at the tier's end and serve the older offsets from it.

The cores (``list_lines``, ``verify_partition``, ``rebase_partition``) take an
``ObjectStore``; the argparse adapter at the bottom opens one from ``--tier-url`` and
the sidecar's own S3 flags.
"""

from __future__ import annotations

import argparse
import itertools
import sys
import tempfile
from collections.abc import Iterator
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path

from tierlog.cli.dump_log import DumpOptions, DumpReport, dump_files
from tierlog.cli.progress import Advance, Track, choose_tracker, no_progress
from tierlog.cli.segment_files import open_log
from tierlog.sidecar.tier_config import TierConfig, add_tier_arguments, tier_properties
from tierlog.storage.errors import TierlogError
from tierlog.storage.names import parse_partition_dir
from tierlog.storage.records import parse_header
from tierlog.storage.segment import INDEX_SUFFIX, LOG_SUFFIX, TIME_INDEX_SUFFIX, segment_path
from tierlog.storage.tier.layout import segments_prefix
from tierlog.storage.tier.manifest import (
    ManifestStateError,
    PartitionManifest,
    RemoteSegment,
    SegmentPart,
    SegmentState,
)
from tierlog.storage.tier.manifest_store import ChunkReader, ManifestWriter, load_manifest
from tierlog.storage.tier.store import ObjectNotFoundError, ObjectStore, ObjectStoreError
from tierlog.storage.tier.url import open_store
from tierlog.storage.topic_partition import TopicPartition

__all__ = [
    "VerifyReport",
    "add_parser",
    "list_lines",
    "rebase_partition",
    "run",
    "verify_partition",
]

DOWNLOAD_CHUNK_BYTES = 8 << 20
_FILES = (
    (SegmentPart.LOG, LOG_SUFFIX),
    (SegmentPart.OFFSET_INDEX, INDEX_SUFFIX),
    (SegmentPart.TIME_INDEX, TIME_INDEX_SUFFIX),
)


# -- ls ---------------------------------------------------------------------------------


def list_lines(store: ObjectStore, manifest: PartitionManifest) -> Iterator[str]:
    segments = sorted(
        (
            *manifest.view(ChunkReader(store)).all_segments(),
            *manifest.in_state(SegmentState.STARTED),
        ),
        key=lambda s: (s.base_offset, s.created_ms),
    )
    yield (
        f"Partition: {manifest.tp.dir_name}\tManifestVersion: {manifest.version}"
        f"\tWriterEpoch: {manifest.writer_epoch}\tLogStartOffset: {manifest.log_start_offset}"
        f"\tEndOffset: {manifest.end_offset}\tSegments: {len(segments)}"
        f"\tChunks: {len(manifest.chunks)}"
    )
    for s in segments:
        yield (
            f"baseOffset: {s.base_offset} endOffset: {s.end_offset} "
            f"logBytes: {s.log_size_bytes} objectBytes: {s.object_size_bytes} "
            f"baseTimestamp: {_time(s.base_timestamp)} maxTimestamp: {_time(s.max_timestamp)} "
            f"state: {s.state.value} writerEpoch: {s.writer_epoch} key: {s.key}"
        )


def _time(timestamp_ms: int) -> str:
    if timestamp_ms < 0:
        return str(timestamp_ms)
    moment = datetime.fromtimestamp(timestamp_ms / 1000, tz=UTC)
    return f"{timestamp_ms}({moment.isoformat(timespec='milliseconds')})"


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


# -- rebase -----------------------------------------------------------------------------

REBASE_WRITER_ID = "tierlog-tier-rebase"


def rebase_partition(store: ObjectStore, tp: TopicPartition) -> Iterator[str]:
    """Write a fresh manifest for ``tp``, whose manifest vanished; yields what it did.
    ``ManifestStateError`` when the partition has a manifest (nothing to rebase)."""
    current = load_manifest(store, tp)
    if current.version:
        raise ManifestStateError(
            f"{tp.dir_name} has manifest version {current.version} in {store.url}: "
            "nothing to rebase"
        )
    leftovers = [info.key for info in store.list(segments_prefix(tp))]
    fresh = ManifestWriter(store, current, REBASE_WRITER_ID).update(lambda manifest: manifest)
    yield f"{tp.dir_name}: wrote a fresh manifest (version {fresh.version}) in {store.url}"
    for key in leftovers:
        yield f"not named (no metadata left; swept later as an orphan): {key}"
    yield (
        "the partition's sidecar claims it again at its next pass and re-uploads its local "
        "segments; offsets only the lost objects held are gone"
    )


# -- the command-line adapter -----------------------------------------------------------


def _partition(text: str) -> TopicPartition:
    tp = parse_partition_dir(text)
    if tp is None:
        raise argparse.ArgumentTypeError(f"expected TOPIC-PARTITION (e.g. orders-0), not {text!r}")
    return tp


def add_parser(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    parser = subparsers.add_parser(
        "tier",
        help="list, verify or rebase a partition's segments in the remote tier",
        description=(
            "List a partition's remote segments (ls) or check every one of them (verify: "
            "objects there, batches and CRCs, indexes against the data, offsets continuous; "
            "exit status 0 all good, 1 problems found, 2 something could not be checked). "
            "rebase writes a fresh manifest for a partition whose manifest vanished (a "
            "deleted and recreated bucket): its sidecar then uploads again, and the offsets "
            "only the lost objects held are gone. A fresh volume on an old bucket needs no "
            "rebase: create its topics again (remote.storage.enable=true) and the sidecar "
            "rebuilds each partition from the bucket."
        ),
    )
    parser.add_argument("action", choices=("ls", "verify", "rebase"))
    parser.add_argument(
        "partition", nargs="?", type=_partition, help="TOPIC-PARTITION, e.g. orders-0"
    )
    parser.add_argument("--topic", help="the topic (instead of TOPIC-PARTITION)")
    parser.add_argument("--partition", dest="partition_number", type=int, default=None)
    parser.add_argument(
        "--progress",
        action="store_true",
        help="always show a progress bar on stderr (by default only when stderr is a "
        "terminal and stdout is not)",
    )
    add_tier_arguments(parser)
    parser.set_defaults(run=run)


def _topic_partition(args: argparse.Namespace) -> TopicPartition:
    if args.partition is not None:
        return args.partition  # type: ignore[no-any-return]
    if args.topic is None or args.partition_number is None:
        raise SystemExit("tierlog tier: give TOPIC-PARTITION, or --topic and --partition")
    tp = _partition(f"{args.topic}-{args.partition_number}")
    return tp


def open_tier_store(args: argparse.Namespace) -> ObjectStore:
    """The store ``--tier-url`` and the S3 flags name (a tool has no default data dir)."""
    props = tier_properties(args)
    if "tierlog.tier.url" not in props:
        raise SystemExit(
            "tierlog tier: --tier-url is required (file:///path or s3://bucket/prefix)"
        )
    config = TierConfig.from_properties(props, (Path.cwd(),))
    return open_store(config.url, config.s3)


_NO_MANIFEST = (
    "{tp}: no manifest in {url}. Nothing was tiered yet; or the bucket was emptied or "
    "recreated, and its sidecar stopped the partition's uploads (see its log and /readyz): "
    "`tierlog tier rebase {tp}` starts afresh. A fresh volume on a bucket that has the "
    "manifest rebuilds from it once the topic is created again (remote.storage.enable=true)."
)


def run(args: argparse.Namespace) -> int:
    tp = _topic_partition(args)
    store = open_tier_store(args)
    try:
        if args.action == "ls":
            manifest = load_manifest(store, tp)
            for line in list_lines(store, manifest):
                print(line)
            if not manifest.version:
                print(_NO_MANIFEST.format(tp=tp.dir_name, url=store.url), file=sys.stderr)
            return 0
        if args.action == "rebase":
            try:
                for line in rebase_partition(store, tp):
                    print(line)
            except TierlogError as error:
                print(f"tierlog tier rebase: {error}", file=sys.stderr)
                return 1
            return 0
        report = VerifyReport()
        for line in verify_partition(store, tp, report, choose_tracker(args.progress)):
            print(line, flush=True)
        for line in report.summary_lines():
            print(line, file=sys.stderr)
        if report.exit_code == 0:
            print(f"{tp.dir_name}: {report.segments} segment(s), {report.batches} batches: OK")
        return report.exit_code
    finally:
        store.close()
