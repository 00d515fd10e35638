"""The S3 store against a real MinIO on loopback (``tests.support.minio``), with the
fault-injecting proxy in front of it where a test needs S3 to misbehave."""

from __future__ import annotations

import os
import random
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest
from botocore.exceptions import ClientError

from tests.storage.tier.s3_requests import Recorder
from tests.storage.tier.store_contract import CONTRACT
from tests.support.fault_proxy import FaultProxy
from tests.support.minio import MinioServer
from tests.support.tcp_fault_proxy import TcpFaultProxy
from tierlog.storage.tier.s3_store import (
    S3Location,
    S3Options,
    S3Store,
    backoff_s,
    crc32c_base64,
)
from tierlog.storage.tier.store import (
    ObjectExistsError,
    ObjectNotFoundError,
    ObjectStore,
    ObjectStoreError,
    ObjectStoreUnavailableError,
)

MIB = 1 << 20


@pytest.fixture
def secret_dir(tmp_path: Path, minio: MinioServer) -> Path:
    """The keys as a mounted Kubernetes Secret looks: one file per key."""
    secret = tmp_path / "s3-secret"
    secret.mkdir()
    (secret / "access_key_id").write_text(minio.access_key_id + "\n")
    (secret / "secret_access_key").write_text(minio.secret_access_key + "\n")
    return secret


@pytest.fixture
def location(s3_bucket: str) -> S3Location:
    return S3Location(s3_bucket, "cluster-a/tier")


@pytest.fixture
def options(minio: MinioServer, secret_dir: Path) -> S3Options:
    """Small parts and short waits, so that tests of multipart and retries stay quick."""
    return S3Options(
        region=minio.region,
        endpoint_url=minio.endpoint_url,
        path_style=True,
        credentials_path=secret_dir,
        connect_timeout_s=2,
        read_timeout_s=10,
        backoff_base_s=0.05,
        backoff_max_s=0.5,
        multipart_threshold_bytes=5 * MIB,
        part_size_bytes=5 * MIB,
        upload_concurrency=4,
    )


StoreFactory = Callable[..., S3Store]


@pytest.fixture
def stores(location: S3Location, options: S3Options) -> Iterator[StoreFactory]:
    """``stores(observer=None, jitter=None, **option_changes)``: a store on this test's
    bucket, closed when the test ends."""
    opened: list[S3Store] = []

    def open_store(
        observer: Recorder | None = None, jitter: random.Random | None = None, **changes: Any
    ) -> S3Store:
        store = S3Store(location, replace(options, **changes), observer=observer, jitter=jitter)
        opened.append(store)
        return store

    yield open_store
    for store in opened:
        store.close()


def pieces(store: S3Store, key: str, start: int, end: int, piece_bytes: int) -> list[bytes]:
    """Bytes ``[start, end)`` of ``key`` read by ``get_into`` into buffers of
    ``piece_bytes`` (the last one shorter), as the bytes that landed in each."""
    buffers = [
        memoryview(bytearray(min(piece_bytes, end - at))) for at in range(start, end, piece_bytes)
    ]
    landed = store.get_into(key, start, buffers)
    assert landed == end - start
    return [bytes(buffer) for buffer in buffers]


def random_file(path: Path, size: int) -> Path:
    path.write_bytes(os.urandom(size))
    return path


@pytest.mark.parametrize("check", CONTRACT, ids=lambda check: check.__name__)
def test_keeps_the_store_contract(
    location: S3Location,
    stores: StoreFactory,
    tmp_path: Path,
    check: Callable[[ObjectStore, Path], None],
) -> None:
    check(stores(), tmp_path)


def test_objects_live_under_the_prefix(
    location: S3Location, stores: StoreFactory, minio: MinioServer
) -> None:
    store = stores()
    store.put("0/topic-0/segment", b"data")
    listed = minio.client().list_objects_v2(Bucket=location.bucket)["Contents"]
    assert [item["Key"] for item in listed] == ["cluster-a/tier/0/topic-0/segment"]
    assert store.url == f"s3://{location.bucket}/cluster-a/tier"
    with pytest.raises(ObjectStoreError):
        store.put("../escape", b"x")


def test_a_listing_pages_through_every_key_as_it_was_put(
    location: S3Location, stores: StoreFactory, minio: MinioServer
) -> None:
    """A listing longer than a page comes back whole and in key order (each page asked
    with the token the one before gave), each key spelled as it was put and listed as
    botocore lists it."""
    store = stores()
    keys = ["p/%41", "p/a b", "p/a+b", "p/k&v=1", "p/<tag>", "p/\u00fc/\u6f22"]
    for key in keys:
        store.put(key, key.encode())
    store.put("q/beside", b"")
    store.list_page_keys = 2
    started = time.time()
    listed = list(store.list("p/"))
    assert [(info.key, info.size_bytes) for info in listed] == [
        (key, len(key.encode())) for key in sorted(keys)
    ]
    assert all(started - 60 < info.last_modified_s <= started + 1 for info in listed)
    answer = minio.client().list_objects_v2(Bucket=location.bucket, Prefix="cluster-a/tier/p/")
    by_botocore = [
        (
            item["Key"].removeprefix("cluster-a/tier/"),
            item["Size"],
            item["LastModified"].timestamp(),
        )
        for item in answer["Contents"]
    ]
    assert [(info.key, info.size_bytes, info.last_modified_s) for info in listed] == by_botocore
    assert [info.key for info in store.list("p/%")] == ["p/%41"]


def test_a_large_object_goes_up_in_parallel_parts(
    location: S3Location,
    stores: StoreFactory,
    minio: MinioServer,
    fault_proxy: FaultProxy,
    tmp_path: Path,
) -> None:
    recorder = Recorder()
    store = stores(recorder, endpoint_url=fault_proxy.url)
    source = random_file(tmp_path / "segment.log", 23 * MIB)
    store.put("big", source)
    assert store.get("big") == source.read_bytes()
    assert recorder.count("UploadPart") == 5  # 4 parts of 5 MiB and one of 3 MiB
    assert recorder.count("PutObject") == 0
    assert fault_proxy.max_in_flight > 1  # parts were in flight together
    head = minio.client().head_object(Bucket=location.bucket, Key="cluster-a/tier/big")
    assert head["ETag"].endswith('-5"')
    assert minio.client().list_multipart_uploads(Bucket=location.bucket).get("Uploads", []) == []


def test_if_absent_refuses_a_large_object_too(location: S3Location, stores: StoreFactory) -> None:
    store = stores()
    first, second = os.urandom(6 * MIB), os.urandom(6 * MIB)
    store.put("manifest", first, if_absent=True)
    with pytest.raises(ObjectExistsError):
        store.put("manifest", second, if_absent=True)
    assert store.get("manifest") == first


def test_the_server_refuses_a_body_that_does_not_match_its_checksum(
    location: S3Location, minio: MinioServer
) -> None:
    with pytest.raises(ClientError) as refused:
        minio.client().put_object(
            Bucket=location.bucket,
            Key="damaged",
            Body=b"what was sent",
            ChecksumCRC32C=crc32c_base64(b"what was meant"),
        )
    assert refused.value.response["ResponseMetadata"]["HTTPStatusCode"] == 400
    with pytest.raises(ClientError):
        minio.client().head_object(Bucket=location.bucket, Key="damaged")


def test_a_body_damaged_in_flight_is_refused_and_sent_again(
    location: S3Location, stores: StoreFactory, fault_proxy: FaultProxy
) -> None:
    recorder = Recorder()
    store = stores(recorder, endpoint_url=fault_proxy.url)
    fault_proxy.corrupt(1, method="PUT")
    store.put("segment", b"every byte matters" * 1000)
    assert fault_proxy.injected["corrupt"] == 1
    assert len(recorder.errors("PutObject")) == 1  # the server's refusal, then the retry
    assert store.get("segment") == b"every byte matters" * 1000


def test_a_body_damaged_on_every_attempt_is_never_stored(
    location: S3Location, stores: StoreFactory, fault_proxy: FaultProxy
) -> None:
    store = stores(endpoint_url=fault_proxy.url, max_attempts=3)
    fault_proxy.corrupt(100, method="PUT")
    with pytest.raises(ObjectStoreUnavailableError):
        store.put("segment", b"x" * 1000)
    assert fault_proxy.injected["corrupt"] == 3
    with pytest.raises(ObjectNotFoundError):
        store.size("segment")


def test_the_backoff_window_doubles_up_to_its_cap_and_is_drawn_whole() -> None:
    jitter = random.Random(3)
    for failures, ceiling in [(1, 0.1), (2, 0.2), (3, 0.4), (4, 0.8), (5, 1.0), (9, 1.0)]:
        waits = [backoff_s(failures, 0.1, 1.0, jitter) for _ in range(2000)]
        assert 0 <= min(waits) < 0.05 * ceiling  # full jitter: from nothing...
        assert 0.95 * ceiling < max(waits) <= ceiling  # ...to the whole window


def test_slow_down_is_absorbed_with_backoff(
    location: S3Location, stores: StoreFactory, fault_proxy: FaultProxy
) -> None:
    seed, base_s, max_s = 11, 0.2, 0.8
    recorder = Recorder()
    store = stores(
        recorder,
        jitter=random.Random(seed),
        endpoint_url=fault_proxy.url,
        max_attempts=5,
        backoff_base_s=base_s,
        backoff_max_s=max_s,
    )
    # The same seed replayed: the waits the store draws, in its order (3 PUT, 2 GET).
    replay = random.Random(seed)
    put_waits = [backoff_s(n, base_s, max_s, replay) for n in (1, 2, 3)]
    get_waits = [backoff_s(n, base_s, max_s, replay) for n in (1, 2)]
    assert sum(put_waits) > 0.5 and sum(get_waits) > 0.2  # the seed makes them worth timing
    fault_proxy.slow_down(3, method="PUT")
    fault_proxy.slow_down(2, method="GET")
    started = time.monotonic()
    store.put("segment", b"payload")
    put_s = time.monotonic() - started
    started = time.monotonic()
    assert store.get("segment") == b"payload"
    get_s = time.monotonic() - started
    assert recorder.errors("PutObject") == ["SlowDown"] * 3
    assert recorder.errors("GetObject") == ["SlowDown"] * 2
    assert fault_proxy.injected["slow_down"] == 5
    assert put_s >= sum(put_waits) and get_s >= sum(get_waits)  # each retry waited its turn


def test_a_hung_get_times_out_and_is_retried(
    location: S3Location, stores: StoreFactory, fault_proxy: FaultProxy
) -> None:
    recorder = Recorder()
    read_timeout_s, stall_s = 3, 120
    store = stores(recorder, endpoint_url=fault_proxy.url, read_timeout_s=read_timeout_s)
    store.put("segment", b"payload")
    fault_proxy.stall(1, stall_s, method="GET")  # unanswered until the proxy closes
    started = time.monotonic()
    assert store.get("segment") == b"payload"
    # the read timeout ended the wait, not the stall's end
    assert read_timeout_s <= time.monotonic() - started < stall_s
    assert fault_proxy.injected["stall"] == 1
    assert recorder.errors("GetObject") == ["ReadTimeoutError"]


def test_a_hung_put_times_out_and_is_retried(
    location: S3Location, stores: StoreFactory, fault_proxy: FaultProxy, tmp_path: Path
) -> None:
    recorder = Recorder()
    store = stores(recorder, endpoint_url=fault_proxy.url, read_timeout_s=3)
    fault_proxy.stall(1, 120, method="PUT")
    store.put("small", b"payload")
    assert recorder.errors("PutObject") == ["ReadTimeoutError"]
    fault_proxy.stall(1, 120, method="PUT", path_contains="partNumber=")  # one part of three
    source = random_file(tmp_path / "segment.log", 12 * MIB)
    store.put("large", source)
    assert recorder.errors("UploadPart") == ["ReadTimeoutError"]
    assert fault_proxy.injected["stall"] == 2
    assert store.get("small") == b"payload" and store.get("large") == source.read_bytes()


def test_a_put_hung_on_every_attempt_is_unavailable_and_leaves_nothing(
    location: S3Location,
    stores: StoreFactory,
    fault_proxy: FaultProxy,
    minio: MinioServer,
    tmp_path: Path,
) -> None:
    store = stores(endpoint_url=fault_proxy.url, read_timeout_s=2, max_attempts=2)
    fault_proxy.stall(100, 120, method="PUT")
    with pytest.raises(ObjectStoreUnavailableError, match="ReadTimeoutError"):
        store.put("small", b"payload")
    with pytest.raises(ObjectStoreUnavailableError, match="ReadTimeoutError"):
        store.put("large", random_file(tmp_path / "segment.log", 12 * MIB))
    assert fault_proxy.injected["stall"] >= 2 + 2  # both PUT attempts, and a part's two
    fault_proxy.clear()
    for key in ("small", "large"):
        with pytest.raises(ObjectNotFoundError):
            store.size(key)
    uploads = minio.client().list_multipart_uploads(
        Bucket=location.bucket, Prefix="cluster-a/tier/large"
    )
    assert uploads.get("Uploads", []) == []  # the failed upload was aborted


def test_throttling_beyond_the_attempts_is_unavailable(
    location: S3Location, stores: StoreFactory, fault_proxy: FaultProxy
) -> None:
    recorder = Recorder()
    store = stores(recorder, endpoint_url=fault_proxy.url, max_attempts=3)
    store.put("segment", b"payload")
    fault_proxy.slow_down(10, method="GET")
    with pytest.raises(ObjectStoreUnavailableError, match="SlowDown"):
        store.get("segment")
    assert recorder.errors("GetObject") == ["SlowDown"] * 3
    fault_proxy.slow_down(10, method="HEAD")  # a HEAD's error has no body: only its status
    with pytest.raises(ObjectStoreUnavailableError, match="503"):
        store.size("segment")


def test_dropped_connections_are_retried(
    location: S3Location, stores: StoreFactory, fault_proxy: FaultProxy
) -> None:
    store = stores(endpoint_url=fault_proxy.url)
    store.put("segment", b"payload")
    fault_proxy.drop(2, method="GET")
    assert store.get("segment", 3) == b"load"
    assert fault_proxy.injected["drop"] == 2


def test_minio_down_is_unavailable_after_retries_and_up_again_works(
    location: S3Location, stores: StoreFactory, minio: MinioServer
) -> None:
    recorder = Recorder()
    store = stores(recorder, max_attempts=4)
    store.put("before", b"1")
    minio.stop()
    try:
        started = time.monotonic()
        with pytest.raises(ObjectStoreUnavailableError):
            store.put("during", b"2")
        # Refused connections fail at once: the time is the backoff between attempts, not
        # a connection timeout waited out.
        options = store.options
        backoffs_s = sum(
            min(options.backoff_max_s, options.backoff_base_s * 2 ** (n - 1))
            for n in range(1, options.max_attempts)
        )
        assert time.monotonic() - started < backoffs_s + options.connect_timeout_s
        assert len(recorder.errors("PutObject")) == 4
        with pytest.raises(ObjectStoreUnavailableError):
            store.get("before")
    finally:
        minio.start()
    store.put("after", b"3")
    assert [info.key for info in store.list("")] == ["after", "before"]


@pytest.mark.slow
def test_minio_stopped_mid_upload_leaves_no_object_and_the_sweep_aborts_the_upload(
    location: S3Location, stores: StoreFactory, minio: MinioServer, tmp_path: Path
) -> None:
    # 2 MiB/s over 30 MiB: the upload is still sending parts when MinIO goes away.
    store = stores(max_attempts=3, upload_rate_bytes_per_s=2 * MIB)
    source = random_file(tmp_path / "segment.log", 30 * MIB)
    failure: list[BaseException] = []

    def upload() -> None:
        try:
            store.put("interrupted", source)
        except BaseException as error:
            failure.append(error)

    uploader = threading.Thread(target=upload)
    uploader.start()
    deadline = time.monotonic() + 30
    while not minio.client().list_multipart_uploads(Bucket=location.bucket).get("Uploads"):
        assert time.monotonic() < deadline, "the multipart upload never started"
        time.sleep(0.05)
    minio.kill()
    uploader.join(timeout=60)
    minio.start()
    assert len(failure) == 1 and isinstance(failure[0], ObjectStoreUnavailableError)
    with pytest.raises(ObjectNotFoundError):
        store.size("interrupted")
    # The abort could not reach MinIO either: the upload is left for the sweep. MinIO
    # lists a bucket's uploads from memory (empty after its restart), but finds one by
    # its full key, as the tier's sweep knows it from the attempt's records.
    assert store.abort_incomplete_uploads("interrupted", older_than_s=3600) == 0
    assert store.abort_incomplete_uploads("interrupted", older_than_s=0) == 1
    left = minio.client().list_multipart_uploads(
        Bucket=location.bucket, Prefix="cluster-a/tier/interrupted"
    )
    assert left.get("Uploads", []) == []


def test_incomplete_uploads_are_aborted_only_when_old_and_under_the_prefix(
    location: S3Location, stores: StoreFactory, minio: MinioServer
) -> None:
    client = minio.client()
    for key in ("cluster-a/tier/0/seg", "cluster-a/tier/1/seg", "elsewhere/seg"):
        upload = client.create_multipart_upload(Bucket=location.bucket, Key=key)
        client.upload_part(
            Bucket=location.bucket,
            Key=key,
            UploadId=upload["UploadId"],
            PartNumber=1,
            Body=b"half a segment",
        )
    store = stores()
    assert store.abort_incomplete_uploads("", older_than_s=3600) == 0
    assert store.abort_incomplete_uploads("0/", older_than_s=0) == 1
    assert store.abort_incomplete_uploads("", older_than_s=0) == 1
    left = client.list_multipart_uploads(Bucket=location.bucket).get("Uploads", [])
    assert [upload["Key"] for upload in left] == ["elsewhere/seg"]


@pytest.mark.slow
def test_the_rate_limit_holds_an_upload_to_the_rate(
    location: S3Location, stores: StoreFactory, tmp_path: Path
) -> None:
    rate, size = 4 * MIB, 16 * MIB
    store = stores(upload_rate_bytes_per_s=rate)
    source = random_file(tmp_path / "segment.log", size)
    started = time.monotonic()
    store.put("limited", source)
    # A burst of one second's worth, then the rest at the rate.
    assert time.monotonic() - started >= (size - rate) / rate
    assert store.size("limited") == 16 * MIB


def test_wrong_keys_are_refused_without_retrying(
    location: S3Location, stores: StoreFactory, tmp_path: Path
) -> None:
    wrong = tmp_path / "wrong.keys"
    wrong.write_text("access_key_id = tierlog-test\nsecret_access_key = not-the-secret\n")
    recorder = Recorder()
    store = stores(recorder, credentials_path=wrong)
    with pytest.raises(ObjectStoreError) as refused:
        store.put("segment", b"x")
    assert not isinstance(refused.value, ObjectStoreUnavailableError)
    assert recorder.errors("PutObject") == ["SignatureDoesNotMatch"]


def test_a_get_with_wrong_keys_is_refused_without_retrying(
    location: S3Location, stores: StoreFactory, tmp_path: Path
) -> None:
    stores().put("segment", b"payload")
    wrong = tmp_path / "wrong.keys"
    wrong.write_text("access_key_id = tierlog-test\nsecret_access_key = not-the-secret\n")
    recorder = Recorder()
    store = stores(recorder, credentials_path=wrong)
    for read in (lambda: store.get("segment", 1, 3), lambda: pieces(store, "segment", 0, 7, 4)):
        with pytest.raises(ObjectStoreError, match="SignatureDoesNotMatch") as refused:
            read()
        assert not isinstance(refused.value, ObjectStoreUnavailableError)
    assert recorder.errors("GetObject") == ["SignatureDoesNotMatch"] * 2
    with pytest.raises(ObjectStoreError, match="SignatureDoesNotMatch") as refused:
        list(store.list(""))
    assert not isinstance(refused.value, ObjectStoreUnavailableError)
    assert recorder.errors("ListObjectsV2") == ["SignatureDoesNotMatch"]


def test_gets_of_keys_that_need_quoting_read_their_bytes_whole_ranged_and_in_pieces(
    stores: StoreFactory,
) -> None:
    """GETs are signed and sent without botocore's request machinery: a key with
    characters a URL must quote is signed as S3 reads it."""
    store = stores()
    body = random.Random(1).randbytes(10_000)
    key = "0/topic 1+x/%41~é=&?;segment"
    store.put(key, body)
    assert store.get(key) == body
    assert store.get(key, 1234, 5678) == body[1234:5678]
    assert store.get(key, 9_000) == body[9_000:]
    assert store.get(key, 10_000) == b""  # at the end: nothing, not an error
    assert pieces(store, key, 1000, 9500, 4000) == [
        body[1000:5000],
        body[5000:9000],
        body[9000:9500],
    ]
    with pytest.raises(ObjectNotFoundError):
        pieces(store, "0/topic 1+x/missing", 0, 10, 4)


def test_a_get_into_buffers_lands_the_body_in_them_and_says_how_much_came(
    stores: StoreFactory,
) -> None:
    """The body is read off the connection into the caller's own buffers, in order;
    an object ending before the buffers do fills what it has (the caller decides
    whether that is an error), and a start at its end lands nothing."""
    store = stores()
    body = random.Random(3).randbytes(10_000)
    store.put("segment", body)
    storage = [bytearray(b"\xff" * 4000), bytearray(b"\xff" * 3000)]
    buffers = [memoryview(buffer) for buffer in storage]
    assert store.get_into("segment", 2000, buffers) == 7000
    assert storage == [body[2000:6000], body[6000:9000]]  # the very buffers given
    assert store.get_into("segment", 8000, buffers) == 2000  # the object ends first
    assert storage[0][:2000] == body[8000:] and storage[1] == body[6000:9000]
    assert store.get_into("segment", 10_000, buffers) == 0
    for _ in range(3):  # the connection went back to the pool each time, reusable
        assert store.get_into("segment", 0, buffers[:1]) == 4000


def test_a_body_cut_short_is_read_again_into_the_same_buffers(
    stores: StoreFactory, fault_proxy: FaultProxy
) -> None:
    """A connection closed mid-body looks like an ended body to ``http.client``; its
    Content-Length says it is not: retried as urllib3's own reads are, the buffers
    filled again from the start."""
    recorder = Recorder()
    store = stores(recorder, endpoint_url=fault_proxy.url)
    body = random.Random(4).randbytes(200_000)
    store.put("segment", body)
    fault_proxy.stall_body(1, 0.1, method="GET")  # half the body, then closed
    storage = bytearray(150_000)
    assert store.get_into("segment", 10_000, [memoryview(storage)]) == 150_000
    assert storage == body[10_000:160_000]
    assert fault_proxy.injected["stall_body"] == 1
    assert recorder.errors("GetObject") == ["IncompleteRead"]


def test_a_body_cut_short_is_read_on_after_the_buffers_it_filled(
    stores: StoreFactory, fault_proxy: FaultProxy
) -> None:
    """Each buffer filled is told as it fills (its chunk may go to a reader before the
    answer ends), once; the retry after a body cut half-way asks for the bytes after
    them and never writes into them again (here they are overwritten as soon as told:
    a second write would show)."""
    recorder = Recorder()
    store = stores(recorder, endpoint_url=fault_proxy.url)
    body = random.Random(6).randbytes(200_000)
    store.put("segment", body)
    fault_proxy.stall_body(1, 0.1, method="GET")  # half the body, then closed
    storage = [bytearray(10_000) for _ in range(15)]
    told: list[tuple[int, bytes]] = []

    def filled(index: int) -> None:
        told.append((index, bytes(storage[index])))
        storage[index][:] = b"\xee" * 10_000

    landed = store.get_into("segment", 10_000, [memoryview(part) for part in storage], filled)
    assert landed == 150_000
    assert [index for index, _data in told] == list(range(15))  # in order, each once
    assert b"".join(data for _index, data in told) == body[10_000:160_000]
    assert all(part == b"\xee" * 10_000 for part in storage)  # none written after told
    assert recorder.errors("GetObject") == ["IncompleteRead"]


def test_a_get_into_buffers_hung_mid_body_times_out_and_is_retried(
    stores: StoreFactory, fault_proxy: FaultProxy
) -> None:
    recorder = Recorder()
    read_timeout_s = 2
    store = stores(recorder, endpoint_url=fault_proxy.url, read_timeout_s=read_timeout_s)
    body = random.Random(5).randbytes(100_000)
    store.put("segment", body)
    fault_proxy.stall_body(1, 120, method="GET")
    storage = bytearray(len(body))
    started = time.monotonic()
    assert store.get_into("segment", 0, [memoryview(storage)]) == len(body)
    assert read_timeout_s <= time.monotonic() - started < 60
    assert storage == body
    assert recorder.errors("GetObject") == ["ReadTimeoutError"]


def test_a_get_into_buffers_over_dropped_connections_is_retried(
    stores: StoreFactory, fault_proxy: FaultProxy
) -> None:
    store = stores(endpoint_url=fault_proxy.url)
    store.put("segment", b"payload")
    fault_proxy.drop(2, method="GET")
    storage = bytearray(4)
    assert store.get_into("segment", 3, [memoryview(storage)]) == 4
    assert storage == b"load"
    assert fault_proxy.injected["drop"] == 2


def test_concurrent_ranged_gets_keep_their_connections_alive(
    stores: StoreFactory, minio: MinioServer
) -> None:
    """The pool keeps as many connections as readers make GETs at once (a fetch of many
    tiered partitions, read-ahead's threads), above the uploads' concurrency: no GET
    opens a connection of its own. Each byte is delayed on the way, so every reader's
    GET is in flight at once."""
    readers, gets_each = 24, 4
    proxy = TcpFaultProxy.start({"minio": f"127.0.0.1:{minio.port}"})
    try:
        store = stores(endpoint_url=f"http://{proxy.address('minio')}")
        body = random.Random(2).randbytes(64 << 10)
        store.put("segment", body)
        proxy.delay("minio", 20)
        accepted_before = proxy.status()["minio"].accepted
        barrier = threading.Barrier(readers)
        failures: list[BaseException] = []

        def read() -> None:
            try:
                for n in range(gets_each):
                    barrier.wait(30)
                    start = n * 1000
                    assert pieces(store, "segment", start, start + 8000, 4096) == [
                        body[start : start + 4096],
                        body[start + 4096 : start + 8000],
                    ]
            except BaseException as error:
                failures.append(error)

        threads = [threading.Thread(target=read) for _ in range(readers)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join(60)
        assert failures == []
        assert store.options.upload_concurrency < readers
        assert proxy.status()["minio"].accepted - accepted_before <= readers
    finally:
        proxy.close()


def test_gets_go_through_the_environments_proxy_as_botocores_requests_do(
    stores: StoreFactory, minio: MinioServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A store behind an HTTP proxy (``HTTP_PROXY``) reads through it: its GETs are not
    botocore's, yet they honour the proxy settings botocore does."""
    proxy = TcpFaultProxy.start({"minio": f"127.0.0.1:{minio.port}"})
    try:
        for name in ("NO_PROXY", "no_proxy", "HTTPS_PROXY", "https_proxy"):
            monkeypatch.delenv(name, raising=False)
        monkeypatch.setenv("HTTP_PROXY", f"http://{proxy.address('minio')}")
        store = stores()  # the endpoint is MinIO's own address
        store.put("segment", b"payload")
        accepted = proxy.status()["minio"].accepted
        assert store.get("segment", 3) == b"load"
        assert proxy.status()["minio"].accepted > accepted
    finally:
        proxy.close()


def test_an_if_absent_put_whose_answer_was_lost_is_recognised_as_ours(
    stores: StoreFactory, fault_proxy: FaultProxy
) -> None:
    recorder = Recorder()
    store = stores(recorder, endpoint_url=fault_proxy.url)
    fault_proxy.lose_answer(1, method="PUT")
    store.put("manifest-7", b"our manifest", if_absent=True)  # the retry meets our object
    assert fault_proxy.injected["lose_answer"] == 1
    assert recorder.errors("PutObject") == ["ConnectionClosedError", "PreconditionFailed"]
    with pytest.raises(ObjectExistsError):  # someone else's content is still refused
        store.put("manifest-7", b"their manifest", if_absent=True)


def test_a_multipart_upload_whose_completion_answer_was_lost_is_complete(
    stores: StoreFactory, fault_proxy: FaultProxy, tmp_path: Path
) -> None:
    recorder = Recorder()
    store = stores(recorder, endpoint_url=fault_proxy.url)
    source = random_file(tmp_path / "segment.log", 11 * MIB)
    fault_proxy.lose_answer(1, method="POST", path_contains="uploadId=")
    store.put("segment", source)
    # The retry finds the upload completed (NoSuchUpload, then the ETag is checked) or,
    # on servers that remember completions, succeeds again: either way, one object.
    assert recorder.count("CompleteMultipartUpload") == 2
    assert recorder.errors("CompleteMultipartUpload") == ["ConnectionClosedError"]
    assert store.get("segment") == source.read_bytes()
