"""The fields of a record to send, checked before any byte of it is encoded.

Kafka's producer takes ``byte[]`` from its serializers, so a wrong type never reaches
its batch.  Here ``Producer.send`` takes Python objects, and an encoder that met a
``str`` half way through a record would leave half a record in the open batch, which
the next successful send would carry to the broker: acknowledged and unreadable.  So
every field is checked first, and a wrong one raises ``TypeError`` naming it.

Keys, values and header values are bytes or None; any other object with the buffer
protocol (``bytearray``, ``memoryview``...) is copied into ``bytes`` (a memoryview's
``len`` counts items, not bytes).  Header keys are ``str`` (UTF-8 on the wire).
Timestamps and partitions are ``int``.  ``Producer.send`` calls ``checked_record_fields``
only when a field is not plain bytes or None, so the common record pays one test.
"""

from __future__ import annotations

from collections.abc import Iterable

from tierlog.storage.records import Header

__all__ = ["checked_record_fields"]


def _checked_bytes(field: str, data: object) -> bytes | None:
    if data is None or data.__class__ is bytes:
        return data
    if isinstance(data, str):
        raise TypeError(f"the record's {field} must be bytes or None, not str (encode it first)")
    try:
        view = memoryview(data)  # type: ignore[arg-type]  # any buffer, checked here
    except TypeError:
        raise TypeError(
            f"the record's {field} must be bytes or None, not {type(data).__name__}"
        ) from None
    return view.tobytes()


def _checked_int(field: str, number: object) -> None:
    if number is not None and (number.__class__ is bool or not isinstance(number, int)):
        raise TypeError(f"the record's {field} must be an int, not {type(number).__name__}")


def _checked_headers(headers: Iterable[object]) -> tuple[Header, ...]:
    checked: list[Header] = []
    for index, header in enumerate(headers):
        if not isinstance(header, tuple) or len(header) != 2:
            raise TypeError(f"the record's header {index} must be a (str, bytes) pair")
        header_key, header_value = header
        if not isinstance(header_key, str):
            raise TypeError(
                f"the record's header {index} key must be str, not {type(header_key).__name__}"
            )
        checked.append((header_key, _checked_bytes(f"header {header_key!r} value", header_value)))
    return tuple(checked)


def checked_record_fields(
    key: object,
    value: object,
    headers: Iterable[object],
    timestamp: object,
    partition: object,
) -> tuple[bytes | None, bytes | None, tuple[Header, ...]]:
    """The key, value and headers as the encoder takes them; ``TypeError`` naming the
    first field of a wrong type."""
    checked_key = _checked_bytes("key", key)
    checked_value = _checked_bytes("value", value)
    if isinstance(headers, (str, bytes)):
        raise TypeError("the record's headers must be a sequence of (str, bytes) pairs")
    _checked_int("timestamp", timestamp)
    _checked_int("partition", partition)
    return checked_key, checked_value, _checked_headers(headers)
