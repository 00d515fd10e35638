"""Listing a log dir: its partitions, their segments, where each partition starts."""

from __future__ import annotations

import logging
from pathlib import Path

import pytest

from tests.pipeline.conftest import write_log
from tests.pipeline.read_all import read_table
from tierlog.pipeline.listing import list_log_dir
from tierlog.storage.checkpoints import LOG_START_OFFSET_CHECKPOINT
from tierlog.storage.topic_partition import TopicPartition

TP = TopicPartition("orders", 0)


@pytest.mark.parametrize(
    "garbled", [b"0\n2\norders 0 7\n", bytes(range(256))], ids=["cut short", "binary"]
)
def test_a_garbled_log_start_checkpoint_is_warned_about_and_the_job_goes_on(
    tmp_path: Path, caplog: pytest.LogCaptureFixture, garbled: bytes
) -> None:
    """As the broker does at start-up: the partition starts at its first segment. A Spark
    job used to fail on the file, though the segments hold every record."""
    write_log(tmp_path, TP, 50)
    checkpoint = tmp_path / LOG_START_OFFSET_CHECKPOINT
    checkpoint.write_bytes(garbled)
    with caplog.at_level(logging.WARNING):
        (listed,) = list_log_dir(tmp_path)
    assert (listed.tp, listed.log_start_offset) == (TP, 0)
    assert f"ignoring {checkpoint}" in caplog.text
    table = read_table({"path": str(tmp_path), "subscribe": TP.topic})
    assert table.column("offset").to_pylist() == list(range(50))
