"""Pick the object store from a URL, as ``--tier-url`` names it.

- ``file:///var/lib/tierlog/tier``: a ``LocalDirectoryStore`` on that directory (the
  embedded default: no infrastructure);
- ``s3://bucket/some/prefix``: an ``S3Store`` on that bucket, keys under the prefix;
  how to reach the bucket (endpoint, region, credentials, part size...) is in
  ``S3Options``, which a ``file://`` URL ignores.

A URL that names neither, or names them badly, is an ``InvalidStoreUrlError`` saying
what is wrong, before anything is opened.
"""

from __future__ import annotations

import re
from pathlib import Path
from urllib.parse import unquote, urlsplit

from tierlog.storage.errors import InvalidConfigError
from tierlog.storage.tier.local_store import LocalDirectoryStore
from tierlog.storage.tier.s3_store import S3Location, S3Observer, S3Options, S3Store
from tierlog.storage.tier.store import ObjectStore

__all__ = ["InvalidStoreUrlError", "open_store", "parse_s3_url"]

# S3's rules for new bucket names: 3-63 of lowercase letters, digits, dots and hyphens,
# starting and ending with a letter or digit.
_BUCKET = re.compile(r"[a-z0-9][a-z0-9.-]{1,61}[a-z0-9]")


class InvalidStoreUrlError(InvalidConfigError):
    """The tier URL names no store we can open."""


def parse_s3_url(url: str) -> S3Location:
    parts = urlsplit(url)
    if parts.scheme != "s3":
        raise InvalidStoreUrlError(f"{url!r} is not an s3:// URL")
    if not _BUCKET.fullmatch(parts.netloc):
        raise InvalidStoreUrlError(
            f"{url!r}: {parts.netloc!r} is not an S3 bucket name "
            "(3-63 lowercase letters, digits, dots and hyphens)"
        )
    if parts.query or parts.fragment:
        raise InvalidStoreUrlError(f"{url!r}: an s3:// URL takes no query or fragment")
    prefix = unquote(parts.path).strip("/")
    if any(segment in ("", ".", "..") for segment in prefix.split("/")) and prefix:
        raise InvalidStoreUrlError(f"{url!r}: the prefix has an empty, . or .. segment")
    return S3Location(parts.netloc, prefix)


def _parse_file_url(url: str) -> Path:
    parts = urlsplit(url)
    if parts.netloc not in ("", "localhost"):
        raise InvalidStoreUrlError(f"{url!r}: a file:// URL names no host (file:///path)")
    if parts.query or parts.fragment:
        raise InvalidStoreUrlError(f"{url!r}: a file:// URL takes no query or fragment")
    path = Path(unquote(parts.path))
    if not path.is_absolute() or path == Path("/"):
        raise InvalidStoreUrlError(f"{url!r}: expected an absolute directory, file:///path")
    return path


def open_store(
    url: str, s3: S3Options | None = None, *, observer: S3Observer | None = None
) -> ObjectStore:
    """The store ``url`` names, opened (``close()`` it when done)."""
    scheme = urlsplit(url).scheme
    if scheme == "file":
        return LocalDirectoryStore(_parse_file_url(url))
    if scheme == "s3":
        return S3Store(parse_s3_url(url), s3 or S3Options(), observer=observer)
    raise InvalidStoreUrlError(
        f"unsupported tier URL {url!r}: expected file:///path or s3://bucket/prefix"
    )
