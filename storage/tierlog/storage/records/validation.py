"""Checks on a produce request's batches, before the log appends them.

The broker appends what the producer built, byte for byte (only base offset and
leader epoch are patched in, and the LogAppendTime stamp if the topic wants it), so
whatever it accepts every later fetch, recovery and cleaning must be able to read.
The header is checked first (whole-batch bounds, magic 2, CRC-32C, the count against
the offset deltas, size limits, codec, producer fields); then every record is decoded,
decompressing if need be, as Kafka's LogValidator does: a CRC only proves the bytes
arrived as the producer built them, not that its records agree with its header.  The
records must fill the section exactly, number ``record_count``, carry offset deltas
0..n-1 in order and timestamps whose max is the header's (the time index trusts it,
and unlike Kafka we do not rewrite it); on CreateTime topics each timestamp must lie
within the topic's bounds, on compacted topics each record needs a key.

The records are decoded by the consumer's own decoder (``rows``): what it accepts is
by construction what readers can read, and its runs of alike records cost no Python
per record.  A records section that does not decompress is CORRUPT_MESSAGE; records
that do not add up are INVALID_RECORD, Kafka's ``InvalidRecordException``.  The input
buffer is never modified.
"""

from __future__ import annotations

from operator import itemgetter

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
    parse_header,
    records_section,
)
from tierlog.storage.records.buffers import ReadableBuffer
from tierlog.storage.records.crc import crc32c
from tierlog.storage.records.legacy import LOG_OVERHEAD
from tierlog.storage.records.record import MIN_RECORD_SIZE
from tierlog.storage.records.rows import RecordRow, decode_v2_rows

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
    ``require_keys`` (compacted topics): every record needs a key.
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
        _check_records(
            buf, header, timestamp_type, require_keys, now_ms, before_max_ms, after_max_ms
        )
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


_OFFSET, _TIMESTAMP, _KEY = itemgetter(0), itemgetter(1), itemgetter(2)


def _check_records(
    buf: ReadableBuffer,
    header: BatchHeader,
    timestamp_type: TimestampType,
    require_keys: bool,
    now_ms: int,
    before_max_ms: int,
    after_max_ms: int,
) -> None:
    # One decode of the batch, then C-level passes over its rows' columns.
    rows = _decode_rows(buf, header)
    _check_offsets(header, rows)
    if header.timestamp_type is TimestampType.CREATE_TIME:
        timestamps = list(map(_TIMESTAMP, rows))
        _check_max_timestamp(header, timestamps)
        if timestamp_type is TimestampType.CREATE_TIME:
            _check_timestamps(timestamps, now_ms, before_max_ms, after_max_ms)
    if require_keys and None in map(_KEY, rows):
        keyless = list(map(_KEY, rows)).index(None)
        raise InvalidRecordError(
            f"{_where(header)}: record at offset delta {keyless} has no key; "
            "compacted topics require one"
        )


def _decode_rows(buf: ReadableBuffer, header: BatchHeader) -> list[RecordRow]:
    data, start, end = records_section(buf, header)  # CORRUPT_MESSAGE: does not decompress
    try:
        # Offsets and timestamps as deltas: base offset 0 is checked, base timestamp kept.
        return decode_v2_rows(data, start, end, header.record_count, 0, header.base_timestamp, None)
    except CorruptRecordError as exc:  # intact bytes (the CRC held) that do not add up
        raise InvalidRecordError(f"{_where(header)}: {exc}") from exc


def _check_offsets(header: BatchHeader, rows: list[RecordRow]) -> None:
    # The log assigns base_offset + delta to each record and indexes the batch by its
    # last offset: deltas other than 0..n-1 in order would give records offsets their
    # batch does not own.  (The decoder has checked there are exactly n rows.)
    offset_deltas = list(map(_OFFSET, rows))
    if offset_deltas != list(range(len(rows))):
        wrong = next(i for i, delta in enumerate(offset_deltas) if delta != i)
        raise InvalidRecordError(
            f"{_where(header)}: record {wrong} has offset delta {offset_deltas[wrong]}; "
            "a produced batch's records are numbered 0, 1, 2... in order"
        )


def _check_max_timestamp(header: BatchHeader, timestamps: list[int]) -> None:
    records_max = max(timestamps)
    if records_max != header.max_timestamp:
        raise InvalidRecordError(
            f"{_where(header)}: max timestamp {header.max_timestamp} is not its records' "
            f"max, {records_max}"
        )


def _check_timestamps(
    timestamps: list[int], now_ms: int, before_max_ms: int, after_max_ms: int
) -> None:
    """Kafka's bounds on every record of a CreateTime batch on a CreateTime topic."""
    _check_timestamp(max(timestamps), now_ms, before_max_ms, after_max_ms)
    lowest = min(filter(_HAS_TIMESTAMP, timestamps), default=NO_TIMESTAMP)
    _check_timestamp(lowest, now_ms, before_max_ms, after_max_ms)


_HAS_TIMESTAMP = NO_TIMESTAMP.__ne__


def _check_timestamp(timestamp: int, now_ms: int, before_max_ms: int, after_max_ms: int) -> None:
    if timestamp == NO_TIMESTAMP:
        return
    if now_ms - timestamp > before_max_ms or timestamp - now_ms > after_max_ms:
        raise InvalidTimestampError(
            f"timestamp {timestamp} is outside [{now_ms - before_max_ms}, "
            f"{now_ms + after_max_ms}] (now {now_ms})"
        )
