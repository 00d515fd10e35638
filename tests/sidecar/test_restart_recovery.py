"""A sidecar started again after kill -9 (issue 29, items 4 and 8): the recovery checks
only what lies past the recovery point, on several threads, and a full disk either
costs nothing (the crashed indexes are read without being mapped) or stops the start
with one line saying where and how much space is missing, and nothing is lost.
"""

from __future__ import annotations

import re
import time
from pathlib import Path

import pytest

from tests.support.scrape import METRICS, scrape_sidecar
from tests.support.small_disk import fill_leaving, small_disk_at
from tierlog.api.v1 import log_service_pb2
from tierlog.storage.checkpoints import RECOVERY_POINT_CHECKPOINT, read_offset_checkpoint
from tierlog.storage.records import SimpleRecord, build_batch, decode_records, iter_batches

from .conftest import Sidecar, SidecarFactory

TOPIC = "restarted"
VALUE_BYTES = 500


def batch_of(offset: int) -> bytes:
    """One record whose value names its offset; every batch has the same size."""
    value = b"%08d" % offset + bytes([offset % 251]) * (VALUE_BYTES - 8)
    return build_batch([SimpleRecord(b"k", value, int(time.time() * 1000), ())])


def produce(sidecar: Sidecar, offsets: range, partitions: int = 1) -> None:
    for offset in offsets:
        for partition in range(partitions):
            sidecar.log.Produce(
                log_service_pb2.ProduceRequest(
                    topic=TOPIC, partition=partition, record_batches=batch_of(offset)
                )
            )


def read_values(sidecar: Sidecar, partition: int = 0) -> list[bytes]:
    values: list[bytes] = []
    while True:
        fetched = sidecar.log.Fetch(
            log_service_pb2.FetchRequest(topic=TOPIC, partition=partition, offset=len(values))
        )
        data = fetched.record_batches
        if not data:
            return values
        values += [r.value or b"" for h in iter_batches(data) for r in decode_records(data, h)]


def expected_values(count: int) -> list[bytes]:
    return [b"%08d" % offset + bytes([offset % 251]) * (VALUE_BYTES - 8) for offset in range(count)]


def test_after_kill_9_only_the_batches_past_the_recovery_point_are_checked(
    tmp_path: Path, sidecar_factory: SidecarFactory
) -> None:
    # Every batch indexed (index.interval.bytes=1): the last entry below the recovery
    # point is the batch just before it, so the check starts exactly one batch back.
    sidecar = sidecar_factory(tmp_path / "data", METRICS)
    sidecar.create_topic(TOPIC, index_interval_bytes="1")
    produce(sidecar, range(300))
    assert sidecar.stop() == 0  # flushed, recovery point 300 in the checkpoint
    sidecar.start()
    produce(sidecar, range(300, 320))  # in the page cache only: past the recovery point
    sidecar.kill()
    checkpoint = read_offset_checkpoint(sidecar.data_dir / RECOVERY_POINT_CHECKPOINT)
    assert list(checkpoint.values()) == [300]

    sidecar.start()
    batch_bytes = len(batch_of(0))
    log_bytes = 320 * batch_bytes
    scraped = scrape_sidecar(sidecar)
    assert scraped.value("tierlog_recovery_scanned_bytes") == 21 * batch_bytes  # not log_bytes
    assert scraped.value("tierlog_recovery_target_bytes") == 21 * batch_bytes
    segment = sidecar.data_dir / f"{TOPIC}-0" / f"{0:020d}.log"
    assert segment.stat().st_size == log_bytes
    assert f"recovering {segment} from byte {299 * batch_bytes} " in sidecar.output
    assert read_values(sidecar) == expected_values(320)
    assert sidecar.stop() == 0


def test_partitions_are_recovered_on_the_default_two_threads(
    tmp_path: Path, sidecar_factory: SidecarFactory
) -> None:
    sidecar = sidecar_factory(tmp_path / "data")
    sidecar.create_topic(TOPIC, partitions=6)
    produce(sidecar, range(400), partitions=6)
    sidecar.kill()  # no checkpoint yet: every partition is checked from byte 0

    sidecar.start()
    output = sidecar.output
    assert "on 2 recovery threads" in output
    threads = set(re.findall(r"recovering \S+ from byte 0 \((log-recovery_\d+)\)", output))
    assert threads == {"log-recovery_0", "log-recovery_1"}
    for partition in range(6):
        assert read_values(sidecar, partition) == expected_values(400)
    assert sidecar.stop() == 0


def test_a_crashed_broker_starts_on_a_full_disk_and_serves_what_it_had(
    tmp_path: Path, sidecar_factory: SidecarFactory
) -> None:
    """The crashed active segment's indexes are still preallocated, their tails holes:
    mapped and read on a full tmpfs, the first read was a SIGBUS (exit -7, no log line)."""
    with small_disk_at(tmp_path / "disk", "8m") as disk:
        sidecar = sidecar_factory(disk / "data")
        sidecar.create_topic(TOPIC)
        produce(sidecar, range(200))
        sidecar.kill()
        filler = fill_leaving(disk, 0)

        sidecar.start()
        assert read_values(sidecar) == expected_values(200)
        filler.unlink()  # the clean shutdown writes checkpoints and a snapshot
        assert sidecar.stop() == 0


def test_a_recovery_that_needs_space_on_a_full_disk_says_where_and_how_much(
    tmp_path: Path, sidecar_factory: SidecarFactory
) -> None:
    with small_disk_at(tmp_path / "disk", "8m") as disk:
        sidecar = sidecar_factory(disk / "data")
        sidecar.create_topic(TOPIC)
        produce(sidecar, range(200))
        sidecar.kill()
        partition_dir = sidecar.data_dir / f"{TOPIC}-0"
        for index in (*partition_dir.glob("*.index"), *partition_dir.glob("*.timeindex")):
            index.unlink()  # lost with the crash: the recovery writes them anew
        filler = fill_leaving(disk, 0)

        earlier = len(sidecar.output)
        with pytest.raises(AssertionError, match="the sidecar did not start"):
            sidecar.start(timeout_s=30)
        assert sidecar.process.wait(timeout=30) == 2  # an error exit, not -7 (SIGBUS)
        output = sidecar.output[earlier:]
        errors = [line for line in output.splitlines() if " ERROR " in line]
        assert len(errors) == 1, output
        assert re.search(
            rf"KAFKA_STORAGE_ERROR: no space left to recover {partition_dir}: rebuilding its "
            r"indexes may take up to \d+ bytes and 0 are free",
            errors[0],
        ), errors[0]
        assert "Traceback" not in output

        filler.unlink()
        sidecar.start()
        assert read_values(sidecar) == expected_values(200)
        assert sidecar.stop() == 0
