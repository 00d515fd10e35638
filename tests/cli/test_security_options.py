"""``--tls-ca``, ``--tls-cert``, ``--tls-key`` and ``--token-file`` (or their environment
variables) on the data commands, against a sidecar that wants mutual TLS and a token."""

from __future__ import annotations

import os
import subprocess
from collections.abc import Iterator, Mapping
from pathlib import Path

import pytest

from tests.support.certs import Authority
from tests.support.sidecars import SidecarProcess, console_script, start_sidecar
from tierlog.client.security import TOKEN_ENV


@pytest.fixture
def secured(tmp_path: Path) -> Iterator[tuple[SidecarProcess, dict[str, Path]]]:
    """A sidecar that requires client certificates and a bearer token, and the files a
    client needs: ``ca``, ``cert``, ``key``, ``token``."""
    authority = Authority("tierlog test CA")
    server_certificate, server_key = authority.issue("broker-0", server=True).write(
        tmp_path, "server"
    )
    certificate, key = authority.issue("app-pod", server=False).write(tmp_path, "client")
    files = {"ca": tmp_path / "ca.crt", "cert": certificate, "key": key, "token": tmp_path / "t"}
    files["ca"].write_bytes(authority.certificate_pem)
    files["token"].write_text("s3cret-t0ken\n")
    sidecar = start_sidecar(
        tmp_path / "data",
        f"ssl.keystore.location={server_certificate}",
        f"tierlog.ssl.keystore.key.location={server_key}",
        f"ssl.truststore.location={files['ca']}",
        "ssl.client.auth=required",
        f"tierlog.auth.token.file={files['token']}",
    )
    try:
        yield sidecar, files
    finally:
        sidecar.kill()


def tierlog(
    *args: str, stdin: bytes = b"", env: Mapping[str, str] = {}
) -> subprocess.CompletedProcess[bytes]:
    clean = {key: value for key, value in os.environ.items() if not key.startswith("TIERLOG_")}
    return subprocess.run(
        [console_script("tierlog"), *args],
        input=stdin,
        capture_output=True,
        env={**clean, **env},
        timeout=120,
    )


def test_flags_and_environment_variables_reach_a_mutual_tls_sidecar_with_a_token(
    secured: tuple[SidecarProcess, dict[str, Path]],
) -> None:
    sidecar, files = secured
    flags = ["--server", sidecar.address, "--tls-ca", str(files["ca"])]
    flags += ["--tls-cert", str(files["cert"]), "--tls-key", str(files["key"])]
    flags += ["--token-file", str(files["token"])]
    created = tierlog("topics", "create", "orders", "--partitions", "2", *flags)
    assert created.returncode == 0, created.stderr.decode()

    env = {
        "TIERLOG_SERVER": sidecar.address,
        "TIERLOG_TLS_CA": str(files["ca"]),
        "TIERLOG_TLS_CERT": str(files["cert"]),
        "TIERLOG_TLS_KEY": str(files["key"]),
        TOKEN_ENV: "s3cret-t0ken",  # the token itself, as the sidecar takes it too
    }
    produced = tierlog("produce", "orders", "--key-separator", ":", stdin=b"k:v1\nk:v2\n", env=env)
    assert produced.returncode == 0, produced.stderr.decode()
    consumed = tierlog(
        "consume", "orders", "--from-beginning", "--max-messages", "2", "--timeout-ms", "10000",
        *flags,
    )  # fmt: skip
    assert consumed.returncode == 0, consumed.stderr.decode()
    assert consumed.stdout.decode().splitlines() == ["v1", "v2"]


def test_perf_produce_and_consume_take_the_same_security_flags(
    secured: tuple[SidecarProcess, dict[str, Path]],
) -> None:
    sidecar, files = secured
    flags = ["--server", sidecar.address, "--tls-ca", str(files["ca"])]
    flags += ["--tls-cert", str(files["cert"]), "--tls-key", str(files["key"])]
    flags += ["--token-file", str(files["token"])]
    assert tierlog("topics", "create", "timed", *flags).returncode == 0
    produced = tierlog("perf", "produce", "timed", "--num-records", "50", *flags)
    assert produced.returncode == 0, produced.stderr.decode()
    assert produced.stdout.decode().startswith("50 records sent")
    consumed = tierlog("perf", "consume", "timed", "--num-records", "50", *flags)
    assert consumed.returncode == 0, consumed.stderr.decode()
    assert consumed.stdout.decode().splitlines()[1].split(", ")[4] == "50"  # Kafka's CSV
    refused = tierlog("perf", "produce", "timed", "--num-records", "1", *flags[:4])
    assert refused.returncode != 0  # no client certificate and no token


def test_without_the_token_or_the_certificate_the_command_fails_with_a_reason(
    secured: tuple[SidecarProcess, dict[str, Path]],
) -> None:
    sidecar, files = secured
    tls = ["--server", sidecar.address, "--tls-ca", str(files["ca"])]
    mutual = [*tls, "--tls-cert", str(files["cert"]), "--tls-key", str(files["key"])]
    no_token = tierlog("topics", "list", *mutual)
    assert no_token.returncode == 1
    assert "tierlog topics: SASL_AUTHENTICATION_FAILED" in no_token.stderr.decode()

    no_certificate = tierlog("topics", "list", *tls, "--token-file", str(files["token"]))
    assert no_certificate.returncode == 1
    assert "tierlog topics: NETWORK_EXCEPTION" in no_certificate.stderr.decode()

    plaintext = tierlog("topics", "create", "x", "--server", sidecar.address, "--tls-key", "k")
    assert plaintext.returncode == 1  # a key without a certificate is a config error
    assert "INVALID_CONFIG" in plaintext.stderr.decode()
    sidecar.assert_alive()
