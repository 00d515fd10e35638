"""A real sidecar started on a data dir damaged while it was down (issue 16, items 1 and 5).

Each test fills a topic through the sidecar, stops it cleanly, damages a file the way
the trial did, starts it again and reads every offset back: what was not damaged is
served as it was produced, and what was damaged is refused with CORRUPT_MESSAGE.
"""

from __future__ import annotations

import subprocess
import time
from collections.abc import Callable
from pathlib import Path

import grpc
import pytest

from tests.support.sidecars import console_script
from tierlog.api.v1 import log_service_pb2
from tierlog.storage.checkpoints import (
    LOG_START_OFFSET_CHECKPOINT,
    RECOVERY_POINT_CHECKPOINT,
    read_offset_checkpoint,
)
from tierlog.storage.records import SimpleRecord, build_batch, decode_records, iter_batches
from tierlog.storage.records.batch import LENGTH_OFFSET
from tierlog.storage.topic_partition import TopicPartition

from .conftest import Sidecar, SidecarFactory, reason_of

TOPIC = "trial"
BATCHES = 60
RECORDS_PER_BATCH = 5
END_OFFSET = BATCHES * RECORDS_PER_BATCH


def value_of(offset: int) -> bytes:
    return b"%06d:" % offset + bytes([offset % 251]) * 200


def fill(sidecar: Sidecar) -> None:
    """Offsets 0..299 in batches of 5, about 15 batches to a 16 KiB segment."""
    sidecar.create_topic(TOPIC, segment_bytes="16384")
    now = int(time.time() * 1000)
    for batch in range(BATCHES):
        offsets = range(batch * RECORDS_PER_BATCH, (batch + 1) * RECORDS_PER_BATCH)
        records = [SimpleRecord(b"k%d" % offset, value_of(offset), now, ()) for offset in offsets]
        sidecar.log.Produce(
            log_service_pb2.ProduceRequest(topic=TOPIC, record_batches=build_batch(records))
        )


def read_everything(sidecar: Sidecar) -> tuple[list[int], list[int], int]:
    """Every offset read back (each checked against what was produced), every offset
    refused with CORRUPT_MESSAGE, and the log end offset, fetching from offset 0 on."""
    readable: list[int] = []
    refused: list[int] = []
    latest = log_service_pb2.ListOffsetsRequest(topic=TOPIC, timestamp_ms=-1)
    log_end = sidecar.log.ListOffsets(latest).offset
    offset = 0
    while offset < log_end:
        try:
            fetched = sidecar.log.Fetch(log_service_pb2.FetchRequest(topic=TOPIC, offset=offset))
        except grpc.RpcError as error:
            assert reason_of(error) == "CORRUPT_MESSAGE", error
            refused.append(offset)
            offset += 1
            continue
        data = fetched.record_batches
        assert fetched.high_watermark == log_end
        records = [r for header in iter_batches(data) for r in decode_records(data, header)]
        assert records and records[0].offset <= offset, f"a fetch at {offset}: {records}"
        for record in records:
            assert (record.key, record.value) == (b"k%d" % record.offset, value_of(record.offset))
        readable += [record.offset for record in records if record.offset >= offset]
        offset = records[-1].offset + 1
    return readable, refused, log_end


def test_a_flipped_byte_in_a_flushed_middle_segment_costs_only_its_batch(
    tmp_path: Path, sidecar_factory: SidecarFactory
) -> None:
    """The trial: stop cleanly, flip one byte inside a closed segment in the middle of the
    partition and delete its ``.index``. Every later segment used to be deleted."""
    sidecar = sidecar_factory(tmp_path / "data")
    fill(sidecar)
    assert sidecar.stop() == 0
    partition = sidecar.data_dir / f"{TOPIC}-0"
    logs = sorted(partition.glob("*.log"))
    assert len(logs) >= 4, logs
    middle = logs[len(logs) // 2]
    data = bytearray(middle.read_bytes())
    damaged = list(iter_batches(data))[2]
    data[damaged.position + damaged.size - 3] ^= 0xFF  # a byte of its last record's value
    middle.write_bytes(data)
    middle.with_suffix(".index").unlink()

    sidecar.start()
    for start in range(2):  # and once more: the damage is found again, not served
        readable, refused, log_end = read_everything(sidecar)
        lost = list(range(damaged.base_offset, damaged.last_offset + 1))
        assert refused == lost
        assert readable == [offset for offset in range(END_OFFSET) if offset not in lost]
        assert log_end == END_OFFSET
        assert sorted(partition.glob("*.log"))[: len(logs)] == logs
        assert middle.read_bytes() == data  # nothing cut off
        assert f"ERROR tierlog.storage.recovery {middle} is damaged" in sidecar.output
        if start == 0:
            assert sidecar.stop() == 0
            sidecar.start()


@pytest.mark.parametrize(
    "length_byte", [LENGTH_OFFSET, LENGTH_OFFSET + 1], ids=["below a header", "past the end"]
)
def test_a_length_flipped_under_the_running_sidecar_is_refused_not_skipped(
    tmp_path: Path, sidecar_factory: SidecarFactory, length_byte: int
) -> None:
    """No restart, so recovery never sees it: a flipped byte of a batch's length field
    in a closed segment. A fetch from the segment's start answers the whole batches
    before the damage; one at the damaged batch answers CORRUPT_MESSAGE naming partition
    and offset. Reads used to fail whole (a length below a header) or move on to the
    next segment without a word (a length past the end): a consumer jumped 27 -> 52."""
    sidecar = sidecar_factory(tmp_path / "data")
    fill(sidecar)
    logs = sorted((sidecar.data_dir / f"{TOPIC}-0").glob("*.log"))
    middle = logs[len(logs) // 2]
    data = bytearray(middle.read_bytes())
    batches = list(iter_batches(data))
    damaged = batches[2]
    data[damaged.position + length_byte] ^= 0xFF
    middle.write_bytes(data)

    first = batches[0].base_offset
    fetched = sidecar.log.Fetch(log_service_pb2.FetchRequest(topic=TOPIC, offset=first))
    assert [h.base_offset for h in iter_batches(fetched.record_batches)] == [
        b.base_offset for b in batches[:2]
    ]
    with pytest.raises(grpc.RpcError) as refused_at:
        sidecar.log.Fetch(log_service_pb2.FetchRequest(topic=TOPIC, offset=damaged.base_offset))
    assert reason_of(refused_at.value) == "CORRUPT_MESSAGE"
    assert f"{TOPIC}-0" in str(refused_at.value.details())
    assert f"offset {damaged.base_offset} " in str(refused_at.value.details())

    readable, refused, log_end = read_everything(sidecar)
    assert refused[0] == damaged.base_offset
    assert refused == list(range(refused[0], refused[0] + len(refused)))  # one stretch
    assert sorted(readable + refused) == list(range(END_OFFSET))  # nothing stepped over
    assert log_end == END_OFFSET


# -- garbled checkpoints and meta.properties (item 5) -------------------------------------

BINARY = bytes(range(256)) * 4  # not UTF-8 text


def cut_short(path: Path) -> bytes:
    """The file as a crash in the middle of writing it in place would leave it."""
    data = path.read_bytes()
    return data[: len(data) // 2]


def binary(_path: Path) -> bytes:
    return BINARY


@pytest.mark.parametrize("name", [RECOVERY_POINT_CHECKPOINT, LOG_START_OFFSET_CHECKPOINT])
@pytest.mark.parametrize("garble", [cut_short, binary], ids=["cut-short", "binary"])
def test_a_garbled_checkpoint_is_ignored_with_a_warning(
    tmp_path: Path,
    sidecar_factory: SidecarFactory,
    name: str,
    garble: Callable[[Path], bytes],
) -> None:
    sidecar = sidecar_factory(tmp_path / "data")
    fill(sidecar)
    assert sidecar.stop() == 0
    checkpoint = sidecar.data_dir / name
    checkpoint.write_bytes(garble(checkpoint))

    sidecar.start()
    assert read_everything(sidecar) == (list(range(END_OFFSET)), [], END_OFFSET)
    assert f"WARNING tierlog.storage.checkpoints ignoring {checkpoint}" in sidecar.output
    assert sidecar.stop() == 0
    assert read_offset_checkpoint(checkpoint)  # written whole again at the shutdown


def test_a_garbled_recovery_point_after_a_crash_recovers_every_segment(
    tmp_path: Path, sidecar_factory: SidecarFactory
) -> None:
    sidecar = sidecar_factory(tmp_path / "data")
    fill(sidecar)
    sidecar.kill()
    (sidecar.data_dir / RECOVERY_POINT_CHECKPOINT).write_bytes(b"0\n1\ntri")

    sidecar.start()
    assert read_everything(sidecar) == (list(range(END_OFFSET)), [], END_OFFSET)
    assert "ignoring" in sidecar.output
    assert sidecar.stop() == 0
    checkpoint = read_offset_checkpoint(sidecar.data_dir / RECOVERY_POINT_CHECKPOINT)
    assert checkpoint == {TopicPartition(TOPIC, 0): END_OFFSET}


def another_cluster(meta: Path) -> str:
    meta.write_text("version=1\nnode.id=7\ncluster.id=elsewhere\n")
    return f"INCONSISTENT_CLUSTER_ID: {meta} says the log dir belongs to cluster elsewhere"


def binary_bytes(meta: Path) -> str:
    meta.write_bytes(BINARY)
    return f"KAFKA_STORAGE_ERROR: {meta} is not UTF-8 text"


def empty(meta: Path) -> str:
    meta.write_bytes(b"")
    return f"KAFKA_STORAGE_ERROR: {meta} is not a meta.properties: it has no version=1"


def text_garbage(meta: Path) -> str:
    meta.write_text("all work and no play makes jack a dull boy\n")
    return f"KAFKA_STORAGE_ERROR: {meta} is not a meta.properties: it has no version=1"


def a_directory(meta: Path) -> str:
    meta.unlink()
    meta.mkdir()
    return f"KAFKA_STORAGE_ERROR: {meta} is a directory, not a file"


@pytest.mark.parametrize(
    "damage",
    [another_cluster, binary_bytes, empty, text_garbage, a_directory],
    ids=["another-cluster", "binary", "empty", "text-garbage", "a-directory"],
)
def test_a_meta_properties_not_of_this_cluster_stops_the_sidecar_touching_nothing(
    tmp_path: Path, sidecar_factory: SidecarFactory, damage: Callable[[Path], str]
) -> None:
    """As Kafka refuses a log dir whose meta.properties names another cluster or cannot be
    read: the volume is never joined to a cluster it cannot be shown to belong to (an
    unreadable file proves nothing either way, so it is not written over)."""
    sidecar = sidecar_factory(tmp_path / "data", "node.id=7", "cluster.id=billing")
    fill(sidecar)
    assert sidecar.stop() == 0
    meta = sidecar.data_dir / "meta.properties"
    expected = damage(meta)
    before = sorted(path.name for path in sidecar.data_dir.iterdir())

    command = [console_script("tierlog-sidecar"), "--data-dir", str(sidecar.data_dir)]
    command += [
        "--listen",
        "127.0.0.1:0",
        "--config",
        "node.id=7",
        "--config",
        "cluster.id=billing",
    ]
    result = subprocess.run(command, capture_output=True, text=True, timeout=30)
    assert result.returncode == 2
    errors = [line for line in result.stderr.splitlines() if " ERROR " in line]
    assert len(errors) == 1 and expected in errors[0], result.stderr
    assert "Traceback" not in result.stderr
    if damage is another_cluster:
        assert "this broker's cluster.id is billing" in errors[0]
    assert sorted(path.name for path in sidecar.data_dir.iterdir()) == before
