"""``tierlog configs``: Kafka's ``kafka-configs`` for topics.

``--describe --entity-type topics --entity-name T`` (or Kafka's shortcut, ``--topic T``)
prints the topic's own configs as Kafka does (``--all`` adds the defaults it inherits);
``--alter`` sets ``--add-config k=v,k2=v2`` (a value holding commas goes in square
brackets, as Kafka reads them) and removes ``--delete-config k,k2``. Brokers take their
configs from their properties file when they start: tierlog has no dynamic broker configs,
so ``--entity-type brokers`` is refused by name rather than answered with nothing.
"""

from __future__ import annotations

import argparse

from tierlog.cli.server_option import add_security_options, add_server_option, client_properties
from tierlog.client.admin import AdminClient, ConfigEntry

__all__ = ["add_parser", "parse_config_list", "render_configs", "run"]


def add_parser(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    parser = subparsers.add_parser(
        "configs",
        help="describe and alter topic configs (Kafka's kafka-configs)",
        description="Describe or alter a topic's configs, under Kafka's names.",
    )
    action = parser.add_mutually_exclusive_group(required=True)
    action.add_argument("--describe", action="store_true", help="print the configs")
    action.add_argument("--alter", action="store_true", help="set or remove configs")
    parser.add_argument(
        "--entity-type", choices=("topics", "brokers"), help="topics (implied by --topic)"
    )
    parser.add_argument("--entity-name", help="the topic (describe: every topic when left out)")
    parser.add_argument(
        "--topic", help="the same as --entity-type topics --entity-name TOPIC (Kafka's shortcut)"
    )
    parser.add_argument("--all", action="store_true", help="describe: the defaults as well")
    parser.add_argument(
        "--add-config",
        type=parse_config_list,
        default={},
        metavar="K=V,K2=[A,B]",
        help="alter: configs to set",
    )
    parser.add_argument(
        "--delete-config",
        type=lambda text: [name.strip() for name in text.split(",") if name.strip()],
        default=[],
        metavar="K,K2",
        help="alter: configs to remove (back to the broker's default)",
    )
    add_server_option(parser)
    add_security_options(parser)
    parser.set_defaults(run=run)


def parse_config_list(text: str) -> dict[str, str]:
    """Kafka's ``--add-config`` list: ``k=v`` pairs split at commas outside ``[...]``."""
    configs: dict[str, str] = {}
    pair, depth = "", 0
    for char in text + ",":
        if char == "," and depth == 0:
            if pair.strip():
                key, sep, value = pair.partition("=")
                if not sep or not key.strip():
                    raise argparse.ArgumentTypeError(f"expected KEY=VALUE, got {pair!r}")
                configs[key.strip()] = value.strip().removeprefix("[").removesuffix("]")
            pair = ""
            continue
        depth += {"[": 1, "]": -1}.get(char, 0)
        pair += char
    if depth != 0:
        raise argparse.ArgumentTypeError(f"unbalanced square brackets in {text!r}")
    return configs


def render_configs(topic: str, entries: dict[str, ConfigEntry], everything: bool) -> list[str]:
    """Lines as ``kafka-configs --describe`` prints a topic's configs."""
    shown = [e for _, e in sorted(entries.items()) if everything or not e.is_default]
    lines = [f"{'All' if everything else 'Dynamic'} configs for topic {topic} are:"]
    for entry in shown:
        source = "DEFAULT_CONFIG" if entry.is_default else "DYNAMIC_TOPIC_CONFIG"
        lines.append(
            f"  {entry.name}={entry.value} sensitive=false "
            f"synonyms={{{source}:{entry.name}={entry.value}}}"
        )
    return lines


def _entity(args: argparse.Namespace) -> tuple[str, str | None]:
    """The entity type and name: ``--topic T`` stands for topics and T, as in Kafka."""
    if args.topic is None:
        if args.entity_type is None:
            raise SystemExit("tierlog configs: --entity-type (or --topic) is needed")
        return args.entity_type, args.entity_name
    if args.entity_type not in (None, "topics") or args.entity_name not in (None, args.topic):
        raise SystemExit("tierlog configs: --topic names a topic; give it alone")
    return "topics", args.topic


def run(args: argparse.Namespace) -> int:
    entity_type, topic = _entity(args)
    if entity_type == "brokers":
        raise SystemExit(
            "tierlog configs: brokers take their configs from their properties file at start; "
            "tierlog has no dynamic broker configs (describe a topic to see the defaults it "
            "inherits: --describe --all --entity-type topics --entity-name T)"
        )
    with AdminClient(client_properties(args)) as admin:
        if args.alter:
            if not topic:
                raise SystemExit("tierlog configs: --alter needs --entity-name")
            if not (args.add_config or args.delete_config):
                raise SystemExit("tierlog configs: --alter needs --add-config or --delete-config")
            admin.alter_configs(topic, args.add_config, args.delete_config)
            print(f"Completed updating config for topic {topic}.")
            return 0
        topics = [topic] if topic else sorted(admin.list_topics())
        for name in topics:
            print("\n".join(render_configs(name, admin.describe_configs(name), args.all)))
    return 0
