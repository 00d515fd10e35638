"""``tierlog-sidecar``: the broker process around the log manager.

Today it hosts the storage engine: it recovers the logs at start (progress in the
log), flushes by policy with group commit, writes checkpoints periodically, and on
SIGTERM or SIGINT shuts down cleanly (flush, checkpoints, clean-shutdown marker) so
the next start needs no recovery. The gRPC API is served by this same process once
the sidecar service lands.
"""

from __future__ import annotations

import argparse
import logging
import signal
import threading
import time
from pathlib import Path

from tierlog.sidecar.config import SidecarConfig, read_properties_file
from tierlog.storage.errors import TierlogError
from tierlog.storage.manager import LogManager

__all__ = ["main", "run"]

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
    parser.add_argument("--config-file", type=Path, help="a Java properties file of broker configs")
    parser.add_argument(
        "--config",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="a broker config under its Kafka name (repeatable)",
    )
    parser.add_argument("--log-level", default="INFO")
    return parser.parse_args(argv)


def build_config(args: argparse.Namespace) -> SidecarConfig:
    props: dict[str, str] = {}
    if args.config_file:
        props.update(read_properties_file(args.config_file))
    for pair in args.config:
        key, sep, value = pair.partition("=")
        if not sep:
            raise SystemExit(f"--config expects KEY=VALUE, got {pair!r}")
        props[key.strip()] = value.strip()
    if args.data_dir:
        props["log.dirs"] = ",".join(str(path) for path in args.data_dir)
    return SidecarConfig.from_properties(props)


def run(config: SidecarConfig, stop: threading.Event) -> None:
    """Serve until ``stop`` is set, then shut down cleanly."""
    manager = LogManager(config.storage)
    started = time.monotonic()

    def progress(done: int, total: int) -> None:
        log.info(
            "recovery: %d of %d bytes scanned (%.0f%%)", done, total, 100 * done / max(total, 1)
        )

    manager.startup(progress)
    log.info(
        "started: %d partitions in %s, loaded in %.2fs",
        len(manager.partitions),
        ", ".join(str(path) for path in config.storage.log_dirs),
        time.monotonic() - started,
    )
    interval_s = config.checkpoint_interval_ms / 1000
    while not stop.wait(interval_s):
        manager.write_checkpoints()
    log.info("shutting down: flushing logs and writing checkpoints")
    manager.shutdown()
    log.info("stopped cleanly")


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    logging.basicConfig(
        level=args.log_level.upper(),
        format="%(asctime)s %(levelname)s %(name)s %(message)s",
    )
    try:
        config = build_config(args)
    except TierlogError as error:
        log.error("%s: %s", error.reason, error)
        return 2
    stop = threading.Event()
    for signum in (signal.SIGTERM, signal.SIGINT):
        signal.signal(signum, lambda *_: stop.set())
    run(config, stop)
    return 0
