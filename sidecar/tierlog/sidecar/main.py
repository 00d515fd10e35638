"""``tierlog-sidecar``: the broker process, serving tierlog's gRPC API over its logs.

``tierlog-sidecar --data-dir DIR --listen HOST:PORT`` recovers the logs at start
(progress in the log), then serves ``tierlog.v1`` (see ``proto/``) with health and
reflection; it flushes by policy with group commit and writes checkpoints
periodically. On SIGTERM or SIGINT it stops accepting calls, gives those in flight
``tierlog.shutdown.grace.ms``, then shuts the logs down cleanly (flush, checkpoints,
clean-shutdown marker) so the next start needs no recovery.
"""

from __future__ import annotations

import argparse
import asyncio
import dataclasses
import logging
import os
import signal
import time
from pathlib import Path
from typing import Any

from tierlog.process_tuning import tune_process
from tierlog.sidecar.config import DEFAULT_LISTEN, SidecarConfig, parse_listeners
from tierlog.sidecar.logformat import LOG_FORMATS, configure_logging
from tierlog.sidecar.metrics import SidecarMetrics
from tierlog.sidecar.pod_ordinal import pod_ordinal
from tierlog.sidecar.probes import Phase, Probes, ProbeServer, tier_detail
from tierlog.sidecar.security import TOKEN_ENV
from tierlog.sidecar.server import SidecarServer
from tierlog.sidecar.tier_config import RESTORE_KEY, add_tier_arguments, tier_properties
from tierlog.storage.errors import InvalidConfigError, TierlogError
from tierlog.storage.properties import read_properties

__all__ = ["main", "serve"]

log = logging.getLogger("tierlog.sidecar")


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="tierlog-sidecar", description=__doc__)
    parser.add_argument(
        "--data-dir",
        action="append",
        type=Path,
        default=[],
        help="a log dir (repeat for several); same as log.dirs",
    )
    parser.add_argument(
        "--listen",
        metavar="HOST:PORT",
        help=f"where to serve gRPC (port 0: any free port); same as listeners "
        f"(default {DEFAULT_LISTEN})",
    )
    parser.add_argument(
        "--kafka-listen",
        metavar="HOST:PORT",
        help="also serve Kafka's wire protocol here (port 0: any free port); same as a "
        "PLAINTEXT://HOST:PORT entry in listeners (default: not served)",
    )
    parser.add_argument("--config-file", type=Path, help="a Java properties file of broker configs")
    parser.add_argument(
        "--config",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="a broker config under its Kafka name (repeatable)",
    )
    parser.add_argument(
        "--metrics-listen",
        metavar="HOST:PORT",
        help="serve /metrics, /healthz and /readyz over HTTP here (port 0: any free port); "
        "same as tierlog.metrics.listeners (default: not served)",
    )
    parser.add_argument(
        "--node-id-from-pod-name",
        metavar="POD_NAME",
        help="node.id is the ordinal that ends this StatefulSet pod name (NAME-ORDINAL); "
        "Kubernetes passes it as $(POD_NAME) from the downward API",
    )
    add_tier_arguments(parser)
    parser.add_argument(
        "--restore-from-tier",
        action="store_true",
        help=f"on an empty data dir, create the topics a lost broker left in the tier and "
        f"go on from the tier's end; refused on a data dir holding anything (same as "
        f"{RESTORE_KEY}=true)",
    )
    parser.add_argument("--log-level", default="INFO")
    parser.add_argument(
        "--log-format", choices=LOG_FORMATS, default="text", help="json: one object a line"
    )
    return parser.parse_args(argv)


def build_config(args: argparse.Namespace) -> SidecarConfig:
    props: dict[str, str] = {}
    if args.config_file:
        props.update(read_properties(args.config_file))
    for pair in args.config:
        key, sep, value = pair.partition("=")
        if not sep:
            raise SystemExit(f"--config expects KEY=VALUE, got {pair!r}")
        props[key.strip()] = value.strip()
    if args.data_dir:
        props["log.dirs"] = ",".join(str(path) for path in args.data_dir)
    if args.listen or args.kafka_listen:  # each flag replaces its own entry
        grpc_listen, kafka_entry = parse_listeners(props.get("listeners", ""), "listeners")
        grpc_listen = args.listen or grpc_listen
        name, kafka_listen = kafka_entry or ("PLAINTEXT", None)
        kafka_listen = args.kafka_listen or kafka_listen
        entries = [grpc_listen, kafka_listen and f"{name}://{kafka_listen}"]
        props["listeners"] = ",".join(entry for entry in entries if entry)
    if args.metrics_listen:
        props["tierlog.metrics.listeners"] = args.metrics_listen
    props.update(tier_properties(args))
    if args.restore_from_tier:
        props[RESTORE_KEY] = "true"
    if args.node_id_from_pod_name:
        if "node.id" in props or "broker.id" in props:
            raise InvalidConfigError("node.id is given twice: as a config and by the pod name")
        props["node.id"] = str(pod_ordinal(args.node_id_from_pod_name))
    config = SidecarConfig.from_properties(props)
    token = os.environ.get(TOKEN_ENV, "").strip()
    if token and config.auth_token is None:  # the file, when given, wins
        config = dataclasses.replace(config, auth_token=token)
    return config


async def serve(config: SidecarConfig) -> None:
    """Serve until SIGTERM or SIGINT, then shut down gracefully."""
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for signum in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(signum, stop.set)
    loop.add_signal_handler(signal.SIGUSR1, _log_tasks)
    metrics = SidecarMetrics()
    probes = Probes(metrics)
    heartbeat = asyncio.create_task(probes.beat())
    http = ProbeServer(probes)
    if config.metrics_listen:
        address = await asyncio.to_thread(http.start, config.metrics_listen)
        log.info("serving metrics at http://%s/metrics (and /healthz, /readyz)", address)
    try:
        await _serve(config, metrics, probes, stop)
    finally:
        heartbeat.cancel()
        http.stop()


def _log_tasks() -> None:
    """SIGUSR1: log where every task of the event loop waits (a stuck broker explains
    itself, as a JVM's thread dump does; threads: ``py-spy dump``)."""
    lines = []
    for task in asyncio.all_tasks():
        lines.append(f"-- {task.get_name()}")
        awaited: Any = task.get_coro()
        while awaited is not None:  # down the chain of awaits to where it waits
            frame = getattr(awaited, "cr_frame", None) or getattr(awaited, "gi_frame", None)
            if frame is not None:
                code = frame.f_code
                lines.append(f"   {code.co_filename}:{frame.f_lineno} in {code.co_name}")
            else:
                lines.append(f"   {awaited!r}")
            awaited = getattr(awaited, "cr_await", None) or getattr(awaited, "gi_yieldfrom", None)
    log.warning("tasks on SIGUSR1:\n%s", "\n".join(lines))


async def _serve(
    config: SidecarConfig, metrics: SidecarMetrics, probes: Probes, stop: asyncio.Event
) -> None:
    started = time.monotonic()

    def progress(done: int, total: int) -> None:
        metrics.recovery(done, total)
        log.info(
            "recovery: %d of %d bytes scanned (%.0f%%)", done, total, 100 * done / max(total, 1)
        )

    server = SidecarServer(config, metrics)
    probes.detail = tier_detail(server.remote_log_manager)
    probes.enter(Phase.RECOVERING)
    await server.start(progress)
    if not tune_process():  # start-up done: see tierlog.process_tuning
        log.info("freed memory goes back to the kernel: this C library has no mallopt")
    probes.enter(Phase.SERVING)
    log.info(
        "started: %d partitions in %s, loaded in %.2fs",
        server.manager.partition_count,
        ", ".join(str(path) for path in config.storage.log_dirs),
        time.monotonic() - started,
    )
    if server.kafka is not None:
        log.info(
            "serving Kafka's wire protocol on %s (%s)",
            server.kafka.address,
            config.kafka_security.protocol,
        )
    # Last: the line that says the broker is up (scripts and tests wait for it) comes
    # after everything it serves is named.
    log.info(
        "listening on %s (broker %d, %s%s)",
        server.address,
        config.node_id,
        _transport(config),
        ", bearer token required" if config.auth_token else "",
    )
    await stop.wait()
    probes.enter(Phase.STOPPING)
    log.info("shutting down: finishing calls, then flushing logs and writing checkpoints")
    await server.stop()
    log.info("stopped cleanly")


def _transport(config: SidecarConfig) -> str:
    if config.tls is None:
        return "plaintext"
    if config.tls.client_auth == "none":
        return "TLS"
    return f"TLS, client certificates {config.tls.client_auth}"


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    configure_logging(args.log_level, args.log_format)
    try:
        config = build_config(args)
        asyncio.run(serve(config))
    except TierlogError as error:
        log.error("%s: %s", error.reason, error)
        return 2
    return 0
