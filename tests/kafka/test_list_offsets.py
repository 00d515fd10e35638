"""ListOffsets v10's timeout (KIP-1075) on a topic whose start is in the remote tier (a
real MinIO behind tests/support/fault_proxy.py): a lookup by time in the tier that takes
longer is REQUEST_TIMED_OUT within the timeout asked, a local lookup is answered however
short it is, and once the tier answers again the same lookup finds the record."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

from kio.schema.errors import ErrorCode

from tests.kafka.conftest import start_kafka_sidecar
from tests.kafka.wire import KafkaWire
from tests.support.fault_proxy import FaultProxy
from tests.support.minio import MinioServer
from tests.support.sidecars import Sidecars
from tierlog.storage.records import SimpleRecord, build_batch

PRODUCE, LIST_OFFSETS = 0, 2
T0 = 1_700_000_000_000
BATCHES = 40
EARLIEST_LOCAL, LATEST = -4, -1
TIMEOUT_MS = 500


def _list_offsets(wire: KafkaWire, timestamp: int, timeout_ms: int) -> Any:
    answer = wire.call(
        LIST_OFFSETS,
        10,
        {
            "replica_id": -1,
            "isolation_level": 0,
            "timeout": timeout_ms,
            "topics": [
                {
                    "name": "tiered",
                    "partitions": [
                        {"partition_index": 0, "current_leader_epoch": -1, "timestamp": timestamp}
                    ],
                }
            ],
        },
    )
    return answer.topics[0].partitions[0]


def test_a_lookup_in_the_tier_is_bounded_by_the_v10_timeout(
    sidecars: Sidecars,
    tmp_path: Path,
    minio: MinioServer,
    s3_bucket: str,
    fault_proxy: FaultProxy,
) -> None:
    tier = minio.sidecar_tier_configs(s3_bucket, tmp_path / "s3-credentials")
    through_proxy = [c for c in tier if not c.startswith("tierlog.tier.s3.endpoint.url=")]
    broker = start_kafka_sidecar(
        sidecars,
        tmp_path / "data",
        *through_proxy,
        f"tierlog.tier.s3.endpoint.url={fault_proxy.url}",
        "remote.log.manager.task.interval.ms=200",
        "log.retention.check.interval.ms=200",
    )
    broker.create_topic(
        "tiered",
        remote_storage_enable="true",
        segment_bytes="2000",
        local_retention_bytes="0",
        retention_ms="-1",
        file_delete_delay_ms="0",
    )
    wire = KafkaWire(broker.kafka_port)
    try:
        for i in range(BATCHES):
            batch = build_batch([SimpleRecord(b"k", b"v" * 300, T0 + i, ())])
            produced = wire.call(
                PRODUCE,
                11,
                {
                    "transactional_id": None,
                    "acks": -1,
                    "timeout": 30_000,
                    "topic_data": [
                        {"name": "tiered", "partition_data": [{"index": 0, "records": batch}]}
                    ],
                },
            )
            assert produced.responses[0].partition_responses[0].error_code == ErrorCode.none
        deadline = time.monotonic() + 60
        while _list_offsets(wire, EARLIEST_LOCAL, 0).offset == 0:  # until segments are tiered
            assert time.monotonic() < deadline, "no segment left the local log"
            time.sleep(0.2)

        fault_proxy.stall(1_000, 3, method="GET")  # the tier hangs (3 s a GET)
        started = time.monotonic()
        timed_out = _list_offsets(wire, T0 + 1, TIMEOUT_MS)
        waited_s = time.monotonic() - started
        stalled = fault_proxy.injected["stall"]
        local = _list_offsets(wire, LATEST, 1)
        fault_proxy.clear()
        found = _list_offsets(wire, T0 + 1, 30_000)
    finally:
        fault_proxy.clear()
        wire.close()

    assert timed_out.error_code == ErrorCode.request_timed_out
    assert stalled >= 1  # the lookup did go to the tier
    assert waited_s < TIMEOUT_MS / 1000 + 5  # the timeout, and a loaded machine's margin
    assert (local.error_code, local.offset) == (ErrorCode.none, BATCHES)
    assert (found.error_code, found.offset, found.timestamp) == (ErrorCode.none, 1, T0 + 1)
