"""Checked fields of the small JSON documents the bucket keeps beside the manifests
(``topic_records``, ``group_offsets``): a number that is not a whole one is refused
where it is read, never taken for one (``json`` gives bools and floats too)."""

from __future__ import annotations

__all__ = ["optional_whole_number", "whole_number"]


def whole_number(value: object) -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        raise TypeError(f"{value!r} is not a whole number")
    return value


def optional_whole_number(value: object) -> int | None:
    """A field that may be absent (a document an older version wrote) or null."""
    return None if value is None else whole_number(value)
