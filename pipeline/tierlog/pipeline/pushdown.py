"""Spark's pushed filters (4.1+) as ``RowBounds``.

Accepted exactly (Spark drops them after the scan): ``topic`` and ``partition``
equality and ``IN``, and comparisons on ``offset``. Used only to prune and handed
back to Spark: lower bounds on ``timestamp``. Everything else is handed back as is.
"""

from __future__ import annotations

import datetime
import math
from collections.abc import Sequence

from pyspark.sql.datasource import (
    EqualTo,
    Filter,
    GreaterThan,
    GreaterThanOrEqual,
    In,
    LessThan,
    LessThanOrEqual,
)

from tierlog.pipeline.bounds import RowBounds

__all__ = ["bounds_from_filters"]


def bounds_from_filters(filters: Sequence[Filter]) -> tuple[RowBounds, list[Filter]]:
    """The bounds the filters imply, and the filters Spark must still evaluate."""
    bounds = RowBounds()
    kept: list[Filter] = []
    for item in filters:
        narrowed = _narrow(bounds, item)
        if narrowed is None:
            kept.append(item)
            continue
        bounds, exact = narrowed
        if not exact:
            kept.append(item)
    return bounds, kept


def _narrow(bounds: RowBounds, item: Filter) -> tuple[RowBounds, bool] | None:
    column = getattr(item, "attribute", ())
    value = getattr(item, "value", None)
    if column == ("topic",):
        topics = _values(item, str)
        return None if topics is None else (bounds.with_topics(frozenset(map(str, topics))), True)
    if column == ("partition",):
        numbers = _values(item, int)
        if numbers is None:
            return None
        return bounds.with_partitions(frozenset(int(str(n)) for n in numbers)), True
    if column == ("offset",) and isinstance(value, int) and not isinstance(value, bool):
        narrowed = _offset_bound(bounds, item, value)
        return None if narrowed is None else (narrowed, True)
    lower = isinstance(item, GreaterThan | GreaterThanOrEqual)
    if column == ("timestamp",) and lower and isinstance(value, datetime.datetime):
        return bounds.with_min_timestamp(_epoch_ms(value)), False
    return None


def _values(item: Filter, kind: type) -> list[object] | None:
    if isinstance(item, EqualTo) and isinstance(item.value, kind):
        return [item.value]
    if isinstance(item, In) and all(isinstance(v, kind) for v in item.value):
        return list(item.value)
    return None


def _offset_bound(bounds: RowBounds, item: Filter, value: int) -> RowBounds | None:
    if isinstance(item, EqualTo):
        return bounds.with_min_offset(value).with_max_offset(value + 1)
    if isinstance(item, GreaterThan):
        return bounds.with_min_offset(value + 1)
    if isinstance(item, GreaterThanOrEqual):
        return bounds.with_min_offset(value)
    if isinstance(item, LessThan):
        return bounds.with_max_offset(value)
    if isinstance(item, LessThanOrEqual):
        return bounds.with_max_offset(value + 1)
    return None


def _epoch_ms(moment: datetime.datetime) -> int:
    """Milliseconds, rounded down (a bound that prunes only, never drops a row)."""
    if moment.tzinfo is None:  # PySpark makes naive datetimes in the process's local zone
        moment = moment.astimezone()
    return math.floor(moment.timestamp() * 1000)
