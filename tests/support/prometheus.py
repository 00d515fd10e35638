"""A real Prometheus on loopback that scrapes given targets and answers PromQL.

``start_prometheus(work_dir, targets)`` writes a config that scrapes each target every
second (with the target labels a ServiceMonitor would give it: ``namespace``, ``pod``),
starts Debian's ``prometheus`` from ``make tools`` on ``127.0.0.1``, and returns once it
is ready. ``wait_for_samples`` waits until every target has been scraped a few times
(so ``rate()`` has two points). ``PrometheusAPI`` is any Prometheus' HTTP API by its URL
(this one's is ``api``, a cluster's through a port-forward works alike): ``query`` runs
an instant query and returns the series, ``rules`` reports how its rule files evaluated.
"""

from __future__ import annotations

import json
import subprocess
import time
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from tests.support.sidecars import free_port
from tests.tools.prometheus import prometheus_bin

__all__ = [
    "SERVICE_MONITOR_TARGET_LABELS",
    "PrometheusAPI",
    "PrometheusError",
    "PrometheusServer",
    "ScrapeTarget",
    "Series",
    "start_prometheus",
]

SCRAPE_INTERVAL = "1s"
# The labels the Prometheus Operator gives every target of a ServiceMonitor, besides its
# relabelings. A scraped series' own label of one of these names is renamed
# ``exported_<name>`` (unless the endpoint honours labels), so a query selecting it by
# its own name finds the target's value instead: nothing of ours may be called so.
SERVICE_MONITOR_TARGET_LABELS = frozenset(
    {"namespace", "pod", "service", "endpoint", "container", "job", "instance"}
)


class PrometheusError(AssertionError):
    """Prometheus refused a query or did not come up; the message carries its answer."""


@dataclass(frozen=True)
class ScrapeTarget:
    job: str
    address: str  # host:port of a /metrics endpoint
    labels: Mapping[str, str] = field(default_factory=dict)  # added to every series
    # The target's own labels win over ``labels`` (a ServiceMonitor's ``honorLabels``);
    # set on one target, it holds for its whole job.
    honor_labels: bool = False


@dataclass(frozen=True)
class Series:
    labels: Mapping[str, str]
    value: float


@dataclass(frozen=True)
class PrometheusAPI:
    """A Prometheus' HTTP API at ``url`` (``http://host:port``)."""

    url: str

    def get(self, path: str, **params: str) -> Any:
        url = f"{self.url.rstrip('/')}{path}?{urllib.parse.urlencode(params)}"
        try:
            with urllib.request.urlopen(url, timeout=30) as response:
                answer = json.load(response)
        except urllib.error.HTTPError as error:  # 400/422: a bad query, with Prometheus' reason
            answer = json.load(error)
        if answer.get("status") != "success":
            raise PrometheusError(
                f"{path} {params}: {answer.get('errorType')}: {answer.get('error')}"
            )
        return answer["data"]

    def query(self, expr: str) -> list[Series]:
        """An instant query now; the series of a vector result (a scalar is one series)."""
        data = self.get("/api/v1/query", query=expr)
        if data["resultType"] == "scalar":
            return [Series({}, float(data["result"][1]))]
        if data["resultType"] != "vector":
            raise PrometheusError(f"{expr!r} is a {data['resultType']}, not an instant vector")
        return [Series(item["metric"], float(item["value"][1])) for item in data["result"]]

    def rules(self) -> list[dict[str, Any]]:
        """Every loaded rule with its ``health`` (``ok``/``err``/``unknown``) and ``lastError``."""
        groups = self.get("/api/v1/rules")["groups"]
        return [rule for group in groups for rule in group["rules"]]


@dataclass
class PrometheusServer:
    work_dir: Path
    targets: Sequence[ScrapeTarget]
    rule_files: Sequence[Path] = ()
    port: int = 0
    process: subprocess.Popen[bytes] | None = None

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    @property
    def api(self) -> PrometheusAPI:
        return PrometheusAPI(self.url)

    def query(self, expr: str) -> list[Series]:
        return self.api.query(expr)

    def rules(self) -> list[dict[str, Any]]:
        return self.api.rules()

    @property
    def log_path(self) -> Path:
        return self.work_dir / "prometheus.log"

    def config(self) -> dict[str, Any]:
        return {
            "global": {"scrape_interval": SCRAPE_INTERVAL, "evaluation_interval": SCRAPE_INTERVAL},
            "rule_files": [str(path) for path in self.rule_files],
            "scrape_configs": [
                {
                    "job_name": job,
                    "honor_labels": any(t.honor_labels for t in self.targets if t.job == job),
                    "static_configs": [
                        {"targets": [target.address], "labels": dict(target.labels)}
                        for target in self.targets
                        if target.job == job
                    ],
                }
                for job in sorted({target.job for target in self.targets})
            ],
        }

    def start(self, timeout_s: float = 30) -> PrometheusServer:
        self.work_dir.mkdir(parents=True, exist_ok=True)
        config_path = self.work_dir / "prometheus.yml"
        config_path.write_text(yaml.safe_dump(self.config(), sort_keys=False))
        self.port = self.port or free_port()
        command = [
            str(prometheus_bin()),
            f"--config.file={config_path}",
            f"--storage.tsdb.path={self.work_dir / 'data'}",
            f"--web.listen-address=127.0.0.1:{self.port}",
            "--log.level=warn",
        ]
        with self.log_path.open("ab") as log_file:
            self.process = subprocess.Popen(command, stdout=log_file, stderr=subprocess.STDOUT)
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                break
            try:
                with urllib.request.urlopen(f"{self.url}/-/ready", timeout=2) as response:
                    if response.status == 200:
                        return self
            except (urllib.error.URLError, ConnectionError):
                pass
            time.sleep(0.1)
        self.stop()
        raise PrometheusError(f"Prometheus did not become ready:\n{self.log_path.read_text()}")

    def stop(self) -> None:
        if self.process is not None and self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(timeout=20)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()

    def wait_for_samples(self, samples: int = 3, timeout_s: float = 60) -> None:
        """Until each target is up and has been scraped ``samples`` times."""
        wanted = len(self.targets)
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            scraped = self.query(f"count_over_time(up[1m]) >= {samples} and up == 1")
            if len(scraped) == wanted:
                return
            time.sleep(0.5)
        targets = self.api.get("/api/v1/targets")["activeTargets"]
        health = {target["scrapeUrl"]: target.get("lastError") or "up" for target in targets}
        raise PrometheusError(f"targets not scraped {samples} times in {timeout_s} s: {health}")


@contextmanager
def start_prometheus(
    work_dir: Path, targets: Sequence[ScrapeTarget], rule_files: Sequence[Path] = ()
) -> Iterator[PrometheusServer]:
    server = PrometheusServer(work_dir, targets, rule_files).start()
    try:
        yield server
    finally:
        server.stop()
