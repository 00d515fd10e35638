"""Spark's pushed filters, as the JVM source sends them (``tierlog.spark.read.FilterJson``),
back into PySpark's filter objects, which ``pushdown.bounds_from_filters`` reads.

``{"op": "GreaterThanOrEqual", "column": "offset", "value": 150}``; ``"values"`` for
``In``; a timestamp as ``{"epoch_us": n}``, rebuilt as an aware UTC datetime.
"""

from __future__ import annotations

import datetime
import json
from typing import Any

from pyspark.sql.datasource import (
    EqualTo,
    Filter,
    GreaterThan,
    GreaterThanOrEqual,
    In,
    LessThan,
    LessThanOrEqual,
)

__all__ = ["filters_from_json"]

_Comparison = EqualTo | GreaterThan | GreaterThanOrEqual | LessThan | LessThanOrEqual
_COMPARISONS: dict[str, type[_Comparison]] = {
    "EqualTo": EqualTo,
    "GreaterThan": GreaterThan,
    "GreaterThanOrEqual": GreaterThanOrEqual,
    "LessThan": LessThan,
    "LessThanOrEqual": LessThanOrEqual,
}


def _value(encoded: Any) -> Any:
    if isinstance(encoded, dict) and "epoch_us" in encoded:
        return datetime.datetime(1970, 1, 1, tzinfo=datetime.UTC) + datetime.timedelta(
            microseconds=int(encoded["epoch_us"])
        )
    return encoded


def filters_from_json(text: str) -> list[Filter]:
    filters: list[Filter] = []
    for item in json.loads(text):
        column = (str(item["column"]),)
        if item["op"] == "In":
            filters.append(In(column, tuple(_value(v) for v in item["values"])))
        else:
            filters.append(_COMPARISONS[item["op"]](column, _value(item["value"])))
    return filters
