"""Bad bytes on the Kafka listener: each connection is closed with one log line saying
why, the broker keeps serving everyone else, and ApiVersions at a version it does not
know is answered as Kafka answers it (v0's shape, UNSUPPORTED_VERSION, the ranges)."""

from __future__ import annotations

import socket
import struct
import subprocess
import time
from pathlib import Path

import pytest
from kafka import KafkaProducer

from tests.kafka.conftest import KafkaSidecar, start_kafka_sidecar
from tests.support.sidecars import Sidecars, console_script

API_VERSIONS = 18
UNSUPPORTED_VERSION = 35
SOCKET_REQUEST_MAX_BYTES = 100 * 1024 * 1024  # Kafka's default, and the sidecar's


def _request(api_key: int, api_version: int, correlation_id: int, body: bytes = b"") -> bytes:
    """A request with header v1 (client id "t")."""
    header = struct.pack(">hhih", api_key, api_version, correlation_id, 1) + b"t"
    return struct.pack(">i", len(header) + len(body)) + header + body


def _closed_by_broker(sidecar: KafkaSidecar, data: bytes, end_write: bool = False) -> bytes:
    """Send ``data`` and read until the broker closes the connection: what it sent back."""
    with socket.create_connection(("127.0.0.1", sidecar.kafka_port), timeout=10) as conn:
        conn.sendall(data)
        if end_write:
            conn.shutdown(socket.SHUT_WR)
        received = b""
        while chunk := conn.recv(65536):
            received += chunk
        return received


def _wait_for_log(sidecar: KafkaSidecar, line: str, timeout_s: float = 10) -> None:
    deadline = time.monotonic() + timeout_s
    while line not in sidecar.output:
        assert time.monotonic() < deadline, f"no {line!r} in the log:\n{sidecar.output}"
        time.sleep(0.05)


def _still_serves(sidecar: KafkaSidecar) -> None:
    producer = KafkaProducer(bootstrap_servers=sidecar.kafka_address, acks="all")
    try:
        assert producer.send("after", value=b"ok").get(timeout=10).topic == "after"
    finally:
        producer.close()


@pytest.mark.parametrize(
    ("data", "end_write", "logged"),
    [
        pytest.param(
            _request(API_VERSIONS, 3, 1, b"\x02x\x021\x00")[:-3],
            True,
            "a request cut short",
            id="truncated-frame",
        ),
        pytest.param(
            struct.pack(">i", SOCKET_REQUEST_MAX_BYTES + 1) + b"\0" * 64,
            False,
            f"a request of {SOCKET_REQUEST_MAX_BYTES + 1} bytes is over socket.request.max.bytes",
            id="oversize-length",
        ),
        pytest.param(_request(9999, 0, 1), False, "api key 9999 is not served", id="unknown-key"),
        pytest.param(
            _request(0, 2, 1), False, "api key 0 version 2 is not served (3-11)", id="old-produce"
        ),
        pytest.param(
            struct.pack(">i", 16) + bytes(range(200, 216)),
            False,
            "is not served",
            id="garbage-bytes",
        ),
        pytest.param(
            _request(3, 12, 1, b"\xff\xff\xff\xff\xff"),
            False,
            "api key 3 v12 does not parse",
            id="unparseable-body",
        ),
    ],
)
def test_bad_input_is_closed_and_logged_and_others_are_served(
    kafka_sidecar: KafkaSidecar, data: bytes, end_write: bool, logged: str
) -> None:
    kafka_sidecar.create_topic("after")

    assert _closed_by_broker(kafka_sidecar, data, end_write) == b""

    _wait_for_log(kafka_sidecar, logged)
    _still_serves(kafka_sidecar)
    kafka_sidecar.assert_alive()


def test_api_versions_at_an_unknown_version_answers_v0_with_the_ranges(
    kafka_sidecar: KafkaSidecar,
) -> None:
    with socket.create_connection(("127.0.0.1", kafka_sidecar.kafka_port), timeout=10) as conn:
        conn.sendall(_request(API_VERSIONS, 99, 7))
        size = struct.unpack(">i", conn.recv(4, socket.MSG_WAITALL))[0]
        answer = conn.recv(size, socket.MSG_WAITALL)
    correlation_id, error_code, count = struct.unpack_from(">ihi", answer)
    ranges = [struct.unpack_from(">hhh", answer, 10 + 6 * i) for i in range(count)]
    assert (correlation_id, error_code) == (7, UNSUPPORTED_VERSION)
    assert len(answer) == 10 + 6 * count  # v0's shape: nothing after the ranges
    assert (API_VERSIONS, 0, 4) in ranges


def test_a_kafka_port_already_taken_stops_the_start_naming_it(tmp_path: Path) -> None:
    with socket.create_server(("127.0.0.1", 0)) as taken:
        port = taken.getsockname()[1]
        done = subprocess.run(
            [
                console_script("tierlog-sidecar"),
                "--data-dir", str(tmp_path / "data"),
                "--listen", "127.0.0.1:0",
                "--kafka-listen", f"127.0.0.1:{port}",
            ],
            capture_output=True,
            encoding="utf-8",
            timeout=60,
            check=False,
        )  # fmt: skip

    assert done.returncode == 2, done.stderr
    assert f"INVALID_CONFIG: cannot serve Kafka on 127.0.0.1:{port}" in done.stderr
    assert "Traceback" not in done.stderr


def test_idle_connections_are_closed_after_connections_max_idle_ms(
    sidecars: Sidecars, tmp_path: Path
) -> None:
    idle_ms = 1_000
    sidecar = start_kafka_sidecar(sidecars, tmp_path / "data", f"connections.max.idle.ms={idle_ms}")
    sidecar.create_topic("after")
    idle = [
        socket.create_connection(("127.0.0.1", sidecar.kafka_port), timeout=idle_ms / 1000 + 30)
        for _ in range(200)
    ]
    try:
        _still_serves(sidecar)  # 200 silent clients take nothing from a working one
        assert all(conn.recv(1) == b"" for conn in idle)  # each closed by the broker
    finally:
        for conn in idle:
            conn.close()
    _wait_for_log(sidecar, f"idle for {idle_ms} ms (connections.max.idle.ms)")
    _still_serves(sidecar)
