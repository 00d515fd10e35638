"""The topic passes of one moment share one read of their cluster and its pods, counted
by the API server's own ``apiserver_request_total``."""

from __future__ import annotations

import asyncio
import json

import pytest

from tests.operator.test_handlers import apply, cluster
from tests.support.kube import ControlPlane
from tierlog.operator.cluster_reads import ClusterBrokers, ClusterReads
from tierlog.operator.kube import Kube


def requests_of(plane: ControlPlane, verb: str, resource: str) -> int:
    """The server's count of ``verb`` requests on ``resource`` since it started."""
    status, text = plane.request("/metrics")
    assert status == 200
    return sum(
        int(float(line.rpartition(" ")[2]))
        for line in text.splitlines()
        if line.startswith("apiserver_request_total{")
        and f'resource="{resource}"' in line
        and f'verb="{verb}"' in line
        and 'subresource=""' in line
    )


def test_the_asks_of_one_moment_share_one_read(
    kube: ControlPlane, monkeypatch: pytest.MonkeyPatch
) -> None:
    ns = kube.create_namespace("reads")
    apply(kube, ns, cluster("demo", brokers=1))
    monkeypatch.setenv("KUBECONFIG", str(kube.kubeconfig))
    gets, lists = requests_of(kube, "GET", "tierlogclusters"), requests_of(kube, "LIST", "pods")

    async def asks() -> list[ClusterBrokers]:
        client = Kube()
        try:
            reads = ClusterReads(client)
            return await asyncio.gather(*(reads.read(ns, "demo") for _ in range(50)))
        finally:
            await client.client.close()

    answers = asyncio.run(asks())
    assert {json.dumps(answer.body, sort_keys=True) for answer in answers} == {
        json.dumps(answers[0].body, sort_keys=True)
    }
    assert answers[0].body is not None and answers[0].body["metadata"]["name"] == "demo"
    assert requests_of(kube, "GET", "tierlogclusters") == gets + 1
    assert requests_of(kube, "LIST", "pods") == lists + 1
