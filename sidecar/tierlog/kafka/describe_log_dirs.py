"""DescribeLogDirs: this broker's log dirs, each with the partitions it holds (their
size on disk, how far the log end is behind the high watermark, never a future replica:
tierlog does not move partitions between log dirs) and, from v4, the file system's total
and usable bytes. Topics the request names that a log dir lacks are left out, as Kafka
does; null asks for every partition."""

from __future__ import annotations

import asyncio
import shutil
from collections import defaultdict
from pathlib import Path
from typing import Any

from kio.schema.errors import ErrorCode
from kio.static.protocol import RequestPayload, ResponsePayload

from tierlog.kafka.broker import KafkaBroker
from tierlog.kafka.codec import build, response_type
from tierlog.kafka.versions import DESCRIBE_LOG_DIRS
from tierlog.storage.topic_partition import TopicPartition

__all__ = ["describe_log_dirs"]


async def describe_log_dirs(
    broker: KafkaBroker, request: RequestPayload, version: int
) -> ResponsePayload:
    body: Any = request
    wanted: set[TopicPartition] | None = None
    if body.topics is not None:
        wanted = {
            TopicPartition(topic.topic, partition)
            for topic in body.topics
            for partition in topic.partitions
        }
    results = await asyncio.to_thread(_describe, broker, wanted)
    return build(
        response_type(DESCRIBE_LOG_DIRS, version),
        {"throttle_time": 0, "error_code": ErrorCode.none, "results": results},
    )


def _describe(broker: KafkaBroker, wanted: set[TopicPartition] | None) -> list[dict[str, Any]]:
    """Blocking: the file system's sizes and each log's."""
    partitions = broker.partitions
    manager = partitions.manager
    held: dict[Path, dict[str, list[dict[str, Any]]]] = {
        log_dir: defaultdict(list) for log_dir in manager.config.log_dirs
    }
    for tp in manager.partitions:
        if wanted is not None and tp not in wanted:
            continue
        partition_log = manager.get_log(tp)
        lag = partitions.high_watermark(tp, partition_log) - partition_log.log_end_offset
        held[manager.log_dir_of(tp)][tp.topic].append(
            {
                "partition_index": tp.partition,
                "partition_size": partition_log.size_bytes,
                "offset_lag": max(0, lag),
                "is_future_key": False,
            }
        )
    results = []
    for log_dir, topics in held.items():
        usage = shutil.disk_usage(log_dir)
        results.append(
            {
                "error_code": ErrorCode.none,
                "log_dir": str(log_dir),
                "topics": [
                    {"name": name, "partitions": found} for name, found in sorted(topics.items())
                ],
                "total_bytes": usage.total,
                "usable_bytes": usage.free,
            }
        )
    return results
