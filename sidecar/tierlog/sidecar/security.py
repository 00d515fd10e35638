"""Who may talk to the sidecar: TLS or mutual TLS on the gRPC port (and on a Kafka
listener whose security protocol is ``SSL`` or ``SASL_SSL``), and a bearer token.

TLS uses Kafka's names for a PEM keystore and truststore:

- ``ssl.keystore.location``: a PEM file with the server's certificate chain, and its
  private key unless ``tierlog.ssl.keystore.key.location`` names a separate key file
  (as a Kubernetes TLS Secret mounts ``tls.crt`` and ``tls.key``). ``ssl.keystore.type``
  may only be ``PEM``; encrypted keys (``ssl.key.password``) are refused.
- ``ssl.truststore.location``: PEM CA certificates that client certificates must
  chain to (``ssl.truststore.type`` ``PEM``).
- ``ssl.client.auth``: ``none`` (default), ``requested`` (a client certificate is
  checked when one is offered) or ``required`` (mutual TLS: no certificate, no
  connection; the TLS handshake fails before any call).

The files are read once at start; a renewed certificate takes a restart (a rolling
restart of the StatefulSet).

The bearer token (``tierlog.auth.token.file``, or the ``TIERLOG_AUTH_TOKEN``
environment variable) is checked on every call but the gRPC health service's, which
Kubernetes probes call without credentials: ``authorization: Bearer <token>``,
compared in constant time. A missing or wrong one ends the call with
``UNAUTHENTICATED`` and the reason ``SASL_AUTHENTICATION_FAILED``. Without TLS the
token crosses the network in clear: use both outside the pod.
"""

from __future__ import annotations

import hmac
import os
import re
import ssl
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import grpc

from tierlog.api.errors import SaslAuthenticationFailedError
from tierlog.sidecar.interceptors import Context, call_name, is_exempt, with_behavior
from tierlog.sidecar.status import abort
from tierlog.storage.errors import InvalidConfigError

__all__ = [
    "SECURITY_KEYS",
    "TOKEN_ENV",
    "BearerTokenInterceptor",
    "TlsConfig",
    "read_token",
]

TOKEN_ENV = "TIERLOG_AUTH_TOKEN"
SECURITY_KEYS = frozenset(
    {
        "ssl.keystore.type",
        "ssl.keystore.location",
        "tierlog.ssl.keystore.key.location",
        "ssl.key.password",
        "ssl.truststore.type",
        "ssl.truststore.location",
        "ssl.client.auth",
        "tierlog.auth.token.file",
    }
)
_CLIENT_AUTH = ("none", "requested", "required")
_VERIFY_MODES = {
    "none": ssl.CERT_NONE,
    "requested": ssl.CERT_OPTIONAL,
    "required": ssl.CERT_REQUIRED,
}
_PEM_BLOCK = re.compile(rb"-----BEGIN ([A-Z0-9 ]+)-----.*?-----END \1-----\s*", re.DOTALL)


@dataclass(frozen=True)
class TlsConfig:
    certificate_chain: bytes
    private_key: bytes = field(repr=False)
    client_ca: bytes | None = None
    client_auth: str = "none"

    @classmethod
    def from_properties(cls, props: Mapping[str, str]) -> TlsConfig | None:
        """The TLS settings, or None when ``ssl.keystore.location`` is not set."""
        for store_type in ("ssl.keystore.type", "ssl.truststore.type"):
            if props.get(store_type, "PEM").upper() != "PEM":
                raise InvalidConfigError(f"{store_type}: only PEM files are supported")
        if props.get("ssl.key.password"):
            raise InvalidConfigError("ssl.key.password: encrypted private keys are not supported")
        client_auth = props.get("ssl.client.auth", "none").lower()
        if client_auth not in _CLIENT_AUTH:
            raise InvalidConfigError(f"ssl.client.auth must be one of {', '.join(_CLIENT_AUTH)}")
        keystore = props.get("ssl.keystore.location")
        truststore = props.get("ssl.truststore.location")
        if not keystore:
            if (
                truststore
                or client_auth != "none"
                or props.get("tierlog.ssl.keystore.key.location")
            ):
                raise InvalidConfigError("TLS settings without ssl.keystore.location")
            return None
        chain = _pem_blocks(_read("ssl.keystore.location", keystore), "CERTIFICATE")
        key_location = props.get("tierlog.ssl.keystore.key.location")
        key_file = key_location or keystore
        key = _pem_blocks(_read("tierlog.ssl.keystore.key.location", key_file), "PRIVATE KEY")
        if not chain or not key:
            raise InvalidConfigError(
                f"ssl.keystore.location: {keystore} needs a PEM certificate chain and a "
                "private key (or tierlog.ssl.keystore.key.location)"
            )
        client_ca = _read("ssl.truststore.location", truststore) if truststore else None
        if client_auth != "none" and client_ca is None:
            raise InvalidConfigError(f"ssl.client.auth={client_auth} needs ssl.truststore.location")
        return cls(chain, key, client_ca, client_auth)

    def server_credentials(self) -> grpc.ServerCredentials:
        return grpc.ssl_server_credentials(
            [(self.private_key, self.certificate_chain)],
            root_certificates=self.client_ca,
            require_client_auth=self.client_auth == "required",
        )

    def server_ssl_context(self) -> ssl.SSLContext:
        """The same certificate, key and client checks for a TLS socket (the Kafka
        listener's ``SSL`` and ``SASL_SSL``)."""
        context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
        # ssl loads a chain and key from files only: an anonymous in-memory file keeps
        # the key off the disk and the settings read once.
        keystore = os.memfd_create("tierlog-tls-keystore", os.MFD_CLOEXEC)
        try:
            os.write(keystore, self.certificate_chain + self.private_key)
            context.load_cert_chain(f"/proc/self/fd/{keystore}")
        finally:
            os.close(keystore)
        if self.client_ca is not None:
            context.load_verify_locations(cadata=self.client_ca.decode())
        context.verify_mode = _VERIFY_MODES[self.client_auth]
        return context


def _read(key: str, location: str) -> bytes:
    try:
        return Path(location).read_bytes()
    except OSError as error:
        raise InvalidConfigError(f"{key}: cannot read {location}: {error.strerror}") from None


def _pem_blocks(data: bytes, kind: str) -> bytes:
    """The PEM blocks of ``data`` whose type ends with ``kind`` (``CERTIFICATE``,
    ``PRIVATE KEY`` for PKCS#8, RSA and EC keys alike), in order."""
    return b"".join(
        match.group(0)
        for match in _PEM_BLOCK.finditer(data)
        if match.group(1).endswith(kind.encode())
    )


def read_token(location: str) -> str:
    token = _read("tierlog.auth.token.file", location).decode().strip()
    if not token:
        raise InvalidConfigError(f"tierlog.auth.token.file: {location} is empty")
    return token


class BearerTokenInterceptor(grpc.aio.ServerInterceptor):
    """Refuses calls without ``authorization: Bearer <token>`` (health checks exempt)."""

    def __init__(self, token: str):
        self._expected = f"Bearer {token}".encode()

    async def intercept_service(
        self,
        continuation: Callable[[grpc.HandlerCallDetails], Any],
        handler_call_details: grpc.HandlerCallDetails,
    ) -> Any:
        handler = await continuation(handler_call_details)
        if handler is None or is_exempt(call_name(handler_call_details)):
            return handler
        offered = _authorization(handler_call_details)
        if offered is not None and hmac.compare_digest(offered.encode(), self._expected):
            return handler
        why = "no bearer token" if offered is None else "the bearer token is not valid"
        error = SaslAuthenticationFailedError(f"{why} (authorization: Bearer <token>)")

        async def refuse(_request: Any, context: Context) -> None:
            await abort(context, error)

        return with_behavior(handler, refuse)


def _authorization(details: grpc.HandlerCallDetails) -> str | None:
    for key, value in details.invocation_metadata or ():
        if key == "authorization":
            return value if isinstance(value, str) else value.decode(errors="replace")
    return None
