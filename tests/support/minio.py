"""A real MinIO server on loopback for the tier's tests (S3 is never mocked).

``MinioServer(data_dir).start()`` runs the binary ``make tools`` installed
(``tests/tools/minio.py``) on ``127.0.0.1`` (or ``host``: the e2e tests use the one-node
cluster's bridge address, which its pods reach) with a free port, root credentials of its
own and its output in ``DATA_DIR.log``; it returns once MinIO answers its liveness
probe. ``stop()`` or ``kill()`` then ``start()`` again brings it back on the same port
and data directory, which is how tests take S3 away in the middle of an upload and
give it back. ``create_bucket()`` makes a fresh bucket for one test.
"""

from __future__ import annotations

import signal
import subprocess
import time
import urllib.error
import urllib.request
import uuid
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Self

import boto3

from tests.support.sidecars import free_port
from tests.tools.minio import minio_bin

if TYPE_CHECKING:
    from mypy_boto3_s3 import S3Client

__all__ = ["MinioServer"]


@dataclass
class MinioServer:
    data_dir: Path
    access_key_id: str = "tierlog-test"
    secret_access_key: str = "tierlog-test-secret"
    region: str = "us-east-1"
    port: int = 0  # 0: a free one, picked at the first start and kept for restarts
    host: str = "127.0.0.1"
    process: subprocess.Popen[bytes] | None = field(init=False, default=None)

    @property
    def endpoint_url(self) -> str:
        return f"http://{self.host}:{self.port}"

    @property
    def log_path(self) -> Path:
        return self.data_dir.with_name(self.data_dir.name + ".log")

    @property
    def running(self) -> bool:
        return self.process is not None and self.process.poll() is None

    def start(self, timeout_s: float = 60) -> Self:
        binary = minio_bin()
        self.port = self.port or free_port()
        self.data_dir.mkdir(parents=True, exist_ok=True)
        command = [
            str(binary), "server", str(self.data_dir), "--quiet",
            "--address", f"{self.host}:{self.port}",
            "--console-address", f"127.0.0.1:{free_port()}",
        ]  # fmt: skip
        environment = {
            "MINIO_ROOT_USER": self.access_key_id,
            "MINIO_ROOT_PASSWORD": self.secret_access_key,
            "MINIO_REGION": self.region,
            "MINIO_BROWSER": "off",
            "MINIO_UPDATE": "off",
            "HOME": str(self.data_dir.parent),  # its ~/.minio certs dir, not the user's
        }
        with self.log_path.open("ab") as log_file:
            self.process = subprocess.Popen(
                command, stdout=log_file, stderr=subprocess.STDOUT, env=environment
            )
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            if self._live():
                return self
            if self.process.poll() is not None:
                break
            time.sleep(0.1)
        self.kill()
        raise AssertionError(f"MinIO did not start:\n{self.log_path.read_text(errors='replace')}")

    def _live(self) -> bool:
        try:
            with urllib.request.urlopen(f"{self.endpoint_url}/minio/health/live", timeout=1) as r:
                return bool(r.status == 200)
        except (urllib.error.URLError, OSError):
            return False

    def stop(self, timeout_s: float = 30) -> None:
        """SIGTERM and wait: connections are refused from here on."""
        if self.process is not None and self.process.poll() is None:
            self.process.send_signal(signal.SIGTERM)
            self.process.wait(timeout=timeout_s)

    def kill(self) -> None:
        if self.process is not None and self.process.poll() is None:
            self.process.kill()
            self.process.wait()

    def client(self, endpoint_url: str | None = None) -> S3Client:
        """A plain boto3 client with the root credentials (for setup and inspection)."""
        client: S3Client = boto3.client(
            "s3",
            endpoint_url=endpoint_url or self.endpoint_url,
            region_name=self.region,
            aws_access_key_id=self.access_key_id,
            aws_secret_access_key=self.secret_access_key,
        )
        return client

    def write_credentials(self, path: Path) -> Path:
        """The root keys in the ``name=value`` file the S3 store reads; ``path``."""
        path.write_text(
            f"access_key_id={self.access_key_id}\nsecret_access_key={self.secret_access_key}\n"
        )
        return path

    def sidecar_tier_configs(self, bucket: str, credentials: Path) -> tuple[str, ...]:
        """A sidecar's configs for a tier under ``tier/`` of ``bucket`` (the root keys
        written to ``credentials``)."""
        return (
            f"tierlog.tier.url=s3://{bucket}/tier",
            f"tierlog.tier.s3.endpoint.url={self.endpoint_url}",
            f"tierlog.tier.s3.region={self.region}",
            "tierlog.tier.s3.path.style.access.enabled=true",
            f"tierlog.tier.s3.credentials.path={self.write_credentials(credentials)}",
            "tierlog.tier.s3.max.attempts=2",
        )

    def create_bucket(self, prefix: str = "test") -> str:
        name = f"{prefix}-{uuid.uuid4().hex[:12]}"
        self.client().create_bucket(Bucket=name)
        return name
