"""Damage from outside: garbage indexes, flipped bytes, a killed process, a full disk."""

from __future__ import annotations

import mmap
import random
import signal
import subprocess
import sys
import textwrap
from collections.abc import Iterator
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tests.storage.conftest import SMALL_BATCH as BATCH
from tests.storage.conftest import SMALL_SEGMENTS as CONFIG
from tests.storage.conftest import (
    T0,
    config,
    make_batch,
    read_all_bytes,
    read_all_records,
    write_closed_log,
)
from tests.storage.conftest import segment_name as name
from tests.support.small_disk import fill_leaving, small_disk_at
from tierlog.storage.errors import KafkaStorageError
from tierlog.storage.log import Log
from tierlog.storage.records import CompressionType, iter_batches

# -- garbage in an index ----------------------------------------------------------------


@pytest.mark.parametrize("suffix", [".index", ".timeindex"])
@pytest.mark.parametrize("seed", range(4))
def test_nonsense_in_an_index_is_detected_and_the_index_rebuilt(
    tmp_path: Path, suffix: str, seed: int
) -> None:
    directory = tmp_path / "t-0"
    content = write_closed_log(directory)
    damaged = directory / name(12, suffix)
    original = damaged.read_bytes()
    rng = random.Random(seed)
    entry = 8 if suffix == ".index" else 12
    # Random entries, or a length that is not whole entries.
    garbage = rng.randbytes(entry * rng.randint(2, 6) + (seed % 2) * rng.randint(1, entry - 1))
    damaged.write_bytes(garbage)
    log = Log.open(directory, CONFIG, recovery_point=30, clean_shutdown=True)
    assert damaged.read_bytes() == original
    assert read_all_bytes(log) == content
    for offset in range(30):
        first = next(iter_batches(log.read(offset, 1).records))
        assert first.base_offset <= offset <= first.last_offset
    for i in range(10):
        assert log.offset_for_timestamp(T0 + 10 * i + 1) == (T0 + 10 * i + 1, 3 * i + 1)
    log.close()


def test_an_index_pointing_past_the_log_is_rebuilt(tmp_path: Path) -> None:
    directory = tmp_path / "t-0"
    content = write_closed_log(directory)
    index = directory / name(0, ".index")
    original = index.read_bytes()
    log_file = directory / name(0, ".log")
    log_file.write_bytes(log_file.read_bytes()[: 2 * len(BATCH)])  # lost its tail batches
    log = Log.open(directory, CONFIG, recovery_point=30, clean_shutdown=True)
    assert index.read_bytes() == original[:8]  # the entry for the batch 3-5 only
    assert read_all_bytes(log, 0)[: 2 * len(BATCH)] == content[: 2 * len(BATCH)]
    log.close()


# -- flipped bytes inside the log -------------------------------------------------------


def covered_by_checks(position_in_batch: int) -> bool:
    """Bytes whose damage recovery must notice: all but the base offset and leader epoch,
    which lie outside the CRC by Kafka's design (the broker patches them in)."""
    return not (position_in_batch < 8 or 12 <= position_in_batch < 16)


@settings(
    max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(batch_index=st.integers(0, 9), where=st.integers(0, 10_000), mask=st.integers(1, 255))
def test_a_flipped_byte_truncates_to_the_last_whole_valid_batch_before_it(
    tmp_path_factory: pytest.TempPathFactory, batch_index: int, where: int, mask: int
) -> None:
    directory = tmp_path_factory.mktemp("flip") / "t-0"
    content = write_closed_log(directory)
    size = len(BATCH)
    candidates = [p for p in range(size) if covered_by_checks(p)]
    position_in_batch = candidates[where % len(candidates)]
    segment_base = (batch_index // 4) * 12
    segment_file = directory / name(segment_base, ".log")
    data = bytearray(segment_file.read_bytes())
    data[(batch_index % 4) * size + position_in_batch] ^= mask
    segment_file.write_bytes(data)

    log = Log.open(directory, CONFIG, recovery_point=0, clean_shutdown=False)
    assert log.log_end_offset == 3 * batch_index
    assert [s.base_offset for s in log.segments] == [0, 12, 24][: batch_index // 4 + 1]
    later = [base for base in (12, 24) if base > segment_base]
    assert not any((directory / name(base, ".log")).exists() for base in later)
    assert read_all_bytes(log, 0) == content[: batch_index * size]
    assert log.append(make_batch(1, tag="after")).first_offset == 3 * batch_index
    log.close()


# -- a process killed in the middle of its appends --------------------------------------

CHILD = textwrap.dedent(
    """
    import sys
    from pathlib import Path
    from tierlog.storage.config import LogConfig
    from tierlog.storage.log import Log
    from tierlog.storage.records import CompressionType, SimpleRecord, build_batch

    log = Log.open(Path(sys.argv[1]), LogConfig(flush_messages=1, segment_bytes=3_000_000))
    i = 0
    while True:
        records = [
            SimpleRecord(key=b"%d-%d" % (i, j), value=bytes([i % 251]) * 40_000, timestamp=-1)
            for j in range(4)
        ]
        codec = CompressionType.NONE if i % 2 else CompressionType.LZ4
        info = log.append(build_batch(records, compression=codec))
        print(info.last_offset, flush=True)  # flush.messages=1: this batch is on disk
        i += 1
    """
)


def test_a_killed_appender_recovers_to_a_valid_prefix_with_every_flushed_batch(
    tmp_path: Path,
) -> None:
    directory = tmp_path / "t-0"
    child = subprocess.Popen(
        [sys.executable, "-c", CHILD, str(directory)],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    assert child.stdout is not None
    acknowledged = -1
    try:
        for line in child.stdout:
            acknowledged = int(line)
            if acknowledged >= 4 * 60 - 1:  # 60 batches, several segments
                break
    finally:
        child.send_signal(signal.SIGKILL)
        child.wait()
        child.stdout.close()
        assert child.stderr is not None
        errors = child.stderr.read()
        child.stderr.close()
    assert acknowledged >= 4 * 60 - 1, errors

    log = Log.open(
        directory,
        config(flush_messages=1, segment_bytes=3_000_000),
        recovery_point=0,
        clean_shutdown=False,
    )
    assert log.log_end_offset >= acknowledged + 1
    assert log.log_end_offset % 4 == 0  # whole batches only
    records = read_all_records(log)
    assert [r.offset for r in records] == list(range(log.log_end_offset))
    for record in records:
        batch, j = divmod(record.offset, 4)
        assert record.key == b"%d-%d" % (batch, j)
        assert record.value == bytes([batch % 251]) * 40_000
    log.close()


# -- a full disk ------------------------------------------------------------------------


@pytest.fixture
def small_disk(tmp_path: Path) -> Iterator[Path]:
    """A real 256 KiB filesystem."""
    with small_disk_at(tmp_path / "disk", "256k") as disk:
        yield disk


def test_a_full_disk_fails_the_append_and_keeps_the_log_consistent(small_disk: Path) -> None:
    filler = small_disk / "filler"
    filler.write_bytes(b"\x00" * 64 * 1024)
    # Index entries keep being written while the disk fills: the active segment's index
    # blocks were reserved when it was created, so storing an entry cannot hit ENOSPC.
    log = Log.open(
        small_disk / "t-0",
        config(segment_index_bytes=4096, index_interval_bytes=1000, segment_bytes=10**6),
    )
    appended = 0
    with pytest.raises(KafkaStorageError, match="no space"):
        for i in range(100):
            log.append(
                make_batch(2, value_size=9_000, tag=str(i), compression=CompressionType.NONE)
            )
            appended += 2
    assert appended > 0
    assert log.log_end_offset == appended
    active = log.active_segment
    assert active.log.path.stat().st_size == active.size  # the partial write was cut back
    assert [r.offset for r in read_all_records(log)] == list(range(appended))
    with pytest.raises(KafkaStorageError):
        log.append(make_batch(2, value_size=9_000, tag="again"))
    assert log.log_end_offset == appended

    filler.unlink()  # space is freed
    info = log.append(make_batch(2, value_size=9_000, tag="freed"))
    assert info.first_offset == appended
    log.close()
    reopened = Log.open(small_disk / "t-0", log.config, recovery_point=0, clean_shutdown=False)
    records = read_all_records(reopened)
    assert [r.offset for r in records] == list(range(appended + 2))
    assert records[-1].key == b"freed-1"
    reopened.close()


def test_an_append_that_needs_an_index_page_on_a_full_disk_fails_before_writing(
    small_disk: Path,
) -> None:
    """Index files are sparse: a segment takes no disk for them when it is created, and
    blocks for a page of entries are reserved before the append that stores into it
    writes anything. Stored into without blocks on a full disk, the mapping would fault
    (SIGBUS, the process killed) instead of this error."""
    log = Log.open(
        small_disk / "t-0", config(segment_index_bytes=64 * 1024, index_interval_bytes=1)
    )
    index = log.active_segment.offset_index
    assert index.path.stat().st_blocks == 0
    while index.entries < mmap.PAGESIZE // index.entry_size:  # a page of entries, no more
        log.append(make_batch(1, tag=str(log.log_end_offset)))
    end, size = log.log_end_offset, log.active_segment.size
    filler = fill_leaving(small_disk, 0)
    with pytest.raises(KafkaStorageError, match="no space left"):
        log.append(make_batch(1, tag="refused"))  # its entry would start the next page
    assert log.log_end_offset == end and index.entries == mmap.PAGESIZE // index.entry_size
    assert log.active_segment.size == log.active_segment.log.path.stat().st_size == size

    filler.unlink()
    log.append(make_batch(1, tag="later"))
    assert index.entries == mmap.PAGESIZE // index.entry_size + 1
    assert [r.key for r in read_all_records(log)][-2:] == [f"{end - 1}-0".encode(), b"later-0"]
    log.close()
