"""MinIO, the real S3 server the tier's tests run against, built from the Go module proxy.

MinIO publishes no semver module versions, so the pin is the pseudo-version of one
commit of github.com/minio/minio (what ``go list -m github.com/minio/minio@latest``
resolved to on 2026-11-22). ``go install`` of it takes about 20 minutes on two busy
cores, so the binary is kept in the shared cache (``~/.cache/tierlog-tools/minio-
<version>/``, ``toolkit.shared_build``): every clone and worktree on the machine reuses
it, and the bootstrap builds it only when that directory is absent or incomplete.
"""

from __future__ import annotations

import os
import shutil
from pathlib import Path

from tests.tools.toolkit import BootstrapError, Tool, require, run, shared_build

__all__ = ["MINIO", "MINIO_MODULE", "MINIO_VERSION", "minio_bin"]

MINIO_MODULE = "github.com/minio/minio"
MINIO_VERSION = "v0.0.0-20260212201848-7aac2a2c5b7c"


def _build(into: Path) -> None:
    go = require("go", "install Go 1.24+ (e.g. apt-get install golang-go)")
    print(f"  building {MINIO_MODULE}@{MINIO_VERSION} with {go} (about 20 minutes on 2 cores)")
    run(
        [go, "install", f"{MINIO_MODULE}@{MINIO_VERSION}"],
        what=f"go install {MINIO_MODULE}@{MINIO_VERSION}",
        env={"GOBIN": str(into)},
    )
    if not (into / "minio").is_file():
        raise BootstrapError(f"go install left no minio binary in {into}")


def _install(home: Path) -> None:
    built = shared_build(f"minio-{MINIO_VERSION}", _build) / "minio"
    target = home / "minio"
    try:
        os.link(built, target)  # same file system: no second copy of 150 MB
    except OSError:
        shutil.copy2(built, target)
    version = run([target, "--version"], what="smoke test: minio --version").splitlines()
    print(f"  minio runs: {version[0] if version else '(no version line)'}")


MINIO = Tool(
    name=f"minio-{MINIO_VERSION}", inputs=lambda: [Path(__file__)], install=_install, compiled=True
)


def minio_bin() -> Path:
    """The installed minio executable; a clear error when ``make tools`` has not run."""
    return MINIO.require_current() / "minio"
