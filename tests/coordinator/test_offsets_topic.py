"""Which ``__consumer_offsets`` partition holds a group: Kafka's rule, checked on values
worked out by hand (and against a real broker in tests/interop/test_consumer_offsets.py)."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from tierlog.coordinator.offsets_topic import (
    DEFAULT_OFFSETS_TOPIC_PARTITIONS,
    OFFSETS_TOPIC,
    java_string_hash,
    kafka_abs,
    partition_for_group,
)

INT_MIN = -(2**31)


def _wrap_int32(value: int) -> int:
    value &= 0xFFFFFFFF
    return value - 2**32 if value >= 2**31 else value


def test_the_topic_and_its_default_size_are_kafkas() -> None:
    assert OFFSETS_TOPIC == "__consumer_offsets"
    assert DEFAULT_OFFSETS_TOPIC_PARTITIONS == 50


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("", 0),
        ("a", 97),
        ("ab", 97 * 31 + 98),
        ("hello", (((104 * 31 + 101) * 31 + 108) * 31 + 108) * 31 + 111),  # 99162322
        # outside the BMP: Java hashes the two UTF-16 code units, D83D DE00
        ("\U0001f600", 0xD83D * 31 + 0xDE00),
        # wraps past 2**31: s[0]*31^(n-1) + ... + s[n-1], taken as a signed int32
        ("my-group", _wrap_int32(sum(ord(c) * 31 ** (7 - i) for i, c in enumerate("my-group")))),
        # the classic string whose hashCode is Integer.MIN_VALUE
        ("polygenelubricants", INT_MIN),
    ],
)
def test_java_string_hash_matches_hand_computed_values(text: str, expected: int) -> None:
    assert java_string_hash(text) == expected


@given(st.text())
def test_java_string_hash_is_a_signed_int32(text: str) -> None:
    assert INT_MIN <= java_string_hash(text) < 2**31


def test_kafka_abs_maps_int_min_to_zero() -> None:
    assert kafka_abs(INT_MIN) == 0
    assert kafka_abs(-5) == 5
    assert kafka_abs(7) == 7


def test_a_group_with_a_negative_hash_uses_its_absolute_value_not_its_low_31_bits() -> None:
    hash_code = java_string_hash("my-group")
    assert hash_code == -1906497762
    assert partition_for_group("my-group") == 1906497762 % 50 == 12
    assert (hash_code & 0x7FFFFFFF) % 50 == 36  # what a masking rule would wrongly say


def test_known_groups_land_where_kafka_puts_them() -> None:
    assert partition_for_group("") == 0
    assert partition_for_group("polygenelubricants") == 0
    assert partition_for_group("payments") == 1382682413 % 50
    assert partition_for_group("hello", 7) == 99162322 % 7


@given(st.text(), st.integers(min_value=1, max_value=1000))
def test_every_group_lands_in_a_partition_of_the_topic(group_id: str, partitions: int) -> None:
    assert 0 <= partition_for_group(group_id, partitions) < partitions


def test_a_topic_without_partitions_is_refused() -> None:
    with pytest.raises(ValueError, match="at least 1"):
        partition_for_group("g", 0)
