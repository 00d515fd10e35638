"""Kafka's topic-name rules, and partition directory names."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from tierlog.storage.errors import InvalidTopicError
from tierlog.storage.names import (
    MAX_TOPIC_NAME_LENGTH,
    delete_dir_name,
    is_delete_dir,
    parse_partition_dir,
    validate_topic_name,
)
from tierlog.storage.topic_partition import TopicPartition

LEGAL_CHARS = "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789._-"


@pytest.mark.parametrize(
    "topic", ["orders", "a", "a.b_c-D9", "__consumer_offsets", "...", "-x", "x" * 249]
)
def test_legal_topic_names(topic: str) -> None:
    assert validate_topic_name(topic) == topic


@pytest.mark.parametrize(
    "topic",
    [
        "",
        ".",
        "..",
        "x" * 250,
        "../x",
        "a/b",
        "/etc",
        "a\\b",
        "with space",
        "tab\t",
        "new\nline",
        "nul\x00",
        "ümlaut",
        "colon:",
        "star*",
    ],
)
def test_illegal_topic_names(topic: str) -> None:
    with pytest.raises(InvalidTopicError):
        validate_topic_name(topic)


@given(st.text(alphabet=LEGAL_CHARS, min_size=1, max_size=MAX_TOPIC_NAME_LENGTH))
def test_any_name_of_legal_characters_is_legal_except_dots(topic: str) -> None:
    if topic in (".", ".."):
        with pytest.raises(InvalidTopicError):
            validate_topic_name(topic)
    else:
        assert validate_topic_name(topic) == topic


@given(st.text(min_size=1, max_size=300))
def test_a_name_that_passes_is_a_single_plain_path_component(topic: str) -> None:
    try:
        validate_topic_name(topic)
    except InvalidTopicError:
        return
    assert "/" not in topic and "\x00" not in topic and topic not in (".", "..")
    assert len(topic) <= MAX_TOPIC_NAME_LENGTH
    assert set(topic) <= set(LEGAL_CHARS)


@pytest.mark.parametrize(
    ("name", "expected"),
    [
        ("orders-3", TopicPartition("orders", 3)),
        ("my-topic-12", TopicPartition("my-topic", 12)),
        ("a.b-0", TopicPartition("a.b", 0)),
        ("orders", None),
        ("orders-", None),
        ("orders-x", None),
        ("-3", None),
        ("..-1", None),
        ("orders-3.abcdef-delete", None),
        ("bad name-1", None),
        ("orders--1", TopicPartition("orders-", 1)),
    ],
)
def test_parse_partition_dir(name: str, expected: TopicPartition | None) -> None:
    assert parse_partition_dir(name) == expected


def test_dir_name_round_trips() -> None:
    tp = TopicPartition("my-topic.v2", 7)
    assert tp.dir_name == "my-topic.v2-7"
    assert parse_partition_dir(tp.dir_name) == tp


@pytest.mark.parametrize("partition", [0, 7, 2**31 - 1])
def test_a_longest_topics_delete_dir_name_is_cut_to_fit_a_file_name(partition: int) -> None:
    topic = "t" * MAX_TOPIC_NAME_LENGTH
    name = delete_dir_name(TopicPartition(topic, partition))
    assert len(name.encode()) == 255
    assert name.endswith(f"-{partition}.{name[-39:-7]}-delete")
    assert topic.startswith(name.partition("-")[0])
    assert is_delete_dir(name) and parse_partition_dir(name) is None


def test_a_short_topics_delete_dir_name_keeps_the_whole_topic() -> None:
    name = delete_dir_name(TopicPartition("orders", 3))
    assert name.startswith("orders-3.") and name.endswith("-delete")
    assert len(name) == len("orders-3.") + 32 + len("-delete")
    assert name != delete_dir_name(TopicPartition("orders", 3))  # a fresh id each time


@pytest.mark.parametrize(
    "name",
    [
        "orders-3.0f8fad5bb9fd4f51bba3dfd1a6a1c0f2-delete",
        "a.b-c-12.0f8fad5bb9fd4f51bba3dfd1a6a1c0f2-delete",
        "-0.0f8fad5bb9fd4f51bba3dfd1a6a1c0f2-delete",  # a topic part cut to nothing
    ],
)
def test_delete_dirs_are_recognised(name: str) -> None:
    assert is_delete_dir(name) and parse_partition_dir(name) is None


@pytest.mark.parametrize(
    "name",
    [
        "orders-3",
        "topic-delete-0",
        "delete",
        "x-delete",
        "-delete",
        "backup-1.old-delete",  # someone's directory, not a deleted partition
        "orders-3.0F8FAD5BB9FD4F51BBA3DFD1A6A1C0F2-delete",
        "orders-x.0f8fad5bb9fd4f51bba3dfd1a6a1c0f2-delete",
    ],
)
def test_partition_dirs_and_others_are_not_delete_dirs(name: str) -> None:
    assert not is_delete_dir(name)
