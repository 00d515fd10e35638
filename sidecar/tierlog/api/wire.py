"""Protobuf's wire format, for the messages tierlog writes by hand.

A message that carries a MiB of record batches is copied into a upb arena when its
field is set and copied again when it is serialized; writing the few header bytes
and joining them with the batches copies the batches once.  The sidecar answers
Fetch and Subscribe this way (``tierlog.sidecar.fetch_wire``) and the producer writes
its ``ProduceStreamRequest``s so (``tierlog.client.produce_wire``); the other side
parses the bytes as the generated message they are, and tests check each encoder
against the generated class's own serialization.
"""

from __future__ import annotations

from tierlog.api.v1 import log_service_pb2
from tierlog.storage.records.varint import encode_unsigned_varint

__all__ = ["LENGTH_DELIMITED", "LOG_SERVICE", "VARINT", "field_key", "varint"]

# The full name the hand-written methods are registered and called under.
LOG_SERVICE = log_service_pb2.DESCRIPTOR.services_by_name["LogService"].full_name

VARINT, LENGTH_DELIMITED = 0, 2  # the wire types used here
_UINT64 = (1 << 64) - 1


def varint(value: int) -> bytes:
    """The varint of an int32, int64 or enum field: a negative value as its 64-bit two's
    complement (ten bytes), as protobuf writes it."""
    return encode_unsigned_varint(value & _UINT64)


def field_key(number: int, wire_type: int) -> bytes:
    """The tag that starts a field: its number and wire type in one varint."""
    return encode_unsigned_varint(number << 3 | wire_type)
