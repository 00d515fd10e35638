"""Writing an answer as kio writes it, with its repeated small entities copied from the
bytes kio wrote for the same values before.

A Metadata answer for a topic of thousands of partitions is mostly those partitions, and
from one answer to the next nearly all of them carry the same values. kio writes each
field of each partition with a Python call, and in flexible versions opens a buffer per
partition for its tagged fields: 5 µs a partition, 11 ms of a 2,000-partition answer on
the broker's event loop, unloaded. Here a partition whose values were written before is
written from the bytes kio gave for them then, for the cost of hashing its values (kio's
entities are frozen dataclasses, hashable and equal by value and type).

Only the entity types named in ``MEMOIZED`` are copied, and only the entity types that
hold arrays of them (a Metadata answer and its topics) are written here: field by field
with kio's own field writers, as kio's entity writer does. Anything else, and an entity
type on the way that has tagged fields (not written here), is kio's writer as it is.
"""

from __future__ import annotations

import dataclasses
import functools
import io
from functools import cache
from typing import Any

from kio.serial import entity_writer

# kio's own pieces of its entity writer (not exported, and kio may change them):
# this writer must classify and write each field as kio does, and the byte-for-byte test
# against kio's writer catches a kio whose pieces changed.
from kio.serial._introspect import EntityTupleField, classify_field, get_field_tag
from kio.serial._serialize import get_field_writer
from kio.serial.writers import (
    Writable,
    Writer,
    compact_array_writer,
    legacy_array_writer,
    write_empty_tagged_fields,
)

__all__ = ["MEMOIZED", "writer_of"]

# The entity types (by name, in every version) written from the bytes of their values.
MEMOIZED = frozenset({"MetadataResponsePartition"})

# Distinct values kept: as many as Metadata keeps entries (``metadata._KEPT_PARTITIONS``).
_KEPT_VALUES = 1 << 14


@cache
def writer_of(entity_type: Any) -> Writer[Any]:
    """How ``entity_type`` is written: the same bytes as kio's ``entity_writer``."""
    if entity_type.__name__ in MEMOIZED:
        return _write_from_memo
    fields = dataclasses.fields(entity_type)
    if not _holds_memoized(entity_type) or any(get_field_tag(f) is not None for f in fields):
        return entity_writer(entity_type)
    field_writers = tuple((field.name, _field_writer(entity_type, field)) for field in fields)
    flexible = entity_type.__flexible__

    def write_entity(buffer: Writable, entity: Any) -> None:
        for name, write_field in field_writers:
            write_field(buffer, getattr(entity, name))
        if flexible:  # no tagged fields on this type (above): their count, zero
            write_empty_tagged_fields(buffer)

    return write_entity


def _field_writer(entity_type: Any, field: dataclasses.Field[Any]) -> Writer[Any]:
    """kio's writer of ``field``, but for an array of entities that are (or hold)
    memoized ones: an array of them written by ``writer_of``."""
    flexible = entity_type.__flexible__
    match classify_field(field):
        case EntityTupleField(item_type) if _holds_memoized(item_type):
            array_writer = compact_array_writer if flexible else legacy_array_writer
            return array_writer(writer_of(item_type))
        case _:
            return get_field_writer(field, flexible=flexible, is_request_header=False, is_tag=False)


@cache
def _holds_memoized(entity_type: Any) -> bool:
    """Whether ``entity_type`` is memoized, or holds arrays of such, at any depth."""
    if entity_type.__name__ in MEMOIZED:
        return True
    return any(
        isinstance(kind, EntityTupleField) and _holds_memoized(kind.type_)
        for kind in map(classify_field, dataclasses.fields(entity_type))
    )


def _write_from_memo(buffer: Writable, entity: Any) -> None:
    try:
        encoded = _kio_bytes(entity)
    except TypeError:  # a value kio writes but nobody can hash (a list for a tuple)
        entity_writer(type(entity))(buffer, entity)
        return
    buffer.write(encoded)


@functools.lru_cache(maxsize=_KEPT_VALUES)
def _kio_bytes(entity: Any) -> bytes:
    with io.BytesIO() as written:
        entity_writer(type(entity))(written, entity)
        return written.getvalue()
