"""Kafka's record formats: v2 batches read and written, v0/v1 message sets read.

The hot path of recovery scans and fetch needs only ``parse_header``, ``crc_is_valid``
and the batches' length fields; the append adds ``patch_offsets``,
``set_log_append_time`` and ``validate_produce``, which decodes every produced record
once (as Kafka's broker does) so that no batch whose records lie reaches the log.
Building records is for clients, the cleaner, tools and Spark.
"""

from __future__ import annotations

from tierlog.storage.records.batch import (
    HEADER_READ_SIZE,
    LOG_OVERHEAD,
    MIN_HEADER_SIZE,
    NO_PARTITION_LEADER_EPOCH,
    NO_PRODUCER_EPOCH,
    NO_PRODUCER_ID,
    NO_SEQUENCE,
    NO_TIMESTAMP,
    V2_HEADER_SIZE,
    BatchHeader,
    build_batch,
    crc_is_valid,
    decode_record_rows,
    decode_records,
    header_size_for_magic,
    iter_batches,
    parse_header,
    patch_offsets,
    resolve_legacy_header,
    set_log_append_time,
    whole_batches_length,
)
from tierlog.storage.records.buffers import ReadableBuffer
from tierlog.storage.records.codecs import CompressionType, compress, decompress
from tierlog.storage.records.control import (
    ControlRecordType,
    EndTransactionMarker,
    build_end_txn_marker_batch,
    parse_control_type,
    parse_end_txn_marker,
    read_end_txn_marker,
)
from tierlog.storage.records.crc import crc32, crc32c
from tierlog.storage.records.legacy import build_legacy_message_set
from tierlog.storage.records.record import Header, Record, SimpleRecord
from tierlog.storage.records.validation import validate_produce

__all__ = [
    "HEADER_READ_SIZE",
    "LOG_OVERHEAD",
    "MIN_HEADER_SIZE",
    "NO_PARTITION_LEADER_EPOCH",
    "NO_PRODUCER_EPOCH",
    "NO_PRODUCER_ID",
    "NO_SEQUENCE",
    "NO_TIMESTAMP",
    "V2_HEADER_SIZE",
    "BatchHeader",
    "CompressionType",
    "ControlRecordType",
    "EndTransactionMarker",
    "Header",
    "ReadableBuffer",
    "Record",
    "SimpleRecord",
    "build_batch",
    "build_end_txn_marker_batch",
    "build_legacy_message_set",
    "compress",
    "crc32",
    "crc32c",
    "crc_is_valid",
    "decode_record_rows",
    "decode_records",
    "decompress",
    "header_size_for_magic",
    "iter_batches",
    "parse_control_type",
    "parse_end_txn_marker",
    "parse_header",
    "patch_offsets",
    "read_end_txn_marker",
    "resolve_legacy_header",
    "set_log_append_time",
    "validate_produce",
    "whole_batches_length",
]
