"""Fetch answers written by hand are the FetchResponse (and SubscribeResponse) the
generated classes read."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from tierlog.api.v1 import log_service_pb2
from tierlog.sidecar.fetch_wire import FetchAnswer, encode_fetch_answer

INT64 = st.integers(-(2**63), 2**63 - 1)


@given(st.binary(max_size=3000), INT64, INT64)
def test_an_answer_parses_as_the_fetch_response_it_stands_for(
    batches: bytes, high_watermark: int, log_start_offset: int
) -> None:
    encoded = encode_fetch_answer(FetchAnswer(batches, high_watermark, log_start_offset))
    parsed = log_service_pb2.FetchResponse.FromString(encoded)
    assert (parsed.record_batches, parsed.high_watermark, parsed.log_start_offset) == (
        batches,
        high_watermark,
        log_start_offset,
    )
    expected = log_service_pb2.FetchResponse(
        record_batches=batches, high_watermark=high_watermark, log_start_offset=log_start_offset
    )
    assert encoded == expected.SerializeToString()
    as_message = log_service_pb2.SubscribeResponse.FromString(encoded)
    assert as_message.SerializeToString() == encoded
