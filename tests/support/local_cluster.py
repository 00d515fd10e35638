"""``tierlog cluster`` as a user runs it, for the tests that need a local cluster: the
command itself, a cluster up for a block, and its Kafka bootstrap list."""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
from collections.abc import Iterator
from pathlib import Path

from tests.support.sidecars import console_script
from tierlog.cli.local_cluster import read_cluster

__all__ = ["kafka_bootstrap", "running_cluster", "tierlog_cluster"]


def tierlog_cluster(*args: str) -> subprocess.CompletedProcess[str]:
    """``tierlog cluster ARGS...``, run to its end."""
    return subprocess.run(
        [console_script("tierlog"), "cluster", *args],
        capture_output=True,
        text=True,
        timeout=180,
        check=False,
    )


@contextlib.contextmanager
def running_cluster(
    directory: Path, brokers: int, *configs: str, base_port: int | None = None
) -> Iterator[None]:
    """``tierlog cluster up`` of ``brokers`` in ``directory`` with ``--config`` pairs (on
    ports from ``base_port`` when given), stopped at the end (killed if ``down`` fails)."""
    up = tierlog_cluster(
        "up",
        "--dir", str(directory),
        "--brokers", str(brokers),
        *(argument for config in configs for argument in ("--config", config)),
        *(() if base_port is None else ("--base-port", str(base_port))),
    )  # fmt: skip
    try:
        assert up.returncode == 0, up.stderr
        yield
    finally:
        down = tierlog_cluster("down", "--dir", str(directory), "--grace", "10")
        for broker in read_cluster(directory).brokers if down.returncode else ():
            if broker.pid is not None:
                with contextlib.suppress(ProcessLookupError):
                    os.kill(broker.pid, signal.SIGKILL)


def kafka_bootstrap(directory: Path) -> str:
    """The cluster's Kafka bootstrap list, as ``cluster status --kafka-bootstrap`` prints it."""
    status = tierlog_cluster("status", "--dir", str(directory), "--kafka-bootstrap")
    assert status.returncode == 0, status.stderr
    return status.stdout.strip()
