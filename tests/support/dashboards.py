"""Does a Prometheus answer every dashboard of deploy/dashboards/ with data?

``assert_every_dashboard_query_has_data(prometheus_url, values)`` asks the Prometheus at
``prometheus_url`` what Grafana would ask it: every query variable's
``label_values(selector, label)``, and every panel query with the variables replaced
(``$__rate_interval`` by ``1m``). A variable given in ``values`` is set to that value,
which its own query must find; any other is Grafana's "All" (``.*``). Each panel query
must return series, and so must each series selector inside it: a query can answer
through ``or`` while one of its metrics is missing. It fails once, naming every query
that found nothing, so one run shows all that a scrape lacks.

``tests/deploy/test_observability.py`` runs it against a Prometheus scraping a sidecar
(with a Kafka listener) and an operator on this machine (all but the replication row),
``tests/replication/test_observability.py`` the replication row against one scraping
three replicating brokers, the end-to-end tests against one scraping real pods.
Either must label the targets as the ServiceMonitors do: ``namespace`` and ``pod``, on
the brokers also ``tierlog_cluster`` (their cluster's name: the ``cluster`` variable),
and scrape the operator with ``honor_labels`` (its ``tierlog_cluster_brokers_desired``
names its cluster's namespace), as ``ScrapeTarget(..., honor_labels=True)`` does.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from tests.deploy.monitoring import (
    DASHBOARDS,
    KAFKA_ROW,
    KAFKA_SERIES,
    REPLICATION_ROW,
    Query,
    dashboard_queries,
    load_dashboard,
    metric_selectors,
    substitute,
)
from tests.support.prometheus import PrometheusAPI

__all__ = [
    "Variable",
    "assert_every_dashboard_query_has_data",
    "dashboard_variables",
    "every_query",
    "of_replication",
    "without_replication",
    "without_replication_or_kafka",
]

GRAFANA_ALL = ".*"  # the dashboards' allValue: what "All" puts in a regex matcher


@dataclass(frozen=True)
class Variable:
    dashboard: str
    name: str
    selector: str  # label_values(SELECTOR, label), variables not yet replaced
    label: str


def dashboard_variables(path: Path) -> Iterator[Variable]:
    """The query variables of one dashboard (each a ``label_values(selector, label)``)."""
    dashboard = load_dashboard(path)
    for variable in dashboard["templating"]["list"]:
        if variable["type"] != "query":
            continue
        definition = variable["definition"]
        assert definition.startswith("label_values(") and definition.endswith(")"), definition
        selector, _, label = definition[len("label_values(") : -1].rpartition(",")
        yield Variable(dashboard["uid"], variable["name"], selector.strip(), label.strip())


def every_query(_query: Query) -> bool:
    return True


def without_replication(query: Query) -> bool:
    """A query a broker without replication answers: any but the replication row's, whose
    series only replicating brokers report."""
    return query.row != REPLICATION_ROW


def without_replication_or_kafka(query: Query) -> bool:
    """A query a broker with neither replication nor a Kafka listener answers."""
    return without_replication(query) and query.row != KAFKA_ROW and KAFKA_SERIES not in query.expr


def of_replication(query: Query) -> bool:
    return query.row == REPLICATION_ROW


def assert_every_dashboard_query_has_data(
    prometheus_url: str,
    values: Mapping[str, str] | None = None,
    dashboards: Sequence[Path] = DASHBOARDS,
    queries: Callable[[Query], bool] = every_query,
) -> None:
    """Every variable and panel query of ``dashboards`` (those ``queries`` keeps: a row
    whose series only some brokers have is checked against those) finds series in the
    Prometheus at ``prometheus_url``, with the variables in ``values`` set and the others
    "All"."""
    api = PrometheusAPI(prometheus_url)
    missing: list[str] = []
    for path in dashboards:
        variables = list(dashboard_variables(path))
        chosen = {variable.name: GRAFANA_ALL for variable in variables} | dict(values or {})
        for variable in variables:
            missing += _variable_misses(api, variable, chosen, values or {})
        for query in filter(queries, dashboard_queries(path)):
            expr = substitute(query.expr, chosen)
            for asked in (expr, *metric_selectors(expr)):
                if not api.query(asked):
                    missing.append(f"{query.dashboard}: {query.where}: no series for {asked}")
    assert not missing, "dashboard queries without data:\n" + "\n".join(missing)


def _variable_misses(
    api: PrometheusAPI, variable: Variable, chosen: Mapping[str, str], given: Mapping[str, str]
) -> list[str]:
    selector = substitute(variable.selector, chosen)
    counted = api.query(f"count by ({variable.label}) ({selector})")
    found = {series.labels[variable.label] for series in counted if variable.label in series.labels}
    where = f"{variable.dashboard}: ${variable.name} (label_values({selector}, {variable.label}))"
    if not found:
        return [f"{where} finds no value"]
    if variable.name in given and given[variable.name] not in found:
        return [f"{where} finds {sorted(found)}, not {given[variable.name]!r}"]
    return []
