"""Loading a coordinator's partition: its log replayed into the coordinator's state.

A new coordinator reads the whole partition, from its log start to the log end it finds
(its own appends come after), as Kafka's coordinator loads a partition on becoming its
leader. Records of a type this coordinator does not know are skipped (Kafka's loader
skips them as another version's); anything else it cannot read fails the load, rather
than serve offsets it rebuilt wrongly. A transactional batch's offsets wait for their
producer's marker (a control batch), which applies or drops them, as when they were
written. Blocking: run in a thread.
"""

from __future__ import annotations

import logging
from collections.abc import Iterator

from tierlog.coordinator.errors import UnknownRecordTypeError
from tierlog.coordinator.group_records import decode_record
from tierlog.coordinator.offsets_state import OffsetsState
from tierlog.storage.log import Log
from tierlog.storage.records import (
    BatchHeader,
    Record,
    decode_records,
    iter_batches,
    read_end_txn_marker,
)

__all__ = ["load_offsets", "log_records"]

log = logging.getLogger(__name__)

READ_BYTES = 1024 * 1024  # per read (Kafka's offsets.load.buffer.size is 5 MiB)


def log_batches(partition_log: Log, end_offset: int) -> Iterator[tuple[bytes, BatchHeader]]:
    """The batches of the log below ``end_offset``, in order, each with the bytes it is in."""
    offset = partition_log.log_start_offset
    while offset < end_offset:
        data = partition_log.read(offset, READ_BYTES, upper_bound_offset=end_offset).records
        if not data:
            break
        for header in iter_batches(data):
            offset = max(offset, header.next_offset)
            yield data, header


def log_records(partition_log: Log, end_offset: int) -> Iterator[Record]:
    """The data records of the log below ``end_offset``, in order (control batches, the
    markers of transactions, are not the coordinator's records)."""
    for data, header in log_batches(partition_log, end_offset):
        if not header.is_control:
            yield from decode_records(data, header)


def load_offsets(partition_log: Log, end_offset: int) -> OffsetsState:
    """The state of the log's records below ``end_offset``."""
    state = OffsetsState()
    skipped = 0
    for data, header in log_batches(partition_log, end_offset):
        if header.is_control:
            marker = read_end_txn_marker(data, header)
            state.replay_marker(header.producer_id, marker.committed)
            continue
        for record in decode_records(data, header):
            try:
                decoded = decode_record(record.key, record.value)
            except UnknownRecordTypeError:
                skipped += 1
                continue
            if header.is_transactional:
                state.replay_transactional(decoded, record.offset, header.producer_id)
            else:
                state.replay(decoded, record.offset)
    if skipped:
        log.warning("%d records of unknown types skipped loading the offsets", skipped)
    return state
