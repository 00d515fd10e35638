"""How a client reaches sidecars that ask for TLS, a client certificate or a bearer token.

The sidecar's side is ``tierlog.sidecar.security``; this is its mirror.  The settings
are Kafka's client names (``CommonClientConfig``): ``security.protocol=SSL`` opens TLS
channels that trust the CA certificates of ``ssl.truststore.location`` (the system's
when unset), and with ``ssl.keystore.location`` (a PEM certificate chain, with the key
in the same file or in ``tierlog.ssl.keystore.key.location``) present a client
certificate for mutual TLS.  The bearer token comes from ``tierlog.auth.token.file``,
else from ``$TIERLOG_AUTH_TOKEN``, and rides on every call as ``authorization: Bearer
<token>`` metadata (over PLAINTEXT too, where it crosses the network in clear, as the
sidecar allows).  The files are read once, when the client is built: a bad path is a
``ConfigError`` then, not a failed handshake later.
"""

from __future__ import annotations

import os
import re
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, NamedTuple

import grpc

from tierlog.client.config import CommonClientConfig
from tierlog.client.errors import ConfigError

__all__ = ["PLAINTEXT", "TOKEN_ENV", "ChannelSecurity"]

TOKEN_ENV = "TIERLOG_AUTH_TOKEN"
_PEM_BLOCK = re.compile(rb"-----BEGIN ([A-Z0-9 ]+)-----.*?-----END \1-----\s*", re.DOTALL)


@dataclass(frozen=True)
class ChannelSecurity:
    """What every channel of a client is opened with (the files already read)."""

    tls: bool = False
    root_certificates: bytes | None = None  # None: the system's CAs
    certificate_chain: bytes | None = None  # a client certificate, for mutual TLS
    private_key: bytes | None = field(default=None, repr=False)
    token: str | None = field(default=None, repr=False)
    # The name the sidecar's certificate must carry when it is not the dialled host (the
    # operator dials a pod's IP; its certificate names the pod's DNS name).
    server_name: str | None = None

    @classmethod
    def from_config(
        cls, config: CommonClientConfig, environ: Mapping[str, str] = os.environ
    ) -> ChannelSecurity:
        token = _token(config.auth_token_file, environ)
        if config.security_protocol == "PLAINTEXT":
            return cls(token=token)
        chain = key = None
        if config.ssl_keystore_location:
            keystore = _read("ssl.keystore.location", config.ssl_keystore_location)
            key_file = config.ssl_keystore_key_location
            key_pem = _read("tierlog.ssl.keystore.key.location", key_file) if key_file else keystore
            chain, key = _pem_blocks(keystore, "CERTIFICATE"), _pem_blocks(key_pem, "PRIVATE KEY")
            if not chain or not key:
                raise ConfigError(
                    "ssl.keystore.location",
                    f"{config.ssl_keystore_location} needs a PEM certificate chain and a "
                    "private key (or tierlog.ssl.keystore.key.location)",
                )
        roots = None
        if config.ssl_truststore_location:
            roots = _read("ssl.truststore.location", config.ssl_truststore_location)
            if not _pem_blocks(roots, "CERTIFICATE"):
                raise ConfigError(
                    "ssl.truststore.location",
                    f"{config.ssl_truststore_location} holds no PEM certificate",
                )
        return cls(True, roots, chain, key, token)

    @classmethod
    def from_properties(cls, props: Mapping[str, object]) -> ChannelSecurity:
        """From Kafka-named client ``props`` (``security.protocol``, ``ssl.*``...)."""
        return cls.from_config(CommonClientConfig.from_properties(props))

    def _credentials(self) -> grpc.ChannelCredentials:
        return grpc.ssl_channel_credentials(
            root_certificates=self.root_certificates,
            private_key=self.private_key,
            certificate_chain=self.certificate_chain,
        )

    def _tls_options(self, options: list[tuple[str, Any]]) -> list[tuple[str, Any]]:
        if self.server_name is None:
            return options
        return [*options, ("grpc.ssl_target_name_override", self.server_name)]

    def open_channel(self, address: str, options: list[tuple[str, Any]]) -> grpc.Channel:
        if self.tls:
            channel = grpc.secure_channel(
                address, self._credentials(), options=self._tls_options(options)
            )
        else:
            channel = grpc.insecure_channel(address, options=options)
        if self.token is None:
            return channel
        return grpc.intercept_channel(channel, BearerToken(self.token))

    def open_aio_channel(
        self,
        address: str,
        options: list[tuple[str, Any]],
        interceptors: Sequence[grpc.aio.ClientInterceptor] = (),
    ) -> grpc.aio.Channel:
        """The same channel on ``grpc.aio``, for the running loop.  Its calls carry the
        token as ``call_metadata()``: an aio interceptor would put every message of a
        stream through one more queue."""
        if self.tls:
            return grpc.aio.secure_channel(
                address,
                self._credentials(),
                options=self._tls_options(options),
                interceptors=interceptors,
            )
        return grpc.aio.insecure_channel(address, options=options, interceptors=interceptors)

    def call_metadata(self) -> tuple[tuple[str, str], ...]:
        """The token's header for a call on an aio channel (none without a token)."""
        return () if self.token is None else (("authorization", f"Bearer {self.token}"),)


PLAINTEXT = ChannelSecurity()


def _read(key: str, location: str) -> bytes:
    try:
        return Path(location).read_bytes()
    except OSError as error:
        raise ConfigError(key, f"cannot read {location}: {error.strerror}") from None


def _pem_blocks(data: bytes, kind: str) -> bytes:
    """The PEM blocks of ``data`` whose type ends with ``kind``, in order."""
    return b"".join(
        match.group(0)
        for match in _PEM_BLOCK.finditer(data)
        if match.group(1).endswith(kind.encode())
    )


def _token(location: str, environ: Mapping[str, str]) -> str | None:
    if location:
        token = _read("tierlog.auth.token.file", location).decode().strip()
        if not token:
            raise ConfigError("tierlog.auth.token.file", f"{location} is empty")
        return token
    return environ.get(TOKEN_ENV, "").strip() or None


class _CallDetails(NamedTuple):
    method: str
    timeout: float | None
    metadata: Any
    credentials: grpc.CallCredentials | None
    wait_for_ready: bool | None
    compression: grpc.Compression | None


class BearerToken(
    grpc.UnaryUnaryClientInterceptor,
    grpc.UnaryStreamClientInterceptor,
    grpc.StreamUnaryClientInterceptor,
    grpc.StreamStreamClientInterceptor,
):
    """Adds ``authorization: Bearer <token>`` to the metadata of every call."""

    def __init__(self, token: str) -> None:
        self._header = ("authorization", f"Bearer {token}")

    def _with_token(self, details: grpc.ClientCallDetails) -> grpc.ClientCallDetails:
        metadata = [*(details.metadata or ()), self._header]
        return _CallDetails(  # type: ignore[return-value]  # grpc duck-types the details
            details.method,
            details.timeout,
            metadata,
            details.credentials,
            details.wait_for_ready,
            details.compression,
        )

    def intercept_unary_unary(
        self, continuation: Callable[..., Any], details: grpc.ClientCallDetails, request: Any
    ) -> Any:
        return continuation(self._with_token(details), request)

    def intercept_unary_stream(
        self, continuation: Callable[..., Any], details: grpc.ClientCallDetails, request: Any
    ) -> Any:
        return continuation(self._with_token(details), request)

    def intercept_stream_unary(
        self,
        continuation: Callable[..., Any],
        details: grpc.ClientCallDetails,
        requests: Iterator[Any],
    ) -> Any:
        return continuation(self._with_token(details), requests)

    def intercept_stream_stream(
        self,
        continuation: Callable[..., Any],
        details: grpc.ClientCallDetails,
        requests: Iterator[Any],
    ) -> Any:
        return continuation(self._with_token(details), requests)
