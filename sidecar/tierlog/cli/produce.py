"""``tierlog produce TOPIC``: one record per line of stdin (Kafka's console producer).

Each line (without its newline) is a value; Kafka's ``--property`` settings
(``parse.key``, ``key.separator``, ``parse.headers``, ...: ``line_format``) read keys and
headers from it too, and ``--key-separator SEP`` is short for ``parse.key=true`` with that
separator.  The topic is the argument or Kafka's ``--topic``; Kafka's older
``--broker-list`` and ``--request-required-acks`` are taken as its tool takes them.
Records go through the idempotent ``Producer``; the command exits once every one is
acknowledged, non-zero if any failed.  SIGINT (Ctrl-C) or SIGTERM stops reading stdin
(a line not yet whole is not sent) and closes the producer, which waits for the records
sent so far, as Kafka's console producer closes its producer in its shutdown hook; then
the exit status is 130 or 143.  The signal only asks (``stop_signals``): the loop looks
between lines, and the wait for stdin ends at it.
"""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Iterator

from tierlog.cli.line_format import LineFormat, LineFormatError
from tierlog.cli.server_option import (
    add_security_options,
    add_server_option,
    add_topic_arguments,
    client_properties,
    key_value,
    topic_of,
)
from tierlog.cli.stop_signals import StopSignals
from tierlog.client import Producer, RecordFuture

__all__ = ["add_parser", "line_format", "run"]

CODECS = ("none", "gzip", "snappy", "lz4", "zstd")
READ_BYTES = 65536  # what one read of stdin takes at most


def add_parser(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    parser = subparsers.add_parser(
        "produce",
        help="send stdin to a topic, one record per line (Kafka's console producer)",
        description="Send stdin to TOPIC, one record per line.",
    )
    add_topic_arguments(parser)
    parser.add_argument("--key-separator", metavar="SEP", help="split each line into key SEP value")
    parser.add_argument(
        "--property",
        action="append",
        type=key_value,
        default=[],
        metavar="KEY=VALUE",
        help="how lines are read, Kafka's names: parse.key, key.separator, parse.headers, "
        "headers.delimiter, headers.separator, headers.key.separator, null.marker, "
        "ignore.error (repeatable)",
    )
    parser.add_argument("--partition", type=int, help="send every record to this partition")
    parser.add_argument("--compression-type", "--compression-codec", choices=CODECS, default="none")
    parser.add_argument("--linger-ms", type=int, default=5)
    parser.add_argument(
        "--producer-property",
        action="append",
        type=key_value,
        default=[],
        metavar="KEY=VALUE",
        help="a producer config under its Kafka name (repeatable)",
    )
    parser.add_argument(
        "--request-required-acks",
        choices=("all", "-1", "0", "1"),
        help="the producer's acks (Kafka's console producer flag; default: all)",
    )
    add_server_option(parser, "--producer.config")
    parser.add_argument(
        "--broker-list", dest="server", metavar="HOST:PORT", help="the same as --bootstrap-server"
    )
    add_security_options(parser)
    parser.set_defaults(run=run)


def line_format(args: argparse.Namespace) -> LineFormat:
    """The ``--property`` settings, with ``--key-separator`` as ``parse.key``."""
    props = dict(args.property)
    if args.key_separator is not None:
        props |= {"parse.key": "true", "key.separator": args.key_separator}
    return LineFormat.from_properties(props)


def producer_properties(args: argparse.Namespace) -> dict[str, object]:
    return {
        **client_properties(args),
        "compression.type": args.compression_type,
        "linger.ms": args.linger_ms,
        **dict(args.producer_property),
        # Kafka's tool lets the flag win over a --producer-property acks.
        **({"acks": args.request_required_acks} if args.request_required_acks else {}),
    }


def run(args: argparse.Namespace) -> int:
    topic = topic_of(args)
    try:
        lines = line_format(args)
    except LineFormatError as error:
        print(f"tierlog produce: {error}", file=sys.stderr)
        return 2
    futures: list[RecordFuture] = []
    # Closing the producer waits for every record sent, at the end and at a stop alike.
    with StopSignals() as stops, Producer(producer_properties(args)) as producer:
        try:
            for headers, key, value in lines.parse(_stdin_lines(sys.stdin.fileno(), stops)):
                futures.append(
                    producer.send(topic, value, key=key, headers=headers, partition=args.partition)
                )
        except LineFormatError as error:
            print(f"tierlog produce: {error}", file=sys.stderr)
            return 1
    failed = [future.exception() for future in futures if future.exception() is not None]
    if failed:
        print(
            f"tierlog produce: {len(failed)} of {len(futures)} records failed: {failed[0]}",
            file=sys.stderr,
        )
    return stops.exit_status or (1 if failed else 0)


def _stdin_lines(fd: int, stops: StopSignals) -> Iterator[bytes]:
    """The lines of ``fd`` (without their newlines) as they come, until its end (where a
    last line without a newline counts) or a stop signal (where it does not).  Read
    from the file descriptor only once ``stops`` says it is readable, so a stop ends
    the wait for a line that may never come; a stop also ends the lines of a read."""
    rest = b""
    while stops.wait_readable(fd):
        read = os.read(fd, READ_BYTES)
        if not read:
            if rest:
                yield rest
            return
        *whole, rest = (rest + read).split(b"\n")
        for line in whole:
            if stops.received is not None:
                return
            yield line
