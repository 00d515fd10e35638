"""``tierlog perf produce|consume``: Kafka's ``kafka-producer-perf-test`` and
``kafka-consumer-perf-test`` against a sidecar, printing what they print.

``produce`` sends ``--num-records`` records of ``--record-size`` bytes (random
uppercase letters, as Kafka's tool) at ``--throughput`` records/s (-1: as fast as it
can), with ``--producer-props`` (Kafka's list, ``acks=all linger.ms=10``, or the flag
repeated). Latency is from ``send`` to its acknowledgement. As Kafka's tool it prints a
line for each 5-second interval (once an acknowledgement comes past its end), then the
total: records/s, MB/s, average and maximum latency and the 50th, 95th, 99th and 99.9th
percentiles; ``--print-metrics`` adds the producer's metrics in Kafka's table.

``consume`` reads ``--messages`` records and prints Kafka's CSV: a header (unless
``--hide-header``), then the start and end times, MB and records read and their rates,
the time spent joining the group and the rates over the rest (``fetch.*``); with
``--show-detailed-stats`` a line per ``--reporting-interval`` instead of the total.
With ``--group`` it joins that group (from the earliest offset it has no commit for, or
the latest with ``--from-latest``) and commits on close; without, it reads every
partition without a group, where Kafka's tool would make up a group of its own.

SIGINT (Ctrl-C) or SIGTERM ends either test early, at a safe point (``stop_signals``:
between sends, in the throttle's sleep, or by waking the consumer's poll): ``produce``
waits for what it sent, then both print their total of what was done and exit 130 or
143.  The arithmetic is in pure functions (``percentile``, ``Summary``,
``consumer_line``); the commands only time and print.
"""

from __future__ import annotations

import argparse
import math
import random
import string
import sys
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime

from tierlog.cli.produce import CODECS
from tierlog.cli.server_option import (
    add_security_options,
    add_server_option,
    add_topic_arguments,
    client_properties,
    key_value,
    topic_of,
)
from tierlog.cli.stop_signals import StopSignals
from tierlog.client import Callback, Consumer, Producer, RecordMetadata, TopicPartition
from tierlog.client.errors import WakeupError

__all__ = [
    "REPORTING_INTERVAL_S",
    "ConsumerFigures",
    "Summary",
    "Throttle",
    "add_parser",
    "consumer_line",
    "metric_lines",
    "percentile",
]

MB = 1024 * 1024
REPORTING_INTERVAL_S = 5.0  # Kafka's ProducerPerformance reports every 5 s
PRODUCER_CLIENT_ID = "perf-producer-client"  # Kafka's tools' client ids, when none is set
CONSUMER_CLIENT_ID = "perf-consumer-client"
CONSUMER_COLUMNS = (
    "data.consumed.in.MB, MB.sec, data.consumed.in.nMsg, nMsg.sec, rebalance.time.ms, "
    "fetch.time.ms, fetch.MB.sec, fetch.nMsg.sec"
)


def percentile(sorted_values: Sequence[float], fraction: float) -> float:
    """The value below which ``fraction`` of ``sorted_values`` lie (nearest rank)."""
    if not sorted_values:
        return 0.0
    index = max(0, math.ceil(fraction * len(sorted_values)) - 1)
    return sorted_values[min(index, len(sorted_values) - 1)]


def _per_s(amount: float, elapsed_s: float) -> float:
    return amount / elapsed_s if elapsed_s > 0 else 0.0


@dataclass(frozen=True)
class Summary:
    records: int
    total_bytes: int
    elapsed_s: float
    latencies_ms: tuple[float, ...]  # sorted

    @property
    def records_per_s(self) -> float:
        return _per_s(self.records, self.elapsed_s)

    @property
    def mb_per_s(self) -> float:
        return _per_s(self.total_bytes / MB, self.elapsed_s)

    def line(self) -> str:
        """Kafka's total line (its percentiles are whole milliseconds)."""
        lat = self.latencies_ms
        average = sum(lat) / len(lat) if lat else 0.0
        return (
            f"{self.records} records sent, {self.records_per_s:.1f} records/sec "
            f"({self.mb_per_s:.2f} MB/sec), {average:.2f} ms avg latency, "
            f"{max(lat, default=0.0):.2f} ms max latency, "
            f"{percentile(lat, 0.5):.0f} ms 50th, {percentile(lat, 0.95):.0f} ms 95th, "
            f"{percentile(lat, 0.99):.0f} ms 99th, {percentile(lat, 0.999):.0f} ms 99.9th."
        )

    def window_line(self) -> str:
        """Kafka's line for one reporting interval."""
        lat = self.latencies_ms
        return (
            f"{self.records} records sent, {self.records_per_s:.1f} records/sec "
            f"({self.mb_per_s:.2f} MB/sec), {sum(lat) / max(1, len(lat)):.1f} ms avg latency, "
            f"{max(lat, default=0.0):.1f} ms max latency."
        )


class Throttle:
    """Kafka's ``ThroughputThrottler``: sleep while ahead of ``per_second`` (-1: never)."""

    def __init__(self, per_second: float, start_s: float) -> None:
        self.per_second = per_second
        self.start_s = start_s

    def delay_s(self, sent: int, now_s: float) -> float:
        if self.per_second <= 0:
            return 0.0
        return max(0.0, sent / self.per_second - (now_s - self.start_s))


def metric_lines(group: str, client_id: str, metrics: Mapping[str, float]) -> list[str]:
    """Kafka's ``--print-metrics`` table: a blank line, a header, then ``group:name:tags``
    and each value, sorted, the names padded to the longest."""
    named = {f"{group}:{name}:{{client-id={client_id}}}": value for name, value in metrics.items()}
    width = max(map(len, named), default=0)
    rows = [f"{name:<{width}} : {value:.3f}" for name, value in sorted(named.items())]
    return ["", f"{'Metric Name':<{width}}   Value", *rows]


def add_parser(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    parser = subparsers.add_parser(
        "perf", help="producer and consumer throughput and latency (Kafka's perf tests)"
    )
    tests = parser.add_subparsers(dest="perf", metavar="produce|consume", required=True)
    produce = tests.add_parser("produce", help="like kafka-producer-perf-test")
    add_topic_arguments(produce)
    produce.add_argument("--num-records", type=int, required=True)
    produce.add_argument("--record-size", type=int, default=1024, help="bytes per value")
    produce.add_argument(
        "--throughput", type=float, default=-1, help="records/s at most (-1: no limit)"
    )
    produce.add_argument("--compression-type", choices=CODECS, default="none")
    produce.add_argument(
        "--producer-props",
        "--producer-property",
        action="extend",
        nargs="+",
        type=key_value,
        default=[],
        metavar="KEY=VALUE",
        help="producer configs under their Kafka names: a list, as Kafka's tool takes "
        "them, or the flag repeated",
    )
    produce.add_argument(
        "--print-metrics", action="store_true", help="the producer's metrics at the end"
    )
    add_server_option(produce, "--producer.config")
    add_security_options(produce)
    produce.set_defaults(run=run_produce)

    consume = tests.add_parser("consume", help="like kafka-consumer-perf-test")
    add_topic_arguments(consume)
    consume.add_argument("--messages", "--num-records", dest="num_records", type=int, required=True)
    consume.add_argument(
        "--timeout",
        "--timeout-ms",
        dest="timeout_ms",
        type=int,
        default=10_000,
        help="give up after this many ms without records (default: %(default)s)",
    )
    consume.add_argument("--group", help="join this group and commit (default: no group)")
    consume.add_argument(
        "--from-latest", action="store_true", help="start at the end where nothing is committed"
    )
    consume.add_argument(
        "--fetch-size", type=int, help="max.partition.fetch.bytes (Kafka's flag for it)"
    )
    consume.add_argument(
        "--show-detailed-stats", action="store_true", help="a line per reporting interval"
    )
    consume.add_argument(
        "--reporting-interval", type=int, default=5000, metavar="MS", help="(default: 5000)"
    )
    consume.add_argument("--hide-header", action="store_true", help="no CSV header")
    consume.add_argument(
        "--print-metrics", action="store_true", help="the consumer's metrics at the end"
    )
    consume.add_argument(
        "--consumer-property",
        action="append",
        type=key_value,
        default=[],
        metavar="KEY=VALUE",
    )
    add_server_option(consume, "--consumer.config")
    add_security_options(consume)
    consume.set_defaults(run=run_consume)


def _payload(size: int) -> bytes:
    return "".join(random.choices(string.ascii_uppercase, k=size)).encode()


class _ProduceStats:
    """Kafka's ``ProducerPerformance.Stats``: every acknowledged record's latency; a
    line for each interval, printed by the acknowledgement that comes after its end.
    Runs on the producer's sender thread, the only one recording."""

    def __init__(self, record_bytes: int) -> None:
        self.record_bytes = record_bytes
        self.latencies_ms: list[float] = []
        self.window_start_s = time.perf_counter()
        self.window_from = 0  # the first of latencies_ms in the current interval

    def record(self, latency_ms: float) -> None:
        self.latencies_ms.append(latency_ms)
        now = time.perf_counter()
        if now - self.window_start_s < REPORTING_INTERVAL_S:
            return
        window = self.latencies_ms[self.window_from :]
        count = len(window)
        elapsed_s = now - self.window_start_s
        print(Summary(count, count * self.record_bytes, elapsed_s, tuple(window)).window_line())
        sys.stdout.flush()
        self.window_start_s, self.window_from = now, len(self.latencies_ms)


def run_produce(args: argparse.Namespace) -> int:
    props: dict[str, object] = {
        **client_properties(args),
        "compression.type": args.compression_type,
        **dict(args.producer_props),
    }
    props.setdefault("client.id", PRODUCER_CLIENT_ID)
    payload = _payload(args.record_size)
    stats = _ProduceStats(len(payload))
    failures: list[BaseException] = []
    clock = time.perf_counter

    # Kafka's PerfCallback: one per record, with its send time.
    def on_done(sent_s: float) -> Callback:
        def done(_metadata: RecordMetadata | None, error: BaseException | None) -> None:
            if error is None:
                stats.record((clock() - sent_s) * 1000)
            else:
                failures.append(error)

        return done

    with StopSignals() as stops, Producer(props) as producer:
        send = producer.send
        topic = topic_of(args)
        start_s = clock()
        throttle = Throttle(args.throughput, start_s) if args.throughput > 0 else None
        for sent in range(args.num_records):
            if stops.received is not None:
                break
            sent_s = clock()
            if throttle is not None:
                delay_s = throttle.delay_s(sent, sent_s)
                if delay_s > 0:
                    if not stops.sleep(delay_s):
                        break
                    sent_s = clock()
            send(topic, payload, callback=on_done(sent_s))
        producer.flush()  # at a stop too: what was sent counts, as closing would wait for it
        elapsed_s = clock() - start_s
        metrics = producer.metrics() if args.print_metrics else None
    # The producer closed: its sender thread has stopped recording.
    acknowledged = stats.latencies_ms
    total = Summary(
        len(acknowledged), len(acknowledged) * len(payload), elapsed_s, tuple(sorted(acknowledged))
    )
    print(total.line())
    if metrics is not None:
        print("\n".join(metric_lines("producer-metrics", str(props["client.id"]), metrics)))
    if failures:
        print(f"{len(failures)} records failed: {failures[0]}", file=sys.stderr)
    return stops.exit_status or (1 if failures else 0)


@dataclass(frozen=True)
class ConsumerFigures:
    """What ``consumer_line`` prints for a span of a consumer perf test."""

    start_ms: int
    end_ms: int
    total_bytes: int  # read since the start of the test
    bytes: int  # read in this span
    total_records: int
    records: int
    join_ms: int  # of the span, spent joining the group


def _when(ms: int) -> str:
    """Kafka's default ``--date-format``, yyyy-MM-dd HH:mm:ss:SSS, in local time."""
    return datetime.fromtimestamp(ms / 1000).strftime("%Y-%m-%d %H:%M:%S:") + f"{ms % 1000:03d}"


def consumer_line(figures: ConsumerFigures, detailed: bool) -> str:
    """A line of Kafka's ConsumerPerformance CSV: the total (``start, end, ...``) or, with
    ``detailed``, one interval's (``time, threadId, ...``)."""
    elapsed_s = (figures.end_ms - figures.start_ms) / 1000
    fetch_ms = figures.end_ms - figures.start_ms - figures.join_ms
    mb, span_mb = figures.total_bytes / MB, figures.bytes / MB
    if detailed:
        times = f"{_when(figures.end_ms)}, 0"  # Kafka's one thread, numbered 0
    else:
        times = f"{_when(figures.start_ms)}, {_when(figures.end_ms)}"
    return (
        f"{times}, {mb:.4f}, {_per_s(span_mb, elapsed_s):.4f}, {figures.total_records}, "
        f"{_per_s(figures.records, elapsed_s):.4f}, {figures.join_ms}, {fetch_ms}, "
        f"{_per_s(span_mb, fetch_ms / 1000):.4f}, {_per_s(figures.records, fetch_ms / 1000):.4f}"
    )


def _now_ms() -> int:
    return time.time_ns() // 1_000_000


class _Joining:
    """Kafka's ``ConsumerPerfRebListener``: the time from joining (or losing partitions)
    to being given them, in total and since the last report."""

    def __init__(self) -> None:
        self.since_ms = _now_ms()
        self.total_ms = self.in_round_ms = 0

    def on_revoke(self, _partitions: list[TopicPartition]) -> None:
        self.since_ms = _now_ms()

    def on_assign(self, _partitions: list[TopicPartition]) -> None:
        now = _now_ms()
        self.total_ms += now - self.since_ms
        self.in_round_ms += now - self.since_ms
        self.since_ms = now


def _consumer_properties(args: argparse.Namespace) -> dict[str, object]:
    """The file's settings, Kafka's tool's own, then ``--consumer-property``."""
    props: dict[str, object] = client_properties(args)
    props.setdefault("client.id", CONSUMER_CLIENT_ID)
    if args.fetch_size is not None:
        props["max.partition.fetch.bytes"] = args.fetch_size
    if args.group:
        props["group.id"] = args.group
        props["auto.offset.reset"] = "latest" if args.from_latest else "earliest"
    return {**props, **dict(args.consumer_property)}


def run_consume(args: argparse.Namespace) -> int:
    props = _consumer_properties(args)
    if not args.hide_header:
        first = "time, threadId" if args.show_detailed_stats else "start.time, end.time"
        print(f"{first}, {CONSUMER_COLUMNS}", flush=True)
    joining = _Joining()
    records = total_bytes = 0
    with StopSignals() as stops, Consumer(props) as consumer:
        stops.on_stop(consumer.wakeup)
        start_ms = last_record_ms = last_report_ms = _now_ms()
        consumer.subscribe(topic_of(args), on_assign=joining.on_assign, on_revoke=joining.on_revoke)
        if args.group is None and args.from_latest:
            consumer.seek_to_end()
        elif args.group is None:
            consumer.seek_to_beginning()
        reported_records = reported_bytes = 0
        while records < args.num_records and _now_ms() - last_record_ms <= args.timeout_ms:
            try:
                batch = consumer.poll(100)
            except WakeupError:  # a stop signal: the figures so far are the total
                break
            now_ms = _now_ms()
            if not batch:
                continue
            last_record_ms = now_ms
            records += len(batch)
            total_bytes += sum([len(r.value or b"") + len(r.key or b"") for r in batch])
            if now_ms - last_report_ms < args.reporting_interval:
                continue
            if args.show_detailed_stats:
                span = ConsumerFigures(
                    last_report_ms,
                    now_ms,
                    total_bytes,
                    total_bytes - reported_bytes,
                    records,
                    records - reported_records,
                    joining.in_round_ms,
                )
                print(consumer_line(span, detailed=True), flush=True)
            joining.in_round_ms = 0
            last_report_ms, reported_records, reported_bytes = now_ms, records, total_bytes
        end_ms = _now_ms()
        metrics = consumer.metrics() if args.print_metrics else None
    if records < args.num_records and stops.exit_status is None:  # a stop is no timeout
        print(
            f"WARNING: Exiting before consuming the expected number of messages: timeout "
            f"({args.timeout_ms} ms) exceeded. You can use the --timeout option to increase "
            "the timeout."
        )
    if not args.show_detailed_stats:
        whole = ConsumerFigures(
            start_ms, end_ms, total_bytes, total_bytes, records, records, joining.total_ms
        )
        print(consumer_line(whole, detailed=False))
    if metrics is not None:
        client_id = str(props["client.id"])
        print("\n".join(metric_lines("consumer-fetch-manager-metrics", client_id, metrics)))
    return stops.exit_status or (0 if records >= args.num_records else 1)
