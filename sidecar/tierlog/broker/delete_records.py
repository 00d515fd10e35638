"""DeleteRecords: move a partition's log start forward, on its leader, for every front door.

The offset -1 means the high watermark (everything consumers can read goes), as in
Kafka. The new log start is checkpointed before the answer, so it survives a crash;
the segments wholly below it go with the next retention pass, locally and in the tier.
"""

from __future__ import annotations

import asyncio

from tierlog.broker.partitions import Leader, Leaders, Partitions
from tierlog.storage.errors import OffsetOutOfRangeError

__all__ = ["HIGH_WATERMARK", "delete_records"]

HIGH_WATERMARK = -1  # the offset that asks to delete everything consumers can read


async def delete_records(
    partitions: Partitions[Leaders[Leader]], topic: str, partition: int, offset: int
) -> int:
    """Delete the records of ``topic``'s ``partition`` below ``offset``; the new log
    start (the low watermark). NOT_LEADER_OR_FOLLOWER off the leader, OFFSET_OUT_OF_RANGE
    for an offset below -1 or past the log end."""
    tp, partition_log = partitions.log(topic, partition)
    if offset == HIGH_WATERMARK:
        offset = partitions.high_watermark(tp, partition_log)
    if offset < 0:
        raise OffsetOutOfRangeError(f"offset {offset}: use -1 or an offset")

    def move() -> int:
        low_watermark = partition_log.increment_log_start_offset(offset)
        partitions.manager.write_checkpoints()
        return low_watermark

    return await asyncio.to_thread(move)
