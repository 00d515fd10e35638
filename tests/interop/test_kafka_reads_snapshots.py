"""Producer-state ``.snapshot`` files both ways: Kafka 4.1.1's DumpLogSegments reads the
snapshots tierlog writes and prints the producers tierlog holds, and tierlog reads the
snapshots a real broker wrote, finds in them what the broker's log says of its
producers, and recognises a retry of the broker's last batch as a duplicate."""

from __future__ import annotations

import re
from collections.abc import Iterator
from pathlib import Path

import pytest

from tierlog.storage.config import LogConfig
from tierlog.storage.log import Log
from tierlog.storage.producer_snapshot import (
    SnapshotEntry,
    list_snapshot_offsets,
    read_snapshot,
    snapshot_path,
)
from tierlog.storage.records import (
    BatchHeader,
    SimpleRecord,
    build_batch,
    parse_header,
    patch_offsets,
)

from .datasets import INDEX_INTERVAL_BYTES, SEGMENT_BYTES, KafkaWrittenLog
from .kafka import run_dump_log_segments

pytestmark = pytest.mark.interop

CONFIG = LogConfig.from_properties(
    {"segment.bytes": SEGMENT_BYTES, "index.interval.bytes": INDEX_INTERVAL_BYTES}
)
SMALL = LogConfig.from_properties({"segment.bytes": 400, "index.interval.bytes": 0})
T0 = 1_700_000_000_000
_FIELD = re.compile(r"(\w+): (\S+)")


def _batch(
    producer_id: int, epoch: int, sequence: int, count: int, *, transactional: bool = False
) -> bytes:
    records = [SimpleRecord(b"k", f"v{i}".encode(), T0 + sequence + i) for i in range(count)]
    return build_batch(
        records,
        producer_id=producer_id,
        producer_epoch=epoch,
        base_sequence=sequence,
        is_transactional=transactional,
    )


def dumped_producers(path: Path) -> list[dict[str, str]]:
    """What DumpLogSegments prints for each producer of a snapshot file."""
    output = run_dump_log_segments([path])
    return [
        dict(_FIELD.findall(line)) for line in output.splitlines() if line.startswith("producerId:")
    ]


def as_dumped(entry: SnapshotEntry) -> dict[str, str]:
    """A snapshot entry as Kafka prints it after loading it into a ProducerStateEntry."""
    txn = entry.current_txn_first_offset
    has_batch = entry.last_offset >= 0
    first_sequence = (entry.last_sequence - entry.offset_delta) % 2**31
    return {
        "producerId": str(entry.producer_id),
        "producerEpoch": str(entry.producer_epoch),
        "coordinatorEpoch": str(entry.coordinator_epoch),
        "currentTxnFirstOffset": f"OptionalLong[{txn}]" if txn >= 0 else "OptionalLong.empty",
        "lastTimestamp": str(entry.timestamp),
        "firstSequence": str(first_sequence if has_batch else -1),
        "lastSequence": str(entry.last_sequence),
        "lastOffset": str(entry.last_offset),
        "offsetDelta": str(entry.offset_delta),
        "timestamp": str(entry.timestamp),
    }


def test_kafka_reads_the_producers_tierlog_snapshots(tmp_path: Path) -> None:
    log = Log.open(tmp_path / "t-0", SMALL)
    for i in range(6):
        log.append(_batch(7, 0, 3 * i, 3))
        log.append(_batch(11, 2, (2**31 - 4 + 2 * i) % 2**31, 2))  # wraps past int32 max
    log.append(_batch(7, 1, 0, 1))  # a new epoch
    log.append(_batch(9, 0, 0, 2, transactional=True))  # an open transaction
    expected = {pid: entry.to_snapshot() for pid, entry in log.producer_state.producers.items()}
    end = log.log_end_offset
    log.close()
    offsets = list_snapshot_offsets(tmp_path / "t-0")
    assert len(offsets) > 1 and offsets[-1] == end
    for offset in offsets:
        path = snapshot_path(tmp_path / "t-0", offset)
        ours = sorted(read_snapshot(path), key=lambda entry: entry.producer_id)
        dumped = sorted(dumped_producers(path), key=lambda fields: int(fields["producerId"]))
        assert dumped == [as_dumped(entry) for entry in ours], path.name
    final = read_snapshot(snapshot_path(tmp_path / "t-0", end))
    assert {entry.producer_id: entry for entry in final} == expected
    assert expected[9].current_txn_first_offset == end - 2
    assert (expected[7].producer_epoch, expected[7].last_sequence) == (1, 0)
    assert expected[11].last_sequence == (2**31 - 4 + 11) % 2**31


def log_batches(partition_dir: Path) -> Iterator[BatchHeader]:
    """Every batch header of a partition directory, in offset order."""
    for path in sorted(partition_dir.glob("*.log")):
        data = path.read_bytes()
        position = 0
        while position < len(data):
            header = parse_header(data, position)
            yield header
            position = header.end_position


def producers_below(partition_dir: Path, offset: int) -> dict[int, SnapshotEntry]:
    """Each producer's last data batch below ``offset``, as a snapshot would hold it."""
    last: dict[int, SnapshotEntry] = {}
    for header in log_batches(partition_dir):
        if header.last_offset >= offset or header.producer_id < 0 or header.is_control:
            continue
        last[header.producer_id] = SnapshotEntry(
            producer_id=header.producer_id,
            producer_epoch=header.producer_epoch,
            last_sequence=header.last_sequence,
            last_offset=header.last_offset,
            offset_delta=header.last_offset - header.base_offset,
            timestamp=header.max_timestamp,
            coordinator_epoch=-1,
            current_txn_first_offset=-1,
        )
    return last


@pytest.mark.parametrize("which", ["clean", "running"])
def test_tierlog_reads_the_snapshots_kafka_wrote(
    which: str, kafka_written_log: KafkaWrittenLog, kafka_unclean_log: KafkaWrittenLog
) -> None:
    written = kafka_written_log if which == "clean" else kafka_unclean_log
    directory = written.partition_dir
    offsets = list_snapshot_offsets(directory)
    assert offsets, f"the broker left no snapshot in {directory}"
    for offset in offsets:
        found = {
            entry.producer_id: entry for entry in read_snapshot(snapshot_path(directory, offset))
        }
        assert found == producers_below(directory, offset), f"snapshot {offset}"
    if which == "clean":
        assert offsets[-1] == len(written.records)  # the broker's close-time snapshot
        assert producers_below(directory, offsets[-1]), "Kafka's producer is idempotent"


@pytest.mark.parametrize("clean", [True, False], ids=["clean-shutdown", "recovered"])
def test_a_retry_of_kafkas_last_batch_is_a_duplicate_after_tierlog_opens_the_log(
    clean: bool, kafka_log_copy: KafkaWrittenLog, kafka_unclean_log_copy: KafkaWrittenLog
) -> None:
    written = kafka_log_copy if clean else kafka_unclean_log_copy
    log = Log.open(written.partition_dir, CONFIG, clean_shutdown=clean)
    try:
        last = [h for h in log_batches(written.partition_dir) if h.producer_id >= 0][-1]
        found = log.read(last.base_offset, last.size).records
        retry = bytearray(found[: last.size])
        patch_offsets(retry, parse_header(retry, 0), 0, -1)  # as the producer sent it
        end = log.log_end_offset
        info = log.append(bytes(retry))
        assert info.duplicate
        assert (info.first_offset, info.last_offset) == (last.base_offset, last.last_offset)
        assert log.log_end_offset == end
        following = _batch(last.producer_id, last.producer_epoch, last.last_sequence + 1, 1)
        assert log.append(following).first_offset == end
    finally:
        log.close()
