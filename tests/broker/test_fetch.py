"""The broker's fetch over tiered partitions, against a real MinIO: many partitions are
read at once (not one after another, as Kafka's apache/kafka#19336 does), with the very
answers reading them in turn gives, and no read left running once the fetch answered."""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Iterator, Sequence
from pathlib import Path

import pytest

from tests.broker.tiered_topic import TieredTopic
from tests.storage.conftest import T0, make_batch
from tests.storage.tier.tiering import minio_store
from tests.support.minio import MinioServer
from tierlog.broker.fetch import FetchAnswer, FetchReader, PartitionFetch
from tierlog.broker.watch import AppendWatch
from tierlog.storage.log import Log
from tierlog.storage.tier.chunk_buffers import Filled, nothing_filled
from tierlog.storage.tier.chunk_cache import ChunkCache
from tierlog.storage.tier.range_reader import RangeReader
from tierlog.storage.tier.remote_reader import RemoteLogReader
from tierlog.storage.tier.s3_store import S3Store
from tierlog.storage.topic_partition import TopicPartition

pytestmark = pytest.mark.go_tools

PARTITIONS = 8
CHUNK = 4096
TOPIC = "events"


class WatchedStore(S3Store):
    """The S3 store, counting GETs in progress; ``meet`` holds GETs of the log parts of
    ``log_sizes``' objects until that many are in progress at once."""

    def __init__(self, *args: object, **kwargs: object) -> None:
        super().__init__(*args, **kwargs)  # type: ignore[arg-type]
        self.log_sizes: dict[str, int] = {}
        self.meet: threading.Barrier | None = None
        self.in_progress = 0
        self._lock = threading.Lock()

    def get(self, key: str, start: int = 0, end: int | None = None) -> bytes:
        with self._watching(key, start):
            return super().get(key, start, end)

    def get_into(
        self,
        key: str,
        start: int,
        buffers: Sequence[memoryview],
        on_filled: Filled = nothing_filled,
    ) -> int:
        with self._watching(key, start):
            return super().get_into(key, start, buffers, on_filled)

    @contextlib.contextmanager
    def _watching(self, key: str, start: int) -> Iterator[None]:
        with self._lock:
            self.in_progress += 1
        try:
            if self.meet is not None and start < self.log_sizes.get(key, 0):
                self.meet.wait()
            yield
        finally:
            with self._lock:
                self.in_progress -= 1


def fill(log: Log, partition: int) -> None:
    for i in range(40):
        log.append(make_batch(5, start_ts=T0 + 10 * i, tag=f"{partition}-{i:02d}"))


@pytest.fixture
def store(minio: MinioServer, s3_bucket: str, tmp_path: Path) -> Iterator[WatchedStore]:
    store = minio_store(minio, s3_bucket, tmp_path, kind=WatchedStore)
    assert isinstance(store, WatchedStore)
    yield store
    store.close()


@pytest.fixture
def topic(tmp_path: Path, store: WatchedStore) -> Iterator[TieredTopic]:
    topic = TieredTopic.open(
        tmp_path, store, TOPIC, PARTITIONS, fill, {"index.interval.bytes": "256"}
    )
    yield topic
    topic.close()


def remote_reader(
    topic: TieredTopic, cache_dir: Path, *, prefetch_chunks: int = 0
) -> RemoteLogReader:
    cache = ChunkCache(cache_dir, chunk_bytes=CHUNK, max_bytes=1 << 30, max_entries=1 << 20)
    return RemoteLogReader(RangeReader(topic.store, cache, prefetch_chunks=prefetch_chunks))


def fetches(topic: TieredTopic, offset: int, max_bytes: int) -> list[PartitionFetch]:
    return [PartitionFetch(TopicPartition(TOPIC, p), offset, max_bytes) for p in range(PARTITIONS)]


def test_a_fetch_reads_its_tiered_partitions_at_once(
    tmp_path: Path, store: WatchedStore, topic: TieredTopic
) -> None:
    """Each partition's first GET of log bytes waits until all eight are in flight: a
    fetch that read the partitions one after another would break the barrier."""
    remote = remote_reader(topic, tmp_path / "cache")
    for p in range(PARTITIONS):
        (segment,) = remote.view(TopicPartition(TOPIC, p)).all_segments()
        store.log_sizes[segment.key] = segment.log_size_bytes
    store.meet = threading.Barrier(PARTITIONS, timeout=10)
    reader = FetchReader(topic.partitions, AppendWatch(), remote, partition_concurrency=PARTITIONS)
    try:
        answers = reader.read_many(fetches(topic, 100, 1), 1 << 20, False)
    finally:
        reader.close()
        remote.ranges.close()
    for partition, answer in enumerate(answers):
        assert isinstance(answer, FetchAnswer), answer
        assert answer.record_batches and answer.record_batches in topic.produced[partition]
    assert not store.meet.broken


@pytest.mark.parametrize(
    ("partition_max_bytes", "max_bytes"),
    [(1 << 20, 50 << 20), (3000, 10_000), (1 << 20, 1 << 20), (500, 1)],
)
def test_parallel_reads_answer_exactly_what_reads_in_turn_answer(
    tmp_path: Path, topic: TieredTopic, partition_max_bytes: int, max_bytes: int
) -> None:
    """Same batches, same order, the same budget split (the first batch of each always
    whole); and every byte what was produced."""
    remote = remote_reader(topic, tmp_path / "cache", prefetch_chunks=2)
    in_turn = FetchReader(topic.partitions, AppendWatch(), remote, partition_concurrency=1)
    at_once = FetchReader(topic.partitions, AppendWatch(), remote_reader(topic, tmp_path / "c2"))
    try:
        for offset in (0, 37, 150):
            asked = fetches(topic, offset, partition_max_bytes)
            expected = in_turn.read_many(asked, max_bytes, False)
            assert at_once.read_many(asked, max_bytes, False) == expected
            for partition, answer in enumerate(expected):
                assert isinstance(answer, FetchAnswer)
                assert answer.record_batches in topic.produced[partition]
    finally:
        for reader in (in_turn, at_once):
            reader.close()
            assert reader.remote is not None
            reader.remote.ranges.close()


def test_no_partition_read_runs_on_once_the_fetch_answered(
    tmp_path: Path, store: WatchedStore, topic: TieredTopic
) -> None:
    """Even when a partition fails (its object deleted) and the budget makes the reads
    at once of the others unusable (read again in turn), every read the fetch started
    has ended when it answers."""
    remote = remote_reader(topic, tmp_path / "cache")
    (segment,) = remote.view(TopicPartition(TOPIC, 1)).all_segments()
    store.delete([segment.key])
    reader = FetchReader(topic.partitions, AppendWatch(), remote, partition_concurrency=4)
    try:
        answers = reader.read_many(fetches(topic, 0, 2000), 4000, False)
        assert store.in_progress == 0
    finally:
        reader.close()
        remote.ranges.close()
    assert [isinstance(a, FetchAnswer) for a in answers] == [True, False] + [True] * 6
