"""``python -m tests.support.cluster up|down``: what ``make cluster`` and ``make cluster-down`` run.

``up`` prints on stdout only ``export`` lines (``KUBECONFIG``, ``TIERLOG_IMAGE``, a
``PATH`` with the kubectl and helm it uses), everything else on stderr, so that
``eval "$(make -s cluster)"`` sets up a shell for ``helm install`` and ``kubectl``.
"""

from __future__ import annotations

import argparse
import os
import shlex
import sys

from tests.support.cluster.layout import Layout
from tests.support.cluster.node import ClusterError, down, up
from tests.tools.control_plane import kubectl_bin
from tests.tools.helm import helm_bin
from tests.tools.toolkit import BootstrapError


def _exports(layout: Layout, image: str) -> str:
    path = os.pathsep.join(
        dict.fromkeys(
            [str(kubectl_bin().parent), str(helm_bin().parent), os.environ.get("PATH", "")]
        )
    )
    values = {"KUBECONFIG": str(layout.admin_kubeconfig), "TIERLOG_IMAGE": image, "PATH": path}
    return "".join(f"export {name}={shlex.quote(value)}\n" for name, value in values.items())


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m tests.support.cluster", description=__doc__)
    parser.add_argument("command", choices=["up", "down"])
    args = parser.parse_args(argv)
    layout = Layout.default()
    try:
        if args.command == "up":
            sys.stdout.write(_exports(layout, up(layout)))
        else:
            down(layout)
    except (ClusterError, BootstrapError, RuntimeError) as error:
        print(f"cluster {args.command} FAILED: {error}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
