"""``tierlog get-offsets``: Kafka's ``kafka-get-offsets``, a partition's offset at a time.

``--time`` is Kafka's: ``-1`` / ``latest`` (the end consumers see), ``-2`` / ``earliest``
(the log start), ``-3`` / ``max-timestamp`` (the record with the largest timestamp),
``-4`` / ``earliest-local`` (the first offset still on the broker's disk), ``-5`` /
``latest-tiered`` (the last offset in the remote tier), or a timestamp in ms (the first
record at or after it). Without ``--topic``, every topic. One ``TOPIC:PARTITION:OFFSET``
line per partition, as Kafka prints them; the offset is left empty where no record matches.
"""

from __future__ import annotations

import argparse
from collections.abc import Sequence

from tierlog.cli.server_option import add_security_options, add_server_option, client_properties
from tierlog.client.admin import AdminClient
from tierlog.storage.errors import UnknownTopicOrPartitionError
from tierlog.storage.topic_partition import TopicPartition

__all__ = ["add_parser", "offset_time", "partition_list", "run"]

_NAMED_TIMES = {
    "latest": -1,
    "earliest": -2,
    "max-timestamp": -3,
    "earliest-local": -4,
    "latest-tiered": -5,
}


def add_parser(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    parser = subparsers.add_parser(
        "get-offsets",
        help="print partitions' offsets at a time (Kafka's kafka-get-offsets)",
        description="Print TOPIC:PARTITION:OFFSET for each partition at --time.",
    )
    parser.add_argument("--topic", help="this topic only (default: every topic)")
    parser.add_argument(
        "--partitions",
        type=partition_list,
        default=None,
        metavar="P,P2",
        help="these partitions only (default: every one)",
    )
    parser.add_argument(
        "--time",
        type=offset_time,
        default=-1,
        metavar="TIME",
        help="-1|latest, -2|earliest, -3|max-timestamp, -4|earliest-local, "
        "-5|latest-tiered, or a timestamp in ms (default: latest)",
    )
    add_server_option(parser)
    add_security_options(parser)
    parser.set_defaults(run=run)


def offset_time(text: str) -> int:
    """A ``--time`` value: a name, one of Kafka's negative codes, or a timestamp."""
    if text in _NAMED_TIMES:
        return _NAMED_TIMES[text]
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(
            f"{text!r} is none of {', '.join(_NAMED_TIMES)} nor a number"
        ) from None
    if value < -5:
        raise argparse.ArgumentTypeError(f"{value} is no time: -5 to -1, or a timestamp")
    return value


def partition_list(text: str) -> list[int]:
    """``--partitions 0,2``: partition numbers, 0 or more."""
    try:
        partitions = [int(part) for part in text.split(",") if part.strip()]
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected partitions like 0,1,2, got {text!r}") from None
    if not partitions or min(partitions) < 0:
        raise argparse.ArgumentTypeError(f"expected partitions like 0,1,2, got {text!r}")
    return partitions


def run(args: argparse.Namespace) -> int:
    with AdminClient(client_properties(args)) as admin:
        counts = admin.list_topics()
        if args.topic is None:
            # Every topic: each of the --partitions it has, as Kafka's tool filters them.
            topics = sorted(counts)
        elif args.topic in counts:
            topics = [args.topic]
        else:
            raise UnknownTopicOrPartitionError(f"no topic {args.topic}")
        for topic in topics:
            everything = range(counts[topic])
            if args.partitions is None:
                partitions: Sequence[int] = everything
            elif args.topic is None:
                partitions = [p for p in args.partitions if p in everything]
            else:  # a partition past the count: UNKNOWN_TOPIC_OR_PARTITION
                partitions = args.partitions
            for partition in partitions:
                tp = TopicPartition(topic, partition)
                found = admin.list_offset(tp, args.time).offset
                print(f"{topic}:{partition}:{found if found >= 0 else ''}")
    return 0
