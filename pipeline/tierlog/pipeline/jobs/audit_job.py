"""``tierlog-spark audit``: verify every tiered segment of a tier, in parallel on Spark.

The checks are ``tierlog tier verify``'s own (``tierlog.tools.tier_verify.verify_partition``:
each batch's CRC and framing, every index entry against its batch, the indexes' sanity
rules, the object's size, offsets continuous within and across segments and against
the manifest's log start, timestamps against the manifest). This job only spreads
them: the driver lists the tier's partitions, each Spark task verifies one
partition's segments, and the results stream back (for the progress bar) into one
report.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from dataclasses import dataclass

from pyspark.sql import SparkSession

from tierlog.pipeline.tiered import list_tier, open_store
from tierlog.storage.tier.s3_store import S3Options
from tierlog.storage.topic_partition import TopicPartition
from tierlog.tools.progress import Track, no_progress
from tierlog.tools.tier_verify import VerifyReport, verify_partition

__all__ = ["AuditReport", "PartitionAudit", "audit_partition", "run_audit"]


@dataclass(frozen=True)
class PartitionAudit:
    """One partition's verification: a line per segment and the verify report."""

    tp: TopicPartition
    lines: tuple[str, ...]
    report: VerifyReport


def audit_partition(tier_url: str, s3: S3Options | None, tp: TopicPartition) -> PartitionAudit:
    """Verify one partition's tiered segments (runs on an executor)."""
    store = open_store(tier_url, s3)
    try:
        report = VerifyReport()
        lines = tuple(verify_partition(store, tp, report))
        return PartitionAudit(tp, lines, report)
    finally:
        store.close()


@dataclass(frozen=True)
class AuditReport:
    tier_url: str
    partitions: tuple[PartitionAudit, ...]

    @property
    def exit_code(self) -> int:
        """As ``tierlog tier verify``'s: 0 all good, 1 problems, 2 something unchecked."""
        return max((audit.report.exit_code for audit in self.partitions), default=0)

    @property
    def problems(self) -> dict[str, list[str]]:
        """Problems by segment object key, over every partition."""
        return {
            key: found for audit in self.partitions for key, found in audit.report.problems.items()
        }

    def to_json(self) -> str:
        return json.dumps(
            {
                "tier": self.tier_url,
                "exit_code": self.exit_code,
                "partitions": len(self.partitions),
                "segments_checked": sum(a.report.segments for a in self.partitions),
                "batches_checked": sum(a.report.batches for a in self.partitions),
                "problems": self.problems,
                "errors": [error for a in self.partitions for error in a.report.errors],
            },
            indent=1,
        )


def run_audit(
    spark: SparkSession,
    tier_url: str,
    *,
    s3: S3Options | None = None,
    track: Track = no_progress,
) -> AuditReport:
    partitions = [partition.tp for partition in list_tier(tier_url, None, s3)]
    results: list[PartitionAudit] = []
    if partitions:
        slices = min(len(partitions), max(spark.sparkContext.defaultParallelism * 4, 1))
        checked: Iterator[PartitionAudit] = (
            spark.sparkContext.parallelize(partitions, slices)
            .map(lambda tp: audit_partition(tier_url, s3, tp))
            .toLocalIterator()
        )
        with track("audit: partitions", len(partitions), "partition") as advance:
            for result in checked:
                results.append(result)
                advance(1)
    return AuditReport(tier_url, tuple(sorted(results, key=lambda audit: audit.tp)))
