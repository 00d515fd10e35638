"""v2 batches whose CRC is right but whose records disagree with what they declare.

A producer builds these when it has a bug (or means harm): the bytes arrive intact, so
the CRC cannot catch them; only decoding every record can.  Each builder takes honest
records, damages the records section or the count, and checksums the result, so the
batch passes every header check and lies only where its name says.
"""

from __future__ import annotations

from collections.abc import Callable

from tierlog.storage.config import TimestampType
from tierlog.storage.records import CompressionType, compress
from tierlog.storage.records.batch import assemble_batch, batch_attributes
from tierlog.storage.records.record import encode_record

__all__ = ["LIES", "framed_batch", "honest_records", "lying_batch"]

NOW = 1_700_000_000_000


def honest_records(count: int = 3, *, offset_deltas: list[int] | None = None) -> bytearray:
    """The records section of ``count`` small records at ``NOW``, offset deltas 0.. unless given."""
    out = bytearray()
    for index, delta in enumerate(offset_deltas or range(count)):
        encode_record(out, delta, 0, b"k%d" % index, b"value %d" % index)
    return out


def lying_batch(
    records: bytes | bytearray,
    *,
    record_count: int,
    last_offset_delta: int | None = None,
    compression: CompressionType = CompressionType.NONE,
    max_timestamp: int = NOW,
) -> bytes:
    """A batch around ``records`` (compressed if asked) declaring ``record_count`` records,
    with a CRC that matches whatever it holds."""
    payload = records if compression is CompressionType.NONE else compress(compression, records)
    return framed_batch(
        payload,
        codec=compression,
        record_count=record_count,
        last_offset_delta=last_offset_delta,
        max_timestamp=max_timestamp,
    )


def framed_batch(
    section: bytes | bytearray,
    *,
    codec: CompressionType,
    record_count: int = 1,
    last_offset_delta: int | None = None,
    max_timestamp: int = NOW,
) -> bytes:
    """A batch flagged ``codec`` around ``section`` as it is (a stream of that codec, or
    bytes that are none), declaring ``record_count`` records, its CRC right."""
    attributes = batch_attributes(
        codec,
        TimestampType.CREATE_TIME,
        is_transactional=False,
        is_control=False,
        has_delete_horizon=False,
    )
    return assemble_batch(
        section,
        attributes=attributes,
        base_offset=0,
        last_offset_delta=record_count - 1 if last_offset_delta is None else last_offset_delta,
        record_count=record_count,
        base_timestamp=NOW,
        max_timestamp=max_timestamp,
        partition_leader_epoch=-1,
        producer_id=-1,
        producer_epoch=-1,
        base_sequence=-1,
    )


def _length_lies(records: bytearray) -> bytearray:
    # The first record's length prefix (one byte, zigzag) claims one byte more than it has.
    records[0] += 2
    return records


def _varint_truncated(records: bytearray) -> bytearray:
    # The last record's header count becomes a varint that never ends.
    records[-1] = 0x80
    return records


def _varint_too_long(records: bytearray) -> bytearray:
    # The first record's offset delta (after length, attributes, timestamp delta) becomes
    # a six-byte varint, longer than any int32 may be; the length prefix grows to match.
    records[0] += 2 * 5
    records[3:4] = b"\x80\x80\x80\x80\x80\x00"
    return records


def _negative_header_count(records: bytearray) -> bytearray:
    records[-1] = 0x01  # zigzag -1
    return records


def _from_records(change: Callable[[bytearray], bytearray]) -> Callable[[CompressionType], bytes]:
    return lambda codec: lying_batch(change(honest_records(3)), record_count=3, compression=codec)


# name -> a lying batch under the given codec; every one is refused with INVALID_RECORD.
LIES: dict[str, Callable[[CompressionType], bytes]] = {
    "count above the records": lambda codec: lying_batch(
        honest_records(3), record_count=4, compression=codec
    ),
    "count below the records": lambda codec: lying_batch(
        honest_records(3), record_count=2, compression=codec
    ),
    "offset deltas out of order": lambda codec: lying_batch(
        honest_records(offset_deltas=[0, 2, 1]), record_count=3, compression=codec
    ),
    "offset deltas repeated": lambda codec: lying_batch(
        honest_records(offset_deltas=[0, 0, 0]), record_count=3, compression=codec
    ),
    "last offset delta beyond the records": lambda codec: lying_batch(
        honest_records(offset_deltas=[0, 1, 3]), record_count=3, compression=codec
    ),
    "record length lies": _from_records(_length_lies),
    "varint truncated": _from_records(_varint_truncated),
    "varint too long": _from_records(_varint_too_long),
    "negative header count": _from_records(_negative_header_count),
    "trailing garbage": lambda codec: lying_batch(
        honest_records(3) + b"\x00garbage", record_count=3, compression=codec
    ),
}
