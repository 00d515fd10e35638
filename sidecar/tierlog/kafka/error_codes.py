"""Every error code an answer carries, wherever its schema puts them.

Kafka counts a response's errors from all its levels (the top-level code, each topic's,
each partition's: ``AbstractResponse.errorCounts``), so an operator sees one
NOT_LEADER_OR_FOLLOWER per partition that moved. kio marks each such field with
``kafka_type="error_code"``; the walk reads that mark and the nested entities' types
once per schema, so a handler added later is counted with no code of its own.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterator
from functools import cache
from typing import Any

from kio.schema.errors import ErrorCode

from tierlog.kafka.codec import nested_entity

__all__ = ["error_codes", "first_error"]


def error_codes(answer: Any) -> Iterator[ErrorCode]:
    """The error codes of ``answer`` (NONE included), the top level's first."""
    schema: Any = type(answer)  # kio's dataclasses are hashable types; mypy cannot tell
    codes, nested = _layout(schema)
    for name in codes:
        yield getattr(answer, name)
    for name in nested:
        value = getattr(answer, name)
        for entity in value if isinstance(value, tuple) else (value,):
            if entity is not None:
                yield from error_codes(entity)


def first_error(answer: Any) -> ErrorCode:
    """The first code of ``answer`` that is not NONE (NONE when it carries none): what
    the request as a whole is counted as."""
    return next((code for code in error_codes(answer) if code != ErrorCode.none), ErrorCode.none)


@cache
def _layout(schema: Any) -> tuple[tuple[str, ...], tuple[str, ...]]:
    """The names of ``schema``'s error-code fields, and of its fields holding entities."""
    codes, nested = [], []
    for field in dataclasses.fields(schema):
        if field.metadata.get("kafka_type") == "error_code":
            codes.append(field.name)
        elif nested_entity(schema, field.name) is not None:
            nested.append(field.name)
    return tuple(codes), tuple(nested)
