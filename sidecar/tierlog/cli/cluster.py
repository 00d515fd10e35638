"""``tierlog cluster up|status|down|start|stop --dir DIR``: a developer's cluster of sidecars
on loopback; ``start`` and ``stop`` take one broker (``--broker N``) of it.

``up`` prints only the ``--server`` list on stdout (``export TIERLOG_SERVER=$(tierlog
cluster up --brokers 3 --dir DIR)``), and ``status --kafka-bootstrap`` only Kafka
clients' ``bootstrap.servers`` (``--bootstrap-server $(tierlog cluster status --dir DIR
--kafka-bootstrap)``); progress and failures go to stderr.  The work is
``local_cluster``'s; this module parses, prints and chooses exit statuses.
"""

from __future__ import annotations

import argparse
import signal
import sys
from pathlib import Path

from tierlog.cli.local_cluster import (
    STOP_GRACE_S,
    BrokerFailed,
    BrokerState,
    broker_states,
    read_cluster,
    start_broker,
    start_cluster,
    stop_broker,
    stop_cluster,
)
from tierlog.cli.local_sidecar import SidecarFailed
from tierlog.cli.stop_signals import StopSignals
from tierlog.cli.topics import render_description, topic_overrides
from tierlog.client.admin import AdminClient, TopicDescription
from tierlog.tools.progress import choose_tracker

__all__ = ["add_parser", "broker_count", "run"]

LOG_TAIL_LINES = 20
_STATUS_TIMEOUT_MS = 5000


def broker_count(text: str) -> int:
    """A ``--brokers`` value: a cluster has at least one."""
    count = int(text)
    if count < 1:
        raise argparse.ArgumentTypeError(
            f"INVALID_CONFIG: a cluster has at least 1 broker, not {count}"
        )
    return count


def add_parser(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    parser = subparsers.add_parser(
        "cluster",
        help="start, inspect and stop a cluster of sidecars on loopback (development, tests)",
        description=(
            "up: start sidecar brokers on loopback over DIR (one data dir each, "
            "DIR/broker-N), replicating through DIR/state (topics get 3 replicas unless "
            "--config default.replication.factor=N says otherwise), record them in "
            "DIR/cluster.json and print the --server list; "
            "status: each broker's process and readiness, and the topics with each "
            "partition's owner (exit 1 if a broker is down); with --kafka-bootstrap only "
            "the brokers' Kafka listeners, HOST:PORT,...; down: stop them; "
            "stop --broker N: stop one (--signal KILL: kill -9), recorded as stopped; "
            "start --broker N: start it again as it was."
        ),
    )
    parser.add_argument("action", choices=("up", "status", "down", "start", "stop"))
    parser.add_argument("--dir", type=Path, required=True, help="the cluster's directory")
    parser.add_argument(
        "--brokers", type=broker_count, default=3, help="up: how many brokers (default 3)"
    )
    parser.add_argument(
        "--base-port",
        type=int,
        help="up: broker N serves gRPC on BASE_PORT+3N, metrics on the next port and "
        "Kafka's wire protocol on the one after (default: free ports)",
    )
    parser.add_argument(
        "--kafka-bootstrap",
        action="store_true",
        help="status: print only the brokers' Kafka listeners, HOST:PORT,... on one line "
        "(a Kafka client's bootstrap.servers)",
    )
    parser.add_argument(
        "--tier-url",
        help="up: every broker's remote tier, file:///path or s3://bucket/prefix "
        "(default: a directory tier in each broker's data dir)",
    )
    parser.add_argument(
        "--config",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="up: a broker config every broker gets (repeatable)",
    )
    parser.add_argument(
        "--broker", type=int, metavar="N", help="start, stop: the broker's node id (required)"
    )
    parser.add_argument(
        "--signal",
        choices=("TERM", "KILL"),
        default="TERM",
        help="stop: SIGTERM (a controlled shutdown, the default) or SIGKILL (a crash)",
    )
    parser.add_argument(
        "--grace",
        type=float,
        default=STOP_GRACE_S,
        metavar="SECONDS",
        help="down, stop: how long brokers get to stop cleanly before SIGKILL "
        f"(default {STOP_GRACE_S:.0f})",
    )
    parser.add_argument(
        "--delete-data", action="store_true", help="down: delete the brokers' data dirs too"
    )
    parser.add_argument("--progress", action="store_true", help="up: always draw the bar")
    parser.set_defaults(run=run)


def run(args: argparse.Namespace) -> int:
    try:
        if args.action == "up":
            return _up(args)
        if args.action == "status":
            return _kafka_bootstrap(args.dir) if args.kafka_bootstrap else _status(args.dir)
        if args.action in ("start", "stop"):
            return _one_broker(args)
        stop_cluster(args.dir, delete_data=args.delete_data, grace_s=args.grace, say=_err)
    except SidecarFailed as failure:  # no sidecar script; a broker surviving SIGKILL
        _err(f"tierlog cluster: {failure}")
        return 1
    return 0


def _one_broker(args: argparse.Namespace) -> int:
    if args.broker is None:
        _err(f"tierlog cluster {args.action}: --broker N is required")
        return 2
    if args.action == "stop":
        signum = signal.Signals[f"SIG{args.signal}"]
        stop_broker(args.dir, args.broker, signum=signum, grace_s=args.grace, say=_err)
        return 0
    try:
        with StopSignals() as stops:  # stopped while it starts: it is stopped and recorded so
            broker = start_broker(args.dir, args.broker, pause=stops.pause)
    except BrokerFailed as failure:
        return _failed_to_start(failure, "")
    print(broker.address, flush=True)
    return 0


def _failed_to_start(failure: BrokerFailed, outcome: str) -> int:
    """Say which broker failed, ``outcome`` for the others, and the end of its log."""
    _err(f"tierlog cluster: {failure}{outcome}")
    _err(f"--- the last {LOG_TAIL_LINES} lines of {failure.log_path}:")
    lines = failure.log_path.read_text(errors="replace").splitlines()
    _err("\n".join(lines[-LOG_TAIL_LINES:]))
    return 1


def _err(line: str) -> None:
    print(line, file=sys.stderr, flush=True)


def _up(args: argparse.Namespace) -> int:
    configs = list(args.config)
    if args.tier_url:
        configs.append(f"tierlog.tier.url={args.tier_url}")
    try:
        # A Ctrl-C or SIGTERM while they start stops them all, as a failed one does.
        with StopSignals() as stops:
            cluster = start_cluster(
                args.dir,
                args.brokers,
                base_port=args.base_port,
                configs=configs,
                track=choose_tracker(args.progress),
                pause=stops.pause,
            )
    except BrokerFailed as failure:
        return _failed_to_start(failure, "; the other brokers were stopped")
    print(cluster.servers, flush=True)
    return 0


def _kafka_bootstrap(directory: Path) -> int:
    bootstrap = read_cluster(directory).kafka_bootstrap
    if not bootstrap:
        _err(
            f"tierlog cluster: the brokers of {directory} serve no Kafka listener (started by "
            f"an older tierlog): tierlog cluster down --dir {directory}, then up"
        )
        return 1
    print(bootstrap, flush=True)
    return 0


def _status(directory: Path) -> int:
    states = broker_states(read_cluster(directory))
    for state in states:
        broker = state.broker
        if broker.pid is None:
            process = "stopped"
        else:
            process = f"pid {broker.pid} " + ("running" if state.running else "NOT RUNNING")
        readiness = "ready" if state.ready else "NOT READY"
        print(
            f"broker {broker.node_id}\t{broker.address}\t{process}\t{readiness}"
            f"\tmetrics http://{broker.metrics_address}\tkafka {broker.kafka_address or '-'}"
            f"\t{broker.data_dir}"
        )
    down = [state.broker.node_id for state in states if not state.up]
    print(f"{len(states) - len(down)} of {len(states)} brokers ready")
    for line in _topic_lines(states):
        print(line)
    if down:
        _err(f"tierlog cluster: broker(s) {', '.join(map(str, down))} down")
        return 1
    return 0


def _topic_lines(states: list[BrokerState]) -> list[str]:
    """Every topic as ``topics describe`` prints it (each partition as its leader reports
    it: ``AdminClient.describe_topics``); a topic some up brokers lack is named (brokers
    without replication each keep their own topics)."""
    described: dict[int, dict[str, TopicDescription]] = {}
    overrides: dict[str, dict[str, str]] = {}
    for state in states:
        if not state.up:
            continue
        with AdminClient(state.broker.address, request_timeout_ms=_STATUS_TIMEOUT_MS) as admin:
            topics = {topic.name: topic for topic in admin.describe_topics()}
            for name in topics.keys() - overrides.keys():
                overrides[name] = topic_overrides(admin, name)
        described[state.broker.node_id] = topics
    lines = []
    for name in sorted(overrides):
        answers = {node: topics[name] for node, topics in described.items() if name in topics}
        topic = next(iter(answers.values()))
        lines += render_description(topic, overrides[name])
        lacking = sorted(described.keys() - answers.keys())
        if lacking:
            lines.append(f"\t(not on broker(s) {', '.join(map(str, lacking))})")
        offline = [str(p.partition) for p in topic.partitions if p.leader_id not in described]
        if offline:
            lines.append(f"\t(partition(s) {', '.join(offline)} offline: no leader is up)")
    return lines
