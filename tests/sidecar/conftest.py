"""A real ``tierlog-sidecar`` process on loopback, and the generated stubs to talk to it.

``sidecar_factory(data_dir, *configs)`` starts one with ``--listen 127.0.0.1:0`` (the
kernel picks a free port; the process logs the port it bound) and its log in a file
beside the data dir; every process still running is stopped at the end of the test.
"""

from __future__ import annotations

import re
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import cast

import grpc
import pytest
from google.rpc import error_details_pb2, status_pb2

from tierlog.api.errors import ERROR_DOMAIN, REASON_KEY
from tierlog.api.v1 import admin_service_pb2, admin_service_pb2_grpc, log_service_pb2_grpc

_LISTENING = re.compile(r"listening on (\S+)")


def sidecar_script() -> str:
    script = shutil.which("tierlog-sidecar", path=str(Path(sys.executable).parent))
    assert script is not None, "the tierlog-sidecar console script is not installed"
    return script


@dataclass
class Sidecar:
    data_dir: Path
    log_path: Path
    process: subprocess.Popen[bytes]
    address: str = ""
    channel: grpc.Channel = field(init=False)

    def connect(self) -> None:
        self.channel = grpc.insecure_channel(
            self.address,
            options=[
                ("grpc.max_receive_message_length", 64 * 1024 * 1024),
                ("grpc.max_send_message_length", 64 * 1024 * 1024),
            ],
        )
        self.log = log_service_pb2_grpc.LogServiceStub(self.channel)
        self.admin = admin_service_pb2_grpc.AdminServiceStub(self.channel)

    @property
    def output(self) -> str:
        return self.log_path.read_text(errors="replace")

    def create_topic(self, name: str, partitions: int = 1, **configs: str) -> None:
        response = self.admin.CreateTopics(
            admin_service_pb2.CreateTopicsRequest(
                topics=[
                    admin_service_pb2.NewTopic(
                        name=name,
                        num_partitions=partitions,
                        configs={key.replace("_", "."): value for key, value in configs.items()},
                    )
                ]
            )
        )
        assert not response.results[0].HasField("error"), response.results[0].error

    def stop(self, timeout_s: float = 30) -> int:
        """SIGTERM, then the exit status (calls in flight on the channel may finish)."""
        if self.process.poll() is None:
            self.process.send_signal(signal.SIGTERM)
        status = self.process.wait(timeout=timeout_s)
        self.channel.close()
        return status

    def assert_alive(self) -> None:
        assert self.process.poll() is None, f"the sidecar died:\n{self.output}"


SidecarFactory = Callable[..., Sidecar]


def start_sidecar(data_dir: Path, *configs: str, timeout_s: float = 30) -> Sidecar:
    log_path = data_dir.with_name(data_dir.name + ".log")
    command = [sidecar_script(), "--data-dir", str(data_dir), "--listen", "127.0.0.1:0"]
    for config in configs:
        command += ["--config", config]
    earlier = log_path.stat().st_size if log_path.exists() else 0  # a restart appends
    with log_path.open("ab") as log_file:
        process = subprocess.Popen(command, stdout=log_file, stderr=subprocess.STDOUT)
    sidecar = Sidecar(data_dir, log_path, process)
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        found = _LISTENING.findall(sidecar.output[earlier:])
        if found:
            sidecar.address = found[-1]
            sidecar.connect()
            return sidecar
        if process.poll() is not None:
            break
        time.sleep(0.05)
    process.kill()
    raise AssertionError(f"the sidecar did not start:\n{sidecar.output}")


@pytest.fixture
def sidecar_factory() -> Iterator[SidecarFactory]:
    started: list[Sidecar] = []

    def start(data_dir: Path, *configs: str) -> Sidecar:
        sidecar = start_sidecar(data_dir, *configs)
        started.append(sidecar)
        return sidecar

    yield start
    for sidecar in started:
        if sidecar.process.poll() is None:
            sidecar.process.kill()
            sidecar.process.wait()


@pytest.fixture
def sidecar(sidecar_factory: SidecarFactory, tmp_path: Path) -> Sidecar:
    return sidecar_factory(tmp_path / "data")


def reason_of(error: grpc.RpcError) -> str:
    """The Kafka error name a failed call carries, checked to agree in both of its places:
    the ``tierlog-reason`` trailing metadata and the ErrorInfo of the status details."""
    trailing = dict(cast(grpc.Call, error).trailing_metadata() or ())
    reason = trailing.get(REASON_KEY)
    assert isinstance(reason, str), f"no {REASON_KEY} in {error!r}"
    status = status_pb2.Status.FromString(trailing["grpc-status-details-bin"])
    assert status.code == cast(grpc.Call, error).code().value[0]
    (detail,) = status.details
    info = error_details_pb2.ErrorInfo()
    assert detail.Unpack(info)
    assert (info.reason, info.domain) == (reason, ERROR_DOMAIN)
    return reason
