"""Metadata answers written with their partitions copied from earlier bytes are the bytes
kio's own writer gives, in every version, the first time and from the memo."""

from __future__ import annotations

import io
import uuid
from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st
from kio.schema.errors import ErrorCode
from kio.serial import entity_writer
from kio.static.primitive import i32

from tierlog.kafka.codec import build, encode_response, response_type
from tierlog.kafka.memoized_entities import writer_of
from tierlog.kafka.versions import API_VERSIONS, METADATA

_node_ids = st.integers(min_value=-1, max_value=2**31 - 1)
_node_lists = st.lists(_node_ids, max_size=4).map(tuple)  # as the handler gives them
_error_codes = st.sampled_from(
    [ErrorCode.none, ErrorCode.leader_not_available, ErrorCode.unknown_topic_or_partition]
)
_partitions = st.fixed_dictionaries(
    {
        "error_code": _error_codes,
        "partition_index": st.integers(min_value=0, max_value=2**31 - 1),
        "leader_id": _node_ids,
        "leader_epoch": st.integers(min_value=-1, max_value=2**31 - 1),
        "replica_nodes": _node_lists,
        "isr_nodes": _node_lists,
        "offline_replicas": _node_lists,
    }
)
_topics = st.fixed_dictionaries(
    {
        "error_code": _error_codes,
        "name": st.text(min_size=1, max_size=20),
        "topic_id": st.uuids(),
        "is_internal": st.booleans(),
        "partitions": st.lists(_partitions, max_size=30),
    }
)
_answers = st.fixed_dictionaries(
    {
        "throttle_time": st.integers(min_value=0, max_value=10_000),
        "brokers": st.lists(
            st.fixed_dictionaries(
                {
                    "node_id": _node_ids,
                    "host": st.text(min_size=1, max_size=20),
                    "port": st.integers(min_value=0, max_value=65535),
                }
            ),
            max_size=4,
        ),
        "cluster_id": st.text(max_size=20),
        "controller_id": _node_ids,
        "topics": st.lists(_topics, max_size=4),
        "error_code": _error_codes,
    }
)
_versions = st.integers(*API_VERSIONS[METADATA])


def _kio_bytes(answer: Any) -> bytes:
    with io.BytesIO() as written:
        entity_writer(type(answer))(written, answer)
        return written.getvalue()


def _memoized_bytes(answer: Any) -> bytes:
    schema: Any = type(answer)  # kio's dataclasses are hashable types; mypy cannot tell
    with io.BytesIO() as written:
        writer_of(schema)(written, answer)
        return written.getvalue()


@settings(max_examples=300, deadline=None)
@given(values=_answers, version=_versions)
def test_a_metadata_answer_is_written_as_kio_writes_it_first_and_from_the_memo(
    values: dict[str, Any], version: int
) -> None:
    answer = build(response_type(METADATA, version), values)
    expected = _kio_bytes(answer)

    assert _memoized_bytes(answer) == expected  # partitions new to the memo, or not
    assert _memoized_bytes(answer) == expected  # every partition from the memo


def test_equal_partitions_of_two_versions_are_each_written_in_their_own_version() -> None:
    partition = {
        "error_code": ErrorCode.none,
        "partition_index": 3,
        "leader_id": 1,
        "leader_epoch": 7,
        "replica_nodes": (1, 2, 0),
        "isr_nodes": (1, 2),
        "offline_replicas": (0,),
    }
    topic = {"error_code": ErrorCode.none, "name": "t", "topic_id": uuid.uuid4()}
    for version in (0, 5, 7, 9, 12):
        answer = build(
            response_type(METADATA, version),
            {"throttle_time": 0, "brokers": [], "topics": [{**topic, "partitions": [partition]}]},
        )
        assert _memoized_bytes(answer) == _kio_bytes(answer)


def test_the_framed_answer_carries_the_memoized_body() -> None:
    answer = build(
        response_type(METADATA, 12),
        {
            "throttle_time": 0,
            "brokers": [{"node_id": 0, "host": "localhost", "port": 9092}],
            "topics": [
                {
                    "error_code": ErrorCode.none,
                    "name": "t",
                    "topic_id": uuid.uuid4(),
                    "partitions": [
                        {"error_code": ErrorCode.none, "partition_index": p, "leader_id": 0}
                        for p in range(100)
                    ],
                }
            ],
        },
    )
    header = type(answer).__header_schema__
    with io.BytesIO() as written:
        entity_writer(header)(written, header(correlation_id=i32(5)))
        expected_header = written.getvalue()

    frame = b"".join(encode_response(5, answer))

    assert frame[4:] == expected_header + _kio_bytes(answer)
    assert int.from_bytes(frame[:4], "big") == len(frame) - 4


def test_a_partition_whose_values_cannot_be_hashed_is_written_by_kio() -> None:
    answer = build(
        response_type(METADATA, 12),
        {
            "throttle_time": 0,
            "brokers": [],
            "topics": [
                {
                    "error_code": ErrorCode.none,
                    "name": "t",
                    "topic_id": uuid.uuid4(),
                    "partitions": [
                        {
                            "error_code": ErrorCode.none,
                            "partition_index": 0,
                            "leader_id": 1,
                            "replica_nodes": [1, 2],  # a list: kio writes it, unhashable
                        }
                    ],
                }
            ],
        },
    )

    assert _memoized_bytes(answer) == _kio_bytes(answer)
