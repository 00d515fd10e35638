"""Kafka's request and response messages, read and written by ``kio``.

``kio`` is generated from Kafka's message JSON schemas: one frozen dataclass per API,
version and direction, with readers and writers that know each version's field layout
and flexibility (compact strings, tagged fields) and each message's header version
(``__header_schema__``: ApiVersions answers with header v0 at every version, as Kafka
does, so a client that sent a version the broker does not know can still read it).

A response is framed as the buffers to send in turn (``encode_response``): a large value
(a Fetch answer's records) is handed over as the very buffer the log's read gave, between
the gathered bytes of the fields around it. Copying 1 MiB of records into the frame cost a
Fetch a quarter of a millisecond on the loaded machine (fresh pages), about an eighth of
what the broker spent on it, and Kafka's Java consumer waits for each answer before it
asks for the next.

Our handlers fill a response from plain values that name the fields of the newest
version (``build``): fields the asked version lacks are dropped, nested lists are made
of that version's nested types. One handler thus serves a range of versions without a
branch per version; what differs in meaning between versions is the handler's to say.
"""

from __future__ import annotations

import dataclasses
import datetime
import functools
import io
import typing
from collections.abc import Callable, Mapping
from functools import cache
from typing import IO, Any, TypeVar

from kio.index import load_request_schema, load_response_schema
from kio.serial import entity_reader, entity_writer
from kio.static.primitive import i32
from kio.static.protocol import RequestPayload, ResponsePayload

from tierlog.kafka.memoized_entities import writer_of

__all__ = [
    "BY_REFERENCE_BYTES",
    "Frame",
    "build",
    "encode_body",
    "encode_response",
    "frame_body",
    "load_version",
    "loaded_version",
    "nested_entity",
    "read_request",
    "request_type",
    "response_type",
]

E = TypeVar("E")

# api_key (int16) and api_version (int16): what every request header starts with.
HEADER_PREFIX_BYTES = 4
_SIZE_PREFIX_BYTES = 4  # a response frame's size, before its header

# A value written at least this large is framed by reference, not copied: beyond it, one
# more buffer for the transport costs less than the copy.
BY_REFERENCE_BYTES = 64 * 1024


@dataclasses.dataclass(frozen=True)
class Frame:
    """A request as read off the wire: its header's fields and its body."""

    api_key: int
    api_version: int
    correlation_id: int
    client_id: str | None
    body: RequestPayload


# The (api key, version) pairs ``load_version`` has prepared.
_loaded: set[tuple[int, int]] = set()


def loaded_version(api_key: int, api_version: int) -> bool:
    """Whether a request of this API version is read and answered without a first-time
    cost (``load_version`` ran for it)."""
    return (api_key, api_version) in _loaded


def load_version(api_key: int, api_version: int) -> None:
    """Prepare what a request of this API version and its answer need: kio's schema
    modules imported, their readers and writers built, the answer's field conversions
    worked out. A version's first request cost 7-25 ms of this (Fetch v17: 25 ms), which
    a listener does in a thread, not on the event loop every connection shares; loading
    all 191 served versions up front took 1.9 s of CPU, mostly for versions no client
    asks for. Safe to call from any thread: each piece is cached, and one built twice
    meanwhile is the same."""
    request = request_type(api_key, api_version)
    response = response_type(api_key, api_version)
    entity_reader(request.__header_schema__)
    entity_reader(request)
    writer_of(response)
    _conversions(response)
    _loaded.add((api_key, api_version))


@cache
def request_type(api_key: int, api_version: int) -> type[RequestPayload]:
    return load_request_schema(api_key, api_version)


@cache
def response_type(api_key: int, api_version: int) -> type[ResponsePayload]:
    return load_response_schema(api_key, api_version)


def read_request(payload: bytes | memoryview, api_key: int, api_version: int) -> Frame:
    """Parse one request (the bytes after the size prefix) of a version we serve. Raises
    ``ValueError`` (or kio's errors) on bytes that do not parse.

    Bytes after the body's last field are ignored, as Kafka's broker ignores them:
    librdkafka 2.12 sends a Metadata v9+ for every topic with its null topic array as
    four bytes where one belongs (confluentinc/librdkafka#5049), which Kafka reads as
    the null array, the two flags false and no tagged fields, and answers."""
    schema = request_type(api_key, api_version)
    header, header_size = entity_reader(schema.__header_schema__)(payload, 0)
    body, _ = entity_reader(schema)(payload, header_size)
    return Frame(api_key, api_version, header.correlation_id, header.client_id, body)


def encode_response(
    correlation_id: int, response: ResponsePayload
) -> tuple[bytes | bytearray, ...]:
    """The response's frame (its size, its header, v0 or v1 as its schema says, its body)
    as the buffers to send in turn (``encode_body``, then ``frame_body``)."""
    return frame_body(correlation_id, type(response), encode_body(response))


def encode_body(response: ResponsePayload) -> tuple[bytes | bytearray, ...]:
    """The response's body as the buffers to send in turn: any value of
    ``BY_REFERENCE_BYTES`` or more is the response's own object, not a copy, and the runs
    of small fields between are handed over as gathered (not copied again: a Metadata
    answer of thousands of partitions is all one run). The body is written as kio writes
    it, its repeated small entities (a Metadata answer's partitions) from the bytes of
    values written before (``memoized_entities``)."""
    pieces = _Pieces()
    writer_of(type(response))(typing.cast(IO[bytes], pieces), response)  # kio uses ``write``
    return pieces.written()


def frame_body(
    correlation_id: int, schema: type[ResponsePayload], body: tuple[bytes | bytearray, ...]
) -> tuple[bytes | bytearray, ...]:
    """The frame of a response of type ``schema`` whose body is ``body``: its size and
    its header (v0 or v1 as the schema says), then the body's buffers, which are not
    changed (one body may be framed for many requests). The size and header go in one
    buffer with the body's first (its leading fields): one send, not two."""
    header_type = schema.__header_schema__
    with io.BytesIO() as header:
        entity_writer(header_type)(header, header_type(correlation_id=i32(correlation_id)))
        header_bytes = header.getvalue()
    first, rest = (body[0], body[1:]) if body else (b"", ())
    size = len(header_bytes) + sum(map(len, body))
    return (size.to_bytes(_SIZE_PREFIX_BYTES, "big") + header_bytes + first, *rest)


class _Pieces:
    """Where kio's writers write a response: small values gathered into runs, each large
    one kept as it is between them."""

    def __init__(self) -> None:
        self._pieces: list[bytes | bytearray] = []
        self._run = bytearray()

    def write(self, data: bytes) -> int:
        if len(data) < BY_REFERENCE_BYTES:
            self._run += data
        else:
            self._pieces += (self._run, data)
            self._run = bytearray()
        return len(data)

    def written(self) -> tuple[bytes | bytearray, ...]:
        """Every piece written, in order (none empty)."""
        return tuple(piece for piece in (*self._pieces, self._run) if piece)


def build(schema: type[E], values: Mapping[str, Any]) -> E:
    """An instance of ``schema`` from ``values`` named as its fields (any version's): the
    fields it lacks are dropped, the ones missing take their defaults, a nested entity
    (or a list of them) is built from a mapping (or a list of mappings) the same way,
    and milliseconds become the ``timedelta`` kio takes for a ``timedelta_i32`` field
    (the ``datetime`` for a ``datetime_i64`` one: -1 stays -1 on the wire)."""
    arguments: dict[str, Any] = {}
    for name, convert in _conversions(typing.cast(type, schema)):
        if name in values:
            value = values[name]
            arguments[name] = value if convert is None else convert(value)
    return schema(**arguments)


@cache
def _conversions(schema: Any) -> tuple[tuple[str, Callable[[Any], Any] | None], ...]:
    """Each field of ``schema`` with what its value goes through (None: nothing), read
    from the schema once: a Metadata answer builds thousands of partitions of one type,
    and working out each field's kind anew for each value (its Kafka type, whether its
    type hint holds an entity) cost most of the time it took."""
    hints = _hints(schema)
    return tuple(
        (field.name, _conversion(hints[field.name], field)) for field in dataclasses.fields(schema)
    )


def _conversion(hint: Any, field: dataclasses.Field[Any]) -> Callable[[Any], Any] | None:
    kafka_type = field.metadata.get("kafka_type")
    if kafka_type in ("timedelta_i32", "timedelta_i64"):
        return _milliseconds
    if kafka_type == "datetime_i64":
        return _timestamp
    nested = _nested_entity(hint)
    if nested is None:
        return None
    return functools.partial(_nested, nested)


def _milliseconds(value: Any) -> Any:
    return datetime.timedelta(milliseconds=value) if isinstance(value, int) else value


def _timestamp(value: Any) -> Any:
    if isinstance(value, int):
        return datetime.datetime.fromtimestamp(value / 1000, datetime.UTC)
    return value


def _nested(schema: type[Any], value: Any) -> Any:
    if isinstance(value, Mapping):
        return build(schema, value)
    if isinstance(value, (list, tuple)):
        return tuple(build(schema, item) if isinstance(item, Mapping) else item for item in value)
    return value


def nested_entity(schema: Any, field_name: str) -> type[Any] | None:
    """The entity type ``schema``'s field holds (one, a tuple of them, either
    optionally), or None for a field of plain values."""
    return _nested_entity(_hints(schema)[field_name])


def _nested_entity(hint: Any) -> type[Any] | None:
    """The dataclass a field holds (one, a tuple of them, either optionally), if any."""
    if isinstance(hint, type) and dataclasses.is_dataclass(hint):
        return hint
    for argument in typing.get_args(hint):
        found = _nested_entity(argument)
        if found is not None:
            return found
    return None


@cache
def _hints(schema: Any) -> dict[str, Any]:
    return typing.get_type_hints(schema)
