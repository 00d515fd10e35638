"""The image base made here: a Debian root filesystem with Python 3.11 (debootstrap).

No registry of container images is reachable, so the ``Dockerfile``'s
``python:3.11-slim-bookworm`` cannot be pulled. debootstrap makes the same thing from
Debian's packages, from the mirror apt already uses on this machine, and the result is
kept as a tarball in the shared cache; ``make cluster`` imports it with ``podman import``
and passes it as ``--build-arg PYTHON_IMAGE=...``. ``python`` is ``python3.11``
(python-is-python3), and ``python -m venv`` works (debootstrap does not follow virtual
packages, so python3.11-venv's dependencies are named one by one). The base trusts the
certificate authorities the host adds to Debian's (``/usr/local/share/ca-certificates``):
where the host reaches PyPI through a TLS-inspecting proxy, the Dockerfile's ``pip
install`` must too, or it fails with CERTIFICATE_VERIFY_FAILED.
"""

from __future__ import annotations

import re
import shutil
from pathlib import Path

from tests.tools.node_packages import package_bin
from tests.tools.toolkit import BootstrapError, Tool, run, shared_build

__all__ = ["BASE_IMAGE", "SUITE", "base_rootfs"]

SUITE = "bookworm"  # Debian 12: its python3.11 is the image's Python
_PACKAGES = (
    "python3.11",
    "python3.11-venv",
    "python3-distutils",
    "python3-lib2to3",
    "python3-pip-whl",
    "python3-setuptools-whl",
    "python-is-python3",
    "ca-certificates",
)
_HOST_AUTHORITIES = Path("/usr/local/share/ca-certificates")
_APT_SOURCES = (Path("/etc/apt/sources.list.d/debian.sources"), Path("/etc/apt/sources.list"))


def _mirror() -> str:
    """The Debian mirror apt uses here (deb822 ``URIs:`` or a one-line ``deb`` entry)."""
    for sources in _APT_SOURCES:
        if sources.is_file():
            text = sources.read_text()
            found = re.search(r"^URIs:\s*(\S+)", text, re.MULTILINE) or re.search(
                r"^deb\s+(?:\[[^]]*\]\s+)?(\S+)", text, re.MULTILINE
            )
            if found and "security" not in found.group(1):
                return found.group(1)
    raise BootstrapError(f"no Debian mirror found in {', '.join(map(str, _APT_SOURCES))}")


def _build(into: Path) -> None:
    root = into / "root"
    print(f"  debootstrap {SUITE} with python3.11 (~3 minutes)")
    run(
        [
            package_bin("debootstrap"),
            "--variant=minbase",
            f"--include={','.join(_PACKAGES)}",
            SUITE,
            root,
            _mirror(),
        ],
        what=f"debootstrap {SUITE}",
    )
    authorities = sorted(_HOST_AUTHORITIES.glob("*.crt"))
    for authority in authorities:
        shutil.copy2(authority, root / _HOST_AUTHORITIES.relative_to("/") / authority.name)
    if authorities:
        run(["chroot", root, "update-ca-certificates"], what="update-ca-certificates in the base")
    version = run(
        ["chroot", root, "python", "-c", "import sys, venv; print(sys.version.split()[0])"],
        what="python in the new root",
    ).strip()
    if not version.startswith("3.11."):
        raise BootstrapError(f"expected Python 3.11 in the base, it runs {version}")
    for cache in ("var/cache/apt/archives", "var/lib/apt/lists"):
        run(["find", root / cache, "-type", "f", "-delete"], what=f"emptying {cache}")
    run(["tar", "-C", root, "-cf", into / "rootfs.tar", "."], what="tar of the root")
    run(["rm", "-rf", root], what="removing the unpacked root")
    print(f"  base: Debian {SUITE}, Python {version}")


def _install(home: Path) -> None:
    made = shared_build(f"debian-{SUITE}-python3.11", _build)
    (home / "rootfs.tar").symlink_to(made / "rootfs.tar")


BASE_IMAGE = Tool(
    name=f"base-{SUITE}-python3.11", inputs=lambda: [Path(__file__)], install=_install
)


def base_rootfs() -> Path:
    """The tarball of the base's root filesystem, for ``podman import``."""
    return BASE_IMAGE.require_current() / "rootfs.tar"
