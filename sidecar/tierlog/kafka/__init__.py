"""Kafka's wire protocol: the broker's second front door, beside the gRPC services.

Any Kafka client (the Java client, kafka-python, librdkafka, franz-go...) reaches the same
partitions as tierlog's own client: the listener (``listener``) frames requests over TCP,
``codec`` reads and writes them with kio (generated from Kafka's message schemas), and
one module per API turns each into calls on the broker core: produce through
``broker.produce.Appender``, fetch and ListOffsets through ``broker.fetch.FetchReader``,
metadata from ``broker.partitions``. Record batches pass through as bytes both ways.
``versions`` lists the API keys and versions served (docs/KAFKA-PROTOCOL.md).

This package sits below the server's process wiring (``tierlog.sidecar``, which starts
it) and above replication and the coordinators: it never reaches into the gRPC
servicers.
"""
