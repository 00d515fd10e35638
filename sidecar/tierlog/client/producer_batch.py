"""A producer batch: records bound for one partition, then the v2 batch bytes sent for them.

Two lives, as Kafka's ``ProducerBatch``: open, it takes records while the accumulator
fills it, each encoded at once into the batch's records buffer (Kafka's
``MemoryRecordsBuilder``: no per-record object is kept but its timestamp); closed
(``close``), it is frozen into one v2 RecordBatch, compressed once, on the sender
thread outside the producer's lock.
The producer id, epoch and base sequence live in the header, outside the compressed
records, so stamping a built batch patches those 14 bytes and recomputes the CRC-32C
(as Kafka's ``reopenAndRewriteProducerState`` does); the records are never encoded or
compressed again.  Once stamped, every attempt sends the *same bytes*, which is what
lets the broker recognise a retry as a duplicate of (producer, epoch, sequence).  Only
new sequences for its partition, once no request of it is out, restamp a stamped
batch (``reset_producer_state``).

Sizes are estimated as Kafka's ``MemoryRecordsBuilder`` does: records are counted at
their exact encoded size, and for a compressed batch the records part is scaled by the
producer's compression ratio as it stood when the batch opened (see
``CompressionRatioEstimator``) and a 5% safety factor.
"""

from __future__ import annotations

import struct
from collections.abc import Sequence
from dataclasses import dataclass

from tierlog.client.errors import IllegalProducerStateError
from tierlog.client.futures import ProduceRequestResult
from tierlog.storage.config import TimestampType
from tierlog.storage.records import (
    NO_PARTITION_LEADER_EPOCH,
    NO_PRODUCER_EPOCH,
    NO_PRODUCER_ID,
    NO_SEQUENCE,
    NO_TIMESTAMP,
    V2_HEADER_SIZE,
    CompressionType,
    Header,
    compress,
    crc32c,
    decode_records,
    parse_header,
)
from tierlog.storage.records.batch import (
    ATTRIBUTES_OFFSET,
    CRC_OFFSET,
    PRODUCER_ID_OFFSET,
    assemble_batch,
    batch_attributes,
)
from tierlog.storage.records.record import encode_record
from tierlog.storage.records.varint import sizeof_varint
from tierlog.storage.topic_partition import TopicPartition

__all__ = [
    "COMPRESSION_RATE_ESTIMATION_FACTOR",
    "MAX_RECORD_OVERHEAD",
    "CompressionRatioEstimator",
    "ProducerBatch",
    "batch_size_upper_bound",
]

COMPRESSION_RATE_ESTIMATION_FACTOR = 1.05
# attributes (1) + the largest timestamp delta varlong (10) and offset delta varint (5)
# + the largest length varint (5): Kafka's DefaultRecord.MAX_RECORD_OVERHEAD.
MAX_RECORD_OVERHEAD = 21

# More than any codec's frame and block headers add to a batch: gzip's 18, xerial's 16
# plus 4 a block, lz4's 15 plus 4 a block, zstd's up to 18 plus 3 a block.
_CODEC_FRAMING_BYTES = 1024
_STAMP = struct.Struct(">qhi")  # producerId, producerEpoch, baseSequence: contiguous
_UINT32 = struct.Struct(">I")


def _sizeof_nullable(data: bytes | None) -> int:
    return 1 if data is None else sizeof_varint(len(data)) + len(data)


def _sizeof_body_part(key: bytes | None, value: bytes | None, headers: Sequence[Header]) -> int:
    size = _sizeof_nullable(key) + _sizeof_nullable(value) + sizeof_varint(len(headers))
    for header_key, header_value in headers:
        size += _sizeof_nullable(header_key.encode("utf-8")) + _sizeof_nullable(header_value)
    return size


def batch_size_upper_bound(
    key: bytes | None, value: bytes | None, headers: Sequence[Header] = ()
) -> int:
    """The most a batch of just this record can take, compressed or not (Kafka's
    ``estimateSizeInBytesUpperBound``): what ``max.request.size`` is checked against."""
    return V2_HEADER_SIZE + MAX_RECORD_OVERHEAD + _sizeof_body_part(key, value, headers)


class CompressionRatioEstimator:
    """Kafka's ``CompressionRatioEstimator``: compressed/uncompressed size, learned per batch.

    Starts at 1.0; a batch that compressed better lowers it by at most 0.005, one that
    compressed worse raises it by at least 0.05 at once: quick to grow batches' headroom
    again, slow to trust good ratios.
    """

    IMPROVING_STEP = 0.005
    DETERIORATING_STEP = 0.05

    def __init__(self) -> None:
        self.ratio = 1.0

    def update(self, observed_ratio: float) -> None:
        if observed_ratio > self.ratio:
            self.ratio = max(self.ratio + self.DETERIORATING_STEP, observed_ratio)
        elif observed_ratio < self.ratio:
            self.ratio = max(self.ratio - self.IMPROVING_STEP, observed_ratio)


@dataclass
class _ProducerStamp:
    producer_id: int = NO_PRODUCER_ID
    producer_epoch: int = NO_PRODUCER_EPOCH
    base_sequence: int = NO_SEQUENCE


class ProducerBatch:
    """Records for one partition; see the module docstring for its two lives."""

    def __init__(
        self,
        topic_partition: TopicPartition,
        *,
        created_ms: int,
        write_limit_bytes: int,
        reserved_memory_bytes: int,
        compression: CompressionType,
        ratio: CompressionRatioEstimator,
        is_transactional: bool = False,
    ) -> None:
        self.topic_partition = topic_partition
        self.is_transactional = is_transactional  # part of a transaction (KIP-98)
        self.created_ms = created_ms
        # The estimate at which the batch is full: batch.size, or more for a first
        # record that alone is larger (Kafka's buffer size).
        self.write_limit_bytes = write_limit_bytes
        # What buffer.memory holds for this batch until it is deallocated.
        self.reserved_memory_bytes = reserved_memory_bytes
        self.compression = compression
        self._ratio = ratio
        # Uncompressed records bytes to estimated built bytes, fixed when the batch opens
        # as Kafka's ``MemoryRecordsBuilder`` fixes it: the estimate then changes only
        # when a record joins, so ``is_full`` can be a plain flag set there.
        self._size_factor = (
            1.0
            if compression is CompressionType.NONE
            else ratio.ratio * COMPRESSION_RATE_ESTIMATION_FACTOR
        )
        self._estimated_bytes = V2_HEADER_SIZE
        # Takes no more records: closed for them, or the estimate reached the write limit.
        self.is_full = False
        self._records = bytearray()  # the encoded records, uncompressed
        # Each record's CreateTime, in order: record i of the stored batch is at base
        # offset + i, and its metadata reports this timestamp (unless LogAppendTime).
        self.timestamps: list[int] = []
        self._base_timestamp = NO_TIMESTAMP
        self._max_timestamp = NO_TIMESTAMP
        # What the records' futures read their metadata from (``tierlog.client.futures``).
        self.result = ProduceRequestResult(
            topic_partition.topic, topic_partition.partition, self.timestamps
        )
        self.uncompressed_records_bytes = 0
        self.attempts = 0
        self.last_attempt_ms = created_ms
        self.last_error_reason = ""  # what its last failed attempt met (its expiry says)
        self.sent_to = ""  # the address of the leader its last attempt went to
        self.attempts_at_leader = 0  # of ``attempts``, those to ``sent_to``
        self.drained_ms: int | None = None
        self.sequence_has_been_reset = False
        self._stamp = _ProducerStamp()
        self._encoded: bytes | None = None

    def __repr__(self) -> str:
        return (
            f"ProducerBatch({self.topic_partition}, records={self.record_count}, "
            f"base_sequence={self.base_sequence}, epoch={self.producer_epoch})"
        )

    # --- open: taking records -----------------------------------------------------------

    @property
    def record_count(self) -> int:
        return len(self.timestamps)

    @property
    def estimated_size_bytes(self) -> int:
        """What the batch will take once built (exact when uncompressed)."""
        if self._encoded is not None:
            return len(self._encoded)
        return self._estimated_bytes

    @property
    def worst_size_bytes(self) -> int:
        """The most the batch can take once built: exact when built or uncompressed, else
        the records uncompressed plus a codec's worst expansion (snappy's n/6 + 32)."""
        if self._encoded is not None or self.compression is CompressionType.NONE:
            return self.estimated_size_bytes
        records = self.uncompressed_records_bytes
        return V2_HEADER_SIZE + records + records // 6 + _CODEC_FRAMING_BYTES

    def try_append(
        self,
        key: bytes | None,
        value: bytes | None,
        timestamp: int,
        headers: Sequence[Header] = (),
    ) -> int | None:
        """Encode the record into the batch if it fits; its encoded size, or None (and the
        batch is then full, as Kafka's ``tryAppend`` closes a batch that refused one).
        All or nothing: a record the encoder fails on (a field of the wrong type) leaves
        the batch as it was.  Runs once per record sent: the checks are inlined arithmetic."""
        if self.is_full:
            return None
        timestamps = self.timestamps
        count = len(timestamps)
        if not count:  # (a first record that fails leaves a base the next one replaces)
            self._base_timestamp = timestamp
        try:  # free in 3.11 unless it raises
            size = encode_record(
                self._records, count, timestamp - self._base_timestamp, key, value, headers
            )
        except BaseException:
            # The part written before the failure goes: the records before it are
            # exactly ``uncompressed_records_bytes`` long.
            del self._records[self.uncompressed_records_bytes :]
            raise
        # Kafka's ``hasRoomFor``: the estimate so far plus the record uncompressed.
        if count and self._estimated_bytes + size > self.write_limit_bytes:
            del self._records[-size:]
            self.is_full = True
            return None
        timestamps.append(timestamp)
        if timestamp > self._max_timestamp:
            self._max_timestamp = timestamp
        records_bytes = self.uncompressed_records_bytes + size
        self.uncompressed_records_bytes = records_bytes
        self._estimated_bytes = estimated = V2_HEADER_SIZE + int(records_bytes * self._size_factor)
        if estimated >= self.write_limit_bytes:
            self.is_full = True
        return size

    def close_for_appends(self) -> None:
        self.is_full = True

    # --- closed: the bytes sent ---------------------------------------------------------

    @property
    def producer_id(self) -> int:
        return self._stamp.producer_id

    @property
    def producer_epoch(self) -> int:
        return self._stamp.producer_epoch

    @property
    def base_sequence(self) -> int:
        return self._stamp.base_sequence

    @property
    def has_sequence(self) -> bool:
        return self._stamp.base_sequence != NO_SEQUENCE

    @property
    def last_sequence(self) -> int:
        """The last record's sequence, wrapping past int32 max as Kafka's does."""
        if not self.has_sequence:
            return NO_SEQUENCE
        return (self.base_sequence + self.record_count - 1) % 2**31

    def set_producer_state(self, producer_id: int, producer_epoch: int, base_sequence: int) -> None:
        """Stamp the batch (Kafka's ``setProducerState``, at drain); built or not."""
        if self.has_sequence:
            raise IllegalProducerStateError(f"{self} is stamped; use reset_producer_state")
        self._restamp(_ProducerStamp(producer_id, producer_epoch, base_sequence))

    def reset_producer_state(
        self, producer_id: int, producer_epoch: int, base_sequence: int
    ) -> None:
        """Restamp under new sequences: new producer state, new CRC, same records."""
        self._restamp(_ProducerStamp(producer_id, producer_epoch, base_sequence))
        self.sequence_has_been_reset = True

    def _restamp(self, stamp: _ProducerStamp) -> None:
        self._stamp = stamp
        if self._encoded is None:
            return
        buf = bytearray(self._encoded)
        _STAMP.pack_into(
            buf, PRODUCER_ID_OFFSET, stamp.producer_id, stamp.producer_epoch, stamp.base_sequence
        )
        _UINT32.pack_into(buf, CRC_OFFSET, crc32c(memoryview(buf)[ATTRIBUTES_OFFSET:]))
        self._encoded = bytes(buf)

    def close(self) -> bytes:
        """The v2 batch for these records and the current stamp, built once and kept:
        every attempt sends these bytes.  Teaches the ratio estimator what compression did."""
        if self._encoded is not None:
            return self._encoded
        if not self.timestamps:
            raise IllegalProducerStateError("an empty batch is never sent")
        self.is_full = True
        self._encoded = self._assemble(self.compression)
        if self.compression is not CompressionType.NONE and self.uncompressed_records_bytes:
            compressed_records = len(self._encoded) - V2_HEADER_SIZE
            self._ratio.update(compressed_records / self.uncompressed_records_bytes)
        self._records = bytearray()  # the built batch holds them now
        return self._encoded

    def _assemble(self, compression: CompressionType) -> bytes:
        records = self._records
        payload = records if compression is CompressionType.NONE else compress(compression, records)
        return assemble_batch(
            payload,
            attributes=batch_attributes(
                compression,
                TimestampType.CREATE_TIME,
                is_transactional=self.is_transactional,
                is_control=False,
                has_delete_horizon=False,
            ),
            base_offset=0,
            last_offset_delta=len(self.timestamps) - 1,
            record_count=len(self.timestamps),
            base_timestamp=self._base_timestamp,
            max_timestamp=self._max_timestamp,
            partition_leader_epoch=NO_PARTITION_LEADER_EPOCH,
            producer_id=self._stamp.producer_id,
            producer_epoch=self._stamp.producer_epoch,
            base_sequence=self._stamp.base_sequence,
        )

    @property
    def is_built(self) -> bool:
        return self._encoded is not None

    def split(self, size_limit_bytes: int) -> list[ProducerBatch]:
        """Built, unstamped batches of these records in order, each within
        ``size_limit_bytes`` unless it holds a single record (Kafka's split of a batch
        the broker found too large).  The first part inherits the memory reservation;
        this batch's result is chained to the parts', so the records' futures follow."""
        if self.has_sequence:
            raise IllegalProducerStateError(f"{self} has a sequence and cannot be split")
        whole = self._encoded if self._encoded is not None else self._assemble(self.compression)
        records = decode_records(whole, parse_header(whole))
        parts: list[tuple[int, ProducerBatch]] = []
        pending = [(0, len(records))]
        while pending:
            start, stop = pending.pop()
            part = self._sibling()
            for record in records[start:stop]:
                part.try_append(record.key, record.value, record.timestamp, record.headers)
            if stop - start > 1 and len(part.close()) > size_limit_bytes:
                middle = (start + stop) // 2
                pending += [(middle, stop), (start, middle)]
                continue
            part.close()
            parts.append((start, part))
        parts[0][1].reserved_memory_bytes = self.reserved_memory_bytes
        self.result.chain([(start, part.result) for start, part in parts])
        return [part for _start, part in parts]

    def _sibling(self) -> ProducerBatch:
        part = ProducerBatch(
            self.topic_partition,
            created_ms=self.created_ms,
            write_limit_bytes=2**62,  # takes what ``split`` gives it
            reserved_memory_bytes=0,
            compression=self.compression,
            ratio=self._ratio,
        )
        part.attempts = self.attempts
        part.drained_ms = self.drained_ms
        return part
