"""Fetch answers written by hand are the FetchResponse (and SubscribeResponse) the
generated classes read."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from tierlog.api.v1 import common_pb2, log_service_pb2
from tierlog.broker.fetch import AbortedTransaction, FetchAnswer
from tierlog.sidecar.fetch_wire import PartitionAnswer, encode_fetch_answer, encode_session_answer

INT64 = st.integers(-(2**63), 2**63 - 1)


@given(st.binary(max_size=3000), INT64, INT64, INT64)
def test_an_answer_parses_as_the_fetch_response_it_stands_for(
    batches: bytes, high_watermark: int, log_start_offset: int, last_stable_offset: int
) -> None:
    answer = FetchAnswer(batches, high_watermark, log_start_offset, last_stable_offset)
    encoded = encode_fetch_answer(answer)
    parsed = log_service_pb2.FetchResponse.FromString(encoded)
    assert (
        parsed.record_batches,
        parsed.high_watermark,
        parsed.log_start_offset,
        parsed.last_stable_offset,
    ) == (batches, high_watermark, log_start_offset, last_stable_offset)
    expected = log_service_pb2.FetchResponse(
        record_batches=batches,
        high_watermark=high_watermark,
        log_start_offset=log_start_offset,
        last_stable_offset=last_stable_offset,
    )
    assert encoded == expected.SerializeToString()
    as_message = log_service_pb2.SubscribeResponse.FromString(encoded)
    assert as_message.SerializeToString() == encoded


@given(
    st.binary(max_size=300),
    INT64,
    st.lists(st.tuples(INT64, INT64), max_size=5),
)
def test_a_read_committed_answer_carries_its_last_stable_offset_and_aborted_transactions(
    batches: bytes, last_stable_offset: int, aborted: list[tuple[int, int]]
) -> None:
    answer = FetchAnswer(
        batches, 10, 0, last_stable_offset, [AbortedTransaction(*txn) for txn in aborted]
    )
    encoded = encode_fetch_answer(answer)
    expected = log_service_pb2.FetchResponse(
        record_batches=batches,
        high_watermark=10,
        last_stable_offset=last_stable_offset,
        aborted_transactions=[
            log_service_pb2.AbortedTransaction(producer_id=pid, first_offset=first)
            for pid, first in aborted
        ],
    )
    assert encoded == expected.SerializeToString()
    parsed = log_service_pb2.SubscribeResponse.FromString(encoded)
    assert parsed.last_stable_offset == last_stable_offset
    assert [(t.producer_id, t.first_offset) for t in parsed.aborted_transactions] == aborted


_ERRORS = st.none() | st.builds(
    common_pb2.Error, reason=st.sampled_from(["NOT_LEADER_OR_FOLLOWER", ""]), message=st.text()
)


@given(
    st.lists(
        st.tuples(
            st.text(max_size=20),
            st.integers(0, 2**31 - 1),
            INT64,
            st.none() | st.tuples(st.binary(max_size=300), INT64, INT64, INT64),
            _ERRORS,
        ),
        max_size=4,
    )
)
def test_a_session_answer_parses_as_the_fetch_session_response_it_stands_for(
    partitions: list[
        tuple[str, int, int, tuple[bytes, int, int, int] | None, common_pb2.Error | None]
    ],
) -> None:
    items = [
        PartitionAnswer(topic, partition, generation, fields and FetchAnswer(*fields), error)
        for topic, partition, generation, fields, error in partitions
    ]
    expected = log_service_pb2.FetchSessionResponse()
    for topic, partition, generation, fields, error in partitions:
        data = expected.partitions.add(topic=topic, partition=partition, generation=generation)
        if fields is not None:
            batches, high_watermark, log_start, last_stable = fields
            data.record_batches = batches
            data.high_watermark = high_watermark
            data.log_start_offset = log_start
            data.last_stable_offset = last_stable
        if error is not None:
            data.error.CopyFrom(error)
    assert encode_session_answer(items) == expected.SerializeToString()
