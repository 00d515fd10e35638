"""Answers as ``codec.encode_response`` frames them: the size prefix counts what follows,
the pieces read back as the answer, and a large Fetch answer's records are handed over as
the very buffer the log's read gave, not copied into the frame."""

from __future__ import annotations

import subprocess
import sys
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


# Run in a process of its own, so that no other test has loaded the version before.
_FIRST_SEEN = """
import io, sys
from kio.serial import entity_writer
from kio.static.primitive import i16, i32
from tierlog.kafka.codec import (
    build, encode_response, load_version, loaded_version, read_request, request_type,
    response_type,
)
from tierlog.kafka.versions import METADATA

version = 12
assert not loaded_version(METADATA, version)
load_version(METADATA, version)
assert loaded_version(METADATA, version)
request_schema = request_type(METADATA, version)
header_schema = request_schema.__header_schema__
payload = io.BytesIO()
entity_writer(header_schema)(payload, header_schema(
    request_api_key=i16(METADATA), request_api_version=i16(version),
    correlation_id=i32(5), client_id="probe",
))
entity_writer(request_schema)(payload, request_schema(
    topics=None, allow_auto_topic_creation=False, include_topic_authorized_operations=False,
))
before = set(sys.modules)
frame = read_request(payload.getvalue(), METADATA, version)
answer = build(response_type(METADATA, version), {"throttle_time": 0, "brokers": [], "topics": []})
encode_response(frame.correlation_id, answer)
print(sorted(set(sys.modules) - before))
"""


def test_a_loaded_version_is_read_and_answered_without_importing_anything() -> None:
    """What a listener does in a thread at a version's first request (``load_version``)
    is all the first-time work: the request read and its answer written after it import
    no module on the event loop."""
    done = subprocess.run(
        [sys.executable, "-c", _FIRST_SEEN], capture_output=True, text=True, check=True
    )
    assert done.stdout.strip() == "[]"
