"""The brokers' TLS, token and ServiceAccount: every file the sidecar's config names is a
file a mounted Secret projects, and the sidecar accepts the config with those files."""

from __future__ import annotations

from pathlib import Path, PurePosixPath
from typing import Any

import pytest

from tests.support.certs import Authority
from tierlog.broker.scram_credentials import CREDENTIALS_FILE, FileDocument, ScramCredentials
from tierlog.operator.render.common import Owner
from tierlog.operator.render.configmap import sidecar_properties
from tierlog.operator.render.statefulset import desired_config_hash, stateful_set
from tierlog.operator.spec import ClusterSpec
from tierlog.sidecar.config import SidecarConfig

from .conftest import resource

SECURED = {
    "tls": {
        "secretName": "events-tls",
        "clientAuth": "required",
        "trustedCASecret": {"name": "clients-ca", "key": "bundle.pem"},
        "operatorClientSecret": "operator-tls",
    },
    "authentication": {"tokenSecret": {"name": "events-token"}},
    "serviceAccountName": "events-brokers",
}


@pytest.fixture
def secured() -> ClusterSpec:
    return ClusterSpec.from_resource(resource(**SECURED))


def _pod(cluster: ClusterSpec) -> dict[str, Any]:
    spec: dict[str, Any] = stateful_set(cluster, Owner("events", "u-1"), 3)["spec"]
    return dict(spec["template"]["spec"])


def _projected(pod: dict[str, Any]) -> dict[str, tuple[str, str]]:
    """Path in the container -> (Secret, key), as the kubelet would project them."""
    mounts = {mount["name"]: mount["mountPath"] for mount in pod["containers"][0]["volumeMounts"]}
    files = {}
    for volume in pod["volumes"]:
        secret = volume.get("secret")
        if secret:
            for item in secret["items"]:
                path = str(PurePosixPath(mounts[volume["name"]]) / item["path"])
                files[path] = (secret["secretName"], item["key"])
    return files


def test_every_security_file_of_the_config_is_a_mounted_secret_key(
    secured: ClusterSpec,
) -> None:
    props = sidecar_properties(secured)
    files = _projected(_pod(secured))
    assert files[props["ssl.keystore.location"]] == ("events-tls", "tls.crt")
    assert files[props["tierlog.ssl.keystore.key.location"]] == ("events-tls", "tls.key")
    assert files[props["ssl.truststore.location"]] == ("clients-ca", "bundle.pem")
    assert files[props["tierlog.auth.token.file"]] == ("events-token", "token")
    assert props["ssl.client.auth"] == "required"
    pod = _pod(secured)
    secrets = {volume["name"] for volume in pod["volumes"] if "secret" in volume}
    mounts = pod["containers"][0]["volumeMounts"]
    assert all(mount["readOnly"] for mount in mounts if mount["name"] in secrets)
    assert _pod(secured)["serviceAccountName"] == "events-brokers"


def test_client_certificates_are_checked_against_the_secrets_own_ca_by_default() -> None:
    cluster = ClusterSpec.from_resource(
        resource(tls={"secretName": "events-tls", "clientAuth": "requested"})
    )
    props = sidecar_properties(cluster)
    assert _projected(_pod(cluster))[props["ssl.truststore.location"]] == ("events-tls", "ca.crt")


def test_without_client_authentication_there_is_no_truststore() -> None:
    cluster = ClusterSpec.from_resource(resource(tls={"secretName": "events-tls"}))
    props = sidecar_properties(cluster)
    assert props["ssl.client.auth"] == "none"
    assert "ssl.truststore.location" not in props
    assert "tierlog.auth.token.file" not in props
    assert set(_projected(_pod(cluster)).values()) == {
        ("events-tls", "tls.crt"),
        ("events-tls", "tls.key"),
    }


def test_a_bare_cluster_is_plaintext_with_the_default_service_account(
    bare: ClusterSpec,
) -> None:
    props = sidecar_properties(bare)
    assert not [key for key in props if key.startswith(("ssl.", "tierlog.ssl.", "tierlog.auth"))]
    assert _projected(_pod(bare)) == {}
    assert "serviceAccountName" not in _pod(bare)


def test_turning_tls_on_is_a_configuration_change(bare: ClusterSpec) -> None:
    """The brokers roll onto it one at a time (the operator speaks to each pod as it runs)."""
    secured = ClusterSpec.from_resource(resource(tls={"secretName": "events-tls"}))
    assert desired_config_hash(secured) != desired_config_hash(bare)


def test_the_sidecar_starts_from_the_config_with_the_projected_files(
    secured: ClusterSpec, tmp_path: Path
) -> None:
    """The rendered settings, with each container path made a local copy of its Secret key."""
    authority = Authority("events CA")
    server = authority.issue("events-0", server=True, hosts=["*.events-brokers.prod.svc"])
    contents = {
        ("events-tls", "tls.crt"): server.certificate_pem,
        ("events-tls", "tls.key"): server.key_pem,
        ("clients-ca", "bundle.pem"): authority.certificate_pem,
        ("events-token", "token"): b"s3cret\n",
    }
    local = {}
    for path, secret_key in _projected(_pod(secured)).items():
        copy = tmp_path / path.lstrip("/")
        copy.parent.mkdir(parents=True, exist_ok=True)
        copy.write_bytes(contents[secret_key])
        local[path] = str(copy)
    props = {key: local.get(value, value) for key, value in sidecar_properties(secured).items()}
    config = SidecarConfig.from_properties({**props, "log.dirs": str(tmp_path / "data")})
    assert config.tls is not None and config.tls.client_auth == "required"
    assert config.tls.client_ca == authority.certificate_pem
    assert config.auth_token == "s3cret"
    # the Kafka listener: TLS with the same certificate, SASL over the same token
    assert config.kafka_listen == "0.0.0.0:19092"
    assert config.kafka_security.protocol == "SASL_SSL"
    credentials = ScramCredentials(FileDocument(tmp_path / CREDENTIALS_FILE))
    sasl = config.kafka_security.sasl(config.auth_token, credentials)
    assert sasl is not None and sasl.mechanisms == (
        "PLAIN", "OAUTHBEARER", "SCRAM-SHA-256", "SCRAM-SHA-512"
    )  # fmt: skip
