"""The promises every ``ObjectStore`` keeps, as checks any store's tests run.

Each check takes a store whose root is empty; the local-directory store's tests and
the S3 store's tests (against a real MinIO) call every one of them.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path

import pytest

from tierlog.storage.tier.store import (
    Concatenation,
    ObjectExistsError,
    ObjectNotFoundError,
    ObjectStore,
)


def put_then_get_whole_and_ranges(store: ObjectStore, _tmp: Path) -> None:
    body = bytes(range(256)) * 40
    store.put("a/b/segment", body)
    assert store.get("a/b/segment") == body
    assert store.get("a/b/segment", 10, 20) == body[10:20]
    assert store.get("a/b/segment", 10_000) == body[10_000:]
    assert store.size("a/b/segment") == len(body)


def put_from_a_file(store: ObjectStore, tmp: Path) -> None:
    source = tmp / "source.bin"
    source.write_bytes(b"x" * 100_000 + b"end")
    store.put("from-file", source)
    assert store.get("from-file", 100_000) == b"end"


def put_a_concatenation_of_files_and_bytes(store: ObjectStore, tmp: Path) -> None:
    """A segment object: a file (past the multipart threshold the S3 tests use) then
    small parts, one of them empty, read across every boundary."""
    log_file = tmp / "segment.log"
    log_bytes = os.urandom(6 * 1024 * 1024 + 13)
    log_file.write_bytes(log_bytes)
    parts = (log_file, b"index", b"", b"snapshot", tmp / "epochs")
    (tmp / "epochs").write_bytes(b"0\n1\n0 0\n")
    store.put("objects/segment", Concatenation(parts))
    whole = log_bytes + b"index" + b"snapshot" + b"0\n1\n0 0\n"
    assert store.size("objects/segment") == len(whole)
    assert store.get("objects/segment") == whole
    assert (
        store.get("objects/segment", len(log_bytes) - 2, len(log_bytes) + 7)
        == whole[len(log_bytes) - 2 : len(log_bytes) + 7]
    )


def put_replaces_unless_if_absent(store: ObjectStore, _tmp: Path) -> None:
    store.put("manifest", b"one")
    store.put("manifest", b"two")
    assert store.get("manifest") == b"two"
    with pytest.raises(ObjectExistsError):
        store.put("manifest", b"three", if_absent=True)
    assert store.get("manifest") == b"two"
    store.put("fresh", b"new", if_absent=True)
    assert store.get("fresh") == b"new"


def missing_objects_are_typed(store: ObjectStore, _tmp: Path) -> None:
    with pytest.raises(ObjectNotFoundError):
        store.get("nope")
    with pytest.raises(ObjectNotFoundError):
        store.size("nope")


def list_by_prefix_in_key_order(store: ObjectStore, _tmp: Path) -> None:
    for key in ("p/2", "p/1", "q/1", "p/sub/3"):
        store.put(key, key.encode())
    listed = [(info.key, info.size_bytes) for info in store.list("p/")]
    assert listed == [("p/1", 3), ("p/2", 3), ("p/sub/3", 7)]
    assert [info.key for info in store.list("zzz")] == []
    assert [info.key for info in store.list("p/su")] == ["p/sub/3"]
    assert [info.key for info in store.list("p/sub/")] == ["p/sub/3"]
    assert [info.key for info in store.list("p/nothing/")] == []


def delete_is_idempotent(store: ObjectStore, _tmp: Path) -> None:
    store.put("d/1", b"1")
    store.put("d/2", b"2")
    store.delete(["d/1", "d/missing"])
    store.delete(["d/1"])
    assert [info.key for info in store.list("d/")] == ["d/2"]


CONTRACT: list[Callable[[ObjectStore, Path], None]] = [
    put_then_get_whole_and_ranges,
    put_from_a_file,
    put_a_concatenation_of_files_and_bytes,
    put_replaces_unless_if_absent,
    missing_objects_are_typed,
    list_by_prefix_in_key_order,
    delete_is_idempotent,
]
