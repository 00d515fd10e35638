"""What the follower applies where: one partition's answer of the default
``replica.fetch.max.bytes`` (a producer's 1 MiB batch) is appended on the event loop, as
the leader appends the producer's batch, not after a hop to a thread and back."""

from __future__ import annotations

from pathlib import Path

from tierlog.api.v1 import replication_service_pb2 as pb
from tierlog.replication.fetcher import FetchSettings
from tierlog.replication.follower import applies_without_waiting
from tierlog.storage.log import Log
from tierlog.storage.records import SimpleRecord, build_batch

LEADER_EPOCH = 0


def _batch(base_offset: int, records: int) -> bytes:
    return build_batch(
        [SimpleRecord(value=bytes(1000), timestamp=1_000 + i) for i in range(records)],
        base_offset=base_offset,
        partition_leader_epoch=LEADER_EPOCH,
    )


def test_an_answer_of_replica_fetch_max_bytes_is_applied_on_the_loop(tmp_path: Path) -> None:
    log = Log.open(tmp_path / "t-0")
    log.append_as_follower(_batch(0, 1))  # the log holds the epoch it follows
    batch = _batch(1, 1000)
    assert len(batch) <= FetchSettings().partition_max_bytes
    answer = pb.ReplicaFetchPartitionData(
        record_batches=batch, segment_base_offset=log.active_segment.base_offset
    )

    assert applies_without_waiting(log, answer, LEADER_EPOCH)
