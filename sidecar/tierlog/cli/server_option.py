"""``--server HOST:PORT`` for every subcommand that talks to a sidecar, its security
options, and ``--config``.

The default comes from the ``TIERLOG_SERVER`` environment variable, then
``127.0.0.1:9092``; a comma-separated list is several bootstrap servers.

``add_security_options`` adds how to reach a sidecar that asks for TLS, mutual TLS or a
bearer token; each defaults to an environment variable, and ``client_properties``
turns them into the clients' Kafka-named settings (``tierlog.client.security``):

- ``--tls-ca FILE`` ($TIERLOG_TLS_CA): TLS, trusting these PEM CA certificates
  (``security.protocol=SSL``, ``ssl.truststore.location``);
- ``--tls-cert FILE`` ($TIERLOG_TLS_CERT) and ``--tls-key FILE`` ($TIERLOG_TLS_KEY): a
  client certificate for mutual TLS (``ssl.keystore.location``,
  ``tierlog.ssl.keystore.key.location``; the key may sit in the certificate's file);
- ``--token-file FILE`` ($TIERLOG_AUTH_TOKEN_FILE): the bearer token
  (``tierlog.auth.token.file``); without it the clients read $TIERLOG_AUTH_TOKEN.
"""

from __future__ import annotations

import argparse
import os

__all__ = [
    "DEFAULT_SERVER",
    "SERVER_ENV",
    "add_security_options",
    "add_server_option",
    "bootstrap_servers",
    "client_properties",
    "key_value",
]

SERVER_ENV = "TIERLOG_SERVER"
DEFAULT_SERVER = "127.0.0.1:9092"


def add_server_option(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--server",
        default=os.environ.get(SERVER_ENV, DEFAULT_SERVER),
        metavar="HOST:PORT",
        help=f"the sidecar to talk to, or several comma-separated (default: ${SERVER_ENV}, "
        f"else {DEFAULT_SERVER})",
    )


def bootstrap_servers(args: argparse.Namespace) -> tuple[str, ...]:
    return tuple(part.strip() for part in str(args.server).split(",") if part.strip())


# option, environment variable, Kafka client setting, help
_SECURITY_OPTIONS = (
    ("--tls-ca", "TIERLOG_TLS_CA", "ssl.truststore.location", "use TLS, trusting these CAs"),
    ("--tls-cert", "TIERLOG_TLS_CERT", "ssl.keystore.location", "client certificate (mTLS)"),
    ("--tls-key", "TIERLOG_TLS_KEY", "tierlog.ssl.keystore.key.location", "its private key"),
    ("--token-file", "TIERLOG_AUTH_TOKEN_FILE", "tierlog.auth.token.file", "the bearer token"),
)


def add_security_options(parser: argparse.ArgumentParser) -> None:
    group = parser.add_argument_group("security (the sidecar's TLS, mutual TLS and token)")
    for option, env, _setting, text in _SECURITY_OPTIONS:
        group.add_argument(
            option,
            default=os.environ.get(env) or None,
            metavar="FILE",
            help=f"{text}, PEM (default: ${env})"
            if option != "--token-file"
            else f"{text} (default: ${env}, else the token in $TIERLOG_AUTH_TOKEN)",
        )


def client_properties(args: argparse.Namespace) -> dict[str, object]:
    """``bootstrap.servers`` and the security settings under their Kafka names."""
    props: dict[str, object] = {"bootstrap.servers": ",".join(bootstrap_servers(args))}
    for option, _env, setting, _text in _SECURITY_OPTIONS:
        value = getattr(args, option.removeprefix("--").replace("-", "_"), None)
        if value:
            props[setting] = value
    if args.tls_ca or args.tls_cert:
        props["security.protocol"] = "SSL"
    return props


def key_value(text: str) -> tuple[str, str]:
    """An argparse type for ``KEY=VALUE``."""
    key, sep, value = text.partition("=")
    if not sep or not key.strip():
        raise argparse.ArgumentTypeError(f"expected KEY=VALUE, got {text!r}")
    return key.strip(), value.strip()
