"""Which record a ``__consumer_offsets`` key is: the int16 in front of every key.

Kafka 4 writes each key as its record type followed by the key's fields (older brokers
called that int16 the key version: types 0 and 1 are both offset commits, 0 the legacy
one, and 2 the classic group's metadata). The value's int16 is its own schema version.
"""

from __future__ import annotations

from enum import IntEnum

__all__ = ["CoordinatorRecordType"]


class CoordinatorRecordType(IntEnum):
    """The group coordinator's record types, numbered as Kafka 4.1 numbers them."""

    LEGACY_OFFSET_COMMIT = 0
    OFFSET_COMMIT = 1
    GROUP_METADATA = 2
    CONSUMER_GROUP_METADATA = 3
    CONSUMER_GROUP_PARTITION_METADATA = 4
    CONSUMER_GROUP_MEMBER_METADATA = 5
    CONSUMER_GROUP_TARGET_ASSIGNMENT_METADATA = 6
    CONSUMER_GROUP_TARGET_ASSIGNMENT_MEMBER = 7
    CONSUMER_GROUP_CURRENT_MEMBER_ASSIGNMENT = 8
    CONSUMER_GROUP_REGULAR_EXPRESSION = 16
