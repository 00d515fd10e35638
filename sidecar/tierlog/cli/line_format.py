"""How ``tierlog produce`` reads a line of stdin: Kafka's console producer's line format.

A line is ``[HEADERS<headers.delimiter>][KEY<key.separator>]VALUE``, each part present
only when its ``parse.*`` property is on, with Kafka's property names and defaults:

- ``parse.key`` (false) and ``key.separator`` (a tab);
- ``parse.headers`` (false), ``headers.delimiter`` (a tab) ending the headers,
  ``headers.separator`` (``,``) between headers and ``headers.key.separator`` (``:``)
  inside one;
- ``null.marker`` (unset): a key, value or header value equal to it is null;
- ``ignore.error`` (false): a line without its key separator is then a value with a null
  key, and a line without its headers delimiter a line without headers, rather than an
  error naming the line.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass

from tierlog.cli.server_option import true_or_false
from tierlog.storage.records import Header

__all__ = ["LineFormat", "LineFormatError", "ParsedLine"]

ParsedLine = tuple[tuple[Header, ...], bytes | None, bytes | None]  # headers, key, value

_PROPERTIES = frozenset(
    (
        "parse.key",
        "key.separator",
        "parse.headers",
        "headers.delimiter",
        "headers.separator",
        "headers.key.separator",
        "null.marker",
        "ignore.error",
    )
)


class LineFormatError(ValueError):
    """A line (or a property) the format cannot read: the message names which."""


@dataclass(frozen=True)
class LineFormat:
    parse_key: bool = False
    key_separator: bytes = b"\t"
    parse_headers: bool = False
    headers_delimiter: bytes = b"\t"
    headers_separator: bytes = b","
    headers_key_separator: bytes = b":"
    null_marker: bytes | None = None
    ignore_error: bool = False

    @classmethod
    def from_properties(cls, props: Mapping[str, str]) -> LineFormat:
        """The format the ``--property`` settings ask for; unknown names are refused."""
        unknown = sorted(set(props) - _PROPERTIES)
        if unknown:
            known = ", ".join(sorted(_PROPERTIES))
            raise LineFormatError(f"unknown property {unknown[0]!r} (known: {known})")
        separators = {
            name: props[name].encode()
            for name in (
                "key.separator",
                "headers.delimiter",
                "headers.separator",
                "headers.key.separator",
            )
            if name in props
        }
        for name, separator in separators.items():
            if not separator:
                raise LineFormatError(f"{name} must not be empty")
        defaults = cls()
        return cls(
            parse_key=true_or_false(props, "parse.key", False, LineFormatError),
            key_separator=separators.get("key.separator", defaults.key_separator),
            parse_headers=true_or_false(props, "parse.headers", False, LineFormatError),
            headers_delimiter=separators.get("headers.delimiter", defaults.headers_delimiter),
            headers_separator=separators.get("headers.separator", defaults.headers_separator),
            headers_key_separator=separators.get(
                "headers.key.separator", defaults.headers_key_separator
            ),
            null_marker=props["null.marker"].encode() if "null.marker" in props else None,
            ignore_error=true_or_false(props, "ignore.error", False, LineFormatError),
        )

    def parse(self, lines: Iterable[bytes]) -> Iterator[ParsedLine]:
        """(headers, key, value) per line; LineFormatError naming a line it cannot read."""
        for number, line in enumerate(lines, 1):
            yield self.parse_line(line.removesuffix(b"\n"), number)

    def parse_line(self, line: bytes, number: int) -> ParsedLine:
        headers: tuple[Header, ...] = ()
        rest = line
        if self.parse_headers:
            text, found, after = rest.partition(self.headers_delimiter)
            if found:
                headers, rest = self._headers(text, number), after
            elif not self.ignore_error:
                raise LineFormatError(f"no headers delimiter found on line number {number}")
        key: bytes | None = None
        if self.parse_key:
            text, found, after = rest.partition(self.key_separator)
            if found:
                key, rest = self._nullable(text), after
            elif not self.ignore_error:
                raise LineFormatError(f"no key separator found on line number {number}")
        return headers, key, self._nullable(rest)

    def _headers(self, text: bytes, number: int) -> tuple[Header, ...]:
        headers: list[Header] = []
        for pair in text.split(self.headers_separator):
            name, found, value = pair.partition(self.headers_key_separator)
            if not found:
                raise LineFormatError(
                    f"no header key separator found in pair {pair.decode(errors='replace')!r} "
                    f"on line number {number}"
                )
            if self.null_marker is not None and name == self.null_marker:
                raise LineFormatError(
                    f"a header key equals the null marker on line number {number}"
                )
            headers.append((name.decode(), self._nullable(value)))
        return tuple(headers)

    def _nullable(self, part: bytes) -> bytes | None:
        return None if self.null_marker is not None and part == self.null_marker else part
