"""Buffers lent out as views, and lent again only once no view of them is left."""

from __future__ import annotations

import io

from tierlog.storage.tier.chunk_buffers import ChunkBuffers, fill


def test_a_buffer_is_lent_again_only_once_every_view_of_it_is_gone() -> None:
    buffers = ChunkBuffers(16, max_buffers=2)
    first = buffers.take(16)
    first[:] = b"a" * 16
    header = first[2:4][1:]  # a view of a view: it too keeps the buffer lent
    del first
    second = buffers.take(16)
    second[:] = b"b" * 16
    assert bytes(header) == b"a"  # not overwritten: the first buffer was not lent again
    del header
    third = buffers.take(8)  # the first buffer, free again
    assert len(third) == 8 and third.obj is not second.obj
    assert bytes(third) == b"a" * 8  # the same memory, as it was left
    assert buffers.kept_bytes == 2 * 16


def test_beyond_the_buffers_kept_new_ones_are_lent_and_not_kept() -> None:
    buffers = ChunkBuffers(16, max_buffers=2)
    lent = [buffers.take(16) for _ in range(5)]
    assert len({id(view.obj) for view in lent}) == 5
    assert buffers.kept_bytes == 2 * 16
    kept = {id(view.obj) for view in lent[:2]}
    del lent
    again = [buffers.take(16) for _ in range(2)]
    assert {id(view.obj) for view in again} == kept


def test_fill_fills_each_buffer_before_the_next_and_stops_where_the_stream_ends() -> None:
    views = [memoryview(bytearray(4)) for _ in range(3)]
    assert fill(io.BytesIO(b"0123456789").readinto, views) == 10
    assert [bytes(view) for view in views] == [b"0123", b"4567", b"89\0\0"]
    stream = io.BytesIO(b"abcdef")

    def one_byte_at_a_time(view: memoryview) -> int:  # short reads, as a socket's are
        return stream.readinto(view[:1])

    assert fill(one_byte_at_a_time, views[:1]) == 4
    assert bytes(views[0]) == b"abcd"
