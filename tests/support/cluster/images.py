"""The node's images, built here and imported into containerd: no registry is reachable.

* the base: the debootstrap root filesystem of ``tests/tools/base_image.py``, imported
  with ``podman import`` as ``BASE_IMAGE``, the ``PYTHON_IMAGE`` of the Dockerfile;
* the pod sandbox: the release's ``pause`` alone in an image (``configs.PAUSE_IMAGE``);
* tierlog: the project's own ``Dockerfile``, built by podman (daemonless, from Debian)
  with ``--pull=never`` (every ``FROM`` is local) and the host's network (its ``pip
  install`` reaches PyPI like the host does), tagged as the chart expects.

Each is saved as a docker-archive and imported with ``ctr`` into containerd's
``k8s.io`` namespace, the one the kubelet's CRI reads; its tag is what the pods name, and
with ``imagePullPolicy: IfNotPresent`` the kubelet never tries to pull it.
"""

from __future__ import annotations

import subprocess
import sys
import tempfile
from collections.abc import Sequence
from pathlib import Path

import yaml

from tests.support.cluster.configs import PAUSE_IMAGE
from tests.support.cluster.layout import Layout
from tests.tools.base_image import base_rootfs
from tests.tools.kube_node import node_bin
from tests.tools.node_packages import package_bin
from tests.tools.toolkit import REPO

__all__ = ["BASE_IMAGE", "build_images", "tierlog_image"]

BASE_IMAGE = "localhost/tierlog/python:3.11-bookworm"
_PAUSE_CONTAINERFILE = 'FROM scratch\nCOPY pause /pause\nUSER 65535:65535\nENTRYPOINT ["/pause"]\n'


def tierlog_image() -> str:
    """``repository:tag`` of the chart's default image (its values and appVersion)."""
    chart = yaml.safe_load((REPO / "charts" / "tierlog" / "Chart.yaml").read_text())
    values = yaml.safe_load((REPO / "charts" / "tierlog" / "values.yaml").read_text())
    return f"{values['image']['repository']}:{values['image']['tag'] or chart['appVersion']}"


def _podman(*args: str | Path) -> str:
    # The events log goes to a file: there is no journald here.
    command = [str(package_bin("podman")), "--events-backend=file", *map(str, args)]
    done = subprocess.run(
        command, stdout=subprocess.PIPE, stderr=sys.stderr, text=True, check=False
    )
    if done.returncode != 0:
        raise RuntimeError(f"podman {' '.join(map(str, args))} failed ({done.returncode})")
    return done.stdout


def _exists(image: str) -> bool:
    command = [str(package_bin("podman")), "--events-backend=file", "image", "exists", image]
    return subprocess.run(command, check=False).returncode == 0


def _build(tag: str, context: Path, args: Sequence[str] = ()) -> None:
    print(f"cluster: podman build -t {tag} {context}", file=sys.stderr)
    _podman("build", "--network=host", "--pull=never", *args, "-t", tag, context)


def _import_into_containerd(layout: Layout, image: str) -> None:
    archive = layout.state / "images" / (image.replace("/", "_").replace(":", "_") + ".tar")
    archive.parent.mkdir(parents=True, exist_ok=True)
    archive.unlink(missing_ok=True)
    _podman("save", "--format", "docker-archive", "-o", archive, image)
    ctr = [str(package_bin("ctr")), "--address", str(layout.containerd_socket), "-n", "k8s.io"]
    done = subprocess.run(
        [*ctr, "images", "import", str(archive)], capture_output=True, text=True, check=False
    )
    if done.returncode != 0:
        raise RuntimeError(f"ctr images import {archive.name} failed: {done.stderr.strip()}")
    archive.unlink()
    print(f"cluster: {image} imported into containerd", file=sys.stderr)


def build_images(layout: Layout) -> str:
    """Build (podman's layer cache keeps a rebuild short) and import; the tierlog image."""
    if not _exists(BASE_IMAGE):
        print(f"cluster: podman import of the base as {BASE_IMAGE}", file=sys.stderr)
        _podman("import", base_rootfs(), BASE_IMAGE)
    if not _exists(PAUSE_IMAGE):
        with tempfile.TemporaryDirectory() as context:
            (Path(context) / "Containerfile").write_text(_PAUSE_CONTAINERFILE)
            (Path(context) / "pause").write_bytes(node_bin("pause").read_bytes())
            (Path(context) / "pause").chmod(0o755)
            _build(PAUSE_IMAGE, Path(context))
    tierlog = tierlog_image()
    _build(tierlog, REPO, ["--build-arg", f"PYTHON_IMAGE={BASE_IMAGE}"])
    for image in (PAUSE_IMAGE, tierlog):
        _import_into_containerd(layout, image)
    return tierlog
