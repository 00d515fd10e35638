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

The cores (``list_lines``, ``rebase_partition`` here, ``verify_partition`` in
``tierlog.tools.tier_verify``, which the Spark audit job shares) take an
``ObjectStore``; the argparse adapter at the bottom opens one from ``--tier-url`` and
the sidecar's own S3 flags.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path

from tierlog.sidecar.tier_config import TierConfig, add_tier_arguments, tier_properties
from tierlog.storage.errors import TierlogError
from tierlog.storage.names import parse_partition_dir
from tierlog.storage.tier.layout import segments_prefix
from tierlog.storage.tier.manifest import (
    ManifestStateError,
    PartitionManifest,
    SegmentState,
)
from tierlog.storage.tier.manifest_store import ChunkReader, ManifestWriter, load_manifest
from tierlog.storage.tier.store import ObjectStore
from tierlog.storage.tier.url import open_store
from tierlog.storage.topic_partition import TopicPartition
from tierlog.tools.progress import choose_tracker
from tierlog.tools.tier_verify import VerifyReport, verify_partition

__all__ = [
    "add_parser",
    "list_lines",
    "rebase_partition",
    "run",
]

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
