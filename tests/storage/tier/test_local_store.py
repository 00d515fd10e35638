from __future__ import annotations

import os
import time
from collections.abc import Callable
from pathlib import Path

import pytest

from tests.storage.tier.store_contract import CONTRACT
from tierlog.storage.tier.local_store import LocalDirectoryStore
from tierlog.storage.tier.store import ObjectStore, ObjectStoreError


@pytest.mark.parametrize("check", CONTRACT, ids=lambda check: check.__name__)
def test_keeps_the_store_contract(
    tmp_path: Path, check: Callable[[ObjectStore, Path], None]
) -> None:
    check(LocalDirectoryStore(tmp_path / "tier"), tmp_path)


def test_keys_never_escape_the_root(tmp_path: Path) -> None:
    store = LocalDirectoryStore(tmp_path / "tier")
    for key in ("../outside", "/abs", "a//b", ".incoming/x", ""):
        with pytest.raises(ObjectStoreError):
            store.put(key, b"x")
    assert not (tmp_path / "outside").exists()


def test_deleting_the_last_object_removes_empty_directories(tmp_path: Path) -> None:
    store = LocalDirectoryStore(tmp_path / "tier")
    store.put("a/b/c", b"x")
    store.delete(["a/b/c"])
    assert sorted(p.name for p in (tmp_path / "tier").iterdir()) == [".incoming"]


def test_a_crashed_writers_leftover_is_swept_only_when_old(tmp_path: Path) -> None:
    store = LocalDirectoryStore(tmp_path / "tier")
    leftover = tmp_path / "tier" / ".incoming" / "dead.part"
    leftover.write_bytes(b"half an object")
    assert store.abort_incomplete_uploads("", older_than_s=60) == 0
    old = time.time() - 120
    os.utime(leftover, (old, old))
    assert store.abort_incomplete_uploads("", older_than_s=60) == 1
    assert not leftover.exists()
    assert list(store.list("")) == []


def test_a_prefix_never_lists_outside_the_root_or_the_incoming_files(tmp_path: Path) -> None:
    (tmp_path / "outside").mkdir()
    (tmp_path / "outside" / "secret").write_bytes(b"x")
    store = LocalDirectoryStore(tmp_path / "tier")
    store.put("p/1", b"1")
    (tmp_path / "tier" / ".incoming" / "leftover.part").write_bytes(b"half")
    assert list(store.list("../outside/")) == []
    assert list(store.list(".incoming/")) == [] and list(store.list("./p/")) == []
    assert [info.key for info in store.list("p/")] == ["p/1"]
