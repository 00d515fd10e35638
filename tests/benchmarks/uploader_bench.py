"""Uploader benchmark for issue 5: one segment's upload beside a bare PUT of its bytes.

Run with ``.venv/bin/python tests/benchmarks/uploader_bench.py``. A real log with
segments of ``--segment-mib`` MiB (1 MiB batches of 1 KiB records) is built; then, on
the same store, each repetition times:

- ``put``: the store's own PUT of the segment's ``.log`` file (the floor);
- ``upload_segment``: the uploader's whole attempt: gather the object (the ``.log``
  file followed by indexes, snapshot and epochs), manifest ``started``, PUT,
  manifest ``finished``.

Medians of ``--runs``, and their ratio, printed as a Markdown table. The store is the
local-directory one or,
with ``--minio``, an S3 store on a MinIO started on loopback (``make tools`` built it).
"""

from __future__ import annotations

import argparse
import os
import statistics
import tempfile
import time
from collections.abc import Callable
from functools import partial
from pathlib import Path

from tests.support.minio import MinioServer
from tierlog.storage.checkpoints import TopicPartition
from tierlog.storage.config import LogConfig
from tierlog.storage.log import Log
from tierlog.storage.records import SimpleRecord, build_batch
from tierlog.storage.tier.local_store import LocalDirectoryStore
from tierlog.storage.tier.manifest_store import ManifestWriter
from tierlog.storage.tier.s3_store import S3Location, S3Options, S3Store
from tierlog.storage.tier.store import ObjectStore
from tierlog.storage.tier.uploader import upload_segment

MiB = 1024 * 1024


def build_log(directory: Path, segment_mib: int, segments: int) -> Log:
    config = LogConfig.from_properties(
        {"segment.bytes": str(segment_mib * MiB), "remote.storage.enable": "true"}
    )
    log = Log.open(directory, config)
    now = int(time.time() * 1000)
    records = [SimpleRecord(b"k%08d" % i, os.urandom(1024), now, ()) for i in range(1000)]
    batch = build_batch(records)
    while len(log.segments) <= segments:
        log.append(batch)
    log.flush()
    return log


def timed(action: Callable[[], object]) -> float:
    started = time.perf_counter()
    action()
    return time.perf_counter() - started


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--segment-mib", type=int, default=128)
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--minio", action="store_true", help="upload to a MinIO on loopback")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="uploader-bench-") as temporary:
        root = Path(temporary)
        minio = MinioServer(root / "minio").start() if args.minio else None
        try:
            measure(
                root, args, s3_store(minio, root) if minio else LocalDirectoryStore(root / "tier")
            )
        finally:
            if minio is not None:
                minio.stop()


def s3_store(minio: MinioServer, root: Path) -> ObjectStore:
    secret = root / "keys"
    secret.write_text(
        f"access_key_id={minio.access_key_id}\nsecret_access_key={minio.secret_access_key}\n"
    )
    options = S3Options(
        endpoint_url=minio.endpoint_url, region=minio.region, path_style=True,
        credentials_path=secret,
    )  # fmt: skip
    return S3Store(S3Location(minio.create_bucket("bench"), "bench"), options)


def measure(root: Path, args: argparse.Namespace, store: ObjectStore) -> None:
    tp = TopicPartition("bench", 0)
    log = build_log(root / tp.dir_name, args.segment_mib, args.runs)
    size = log.segments[0].size
    puts: list[float] = []
    uploads: list[float] = []
    writer = ManifestWriter.claim(store, tp, "bench")
    store.put("warm-up", log.segments[0].log.path)  # connections, threads, first writes
    for run, segment in enumerate(log.segments[: args.runs]):
        bare = partial(store.put, f"bare/{run}", segment.log.path)
        attempt = partial(
            upload_segment,
            writer,
            segment,
            clock_ms=lambda: int(time.time() * 1000),
        )
        pair: list[tuple[list[float], Callable[[], object]]] = [(puts, bare), (uploads, attempt)]
        for seconds, action in pair if run % 2 == 0 else reversed(pair):  # alternate first
            seconds.append(timed(action))
    log.close()
    put_s, upload_s = statistics.median(puts), statistics.median(uploads)
    print(f"segment {size / MiB:.0f} MiB, {args.runs} runs, store {store.url}")
    print(f"load average {' '.join(f'{x:.2f}' for x in os.getloadavg())}")
    print("| operation | median | throughput | ratio to PUT |")
    print("|---|---|---|---|")
    print(f"| store PUT of the .log file | {put_s:.3f} s | {size / put_s / MiB:.0f} MiB/s | 1.00 |")
    print(
        f"| upload_segment (started, PUT, finished) | {upload_s:.3f} s | "
        f"{size / upload_s / MiB:.0f} MiB/s | {put_s / upload_s:.2f} |"
    )


if __name__ == "__main__":
    main()
