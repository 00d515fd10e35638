"""``--server HOST:PORT`` for every subcommand that talks to a sidecar, and ``--config``.

The default comes from the ``TIERLOG_SERVER`` environment variable, then
``127.0.0.1:9092``; a comma-separated list is several bootstrap servers.
"""

from __future__ import annotations

import argparse
import os

__all__ = ["DEFAULT_SERVER", "SERVER_ENV", "add_server_option", "bootstrap_servers", "key_value"]

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


def key_value(text: str) -> tuple[str, str]:
    """An argparse type for ``KEY=VALUE``."""
    key, sep, value = text.partition("=")
    if not sep or not key.strip():
        raise argparse.ArgumentTypeError(f"expected KEY=VALUE, got {text!r}")
    return key.strip(), value.strip()
