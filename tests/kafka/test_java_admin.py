"""Kafka's own ``kafka-topics`` and ``kafka-configs`` (TopicCommand and ConfigCommand
4.1.1, from the jars the tests fetch) against the Kafka listener; what they change is
read back through tierlog's gRPC AdminClient."""

from __future__ import annotations

from tests.kafka.conftest import KafkaSidecar, java, run_java
from tierlog.client.admin import AdminClient

TOPICS = "org.apache.kafka.tools.TopicCommand"
CONFIGS = "kafka.admin.ConfigCommand"


def test_kafka_topics_and_kafka_configs_create_describe_alter_and_delete(
    kafka_sidecar: KafkaSidecar,
) -> None:
    server = ("--bootstrap-server", kafka_sidecar.kafka_address)
    grpc = AdminClient({"bootstrap.servers": kafka_sidecar.address})
    try:
        run_java(
            TOPICS, *server, "--create", "--topic", "java-made",
            "--partitions", "2", "--replication-factor", "1", "--config", "retention.ms=5000",
        )  # fmt: skip
        assert grpc.list_topics()["java-made"] == 2
        assert grpc.describe_configs("java-made")["retention.ms"].value == "5000"

        run_java(TOPICS, *server, "--alter", "--topic", "java-made", "--partitions", "4")
        described = run_java(TOPICS, *server, "--describe", "--topic", "java-made")
        assert "PartitionCount: 4" in described
        assert "retention.ms=5000" in described

        run_java(
            CONFIGS, *server, "--alter", "--entity-type", "topics", "--entity-name", "java-made",
            "--add-config", "segment.ms=60000,cleanup.policy=[delete,compact]",
            "--delete-config", "retention.ms",
        )  # fmt: skip
        configs = grpc.describe_configs("java-made")
        assert configs["segment.ms"].value == "60000"
        assert configs["cleanup.policy"].value == "delete,compact"
        assert configs["retention.ms"].is_default
        printed = run_java(
            CONFIGS, *server, "--describe", "--entity-type", "topics", "--entity-name", "java-made"
        )
        assert "segment.ms=60000" in printed
        assert "retention.ms" not in printed
        broker = run_java(
            CONFIGS, *server, "--describe", "--entity-type", "brokers", "--entity-name", "0",
            "--all",
        )  # fmt: skip
        assert "log.segment.bytes=1073741824" in broker
        # The cluster-wide dynamic defaults: tierlog has none, as a Kafka broker without any.
        defaults = run_java(
            CONFIGS, *server, "--describe", "--entity-type", "brokers", "--entity-default"
        )
        assert "log.segment.bytes" not in defaults

        refused = java(
            TOPICS, *server, "--create", "--topic", "java-made",
            "--partitions", "1", "--replication-factor", "1",
        )  # fmt: skip
        assert refused.returncode != 0
        assert "TopicExistsException" in refused.stdout + refused.stderr
        refused = java(
            TOPICS, *server, "--create", "--topic", "three-copies",
            "--partitions", "1", "--replication-factor", "3",
        )  # fmt: skip
        assert "InvalidReplicationFactorException" in refused.stdout + refused.stderr
        refused = java(
            CONFIGS, *server, "--alter", "--entity-type", "topics", "--entity-name", "java-made",
            "--add-config", "retention.ms=soon",
        )  # fmt: skip
        assert "InvalidConfigurationException" in refused.stdout + refused.stderr
        assert grpc.describe_configs("java-made")["segment.ms"].value == "60000"

        run_java(TOPICS, *server, "--delete", "--topic", "java-made")
        assert "java-made" not in grpc.list_topics()
        assert "three-copies" not in grpc.list_topics()
    finally:
        grpc.close()
