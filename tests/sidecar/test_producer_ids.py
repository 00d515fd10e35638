"""InitProducerId: ids unique in the cluster and never reused; a resent batch is a duplicate."""

from __future__ import annotations

from pathlib import Path

import grpc
import pytest

from tierlog.api.v1 import log_service_pb2
from tierlog.broker.producer_ids import (
    BLOCK_SIZE,
    MAX_EPOCH,
    NODE_ID_SPAN,
    PRODUCER_IDS_FILE,
    ProducerIdManager,
)
from tierlog.storage.records import SimpleRecord, build_batch

from .conftest import Sidecar, SidecarFactory, reason_of


def _init(sidecar: Sidecar, producer_id: int = -1, epoch: int = -1) -> tuple[int, int]:
    response = sidecar.log.InitProducerId(
        log_service_pb2.InitProducerIdRequest(producer_id=producer_id, producer_epoch=epoch)
    )
    return response.producer_id, response.producer_epoch


def test_brokers_hand_out_disjoint_ids_that_survive_a_crash(tmp_path: Path) -> None:
    log_dirs = (tmp_path / "three",)
    first = ProducerIdManager(log_dirs, node_id=3)
    other = ProducerIdManager((tmp_path / "four",), node_id=4)
    ids = [first.init_producer_id(-1, -1)[0] for _ in range(BLOCK_SIZE + 5)]
    others = {other.init_producer_id(-1, -1)[0] for _ in range(50)}
    assert len(set(ids)) == len(ids) and not others & set(ids)
    assert all(pid % NODE_ID_SPAN == 3 for pid in ids)
    # A crash loses what the reserved block did not hand out; nothing is handed out twice.
    again = ProducerIdManager(log_dirs, node_id=3)
    assert again.init_producer_id(-1, -1)[0] > max(ids)


def test_an_existing_producer_gets_its_epoch_bumped_then_a_new_id(tmp_path: Path) -> None:
    manager = ProducerIdManager((tmp_path,), node_id=0)
    pid, epoch = manager.init_producer_id(-1, -1)
    assert epoch == 0
    assert manager.init_producer_id(pid, 0) == (pid, 1)
    fresh, fresh_epoch = manager.init_producer_id(pid, MAX_EPOCH)
    assert fresh != pid and fresh_epoch == 0


def test_init_producer_id_over_grpc_is_never_reused_after_kill_9(
    sidecar_factory: SidecarFactory, tmp_path: Path
) -> None:
    data = tmp_path / "data"
    sidecar = sidecar_factory(data)
    seen = {_init(sidecar)[0] for _ in range(5)}
    assert len(seen) == 5
    pid = min(seen)
    assert _init(sidecar, pid, 7) == (pid, 8)
    sidecar.process.kill()
    sidecar.process.wait()
    restarted = sidecar_factory(data)
    assert _init(restarted)[0] > max(seen)


def test_ids_are_never_reused_when_a_new_log_dir_is_listed_first(
    sidecar_factory: SidecarFactory, tmp_path: Path
) -> None:
    """The reserved block's end is kept in every log dir; it was only in the first one,
    so a new disk listed first handed out ids that producers already had."""
    old, new = tmp_path / "old", tmp_path / "new"
    sidecar = sidecar_factory(old, data_dirs=(old,))
    seen = {_init(sidecar)[0] for _ in range(5)}
    assert sidecar.stop() == 0
    restarted = sidecar_factory(old, data_dirs=(new, old))
    assert _init(restarted)[0] > max(seen)
    assert (new / PRODUCER_IDS_FILE).read_text() == (old / PRODUCER_IDS_FILE).read_text()


def test_the_largest_reserved_end_of_any_copy_is_read(tmp_path: Path) -> None:
    a, b = tmp_path / "a", tmp_path / "b"
    both = ProducerIdManager((a, b), node_id=0)
    handed = [both.init_producer_id(-1, -1)[0] for _ in range(3)]
    only_b = ProducerIdManager((b,), node_id=0)  # a is away while b reserves more
    handed += [only_b.init_producer_id(-1, -1)[0] for _ in range(3)]
    for order in [(a, b), (b, a)]:
        assert ProducerIdManager(order, node_id=0).init_producer_id(-1, -1)[0] > max(handed)


def test_a_bad_producer_id_is_an_invalid_request(sidecar: Sidecar) -> None:
    with pytest.raises(grpc.RpcError) as caught:
        _init(sidecar, -5, 0)
    assert reason_of(caught.value) == "INVALID_REQUEST"


def test_a_resent_stamped_batch_is_answered_as_a_duplicate(sidecar: Sidecar) -> None:
    sidecar.create_topic("idem")
    pid, epoch = _init(sidecar)
    records = [SimpleRecord(b"k", f"v{i}".encode(), 1_700_000_000_000 + i) for i in range(3)]
    batch = build_batch(records, producer_id=pid, producer_epoch=epoch, base_sequence=0)
    request = log_service_pb2.ProduceRequest(topic="idem", partition=0, record_batches=batch)
    first = sidecar.log.Produce(request)
    second = sidecar.log.Produce(request)
    assert (first.base_offset, first.last_offset, first.duplicate) == (0, 2, False)
    assert (second.base_offset, second.last_offset, second.duplicate) == (0, 2, True)
    fetched = sidecar.log.Fetch(log_service_pb2.FetchRequest(topic="idem", partition=0, offset=0))
    assert fetched.high_watermark == 3
