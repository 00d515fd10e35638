"""Reads from the remote tier through a real sidecar: the client cannot tell the difference.

A tiered topic with small segments is produced to; the remote log manager uploads its
closed segments and local retention deletes them; then every offset from 0 is fetched
and compared with what was produced (the bytes under each batch's CRC, its base offset
and length), ListOffsets answers by time from the tier, Subscribe tails from 0 across
the boundary, and the remote-read metrics moved. A sidecar on a new, empty data dir
pointed at the same tier (a local directory, or a bucket of the real MinIO) reads it
all back the same (from MinIO: the very bytes the first sidecar served, and Subscribe
across the boundary too).
"""

from __future__ import annotations

import random
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import NamedTuple, cast

import grpc
import pytest

from tests.storage.tier.tiering import STORE_KINDS, both_stores
from tests.support.minio import MinioServer
from tests.support.scrape import METRICS, metrics_address, scrape
from tierlog.api.v1 import log_service_pb2
from tierlog.client import Consumer
from tierlog.storage.errors import CorruptRecordError
from tierlog.storage.records import BatchHeader, SimpleRecord, build_batch, iter_batches
from tierlog.storage.tier.layout import manifest_key, manifest_prefix
from tierlog.storage.tier.local_store import LocalDirectoryStore
from tierlog.storage.tier.manifest import RemoteSegment, SegmentPart
from tierlog.storage.tier.manifest_store import load_manifest, load_view
from tierlog.storage.tier.s3_store import S3Options
from tierlog.storage.tier.store import ObjectStore
from tierlog.storage.tier.url import open_store
from tierlog.storage.topic_partition import TopicPartition

from .conftest import Sidecar, SidecarFactory, reason_of

T0 = 1_700_000_000_000
BATCHES = 60
RECORDS_PER_BATCH = 10
BROKER = (
    "remote.log.manager.task.interval.ms=200",
    "log.retention.check.interval.ms=200",
    METRICS,
)
TOPIC = {
    "remote_storage_enable": "true",
    "segment_bytes": "20000",
    "local_retention_bytes": "0",
    "retention_ms": "-1",
    "file_delete_delay_ms": "0",
    "index_interval_bytes": "1000",
}


class Produced:
    """The batches as produced, by base offset, to compare fetched batches with."""

    def __init__(self) -> None:
        self.batches: dict[int, bytes] = {}
        self.end = 0

    def produce(self, sidecar: Sidecar, count: int, *, seed: int = 3) -> None:
        rng = random.Random(seed + self.end)
        for _ in range(count):
            records = [
                SimpleRecord(
                    b"k%d" % (self.end + i), rng.randbytes(rng.randint(10, 900)), T0 + self.end + i
                )
                for i in range(RECORDS_PER_BATCH)
            ]
            batch = build_batch(records)
            answer = sidecar.log.Produce(
                log_service_pb2.ProduceRequest(topic="events", record_batches=batch)
            )
            assert answer.base_offset == self.end
            self.batches[self.end] = batch
            self.end += RECORDS_PER_BATCH

    def check(self, fetched: bytes) -> int:
        """Each fetched batch is a produced one (offset assigned, leader epoch stamped:
        the bytes outside the CRC); returns the offset after the last."""
        next_offset = -1
        for header in iter_batches(fetched):
            mine = self.batches[header.base_offset]
            theirs = fetched[header.position : header.end_position]
            assert theirs[8:12] == mine[8:12] and theirs[16:] == mine[16:]
            next_offset = header.next_offset
        return next_offset


def local_segments(data_dir: Path) -> list[int]:
    return sorted(int(p.name.split(".")[0]) for p in (data_dir / "events-0").glob("*.log"))


def wait_until(condition: Callable[[], bool], what: str, timeout_s: float = 60) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if condition():
            return
        time.sleep(0.1)
    raise AssertionError(f"timed out waiting for {what}")


def fetch(sidecar: Sidecar, offset: int, max_bytes: int = 1) -> bytes:
    answer = sidecar.log.Fetch(
        log_service_pb2.FetchRequest(topic="events", offset=offset, max_bytes=max_bytes)
    )
    return answer.record_batches


def list_offsets(sidecar: Sidecar, timestamp_ms: int) -> tuple[int, int]:
    answer = sidecar.log.ListOffsets(
        log_service_pb2.ListOffsetsRequest(topic="events", timestamp_ms=timestamp_ms)
    )
    return answer.offset, answer.timestamp_ms


def produce_and_tier(sidecar: Sidecar, produced: Produced) -> None:
    sidecar.create_topic("events", 1, **TOPIC)
    produced.produce(sidecar, BATCHES)
    wait_until(
        lambda: local_segments(sidecar.data_dir)[0] > produced.end // 2,
        "the tiered segments' local deletion",
    )


def check_reads_everything(sidecar: Sidecar, produced: Produced) -> None:
    """Fetch every offset from 0 (one batch each), then the whole log in large fetches."""
    for offset in range(produced.end):
        batch = fetch(sidecar, offset)
        (header,) = iter_batches(batch)
        assert header.base_offset <= offset <= header.last_offset
        produced.check(batch)
    offset, seen = 0, 0
    while offset < produced.end:
        batches = fetch(sidecar, offset, 64 * 1024)
        seen += len(list(iter_batches(batches)))
        offset = produced.check(batches)
    assert seen == produced.end // RECORDS_PER_BATCH
    assert list_offsets(sidecar, -2) == (0, -1)
    assert list_offsets(sidecar, -1) == (produced.end, -1)
    local_start = local_segments(sidecar.data_dir)[0]
    assert list_offsets(sidecar, -4) == (local_start, -1)  # KIP-1005: earliest local
    assert list_offsets(sidecar, -5)[0] >= local_start - 1  # the last tiered offset
    for offset in (0, 7, 123, produced.end // 3):
        assert list_offsets(sidecar, T0 + offset) == (offset, T0 + offset)


def fetched_batches(sidecar: Sidecar, end_offset: int) -> dict[int, bytes]:
    """Every batch below ``end_offset`` as Fetch answers it, by base offset."""
    batches: dict[int, bytes] = {}
    offset = 0
    while offset < end_offset:
        answer = fetch(sidecar, offset, 64 * 1024)
        for header in iter_batches(answer):
            batches[header.base_offset] = answer[header.position : header.end_position]
            offset = header.next_offset
    return batches


def check_subscribe_reads_across_the_boundary(sidecar: Sidecar, produced: Produced) -> None:
    """Subscribe from the earliest offset gets every batch in order, from the tier, then
    the local log, then a tail produced while subscribed."""
    received: list[bytes] = []
    stream = sidecar.log.Subscribe(
        log_service_pb2.SubscribeRequest(topic="events", offset=-2, max_bytes=8192)
    )

    def consume() -> None:
        try:
            for message in stream:
                received.append(message.record_batches)
        except grpc.RpcError:
            pass  # cancelled at the end

    reader = threading.Thread(target=consume)
    reader.start()
    produced.produce(sidecar, 3, seed=11)  # the tail: appended while subscribed
    batches = produced.end // RECORDS_PER_BATCH
    wait_until(lambda: sum(map(len, map(list, map(iter_batches, received)))) >= batches, "all")
    stream.cancel()
    reader.join()
    offset = 0
    for message in received:
        first = next(iter_batches(message)).base_offset
        assert first == offset
        offset = produced.check(message)
    assert offset == produced.end


def test_fetch_list_offsets_and_subscribe_read_the_tier(
    sidecar_factory: SidecarFactory, tmp_path: Path
) -> None:
    sidecar = sidecar_factory(tmp_path / "data", *BROKER)
    produced = Produced()
    produce_and_tier(sidecar, produced)
    local_start = local_segments(sidecar.data_dir)[0]
    check_reads_everything(sidecar, produced)
    check_subscribe_reads_across_the_boundary(sidecar, produced)

    metrics = scrape(metrics_address(sidecar.output))
    assert metrics.value("tierlog_remote_read_bytes_total") > 0
    assert metrics.value("tierlog_remote_cache_misses_total") > 0
    assert metrics.value("tierlog_remote_cache_hits_total") > 0
    assert metrics.value("tierlog_remote_cache_size_bytes") > 0
    assert metrics.value("tierlog_remote_cache_entries") > 0
    assert metrics.value("tierlog_remote_fetch_duration_seconds_count") > 0
    assert metrics.value("tierlog_remote_fetch_bytes_total") > 0
    assert local_start > 0


def test_a_sidecar_on_an_empty_data_dir_reads_the_tier_of_a_local_directory(
    sidecar_factory: SidecarFactory, tmp_path: Path
) -> None:
    tier = f"tierlog.tier.url={(tmp_path / 'shared-tier').as_uri()}"
    first = sidecar_factory(tmp_path / "data", *BROKER, tier)
    produced = Produced()
    produce_and_tier(first, produced)
    first.kill()
    replacement = sidecar_factory(tmp_path / "empty", *BROKER, tier)
    replacement.create_topic("events", 1, **TOPIC)
    tier_end = local_segments(replacement.data_dir)[0]
    assert tier_end > 0
    produced.end = tier_end  # the replacement continues at the tier's end
    check_reads_everything(replacement, produced)


@pytest.mark.slow
def test_a_sidecar_on_an_empty_data_dir_reads_a_minio_bucket_back(
    sidecar_factory: SidecarFactory, tmp_path: Path, minio: MinioServer, s3_bucket: str
) -> None:
    s3 = minio.sidecar_tier_configs(s3_bucket, tmp_path / "s3-credentials")
    first = sidecar_factory(tmp_path / "data", *BROKER, *s3)
    produced = Produced()
    produce_and_tier(first, produced)
    served_first = fetched_batches(first, produced.end)
    first.kill()
    replacement = sidecar_factory(tmp_path / "empty", *BROKER, *s3)
    replacement.create_topic("events", 1, **TOPIC)
    tier_end = local_segments(replacement.data_dir)[0]
    assert tier_end > 0
    produced.end = tier_end

    assert fetch(replacement, tier_end - 1)  # the tier's view is loaded (and cached a while)
    minio.stop()  # S3 away: a GET for the first segment fails, with a typed error, counted
    try:
        with pytest.raises(grpc.RpcError) as caught:
            fetch(replacement, 0)
        assert reason_of(caught.value) == "KAFKA_STORAGE_ERROR"
    finally:
        minio.start()
    errors = scrape(metrics_address(replacement.output))
    assert errors.value("tierlog_remote_fetch_errors_total", reason="KAFKA_STORAGE_ERROR") >= 1
    served_again = fetched_batches(replacement, tier_end)
    assert served_again == {base: served_first[base] for base in served_again}  # byte for byte
    assert len(served_again) == tier_end // RECORDS_PER_BATCH  # every tiered batch
    check_reads_everything(replacement, produced)
    check_subscribe_reads_across_the_boundary(replacement, produced)


def subscribe_until_refused(sidecar: Sidecar, offset: int) -> tuple[list[bytes], grpc.RpcError]:
    """What Subscribe from ``offset`` streams before it ends with an error, and the error
    (messages of up to 1 MiB, as the consumer asks: each reaches far ahead)."""
    received: list[bytes] = []
    stream = sidecar.log.Subscribe(
        log_service_pb2.SubscribeRequest(topic="events", offset=offset, max_bytes=1 << 20),
        timeout=60,
    )
    with pytest.raises(grpc.RpcError) as ended:
        for message in stream:
            received.append(message.record_batches)
    return received, ended.value


def consume_from_0(
    sidecar: Sidecar, end_offset: int, timeout_s: float = 60
) -> tuple[list[int], str]:
    """The offsets the client's consumer polls from 0 until it reaches ``end_offset`` or
    ``poll`` raises CorruptRecordError, and what that error says ("" when none did)."""
    offsets: list[int] = []
    tp = TopicPartition("events", 0)
    with Consumer({"bootstrap.servers": sidecar.address}) as consumer:
        consumer.assign([tp])
        consumer.seek(tp, 0)
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline and consumer.position(tp) < end_offset:
            try:
                offsets += [record.offset for record in consumer.poll(1000)]
            except CorruptRecordError as error:
                return offsets, str(error)
        return offsets, ""


def check_everything_before_the_damage_is_read(
    sidecar: Sidecar, produced: Produced, segment: RemoteSegment, damaged: int
) -> None:
    """Fetch from the object's first offset, Subscribe and the consumer from 0: every
    record before the damaged batch, then CORRUPT_MESSAGE naming its offset."""
    assert produced.check(fetch(sidecar, segment.base_offset, 1 << 20)) == damaged
    received, refused = subscribe_until_refused(sidecar, 0)
    offset = 0
    for message in received:
        assert next(iter_batches(message)).base_offset == offset
        offset = produced.check(message)
    assert offset == damaged
    assert reason_of(refused) == "CORRUPT_MESSAGE"
    assert f"offset {damaged}" in cast(grpc.Call, refused).details()
    offsets, error = consume_from_0(sidecar, produced.end)
    assert offsets == list(range(damaged))
    assert f"offset {damaged}" in error


def middle_batch(log_part: bytes) -> BatchHeader:
    batches = list(iter_batches(log_part))
    return batches[len(batches) // 2]


class Tier(NamedTuple):
    configs: tuple[str, ...]  # the sidecar's
    store: ObjectStore  # the same tier, opened by the test


@pytest.fixture(params=STORE_KINDS)
def tier(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Tier]:
    """A tier in a local directory, or in a bucket of the session's MinIO."""
    for store in both_stores(request, tmp_path):
        if isinstance(store, LocalDirectoryStore):
            yield Tier((f"tierlog.tier.url={store.root.as_uri()}",), store)
        else:
            minio: MinioServer = request.getfixturevalue("minio")
            bucket: str = request.getfixturevalue("s3_bucket")
            yield Tier(minio.sidecar_tier_configs(bucket, tmp_path / "s3-credentials"), store)


def test_a_damaged_batch_in_a_tiered_object_hides_none_of_the_batches_before_it(
    sidecar_factory: SidecarFactory, tmp_path: Path, tier: Tier
) -> None:
    """A flipped byte in the records of a batch in the middle of an object: Fetch,
    Subscribe and the consumer read every record before it (issue 29, item 2)."""
    sidecar = sidecar_factory(tmp_path / "data", *BROKER, *tier.configs)
    produced = Produced()
    produce_and_tier(sidecar, produced)
    segment = load_view(tier.store, TopicPartition("events", 0)).all_segments()[1]
    data = bytearray(tier.store.get(segment.key))
    log_start = segment.range_of(SegmentPart.LOG).start
    victim = middle_batch(bytes(data[log_start : log_start + segment.log_size_bytes]))
    assert victim.base_offset > segment.base_offset
    data[log_start + victim.position + victim.size // 2] ^= 0xFF  # nothing read yet: no cache
    tier.store.put(segment.key, bytes(data))

    check_everything_before_the_damage_is_read(sidecar, produced, segment, victim.base_offset)


def test_a_garbled_newest_manifest_head_serves_reads_from_the_newest_readable_one(
    sidecar_factory: SidecarFactory, tmp_path: Path, tier: Tier
) -> None:
    """Issue 29, item 10: the newest head of the tier's manifest does not decode (written
    half, bytes flipped) while older ones do: after a restart, Fetch, ListOffsets,
    Subscribe and the consumer read every tiered offset from the newest readable head,
    the sidecar logs the garbled head at ERROR, and no manifest version is written over
    it (uploads wait: what only it records is unknown)."""
    configs = (*BROKER, *tier.configs)
    first = sidecar_factory(tmp_path / "data", *configs)
    produced = Produced()
    produce_and_tier(first, produced)
    first.stop()
    store = tier.store
    tp = TopicPartition("events", 0)
    garbled = manifest_key(tp, load_manifest(store, tp).version + 1)
    store.put(garbled, b'{"format": 2, "topic": "ev\x00\xff')
    heads = sorted(info.key for info in store.list(manifest_prefix(tp)))

    sidecar = sidecar_factory(tmp_path / "data", *configs)
    check_reads_everything(sidecar, produced)
    check_subscribe_reads_across_the_boundary(sidecar, produced)
    offsets, error = consume_from_0(sidecar, produced.end)
    assert (offsets, error) == (list(range(produced.end)), "")
    logged = [line for line in sidecar.output.splitlines() if garbled in line]
    assert logged and all(" ERROR " in line for line in logged), logged
    assert sorted(info.key for info in store.list(manifest_prefix(tp))) == heads


def damage_the_middle_of(minio: MinioServer, bucket: str, segment: RemoteSegment) -> int:
    """Overwrite 300 bytes in the middle of the segment's log part, same length, in the
    bucket; returns the base offset of the batch the damage starts in."""
    client = minio.client()
    key = f"tier/{segment.key}"
    data = bytearray(client.get_object(Bucket=bucket, Key=key)["Body"].read())
    middle = segment.log_size_bytes // 2
    log_part = bytes(data[: segment.log_size_bytes])
    data[middle : middle + 300] = random.Random(5).randbytes(300)
    client.put_object(Bucket=bucket, Key=key, Body=bytes(data))
    (hit,) = (h for h in iter_batches(log_part) if h.position <= middle < h.end_position)
    return hit.base_offset


def test_a_damaged_object_in_minio_is_answered_corrupt_message_and_logged(
    sidecar_factory: SidecarFactory, tmp_path: Path, minio: MinioServer, s3_bucket: str
) -> None:
    """Garbage in a tiered segment is never served: Fetch and Subscribe at its batch are
    answered CORRUPT_MESSAGE naming the object and the offset, the sidecar logs it at
    ERROR, and every record before the damage is still read."""
    s3 = minio.sidecar_tier_configs(s3_bucket, tmp_path / "s3-credentials")
    sidecar = sidecar_factory(tmp_path / "data", *BROKER, *s3)
    produced = Produced()
    produce_and_tier(sidecar, produced)
    store = open_store(f"s3://{s3_bucket}/tier", S3Options(
        endpoint_url=minio.endpoint_url, region=minio.region, path_style=True,
        credentials_path=tmp_path / "s3-credentials",
    ))  # fmt: skip
    try:
        segment = load_view(store, TopicPartition("events", 0)).all_segments()[1]
    finally:
        store.close()
    damaged = damage_the_middle_of(minio, s3_bucket, segment)  # nothing read yet: no cache
    assert segment.base_offset < damaged < segment.end_offset

    with pytest.raises(grpc.RpcError) as fetched:
        fetch(sidecar, damaged)
    assert reason_of(fetched.value) == "CORRUPT_MESSAGE"
    message = cast(grpc.Call, fetched.value).details()
    assert segment.key in message and f"offset {damaged}" in message
    stream = sidecar.log.Subscribe(
        log_service_pb2.SubscribeRequest(topic="events", offset=damaged, max_bytes=1)
    )
    with pytest.raises(grpc.RpcError) as subscribed:
        next(iter(stream))
    assert reason_of(subscribed.value) == "CORRUPT_MESSAGE"
    logged = [line for line in sidecar.output.splitlines() if segment.key in line]
    assert logged and all(" ERROR " in line for line in logged), logged
    assert f"offset {damaged}" in logged[0]

    check_everything_before_the_damage_is_read(sidecar, produced, segment, damaged)
