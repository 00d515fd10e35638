"""Kafka's console-consumer formatting: fields in Kafka's order, its property names and
defaults, null literals, and the JSON formatter for any bytes."""

from __future__ import annotations

import json

import pytest

from tierlog.cli.record_format import RecordFormat, RecordFormatError, json_line
from tierlog.client import ConsumerRecord

RECORD = ConsumerRecord("t", 2, 41, 1_700_000_000_000, b"k", b"v", (("h1", b"a"), ("h2", None)))


def _line(props: dict[str, str], record: ConsumerRecord = RECORD) -> bytes:
    return RecordFormat.from_properties(props).line(record)


def test_by_default_only_the_value_prints() -> None:
    assert _line({}) == b"v\n"


def test_every_field_prints_in_kafkas_order() -> None:
    flags = ("timestamp", "partition", "offset", "headers", "key")
    props = {f"print.{flag}": "true" for flag in flags}
    assert _line(props) == b"CreateTime:1700000000000\tPartition:2\tOffset:41\th1:a,h2:null\tk\tv\n"


def test_separators_and_the_null_literal_are_kafkas_properties() -> None:
    props = {
        "print.key": "true",
        "print.headers": "true",
        "print.value": "false",
        "key.separator": " | ",
        "line.separator": ";",
        "headers.separator": "&",
        "null.literal": "<nil>",
    }
    assert _line(props) == b"h1:a&h2:<nil> | k;"
    bare = ConsumerRecord("t", 0, 0, -1, None, None)
    everything = {"print.timestamp": "true", "print.headers": "true", "print.key": "true"}
    assert _line(everything, bare) == b"NO_TIMESTAMP\tNO_HEADERS\tnull\tnull\n"


@pytest.mark.parametrize(
    ("props", "message"),
    [
        ({"print.keys": "true"}, "unknown property 'print.keys'"),
        ({"print.offset": "1"}, "print.offset is true or false"),
    ],
)
def test_properties_it_cannot_take_are_refused(props: dict[str, str], message: str) -> None:
    with pytest.raises(RecordFormatError, match=message):
        RecordFormat.from_properties(props)


def test_json_prints_text_as_text_and_other_bytes_in_base64() -> None:
    assert json.loads(json_line(RECORD)) == {
        "topic": "t",
        "partition": 2,
        "offset": 41,
        "timestamp": 1_700_000_000_000,
        "headers": [["h1", "a"], ["h2", None]],
        "key": "k",
        "value": "v",
    }
    binary = ConsumerRecord("t", 0, 7, 5, None, b"\xff\x00")
    document = json.loads(json_line(binary))
    assert document["key"] is None and document["value_base64"] == "/wA="
    assert "value" not in document
