"""What the Kafka listener asks of its clients, under Kafka's names.

``listeners`` names the Kafka listener (``PLAINTEXT://...``, ``SASL_PLAINTEXT://...``,
or a name of one's own, ``CLIENT://...``); ``listener.security.protocol.map`` maps
names to security protocols (``CLIENT:SASL_PLAINTEXT``; by default each protocol's
own name maps to itself, as in Kafka). On a ``SASL_*`` listener every connection
authenticates with one of ``sasl.enabled.mechanisms``: ``PLAIN`` and ``OAUTHBEARER``
against the broker's bearer token (so one is required; both are the default, where
Kafka's is GSSAPI, which tierlog does not offer), ``SCRAM-SHA-256`` and
``SCRAM-SHA-512`` against the users' credentials in the cluster's store
(``scram_credentials``), which a client holding the token sets with
AlterUserScramCredentials. On an ``SSL`` or ``SASL_SSL``
listener connections are TLS with the gRPC port's certificate and client checks
(``ssl.keystore.location``, ``ssl.truststore.location``, ``ssl.client.auth``), so
that certificate is required. On ``SSL`` a client certificate, when given and verified,
names the connection's principal (``tls_principal``).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from tierlog.broker.scram_credentials import ScramCredentials
from tierlog.kafka.sasl import SaslSettings
from tierlog.kafka.sasl_exchanges import MECHANISMS
from tierlog.kafka.sasl_mechanisms import TOKEN_MECHANISMS
from tierlog.storage.errors import InvalidConfigError

__all__ = ["LISTENER_SECURITY_KEYS", "ListenerSecurity"]

LISTENER_SECURITY_KEYS = frozenset(
    {
        "connections.max.reauth.ms",
        "listener.security.protocol.map",
        "sasl.enabled.mechanisms",
        "sasl.server.max.receive.size",
    }
)
_PROTOCOLS = ("PLAINTEXT", "SSL", "SASL_PLAINTEXT", "SASL_SSL")


@dataclass(frozen=True)
class ListenerSecurity:
    protocol: str = "PLAINTEXT"
    sasl_mechanisms: tuple[str, ...] = tuple(TOKEN_MECHANISMS)
    sasl_max_receive_bytes: int = 524_288  # Kafka's sasl.server.max.receive.size
    max_reauth_ms: int = 0  # Kafka's connections.max.reauth.ms (0: sessions never end)

    @classmethod
    def from_properties(cls, props: Mapping[str, str], listener_name: str) -> ListenerSecurity:
        protocol = _protocol_map(props).get(listener_name.upper())
        if protocol is None:
            raise InvalidConfigError(
                f"listener.security.protocol.map has no security protocol for the listener "
                f"{listener_name!r}"
            )
        mechanisms = tuple(
            name.strip().upper()
            for name in props.get("sasl.enabled.mechanisms", ",".join(TOKEN_MECHANISMS)).split(",")
            if name.strip()
        )
        unknown = [name for name in mechanisms if name not in MECHANISMS]
        if unknown or not mechanisms:
            raise InvalidConfigError(
                f"sasl.enabled.mechanisms: {', '.join(unknown) or 'none'} (tierlog offers "
                f"{', '.join(MECHANISMS)})"
            )
        size = props.get("sasl.server.max.receive.size", "524288").strip()
        if not size.isdigit() or int(size) < 1:
            raise InvalidConfigError(f"sasl.server.max.receive.size must be positive, got {size!r}")
        reauth = props.get("connections.max.reauth.ms", "0").strip()
        if not reauth.isdigit():
            raise InvalidConfigError(
                f"connections.max.reauth.ms must be 0 or more milliseconds, got {reauth!r}"
            )
        return cls(protocol, mechanisms, int(size), int(reauth))

    @property
    def uses_sasl(self) -> bool:
        return self.protocol.startswith("SASL_")

    @property
    def uses_tls(self) -> bool:
        return self.protocol.endswith("SSL")

    def check_tls(self, has_certificate: bool) -> None:
        """A TLS listener needs the broker's certificate (``ssl.keystore.location``)."""
        if self.uses_tls and not has_certificate:
            raise InvalidConfigError(
                f"a {self.protocol} Kafka listener serves the certificate of "
                "ssl.keystore.location, which is not set"
            )

    def sasl(self, token: str | None, credentials: ScramCredentials) -> SaslSettings | None:
        """The SASL settings of this listener (None without SASL), over ``token`` and
        the users' SCRAM ``credentials``."""
        if not self.uses_sasl:
            return None
        if token is None:
            raise InvalidConfigError(
                f"a {self.protocol} Kafka listener checks clients against the bearer token: "
                "set tierlog.auth.token.file or $TIERLOG_AUTH_TOKEN"
            )
        return SaslSettings(
            self.sasl_mechanisms,
            token,
            credentials,
            self.sasl_max_receive_bytes,
            self.max_reauth_ms,
        )


def _protocol_map(props: Mapping[str, str]) -> dict[str, str]:
    value = props.get("listener.security.protocol.map")
    if value is None:
        return {protocol: protocol for protocol in _PROTOCOLS}
    mapped = {}
    for entry in filter(None, (part.strip() for part in value.split(","))):
        name, sep, protocol = entry.partition(":")
        if not sep or not name or protocol.upper() not in _PROTOCOLS:
            raise InvalidConfigError(
                f"listener.security.protocol.map expects NAME:PROTOCOL pairs "
                f"({', '.join(_PROTOCOLS)}), got {entry!r}"
            )
        mapped[name.strip().upper()] = protocol.upper()
    return mapped
