"""``tierlog topics create|delete|describe|list|alter [NAME]``: Kafka's ``kafka-topics``.

Kafka's own form is taken too: the action as a flag (``--create``, ``--delete``,
``--describe``, ``--list``, ``--alter``) and the topic as ``--topic``, with
``--if-not-exists`` (create) and ``--if-exists`` (delete, alter, describe). ``alter``
raises the partition count to ``--partitions``, as Kafka's ``--alter`` does.
"""

from __future__ import annotations

import argparse
from typing import NoReturn

from tierlog.api.errors import TopicAlreadyExistsError
from tierlog.cli.server_option import (
    add_security_options,
    add_server_option,
    client_properties,
    key_value,
)
from tierlog.client.admin import AdminClient, TopicDescription
from tierlog.storage.config import LogConfig
from tierlog.storage.errors import InvalidConfigError, UnknownTopicOrPartitionError

__all__ = [
    "add_parser",
    "partition_count",
    "render_description",
    "replication_factor",
    "run",
    "topic_config",
    "topic_overrides",
]

_ACTIONS = ("create", "delete", "describe", "list", "alter")


def add_parser(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    parser = subparsers.add_parser(
        "topics",
        help="create, delete, describe and list topics (Kafka's kafka-topics)",
        description="Create, delete, describe and list a sidecar's topics.",
    )
    parser.add_argument("action_argument", nargs="?", choices=_ACTIONS, metavar="ACTION")
    parser.add_argument("name", nargs="?", help="the topic (describe: all when left out)")
    flags = parser.add_mutually_exclusive_group()
    for action in _ACTIONS:
        flags.add_argument(
            f"--{action}",
            dest="action_flag",
            action="store_const",
            const=action,
            help=f"Kafka's form of ACTION {action}",
        )
    parser.add_argument("--topic", help="the topic (Kafka's flag; the same as NAME)")
    parser.add_argument(
        "--partitions",
        type=partition_count,
        default=None,
        help="create: partition count (1 or more, default 1); alter: the new, higher count",
    )
    parser.add_argument(
        "--if-not-exists", action="store_true", help="create: a topic already there is fine"
    )
    parser.add_argument(
        "--if-exists", action="store_true", help="delete, alter, describe: a missing topic is fine"
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
    each partition's line followed by what its leader told of its log ("unknown" where
    no leader did)."""
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
            f"\tLogStartOffset: {_told(p.log_start_offset)}"
            f"\tHighWatermark: {_told(p.high_watermark)}"
            f"\tSizeBytes: {_told(p.size_bytes)}\tSegments: {_told(p.segment_count)}"
        )
    return lines


def _ids(brokers: tuple[int, ...]) -> str:
    return ",".join(map(str, brokers))


def _told(value: int) -> str:
    return "unknown" if value < 0 else str(value)


def topic_overrides(admin: AdminClient, topic: str) -> dict[str, str]:
    """The configs set on ``topic`` (not left at their defaults)."""
    entries = admin.describe_configs(topic).values()
    return {entry.name: entry.value for entry in entries if not entry.is_default}


def run(args: argparse.Namespace) -> int:
    action, name = _action_and_topic(args)
    with AdminClient(client_properties(args)) as admin:
        try:
            _act(admin, action, name, args)
        except TopicAlreadyExistsError:
            if not args.if_not_exists:
                raise
        except UnknownTopicOrPartitionError:
            if not (args.if_exists and action in ("delete", "alter", "describe")):
                raise
    return 0


def _action_and_topic(args: argparse.Namespace) -> tuple[str, str | None]:
    """The one action and topic asked for, as ACTION NAME or Kafka's flags."""
    actions = {a for a in (args.action_argument, args.action_flag) if a}
    names = {n for n in (args.name, args.topic) if n}
    if len(actions) != 1:
        _usage_error("two actions given" if actions else "give one action: " + ", ".join(_ACTIONS))
    if len(names) > 1:
        _usage_error("two different topics given")
    action, name = actions.pop(), (names.pop() if names else None)
    if action in ("create", "delete", "alter") and not name:
        _usage_error(f"{action}: a topic NAME (or --topic) is needed")
    if action == "alter" and args.partitions is None:
        _usage_error("alter: --partitions is needed (the new partition count)")
    return action, name


def _usage_error(problem: str) -> NoReturn:
    raise SystemExit(f"tierlog topics: {problem}")


def _act(admin: AdminClient, action: str, name: str | None, args: argparse.Namespace) -> None:
    if action == "create":
        assert name is not None
        admin.create_topic(
            name,
            args.partitions or 1,
            dict(args.config),
            replication_factor=args.replication_factor,
        )
        print(f"Created topic {name}.")
    elif action == "delete":
        assert name is not None
        admin.delete_topic(name)
        print(f"Deleted topic {name}.")
    elif action == "alter":
        assert name is not None
        admin.create_partitions(name, args.partitions)
        print(f"Topic {name} now has {args.partitions} partitions.")
    elif action == "list":
        for listed in sorted(admin.list_topics()):
            print(listed)
    else:
        for topic in admin.describe_topics([name] if name else []):
            print("\n".join(render_description(topic, topic_overrides(admin, topic.name))))
