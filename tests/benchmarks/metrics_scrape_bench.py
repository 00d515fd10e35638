"""Issue 32: the size and time of one ``/metrics`` scrape as a broker's partitions grow,
with a series per partition and with them summed per topic
(``tierlog.metrics.partition.series.max``).

Run from the repository root::

    .venv/bin/python -m tests.benchmarks.metrics_scrape_bench --partitions 500,2000,4000

For each partition count and each setting, a fresh sidecar gets one topic of that many
partitions, one record in each, and a group's commit of every partition (so the
committed-offset family is as large as the log families); then ``--scrapes`` scrapes,
whose median bytes and seconds are printed with the 1-minute load average.
"""

from __future__ import annotations

import argparse
import os
import statistics
import tempfile
import time
import urllib.request
from pathlib import Path

import grpc

from tests.benchmarks.kafka_comparison_bench import machine, progress
from tests.support.scrape import metrics_address
from tests.support.sidecars import SidecarProcess
from tierlog.api.v1 import (
    admin_service_pb2,
    admin_service_pb2_grpc,
    log_service_pb2,
    log_service_pb2_grpc,
)
from tierlog.client import TopicPartition
from tierlog.client.cluster import Cluster
from tierlog.client.groups import GroupClient, OffsetAndMetadata
from tierlog.storage.records import SimpleRecord, build_batch

TOPIC = "many"
SETTINGS = {"per partition": "-1", "summed per topic": "0"}


def _fill(address: str, partitions: int) -> None:
    batch = build_batch([SimpleRecord(None, b"x" * 100, int(time.time() * 1000), ())])
    with grpc.insecure_channel(address) as channel:
        created = admin_service_pb2_grpc.AdminServiceStub(channel).CreateTopics(
            admin_service_pb2.CreateTopicsRequest(
                topics=[admin_service_pb2.NewTopic(name=TOPIC, num_partitions=partitions)]
            ),
            timeout=600,
        )
        assert not created.results[0].HasField("error"), created
        log = log_service_pb2_grpc.LogServiceStub(channel)
        for partition in range(partitions):
            log.Produce(
                log_service_pb2.ProduceRequest(
                    topic=TOPIC, partition=partition, record_batches=batch
                ),
                timeout=60,
            )
    cluster = Cluster([address])
    try:
        GroupClient(cluster, "bench").commit(
            {TopicPartition(TOPIC, p): OffsetAndMetadata(1) for p in range(partitions)}
        )
    finally:
        cluster.close()


def measure(partitions: int, series_max: str, scrapes: int, workdir: Path) -> tuple[int, float]:
    """Median bytes and seconds of ``scrapes`` scrapes of a filled sidecar."""
    configs = (
        "tierlog.metrics.listeners=127.0.0.1:0",
        "offsets.topic.num.partitions=1",
        f"tierlog.metrics.partition.series.max={series_max}",
    )
    sidecar = SidecarProcess(workdir / f"{partitions}-{series_max}", configs, 0).start(600)
    try:
        _fill(sidecar.address, partitions)
        url = f"http://{metrics_address(sidecar.output)}/metrics"
        sizes, seconds = [], []
        for _ in range(scrapes):
            started = time.perf_counter()
            with urllib.request.urlopen(url, timeout=60) as response:
                sizes.append(len(response.read()))
            seconds.append(time.perf_counter() - started)
        return int(statistics.median(sizes)), statistics.median(seconds)
    finally:
        sidecar.kill()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--partitions", default="500,2000,4000")
    parser.add_argument("--scrapes", type=int, default=7)
    args = parser.parse_args()
    counts = [int(count) for count in args.partitions.split(",")]
    print(f"machine: {machine()}; load before: {os.getloadavg()[0]:.1f}")
    print("| partitions | series | scrape bytes | scrape ms |")
    print("|---|---|---|---|")
    with tempfile.TemporaryDirectory(prefix="tierlog-scrape-bench-") as workdir:
        for count in counts:
            for name, series_max in SETTINGS.items():
                progress(f"{count} partitions, {name}...")
                size, seconds = measure(count, series_max, args.scrapes, Path(workdir))
                print(f"| {count:,} | {name} | {size:,} | {seconds * 1000:.0f} |", flush=True)
    print(f"load after: {os.getloadavg()[0]:.1f}")


if __name__ == "__main__":
    main()
