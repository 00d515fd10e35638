"""Pushed filters from the JVM's JSON back into PySpark's filter objects, which the
planner's ``bounds_from_filters`` reads."""

from __future__ import annotations

import datetime
import json

from pyspark.sql.datasource import EqualTo, GreaterThanOrEqual, In, LessThan

from tierlog.pipeline.bounds import RowBounds
from tierlog.pipeline.filters_json import filters_from_json
from tierlog.pipeline.pushdown import bounds_from_filters


def test_filters_come_back_as_pyspark_filters() -> None:
    moment = datetime.datetime(2026, 11, 26, 8, 0, 0, 123456, tzinfo=datetime.UTC)
    epoch_us = (moment - datetime.datetime(1970, 1, 1, tzinfo=datetime.UTC)) // datetime.timedelta(
        microseconds=1
    )
    text = json.dumps(
        [
            {"op": "EqualTo", "column": "topic", "value": "orders"},
            {"op": "In", "column": "partition", "values": [1, 2]},
            {"op": "LessThan", "column": "offset", "value": 160},
            {"op": "GreaterThanOrEqual", "column": "timestamp", "value": {"epoch_us": epoch_us}},
        ]
    )

    filters = filters_from_json(text)

    assert filters == [
        EqualTo(("topic",), "orders"),
        In(("partition",), (1, 2)),
        LessThan(("offset",), 160),
        GreaterThanOrEqual(("timestamp",), moment),
    ]
    bounds, kept = bounds_from_filters(filters)
    assert bounds == RowBounds(
        topics=frozenset({"orders"}),
        partitions=frozenset({1, 2}),
        max_offset=160,
        min_timestamp_ms=epoch_us // 1000,
    )
    assert kept == [GreaterThanOrEqual(("timestamp",), moment)]
