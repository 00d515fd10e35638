"""The byte containers the records code reads from, as one type.

Batches are read in place from whatever holds them: ``bytes`` from a request,
a ``bytearray`` being patched, a ``memoryview`` slice of either, or an ``mmap`` of a
segment. Python 3.11 has no ``collections.abc.Buffer``, so this union stands in.
"""

from __future__ import annotations

import mmap
from typing import TypeAlias

__all__ = ["ReadableBuffer"]

ReadableBuffer: TypeAlias = bytes | bytearray | memoryview | mmap.mmap
