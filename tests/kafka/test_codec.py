"""Answers as ``codec.encode_response`` frames them: the size prefix counts what follows,
the pieces read back as the answer, and a large Fetch answer's records are handed over as
the very buffer the log's read gave, not copied into the frame."""

from __future__ import annotations

import tracemalloc

from kio.schema.errors import ErrorCode
from kio.serial import entity_reader
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


def test_a_fetch_answers_records_reach_the_frame_uncopied() -> None:
    records = bytes(MIB)
    answer = _fetch_answer(records)

    tracemalloc.start()
    try:
        pieces = encode_response(7, answer)
        _current, peak_bytes = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()

    assert any(piece is records for piece in pieces)
    assert peak_bytes < 64 * 1024  # a copy of the records is 1 MiB
    frame = memoryview(b"".join(pieces))
    assert int.from_bytes(frame[:4], "big") == len(frame) - 4
    schema = type(answer)
    header, header_bytes = entity_reader(schema.__header_schema__)(frame, 4)
    assert header.correlation_id == 7
    assert entity_reader(schema)(frame, 4 + header_bytes)[0] == answer
