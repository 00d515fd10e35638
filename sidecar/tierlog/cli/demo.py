"""``tierlog demo``: the main job, a sidecar on the embedded default driven over gRPC.

It starts a real ``tierlog-sidecar`` process on loopback over a data dir (a fresh temp
dir by default) and talks to it only as users do, through ``tierlog.client``: a topic
with small segments so that it rolls, a few thousand records with keys and headers
produced in every codec, the segment files the sidecar wrote, ``dump-log`` with index
verification on a rolled one, the records consumed back, offsets looked up by
timestamp, a few metrics scraped from the sidecar, then SIGTERM, the clean-shutdown
marker, a restart that must find the same log end, and a last stop (or, with
``--keep-running``, the sidecar left serving).  Between, a tiered topic is offloaded to
the embedded local-directory tier, deleted locally and fetched back (``demo_tier``), and
two consumers of a group share a topic and commit half-way, where one consumer of the
same group resumes after the restart (``demo_groups``).
Every claim it prints is computed from what the sidecar, its files or its metrics said,
and checked; a failed check makes the demo exit non-zero.  Whatever happens, it stops
the processes it started: a Ctrl-C or SIGTERM too, taken at the demo's next line or
in a wait for a sidecar (``stop_signals``), exit status 130 or 143.
"""

from __future__ import annotations

import argparse
import random
import shutil
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path

from tierlog.api.errors import TopicAlreadyExistsError
from tierlog.cli.demo_groups import GROUP_SIDECAR_CONFIGS, resume_after_restart, share_a_topic
from tierlog.cli.demo_kafka import KAFKA_SIDECAR_CONFIGS, both_front_doors
from tierlog.cli.demo_tier import SIDECAR_CONFIGS, offload_and_read_back, show_tier_after_restart
from tierlog.cli.local_sidecar import LocalSidecar, SidecarFailed, metric_value
from tierlog.cli.stop_signals import Pause, StopSignals
from tierlog.client import AdminClient, Consumer, ConsumerRecord, Producer, TopicPartition
from tierlog.client.producer import RecordFuture
from tierlog.storage.checkpoints import CLEAN_SHUTDOWN_MARKER
from tierlog.storage.records import BatchHeader, CompressionType, SimpleRecord, iter_batches
from tierlog.tools.dump_log import DumpOptions, DumpReport, dump_files

__all__ = ["DemoFailed", "DemoResult", "add_parser", "run", "run_demo"]

TOPIC = "demo"
PARTITION = TopicPartition(TOPIC, 0)
TOPIC_CONFIGS = {"segment.bytes": "65536", "index.interval.bytes": "1024"}
CODECS = ("none", "gzip", "snappy", "lz4", "zstd")
RECORDS_PER_CODEC = 800
# How long the metrics step waits for the closed consumer's stream to be counted.
STREAM_END_WAIT_S = 5.0
ITEMS = ("espresso", "croissant", "bagel", "matcha", "scone", "cortado", "muffin", "chai")

Say = Callable[[str], None]


class DemoFailed(Exception):
    """A claim the demo checks did not hold."""


@dataclass(frozen=True)
class DemoResult:
    data_dir: Path
    first_offset: int  # of this run's records
    produced: int
    log_end_offset: int
    segments: int
    restarted_log_end_offset: int
    kept_running: LocalSidecar | None  # the sidecar still serving (``keep_running``)


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


def run_demo(
    data_dir: Path, say: Say = print, *, keep_running: bool = False, pause: Pause = time.sleep
) -> DemoResult:
    """The whole narrative on ``data_dir``; ``say`` receives each printed line.  With
    ``keep_running`` the restarted sidecar is left serving, and returned.  ``pause`` is
    how the waits for a sidecar to start or stop sleep (``LocalSidecar.pause``)."""
    started = time.monotonic()
    say("tierlog demo: a tierlog-sidecar on the embedded default, driven over gRPC")
    say(f"   data dir {data_dir}")
    say(f"   tier: the embedded local-directory store in {data_dir / 'tier'}")
    say("")

    sidecar = _start(data_dir, "1. Start the sidecar", say, pause)
    try:
        say("")
        first_offset, produced, segments = _drive(sidecar, say)
        end_offset = first_offset + produced
        offload_and_read_back(sidecar, 9, say, _check)
        share_a_topic(sidecar, 10, say, _check)
        both_front_doors(sidecar, 11, say, _check)
        _stop_cleanly(sidecar, "12. Stop it with SIGTERM", say)
    finally:
        sidecar.stop()  # at once after a failure; a stopped sidecar stays stopped

    sidecar = _start(data_dir, "13. Start it again on the same data dir", say, pause)
    kept = False
    try:
        restarted_end = _show_restart(sidecar, end_offset, say)
        show_tier_after_restart(sidecar, say, _check)
        resume_after_restart(sidecar, say, _check)
        say("")
        if keep_running:
            _show_how_to_use(sidecar, say)
            kept = True
        else:
            _stop_cleanly(sidecar, "14. Stop it again", say)
    finally:
        if not kept:
            sidecar.stop()
    say(f"Done in {time.monotonic() - started:.1f} s. The data stays in {data_dir}")
    return DemoResult(
        data_dir=data_dir,
        first_offset=first_offset,
        produced=produced,
        log_end_offset=end_offset,
        segments=segments,
        restarted_log_end_offset=restarted_end,
        kept_running=sidecar if kept else None,
    )


def _start(data_dir: Path, title: str, say: Say, pause: Pause) -> LocalSidecar:
    say(title)
    started = time.monotonic()
    configs = SIDECAR_CONFIGS + GROUP_SIDECAR_CONFIGS + KAFKA_SIDECAR_CONFIGS
    sidecar = LocalSidecar.start(data_dir, configs=configs, pause=pause)
    try:
        say(f"   $ tierlog-sidecar {' '.join(sidecar.command[1:])}")
        say(
            f"   pid {sidecar.pid}: gRPC on {sidecar.address}, "
            f"Kafka's wire protocol on {sidecar.kafka_address}, "
            f"metrics on {sidecar.metrics_address}; "
            f"/readyz answered 200 after {time.monotonic() - started:.1f} s"
        )
        say(f"   its log: {sidecar.log_path}")
    except BaseException:  # a stop signal met while saying so still stops it
        sidecar.stop()
        raise
    return sidecar


def _drive(sidecar: LocalSidecar, say: Say) -> tuple[int, int, int]:
    """Steps 2 to 8: (first offset of this run's records, records produced, segments)."""
    server = sidecar.address
    first_offset = _create_topic(server, say)
    count = len(CODECS) * RECORDS_PER_CODEC
    with Consumer({"bootstrap.servers": server}) as consumer:
        consumer.assign([PARTITION])
        first_timestamp = int(time.time() * 1000)
        if first_offset:
            first_timestamp = max(first_timestamp, _last_timestamp(consumer, first_offset) + 1)
        records = _demo_records(count, first_timestamp)
        _produce(server, records, first_offset, say)
        segment_paths = _show_segments(sidecar.data_dir / f"{TOPIC}-0", first_offset, say)
        _dump_rolled_segment(segment_paths[0], say)
        _consume(consumer, first_offset, records, say)
        _lookups_by_timestamp(consumer, first_offset, records, say)
    _show_metrics(sidecar, first_offset + count, segment_paths, say)
    return first_offset, count, len(segment_paths)


def _create_topic(server: str, say: Say) -> int:
    """Create the topic (or find it from an earlier run); the offset its log ends at."""
    configs = ", ".join(f"{key}={value}" for key, value in TOPIC_CONFIGS.items())
    say(f"2. Create topic {TOPIC} (1 partition, {configs}: small, so the log rolls)")
    with AdminClient(server) as admin:
        try:
            admin.create_topic(TOPIC, 1, TOPIC_CONFIGS)
        except TopicAlreadyExistsError:
            say(f"   {TOPIC} already exists from an earlier run: this run appends after it")
        (description,) = admin.describe_topics([TOPIC])
        (partition,) = description.partitions
        set_configs = admin.describe_configs(TOPIC)
    for key, value in TOPIC_CONFIGS.items():
        _check(set_configs[key].value == value, f"{key} is {set_configs[key].value}, not {value}")
    say(
        f"   described: {TOPIC}-0 led by broker {partition.leader_id}, "
        f"high watermark {partition.high_watermark}, {partition.segment_count} segment(s)"
    )
    say("")
    return partition.high_watermark


def _last_timestamp(consumer: Consumer, end_offset: int) -> int:
    consumer.seek(PARTITION, end_offset - 1)
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        for record in consumer.poll(500):
            if record.offset == end_offset - 1:
                return record.timestamp
    raise DemoFailed(f"the record at offset {end_offset - 1} could not be read")


def _produce(server: str, records: list[SimpleRecord], first_offset: int, say: Say) -> None:
    say(
        f"3. Produce {len(records)} records with keys and headers through tierlog.client's "
        f"Producer, {RECORDS_PER_CODEC} per compression.type"
    )
    started = time.monotonic()
    futures: list[RecordFuture] = []
    for number, codec in enumerate(CODECS):
        chunk = records[number * RECORDS_PER_CODEC : (number + 1) * RECORDS_PER_CODEC]
        config = {"bootstrap.servers": server, "compression.type": codec, "linger.ms": 5}
        with Producer(config) as producer:
            for record in chunk:
                futures.append(
                    producer.send(
                        TOPIC,
                        record.value,
                        key=record.key,
                        headers=record.headers,
                        partition=PARTITION.partition,
                        timestamp=record.timestamp,
                    )
                )
            producer.flush()
    offsets = [future.result(timeout=30).offset for future in futures]
    expected = list(range(first_offset, first_offset + len(records)))
    _check(offsets == expected, "the acknowledged offsets are not contiguous in send order")
    say(
        f"   all {len(records)} acknowledged in {time.monotonic() - started:.1f} s: "
        f"offsets {offsets[0]}..{offsets[-1]}, contiguous, in the order sent"
    )
    say("")


def _batches(log_path: Path) -> list[BatchHeader]:
    return list(iter_batches(log_path.read_bytes()))


def _show_segments(partition_dir: Path, first_offset: int, say: Say) -> list[Path]:
    """The segment files the sidecar wrote, and this run's batches in them by codec."""
    log_paths = sorted(partition_dir.glob("*.log"))
    say(f"4. Segments the sidecar wrote in {partition_dir}")
    by_codec: dict[CompressionType, list[BatchHeader]] = {}
    for log_path in log_paths:
        batches = _batches(log_path)
        for header in batches:
            if header.base_offset >= first_offset:
                by_codec.setdefault(header.compression, []).append(header)
        offsets = f"{batches[0].base_offset}..{batches[-1].last_offset}" if batches else "empty"
        note = "  active" if log_path == log_paths[-1] else ""
        say(
            f"   {log_path.name} {log_path.stat().st_size:>6} B  offsets {offsets:<11}  "
            f".index {log_path.with_suffix('.index').stat().st_size:>8} B  "
            f".timeindex {log_path.with_suffix('.timeindex').stat().st_size:>8} B{note}"
        )
    _check(len(log_paths) > 1, "the log did not roll")
    say(f"   the log rolled {len(log_paths) - 1} times at segment.bytes")
    say(f"   {'codec':<8}{'batches':>8}{'records':>9}{'bytes':>9}{'vs none':>9}")
    none_bytes = sum(header.size for header in by_codec.get(CompressionType.NONE, []))
    for name in CODECS:
        headers = by_codec.get(CompressionType[name.upper()], [])
        records = sum(header.record_count for header in headers)
        stored = sum(header.size for header in headers)
        _check(records == RECORDS_PER_CODEC, f"{records} {name} records on disk")
        say(
            f"   {name:<8}{len(headers):>8}{records:>9}{stored:>9}"
            f"{stored / max(none_bytes, 1):>9.2f}"
        )
    say("   each codec's records are on disk in batches of that codec, as the producer sent them")
    say("")
    return log_paths


def _dump_rolled_segment(log_path: Path, say: Say) -> None:
    say(f"5. dump-log on the first rolled segment, {log_path.name}")
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


def _consume(consumer: Consumer, first_offset: int, records: list[SimpleRecord], say: Say) -> None:
    say(f"6. Consume them back with tierlog.client's Consumer from offset {first_offset}")
    consumer.seek(PARTITION, first_offset)
    consumed: list[ConsumerRecord] = []
    deadline = time.monotonic() + 15
    while len(consumed) < len(records) and time.monotonic() < deadline:
        consumed.extend(consumer.poll(1000))
    _check(len(consumed) == len(records), f"consumed {len(consumed)} of {len(records)} records")
    for offset, (got, sent) in enumerate(zip(consumed, records, strict=True), first_offset):
        _check(got.offset == offset, f"record {got.offset} came where {offset} should")
        same = (got.key, got.value, got.headers, got.timestamp) == (
            sent.key,
            sent.value,
            sent.headers,
            sent.timestamp,
        )
        _check(same, f"the record at offset {offset} came back changed")
    say(f"   {len(consumed)} records, in offset order, each as produced (key, value, headers, ts)")
    for record in (consumed[0], consumed[-1]):
        headers = ", ".join(f"{key}={(value or b'').decode()}" for key, value in record.headers)
        say(f"   offset {record.offset} key {(record.key or b'').decode()} [{headers}]")
        say(f"     {(record.value or b'').decode()}")
    say("")


def _lookups_by_timestamp(
    consumer: Consumer, first_offset: int, records: list[SimpleRecord], say: Say
) -> None:
    say("7. Look up offsets by timestamp (ListOffsets)")
    earliest = consumer.beginning_offsets([PARTITION])[PARTITION]
    latest = consumer.end_offsets([PARTITION])[PARTITION]
    say(f"   earliest (-2) -> offset {earliest}")
    say(f"   latest (-1)   -> offset {latest} (the log end)")
    _check(earliest == 0, f"the log starts at {earliest}, not 0")
    _check(latest == first_offset + len(records), f"the log ends at {latest}")
    for position in (len(records) // 4, (len(records) * 5) // 8):
        target = records[position].timestamp
        found = consumer.offsets_for_times({PARTITION: target})[PARTITION]
        expected = first_offset + position
        _check(found is not None and found.offset == expected, f"timestamp {target} != {expected}")
        say(f"   first at or after {_when(target)} -> offset {expected} (expected {expected})")
    after_all = records[-1].timestamp + 1
    beyond = consumer.offsets_for_times({PARTITION: after_all})[PARTITION]
    _check(beyond is None, f"a record after the last one's timestamp: {beyond}")
    say(f"   first at or after {_when(after_all)} -> none (past the last record)")
    say("")


def _show_metrics(sidecar: LocalSidecar, end_offset: int, segments: list[Path], say: Say) -> None:
    say(f"8. Metrics scraped from http://{sidecar.metrics_address}/metrics")
    exposition = sidecar.scrape()
    # A stream is counted as it ends, and the closed consumer's cancel reaches the
    # sidecar a moment after ``close`` returned.
    deadline = time.monotonic() + STREAM_END_WAIT_S
    while time.monotonic() < deadline and not metric_value(
        exposition, "tierlog_requests_total", method="FetchSession", code="CANCELLED"
    ):
        time.sleep(0.05)
        exposition = sidecar.scrape()
    for service, method, code in (
        ("AdminService", "CreateTopics", "OK"),
        ("LogService", "ProduceStream", "OK"),
        # The consumer's fetch session ends as the consumer closes it.
        ("LogService", "FetchSession", "CANCELLED"),
        ("LogService", "ListOffsets", "OK"),
    ):
        calls = metric_value(
            exposition, "tierlog_requests_total", grpc_service=service, method=method, code=code
        )
        say(f'   tierlog_requests_total{{method="{method}",code="{code}"}} {calls:.0f}')
        _check(calls > 0, f"no {method} calls counted")
    labels = {"topic": TOPIC, "partition": "0"}
    for name, expected, what in (
        ("tierlog_log_end_offset", end_offset, "the log end the client saw"),
        ("tierlog_log_segments", len(segments), "the .log files on disk"),
        ("tierlog_log_size_bytes", sum(path.stat().st_size for path in segments), "their bytes"),
    ):
        value = metric_value(exposition, name, **labels)
        say(f'   {name}{{topic="{TOPIC}",partition="0"}} {value:.0f}: {what}')
        _check(value == expected, f"{name} is {value:.0f}, not {expected}")
    say("")


def _stop_cleanly(sidecar: LocalSidecar, title: str, say: Say) -> None:
    say(title)
    started = time.monotonic()
    status = sidecar.stop()
    marker = sidecar.data_dir / CLEAN_SHUTDOWN_MARKER
    say(f"   exited with status {status} after {time.monotonic() - started:.1f} s")
    say(f"   clean-shutdown marker {marker.name}: {'present' if marker.exists() else 'MISSING'}")
    _check(status == 0, f"the sidecar exited with status {status}")
    _check("stopped cleanly" in sidecar.output, "the sidecar did not log a clean stop")
    _check(marker.exists(), "no clean-shutdown marker after SIGTERM")
    say("")


def _show_restart(sidecar: LocalSidecar, end_offset: int, say: Say) -> int:
    exposition = sidecar.scrape()
    scanned = metric_value(exposition, "tierlog_recovery_scanned_bytes")
    say(f"   recovery scanned {scanned:.0f} bytes: the clean shutdown was recognised")
    _check(scanned == 0, f"recovery rescanned {scanned:.0f} bytes after a clean shutdown")
    with Consumer({"bootstrap.servers": sidecar.address}) as consumer:
        restarted_end = consumer.end_offsets([PARTITION])[PARTITION]
    same = "the same as" if restarted_end == end_offset else "DIFFERENT FROM"
    say(f"   {TOPIC}-0 log end offset {restarted_end}, {same} before the restart ({end_offset})")
    _check(restarted_end == end_offset, "the log end moved across the restart")
    return restarted_end


def _show_how_to_use(sidecar: LocalSidecar, say: Say) -> None:
    tierlog = shutil.which("tierlog", path=str(Path(sys.executable).parent)) or "tierlog"
    say(
        f"14. Left running (--keep-running): pid {sidecar.pid}, gRPC on {sidecar.address}, "
        f"Kafka's wire protocol on {sidecar.kafka_address}"
    )
    say(f"   $ {tierlog} consume --server {sidecar.address} {TOPIC} --from-beginning --print-key")
    say(f"   $ {tierlog} topics describe {TOPIC} --server {sidecar.address}")
    say(
        f"   $ kafka-console-consumer.sh --bootstrap-server {sidecar.kafka_address} "
        f"--topic {TOPIC} --partition 0 --offset earliest"
    )
    say(f"   $ curl -s http://{sidecar.metrics_address}/metrics | grep tierlog_log_end_offset")
    say(f"   $ kill {sidecar.pid}      # SIGTERM: a clean shutdown")
    say("")


# -- the command-line adapter ----------------------------------------------------------


def add_parser(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    parser = subparsers.add_parser(
        "demo",
        help="start a sidecar on a data dir (a fresh temp dir by default) and drive it end to end",
        description=(
            "Start a tierlog-sidecar on loopback, then through tierlog.client: create a "
            "topic, produce in every codec, show and verify the segments, consume, look up "
            "by timestamp, scrape metrics, stop, restart and stop, printing what happens."
        ),
    )
    parser.add_argument(
        "--data-dir",
        type=Path,
        default=None,
        help="log dir to use (created if absent); default: a fresh temporary directory",
    )
    parser.add_argument(
        "--keep-running",
        action="store_true",
        help="leave the restarted sidecar serving, and print how to use it",
    )
    parser.set_defaults(run=run)


def run(args: argparse.Namespace) -> int:
    """SIGINT and SIGTERM stop the demo at its next line or in a wait for a sidecar
    (``Stopped``, exit status 130 or 143), never inside a client's call: it unwinds
    through the steps' ``finally`` blocks, which stop the sidecars it started."""
    data_dir = args.data_dir or Path(tempfile.mkdtemp(prefix="tierlog-demo-"))
    try:
        with StopSignals() as stops:

            def say(line: str) -> None:
                stops.check()  # between two lines no client call is under way
                print(line, flush=True)

            run_demo(data_dir, say, keep_running=args.keep_running, pause=stops.pause)
    except (DemoFailed, SidecarFailed) as failure:
        print(f"demo check failed: {failure}", file=sys.stderr)
        return 1
    return 0
