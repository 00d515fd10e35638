"""How the operator authenticates to a broker's sidecar: the TLS and token it runs with.

A pod speaks the security of the template it was created from, not the spec's of now:
while a change that turns TLS on rolls through the brokers, the pods not restarted yet
still speak plaintext, and the operator must still ask them whether they are safe to
restart. So the Secrets come from the pod (``BrokerPod.tls_secret``, ``token_secret``,
read from its volumes), and are read through the API server, once per pass.

- TLS: the operator dials the pod's IP and checks the certificate against the pod's
  DNS name (``NAME-N.NAME-brokers.NAMESPACE.svc``), trusting the ``ca.crt`` of the
  brokers' Secret (the system's CAs without one).
- Mutual TLS: it presents the certificate of ``spec.tls.operatorClientSecret`` whenever
  one is set (a broker that asks for none ignores it), so keep it while a cluster moves
  off ``clientAuth: required``.
- The token: the value under the pod's token Secret key, as ``authorization: Bearer``.
"""

from __future__ import annotations

from collections.abc import Mapping

from tierlog.client import ChannelSecurity
from tierlog.operator.kube import Kube
from tierlog.operator.render.common import broker_host
from tierlog.operator.rolling import BrokerPod
from tierlog.operator.spec import ClusterSpec

__all__ = ["BrokerSecurity", "MissingSecretKeyError"]


class MissingSecretKeyError(LookupError):
    """A Secret the cluster names lacks the key the operator needs."""


class BrokerSecurity:
    """The ``ChannelSecurity`` for each broker pod of one cluster (for one pass: the
    Secrets are read once, and again on the next pass, so a renewed one is picked up)."""

    def __init__(self, kube: Kube, cluster: ClusterSpec):
        self._kube, self._cluster = kube, cluster
        self._secrets: dict[str, Mapping[str, str]] = {}

    async def _secret(self, name: str) -> Mapping[str, str]:
        data = self._secrets.get(name)
        if data is None:
            data = self._secrets[name] = await self._kube.secret_data(self._cluster.namespace, name)
        return data

    async def _value(self, secret: str, key: str) -> str:
        data = await self._secret(secret)
        if key not in data:
            raise MissingSecretKeyError(f"the Secret {secret} has no {key}")
        return data[key]

    async def for_pod(self, pod: BrokerPod) -> ChannelSecurity:
        token = None
        if pod.token_secret is not None:
            token = (await self._value(pod.token_secret.name, pod.token_secret.key)).strip()
        if not pod.tls_secret:
            return ChannelSecurity(token=token)
        ca = (await self._secret(pod.tls_secret)).get("ca.crt")
        chain = key = None
        client_secret = self._cluster.tls.operator_client_secret if self._cluster.tls else ""
        if client_secret:
            chain = (await self._value(client_secret, "tls.crt")).encode()
            key = (await self._value(client_secret, "tls.key")).encode()
        server_name = broker_host(self._cluster, pod.broker_id)
        roots = ca.encode() if ca else None
        return ChannelSecurity(True, roots, chain, key, token, server_name=server_name)
