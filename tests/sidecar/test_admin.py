"""Topic administration, configs, metadata, health and reflection through a real sidecar."""

from __future__ import annotations

import itertools
import json
import re
import threading
import time
from collections.abc import Callable
from functools import partial
from pathlib import Path
from typing import Any

import grpc
import pytest
from grpc_health.v1 import health_pb2, health_pb2_grpc
from grpc_reflection.v1alpha import reflection_pb2, reflection_pb2_grpc

from tests.support.small_disk import small_disk_at
from tierlog.api.v1 import admin_service_pb2, log_service_pb2
from tierlog.broker.topics import TOPICS_FILE
from tierlog.storage.checkpoints import RECOVERY_POINT_CHECKPOINT, read_offset_checkpoint
from tierlog.storage.config import LogConfig
from tierlog.storage.names import MAX_TOPIC_NAME_LENGTH
from tierlog.storage.records import SimpleRecord, build_batch
from tierlog.storage.topic_partition import TopicPartition

from .conftest import Sidecar, SidecarFactory, reason_of


def _create(sidecar: Sidecar, *topics: admin_service_pb2.NewTopic) -> dict[str, str]:
    response = sidecar.admin.CreateTopics(admin_service_pb2.CreateTopicsRequest(topics=topics))
    return {result.name: result.error.reason for result in response.results}


def _configs(sidecar: Sidecar, topic: str) -> dict[str, tuple[str, int]]:
    response = sidecar.admin.DescribeConfigs(admin_service_pb2.DescribeConfigsRequest(topic=topic))
    return {entry.name: (entry.value, entry.source) for entry in response.entries}


def test_create_list_describe_and_delete_topics(sidecar: Sidecar) -> None:
    new_topic = admin_service_pb2.NewTopic
    results = _create(
        sidecar,
        new_topic(name="orders", num_partitions=3, configs={"retention.ms": "60000"}),
        new_topic(name="events"),
        new_topic(name="orders"),
        new_topic(name="bad/name"),
        new_topic(name="no-parts", num_partitions=-1),
        new_topic(name="bad-config", configs={"segment.bytes": "tiny"}),
        new_topic(name="unknown-config", configs={"no.such.thing": "1"}),
    )
    assert results == {
        "orders": "TOPIC_ALREADY_EXISTS",  # the second request for it; the first succeeded
        "events": "",
        "bad/name": "INVALID_TOPIC_EXCEPTION",
        "no-parts": "INVALID_PARTITIONS",
        "bad-config": "INVALID_CONFIG",
        "unknown-config": "INVALID_CONFIG",
    }
    listed = sidecar.admin.ListTopics(admin_service_pb2.ListTopicsRequest())
    assert [(t.name, t.partition_count) for t in listed.topics] == [("events", 1), ("orders", 3)]
    assert sorted(path.name for path in sidecar.data_dir.glob("*-[0-9]*")) == [
        "events-0",
        "orders-0",
        "orders-1",
        "orders-2",
    ]

    batch = build_batch([SimpleRecord(b"k", b"v", 1_000, ())] * 3)
    sidecar.log.Produce(
        log_service_pb2.ProduceRequest(topic="orders", partition=1, record_batches=batch)
    )
    described = sidecar.admin.DescribeTopics(
        admin_service_pb2.DescribeTopicsRequest(names=["orders", "missing"])
    )
    orders, missing = described.topics
    assert [(p.partition, p.leader_id, p.high_watermark) for p in orders.partitions] == [
        (0, 0, 0),
        (1, 0, 3),
        (2, 0, 0),
    ]
    assert orders.partitions[1].size_bytes == len(batch)
    assert missing.error.reason == "UNKNOWN_TOPIC_OR_PARTITION"

    validated = sidecar.admin.CreateTopics(
        admin_service_pb2.CreateTopicsRequest(topics=[new_topic(name="dry")], validate_only=True)
    )
    assert not validated.results[0].HasField("error")
    assert "dry" not in [
        t.name for t in sidecar.admin.ListTopics(admin_service_pb2.ListTopicsRequest()).topics
    ]

    deleted = sidecar.admin.DeleteTopics(
        admin_service_pb2.DeleteTopicsRequest(names=["orders", "nope"])
    )
    assert [(r.name, r.error.reason) for r in deleted.results] == [
        ("orders", ""),
        ("nope", "UNKNOWN_TOPIC_OR_PARTITION"),
    ]
    assert sorted(path.name for path in sidecar.data_dir.glob("*-[0-9]*")) == ["events-0"]
    with pytest.raises(grpc.RpcError) as caught:
        sidecar.log.Fetch(log_service_pb2.FetchRequest(topic="orders", offset=0))
    assert reason_of(caught.value) == "UNKNOWN_TOPIC_OR_PARTITION"
    assert _create(sidecar, new_topic(name="orders")) == {"orders": ""}  # the name is free again


def test_a_name_colliding_on_dot_and_underscore_is_refused_as_kafka_does(
    sidecar: Sidecar,
) -> None:
    """``a.b`` and ``a_b`` have one metric name: Kafka refuses the second with
    INVALID_TOPIC_EXCEPTION, and so does a validate-only request for it."""
    new_topic = admin_service_pb2.NewTopic
    assert _create(sidecar, new_topic(name="billing.events")) == {"billing.events": ""}
    for validate_only in (True, False):
        request = admin_service_pb2.CreateTopicsRequest(
            topics=[new_topic(name="billing_events")], validate_only=validate_only
        )
        (result,) = sidecar.admin.CreateTopics(request).results
        assert result.error.reason == "INVALID_TOPIC_EXCEPTION"
        assert "collides with existing topic 'billing.events'" in result.error.message
    listed = sidecar.admin.ListTopics(admin_service_pb2.ListTopicsRequest())
    assert [topic.name for topic in listed.topics] == ["billing.events"]
    assert not list(sidecar.data_dir.glob("billing_events-*"))


def test_a_new_partitions_index_files_are_preallocated_sparse(sidecar: Sidecar) -> None:
    """Kafka's preallocated indexes are sparse files; real blocks for them made each new
    partition cost 20 MiB of disk before its first record."""
    sidecar.create_topic("sparse", partitions=3)
    preallocated = LogConfig().segment_index_bytes  # log.index.size.max.bytes, 10 MiB
    for p in range(3):
        for suffix, entry_size in ((".index", 8), (".timeindex", 12)):
            stat = (sidecar.data_dir / f"sparse-{p}" / f"{0:020d}{suffix}").stat()
            assert stat.st_size == preallocated // entry_size * entry_size
            assert stat.st_blocks * 512 <= 4096


def test_a_create_that_fills_the_disk_is_rolled_back_and_never_listed(
    sidecar_factory: SidecarFactory, tmp_path: Path
) -> None:
    with small_disk_at(tmp_path / "disk", "1m") as disk:
        sidecar = sidecar_factory(disk / "data")
        huge = admin_service_pb2.NewTopic(name="huge", num_partitions=2_000)
        response = sidecar.admin.CreateTopics(admin_service_pb2.CreateTopicsRequest(topics=[huge]))
        (result,) = response.results
        assert result.error.reason == "KAFKA_STORAGE_ERROR", result.error
        failed_at = re.search(r"huge-(\d+)", result.error.message)
        assert failed_at and int(failed_at[1]) > 0, "partitions were created before it failed"
        listed = sidecar.admin.ListTopics(admin_service_pb2.ListTopicsRequest())
        assert [t.name for t in listed.topics] == []
        assert list((disk / "data").glob("huge-*")) == []
        with pytest.raises(grpc.RpcError) as caught:
            sidecar.log.Fetch(log_service_pb2.FetchRequest(topic="huge", offset=0))
        assert reason_of(caught.value) == "UNKNOWN_TOPIC_OR_PARTITION"

        # The space and the name are free again, and a restart finds nothing of the failure.
        huge.num_partitions = 4
        assert _create(sidecar, huge) == {"huge": ""}
        assert sidecar.stop() == 0
        again = sidecar_factory(disk / "data")
        listed = again.admin.ListTopics(admin_service_pb2.ListTopicsRequest())
        assert [(t.name, t.partition_count) for t in listed.topics] == [("huge", 4)]
        assert sorted(path.name for path in (disk / "data").glob("huge-*")) == [
            f"huge-{p}" for p in range(4)
        ]
        assert again.stop() == 0


def test_a_growth_that_fills_the_disk_is_undone_and_the_old_partitions_kept(
    sidecar_factory: SidecarFactory, tmp_path: Path
) -> None:
    with small_disk_at(tmp_path / "disk", "1m") as disk:
        sidecar = sidecar_factory(disk / "data")
        sidecar.create_topic("grow", partitions=2)
        batch = build_batch([SimpleRecord(b"k", b"v", 1_000, ())] * 3)
        sidecar.log.Produce(
            log_service_pb2.ProduceRequest(topic="grow", partition=1, record_batches=batch)
        )
        with pytest.raises(grpc.RpcError) as caught:
            sidecar.admin.CreatePartitions(
                admin_service_pb2.CreatePartitionsRequest(topic="grow", total_count=2_000)
            )
        assert reason_of(caught.value) == "KAFKA_STORAGE_ERROR"
        failed_at = re.search(r"grow-(\d+)", caught.value.details() or "")
        assert failed_at and int(failed_at[1]) > 2, "partitions were added before it failed"
        listed = sidecar.admin.ListTopics(admin_service_pb2.ListTopicsRequest())
        assert [(t.name, t.partition_count) for t in listed.topics] == [("grow", 2)]
        assert sorted(path.name for path in (disk / "data").glob("grow-*")) == ["grow-0", "grow-1"]
        fetched = sidecar.log.Fetch(
            log_service_pb2.FetchRequest(topic="grow", partition=1, offset=0)
        )
        assert fetched.high_watermark == 3

        assert sidecar.stop() == 0
        again = sidecar_factory(disk / "data")
        listed = again.admin.ListTopics(admin_service_pb2.ListTopicsRequest())
        assert [(t.name, t.partition_count) for t in listed.topics] == [("grow", 2)]
        assert again.stop() == 0


def test_a_topic_of_the_longest_legal_name_is_deleted_and_stays_deleted(
    sidecar: Sidecar, sidecar_factory: SidecarFactory
) -> None:
    """The deleted directory's name (topic, partition, id, ``-delete``) is cut to fit
    a file name, as Kafka cuts it."""
    longest = "t" * MAX_TOPIC_NAME_LENGTH
    sidecar.create_topic(longest, partitions=2)
    batch = build_batch([SimpleRecord(b"k", b"v", 1_000, ())] * 3)
    sidecar.log.Produce(log_service_pb2.ProduceRequest(topic=longest, record_batches=batch))

    deleted = sidecar.admin.DeleteTopics(admin_service_pb2.DeleteTopicsRequest(names=[longest]))
    assert [(r.name, r.error.reason, r.error.message) for r in deleted.results] == [
        (longest, "", "")
    ]
    assert list(sidecar.data_dir.glob("ttt*")) == []
    assert sidecar.stop() == 0

    again = sidecar_factory(sidecar.data_dir)
    assert again.admin.ListTopics(admin_service_pb2.ListTopicsRequest()).topics == []
    assert list(again.data_dir.glob("ttt*")) == []
    with pytest.raises(grpc.RpcError) as caught:
        again.log.Fetch(log_service_pb2.FetchRequest(topic=longest, offset=0))
    assert reason_of(caught.value) == "UNKNOWN_TOPIC_OR_PARTITION"
    assert " ERROR " not in again.output


def test_configs_are_validated_applied_and_survive_a_restart(
    sidecar: Sidecar, sidecar_factory: SidecarFactory
) -> None:
    sidecar.create_topic("conf", segment_bytes="1048576")
    configs = _configs(sidecar, "conf")
    assert configs["segment.bytes"] == ("1048576", admin_service_pb2.CONFIG_SOURCE_TOPIC)
    assert configs["retention.ms"] == ("604800000", admin_service_pb2.CONFIG_SOURCE_DEFAULT)

    sidecar.admin.AlterConfigs(
        admin_service_pb2.AlterConfigsRequest(
            topic="conf",
            set_configs={"retention.ms": "3600000", "max.message.bytes": "2000"},
            delete_configs=["segment.bytes"],
        )
    )
    for bad, reason in [
        ({"retention.ms": "soon"}, "INVALID_CONFIG"),
        ({"no.such.config": "1"}, "INVALID_CONFIG"),
    ]:
        with pytest.raises(grpc.RpcError) as caught:
            sidecar.admin.AlterConfigs(
                admin_service_pb2.AlterConfigsRequest(topic="conf", set_configs=bad)
            )
        assert caught.value.code() == grpc.StatusCode.INVALID_ARGUMENT
        assert reason_of(caught.value) == reason
    with pytest.raises(grpc.RpcError) as unknown:
        sidecar.admin.DescribeConfigs(admin_service_pb2.DescribeConfigsRequest(topic="other"))
    assert reason_of(unknown.value) == "UNKNOWN_TOPIC_OR_PARTITION"

    # The running log follows the new max.message.bytes at once.
    too_big = build_batch([SimpleRecord(b"k", b"x" * 3000, 1_000, ())])
    with pytest.raises(grpc.RpcError) as rejected:
        sidecar.log.Produce(log_service_pb2.ProduceRequest(topic="conf", record_batches=too_big))
    assert reason_of(rejected.value) == "MESSAGE_TOO_LARGE"

    expected = _configs(sidecar, "conf")
    assert expected["retention.ms"] == ("3600000", admin_service_pb2.CONFIG_SOURCE_TOPIC)
    assert expected["segment.bytes"][1] == admin_service_pb2.CONFIG_SOURCE_DEFAULT
    stored = json.loads((sidecar.data_dir / TOPICS_FILE).read_text())
    assert stored["topics"]["conf"]["configs"] == {
        "max.message.bytes": "2000",
        "retention.ms": "3600000",
    }
    assert sidecar.stop() == 0

    again = sidecar_factory(sidecar.data_dir)
    assert _configs(again, "conf") == expected
    with pytest.raises(grpc.RpcError) as still:
        again.log.Produce(log_service_pb2.ProduceRequest(topic="conf", record_batches=too_big))
    assert reason_of(still.value) == "MESSAGE_TOO_LARGE"


def test_create_partitions_grows_a_topic(sidecar: Sidecar) -> None:
    sidecar.create_topic("grow", partitions=2)
    for total in (2, 1):
        with pytest.raises(grpc.RpcError) as caught:
            sidecar.admin.CreatePartitions(
                admin_service_pb2.CreatePartitionsRequest(topic="grow", total_count=total)
            )
        assert reason_of(caught.value) == "INVALID_PARTITIONS"
    sidecar.admin.CreatePartitions(
        admin_service_pb2.CreatePartitionsRequest(topic="grow", total_count=4)
    )
    assert (sidecar.data_dir / "grow-3").is_dir()
    fetched = sidecar.log.Fetch(log_service_pb2.FetchRequest(topic="grow", partition=3, offset=0))
    assert fetched.high_watermark == 0


def test_partitions_on_disk_without_a_topic_entry_are_adopted(
    tmp_path: Path, sidecar_factory: SidecarFactory
) -> None:
    first = sidecar_factory(tmp_path / "data")
    first.create_topic("kept", partitions=2)
    assert first.stop() == 0
    (tmp_path / "data" / TOPICS_FILE).unlink()
    again = sidecar_factory(tmp_path / "data")
    listed = again.admin.ListTopics(admin_service_pb2.ListTopicsRequest())
    assert [(t.name, t.partition_count) for t in listed.topics] == [("kept", 2)]


def test_metadata_names_this_broker_as_the_owner_of_everything(sidecar: Sidecar) -> None:
    sidecar.create_topic("meta", partitions=2)
    metadata = sidecar.admin.Metadata(admin_service_pb2.MetadataRequest())
    assert metadata.node_id == 0 and metadata.cluster_id == "tierlog"
    assert [(b.node_id, b.address) for b in metadata.brokers] == [(0, sidecar.address)]
    (topic,) = metadata.topics
    assert [(p.partition, p.leader_id, p.leader_address) for p in topic.partitions] == [
        (0, 0, sidecar.address),
        (1, 0, sidecar.address),
    ]
    missing = sidecar.admin.Metadata(admin_service_pb2.MetadataRequest(topics=["nope"]))
    assert missing.topics[0].error.reason == "UNKNOWN_TOPIC_OR_PARTITION"


def test_the_owner_is_leader_replicas_and_isr_in_metadata_and_describe(sidecar: Sidecar) -> None:
    sidecar.create_topic("replicated", partitions=2)
    metadata = sidecar.admin.Metadata(admin_service_pb2.MetadataRequest(topics=["replicated"]))
    described = sidecar.admin.DescribeTopics(
        admin_service_pb2.DescribeTopicsRequest(names=["replicated"])
    )
    for partitions in (metadata.topics[0].partitions, described.topics[0].partitions):
        assert [(p.leader_epoch, list(p.replicas), list(p.isr)) for p in partitions] == [
            (0, [0], [0]),
            (0, [0], [0]),
        ]


def test_replication_factors_this_broker_cannot_hold_are_refused_by_name(
    sidecar: Sidecar,
) -> None:
    new_topic = admin_service_pb2.NewTopic
    results = _create(
        sidecar,
        new_topic(name="default", replication_factor=0),
        new_topic(name="kafkas-default", replication_factor=-1),
        new_topic(name="one", replication_factor=1),
        new_topic(name="three", replication_factor=3),
        new_topic(name="negative", replication_factor=-2),
    )
    assert results == {
        "default": "",
        "kafkas-default": "",
        "one": "",
        "three": "INVALID_REPLICATION_FACTOR",
        "negative": "INVALID_REPLICATION_FACTOR",
    }
    dry = sidecar.admin.CreateTopics(
        admin_service_pb2.CreateTopicsRequest(
            topics=[new_topic(name="dry", replication_factor=2)], validate_only=True
        )
    )
    refused = dry.results[0].error
    assert refused.reason == "INVALID_REPLICATION_FACTOR"
    assert "tierlog.replication.state.dir" in refused.message
    listed = sidecar.admin.ListTopics(admin_service_pb2.ListTopicsRequest())
    assert [t.name for t in listed.topics] == ["default", "kafkas-default", "one"]
    assert not (sidecar.data_dir / "three-0").exists()


def test_broker_replication_defaults_are_topic_defaults_shown_and_overridden(
    tmp_path: Path, sidecar_factory: SidecarFactory
) -> None:
    broker = sidecar_factory(
        tmp_path / "data",
        "min.insync.replicas=2",
        "unclean.leader.election.enable=true",
        "default.replication.factor=3",
    )
    new_topic = admin_service_pb2.NewTopic
    refused = broker.admin.CreateTopics(
        admin_service_pb2.CreateTopicsRequest(topics=[new_topic(name="orders")])
    ).results[0]
    assert refused.error.reason == "INVALID_REPLICATION_FACTOR"
    assert "replication factor 3 (default.replication.factor)" in refused.error.message
    assert _create(broker, new_topic(name="orders", replication_factor=1)) == {"orders": ""}
    default = admin_service_pb2.CONFIG_SOURCE_DEFAULT
    configs = _configs(broker, "orders")
    assert configs["min.insync.replicas"] == ("2", default)
    assert configs["unclean.leader.election.enable"] == ("true", default)

    broker.admin.AlterConfigs(
        admin_service_pb2.AlterConfigsRequest(
            topic="orders",
            set_configs={"min.insync.replicas": "3", "unclean.leader.election.enable": "false"},
        )
    )
    topic = admin_service_pb2.CONFIG_SOURCE_TOPIC
    configs = _configs(broker, "orders")
    assert configs["min.insync.replicas"] == ("3", topic)
    assert configs["unclean.leader.election.enable"] == ("false", topic)
    with pytest.raises(grpc.RpcError) as caught:
        broker.admin.AlterConfigs(
            admin_service_pb2.AlterConfigsRequest(
                topic="orders", set_configs={"min.insync.replicas": "0"}
            )
        )
    assert reason_of(caught.value) == "INVALID_CONFIG"
    broker.admin.AlterConfigs(
        admin_service_pb2.AlterConfigsRequest(
            topic="orders", delete_configs=["min.insync.replicas"]
        )
    )
    assert _configs(broker, "orders")["min.insync.replicas"] == ("2", default)


def test_health_and_reflection(sidecar: Sidecar) -> None:
    health: Any = health_pb2_grpc.HealthStub(sidecar.channel)  # typeshed: no methods
    for service in ("", "tierlog.v1.LogService", "tierlog.v1.AdminService"):
        answer = health.Check(health_pb2.HealthCheckRequest(service=service))
        assert answer.status == health_pb2.HealthCheckResponse.SERVING
    reflection: Any = reflection_pb2_grpc.ServerReflectionStub(sidecar.channel)
    responses = reflection.ServerReflectionInfo(
        iter([reflection_pb2.ServerReflectionRequest(list_services="")])
    )
    names = {service.name for service in next(responses).list_services_response.service}
    assert {"tierlog.v1.LogService", "tierlog.v1.AdminService", "grpc.health.v1.Health"} <= names


def test_prepare_restart_flushes_and_checkpoints_then_says_it_is_safe(
    sidecar_factory: SidecarFactory, tmp_path: Path
) -> None:
    # no flush policy: appends wait in the page cache until something flushes them
    sidecar = sidecar_factory(tmp_path / "data", "log.flush.interval.ms=9223372036854775807")
    sidecar.create_topic("orders", partitions=2)
    for partition in (0, 1):
        sidecar.log.Produce(
            log_service_pb2.ProduceRequest(
                topic="orders",
                partition=partition,
                record_batches=build_batch([SimpleRecord(b"k", b"v", 1_000, ())] * 3),
            )
        )
    checkpoint = tmp_path / "data" / RECOVERY_POINT_CHECKPOINT
    before = read_offset_checkpoint(checkpoint) if checkpoint.exists() else {}
    assert before.get(TopicPartition("orders", 0), 0) == 0
    answer = sidecar.admin.PrepareRestart(admin_service_pb2.PrepareRestartRequest())
    assert (answer.node_id, answer.unflushed_messages, answer.safe) == (0, 0, True)
    assert (answer.tier_enabled, answer.segments_awaiting_upload) == (False, 0)
    after = read_offset_checkpoint(checkpoint)
    assert after[TopicPartition("orders", 0)] == 3
    assert after[TopicPartition("orders", 1)] == 3


@pytest.mark.parametrize(
    ("key", "value"),
    [
        ("segment.bytes", "1_000_000"),
        ("retention.ms", "\u0661\u0662\u0663"),  # Arabic-Indic digits
        ("min.cleanable.dirty.ratio", "nan"),
    ],
)
def test_numbers_kafka_would_not_parse_are_invalid_config_on_both_paths(
    sidecar: Sidecar, key: str, value: str
) -> None:
    new_topic = admin_service_pb2.NewTopic(name="strict", configs={key: value})
    assert _create(sidecar, new_topic) == {"strict": "INVALID_CONFIG"}
    sidecar.create_topic("strict")
    before = _configs(sidecar, "strict")
    with pytest.raises(grpc.RpcError) as caught:
        sidecar.admin.AlterConfigs(
            admin_service_pb2.AlterConfigsRequest(topic="strict", set_configs={key: value})
        )
    assert reason_of(caught.value) == "INVALID_CONFIG"
    assert key in (caught.value.details() or "")
    assert _configs(sidecar, "strict") == before


class _Reader(threading.Thread):
    """Calls ``read`` until it fails, keeping the failure's Kafka error name."""

    def __init__(self, read: Callable[[], object]):
        super().__init__()
        self.read = read
        self.began = threading.Event()  # a first read came back
        self.reason = ""

    def run(self) -> None:
        try:
            while True:
                self.read()
                self.began.set()
        except grpc.RpcError as error:
            self.reason = reason_of(error)
        finally:
            self.began.set()


def test_readers_of_a_deleted_topic_get_unknown_topic_or_partition(sidecar: Sidecar) -> None:
    """Fetches and Subscribe streams reading while their topic is deleted: each ends with
    UNKNOWN_TOPIC_OR_PARTITION, never an error from the log's closed files (which was
    UNKNOWN_SERVER_ERROR, or CORRUPT_MESSAGE when a reused descriptor was read)."""
    log = sidecar.log
    batch = build_batch([SimpleRecord(b"k", b"v" * 200, 1_000, ())] * 10)
    subscribe = log_service_pb2.SubscribeRequest
    offsets = itertools.cycle(range(400))

    def fetch() -> object:
        request = log_service_pb2.FetchRequest(topic="doomed", offset=next(offsets), max_bytes=1)
        return log.Fetch(request)

    deadline = time.monotonic() + 60
    rounds = 0
    while rounds < 10 and time.monotonic() < deadline:
        rounds += 1
        sidecar.create_topic("doomed", segment_bytes="8192")
        for _ in range(40):  # some segments: reads go through index lookups and files
            log.Produce(log_service_pb2.ProduceRequest(topic="doomed", record_batches=batch))
        # At the end, waiting for records; reading a batch every 5 ms; fetching.
        caught_up = log.Subscribe(subscribe(topic="doomed", offset=-1), timeout=20)
        reading = log.Subscribe(
            subscribe(topic="doomed", offset=0, max_bytes=1, max_wait_ms=5), timeout=20
        )
        readers = [
            _Reader(partial(next, caught_up)),
            _Reader(partial(next, reading)),
            _Reader(fetch),
        ]
        for reader in readers:
            reader.start()
        for reader in readers[1:]:
            assert reader.began.wait(10)
        response = sidecar.admin.DeleteTopics(
            admin_service_pb2.DeleteTopicsRequest(names=["doomed"])
        )
        assert not response.results[0].HasField("error")
        for reader in readers:
            reader.join(timeout=30)
        reasons = [reader.reason for reader in readers]
        assert reasons == ["UNKNOWN_TOPIC_OR_PARTITION"] * 3, f"round {rounds}: {reasons}"
    assert rounds >= 3, "too few rounds to say anything"
    sidecar.assert_alive()
