"""The ServiceMonitor scrapes every broker through the headless Service, each target
labelled with its cluster."""

from __future__ import annotations

from tierlog.operator.render.common import Owner
from tierlog.operator.render.monitoring import service_monitor
from tierlog.operator.render.services import client_service, headless_service
from tierlog.operator.spec import ClusterSpec


def test_service_monitor_selects_only_the_headless_service(full: ClusterSpec, owner: Owner) -> None:
    monitor = service_monitor(full, owner)
    selector = monitor["spec"]["selector"]["matchLabels"]
    headless = headless_service(full, owner)["metadata"]["labels"]
    clients = client_service(full, owner)["metadata"]["labels"]
    assert all(headless.get(key) == value for key, value in selector.items())
    assert not all(clients.get(key) == value for key, value in selector.items())
    assert monitor["metadata"]["labels"]["release"] == "prom"
    [endpoint] = monitor["spec"]["endpoints"]
    assert (endpoint["port"], endpoint["path"], endpoint["interval"]) == (
        "metrics",
        "/metrics",
        "30s",
    )


def test_every_target_is_labelled_with_its_cluster(full: ClusterSpec, owner: Owner) -> None:
    """Two clusters in one namespace: their series (``up`` too) differ by tierlog_cluster."""
    [endpoint] = service_monitor(full, owner)["spec"]["endpoints"]
    assert endpoint["relabelings"] == [
        {"action": "replace", "targetLabel": "tierlog_cluster", "replacement": full.name}
    ]
