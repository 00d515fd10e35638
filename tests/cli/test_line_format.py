"""Kafka's console-producer line format: keys, headers, the null marker, and the lines
it refuses, named by their number."""

from __future__ import annotations

import pytest

from tierlog.cli.line_format import LineFormat, LineFormatError


def _parse(props: dict[str, str], *lines: bytes) -> list[object]:
    return list(LineFormat.from_properties(props).parse(lines))


def test_by_default_a_line_is_a_value() -> None:
    assert _parse({}, b"a\tb:c\n", b"plain") == [((), None, b"a\tb:c"), ((), None, b"plain")]


def test_parse_key_splits_at_the_first_separator() -> None:
    props = {"parse.key": "true", "key.separator": "="}
    assert _parse(props, b"k=v=w\n", b"x=\n") == [((), b"k", b"v=w"), ((), b"x", b"")]
    assert _parse({"parse.key": "true"}, b"k\tv") == [((), b"k", b"v")]  # a tab by default


def test_headers_come_first_then_the_key_and_the_value() -> None:
    props = {"parse.headers": "true", "parse.key": "true"}
    assert _parse(props, b"h1:v1,h2:v2\tkey\tvalue") == [
        ((("h1", b"v1"), ("h2", b"v2")), b"key", b"value")
    ]
    custom = {
        "parse.headers": "true",
        "headers.delimiter": "|",
        "headers.separator": ";",
        "headers.key.separator": "=",
    }
    assert _parse(custom, b"a=1;b=|v") == [((("a", b"1"), ("b", b"")), None, b"v")]


def test_the_null_marker_makes_keys_values_and_header_values_null() -> None:
    props = {
        "parse.headers": "true",
        "parse.key": "true",
        "null.marker": "<null>",
    }
    assert _parse(props, b"h:<null>\t<null>\t<null>") == [((("h", None),), None, None)]
    with pytest.raises(LineFormatError, match="header key equals the null marker"):
        _parse(props, b"<null>:x\tk\tv")


@pytest.mark.parametrize(
    ("props", "line", "message"),
    [
        ({"parse.key": "true"}, b"nokey", "no key separator found on line number 2"),
        ({"parse.headers": "true"}, b"noheaders", "no headers delimiter found on line number 2"),
        ({"parse.headers": "true"}, b"h\tv", "no header key separator found in pair 'h'"),
    ],
)
def test_a_line_it_cannot_read_is_named(props: dict[str, str], line: bytes, message: str) -> None:
    good = b"h:1\tk\tv" if props.get("parse.headers") else b"k\tv"
    with pytest.raises(LineFormatError, match=message):
        _parse(props, good, line)


def test_ignore_error_reads_such_lines_as_values() -> None:
    props = {"parse.key": "true", "parse.headers": "true", "ignore.error": "true"}
    assert _parse(props, b"plain") == [((), None, b"plain")]


@pytest.mark.parametrize(
    ("props", "message"),
    [
        ({"parse.keys": "true"}, "unknown property 'parse.keys'"),
        ({"parse.key": "yes"}, "parse.key is true or false"),
        ({"key.separator": ""}, "key.separator must not be empty"),
    ],
)
def test_properties_it_cannot_take_are_refused(props: dict[str, str], message: str) -> None:
    with pytest.raises(LineFormatError, match=message):
        LineFormat.from_properties(props)
