"""How ``tierlog consume`` prints a record: Kafka's console consumer's formatters.

The default formatter is Kafka's ``DefaultMessageFormatter``, driven by its
``--property`` names: ``print.timestamp``, ``print.partition``, ``print.offset``,
``print.headers``, ``print.key`` (each false by default) and ``print.value`` (true),
then ``key.separator`` (a tab) between the fields, ``line.separator`` (a newline) after
each record, ``headers.separator`` (``,``) between headers printed as ``key:value``,
and ``null.literal`` (``null``) for a null key, value or header value. Fields come in
Kafka's order: ``CreateTime:TS``, ``Partition:P``, ``Offset:O``, the headers (or
``NO_HEADERS``), the key, the value. (The timestamp is labelled ``CreateTime`` whatever
the topic's ``message.timestamp.type``: the client's records do not carry the type.)

``--formatter json`` prints one JSON object per line instead: ``topic``, ``partition``,
``offset``, ``timestamp``, ``headers`` (a list of ``[key, value]``, bytes that are not
UTF-8 escaped with backslashes), ``key`` and ``value``; a key or value that is not UTF-8
is given as ``key_base64`` / ``value_base64`` instead, so every record prints whatever
its bytes.
"""

from __future__ import annotations

import base64
import json
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from tierlog.cli.server_option import true_or_false
from tierlog.client.consumer import ConsumerRecord

__all__ = ["FORMATTERS", "RecordFormat", "RecordFormatError", "json_line"]

FORMATTERS = ("default", "json")
_FLAGS = ("print.timestamp", "print.partition", "print.offset", "print.headers", "print.key")
_TEXTS = ("key.separator", "line.separator", "headers.separator", "null.literal")


class RecordFormatError(ValueError):
    """A ``--property`` the formatter does not know or cannot take."""


@dataclass(frozen=True)
class RecordFormat:
    print_timestamp: bool = False
    print_partition: bool = False
    print_offset: bool = False
    print_headers: bool = False
    print_key: bool = False
    print_value: bool = True
    key_separator: bytes = b"\t"
    line_separator: bytes = b"\n"
    headers_separator: bytes = b","
    null_literal: bytes = b"null"

    @classmethod
    def from_properties(cls, props: Mapping[str, str]) -> RecordFormat:
        unknown = sorted(set(props) - {*_FLAGS, "print.value", *_TEXTS})
        if unknown:
            known = ", ".join((*_FLAGS, "print.value", *_TEXTS))
            raise RecordFormatError(f"unknown property {unknown[0]!r} (known: {known})")
        flags = {name: true_or_false(props, name, False, RecordFormatError) for name in _FLAGS}
        texts = {name: props[name].encode() for name in _TEXTS if name in props}
        defaults = cls()
        return cls(
            print_timestamp=flags["print.timestamp"],
            print_partition=flags["print.partition"],
            print_offset=flags["print.offset"],
            print_headers=flags["print.headers"],
            print_key=flags["print.key"],
            print_value=true_or_false(props, "print.value", True, RecordFormatError),
            key_separator=texts.get("key.separator", defaults.key_separator),
            line_separator=texts.get("line.separator", defaults.line_separator),
            headers_separator=texts.get("headers.separator", defaults.headers_separator),
            null_literal=texts.get("null.literal", defaults.null_literal),
        )

    def line(self, record: ConsumerRecord) -> bytes:
        fields: list[bytes] = []
        if self.print_timestamp:
            stamp = record.timestamp
            fields.append(b"CreateTime:%d" % stamp if stamp >= 0 else b"NO_TIMESTAMP")
        if self.print_partition:
            fields.append(b"Partition:%d" % record.partition)
        if self.print_offset:
            fields.append(b"Offset:%d" % record.offset)
        if self.print_headers:
            fields.append(
                self.headers_separator.join(
                    name.encode() + b":" + self._bytes(value) for name, value in record.headers
                )
                if record.headers
                else b"NO_HEADERS"
            )
        if self.print_key:
            fields.append(self._bytes(record.key))
        if self.print_value:
            fields.append(self._bytes(record.value))
        return self.key_separator.join(fields) + self.line_separator

    def _bytes(self, data: bytes | None) -> bytes:
        return self.null_literal if data is None else data


def json_line(record: ConsumerRecord) -> bytes:
    """One record as a line of JSON (``--formatter json``)."""
    document: dict[str, Any] = {
        "topic": record.topic,
        "partition": record.partition,
        "offset": record.offset,
        "timestamp": record.timestamp,
        "headers": [[name, _text_or_none(value)] for name, value in record.headers],
    }
    for field, data in (("key", record.key), ("value", record.value)):
        if data is None:
            document[field] = None
            continue
        try:
            document[field] = data.decode()
        except UnicodeDecodeError:
            document[f"{field}_base64"] = base64.b64encode(data).decode()
    return json.dumps(document, ensure_ascii=False).encode() + b"\n"


def _text_or_none(data: bytes | None) -> str | None:
    return None if data is None else data.decode(errors="backslashreplace")
