"""Answers as ``codec.encode_response`` frames them: the size prefix counts what follows,
and a large Fetch answer's records are copied once, into the frame, not a second time
out of the buffer they were written into."""

from __future__ import annotations

import tracemalloc

from kio.schema.errors import ErrorCode
from kio.static.protocol import ResponsePayload

from tierlog.kafka.codec import build, encode_response, response_type
from tierlog.kafka.versions import FETCH

MIB = 1024 * 1024


def _fetch_answer(records: bytes) -> ResponsePayload:
    partition = {
        "partition_index": 0,
        "error_code": ErrorCode.none,
        "high_watermark": 1000,
        "aborted_transactions": [],
        "records": records,
    }
    return build(
        response_type(FETCH, 12),
        {
            "throttle_time": 0,
            "error_code": ErrorCode.none,
            "session_id": 0,
            "responses": [{"topic": "t", "partitions": [partition]}],
        },
    )


def test_a_fetch_answer_of_1_mib_is_framed_with_one_copy_of_its_records() -> None:
    records = bytes(MIB)
    answer = _fetch_answer(records)

    tracemalloc.start()
    try:
        frame = encode_response(7, answer)
        _current, peak_bytes = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()

    assert int.from_bytes(frame[:4], "big") == len(frame) - 4
    assert int.from_bytes(frame[4:8], "big") == 7  # the correlation id
    assert frame.endswith(records[-64:])
    assert peak_bytes < 1.5 * MIB  # the buffer written into (a second copy is 2 MiB)
