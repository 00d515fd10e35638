"""Which ``__transaction_state`` partition holds a transactional id: the groups' rule over
the transaction topic's own partition count (and against a real broker in
tests/interop/test_transaction_log.py)."""

from __future__ import annotations

import pytest

from tierlog.coordinator.transaction_topic import (
    DEFAULT_TRANSACTION_TOPIC_PARTITIONS,
    TRANSACTION_STATE_TOPIC,
    partition_for_transactional_id,
)


def test_the_topic_and_its_default_size_are_kafkas() -> None:
    assert TRANSACTION_STATE_TOPIC == "__transaction_state"
    assert DEFAULT_TRANSACTION_TOPIC_PARTITIONS == 50


@pytest.mark.parametrize(
    ("transactional_id", "partitions", "expected"),
    [
        ("a", 50, 97 % 50),
        ("analytics", 50, 10),  # a negative hash: abs, not a 31-bit mask (which says 38)
        ("polygenelubricants", 50, 0),  # hashCode is Integer.MIN_VALUE: Kafka's abs gives 0
        ("a", 1, 0),
    ],
)
def test_a_transactional_id_lives_where_kafkas_rule_puts_it(
    transactional_id: str, partitions: int, expected: int
) -> None:
    assert partition_for_transactional_id(transactional_id, partitions) == expected


def test_a_topic_without_partitions_is_refused() -> None:
    with pytest.raises(ValueError, match=r"transaction\.state\.log\.num\.partitions"):
        partition_for_transactional_id("a", 0)
