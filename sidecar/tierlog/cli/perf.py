"""``tierlog perf produce|consume``: Kafka's ``kafka-producer-perf-test`` and
``kafka-consumer-perf-test`` against a sidecar.

``produce`` sends ``--num-records`` records of ``--record-size`` bytes (random
uppercase letters, as Kafka's tool) at ``--throughput`` records/s (-1: as fast as it
can) and prints Kafka's summary: records/s, MB/s, average and maximum latency, and
the 50th, 95th, 99th and 99.9th percentiles, where latency is from ``send`` to its
acknowledgement.  ``consume`` reads ``--num-records`` records from the beginning of
every partition and prints records/s and MB/s, and the percentiles of the time each
``poll`` that brought records took.  The arithmetic is in pure functions
(``percentile``, ``Summary``); the commands only time and print.
"""

from __future__ import annotations

import argparse
import math
import random
import string
import sys
import time
from collections.abc import Sequence
from dataclasses import dataclass

from tierlog.cli.produce import CODECS
from tierlog.cli.server_option import (
    add_security_options,
    add_server_option,
    add_topic_arguments,
    client_properties,
    key_value,
    topic_of,
)
from tierlog.client import Callback, Consumer, Producer, RecordMetadata

__all__ = ["Summary", "Throttle", "add_parser", "percentile"]

MB = 1024 * 1024


def percentile(sorted_values: Sequence[float], fraction: float) -> float:
    """The value below which ``fraction`` of ``sorted_values`` lie (nearest rank)."""
    if not sorted_values:
        return 0.0
    index = max(0, math.ceil(fraction * len(sorted_values)) - 1)
    return sorted_values[min(index, len(sorted_values) - 1)]


@dataclass(frozen=True)
class Summary:
    records: int
    total_bytes: int
    elapsed_s: float
    latencies_ms: tuple[float, ...]  # sorted

    @property
    def records_per_s(self) -> float:
        return self.records / self.elapsed_s if self.elapsed_s > 0 else 0.0

    @property
    def mb_per_s(self) -> float:
        return self.total_bytes / MB / self.elapsed_s if self.elapsed_s > 0 else 0.0

    def line(self, verb: str, latency: str) -> str:
        """Kafka's summary line."""
        lat = self.latencies_ms
        average = sum(lat) / len(lat) if lat else 0.0
        return (
            f"{self.records} records {verb}, {self.records_per_s:.1f} records/sec "
            f"({self.mb_per_s:.2f} MB/sec), {average:.2f} ms avg {latency}, "
            f"{max(lat, default=0.0):.2f} ms max {latency}, "
            f"{percentile(lat, 0.5):.2f} ms 50th, {percentile(lat, 0.95):.2f} ms 95th, "
            f"{percentile(lat, 0.99):.2f} ms 99th, {percentile(lat, 0.999):.2f} ms 99.9th."
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
        action="append",
        type=key_value,
        default=[],
        metavar="KEY=VALUE",
        help="a producer config under its Kafka name (repeatable)",
    )
    add_server_option(produce, "--producer.config")
    add_security_options(produce)
    produce.set_defaults(run=run_produce)

    consume = tests.add_parser("consume", help="like kafka-consumer-perf-test")
    add_topic_arguments(consume)
    consume.add_argument("--num-records", "--messages", type=int, required=True)
    consume.add_argument(
        "--timeout-ms", type=int, default=10_000, help="give up after this long without records"
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


def run_produce(args: argparse.Namespace) -> int:
    props: dict[str, object] = {
        **client_properties(args),
        "compression.type": args.compression_type,
        **dict(args.producer_props),
    }
    payload = _payload(args.record_size)
    latencies_ms: list[float] = []
    failures: list[BaseException] = []
    clock = time.perf_counter

    # Kafka's PerfCallback: one per record, with its send time; runs on the producer's
    # sender thread, the only one appending to these lists.
    def on_done(sent_s: float) -> Callback:
        def done(_metadata: RecordMetadata | None, error: BaseException | None) -> None:
            if error is None:
                latencies_ms.append((clock() - sent_s) * 1000)
            else:
                failures.append(error)

        return done

    with Producer(props) as producer:
        send = producer.send
        topic = topic_of(args)
        start_s = clock()
        throttle = Throttle(args.throughput, start_s) if args.throughput > 0 else None
        for sent in range(args.num_records):
            sent_s = clock()
            if throttle is not None:
                delay_s = throttle.delay_s(sent, sent_s)
                if delay_s > 0:
                    time.sleep(delay_s)
                    sent_s = clock()
            send(topic, payload, callback=on_done(sent_s))
        producer.flush()
        elapsed_s = clock() - start_s
    # The producer closed: its sender thread has stopped appending.
    summary = Summary(
        len(latencies_ms), len(latencies_ms) * len(payload), elapsed_s, tuple(sorted(latencies_ms))
    )
    print(summary.line("sent", "latency"))
    if failures:
        print(f"{len(failures)} records failed: {failures[0]}", file=sys.stderr)
        return 1
    return 0


def run_consume(args: argparse.Namespace) -> int:
    props: dict[str, object] = {
        **client_properties(args),
        **dict(args.consumer_property),
    }
    poll_ms: list[float] = []
    records = total_bytes = 0
    with Consumer(props) as consumer:
        consumer.subscribe(topic_of(args))
        consumer.seek_to_beginning()
        start_s = last_s = time.perf_counter()
        while records < args.num_records:
            before = time.perf_counter()
            batch = consumer.poll(1000)
            now = time.perf_counter()
            if not batch:
                if (now - last_s) * 1000 >= args.timeout_ms:
                    break
                continue
            last_s = now
            poll_ms.append((now - before) * 1000)
            records += len(batch)
            total_bytes += sum([len(r.value or b"") + len(r.key or b"") for r in batch])
        elapsed_s = last_s - start_s
    print(Summary(records, total_bytes, elapsed_s, tuple(sorted(poll_ms))).line("consumed", "poll"))
    if records < args.num_records:
        print(f"only {records} of {args.num_records} records came", file=sys.stderr)
        return 1
    return 0
