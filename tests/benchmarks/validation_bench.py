"""What ``validate_produce`` costs a produced batch: MB/s of batch bytes checked.

Run with ``.venv/bin/python -m tests.benchmarks.validation_bench``.  Batches of 64 KiB
and 1 MiB holding records of 100 B and 1 KiB (a producer's: a short key, random value
bytes, timestamps a few milliseconds apart), uncompressed and compressed, each
validated ``--runs`` times in a row; the median per batch is printed as a Markdown
table.  The figures are of whatever ``tierlog.storage`` is first on the path;
``--baseline DIR`` measures the same batches with the checkout at ``DIR`` too (its
``storage/`` first on ``PYTHONPATH``, in a child process) and prints both, before
and after, side by side.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import statistics
import subprocess
import sys
import time
from pathlib import Path

from tierlog.storage.config import TimestampType
from tierlog.storage.records import CompressionType, SimpleRecord, build_batch, validate_produce

KiB = 1024
MiB = 1024 * KiB
NOW = 1_700_000_000_000
MAX_MESSAGE_BYTES = 1024 * 1024 + 12  # the broker's default (or the batch, if larger)
SHAPES = [(batch, value) for batch in (64 * KiB, MiB) for value in (100, KiB)]


def producer_batch(batch_bytes: int, value_bytes: int, codec: CompressionType) -> bytes:
    """About ``batch_bytes`` of records before compression, as a producer builds them."""
    count = max(1, (batch_bytes - 61) // (value_bytes + 20))  # key and record framing
    # Half random, half repeated, so the codecs have something to do and something to keep;
    # seeded, so a baseline measured in another process has the very same batches.
    random_half = random.Random(value_bytes).randbytes(value_bytes // 2)
    value = random_half + b"x" * (value_bytes - value_bytes // 2)
    records = [SimpleRecord(b"key-%06d" % i, value, NOW + i // 256, ()) for i in range(count)]
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


def measure(codecs: list[CompressionType], runs: int) -> dict[str, float]:
    """Median seconds per validation, by ``"batch/value/codec"``."""
    return {
        f"{batch_bytes}/{value_bytes}/{codec.name}": seconds_per_validation(
            producer_batch(batch_bytes, value_bytes, codec), runs
        )
        for batch_bytes, value_bytes in SHAPES
        for codec in codecs
    }


def baseline(checkout: Path, codecs: str, runs: int) -> dict[str, float]:
    env = {**os.environ, "PYTHONPATH": str(checkout / "storage")}
    command = [sys.executable, "-m", "tests.benchmarks.validation_bench", "--json"]
    command += ["--codecs", codecs, "--runs", str(runs)]
    found: dict[str, float] = json.loads(
        subprocess.run(command, env=env, check=True, capture_output=True, text=True).stdout
    )
    return found


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=21, help="validations of each batch")
    parser.add_argument(
        "--codecs", default="none,gzip,snappy,lz4,zstd", help="comma-separated compression types"
    )
    parser.add_argument("--baseline", type=Path, help="another checkout to compare with")
    parser.add_argument("--json", action="store_true", help="medians as JSON (for --baseline)")
    args = parser.parse_args()
    codecs = [CompressionType[name.upper()] for name in args.codecs.split(",")]
    if args.json:
        print(json.dumps(measure(codecs, args.runs)))
        return
    before = baseline(args.baseline, args.codecs, args.runs) if args.baseline else {}
    after = measure(codecs, args.runs)
    print(
        "| batch | value | codec | records | wire bytes | median before | median after "
        "| MB/s before | MB/s after |"
    )
    print("|---|---|---|---|---|---|---|---|---|")
    for batch_bytes, value_bytes in SHAPES:
        for codec in codecs:
            key = f"{batch_bytes}/{value_bytes}/{codec.name}"
            batch = producer_batch(batch_bytes, value_bytes, codec)
            count = int.from_bytes(batch[57:61], "big")
            old = before.get(key)
            print(
                f"| {batch_bytes // KiB} KiB | {value_bytes} B | {codec.name.lower()} | {count} "
                f"| {len(batch):,} | {_ms(old)} | {_ms(after[key])} "
                f"| {_mb_s(batch_bytes, old)} | {_mb_s(batch_bytes, after[key])} |"
            )


def _ms(seconds: float | None) -> str:
    return "-" if seconds is None else f"{seconds * 1e3:.3f} ms"


def _mb_s(batch_bytes: int, seconds: float | None) -> str:
    return "-" if seconds is None else f"{batch_bytes / seconds / 1e6:,.0f}"


if __name__ == "__main__":
    main()
