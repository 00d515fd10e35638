"""``tierlog-operator``: the kopf operator for TierlogCluster and TierlogTopic.

Watches every namespace (``--all-namespaces``) or the ones named (``--namespace``,
repeatable); serves its liveness probe (``--liveness URL``) and its Prometheus metrics
(``--metrics-port``). Several replicas peer through kopf's ``ClusterKopfPeering``
object (``--peering``; created if missing): the one with the highest priority works,
the others wait. It reads the cluster's credentials from ``$KUBECONFIG`` or
``~/.kube/config``, else from the pod's service account.
"""

from __future__ import annotations

import argparse
import asyncio
import logging

import kopf

from tierlog.operator.config import OperatorConfig, add_arguments
from tierlog.operator.handlers import RESYNC_S, QuietWakers, register
from tierlog.operator.kube import Kube
from tierlog.operator.metrics import OperatorMetrics

__all__ = ["main"]

log = logging.getLogger("tierlog.operator")


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="tierlog-operator", description=__doc__)
    where = parser.add_mutually_exclusive_group()
    where.add_argument("--all-namespaces", action="store_true", help="watch every namespace")
    where.add_argument(
        "--namespace", action="append", default=[], help="watch this namespace (repeatable)"
    )
    parser.add_argument(
        "--liveness",
        metavar="URL",
        default="http://0.0.0.0:8080/healthz",
        help="serve the liveness probe here (default %(default)s)",
    )
    parser.add_argument(
        "--metrics-port", type=int, default=9100, help="serve /metrics on this port (0: off)"
    )
    parser.add_argument(
        "--metrics-address", default="0.0.0.0", help="the address /metrics binds (default all)"
    )
    parser.add_argument(
        "--peering",
        default="tierlog-operator",
        help="the ClusterKopfPeering (or KopfPeering) replicas share (default %(default)s)",
    )
    parser.add_argument(
        "--standalone", action="store_true", help="no peering: this is the only replica"
    )
    parser.add_argument("--priority", type=int, default=0, help="peering priority")
    parser.add_argument(
        "--topic-deletion-timeout",
        type=float,
        default=300,
        metavar="SECONDS",
        help="how long a deleted TierlogTopic waits for brokers that do not answer before "
        "its finalizer goes anyway (default %(default)s)",
    )
    parser.add_argument(
        "--resync-interval",
        type=float,
        default=RESYNC_S,
        metavar="SECONDS",
        help="how often an object nothing changed is passed anyway; changes to it and to "
        "what it owns are followed at once (default %(default)s)",
    )
    parser.add_argument("--log-level", default="INFO")
    add_arguments(parser)
    return parser.parse_args(argv)


def _settings(args: argparse.Namespace) -> kopf.OperatorSettings:
    settings = kopf.OperatorSettings()
    # Progress and the last-handled spec go in annotations: the status is ours alone,
    # and its schema has no room for kopf's fields.
    settings.persistence.progress_storage = kopf.AnnotationsProgressStorage(prefix="tierlog.io")
    settings.persistence.diffbase_storage = kopf.AnnotationsDiffBaseStorage(prefix="tierlog.io")
    settings.persistence.finalizer = "tierlog.io/finalizer"
    settings.posting.level = logging.WARNING  # only warnings become Events by themselves
    settings.peering.name = args.peering
    settings.peering.standalone = args.standalone
    settings.peering.priority = args.priority
    settings.peering.clusterwide = not args.namespace
    settings.peering.mandatory = not args.standalone
    settings.watching.server_timeout = 60
    return settings


async def _run(args: argparse.Namespace) -> None:
    metrics = OperatorMetrics()
    if args.metrics_port:
        metrics.serve(args.metrics_port, args.metrics_address)
    kube = Kube()
    if not args.standalone:
        await kube.ensure_peering(args.peering, args.namespace)
    registry = kopf.OperatorRegistry()
    register(
        registry,
        kube,
        metrics,
        OperatorConfig.from_args(args),
        topic_deletion_timeout_s=args.topic_deletion_timeout,
        resync_s=args.resync_interval,
    )
    await kopf.operator(
        registry=registry,
        settings=_settings(args),
        standalone=args.standalone,
        priority=args.priority,
        peering_name=None if args.standalone else args.peering,
        liveness_endpoint=args.liveness,
        clusterwide=not args.namespace,
        namespaces=args.namespace,
    )


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    logging.basicConfig(
        level=args.log_level.upper(), format="%(asctime)s %(levelname)s %(name)s: %(message)s"
    )
    for chatty in ("httpx", "httpx2", "aiohttp.access"):  # a line per request or probe
        logging.getLogger(chatty).setLevel(logging.WARNING)
    logging.getLogger("kopf.objects").addFilter(QuietWakers())
    asyncio.run(_run(args))
    return 0
