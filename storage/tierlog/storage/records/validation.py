"""Batch-level checks on a produce request's records, before the log appends them.

The broker appends what the producer built, byte for byte (only base offset and
leader epoch are patched in, and the LogAppendTime stamp if the topic wants it), so
everything must be checked on the headers: whole-batch bounds, magic 2, CRC-32C,
the count against the offset deltas, size limits, codec, producer fields and
timestamps.  Records are decoded only when a compacted topic needs every record to
have a key.  The rules and error types follow Kafka's LogValidator and
UnifiedLog.analyzeAndValidateRecords.  The input buffer is never modified.
"""

from __future__ import annotations

from tierlog.storage.config import TimestampType
from tierlog.storage.errors import (
    CorruptRecordError,
    InvalidRecordError,
    InvalidTimestampError,
    RecordTooLargeError,
    UnsupportedCompressionTypeError,
    UnsupportedForMessageFormatError,
)
from tierlog.storage.records.batch import (
    ATTRIBUTES_OFFSET,
    CRC_OFFSET,
    LENGTH_OFFSET,
    MAGIC_OFFSET,
    NO_PRODUCER_ID,
    NO_TIMESTAMP,
    RECORDS_OFFSET,
    V2_HEADER_SIZE,
    BatchHeader,
    decode_records,
    parse_header,
)
from tierlog.storage.records.buffers import ReadableBuffer
from tierlog.storage.records.crc import crc32c
from tierlog.storage.records.legacy import LOG_OVERHEAD
from tierlog.storage.records.record import MIN_RECORD_SIZE

__all__ = ["validate_produce"]


def validate_produce(
    buf: ReadableBuffer,
    *,
    max_message_bytes: int,
    require_keys: bool,
    timestamp_type: TimestampType,
    now_ms: int,
    before_max_ms: int,
    after_max_ms: int,
    allow_control: bool = False,
) -> list[BatchHeader]:
    """The headers of the v2 batches in ``buf``, or the typed error of the first bad one.

    ``timestamp_type`` is the topic's; only CreateTime topics bound the producer's
    timestamps (``now_ms - before_max_ms <= t <= now_ms + after_max_ms``).
    ``require_keys`` (compacted topics) decodes every record to check its key.
    Control batches are refused unless ``allow_control`` (a transaction coordinator's
    markers; Kafka's AppendOrigin.COORDINATOR), and then need a producer id.
    """
    view = memoryview(buf)
    if len(view) == 0:
        raise InvalidRecordError("produce request holds no record batches")
    headers: list[BatchHeader] = []
    pos = 0
    while pos < len(view):
        header = _parse(view, pos)
        _check_batch(view, header, max_message_bytes, allow_control)
        if timestamp_type is TimestampType.CREATE_TIME:
            _check_timestamps(header, now_ms, before_max_ms, after_max_ms)
        if require_keys:
            _check_keys(view, header, timestamp_type, now_ms, before_max_ms, after_max_ms)
        headers.append(header)
        pos = header.end_position
    return headers


def _parse(view: memoryview, pos: int) -> BatchHeader:
    remaining = len(view) - pos
    if remaining < LOG_OVERHEAD + 5:
        raise CorruptRecordError(f"{remaining} trailing bytes at {pos} are not a batch")
    magic = view[pos + MAGIC_OFFSET]
    if magic in (0, 1):
        raise UnsupportedForMessageFormatError(f"produce with magic {magic}; only v2 is accepted")
    if magic != 2:
        raise CorruptRecordError(f"unknown magic {magic} at {pos}")
    if remaining < V2_HEADER_SIZE:
        raise CorruptRecordError(f"batch header at {pos} is truncated to {remaining} bytes")
    try:
        header = parse_header(view, pos)
    except UnsupportedCompressionTypeError:
        # A garbled attributes byte is corruption; only a sound batch names a bad codec.
        if not _raw_crc_matches(view, pos):
            raise CorruptRecordError(f"batch at {pos} fails its CRC") from None
        raise
    if header.end_position > len(view):
        raise CorruptRecordError(
            f"batch at {pos} declares {header.size} bytes, only {remaining} remain"
        )
    return header


def _raw_crc_matches(view: memoryview, pos: int) -> bool:
    length = int.from_bytes(view[pos + LENGTH_OFFSET : pos + LENGTH_OFFSET + 4], "big")
    end = pos + LOG_OVERHEAD + length
    if end > len(view):
        return False
    stored = int.from_bytes(view[pos + CRC_OFFSET : pos + CRC_OFFSET + 4], "big")
    return crc32c(view[pos + ATTRIBUTES_OFFSET : end]) == stored


def _check_batch(
    view: memoryview, header: BatchHeader, max_message_bytes: int, allow_control: bool
) -> None:
    # Messages are built only on failure: this runs for every produced batch.
    if header.base_offset != 0:
        raise InvalidRecordError(
            f"{_where(header)}: a produced batch has base offset 0, not {header.base_offset}"
        )
    if header.size > max_message_bytes:
        raise RecordTooLargeError(
            f"{_where(header)}: {header.size} bytes exceed max.message.bytes={max_message_bytes}"
        )
    if crc32c(view[header.position + ATTRIBUTES_OFFSET : header.end_position]) != header.crc:
        raise CorruptRecordError(f"{_where(header)} fails its CRC")
    count = header.record_count
    last_offset_delta = header.last_offset - header.base_offset
    if last_offset_delta < 0:
        raise InvalidRecordError(f"{_where(header)}: invalid offset range (last offset delta < 0)")
    if count <= 0:
        raise InvalidRecordError(f"{_where(header)}: invalid record count {count}")
    if last_offset_delta != count - 1:
        raise InvalidRecordError(
            f"{_where(header)}: last offset delta {last_offset_delta} disagrees with "
            f"record count {count}"
        )
    if not header.compression and count * MIN_RECORD_SIZE > header.size - RECORDS_OFFSET:
        raise InvalidRecordError(
            f"{_where(header)}: {count} records cannot fit in its {header.size} bytes"
        )
    if header.is_control and not allow_control:
        raise InvalidRecordError(f"{_where(header)}: producers may not write control batches")
    if header.is_control and header.producer_id == NO_PRODUCER_ID:
        raise InvalidRecordError(f"{_where(header)}: control batch without a producer id")
    if header.producer_id != NO_PRODUCER_ID or header.is_transactional:
        _check_producer(header, _where(header))


def _where(header: BatchHeader) -> str:
    return f"batch at {header.position}"


def _check_producer(header: BatchHeader, where: str) -> None:
    if header.producer_id < NO_PRODUCER_ID:
        raise InvalidRecordError(f"{where}: invalid producer id {header.producer_id}")
    if header.producer_id == NO_PRODUCER_ID:
        if header.is_transactional:
            raise InvalidRecordError(f"{where}: transactional batch without a producer id")
        return
    if header.producer_epoch < 0:
        raise InvalidRecordError(f"{where}: invalid producer epoch {header.producer_epoch}")
    if header.base_sequence < 0 and not header.is_control:  # markers carry no sequence
        raise InvalidRecordError(f"{where}: invalid sequence number {header.base_sequence}")


def _check_timestamp(timestamp: int, now_ms: int, before_max_ms: int, after_max_ms: int) -> None:
    if timestamp == NO_TIMESTAMP:
        return
    if now_ms - timestamp > before_max_ms or timestamp - now_ms > after_max_ms:
        raise InvalidTimestampError(
            f"timestamp {timestamp} is outside [{now_ms - before_max_ms}, "
            f"{now_ms + after_max_ms}] (now {now_ms})"
        )


def _check_timestamps(
    header: BatchHeader, now_ms: int, before_max_ms: int, after_max_ms: int
) -> None:
    if header.timestamp_type is not TimestampType.CREATE_TIME:
        return  # the producer cannot know the append time; the log stamps it
    _check_timestamp(header.max_timestamp, now_ms, before_max_ms, after_max_ms)
    if header.delete_horizon_ms is None:
        _check_timestamp(header.base_timestamp, now_ms, before_max_ms, after_max_ms)


def _check_keys(
    view: memoryview,
    header: BatchHeader,
    timestamp_type: TimestampType,
    now_ms: int,
    before_max_ms: int,
    after_max_ms: int,
) -> None:
    records = decode_records(view, header)
    check_times = (
        timestamp_type is TimestampType.CREATE_TIME
        and header.timestamp_type is TimestampType.CREATE_TIME
    )
    for record in records:
        if record.key is None:
            raise InvalidRecordError(
                f"record at offset delta {record.offset - header.base_offset} has no key; "
                "compacted topics require one"
            )
        if check_times:
            _check_timestamp(record.timestamp, now_ms, before_max_ms, after_max_ms)
