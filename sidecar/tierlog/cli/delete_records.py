"""``tierlog delete-records --offset-json-file F``: Kafka's ``kafka-delete-records``.

The file is Kafka's: ``{"version": 1, "partitions": [{"topic": "t", "partition": 0,
"offset": 10}]}``, an offset of -1 meaning the high watermark (everything). Each
partition's log start moves up to its offset; the new low watermark or the partition's
error is printed as Kafka prints them, and the exit status is 1 if any partition failed.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from tierlog.cli.server_option import add_security_options, add_server_option, client_properties
from tierlog.client.admin import AdminClient
from tierlog.client.errors import with_reason
from tierlog.storage.errors import TierlogError
from tierlog.storage.topic_partition import TopicPartition

__all__ = ["OffsetFileError", "add_parser", "read_offset_file", "run"]


class OffsetFileError(ValueError):
    """The offset JSON file is not Kafka's format: the message says where."""


def add_parser(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    parser = subparsers.add_parser(
        "delete-records",
        help="move partitions' log start up to an offset (Kafka's kafka-delete-records)",
        description="Delete the records below each partition's offset in --offset-json-file.",
    )
    parser.add_argument("--offset-json-file", type=Path, required=True, metavar="FILE")
    add_server_option(parser)
    add_security_options(parser)
    parser.set_defaults(run=run)


def read_offset_file(text: str) -> list[tuple[TopicPartition, int]]:
    """The (partition, offset) pairs of Kafka's offset JSON; OffsetFileError otherwise."""
    try:
        document = json.loads(text)
    except json.JSONDecodeError as error:
        raise OffsetFileError(f"not JSON: {error}") from None
    if not isinstance(document, dict) or not isinstance(document.get("partitions"), list):
        raise OffsetFileError('expected {"version": 1, "partitions": [...]}')
    if document.get("version", 1) != 1:
        raise OffsetFileError(f"version {document['version']!r} is not 1")
    wanted: list[tuple[TopicPartition, int]] = []
    for index, entry in enumerate(document["partitions"]):
        fields = entry if isinstance(entry, dict) else {}
        topic, partition, offset = (fields.get(k) for k in ("topic", "partition", "offset"))
        if not (isinstance(topic, str) and topic and _whole(partition) and _whole(offset)):
            raise OffsetFileError(
                f"partitions[{index}] needs a topic, a partition and an offset, got {entry!r}"
            )
        assert isinstance(partition, int) and isinstance(offset, int)
        if partition < 0 or offset < -1:
            raise OffsetFileError(f"partitions[{index}]: partition or offset out of range")
        tp = TopicPartition(topic, partition)
        if any(seen == tp for seen, _ in wanted):
            raise OffsetFileError(f"{tp.topic}-{tp.partition} is listed twice")
        wanted.append((tp, offset))
    return wanted


def _whole(value: object) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def run(args: argparse.Namespace) -> int:
    try:
        wanted = read_offset_file(args.offset_json_file.read_text())
    except (OSError, OffsetFileError) as error:
        print(f"tierlog delete-records: {args.offset_json_file}: {error}", file=sys.stderr)
        return 1
    failed = 0
    print("Executing records delete operation")
    with AdminClient(client_properties(args)) as admin:
        results: list[str] = []
        for tp, offset in wanted:
            name = f"{tp.topic}-{tp.partition}"
            try:
                low_watermark = admin.delete_records(tp, offset)
            except TierlogError as error:
                failed += 1
                results.append(f"partition: {name}\terror: {with_reason(error)}")
            else:
                results.append(f"partition: {name}\tlow_watermark: {low_watermark}")
    print("Records delete operation completed:")
    print("\n".join(results))
    return 1 if failed else 0
