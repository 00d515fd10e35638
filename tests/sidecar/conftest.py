"""A real ``tierlog-sidecar`` process on loopback, and the generated stubs to talk to it.

``sidecar_factory(data_dir, *configs, config_file=None, data_dirs=())`` starts one
(``tests.support.sidecars``: a free port picked by the kernel, its log in a file beside
the data dir) with a channel and stubs open to it; every process still running is
killed at the end of the test.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path
from typing import cast

import grpc
import pytest
from google.rpc import error_details_pb2, status_pb2

from tests.support.sidecars import SidecarProcess, Sidecars, console_script
from tierlog.api.errors import ERROR_DOMAIN, REASON_KEY
from tierlog.api.v1 import admin_service_pb2, admin_service_pb2_grpc, log_service_pb2_grpc


def sidecar_script() -> str:
    return console_script("tierlog-sidecar")


class Sidecar(SidecarProcess):
    """A sidecar with a plaintext channel and the stubs over it (``log``, ``admin``)."""

    channel: grpc.Channel
    log: log_service_pb2_grpc.LogServiceStub
    admin: admin_service_pb2_grpc.AdminServiceStub

    def started(self) -> None:
        self.channel = grpc.insecure_channel(
            self.address,
            options=[
                ("grpc.max_receive_message_length", 64 * 1024 * 1024),
                ("grpc.max_send_message_length", 64 * 1024 * 1024),
            ],
        )
        self.log = log_service_pb2_grpc.LogServiceStub(self.channel)
        self.admin = admin_service_pb2_grpc.AdminServiceStub(self.channel)

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
        status = super().stop(timeout_s)
        self.channel.close()
        return status


SidecarFactory = Callable[..., Sidecar]


def start_sidecar(
    data_dir: Path,
    *configs: str,
    timeout_s: float = 30,
    config_file: Path | None = None,
    data_dirs: tuple[Path, ...] = (),
) -> Sidecar:
    return Sidecar(data_dir, configs, config_file=config_file, data_dirs=data_dirs).start(timeout_s)


@pytest.fixture
def sidecar_factory() -> Iterator[SidecarFactory]:
    sidecars = Sidecars()

    def start(
        data_dir: Path,
        *configs: str,
        config_file: Path | None = None,
        data_dirs: tuple[Path, ...] = (),
    ) -> Sidecar:
        return sidecars.add(
            start_sidecar(data_dir, *configs, config_file=config_file, data_dirs=data_dirs)
        )

    yield start
    sidecars.kill_all()


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
