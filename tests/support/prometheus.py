"""A real Prometheus on loopback that scrapes given targets and answers PromQL.

``start_prometheus(work_dir, targets)`` writes a config that scrapes each target every
second (with the target labels a ServiceMonitor would give it: ``namespace``, ``pod``),
starts Debian's ``prometheus`` from ``make tools`` on ``127.0.0.1``, and returns once it
is ready. ``wait_for_samples`` waits until every target has been scraped a few times
(so ``rate()`` has two points), ``query`` runs an instant query over the HTTP API and
returns the series, ``rules`` reports how its loaded rule files evaluated.
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
    "PrometheusError",
    "PrometheusServer",
    "ScrapeTarget",
    "Series",
    "api_get",
    "instant_query",
    "start_prometheus",
]

SCRAPE_INTERVAL = "1s"


class PrometheusError(AssertionError):
    """Prometheus refused a query or did not come up; the message carries its answer."""


@dataclass(frozen=True)
class ScrapeTarget:
    job: str
    address: str  # host:port of a /metrics endpoint
    labels: Mapping[str, str] = field(default_factory=dict)  # added to every series


@dataclass(frozen=True)
class Series:
    labels: Mapping[str, str]
    value: float


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
    def log_path(self) -> Path:
        return self.work_dir / "prometheus.log"

    def config(self) -> dict[str, Any]:
        return {
            "global": {"scrape_interval": SCRAPE_INTERVAL, "evaluation_interval": SCRAPE_INTERVAL},
            "rule_files": [str(path) for path in self.rule_files],
            "scrape_configs": [
                {
                    "job_name": job,
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

    def _get(self, path: str, **params: str) -> Any:
        return api_get(self.url, path, **params)

    def query(self, expr: str) -> list[Series]:
        return instant_query(self.url, expr)

    def rules(self) -> list[dict[str, Any]]:
        """Every loaded rule with its ``health`` (``ok``/``err``/``unknown``) and ``lastError``."""
        groups = self._get("/api/v1/rules")["groups"]
        return [rule for group in groups for rule in group["rules"]]

    def wait_for_samples(self, samples: int = 3, timeout_s: float = 60) -> None:
        """Until each target is up and has been scraped ``samples`` times."""
        wanted = len(self.targets)
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            scraped = self.query(f"count_over_time(up[1m]) >= {samples} and up == 1")
            if len(scraped) == wanted:
                return
            time.sleep(0.5)
        targets = self._get("/api/v1/targets")["activeTargets"]
        health = {target["scrapeUrl"]: target.get("lastError") or "up" for target in targets}
        raise PrometheusError(f"targets not scraped {samples} times in {timeout_s} s: {health}")


def api_get(url: str, path: str, **params: str) -> Any:
    """GET ``path`` of the HTTP API of the Prometheus at ``url``; its ``data``."""
    request = f"{url}{path}?{urllib.parse.urlencode(params)}"
    try:
        with urllib.request.urlopen(request, timeout=30) as response:
            answer = json.load(response)
    except urllib.error.HTTPError as error:  # 400/422: a bad query, with Prometheus' reason
        answer = json.load(error)
    if answer.get("status") != "success":
        raise PrometheusError(f"{path} {params}: {answer.get('errorType')}: {answer.get('error')}")
    return answer["data"]


def instant_query(url: str, expr: str) -> list[Series]:
    """An instant query now; the series of a vector result (a scalar is one series)."""
    data = api_get(url, "/api/v1/query", query=expr)
    if data["resultType"] == "scalar":
        return [Series({}, float(data["result"][1]))]
    if data["resultType"] != "vector":
        raise PrometheusError(f"{expr!r} is a {data['resultType']}, not an instant vector")
    return [Series(item["metric"], float(item["value"][1])) for item in data["result"]]


@contextmanager
def start_prometheus(
    work_dir: Path, targets: Sequence[ScrapeTarget], rule_files: Sequence[Path] = ()
) -> Iterator[PrometheusServer]:
    server = PrometheusServer(work_dir, targets, rule_files).start()
    try:
        yield server
    finally:
        server.stop()
