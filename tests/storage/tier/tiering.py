"""Helpers for the remote tier's tests: a tiered log with small segments, what a reader
of the tier sees (read through the reader API, not through the uploader), an S3 store
on the session's MinIO, and a fixture body for both stores."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.storage.conftest import T0, FakeClock, config, make_batch
from tests.storage.tier.s3_requests import Recorder
from tests.support.minio import MinioServer
from tierlog.storage.config import LogConfig
from tierlog.storage.log import Log
from tierlog.storage.records import iter_batches
from tierlog.storage.tier.local_store import LocalDirectoryStore
from tierlog.storage.tier.manifest import SegmentPart
from tierlog.storage.tier.manifest_store import load_view, read_part
from tierlog.storage.tier.s3_store import S3Location, S3Options, S3Store
from tierlog.storage.tier.store import ObjectStore
from tierlog.storage.topic_partition import TopicPartition

TP = TopicPartition("events", 0)
BATCH = make_batch(3, tag="00")
# Four 3-record batches a segment; tiered; nothing expires by time unless a test says so.
TIERED = config(
    segment_bytes=4 * len(BATCH),
    index_interval_bytes=0,
    remote_storage_enable="true",
    retention_ms=-1,
    local_retention_bytes=0,
    file_delete_delay_ms=0,
)


def tiered_config(**props: object) -> LogConfig:
    return LogConfig.from_properties(
        {key.replace("_", "."): value for key, value in props.items()}, base=TIERED
    )


def open_log(data_dir: Path, clock: FakeClock, log_config: LogConfig = TIERED) -> Log:
    return Log.open(data_dir / TP.dir_name, log_config, clock_ms=clock)


def produce(log: Log, batches: int, *, start: int = 0) -> None:
    for i in range(start, start + batches):
        log.append(make_batch(3, start_ts=T0 + 10 * i, tag=f"{i:02d}"))


def tier_bytes(store: ObjectStore) -> bytes:
    """Every batch the tier serves, in offset order, read with ranged GETs."""
    view = load_view(store, TP)
    return b"".join(read_part(store, s, SegmentPart.LOG) for s in view.all_segments())


def tier_offsets(store: ObjectStore) -> list[tuple[int, int]]:
    return [(s.base_offset, s.end_offset) for s in load_view(store, TP).all_segments()]


def last_offsets(data: bytes) -> list[int]:
    return [header.last_offset for header in iter_batches(data)]


def minio_store(
    minio: MinioServer,
    bucket: str,
    tmp_path: Path,
    *,
    rate: int | None = None,
    part: int = 16 << 20,
    observer: Recorder | None = None,
    kind: type[S3Store] = S3Store,
) -> S3Store:
    options = S3Options(
        region=minio.region,
        endpoint_url=minio.endpoint_url,
        path_style=True,
        credentials_path=minio.write_credentials(tmp_path / "s3-credentials"),
        connect_timeout_s=1,
        read_timeout_s=5,
        max_attempts=2,
        backoff_base_s=0.02,
        backoff_max_s=0.1,
        upload_rate_bytes_per_s=rate,
        multipart_threshold_bytes=part,
        part_size_bytes=part,
    )
    return kind(S3Location(bucket, "tier"), options, observer=observer)


# The params of a fixture that runs each of its tests on both stores (``both_stores``).
STORE_KINDS = ["local", pytest.param("minio", marks=pytest.mark.go_tools)]


def both_stores(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[ObjectStore]:
    """The body of a fixture with ``params=STORE_KINDS``: the same promises from a local
    directory and from a bucket of the session's MinIO (closed after the test)."""
    if request.param == "local":
        yield LocalDirectoryStore(tmp_path / "tier")
        return
    minio: MinioServer = request.getfixturevalue("minio")
    store = minio_store(minio, request.getfixturevalue("s3_bucket"), tmp_path)
    yield store
    store.close()
