"""``tierlog consumer-groups``: Kafka's ``kafka-consumer-groups`` over the group coordinator.

``--list`` prints every group (each broker lists those it coordinates); ``--describe
--group G`` (or ``--all-groups``, each group in turn) the group's partitions in Kafka's
columns (``--offsets``, the default: GROUP TOPIC PARTITION CURRENT-OFFSET LOG-END-OFFSET
LAG CONSUMER-ID HOST CLIENT-ID: a member's partitions with its id, host and client id,
those of no member with '-'), its members with ``--members`` (``--verbose`` adds each
one's partitions), or its coordinator, assignor, state and member count with
``--state``; ``--reset-offsets --group G --topic T[:P,P...]`` (or ``--all-topics``, every
partition the group committed) with one of ``--to-earliest``, ``--to-latest``,
``--to-current``, ``--to-offset N``, ``--to-datetime T``, ``--by-duration PnDTnHnMnS``,
``--shift-by N`` prints the new offsets and stores them only with ``--execute``
(``--dry-run``, the default, stores nothing); a new offset outside the log is moved to
its nearest end, as Kafka does; a group with live members is refused in Kafka's words
(its state must be Empty or Dead), dry run or not. ``--delete --group G`` deletes the
group's offsets. The tables are laid out as Kafka's tool lays them out.
"""

from __future__ import annotations

import argparse
import re
import sys
import time
from collections.abc import Callable, Mapping, Sequence
from datetime import datetime

from tierlog.api.errors import GroupIdNotFoundError
from tierlog.api.v1 import group_service_pb2 as pb
from tierlog.cli.server_option import add_security_options, add_server_option, client_properties
from tierlog.client import Consumer, TopicPartition
from tierlog.client.groups import ConsumerGroups, GroupClient, OffsetAndMetadata

__all__ = [
    "add_parser",
    "describe_rows",
    "duration_ms",
    "member_rows",
    "parse_topic",
    "reset_rows",
    "run",
    "state_rows",
]

NONE = "-"
_DESCRIBE_COLUMNS = (
    "GROUP",
    "TOPIC",
    "PARTITION",
    "CURRENT-OFFSET",
    "LOG-END-OFFSET",
    "LAG",
    "CONSUMER-ID",
    "HOST",
    "CLIENT-ID",
)
_RESET_COLUMNS = ("GROUP", "TOPIC", "PARTITION", "NEW-OFFSET")
# The states in which Kafka's tool resets a group's offsets (dry run or not).
_INACTIVE_STATES = ("Empty", "Dead")


def add_parser(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    parser = subparsers.add_parser(
        "consumer-groups",
        help="list, describe, reset or delete consumer groups (Kafka's kafka-consumer-groups)",
        description="List, describe, reset the offsets of, or delete consumer groups.",
    )
    action = parser.add_mutually_exclusive_group(required=True)
    action.add_argument("--list", action="store_true", help="every group")
    action.add_argument("--describe", action="store_true", help="a group's offsets and lag")
    action.add_argument("--reset-offsets", action="store_true", help="move a group's offsets")
    action.add_argument("--delete", action="store_true", help="delete a group")
    groups = parser.add_mutually_exclusive_group()
    groups.add_argument("--group", help="the group (all but --list)")
    groups.add_argument(
        "--all-groups", action="store_true", help="every group, in place of --group"
    )
    shown = parser.add_mutually_exclusive_group()
    shown.add_argument("--offsets", action="store_true", help="describe: offsets and lag (default)")
    shown.add_argument("--members", action="store_true", help="describe: the members")
    shown.add_argument("--state", action="store_true", help="describe: the group's state")
    parser.add_argument(
        "--verbose", action="store_true", help="describe --members: each member's partitions too"
    )
    topics = parser.add_mutually_exclusive_group()
    topics.add_argument(
        "--topic", action="append", default=[], help="TOPIC or TOPIC:P,P... (--reset-offsets)"
    )
    topics.add_argument(
        "--all-topics", action="store_true", help="--reset-offsets: every partition committed"
    )
    to = parser.add_mutually_exclusive_group()
    to.add_argument("--to-earliest", action="store_true")
    to.add_argument("--to-latest", action="store_true")
    to.add_argument("--to-current", action="store_true", help="the committed offset")
    to.add_argument("--to-offset", type=int, metavar="N")
    to.add_argument("--to-datetime", type=_datetime_ms, metavar="YYYY-MM-DDTHH:mm:SS.sss[+HH:MM]")
    to.add_argument(
        "--by-duration", type=duration_ms, metavar="PnDTnHnMnS", help="this long before now"
    )
    to.add_argument("--shift-by", type=int, metavar="N")
    mode = parser.add_mutually_exclusive_group()
    mode.add_argument("--dry-run", action="store_true", help="print, store nothing (default)")
    mode.add_argument("--execute", action="store_true", help="store the new offsets")
    add_server_option(parser)
    add_security_options(parser)
    parser.set_defaults(run=run)


def _datetime_ms(text: str) -> int:
    """Kafka's ``--to-datetime``: ISO 8601, local time when no zone is given."""
    try:
        moment = datetime.fromisoformat(text)
    except ValueError:
        raise argparse.ArgumentTypeError(
            f"{text!r} is not a date-time like 2026-11-26T01:02:03.000"
        ) from None
    return int(moment.astimezone().timestamp() * 1000)


_DURATION = re.compile(
    r"P(?:(?P<days>\d+)D)?(?:T(?:(?P<hours>\d+)H)?(?:(?P<minutes>\d+)M)?"
    r"(?:(?P<seconds>\d+(?:\.\d+)?)S)?)?",
    re.IGNORECASE,
)


def duration_ms(text: str) -> int:
    """Kafka's ``--by-duration``: an ISO 8601 duration (``PnDTnHnMn.nS``, as Java's
    ``Duration.parse`` reads it), in ms."""
    match = _DURATION.fullmatch(text)
    if match is None or text.upper() in ("P", "PT") or text.upper().endswith("T"):
        raise argparse.ArgumentTypeError(f"{text!r} is not a duration like PT1H or P1DT30M")
    parts = {name: float(value or 0) for name, value in match.groupdict().items()}
    seconds = ((parts["days"] * 24 + parts["hours"]) * 60 + parts["minutes"]) * 60
    return round((seconds + parts["seconds"]) * 1000)


def parse_topic(text: str) -> tuple[str, list[int]]:
    """``TOPIC`` (every partition: an empty list) or ``TOPIC:P,P...``."""
    topic, _sep, partitions = text.partition(":")
    try:
        return topic, [int(p) for p in partitions.split(",") if p.strip()]
    except ValueError:
        raise SystemExit(f"tierlog consumer-groups: --topic {text!r}: TOPIC or TOPIC:P,P") from None


def table(columns: Sequence[str], rows: Sequence[Sequence[str]], widths: Sequence[int]) -> str:
    """Kafka's layout: each column left-aligned in its width, one space between."""
    lines = [columns, *rows]
    return "\n".join(
        " ".join(cell.ljust(width) for cell, width in zip(line, widths, strict=True)).rstrip()
        for line in lines
    )


# A partition's member: (CONSUMER-ID, HOST, CLIENT-ID).
Owner = tuple[str, str, str]


def describe_rows(
    group: str,
    committed: Mapping[TopicPartition, OffsetAndMetadata | None],
    log_end_offsets: Mapping[TopicPartition, int],
    owners: Mapping[TopicPartition, Owner] | None = None,
) -> str:
    """A row per partition committed or assigned to a member ('-' where there is none)."""
    owners = owners or {}
    rows = []
    for tp in sorted({*committed, *owners}):
        current = committed.get(tp)
        end = log_end_offsets[tp]
        offset = NONE if current is None else str(current.offset)
        lag = NONE if current is None else str(max(0, end - current.offset))
        member = owners.get(tp, (NONE, NONE, NONE))
        rows.append((group, tp.topic, str(tp.partition), offset, str(end), lag, *member))
    widths = [
        max(len(_DESCRIBE_COLUMNS[0]), len(group)),
        max([len(_DESCRIBE_COLUMNS[1]), *(len(row[1]) for row in rows)]),
        10,
        15,
        15,
        15,
        *(
            max([len(_DESCRIBE_COLUMNS[column]), *(len(row[column]) for row in rows)])
            for column in (6, 7)
        ),
        len(_DESCRIBE_COLUMNS[8]),
    ]
    return table(_DESCRIBE_COLUMNS, rows, widths)


def reset_rows(group: str, offsets: dict[TopicPartition, int]) -> str:
    rows = [(group, tp.topic, str(tp.partition), str(offsets[tp])) for tp in sorted(offsets)]
    return table(_RESET_COLUMNS, rows, (30, 30, 10, 15))


def run(args: argparse.Namespace) -> int:
    if not args.list and not (args.group or args.all_groups):
        raise SystemExit(
            "tierlog consumer-groups: --group (or --all-groups) is needed (all but --list)"
        )
    props = client_properties(args)
    with Consumer(props) as offsets:  # no group: ListOffsets and the cluster's channels
        groups = ConsumerGroups(offsets.cluster)
        if args.list:
            for listing in groups.list():
                print(listing.group_id)
            return 0
        names = sorted({g.group_id for g in groups.list()}) if args.all_groups else [args.group]
        failed = 0
        for name in names:
            group = groups.group(name)
            if args.describe:
                _describe(group, offsets, args)
            elif args.delete:
                group.delete()
                print(f"Deletion of requested consumer groups ('{name}') was successful.")
            else:
                failed |= _reset(group, offsets, args)
    return failed


def _describe(group: GroupClient, offsets: Consumer, args: argparse.Namespace) -> None:
    described = group.describe()  # GROUP_ID_NOT_FOUND for a group that does not exist
    if described.members:
        print()
    else:
        print(f"\nConsumer group '{group.group_id}' has no active members.\n")
    if args.members:
        print(member_rows(group.group_id, described.members, args.verbose))
    elif args.state:
        print(state_rows(group.group_id, group.coordinator(), described))
    else:
        _describe_offsets(group, offsets, described)


def member_rows(group: str, members: Sequence[pb.GroupMember], verbose: bool) -> str:
    """``--describe --members``: a row per member, GROUP-INSTANCE-ID when any is static,
    and with ``--verbose`` its partitions as ``topic(0,1)``."""
    static = any(member.instance_id for member in members)
    columns = ["GROUP", "CONSUMER-ID", *(["GROUP-INSTANCE-ID"] if static else []), "HOST"]
    columns += ["CLIENT-ID", "#PARTITIONS", *(["ASSIGNMENT"] if verbose else [])]
    rows = []
    for member in members:
        row = [group, member.member_id, *([member.instance_id or NONE] if static else [])]
        row += [member.host, member.client_id, str(len(member.assignment))]
        if verbose:
            row.append(_assignment(member.assignment) or NONE)
        rows.append(row)
    minimum = {"GROUP-INSTANCE-ID": 17, "#PARTITIONS": 15}
    widths = [
        max([minimum.get(name, 15), *(len(row[column]) for row in rows)])
        for column, name in enumerate(columns)
    ]
    return table(columns, rows, widths)


def _assignment(assigned: Sequence[pb.TopicPartitionRef]) -> str:
    by_topic: dict[str, list[int]] = {}
    for tp in assigned:
        by_topic.setdefault(tp.topic, []).append(tp.partition)
    return ", ".join(
        f"{topic}({','.join(map(str, sorted(partitions)))})"
        for topic, partitions in sorted(by_topic.items())
    )


def state_rows(group: str, coordinator: str, described: pb.DescribeGroupsResponse) -> str:
    """``--describe --state``: the group's coordinator, assignor, state and member count."""
    where = f"{coordinator}  ({described.coordinator_id})"
    columns = ("GROUP", "COORDINATOR (ID)", "ASSIGNMENT-STRATEGY", "STATE", "#MEMBERS")
    row = (group, where, described.assignor, described.state, str(len(described.members)))
    widths = (max(15, len(group)), max(25, len(where)), 20, 15, len(columns[4]))
    return table(columns, [row], widths)


def _describe_offsets(
    group: GroupClient, offsets: Consumer, described: pb.DescribeGroupsResponse
) -> None:
    committed = group.committed()
    owners = {
        TopicPartition(assigned.topic, assigned.partition): (
            member.member_id,
            member.host,
            member.client_id,
        )
        for member in described.members
        for assigned in member.assignment
    }
    log_end_offsets = offsets.end_offsets([*committed, *owners])
    print(describe_rows(group.group_id, committed, log_end_offsets, owners))


def _reset(group: GroupClient, offsets: Consumer, args: argparse.Namespace) -> int:
    partitions = _partitions_to_reset(group, offsets, args)
    state = _state(group)
    if state not in _INACTIVE_STATES:  # its members would overwrite the offsets
        print(
            f"Error: Assignments can only be reset if the group '{group.group_id}' is "
            f"inactive, but the current state is {state}.",
            file=sys.stderr,
        )
        return 1
    target = _target(group, offsets, args)
    earliest = offsets.beginning_offsets(partitions)
    latest = offsets.end_offsets(partitions)
    wanted = target(partitions)
    new = {tp: min(max(wanted[tp], earliest[tp]), latest[tp]) for tp in partitions}
    if not args.execute and not args.dry_run:
        print(
            "WARN: No action will be performed as the --execute option is missing. "
            "In a future major release, the default behavior of this command will be to "
            "prompt the user before executing the reset rather than doing a dry run. You "
            "should add the --dry-run option explicitly if you are scripting this command "
            "and want to keep the current default behavior without prompting.",
            file=sys.stderr,
        )
    if args.execute:
        group.commit({tp: OffsetAndMetadata(offset) for tp, offset in new.items()})
    print()
    print(reset_rows(group.group_id, new))
    return 0


def _partitions_to_reset(
    group: GroupClient, offsets: Consumer, args: argparse.Namespace
) -> list[TopicPartition]:
    """``--topic``'s partitions, or with ``--all-topics`` every one the group committed."""
    if args.all_topics:
        return sorted(group.committed())
    if not args.topic:
        raise SystemExit("tierlog consumer-groups: --reset-offsets needs --topic or --all-topics")
    partitions: list[TopicPartition] = []
    for text in args.topic:
        topic, chosen = parse_topic(text)
        count = offsets.cluster.owners(topic, refresh=True).partition_count
        partitions += [TopicPartition(topic, p) for p in chosen or range(count)]
    return partitions


def _state(group: GroupClient) -> str:
    """The group's state as Kafka names it; "Dead" for a group that does not exist."""
    try:
        return group.describe().state
    except GroupIdNotFoundError:
        return "Dead"


def _target(
    group: GroupClient, offsets: Consumer, args: argparse.Namespace
) -> Callable[[list[TopicPartition]], dict[TopicPartition, int]]:
    """Where each partition is to go, before it is kept within the log."""
    if args.to_earliest:
        return offsets.beginning_offsets
    if args.to_latest:
        return offsets.end_offsets
    if args.to_current:
        return lambda partitions: _shifted(group, offsets, partitions, 0)
    if args.to_offset is not None:
        return lambda partitions: dict.fromkeys(partitions, args.to_offset)
    if args.to_datetime is not None:
        return lambda partitions: _at_time(offsets, partitions, args.to_datetime)
    if args.by_duration is not None:
        since_ms = int(time.time() * 1000) - args.by_duration
        return lambda partitions: _at_time(offsets, partitions, since_ms)
    if args.shift_by is not None:
        return lambda partitions: _shifted(group, offsets, partitions, args.shift_by)
    raise SystemExit(
        "tierlog consumer-groups: --reset-offsets needs one of --to-earliest, --to-latest, "
        "--to-current, --to-offset, --to-datetime, --by-duration, --shift-by"
    )


def _at_time(
    offsets: Consumer, partitions: list[TopicPartition], timestamp_ms: int
) -> dict[TopicPartition, int]:
    found = offsets.offsets_for_times(dict.fromkeys(partitions, timestamp_ms))
    latest = offsets.end_offsets(partitions)
    return {tp: latest[tp] if at is None else at.offset for tp, at in found.items()}


def _shifted(
    group: GroupClient, offsets: Consumer, partitions: list[TopicPartition], shift: int
) -> dict[TopicPartition, int]:
    """Each committed offset moved by ``shift`` (from the log end where none is, as
    Kafka's ``--to-current`` and ``--shift-by`` start)."""
    committed = group.committed(partitions)
    latest = offsets.end_offsets(partitions)
    shifted = {}
    for tp in partitions:
        current = committed.get(tp)
        shifted[tp] = (latest[tp] if current is None else current.offset) + shift
    return shifted
