"""The object-store interface the remote tier is written against.

Two implementations keep the same promises: a local-directory store (the embedded
default, no infrastructure) and an S3 store (AWS or any S3-compatible endpoint).

Promises every store keeps:

- ``put`` makes an object visible whole or not at all, and checks its integrity on
  the way in; with ``if_absent`` it refuses to replace an existing object, which is
  what fences two writers of the same manifest sequence number.
- ``get`` reads a byte range (``end`` exclusive) of one object; ranged reads are how
  the tier serves a fetch without downloading whole segments.
- ``delete`` is idempotent: a key that is already gone is not an error.
- Failures are typed: ``ObjectNotFoundError`` for a missing key, ``ObjectExistsError``
  for a refused ``if_absent`` put, ``ObjectStoreUnavailableError`` once retries for a
  transient failure (5xx, throttling, timeouts, connection refused) are used up.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import NamedTuple, Protocol, runtime_checkable

from tierlog.storage.errors import KafkaStorageError
from tierlog.storage.tier.chunk_buffers import Filled

__all__ = [
    "Body",
    "Concatenation",
    "ObjectExistsError",
    "ObjectInfo",
    "ObjectNotFoundError",
    "ObjectStore",
    "ObjectStoreError",
    "ObjectStoreUnavailableError",
    "PiecewiseStore",
    "PinnedFile",
    "check_key",
]


class ObjectStoreError(KafkaStorageError):
    """The object store refused or failed a request."""


class ObjectNotFoundError(ObjectStoreError):
    """The key does not exist (or not yet: stores may be eventually consistent on lists)."""


class ObjectExistsError(ObjectStoreError):
    """An ``if_absent`` put found the key already taken."""


class ObjectStoreUnavailableError(ObjectStoreError):
    """A transient failure outlasted the retries; the caller tries again later."""


def check_key(key: str) -> None:
    """Keys are relative ``/``-separated paths: no empty, ``.`` or ``..`` segment, no
    leading ``/``; every store refuses the same keys, so none escapes its root."""
    if not key or key.startswith("/") or any(p in ("", ".", "..") for p in key.split("/")):
        raise ObjectStoreError(f"illegal object key {key!r}")


class PinnedFile(NamedTuple):
    """A file as it was measured: a put uploads it only while its path still names that
    very file. A segment's ``.log`` may be replaced under its name between the upload
    measuring it (the manifest entry's byte ranges) and the PUT reading it: the cleaner
    swaps a cleaned file in (``Log.replace_segments``)."""

    path: Path
    device: int
    inode: int
    size: int

    @classmethod
    def of(cls, path: Path) -> PinnedFile:
        stat = path.stat()
        return cls(path, stat.st_dev, stat.st_ino, stat.st_size)


@dataclass(frozen=True)
class Concatenation:
    """Byte strings and files uploaded as one object, in order. A segment object is its
    ``.log`` file followed by small parts; this uploads it without copying the log first."""

    parts: tuple[bytes | Path | PinnedFile, ...]


Body = bytes | Path | Concatenation  # what a put uploads (``body.BodyReader`` reads it)


class ObjectInfo(NamedTuple):
    key: str
    size_bytes: int
    last_modified_s: float  # seconds since the epoch


class ObjectStore(Protocol):
    """Keys are ``/``-separated strings relative to the store's root (bucket prefix)."""

    url: str  # where it points, for logs and ``tierlog tier ls``

    def put(self, key: str, body: Body, *, if_absent: bool = False) -> None:
        """Write one object from memory, a file, or a concatenation of them, visible only
        once complete."""
        ...

    def get(self, key: str, start: int = 0, end: int | None = None) -> bytes:
        """Bytes ``[start, end)`` of an object; ``end=None`` reads to its end."""
        ...

    def size(self, key: str) -> int:
        """The object's length in bytes; ``ObjectNotFoundError`` when missing."""
        ...

    def list(self, prefix: str) -> Iterator[ObjectInfo]:
        """Every object whose key starts with ``prefix``, in key order."""
        ...

    def delete(self, keys: Iterable[str]) -> None:
        """Remove objects; missing keys are ignored."""
        ...

    def abort_incomplete_uploads(self, prefix: str, *, older_than_s: float) -> int:
        """Abort multipart uploads under ``prefix`` started more than ``older_than_s``
        ago (leftovers of crashed writers); returns how many. Stores without multipart
        uploads return 0. A full key as ``prefix`` finds that key's uploads on every
        store; MinIO cannot find them by a shorter prefix after it restarted."""
        ...

    def close(self) -> None: ...


@runtime_checkable
class PiecewiseStore(Protocol):
    """A store that reads a range straight into the caller's buffers, one after another
    from its answer, none joined: a reader keeping one piece keeps only that piece's
    memory, and a buffer can be used again once nothing views it."""

    def get_into(
        self, key: str, start: int, buffers: Sequence[memoryview], on_filled: Filled = ...
    ) -> int:
        """Read the object's bytes from ``start`` into ``buffers`` in order, each filled
        before the next and ``on_filled`` told of it as it is (a buffer told of is never
        written again: a retry reads on after it); returns the bytes that landed, fewer
        than the buffers hold only when the object ends first (none from a start at or
        past its end)."""
        ...
