"""Uploader benchmark for issue 5: one segment's upload beside a bare PUT of its bytes.

Run with ``.venv/bin/python tests/benchmarks/uploader_bench.py``. A real log with
segments of ``--segment-mib`` MiB (1 MiB batches of 1 KiB records) is built; then, on
the same store, each repetition times:

- ``put``: the store's own PUT of the segment's ``.log`` file (the floor);
- ``upload_segment``: the uploader's whole attempt: stage the object (log bytes copied
  by ``sendfile`` plus indexes, snapshot, epochs), manifest ``started``, PUT,
  manifest ``finished``.

Medians of ``--runs``, and their ratio, printed as a Markdown table, on the
local-directory store, where staging's extra copy of the bytes is most visible.
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

from tierlog.storage.checkpoints import TopicPartition
from tierlog.storage.config import LogConfig
from tierlog.storage.log import Log
from tierlog.storage.records import SimpleRecord, build_batch
from tierlog.storage.tier.local_store import LocalDirectoryStore
from tierlog.storage.tier.manifest_store import ManifestWriter
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
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="uploader-bench-") as temporary:
        root = Path(temporary)
        store: ObjectStore = LocalDirectoryStore(root / "tier")
        tp = TopicPartition("bench", 0)
        log = build_log(root / tp.dir_name, args.segment_mib, args.runs)
        size = log.segments[0].size
        puts: list[float] = []
        uploads: list[float] = []
        writer = ManifestWriter.claim(store, tp, "bench")
        for run, segment in enumerate(log.segments[: args.runs]):
            puts.append(timed(partial(store.put, f"bare/{run}", segment.log.path)))
            attempt = partial(
                upload_segment,
                writer,
                segment,
                staging_dir=root / "staging",
                clock_ms=lambda: int(time.time() * 1000),
            )
            uploads.append(timed(attempt))
        log.close()
    put_s, upload_s = statistics.median(puts), statistics.median(uploads)
    print(f"segment {size / MiB:.0f} MiB, {args.runs} runs, store {store.url}")
    print(f"load average {' '.join(f'{x:.2f}' for x in os.getloadavg())}")
    print("| operation | median | throughput | ratio to PUT |")
    print("|---|---|---|---|")
    print(f"| store PUT of the .log file | {put_s:.3f} s | {size / put_s / MiB:.0f} MiB/s | 1.00 |")
    print(
        f"| upload_segment (stage, started, PUT, finished) | {upload_s:.3f} s | "
        f"{size / upload_s / MiB:.0f} MiB/s | {put_s / upload_s:.2f} |"
    )


if __name__ == "__main__":
    main()
