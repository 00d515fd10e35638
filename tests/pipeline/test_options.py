"""Options are Spark's Kafka source's, checked once with clear errors."""

from __future__ import annotations

import pytest

from tierlog.pipeline.errors import InvalidOptionError
from tierlog.pipeline.options import EARLIEST, LATEST, parse_options
from tierlog.storage.topic_partition import TopicPartition


def test_defaults_read_every_offset_of_the_subscribed_topics() -> None:
    options = parse_options({"path": "/logs", "subscribe": "a, b"})
    assert options.paths == ("/logs",)
    assert options.subscription.topics == {"a", "b"}
    assert options.starting.default == EARLIEST and options.ending.default == LATEST
    assert options.fail_on_data_loss and not options.include_headers


def test_names_are_case_insensitive_and_json_offsets_parse_per_partition() -> None:
    options = parse_options(
        {
            "PATHS": '["/a", "/b"]',
            "SubscribePattern": "or.*",
            "startingoffsets": '{"orders": {"0": 5, "1": -2}}',
            "ENDINGOFFSETS": '{"orders": {"0": -1}}',
            "minPartitions": "8",
        }
    )
    assert options.paths == ("/a", "/b")
    assert options.subscription.wants(TopicPartition("orders", 3))
    assert not options.subscription.wants(TopicPartition("payments", 0))
    assert options.starting.for_partition(TopicPartition("orders", 0)) == 5
    assert options.starting.for_partition(TopicPartition("orders", 1)) == EARLIEST
    assert options.starting.for_partition(TopicPartition("orders", 2)) == EARLIEST
    assert options.min_partitions == 8


@pytest.mark.parametrize(
    ("raw", "message"),
    [
        ({"subscribe": "a"}, "path"),
        ({"path": "/l"}, "exactly one of"),
        ({"path": "/l", "subscribe": "a", "assign": '{"a": [0]}'}, "exactly one of"),
        ({"path": "/l", "subscribe": "../etc"}, "characters"),
        ({"path": "/l", "subscribePattern": "("}, "regular expression"),
        ({"path": "/l", "assign": '{"a": [-1]}'}, "partition numbers"),
        ({"path": "/l", "subscribe": "a", "startingOffsets": "latest"}, "batch"),
        ({"path": "/l", "subscribe": "a", "endingOffsets": '{"a": {"0": -2}}'}, "earliest"),
        ({"path": "/l", "subscribe": "a", "startingOffsets": "{nope"}, "JSON"),
        ({"path": "/l", "subscribe": "a", "startingTimestamp": "soon"}, "not a number"),
        ({"path": "/l", "subscribe": "a", "minPartitions": "0"}, "positive"),
        ({"path": "/l", "subscribe": "a", "failOnDataLoss": "maybe"}, "true or false"),
    ],
)
def test_bad_options_get_a_typed_error_saying_what_is_wrong(
    raw: dict[str, str], message: str
) -> None:
    with pytest.raises(InvalidOptionError, match=message):
        parse_options(raw)


def test_streaming_starts_at_the_latest_offsets_and_has_no_end() -> None:
    options = parse_options({"path": "/l", "subscribe": "a"}, streaming=True)
    assert options.starting.default == LATEST
    with pytest.raises(InvalidOptionError, match="batch queries only"):
        parse_options(
            {"path": "/l", "subscribe": "a", "endingOffsets": '{"a": {"0": 3}}'}, streaming=True
        )
