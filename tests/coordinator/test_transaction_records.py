"""The records of ``__transaction_state``: every value round-trips at both versions, the
bytes are laid out as Kafka lays them out, and bad bytes get typed errors. (Kafka itself
judges the bytes in tests/interop/test_transaction_log.py.)"""

from __future__ import annotations

import dataclasses
import struct

import pytest
from hypothesis import given
from hypothesis import strategies as st

from tierlog.coordinator.errors import UnknownRecordTypeError, UnknownRecordVersionError
from tierlog.coordinator.transaction_records import (
    NO_PRODUCER_ID,
    TransactionLogKey,
    TransactionLogRecord,
    TransactionLogValue,
    TransactionPartitions,
    TransactionState,
    decode_transaction_record,
    encode_transaction_record,
)
from tierlog.storage.errors import CorruptRecordError, InvalidRecordError

int16s = st.integers(-(2**15), 2**15 - 1)
int32s = st.integers(-(2**31), 2**31 - 1)
int64s = st.integers(-(2**63), 2**63 - 1)
partitions = st.none() | st.lists(
    st.builds(
        TransactionPartitions,
        st.text(max_size=12),
        st.lists(int32s, max_size=4).map(tuple),
    ),
    max_size=3,
).map(tuple)


@st.composite
def values(draw: st.DrawFn, version: int) -> TransactionLogValue:
    tagged = version == 1
    return TransactionLogValue(
        producer_id=draw(int64s),
        producer_epoch=draw(int16s),
        transaction_timeout_ms=draw(int32s),
        state=draw(st.sampled_from(TransactionState)),
        partitions=draw(partitions),
        last_update_timestamp_ms=draw(int64s),
        start_timestamp_ms=draw(int64s),
        previous_producer_id=draw(int64s) if tagged else NO_PRODUCER_ID,
        next_producer_id=draw(int64s) if tagged else NO_PRODUCER_ID,
        client_transaction_version=draw(int16s) if tagged else 0,
    )


@st.composite
def records(draw: st.DrawFn) -> TransactionLogRecord:
    key = TransactionLogKey(draw(st.text(max_size=20)))
    version = draw(st.sampled_from([0, 1]))
    value = draw(st.none() | values(version))
    return TransactionLogRecord(key, value, None if value is None else version)


@given(records())
def test_every_record_round_trips_and_re_encodes_to_the_same_bytes(
    record: TransactionLogRecord,
) -> None:
    key, value = encode_transaction_record(record)
    decoded = decode_transaction_record(key, value)
    assert decoded == record
    assert encode_transaction_record(decoded) == (key, value)


def test_a_value_is_written_at_version_1_as_kafka_41_writes_it() -> None:
    value = TransactionLogValue(7, 0, 60000, TransactionState.EMPTY, None, 5, -1)
    _, data = encode_transaction_record(TransactionLogRecord(TransactionLogKey("t"), value))
    assert data is not None
    assert decode_transaction_record(b"\x00\x00\x00\x01t", data).value_version == 1


def test_the_record_is_laid_out_as_kafka_lays_it_out() -> None:
    value = TransactionLogValue(
        producer_id=1000,
        producer_epoch=3,
        transaction_timeout_ms=60000,
        state=TransactionState.ONGOING,
        partitions=(TransactionPartitions("orders", (0, 2)),),
        last_update_timestamp_ms=1_700_000_000_999,
        start_timestamp_ms=1_700_000_000_000,
        previous_producer_id=999,
    )
    key, data = encode_transaction_record(TransactionLogRecord(TransactionLogKey("app-1"), value))
    assert key == b"\x00\x00" + b"\x00\x05app-1"
    assert data == (
        b"\x00\x01"  # version 1, flexible
        + struct.pack(">qhib", 1000, 3, 60000, 1)
        + b"\x02"  # one topic (count + 1)
        + b"\x07orders"  # compact string (length + 1)
        + b"\x03"
        + struct.pack(">ii", 0, 2)  # two partitions
        + b"\x00"  # the topic's tagged fields
        + struct.pack(">qq", 1_700_000_000_999, 1_700_000_000_000)
        + b"\x01"
        + b"\x00\x08"
        + struct.pack(">q", 999)  # tag 0: the previous producer id
    )
    classic = encode_transaction_record(
        TransactionLogRecord(TransactionLogKey("app-1"), value, value_version=0)
    )[1]
    assert classic is not None
    assert classic[:2] == b"\x00\x00" and classic[17:21] == b"\x00\x00\x00\x01"  # int32 count
    assert decode_transaction_record(key, classic).value == dataclasses.replace(
        value, previous_producer_id=NO_PRODUCER_ID
    )


def test_an_empty_transaction_has_null_partitions_as_kafka_writes_them() -> None:
    value = TransactionLogValue(7, 0, 60000, TransactionState.EMPTY, None, 5, -1)
    _, data = encode_transaction_record(TransactionLogRecord(TransactionLogKey("t"), value))
    assert data is not None
    assert data[2 + 8 + 2 + 4 + 1] == 0  # a compact array's null


def test_a_tombstone_is_the_key_alone() -> None:
    record = TransactionLogRecord(TransactionLogKey("gone"), None)
    assert encode_transaction_record(record) == (b"\x00\x00\x00\x04gone", None)
    assert decode_transaction_record(b"\x00\x00\x00\x04gone", None) == record


@given(records().filter(lambda record: record.value is not None))
def test_every_truncation_is_a_corrupt_record(record: TransactionLogRecord) -> None:
    key, value = encode_transaction_record(record)
    assert value is not None
    for cut in range(len(value)):
        with pytest.raises(CorruptRecordError):
            decode_transaction_record(key, value[:cut])
    for cut in range(len(key)):
        with pytest.raises(CorruptRecordError):
            decode_transaction_record(key[:cut], value)


@given(records())
def test_trailing_bytes_are_a_corrupt_record(record: TransactionLogRecord) -> None:
    key, value = encode_transaction_record(record)
    with pytest.raises(CorruptRecordError):
        decode_transaction_record(key + b"\x00", value)
    if value is not None:
        with pytest.raises(CorruptRecordError):
            decode_transaction_record(key, value + b"\x00")


def test_a_record_without_a_key_is_corrupt() -> None:
    with pytest.raises(CorruptRecordError, match="without a key"):
        decode_transaction_record(None, b"\x00\x01")


def test_a_key_of_another_version_is_an_unknown_record_type_a_loader_skips() -> None:
    with pytest.raises(UnknownRecordTypeError):
        decode_transaction_record(b"\x00\x01\x00\x01t", None)


@pytest.mark.parametrize("version", [-1, 2, 7])
def test_an_unknown_value_version_is_refused(version: int) -> None:
    with pytest.raises(UnknownRecordVersionError):
        decode_transaction_record(b"\x00\x00\x00\x01t", struct.pack(">h", version) + b"\x00" * 40)
    value = TransactionLogValue(7, 0, 60000, TransactionState.EMPTY, None, 5, -1)
    with pytest.raises(UnknownRecordVersionError):
        encode_transaction_record(TransactionLogRecord(TransactionLogKey("t"), value, version))


def test_a_state_kafka_does_not_define_is_corrupt() -> None:
    value = TransactionLogValue(7, 0, 60000, TransactionState.EMPTY, None, 5, -1)
    _, data = encode_transaction_record(TransactionLogRecord(TransactionLogKey("t"), value))
    assert data is not None
    state_at = 2 + 8 + 2 + 4
    bad = data[:state_at] + b"\x08" + data[state_at + 1 :]
    with pytest.raises(CorruptRecordError, match="no transaction state 8"):
        decode_transaction_record(b"\x00\x00\x00\x01t", bad)


def test_a_value_kafka_cannot_hold_is_an_invalid_record() -> None:
    value = TransactionLogValue(7, 2**15, 60000, TransactionState.EMPTY, None, 5, -1)
    with pytest.raises(InvalidRecordError, match="int16"):
        encode_transaction_record(TransactionLogRecord(TransactionLogKey("t"), value))


def test_unknown_tagged_fields_are_skipped_as_kafka_skips_them() -> None:
    value = TransactionLogValue(7, 0, 60000, TransactionState.EMPTY, None, 5, -1)
    _, data = encode_transaction_record(TransactionLogRecord(TransactionLogKey("t"), value))
    assert data is not None and data.endswith(b"\x00")
    with_tag_9 = data[:-1] + b"\x01\x09\x02ab"
    assert decode_transaction_record(b"\x00\x00\x00\x01t", with_tag_9).value == value
