"""A reader for any ``SegmentRef``: local files here, a tier's objects through its store.

Above both kinds of reader (``segments.LocalSegment``, ``tiered.RemoteSegmentReader``),
so that neither module needs the other.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator

from tierlog.pipeline.segments import LocalSegment, SegmentReader, SegmentRef
from tierlog.pipeline.tiered import open_remote_segment

__all__ = ["open_segment", "opened"]


def open_segment(ref: SegmentRef) -> SegmentReader:
    """A reader for ``ref``: local files here, a tier's objects through its store."""
    if ref.is_remote:
        return open_remote_segment(ref)
    return LocalSegment(ref)


@contextlib.contextmanager
def opened(ref: SegmentRef) -> Iterator[SegmentReader]:
    """``open_segment`` as a with-block that closes the reader."""
    reader = open_segment(ref)
    try:
        yield reader
    finally:
        reader.close()
