"""``tierlog consume TOPIC``: records to stdout, one value per line (Kafka's console consumer).

Starts at each partition's end unless ``--from-beginning`` or ``--offset N``; reads
every partition, or ``--partition P``; stops after ``--max-messages N`` records, or
when none came for ``--timeout-ms`` (else runs until interrupted).  ``--print-key``
prints ``key SEP value`` (SEP: ``--key-separator``, a tab by default); a null key or
value prints as ``null``, as Kafka's console consumer does.  A typed error from the
consumer (a corrupt batch: ``CORRUPT_MESSAGE`` with its partition and offset) ends the
command with status 1 after the records before it were printed.
"""

from __future__ import annotations

import argparse
import sys
import time
from typing import BinaryIO

from tierlog.cli.server_option import (
    add_security_options,
    add_server_option,
    client_properties,
    key_value,
)
from tierlog.client import Consumer, ConsumerRecord, TopicPartition

__all__ = ["add_parser", "format_record", "offset", "run"]


def add_parser(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    parser = subparsers.add_parser(
        "consume",
        help="print a topic's records, one value per line (Kafka's console consumer)",
        description="Print TOPIC's records to stdout, one per line.",
    )
    parser.add_argument("topic")
    start = parser.add_mutually_exclusive_group()
    start.add_argument("--from-beginning", action="store_true", help="start at the log start")
    start.add_argument(
        "--offset",
        type=offset,
        help="start at this offset, 0 or more (as in Kafka's console consumer, a negative "
        "offset is refused: use --from-beginning, or leave both out to start at the end)",
    )
    parser.add_argument("--partition", type=int, help="read only this partition")
    parser.add_argument("--max-messages", type=int, help="stop after this many records")
    parser.add_argument(
        "--timeout-ms", type=int, help="stop when no record came for this long (default: never)"
    )
    parser.add_argument("--print-key", action="store_true", help="print key SEP value")
    parser.add_argument("--key-separator", default="\t", metavar="SEP")
    parser.add_argument(
        "--consumer-property",
        action="append",
        type=key_value,
        default=[],
        metavar="KEY=VALUE",
        help="a consumer config under its Kafka name (repeatable)",
    )
    add_server_option(parser, "--consumer.config")
    add_security_options(parser)
    parser.set_defaults(run=run)


def offset(text: str) -> int:
    """An ``--offset`` value: an offset in the log, never counted back from its end."""
    value = int(text)
    if value < 0:
        raise argparse.ArgumentTypeError(f"an offset is 0 or more, not {value}")
    return value


def format_record(record: ConsumerRecord, print_key: bool, separator: bytes) -> bytes:
    value = b"null" if record.value is None else record.value
    if not print_key:
        return value + b"\n"
    key = b"null" if record.key is None else record.key
    return key + separator + value + b"\n"


def _position(consumer: Consumer, args: argparse.Namespace) -> None:
    if args.partition is None:
        consumer.subscribe(args.topic)
    else:
        consumer.assign([TopicPartition(args.topic, args.partition)])
    if args.from_beginning:
        consumer.seek_to_beginning()
    elif args.offset is not None:
        for tp in consumer.assignment():
            consumer.seek(tp, args.offset)
    else:
        consumer.seek_to_end()


def run(args: argparse.Namespace) -> int:
    props = {**client_properties(args), **dict(args.consumer_property)}
    out: BinaryIO = sys.stdout.buffer
    separator = args.key_separator.encode()
    count = 0
    try:
        with Consumer(props) as consumer:
            _position(consumer, args)
            last_record = time.monotonic()
            while args.max_messages is None or count < args.max_messages:
                wait_ms = 1000 if args.timeout_ms is None else min(1000, args.timeout_ms)
                records = consumer.poll(wait_ms)
                if records:
                    last_record = time.monotonic()
                for record in records[
                    : None if args.max_messages is None else args.max_messages - count
                ]:
                    out.write(format_record(record, args.print_key, separator))
                    count += 1
                out.flush()
                idle_ms = (time.monotonic() - last_record) * 1000
                if args.timeout_ms is not None and not records and idle_ms >= args.timeout_ms:
                    break
    finally:  # also when a poll raised (a corrupt batch: ``main`` prints it, exit 1)
        print(f"Processed a total of {count} messages", file=sys.stderr)
    return 0
