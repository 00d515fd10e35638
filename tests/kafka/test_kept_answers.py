"""Kept answers: a written body framed for any request is the frame ``encode_response``
gives for that request, byte for byte, in every Metadata version; an answer is kept per
question while the state holds, and built again once it moves."""

from __future__ import annotations

import uuid
from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st
from kio.schema.errors import ErrorCode
from kio.static.protocol import ResponsePayload

from tests.kafka.test_memoized_entities import _answers, _versions
from tierlog.kafka.codec import build, encode_response, frame_body, response_type
from tierlog.kafka.kept_answers import KEPT_ANSWERS, KeptAnswers, written
from tierlog.kafka.versions import METADATA

_ID = uuid.UUID(int=1)
_correlation_ids = st.integers(min_value=-(2**31), max_value=2**31 - 1)


@settings(max_examples=200, deadline=None)
@given(values=_answers, version=_versions, first=_correlation_ids, second=_correlation_ids)
def test_a_written_answer_framed_for_two_requests_is_each_ones_encoded_answer(
    values: dict[str, Any], version: int, first: int, second: int
) -> None:
    answer = build(response_type(METADATA, version), values)
    kept = written(answer)

    for correlation_id in (first, second):
        framed = frame_body(correlation_id, kept.schema, kept.body)
        assert b"".join(framed) == b"".join(encode_response(correlation_id, answer))
    assert all(type(piece) is bytes for piece in kept.body)  # sent again: never changed


def _answer(leader_id: int) -> ResponsePayload:
    partition = {"error_code": ErrorCode.none, "partition_index": 0, "leader_id": leader_id}
    topic = {"error_code": ErrorCode.none, "name": "t", "topic_id": _ID, "partitions": [partition]}
    values = {"throttle_time": 0, "brokers": [], "topics": [topic]}
    return build(response_type(METADATA, 12), values)


def test_an_answer_is_built_once_per_question_while_the_state_holds() -> None:
    answers = KeptAnswers()
    built: list[str] = []

    def build_for(key: str) -> ResponsePayload:
        built.append(key)
        return _answer(len(built))

    first = answers.answer(1, "a", lambda: build_for("a"))
    again = answers.answer(1, "a", lambda: build_for("a"))
    other = answers.answer(1, "b", lambda: build_for("b"))

    assert again is first
    assert other != first
    assert built == ["a", "b"]


def test_a_new_state_drops_every_kept_answer() -> None:
    answers = KeptAnswers()
    before = answers.answer((3, 7), "a", lambda: _answer(0))

    after = answers.answer((3, 8), "a", lambda: _answer(1))

    assert after == written(_answer(1))
    assert before == written(_answer(0))
    assert answers.answer((3, 8), "a", lambda: _answer(2)) is after


def test_the_least_recently_asked_question_is_dropped_beyond_the_bound() -> None:
    answers = KeptAnswers()
    for key in range(KEPT_ANSWERS):
        answers.answer(0, key, lambda: _answer(0))
    oldest = answers.answer(0, 0, lambda: _answer(0))  # asked again: now the newest
    answers.answer(0, KEPT_ANSWERS, lambda: _answer(0))  # one too many: key 1 goes

    assert answers.answer(0, 0, lambda: _answer(1)) is oldest
    assert answers.answer(0, 1, lambda: _answer(1)) == written(_answer(1))
