"""tierlog opens a partition directory that a real Kafka 4.1.1 broker wrote and closed,
and reads back exactly what Kafka's producer sent: offsets, timestamps, keys, values,
headers, in every codec; its timestamp lookups agree with Kafka's ListOffsets rules."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from tierlog.storage.config import LogConfig
from tierlog.storage.log import EARLIEST_TIMESTAMP, LATEST_TIMESTAMP, MAX_TIMESTAMP, Log
from tierlog.storage.records import Record, decode_records, iter_batches

from .datasets import INDEX_INTERVAL_BYTES, SEGMENT_BYTES, KafkaWrittenLog
from .kafka import ProducedRecord, segment_files, verify_partition_dir

pytestmark = pytest.mark.interop

CONFIG = LogConfig.from_properties(
    {"segment.bytes": SEGMENT_BYTES, "index.interval.bytes": INDEX_INTERVAL_BYTES}
)


def _read_all(log: Log) -> Iterator[Record]:
    offset = log.log_start_offset
    while offset < log.log_end_offset:
        chunk = log.read(offset, 64 * 1024).records
        assert chunk, f"empty read at {offset} below the log end {log.log_end_offset}"
        for header in iter_batches(chunk):
            for record in decode_records(chunk, header):
                if record.offset >= offset:
                    yield record
            offset = header.last_offset + 1


def _as_read(produced: ProducedRecord) -> Record:
    return Record(
        offset=produced.offset,
        timestamp=produced.timestamp_ms,
        key=produced.key,
        value=produced.value,
        headers=produced.headers,
    )


@pytest.fixture(params=[True, False], ids=["clean-shutdown", "recovered"])
def kafka_log(request: pytest.FixtureRequest, kafka_log_copy: KafkaWrittenLog) -> Iterator[Log]:
    log = Log.open(kafka_log_copy.partition_dir, CONFIG, clean_shutdown=request.param)
    yield log
    log.close()


def test_tierlog_reads_every_record_kafka_wrote(
    kafka_log: Log, kafka_written_log: KafkaWrittenLog
) -> None:
    produced = kafka_written_log.records
    assert kafka_log.log_start_offset == 0
    assert kafka_log.log_end_offset == len(produced)
    assert list(_read_all(kafka_log)) == [_as_read(record) for record in produced]


def test_tierlog_sees_kafkas_segments(kafka_log: Log, kafka_written_log: KafkaWrittenLog) -> None:
    kafka_bases = [
        int(path.stem)
        for path in segment_files(kafka_written_log.partition_dir)
        if path.suffix == ".log"
    ]
    assert [segment.base_offset for segment in kafka_log.segments] == kafka_bases


def _expected_offset_for(records: list[ProducedRecord], target_ms: int) -> tuple[int, int] | None:
    """ListOffsets: the first record, in offset order, whose timestamp is >= the target."""
    for record in records:
        if record.timestamp_ms >= target_ms:
            return record.timestamp_ms, record.offset
    return None


def test_offset_for_timestamp_agrees_with_kafkas_rules(
    kafka_log: Log, kafka_written_log: KafkaWrittenLog
) -> None:
    records = kafka_written_log.records
    timestamps = sorted({record.timestamp_ms for record in records})
    targets = [timestamps[0] - 1, *timestamps[::37], timestamps[-1], timestamps[-1] + 1]
    targets += [ts + 1 for ts in timestamps[5::53]]  # between records
    for target in targets:
        found = kafka_log.offset_for_timestamp(target)
        actual = None if found is None else (found.timestamp, found.offset)
        assert actual == _expected_offset_for(records, target), f"target {target}"

    latest = max(records, key=lambda record: (record.timestamp_ms, -record.offset))
    found = kafka_log.offset_for_timestamp(MAX_TIMESTAMP)
    assert found is not None and (found.timestamp, found.offset) == (
        latest.timestamp_ms,
        latest.offset,
    )
    earliest = kafka_log.offset_for_timestamp(EARLIEST_TIMESTAMP)
    assert earliest is not None and earliest.offset == 0
    end = kafka_log.offset_for_timestamp(LATEST_TIMESTAMP)
    assert end is not None and end.offset == len(records)


def test_tierlog_leaves_kafkas_files_as_they_were(kafka_log_copy: KafkaWrittenLog) -> None:
    """Opening and closing a cleanly shut down Kafka log rewrites nothing Kafka would see."""
    files = segment_files(kafka_log_copy.partition_dir)
    before = {path.name: path.read_bytes() for path in files}
    Log.open(kafka_log_copy.partition_dir, CONFIG, clean_shutdown=True).close()
    after = {path.name: path.read_bytes() for path in segment_files(kafka_log_copy.partition_dir)}
    assert after == before


def test_tierlog_recovers_a_crashed_kafka_log(kafka_unclean_log_copy: KafkaWrittenLog) -> None:
    """From the files a running broker had on disk (preallocated active indexes, no
    clean-shutdown marker): tierlog recovers every record, and after it closes the log
    Kafka's checks find the indexes valid."""
    partition_dir = kafka_unclean_log_copy.partition_dir
    log = Log.open(partition_dir, CONFIG, clean_shutdown=False)
    try:
        assert list(_read_all(log)) == [_as_read(r) for r in kafka_unclean_log_copy.records]
    finally:
        log.close()
    assert verify_partition_dir(partition_dir).errors == []
