"""The rows' shape: exactly the schema of Spark's Kafka source.

``timestamp`` is Spark's TimestampType (microseconds, UTC); ``timestampType`` is the
Kafka id (0 CreateTime, 1 LogAppendTime, -1 for v0 messages, which carry none);
``headers`` (only with ``includeHeaders``) is null for a record without headers, as
the Kafka source gives it.
"""

from __future__ import annotations

from typing import Any

import pyarrow as pa

__all__ = [
    "HEADER_TYPE",
    "arrow_schema",
    "spark_ddl",
]

HEADER_TYPE = pa.list_(pa.struct([pa.field("key", pa.string()), pa.field("value", pa.binary())]))

_BASE_FIELDS: list[pa.Field[Any]] = [
    pa.field("key", pa.binary()),
    pa.field("value", pa.binary()),
    pa.field("topic", pa.string()),
    pa.field("partition", pa.int32()),
    pa.field("offset", pa.int64()),
    pa.field("timestamp", pa.timestamp("us", tz="UTC")),
    pa.field("timestampType", pa.int32()),
]

_BASE_DDL = (
    "key binary, value binary, topic string, partition int, offset long, "
    "timestamp timestamp, timestampType int"
)


def arrow_schema(*, include_headers: bool) -> pa.Schema:
    fields: list[pa.Field[Any]] = list(_BASE_FIELDS)
    if include_headers:
        fields.append(pa.field("headers", HEADER_TYPE))
    return pa.schema(fields)


def spark_ddl(*, include_headers: bool) -> str:
    """The same schema as a Spark DDL string (the data source's ``schema()``)."""
    if include_headers:
        return _BASE_DDL + ", headers array<struct<key: string, value: binary>>"
    return _BASE_DDL
