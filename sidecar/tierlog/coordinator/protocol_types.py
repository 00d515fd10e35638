"""Kafka's message primitives, the bytes a coordinator record's key and value are made of.

A message version is either classic or *flexible* (KIP-482). Classic versions write a
string as an int16 length (-1 for null) and its UTF-8 bytes, bytes with an int32 length,
arrays with an int32 count. Flexible versions write the same lengths as unsigned
varints of length + 1 (0 for null) and end every struct with its tagged fields: a
count, then per field its tag, its size and its bytes, in increasing tag order, each
written only when it differs from its default.

As Kafka's generated code does, a string longer than 32767 UTF-8 bytes is refused both
ways, and an array whose count exceeds the bytes left is corrupt before anything is
allocated for it. Bytes that do not parse are ``CorruptRecordError``; values that no
version can carry (an int out of its range, an over-long string) are
``InvalidRecordError`` when writing. A field that a version lacks is simply not written,
as Kafka's writers do (Kafka 4.1 writes an offset commit with an expire time at version
1, leaving out its leader epoch and topic id).
"""

from __future__ import annotations

import struct
import uuid
from collections.abc import Callable, Mapping, Sequence
from typing import TypeVar

from tierlog.storage.errors import CorruptRecordError, InvalidRecordError
from tierlog.storage.records.varint import encode_unsigned_varint

__all__ = ["MAX_STRING_BYTES", "MessageReader", "MessageWriter"]

T = TypeVar("T")

MAX_STRING_BYTES = 0x7FFF
_INT8, _INT16 = struct.Struct(">b"), struct.Struct(">h")
_INT32, _INT64 = struct.Struct(">i"), struct.Struct(">q")
_UVARINT_MAX_BYTES = 5  # Kafka's unsigned varints are 32-bit


class MessageWriter:
    """Appends one message's fields, classic or flexible, to a buffer."""

    def __init__(self, *, flexible: bool) -> None:
        self.flexible = flexible
        self._out = bytearray()

    def to_bytes(self) -> bytes:
        return bytes(self._out)

    def _pack(self, codec: struct.Struct, value: int, type_name: str) -> None:
        try:
            self._out += codec.pack(value)
        except struct.error:
            raise InvalidRecordError(f"{value} does not fit a Kafka {type_name}") from None

    def int8(self, value: int) -> None:
        self._pack(_INT8, value, "int8")

    def int16(self, value: int) -> None:
        self._pack(_INT16, value, "int16")

    def int32(self, value: int) -> None:
        self._pack(_INT32, value, "int32")

    def int64(self, value: int) -> None:
        self._pack(_INT64, value, "int64")

    def uuid(self, value: uuid.UUID) -> None:
        self._out += value.bytes

    def unsigned_varint(self, value: int) -> None:
        self._out += encode_unsigned_varint(value)

    def _length(self, length: int | None) -> None:
        """A length or count: -1/None is null; flexible versions write it + 1 as a varint."""
        if self.flexible:
            self.unsigned_varint(0 if length is None else length + 1)
        else:
            self.int32(-1 if length is None else length)

    def nullable_string(self, value: str | None) -> None:
        if value is None:
            if self.flexible:
                self.unsigned_varint(0)
            else:
                self.int16(-1)
            return
        data = value.encode("utf-8")
        if len(data) > MAX_STRING_BYTES:
            raise InvalidRecordError(f"a string of {len(data)} bytes is longer than Kafka's 32767")
        if self.flexible:
            self.unsigned_varint(len(data) + 1)
        else:
            self.int16(len(data))
        self._out += data

    def string(self, value: str) -> None:
        self.nullable_string(value)

    def byte_array(self, value: bytes) -> None:
        self._length(len(value))
        self._out += value

    def array(self, items: Sequence[T], write_item: Callable[[MessageWriter, T], None]) -> None:
        self.nullable_array(items, write_item)

    def nullable_array(
        self, items: Sequence[T] | None, write_item: Callable[[MessageWriter, T], None]
    ) -> None:
        if items is None:
            self._length(None)
            return
        self._length(len(items))
        for item in items:
            write_item(self, item)

    def tagged_fields(self, fields: Mapping[int, bytes] | None = None) -> None:
        """The end of a struct in a flexible version: its tagged fields (tag -> bytes)."""
        if not self.flexible:
            if fields:
                raise InvalidRecordError("tagged fields need a flexible version")
            return
        fields = fields or {}
        self.unsigned_varint(len(fields))
        for tag in sorted(fields):
            self.unsigned_varint(tag)
            self.unsigned_varint(len(fields[tag]))
            self._out += fields[tag]


class MessageReader:
    """Reads one message's fields from ``data``; ``what`` names it in errors."""

    def __init__(self, data: bytes, *, flexible: bool, what: str) -> None:
        self.flexible = flexible
        self.what = what
        self._data = memoryview(data)
        self._pos = 0

    @property
    def remaining(self) -> int:
        return len(self._data) - self._pos

    def _take(self, size: int) -> memoryview:
        if size > self.remaining:
            raise CorruptRecordError(
                f"{self.what}: {size} bytes needed at byte {self._pos}, {self.remaining} left"
            )
        start, self._pos = self._pos, self._pos + size
        return self._data[start : self._pos]

    def _unpack(self, codec: struct.Struct) -> int:
        value: int = codec.unpack(self._take(codec.size))[0]
        return value

    def int8(self) -> int:
        return self._unpack(_INT8)

    def int16(self) -> int:
        return self._unpack(_INT16)

    def int32(self) -> int:
        return self._unpack(_INT32)

    def int64(self) -> int:
        return self._unpack(_INT64)

    def uuid(self) -> uuid.UUID:
        return uuid.UUID(bytes=bytes(self._take(16)))

    def unsigned_varint(self) -> int:
        value = 0
        for shift in range(0, 7 * _UVARINT_MAX_BYTES, 7):
            byte = self._take(1)[0]
            value |= (byte & 0x7F) << shift
            if byte < 0x80:
                return value & 0xFFFFFFFF
        raise CorruptRecordError(f"{self.what}: varint longer than 5 bytes at {self._pos}")

    def _length(self, kind: str) -> int | None:
        """A length or count as written by ``MessageWriter._length``; None for null."""
        length = self.unsigned_varint() - 1 if self.flexible else self.int32()
        if length < -1:  # a length past the bytes left fails where it is used
            raise CorruptRecordError(f"{self.what}: {kind} length {length}")
        return None if length == -1 else length

    def nullable_string(self) -> str | None:
        length = self.unsigned_varint() - 1 if self.flexible else self.int16()
        if length == -1:
            return None
        if not 0 <= length <= MAX_STRING_BYTES:
            raise CorruptRecordError(f"{self.what}: string length {length}")
        try:
            return str(self._take(length), "utf-8")
        except UnicodeDecodeError as exc:
            raise CorruptRecordError(f"{self.what}: a string is not UTF-8 ({exc})") from None

    def string(self, field: str) -> str:
        value = self.nullable_string()
        if value is None:
            raise CorruptRecordError(f"{self.what}: non-nullable field {field} is null")
        return value

    def byte_array(self, field: str) -> bytes:
        length = self._length("bytes")
        if length is None:
            raise CorruptRecordError(f"{self.what}: non-nullable field {field} is null")
        return bytes(self._take(length))

    def array(self, field: str, read_item: Callable[[MessageReader], T]) -> list[T]:
        items = self.nullable_array(read_item)
        if items is None:
            raise CorruptRecordError(f"{self.what}: non-nullable field {field} is null")
        return items

    def nullable_array(self, read_item: Callable[[MessageReader], T]) -> list[T] | None:
        count = self._length("array")
        if count is None:
            return None
        if count > self.remaining:  # every item takes at least a byte
            raise CorruptRecordError(f"{self.what}: {count} items in {self.remaining} bytes")
        return [read_item(self) for _ in range(count)]

    def tagged_fields(self) -> dict[int, bytes]:
        """The end of a struct in a flexible version: its tagged fields (tag -> bytes);
        ``{}`` in a classic version, which has none."""
        if not self.flexible:
            return {}
        fields: dict[int, bytes] = {}
        for _ in range(self.unsigned_varint()):
            tag = self.unsigned_varint()
            if tag in fields:
                raise CorruptRecordError(f"{self.what}: tagged field {tag} twice")
            fields[tag] = bytes(self._take(self.unsigned_varint()))
        return fields

    def done(self) -> None:
        """The message must end here: trailing bytes mean it is not what it claims."""
        if self.remaining:
            raise CorruptRecordError(f"{self.what}: {self.remaining} bytes after its last field")
