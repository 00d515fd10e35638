"""Does a Prometheus answer every dashboard of deploy/dashboards/ with data?

``assert_every_dashboard_query_has_data(prometheus_url, values)`` runs each panel's
query with Grafana's variables replaced: those in ``values`` by their value, the
built-ins as ``tests.deploy.monitoring`` sets them, any other by Grafana's "All" (``.*``).
Each query must return series, and so must each series selector inside it (a query can
answer through ``or`` while one of its metrics is missing). One failure names every
query that found nothing, so a run shows all that a scrape lacks.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path

from tests.deploy.monitoring import DASHBOARDS, dashboard_queries, metric_selectors, substitute
from tests.support.prometheus import instant_query

__all__ = ["assert_every_dashboard_query_has_data"]

GRAFANA_ALL = ".*"  # the dashboards' allValue: what "All" puts in a regex matcher
_VARIABLES = ("namespace", "pod", "topic")


def assert_every_dashboard_query_has_data(
    prometheus_url: str,
    values: Mapping[str, str] | None = None,
    dashboards: Sequence[Path] = DASHBOARDS,
) -> None:
    chosen = {**dict.fromkeys(_VARIABLES, GRAFANA_ALL), **(values or {})}
    missing: list[str] = []
    for path in dashboards:
        for query in dashboard_queries(path):
            expr = substitute(query.expr, chosen)
            for asked in (expr, *metric_selectors(expr)):
                if not instant_query(prometheus_url, asked):
                    missing.append(f"{query.dashboard}: {query.where}: no series for {asked}")
    assert not missing, "\n".join(missing)
