"""The Kafka listener's admin APIs against kafka-python's KafkaAdminClient, over the same
broker core as tierlog's gRPC AdminService: a topic made through either door is seen,
with its configs, through the other. One sidecar serves the module; each test uses
topics of its own."""

from __future__ import annotations

import contextlib
import uuid
from collections.abc import Iterator
from typing import Any

import pytest
from kafka import KafkaProducer
from kafka import TopicPartition as KafkaTopicPartition
from kafka.admin import (
    AlterConfigOp,
    ConfigResource,
    ConfigResourceType,
    KafkaAdminClient,
    NewPartitions,
    NewTopic,
)
from kafka.errors import (
    CoordinatorLoadInProgressError,
    InvalidConfigurationError,
    InvalidPartitionsError,
    InvalidReplicationAssignmentError,
    InvalidReplicationFactorError,
    InvalidRequestError,
    InvalidTopicError,
    TopicAlreadyExistsError,
    UnknownTopicIdError,
    UnknownTopicOrPartitionError,
)
from kio.schema.errors import ErrorCode

from tests.kafka.conftest import KafkaSidecar, start_kafka_sidecar
from tests.kafka.wire import KafkaWire
from tests.support.sidecars import Sidecars
from tierlog.broker.topic_configs import ConfigSource
from tierlog.client.admin import AdminClient
from tierlog.kafka.versions import (
    ALTER_CONFIGS,
    CREATE_PARTITIONS,
    CREATE_TOPICS,
    DELETE_RECORDS,
    DELETE_TOPICS,
    DESCRIBE_CLUSTER,
    DESCRIBE_CONFIGS,
    DESCRIBE_LOG_DIRS,
    ELECT_LEADERS,
    INCREMENTAL_ALTER_CONFIGS,
)
from tierlog.storage.errors import InvalidConfigError as TierlogInvalidConfigError


@pytest.fixture(scope="module")
def sidecar(tmp_path_factory: pytest.TempPathFactory) -> Iterator[KafkaSidecar]:
    with Sidecars() as started:
        yield start_kafka_sidecar(
            started,
            tmp_path_factory.mktemp("admin") / "data",
            "log.retention.ms=3600000",
            "offsets.topic.num.partitions=1",
        )


@pytest.fixture(scope="module")
def admin(sidecar: KafkaSidecar) -> Iterator[KafkaAdminClient]:
    client = KafkaAdminClient(bootstrap_servers=sidecar.kafka_address, request_timeout_ms=30_000)
    try:
        yield client
    finally:
        client.close()


@pytest.fixture(scope="module")
def grpc_admin(sidecar: KafkaSidecar) -> Iterator[AdminClient]:
    with AdminClient({"bootstrap.servers": sidecar.address}) as client:
        yield client


def _topic_configs(
    admin: KafkaAdminClient, name: str, **kwargs: object
) -> dict[str, dict[str, Any]]:
    described = admin.describe_configs(
        [ConfigResource(ConfigResourceType.TOPIC, name)], config_filter="all", **kwargs
    )
    configs: dict[str, dict[str, Any]] = described["topic"][name]
    return configs


def test_a_topic_created_through_kafka_is_listed_by_grpc_with_its_configs(
    admin: KafkaAdminClient, grpc_admin: AdminClient
) -> None:
    admin.create_topics([NewTopic("k-made", 3, 1, topic_configs={"cleanup.policy": "compact"})])

    assert grpc_admin.list_topics()["k-made"] == 3
    configs = grpc_admin.describe_configs("k-made")
    assert configs["cleanup.policy"].value == "compact"
    assert configs["retention.ms"].value == "3600000"  # the broker's log.retention.ms


def test_a_topic_created_through_grpc_is_described_by_kafka_with_sources_and_synonyms(
    admin: KafkaAdminClient, grpc_admin: AdminClient
) -> None:
    grpc_admin.create_topic("g-made", 2, {"segment.bytes": "1048576"})

    assert admin.describe_topics(["g-made"])[0]["partitions"][1]["partition_index"] == 1
    configs = _topic_configs(admin, "g-made", include_synonyms=True)
    assert configs["segment.bytes"]["value"] == "1048576"
    assert configs["segment.bytes"]["config_source"] == "DYNAMIC_TOPIC_CONFIG"
    assert configs["retention.ms"]["config_source"] == "STATIC_BROKER_CONFIG"
    assert [(s["name"], s["value"]) for s in configs["retention.ms"]["synonyms"]] == [
        ("log.retention.ms", "3600000"),
        ("log.retention.ms", "604800000"),
    ]
    assert configs["max.message.bytes"]["config_source"] == "DEFAULT_CONFIG"


def test_create_topics_answers_its_counts_and_configs_and_validate_only_makes_nothing(
    admin: KafkaAdminClient, grpc_admin: AdminClient
) -> None:
    result = admin.create_topics([NewTopic("checked", 4, 1)], validate_only=True)

    assert [t["error_code"] for t in result["topics"]] == [0]
    assert result["topics"][0]["num_partitions"] == 4
    assert "checked" not in grpc_admin.list_topics()
    admin.create_topics([NewTopic("k-dup", 1, 1)])
    with pytest.raises(TopicAlreadyExistsError):
        admin.create_topics([NewTopic("k-dup", 1, 1)])
    with pytest.raises(InvalidRequestError):  # one name twice in a request
        admin.create_topics([NewTopic("twice", 1, 1), NewTopic("twice", 1, 1)])
    assert "twice" not in grpc_admin.list_topics()


@pytest.mark.parametrize(
    ("topic", "error"),
    [
        (NewTopic("bad/name", 1, 1), InvalidTopicError),
        (NewTopic("a" * 250, 1, 1), InvalidTopicError),
        (NewTopic("zero-partitions", 0, 1), InvalidPartitionsError),
        (NewTopic("negative-partitions", -5, 1), InvalidPartitionsError),
        (NewTopic("three-replicas", 1, 3), InvalidReplicationFactorError),
        (NewTopic("zero-replicas", 1, 0), InvalidReplicationFactorError),
        (
            NewTopic("unknown-config", 1, 1, topic_configs={"no.such": "1"}),
            InvalidConfigurationError,
        ),
        (
            NewTopic("bad-value", 1, 1, topic_configs={"retention.ms": "soon"}),
            InvalidConfigurationError,
        ),
        # A manual placement: each partition is on its owner here (no replication).
        (NewTopic("placed", replica_assignments={0: [0]}), InvalidReplicationAssignmentError),
        (NewTopic("placed-counted", 1, 1, replica_assignments={0: [0]}), InvalidRequestError),
    ],
)
def test_a_topic_that_cannot_be_made_gets_kafkas_error_and_nothing_is_made(
    admin: KafkaAdminClient, grpc_admin: AdminClient, topic: NewTopic, error: type[Exception]
) -> None:
    with pytest.raises(error):
        admin.create_topics([topic])

    assert topic.name not in grpc_admin.list_topics()


def test_partitions_grow_and_deletion_is_seen_by_both_doors(
    admin: KafkaAdminClient, grpc_admin: AdminClient
) -> None:
    grpc_admin.create_topic("grows", 1)

    admin.create_partitions({"grows": NewPartitions(3)})
    with pytest.raises(InvalidPartitionsError):
        admin.create_partitions({"grows": NewPartitions(2)})
    with pytest.raises(UnknownTopicOrPartitionError):
        admin.create_partitions({"never-made": NewPartitions(2)})
    assert grpc_admin.list_topics()["grows"] == 3

    admin.delete_topics(["grows"])
    assert "grows" not in grpc_admin.list_topics()
    with pytest.raises(UnknownTopicOrPartitionError):
        admin.delete_topics(["grows"])

    # By topic id (DeleteTopics v6), the id Metadata reports.
    grpc_admin.create_topic("by-id", 1)
    (described,) = admin.describe_topics(["by-id"])
    admin.delete_topics([uuid.UUID(str(described["topic_id"]))])
    assert "by-id" not in grpc_admin.list_topics()
    with pytest.raises(UnknownTopicIdError):
        admin.delete_topics([uuid.UUID(str(described["topic_id"]))])


def test_alter_configs_replaces_and_incremental_alter_sets_deletes_appends_subtracts(
    admin: KafkaAdminClient, grpc_admin: AdminClient
) -> None:
    grpc_admin.create_topic("tuned", 1, {"segment.ms": "60000"})
    topic = ConfigResourceType.TOPIC

    # The older AlterConfigs (kafka-python sends the other overrides along, as it must:
    # the overrides a request names are all the topic keeps).
    resource = ConfigResource(topic, "tuned", configs={"retention.bytes": "1000"})
    assert _alter(admin, resource, incremental=False) == "OK"
    overrides = {k for k, v in grpc_admin.describe_configs("tuned").items() if not v.is_default}
    assert overrides == {"retention.bytes", "segment.ms"}

    changes = {
        "cleanup.policy": (AlterConfigOp.APPEND, "compact"),
        "retention.bytes": (AlterConfigOp.DELETE, None),
        "flush.ms": (AlterConfigOp.SET, "1000"),
    }
    assert _alter(admin, ConfigResource(topic, "tuned", configs=changes)) == "OK"
    configs = _topic_configs(admin, "tuned")
    assert configs["cleanup.policy"]["value"] == "delete,compact"
    assert configs["retention.bytes"]["config_source"] != "DYNAMIC_TOPIC_CONFIG"
    assert configs["flush.ms"]["value"] == "1000"

    subtract = {"cleanup.policy": (AlterConfigOp.SUBTRACT, "delete")}
    assert _alter(admin, ConfigResource(topic, "tuned", configs=subtract)) == "OK"
    assert grpc_admin.describe_configs("tuned")["cleanup.policy"].value == "compact"


def test_bad_config_changes_are_refused_and_change_nothing(
    admin: KafkaAdminClient, grpc_admin: AdminClient
) -> None:
    grpc_admin.create_topic("guarded", 1, {"retention.ms": "1000"})
    topic = ConfigResourceType.TOPIC

    for configs in (
        {"no.such.config": (AlterConfigOp.SET, "1")},
        {"retention.ms": (AlterConfigOp.SET, "-7")},
        {"retention.ms": (AlterConfigOp.APPEND, "5")},  # not a list
        {"cleanup.policy": (AlterConfigOp.SUBTRACT, "delete")},  # nothing left
    ):
        answer = _alter(admin, ConfigResource(topic, "guarded", configs=configs))
        assert "InvalidConfigurationError" in answer, configs
    unknown = ConfigResource(topic, "guarded", configs={"no.such": "1"})
    assert "InvalidConfigurationError" in _alter(admin, unknown, incremental=False)
    missing = ConfigResource(topic, "missing", configs={"retention.ms": "1"})
    assert "UnknownTopicOrPartitionError" in _alter(admin, missing)
    bad_name = ConfigResource(topic, "bad/name", configs={"retention.ms": "1"})
    assert "InvalidTopicError" in _alter(admin, bad_name)
    # A broker's configs are its properties', read-only here.
    broker = ConfigResource(ConfigResourceType.BROKER, "0", {"log.retention.ms": "1"})
    assert "InvalidConfigurationError" in _alter(admin, broker)

    assert grpc_admin.describe_configs("guarded")["retention.ms"].value == "1000"
    with pytest.raises(TierlogInvalidConfigError):
        grpc_admin.alter_configs("guarded", set_configs={"segment.bytes": "tiny"})


def test_the_internal_topics_are_never_tiered_through_either_door(
    admin: KafkaAdminClient, grpc_admin: AdminClient
) -> None:
    # Finding the group's coordinator makes __consumer_offsets (its offsets may still load).
    with contextlib.suppress(CoordinatorLoadInProgressError):
        admin.list_group_offsets("any-group")
    tiered = {"remote.storage.enable": "true"}
    topic = ConfigResourceType.TOPIC

    with pytest.raises(InvalidConfigurationError, match="__transaction_state"):
        admin.create_topics([NewTopic("__transaction_state", 1, 1, topic_configs=tiered)])
    with pytest.raises(TierlogInvalidConfigError, match="__transaction_state"):
        grpc_admin.create_topic("__transaction_state", 1, tiered)
    incremental = {"remote.storage.enable": (AlterConfigOp.SET, "true")}
    for resource, as_incremental in (
        (ConfigResource(topic, "__consumer_offsets", configs=incremental), True),
        (ConfigResource(topic, "__consumer_offsets", configs=tiered), False),
    ):
        answer = _alter(admin, resource, incremental=as_incremental)
        assert "InvalidConfigurationError" in answer and "__consumer_offsets" in answer
    with pytest.raises(TierlogInvalidConfigError, match="__consumer_offsets"):
        grpc_admin.alter_configs("__consumer_offsets", set_configs=tiered)

    assert "__transaction_state" not in grpc_admin.list_topics()
    configs = grpc_admin.describe_configs("__consumer_offsets")
    assert configs["remote.storage.enable"].value == "false"
    assert configs["cleanup.policy"].value == "compact"  # the legacy alter replaced nothing


def test_tiering_is_turned_off_only_with_consent_to_delete_the_tier_at_both_doors(
    admin: KafkaAdminClient, grpc_admin: AdminClient
) -> None:
    """KIP-950's configs, checked once in the broker core whichever door they come in."""
    tiered = {"remote.storage.enable": "true", "remote.log.copy.disable": "true"}
    admin.create_topics([NewTopic("tier-off", 1, 1, topic_configs=tiered)])
    configs = _topic_configs(admin, "tier-off")
    assert configs["remote.log.copy.disable"]["value"] == "true"
    assert configs["remote.log.delete.on.disable"]["value"] == "false"
    topic = ConfigResourceType.TOPIC

    off = {"remote.storage.enable": (AlterConfigOp.SET, "false")}
    answer = _alter(admin, ConfigResource(topic, "tier-off", configs=off))
    assert "InvalidConfigurationError" in answer and "remote.log.delete.on.disable" in answer
    replaced = ConfigResource(topic, "tier-off", configs={"remote.storage.enable": "false"})
    assert "InvalidConfigurationError" in _alter(admin, replaced, incremental=False)
    with pytest.raises(TierlogInvalidConfigError, match=r"remote\.log\.delete\.on\.disable"):
        grpc_admin.alter_configs("tier-off", delete_configs=["remote.storage.enable"])
    # A read-only tier keeps local data until retention.*: local.retention.* may not differ.
    local = {"local.retention.ms": (AlterConfigOp.SET, "1000")}
    assert "InvalidConfigurationError" in _alter(admin, ConfigResource(topic, "tier-off", local))
    assert grpc_admin.describe_configs("tier-off")["remote.storage.enable"].value == "true"

    with_delete = {**off, "remote.log.delete.on.disable": (AlterConfigOp.SET, "true")}
    assert _alter(admin, ConfigResource(topic, "tier-off", configs=with_delete)) == "OK"
    assert grpc_admin.describe_configs("tier-off")["remote.storage.enable"].value == "false"


def _alter(admin: KafkaAdminClient, resource: ConfigResource, incremental: bool = True) -> str:
    """The broker's answer to one resource's change ('OK', or the error's name and
    message), sent as asked (the client checks no key itself)."""
    answered = admin.alter_configs([resource], incremental=incremental, raise_on_unknown=False)
    (by_name,) = answered.values()
    (outcome,) = by_name.values()
    return str(outcome)


def test_broker_configs_are_described_read_only_with_their_sources(
    admin: KafkaAdminClient,
) -> None:
    described = admin.describe_configs(
        [ConfigResource(ConfigResourceType.BROKER, "0")], config_filter="all"
    )["broker"]["0"]

    assert described["log.retention.ms"]["value"] == "3600000"
    assert described["log.retention.ms"]["config_source"] == "STATIC_BROKER_CONFIG"
    assert described["log.segment.bytes"]["config_source"] == "DEFAULT_CONFIG"
    assert described["log.segment.bytes"]["read_only"] is True


def test_delete_records_moves_the_log_start_and_log_dirs_report_the_partition(
    admin: KafkaAdminClient, sidecar: KafkaSidecar, grpc_admin: AdminClient
) -> None:
    grpc_admin.create_topic("trimmed", 1)
    producer = KafkaProducer(bootstrap_servers=sidecar.kafka_address, acks="all")
    try:
        for i in range(10):
            producer.send("trimmed", f"record {i}".encode(), partition=0)
        producer.flush()
    finally:
        producer.close()
    tp = KafkaTopicPartition("trimmed", 0)

    assert admin.delete_records({tp: 4})[tp]["low_watermark"] == 4
    assert admin.delete_records({tp: -1})[tp]["low_watermark"] == 10
    with pytest.raises(Exception, match="OffsetOutOfRange"):
        admin.delete_records({tp: 11})
    with pytest.raises(UnknownTopicOrPartitionError):
        admin.delete_records({KafkaTopicPartition("trimmed", 5): 1})

    (described,) = admin.describe_log_dirs({"trimmed": [0]})
    (log_dir,) = described["log_dirs"]
    assert log_dir["log_dir"] == str(sidecar.data_dir)
    (topic,) = log_dir["topics"]
    assert topic["name"] == "trimmed"
    (partition,) = topic["partitions"]
    assert partition["partition_index"] == 0
    assert partition["partition_size"] > 0
    assert (partition["offset_lag"], partition["is_future_key"]) == (0, False)


def test_describe_cluster_names_the_broker_and_the_cluster(
    admin: KafkaAdminClient, sidecar: KafkaSidecar
) -> None:
    described = admin.describe_cluster()

    assert described["controller_id"] == 0
    assert [(b["broker_id"], b["host"], b["port"]) for b in described["brokers"]] == [
        (0, "127.0.0.1", sidecar.kafka_port)
    ]
    assert described["cluster_id"]
    assert "describe_configs" in [op.lower() for op in described["authorized_operations"]]
    wire = KafkaWire(sidecar.kafka_port)
    try:  # a broker does not describe the controllers' endpoints, as in Kafka
        asked = {"include_cluster_authorized_operations": False, "endpoint_type": 2}
        controllers = wire.call(DESCRIBE_CLUSTER, 1, asked)
    finally:
        wire.close()
    assert controllers.error_code == ErrorCode.unsupported_endpoint_type


@pytest.mark.parametrize("version", [2, 7])
def test_create_and_delete_topics_at_both_ends_of_their_ranges(
    sidecar: KafkaSidecar, grpc_admin: AdminClient, version: int
) -> None:
    name = f"wire-v{version}"
    wire = KafkaWire(sidecar.kafka_port)
    try:
        topic = {
            "name": name,
            "num_partitions": -1,
            "replication_factor": -1,
            "assignments": (),
            "configs": ({"name": "segment.bytes", "value": "2097152"},),
        }
        (created,) = wire.call(CREATE_TOPICS, version, {"topics": (topic,), "timeout": 1000}).topics
        assert created.error_code == ErrorCode.none
        if version >= 5:  # the counts and every config with its source come back
            assert (created.num_partitions, created.replication_factor) == (1, 1)
            configs = {config.name: config for config in created.configs}
            assert configs["segment.bytes"].value == "2097152"
            assert configs["segment.bytes"].config_source == ConfigSource.DYNAMIC_TOPIC_CONFIG
            assert configs["retention.ms"].config_source == ConfigSource.STATIC_BROKER_CONFIG
        assert grpc_admin.list_topics()[name] == 1

        delete_version = version - 1  # DeleteTopics v1 and v6
        asked: dict[str, Any]
        if delete_version >= 6:
            asked = {"topics": ({"name": name, "topic_id": None},)}
        else:
            asked = {"topic_names": (name,)}
        (deleted,) = wire.call(DELETE_TOPICS, delete_version, {**asked, "timeout": 1000}).responses
        assert deleted.error_code == ErrorCode.none
        assert name not in grpc_admin.list_topics()
    finally:
        wire.close()


@pytest.mark.parametrize("version", [1, 4])
def test_describe_configs_types_documentation_and_bad_resources(
    sidecar: KafkaSidecar, grpc_admin: AdminClient, version: int
) -> None:
    grpc_admin.create_topic(f"described-v{version}", 1)
    wire = KafkaWire(sidecar.kafka_port)
    try:
        named = [
            (2, f"described-v{version}"),
            (2, "no-such-topic"),
            (2, "bad/name"),
            (4, "7"),  # another broker
            (8, "0"),  # a broker's loggers
        ]
        resources = tuple(
            {"resource_type": kind, "resource_name": name, "configuration_keys": None}
            for kind, name in named
        )
        answer = wire.call(
            DESCRIBE_CONFIGS,
            version,
            {"resources": resources, "include_synonyms": True, "include_documentation": True},
        )
    finally:
        wire.close()
    topic = answer.results[0]
    assert topic.error_code == ErrorCode.none
    assert [r.error_code for r in answer.results[1:]] == [
        ErrorCode.unknown_topic_or_partition,
        ErrorCode.invalid_topic_exception,
        ErrorCode.invalid_request,
        ErrorCode.invalid_request,
    ]
    configs = {config.name: config for config in topic.configs}
    assert [s.name for s in configs["retention.ms"].synonyms] == ["log.retention.ms"] * 2
    bound = configs["tierlog.remote.segment.max.upload.interval.ms"]  # tierlog's own, off
    assert bound.value == "-1"
    if version >= 3:  # Kafka's ConfigDef types, and a line of documentation
        assert (configs["segment.bytes"].config_type, configs["cleanup.policy"].config_type) == (
            3,  # INT
            7,  # LIST
        )
        assert configs["retention.ms"].documentation
        assert (bound.config_type, bool(bound.documentation)) == (5, True)  # LONG


def test_the_oldest_versions_served_are_answered_whole(
    sidecar: KafkaSidecar, grpc_admin: AdminClient
) -> None:
    """Each admin API at the lowest version served (its fields differ from the newest
    one's): answered in that version's shape, with the change made."""
    grpc_admin.create_topic("oldest", 1, {"retention.ms": "1000"})
    topic_resource = {"resource_type": 2, "resource_name": "oldest"}
    wire = KafkaWire(sidecar.kafka_port)
    try:
        grown = wire.call(
            CREATE_PARTITIONS,
            0,
            {
                "topics": ({"name": "oldest", "count": 2, "assignments": None},),
                "timeout": 1000,
                "validate_only": False,
            },
        )
        altered = wire.call(
            ALTER_CONFIGS,
            0,
            {
                "resources": (
                    {**topic_resource, "configs": ({"name": "retention.ms", "value": "2000"},)},
                ),
                "validate_only": False,
            },
        )
        appended = wire.call(
            INCREMENTAL_ALTER_CONFIGS,
            0,
            {
                "resources": (
                    {
                        **topic_resource,
                        "configs": (
                            {"name": "cleanup.policy", "config_operation": 2, "value": "compact"},
                        ),
                    },
                ),
                "validate_only": False,
            },
        )
        trimmed = wire.call(
            DELETE_RECORDS,
            0,
            {
                "topics": (
                    {"name": "oldest", "partitions": ({"partition_index": 0, "offset": 0},)},
                ),
                "timeout": 1000,
            },
        )
        log_dirs = wire.call(DESCRIBE_LOG_DIRS, 1, {"topics": None})
        cluster = wire.call(DESCRIBE_CLUSTER, 0, {"include_cluster_authorized_operations": False})
    finally:
        wire.close()

    assert [r.error_code for r in grown.results] == [ErrorCode.none]
    assert [r.error_code for r in altered.responses] == [ErrorCode.none]
    assert [r.error_code for r in appended.responses] == [ErrorCode.none]
    (trimmed_topic,) = trimmed.topics
    assert [(p.error_code, p.low_watermark) for p in trimmed_topic.partitions] == [
        (ErrorCode.none, 0)
    ]
    (log_dir,) = log_dirs.results
    assert "oldest" in {topic.name for topic in log_dir.topics}
    assert cluster.error_code == ErrorCode.none
    assert grpc_admin.list_topics()["oldest"] == 2
    configs = grpc_admin.describe_configs("oldest")
    assert (configs["retention.ms"].value, configs["cleanup.policy"].value) == (
        "2000",
        "delete,compact",
    )


def test_elect_leaders_without_replication_needs_no_election(
    sidecar: KafkaSidecar, grpc_admin: AdminClient
) -> None:
    """Each partition's one replica leads it: at every version, ELECTION_NOT_NEEDED for
    a partition that exists, UNKNOWN_TOPIC_OR_PARTITION for one that does not; asked
    for every partition, none is answered; a type Kafka lacks is INVALID_REQUEST."""
    grpc_admin.create_topic("one-replica", 2)
    asked = [
        {"topic": "one-replica", "partitions": [0, 1, 2]},
        {"topic": "no-such-topic", "partitions": [0]},
        {"topic": "../bad", "partitions": [0]},
    ]
    wire = KafkaWire(sidecar.kafka_port)
    try:
        answers = [
            wire.call(ELECT_LEADERS, version, {"election_type": 0, "topic_partitions": asked})
            for version in (0, 1, 2)
        ]
        everything = wire.call(ELECT_LEADERS, 2, {"election_type": 1, "topic_partitions": None})
        unknown_type = wire.call(
            ELECT_LEADERS, 2, {"election_type": 7, "topic_partitions": asked[:1]}
        )
    finally:
        wire.close()

    not_needed, unknown = ErrorCode.election_not_needed, ErrorCode.unknown_topic_or_partition
    for answer in answers:
        assert _election_codes(answer) == {
            ("one-replica", 0): not_needed,
            ("one-replica", 1): not_needed,
            ("one-replica", 2): unknown,
            ("no-such-topic", 0): unknown,
            ("../bad", 0): unknown,  # no topic can have the name, as Kafka answers
        }
    assert everything.error_code == ErrorCode.none
    assert "one-replica" in {result.topic for result in everything.replica_election_results}
    assert _election_codes(everything) == {}
    assert unknown_type.error_code == ErrorCode.invalid_request
    assert set(_election_codes(unknown_type).values()) == {ErrorCode.invalid_request}


def _election_codes(answer: Any) -> dict[tuple[str, int], ErrorCode]:
    return {
        (result.topic, partition.partition_id): partition.error_code
        for result in answer.replica_election_results
        for partition in result.partition_result
    }
