"""Running the real Helm on the chart, and reading what it renders."""

from __future__ import annotations

import subprocess
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import yaml

from tests.tools.helm import helm_bin

__all__ = ["CHART", "FULL_VALUES", "Rendered", "helm", "template", "write_values"]

REPO = Path(__file__).resolve().parents[2]
CHART = REPO / "charts" / "tierlog"

# Every toggle on and every list filled: the widest rendering the values allow.
FULL_VALUES: dict[str, Any] = {
    "crds": {"install": True, "keep": True},
    "image": {"repository": "registry.example/tierlog", "tag": "1.2.3", "pullPolicy": "Always"},
    "imagePullSecrets": [{"name": "registry-credentials"}],
    "fullnameOverride": "logs",
    "operator": {
        "replicas": 2,
        "watchNamespaces": ["team-a", "team-b"],
        "logLevel": "debug",
        "metricsPort": 9200,
        "healthPort": 8081,
        "resources": {
            "requests": {"cpu": "100m", "memory": "192Mi"},
            "limits": {"memory": "512Mi"},
        },
        "podLabels": {"team": "streaming"},
        "podAnnotations": {"example.com/owner": "streaming"},
        "nodeSelector": {"kubernetes.io/os": "linux"},
        "tolerations": [
            {"key": "dedicated", "operator": "Equal", "value": "logs", "effect": "NoSchedule"}
        ],
        "affinity": {
            "podAntiAffinity": {
                "preferredDuringSchedulingIgnoredDuringExecution": [
                    {
                        "weight": 100,
                        "podAffinityTerm": {
                            "topologyKey": "kubernetes.io/hostname",
                            "labelSelector": {"matchLabels": {"app.kubernetes.io/name": "tierlog"}},
                        },
                    }
                ]
            }
        },
        "priorityClassName": "system-cluster-critical",
        "env": [{"name": "TZ", "value": "UTC"}],
    },
    "serviceAccount": {"create": True, "name": "tierlog-operator", "annotations": {"a": "b"}},
    "rbac": {"create": True},
    "metrics": {
        "serviceMonitor": {"enabled": True, "interval": "15s", "labels": {"release": "kps"}},
        "prometheusRule": {"enabled": True, "labels": {"release": "kps"}},
    },
    "dashboards": {
        "enabled": True,
        "namespace": "",
        "labels": {"grafana_dashboard": "1"},
        "annotations": {"grafana_folder": "tierlog"},
    },
}


def helm(*args: str | Path, check: bool = True) -> subprocess.CompletedProcess[str]:
    done = subprocess.run(
        [str(helm_bin()), *map(str, args)], capture_output=True, text=True, check=False
    )
    if check:
        assert done.returncode == 0, f"helm {' '.join(map(str, args))}:\n{done.stdout}{done.stderr}"
    return done


def write_values(path: Path, values: Mapping[str, Any]) -> Path:
    path.write_text(yaml.safe_dump(dict(values)))
    return path


class Rendered:
    """The documents of one ``helm template``, looked up by kind and name."""

    def __init__(self, text: str):
        self.text = text
        self.documents: list[dict[str, Any]] = [doc for doc in yaml.safe_load_all(text) if doc]

    def kinds(self) -> list[str]:
        return sorted(doc["kind"] for doc in self.documents)

    def of_kind(self, kind: str) -> list[dict[str, Any]]:
        return [doc for doc in self.documents if doc["kind"] == kind]

    def one(self, kind: str) -> dict[str, Any]:
        [doc] = self.of_kind(kind)
        return doc


def template(
    tmp_path: Path, values: Mapping[str, Any] | None = None, chart: Path = CHART
) -> Rendered:
    args: list[str | Path] = ["template", "tierlog", chart, "--namespace", "tierlog-system"]
    if values is not None:
        args += ["--values", write_values(tmp_path / "values.yaml", values)]
    return Rendered(helm(*args).stdout)
