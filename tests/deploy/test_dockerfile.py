"""The image's Dockerfile documents the ports the pods really use. Its text only: the
image itself is built (podman, on a debootstrap base) and run by ``make cluster`` and the
e2e tests (tests/e2e/), which ``make test`` runs last."""

from __future__ import annotations

from pathlib import Path

import yaml

from tierlog.operator.main import parse_args
from tierlog.operator.render.common import GRPC_PORT, METRICS_PORT

REPO = Path(__file__).resolve().parents[2]


def exposed() -> set[int]:
    lines = (REPO / "Dockerfile").read_text().splitlines()
    return {int(port) for line in lines if line.startswith("EXPOSE ") for port in line.split()[1:]}


def test_the_image_exposes_the_brokers_and_the_operators_ports() -> None:
    values = yaml.safe_load((REPO / "charts" / "tierlog" / "values.yaml").read_text())
    chart = {values["operator"]["metricsPort"], values["operator"]["healthPort"]}
    defaults = parse_args([])
    operator = {defaults.metrics_port, int(defaults.liveness.rsplit(":", 1)[1].split("/")[0])}
    assert chart == operator
    assert exposed() == {GRPC_PORT, METRICS_PORT} | operator
