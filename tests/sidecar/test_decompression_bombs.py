"""Decompression bombs against a real sidecar: each gets its typed error, and the memory
they make the broker hold is bounded together, by the broker's config, not one by one."""

from __future__ import annotations

import time
from collections import Counter
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import grpc
import zstandard

from tests.support.bombs import MiB, bomb, zeros
from tests.support.lying_batches import framed_batch
from tests.support.scrape import METRICS, scrape_sidecar
from tierlog.api.v1 import log_service_pb2
from tierlog.storage.records import CompressionType
from tierlog.storage.records.varint import encode_varint

from .conftest import Sidecar, SidecarFactory, reason_of

BUDGET = 32 * MiB
REQUEST_BYTES = 16 * MiB


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
    warm = bomb(CompressionType.ZSTD, 4, 1000)
    assert _produce(sidecar, "bombs", warm) == "OK"
    baseline_rss = sidecar.rss_bytes()
    # Under the default max.message.bytes (1 MiB) a batch may decode to 64 MiB: each of
    # these decodes to more, in records the walk must read (so it cannot stop early),
    # or to zeros that are no records, or holds one record longer than the bound.
    bombs = {
        "zstd records": (bomb(CompressionType.ZSTD, 1200, 60_000), "MESSAGE_TOO_LARGE"),
        "gzip records": (bomb(CompressionType.GZIP, 1200, 60_000), "MESSAGE_TOO_LARGE"),
        "one long record": (bomb(CompressionType.ZSTD, 1, 100 * MiB), "MESSAGE_TOO_LARGE"),
        "zstd zeros": (zeros(CompressionType.ZSTD, 1024 * MiB), "INVALID_RECORD"),
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
    peak_rss = sidecar.peak_rss_bytes()
    assert peak_rss - baseline_rss < BUDGET + REQUEST_BYTES + 64 * MiB, (baseline_rss, peak_rss)
    # The burst over, its memory is given back: less than the budget stays (the old
    # validator kept what the burst took, 1.7 GiB for 64 bombs of 1 GiB).
    after_rss = sidecar.rss_bytes()
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
    baseline_rss = sidecar.rss_bytes()
    # 8 GiB of records of 8 MiB each: their batch may decode to 6.4 GB (64 x 100 MB).
    eight_gib = bomb(CompressionType.ZSTD, 1024, 8 * MiB)
    started = time.monotonic()
    assert _produce(sidecar, "huge", eight_gib) == "MESSAGE_TOO_LARGE"
    # And a record that claims 2 GiB is refused on its length: more than the budget.
    section = zstandard.ZstdCompressor().compress(encode_varint(2**31 - 100) + bytes(MiB))
    claim = framed_batch(section, codec=CompressionType.ZSTD)
    assert _produce(sidecar, "huge", claim) == "MESSAGE_TOO_LARGE"
    elapsed_s = time.monotonic() - started
    # A window of an 8 MiB record (twice, as it is gathered and joined) and chunks: not
    # the gigabytes the batch decodes to.
    peak_rss = sidecar.peak_rss_bytes()
    assert peak_rss - baseline_rss < 4 * 8 * MiB + 64 * MiB, (baseline_rss, peak_rss, elapsed_s)
    sidecar.assert_alive()
