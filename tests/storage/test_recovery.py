"""Loading a partition from disk: leftovers, missing indexes, swaps and unclean shutdowns."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.storage.conftest import SMALL_BATCH as BATCH
from tests.storage.conftest import (
    SMALL_SEGMENTS as CONFIG,
)
from tests.storage.conftest import (
    T0,
    make_batch,
    read_all_bytes,
    read_all_records,
    records_of,
    segment_files,
    write_closed_log,
)
from tests.storage.conftest import (
    segment_name as name,
)
from tests.storage.test_idempotent_log import idempotent_batch
from tierlog.storage.config import LogConfig
from tierlog.storage.errors import CorruptRecordError
from tierlog.storage.log import Log
from tierlog.storage.records import iter_batches
from tierlog.storage.recovery import LoadedLog, load_segments


def index_files(directory: Path) -> dict[str, bytes]:
    return {
        p.name: p.read_bytes() for p in directory.iterdir() if p.suffix in (".index", ".timeindex")
    }


def load(
    directory: Path, *, clean: bool, recovery_point: int = 0, config: LogConfig = CONFIG
) -> LoadedLog:
    return load_segments(
        directory,
        config,
        log_start_offset=0,
        recovery_point=recovery_point,
        clean_shutdown=clean,
    )


def close_all(loaded_segments: list) -> None:  # type: ignore[type-arg]
    for segment in loaded_segments:
        segment.close()


def test_an_empty_directory_gets_one_segment_at_the_log_start(tmp_path: Path) -> None:
    directory = tmp_path / "t-0"
    directory.mkdir()
    loaded = load_segments(
        directory, CONFIG, log_start_offset=42, recovery_point=0, clean_shutdown=False
    )
    assert [s.base_offset for s in loaded.segments] == [42]
    assert (directory / name(42, ".log")).exists()
    close_all(loaded.segments)


def test_a_clean_reopen_scans_nothing(tmp_path: Path) -> None:
    directory = tmp_path / "t-0"
    write_closed_log(directory)
    progress: list[tuple[int, int]] = []
    loaded = load_segments(
        directory,
        CONFIG,
        log_start_offset=0,
        recovery_point=30,
        clean_shutdown=True,
        progress=lambda done, total: progress.append((done, total)),
    )
    assert (loaded.recovered_segments, loaded.truncated_bytes, progress) == (0, 0, [])
    assert [s.base_offset for s in loaded.segments] == [0, 12, 24]
    assert loaded.recovery_point == 30
    close_all(loaded.segments)


def test_an_unclean_reopen_scans_from_the_segment_holding_the_recovery_point(
    tmp_path: Path,
) -> None:
    directory = tmp_path / "t-0"
    content = write_closed_log(directory)
    indexes = index_files(directory)
    progress: list[tuple[int, int]] = []
    loaded = load_segments(
        directory,
        CONFIG,
        log_start_offset=0,
        recovery_point=14,
        clean_shutdown=False,
        progress=lambda done, total: progress.append((done, total)),
    )
    assert loaded.recovered_segments == 2  # the segments at 12 and 24
    assert loaded.truncated_bytes == 0
    assert loaded.recovery_point == 30
    segment_sizes = [s.size for s in loaded.segments]
    assert progress == [
        (segment_sizes[1], segment_sizes[1] + segment_sizes[2]),
        (segment_sizes[1] + segment_sizes[2], segment_sizes[1] + segment_sizes[2]),
    ]
    close_all(loaded.segments)
    assert index_files(directory) == indexes  # rebuilt exactly as the appends wrote them
    reopened = Log.open(directory, CONFIG, recovery_point=30, clean_shutdown=True)
    assert read_all_bytes(reopened) == content
    reopened.close()


def test_missing_index_files_are_rebuilt(tmp_path: Path) -> None:
    directory = tmp_path / "t-0"
    write_closed_log(directory)
    indexes = index_files(directory)
    (directory / name(0, ".index")).unlink()
    (directory / name(12, ".timeindex")).unlink()
    (directory / name(24, ".index")).unlink()
    (directory / name(24, ".timeindex")).unlink()
    log = Log.open(directory, CONFIG, recovery_point=30, clean_shutdown=True)
    assert log.offset_for_timestamp(T0 + 45) == (T0 + 50, 15)
    assert [r.offset for r in read_all_records(log, 13)] == list(range(12, 30))
    log.close()
    assert index_files(directory) == indexes


def test_leftovers_of_unfinished_work_are_removed(tmp_path: Path) -> None:
    directory = tmp_path / "t-0"
    content = write_closed_log(directory)
    leftovers = [
        name(12, ".log.deleted"),
        name(12, ".index.deleted"),
        name(30, ".log.cleaned"),
        name(30, ".timeindex.cleaned"),
        "leader-epoch-checkpoint.tmp",
        "partition.metadata.tmp",
    ]
    for leftover in leftovers:
        (directory / leftover).write_bytes(b"junk")
    log = Log.open(directory, CONFIG, recovery_point=30, clean_shutdown=True)
    assert not any((directory / leftover).exists() for leftover in leftovers)
    assert read_all_bytes(log) == content
    log.close()


def test_orphan_index_files_are_removed(tmp_path: Path) -> None:
    directory = tmp_path / "t-0"
    write_closed_log(directory)
    (directory / name(99, ".index")).write_bytes(b"\x00" * 8)
    (directory / name(99, ".timeindex")).write_bytes(b"\x00" * 12)
    log = Log.open(directory, CONFIG, recovery_point=30, clean_shutdown=True)
    assert not (directory / name(99, ".index")).exists()
    assert not (directory / name(99, ".timeindex")).exists()
    assert [s.base_offset for s in log.segments] == [0, 12, 24]
    log.close()


def test_a_log_swap_file_completes_the_swap(tmp_path: Path) -> None:
    directory = tmp_path / "t-0"
    content = write_closed_log(directory)
    # A cleaner's output replacing segments 0 and 12: offsets 0-23 minus the batch 3-5.
    first_two = (directory / name(0, ".log")).read_bytes() + (
        directory / name(12, ".log")
    ).read_bytes()
    batch = len(BATCH)
    swapped = first_two[:batch] + first_two[2 * batch :]
    (directory / name(0, ".log.swap")).write_bytes(swapped)
    (directory / name(0, ".index.swap")).write_bytes(b"stale")
    log = Log.open(directory, CONFIG, recovery_point=30, clean_shutdown=True)
    assert [s.base_offset for s in log.segments] == [0, 24]
    segment_names = [n for n in segment_files(directory) if n[0].isdigit()]
    assert [n for n in segment_names if not n.endswith(".snapshot")] == sorted(
        name(base, suffix) for base in (0, 24) for suffix in (".log", ".index", ".timeindex")
    )
    assert [r.offset for r in read_all_records(log)] == [0, 1, 2, *range(6, 30)]
    assert read_all_bytes(log, 6) == content[2 * batch :]
    log.close()


def test_bytes_of_a_cut_short_append_after_the_recovery_point_are_cut_off(
    tmp_path: Path,
) -> None:
    """Everything up to the log end was flushed; an append was under way at the crash."""
    directory = tmp_path / "t-0"
    content = write_closed_log(directory)
    torn = make_batch(3, tag="torn")[:-7]
    with (directory / name(24, ".log")).open("ab") as active:
        active.write(torn)
    log = Log.open(directory, CONFIG, recovery_point=30, clean_shutdown=False)
    assert log.log_end_offset == 30
    assert log.size_bytes == len(content)
    assert log.append(make_batch(1, tag="next")).first_offset == 30
    assert [r.offset for r in read_all_records(log)] == list(range(31))
    log.close()


def test_an_unclean_reopen_keeps_preallocated_indexes_for_the_active_segment(
    tmp_path: Path,
) -> None:
    directory = tmp_path / "t-0"
    log = Log.open(directory, CONFIG)
    for i in range(5):
        log.append(make_batch(3, start_ts=T0 + i, tag=f"{i:02d}"))
    log.flush()
    del log  # a crash: the active indexes are still preallocated, nothing was trimmed
    active = directory / name(12, ".index")
    assert active.stat().st_size == CONFIG.segment_index_bytes // 8 * 8
    reopened = Log.open(directory, CONFIG, recovery_point=15, clean_shutdown=False)
    assert reopened.log_end_offset == 15
    assert [r.offset for r in read_all_records(reopened)] == list(range(15))
    assert reopened.append(make_batch(1)).first_offset == 15
    reopened.close()
    assert active.stat().st_size == 8  # one entry: the batch 15, after the batch 12-14


def test_a_garbled_codec_id_is_cut_off_like_any_damage(tmp_path: Path) -> None:
    directory = tmp_path / "t-0"
    write_closed_log(directory)
    with (directory / name(24, ".log")).open("r+b") as active:
        active.seek(len(BATCH) + 22)  # the low byte of the second batch's attributes
        active.write(b"\x07")  # codec id 7 does not exist
    log = Log.open(directory, CONFIG, recovery_point=24, clean_shutdown=False)
    assert log.log_end_offset == 27
    assert [r.offset for r in read_all_records(log)] == list(range(27))
    log.close()


# -- damage in a flushed segment --------------------------------------------------------


def flip_byte(path: Path, position: int) -> None:
    data = bytearray(path.read_bytes())
    data[position] ^= 0xFF
    path.write_bytes(data)


def offsets_read_from(log: Log, offset: int) -> list[int]:
    """The offsets one read at ``offset`` returns."""
    return [r.offset for r in records_of(log.read(offset, 1 << 20).records)]


def readable_offsets(log: Log) -> tuple[list[int], list[int]]:
    """Every offset a read returns, and every offset whose read fails as corrupt."""
    readable: list[int] = []
    refused: list[int] = []
    for offset in range(log.log_start_offset, log.log_end_offset):
        try:
            returned = offsets_read_from(log, offset)
        except CorruptRecordError:
            refused.append(offset)
            continue
        assert offset in returned, f"a read at {offset} returned {returned}"
        readable.append(offset)
    return readable, refused


@pytest.mark.parametrize("clean", [True, False])
def test_a_damaged_batch_below_the_recovery_point_costs_only_its_own_offsets(
    tmp_path: Path, clean: bool, caplog: pytest.LogCaptureFixture
) -> None:
    """The trial of issue 16: a byte flipped in a closed, flushed middle segment whose
    index is gone. Recovery keeps every byte and every later segment, and refuses only
    the damaged batch (offsets 15-17)."""
    directory = tmp_path / "t-0"
    content = write_closed_log(directory)
    middle = directory / name(12, ".log")
    flip_byte(middle, 2 * len(BATCH) - 3)  # a record byte of the batch 15-17
    damaged_bytes = middle.read_bytes()
    (directory / name(12, ".index")).unlink()

    log = Log.open(directory, CONFIG, recovery_point=30, clean_shutdown=clean)
    assert [s.base_offset for s in log.segments] == [0, 12, 24]
    assert log.log_end_offset == 30
    assert middle.read_bytes() == damaged_bytes  # nothing cut off
    assert readable_offsets(log) == ([*range(15), *range(18, 30)], [15, 16, 17])
    with pytest.raises(CorruptRecordError, match=r"offsets 15\.\.17 .* next readable offset is 18"):
        log.read(15, 1 << 20)
    assert offsets_read_from(log, 12) == [12, 13, 14]  # the read stops at the damage
    assert read_all_bytes(log, 18) == content[6 * len(BATCH) :]  # offsets 18-29 as written
    damage_logged = [r for r in caplog.records if r.levelname == "ERROR"]
    assert len(damage_logged) == 1
    assert name(12, ".log") in damage_logged[0].getMessage()
    assert "offsets 15..17" in damage_logged[0].getMessage()
    assert log.append(make_batch(1, tag="after")).first_offset == 30
    log.close()

    # Found again at the next start, though the rebuilt index is on disk by now.
    reopened = Log.open(directory, CONFIG, recovery_point=31, clean_shutdown=True)
    assert reopened.log_end_offset == 31
    assert readable_offsets(reopened) == ([*range(15), *range(18, 31)], [15, 16, 17])
    reopened.close()


@pytest.mark.parametrize("batch", range(4))
def test_damage_anywhere_in_a_segment_is_found_again_at_every_start(
    tmp_path: Path, batch: int
) -> None:
    directory = tmp_path / "t-0"
    write_closed_log(directory)
    flip_byte(directory / name(12, ".log"), (batch + 1) * len(BATCH) - 3)
    (directory / name(12, ".index")).unlink()
    lost = list(range(12 + 3 * batch, 15 + 3 * batch))
    for _start in range(3):
        log = Log.open(directory, CONFIG, recovery_point=30, clean_shutdown=True)
        readable, refused = readable_offsets(log)
        log.close()
        assert (refused, log.log_end_offset) == (lost, 30)
        assert readable == [offset for offset in range(30) if offset not in lost]


def test_damage_to_a_batch_length_refuses_the_rest_of_its_segment_only(tmp_path: Path) -> None:
    """A flipped length byte (outside the CRC) loses the way through the segment: its
    offsets from the damage to the next segment are refused, the next segment is served."""
    directory = tmp_path / "t-0"
    write_closed_log(directory)
    flip_byte(directory / name(12, ".log"), len(BATCH) + 10)  # the length of the batch 15-17
    (directory / name(12, ".index")).unlink()
    log = Log.open(directory, CONFIG, recovery_point=30, clean_shutdown=True)
    assert log.log_end_offset == 30
    assert readable_offsets(log) == ([*range(15), *range(24, 30)], list(range(15, 24)))
    log.close()


def test_a_damaged_last_segment_keeps_the_log_end_and_appends_go_to_a_new_segment(
    tmp_path: Path,
) -> None:
    directory = tmp_path / "t-0"
    write_closed_log(directory)
    last = directory / name(24, ".log")
    flip_byte(last, len(BATCH) - 3)  # the batch 24-26; the batch 27-29 stays whole
    (directory / name(24, ".index")).unlink()
    log = Log.open(directory, CONFIG, recovery_point=30, clean_shutdown=True)
    assert log.log_end_offset == 30
    assert readable_offsets(log) == ([*range(24), *range(27, 30)], [24, 25, 26])
    assert log.append(make_batch(1, tag="after")).first_offset == 30
    assert [s.base_offset for s in log.segments] == [0, 12, 24, 30]
    assert offsets_read_from(log, 30) == [30]
    log.close()


def damaged_middle_log(directory: Path) -> Log:
    """Offsets 0-29 in segments 0, 12 and 24; the batch 15-17 damaged and found so."""
    write_closed_log(directory)
    flip_byte(directory / name(12, ".log"), 2 * len(BATCH) - 3)
    (directory / name(12, ".index")).unlink()
    return Log.open(directory, CONFIG, recovery_point=30, clean_shutdown=True)


def test_a_truncation_past_the_damage_keeps_it_and_appends_to_a_new_segment(
    tmp_path: Path,
) -> None:
    log = damaged_middle_log(tmp_path / "t-0")
    log.truncate_to(21)
    assert [s.base_offset for s in log.segments] == [0, 12, 21]
    assert log.append(make_batch(2, tag="new")).first_offset == 21
    assert readable_offsets(log) == ([*range(15), *range(18, 23)], [15, 16, 17])
    log.close()


def test_a_truncation_below_the_damage_takes_it_away(tmp_path: Path) -> None:
    log = damaged_middle_log(tmp_path / "t-0")
    log.truncate_to(13)  # the batch 12-14 holds 13: it goes, and everything after it
    assert log.log_end_offset == 12
    assert log.active_segment.damage == ()
    assert log.append(make_batch(4, tag="new")).first_offset == 12
    assert readable_offsets(log) == (list(range(16)), [])
    log.close()


def test_an_idempotent_producer_goes_on_after_damage_in_its_batches(tmp_path: Path) -> None:
    """The producer state is replayed over the rebuilt segment: the damaged batch is
    stepped over, the producer's later batches are still known (a retry is answered
    with its offsets) and its next sequence is accepted."""
    directory = tmp_path / "t-0"
    log = Log.open(directory, CONFIG)
    for batch in range(15):  # five to a segment: segments at 0, 15 and 30
        log.append(idempotent_batch(7, 0, 3 * batch, 3, tag=f"{batch}-"))
    log.close()
    logs = sorted(directory.glob("*.log"))
    first_batch = next(iter_batches(logs[1].read_bytes()))
    flip_byte(logs[1], first_batch.size + 11)  # the length of the segment's second batch
    logs[1].with_suffix(".index").unlink()

    log = Log.open(directory, CONFIG, recovery_point=45, clean_shutdown=True)
    damaged = range(first_batch.last_offset + 1, int(logs[2].name[:20]))
    assert readable_offsets(log)[1] == list(damaged)
    retry = log.append(idempotent_batch(7, 0, 42, 3, tag="14-"))
    assert (retry.duplicate, retry.first_offset, retry.last_offset) == (True, 42, 44)
    assert log.append(idempotent_batch(7, 0, 45, 3, tag="next")).first_offset == 45
    log.close()


def test_a_damaged_last_segment_without_a_recovery_point_goes_on_at_the_damage(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """Without the recovery point (a lost checkpoint) nothing tells where the damaged tail
    ended: its bytes stay, the log goes on at the damage, and the log says so."""
    directory = tmp_path / "t-0"
    write_closed_log(directory)
    last = directory / name(24, ".log")
    flip_byte(last, len(BATCH) + 10)  # the length of the batch 27-29
    (directory / name(24, ".index")).unlink()
    log = Log.open(directory, CONFIG, recovery_point=0, clean_shutdown=True)
    assert log.log_end_offset == 27
    assert [s.base_offset for s in log.segments] == [0, 12, 24, 27]
    assert readable_offsets(log) == (list(range(27)), [])
    assert "log goes on at offset 27" in caplog.text
    log.close()
