"""How the sidecar reads from the remote tier: its chunk cache, chunk size, prefetch, threads.

Fetches below the local log start are served from the tier in chunks of
``tierlog.remote.fetch.chunk.bytes`` (ranged GETs), cached on disk under
``tierlog.remote.cache.dir`` (default: ``tier-cache`` in the log dir whose cache holds
files, else in the first, see ``log_dir_home``; the log manager never mistakes it for a
partition), bounded by
``tierlog.remote.cache.max.bytes`` and ``tierlog.remote.cache.max.entries``. A
sequential reader gets ``tierlog.remote.fetch.prefetch.chunks`` chunks read ahead at
first (a reader from an object's start, one read-ahead GET's worth; 0: no read-ahead),
twice as many with each read that continues, up to
``tierlog.remote.fetch.prefetch.max.chunks``, while what read-ahead holds in memory over
all readers (GETs in flight, chunks not read yet) stays within
``tierlog.remote.fetch.prefetch.memory.bytes``; ``remote.log.reader.threads`` (Kafka's name
for its remote reader pool, and its default) is how many GETs read-ahead keeps in flight
and how many tiered partitions of one fetch are read at once.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from tierlog.sidecar.log_dir_home import home_log_dir
from tierlog.storage.properties import whole_number
from tierlog.storage.tier.range_reader import LANDED_MAX_BYTES

__all__ = ["REMOTE_READ_KEYS", "RemoteReadConfig"]

_CACHE_DIR = "tierlog.remote.cache.dir"
# Key -> (field, default, smallest value allowed).
_NUMBERS: dict[str, tuple[str, int, int]] = {
    "tierlog.remote.cache.max.bytes": ("cache_max_bytes", 1 << 30, 0),
    "tierlog.remote.cache.max.entries": ("cache_max_entries", 100_000, 0),
    "tierlog.remote.fetch.chunk.bytes": ("chunk_bytes", 1 << 20, 4096),
    "tierlog.remote.fetch.prefetch.chunks": ("prefetch_chunks", 2, 0),
    "tierlog.remote.fetch.prefetch.max.chunks": ("max_prefetch_chunks", 32, 0),
    "tierlog.remote.fetch.prefetch.memory.bytes": ("prefetch_memory_bytes", LANDED_MAX_BYTES, 0),
    "remote.log.reader.threads": ("reader_threads", 10, 1),
}
REMOTE_READ_KEYS = frozenset({_CACHE_DIR, *_NUMBERS})
DEFAULT_CACHE_DIR_NAME = "tier-cache"


@dataclass(frozen=True)
class RemoteReadConfig:
    cache_dir: Path
    cache_max_bytes: int = 1 << 30
    cache_max_entries: int = 100_000
    chunk_bytes: int = 1 << 20
    prefetch_chunks: int = 2
    max_prefetch_chunks: int = 32
    prefetch_memory_bytes: int = LANDED_MAX_BYTES
    reader_threads: int = 10

    @classmethod
    def from_properties(
        cls, props: Mapping[str, str], log_dirs: Sequence[Path]
    ) -> RemoteReadConfig:
        values = {
            name: whole_number(props, key, default, minimum)
            for key, (name, default, minimum) in _NUMBERS.items()
        }
        named = props.get(_CACHE_DIR, "").strip()
        if named:
            return cls(cache_dir=Path(named).absolute(), **values)
        home = home_log_dir(log_dirs, DEFAULT_CACHE_DIR_NAME, _CACHE_DIR)
        return cls(cache_dir=home / DEFAULT_CACHE_DIR_NAME, **values)
