"""Shared helpers for the pipeline tests: logs written by the storage engine and what the
storage engine reads back from them. The one SparkSession of the test run (``spark``)
is tests/support/spark.py's.

Test modules import the helpers (``from tests.pipeline.conftest import write_log``).
"""

from __future__ import annotations

import random
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

import pyarrow as pa
import pytest

from tests.storage.conftest import T0, config, read_all_records
from tests.storage.transactions import TxnWriter
from tests.support.minio import MinioServer
from tierlog.pipeline.options import parse_s3_options
from tierlog.storage.config import LogConfig
from tierlog.storage.log import Log
from tierlog.storage.records import (
    CompressionType,
    Record,
    SimpleRecord,
    build_batch,
    build_legacy_message_set,
)
from tierlog.storage.tier.local_store import LocalDirectoryStore
from tierlog.storage.tier.s3_store import S3Options
from tierlog.storage.tier.store import ObjectStore
from tierlog.storage.tier.url import open_store
from tierlog.storage.topic_partition import TopicPartition

__all__ = [
    "CODECS",
    "SMALL_SEGMENTS",
    "TXN_SEGMENTS",
    "Row",
    "Tier",
    "expected_rows",
    "file_tier",
    "produce",
    "records_for",
    "rows_of_table",
    "write_legacy_then_v2",
    "write_log",
    "write_transactions",
]

CODECS = list(CompressionType)
# Small segments with an index entry per batch: many segments, many index positions.
SMALL_SEGMENTS = config(segment_bytes=8192, index_interval_bytes=1)

Row = tuple[bytes | None, bytes | None, str, int, int, int, int]


def records_for(count: int, *, start: int = 0, tag: str = "r") -> list[SimpleRecord]:
    """Records with keys, values, ascending timestamps and, every third, headers."""
    return [
        SimpleRecord(
            key=None if i % 17 == 5 else f"{tag}-key-{i}".encode(),
            value=None if i % 23 == 7 else f"{tag}-value-{i}-{'x' * (i % 40)}".encode(),
            timestamp=T0 + i * 10,
            headers=(("h", f"{i}".encode()), ("n", None)) if i % 3 == 0 else (),
        )
        for i in range(start, start + count)
    ]


def produce(log: Log, records: Sequence[SimpleRecord], *, per_batch: int = 10) -> None:
    """Append ``records`` in batches, cycling through every codec."""
    for number, first in enumerate(range(0, len(records), per_batch)):
        codec = CODECS[number % len(CODECS)]
        log.append(build_batch(records[first : first + per_batch], compression=codec))


def write_log(
    log_dir: Path,
    tp: TopicPartition,
    count: int,
    *,
    log_config: LogConfig = SMALL_SEGMENTS,
    per_batch: int = 10,
) -> list[Record]:
    """A partition of ``count`` records in ``log_dir`` (closed); returns what storage reads."""
    log = Log.open(log_dir / tp.dir_name, log_config)
    try:
        produce(log, records_for(count), per_batch=per_batch)
        return read_all_records(log)
    finally:
        log.close()


def write_legacy_then_v2(log_dir: Path, tp: TopicPartition, magic: int) -> list[Record]:
    """A partition that starts with v``magic`` message sets (every codec v0/v1 had) and
    continues with v2 batches, as a log upgraded from before Kafka 0.11."""
    directory = log_dir / tp.dir_name
    directory.mkdir(parents=True)
    legacy = b""
    offset = 0
    for codec in (
        CompressionType.NONE,
        CompressionType.GZIP,
        CompressionType.SNAPPY,
        CompressionType.LZ4,
    ):
        records = [
            SimpleRecord(key=b"k%d" % i, value=b"legacy %d" % i, timestamp=T0 + i)
            for i in range(offset, offset + 5)
        ]
        legacy += build_legacy_message_set(
            records, magic=magic, compression=codec, base_offset=offset
        )
        offset += 5
    (directory / f"{0:020d}.log").write_bytes(legacy)
    log = Log.open(directory, SMALL_SEGMENTS)
    try:
        produce(log, records_for(30, start=offset))
        return read_all_records(log)
    finally:
        log.close()


# A handful of batches a segment, an index entry per batch: transactions span segments.
TXN_SEGMENTS = config(segment_bytes=600, index_interval_bytes=1)


def write_transactions(log: Log, *, rounds: int = 120, seed: int = 5) -> TxnWriter:
    """Three producers' overlapping transactions, mostly aborted, among plain batches;
    every transaction is ended at the end."""
    rng = random.Random(seed)
    txns = TxnWriter(log)
    for _ in range(rounds):
        producer = rng.randint(1, 3)
        roll = rng.random()
        if roll < 0.15:
            txns.send_plain(rng.randint(1, 2))
        elif roll < 0.4:
            txns.end(producer, commit=rng.random() < 0.35)
        else:
            txns.send(producer, rng.randint(1, 3))
    for producer in sorted(txns.open_txns):
        txns.end(producer, commit=False)
    return txns


def expected_rows(tp: TopicPartition, records: Sequence[Record]) -> list[Row]:
    """The rows the Kafka source gives for CreateTime ``records`` (v1/v2 batches)."""
    return [(r.key, r.value, tp.topic, tp.partition, r.offset, r.timestamp, 0) for r in records]


def rows_of_table(table: pa.Table) -> list[Row]:
    """Rows of an Arrow table of the source's schema, timestamps back in milliseconds."""
    data = table.to_pydict()
    millis = [
        None if moment is None else int(moment.timestamp() * 1000) for moment in data["timestamp"]
    ]
    return list(
        zip(
            data["key"],
            data["value"],
            data["topic"],
            data["partition"],
            data["offset"],
            millis,
            data["timestampType"],
            strict=True,
        )
    )


@dataclass(frozen=True)
class Tier:
    """A tier (a ``file://`` directory, or ``s3://`` in the session's MinIO) and the data
    source options to reach it."""

    url: str
    s3: S3Options | None = None
    options: dict[str, str] = field(default_factory=dict)

    def open(self) -> ObjectStore:
        return open_store(self.url, self.s3)


def file_tier(directory: Path) -> Tier:
    return Tier(LocalDirectoryStore(directory).url)


@pytest.fixture
def s3_tier(minio: MinioServer, s3_bucket: str, tmp_path: Path) -> Tier:
    secret = tmp_path / "s3-secret"
    secret.mkdir()
    (secret / "access_key_id").write_text(minio.access_key_id)
    (secret / "secret_access_key").write_text(minio.secret_access_key)
    options = {
        "s3.endpoint.url": minio.endpoint_url,
        "s3.region": minio.region,
        "s3.path.style.access.enabled": "true",
        "s3.credentials.path": str(secret),
    }
    return Tier(f"s3://{s3_bucket}/cluster/tier", parse_s3_options(options), options)
