"""The remote-read settings: defaults under the first log dir, Kafka-style keys, bad values."""

from __future__ import annotations

from pathlib import Path

import pytest

from tierlog.sidecar.config import SidecarConfig
from tierlog.sidecar.remote_read_config import RemoteReadConfig
from tierlog.storage.errors import InvalidConfigError


def test_defaults_put_the_cache_in_the_first_log_dir(tmp_path: Path) -> None:
    config = SidecarConfig.from_properties({"log.dirs": f"{tmp_path / 'a'},{tmp_path / 'b'}"})
    read = config.remote_read_config
    assert read.cache_dir == tmp_path / "a" / "tier-cache"
    assert (read.chunk_bytes, read.prefetch_chunks, read.max_prefetch_chunks) == (1 << 20, 2, 32)
    assert read.reader_threads == 10  # Kafka's remote.log.reader.threads default
    assert read.prefetch_memory_bytes == 64 << 20
    assert (read.cache_max_bytes, read.cache_max_entries) == (1 << 30, 100_000)


def test_every_key_is_read(tmp_path: Path) -> None:
    config = SidecarConfig.from_properties(
        {
            "log.dirs": str(tmp_path),
            "tierlog.remote.cache.dir": str(tmp_path / "elsewhere"),
            "tierlog.remote.cache.max.bytes": "1000000",
            "tierlog.remote.cache.max.entries": "50",
            "tierlog.remote.fetch.chunk.bytes": "65536",
            "tierlog.remote.fetch.prefetch.chunks": "0",
            "tierlog.remote.fetch.prefetch.max.chunks": "4",
            "tierlog.remote.fetch.prefetch.memory.bytes": "8388608",
            "remote.log.reader.threads": "8",
        }
    )
    assert config.remote_read_config == RemoteReadConfig(
        cache_dir=tmp_path / "elsewhere",
        cache_max_bytes=1_000_000,
        cache_max_entries=50,
        chunk_bytes=65536,
        prefetch_chunks=0,
        max_prefetch_chunks=4,
        prefetch_memory_bytes=8 << 20,
        reader_threads=8,
    )


@pytest.mark.parametrize(
    ("key", "value"),
    [
        ("tierlog.remote.fetch.chunk.bytes", "100"),
        ("tierlog.remote.cache.max.bytes", "-1"),
        ("remote.log.reader.threads", "0"),
        ("tierlog.remote.fetch.prefetch.chunks", "two"),
        ("tierlog.remote.fetch.prefetch.memory.bytes", "-1"),
    ],
)
def test_bad_values_are_refused_by_name(tmp_path: Path, key: str, value: str) -> None:
    with pytest.raises(InvalidConfigError, match=key):
        SidecarConfig.from_properties({"log.dirs": str(tmp_path), key: value})
