"""``tierlog consume TOPIC``: records to stdout, one value per line (Kafka's console consumer).

Starts at each partition's end unless ``--from-beginning`` or ``--offset N`` (or
``earliest``, ``latest``, as Kafka's tool takes them); reads
every partition, or ``--partition P``; stops after ``--max-messages N`` records, or
when none came for ``--timeout-ms`` (else runs until interrupted).  The topic is the
argument or Kafka's ``--topic``.  With ``--group G`` it resumes where the group left off
(a partition the group never committed starts at the end, or the start with
``--from-beginning``) and commits, once per poll and at the end, the position of every
partition it was given (the offset after the last record printed, where a
``--max-messages`` cut a poll short), as Kafka's consumer commits every assigned
partition: a restart prints nothing twice that was committed and skips nothing
(``--offset`` is refused with a group, as Kafka's tool refuses it).  Records print as
Kafka's console consumer prints them (``record_format``: ``--property
print.key=true``, ``print.offset``, ``print.headers`` and the rest, ``--print-key`` and
``--key-separator`` being short for two of them; a null key or value prints as
``null``), or one JSON object each with ``--formatter json``.  ``--isolation-level
read_committed`` (Kafka's flag; or ``--consumer-property isolation.level=...``, which
the flag overrides) prints only committed transactions' records, up to the last
stable offset.  A typed error from the
consumer (a corrupt batch: ``CORRUPT_MESSAGE`` with its partition and offset; a
partition that does not exist: ``UNKNOWN_TOPIC_OR_PARTITION``) ends the command with
status 1 after the records before it were printed, named before the total.  SIGTERM,
like Ctrl-C, closes the consumer (leaving its group at once, so ``consumer-groups
--delete`` works right after) and prints the total, as Kafka's console consumer does.
"""

from __future__ import annotations

import argparse
import sys
import time
from collections.abc import Callable
from typing import BinaryIO

from tierlog.cli.record_format import FORMATTERS, RecordFormat, RecordFormatError, json_line
from tierlog.cli.server_option import (
    add_security_options,
    add_server_option,
    add_topic_arguments,
    client_properties,
    key_value,
    topic_of,
)
from tierlog.cli.stop_signals import StopSignals
from tierlog.client import Consumer, ConsumerRecord, TopicPartition
from tierlog.client.errors import TierlogError, WakeupError, with_reason

__all__ = ["add_parser", "offset", "record_format", "run"]


def add_parser(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    parser = subparsers.add_parser(
        "consume",
        help="print a topic's records, one value per line (Kafka's console consumer)",
        description="Print TOPIC's records to stdout, one per line.",
    )
    add_topic_arguments(parser)
    start = parser.add_mutually_exclusive_group()
    start.add_argument("--from-beginning", action="store_true", help="start at the log start")
    start.add_argument(
        "--offset",
        type=offset,
        metavar="OFFSET|earliest|latest",
        help="start at this offset, 0 or more, or at the log's start (earliest) or end "
        "(latest), as Kafka's console consumer takes it (a negative offset is refused)",
    )
    parser.add_argument("--partition", type=int, help="read only this partition")
    parser.add_argument(
        "--group", help="the consumer group: resume at its committed offsets, and commit"
    )
    parser.add_argument("--max-messages", type=int, help="stop after this many records")
    parser.add_argument(
        "--timeout-ms", type=int, help="stop when no record came for this long (default: never)"
    )
    parser.add_argument("--print-key", action="store_true", help="print key SEP value")
    parser.add_argument("--key-separator", metavar="SEP", help="between the printed fields")
    parser.add_argument(
        "--property",
        action="append",
        type=key_value,
        default=[],
        metavar="KEY=VALUE",
        help="how records print, Kafka's names: print.timestamp, print.partition, "
        "print.offset, print.headers, print.key, print.value, key.separator, "
        "line.separator, headers.separator, null.literal (repeatable)",
    )
    parser.add_argument(
        "--formatter",
        choices=FORMATTERS,
        default="default",
        help="default: Kafka's console consumer's lines; json: one JSON object per record",
    )
    parser.add_argument(
        "--isolation-level",
        choices=("read_committed", "read_uncommitted"),
        help="read_committed: only the records of committed transactions (and those of no "
        "transaction), up to the last stable offset; read_uncommitted (the default): all",
    )
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


def offset(text: str) -> int | str:
    """An ``--offset`` value: ``earliest``, ``latest``, or an offset in the log, never
    counted back from its end."""
    if text in ("earliest", "latest"):
        return text
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(
            f"{text!r} is none of an offset, earliest, latest"
        ) from None
    if value < 0:
        raise argparse.ArgumentTypeError(f"an offset is 0 or more, not {value}")
    return value


def record_format(args: argparse.Namespace) -> RecordFormat:
    """The ``--property`` settings, with ``--print-key`` and ``--key-separator``."""
    props = dict(args.property)
    if args.print_key:
        props["print.key"] = "true"
    if args.key_separator is not None:
        props["key.separator"] = args.key_separator
    return RecordFormat.from_properties(props)


def _position(consumer: Consumer, args: argparse.Namespace) -> None:
    topic = topic_of(args)
    if args.partition is None:
        consumer.subscribe(topic)
    else:
        consumer.assign([TopicPartition(topic, args.partition)])
    if args.group:
        return  # the group's offsets, else auto.offset.reset
    if args.from_beginning or args.offset == "earliest":
        consumer.seek_to_beginning()
    elif args.offset in (None, "latest"):
        consumer.seek_to_end()
    else:
        for tp in consumer.assignment():
            consumer.seek(tp, args.offset)


def _group_properties(args: argparse.Namespace) -> dict[str, object]:
    """With ``--group``: the group, where it starts without offsets, and commits made
    here (of what was printed) instead of automatic ones (of what was polled)."""
    if not args.group:
        return {}
    if args.offset is not None:
        raise SystemExit("tierlog consume: --offset cannot be used with --group")
    reset = "earliest" if args.from_beginning else "latest"
    return {"group.id": args.group, "auto.offset.reset": reset, "enable.auto.commit": "false"}


def _seek_back(consumer: Consumer, unprinted: list[ConsumerRecord]) -> None:
    """Put each partition of records polled but not printed (``--max-messages`` cut the
    poll short) back to the first of them, so every position is what was printed."""
    first: dict[TopicPartition, int] = {}
    for record in unprinted:
        first.setdefault(TopicPartition(record.topic, record.partition), record.offset)
    for tp, offset in first.items():
        consumer.seek(tp, offset)


def run(args: argparse.Namespace) -> int:
    props = {
        **client_properties(args),
        **_group_properties(args),
        **dict(args.consumer_property),
    }
    if args.isolation_level is not None:
        props["isolation.level"] = args.isolation_level
    try:
        lines = record_format(args)
    except RecordFormatError as error:
        print(f"tierlog consume: {error}", file=sys.stderr)
        return 2
    line_of = json_line if args.formatter == "json" else lines.line
    printed = _Count()
    try:
        # SIGTERM stops it as Ctrl-C does (exit status 143), as Kafka's console consumer
        # closes in its shutdown hook: the signal wakes the consumer (``Consumer.wakeup``,
        # never an exception raised where it lands: ``stop_signals``), which closes,
        # leaving its group.
        with StopSignals() as stops, Consumer(props) as consumer:
            stops.on_stop(consumer.wakeup)
            try:
                _print_records(consumer, args, line_of, printed)
            except WakeupError:
                assert stops.exit_status is not None
                return stops.exit_status
    except TierlogError as error:  # said before the total, as Kafka's tool logs it
        print(f"tierlog consume: {with_reason(error)}", file=sys.stderr)
        return 1
    finally:  # also on Ctrl-C and SIGTERM, once the consumer closed and left its group
        print(f"Processed a total of {printed.records} messages", file=sys.stderr)
    return 0


class _Count:
    """The records printed so far, still there when a stop unwinds the loop."""

    records = 0


def _print_records(
    consumer: Consumer,
    args: argparse.Namespace,
    line_of: Callable[[ConsumerRecord], bytes],
    printed: _Count,
) -> None:
    out: BinaryIO = sys.stdout.buffer
    _position(consumer, args)
    last_record = time.monotonic()
    while args.max_messages is None or printed.records < args.max_messages:
        wait_ms = 1000 if args.timeout_ms is None else min(1000, args.timeout_ms)
        records = consumer.poll(wait_ms)
        if records:
            last_record = time.monotonic()
        room = None if args.max_messages is None else args.max_messages - printed.records
        batch = records[:room]
        for record in batch:
            printed.records += 1  # first, as Kafka's: a stop in the write counts it
            out.write(line_of(record))
        out.flush()
        if args.group and batch:
            _seek_back(consumer, records[len(batch) :])
            consumer.commit()  # every assigned partition's position, as Kafka's
        idle_ms = (time.monotonic() - last_record) * 1000
        if args.timeout_ms is not None and not records and idle_ms >= args.timeout_ms:
            break
    if args.group:  # partitions nothing was printed from are committed too
        consumer.commit()
