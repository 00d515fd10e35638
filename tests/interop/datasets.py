"""The records the interop tests write, through Kafka's producer or through tierlog.

One deterministic data set serves both directions, so a test can compare what Kafka
made of it with what tierlog makes of it.
"""

from __future__ import annotations

import itertools
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from tierlog.storage.records import CompressionType, SimpleRecord, build_batch

from .kafka import ProducedRecord, ProducerRecord

__all__ = [
    "BASE_TIMESTAMP_MS",
    "CODECS",
    "INDEX_INTERVAL_BYTES",
    "RECORDS_PER_BATCH",
    "RECORDS_PER_CODEC_RUN",
    "SEGMENT_BYTES",
    "WRITTEN_TOPIC",
    "WRITTEN_TOPIC_CONFIGS",
    "KafkaWrittenLog",
    "interop_records",
    "tierlog_batches",
]

CODECS = ("none", "gzip", "snappy", "lz4", "zstd")
BASE_TIMESTAMP_MS = 1_700_000_000_000
WRITTEN_TOPIC = "kafka-written"
# Kafka 4.x refuses segment.bytes below 1 MiB; internal.segment.bytes is its testing
# override. 16 KiB segments and an index entry per KiB give many segments, many entries.
SEGMENT_BYTES = 16384
INDEX_INTERVAL_BYTES = 1024
WRITTEN_TOPIC_CONFIGS = {
    "internal.segment.bytes": str(SEGMENT_BYTES),
    "index.interval.bytes": str(INDEX_INTERVAL_BYTES),
    "retention.ms": "-1",
    "compression.type": "producer",
}
RECORDS_PER_BATCH = 25
RECORDS_PER_CODEC_RUN = 100


def interop_records(count: int = 2000) -> list[ProducerRecord]:
    """A deterministic mix: codec runs of 100 records, null keys and values, duplicate and
    null-valued headers, non-ASCII text, and timestamps that now and then step back."""
    records = []
    for i in range(count):
        key = None if i % 50 == 7 else f"key-{i:05d}".encode()
        value = None if i % 101 == 3 else f"value-{i}-{'x' * (i % 97)}".encode()
        if value is not None and i % 13 == 0:
            value = f"värde-{i}-ünïcødé".encode()
        headers: tuple[tuple[str, bytes | None], ...] = ()
        if i % 3 == 1:
            headers = (("trace-id", f"{i:08x}".encode()),)
        elif i % 3 == 2:
            headers = (("a", b"1"), ("b", None), ("a", bytes([0, 255, i % 256])))
        timestamp_ms = BASE_TIMESTAMP_MS + i * 1000 - (5000 if i % 7 == 0 else 0)
        records.append(
            ProducerRecord(
                key=key,
                value=value,
                headers=headers,
                timestamp_ms=timestamp_ms,
                compression=CODECS[(i // RECORDS_PER_CODEC_RUN) % len(CODECS)],
            )
        )
    return records


@dataclass(frozen=True)
class KafkaWrittenLog:
    """A partition directory written by a real Kafka broker, and what was produced to it."""

    log_dir: Path  # the broker's log.dirs entry (checkpoints, clean-shutdown marker)
    partition_dir: Path  # <log_dir>/<topic>-0
    topic: str
    topic_configs: dict[str, str]
    records: list[ProducedRecord]  # in offset order
    broker_log: Path


def tierlog_batches(records: Sequence[ProducerRecord], per_batch: int) -> list[bytes]:
    """Batches of ``per_batch`` records; a batch never mixes codecs."""
    out = []
    for codec, run in itertools.groupby(records, key=lambda record: record.compression):
        run_records = list(run)
        for start in range(0, len(run_records), per_batch):
            chunk = run_records[start : start + per_batch]
            simple = [SimpleRecord(r.key, r.value, r.timestamp_ms or 0, r.headers) for r in chunk]
            out.append(build_batch(simple, compression=CompressionType[(codec or "none").upper()]))
    return out
