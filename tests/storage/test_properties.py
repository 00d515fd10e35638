"""Java properties as Kafka reads ``server.properties``: every separator, comments,
continuations and escapes; what we write reads back unchanged."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from tests.interop.kafka import kafka_tools
from tierlog.storage.errors import InvalidConfigError
from tierlog.storage.properties import format_properties, parse_properties, read_properties

DUMP_PROGRAM = Path(__file__).parent / "java" / "PropertiesDump.java"

# Every form a hand-written server.properties may take (ASCII: Kafka reads Latin-1).
HAND_WRITTEN = """\
# Written by hand \\
! a comment in Java's other style, not continued either
  log.dirs=/data/one
node.id = 7
message.max.bytes: 2000000
log.segment.bytes   1048576
\tlog.retention.hours\t=\t24
cluster.id=tier\\
     log-\\
  test
key\\ with\\:odd\\=chars = caf\\u00e9 \\
  continued=still the value
escapes=a\\tb\\\\c\\qd\\#
url=s3://bucket/prefix?a=b
empty
blank.value =
escaped.space = x\\ \r
crlf.line=yes\r
listeners=PLAINTEXT://:9092
"""

EXPECTED = {
    "log.dirs": "/data/one",
    "node.id": "7",
    "message.max.bytes": "2000000",
    "log.segment.bytes": "1048576",
    "log.retention.hours": "24",
    "cluster.id": "tierlog-test",
    "key with:odd=chars": "café continued=still the value",
    "escapes": "a\tb\\cqd#",
    "url": "s3://bucket/prefix?a=b",
    "empty": "",
    "blank.value": "",
    "escaped.space": "x ",
    "crlf.line": "yes",
    "listeners": "PLAINTEXT://:9092",
}


def test_every_separator_comment_continuation_and_escape(tmp_path: Path) -> None:
    assert parse_properties(HAND_WRITTEN) == EXPECTED
    path = tmp_path / "server.properties"
    path.write_bytes(HAND_WRITTEN.encode())
    assert read_properties(path) == EXPECTED


@pytest.mark.parametrize(
    ("content", "problem"),
    [(b"node.id=1\n\xff\xfe\x00\x01", "is not UTF-8 text"), (b"a=\\u12x4\n", "malformed")],
)
def test_a_file_that_cannot_be_read_is_a_config_error_naming_it(
    tmp_path: Path, content: bytes, problem: str
) -> None:
    path = tmp_path / "meta.properties"
    path.write_bytes(content)
    with pytest.raises(InvalidConfigError, match=problem) as caught:
        read_properties(path)
    assert str(path) in str(caught.value)


@pytest.mark.interop
def test_kafka_reads_the_same_file_the_same_way(tmp_path: Path) -> None:
    path = tmp_path / "server.properties"
    path.write_bytes(HAND_WRITTEN.encode("ascii"))
    kafka = kafka_tools()
    done = subprocess.run(
        [str(kafka.java), "-cp", f"{kafka.home / 'libs'}/*", str(DUMP_PROGRAM), str(path)],
        capture_output=True,
        encoding="utf-8",
        timeout=300,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    read_by_kafka = {
        bytes.fromhex(key).decode(): bytes.fromhex(value).decode()
        for key, _, value in (line.partition("\t") for line in done.stdout.splitlines())
    }
    assert read_by_kafka == EXPECTED


def test_trailing_whitespace_is_dropped_as_kafka_trims_values() -> None:
    assert parse_properties("a = 1  \nb=two\t\n") == {"a": "1", "b": "two"}


def test_the_last_assignment_of_a_key_wins() -> None:
    assert parse_properties("a=1\na=2\n") == {"a": "2"}


@pytest.mark.parametrize("text", ["a=\\u12\n", "a=\\u12zz\n", "\\uXYZW=1\n"])
def test_a_malformed_unicode_escape_is_a_config_error(text: str) -> None:
    with pytest.raises(InvalidConfigError, match="uXXXX"):
        parse_properties(text)


@given(st.dictionaries(st.text(), st.text()))
def test_what_we_write_reads_back_unchanged(properties: dict[str, str]) -> None:
    assert parse_properties(format_properties(properties)) == properties
