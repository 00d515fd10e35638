"""Segment upload throughput to S3: ``S3Store.put`` beside boto3's own ``upload_file`` (issue 5).

Run with::

    .venv/bin/python -m tests.benchmarks.tier_upload_bench --sizes-mib 64 256 --runs 5

One MinIO (the one the tests build, ``make tools``) on loopback with its data in a
temporary directory, one file of random bytes per size (a segment as the tier uploads
it: from disk). Each run uploads the file once with ``S3Store.put`` at its default
``S3Options`` and once with ``boto3``'s ``upload_file`` at its default
``TransferConfig`` (8 MiB threshold and parts, 10 threads), alternating which goes
first so that the machine's noise falls on both alike; every object is deleted after
its run. An unmeasured upload of each kind comes first (connection pools, threads,
MinIO's first writes). Figures are medians; the ratio is ours over boto3's (target: at
least 0.9). ``--part-size-mib`` and ``--concurrency`` try other ``S3Options``.
"""

from __future__ import annotations

import argparse
import os
import platform
import statistics
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

import boto3

from tests.support.minio import MinioServer
from tierlog.storage.tier.s3_store import S3Location, S3Options, S3Store

MiB = 1024 * 1024


def timed(upload: Callable[[], None]) -> float:
    started = time.perf_counter()
    upload()
    return time.perf_counter() - started


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--sizes-mib", type=int, nargs="+", default=[64, 256])
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument(
        "--part-size-mib", type=int, help="S3Options.part_size_bytes (default: its default)"
    )
    parser.add_argument("--concurrency", type=int, help="S3Options.upload_concurrency")
    args = parser.parse_args()
    tuning: dict[str, int] = {}
    if args.part_size_mib:
        tuning.update(
            part_size_bytes=args.part_size_mib * MiB,
            multipart_threshold_bytes=args.part_size_mib * MiB,
        )
    if args.concurrency:
        tuning["upload_concurrency"] = args.concurrency
    load_at_start = os.getloadavg()
    with tempfile.TemporaryDirectory(prefix="tier-upload-bench-") as scratch:
        root = Path(scratch)
        minio = MinioServer(root / "minio").start()
        try:
            rows = run(minio, root, args.sizes_mib, args.runs, tuning)
        finally:
            minio.stop()
    load_at_end = os.getloadavg()
    print(f"\n{platform.node()}: {os.cpu_count()} CPUs, {platform.platform()}, "
          f"Python {platform.python_version()}, boto3 {boto3.__version__}")  # fmt: skip
    print(f"load average (1, 5, 15 min) at start {load_at_start}, at end {load_at_end}\n")
    print("| object | S3Store.put | boto3 upload_file | ratio |")
    print("|---|---|---|---|")
    for row in rows:
        print(row)


def run(
    minio: MinioServer, root: Path, sizes_mib: list[int], runs: int, tuning: dict[str, int]
) -> list[str]:
    bucket = minio.create_bucket("bench")
    secret = root / "keys"
    secret.write_text(
        f"access_key_id={minio.access_key_id}\nsecret_access_key={minio.secret_access_key}\n"
    )
    options = S3Options(
        endpoint_url=minio.endpoint_url, region=minio.region, path_style=True,
        credentials_path=secret, **tuning,
    )  # fmt: skip
    print(
        f"S3Options: part {options.part_size_bytes // MiB} MiB, threshold "
        f"{options.multipart_threshold_bytes // MiB} MiB, {options.upload_concurrency} at once"
    )
    store = S3Store(S3Location(bucket, "bench"), options)
    client = minio.client()
    rows = []
    try:
        for size_mib in sizes_mib:
            source = root / f"segment-{size_mib}.log"
            with source.open("wb") as out:
                for _ in range(size_mib):
                    out.write(os.urandom(MiB))
            ours: list[float] = []
            theirs: list[float] = []
            store.put("warm-up", source)  # connections, threads, MinIO's first writes
            client.upload_file(str(source), bucket, "bench/warm-up")
            for attempt in range(runs):

                def put() -> None:
                    store.put(f"ours-{attempt}", source)  # noqa: B023 (called at once)

                def upload_file() -> None:
                    client.upload_file(str(source), bucket, f"bench/theirs-{attempt}")  # noqa: B023

                pair = [(ours, put), (theirs, upload_file)]
                for seconds, upload in pair if attempt % 2 == 0 else reversed(pair):
                    seconds.append(timed(upload))
                store.delete([f"ours-{attempt}"])
                client.delete_object(Bucket=bucket, Key=f"bench/theirs-{attempt}")
                print(f"{size_mib} MiB run {attempt + 1}: S3Store.put {ours[-1]:.2f} s, "
                      f"upload_file {theirs[-1]:.2f} s", flush=True)  # fmt: skip
            store.delete(["warm-up"])
            source.unlink()
            ours_mb_s = size_mib * MiB / statistics.median(ours) / 1e6
            theirs_mb_s = size_mib * MiB / statistics.median(theirs) / 1e6
            rows.append(
                f"| {size_mib} MiB | {ours_mb_s:.0f} MB/s | {theirs_mb_s:.0f} MB/s "
                f"| {ours_mb_s / theirs_mb_s:.2f} |"
            )
    finally:
        store.close()
    return rows


if __name__ == "__main__":
    main()
