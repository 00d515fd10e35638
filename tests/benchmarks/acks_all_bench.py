"""Single-record ``acks=all`` round trips on a 3-broker ``tierlog cluster up`` (RF 3).

Run from the repository root::

    .venv/bin/python -m tests.benchmarks.acks_all_bench [--records 500] [--runs 3]

One cluster for the whole run, as a user starts it (``tierlog cluster up --brokers 3``),
and one topic of one partition, replication factor 3, ``min.insync.replicas=2``. Each
client sends one record of 100 bytes and waits for its acknowledgement before the next
(``linger.ms=0``, one request in flight), so each record is one acknowledged round trip:
the leader appends it, both followers fetch it, and the high watermark passes it.

- **Kafka listener**: kafka-python's ``KafkaProducer`` (``acks=all``);
- **gRPC**: tierlog's own ``Producer`` (``acks=all``).

Per run, the p50 and p99 of the round trips, their rate (records acknowledged per
second), and the three brokers' CPU time per round trip with their threads' run-queue
wait (``kafka_listener_bench.usage``): on a shared machine the latency follows the load,
the CPU time much less. The medians over ``--runs`` are printed as a Markdown table,
with the machine and its load average.
"""

from __future__ import annotations

import argparse
import os
import statistics
import tempfile
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

from kafka import KafkaProducer

from tests.benchmarks.kafka_comparison_bench import machine
from tests.benchmarks.side_by_side import usage
from tests.support.local_cluster import kafka_bootstrap, running_cluster
from tierlog.cli.local_cluster import read_cluster
from tierlog.client import AdminClient, Producer

REPLICAS = 3
RECORD = b"x" * 100
WARM_UP = 20  # round trips before timing: connections, metadata, the first fetches


@dataclass(frozen=True)
class RoundTrips:
    p50_ms: float
    p99_ms: float
    per_s: float
    cpu_ms: float  # the three brokers' CPU time per round trip
    run_queue_ms: float  # their threads' wait for a CPU per round trip


def timed(send_and_wait: Callable[[], object], records: int, pids: Sequence[int]) -> RoundTrips:
    """``records`` round trips of ``send_and_wait``, after a warm-up."""
    for _ in range(WARM_UP):
        send_and_wait()
    latencies_ms = []
    before = usage(pids)
    started = time.perf_counter()
    for _ in range(records):
        sent = time.perf_counter()
        send_and_wait()
        latencies_ms.append((time.perf_counter() - sent) * 1000)
    elapsed_s = time.perf_counter() - started
    used = usage(pids).since(before)
    cuts = statistics.quantiles(latencies_ms, n=100)
    return RoundTrips(
        statistics.median(latencies_ms),
        cuts[98],
        records / elapsed_s,
        used.cpu_s * 1000 / records,
        used.run_queue_s * 1000 / records,
    )


def kafka_listener(bootstrap: str, topic: str, records: int, pids: Sequence[int]) -> RoundTrips:
    producer = KafkaProducer(
        bootstrap_servers=bootstrap.split(","),
        acks="all",
        linger_ms=0,
        max_in_flight_requests_per_connection=1,
    )
    try:
        return timed(lambda: producer.send(topic, RECORD).get(timeout=30), records, pids)
    finally:
        producer.close()


def grpc(bootstrap: str, topic: str, records: int, pids: Sequence[int]) -> RoundTrips:
    config = {
        "bootstrap.servers": bootstrap,
        "acks": "all",
        "linger.ms": 0,
        "max.in.flight.requests.per.connection": 1,
    }
    with Producer(config) as producer:
        return timed(lambda: producer.send(topic, RECORD).result(timeout=30), records, pids)


def create_topic(grpc_address: str, topic: str) -> None:
    with AdminClient(grpc_address) as admin:
        admin.create_topic(topic, 1, {"min.insync.replicas": "2"}, replication_factor=REPLICAS)


def median_of(runs: Sequence[RoundTrips]) -> RoundTrips:
    return RoundTrips(
        statistics.median(r.p50_ms for r in runs),
        statistics.median(r.p99_ms for r in runs),
        statistics.median(r.per_s for r in runs),
        statistics.median(r.cpu_ms for r in runs),
        statistics.median(r.run_queue_ms for r in runs),
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--records", type=int, default=500, help="timed round trips per run")
    parser.add_argument("--runs", type=int, default=3)
    args = parser.parse_args()
    load_before = os.getloadavg()
    results: dict[str, list[RoundTrips]] = {"Kafka listener": [], "gRPC": []}
    with tempfile.TemporaryDirectory(prefix="acks-all-bench-") as scratch:
        directory = Path(scratch) / "cluster"
        with running_cluster(directory, REPLICAS):
            brokers = read_cluster(directory).brokers
            bootstrap_kafka = kafka_bootstrap(directory)
            bootstrap_grpc = ",".join(broker.address for broker in brokers)
            pids = [broker.pid for broker in brokers if broker.pid is not None]
            for run in range(args.runs):
                topic = f"acks-all-{run}"
                create_topic(brokers[0].address, topic)
                for name, client, bootstrap in (
                    ("Kafka listener", kafka_listener, bootstrap_kafka),
                    ("gRPC", grpc, bootstrap_grpc),
                ):
                    figures = client(bootstrap, topic, args.records, pids)
                    results[name].append(figures)
                    print(f"run {run + 1} {name}: {figures}", flush=True)
    load_after = os.getloadavg()
    print(f"\n{machine()}; load average {load_before[0]:.2f} before, {load_after[0]:.2f} after")
    print(f"{args.records} round trips x {args.runs} runs, medians\n")
    print("| path | p50 ms | p99 ms | round trips/s | brokers' CPU ms each | run-queue ms each |")
    print("|---|---|---|---|---|---|")
    for name, runs in results.items():
        m = median_of(runs)
        print(
            f"| {name} | {m.p50_ms:.1f} | {m.p99_ms:.1f} | {m.per_s:.0f} | {m.cpu_ms:.2f} "
            f"| {m.run_queue_ms:.2f} |"
        )


if __name__ == "__main__":
    main()
