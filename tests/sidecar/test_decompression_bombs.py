"""Decompression bombs against a real sidecar: each gets its typed error, and the memory
they make the broker hold is bounded together, by the broker's config, not one by one."""

from __future__ import annotations

import time
import zlib
from collections import Counter
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import grpc
import zstandard

from tests.support.lying_batches import framed_batch
from tests.support.scrape import METRICS, scrape_sidecar
from tierlog.api.v1 import log_service_pb2
from tierlog.storage.records import CompressionType
from tierlog.storage.records.record import encode_record
from tierlog.storage.records.varint import encode_varint

from .conftest import Sidecar, SidecarFactory, reason_of

MiB = 1024 * 1024
BUDGET = 32 * MiB
REQUEST_BYTES = 16 * MiB


def _records(count: int, value_bytes: int) -> Iterator[bytes]:
    """``count`` honest records of ``value_bytes`` zeros, a record at a time."""
    value = bytes(value_bytes)
    for delta in range(count):
        record = bytearray()
        encode_record(record, delta, 0, None, value)
        yield bytes(record)


def _bomb(codec: CompressionType, count: int, value_bytes: int) -> bytes:
    """A batch whose section decodes to ``count`` records of ``value_bytes`` zeros."""
    if codec is CompressionType.GZIP:
        deflater = zlib.compressobj(9, zlib.DEFLATED, 31)
        section = b"".join(deflater.compress(r) for r in _records(count, value_bytes))
        section += deflater.flush()
    else:  # zstd, without a content size, as Kafka's zstd-jni writes it
        compressor = zstandard.ZstdCompressor(level=1, write_content_size=False).compressobj()
        section = b"".join(compressor.compress(r) for r in _records(count, value_bytes))
        section += compressor.flush()
    return framed_batch(section, codec=codec, record_count=count)


def _zeros(codec: CompressionType, size: int) -> bytes:
    """A batch whose section decodes to ``size`` zero bytes: no records at all."""
    compressor = zstandard.ZstdCompressor(level=1, write_content_size=False).compressobj()
    section = b"".join(compressor.compress(bytes(MiB)) for _ in range(size // MiB))
    return framed_batch(section + compressor.flush(), codec=codec, record_count=1)


def _status_value(sidecar: Sidecar, field: str) -> int:
    for line in Path(f"/proc/{sidecar.process.pid}/status").read_text().splitlines():
        if line.startswith(field + ":"):
            return int(line.split()[1]) * 1024
    raise AssertionError(f"no {field}")


def _produce(sidecar: Sidecar, topic: str, batch: bytes) -> str:
    request = log_service_pb2.ProduceRequest(topic=topic, record_batches=batch)
    try:
        sidecar.log.Produce(request, timeout=120)
    except grpc.RpcError as error:
        return reason_of(error)
    return "OK"


def test_concurrent_bombs_are_refused_within_the_broker_wide_budget(
    sidecar_factory: SidecarFactory, tmp_path: Path
) -> None:
    sidecar = sidecar_factory(
        tmp_path / "data",
        METRICS,
        f"tierlog.validation.max.inflight.decompressed.bytes={BUDGET}",
        f"queued.max.request.bytes={REQUEST_BYTES}",
    )
    sidecar.create_topic("bombs")
    warm = _bomb(CompressionType.ZSTD, 4, 1000)
    assert _produce(sidecar, "bombs", warm) == "OK"
    baseline_rss = _status_value(sidecar, "VmRSS")
    # Under the default max.message.bytes (1 MiB) a batch may decode to 64 MiB: each of
    # these decodes to more, in records the walk must read (so it cannot stop early),
    # or to zeros that are no records, or holds one record longer than the bound.
    bombs = {
        "zstd records": (_bomb(CompressionType.ZSTD, 1200, 60_000), "MESSAGE_TOO_LARGE"),
        "gzip records": (_bomb(CompressionType.GZIP, 1200, 60_000), "MESSAGE_TOO_LARGE"),
        "one long record": (_bomb(CompressionType.ZSTD, 1, 100 * MiB), "MESSAGE_TOO_LARGE"),
        "zstd zeros": (_zeros(CompressionType.ZSTD, 1024 * MiB), "INVALID_RECORD"),
    }
    for batch, _reason in bombs.values():
        assert len(batch) < MiB
    names = [name for name in bombs for _ in range(16)]  # 64 at once
    with ThreadPoolExecutor(len(names)) as pool:
        answers = list(
            pool.map(lambda name: (name, _produce(sidecar, "bombs", bombs[name][0])), names)
        )
    for name, reason in answers:
        assert reason in (bombs[name][1], "THROTTLING_QUOTA_EXCEEDED"), (name, reason)
    assert Counter(reason for _, reason in answers)["THROTTLING_QUOTA_EXCEEDED"] < len(names)

    # What the bombs made the broker hold: decoded bytes within the budget, the
    # requests within theirs, and room for the calls' own buffers and threads.
    peak_rss = _status_value(sidecar, "VmHWM")
    assert peak_rss - baseline_rss < BUDGET + REQUEST_BYTES + 64 * MiB, (baseline_rss, peak_rss)
    # The burst over, its memory is given back: less than the budget stays (the old
    # validator kept what the burst took, 1.7 GiB for 64 bombs of 1 GiB).
    after_rss = _status_value(sidecar, "VmRSS")
    assert after_rss - baseline_rss < BUDGET, (baseline_rss, after_rss)
    found = scrape_sidecar(sidecar)
    assert found.value("tierlog_validation_decompressed_bytes_in_flight") == 0
    assert found.value("tierlog_validation_decompressed_bytes_limit") == BUDGET
    assert _produce(sidecar, "bombs", warm) == "OK"
    sidecar.assert_alive()


def test_an_8_gib_bomb_under_a_huge_max_message_bytes_is_refused_without_its_memory(
    sidecar_factory: SidecarFactory, tmp_path: Path
) -> None:
    sidecar = sidecar_factory(tmp_path / "data")
    sidecar.create_topic("huge", max_message_bytes="100000000")
    baseline_rss = _status_value(sidecar, "VmRSS")
    # 8 GiB of records of 8 MiB each: their batch may decode to 6.4 GB (64 x 100 MB).
    bomb = _bomb(CompressionType.ZSTD, 1024, 8 * MiB)
    started = time.monotonic()
    assert _produce(sidecar, "huge", bomb) == "MESSAGE_TOO_LARGE"
    # And a record that claims 2 GiB is refused on its length: more than the budget.
    section = zstandard.ZstdCompressor().compress(encode_varint(2**31 - 100) + bytes(MiB))
    claim = framed_batch(section, codec=CompressionType.ZSTD)
    assert _produce(sidecar, "huge", claim) == "MESSAGE_TOO_LARGE"
    elapsed_s = time.monotonic() - started
    # A window of an 8 MiB record (twice, as it is gathered and joined) and chunks: not
    # the gigabytes the batch decodes to.
    peak_rss = _status_value(sidecar, "VmHWM")
    assert peak_rss - baseline_rss < 4 * 8 * MiB + 64 * MiB, (baseline_rss, peak_rss, elapsed_s)
    sidecar.assert_alive()
