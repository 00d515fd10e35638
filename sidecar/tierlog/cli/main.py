"""The ``tierlog`` command: one argparse subcommand per module of this package.

Each subcommand module offers ``add_parser(subparsers)``, which registers its options
and sets ``run`` (``Namespace -> exit status``) as the parser default; ``main`` only
dispatches, and prints a typed error (``TierlogError``) as its Kafka name and message
with exit status 1 (a stop signal met at a safe point, ``Stopped``: 128 plus its
number); a flag a subcommand does not know is reported with that subcommand's usage.
The data commands (``topics``, ``configs``, ``get-offsets``, ``delete-records``,
``produce``, ``consume``, ``consumer-groups``, ``perf``) are thin adapters over
``tierlog.client`` and take ``--server`` (``server_option``).
``main(argv)`` returns the status instead of exiting, so tests call it in-process; the
installed command is ``run``, which tunes the process first.
"""

from __future__ import annotations

import argparse
import importlib.metadata
import logging
import os
import sys
from collections.abc import Sequence

from tierlog.cli import (
    cluster,
    configs,
    consume,
    consumer_groups,
    delete_records,
    demo,
    dump_log,
    get_offsets,
    partitions,
    perf,
    produce,
    tier,
    topics,
)
from tierlog.cli.stop_signals import Stopped
from tierlog.client.errors import with_reason
from tierlog.process_tuning import tune_process
from tierlog.storage.errors import TierlogError

__all__ = ["build_parser", "main", "run"]


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="tierlog",
        description="Tools for tierlog, a Kafka-format log store with tiered storage.",
    )
    subparsers = parser.add_subparsers(dest="command", metavar="COMMAND", required=True)
    demo.add_parser(subparsers)
    cluster.add_parser(subparsers)
    dump_log.add_parser(subparsers)
    topics.add_parser(subparsers)
    configs.add_parser(subparsers)
    get_offsets.add_parser(subparsers)
    delete_records.add_parser(subparsers)
    partitions.add_parser(subparsers)
    produce.add_parser(subparsers)
    consume.add_parser(subparsers)
    consumer_groups.add_parser(subparsers)
    perf.add_parser(subparsers)
    tier.add_parser(subparsers)
    parser.add_argument("--version", action="version", version=f"%(prog)s {_version()}")
    _name_each_subcommand(parser)
    return parser


def _version() -> str:
    try:
        return importlib.metadata.version("tierlog")
    except importlib.metadata.PackageNotFoundError:  # run from a source tree, not installed
        return "unknown"


def _name_each_subcommand(parser: argparse.ArgumentParser) -> None:
    """Give each (sub)subcommand's namespace its own parser as ``command_parser``, so a
    flag it does not know is reported with its usage, not the top-level one."""
    # argparse keeps subcommands in a private list; walking it is the one way in.
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for subparser in action.choices.values():
                subparser.set_defaults(command_parser=subparser)
                _name_each_subcommand(subparser)


def main(argv: Sequence[str] | None = None) -> int:
    args, unknown = build_parser().parse_known_args(argv)
    if unknown:
        args.command_parser.error(f"unrecognized arguments: {' '.join(unknown)}")
    try:
        status: int = args.run(args)
    except BrokenPipeError:
        # The reader went away (``tierlog dump-log ... | head``): not an error of ours.
        # Point stdout at /dev/null so the interpreter's final flush does not fail too.
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        return 141
    except KeyboardInterrupt:  # a SIGINT before a command took the stop signals
        return 130
    except Stopped as stop:  # a command's safe point met a stop signal (``stop_signals``)
        return stop.exit_status
    except TierlogError as error:  # a sidecar's (or the client's) typed error: its Kafka name
        print(f"tierlog {args.command}: {with_reason(error)}", file=sys.stderr)
        return 1
    return status


def run() -> int:
    """The ``tierlog`` command: ``main`` in a process tuned for moving MiB batches
    (``tierlog.process_tuning``; tests call ``main`` and leave theirs alone)."""
    tune_process()
    # The clients' warnings (a producer's retries, a broker gone) in Kafka's tools' layout.
    logging.basicConfig(format="[%(asctime)s] %(levelname)s %(message)s (%(name)s)")
    return main()


if __name__ == "__main__":
    sys.exit(run())
