"""Manifest benchmark for issue 5: the flat manifest against the chunked one, by the
number of live segments.

Run with ``.venv/bin/python -m tests.benchmarks.manifest_bench [--minio]``. For each
count in ``--segments`` (default 1000 10000 100000) a partition's manifest is built in
memory with that many live finished segments (as ``ManifestWriter`` would have sealed
it) and stored once, flat (one head listing every entry: what every change wrote
before chunks; ``chunk_entries`` too large to ever seal) and chunked (the default
``CHUNK_ENTRIES``). Then, on the same store, medians over ``--runs`` of:

- one change (``ManifestWriter.update``: an upload's ``started`` entry, then its
  ``finished``): the bytes PUT (head and any chunk sealed) and the time;
- ``load_view`` alone (list the heads, GET and decode the newest);
- ``load_view`` plus ``segment_for_offset`` of a random offset with no chunk read before
  (a fresh ``ChunkReader``): what a reader pays after its 5 s view cache ran out, and the
  bytes it read.

The flat and chunked runs alternate; printed as a Markdown table. The store is the
local-directory one or, with ``--minio``, an S3 store on a MinIO started on loopback.
"""

from __future__ import annotations

import argparse
import os
import random
import statistics
import tempfile
import time
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from pathlib import Path

from tests.benchmarks.tier_bench import s3_store
from tests.support.minio import MinioServer
from tierlog.storage.tier.layout import manifest_key, new_segment_id, segment_key
from tierlog.storage.tier.local_store import LocalDirectoryStore
from tierlog.storage.tier.manifest import (
    PartitionManifest,
    RemoteSegment,
    SegmentPart,
    SegmentState,
    part_ranges,
)
from tierlog.storage.tier.manifest_chunks import CHUNK_ENTRIES, seal
from tierlog.storage.tier.manifest_codec import encode_manifest
from tierlog.storage.tier.manifest_store import ChunkReader, ManifestWriter, load_view
from tierlog.storage.tier.store import Body, ObjectInfo, ObjectStore
from tierlog.storage.topic_partition import TopicPartition

FLAT = 10**12  # chunk entries no partition reaches: never seals
SEGMENT_OFFSETS = 50_000
T0 = 1_700_000_000_000


@dataclass
class CountingStore:
    """A store that adds up the bytes PUT and read through it."""

    inner: ObjectStore
    put_bytes: int = 0
    get_bytes: int = 0
    url: str = field(init=False)

    def __post_init__(self) -> None:
        self.url = self.inner.url

    def put(self, key: str, body: Body, *, if_absent: bool = False) -> None:
        assert isinstance(body, bytes)
        self.put_bytes += len(body)
        self.inner.put(key, body, if_absent=if_absent)

    def get(self, key: str, start: int = 0, end: int | None = None) -> bytes:
        data = self.inner.get(key, start, end)
        self.get_bytes += len(data)
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


def segment(tp: TopicPartition, index: int, state: SegmentState) -> RemoteSegment:
    base, segment_id = index * SEGMENT_OFFSETS, new_segment_id()
    return RemoteSegment(
        segment_id=segment_id,
        writer_epoch=1,
        state=state,
        base_offset=base,
        end_offset=base + SEGMENT_OFFSETS,
        base_timestamp=T0 + index * 60_000,
        max_timestamp=T0 + index * 60_000 + 59_999,
        offset_of_max_timestamp=base + SEGMENT_OFFSETS - 1,
        key=segment_key(tp, base, 1, segment_id),
        parts=part_ranges(
            {
                SegmentPart.LOG: 256 << 20,
                SegmentPart.OFFSET_INDEX: 1 << 20,
                SegmentPart.TIME_INDEX: 1 << 20,
                SegmentPart.PRODUCER_SNAPSHOT: 2000,
                SegmentPart.LEADER_EPOCHS: 20,
            }
        ),
        created_ms=T0 + index * 60_000 + 61_000,
    )


def store_manifest(store: ObjectStore, tp: TopicPartition, count: int, chunk_entries: int) -> None:
    """Write a manifest of ``count`` live finished segments, as sealing would have."""
    head = PartitionManifest(tp, version=1, writer_epoch=1, writer_id="bench")
    entries: list[RemoteSegment] = []
    for index in range(count):
        entries.append(segment(tp, index, SegmentState.FINISHED))
        if chunk_entries != FLAT and len(entries) == 2 * chunk_entries:
            head, sealed = seal(head.with_segments([*head.segments, *entries]), chunk_entries)
            entries = []
            for chunk in sealed:
                store.put(chunk.ref.key, chunk.body)
    head = head.with_segments([*head.segments, *entries])
    store.put(manifest_key(tp, head.version), encode_manifest(head), if_absent=True)


def median_of(runs: int, action: Callable[[], object]) -> float:
    seconds = []
    for _ in range(runs):
        started = time.perf_counter()
        action()
        seconds.append(time.perf_counter() - started)
    return statistics.median(seconds)


@dataclass
class Figures:
    change_bytes: float
    change_s: float
    load_s: float
    lookup_s: float
    lookup_bytes: float


def measure(
    store: CountingStore, tp: TopicPartition, count: int, chunk_entries: int, runs: int
) -> Figures:
    writer = ManifestWriter.claim(store, tp, "bench-writer", chunk_entries=chunk_entries)
    put_bytes: list[int] = []
    change_s: list[float] = []
    for index in range(count, count + runs):
        new = segment(tp, index, SegmentState.STARTED)
        for change in (
            lambda m, s=new: m.start_upload(s),
            lambda m, s=new: m.finish_upload(s.segment_id),
        ):
            before = store.put_bytes
            started = time.perf_counter()
            writer.update(change)
            change_s.append(time.perf_counter() - started)
            put_bytes.append(store.put_bytes - before)
    load_s = median_of(runs, lambda: load_view(store, tp))
    rng = random.Random(count)
    lookup_bytes: list[int] = []

    def lookup() -> None:
        before = store.get_bytes
        view = load_view(store, tp, ChunkReader(store))
        found = view.segment_for_offset(rng.randrange(view.log_start_offset, view.end_offset))
        assert found is not None
        lookup_bytes.append(store.get_bytes - before)

    lookup_s = median_of(runs, lookup)
    return Figures(
        statistics.median(put_bytes),
        statistics.median(change_s),
        load_s,
        lookup_s,
        statistics.median(lookup_bytes),
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--segments", type=int, nargs="+", default=[1000, 10_000, 100_000])
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--minio", action="store_true", help="a MinIO on loopback")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="manifest-bench-") as temporary:
        root = Path(temporary)
        minio = MinioServer(root / "minio").start() if args.minio else None
        try:
            inner = s3_store(minio, root) if minio else LocalDirectoryStore(root / "tier")
            run(CountingStore(inner), args)
        finally:
            if minio is not None:
                minio.stop()


def run(store: CountingStore, args: argparse.Namespace) -> None:
    print(f"store {store.url}, chunks of {CHUNK_ENTRIES}, medians of {args.runs} runs")
    print(f"load average at start {' '.join(f'{x:.2f}' for x in os.getloadavg())}")
    print(
        "| live segments | manifest | bytes PUT per change | change | load_view "
        "| load_view + offset lookup (cold) | bytes read by it |"
    )
    print("|---|---|---|---|---|---|---|")
    for count in args.segments:
        kinds = [("flat", FLAT), ("chunked", CHUNK_ENTRIES)]
        for order, (name, chunk_entries) in enumerate(kinds if count % 2 == 0 else kinds[::-1]):
            tp = TopicPartition(f"bench-{name}", count + order)
            store_manifest(store, tp, count, chunk_entries)
            found = measure(store, tp, count, chunk_entries, args.runs)
            print(
                f"| {count} | {name} | {found.change_bytes / 1024:.1f} KiB | "
                f"{found.change_s * 1000:.1f} ms | {found.load_s * 1000:.1f} ms | "
                f"{found.lookup_s * 1000:.1f} ms | {found.lookup_bytes / 1024:.1f} KiB |",
                flush=True,
            )
    print(f"load average at end {' '.join(f'{x:.2f}' for x in os.getloadavg())}")


if __name__ == "__main__":
    main()
