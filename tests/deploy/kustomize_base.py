"""deploy/base/operator.yaml is the chart rendered for ``kubectl apply -k``: one source.

``python -m tests.deploy.kustomize_base`` writes it (after a chart change; a test fails
while it is stale): ``helm template`` with the release ``tierlog`` in ``tierlog-system``,
without the CRDs (the base takes them from deploy/base/crds/) and the dashboards
(deploy/dashboards/ holds their JSON), and without Helm's own labels.
"""

from __future__ import annotations

import sys
from pathlib import Path

import yaml

from tests.charts.helm import CHART, helm

__all__ = ["OPERATOR_YAML", "render_operator_manifests"]

REPO = Path(__file__).resolve().parents[2]
OPERATOR_YAML = REPO / "deploy" / "base" / "operator.yaml"
NAMESPACE = "tierlog-system"
_HELM_LABELS = ("helm.sh/chart", "app.kubernetes.io/managed-by")
_HEADER = """\
# The tierlog operator, its ServiceAccount, RBAC and metrics Service, for
# `kubectl apply -k deploy/base`. Generated from charts/tierlog by
# `python -m tests.deploy.kustomize_base`; edit the chart, not this file.
"""


def render_operator_manifests() -> str:
    rendered = helm(
        "template", "tierlog", CHART, "--namespace", NAMESPACE,
        "--set", "crds.install=false", "--set", "dashboards.enabled=false",
    ).stdout  # fmt: skip
    documents = [doc for doc in yaml.safe_load_all(rendered) if doc]
    for doc in documents:
        for label in _HELM_LABELS:
            doc["metadata"].get("labels", {}).pop(label, None)
    body = yaml.safe_dump_all(documents, sort_keys=False, explicit_start=True, width=100)
    return _HEADER + body


if __name__ == "__main__":
    OPERATOR_YAML.write_text(render_operator_manifests())
    print(f"wrote {OPERATOR_YAML.relative_to(REPO)}", file=sys.stderr)
