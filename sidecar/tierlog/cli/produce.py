"""``tierlog produce TOPIC``: one record per line of stdin (Kafka's console producer).

Each line (without its newline) is a value; with ``--key-separator SEP`` the text
before the first SEP is the key and the rest the value (a line without SEP is an
error, as with Kafka's ``parse.key``).  Records go through the idempotent
``Producer``; the command exits once every one is acknowledged, non-zero if any failed.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Iterable, Iterator

from tierlog.cli.server_option import (
    add_security_options,
    add_server_option,
    client_properties,
    key_value,
)
from tierlog.client import Producer, RecordFuture

__all__ = ["add_parser", "parse_lines", "run"]

CODECS = ("none", "gzip", "snappy", "lz4", "zstd")


def add_parser(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    parser = subparsers.add_parser(
        "produce",
        help="send stdin to a topic, one record per line (Kafka's console producer)",
        description="Send stdin to TOPIC, one record per line.",
    )
    parser.add_argument("topic")
    parser.add_argument("--key-separator", metavar="SEP", help="split each line into key SEP value")
    parser.add_argument("--partition", type=int, help="send every record to this partition")
    parser.add_argument("--compression-type", choices=CODECS, default="none")
    parser.add_argument("--linger-ms", type=int, default=5)
    parser.add_argument(
        "--producer-property",
        action="append",
        type=key_value,
        default=[],
        metavar="KEY=VALUE",
        help="a producer config under its Kafka name (repeatable)",
    )
    add_server_option(parser)
    add_security_options(parser)
    parser.set_defaults(run=run)


def parse_lines(
    lines: Iterable[bytes], key_separator: bytes | None
) -> Iterator[tuple[bytes | None, bytes]]:
    """(key, value) per line; ValueError for a line without the separator."""
    for number, line in enumerate(lines, 1):
        line = line.removesuffix(b"\n")
        if key_separator is None:
            yield None, line
            continue
        key, sep, value = line.partition(key_separator)
        if not sep:
            raise ValueError(f"line {number} has no key separator {key_separator!r}")
        yield key, value


def producer_properties(args: argparse.Namespace) -> dict[str, object]:
    return {
        **client_properties(args),
        "compression.type": args.compression_type,
        "linger.ms": args.linger_ms,
        **dict(args.producer_property),
    }


def run(args: argparse.Namespace) -> int:
    separator = None if args.key_separator is None else args.key_separator.encode()
    futures: list[RecordFuture] = []
    with Producer(producer_properties(args)) as producer:
        try:
            for key, value in parse_lines(sys.stdin.buffer, separator):
                futures.append(producer.send(args.topic, value, key=key, partition=args.partition))
        except ValueError as error:
            print(f"tierlog produce: {error}", file=sys.stderr)
            return 1
        producer.flush()
    failed = [future.exception() for future in futures if future.exception() is not None]
    if failed:
        print(
            f"tierlog produce: {len(failed)} of {len(futures)} records failed: {failed[0]}",
            file=sys.stderr,
        )
        return 1
    return 0
