"""Tiered compaction beside local compaction on the same data (issue 33).

The log is ``compaction_bench.build_log``'s (100-byte keys, 1 KiB values, each key
written ten times in random order: nine records in ten are superseded) in segments of
``--segment-mib``. Each run, in turn:

- **local**: a fresh copy of the log cleaned by one ``Cleaner`` round (map, rewrite,
  swap), as the log cleaner runs it;
- **tiered**: a fresh copy whose closed segments the remote log manager uploads to a
  fresh prefix of one MinIO, then one tier cleaning pass (``TierCleaner``, as the remote
  log manager runs it: the map and the rewrite read through a cold chunk cache at the
  sidecar's default settings, cleaned segments PUT, one manifest change, the replaced
  objects deleted). A store wrapper counts the bytes the pass GETs and PUTs.

Both with one map big enough for every key and no throttle. Reported, as medians of
``--runs``: each cleaner's throughput (log bytes of the segments it rewrote over the wall
time of the round or pass), and the tiered pass's bytes read from and written to the
store per log byte it removed from the tier. The machine, the UTC times and the load
averages at the start and at the end are printed with the table.

Run with ``.venv/bin/python -m tests.benchmarks.tiered_compaction_bench`` (a few minutes).
"""

from __future__ import annotations

import argparse
import dataclasses
import os
import platform
import shutil
import statistics
import tempfile
import time
from collections.abc import Iterable, Iterator
from datetime import UTC, datetime
from pathlib import Path

from tests.benchmarks.compaction_bench import KEY_BYTES, VALUE_BYTES, build_log, config
from tests.benchmarks.tier_bench import load_average, s3_store
from tests.support.minio import MinioServer
from tierlog.sidecar.remote_read_config import RemoteReadConfig
from tierlog.storage.cleaner import Cleaner
from tierlog.storage.config import LogConfig
from tierlog.storage.log import Log
from tierlog.storage.records import CompressionType
from tierlog.storage.tier.body import BodyReader
from tierlog.storage.tier.chunk_cache import ChunkCache
from tierlog.storage.tier.manifest_store import load_view
from tierlog.storage.tier.observer import TierObserver
from tierlog.storage.tier.range_reader import RangeReader
from tierlog.storage.tier.remote_log_manager import RemoteLogManager, RemoteLogManagerConfig
from tierlog.storage.tier.s3_store import S3Store
from tierlog.storage.tier.store import Body, ObjectInfo
from tierlog.storage.tier.tiered_cleaner import TierCleaner
from tierlog.storage.topic_partition import TopicPartition

MiB = 1024 * 1024
TP = TopicPartition("bench", 0)
MAP_BYTES = 1024 * MiB


@dataclasses.dataclass
class CountingStore:
    """The S3 store, with the bytes GET and PUT through it counted."""

    inner: S3Store
    got_bytes: int = 0
    put_bytes: int = 0
    url: str = ""

    def __post_init__(self) -> None:
        self.url = self.inner.url

    def put(self, key: str, body: Body, *, if_absent: bool = False) -> None:
        with BodyReader(body) as reader:
            self.put_bytes += reader.size
        self.inner.put(key, body, if_absent=if_absent)

    def get(self, key: str, start: int = 0, end: int | None = None) -> bytes:
        data = self.inner.get(key, start, end)
        self.got_bytes += len(data)
        return data

    def size(self, key: str) -> int:
        return self.inner.size(key)

    def list(self, prefix: str) -> Iterator[ObjectInfo]:
        return self.inner.list(prefix)

    def delete(self, keys: Iterable[str]) -> None:
        self.inner.delete(keys)

    def abort_incomplete_uploads(self, prefix: str, *, older_than_s: float) -> int:
        return self.inner.abort_incomplete_uploads(prefix, older_than_s=older_than_s)

    def close(self) -> None:
        self.inner.close()


@dataclasses.dataclass
class PassRecorder(TierObserver):
    removed_bytes: int = 0

    def tier_cleaned(
        self, tp: TopicPartition, bytes_read: int, bytes_written: int, bytes_removed: int
    ) -> None:
        self.removed_bytes += bytes_removed


@dataclasses.dataclass(frozen=True)
class TierRun:
    seconds: float
    cleaned_bytes: int  # log bytes of the segments the pass replaced
    removed_bytes: int
    got_bytes: int
    put_bytes: int


def segments_config(segment_mib: int) -> LogConfig:
    return dataclasses.replace(config(), segment_bytes=segment_mib * MiB)


def clean_locally(pristine: Path, copy: Path, log_config: LogConfig) -> tuple[int, float]:
    """One local round over a copy: (log bytes rewritten, seconds)."""
    shutil.copytree(pristine, copy)
    log = Log.open(copy, log_config, clean_shutdown=True)
    try:
        started = time.perf_counter()
        result = Cleaner(MAP_BYTES).clean(log, 0, log.active_segment.base_offset)
        return result.stats.bytes_read, time.perf_counter() - started
    finally:
        log.close()
        shutil.rmtree(copy)


def clean_in_the_tier(
    pristine: Path, root: Path, store: CountingStore, log_config: LogConfig
) -> TierRun:
    """Tier a copy, then time one pass of the tier's cleaner through a cold cache."""
    copy = root / TP.dir_name
    shutil.copytree(pristine, copy)
    tiered = dataclasses.replace(log_config, remote_storage_enable=True)
    log = Log.open(copy, tiered, clean_shutdown=True)
    rlm = RemoteLogManager(store, RemoteLogManagerConfig(threads=1))
    read = RemoteReadConfig(cache_dir=root / "cache")
    cache = ChunkCache(
        read.cache_dir,
        chunk_bytes=read.chunk_bytes,
        max_bytes=read.cache_max_bytes,
        max_entries=read.cache_max_entries,
    )
    ranges = RangeReader(
        store,
        cache,
        prefetch_chunks=read.prefetch_chunks,
        max_prefetch_chunks=read.max_prefetch_chunks,
        threads=read.reader_threads,
    )
    try:
        rlm.attach(TP, log)
        while log.tiered_end_offset < log.active_segment.base_offset:
            rlm.run_once()
        before = load_view(store, TP).all_segments()
        recorder = PassRecorder()
        rlm.cleaner = TierCleaner(Cleaner(MAP_BYTES), ranges, root / "scratch", observer=recorder)
        store.got_bytes = store.put_bytes = 0
        started = time.perf_counter()
        rlm.run_once()
        seconds = time.perf_counter() - started
        assert rlm.cleaner.passes == 1, rlm.problems()
        after = {segment.key for segment in load_view(store, TP).all_segments()}
        cleaned = sum(s.log_size_bytes for s in before if s.key not in after)
        return TierRun(seconds, cleaned, recorder.removed_bytes, store.got_bytes, store.put_bytes)
    finally:
        ranges.close()
        rlm.stop()
        log.close()
        shutil.rmtree(copy)
        shutil.rmtree(root / "cache", ignore_errors=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--total-mib", type=int, default=64)
    parser.add_argument("--segment-mib", type=int, default=8)
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument(
        "--codec", default="none", choices=[c.name.lower() for c in CompressionType]
    )
    args = parser.parse_args()
    began, load_at_start = datetime.now(UTC), load_average()
    log_config = segments_config(args.segment_mib)
    with tempfile.TemporaryDirectory(prefix="tiered-compaction-bench-") as temporary:
        root = Path(temporary)
        pristine = root / "pristine" / TP.dir_name
        count, distinct = build_log(
            pristine, args.total_mib * MiB, CompressionType[args.codec.upper()], log_config
        )
        log_bytes = sum(path.stat().st_size for path in pristine.glob("*.log"))
        minio = MinioServer(root / "minio").start()
        local: list[tuple[int, float]] = []
        tier: list[TierRun] = []
        try:
            for run in range(args.runs):
                local.append(clean_locally(pristine, root / "local" / TP.dir_name, log_config))
                store = CountingStore(s3_store(minio, root))  # a fresh bucket each run
                try:
                    tier.append(
                        clean_in_the_tier(pristine, root / f"tier-{run}", store, log_config)
                    )
                finally:
                    store.close()
                print(f"run {run}: local {local[-1]}, tiered {tier[-1]}", flush=True)
        finally:
            minio.stop()
    ended, load_at_end = datetime.now(UTC), load_average()
    print(f"\n{platform.node()}: {os.cpu_count()} CPUs, {platform.platform()}, "
          f"Python {platform.python_version()}")  # fmt: skip
    print(f"{began:%Y-%m-%d %H:%M:%S}-{ended:%H:%M:%S} UTC; load average (1, 5, 15 min) "
          f"at the start {load_at_start}, at the end {load_at_end}")  # fmt: skip
    print(
        f"log: {log_bytes / MiB:.0f} MiB in {args.segment_mib} MiB segments, {count:,} "
        f"records of {KEY_BYTES}-byte keys and {VALUE_BYTES}-byte values ({args.codec}), "
        f"{distinct:,} distinct keys (10%); medians of {args.runs} runs\n"
    )
    print("\n".join(table(local, tier)))


def table(local: list[tuple[int, float]], tier: list[TierRun]) -> list[str]:
    local_speed = statistics.median(size / seconds for size, seconds in local)
    tier_speed = statistics.median(run.cleaned_bytes / run.seconds for run in tier)
    removed = statistics.median(run.removed_bytes for run in tier)
    got = statistics.median(run.got_bytes / run.removed_bytes for run in tier)
    put = statistics.median(run.put_bytes / run.removed_bytes for run in tier)
    return [
        "| compaction of the same log | throughput (log bytes rewritten / s) | ratio |",
        "|---|---|---|",
        f"| local: one `Cleaner` round | {local_speed / 1e6:.1f} MB/s | 1 |",
        f"| tiered: one `TierCleaner` pass (MinIO, cold chunk cache) | "
        f"{tier_speed / 1e6:.1f} MB/s | {tier_speed / local_speed:.2f} |",
        "",
        "| tiered pass, per log byte removed from the tier "
        f"({removed / MiB:.1f} MiB removed) | bytes |",
        "|---|---|",
        f"| read from the store (GETs) | {got:.2f} |",
        f"| written to the store (PUTs: cleaned segments, manifest) | {put:.3f} |",
    ]


if __name__ == "__main__":
    main()
