"""``tierlog-spark audit``: verify every tiered segment of a tier, in parallel on Spark.

The driver lists the tier (each partition's manifest view) and checks each
partition's segments follow each other; the executors fetch and verify one segment
each (``tierlog.pipeline.audit``). Results stream back as they finish, for the
progress bar, and make one report.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from dataclasses import asdict, dataclass

from pyspark.sql import SparkSession

from tierlog.cli.progress import Track, no_progress
from tierlog.pipeline.audit import SegmentAudit, audit_segment, continuity_problems
from tierlog.pipeline.tiered import list_tier
from tierlog.storage.tier.s3_store import S3Options

__all__ = ["AuditReport", "run_audit"]


@dataclass(frozen=True)
class AuditReport:
    tier_url: str
    segments: tuple[SegmentAudit, ...]
    partition_problems: dict[str, list[str]]

    @property
    def ok(self) -> bool:
        return all(s.ok for s in self.segments) and not any(self.partition_problems.values())

    @property
    def failed(self) -> tuple[SegmentAudit, ...]:
        return tuple(s for s in self.segments if not s.ok)

    def to_json(self) -> str:
        return json.dumps(
            {
                "tier": self.tier_url,
                "ok": self.ok,
                "segments_checked": len(self.segments),
                "bytes_checked": sum(s.size_bytes for s in self.segments),
                "failed_segments": [
                    asdict(s) | {"tp": f"{s.tp.topic}-{s.tp.partition}"} for s in self.failed
                ],
                "partition_problems": self.partition_problems,
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
    partitions = list_tier(tier_url, None, s3)
    segments = {p.tp: [s.ref.tier_segment for s in p.segments] for p in partitions}
    jobs = [
        (tier_url, tp, segment)
        for tp, remote in segments.items()
        for segment in remote
        if segment is not None
    ]
    problems = {
        f"{tp.topic}-{tp.partition}": continuity_problems([s for s in remote if s is not None])
        for tp, remote in segments.items()
    }
    results: list[SegmentAudit] = []
    if jobs:
        slices = min(len(jobs), max(spark.sparkContext.defaultParallelism * 4, 1))
        checked: Iterator[SegmentAudit] = (
            spark.sparkContext.parallelize(jobs, slices)
            .map(lambda job: audit_segment(job[0], job[1], job[2], s3))
            .toLocalIterator()
        )
        with track("audit: segments", len(jobs), "segment") as advance:
            for result in checked:
                results.append(result)
                advance(1)
    return AuditReport(
        tier_url,
        tuple(results),
        {tp: found for tp, found in problems.items() if found},
    )
