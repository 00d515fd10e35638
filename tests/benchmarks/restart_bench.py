"""Issue 29 item 8: a broker with many partitions stopped, started, and started after
kill -9; tierlog beside Kafka (and, with ``--before DIR``, beside an older tierlog).

Run from the repository root (needs ``make tools``)::

    .venv/bin/python -m tests.benchmarks.restart_bench --partitions 500,2000,4000

For each partition count, each system gets a fresh data dir and one topic of that many
partitions. Then, ``--runs`` times, every partition gets ``--records`` records of 1 KiB
(tierlog: one Produce of one batch per partition; Kafka: ``ProducerPerformance`` with
its ``RoundRobinPartitioner``), and each figure is timed from the signal or the spawn
to the process's exit or its "listening" / "started" line:

- *stop after writes*: SIGTERM once every partition was written (each has unflushed
  data: with the default flush policy neither broker syncs before this);
- *clean start*: start after that clean stop;
- *clean stop*: SIGTERM of a broker that wrote nothing since it started;
- *start after kill -9*: SIGKILL of a running broker, then start (recovery runs).

Kafka runs its defaults (``num.recovery.threads.per.data.dir`` 2, as tierlog's), the
interop harness's single KRaft node. Medians are printed with the 1-minute load
average before and after the run (the machine is shared).
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import tempfile
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Protocol

import grpc

from tests.benchmarks.kafka_comparison_bench import machine, progress, run_client
from tests.interop.kafka import KafkaBroker, KafkaTools
from tests.support.sidecars import SidecarProcess
from tierlog.api.v1 import (
    admin_service_pb2,
    admin_service_pb2_grpc,
    log_service_pb2,
    log_service_pb2_grpc,
)
from tierlog.storage.records import SimpleRecord, build_batch

TOPIC = "many"
RECORD_BYTES = 1024
FIGURES = ("stop after writes", "clean start", "clean stop", "start after kill -9")


class Broker(Protocol):
    name: str

    def start(self) -> None: ...

    def stop(self) -> None: ...

    def kill(self) -> None: ...

    def create(self, partitions: int) -> None: ...

    def write(self, partitions: int, records: int) -> None: ...


@dataclass
class Tierlog:
    data_dir: Path
    name: str = "tierlog"
    pythonpath: str | None = None  # an older commit's storage:sidecar, first
    configs: tuple[str, ...] = ()
    port: int = 0  # 0: any free one
    process: SidecarProcess = field(init=False)

    def __post_init__(self) -> None:
        env = None
        if self.pythonpath is not None:
            env = {**os.environ, "PYTHONPATH": self.pythonpath}
        self.data_dir.parent.mkdir(parents=True, exist_ok=True)
        self.process = SidecarProcess(self.data_dir, self.configs, self.port, env=env)

    def start(self) -> None:
        self.process.start(timeout_s=600)

    def stop(self) -> None:
        self.process.stop(timeout_s=600)

    def kill(self) -> None:
        self.process.kill()

    def create(self, partitions: int) -> None:
        with grpc.insecure_channel(self.process.address) as channel:
            created = admin_service_pb2_grpc.AdminServiceStub(channel).CreateTopics(
                admin_service_pb2.CreateTopicsRequest(
                    topics=[admin_service_pb2.NewTopic(name=TOPIC, num_partitions=partitions)]
                ),
                timeout=600,
            )
            assert not created.results[0].HasField("error"), created

    def write(self, partitions: int, records: int) -> None:
        batch = build_batch(
            [SimpleRecord(None, os.urandom(RECORD_BYTES), int(time.time() * 1000), ())] * records
        )
        options = [("grpc.max_send_message_length", 64 << 20)]
        with grpc.insecure_channel(self.process.address, options=options) as channel:
            stub = log_service_pb2_grpc.LogServiceStub(channel)
            for partition in range(partitions):
                stub.Produce(
                    log_service_pb2.ProduceRequest(
                        topic=TOPIC, partition=partition, record_batches=batch
                    ),
                    timeout=60,
                )


@dataclass
class Kafka:
    broker: KafkaBroker
    tools: KafkaTools
    name: str = "Kafka"

    def start(self) -> None:
        self.broker.start()

    def stop(self) -> None:
        self.broker.stop(timeout_s=600)

    def kill(self) -> None:
        self.broker.kill()

    def create(self, partitions: int) -> None:
        self.broker.create_topic(TOPIC, partitions=partitions)

    def write(self, partitions: int, records: int) -> None:
        run_client(
            self.tools.command(
                "org.apache.kafka.tools.ProducerPerformance",
                *("--topic", TOPIC, "--num-records", str(partitions * records)),
                *("--record-size", str(RECORD_BYTES), "--throughput", "-1"),
                "--producer-props",
                f"bootstrap.servers={self.broker.bootstrap_server}",
                "acks=1",
                "partitioner.class=org.apache.kafka.clients.producer.RoundRobinPartitioner",
            ),
            timeout_s=900,
        )


def timed(action: Callable[[], None]) -> float:
    started = time.monotonic()
    action()
    return time.monotonic() - started


def measure(broker: Broker, partitions: int, records: int, runs: int) -> dict[str, list[float]]:
    figures: dict[str, list[float]] = {figure: [] for figure in FIGURES}
    broker.start()
    broker.create(partitions)
    for run in range(runs):
        broker.write(partitions, records)
        figures["stop after writes"].append(timed(broker.stop))
        figures["clean start"].append(timed(broker.start))
        figures["clean stop"].append(timed(broker.stop))
        broker.start()
        broker.kill()
        figures["start after kill -9"].append(timed(broker.start))
        progress(f"{broker.name}, {partitions} partitions, run {run + 1}: {figures}")
    broker.stop()
    return figures


def median(values: Sequence[float]) -> str:
    return f"{statistics.median(values):.1f} s" if values else "-"


def run(args: argparse.Namespace) -> None:
    tools = KafkaTools.locate()
    workdir = Path(args.workdir or tempfile.mkdtemp(prefix="tierlog-restart-bench-"))
    started, load_before = time.monotonic(), os.getloadavg()[0]
    rows: list[str] = []
    try:
        for partitions in (int(each) for each in args.partitions.split(",")):
            here = workdir / str(partitions)
            brokers: list[Broker] = [Tierlog(here / "tierlog" / "data")]
            if args.before:
                before = f"{args.before}/storage:{args.before}/sidecar"
                brokers.append(Tierlog(here / "before" / "data", "tierlog before", before))
            brokers.append(Kafka(KafkaBroker(tools, here / "kafka", start_timeout_s=600), tools))
            for broker in brokers:
                figures = measure(broker, partitions, args.records, args.runs)
                cells = " | ".join(median(figures[figure]) for figure in FIGURES)
                rows.append(f"| {partitions:,} | {broker.name} | {cells} |")
            shutil.rmtree(here, ignore_errors=True)
    finally:
        if args.workdir is None:
            shutil.rmtree(workdir, ignore_errors=True)
    print(f"Machine: {machine()}; Kafka {tools.version}.")
    print(
        f"{args.runs} runs, medians; {args.records} records of {RECORD_BYTES} B per partition; "
        f"{time.monotonic() - started:.0f} s in all; 1-minute load average {load_before:.1f} "
        f"before, {os.getloadavg()[0]:.1f} after."
    )
    print()
    print(f"| partitions | broker | {' | '.join(FIGURES)} |")
    print(f"|---|---|{'---|' * len(FIGURES)}")
    print("\n".join(rows))


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--partitions", default="500,2000,4000", help="comma-separated counts")
    parser.add_argument("--records", type=int, default=10, help="of 1 KiB per partition")
    parser.add_argument("--runs", type=int, default=3, help="of each figure; medians reported")
    parser.add_argument("--before", help="an older commit's export (git archive) to compare")
    parser.add_argument("--workdir", help="keep the data here (default: a temporary dir)")
    run(parser.parse_args(argv))


if __name__ == "__main__":
    main()
