"""Record batches: Kafka's v2 RecordBatch, and the shallow view of any magic.

A log is a run of entries that all begin ``baseOffset:int64 | length:int32`` (the
12-byte log overhead; ``length`` counts the bytes after it), with the magic byte at
offset 16.  For v2 that is the RecordBatch:

    0 baseOffset:int64  8 length:int32  12 partitionLeaderEpoch:int32  16 magic:int8
    17 crc:uint32  21 attributes:int16  23 lastOffsetDelta:int32  27 baseTimestamp:int64
    35 maxTimestamp:int64  43 producerId:int64  51 producerEpoch:int16
    53 baseSequence:int32  57 recordCount:int32  61 records...

The CRC-32C covers attributes..end, so the broker assigns offsets and the leader
epoch by patching bytes 0-7 and 12-15 without touching the CRC; changing the
timestamp type or max timestamp (LogAppendTime) does need a new CRC.

For v0/v1 the entry is one message (see ``legacy``): its offset field is the *last*
offset it holds.  A ``BatchHeader`` describes any magic from its header bytes alone;
for a compressed v0/v1 wrapper those bytes do not tell how many messages it holds, so
the shallow header reports ``record_count = -1`` and ``base_offset = last_offset``
(an upper bound); ``resolve_legacy_header`` decodes the wrapper for the true values.
"""

from __future__ import annotations

import struct
from collections.abc import Iterator, Sequence
from itertools import starmap
from typing import NamedTuple

from tierlog.storage.config import TimestampType
from tierlog.storage.errors import CorruptRecordError, UnsupportedForMessageFormatError
from tierlog.storage.records import legacy
from tierlog.storage.records.buffers import ReadableBuffer
from tierlog.storage.records.codecs import CompressionType, compress, compression_type, decompress
from tierlog.storage.records.crc import crc32, crc32c
from tierlog.storage.records.legacy import LOG_OVERHEAD
from tierlog.storage.records.record import Record, SimpleRecord, encode_record
from tierlog.storage.records.rows import RecordRow, decode_v2_rows

__all__ = [
    "ATTRIBUTES_OFFSET",
    "BASE_OFFSET_OFFSET",
    "BASE_SEQUENCE_OFFSET",
    "BASE_TIMESTAMP_OFFSET",
    "COMPRESSION_CODEC_MASK",
    "CONTROL_FLAG_MASK",
    "CRC_OFFSET",
    "DELETE_HORIZON_FLAG_MASK",
    "HEADER_READ_SIZE",
    "LAST_OFFSET_DELTA_OFFSET",
    "LENGTH_OFFSET",
    "LOG_OVERHEAD",
    "MAGIC_OFFSET",
    "MAX_TIMESTAMP_OFFSET",
    "MIN_HEADER_SIZE",
    "NO_PARTITION_LEADER_EPOCH",
    "NO_PRODUCER_EPOCH",
    "NO_PRODUCER_ID",
    "NO_SEQUENCE",
    "NO_TIMESTAMP",
    "PARTITION_LEADER_EPOCH_OFFSET",
    "PRODUCER_EPOCH_OFFSET",
    "PRODUCER_ID_OFFSET",
    "RECORDS_COUNT_OFFSET",
    "RECORDS_OFFSET",
    "TIMESTAMP_TYPE_MASK",
    "TRANSACTIONAL_FLAG_MASK",
    "V2_HEADER_SIZE",
    "BatchHeader",
    "assemble_batch",
    "batch_attributes",
    "build_batch",
    "crc_is_valid",
    "decode_record_rows",
    "decode_records",
    "header_size_for_magic",
    "iter_batches",
    "log_append_time_of",
    "parse_header",
    "patch_offsets",
    "records_section",
    "resolve_legacy_header",
    "set_log_append_time",
    "v2_records",
    "whole_batches_length",
]

BASE_OFFSET_OFFSET = 0
LENGTH_OFFSET = 8
PARTITION_LEADER_EPOCH_OFFSET = 12
MAGIC_OFFSET = 16
CRC_OFFSET = 17
ATTRIBUTES_OFFSET = 21
LAST_OFFSET_DELTA_OFFSET = 23
BASE_TIMESTAMP_OFFSET = 27
MAX_TIMESTAMP_OFFSET = 35
PRODUCER_ID_OFFSET = 43
PRODUCER_EPOCH_OFFSET = 51
BASE_SEQUENCE_OFFSET = 53
RECORDS_COUNT_OFFSET = 57
RECORDS_OFFSET = 61
V2_HEADER_SIZE = RECORDS_OFFSET

# Bytes up to and including the magic: enough to know which header follows.
MIN_HEADER_SIZE = MAGIC_OFFSET + 1
# Read this many bytes at a batch's position and parse_header has all it needs for
# any magic (fewer is fine where the file ends, as long as the header itself fits).
HEADER_READ_SIZE = V2_HEADER_SIZE

COMPRESSION_CODEC_MASK = 0x07
TIMESTAMP_TYPE_MASK = 0x08
TRANSACTIONAL_FLAG_MASK = 0x10
CONTROL_FLAG_MASK = 0x20
DELETE_HORIZON_FLAG_MASK = 0x40

NO_TIMESTAMP = -1
NO_PARTITION_LEADER_EPOCH = -1
NO_PRODUCER_ID = -1
NO_PRODUCER_EPOCH = -1
NO_SEQUENCE = -1

_V2 = struct.Struct(">qiibIhiqqqhii")
_LEGACY = struct.Struct(">qiIbb")  # offset, size, crc, magic, attributes
_INT64 = struct.Struct(">q")
_UINT32 = struct.Struct(">I")
_INT16 = struct.Struct(">h")
_INT32 = struct.Struct(">i")

assert _V2.size == V2_HEADER_SIZE
assert _LEGACY.size == legacy.V1_TIMESTAMP_OFFSET


def header_size_for_magic(magic: int) -> int:
    """Bytes ``parse_header`` needs at a batch's position for an entry of ``magic``."""
    if magic == 2:
        return V2_HEADER_SIZE
    if magic == 1:
        return legacy.V1_TIMESTAMP_OFFSET + 8
    if magic == 0:
        return legacy.V1_TIMESTAMP_OFFSET
    raise CorruptRecordError(f"unknown magic {magic}")


class BatchHeader(NamedTuple):
    """What an entry's header bytes say, for any magic (see the module docstring).

    A NamedTuple rather than a dataclass: one is built per batch on the append,
    fetch and recovery paths, and a tuple is several times cheaper to make.
    """

    position: int
    base_offset: int
    last_offset: int
    size: int  # total bytes, the 12-byte log overhead included
    magic: int
    crc: int
    compression: CompressionType
    timestamp_type: TimestampType  # v0 has none: reported as CREATE_TIME
    max_timestamp: int  # -1 when there is none
    base_timestamp: int  # v2: first record's (or the delete horizon); v0/v1: max_timestamp
    partition_leader_epoch: int  # -1 for v0/v1
    producer_id: int  # -1 for v0/v1
    producer_epoch: int  # -1 for v0/v1
    base_sequence: int  # -1 for v0/v1
    record_count: int  # -1 for a compressed v0/v1 wrapper until resolved
    is_transactional: bool
    is_control: bool
    delete_horizon_ms: int | None

    @property
    def next_offset(self) -> int:
        return self.last_offset + 1

    @property
    def end_position(self) -> int:
        """Where the next entry starts in the same buffer."""
        return self.position + self.size

    @property
    def last_offset_delta(self) -> int:
        return self.last_offset - self.base_offset

    @property
    def is_compressed(self) -> bool:
        return self.compression is not CompressionType.NONE

    @property
    def has_producer_id(self) -> bool:
        return self.producer_id >= 0

    @property
    def last_sequence(self) -> int:
        """Sequence of the last record, wrapping past int32 max as Kafka's does."""
        if self.base_sequence < 0:
            return NO_SEQUENCE
        return (self.base_sequence + self.last_offset_delta) % (2**31)


def parse_header(buf: ReadableBuffer, pos: int = 0) -> BatchHeader:
    """The header of the entry at ``pos``, from its header bytes only.

    ``buf`` need not hold the whole batch: ``header_size_for_magic`` bytes (61 for v2,
    26 for v1, 18 for v0; ``HEADER_READ_SIZE`` covers all) are enough.  Raises
    ``CorruptRecordError`` when those bytes are missing, the magic is unknown or the
    length field is below the entry's minimum, and ``UnsupportedCompressionTypeError``
    for a codec id above 4.
    """
    available = len(buf) - pos
    if available < MIN_HEADER_SIZE:
        raise CorruptRecordError(f"only {available} bytes at {pos}, a header needs more")
    magic = buf[pos + MAGIC_OFFSET]
    if magic == 2:
        return _parse_v2(buf, pos, available)
    if magic in (0, 1):
        return _parse_legacy(buf, pos, available, magic)
    raise CorruptRecordError(f"unknown magic {magic} at position {pos}")


def _parse_v2(buf: ReadableBuffer, pos: int, available: int) -> BatchHeader:
    if available < V2_HEADER_SIZE:
        raise CorruptRecordError(f"v2 header at {pos} truncated to {available} bytes")
    (
        base_offset,
        length,
        leader_epoch,
        magic,
        crc,
        attributes,
        last_offset_delta,
        base_timestamp,
        max_timestamp,
        producer_id,
        producer_epoch,
        base_sequence,
        record_count,
    ) = _V2.unpack_from(buf, pos)
    size = length + LOG_OVERHEAD
    if size < V2_HEADER_SIZE:
        raise CorruptRecordError(f"batch at {pos} declares {size} bytes, below the v2 header")
    # Positional on purpose: this runs once per batch on every hot path.
    return BatchHeader(
        pos,
        base_offset,
        base_offset + last_offset_delta,
        size,
        magic,
        crc,
        compression_type(attributes & COMPRESSION_CODEC_MASK),
        _LOG_APPEND_TIME if attributes & TIMESTAMP_TYPE_MASK else _CREATE_TIME,
        max_timestamp,
        base_timestamp,
        leader_epoch,
        producer_id,
        producer_epoch,
        base_sequence,
        record_count,
        bool(attributes & TRANSACTIONAL_FLAG_MASK),
        bool(attributes & CONTROL_FLAG_MASK),
        base_timestamp if attributes & DELETE_HORIZON_FLAG_MASK else None,
    )


def _timestamp_type(attributes: int) -> TimestampType:
    return _LOG_APPEND_TIME if attributes & TIMESTAMP_TYPE_MASK else _CREATE_TIME


_LOG_APPEND_TIME = TimestampType.LOG_APPEND_TIME
_CREATE_TIME = TimestampType.CREATE_TIME


def _parse_legacy(buf: ReadableBuffer, pos: int, available: int, magic: int) -> BatchHeader:
    needed = header_size_for_magic(magic)
    if available < needed:
        raise CorruptRecordError(f"v{magic} header at {pos} truncated to {available} bytes")
    offset, message_size, crc, _, attributes = _LEGACY.unpack_from(buf, pos)
    if message_size < legacy.record_overhead(magic):
        raise CorruptRecordError(f"v{magic} message at {pos} declares only {message_size} bytes")
    timestamp = NO_TIMESTAMP
    if magic == 1:
        (timestamp,) = _INT64.unpack_from(buf, pos + legacy.V1_TIMESTAMP_OFFSET)
    compression = compression_type(attributes & COMPRESSION_CODEC_MASK)
    wrapper = compression is not CompressionType.NONE
    return BatchHeader(
        position=pos,
        base_offset=offset,
        last_offset=offset,
        size=message_size + LOG_OVERHEAD,
        magic=magic,
        crc=crc,
        compression=compression,
        timestamp_type=_timestamp_type(attributes) if magic == 1 else TimestampType.CREATE_TIME,
        max_timestamp=timestamp,
        base_timestamp=timestamp,
        partition_leader_epoch=NO_PARTITION_LEADER_EPOCH,
        producer_id=NO_PRODUCER_ID,
        producer_epoch=NO_PRODUCER_EPOCH,
        base_sequence=NO_SEQUENCE,
        record_count=-1 if wrapper else 1,
        is_transactional=False,
        is_control=False,
        delete_horizon_ms=None,
    )


def crc_is_valid(buf: ReadableBuffer, header: BatchHeader) -> bool:
    """Whether the stored CRC matches the bytes; False too if ``buf`` lacks some of them.

    v2: CRC-32C over attributes..end.  v0/v1: CRC-32 over magic..end.
    """
    end = header.position + header.size
    if end > len(buf):
        return False
    start = header.position + (ATTRIBUTES_OFFSET if header.magic == 2 else MAGIC_OFFSET)
    covered = memoryview(buf)[start:end]
    actual = crc32c(covered) if header.magic == 2 else crc32(covered)
    return actual == header.crc


def iter_batches(
    buf: ReadableBuffer, start: int = 0, end: int | None = None
) -> Iterator[BatchHeader]:
    """The headers of the whole entries in ``buf[start:end]``, in order.

    A trailing partial entry raises ``CorruptRecordError``; no CRC is checked.
    """
    stop = len(buf) if end is None else end
    pos = start
    while pos < stop:
        header = parse_header(buf, pos)
        if header.end_position > stop:
            raise CorruptRecordError(
                f"entry at {pos} declares {header.size} bytes, only {stop - pos} remain"
            )
        yield header
        pos = header.end_position


def whole_batches_length(buf: ReadableBuffer, upper_bound_offset: int | None = None) -> int:
    """How many bytes at the start of ``buf`` are whole entries, stopping before the
    first that is cut off by the end of ``buf``, holds ``upper_bound_offset`` or later,
    or cannot be an entry (an unknown magic or codec, a length below its header's).

    The walk reads only each entry's length, magic and codec (a fetch's window of stored
    batches, checked when they were appended); with an upper bound it parses each header
    too. An entry damaged since is not raised here: the whole entries before it are an
    answer, and the read that starts at it finds the damage and refuses it.
    """
    stop = len(buf)
    pos = 0
    # Locals, not globals, in the loop: this runs once a batch on every fetch.
    entry_prefix, smallest_v2, codec_mask, codecs = (
        _ENTRY_PREFIX.unpack_from,
        _SMALLEST_LENGTH[2],
        COMPRESSION_CODEC_MASK,
        _CODECS,
    )
    while stop - pos >= _ENTRY_PREFIX_END:
        length, magic, legacy_attributes, attributes = entry_prefix(buf, pos + LENGTH_OFFSET)
        end = pos + LOG_OVERHEAD + length
        if end > stop:
            break
        if magic == 2:  # the usual case first, in as few steps as can be
            if length < smallest_v2 or attributes & codec_mask >= codecs:
                break
        elif (
            magic > 2
            or length < _SMALLEST_LENGTH[magic]
            or legacy_attributes & COMPRESSION_CODEC_MASK >= _CODECS
        ):
            break
        if upper_bound_offset is not None and (
            parse_header(buf, pos).last_offset >= upper_bound_offset
        ):
            break
        pos = end
    return pos


# From an entry's length field: the length, its magic (past a v2 batch's leader epoch, a
# message's CRC), a message's attributes, and the low byte of a v2 batch's attributes.
_ENTRY_PREFIX = struct.Struct(">i4xBB4xB")
_ENTRY_PREFIX_END = LENGTH_OFFSET + _ENTRY_PREFIX.size
_CODECS = len(CompressionType)
# The smallest length field of an entry of each magic: what parse_header accepts.
_SMALLEST_LENGTH = (
    legacy.record_overhead(0),
    legacy.record_overhead(1),
    V2_HEADER_SIZE - LOG_OVERHEAD,
)


def build_batch(
    records: Sequence[SimpleRecord],
    *,
    compression: CompressionType = CompressionType.NONE,
    base_offset: int = 0,
    timestamp_type: TimestampType = TimestampType.CREATE_TIME,
    log_append_time_ms: int = NO_TIMESTAMP,
    producer_id: int = NO_PRODUCER_ID,
    producer_epoch: int = NO_PRODUCER_EPOCH,
    base_sequence: int = NO_SEQUENCE,
    partition_leader_epoch: int = NO_PARTITION_LEADER_EPOCH,
    is_transactional: bool = False,
    is_control: bool = False,
    delete_horizon_ms: int | None = None,
) -> bytes:
    """One v2 batch holding ``records`` at offsets ``base_offset``.. in order.

    As Kafka's MemoryRecordsBuilder: the base timestamp is the first record's
    timestamp (or ``delete_horizon_ms`` when given, with its attribute bit set) and
    record timestamps are stored relative to it; the max timestamp is the largest
    record timestamp (-1 if none) for CreateTime, ``log_append_time_ms`` for
    LogAppendTime.
    """
    if not records:
        raise ValueError("a batch needs at least one record")
    base_timestamp = records[0].timestamp if delete_horizon_ms is None else delete_horizon_ms
    max_timestamp = NO_TIMESTAMP
    body = bytearray()
    for delta, record in enumerate(records):
        if record.timestamp < NO_TIMESTAMP:
            raise ValueError(f"invalid negative timestamp {record.timestamp}")
        max_timestamp = max(max_timestamp, record.timestamp)
        encode_record(
            body,
            delta,
            record.timestamp - base_timestamp,
            record.key,
            record.value,
            record.headers,
        )
    if timestamp_type is TimestampType.LOG_APPEND_TIME:
        max_timestamp = log_append_time_ms
    payload = body if compression is CompressionType.NONE else compress(compression, body)
    attributes = batch_attributes(
        compression,
        timestamp_type,
        is_transactional=is_transactional,
        is_control=is_control,
        has_delete_horizon=delete_horizon_ms is not None,
    )
    return assemble_batch(
        payload,
        attributes=attributes,
        base_offset=base_offset,
        last_offset_delta=len(records) - 1,
        record_count=len(records),
        base_timestamp=base_timestamp,
        max_timestamp=max_timestamp,
        partition_leader_epoch=partition_leader_epoch,
        producer_id=producer_id,
        producer_epoch=producer_epoch,
        base_sequence=base_sequence,
    )


def batch_attributes(
    compression: CompressionType,
    timestamp_type: TimestampType,
    *,
    is_transactional: bool,
    is_control: bool,
    has_delete_horizon: bool,
) -> int:
    """The v2 attributes field for these properties."""
    attributes = int(compression)
    if timestamp_type is TimestampType.LOG_APPEND_TIME:
        attributes |= TIMESTAMP_TYPE_MASK
    if is_transactional:
        attributes |= TRANSACTIONAL_FLAG_MASK
    if is_control:
        attributes |= CONTROL_FLAG_MASK
    if has_delete_horizon:
        attributes |= DELETE_HORIZON_FLAG_MASK
    return attributes


def assemble_batch(
    payload: ReadableBuffer,
    *,
    attributes: int,
    base_offset: int,
    last_offset_delta: int,
    record_count: int,
    base_timestamp: int,
    max_timestamp: int,
    partition_leader_epoch: int,
    producer_id: int,
    producer_epoch: int,
    base_sequence: int,
) -> bytes:
    """A v2 batch around an already encoded (and compressed) records payload, with its
    CRC-32C computed: what the producer and the cleaner both write.  The CRC runs over
    the header's tail and then the payload where it lies, so the payload is copied
    once, into the batch."""
    header = bytearray(V2_HEADER_SIZE)
    _V2.pack_into(
        header,
        0,
        base_offset,
        V2_HEADER_SIZE - LOG_OVERHEAD + len(memoryview(payload)),
        partition_leader_epoch,
        2,
        0,
        attributes,
        last_offset_delta,
        base_timestamp,
        max_timestamp,
        producer_id,
        producer_epoch,
        base_sequence,
        record_count,
    )
    crc = crc32c(payload, crc32c(memoryview(header)[ATTRIBUTES_OFFSET:]))
    _UINT32.pack_into(header, CRC_OFFSET, crc)
    return b"".join((header, payload))


def decode_records(buf: ReadableBuffer, header: BatchHeader) -> list[Record]:
    """Every record of the entry ``header`` describes, with absolute offsets and timestamps.

    Works for v2 batches and v0/v1 messages, compressed or not; LogAppendTime
    entries give each record the entry's max timestamp.  ``CorruptRecordError`` if
    the bytes do not hold what the header declares.
    """
    return list(starmap(Record, decode_record_rows(buf, header)))


def decode_record_rows(buf: ReadableBuffer, header: BatchHeader) -> list[RecordRow]:
    """``decode_records`` as plain ``(offset, timestamp, key, value, headers)`` tuples,
    the cheapest form to make (see ``rows``): a client builds its own records from them."""
    if header.end_position > len(buf):
        raise CorruptRecordError(f"entry at {header.position} is truncated")
    if header.magic != 2:
        return [
            (r.offset, r.timestamp, r.key, r.value, r.headers)
            for r in legacy.decode_entry(buf, header.position)
        ]
    data, start, end, log_append_time = v2_records(buf, header)
    return decode_v2_rows(
        data,
        start,
        end,
        header.record_count,
        header.base_offset,
        header.base_timestamp,
        log_append_time,
    )


def v2_records(buf: ReadableBuffer, header: BatchHeader) -> tuple[bytes, int, int, int | None]:
    """What a walk over the records of the v2 batch ``header`` describes needs: its
    records section (``records_section``) and the time that replaces every record's
    timestamp (LogAppendTime), else None."""
    if header.record_count < 0:
        raise CorruptRecordError(f"invalid record count {header.record_count}")
    data, start, end = records_section(buf, header)
    return data, start, end, log_append_time_of(header)


def log_append_time_of(header: BatchHeader) -> int | None:
    """The time that replaces every record's timestamp in a LogAppendTime v2 batch (its
    max timestamp), else None."""
    if header.timestamp_type is TimestampType.LOG_APPEND_TIME:
        return header.max_timestamp
    return None


def records_section(
    buf: ReadableBuffer, header: BatchHeader, max_decompressed_bytes: int | None = None
) -> tuple[bytes, int, int]:
    """The bytes holding the records of the v2 batch ``header`` describes, and where they
    start and end in them: the decompressed stream, or the batch's own bytes, read in
    place when ``buf`` is ``bytes``.  ``CorruptRecordError`` if it does not decompress,
    ``RecordTooLargeError`` if it decompresses past ``max_decompressed_bytes``."""
    start, end = header.position + RECORDS_OFFSET, header.end_position
    if header.is_compressed:
        data = decompress(
            header.compression, memoryview(buf)[start:end], max_bytes=max_decompressed_bytes
        )
        return data, 0, len(data)
    if isinstance(buf, bytes):
        return buf, start, end  # a fetch's whole answer, not copied batch by batch
    return bytes(memoryview(buf)[start:end]), 0, end - start  # slices of these are not bytes


def resolve_legacy_header(buf: ReadableBuffer, header: BatchHeader) -> BatchHeader:
    """``header`` with the true base offset and record count of a compressed v0/v1 wrapper.

    Decodes the wrapper; any other header comes back unchanged.
    """
    if header.record_count >= 0:
        return header
    records = decode_records(buf, header)
    if not records:
        raise CorruptRecordError(f"compressed wrapper at {header.position} holds no messages")
    return header._replace(base_offset=records[0].offset, record_count=len(records))


def _require_v2(header: BatchHeader) -> None:
    if header.magic != 2:
        raise UnsupportedForMessageFormatError(f"cannot rewrite a magic {header.magic} entry")


def patch_offsets(
    buf: bytearray, header: BatchHeader, base_offset: int, partition_leader_epoch: int
) -> BatchHeader:
    """Assign ``base_offset`` and the leader epoch in place; return the updated header.

    Both fields lie outside the CRC, which stays valid untouched.
    """
    _require_v2(header)
    _INT64.pack_into(buf, header.position + BASE_OFFSET_OFFSET, base_offset)
    _INT32.pack_into(buf, header.position + PARTITION_LEADER_EPOCH_OFFSET, partition_leader_epoch)
    return header._replace(
        base_offset=base_offset,
        last_offset=base_offset + header.last_offset_delta,
        partition_leader_epoch=partition_leader_epoch,
    )


def set_log_append_time(buf: bytearray, header: BatchHeader, timestamp_ms: int) -> BatchHeader:
    """Mark the batch LogAppendTime at ``timestamp_ms`` in place, with a new CRC.

    Returns the updated header.  A batch that already says exactly this is untouched.
    """
    _require_v2(header)
    if (
        header.timestamp_type is TimestampType.LOG_APPEND_TIME
        and header.max_timestamp == timestamp_ms
    ):
        return header
    pos = header.position
    (attributes,) = _INT16.unpack_from(buf, pos + ATTRIBUTES_OFFSET)
    _INT16.pack_into(buf, pos + ATTRIBUTES_OFFSET, attributes | TIMESTAMP_TYPE_MASK)
    _INT64.pack_into(buf, pos + MAX_TIMESTAMP_OFFSET, timestamp_ms)
    covered = memoryview(buf)[pos + ATTRIBUTES_OFFSET : header.end_position]
    crc = crc32c(covered)
    covered.release()  # so the caller may resize ``buf`` again
    _UINT32.pack_into(buf, pos + CRC_OFFSET, crc)
    return header._replace(
        crc=crc,
        timestamp_type=TimestampType.LOG_APPEND_TIME,
        max_timestamp=timestamp_ms,
    )
