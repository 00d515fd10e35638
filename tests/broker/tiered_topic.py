"""A broker core over a topic whose partitions live in the tier: the fetch tests' and the
tier-read benchmark's ground.

``TieredTopic.open`` creates the topic in a real ``TopicStore`` and its logs through a
real ``LogManager``, fills each partition (``fill(log, partition)``), rolls it, uploads
its closed segments to ``store`` and deletes them locally, as local retention does once
they are tiered: every offset below the active segment is then served by the tier.
``fetch_reader`` gives the broker's own ``FetchReader`` over it, reading the tier through
a fresh (cold) chunk cache each time it is asked.
"""

from __future__ import annotations

import random
import shutil
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from functools import partial
from pathlib import Path

from tests.storage.conftest import read_all_bytes
from tests.storage.tier.uploads import tier_closed_segments
from tierlog.broker.fetch import FetchReader
from tierlog.broker.ownership import Broker, Ownership
from tierlog.broker.partitions import Leader, Leaders, Partitions
from tierlog.broker.topics import TopicStore
from tierlog.broker.watch import AppendWatch
from tierlog.storage.config import LogConfig
from tierlog.storage.log import Log
from tierlog.storage.manager import LogManager, LogManagerConfig
from tierlog.storage.records import SimpleRecord, build_batch
from tierlog.storage.segment import LogSegment
from tierlog.storage.tier.chunk_buffers import ChunkBuffers
from tierlog.storage.tier.chunk_cache import ChunkCache
from tierlog.storage.tier.range_reader import LANDED_MAX_BYTES, RangeReader
from tierlog.storage.tier.remote_reader import RemoteLogReader
from tierlog.storage.tier.store import ObjectStore
from tierlog.storage.topic_partition import TopicPartition

__all__ = ["TieredTopic", "fill_random"]

MiB = 1 << 20
T0 = 1_700_000_000_000


def fill_random(log: Log, size_bytes: int, *, seed: int, value_bytes: int = 1024) -> None:
    """Batches of 64 records of ``value_bytes`` random bytes until the log holds at least
    ``size_bytes``."""
    rng = random.Random(seed)
    timestamp = T0
    while log.size_bytes < size_bytes:
        records = [
            SimpleRecord(b"k%d" % i, rng.randbytes(value_bytes), timestamp + i) for i in range(64)
        ]
        log.append(build_batch(records))
        timestamp += 64


def _below(end: int, segment: LogSegment) -> bool:
    return segment.next_offset <= end


@dataclass
class TieredTopic:
    topic: str
    store: ObjectStore
    manager: LogManager
    partitions: Partitions[Leaders[Leader]]
    tier_end: dict[int, int]  # partition -> the offset the tier ends at
    produced: dict[int, bytes]  # partition -> its batches, as the log held them

    @classmethod
    def open(
        cls,
        root: Path,
        store: ObjectStore,
        topic: str,
        count: int,
        fill: Callable[[Log, int], None],
        configs: Mapping[str, str] = {},
    ) -> TieredTopic:
        log_dir = root / "data"
        topics = TopicStore([log_dir], LogConfig())
        topics.create(
            topic,
            count,
            {
                "remote.storage.enable": "true",
                "local.retention.bytes": "0",
                "retention.ms": "-1",
                "file.delete.delay.ms": "0",
                **configs,
            },
        )
        manager = LogManager(LogManagerConfig((log_dir,)), topic_config=topics.log_config)
        manager.startup()
        tier_end: dict[int, int] = {}
        produced: dict[int, bytes] = {}
        for partition in range(count):
            tp = TopicPartition(topic, partition)
            log = manager.get_or_create_log(tp)
            fill(log, partition)
            log.roll()
            produced[partition] = read_all_bytes(log)
            end = tier_closed_segments(store, tp, log).end_offset
            log.delete_old_segments(is_tiered=partial(_below, end))
            log.delete_retired_files()
            tier_end[partition] = end
        ownership = Ownership(0, (Broker(0, "127.0.0.1:1"),))
        partitions: Partitions[Leaders[Leader]] = Partitions(manager, topics, ownership)
        return cls(topic, store, manager, partitions, tier_end, produced)

    def remote_reader(
        self,
        cache_dir: Path,
        *,
        chunk_bytes: int = MiB,
        prefetch_chunks: int = 2,
        max_prefetch_chunks: int = 32,
        threads: int = 4,
        read_ahead_memory_bytes: int = LANDED_MAX_BYTES,
        buffers: ChunkBuffers | None = None,
    ) -> RemoteLogReader:
        """A reader of the tier over an empty chunk cache in ``cache_dir`` (``buffers``:
        an earlier reader's, so that successive readers stand for one long-lived one,
        the sidecar's, whose buffers earlier reads have made)."""
        shutil.rmtree(cache_dir, ignore_errors=True)
        cache = ChunkCache(
            cache_dir, chunk_bytes=chunk_bytes, max_bytes=1 << 40, max_entries=1 << 20
        )
        ranges = RangeReader(
            self.store,
            cache,
            prefetch_chunks=prefetch_chunks,
            max_prefetch_chunks=max_prefetch_chunks,
            threads=threads,
            read_ahead_memory_bytes=read_ahead_memory_bytes,
            buffers=buffers,
        )
        return RemoteLogReader(ranges)

    def fetch_reader(self, remote: RemoteLogReader, *, partition_concurrency: int) -> FetchReader:
        return FetchReader(
            self.partitions, AppendWatch(), remote, partition_concurrency=partition_concurrency
        )

    def close(self) -> None:
        self.manager.shutdown()
