"""The dashboards and alert rules of deploy/, read as data, and the PromQL in them."""

from __future__ import annotations

import json
import re
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

__all__ = [
    "DASHBOARDS",
    "KAFKA_ROW",
    "KAFKA_SERIES",
    "REPLICATION_GROUP",
    "REPLICATION_ROW",
    "RULES",
    "RULES_TEST",
    "Alert",
    "Query",
    "alerts",
    "dashboard_queries",
    "labels_used",
    "load_dashboard",
    "matchers",
    "metric_selectors",
    "selects",
    "substitute",
]

REPO = Path(__file__).resolve().parents[2]
DEPLOY = REPO / "deploy"
DASHBOARDS = sorted((DEPLOY / "dashboards").glob("*.json"))
RULES = DEPLOY / "prometheus" / "tierlog.rules.yaml"
RULES_TEST = DEPLOY / "prometheus" / "tierlog.rules_test.yaml"
# What only brokers with replication on have series for: a row of the overview, a group
# of the rules.
REPLICATION_ROW = "Replication"
REPLICATION_GROUP = "tierlog-replication"
# What only brokers serving Kafka's protocol have series for: a row of the overview, and
# the Kafka half of a panel (the error ratio's target B).
KAFKA_ROW = "Kafka listener"
KAFKA_SERIES = "tierlog_kafka_"

_VARIABLE = re.compile(r"\$\{(\w+)\}|\$(\w+)")
# Grafana's own variables, as a dashboard on a 1 h range would expand them.
GRAFANA_BUILTINS = {"__rate_interval": "1m", "__interval": "1m", "__range": "1h"}


@dataclass(frozen=True)
class Query:
    dashboard: str
    where: str  # the panel's or the variable's title
    expr: str
    row: str = ""  # the title of the row the panel is under ("": above every row)


@dataclass(frozen=True)
class Alert:
    name: str
    expr: str
    for_: str
    group: str  # the rule group's name


def load_dashboard(path: Path) -> dict[str, Any]:
    dashboard: dict[str, Any] = json.loads(path.read_text())
    return dashboard


def _panels(panels: list[dict[str, Any]]) -> Iterator[tuple[str, dict[str, Any]]]:
    """Each panel with the title of its row: the row before it on the grid (a collapsed
    row holds its panels instead)."""
    row = ""
    for panel in sorted(panels, key=lambda p: (p["gridPos"]["y"], p["gridPos"]["x"])):
        if panel["type"] == "row":
            row = panel["title"]
            for inside in panel.get("panels", []):
                yield row, inside
        yield row, panel


def dashboard_queries(path: Path) -> Iterator[Query]:
    """Every panel target's PromQL of one dashboard."""
    dashboard = load_dashboard(path)
    for row, panel in _panels(dashboard["panels"]):
        for target in panel.get("targets", []):
            yield Query(dashboard["uid"], panel["title"], target["expr"], row)


def substitute(expr: str, values: Mapping[str, str]) -> str:
    """Grafana's variables replaced as Grafana would; an unknown one is an error."""

    def value(match: re.Match[str]) -> str:
        name = match.group(1) or match.group(2)
        known = {**GRAFANA_BUILTINS, **values}
        if name not in known:
            raise KeyError(f"no value for ${name} in {expr!r}")
        return known[name]

    return _VARIABLE.sub(value, expr)


def alerts(path: Path = RULES) -> list[Alert]:
    groups = yaml.safe_load(path.read_text())["groups"]
    return [
        Alert(rule["alert"], rule["expr"], rule.get("for", "0s"), group["name"])
        for group in groups
        for rule in group["rules"]
        if "alert" in rule
    ]


# PromQL's words that are not metric names, and the label lists of by/on/... clauses.
_KEYWORDS = {"and", "or", "unless", "bool", "offset", "inf", "nan", "atan2"}
_LABEL_LIST = re.compile(r"\b(by|without|on|ignoring|group_left|group_right)\s*\([^)]*\)")
_SELECTOR = re.compile(r"\b([a-zA-Z_:][a-zA-Z0-9_:]*)\s*(\{[^{}]*\})?(?!\s*[\w(])")


def metric_selectors(expr: str) -> list[str]:
    """The series selectors inside a PromQL expression (``name{matchers}``), in order.

    Enough PromQL for our own expressions: label lists of ``by (...)``/``on (...)`` and
    durations are not names, a word before ``(`` is a function or aggregation.
    """
    text = _LABEL_LIST.sub(" ", expr)
    text = re.sub(r"\[[^\]]*\]", " ", text)  # range and subquery durations
    found = []
    for match in _SELECTOR.finditer(text):
        name, matchers = match.group(1), match.group(2) or ""
        if name in _KEYWORDS:
            continue
        found.append(name + matchers)
    return found


_MATCHER = re.compile(r'([a-zA-Z_]\w*)\s*(=~|!~|!=|=)\s*"((?:[^"\\]|\\.)*)"')


def matchers(selector: str) -> list[tuple[str, str, str]]:
    """``name{a="x", b!~"y"}`` -> [("a", "=", "x"), ("b", "!~", "y")]."""
    _, _, inside = selector.partition("{")
    return [(m.group(1), m.group(2), m.group(3)) for m in _MATCHER.finditer(inside)]


def labels_used(expr: str) -> set[str]:
    """The label names a PromQL expression selects on (its matchers) or groups and
    matches by (``by``/``without``/``on``/``ignoring``/``group_left``/``group_right``)."""
    grouped = {
        label.strip()
        for match in _LABEL_LIST.finditer(expr)
        for label in match.group(0).partition("(")[2].rstrip(")").split(",")
        if label.strip()
    }
    selected = {label for selector in metric_selectors(expr) for label, _, _ in matchers(selector)}
    return grouped | selected


def selects(selector: str, **labels: str) -> bool:
    """Would ``selector`` keep a series with these labels (its matchers on other labels
    aside)? PromQL's regexes are anchored: ``fullmatch``."""
    for label, op, value in matchers(selector):
        if label not in labels:
            continue
        actual = labels[label]
        kept = {
            "=": actual == value,
            "!=": actual != value,
            "=~": re.fullmatch(value, actual) is not None,
            "!~": re.fullmatch(value, actual) is None,
        }[op]
        if not kept:
            return False
    return True
