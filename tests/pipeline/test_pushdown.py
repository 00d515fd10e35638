"""Spark's pushed filters (the ``pyspark.sql.datasource`` filter values Spark 4.1+ hands
to ``pushFilters``) as row bounds, and which filters go back to Spark."""

from __future__ import annotations

import datetime

import pytest
from pyspark.sql.datasource import (
    EqualNullSafe,
    EqualTo,
    Filter,
    GreaterThan,
    GreaterThanOrEqual,
    In,
    IsNotNull,
    LessThan,
    LessThanOrEqual,
    Not,
    StringStartsWith,
)

from tierlog.pipeline.bounds import RowBounds
from tierlog.pipeline.pushdown import bounds_from_filters

MOMENT = datetime.datetime(2023, 11, 14, 22, 13, 20, 123456, tzinfo=datetime.UTC)
MOMENT_MS = 1_700_000_000_123


def test_topic_partition_and_offset_filters_become_bounds_spark_need_not_check() -> None:
    filters: list[Filter] = [
        In(("topic",), ("orders", "payments")),
        EqualTo(("topic",), "orders"),
        In(("partition",), (0, 2, 5)),
        EqualTo(("partition",), 2),
        GreaterThanOrEqual(("offset",), 10),
        GreaterThan(("offset",), 11),
        LessThan(("offset",), 30),
        LessThanOrEqual(("offset",), 19),
    ]

    bounds, kept = bounds_from_filters(filters)

    assert bounds == RowBounds(
        topics=frozenset({"orders"}), partitions=frozenset({2}), min_offset=12, max_offset=20
    )
    assert kept == []


@pytest.mark.parametrize(
    ("offset_filter", "selected"),
    [
        (EqualTo(("offset",), 15), (15, 16)),
        (GreaterThan(("offset",), 15), (16, None)),
        (GreaterThanOrEqual(("offset",), 15), (15, None)),
        (LessThan(("offset",), 15), (0, 15)),
        (LessThanOrEqual(("offset",), 15), (0, 16)),
    ],
)
def test_each_offset_comparison_selects_its_half_open_range(
    offset_filter: Filter, selected: tuple[int, int | None]
) -> None:
    bounds, kept = bounds_from_filters([offset_filter])

    assert (bounds.min_offset, bounds.max_offset) == selected
    assert kept == []


def test_a_lower_timestamp_bound_prunes_and_goes_back_to_spark() -> None:
    """Record timestamps are not ordered within a partition: the bound moves the start,
    Spark still drops the earlier records after it."""
    later = GreaterThan(("timestamp",), MOMENT + datetime.timedelta(milliseconds=5))
    at_or_after = GreaterThanOrEqual(("timestamp",), MOMENT)

    bounds, kept = bounds_from_filters([at_or_after, later])

    assert bounds == RowBounds(min_timestamp_ms=MOMENT_MS + 5)
    assert kept == [at_or_after, later]


UNSUPPORTED: list[Filter] = [
    LessThan(("timestamp",), MOMENT),  # an upper time bound prunes nothing at the start
    EqualTo(("timestamp",), MOMENT),
    EqualTo(("key",), b"k"),
    EqualTo(("headers", "key"), "h"),
    StringStartsWith(("topic",), "ord"),
    EqualNullSafe(("partition",), 1),
    Not(EqualTo(("partition",), 1)),
    IsNotNull(("offset",)),
    EqualTo(("offset",), True),
    GreaterThan(("offset",), 1.5),
    In(("offset",), (1, 2)),
    In(("partition",), (1, "2")),
    EqualTo(("topic",), 7),
]


@pytest.mark.parametrize("unsupported", UNSUPPORTED, ids=repr)
def test_other_filters_go_back_to_spark_untouched(unsupported: Filter) -> None:
    bounds, kept = bounds_from_filters([unsupported])

    assert bounds == RowBounds()
    assert kept == [unsupported]


def test_supported_and_unsupported_filters_together() -> None:
    supported = [EqualTo(("partition",), 1), LessThan(("offset",), 100)]

    bounds, kept = bounds_from_filters([UNSUPPORTED[0], *supported, UNSUPPORTED[2]])

    assert bounds == RowBounds(partitions=frozenset({1}), max_offset=100)
    assert kept == [UNSUPPORTED[0], UNSUPPORTED[2]]
