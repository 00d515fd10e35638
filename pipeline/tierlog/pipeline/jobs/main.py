"""``tierlog-spark``: the pipeline's jobs as one command (run directly or through
``spark-submit``, which supplies the master and the cluster settings)."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence
from pathlib import Path

from pyspark.sql import SparkSession

from tierlog.pipeline import configure, register
from tierlog.pipeline.jobs.audit_job import run_audit
from tierlog.pipeline.jobs.export import run_export
from tierlog.pipeline.options import parse_s3_options
from tierlog.storage.errors import TierlogError
from tierlog.tools.progress import choose_tracker

__all__ = ["main"]


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="tierlog-spark", description=__doc__)
    parser.add_argument("--master", help="Spark master when not run by spark-submit")
    parser.add_argument("--progress", action="store_true", help="always draw progress bars")
    parser.add_argument(
        "--option",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="a data source option, e.g. s3.endpoint.url=http://minio:9000 (repeatable)",
    )
    jobs = parser.add_subparsers(dest="job", required=True)
    export = jobs.add_parser("export", help="a topic to Parquet, incrementally")
    export.add_argument(
        "--path",
        action="append",
        required=True,
        help="a log dir, file:// or s3:// tier (repeat for several)",
    )
    export.add_argument("--topic", required=True)
    export.add_argument("--output", required=True, type=Path, help="the Parquet directory")
    export.add_argument(
        "--allow-data-loss",
        action="store_true",
        help="skip offsets deleted since the last run instead of failing",
    )
    audit = jobs.add_parser("audit", help="verify every tiered segment of a tier")
    audit.add_argument("tier", help="the tier's URL (file:// or s3://)")
    audit.add_argument("--report", type=Path, help="also write the JSON report here")
    return parser


def _session(master: str | None, job: str) -> SparkSession:
    # The console progress bar of Spark's stages is on only in Spark's shells by default.
    builder = SparkSession.builder.appName(f"tierlog-{job}").config(
        "spark.ui.showConsoleProgress", "true"
    )
    if master:
        builder = builder.master(master)
    spark = configure(builder).getOrCreate()
    register(spark)
    return spark


def main(argv: Sequence[str] | None = None) -> int:
    parser = _parser()
    args = parser.parse_args(argv)
    options = dict(item.partition("=")[::2] for item in args.option)
    if any(not key for key in options):
        parser.error("--option takes KEY=VALUE")
    track = choose_tracker(args.progress)
    spark = _session(args.master, args.job)
    try:
        if args.job == "export":
            run_export(
                spark,
                args.path,
                args.topic,
                args.output,
                fail_on_data_loss=not args.allow_data_loss,
                source_options=options,
                track=track,
            )
            return 0
        s3 = parse_s3_options({key.lower(): value for key, value in options.items()})
        report = run_audit(spark, args.tier, s3=s3, track=track)
        text = report.to_json()
        if args.report:
            args.report.write_text(text)
        print(text)
        return report.exit_code
    except TierlogError as error:
        print(f"tierlog-spark {args.job}: {error}", file=sys.stderr)
        return 2
    finally:
        spark.stop()


if __name__ == "__main__":
    sys.exit(main())
