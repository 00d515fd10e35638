"""What ``validate_produce`` costs a produced batch: MB/s of batch bytes checked.

Run with ``.venv/bin/python -m tests.benchmarks.validation_bench``.  Batches of 64 KiB
and 1 MiB holding records of 100 B and 1 KiB (a producer's: a short key, random value
bytes, timestamps a few milliseconds apart), uncompressed and compressed, each
validated ``--runs`` times in a row; the median per batch is printed as a Markdown
table.  The figures are of whatever ``tierlog.storage`` is first on the path, so the
same script measures an older commit with its ``storage/`` on ``PYTHONPATH``.
"""

from __future__ import annotations

import argparse
import os
import statistics
import time

from tierlog.storage.config import TimestampType
from tierlog.storage.records import CompressionType, SimpleRecord, build_batch, validate_produce

KiB = 1024
MiB = 1024 * KiB
NOW = 1_700_000_000_000
MAX_MESSAGE_BYTES = 1024 * 1024 + 12  # the broker's default (or the batch, if larger)


def producer_batch(batch_bytes: int, value_bytes: int, codec: CompressionType) -> bytes:
    """About ``batch_bytes`` of records before compression, as a producer builds them."""
    count = max(1, (batch_bytes - 61) // (value_bytes + 20))  # key and record framing
    # Half random, half repeated, so the codecs have something to do and something to keep.
    values = [os.urandom(value_bytes // 2) + b"x" * (value_bytes - value_bytes // 2)]
    records = [SimpleRecord(b"key-%06d" % i, values[0], NOW + i // 256, ()) for i in range(count)]
    return build_batch(records, compression=codec)


def seconds_per_validation(batch: bytes, runs: int) -> float:
    samples = []
    for _ in range(runs):
        started = time.process_time()
        validate_produce(
            batch,
            max_message_bytes=max(len(batch), MAX_MESSAGE_BYTES),
            require_keys=False,
            timestamp_type=TimestampType.CREATE_TIME,
            now_ms=NOW,
            before_max_ms=2**63 - 1,
            after_max_ms=3_600_000,
        )
        samples.append(time.process_time() - started)
    return statistics.median(samples)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=21, help="validations of each batch")
    parser.add_argument(
        "--codecs", default="none,lz4,zstd", help="comma-separated compression types"
    )
    args = parser.parse_args()
    codecs = [CompressionType[name.upper()] for name in args.codecs.split(",")]
    print("| batch | value | codec | records | wire bytes | median CPU | MB/s of records |")
    print("|---|---|---|---|---|---|---|")
    for batch_bytes in (64 * KiB, MiB):
        for value_bytes in (100, KiB):
            for codec in codecs:
                batch = producer_batch(batch_bytes, value_bytes, codec)
                seconds = seconds_per_validation(batch, args.runs)
                count = int.from_bytes(batch[57:61], "big")
                print(
                    f"| {batch_bytes // KiB} KiB | {value_bytes} B | {codec.name.lower()} "
                    f"| {count} | {len(batch):,} | {seconds * 1e3:.3f} ms "
                    f"| {batch_bytes / seconds / 1e6:,.0f} |"
                )


if __name__ == "__main__":
    main()
