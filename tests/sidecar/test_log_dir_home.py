"""The default tier and tier cache stay where their files are, whatever the order of
--data-dir: a new disk listed first must not hide offloaded segments."""

from __future__ import annotations

import subprocess
from pathlib import Path

from tests.support.scrape import Scrape
from tests.support.sidecars import console_script
from tierlog.api.v1 import log_service_pb2
from tierlog.sidecar.main import build_config, parse_args
from tierlog.sidecar.remote_read_config import DEFAULT_CACHE_DIR_NAME
from tierlog.storage.records import iter_batches
from tierlog.storage.tier.local_store import LocalDirectoryStore
from tierlog.storage.tier.manifest_store import load_view
from tierlog.storage.topic_partition import TopicPartition

from .conftest import Sidecar, SidecarFactory
from .test_tier_uploads import FAST, TIERED, offsets, produce, wait_for

PRODUCED = 60  # 12 batches of 5 records
TOPIC = {"topic": "offload"}


def _offloaded(found: Scrape) -> bool:
    """Three closed segments uploaded and deleted locally: only the active one is left."""
    return (
        found.value("tierlog_remote_uploaded_segments_total", **TOPIC) >= 3
        and found.value("tierlog_log_segments", **TOPIC, partition="0") == 1
    )


def _tiered_segments(log_dir: Path) -> int:
    """How many segments the tier in ``log_dir`` lists for the partition."""
    view = load_view(LocalDirectoryStore(log_dir / "tier"), TopicPartition("offload", 0))
    return len(view.all_segments())


def _read_all(sidecar: Sidecar) -> bytes:
    """Every batch from offset 0 to the end, as fetched."""
    read, offset = b"", 0
    while offset < PRODUCED:
        batches = sidecar.log.Fetch(
            log_service_pb2.FetchRequest(topic="offload", offset=offset, max_bytes=64 * 1024)
        ).record_batches
        headers = list(iter_batches(batches))
        assert headers, f"nothing fetched at {offset}"
        assert headers[0].base_offset <= offset, f"{headers[0].base_offset} fetched at {offset}"
        offset = headers[-1].next_offset
        read += batches
    return read


def _data_dir_args(*log_dirs: Path) -> list[str]:
    return [arg for log_dir in log_dirs for arg in ("--data-dir", str(log_dir))]


def test_a_new_data_dir_listed_first_still_reads_the_tier_of_the_old_one(
    tmp_path: Path, sidecar_factory: SidecarFactory
) -> None:
    old, new = tmp_path / "old", tmp_path / "new"
    first = sidecar_factory(old, *FAST, data_dirs=(old,))
    first.create_topic("offload", 1, **TIERED)
    produce(first, 12)
    assert _offloaded(wait_for(first, _offloaded))
    assert offsets(first) == (0, PRODUCED)
    offloaded = _read_all(first)  # the first segments from the tier, the rest locally
    tiered_before = _tiered_segments(old)
    assert first.stop() == 0
    first_output = first.output

    # A new, empty disk is added, listed first.
    again = sidecar_factory(old, *FAST, data_dirs=(new, old))
    assert offsets(again) == (0, PRODUCED)
    assert _read_all(again) == offloaded
    assert f"remote tier: {(old / 'tier').as_uri()}" in again.output[len(first_output) :]
    produce(again, 6)  # uploads go on into the same tier
    uploaded = wait_for(
        again, lambda s: s.value("tierlog_remote_uploaded_segments_total", **TOPIC) >= 2
    )
    assert uploaded.value("tierlog_remote_uploaded_segments_total", **TOPIC) >= 2
    assert _tiered_segments(old) >= tiered_before + 2
    assert not (new / "tier").exists() and not (new / DEFAULT_CACHE_DIR_NAME).exists()
    assert again.stop() == 0


def test_the_tier_and_its_cache_are_found_in_any_log_dir(tmp_path: Path) -> None:
    a, b = tmp_path / "a", tmp_path / "b"
    LocalDirectoryStore(a / "tier")  # an empty store (only .incoming/) holds nothing
    LocalDirectoryStore(b / "tier").put("offload-0/manifest", b"{}")
    (b / DEFAULT_CACHE_DIR_NAME).mkdir(parents=True)
    (b / DEFAULT_CACHE_DIR_NAME / "chunk").write_bytes(b"cached")
    config = build_config(parse_args(_data_dir_args(a, b)))
    assert config.tier_config.url == (b / "tier").as_uri()
    assert config.remote_read_config.cache_dir == b / DEFAULT_CACHE_DIR_NAME

    # Nothing anywhere: the first log dir, as before.
    config = build_config(parse_args(_data_dir_args(tmp_path / "x", tmp_path / "y")))
    assert config.tier_config.url == (tmp_path / "x" / "tier").as_uri()
    assert config.remote_read_config.cache_dir == tmp_path / "x" / DEFAULT_CACHE_DIR_NAME


def test_two_log_dirs_holding_a_tier_stop_the_sidecar_naming_both(tmp_path: Path) -> None:
    a, b = tmp_path / "a", tmp_path / "b"
    for log_dir in (a, b):
        LocalDirectoryStore(log_dir / "tier").put("offload-0/manifest", log_dir.name.encode())
    command = [console_script("tierlog-sidecar"), "--listen", "127.0.0.1:0", *_data_dir_args(a, b)]
    result = subprocess.run(command, capture_output=True, text=True, timeout=30)
    assert result.returncode == 2
    assert "INVALID_CONFIG" in result.stderr
    assert f"{a / 'tier'} and {b / 'tier'} both hold files" in result.stderr
    assert "tierlog.tier.url" in result.stderr
    for log_dir in (a, b):  # nothing touched
        assert (log_dir / "tier" / "offload-0" / "manifest").read_bytes() == log_dir.name.encode()

    # Naming the tier outright settles it.
    named = build_config(parse_args([*_data_dir_args(a, b), "--tier-url", (b / "tier").as_uri()]))
    assert named.tier_config.url == (b / "tier").as_uri()
