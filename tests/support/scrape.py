"""Reading a sidecar's HTTP endpoint the way Prometheus and the kubelet do."""

from __future__ import annotations

import re
import time
import urllib.error
import urllib.request
from dataclasses import dataclass

from prometheus_client.parser import text_string_to_metric_families

from tests.support.sidecars import SidecarProcess

METRICS = "tierlog.metrics.listeners=127.0.0.1:0"
_SERVING_METRICS = re.compile(r"serving metrics at http://(\S+)/metrics")


def metrics_address(output: str) -> str:
    found = _SERVING_METRICS.findall(output)
    assert found, f"no metrics endpoint in the log:\n{output}"
    return str(found[-1])


def get(address: str, path: str) -> tuple[int, str]:
    """The status and body of an HTTP GET (a 503 is an answer, not an error)."""
    try:
        with urllib.request.urlopen(f"http://{address}{path}", timeout=10) as response:
            return response.status, response.read().decode()
    except urllib.error.HTTPError as error:
        return error.code, error.read().decode()


@dataclass
class Scrape:
    samples: dict[tuple[str, frozenset[tuple[str, str]]], float]

    def value(self, name: str, **labels: str) -> float:
        """The sample of ``name`` with exactly these labels (0 when absent, as for counters)."""
        return self.samples.get((name, frozenset(labels.items())), 0.0)

    def names(self) -> set[str]:
        return {name for name, _labels in self.samples}

    def labelled(self, name: str) -> dict[frozenset[tuple[str, str]], float]:
        return {labels: value for (each, labels), value in self.samples.items() if each == name}


def scrape(address: str) -> Scrape:
    status, body = get(address, "/metrics")
    assert status == 200, body
    samples = {
        (sample.name, frozenset(sample.labels.items())): sample.value
        for family in text_string_to_metric_families(body)
        for sample in family.samples
    }
    return Scrape(samples)


def scrape_sidecar(sidecar: SidecarProcess) -> Scrape:
    return scrape(metrics_address(sidecar.output))


def wait_for_calls_in_flight(
    sidecar: SidecarProcess, method: str, count: int, timeout_s: float = 30
) -> Scrape:
    """Until the sidecar (started with ``METRICS``) is handling ``count`` calls of
    ``method``: the calls a test holds open (a long poll, a stream, a queued call) have
    reached the server. The scrape that saw them."""
    labels = {"grpc_service": "LogService", "method": method}
    deadline = time.monotonic() + timeout_s
    while True:
        found = scrape_sidecar(sidecar)
        if found.value("tierlog_requests_in_flight", **labels) >= count:
            return found
        assert time.monotonic() < deadline, f"never {count} {method} calls in flight"
        time.sleep(0.05)
