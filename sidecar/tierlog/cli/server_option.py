"""``--server HOST:PORT`` for every subcommand that talks to a sidecar, its security
options, a Kafka client properties file, and ``--config``.

``--server`` is also ``--bootstrap-server``, Kafka's tools' name for it. The default
comes from the ``TIERLOG_SERVER`` environment variable, then ``127.0.0.1:9092``; a
comma-separated list is several bootstrap servers.

With it comes Kafka's ``--command-config`` (or, for the clients' commands as Kafka's
console and perf tools name it, ``--producer.config`` or ``--consumer.config``): a
``.properties`` file of client settings under their Kafka names, which the options given
on the command line override.

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
from collections.abc import Mapping
from pathlib import Path

from tierlog.storage.properties import read_properties

__all__ = [
    "DEFAULT_SERVER",
    "SERVER_ENV",
    "add_security_options",
    "add_server_option",
    "add_topic_arguments",
    "bootstrap_servers",
    "client_properties",
    "key_value",
    "topic_of",
    "true_or_false",
]

SERVER_ENV = "TIERLOG_SERVER"
DEFAULT_SERVER = "127.0.0.1:9092"


def add_server_option(
    parser: argparse.ArgumentParser, config_option: str = "--command-config"
) -> None:
    """``--server`` (``--bootstrap-server``) and the properties file's ``config_option``."""
    parser.add_argument(
        "--server",
        "--bootstrap-server",
        dest="server",
        metavar="HOST:PORT",
        help=f"the sidecar to talk to, or several comma-separated (default: a properties "
        f"file's bootstrap.servers, else ${SERVER_ENV}, else {DEFAULT_SERVER})",
    )
    parser.add_argument(
        config_option,
        dest="config_file",
        type=Path,
        metavar="FILE",
        help="a Kafka client .properties file (its settings under Kafka's names)",
    )


def bootstrap_servers(args: argparse.Namespace, configured: object = None) -> tuple[str, ...]:
    """The servers asked for: ``--server``, else ``configured`` (a properties file's),
    else $TIERLOG_SERVER, else the default."""
    servers = args.server or configured or os.environ.get(SERVER_ENV) or DEFAULT_SERVER
    return tuple(part.strip() for part in str(servers).split(",") if part.strip())


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
    """The properties file's settings, then ``bootstrap.servers`` and the security
    settings under their Kafka names (these win)."""
    config_file: Path | None = getattr(args, "config_file", None)
    props: dict[str, object] = dict(read_properties(config_file)) if config_file else {}
    servers = bootstrap_servers(args, props.get("bootstrap.servers"))
    props["bootstrap.servers"] = ",".join(servers)
    for option, _env, setting, _text in _SECURITY_OPTIONS:
        value = getattr(args, option.removeprefix("--").replace("-", "_"), None)
        if value:
            props[setting] = value
    if args.tls_ca or args.tls_cert:
        props["security.protocol"] = "SSL"
    return props


def key_value(text: str) -> tuple[str, str]:
    """An argparse type for ``KEY=VALUE``; the value as given, spaces and all
    (``key.separator=' | '``), as Kafka's tools take it."""
    key, sep, value = text.partition("=")
    if not sep or not key.strip():
        raise argparse.ArgumentTypeError(f"expected KEY=VALUE, got {text!r}")
    return key.strip(), value


def add_topic_arguments(parser: argparse.ArgumentParser) -> None:
    """The topic as an argument, or as Kafka's tools take it, ``--topic``."""
    parser.add_argument("topic_argument", nargs="?", metavar="TOPIC", help="the topic")
    parser.add_argument("--topic", help="the topic (Kafka's flag; the same as TOPIC)")


def topic_of(args: argparse.Namespace) -> str:
    """The one topic given by ``add_topic_arguments``; a usage error without one or with two."""
    given: set[str] = {name for name in (args.topic_argument, args.topic) if name}
    if len(given) != 1:
        problem = "a TOPIC (or --topic) is needed" if not given else "two different topics given"
        raise SystemExit(f"tierlog {args.command}: {problem}")
    return given.pop()


def true_or_false(
    props: Mapping[str, str], name: str, default: bool, error: type[ValueError]
) -> bool:
    """A console tool's ``--property NAME=true|false`` (``default`` when unset); ``error``
    naming it otherwise."""
    text = props.get(name, str(default)).strip().lower()
    if text not in ("true", "false"):
        raise error(f"{name} is true or false, not {props[name]!r}")
    return text == "true"
