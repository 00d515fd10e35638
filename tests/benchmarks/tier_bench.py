"""The tier's speed in one run against one MinIO (issue 5): segment upload beside boto3's
own ``upload_file`` of the same bytes, then remote fetch beside local fetch.

Run with::

    .venv/bin/python -m tests.benchmarks.tier_bench --segment-mib 64 --runs 6

One MinIO (the one the tests build, ``make tools``) on loopback with its data in a
temporary directory, one ``S3Store`` at its default ``S3Options``, and a real log of
``--runs`` + 1 closed segments (``remote_fetch.write_log``). Then:

1. Upload: each run takes the next segment (the first is an unmeasured warm-up of
   every contender: connections, threads, MinIO's first writes) and times, in an order
   that rotates from run to run so that the machine's noise falls on all alike:

   - ``upload_segment``: the uploader's whole attempt (manifest ``started``, one PUT of
     the ``.log`` file followed by its trimmed indexes, snapshot and epochs, manifest
     ``finished``), as the remote log manager runs it;
   - boto3's ``upload_file`` of the segment's ``.log`` file at its default
     ``TransferConfig`` (8 MiB parts, 10 threads);
   - ``S3Store.put`` of the same ``.log`` file alone (the transfer without the
     manifest and the indexes).

   Throughput is the ``.log`` file's size over the median time (``upload_segment``
   also sends the indexes: its figure is conservative); the ratio is over
   ``upload_file``'s (target: at least 0.9). The copies of the last two are deleted
   after each run; the uploaded segments stay: they are the tier read back in step 2.
2. Fetch: ``remote_fetch.one_run`` ``--fetch-runs`` times over the tiered segments:
   throughput cold and warm and time to first byte p50/p99, beside ``Log.read`` of
   the same offsets.

The machine, the UTC times and the load averages at the start and at the end are
printed with the tables.
"""

from __future__ import annotations

import argparse
import os
import platform
import statistics
import tempfile
import time
from collections.abc import Callable
from datetime import UTC, datetime
from pathlib import Path

import boto3

from tests.benchmarks.remote_fetch import TP, MiB, one_run, table, ttfb_offsets, write_log
from tests.support.minio import MinioServer
from tierlog.storage.log import Log
from tierlog.storage.segment import LogSegment
from tierlog.storage.tier.manifest_store import ManifestWriter
from tierlog.storage.tier.s3_store import S3Location, S3Options, S3Store
from tierlog.storage.tier.uploader import upload_segment

Upload = Callable[[int, LogSegment], object]  # (run, segment) -> uploads it once


def s3_store(minio: MinioServer, root: Path) -> S3Store:
    """An ``S3Store`` at its default ``S3Options`` on a fresh bucket of ``minio``."""
    secret = minio.write_credentials(root / "keys")
    options = S3Options(
        endpoint_url=minio.endpoint_url, region=minio.region, path_style=True,
        credentials_path=secret,
    )  # fmt: skip
    return S3Store(S3Location(minio.create_bucket("bench"), "bench"), options)


def upload_contenders(
    minio: MinioServer, store: S3Store, writer: ManifestWriter
) -> dict[str, Upload]:
    client, bucket = minio.client(), store.location.bucket

    def uploader(run: int, segment: LogSegment) -> object:
        return upload_segment(writer, segment, clock_ms=lambda: int(time.time() * 1000))

    def boto3_upload_file(run: int, segment: LogSegment) -> None:
        client.upload_file(str(segment.log.path), bucket, f"{store.location.root}boto3/{run}")

    def store_put(run: int, segment: LogSegment) -> None:
        store.put(f"put/{run}", segment.log.path)

    return {
        "`upload_segment` (manifest + `.log` + indexes)": uploader,
        "boto3 `upload_file` of the `.log`": boto3_upload_file,
        "`S3Store.put` of the `.log`": store_put,
    }


def time_uploads(
    contenders: dict[str, Upload], segments: list[LogSegment], discard: Callable[[int], None]
) -> dict[str, list[float]]:
    """Each contender's seconds per segment after the first (the warm-up), in an order
    rotating by one each run; ``discard(run)`` after each run."""
    names = list(contenders)
    seconds: dict[str, list[float]] = {name: [] for name in names}
    for run, segment in enumerate(segments):
        order = names[run % len(names) :] + names[: run % len(names)]
        for name in order:
            started = time.perf_counter()
            contenders[name](run, segment)
            if run > 0:
                seconds[name].append(time.perf_counter() - started)
        discard(run)
        if run > 0:
            print(f"upload run {run}: " + ", ".join(
                f"{name.split()[0]} {seconds[name][-1]:.2f} s" for name in names
            ), flush=True)  # fmt: skip
    return seconds


def upload_table(seconds: dict[str, list[float]], size_bytes: float) -> list[str]:
    reference = statistics.median(seconds["boto3 `upload_file` of the `.log`"])
    rows = [
        "| upload | median | min-max | throughput | ratio to `upload_file` |",
        "|---|---|---|---|---|",
    ]
    for name, times in seconds.items():
        median = statistics.median(times)
        rows.append(
            f"| {name} | {median:.2f} s | {min(times):.2f}-{max(times):.2f} s "
            f"| {size_bytes / median / MiB:.0f} MiB/s | {reference / median:.2f} |"
        )
    return rows


def load_average() -> str:
    return ", ".join(f"{x:.2f}" for x in os.getloadavg())


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--segment-mib", type=int, default=64)
    parser.add_argument("--runs", type=int, default=6, help="measured uploads of each kind")
    parser.add_argument("--fetch-runs", type=int, default=5)
    parser.add_argument("--samples", type=int, default=100, help="time-to-first-byte offsets")
    args = parser.parse_args()
    began, load_at_start = datetime.now(UTC), load_average()
    with tempfile.TemporaryDirectory(prefix="tier-bench-") as temporary:
        root = Path(temporary)
        log = write_log(root / TP.dir_name, args.runs + 1, args.segment_mib)
        minio = MinioServer(root / "minio").start()
        try:
            store = s3_store(minio, root)
            try:
                rows = measure(minio, store, log, root, args)
            finally:
                store.close()
        finally:
            minio.stop()
            log.close()
    ended, load_at_end = datetime.now(UTC), load_average()
    print(f"\n{platform.node()}: {os.cpu_count()} CPUs, {platform.platform()}, "
          f"Python {platform.python_version()}, boto3 {boto3.__version__}")  # fmt: skip
    print(f"{began:%Y-%m-%d %H:%M:%S}-{ended:%H:%M:%S} UTC; load average (1, 5, 15 min) "
          f"at the start {load_at_start}, at the end {load_at_end}\n")  # fmt: skip
    print("\n".join(rows))


def measure(
    minio: MinioServer, store: S3Store, log: Log, root: Path, args: argparse.Namespace
) -> list[str]:
    writer = ManifestWriter.claim(store, TP, "bench")
    segments = log.segments[: args.runs + 1]
    seconds = time_uploads(
        upload_contenders(minio, store, writer),
        segments,
        lambda run: store.delete([f"put/{run}", f"boto3/{run}"]),  # the copies, not the tier
    )
    end = writer.manifest.end_offset
    assert end == segments[-1].next_offset, "every segment is in the tier"
    offsets = ttfb_offsets(end, args.samples)
    runs = [one_run(log, store, end, offsets, root) for _ in range(args.fetch_runs)]
    size = statistics.median(segment.size for segment in segments[1:])
    return [
        f"Upload: segments of {size / MiB:.1f} MiB, medians of {args.runs} runs",
        "",
        *upload_table(seconds, size),
        "",
        f"Fetch: {end} offsets ({sum(s.size for s in segments) / MiB:.0f} MiB) in the tier, "
        f"medians of {args.fetch_runs} runs, {args.samples} time-to-first-byte offsets",
        "",
        *table(runs),
    ]


if __name__ == "__main__":
    main()
