"""Java ``.properties`` text, read as ``java.util.Properties.load`` reads it.

Kafka's ``server.properties`` and a log dir's ``meta.properties`` are in this format,
and people write the first by hand: ``key=value``, ``key: value`` and ``key value`` all
separate a key from its value (the first unescaped ``=``, ``:`` or whitespace ends the
key), lines starting with ``#`` or ``!`` are comments, a line ending in an odd number
of backslashes goes on at the next line (whose leading whitespace is dropped), and
``\\t``, ``\\n``, ``\\r``, ``\\f``, ``\\uXXXX`` are escapes (a backslash before any other
character stands for that character). One departure: whitespace ending a value is
dropped unless escaped, as Kafka trims the values it parses. ``format_properties``
escapes what it writes so that this reader gives back exactly what was written.
"""

from __future__ import annotations

import re
from collections.abc import Iterator, Mapping
from pathlib import Path
from string import hexdigits

from tierlog.storage.errors import InvalidConfigError

__all__ = ["flag", "format_properties", "parse_properties", "read_properties", "whole_number"]

_WHITESPACE = " \t\f"
_SEPARATORS = "=:"
_ESCAPES = {"t": "\t", "n": "\n", "r": "\r", "f": "\f"}
_ESCAPED = {"\\": "\\\\", "\t": "\\t", "\n": "\\n", "\r": "\\r", "\f": "\\f"}
_KEY_SPECIALS = frozenset(_SEPARATORS + _WHITESPACE + "#!")
_NATURAL_LINE_END = re.compile(r"\r\n|\r|\n")  # Java's terminators, not str.splitlines'


def read_properties(path: Path) -> dict[str, str]:
    """The file's key-value pairs; InvalidConfigError naming it when it is not UTF-8
    text or holds a malformed escape."""
    try:
        return parse_properties(path.read_text(encoding="utf-8"))
    except UnicodeDecodeError as error:
        raise InvalidConfigError(f"{path} is not UTF-8 text ({error})") from error
    except InvalidConfigError as error:
        raise InvalidConfigError(f"{path}: {error}") from error


def whole_number(props: Mapping[str, str], key: str, default: int, minimum: int) -> int:
    """The setting ``key`` as a whole number (``default`` when unset), at least
    ``minimum``; INVALID_CONFIG naming the key otherwise."""
    text = props.get(key, "").strip()
    try:
        value = int(text) if text else default
    except ValueError:
        raise InvalidConfigError(f"{key} expects a whole number, got {text!r}") from None
    if value < minimum:
        raise InvalidConfigError(f"{key} must be at least {minimum}, got {value}")
    return value


def flag(props: Mapping[str, str], key: str, *, default: bool) -> bool:
    """The setting ``key`` as true or false (``default`` when unset); INVALID_CONFIG
    naming the key otherwise."""
    text = props.get(key, "").strip().lower()
    if not text:
        return default
    if text not in ("true", "false"):
        raise InvalidConfigError(f"{key} expects true or false, got {text!r}")
    return text == "true"


def parse_properties(text: str) -> dict[str, str]:
    """The key-value pairs of ``text``; a key given twice keeps its last value."""
    properties: dict[str, str] = {}
    for line in _logical_lines(text):
        key, value = _split(line)
        properties[key] = value
    return properties


def format_properties(properties: Mapping[str, str]) -> str:
    """``key=value`` lines, sorted by key, escaped where the reader would change them."""
    return "".join(
        f"{_escape(key, in_key=True)}={_escape(value, in_key=False)}\n"
        for key, value in sorted(properties.items())
    )


def _logical_lines(text: str) -> Iterator[str]:
    """Lines with comments and blank lines dropped and continuations joined."""
    continued: str | None = None
    for natural in _NATURAL_LINE_END.split(text):
        line = natural.lstrip(_WHITESPACE)
        if continued is None and (not line or line[0] in "#!"):
            continue  # a comment never continues, even after a backslash
        joined = line if continued is None else continued + line
        trailing_backslashes = len(line) - len(line.rstrip("\\"))
        if trailing_backslashes % 2:
            continued = joined[:-1]
            continue
        continued = None
        yield joined
    if continued is not None:  # the text ended inside a continuation
        yield continued


def _split(line: str) -> tuple[str, str]:
    index = 0
    while index < len(line) and line[index] not in _SEPARATORS + _WHITESPACE:
        index += 2 if line[index] == "\\" else 1
    key_end = min(index, len(line))
    rest = line[key_end:].lstrip(_WHITESPACE)
    if rest and rest[0] in _SEPARATORS:
        rest = rest[1:].lstrip(_WHITESPACE)
    return _unescape(line[:key_end]), _unescape(rest)


def _unescape(text: str) -> str:
    """Escapes replaced; unescaped whitespace at the end dropped."""
    chars: list[str] = []
    kept = 0  # chars[:kept] ends with a character that is not trailing whitespace
    index = 0
    while index < len(text):
        char = text[index]
        index += 1
        if char != "\\" or index == len(text):
            chars.append(char)
            if char not in _WHITESPACE:
                kept = len(chars)
            continue
        code = text[index]
        index += 1
        if code == "u":
            digits = text[index : index + 4]
            if len(digits) < 4 or any(digit not in hexdigits for digit in digits):
                raise InvalidConfigError(f"malformed \\uXXXX escape in properties: {text!r}")
            index += 4
            chars.append(chr(int(digits, 16)))
        else:
            chars.append(_ESCAPES.get(code, code))
        kept = len(chars)
    return "".join(chars[:kept])


def _escape(text: str, *, in_key: bool) -> str:
    """Backslashes and line breaks always; in a key also what would end it or make the
    line a comment; in a value a space at either end (the reader drops those)."""
    chars = [_ESCAPED.get(char, char) for char in text]
    if in_key:
        return "".join(f"\\{char}" if char in _KEY_SPECIALS else char for char in chars)
    for index in {0, len(chars) - 1} if chars else ():
        if chars[index] == " ":
            chars[index] = "\\ "
    return "".join(chars)
