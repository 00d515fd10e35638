"""``tierlog dump-log``: the argparse adapter over ``tierlog.tools.dump_log``.

The options, progress and streams are wired here; the checks and the lines Kafka's
``kafka-dump-log.sh`` prints live in the core, which the Spark audit job and ``tierlog
tier verify`` share.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from tierlog.tools.dump_log import (
    DECODERS,
    KAFKA_MAX_MESSAGE_SIZE,
    DumpOptions,
    DumpReport,
    dump_files,
)
from tierlog.tools.progress import choose_tracker


def _file_list(text: str) -> list[Path]:
    paths = [Path(part.strip()) for part in text.split(",") if part.strip()]
    if not paths:
        raise argparse.ArgumentTypeError("expected a comma-separated list of files")
    return paths


def _positive(text: str) -> int:
    value = int(text)
    if value <= 0:
        raise argparse.ArgumentTypeError(f"must be positive, not {value}")
    return value


# Kafka's decoder classes (``kafka.serializer.*`` before Kafka 4, then
# ``org.apache.kafka.tools.api.*``) by their simple name. Kafka prints DefaultDecoder's
# byte arrays as Java object ids; hex is what a reader can use.
DECODER_CLASSES = {"StringDecoder": "string", "DefaultDecoder": "hex"}
_DECODER_PACKAGES = ("kafka.serializer", "org.apache.kafka.tools.api")


def decoder_of_class(text: str) -> str:
    """A Kafka decoder class name as the decoder that prints what it would."""
    package, _dot, name = text.rpartition(".")
    if package in _DECODER_PACKAGES and name in DECODER_CLASSES:
        return DECODER_CLASSES[name]
    raise argparse.ArgumentTypeError(
        f"{text!r}: tierlog runs no Java decoder; it prints as "
        f"{' or '.join(f'{_DECODER_PACKAGES[-1]}.{n}' for n in DECODER_CLASSES)} would"
    )


def add_parser(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    parser = subparsers.add_parser(
        "dump-log",
        help="print and check .log, .index, .timeindex and .txnindex files (Kafka's "
        "kafka-dump-log)",
        description=(
            "Print the batches, records and index entries of segment files and check them, "
            "like Kafka's kafka-dump-log.sh. Exit status: 0 all good, 1 problems found in "
            "the files, 2 some file could not be checked."
        ),
    )
    parser.add_argument(
        "--files",
        required=True,
        action="extend",
        type=_file_list,
        metavar="FILE[,FILE...]",
        help="the .log, .index, .timeindex and .txnindex files to dump (comma-separated; "
        "repeatable)",
    )
    parser.add_argument(
        "--deep-iteration", action="store_true", help="print every record inside each batch"
    )
    parser.add_argument(
        "--print-data-log",
        action="store_true",
        help="print record keys, payloads and headers (implies --deep-iteration)",
    )
    parser.add_argument(
        "--skip-record-metadata",
        action="store_true",
        help="with --print-data-log, print only the data of each record",
    )
    parser.add_argument(
        "--index-sanity-check",
        action="store_true",
        help="only run the start-up sanity check on index files (the one deciding a rebuild)",
    )
    parser.add_argument(
        "--verify-index-only",
        action="store_true",
        help="check every index entry against the log without printing the entries",
    )
    parser.add_argument(
        "--max-message-size",
        type=_positive,
        default=KAFKA_MAX_MESSAGE_SIZE,
        metavar="BYTES",
        help="largest batch an index check will read (default: %(default)s, Kafka's)",
    )
    parser.add_argument(
        "--max-bytes",
        type=_positive,
        default=None,
        metavar="BYTES",
        help="stop dumping a .log after this many bytes of batches (default: the whole file)",
    )
    for which in ("key", "value"):
        parser.add_argument(
            f"--{which}-decoder",
            choices=sorted(DECODERS),
            default=None,
            help=f"how to print record {which}s: string (UTF-8, the default) or hex; "
            "implies --print-data-log",
        )
    for which in ("key", "value"):
        parser.add_argument(
            f"--{which}-decoder-class",
            dest=f"{which}_decoder",
            type=decoder_of_class,
            default=None,
            metavar="CLASS",
            help=f"Kafka's spelling of --{which}-decoder: {', '.join(sorted(DECODER_CLASSES))} "
            "(in kafka.serializer or org.apache.kafka.tools.api)",
        )
    parser.add_argument(
        "--progress",
        action="store_true",
        help="always show a progress bar on stderr (by default only when stderr is a "
        "terminal and stdout is not)",
    )
    parser.set_defaults(run=run)


def run(args: argparse.Namespace) -> int:
    decoders_given = args.key_decoder is not None or args.value_decoder is not None
    options = DumpOptions(
        deep_iteration=args.deep_iteration,
        print_data_log=args.print_data_log or decoders_given,
        skip_record_metadata=args.skip_record_metadata,
        index_sanity_only=args.index_sanity_check,
        verify_index_only=args.verify_index_only,
        max_message_size=args.max_message_size,
        max_bytes=args.max_bytes,
        key_decoder=args.key_decoder or "string",
        value_decoder=args.value_decoder or "string",
    )
    report = DumpReport()
    out = sys.stdout
    for line in dump_files(args.files, options, report, choose_tracker(args.progress)):
        out.write(line)
        out.write("\n")
    out.flush()
    for line in report.stderr_lines():
        print(line, file=sys.stderr)
    return report.exit_code
