"""The local-directory object store: the embedded default tier, no infrastructure.

Each key is a file under the root. A put writes a temporary file in ``.incoming/``,
syncs it, then renames (or, for ``if_absent``, hard-links) it into place, so an
object is visible whole or not at all, even across a crash; leftovers in
``.incoming/`` are a crashed writer's and ``abort_incomplete_uploads`` removes them.
"""

from __future__ import annotations

import errno
import os
import time
import uuid
from collections.abc import Iterable, Iterator, Sequence
from pathlib import Path

from tierlog.storage.checkpoints import fsync_directory
from tierlog.storage.tier.body import BodyReader
from tierlog.storage.tier.chunk_buffers import Filled, fill, nothing_filled
from tierlog.storage.tier.store import (
    Body,
    ObjectExistsError,
    ObjectInfo,
    ObjectNotFoundError,
    ObjectStoreError,
    check_key,
)

__all__ = ["LocalDirectoryStore"]

_INCOMING = ".incoming"
_COPY_CHUNK_BYTES = 1 << 20


class LocalDirectoryStore:
    """Objects as files under ``root`` (created if missing)."""

    def __init__(self, root: Path):
        self.root = root.resolve()
        self.url = self.root.as_uri()
        (self.root / _INCOMING).mkdir(parents=True, exist_ok=True)

    def _path(self, key: str) -> Path:
        check_key(key)
        parts = key.split("/")
        if parts[0] == _INCOMING:
            raise ObjectStoreError(f"object key {key!r} uses the reserved {_INCOMING}/")
        return self.root.joinpath(*parts)

    def put(self, key: str, body: Body, *, if_absent: bool = False) -> None:
        target = self._path(key)
        temporary = self.root / _INCOMING / f"{uuid.uuid4().hex}.part"
        try:
            with temporary.open("wb") as out, BodyReader(body) as source:
                for start in range(0, source.size, _COPY_CHUNK_BYTES):
                    out.write(source.read(start, _COPY_CHUNK_BYTES))
                out.flush()
                os.fsync(out.fileno())
            target.parent.mkdir(parents=True, exist_ok=True)
            if if_absent:
                try:
                    os.link(temporary, target)
                except FileExistsError:
                    raise ObjectExistsError(f"{key} already exists") from None
            else:
                temporary.replace(target)
            fsync_directory(target.parent)
        except OSError as error:
            raise ObjectStoreError(f"cannot write {key}: {error}") from error
        finally:
            temporary.unlink(missing_ok=True)

    def get(self, key: str, start: int = 0, end: int | None = None) -> bytes:
        path = self._path(key)
        try:
            with path.open("rb") as source:
                source.seek(start)
                return source.read() if end is None else source.read(max(0, end - start))
        except FileNotFoundError:
            raise ObjectNotFoundError(f"{key} does not exist") from None
        except OSError as error:
            raise ObjectStoreError(f"cannot read {key}: {error}") from error

    def get_into(
        self,
        key: str,
        start: int,
        buffers: Sequence[memoryview],
        on_filled: Filled = nothing_filled,
    ) -> int:
        try:
            with self._path(key).open("rb", buffering=0) as source:
                source.seek(start)
                landed = fill(source.readinto, buffers, on_filled)
        except FileNotFoundError:
            raise ObjectNotFoundError(f"{key} does not exist") from None
        except OSError as error:
            raise ObjectStoreError(f"cannot read {key}: {error}") from error
        return landed

    def size(self, key: str) -> int:
        try:
            return self._path(key).stat().st_size
        except FileNotFoundError:
            raise ObjectNotFoundError(f"{key} does not exist") from None

    def list(self, prefix: str) -> Iterator[ObjectInfo]:
        """Walks only the directory holding the prefix's last ``/``: listing one
        partition's manifests does not visit every other object of the store."""
        found: list[ObjectInfo] = []
        directory_part = prefix.rpartition("/")[0]
        try:
            start = self._path(directory_part) if directory_part else self.root
        except ObjectStoreError:
            return iter(())  # no legal key starts so
        for directory, subdirectories, files in os.walk(start):
            if Path(directory) == self.root:
                subdirectories[:] = [d for d in subdirectories if d != _INCOMING]
            for name in files:
                path = Path(directory) / name
                key = path.relative_to(self.root).as_posix()
                if key.startswith(prefix):
                    try:
                        stat = path.stat()
                    except FileNotFoundError:  # deleted while we listed
                        continue
                    found.append(ObjectInfo(key, stat.st_size, stat.st_mtime))
        return iter(sorted(found))

    def delete(self, keys: Iterable[str]) -> None:
        for key in keys:
            path = self._path(key)
            try:
                path.unlink()
            except FileNotFoundError:
                continue
            except OSError as error:
                raise ObjectStoreError(f"cannot delete {key}: {error}") from error
            self._remove_empty_parents(path.parent)

    def _remove_empty_parents(self, directory: Path) -> None:
        while directory != self.root:
            try:
                directory.rmdir()
            except OSError as error:
                if error.errno in (errno.ENOTEMPTY, errno.EEXIST, errno.ENOENT):
                    return
                raise
            directory = directory.parent

    def abort_incomplete_uploads(self, prefix: str, *, older_than_s: float) -> int:
        """Remove crashed writers' temporary files (they carry no key, so ``prefix``
        cannot narrow them down: any old enough is a leftover)."""
        deadline = time.time() - older_than_s
        removed = 0
        for leftover in (self.root / _INCOMING).glob("*.part"):
            try:
                if leftover.stat().st_mtime < deadline:
                    leftover.unlink()
                    removed += 1
            except FileNotFoundError:
                continue
        return removed

    def close(self) -> None:
        """Nothing to release: every call opens and closes its own files."""
