"""The records of ``__consumer_offsets``: every record type and value version survives a
round trip, known bytes come out as Kafka lays them out, and bad bytes get typed errors.
(Kafka itself judges the bytes in tests/interop/test_consumer_offsets.py.)"""

from __future__ import annotations

import struct
import uuid
from typing import TypeVar, get_args

import pytest
from hypothesis import given
from hypothesis import strategies as st

from tierlog.coordinator.classic_group_records import (
    GroupMetadataKey,
    GroupMetadataValue,
    MemberMetadata,
)
from tierlog.coordinator.consumer_group_records import (
    ClassicMemberMetadata,
    ClassicProtocol,
    ConsumerGroupCurrentMemberAssignmentKey,
    ConsumerGroupCurrentMemberAssignmentValue,
    ConsumerGroupMemberMetadataKey,
    ConsumerGroupMemberMetadataValue,
    ConsumerGroupMetadataKey,
    ConsumerGroupMetadataValue,
    ConsumerGroupPartitionMetadataKey,
    ConsumerGroupPartitionMetadataValue,
    ConsumerGroupRegularExpressionKey,
    ConsumerGroupRegularExpressionValue,
    ConsumerGroupTargetAssignmentMemberKey,
    ConsumerGroupTargetAssignmentMemberValue,
    ConsumerGroupTargetAssignmentMetadataKey,
    ConsumerGroupTargetAssignmentMetadataValue,
    MemberState,
    PartitionMetadata,
    TopicMetadata,
    TopicPartitions,
)
from tierlog.coordinator.errors import UnknownRecordTypeError, UnknownRecordVersionError
from tierlog.coordinator.group_records import (
    CoordinatorRecord,
    RecordKey,
    RecordValue,
    decode_key,
    decode_record,
    decode_value,
    encode_key,
    encode_record,
    encode_value,
)
from tierlog.coordinator.offset_records import ZERO_UUID, OffsetCommitKey, OffsetCommitValue
from tierlog.storage.errors import CorruptRecordError, InvalidRecordError

# --- strategies: any value each schema can carry ---------------------------------------------

T = TypeVar("T")

int8s = st.integers(-(2**7), 2**7 - 1)
int32s = st.integers(-(2**31), 2**31 - 1)
int64s = st.integers(-(2**63), 2**63 - 1)
names = st.text(max_size=12)
maybe_names = st.none() | names
blobs = st.binary(max_size=12)
uuids = st.uuids() | st.just(ZERO_UUID)


def tuples_of(
    elements: st.SearchStrategy[T], max_size: int = 3
) -> st.SearchStrategy[tuple[T, ...]]:
    return st.lists(elements, max_size=max_size).map(tuple)


topic_partitions = st.builds(TopicPartitions, uuids, tuples_of(int32s))
classic_member_metadata = st.none() | st.builds(
    ClassicMemberMetadata, int32s, tuples_of(st.builds(ClassicProtocol, names, blobs))
)


@st.composite
def offset_commit_values(
    draw: st.DrawFn, version: int | None = None
) -> tuple[OffsetCommitValue, int]:
    """A value and a version it fits: fields the version lacks keep their defaults."""
    version = draw(st.sampled_from(OffsetCommitValue.VERSIONS)) if version is None else version
    value = OffsetCommitValue(
        offset=draw(int64s),
        commit_timestamp_ms=draw(int64s),
        metadata=draw(names),
        leader_epoch=draw(int32s) if version >= 3 else -1,
        expire_timestamp_ms=draw(int64s) if version == 1 else -1,
        topic_id=draw(uuids) if version >= 4 else ZERO_UUID,
    )
    return value, version


@st.composite
def group_metadata_values(draw: st.DrawFn) -> tuple[GroupMetadataValue, int]:
    version = draw(st.sampled_from(GroupMetadataValue.VERSIONS))
    members = st.builds(
        MemberMetadata,
        member_id=names,
        client_id=names,
        client_host=names,
        session_timeout_ms=int32s,
        subscription=blobs,
        assignment=blobs,
        rebalance_timeout_ms=int32s if version >= 1 else st.just(-1),
        group_instance_id=maybe_names if version >= 3 else st.none(),
    )
    value = GroupMetadataValue(
        protocol_type=draw(names),
        generation=draw(int32s),
        protocol=draw(maybe_names),
        leader=draw(maybe_names),
        members=draw(tuples_of(members)),
        current_state_timestamp_ms=draw(int64s) if version >= 2 else -1,
    )
    return value, version


def _latest(values: st.SearchStrategy[RecordValue]) -> st.SearchStrategy[tuple[RecordValue, int]]:
    return values.map(lambda value: (value, value.default_version()))


# Every record type: a key, and a value with a version it fits.
KEYS_AND_VALUES: dict[
    str, tuple[st.SearchStrategy[RecordKey], st.SearchStrategy[tuple[RecordValue, int]]]
] = {
    "offset commit": (st.builds(OffsetCommitKey, names, names, int32s), offset_commit_values()),
    "classic group": (st.builds(GroupMetadataKey, names), group_metadata_values()),
    "group epoch": (
        st.builds(ConsumerGroupMetadataKey, names),
        _latest(st.builds(ConsumerGroupMetadataValue, int32s, int64s)),
    ),
    "member subscription": (
        st.builds(ConsumerGroupMemberMetadataKey, names, names),
        _latest(
            st.builds(
                ConsumerGroupMemberMetadataValue,
                client_id=names,
                client_host=names,
                subscribed_topic_names=tuples_of(names),
                subscribed_topic_regex=maybe_names,
                instance_id=maybe_names,
                rack_id=maybe_names,
                rebalance_timeout_ms=int32s,
                server_assignor=maybe_names,
                classic_member_metadata=classic_member_metadata | st.just(ClassicMemberMetadata()),
            )
        ),
    ),
    "target assignment epoch": (
        st.builds(ConsumerGroupTargetAssignmentMetadataKey, names),
        _latest(st.builds(ConsumerGroupTargetAssignmentMetadataValue, int32s)),
    ),
    "target assignment": (
        st.builds(ConsumerGroupTargetAssignmentMemberKey, names, names),
        _latest(st.builds(ConsumerGroupTargetAssignmentMemberValue, tuples_of(topic_partitions))),
    ),
    "current assignment": (
        st.builds(ConsumerGroupCurrentMemberAssignmentKey, names, names),
        _latest(
            st.builds(
                ConsumerGroupCurrentMemberAssignmentValue,
                int32s,
                int32s,
                int8s,
                tuples_of(topic_partitions),
                tuples_of(topic_partitions),
            )
        ),
    ),
    "regular expression": (
        st.builds(ConsumerGroupRegularExpressionKey, names, names),
        _latest(st.builds(ConsumerGroupRegularExpressionValue, tuples_of(names), int64s, int64s)),
    ),
    "partition metadata": (
        st.builds(ConsumerGroupPartitionMetadataKey, names),
        _latest(
            st.builds(
                ConsumerGroupPartitionMetadataValue,
                tuples_of(
                    st.builds(
                        TopicMetadata,
                        uuids,
                        names,
                        int32s,
                        tuples_of(st.builds(PartitionMetadata, int32s, tuples_of(names))),
                    )
                ),
            )
        ),
    ),
}


@st.composite
def records(draw: st.DrawFn) -> CoordinatorRecord:
    keys, values = KEYS_AND_VALUES[draw(st.sampled_from(sorted(KEYS_AND_VALUES)))]
    key = draw(keys)
    if draw(st.booleans()):
        return CoordinatorRecord(key, None)
    value, version = draw(values)
    return CoordinatorRecord(key, value, version)


def test_every_record_type_has_a_strategy() -> None:
    assert len(KEYS_AND_VALUES) == len(get_args(RecordKey)) == len(get_args(RecordValue))


# --- round trips -----------------------------------------------------------------------------


@given(records())
def test_every_record_round_trips(record: CoordinatorRecord) -> None:
    key, value = encode_record(record)
    assert decode_record(key, value) == record
    assert (value is None) == record.is_tombstone


@given(records())
def test_decoding_then_encoding_gives_back_the_same_bytes(record: CoordinatorRecord) -> None:
    key, value = encode_record(record)
    assert encode_record(decode_record(key, value)) == (key, value)


@given(offset_commit_values(version=4))
def test_a_value_is_written_at_kafka_41s_version_by_default(
    sample: tuple[OffsetCommitValue, int],
) -> None:
    value, _ = sample
    assert decode_value(OffsetCommitKey("g", "t", 0), encode_value(value))[1] == 4
    expiring = OffsetCommitValue(offset=1, commit_timestamp_ms=2, expire_timestamp_ms=3)
    assert decode_value(OffsetCommitKey("g", "t", 0), encode_value(expiring))[1] == 1


# --- known bytes -----------------------------------------------------------------------------


def test_an_offset_commit_is_laid_out_as_kafka_lays_it_out() -> None:
    key = OffsetCommitKey("g1", "orders", 3)
    assert encode_key(key) == b"\x00\x01" + b"\x00\x02g1" + b"\x00\x06orders" + b"\x00\x00\x00\x03"
    topic_id = uuid.UUID("00112233-4455-6677-8899-aabbccddeeff")
    value = OffsetCommitValue(
        offset=42, commit_timestamp_ms=1000, metadata="m", leader_epoch=5, topic_id=topic_id
    )
    assert encode_value(value) == (
        b"\x00\x04"  # version 4, flexible
        + struct.pack(">q", 42)
        + struct.pack(">i", 5)
        + b"\x02m"  # compact string: length + 1
        + struct.pack(">q", 1000)
        + b"\x01\x00\x10"  # one tagged field: tag 0, 16 bytes
        + topic_id.bytes
    )
    assert encode_value(value, 3) == (
        b"\x00\x03"
        + struct.pack(">q", 42)
        + struct.pack(">i", 5)
        + b"\x00\x01m"
        + struct.pack(">q", 1000)
    )
    assert encode_value(OffsetCommitValue(offset=0, commit_timestamp_ms=0)).endswith(b"\x00")


def test_a_legacy_offset_commit_key_reads_as_todays() -> None:
    legacy = b"\x00\x00" + b"\x00\x01g" + b"\x00\x01t" + b"\x00\x00\x00\x07"
    assert decode_key(legacy) == OffsetCommitKey("g", "t", 7)


def test_classic_member_metadata_is_absent_by_default_and_an_explicit_null_when_none() -> None:
    base = ConsumerGroupMemberMetadataValue(client_id="c", client_host="h")
    none = ConsumerGroupMemberMetadataValue(
        client_id="c", client_host="h", classic_member_metadata=None
    )
    assert encode_value(base).endswith(b"\x00")  # no tagged fields
    assert encode_value(none).endswith(b"\x01\x00\x01\x00")  # tag 0, 1 byte: null
    key = ConsumerGroupMemberMetadataKey("g", "m")
    assert decode_value(key, encode_value(none))[0] == none
    assert decode_value(key, encode_value(base))[0] == base
    assert base.classic_member_metadata == ClassicMemberMetadata()


def test_the_member_state_byte_is_kafkas() -> None:
    value = ConsumerGroupCurrentMemberAssignmentValue(3, 2, MemberState.UNRELEASED_PARTITIONS)
    assert encode_value(value)[2 + 8] == 2
    assert [state.value for state in MemberState] == [0, 1, 2, 127]


# --- refusals --------------------------------------------------------------------------------


@given(records(), st.data())
def test_every_truncation_is_a_corrupt_record(
    record: CoordinatorRecord, data: st.DataObject
) -> None:
    key, value = encode_record(record)
    cut = data.draw(st.integers(0, len(key) - 1))
    with pytest.raises(CorruptRecordError):
        decode_record(key[:cut], value)
    if value is not None:
        cut = data.draw(st.integers(0, len(value) - 1))
        with pytest.raises(CorruptRecordError):
            decode_record(key, value[:cut])


@given(records())
def test_trailing_bytes_are_a_corrupt_record(record: CoordinatorRecord) -> None:
    key, value = encode_record(record)
    with pytest.raises(CorruptRecordError, match="after its last field"):
        decode_record(key + b"\x00", value)
    if value is not None:
        with pytest.raises(CorruptRecordError, match="after its last field"):
            decode_record(key, value + b"\x00")


def test_a_record_without_a_key_is_corrupt() -> None:
    with pytest.raises(CorruptRecordError, match="without a key"):
        decode_record(None, b"\x00\x00")


@pytest.mark.parametrize("record_type", [-1, 9, 10, 15, 17, 23, 1000])
def test_an_unknown_record_type_is_refused_by_name(record_type: int) -> None:
    key = struct.pack(">h", record_type) + b"\x00\x01g"
    with pytest.raises(UnknownRecordTypeError, match=f"type {record_type}") as raised:
        decode_key(key)
    assert raised.value.reason == "INVALID_RECORD"


@pytest.mark.parametrize(
    ("key", "versions"),
    [
        (OffsetCommitKey("g", "t", 0), (-1, 5, 99)),
        (GroupMetadataKey("g"), (-1, 5)),
        (ConsumerGroupMetadataKey("g"), (1, 2)),
        (ConsumerGroupCurrentMemberAssignmentKey("g", "m"), (1,)),
    ],
)
def test_an_unknown_value_version_is_refused(key: RecordKey, versions: tuple[int, ...]) -> None:
    for version in versions:
        with pytest.raises(UnknownRecordVersionError, match=f"version {version}"):
            decode_value(key, struct.pack(">h", version) + bytes(64))


def test_writing_an_unknown_version_is_refused() -> None:
    with pytest.raises(UnknownRecordVersionError, match="not 5"):
        encode_value(OffsetCommitValue(offset=1, commit_timestamp_ms=1), 5)


def test_a_field_the_version_lacks_is_left_out_as_kafka_leaves_it_out() -> None:
    key = OffsetCommitKey("g", "t", 0)
    topic_id = uuid.uuid4()
    full = OffsetCommitValue(
        offset=1, commit_timestamp_ms=2, leader_epoch=3, expire_timestamp_ms=4, topic_id=topic_id
    )
    as_written = {
        version: decode_value(key, encode_value(full, version))[0] for version in range(5)
    }
    assert as_written[1] == OffsetCommitValue(
        offset=1, commit_timestamp_ms=2, expire_timestamp_ms=4
    )
    assert as_written[3] == OffsetCommitValue(offset=1, commit_timestamp_ms=2, leader_epoch=3)
    assert as_written[4] == OffsetCommitValue(
        offset=1, commit_timestamp_ms=2, leader_epoch=3, topic_id=topic_id
    )
    group = GroupMetadataValue("consumer", 1, current_state_timestamp_ms=5)
    old_group = decode_value(GroupMetadataKey("g"), encode_value(group, 1))[0]
    assert old_group == GroupMetadataValue("consumer", 1)


@pytest.mark.parametrize(
    "record",
    [
        CoordinatorRecord(OffsetCommitKey("g", "t", 2**31), None),
        CoordinatorRecord(OffsetCommitKey("g" * 32768, "t", 0), None),
        CoordinatorRecord(ConsumerGroupMetadataKey("g"), ConsumerGroupMetadataValue(1, 2**63)),
        CoordinatorRecord(ConsumerGroupMetadataKey("g"), OffsetCommitValue(1, 1)),
    ],
)
def test_a_value_kafka_cannot_hold_is_an_invalid_record(record: CoordinatorRecord) -> None:
    with pytest.raises(InvalidRecordError):
        encode_record(record)


def test_a_null_where_the_schema_has_no_null_is_corrupt() -> None:
    key = b"\x00\x01" + b"\xff\xff" + b"\x00\x01t" + b"\x00\x00\x00\x00"  # group length -1
    with pytest.raises(CorruptRecordError, match="non-nullable field group"):
        decode_key(key)


def test_an_array_longer_than_its_bytes_is_corrupt_before_anything_is_allocated() -> None:
    value = b"\x00\x00" + b"\xff\xff\xff\xff\x07"  # version 0, 2**32 - 2 topics
    with pytest.raises(CorruptRecordError, match="items in 0 bytes"):
        decode_value(ConsumerGroupPartitionMetadataKey("g"), value)


def test_a_string_that_is_not_utf8_is_corrupt() -> None:
    key = b"\x00\x02" + b"\x00\x02\xc3\x28"
    with pytest.raises(CorruptRecordError, match="not UTF-8"):
        decode_key(key)


def test_an_overlong_varint_is_corrupt() -> None:
    value = b"\x00\x00" + b"\x80\x80\x80\x80\x80\x01"  # a 6-byte array length
    with pytest.raises(CorruptRecordError, match="longer than 5 bytes"):
        decode_value(ConsumerGroupPartitionMetadataKey("g"), value)


def test_a_tagged_field_given_twice_is_corrupt() -> None:
    value = (
        b"\x00\x00"
        + struct.pack(">i", 1)
        + b"\x02"
        + b"\x00\x08"
        + bytes(8)
        + b"\x00\x08"
        + bytes(8)
    )
    with pytest.raises(CorruptRecordError, match="tagged field 0 twice"):
        decode_value(ConsumerGroupMetadataKey("g"), value)


def test_a_known_tagged_field_of_the_wrong_size_is_corrupt() -> None:
    value = b"\x00\x00" + struct.pack(">i", 1) + b"\x01" + b"\x00\x04" + bytes(4)
    with pytest.raises(CorruptRecordError, match="metadata_hash"):
        decode_value(ConsumerGroupMetadataKey("g"), value)


def test_unknown_tagged_fields_are_skipped_as_kafka_skips_them() -> None:
    value = b"\x00\x00" + struct.pack(">i", 9) + b"\x01" + b"\x05\x02ab"  # tag 5, 2 bytes
    decoded, _ = decode_value(ConsumerGroupMetadataKey("g"), value)
    assert decoded == ConsumerGroupMetadataValue(epoch=9)
