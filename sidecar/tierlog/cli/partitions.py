"""``tierlog partitions reassign --plan FILE --execute|--verify``: Kafka's
``kafka-reassign-partitions`` over the cluster's partition-state store.

The plan is Kafka's JSON (``tierlog.controller.reassignments``). ``--execute`` prints
the partitions' current replicas as a plan (keep it: executing it moves them back) and
starts every move; the brokers' controller (the operator's on Kubernetes) completes each
once its new replicas are in sync. ``--verify`` prints where each partition stands and
exits 0 once all are on their target, 1 while any is not. The store is the one the
brokers share: ``--state-dir`` (``tierlog cluster up --dir DIR`` keeps it at DIR/state),
or ``--kubernetes NAMESPACE/CLUSTER`` with ``$KUBECONFIG``'s credentials.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from tierlog.controller.reassignments import (
    COMPLETED,
    ReassignmentPlan,
    current_assignment,
    plan_from_json,
    plan_to_json,
    reassignment_progress,
    start_reassignments,
)
from tierlog.partition_state.store import PartitionStateStore
from tierlog.replication.config import DirectoryStore, KubernetesStore, StoreLocation
from tierlog.replication.state_store import open_state_store

__all__ = ["add_parser", "run"]


def add_parser(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    parser = subparsers.add_parser(
        "partitions",
        help="move partitions' replicas between brokers (Kafka's kafka-reassign-partitions)",
        description="Move partitions' replicas to the targets of Kafka's reassignment JSON "
        "(--execute, which prints the current replicas as the plan that moves them back), "
        "or say how far the moves got (--verify: exit 0 once all are done, 1 while any is "
        "not). The store is the brokers': --state-dir (tierlog cluster up keeps it at "
        "DIR/state) or --kubernetes NAMESPACE/CLUSTER with $KUBECONFIG's credentials.",
    )
    parser.add_argument("action", choices=("reassign",))
    parser.add_argument(
        "--plan", type=Path, required=True, help="Kafka's reassignment JSON: target replicas"
    )
    doing = parser.add_mutually_exclusive_group(required=True)
    doing.add_argument("--execute", action="store_true", help="start the plan's moves")
    doing.add_argument("--verify", action="store_true", help="say how far the plan got")
    where = parser.add_mutually_exclusive_group(required=True)
    where.add_argument("--state-dir", type=Path, help="a directory store (tierlog cluster)")
    where.add_argument("--kubernetes", metavar="NAMESPACE/CLUSTER", help="a TierlogCluster's store")
    parser.set_defaults(run=run)


def run(args: argparse.Namespace) -> int:
    plan = plan_from_json(args.plan.read_text())
    store = open_state_store(_location(args))
    if args.execute:
        return _execute(store, plan)
    progress = reassignment_progress(store, plan)
    for tp, standing in progress.items():
        print(f"Reassignment of partition {tp.topic}-{tp.partition}: {standing}")
    return 0 if all(standing == COMPLETED for standing in progress.values()) else 1


def _execute(store: PartitionStateStore, plan: ReassignmentPlan) -> int:
    print("Current partition replica assignment (execute it to move them back):")
    print(plan_to_json(current_assignment(store, plan)))
    start_reassignments(store, plan, brokers=store.read_leases())
    print(
        f"Started the reassignment of {len(plan)} partitions; --verify says how far",
        file=sys.stderr,
    )
    return 0


def _location(args: argparse.Namespace) -> StoreLocation:
    if args.state_dir is not None:
        return DirectoryStore(args.state_dir.absolute())
    namespace, _, cluster = str(args.kubernetes).partition("/")
    if not namespace or not cluster:
        raise SystemExit(
            f"tierlog partitions: --kubernetes NAMESPACE/CLUSTER, not {args.kubernetes!r}"
        )
    return KubernetesStore(namespace, cluster)
