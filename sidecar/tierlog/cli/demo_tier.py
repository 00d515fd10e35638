"""The demo's tiered-storage steps: offload to the embedded local-directory tier.

A topic with ``remote.storage.enable=true`` and ``local.retention.bytes=0`` (keep only
what is not yet tiered): its records are produced, its closed segments are uploaded
to ``<data dir>/tier`` and then deleted from local disk, and its oldest offsets are
fetched back, now served from the tier. Every claim is read from the sidecar, its
metrics or the tier's manifest, and checked.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from pathlib import Path

from tierlog.api.errors import TopicAlreadyExistsError
from tierlog.cli.local_sidecar import LocalSidecar, metric_value
from tierlog.client import AdminClient, Consumer, ConsumerRecord, Producer, TopicPartition
from tierlog.storage.records import SimpleRecord
from tierlog.storage.tier.local_store import LocalDirectoryStore
from tierlog.storage.tier.manifest import RemoteLogView
from tierlog.storage.tier.manifest_store import ChunkReader, load_manifest
from tierlog.storage.topic_partition import TopicPartition as StoredPartition

__all__ = ["SIDECAR_CONFIGS", "TIERED_TOPIC", "offload_and_read_back", "show_tier_after_restart"]

TIERED_TOPIC = "demo-tiered"
TIERED_PARTITION = TopicPartition(TIERED_TOPIC, 0)
_STORED_PARTITION = StoredPartition(TIERED_TOPIC, 0)
TIERED_CONFIGS = {
    "remote.storage.enable": "true",
    "segment.bytes": "65536",
    "local.retention.bytes": "0",
    "file.delete.delay.ms": "0",
}
# Quick passes, so the demo sees uploads and local deletion within seconds.
SIDECAR_CONFIGS = (
    "remote.log.manager.task.interval.ms=500",
    "log.retention.check.interval.ms=500",
)
RECORDS = 3000

Say = Callable[[str], None]
Check = Callable[[bool, str], None]


def offload_and_read_back(sidecar: LocalSidecar, step: int, say: Say, check: Check) -> None:
    server = sidecar.address
    configs = ", ".join(f"{key}={value}" for key, value in TIERED_CONFIGS.items())
    say(f"{step}. Tiered storage: topic {TIERED_TOPIC} ({configs})")
    first_offset = _create(server, say)
    records = [
        SimpleRecord(
            key=f"k{i % 16}".encode(),
            value=f'{{"reading":{i},"sensor":"s{i % 16:02d}"}}'.encode() * 4,
            timestamp=int(time.time() * 1000),
        )
        for i in range(RECORDS)
    ]
    with Producer({"bootstrap.servers": server, "linger.ms": 5}) as producer:
        for record in records:
            producer.send(TIERED_TOPIC, record.value, key=record.key, partition=0)
        producer.flush()
    end_offset = first_offset + len(records)
    say(f"   produced {len(records)} records: offsets {first_offset}..{end_offset - 1}")

    found = _wait_for_offload(sidecar)
    labels = {"topic": TIERED_TOPIC, "partition": "0"}
    uploaded = metric_value(found, "tierlog_remote_uploaded_segments_total", topic=TIERED_TOPIC)
    lag = metric_value(found, "tierlog_remote_upload_lag_segments", **labels)
    local_segments = metric_value(found, "tierlog_log_segments", **labels)
    say(f'   tierlog_remote_uploaded_segments_total{{topic="{TIERED_TOPIC}"}} {uploaded:.0f}')
    say(f'   tierlog_remote_upload_lag_segments{{topic="{TIERED_TOPIC}",...}} {lag:.0f}')
    say(f"   tierlog_log_segments{{...}} {local_segments:.0f}: only the active segment is local")
    check(
        uploaded >= 1 and lag == 0 and local_segments == 1, "the closed segments were not offloaded"
    )

    view = _show_tier(sidecar.data_dir / "tier", say)
    local = sorted((sidecar.data_dir / f"{TIERED_TOPIC}-0").glob("*.log"))
    say(f"   local {TIERED_TOPIC}-0: {', '.join(path.name for path in local)}")
    check(len(local) == 1, f"{len(local)} local segments, expected only the active one")
    check(view.log_start_offset == 0, f"the tier starts at {view.log_start_offset}")
    local_start = int(local[0].stem)
    check(view.end_offset == local_start, "the tier does not end where the local log starts")

    _read_back(server, records, first_offset, view.end_offset, say, check)
    say("")


def _create(server: str, say: Say) -> int:
    with AdminClient(server) as admin:
        try:
            admin.create_topic(TIERED_TOPIC, 1, TIERED_CONFIGS)
        except TopicAlreadyExistsError:
            say(f"   {TIERED_TOPIC} already exists from an earlier run: this run appends after it")
        (description,) = admin.describe_topics([TIERED_TOPIC])
        (partition,) = description.partitions
    return partition.high_watermark


def _wait_for_offload(sidecar: LocalSidecar, timeout_s: float = 30) -> str:
    """The scrape once every closed segment is tiered and deleted locally (or at the deadline)."""
    labels = {"topic": TIERED_TOPIC, "partition": "0"}
    deadline = time.monotonic() + timeout_s
    while True:
        exposition = sidecar.scrape()
        offloaded = (
            metric_value(exposition, "tierlog_remote_uploaded_segments_total", topic=TIERED_TOPIC)
            >= 1
            and metric_value(exposition, "tierlog_remote_upload_lag_segments", **labels) == 0
            and metric_value(exposition, "tierlog_log_segments", **labels) == 1
        )
        if offloaded or time.monotonic() > deadline:
            return exposition
        time.sleep(0.2)


def _show_tier(tier_dir: Path, say: Say) -> RemoteLogView:
    store = LocalDirectoryStore(tier_dir)
    manifest = load_manifest(store, _STORED_PARTITION)
    view = manifest.view(ChunkReader(store))
    say(
        f"   the tier ({tier_dir}): manifest version {manifest.version}, writer epoch "
        f"{manifest.writer_epoch}, offsets [{view.log_start_offset}, {view.end_offset})"
    )
    for segment in view.all_segments():
        say(
            f"     [{segment.base_offset:>5}, {segment.end_offset:>5})  "
            f"{segment.object_size_bytes:>6} B  {segment.key}"
        )
    return view


def _read_back(
    server: str,
    records: list[SimpleRecord],
    first_offset: int,
    tier_end: int,
    say: Say,
    check: Check,
) -> None:
    """Consume from the first offset of this run: those below ``tier_end`` come from the tier."""
    wanted = min(tier_end - first_offset, len(records))
    consumed: list[ConsumerRecord] = []
    with Consumer({"bootstrap.servers": server}) as consumer:
        consumer.assign([TIERED_PARTITION])
        consumer.seek(TIERED_PARTITION, first_offset)
        deadline = time.monotonic() + 15
        while len(consumed) < wanted and time.monotonic() < deadline:
            consumed.extend(consumer.poll(1000))
    consumed = consumed[:wanted]
    same = [
        (got.offset, got.key, got.value) == (offset, sent.key, sent.value)
        for offset, (got, sent) in enumerate(zip(consumed, records, strict=False), first_offset)
    ]
    check(len(consumed) == wanted and all(same), "the offloaded records did not come back as sent")
    say(
        f"   fetched offsets {first_offset}..{first_offset + wanted - 1} back (no longer on local "
        f"disk: served from the tier), each as produced"
    )


def show_tier_after_restart(sidecar: LocalSidecar, say: Say, check: Check) -> None:
    """After a restart the tiered topic still starts at 0: its old offsets are in the tier."""
    with Consumer({"bootstrap.servers": sidecar.address}) as consumer:
        earliest = consumer.beginning_offsets([TIERED_PARTITION])[TIERED_PARTITION]
        latest = consumer.end_offsets([TIERED_PARTITION])[TIERED_PARTITION]
    local = sorted((sidecar.data_dir / f"{TIERED_TOPIC}-0").glob("*.log"))
    say(
        f"   {TIERED_TOPIC}-0 offsets [{earliest}, {latest}), the local ones from "
        f"{int(local[0].stem) if local else latest}: the rest is still served from the tier"
    )
    check(earliest == 0, f"{TIERED_TOPIC} starts at {earliest} after the restart, not 0")
