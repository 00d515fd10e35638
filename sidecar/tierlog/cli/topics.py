"""``tierlog topics create|delete|describe|list [NAME]``: Kafka's ``kafka-topics``."""

from __future__ import annotations

import argparse

from tierlog.cli.server_option import (
    add_security_options,
    add_server_option,
    client_properties,
    key_value,
)
from tierlog.client.admin import AdminClient, TopicDescription
from tierlog.storage.config import LogConfig
from tierlog.storage.errors import InvalidConfigError

__all__ = [
    "add_parser",
    "partition_count",
    "render_description",
    "replication_factor",
    "run",
    "topic_config",
    "topic_overrides",
]

_ACTIONS = ("create", "delete", "describe", "list")


def add_parser(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    parser = subparsers.add_parser(
        "topics",
        help="create, delete, describe and list topics (Kafka's kafka-topics)",
        description="Create, delete, describe and list a sidecar's topics.",
    )
    parser.add_argument("action", choices=_ACTIONS)
    parser.add_argument("name", nargs="?", help="the topic (describe: all when left out)")
    parser.add_argument(
        "--partitions", type=partition_count, default=1, help="create: partition count (1 or more)"
    )
    parser.add_argument(
        "--replication-factor",
        type=replication_factor,
        default=None,
        help="create: replicas per partition (default: the broker's default.replication.factor)",
    )
    parser.add_argument(
        "--config",
        action="append",
        type=topic_config,
        default=[],
        metavar="KEY=VALUE",
        help="create: a topic config under its Kafka name (repeatable)",
    )
    add_server_option(parser)
    add_security_options(parser)
    parser.set_defaults(run=run)


def partition_count(text: str) -> int:
    """A ``--partitions`` value: a topic has at least one."""
    count = int(text)
    if count < 1:
        raise argparse.ArgumentTypeError(f"a topic has at least 1 partition, not {count}")
    return count


def replication_factor(text: str) -> int:
    """A ``--replication-factor`` value: a partition has at least one replica."""
    factor = int(text)
    if factor < 1:
        raise argparse.ArgumentTypeError(
            f"INVALID_REPLICATION_FACTOR: a partition has at least 1 replica, not {factor}"
        )
    return factor


def topic_config(text: str) -> tuple[str, str]:
    """A ``--config KEY=VALUE`` checked by the parser the sidecar uses (``LogConfig``), so
    a bad value is an argument error here rather than a round trip."""
    key, value = key_value(text)
    try:
        LogConfig.from_properties({key: value})
    except InvalidConfigError as error:
        raise argparse.ArgumentTypeError(f"INVALID_CONFIG: {error}") from None
    return key, value


def render_description(topic: TopicDescription, configs: dict[str, str]) -> list[str]:
    """Lines as ``kafka-topics --describe`` prints them (configs: the topic's overrides),
    each partition's line followed by what only its owner knows (-1 from another broker)."""
    overrides = ",".join(f"{key}={value}" for key, value in sorted(configs.items()))
    # Kafka's ReplicationFactor is partition 0's replica count.
    factor = len(topic.partitions[0].replicas) if topic.partitions else 0
    lines = [
        f"Topic: {topic.name}\tPartitionCount: {len(topic.partitions)}"
        f"\tReplicationFactor: {factor}\tConfigs: {overrides}"
    ]
    for p in topic.partitions:
        leader = "none" if p.leader_id < 0 else str(p.leader_id)
        lines.append(
            f"\tTopic: {topic.name}\tPartition: {p.partition}\tLeader: {leader}"
            f"\tReplicas: {_ids(p.replicas)}\tIsr: {_ids(p.isr)}"
            f"\tLogStartOffset: {p.log_start_offset}\tHighWatermark: {p.high_watermark}"
            f"\tSizeBytes: {p.size_bytes}\tSegments: {p.segment_count}"
        )
    return lines


def _ids(brokers: tuple[int, ...]) -> str:
    return ",".join(map(str, brokers))


def topic_overrides(admin: AdminClient, topic: str) -> dict[str, str]:
    """The configs set on ``topic`` (not left at their defaults)."""
    entries = admin.describe_configs(topic).values()
    return {entry.name: entry.value for entry in entries if not entry.is_default}


def run(args: argparse.Namespace) -> int:
    if args.action in ("create", "delete") and not args.name:
        raise SystemExit(f"tierlog topics {args.action}: a topic NAME is needed")
    with AdminClient(client_properties(args)) as admin:
        if args.action == "create":
            admin.create_topic(
                args.name,
                args.partitions,
                dict(args.config),
                replication_factor=args.replication_factor,
            )
            print(f"Created topic {args.name}.")
        elif args.action == "delete":
            admin.delete_topic(args.name)
            print(f"Deleted topic {args.name}.")
        elif args.action == "list":
            for name in sorted(admin.list_topics()):
                print(name)
        else:
            names = [args.name] if args.name else []
            for topic in admin.describe_topics(names):
                print("\n".join(render_description(topic, topic_overrides(admin, topic.name))))
    return 0
