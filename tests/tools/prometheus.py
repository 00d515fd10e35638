"""Prometheus and promtool from Debian's ``prometheus`` package.

``apt-get download`` and ``dpkg-deb -x`` rather than ``apt-get install``: the package's
maintainer scripts would start a system Prometheus listening on every interface, and the
tests want only their own, on loopback. The unpacked package is kept in the shared cache;
the checkout's ``.cache/tools/prometheus-VERSION/`` links its two programs.
"""

from __future__ import annotations

import os
import shutil
from pathlib import Path

from tests.tools.toolkit import BootstrapError, Tool, require, run, shared_build

__all__ = ["PROMETHEUS", "PROMETHEUS_VERSION", "prometheus_bin", "promtool_bin"]

PROMETHEUS_VERSION = "2.42.0"  # Debian 12's; the package revision may move with security fixes
_PROGRAMS = ("prometheus", "promtool")


def _unpack(into: Path) -> None:
    apt_get = require("apt-get", "Prometheus comes from Debian's packages (Debian 12+)")
    dpkg_deb = require("dpkg-deb", "Prometheus comes from Debian's packages (Debian 12+)")
    print("  apt-get update, then apt-get download prometheus")
    run([apt_get, "update", "-qq"], what="apt-get update (run the bootstrap as root)")
    run([apt_get, "download", "-qq", "prometheus"], what="apt-get download prometheus", cwd=into)
    [deb] = into.glob("prometheus_*.deb")
    run([dpkg_deb, "-x", deb, into / "root"], what=f"dpkg-deb -x {deb.name}")
    deb.unlink()


def _install(home: Path) -> None:
    unpacked = shared_build(f"prometheus-{PROMETHEUS_VERSION}", _unpack) / "root" / "usr" / "bin"
    for program in _PROGRAMS:
        target = home / program
        try:
            os.link(unpacked / program, target)
        except OSError:
            shutil.copy2(unpacked / program, target)
        version = run([target, "--version"], what=f"{program} --version")
        if f"version {PROMETHEUS_VERSION}" not in version:
            raise BootstrapError(f"expected {program} {PROMETHEUS_VERSION}, it says {version!r}")
        print(f"  {program} runs: {version.splitlines()[0]}")


PROMETHEUS = Tool(
    name=f"prometheus-{PROMETHEUS_VERSION}", inputs=lambda: [Path(__file__)], install=_install
)


def prometheus_bin() -> Path:
    return PROMETHEUS.require_current() / "prometheus"


def promtool_bin() -> Path:
    return PROMETHEUS.require_current() / "promtool"
