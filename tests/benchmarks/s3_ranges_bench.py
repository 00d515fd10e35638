"""The JVM's S3 client alone (issue 21): the same ranged GETs from a MinIO on loopback,
read by boto3 and by ``tierlog.spark.io.S3Ranges``, side by side.

Run from the repository's root with ``.venv/bin/python -m tests.benchmarks.s3_ranges_bench``
(after ``make tools``, which installs MinIO). One object of ``--object-mib`` random bytes
is read whole as consecutive ``--range-mib`` ranges, one GET each, by ``--streams``
threads at once (each its own copy of the object, as ``local[2]``'s two tasks read two
splits), first by boto3 (``get_object(Range=...)``, body read to the end), then by
``S3Ranges.read`` in a JVM driven over py4j (the call returns a reference to the buffer:
no bytes cross to Python). ``--warm-ups`` passes first (connections, the JIT), then
medians of ``--runs`` passes.

This is what the Spark reader's ``S3Source`` does per split without the decode in
between: the floor a scan from an ``s3://`` tier cannot go below. The machine is shared:
the load average is printed with the figures.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import statistics
import time
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

from py4j.java_gateway import JavaGateway

from tests.benchmarks.scratch import machine_line, run_in_scratch
from tests.support.jvm_classes import compile_package
from tests.support.minio import MinioServer
from tests.tools.bootstrap import java_bin

MiB = 1024 * 1024
TIMEOUT_MS = 30_000


@contextlib.contextmanager
def jvm_with_s3_ranges(scratch: Path) -> Iterator[Any]:
    """A JVM with ``tierlog.spark.io`` compiled into it; yields the package as py4j sees it."""
    classes = compile_package("tierlog.spark.io", scratch / "classes")
    gateway = JavaGateway.launch_gateway(
        classpath=str(classes), die_on_exit=True, java_path=str(java_bin("java"))
    )
    try:
        yield gateway.jvm.tierlog.spark.io
    finally:
        gateway.shutdown()
        gateway.java_process.stdin.close()  # die_on_exit: the JVM ends with its stdin
        gateway.java_process.wait(timeout=30)


def pass_seconds(
    read: Callable[[str, int, int], None], keys: list[str], size: int, rng: int
) -> float:
    """Wall seconds to read every key whole, range after range, one thread per key (the
    calling thread for one key: a py4j call from a new thread opens a new connection)."""

    def read_whole(key: str) -> None:
        for offset in range(0, size, rng):
            read(key, offset, min(rng, size - offset))

    started = time.perf_counter()
    if len(keys) == 1:
        read_whole(keys[0])
    else:
        with ThreadPoolExecutor(len(keys)) as pool:
            list(pool.map(read_whole, keys))
    return time.perf_counter() - started


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--object-mib", type=int, default=64)
    parser.add_argument("--range-mib", type=int, default=8)
    parser.add_argument("--streams", type=int, default=1)
    parser.add_argument("--warm-ups", type=int, default=3)
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--dir", type=Path, default=None, help="scratch directory")
    args = parser.parse_args()
    run_in_scratch("s3-ranges-bench-", args.dir, lambda scratch: run(args, scratch))


def run(args: argparse.Namespace, scratch: Path) -> None:
    print(machine_line())
    size, rng = args.object_mib * MiB, args.range_mib * MiB
    minio = MinioServer(scratch / "minio").start()
    try:
        bucket = minio.create_bucket("bench")
        client = minio.client()
        data = os.urandom(size)
        keys = [f"tier/object-{stream}" for stream in range(args.streams)]
        for key in keys:
            client.put_object(Bucket=bucket, Key=key, Body=data)

        def boto3_read(key: str, offset: int, length: int) -> None:
            answer = client.get_object(
                Bucket=bucket, Key=key, Range=f"bytes={offset}-{offset + length - 1}"
            )
            assert len(answer["Body"].read()) == length

        with jvm_with_s3_ranges(scratch) as io:
            connection = io.S3Connection(
                minio.endpoint_url, minio.region, minio.access_key_id,
                minio.secret_access_key, None, True, TIMEOUT_MS, TIMEOUT_MS, 1,
            )  # fmt: skip

            def jvm_read(key: str, offset: int, length: int) -> None:
                assert (
                    io.S3Ranges.read(connection, bucket, key, offset, length).remaining() == length
                )

            readers = {"boto3": boto3_read, "S3Ranges (JVM)": jvm_read}
            seconds: dict[str, list[float]] = {name: [] for name in readers}
            for _ in range(args.warm_ups):
                for read in readers.values():
                    pass_seconds(read, keys, size, rng)
            for _ in range(args.runs):  # interleaved: both see the same machine
                for name, read in readers.items():
                    seconds[name].append(pass_seconds(read, keys, size, rng))
    finally:
        minio.stop()
    total_mib = args.object_mib * args.streams
    print(
        f"\n| {args.streams} stream(s) x {args.object_mib} MiB in {args.range_mib} MiB "
        "ranged GETs, MinIO on loopback | seconds | MiB/s | vs boto3 |"
    )
    print("|---|---|---|---|")
    boto3_median = statistics.median(seconds["boto3"])
    for name, runs in seconds.items():
        median = statistics.median(runs)
        print(
            f"| {name} | {median:.3f} | {total_mib / median:,.0f} | {boto3_median / median:.2f} |"
        )
    for name, runs in seconds.items():
        print(f"{name}: " + ", ".join(f"{run:.3f}" for run in runs) + " s")
    print(f"\nload average at the end: {os.getloadavg()[0]:.1f}")


if __name__ == "__main__":
    main()
