"""What the remote log manager reports as it works, for metrics kept elsewhere.

Storage stays free of network code: the sidecar passes an observer that turns these
calls into Prometheus series; tests and tools use ``TierObserver`` itself, which
ignores them.
"""

from __future__ import annotations

from tierlog.storage.topic_partition import TopicPartition

__all__ = ["TierObserver"]


class TierObserver:
    """Every hook does nothing; override those you count."""

    def upload_started(self, tp: TopicPartition, size_bytes: int) -> None:
        """A segment object of ``size_bytes`` is recorded as started and its PUT begins (a long
        upload shows as an attempt in flight until ``segment_uploaded`` or
        ``upload_failed``)."""

    def segment_uploaded(self, tp: TopicPartition, size_bytes: int, seconds: float) -> None:
        """An attempt finished: the segment is readable from the tier."""

    def upload_failed(self, tp: TopicPartition, reason: str) -> None:
        """An attempt failed (``reason``: the error's Kafka name); it is retried later."""

    def segments_deleted(self, tp: TopicPartition, segments: int, size_bytes: int) -> None:
        """Remote segments (their log bytes) removed by retention or a sweep; or, with
        their objects' bytes, with a partition's whole tier (topic deleted, or tiering
        turned off: its manifest, which knew the log bytes, goes first)."""

    def tier_cleaned(
        self, tp: TopicPartition, bytes_read: int, bytes_written: int, bytes_removed: int
    ) -> None:
        """A tier cleaning pass committed its swap: log bytes it read from the tier, wrote
        to it as cleaned segments, and removed (replaced less written)."""
