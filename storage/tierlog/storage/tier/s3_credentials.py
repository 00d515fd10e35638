"""Explicit S3 keys for the S3 store, from a file or a mounted Kubernetes Secret.

Without explicit keys boto3's standard chain applies (environment, shared config,
web identity, instance or pod role). With them, the keys come from one of:

- a directory, as a Secret is mounted: one file per key, ``access_key_id`` and
  ``secret_access_key`` (and optionally ``session_token``);
- a file of ``name = value`` lines with the same names (``#`` starts a comment).

Values are read once, when the store opens; a rotated Secret takes effect at the next
start. A missing or empty key is an ``InvalidConfigError`` naming the path, never a
silent fall-through to another identity.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from tierlog.storage.errors import InvalidConfigError

__all__ = ["S3Credentials", "parse_credentials_file", "read_credentials"]

_KEYS = ("access_key_id", "secret_access_key", "session_token")


@dataclass(frozen=True)
class S3Credentials:
    access_key_id: str
    secret_access_key: str = field(repr=False)
    session_token: str | None = field(default=None, repr=False)


def parse_credentials_file(text: str, *, source: str) -> S3Credentials:
    """``name = value`` lines; unknown names are refused (a typo would lose a key)."""
    values: dict[str, str] = {}
    for number, raw in enumerate(text.splitlines(), start=1):
        line = raw.split("#", 1)[0].strip()
        if not line:
            continue
        name, equals, value = line.partition("=")
        name = name.strip()
        if not equals or name not in _KEYS:
            raise InvalidConfigError(
                f"{source}:{number}: expected one of {', '.join(_KEYS)} = value"
            )
        values[name] = value.strip()
    return _credentials(values, source)


def read_credentials(path: Path) -> S3Credentials:
    if path.is_dir():
        values = {
            name: (path / name).read_text().strip() for name in _KEYS if (path / name).is_file()
        }
        return _credentials(values, str(path))
    try:
        text = path.read_text()
    except OSError as error:
        raise InvalidConfigError(f"cannot read S3 credentials from {path}: {error}") from error
    return parse_credentials_file(text, source=str(path))


def _credentials(values: dict[str, str], source: str) -> S3Credentials:
    for required in _KEYS[:2]:
        if not values.get(required):
            raise InvalidConfigError(f"{source} has no {required}")
    return S3Credentials(
        values["access_key_id"], values["secret_access_key"], values.get("session_token") or None
    )
