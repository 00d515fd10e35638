"""The Prometheus Operator's ServiceMonitor and PrometheusRule CRDs, from its Go module.

The chart renders both kinds (and the operator a ServiceMonitor per cluster); the tests
install these CRDs into the test API server so it validates those objects against the
real schemas. The module's zip from the Go module proxy carries them under
``example/prometheus-operator-crd/``; ``go mod download`` fetches and verifies it.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

from tests.tools.toolkit import Tool, require, run

__all__ = ["MONITORING_CRDS", "PROMETHEUS_OPERATOR_VERSION", "monitoring_crd_files"]

PROMETHEUS_OPERATOR_VERSION = "v0.85.0"
_MODULE = "github.com/prometheus-operator/prometheus-operator"
_FILES = (
    "monitoring.coreos.com_servicemonitors.yaml",
    "monitoring.coreos.com_prometheusrules.yaml",
)


def _install(home: Path) -> None:
    go = require("go", "install Go 1.24+ (https://go.dev/dl or the golang package)")
    module = f"{_MODULE}@{PROMETHEUS_OPERATOR_VERSION}"
    print(f"  go mod download {module}")
    answer = json.loads(
        run([go, "mod", "download", "-json", module], what=f"go mod download {module}")
    )
    crds = Path(answer["Dir"]) / "example" / "prometheus-operator-crd"
    for name in _FILES:
        shutil.copyfile(crds / name, home / name)
    print(f"  {', '.join(_FILES)}")


MONITORING_CRDS = Tool(
    name=f"prometheus-operator-crds-{PROMETHEUS_OPERATOR_VERSION}",
    inputs=lambda: [Path(__file__)],
    install=_install,
)


def monitoring_crd_files() -> list[Path]:
    home = MONITORING_CRDS.require_current()
    return [home / name for name in _FILES]
