"""The Grafana dashboards of deploy/dashboards/ have the shape Grafana loads.

Each is one dashboard with a unique uid, a ``datasource`` variable of type datasource
(Prometheus) that every panel and target uses, panels on the 24-column grid without
overlaps, and PromQL in every target. What the queries select is read here: the
brokers' series by cluster, latency per request as clients see it (the client streams),
errors without the calls their clients cancelled. That the queries return series is
shown against a real Prometheus in test_observability.py.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import pytest

from tests.deploy.monitoring import (
    DASHBOARDS,
    REPO,
    alerts,
    dashboard_queries,
    labels_used,
    load_dashboard,
    metric_selectors,
    selects,
    substitute,
)
from tests.support.dashboards import dashboard_variables
from tests.support.prometheus import SERVICE_MONITOR_TARGET_LABELS
from tierlog.api.v1 import admin_service_pb2, log_service_pb2

PROMETHEUS_FROM_VARIABLE = {"type": "prometheus", "uid": "${datasource}"}
# One per concern of issue 6: cluster overview; broker and partition; tiering and S3; operator.
EXPECTED = {
    "tierlog-cluster-overview",
    "tierlog-broker-partition",
    "tierlog-tiering-s3",
    "tierlog-operator",
}


def test_the_dashboards_are_the_expected_ones() -> None:
    uids = [load_dashboard(path)["uid"] for path in DASHBOARDS]
    assert sorted(uids) == sorted(EXPECTED)
    assert [path.stem for path in DASHBOARDS] == sorted(EXPECTED)  # file named by its uid


@pytest.mark.parametrize("path", DASHBOARDS, ids=lambda path: path.stem)
def test_a_datasource_variable_drives_every_panel_and_target(path: Path) -> None:
    dashboard = load_dashboard(path)
    variables = {variable["name"]: variable for variable in dashboard["templating"]["list"]}
    datasource = variables["datasource"]
    assert (datasource["type"], datasource["query"]) == ("datasource", "prometheus")
    for variable in variables.values():
        if variable["type"] == "query":
            assert variable["datasource"] == PROMETHEUS_FROM_VARIABLE, variable["name"]
            assert variable["definition"] == variable["query"]["query"]
    for panel in _data_panels(dashboard):
        assert panel["datasource"] == PROMETHEUS_FROM_VARIABLE, panel["title"]
        assert panel["targets"], f"{panel['title']} has no query"
        ref_ids = [target["refId"] for target in panel["targets"]]
        assert len(set(ref_ids)) == len(ref_ids), panel["title"]
        for target in panel["targets"]:
            assert target["datasource"] == PROMETHEUS_FROM_VARIABLE, panel["title"]
            assert target["expr"].strip(), panel["title"]


@pytest.mark.parametrize("path", DASHBOARDS, ids=lambda path: path.stem)
def test_panels_tile_the_grid_without_overlapping(path: Path) -> None:
    dashboard = load_dashboard(path)
    ids = [panel["id"] for panel in dashboard["panels"]]
    assert len(set(ids)) == len(ids)
    occupied: set[tuple[int, int]] = set()
    for panel in dashboard["panels"]:
        grid = panel["gridPos"]
        assert grid["x"] >= 0 and grid["w"] > 0 and grid["x"] + grid["w"] <= 24, panel["title"]
        cells = {
            (x, y)
            for x in range(grid["x"], grid["x"] + grid["w"])
            for y in range(grid["y"], grid["y"] + grid["h"])
        }
        assert not cells & occupied, f"{panel['title']} overlaps another panel"
        occupied |= cells
        assert panel["type"] in {"row", "stat", "timeseries", "gauge", "table", "bargauge"}


@pytest.mark.parametrize("path", DASHBOARDS, ids=lambda path: path.stem)
def test_every_variable_a_query_uses_is_defined(path: Path) -> None:
    dashboard = load_dashboard(path)
    defined = {variable["name"]: ".*" for variable in dashboard["templating"]["list"]}
    for query in dashboard_queries(path):
        assert "$" not in substitute(query.expr, defined), query
    assert dashboard["schemaVersion"] >= 36  # the datasource-object era of Grafana 9+
    assert "tierlog" in dashboard["tags"]


@pytest.mark.parametrize("path", DASHBOARDS, ids=lambda path: path.stem)
def test_no_two_panels_share_a_description(path: Path) -> None:
    """A description is the panel's own explanation; one pasted onto another misleads
    (the replication row once carried "Messages in by topic"'s words)."""
    described: dict[str, str] = {}
    for panel in _data_panels(load_dashboard(path)):
        description = panel.get("description")
        if description:
            assert description not in described, (panel["title"], described.get(description))
            described[description] = panel["title"]


def _data_panels(dashboard: dict[str, Any]) -> list[dict[str, Any]]:
    return [panel for panel in dashboard["panels"] if panel["type"] != "row"]


# The dashboards of the brokers' series (the operator's has its own).
BROKER_DASHBOARDS = [path for path in DASHBOARDS if path.stem != "tierlog-operator"]
CLUSTER_MATCHER = 'tierlog_cluster=~"$cluster"'
SERVICES = [
    log_service_pb2.DESCRIPTOR.services_by_name["LogService"],
    admin_service_pb2.DESCRIPTOR.services_by_name["AdminService"],
]
STREAMING = {m.name for service in SERVICES for m in service.methods if m.server_streaming}
CALL_LATENCY = "tierlog_request_duration_seconds_bucket"
MESSAGE_LATENCY = "tierlog_stream_message_duration_seconds_bucket"


@pytest.mark.parametrize("path", BROKER_DASHBOARDS, ids=lambda path: path.stem)
def test_every_broker_series_is_selected_by_cluster(path: Path) -> None:
    """Two clusters in one namespace: their brokers' series are told apart by the label
    their ServiceMonitor gives them, which a ``cluster`` variable chooses."""
    variables = {variable.name: variable for variable in dashboard_variables(path)}
    assert variables["cluster"].label == "tierlog_cluster"
    chained = [
        (f"${name}", variable.selector)
        for name, variable in variables.items()
        if name not in {"namespace", "cluster"}
    ]
    queries = [(query.where, query.expr) for query in dashboard_queries(path)]
    for where, expr in [*chained, *queries]:
        for selector in metric_selectors(expr):
            assert CLUSTER_MATCHER in selector, f"{where}: {selector}"


def test_no_panel_times_a_stream_by_its_life() -> None:
    """A stream's call lasts as long as its client keeps it: its latency is per message."""
    assert {"ProduceStream", "Subscribe", "FetchSession"} == STREAMING
    for path in DASHBOARDS:
        for query in dashboard_queries(path):
            for selector in metric_selectors(query.expr):
                if selector.startswith(CALL_LATENCY):
                    timed = {m for m in STREAMING if selects(selector, method=m)}
                    assert not timed, f"{query.where} times {timed} by their life: {selector}"


def test_the_overview_has_the_latency_of_every_call_clients_make() -> None:
    """The producer streams (ProduceStream), the consumer reads a session (FetchSession): their
    latency is on the overview with every other method's, per request."""
    path = next(path for path in DASHBOARDS if path.stem == "tierlog-cluster-overview")
    selectors = [
        selector for query in dashboard_queries(path) for selector in metric_selectors(query.expr)
    ]
    for service in SERVICES:
        for method in service.methods:
            histogram = MESSAGE_LATENCY if method.name in STREAMING else CALL_LATENCY
            assert any(
                selector.startswith(histogram)
                and selects(selector, grpc_service=service.name, method=method.name)
                for selector in selectors
            ), f"no latency of {service.name}.{method.name} on the overview"


# Of the labels a ServiceMonitor's target gets, those our queries mean as the target's:
# the pod scraped and its namespace, and the scrape itself (``up`` joined ``on (job,
# instance)``). The Kubernetes Service, port name and container say nothing we chart.
MEANT_AS_THE_TARGETS = {"namespace", "pod", "job", "instance"}


def test_no_query_takes_a_target_label_for_one_of_the_series_own() -> None:
    """On a real cluster the Prometheus Operator sets ``service`` (the Kubernetes
    Service's name), ``endpoint`` and ``container`` on every target: a query selecting
    or grouping by one of them, meaning a label of the sidecar's, finds nothing. The
    sidecar's own labels avoid these names (tests/sidecar/test_metrics.py)."""
    misused = SERVICE_MONITOR_TARGET_LABELS - MEANT_AS_THE_TARGETS
    used = [
        (f"{query.dashboard}: {query.where}", query.expr)
        for path in DASHBOARDS
        for query in dashboard_queries(path)
    ]
    used += [
        (f"{variable.dashboard}: ${variable.name}", f"{variable.selector} by ({variable.label})")
        for path in DASHBOARDS
        for variable in dashboard_variables(path)
    ]
    used += [(f"alert {alert.name}", alert.expr) for alert in alerts()]
    wrong = [f"{where}: {expr}" for where, expr in used if labels_used(expr) & misused]
    assert not wrong, "\n".join(wrong)


def _series_used() -> set[str]:
    """The names of the series every dashboard query and alert selects."""
    exprs = [query.expr for path in DASHBOARDS for query in dashboard_queries(path)]
    exprs += [alert.expr for alert in alerts()]
    return {selector.partition("{")[0] for expr in exprs for selector in metric_selectors(expr)}


def test_every_series_a_dashboard_or_alert_uses_is_documented() -> None:
    """docs/ (METRICS.md for the brokers', OPERATOR.md for the operator's) names each,
    a histogram's ``_bucket``/``_count``/``_sum`` by the histogram; ``up`` is Prometheus'."""
    docs = "\n".join(path.read_text() for path in sorted((REPO / "docs").glob("*.md")))
    used = {re.sub(r"_(bucket|count|sum)$", "", name) for name in _series_used()} - {"up"}
    missing = sorted(name for name in used if not re.search(rf"`{name}[`{{]", docs))
    assert not missing, f"not in docs/: {missing}"
