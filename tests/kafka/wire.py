"""A test's own Kafka connection: requests built from kio's dataclasses (``codec.build``
names their fields once for every version), framed and read back by hand, so a test
sees exactly what the listener answered, with no client library deciding for it."""

from __future__ import annotations

import io
import socket
import ssl
import struct
from typing import Any

from kio.serial import entity_reader, entity_writer

from tierlog.kafka.codec import build, request_type, response_type
from tierlog.kafka.versions import FETCH


class KafkaWire:
    def __init__(self, port: int, timeout_s: float = 60, tls: ssl.SSLContext | None = None):
        """A connection to the listener on ``port``, over TLS when given its context."""
        sock = socket.create_connection(("127.0.0.1", port), timeout=timeout_s)
        self.sock = sock if tls is None else tls.wrap_socket(sock, server_hostname="127.0.0.1")
        self._next_correlation_id = 1
        self.bytes_sent = self.bytes_received = 0  # whole frames, size prefixes included

    def close(self) -> None:
        self.sock.close()

    def send(self, api_key: int, version: int, fields: dict[str, Any]) -> int:
        """Send one request; its correlation id."""
        schema = request_type(api_key, version)
        correlation_id = self._next_correlation_id
        self._next_correlation_id += 1
        header_type: Any = schema.__header_schema__
        header = header_type(
            request_api_key=api_key,
            request_api_version=version,
            correlation_id=correlation_id,
            client_id="tests",
        )
        buffer = io.BytesIO()
        entity_writer(header_type)(buffer, header)
        entity_writer(schema)(buffer, build(schema, fields))
        body = buffer.getvalue()
        self.sock.sendall(struct.pack(">i", len(body)) + body)
        self.bytes_sent += 4 + len(body)
        return correlation_id

    def receive(self, api_key: int, version: int) -> tuple[int, Any]:
        """The next response: its correlation id and body."""
        size = struct.unpack(">i", self._exactly(4))[0]
        payload = self._exactly(size)
        schema = response_type(api_key, version)
        header, header_size = entity_reader(schema.__header_schema__)(payload, 0)
        body, _size = entity_reader(schema)(payload, header_size)
        return header.correlation_id, body

    def call(self, api_key: int, version: int, fields: dict[str, Any]) -> Any:
        sent = self.send(api_key, version, fields)
        correlation_id, body = self.receive(api_key, version)
        assert correlation_id == sent
        return body

    def _exactly(self, size: int) -> bytes:
        data = b""
        while len(data) < size and (chunk := self.sock.recv(size - len(data))):
            data += chunk  # a TLS socket has no MSG_WAITALL
        assert len(data) == size, f"the broker closed the connection ({len(data)} of {size})"
        self.bytes_received += size
        return data


def fetch_committed(wire: KafkaWire, topic: str) -> Any:
    """Partition 0 of ``topic`` read from its start with ``read_committed`` (Fetch v12):
    its high watermark, last stable offset, aborted transactions and records."""
    body = wire.call(
        FETCH,
        12,
        {
            "replica_id": -1,
            "max_wait": 0,
            "min_bytes": 0,
            "max_bytes": 1 << 20,
            "isolation_level": 1,
            "session_id": 0,
            "session_epoch": -1,
            "topics": [
                {
                    "topic": topic,
                    "partitions": [
                        {"partition": 0, "fetch_offset": 0, "partition_max_bytes": 1 << 20}
                    ],
                }
            ],
            "forgotten_topics_data": [],
            "rack_id": "",
        },
    )
    ((partition,),) = [topic_answer.partitions for topic_answer in body.responses]
    return partition
