"""The ``tierlog-sidecar`` process: start, recover, and stop cleanly on SIGTERM."""

from __future__ import annotations

import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.storage.conftest import crash
from tierlog.api.v1 import admin_service_pb2
from tierlog.broker.topics import TOPICS_FILE
from tierlog.sidecar.main import build_config, parse_args
from tierlog.storage.checkpoints import (
    CLEAN_SHUTDOWN_MARKER,
    RECOVERY_POINT_CHECKPOINT,
    read_offset_checkpoint,
)
from tierlog.storage.errors import InvalidConfigError
from tierlog.storage.manager import LogManager, LogManagerConfig
from tierlog.storage.properties import read_properties
from tierlog.storage.records import SimpleRecord, build_batch
from tierlog.storage.topic_partition import TopicPartition

from .conftest import SidecarFactory


def _sidecar_command(data_dir: Path) -> list[str]:
    script = shutil.which("tierlog-sidecar", path=str(Path(sys.executable).parent))
    assert script is not None, "the tierlog-sidecar console script is not installed"
    return [
        script,
        "--data-dir",
        str(data_dir),
        "--listen",
        "127.0.0.1:0",
        "--config",
        "log.flush.offset.checkpoint.interval.ms=100",
    ]


def _wait_for(process: subprocess.Popen[str], text: str, timeout_s: float = 30) -> list[str]:
    assert process.stderr is not None
    lines: list[str] = []
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        line = process.stderr.readline()
        if not line:
            break
        lines.append(line)
        if text in line:
            return lines
    raise AssertionError(f"{text!r} never logged; got:\n{''.join(lines)}")


def test_sigterm_flushes_and_leaves_the_clean_shutdown_marker(tmp_path: Path) -> None:
    manager = LogManager(LogManagerConfig(log_dirs=(tmp_path,)))
    manager.startup()
    tp = TopicPartition("orders", 0)
    manager.get_or_create_log(tp)
    now = int(time.time() * 1000)
    for _ in range(10):
        manager.append(tp, build_batch([SimpleRecord(b"k", b"v" * 100, now, ())] * 5))
    crash(manager)  # no close, no checkpoints, no clean-shutdown marker
    assert not (tmp_path / CLEAN_SHUTDOWN_MARKER).exists()

    process = subprocess.Popen(_sidecar_command(tmp_path), stderr=subprocess.PIPE, text=True)
    try:
        started = _wait_for(process, "started: 1 partitions")
        assert any("recovery:" in line for line in started), "recovery progress was not logged"
        process.send_signal(signal.SIGTERM)
        assert process.wait(timeout=30) == 0
    finally:
        process.kill()
    assert (tmp_path / CLEAN_SHUTDOWN_MARKER).exists()
    assert read_offset_checkpoint(tmp_path / RECOVERY_POINT_CHECKPOINT) == {tp: 50}

    reopened = LogManager(LogManagerConfig(log_dirs=(tmp_path,)))
    reopened.startup()
    assert reopened.had_clean_shutdown[tmp_path]
    assert reopened.get_log(tp).log_end_offset == 50
    reopened.shutdown()


def test_a_bad_config_exits_with_its_kafka_error_name(tmp_path: Path) -> None:
    command = [*_sidecar_command(tmp_path), "--config", "log.segment.bytes=tiny"]
    result = subprocess.run(command, capture_output=True, text=True, timeout=30)
    assert result.returncode == 2
    assert "INVALID_CONFIG" in result.stderr


def test_kafka_addresses_of_brokers_not_in_the_broker_list_exit_with_invalid_config(
    tmp_path: Path,
) -> None:
    command = [
        *_sidecar_command(tmp_path),
        "--config", "tierlog.cluster.brokers=0@127.0.0.1:1",
        "--config", "tierlog.cluster.kafka.brokers=0@127.0.0.1:2,7@127.0.0.1:3",
    ]  # fmt: skip
    result = subprocess.run(command, capture_output=True, text=True, timeout=30)
    assert result.returncode == 2
    assert (
        "INVALID_CONFIG: tierlog.cluster.kafka.brokers names brokers tierlog.cluster.brokers "
        "does not: [7]"
    ) in result.stderr
    assert "Traceback" not in result.stderr


# How the operator's StatefulSet starts a broker: the shared file, then per-pod --config.
CONFIG_FILE = """\
# server.properties, in each of Java's separator styles
node.id = 3
message.max.bytes: 2000000
log.segment.bytes 1048576
cluster.id=tier\\
    log-test
"""


def test_a_config_file_configures_the_broker_and_config_flags_override_it(
    tmp_path: Path, sidecar_factory: SidecarFactory
) -> None:
    config_file = tmp_path / "server.properties"
    config_file.write_text(CONFIG_FILE)
    sidecar = sidecar_factory(tmp_path / "data", "node.id=5", config_file=config_file)
    metadata = sidecar.admin.Metadata(admin_service_pb2.MetadataRequest())
    assert (metadata.node_id, metadata.cluster_id) == (5, "tierlog-test")
    meta = read_properties(sidecar.data_dir / "meta.properties")
    assert (meta["node.id"], meta["cluster.id"]) == ("5", "tierlog-test")
    sidecar.create_topic("configured")
    described = sidecar.admin.DescribeConfigs(
        admin_service_pb2.DescribeConfigsRequest(topic="configured")
    )
    values = {entry.name: entry.value for entry in described.entries}
    assert values["max.message.bytes"] == "2000000"
    assert values["segment.bytes"] == "1048576"


def test_a_topics_file_that_is_not_one_exits_with_invalid_config(tmp_path: Path) -> None:
    (tmp_path / TOPICS_FILE).write_text("[]")
    result = subprocess.run(_sidecar_command(tmp_path), capture_output=True, text=True, timeout=30)
    assert result.returncode == 2
    assert f"INVALID_CONFIG: {tmp_path / TOPICS_FILE} is not a topics file" in result.stderr
    assert "Traceback" not in result.stderr


def test_the_node_id_can_come_from_the_pods_name(tmp_path: Path) -> None:
    """How the operator's StatefulSet starts a broker on any Kubernetes version."""
    args = ["--data-dir", str(tmp_path), "--node-id-from-pod-name=events-4"]
    assert build_config(parse_args(args)).node_id == 4
    with pytest.raises(InvalidConfigError, match=r"node\.id is given twice"):
        build_config(parse_args([*args, "--config", "node.id=1"]))


def test_kafka_listen_adds_the_kafka_entry_and_keeps_the_grpc_one(tmp_path: Path) -> None:
    args = ["--data-dir", str(tmp_path), "--config", "listeners=127.0.0.1:7000"]
    config = build_config(parse_args([*args, "--kafka-listen", "127.0.0.1:7001"]))
    assert (config.listen, config.kafka_listen) == ("127.0.0.1:7000", "127.0.0.1:7001")
    listen_too = build_config(
        parse_args([*args, "--kafka-listen", "0.0.0.0:7001", "--listen", "0.0.0.0:7002"])
    )
    assert (listen_too.listen, listen_too.kafka_listen) == ("0.0.0.0:7002", "0.0.0.0:7001")
