"""``tierlog demo``: the store end to end on the embedded default, in a few seconds.

It drives the real storage code, nothing staged: a ``LogManager`` on a data dir, one
partition ``demo-0`` with small segments so that it rolls, a few thousand records
appended in v2 batches of every codec, lookups by offset and by timestamp, records
fetched back and decoded, ``dump-log`` with index verification on a rolled segment,
a clean shutdown and a reopen that must find the same log end.  Every claim it prints
is computed from what the store returned, and checked where a check makes sense (a
failed check makes the demo exit non-zero).

Until the gRPC sidecar exists this is the README's "main job"; tiering to an object
store is not part of this build and the demo says so rather than pretending.
"""

from __future__ import annotations

import argparse
import random
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path

from tierlog.cli.dump_log import DumpOptions, DumpReport, dump_files
from tierlog.storage.checkpoints import (
    CLEAN_SHUTDOWN_MARKER,
    RECOVERY_POINT_CHECKPOINT,
    TopicPartition,
)
from tierlog.storage.config import LogConfig
from tierlog.storage.log import EARLIEST_TIMESTAMP, LATEST_TIMESTAMP, MAX_TIMESTAMP, Log
from tierlog.storage.manager import LogManager, LogManagerConfig
from tierlog.storage.records import (
    CompressionType,
    Record,
    SimpleRecord,
    build_batch,
    decode_records,
    iter_batches,
)

__all__ = ["DemoFailed", "DemoResult", "add_parser", "run", "run_demo"]

TOPIC_PARTITION = TopicPartition("demo", 0)
SEGMENT_BYTES = 64 * 1024
INDEX_INTERVAL_BYTES = 1024
BATCHES_PER_CODEC = 8
RECORDS_PER_BATCH = 100
CODECS = tuple(CompressionType)  # none, gzip, snappy, lz4, zstd
ITEMS = ("espresso", "croissant", "bagel", "matcha", "scone", "cortado", "muffin", "chai")

Say = Callable[[str], None]


class DemoFailed(Exception):
    """A claim the demo checks did not hold: the store did something wrong."""


@dataclass(frozen=True)
class DemoResult:
    data_dir: Path
    first_offset: int
    appended_records: int
    log_end_offset: int
    segments: int
    reopened_log_end_offset: int
    clean_shutdown_recognised: bool


def _check(condition: bool, claim: str) -> None:
    if not condition:
        raise DemoFailed(claim)


def _when(timestamp_ms: int) -> str:
    moment = datetime.fromtimestamp(timestamp_ms / 1000, UTC)
    return moment.isoformat(timespec="milliseconds").replace("+00:00", "Z")


def _demo_records(count: int, first_timestamp_ms: int) -> list[SimpleRecord]:
    """Order events with keys, a couple of headers and somewhat compressible JSON values."""
    rng = random.Random(20240601)
    records = []
    for i in range(count):
        user = f"user-{rng.randrange(50):02d}"
        value = (
            f'{{"order":{i},"user":"{user}","item":"{rng.choice(ITEMS)}",'
            f'"qty":{rng.randint(1, 4)},"trace":"{rng.getrandbits(96):024x}"}}'
        )
        records.append(
            SimpleRecord(
                key=user.encode(),
                value=value.encode(),
                timestamp=first_timestamp_ms + i,
                headers=(("source", b"tierlog-demo"), ("seq", str(i).encode())),
            )
        )
    return records


def _manager(data_dir: Path, topic_config: LogConfig) -> LogManager:
    config = LogManagerConfig(log_dirs=(data_dir,), default_log_config=topic_config)
    return LogManager(config, topic_config=lambda _topic: topic_config)


def _max_timestamp(partition_log: Log) -> int:
    return max((segment.max_timestamp_so_far for segment in partition_log.segments), default=-1)


def run_demo(data_dir: Path, say: Say = print) -> DemoResult:
    """Run the whole narrative on ``data_dir``; ``say`` receives each printed line."""
    started = time.monotonic()
    topic_config = LogConfig.from_properties(
        {"segment.bytes": SEGMENT_BYTES, "index.interval.bytes": INDEX_INTERVAL_BYTES}
    )
    say(f"tierlog demo: the embedded store end to end, in {data_dir}")
    say("")

    say("1. Start a log manager on the data dir and create the partition demo-0")
    manager = _manager(data_dir, topic_config)
    manager.startup()
    try:
        first_offset, count, end_offset = _write_and_read(manager, topic_config, say)
    except BaseException:
        manager.shutdown()  # whatever went wrong, leave the data dir closed cleanly
        raise

    say("8. Shut down cleanly")
    manager.shutdown()
    _show_shutdown_state(data_dir, say)

    say("9. Reopen the data dir")
    reopened = _manager(data_dir, topic_config)
    reopened.startup()
    try:
        clean = reopened.had_clean_shutdown[data_dir]
        again = reopened.get_log(TOPIC_PARTITION)
        reopened_end = again.log_end_offset
        say(f"   clean shutdown recognised: {'yes, no recovery scan needed' if clean else 'NO'}")
        same = "the same as" if reopened_end == end_offset else "DIFFERENT FROM"
        say(
            f"   demo-0 log end offset {reopened_end}, {same} before the shutdown "
            f"({end_offset}); {len(again.segments)} segments"
        )
        _check(clean, "the clean shutdown was not recognised")
        _check(reopened_end == end_offset, "the log end moved across the restart")
        reopened_segments = len(again.segments)
    finally:
        reopened.shutdown()
    say("")

    say("10. Tiered storage")
    say("   Not in this build: offloading closed segments to an object store (a local")
    say("   directory or S3) arrives with the tiered-storage work. Every segment above")
    say("   is on local disk only.")
    say("")
    say(f"Done in {time.monotonic() - started:.1f} s. The files stay in {data_dir}")
    return DemoResult(
        data_dir=data_dir,
        first_offset=first_offset,
        appended_records=count,
        log_end_offset=end_offset,
        segments=reopened_segments,
        reopened_log_end_offset=reopened_end,
        clean_shutdown_recognised=clean,
    )


def _write_and_read(manager: LogManager, topic_config: LogConfig, say: Say) -> tuple[int, int, int]:
    """Steps 1 to 7 on a started manager: (first offset, records appended, log end)."""
    partition_log = manager.get_or_create_log(TOPIC_PARTITION, topic_config)
    first_offset = partition_log.log_end_offset
    say(f"   {partition_log.directory}")
    say(
        f"   segment.bytes={topic_config.segment_bytes} (small, so the log rolls), "
        f"index.interval.bytes={topic_config.index_interval_bytes}"
    )
    if first_offset:
        say(f"   the partition already holds offsets up to {first_offset}: appending after them")
    say("")

    count = len(CODECS) * BATCHES_PER_CODEC * RECORDS_PER_BATCH
    first_timestamp = max(int(time.time() * 1000) - count, _max_timestamp(partition_log) + 1)
    records = _demo_records(count, first_timestamp)
    _append(partition_log, records, say)
    end_offset = partition_log.log_end_offset
    _check(end_offset == first_offset + count, f"log end {end_offset} != {first_offset}+{count}")

    segments = _show_segments(partition_log, say)
    _check(len(segments) > 1, "the log did not roll")
    _lookups_by_offset(partition_log, first_offset, count, say)
    _lookups_by_timestamp(partition_log, first_offset, records, say)
    _fetch_back(partition_log, first_offset + count // 2, records[count // 2 :], say)
    _dump_rolled_segment(segments[0], say)
    return first_offset, count, end_offset


def _show_shutdown_state(data_dir: Path, say: Say) -> None:
    marker = data_dir / CLEAN_SHUTDOWN_MARKER
    lines = (data_dir / RECOVERY_POINT_CHECKPOINT).read_text().splitlines()
    say(
        f"   {RECOVERY_POINT_CHECKPOINT} (version {lines[0]}, {lines[1]} entry): "
        f"{'; '.join(lines[2:])}"
    )
    say(f"   clean-shutdown marker {marker.name}: {'present' if marker.exists() else 'MISSING'}")
    _check(marker.exists(), "no clean-shutdown marker after shutdown")
    say("")


def _append(partition_log: Log, records: list[SimpleRecord], say: Say) -> None:
    batches = len(records) // RECORDS_PER_BATCH
    say(
        f"2. Append {len(records)} records in {batches} v2 batches of {RECORDS_PER_BATCH}, "
        f"codecs taking turns"
    )
    raw_bytes = dict.fromkeys(CODECS, 0)
    stored_bytes = dict.fromkeys(CODECS, 0)
    started = time.monotonic()
    first = last = -1
    for number in range(batches):
        codec = CODECS[number % len(CODECS)]
        chunk = records[number * RECORDS_PER_BATCH : (number + 1) * RECORDS_PER_BATCH]
        info = partition_log.append(build_batch(chunk, compression=codec))
        raw_bytes[codec] += len(build_batch(chunk))
        stored_bytes[codec] += info.size_bytes
        first = info.first_offset if first < 0 else first
        last = info.last_offset
    elapsed_ms = (time.monotonic() - started) * 1000
    say(f"   {'codec':<8}{'batches':>8}{'as none':>10}{'stored':>10}{'ratio':>7}")
    for codec in CODECS:
        ratio = stored_bytes[codec] / raw_bytes[codec]
        say(
            f"   {codec.name.lower():<8}{batches // len(CODECS):>8}{raw_bytes[codec]:>10}"
            f"{stored_bytes[codec]:>10}{ratio:>7.2f}"
        )
    say(f"   offsets {first}..{last} assigned in {elapsed_ms:.0f} ms (batch building included)")
    say("")


def _show_segments(partition_log: Log, say: Say) -> list[Path]:
    segments = partition_log.segments
    say(f"3. Segments: the log rolled {len(segments) - 1} times at segment.bytes")
    paths = []
    for segment in segments:
        log_path = segment.log.path
        index_bytes = segment.offset_index.path.stat().st_size
        time_index_bytes = segment.time_index.path.stat().st_size
        last = segment.next_offset - 1
        note = ""
        if segment is partition_log.active_segment:
            note = "  active (indexes preallocated until it rolls)"
        offsets = f"{segment.base_offset}..{last}"
        say(
            f"   {log_path.name} {segment.size:>6} B  offsets {offsets:<11}  "
            f".index {index_bytes:>8} B  .timeindex {time_index_bytes:>8} B{note}"
        )
        paths.append(log_path)
    say("")
    return paths


def _lookups_by_offset(partition_log: Log, first_offset: int, count: int, say: Say) -> None:
    say("4. Look up offsets: the sparse offset index points near, a short scan finds the batch")
    for offset in (first_offset, first_offset + count // 3, first_offset + count - 1):
        segment = next(s for s in reversed(partition_log.segments) if s.base_offset <= offset)
        found = segment.translate_offset(offset)
        _check(found is not None, f"offset {offset} not found")
        assert found is not None
        header = found.header
        _check(header.base_offset <= offset <= header.last_offset, f"wrong batch for {offset}")
        say(
            f"   offset {offset:>5} -> {segment.log.path.name} position {found.position:>5}, "
            f"batch {header.base_offset}..{header.last_offset} "
            f"({header.compression.name.lower()})"
        )
    say("")


def _lookups_by_timestamp(
    partition_log: Log, first_offset: int, records: list[SimpleRecord], say: Say
) -> None:
    say("5. Look up by timestamp (Kafka's ListOffsets)")
    earliest = partition_log.offset_for_timestamp(EARLIEST_TIMESTAMP)
    latest = partition_log.offset_for_timestamp(LATEST_TIMESTAMP)
    newest = partition_log.offset_for_timestamp(MAX_TIMESTAMP)
    say(f"   earliest (-2)      -> offset {earliest.offset if earliest else None}")
    say(f"   latest (-1)        -> offset {latest.offset if latest else None} (the log end)")
    if newest is not None:
        say(f"   max timestamp (-3) -> offset {newest.offset} at {_when(newest.timestamp)}")
        _check(newest.timestamp == records[-1].timestamp, "max timestamp is not the last record's")
    for position in (len(records) // 4, (len(records) * 5) // 8):
        target = records[position].timestamp
        found = partition_log.offset_for_timestamp(target)
        expected = first_offset + position
        _check(found is not None and found.offset == expected, f"timestamp {target} != {expected}")
        assert found is not None
        say(f"   first at or after {_when(target)} -> offset {found.offset} (expected {expected})")
    say("")


def _fetched(partition_log: Log, offset: int, how_many: int) -> Iterator[Record]:
    data = partition_log.read(offset, 64 * 1024).records
    for header in iter_batches(data):
        for record in decode_records(data, header):
            if offset <= record.offset < offset + how_many:
                yield record


def _fetch_back(partition_log: Log, offset: int, expected: list[SimpleRecord], say: Say) -> None:
    say(f"6. Fetch from offset {offset} (Log.read returns whole batches; decoded here)")
    fetched = list(_fetched(partition_log, offset, 3))
    _check(len(fetched) == 3, f"fetched {len(fetched)} records, not 3")
    for record, sent in zip(fetched, expected, strict=False):
        _check(record.value == sent.value and record.key == sent.key, "a record came back changed")
        headers = ", ".join(f"{k}={(v or b'').decode()}" for k, v in record.headers)
        say(f"   offset {record.offset} key {(record.key or b'').decode()} [{headers}]")
        say(f"     {(record.value or b'').decode()}")
    say("   each record came back byte for byte as it was appended")
    say("")


def _dump_rolled_segment(log_path: Path, say: Say) -> None:
    say(f"7. dump-log on the first rolled segment, {log_path.name}")
    say(f"   $ tierlog dump-log --files {log_path}")
    report = DumpReport()
    lines = list(dump_files([log_path], DumpOptions(), report))
    batch_lines = [line for line in lines if line.startswith("baseOffset:")]
    for line in batch_lines[:2]:
        say(f"   {line}")
    say(f"   ... {len(batch_lines)} batch lines in all, {len(report.invalid_batches)} invalid")
    index_paths = [log_path.with_suffix(".index"), log_path.with_suffix(".timeindex")]
    say(f"   $ tierlog dump-log --verify-index-only --files {','.join(map(str, index_paths))}")
    checked = DumpReport()
    list(dump_files(index_paths, DumpOptions(verify_index_only=True), checked))
    problems = checked.problems() + report.problems() + checked.errors + report.errors
    outcome = "no problems" if not problems else "; ".join(problems)
    say(f"   {checked.index_entries} index entries checked against the log: {outcome}")
    _check(not problems, f"dump-log found problems: {outcome}")
    say("")


# -- the command-line adapter ----------------------------------------------------------


def add_parser(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    parser = subparsers.add_parser(
        "demo",
        help="run the embedded store end to end on a data dir (a fresh temp dir by default)",
        description=(
            "Append, roll, look up, fetch, dump, shut down and reopen a partition with "
            "tierlog's storage, printing what happens."
        ),
    )
    parser.add_argument(
        "--data-dir",
        type=Path,
        default=None,
        help="log dir to use (created if absent); default: a fresh temporary directory",
    )
    parser.set_defaults(run=run)


def run(args: argparse.Namespace) -> int:
    data_dir = args.data_dir or Path(tempfile.mkdtemp(prefix="tierlog-demo-"))
    try:
        run_demo(data_dir, lambda line: print(line, flush=True))
    except DemoFailed as failure:
        print(f"demo check failed: {failure}", file=sys.stderr)
        return 1
    return 0
