"""The brokers' TLS and bearer token: Secrets mounted as files, named in the sidecar's config.

``spec.tls.secretName`` (a ``kubernetes.io/tls`` Secret) is mounted whole at
``TLS_DIR`` and becomes the sidecar's PEM keystore (``tls.crt``, ``tls.key``). With
client certificates asked for, the trusted CAs (``trustedCASecret``, else the
``ca.crt`` of the same Secret) are mounted at ``CLIENT_CA_DIR`` as the truststore. The
token's key is mounted as ``TOKEN_DIR/token`` (a file, not an environment variable, so
it shows in no ``kubectl describe``). Only the broker's user group can read them.
The Kafka listener uses the same two: its TLS serves the gRPC port's certificate, its
SASL checks the same token with PLAIN and OAUTHBEARER, and users' own passwords with
SCRAM (their credentials in the cluster's store, set by a client holding the token;
``common.kafka_security_protocol``).

The mounts are part of the pod template, so the operator reads back from a running pod
which Secrets it was started with (``pods.py``) and speaks to it accordingly while a
change of security rolls through the brokers.
"""

from __future__ import annotations

from typing import Any

from tierlog.kafka.sasl_exchanges import MECHANISMS
from tierlog.operator.spec import ClusterSpec, SecretKeyRef

__all__ = [
    "CLIENT_CA_DIR",
    "TLS_DIR",
    "TLS_VOLUME",
    "TOKEN_DIR",
    "TOKEN_FILE",
    "TOKEN_VOLUME",
    "security_mounts",
    "security_properties",
    "security_volumes",
]

TLS_VOLUME, CLIENT_CA_VOLUME, TOKEN_VOLUME = "tls", "tls-client-ca", "auth-token"
TLS_DIR = "/etc/tierlog-tls"
CLIENT_CA_DIR = "/etc/tierlog-client-ca"
TOKEN_DIR = "/etc/tierlog-auth"
TOKEN_FILE = "token"
_READ_BY_GROUP = 0o440  # the pod's fsGroup is the broker's group


def security_properties(cluster: ClusterSpec) -> dict[str, str]:
    """The sidecar's ``ssl.*`` and token settings, pointing at the mounted files."""
    props: dict[str, str] = {}
    if cluster.tls is not None:
        props["ssl.keystore.location"] = f"{TLS_DIR}/tls.crt"
        props["tierlog.ssl.keystore.key.location"] = f"{TLS_DIR}/tls.key"
        props["ssl.client.auth"] = cluster.tls.client_auth
        if cluster.tls.client_auth != "none":
            props["ssl.truststore.location"] = f"{CLIENT_CA_DIR}/ca.crt"
    if cluster.token is not None:
        props["tierlog.auth.token.file"] = f"{TOKEN_DIR}/{TOKEN_FILE}"
        # the Kafka listener's SASL: the token's mechanisms, and SCRAM for users' own
        props["sasl.enabled.mechanisms"] = ",".join(MECHANISMS)
    return props


def _secret_volume(name: str, ref: SecretKeyRef, path: str) -> dict[str, Any]:
    items = [{"key": ref.key, "path": path}]
    secret = {"secretName": ref.name, "items": items, "defaultMode": _READ_BY_GROUP}
    return {"name": name, "secret": secret}


def security_volumes(cluster: ClusterSpec) -> list[dict[str, Any]]:
    volumes: list[dict[str, Any]] = []
    if cluster.tls is not None:
        server = {
            "secretName": cluster.tls.secret_name,
            "items": [{"key": key, "path": key} for key in ("tls.crt", "tls.key")],
            "defaultMode": _READ_BY_GROUP,
        }
        volumes.append({"name": TLS_VOLUME, "secret": server})
        if cluster.tls.client_auth != "none":
            volumes.append(_secret_volume(CLIENT_CA_VOLUME, cluster.tls.client_ca, "ca.crt"))
    if cluster.token is not None:
        volumes.append(_secret_volume(TOKEN_VOLUME, cluster.token, TOKEN_FILE))
    return volumes


def security_mounts(cluster: ClusterSpec) -> list[dict[str, Any]]:
    directories = {TLS_VOLUME: TLS_DIR, CLIENT_CA_VOLUME: CLIENT_CA_DIR, TOKEN_VOLUME: TOKEN_DIR}
    return [
        {"name": volume["name"], "mountPath": directories[volume["name"]], "readOnly": True}
        for volume in security_volumes(cluster)
    ]
