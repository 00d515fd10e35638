from __future__ import annotations

from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tierlog.storage.tier.body import BodyReader
from tierlog.storage.tier.store import Concatenation, ObjectStoreError, PinnedFile

chunks = st.lists(st.binary(max_size=64), max_size=6)


@settings(max_examples=60, deadline=None)
@given(chunks, st.data())
def test_any_range_reads_as_the_joined_parts(
    tmp_path_factory: pytest.TempPathFactory, pieces: list[bytes], data: st.DataObject
) -> None:
    directory = tmp_path_factory.mktemp("body")
    parts: list[bytes | Path] = []
    for number, piece in enumerate(pieces):
        if number % 2:
            path = directory / f"part-{number}"
            path.write_bytes(piece)
            parts.append(path)
        else:
            parts.append(piece)
    whole = b"".join(pieces)
    start = data.draw(st.integers(0, len(whole) + 3))
    length = data.draw(st.integers(0, len(whole) + 3))
    with BodyReader(Concatenation(tuple(parts))) as body:
        assert body.size == len(whole)
        assert body.read(start, length) == whole[start : start + length]


def test_plain_bytes_and_a_file_are_bodies_too(tmp_path: Path) -> None:
    (tmp_path / "f").write_bytes(b"file bytes")
    with BodyReader(tmp_path / "f") as body:
        assert (body.size, body.read(5, 100)) == (10, b"bytes")
    with BodyReader(b"in memory") as body:
        assert body.read(3, 3) == b"mem"


def test_a_missing_or_shrinking_file_fails_the_read(tmp_path: Path) -> None:
    with pytest.raises(ObjectStoreError):
        BodyReader(tmp_path / "absent")
    path = tmp_path / "shrinks"
    path.write_bytes(b"x" * 100)
    with BodyReader(Concatenation((path, b"tail"))) as body:
        path.write_bytes(b"x" * 10)
        with pytest.raises(ObjectStoreError):
            body.read(0, 104)


def test_a_pinned_file_replaced_under_its_name_fails_the_read(tmp_path: Path) -> None:
    """What the cleaner's swap does to a segment's .log between measuring and a put."""
    path = tmp_path / "00000000000000000000.log"
    path.write_bytes(b"x" * 100)
    pinned = PinnedFile.of(path)
    with BodyReader(Concatenation((pinned, b"tail"))) as body:
        assert body.size == 104
    replacement = tmp_path / "cleaned"
    replacement.write_bytes(b"y" * 100)  # the same size, another file
    replacement.replace(path)
    with pytest.raises(ObjectStoreError, match="replaced"):
        BodyReader(Concatenation((pinned, b"tail")))
