"""``tierlog dump-log`` on segments tierlog wrote, healthy and damaged.

The expected values come from what was appended (offsets, codecs, records) and from
the raw file bytes, never from the dump's own reading of them.
"""

from __future__ import annotations

import re
import struct
from pathlib import Path
from typing import Any

import pytest

from tests.storage.transactions import TxnWriter
from tierlog.cli.main import main
from tierlog.storage.config import TimestampType
from tierlog.storage.log import Log
from tierlog.storage.records import (
    CompressionType,
    ControlRecordType,
    EndTransactionMarker,
    SimpleRecord,
    build_batch,
    build_end_txn_marker_batch,
    build_legacy_message_set,
    iter_batches,
)
from tierlog.tools.dump_log import DumpOptions, DumpReport, dump_files

from .segments import WrittenLog

BATCH_LINE = re.compile(
    r"^baseOffset: (\d+) lastOffset: (\d+) count: (\d+) .* position: (\d+) CreateTime: (-?\d+) "
    r"size: (\d+) magic: 2 compresscodec: (\w+) crc: (\d+) isvalid: (true|false)$"
)
RECORD_LINE = re.compile(
    r"^\| offset: (\d+) CreateTime: (-?\d+) keySize: (-?\d+) valueSize: (-?\d+)"
)


def dump(paths: list[Path], **options: Any) -> tuple[list[str], DumpReport]:
    report = DumpReport()
    lines = list(dump_files(paths, DumpOptions(**options), report))
    return lines, report


def index_files(written: WrittenLog) -> list[Path]:
    return sorted(written.directory.glob("*.index")) + sorted(written.directory.glob("*.timeindex"))


# -- healthy segments ------------------------------------------------------------------


def test_one_line_per_batch_with_its_offsets_position_and_codec(written_log: WrittenLog) -> None:
    assert len(written_log.log_files) > 1, "the fixture must roll"
    lines, report = dump(written_log.log_files)

    batch_lines = [m for line in lines if (m := BATCH_LINE.match(line))]
    assert len(batch_lines) == len(written_log.batches)
    for match, appended in zip(batch_lines, written_log.batches, strict=True):
        base, last, count = int(match[1]), int(match[2]), int(match[3])
        assert (base, last, count) == (
            appended.base_offset,
            appended.last_offset,
            len(appended.records),
        )
        assert match[5] == str(max(r.timestamp for r in appended.records))
        assert match[7] == appended.codec.name.lower()
        assert match[9] == "true"
    assert {m[7] for m in batch_lines} == {"none", "gzip", "snappy", "lz4", "zstd"}
    assert report.exit_code == 0 and report.batches == len(written_log.batches)


def test_positions_and_sizes_are_those_of_the_file(written_log: WrittenLog) -> None:
    for log_path in written_log.log_files:
        data = log_path.read_bytes()
        truth = [(h.position, h.size, h.crc) for h in iter_batches(data)]
        lines, _ = dump([log_path])
        assert lines[:2] == [f"Dumping {log_path}", f"Log starting offset: {int(log_path.stem)}"]
        dumped = [(int(m[4]), int(m[6]), int(m[8])) for m in map(BATCH_LINE.match, lines) if m]
        assert dumped == truth


def test_deep_iteration_prints_every_record_in_order(written_log: WrittenLog) -> None:
    lines, report = dump(written_log.log_files, deep_iteration=True)

    records = [m for line in lines if (m := RECORD_LINE.match(line))]
    assert len(records) == written_log.record_count == report.records
    assert [int(m[1]) for m in records] == list(range(written_log.record_count))
    appended = [r for batch in written_log.batches for r in batch.records]
    for match, record in zip(records, appended, strict=True):
        assert int(match[2]) == record.timestamp
        assert int(match[3]) == (-1 if record.key is None else len(record.key))
        assert int(match[4]) == (-1 if record.value is None else len(record.value))
    assert "key:" not in lines[3] and "payload:" not in "".join(lines)
    assert not report.non_consecutive


def test_print_data_log_shows_keys_payloads_and_headers(written_log: WrittenLog) -> None:
    lines, _ = dump(written_log.log_files[:1], print_data_log=True)
    record_lines = [line for line in lines if line.startswith("|")]

    assert record_lines[0].endswith(
        "keySize: -1 valueSize: -1 sequence: -1 headerKeys: [h1,h2] headers: [h1=v0,h2=null]"
    )  # record 0 has a null key and value: no "key:" nor "payload:", as in Kafka
    assert record_lines[1].endswith("headerKeys: [] key: key-1 payload: value-1-value-1-")


def test_hex_decoder(written_log: WrittenLog) -> None:
    lines, _ = dump(written_log.log_files[:1], print_data_log=True, key_decoder="hex")
    assert f"key: {b'key-1'.hex()} payload: value-1-" in lines[4]


def test_verify_index_only_passes_silently_on_good_indexes(written_log: WrittenLog) -> None:
    paths = index_files(written_log)
    lines, report = dump(paths, verify_index_only=True)

    assert lines == [f"Dumping {path}" for path in paths]
    assert report.exit_code == 0 and not report.problems()
    assert report.index_entries > len(paths)


def test_index_entries_are_printed_kafka_style(written_log: WrittenLog) -> None:
    log_path = written_log.log_files[1]
    index, timeindex = log_path.with_suffix(".index"), log_path.with_suffix(".timeindex")
    base = int(log_path.stem)
    offsets = struct.iter_unpack(">ii", index.read_bytes())
    times = struct.iter_unpack(">qi", timeindex.read_bytes())
    expected = [
        f"Dumping {index}",
        *(f"offset: {base + rel} position: {pos}" for rel, pos in offsets),
        f"Dumping {timeindex}",
        *(f"timestamp: {ts} offset: {base + rel}" for ts, rel in times),
    ]
    lines, report = dump([index, timeindex])
    assert lines == expected
    assert report.exit_code == 0


def test_index_sanity_check_passes_on_good_indexes(written_log: WrittenLog) -> None:
    paths = index_files(written_log)
    lines, report = dump(paths, index_sanity_only=True)
    assert [line for line in lines if not line.startswith("Dumping")] == [
        f"{path} passed sanity check." for path in paths
    ]
    assert report.exit_code == 0


# -- damaged segments ------------------------------------------------------------------


def test_index_entry_pointing_at_the_wrong_batch_is_a_mismatch(written_log: WrittenLog) -> None:
    log_path = written_log.log_files[0]
    index = log_path.with_suffix(".index")
    entries = list(struct.iter_unpack(">ii", index.read_bytes()))
    headers = list(iter_batches(log_path.read_bytes()))
    slot = 0
    indexed_offset = int(log_path.stem) + entries[slot][0]
    # Point the first entry at the batch just before the one it names.
    wrong = next(h for h in headers if h.end_position == entries[slot][1])
    entries[slot] = (entries[slot][0], wrong.position)
    index.write_bytes(b"".join(struct.pack(">ii", *entry) for entry in entries))

    _, report = dump([index], verify_index_only=True)

    assert report.index_mismatches[index] == [(indexed_offset, wrong.last_offset)]
    assert report.exit_code == 1
    summary = list(report.stderr_lines())
    assert f"Mismatches in :{index}" in summary
    assert f"  Index offset: {indexed_offset}, log offset: {wrong.last_offset}" in summary
    assert summary[-1] == "dump-log found problems: 1 index mismatch"


def test_index_with_a_torn_entry_fails_the_sanity_check(written_log: WrittenLog) -> None:
    index = written_log.log_files[1].with_suffix(".index")
    index.write_bytes(index.read_bytes() + b"\x00\x00\x01")

    lines, report = dump([index], index_sanity_only=True)

    assert lines == [f"Dumping {index}"]
    assert "is not a multiple of 8" in report.failed_sanity[index]
    assert report.exit_code == 1


def test_index_positions_out_of_order_fail_the_sanity_check(written_log: WrittenLog) -> None:
    index = written_log.log_files[0].with_suffix(".index")
    entries = list(struct.iter_unpack(">ii", index.read_bytes()))
    entries[0], entries[1] = (entries[0][0], entries[1][1]), (entries[1][0], entries[0][1])
    index.write_bytes(b"".join(struct.pack(">ii", *entry) for entry in entries))

    _, report = dump([index], index_sanity_only=True)
    assert report.failed_sanity[index] == "positions are not strictly increasing"


def test_time_index_errors_are_reported_kafka_style(written_log: WrittenLog) -> None:
    timeindex = written_log.log_files[0].with_suffix(".timeindex")
    entries = list(struct.iter_unpack(">qi", timeindex.read_bytes()))
    assert len(entries) >= 3
    base = int(timeindex.stem)
    good_timestamp = entries[0][0]
    entries[0] = (good_timestamp + 1_000_000, entries[0][1])  # wrong, and now out of order
    entries[1] = (entries[1][0], entries[1][1] - 1)  # not a batch's last offset
    timeindex.write_bytes(b"".join(struct.pack(">qi", *entry) for entry in entries))

    _, report = dump([timeindex], verify_index_only=True)

    assert report.time_mismatches[timeindex] == [(good_timestamp + 1_000_000, good_timestamp)]
    assert report.out_of_order[timeindex] == [(entries[1][0], good_timestamp + 1_000_000)]
    not_found = report.offsets_not_found[timeindex]
    assert not_found == [(base + entries[1][1], base + entries[1][1] + 1)]
    summary = "\n".join(report.stderr_lines())
    assert f"Found timestamp mismatch in :{timeindex}" in summary
    assert f"Found out of order timestamp in :{timeindex}" in summary
    assert "Indexed offset: " in summary
    assert report.exit_code == 1


def test_a_flipped_byte_makes_the_batch_invalid(written_log: WrittenLog) -> None:
    log_path = written_log.log_files[0]
    data = bytearray(log_path.read_bytes())
    victim = list(iter_batches(data))[1]
    data[victim.position + victim.size - 3] ^= 0x40
    log_path.write_bytes(data)

    lines, report = dump([log_path])

    valid = [m[9] for m in map(BATCH_LINE.match, lines) if m]
    assert valid.count("false") == 1 and valid[1] == "false"
    assert [h.position for h in report.invalid_batches[log_path]] == [victim.position]
    assert report.exit_code == 1
    assert "dump-log found problems: 1 invalid batch" in list(report.stderr_lines())


def test_a_torn_tail_is_reported_as_invalid_bytes(written_log: WrittenLog) -> None:
    log_path = written_log.log_files[-1]
    data = log_path.read_bytes()
    log_path.write_bytes(data[:-10])
    last = list(iter_batches(data))[-1]

    lines, report = dump([log_path])

    assert lines[-1] == f"Found {last.size - 10} invalid bytes at the end of {log_path.name}"
    assert report.exit_code == 1


def test_max_bytes_stops_early_without_calling_the_rest_invalid(written_log: WrittenLog) -> None:
    log_path = written_log.log_files[0]
    headers = list(iter_batches(log_path.read_bytes()))
    limit = headers[0].size + headers[1].size + 1

    lines, report = dump([log_path], max_bytes=limit)

    assert sum(1 for line in lines if BATCH_LINE.match(line)) == 2
    assert report.exit_code == 0


def test_preallocated_index_of_a_crashed_broker(written_log: WrittenLog) -> None:
    """An active segment's index keeps its zero-filled tail after a crash: the dump stops
    at it (as Kafka's does) and the sanity check says the broker would rebuild it."""
    index = written_log.log_files[-1].with_suffix(".index")
    written_entries = len(index.read_bytes()) // 8
    assert written_entries > 1
    index.write_bytes(index.read_bytes() + bytes(8 * 100))

    lines, report = dump([index])
    assert report.exit_code == 0 and report.index_entries == written_entries
    assert len(lines) == 1 + written_entries

    _, report = dump([index], index_sanity_only=True)
    assert report.failed_sanity[index] == "offsets are not strictly increasing"


# -- other formats -----------------------------------------------------------------------


@pytest.mark.parametrize("magic", [0, 1])
@pytest.mark.parametrize("codec", [CompressionType.NONE, CompressionType.GZIP, CompressionType.LZ4])
def test_legacy_message_sets(tmp_path: Path, magic: int, codec: CompressionType) -> None:
    records = [SimpleRecord(key=b"k%d" % i, value=b"v%d" % i, timestamp=1000 + i) for i in range(3)]
    log_path = tmp_path / "00000000000000000010.log"
    log_path.write_bytes(
        build_legacy_message_set(records[:2], magic=magic, compression=codec, base_offset=10)
        + build_legacy_message_set(records[2:], magic=magic, compression=codec, base_offset=12)
    )

    lines, report = dump([log_path], print_data_log=True)

    label = "NoTimestampType" if magic == 0 else "CreateTime"
    batch_lines = [line for line in lines if line.startswith("offset:")]
    expected_offsets = [10, 11, 12] if codec is CompressionType.NONE else [11, 12]
    assert [int(line.split()[1]) for line in batch_lines] == expected_offsets
    assert all(
        f"magic: {magic} compresscodec: {codec.name.lower()}" in line for line in batch_lines
    )
    assert all("isvalid: true" in line for line in batch_lines)
    record_lines = [line for line in lines if line.startswith("|")]
    stamps = [-1] * 3 if magic == 0 else [1000, 1001, 1002]
    for i, line in enumerate(record_lines):
        assert line.startswith(f"| offset: {10 + i} {label}: {stamps[i]} keySize: 2 valueSize: 2 ")
        assert "isValid: true crc: " in line and line.endswith(f"key: k{i} payload: v{i}")
    assert len(record_lines) == 3 and report.exit_code == 0


def test_v1_log_append_time(tmp_path: Path) -> None:
    records = [SimpleRecord(value=b"x", timestamp=5) for _ in range(2)]
    log_path = tmp_path / "00000000000000000000.log"
    log_path.write_bytes(
        build_legacy_message_set(
            records,
            magic=1,
            compression=CompressionType.SNAPPY,
            timestamp_type=TimestampType.LOG_APPEND_TIME,
            log_append_time_ms=777,
        )
    )
    lines, _ = dump([log_path], deep_iteration=True)
    assert "LogAppendTime: 777" in lines[2]
    assert lines[3].startswith("| offset: 0 LogAppendTime: 777 keySize: -1 valueSize: 1")


def test_control_batches_show_their_marker(tmp_path: Path) -> None:
    log_path = tmp_path / "00000000000000000000.log"
    data = build_batch(
        [SimpleRecord(value=b"in a txn", timestamp=1)],
        producer_id=42,
        producer_epoch=3,
        base_sequence=7,
        is_transactional=True,
    )
    marker = build_end_txn_marker_batch(
        EndTransactionMarker(ControlRecordType.COMMIT, 9),
        producer_id=42,
        producer_epoch=3,
        timestamp_ms=2,
        base_offset=1,
    )
    log_path.write_bytes(data + marker)

    lines, _ = dump([log_path], print_data_log=True)

    assert "baseSequence: 7 lastSequence: 7 producerId: 42 producerEpoch: 3" in lines[2]
    assert "isTransactional: true isControl: false" in lines[2]
    assert lines[3].endswith("sequence: 7 headerKeys: [] payload: in a txn")
    assert "isTransactional: true isControl: true" in lines[4]
    assert lines[5].endswith("endTxnMarker: COMMIT coordinatorEpoch: 9")


# -- the command line ---------------------------------------------------------------------


def test_main_prints_and_exits_zero_on_good_files(
    written_log: WrittenLog, capsys: pytest.CaptureFixture[str]
) -> None:
    files = ",".join(str(p) for p in [written_log.log_files[0], *index_files(written_log)])
    status = main(["dump-log", "--files", files, "--deep-iteration"])
    out, err = capsys.readouterr()
    assert status == 0 and err == ""
    assert out.count("baseOffset:") > 1 and out.count("| offset:") > 1
    assert "offset: 0 position: 0" not in out  # the first batch is never indexed


def test_main_exits_one_and_says_why_on_a_corrupt_log(
    written_log: WrittenLog, capsys: pytest.CaptureFixture[str]
) -> None:
    log_path = written_log.log_files[0]
    data = bytearray(log_path.read_bytes())
    data[100] ^= 0xFF
    log_path.write_bytes(data)
    status = main(["dump-log", "--files", str(log_path)])
    out, err = capsys.readouterr()
    assert status == 1
    assert "isvalid: false" in out
    assert "dump-log found problems: 1 invalid batch" in err


def test_unsupported_and_missing_files_exit_two(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    snapshot = tmp_path / "00000000000000000000.snapshot"
    snapshot.write_bytes(b"")
    status = main(["dump-log", "--files", f"{snapshot},{tmp_path / 'nope.log'}"])
    _, err = capsys.readouterr()
    assert status == 2
    assert "producer state snapshots (.snapshot) are not supported by dump-log yet" in err
    assert "nope.log" in err


def test_index_without_its_log_cannot_be_checked(
    written_log: WrittenLog, capsys: pytest.CaptureFixture[str]
) -> None:
    index = written_log.log_files[0].with_suffix(".index")
    written_log.log_files[0].unlink()
    assert main(["dump-log", "--files", str(index)]) == 2
    assert "no log file 00000000000000000000.log beside the index" in capsys.readouterr().err


def test_dump_never_writes_to_what_it_reads(written_log: WrittenLog) -> None:
    paths = [*written_log.log_files, *index_files(written_log)]
    for path in paths:
        path.chmod(0o444)
    before = {path: (path.read_bytes(), path.stat().st_mtime_ns) for path in paths}
    _, report = dump(paths, deep_iteration=True)
    _, checked = dump(paths, verify_index_only=True)
    assert report.exit_code == checked.exit_code == 0
    assert {path: (path.read_bytes(), path.stat().st_mtime_ns) for path in paths} == before


def test_progress_goes_to_stderr_only(
    written_log: WrittenLog, capsys: pytest.CaptureFixture[str]
) -> None:
    log_path = written_log.log_files[0]
    assert main(["dump-log", "--progress", "--files", str(log_path)]) == 0
    out, err = capsys.readouterr()
    assert log_path.name in err and "B/s" in err
    assert "B/s" not in out and out.startswith(f"Dumping {log_path}\n")


def test_an_unknown_codec_id_in_an_indexed_batch_is_a_mismatch(written_log: WrittenLog) -> None:
    log_path = written_log.log_files[0]
    index = log_path.with_suffix(".index")
    relative, position = struct.unpack(">ii", index.read_bytes()[:8])
    data = bytearray(log_path.read_bytes())
    data[position + 22] |= 0x07  # attributes' low byte: codec id 7 does not exist
    log_path.write_bytes(data)

    lines, report = dump([index, log_path])

    assert report.index_mismatches[index] == [(int(log_path.stem) + relative, -1)]
    assert "unknown compression codec id 7" in report.invalid_bytes[log_path]
    assert lines[-1].startswith("Found ") and report.exit_code == 1


def test_a_txn_index_prints_each_aborted_transaction_as_kafka_does(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    log = Log.open(tmp_path / "t-0")
    txns = TxnWriter(log)
    txns.send(7, 2)  # 0-1
    txns.send(8, 1)  # 2
    txns.end(7, commit=False)  # 3: producer 8's transaction is still open
    txns.end(8, commit=False)  # 4
    log.close()
    index = tmp_path / "t-0" / "00000000000000000000.txnindex"
    assert main(["dump-log", "--files", str(index)]) == 0
    out, _ = capsys.readouterr()
    assert out.splitlines() == [
        f"Dumping {index}",
        "version: 0 producerId: 7 firstOffset: 0 lastOffset: 3 lastStableOffset: 2",
        "version: 0 producerId: 8 firstOffset: 2 lastOffset: 4 lastStableOffset: 5",
    ]
    index.write_bytes(b"\x00\x07" + index.read_bytes()[2:])
    assert main(["dump-log", "--files", str(index)]) == 2
    assert "has version 7" in capsys.readouterr().err
